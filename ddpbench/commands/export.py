"""`ddpbench export`: a sweep written in another tool's format. No torch."""

from __future__ import annotations

import argparse

from ddpbench.commands.arguments import on_sweep_folder


def add_export_parser(commands) -> None:
    export = commands.add_parser("export", help="write a sweep in another tool's format")
    export.add_argument("sweep_dir")
    export.add_argument("--format", choices=("pytest-benchmark",), default="pytest-benchmark")
    export.add_argument("-o", "--output", required=True)
    export.set_defaults(handler=command_export)


def command_export(args: argparse.Namespace) -> int:
    from ddpbench.report.export import export

    written = on_sweep_folder(args.sweep_dir, lambda: export(args.sweep_dir, args.output, args.format))
    print(f"exported: {written}")
    return 0
