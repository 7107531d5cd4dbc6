"""`ddpbench trace analyze`: communication/computation overlap in torch.profiler traces. No torch.
`trace collectives` and `trace merge` (the ranks side by side) are in `trace_ranks.py`."""

from __future__ import annotations

import argparse
import json

from ddpbench.commands.arguments import exit_codes, positive_int, subcommands
from ddpbench.commands.trace_ranks import add_cross_rank_parsers
from ddpbench.config.errors import SpecError


def add_trace_parser(commands) -> None:
    trace = commands.add_parser(
        "trace",
        help="profiler traces: overlap per rank, collectives, one timeline",
        description="Analyse torch.profiler traces, any job's or a run's: communication/computation overlap per "
        "rank, collectives matched across ranks, and every rank in one merged timeline.",
    )
    exit_codes(trace, "those of each subcommand (ddpbench trace SUBCOMMAND --help)")
    trace_commands = subcommands(trace, "trace_command")
    analyze = trace_commands.add_parser(
        "analyze", help="communication/computation overlap per rank, any torch.profiler trace"
    )
    analyze.add_argument(
        "paths",
        nargs="+",
        metavar="PATH",
        help="chrome trace files (.json or .json.gz), one per rank, or folders holding them",
    )
    analyze.add_argument("--json", action="store_true", help="print JSON instead of the text")
    analyze.add_argument(
        "--jobs",
        type=positive_int,
        default=None,
        help="traces analysed at a time, one process each (default: 4, at most the usable cores)",
    )
    analyze.add_argument(
        "--per-rank",
        action="store_true",
        help="print the per-rank table even beyond 16 ranks (by default a one-screen summary)",
    )
    analyze.add_argument(
        "--mode",
        choices=("ddpbench", "hta"),
        default="ddpbench",
        help="hta: reproduce HolisticTraceAnalysis 0.5.0's selection and rounding (GPU traces)",
    )
    exit_codes(analyze, "0 every trace analysed", "1 some traces could not be read (the others are analysed)")
    analyze.set_defaults(handler=command_trace_analyze)
    add_cross_rank_parsers(trace_commands)


def command_trace_analyze(args: argparse.Namespace) -> int:
    from ddpbench.analysis.trace_job import analyze_job, format_job_summary, straggler_ranking, trace_files
    from ddpbench.analysis.traces import TraceError, stragglers

    try:
        paths = trace_files(args.paths)
    except TraceError as exc:
        raise SpecError(str(exc)) from None
    analyses, errors = analyze_job(paths, mode=args.mode, jobs=args.jobs)
    if not analyses:  # nothing to show: the input was wrong
        raise SpecError("; ".join(errors))
    if args.json:
        order, ranking = stragglers(analyses), straggler_ranking(analyses)
        print(
            json.dumps(
                {
                    "ranks": [a.summary() for a in analyses],
                    # The arrival order is a cross-check that always names some rank, not a finding
                    # of a straggler (explain's): new keys say so; the old ones stay, deprecated.
                    "arrival_order": order,
                    "arrival_ranking": ranking,
                    "stragglers": order,
                    "straggler_ranking": ranking,
                    "deprecated_keys": {"stragglers": "arrival_order", "straggler_ranking": "arrival_ranking"},
                    "unreadable": errors,
                },
                indent=1,
            )
        )
    else:
        print(format_job_summary(analyses, errors, per_rank=args.per_rank))
    return 1 if errors else 0
