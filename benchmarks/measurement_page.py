"""What every benchmark that writes a page of docs/measurements/ shares: the --page and --no-page
options, the command line the page names, the commit and times it states, and writing the page."""

from __future__ import annotations

import argparse
import os
import shlex
import sys
import time
from datetime import datetime

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


def commit_of(sha: str | None, dirty: bool | None) -> str:
    """A commit as a page names it: short, and saying so where tracked files had changed."""
    if not sha:
        return "not recorded"
    return sha[:7] + (" with uncommitted changes to tracked files" if dirty else "")


def minute(iso: str | None) -> str:
    """An ISO time (a record's started_at or ended_at) to the minute, UTC."""
    return datetime.fromisoformat(iso).strftime("%Y-%m-%d %H:%M UTC") if iso else "not recorded"


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
