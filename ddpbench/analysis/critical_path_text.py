"""What `ddpbench explain` reads from the runs' traces: the collectives matched across ranks (for
runs without the in-process ablation, the source of the wait for the slowest rank) and who held
each profiled step on the critical path across ranks. No torch.

The traces are the profiled phase's few steps, which the profiler slows; the ablation times rounds
of steps. So the critical path is set beside the causes, not merged with them.
"""

from __future__ import annotations

import os

from ddpbench.analysis.collectives import match_job
from ddpbench.analysis.critical_path import job_paths, path_summary
from ddpbench.analysis.rank_clocks import run_traces
from ddpbench.analysis.traces import TraceError


def read_jobs(records: list) -> tuple[dict, dict]:
    """(run id -> its matched traces, run id -> why they could not be read) for every ok run with
    traces of two ranks or more; `records` are (path, record) as read from the sweep."""
    jobs, not_read = {}, {}
    for path, record in records:
        if record.status != "ok" or not record.spec.launched_by_torchrun:
            continue
        paths = run_traces(path, record)
        if len(paths) < 2:
            continue
        if not all(os.path.exists(trace) for trace in paths):
            # Records copied without their traces (a fixture, a sweep moved elsewhere).
            not_read[record.run_id] = "its traces are not here (moved, or left out)"
            continue
        try:
            jobs[record.run_id] = match_job(paths)
        except TraceError as exc:
            not_read[record.run_id] = f"traces not matched: {exc}"
    return jobs, not_read


def _holder(summary: dict) -> str:
    top = summary["held"][0]
    return f"rank {top['rank']}'s {top['phase']} {top['ms_per_step']:.1f} of {summary['step_ms']:.1f} ms"


def path_lines(answers: list, jobs: dict, not_read: dict, found_paths: dict | None = None) -> list[str]:
    """One line per configuration whose runs have matched traces: who held the profiled steps on the
    critical path in each run, beside the straggler the answer names. `found_paths`, where given,
    receives run id -> the path's summary (`critical_path.path_summary`), or {"not_read": why}."""
    found_paths = {} if found_paths is None else found_paths
    lines = []
    for answer in answers:
        held, missing = [], []
        for run_id in answer.run_ids:
            if run_id in not_read:
                found_paths[run_id] = {"not_read": not_read[run_id]}
                missing.append(f"{run_id}: {not_read[run_id]}")
            elif run_id in jobs:
                summary = path_summary(job_paths(jobs[run_id]))
                found_paths[run_id] = summary
                if summary["held"]:
                    held.append(_holder(summary))
        if held:
            runs = f"{len(held)} runs" if len(held) > 1 else "1 run"
            lines.append(f"critical path  {answer.name} (traces, {runs}): " + "; ".join(held))
        lines += [f"critical path  {answer.name}: {said}" for said in missing]
    return lines
