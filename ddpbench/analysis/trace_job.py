"""A whole job's traces: every rank file of a folder analysed in parallel processes, a summary that
fits one screen, and, as a cross-check, the ranks' arrival order at the collectives per step. No
torch.

Each worker process holds one trace at a time (a 1,024-rank job's traces are gigabytes; only
their per-step summaries come back), so memory is bounded by `jobs` traces whatever the job's
size. The arrival order follows HolisticTraceAnalysis's idea: at each step, the rank whose first
collective starts last. It is a cross-check, not the straggler: it names a rank at every step even
where the ranks are identical; whether a rank held the others back, with its interval, is
`ddpbench explain`'s (`analysis.straggler`).
"""

from __future__ import annotations

import multiprocessing
import os
import re
import statistics
from concurrent.futures import ProcessPoolExecutor

from ddpbench.analysis.traces import (
    TRACE_EXPOSED,
    TraceAnalysis,
    TraceError,
    analyze_trace,
    format_trace_table,
    stragglers,
)

TRACE_SUFFIXES = (".json", ".json.gz")
DEFAULT_JOBS = 4
"""Processes (so traces in memory) at a time, unless told; never more than the usable cores."""
PER_RANK_TABLE_LIMIT = 16
"""Up to this many ranks the per-rank table is printed; beyond it, the summary (and --per-rank)."""
RANKED = 5


def trace_files(paths: list[str]) -> list[str]:
    """Files as given; folders replaced by the trace files anywhere under them, in rank order."""
    found = []
    for path in paths:
        if os.path.isdir(path):
            inside = [
                os.path.join(folder, name)
                for folder, _, names in os.walk(path)
                for name in names
                if name.endswith(TRACE_SUFFIXES)
            ]
            if not inside:
                raise TraceError(f"{path}: no trace files in this folder (looked for *.json and *.json.gz)")
            found += sorted(inside, key=_natural)
        else:
            found.append(path)
    return found


def _natural(path: str) -> list:
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", path)]


def _analyse(job: tuple[str, str]) -> TraceAnalysis | str:
    path, mode = job
    try:
        return analyze_trace(path, mode=mode)
    except TraceError as exc:
        return str(exc)


def usable_jobs(requested: int | None, files: int) -> int:
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, min(requested or DEFAULT_JOBS, cores if requested is None else requested, files))


def analyze_job(
    paths: list[str], mode: str = "ddpbench", jobs: int | None = None
) -> tuple[list[TraceAnalysis], list[str]]:
    """Analyse every file; returns the analyses in rank order and one message per file that could
    not be analysed (one broken file never hides the others)."""
    workers = usable_jobs(jobs, len(paths))
    work = [(path, mode) for path in paths]
    if workers == 1:
        results = [_analyse(job) for job in work]
    else:
        # fork: the workers start in milliseconds with everything imported (the parent has no threads here).
        methods = multiprocessing.get_all_start_methods()
        context = multiprocessing.get_context("fork" if "fork" in methods else None)
        with ProcessPoolExecutor(max_workers=workers, mp_context=context) as pool:
            results = list(pool.map(_analyse, work, chunksize=1))
    analyses = [r for r in results if isinstance(r, TraceAnalysis)]
    errors = [r for r in results if isinstance(r, str)]
    analyses.sort(key=lambda a: (a.rank is None, a.rank if a.rank is not None else 0, a.path))
    return analyses, errors


def straggler_ranking(analyses: list[TraceAnalysis]) -> list[dict]:
    """Ranks by how often they were the last to start a step's collectives, with their lag behind
    the first rank (median over those steps) and the steps. Steps missing from any trace are left
    out, as in `stragglers`."""
    per_step = stragglers(analyses)
    by_rank: dict = {}
    for row in per_step:
        by_rank.setdefault(row["latest_rank"], []).append(row)
    ranking = [
        {
            "rank": rank,
            "last_in_steps": len(rows),
            "of_steps": len(per_step),
            "median_lag_ms": statistics.median(r["lag_ms"] for r in rows),
            "steps": [r["step"] for r in rows],
        }
        for rank, rows in by_rank.items()
    ]
    return sorted(ranking, key=lambda r: (-r["last_in_steps"], -r["median_lag_ms"]))


