"""`ddpbench trace collectives` and `ddpbench trace merge`: a job's rank traces side by side, the
collectives matched across ranks, the critical path across ranks, one merged timeline. No torch.

Both take a run (its record, `results/<sweep>/runs/<run-id>.json`) or rank traces of any
torch.profiler job (files, or folders holding them)."""

from __future__ import annotations

import argparse
import json
import os

from ddpbench.commands.arguments import add_deprecated_option, exit_codes, positive_int
from ddpbench.config.errors import SpecError

MERGED_SUFFIX = ".merged.json.gz"
"""What merged traces are called; left out when a folder is read as rank traces."""
SNIFF_BYTES = 4096


def add_cross_rank_parsers(trace_commands) -> None:
    collectives = trace_commands.add_parser(
        "collectives",
        help="collectives matched across ranks: arrival spread, transfer, waits, who held each step",
    )
    _inputs(collectives)
    collectives.add_argument("--json", action="store_true", help="print JSON instead of the text")
    exit_codes(collectives, "0 analysed")
    collectives.set_defaults(handler=command_trace_collectives)
    merge = trace_commands.add_parser(
        "merge", help="every rank's trace in one timeline on one clock (a gzipped Chrome trace for Perfetto)"
    )
    _inputs(merge)
    merge.add_argument(
        "-o",
        "--output",
        dest="out",
        default=None,
        metavar="FILE",
        help=f"where to write it (default: NAME{MERGED_SUFFIX} in this folder, NAME the run or the traces' folder)",
    )
    add_deprecated_option(merge, "--out", dest="out", instead="-o/--output FILE")
    merge.add_argument("--json", action="store_true", help="print what was written as JSON instead of the text")
    exit_codes(merge, "0 written")
    merge.set_defaults(handler=command_trace_merge)


def _inputs(parser) -> None:
    parser.add_argument(
        "paths",
        nargs="+",
        metavar="PATH",
        help="a run's record (runs/<run-id>.json), or rank traces (.json, .json.gz) or folders holding them",
    )
    parser.add_argument(
        "--jobs",
        type=positive_int,
        default=None,
        help="traces read at a time, one process each (default: 4, at most the usable cores)",
    )


def _is_trace(path: str) -> bool:
    if not path.endswith(".json") or ".trace." in os.path.basename(path):
        return True
    try:
        with open(path, "rb") as handle:
            head = handle.read(SNIFF_BYTES)
    except OSError:
        return True  # the trace reader says what is wrong with it
    return b'"schemaVersion"' in head or b'"traceEvents"' in head


def run_trace_paths(record_path: str) -> tuple[str, list[str]]:
    """A record's run id and its traces."""
    from ddpbench.analysis.rank_clocks import run_traces
    from ddpbench.records.store import UnreadableRecord, load_record

    try:
        record = load_record(record_path)
    except UnreadableRecord as exc:
        raise SpecError(str(exc)) from None
    paths = run_traces(record_path, record)
    if not paths:
        raise SpecError(
            f"{record_path}: run {record.run_id} has no traces "
            "(it ended before its profiled phase, or ran with --no-profile)"
        )
    return record.run_id, paths


def resolve_inputs(given: list[str]) -> tuple[str, list[str]]:
    """A name for the job (run id or folder) and its rank trace files."""
    from ddpbench.analysis.trace_job import trace_files
    from ddpbench.analysis.traces import TraceError

    if len(given) == 1 and os.path.isfile(given[0]) and not _is_trace(given[0]):
        return run_trace_paths(given[0])
    try:
        paths = [path for path in trace_files(given) if not path.endswith(MERGED_SUFFIX)]
    except TraceError as exc:
        raise SpecError(str(exc)) from None
    name = os.path.basename(os.path.normpath(given[0])) if os.path.isdir(given[0]) else "ranks"
    return name, paths


def _job(args):
    """The job's rank traces matched and on one clock: any subset of its ranks (people profile a few
    ranks of a large job); what needs the missing ones says so."""
    from ddpbench.analysis.collectives import match_job
    from ddpbench.analysis.traces import TraceError

    name, paths = resolve_inputs(args.paths)
    try:
        return name, match_job(paths, jobs=args.jobs, subset=True)
    except TraceError as exc:
        raise SpecError(str(exc)) from None


def missing_line(job) -> str | None:
    """One line naming the job's ranks that have no trace here, or None."""
    from ddpbench.analysis.collectives import rank_ranges

    if not job.missing:
        return None
    return (
        f"missing: {len(job.missing)} of the job's {job.world_size} ranks have no trace here "
        f"(rank{'s' if len(job.missing) > 1 else ''} {rank_ranges(job.missing)}); the {job.ranks} at hand are merged"
    )


def job_critical_paths(job) -> list:
    """The critical path crosses to whichever rank a step waited for: it needs every rank."""
    from ddpbench.analysis.critical_path import job_paths

    return [] if job.missing else job_paths(job)


def command_trace_collectives(args: argparse.Namespace) -> int:
    from ddpbench.analysis.collectives import format_bucket_table, job_summary
    from ddpbench.analysis.critical_path import format_path, path_summary

    _, job = _job(args)
    path = path_summary(job_critical_paths(job)) if not job.missing else None
    if args.json:
        print(json.dumps({**job_summary(job), "critical_path": path}, indent=1))
        return 0
    if missing_line(job):
        print(missing_line(job).replace("are merged", "are matched"))
    print(format_bucket_table(job))
    print()
    print("\n".join(format_path(path)) if path else "critical path: not read, it needs every rank's trace")
    return 0


def command_trace_merge(args: argparse.Namespace) -> int:
    from ddpbench.analysis.critical_path import held_sentence, path_summary
    from ddpbench.analysis.rank_clocks import format_offsets
    from ddpbench.analysis.trace_merge import write_merged

    name, job = _job(args)
    out = args.out or f"{name}{MERGED_SUFFIX}"
    paths = job_critical_paths(job)
    try:
        os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
        written = write_merged(job, paths, out)
    except OSError as exc:
        raise SpecError(f"{out}: cannot write: {exc.strerror or exc}") from None
    if args.json:
        print(json.dumps(written, indent=1))
        return 0
    events = sum(written["events_by_rank"].values())
    print(f"wrote {out}: {job.ranks} ranks, {events} events, on rank {job.timelines[0].rank}'s clock")
    if missing_line(job):
        print(missing_line(job))
    print("\n".join(format_offsets(job.offsets)))
    sentence = held_sentence(path_summary(paths)) if paths else None
    if sentence:
        print(f"critical path: {sentence} (each rank's `critical path` track shows it)")
    elif job.missing:
        print("critical path: not drawn, it needs every rank's trace")
    print("open it in Perfetto (ui.perfetto.dev)")
    return 0
