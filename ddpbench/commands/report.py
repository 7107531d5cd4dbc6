"""`ddpbench report`: the HTML scaling report of a sweep, from its records. No torch."""

from __future__ import annotations

import argparse

from ddpbench.commands.arguments import add_deprecated_option, exit_codes, on_sweep_folder
from ddpbench.commands.export import FORMATS, command_export


def add_report_parser(commands) -> None:
    report = commands.add_parser(
        "report",
        help="write a sweep as one file: the HTML report, or pytest-benchmark",
        description="Write a sweep as one file, from its records: the HTML scaling report with its plots "
        "(default), or pytest-benchmark's JSON. table and explain print in the terminal instead; history report "
        "writes the history store's page.",
    )
    report.add_argument("sweep_dir", metavar="SWEEP_DIR", help="a sweep's folder (results/<sweep-id>)")
    report.add_argument(
        "--format",
        choices=FORMATS,
        default="html",
        help="html: the report with its plots (default); pytest-benchmark: that tool's JSON, for pytest-benchmark "
        "compare",
    )
    report.add_argument(
        "-o",
        "--output",
        default=None,
        metavar="FILE",
        help="the file to write (default reports/<sweep-id>/index.html, or pytest-benchmark.json beside it)",
    )
    report.add_argument(
        "--network",
        dest="profile",
        default=None,
        metavar="FILE|PRESET",
        help="network profile (ddpbench comm's profile.json) or preset for the projection sections "
        "(default: the sweep's comm/profile.json, if any)",
    )
    add_deprecated_option(report, "--profile", dest="profile", instead="--network FILE|PRESET")
    report.add_argument(
        "--sweep-id",
        default=None,
        metavar="ID",
        help="the sweep's id, sub-folders included (nightly/2026-12-01), for a folder whose manifest does not say it "
        "(a TrainJob sweep's): the report goes to reports/ID/ (default: the manifest's id, else the folder's name)",
    )
    exit_codes(report, "0 written")
    report.set_defaults(handler=command_report)


def command_report(args: argparse.Namespace) -> int:
    from ddpbench.report.html import report_words
    from ddpbench.report.where import check_given_id

    if args.sweep_id is not None:
        check_given_id(args.sweep_dir, args.sweep_id)
    if args.format != "html":
        return command_export(args)
    print(
        on_sweep_folder(args.sweep_dir, lambda: report_words(args.sweep_dir, args.output, args.profile, args.sweep_id))
    )
    return 0