def _spread(values: list[float]) -> str:
    if not values:
        return "n/a"
    ordered = sorted(values)
    p90 = ordered[min(len(ordered) - 1, int(round(0.9 * (len(ordered) - 1))))]
    return f"min {ordered[0]:.2f}, median {statistics.median(ordered):.2f}, p90 {p90:.2f}, max {ordered[-1]:.2f}"


def format_job_summary(analyses: list[TraceAnalysis], errors: list[str], per_rank: bool = False) -> str:
    """What `ddpbench trace analyze` prints: the per-rank table for a few ranks (or when asked),
    else a summary of about 15 lines whatever the number of ranks."""
    lines = []
    if analyses and (per_rank or len(analyses) <= PER_RANK_TABLE_LIMIT):
        lines.append(format_trace_table(analyses))
    if len(analyses) > 1 or not lines:
        lines.append(_summary(analyses, per_rank))
    if analyses:
        lines.append(TRACE_EXPOSED)
    lines += [f"UNREADABLE: {message}" for message in errors]
    return "\n".join(line for line in lines if line)


def _summary(analyses: list[TraceAnalysis], per_rank: bool) -> str:
    if not analyses:
        return "no trace could be analysed"
    summaries = [a.summary() for a in analyses]
    kinds = sorted({s["kind"] for s in summaries})
    backends = sorted({str(s["backend"]) for s in summaries})
    world = sorted({s["world_size"] for s in summaries if s["world_size"] is not None})
    steps = sorted({s["steps_analysed"] for s in summaries})
    step_count = str(steps[0]) if len(steps) == 1 else f"{steps[0]} to {steps[-1]}"
    lines = [
        f"{len(analyses)} rank traces ({', '.join(kinds)}, backend {', '.join(backends)}, world size "
        f"{', '.join(map(str, world)) or '?'}), {step_count} profiler steps each"
    ]
    if world and world[-1] != len(analyses):
        lines.append(f"note: {len(analyses)} of {world[-1]} ranks' traces were analysed")

    def per_step_ms(key):
        return [s[key] / s["steps_analysed"] / 1000 for s in summaries if s["steps_analysed"]]

    lines.append(
        f"  overlap %                 {_spread([s['overlap_pct'] for s in summaries if s['overlap_pct'] is not None])}"
    )
    for key, label in (
        ("exposed_comm_us", "trace exposed ms/step"),
        ("comm_us", "comm ms/step"),
        ("compute_us", "compute ms/step"),
        ("idle_us", "idle ms/step"),
    ):
        lines.append(f"  {label:<25} {_spread(per_step_ms(key))}")
    worst = sorted(
        (s for s in summaries if s["exposed_comm_us_per_step"] is not None),
        key=lambda s: -s["exposed_comm_us_per_step"],
    )[:RANKED]
    if worst:
        lines.append(
            "trace exposed, most: "
            + ", ".join(f"rank {s['rank']} ({s['exposed_comm_us_per_step'] / 1000:.2f} ms/step)" for s in worst)
        )
    ranking = straggler_ranking(analyses)
    if ranking:
        lines.append(
            "arrival order, a cross-check (the rank whose collectives start last in a step: some rank is last in "
            "every step, even among identical ranks; ddpbench explain says whether one held the others back):"
        )
        for row in ranking[:RANKED]:
            lines.append(
                f"  rank {row['rank']}: last in {row['last_in_steps']} of {row['of_steps']} steps, "
                f"median {row['median_lag_ms']:.3f} ms after the first rank"
            )
        if len(ranking) > RANKED:
            lines.append(f"  ... and {len(ranking) - RANKED} more ranks were last in some step (--json lists all)")
    elif len(analyses) > 1:
        lines.append("arrival order: no step with collectives in every trace")
    if not per_rank and len(analyses) > PER_RANK_TABLE_LIMIT:
        lines.append("per-rank table: --per-rank; everything: --json")
    return "\n".join(lines)
