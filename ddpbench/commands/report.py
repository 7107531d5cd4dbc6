"""`ddpbench report`: the HTML scaling report of a sweep, from its records. No torch."""

from __future__ import annotations

import argparse

from ddpbench.commands.arguments import on_sweep_folder


def add_report_parser(commands) -> None:
    report = commands.add_parser("report", help="write the HTML scaling report of a sweep, from its records")
    report.add_argument("sweep_dir")
    report.add_argument("-o", "--output", default=None, help="HTML file (default reports/<sweep-id>/index.html)")
    report.add_argument(
        "--profile",
        default=None,
        help="network profile or preset for the projection sections "
        "(default: the sweep's comm/profile.json, if any)",
    )
    report.set_defaults(handler=command_report)


def command_report(args: argparse.Namespace) -> int:
    from ddpbench.report.html import build_report

    print(f"report: {on_sweep_folder(args.sweep_dir, lambda: build_report(args.sweep_dir, args.output, args.profile))}")
    return 0
