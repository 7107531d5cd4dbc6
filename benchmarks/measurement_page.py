"""What every benchmark that writes a page of docs/measurements/ shares: the --page and --no-page
options, the command line the page names, the time it states, and writing the page."""

from __future__ import annotations

import argparse
import os
import shlex
import sys
import time

from ddpbench.host.facts import project_git  # the callers put the repository on sys.path first


def add_page_options(parser: argparse.ArgumentParser, page: str) -> None:
    shown = os.path.relpath(page, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    parser.add_argument("--page", default=page, help=f"where to write the page (default {shown})")
    parser.add_argument("--no-page", action="store_true", help="only print the page")


def command_line(script: str, argv: list[str] | None) -> str:
    """The command as the page shows it: `python benchmarks/<script> <arguments>`."""
    return shlex.join(["python", f"benchmarks/{script}", *(sys.argv[1:] if argv is None else argv)])


def utc_now() -> str:
    return time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())


def analysis_facts(command: str, analyse_only: bool) -> dict:
    """The analysis's commit (ddpbench.host.facts.project_git), command and time, for a page whose
    runs may have been made by an earlier commit (`--analyse-only`)."""
    return {**project_git(), "analyse_only": analyse_only, "command": command, "date": utc_now()}


def write_page(args: argparse.Namespace, text: str) -> None:
    """Writes the page to --page unless --no-page (the caller has printed it)."""
    if not args.no_page:
        with open(args.page, "w", encoding="utf-8") as handle:
            handle.write(text)
        print(f"wrote {args.page}", file=sys.stderr)
