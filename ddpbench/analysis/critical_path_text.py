"""What `ddpbench explain` says from a run's traces, beside the ladder's terms: who held the step on
the critical path across ranks, and where that and the ladder disagree. No torch.

The two see different steps: the ladder times blocks of steps with and without DDP; the traces are
the profiled phase's few steps, which the profiler slows. So they are set side by side, not merged:
- waiting for the slowest rank: in the traces, per step, each collective's median-rank wait (the
  upper median: a real rank's) beyond its last rank's (the last to arrive waits for no one),
  summed over the step's collectives; the ladder's `slowest_rank` term is the median rank's waits
  beyond the slowest rank's;
- which rank is slow: the rank that arrived last at most collectives, against the ladder's slowest
  rank.
They disagree when the traces' wait lies outside the ladder term's 95 % interval (where it has
one) and the two differ by more than DISAGREE_MS and DISAGREE_SHARE of the larger, or when they
name different ranks.
"""

from __future__ import annotations

import os
import statistics

import numpy as np

from ddpbench.analysis.breakdown_text import run_name
from ddpbench.analysis.collectives import CrossRankJob, match_job, rank_summary
from ddpbench.analysis.critical_path import job_paths, path_summary
from ddpbench.analysis.rank_clocks import run_traces
from ddpbench.analysis.traces import TraceError
from ddpbench.records.store import read_records

DISAGREE_MS = 1.0
DISAGREE_SHARE = 0.3
SHOWN = 3


def waiting_ms_per_step(job: CrossRankJob) -> float | None:
    """Median over steps of the summed median-rank wait beyond the last rank's, in milliseconds."""
    per_step: dict[int, float] = {}
    for collective in job.collectives:
        waits = collective.waits_us
        last = collective.last_rank
        # A real rank's wait (the upper median): of two ranks, the one that waited, as the ladder's
        # typical rank is a rank and not the mean of the two.
        typical = float(np.sort(waits)[len(waits) // 2])
        beyond = typical - (float(waits[last]) if last is not None else 0.0)
        per_step[collective.step] = per_step.get(collective.step, 0.0) + max(beyond, 0.0)
    return statistics.median(per_step.values()) / 1000 if per_step else None


def _held_words(summary: dict) -> str:
    top, rest = summary["held"][0], summary["held"][1:SHOWN]
    words = (
        f"rank {top['rank']}'s {top['phase']} held {top['ms_per_step']:.1f} of the step's "
        f"{summary['step_ms']:.1f} ms"
    )
    if rest:
        words += "; then " + ", ".join(f"rank {r['rank']}'s {r['phase']} {r['ms_per_step']:.1f} ms" for r in rest)
    return words


def _disagree(traced_ms: float, term) -> bool:
    ladder_ms = term.s_per_step * 1000
    if term.ci_low_s is not None and term.ci_high_s is not None:
        if term.ci_low_s * 1000 <= traced_ms <= term.ci_high_s * 1000:
            return False
    return abs(traced_ms - ladder_ms) > max(DISAGREE_MS, DISAGREE_SHARE * max(abs(traced_ms), abs(ladder_ms)))


def run_lines(
    job: CrossRankJob, run_name: str, ladder_wait, ladder_slowest: int | None, summary: dict | None = None
) -> list[str]:
    """The explain lines of one run with traces; `ladder_wait` is the breakdown's `slowest_rank`
    term (None, or not measured, where it has none); `summary` its path_summary, when already made."""
    summary = summary if summary is not None else path_summary(job_paths(job))
    if not summary["held"]:
        return []
    lines = [f"critical path  {run_name} (traces, {summary['steps']} profiled steps): {_held_words(summary)}"]
    traced_ms = waiting_ms_per_step(job)
    last = rank_summary(job)
    slow = last[0] if last and last[0]["last_arrivals"] else None
    beside = []
    if traced_ms is not None:
        words = f"waiting for the slowest rank {traced_ms:.1f} ms per step in the traces"
        if ladder_wait is not None and ladder_wait.s_per_step is not None:
            half = (
                f" ± {(ladder_wait.ci_high_s - ladder_wait.ci_low_s) / 2 * 1000:.1f}"
                if ladder_wait.ci_low_s is not None and ladder_wait.ci_high_s is not None
                else ""
            )
            words += f", {ladder_wait.s_per_step * 1000:.1f}{half} ms in the breakdown: " + (
                "they disagree" if _disagree(traced_ms, ladder_wait) else "they agree"
            )
        beside.append(words)
    # The ladder's slowest rank is a finding only where the wait for it is (its interval excludes
    # zero); otherwise there is no rank to name, and nothing to disagree with.
    named = (
        ladder_slowest is not None
        and ladder_wait is not None
        and ladder_wait.significant
        and ladder_wait.s_per_step > 0
    )
    if slow is not None:
        words = f"last to arrive: rank {slow['rank']} at {slow['last_arrival_share']:.0%} of collectives"
        if named:
            words += f", the ladder's slowest rank is rank {ladder_slowest}" + (
                "" if ladder_slowest == slow["rank"] else ": they disagree"
            )
        elif ladder_wait is not None and ladder_wait.s_per_step is not None:
            words += ", the ladder finds no slowest rank beyond its noise"
        beside.append(words)
    if beside:
        lines.append("  beside the ladder: " + "; ".join(beside))
    if any("disagree" in part for part in beside):
        lines.append(
            "  (the traces are the few profiled steps, which the profiler slows; the ladder times "
            "blocks of steps: a rank that is slow only sometimes can be slow in one and not the other)"
        )
    return lines


def explain_lines(records: list, breakdowns: list, found_paths: dict | None = None) -> list[str]:
    """Critical-path lines for each explained run whose record has traces of two ranks or more.
    `records` are (path, record) as read from the sweep; a run whose traces cannot be matched
    gets one line saying why. `found_paths`, where given, receives run id -> the path's summary
    (`critical_path.path_summary`, for explain's --json), or {"not_read": why}."""
    by_id = {record.run_id: (path, record) for path, record in records}
    found_paths = {} if found_paths is None else found_paths
    lines = []
    for breakdown in breakdowns:
        found = by_id.get(breakdown.run_id)
        if found is None:
            continue
        paths = run_traces(*found)
        if len(paths) < 2:
            continue
        if not all(os.path.exists(path) for path in paths):
            # Records copied without their traces (a fixture, a sweep moved elsewhere).
            lines.append(f"critical path  {run_name(breakdown)}: its traces are not here (moved, or left out)")
            found_paths[breakdown.run_id] = {"not_read": "its traces are not here (moved, or left out)"}
            continue
        try:
            job = match_job(paths)
        except TraceError as exc:
            lines.append(f"critical path  {run_name(breakdown)}: traces not matched: {exc}")
            found_paths[breakdown.run_id] = {"not_read": f"traces not matched: {exc}"}
            continue
        ladder = breakdown.ladder or {}
        # A rank the two halves of the blocks do not agree on is not named.
        slowest = ladder.get("slowest_rank") if ladder.get("halves_agree", True) else None
        summary = path_summary(job_paths(job))
        found_paths[breakdown.run_id] = summary
        lines += run_lines(job, run_name(breakdown), breakdown.terms.get("slowest_rank"), slowest, summary)
    return lines


def sweep_lines(sweep_dir: str, breakdowns: list, found_paths: dict | None = None) -> list[str]:
    """`explain_lines` for a sweep folder's runs."""
    records, _ = read_records(sweep_dir)
    return explain_lines(records, breakdowns, found_paths)
