"""The worker's phases after the timed window, each measuring overlap a different way.

- profiled: torch.profiler over a few steps with its own schedule (so its start-up cost never
  touches the timed steps); each rank writes its chrome trace and analyses it.
- no_sync: the same batches as the first timed steps, with DDP's all-reduce skipped; exposed
  communication = median step time with all-reduce - median step time without.
- reducer statistics: DDP's own timers from `_get_ddp_logging_data()`.

The no_sync phase lets replicas drift apart (each applies its local gradient), so it runs last,
after every check that compares replicas.
"""

from __future__ import annotations

import os
import statistics
import tempfile
from typing import Callable

import torch

from ddpbench.worker.clock import StepClock
from ddpbench.records.store import default_file_mode


def trace_path(out_dir: str, run_id: str, rank: int) -> str:
    # ".pt.trace.json.gz" is the suffix TensorBoard's profiler plugin looks for; Perfetto opens it too.
    return os.path.join(out_dir, "traces", run_id, f"rank-{rank}.pt.trace.json.gz")


def profiled_phase(step: Callable[[], object], device: torch.device, wait: int, warmup: int, active: int,
                   path: str) -> str:
    """Run wait + warmup + active steps under torch.profiler and write the trace atomically."""
    from torch.profiler import ProfilerActivity, profile, schedule

    activities = [ProfilerActivity.CPU]
    if device.type == "cuda":
        activities.append(ProfilerActivity.CUDA)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with profile(activities=activities, schedule=schedule(wait=wait, warmup=warmup, active=active, repeat=1)) as prof:
        for _ in range(wait + warmup + active):
            step()
            prof.step()
    # export_chrome_trace gzips when the name ends in .gz; write beside the target, then rename.
    fd, tmp_path = tempfile.mkstemp(prefix=".tmp-", suffix=".json.gz", dir=os.path.dirname(path))
    os.close(fd)
    try:
        prof.export_chrome_trace(tmp_path)
        os.chmod(tmp_path, default_file_mode())
        os.replace(tmp_path, path)
    finally:
        if os.path.exists(tmp_path):
            os.unlink(tmp_path)
    return path


def no_sync_phase(ddp_model, step_on: Callable[[tuple], object], batches: list[tuple], device: torch.device) -> list[float]:
    """Step times of the given batches with DDP's gradient all-reduce skipped (`no_sync()`).
    Everything else (forward, backward, optimizer) is the same work as a timed step."""
    clock = StepClock(device)
    with ddp_model.no_sync():
        clock.mark()
        for batch in batches:
            step_on(batch)
            clock.mark()
    return clock.step_times_s()


def exposed_from_no_sync(with_allreduce_s: list[float], without_allreduce_s: list[float]) -> dict:
    with_median = statistics.median(with_allreduce_s)
    without_median = statistics.median(without_allreduce_s)
    return {
        "step_time_median_s": with_median,
        "no_sync_step_time_median_s": without_median,
        "exposed_comm_s": with_median - without_median,
        "steps": len(without_allreduce_s),
    }


REDUCER_TIMERS = ("avg_forward_compute_time", "avg_backward_compute_time", "avg_backward_comm_time",
                  "avg_backward_compute_comm_overlap_time")


def _sizes(text: str) -> list[int]:
    return [int(size) for size in str(text).split(",") if size.strip()]


def reducer_statistics(ddp_model) -> dict:
    """DDP's reducer timers (nanoseconds, converted to seconds here). They are sampled (DDP times
    only some iterations), describe the iteration before the one that records them, and their
    "overlap" is from the start of the first all-reduce to the end of backward, not a true
    intersection of busy intervals."""
    data = ddp_model._get_ddp_logging_data()
    stats = {name.replace("avg_", "") + "_s": data[name] / 1e9 for name in REDUCER_TIMERS if name in data}
    if "backward_comm_time_s" in stats and "backward_compute_comm_overlap_time_s" in stats:
        stats["exposed_comm_s"] = stats["backward_comm_time_s"] - stats["backward_compute_comm_overlap_time_s"]
    stats.update({
        "sampled_iteration": data.get("iteration"),
        "bucket_cap_bytes": data.get("bucket_cap_bytes"),
        "bucket_sizes_bytes": _sizes(data.get("bucket_sizes", "")),
        "rebuilt_bucket_sizes_bytes": _sizes(data.get("rebuilt_bucket_sizes", "")),
        "has_rebuilt_buckets": bool(data.get("has_rebuilt_buckets")),
    })
    stats["num_buckets"] = len(stats["rebuilt_bucket_sizes_bytes"] or stats["bucket_sizes_bytes"])
    return stats
