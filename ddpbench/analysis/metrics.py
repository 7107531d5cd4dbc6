"""The one place that turns raw per-rank step times into metrics. No torch.

Definitions (also in the README):
- step time (rank r, step i): start of step i to start of step i+1 on rank r.
- iteration time (step i): the maximum over ranks; the slowest rank sets the pace.
- throughput: global samples in the timed window / wall time of the window, whose start and end
  are aligned across ranks with a barrier. Also per device, and in the workload's unit.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

PERCENTILES = (50, 90, 99)


def iteration_times_s(step_times_by_rank: Sequence[Sequence[float]]) -> list[float]:
    lengths = {len(times) for times in step_times_by_rank}
    if len(lengths) != 1:
        raise ValueError(f"ranks timed different numbers of steps: {sorted(lengths)}")
    return np.max(np.asarray(step_times_by_rank, dtype=float), axis=0).tolist()


def distribution(values: Sequence[float]) -> dict[str, float]:
    """mean, std (sample, ddof=1), min, max and p50/p90/p99 (linear interpolation)."""
    array = np.asarray(values, dtype=float)
    if array.size == 0:
        raise ValueError("no values to summarise")
    summary = {
        "mean": float(array.mean()),
        "std": float(array.std(ddof=1)) if array.size > 1 else 0.0,
        "min": float(array.min()),
        "max": float(array.max()),
    }
    for q in PERCENTILES:
        summary[f"p{q}"] = float(np.percentile(array, q))
    return summary


def run_metrics(
    step_times_by_rank: Sequence[Sequence[float]],
    window_s: float,
    batch_size: int,
    world_size: int,
    units_per_sample: int,
) -> dict:
    """Metrics of one run from its raw step times and barrier-aligned window."""
    if not window_s > 0 or not math.isfinite(window_s):
        raise ValueError(f"window wall time must be a positive number of seconds; got {window_s}")
    timed_steps = len(step_times_by_rank[0])
    global_samples = batch_size * world_size * timed_steps
    samples_per_s = global_samples / window_s
    return {
        "timed_steps": timed_steps,
        "window_s": window_s,
        "global_samples": global_samples,
        "throughput_samples_per_s": samples_per_s,
        "throughput_samples_per_s_per_device": samples_per_s / world_size,
        "throughput_units_per_s": samples_per_s * units_per_sample,
        "throughput_units_per_s_per_device": samples_per_s * units_per_sample / world_size,
        "iteration_time_s": distribution(iteration_times_s(step_times_by_rank)),
        "step_time_s_by_rank": [distribution(times) for times in step_times_by_rank],
    }
