"""A sweep written in another tool's format: `ddpbench report --format pytest-benchmark`, and
`ddpbench export`, its old name, which still works and says what replaces it. No torch."""

from __future__ import annotations

import argparse
import os

from ddpbench.commands.arguments import deprecated_command, exit_codes, on_sweep_folder
from ddpbench.config.errors import SpecError

FORMATS = ("html", "pytest-benchmark")
"""What `report --format` writes: the HTML report (default) or pytest-benchmark's JSON."""


def add_export_parser(commands) -> None:
    """`export`, the old name of `report --format pytest-benchmark`: not listed."""
    export = commands.add_parser(
        "export",
        description="Deprecated: use ddpbench report SWEEP_DIR --format pytest-benchmark -o FILE, which does the same.",
    )
    export.add_argument("sweep_dir", metavar="SWEEP_DIR", help="a sweep's folder (results/<sweep-id>)")
    export.add_argument(
        "--format", choices=FORMATS[1:], default="pytest-benchmark", help="pytest-benchmark's JSON (the only one)"
    )
    export.add_argument("-o", "--output", required=True, metavar="FILE", help="the file to write")
    exit_codes(export, "0 written")
    export.set_defaults(
        handler=deprecated_command(
            command_export, "export", "ddpbench report SWEEP_DIR --format pytest-benchmark -o FILE"
        )
    )


def command_export(args: argparse.Namespace) -> int:
    from ddpbench.report.export import export
    from ddpbench.report.where import claim, default_report_path

    if getattr(args, "profile", None):
        raise SpecError("--network is for the HTML report's projection sections; --format pytest-benchmark has none")
    # Beside the sweep's HTML report, reports/<sweep-id>/, or in the sweep's own folder where that
    # holds another sweep's report.
    given = getattr(args, "sweep_id", None)
    output, why = (
        (args.output, "") if args.output else default_report_path(args.sweep_dir, "pytest-benchmark.json", given)
    )
    written = on_sweep_folder(args.sweep_dir, lambda: export(args.sweep_dir, output, args.format))
    if not args.output and not why:
        claim(os.path.dirname(written), args.sweep_dir)
    print(f"exported: {written}" + (f" ({why}, which is left as it is)" if why else ""))
    return 0
