"""The worker's phases after the timed window, each measuring overlap a different way.

- profiled: torch.profiler over a few steps with its own schedule (so its start-up cost never
  touches the timed steps); each rank writes its chrome trace and analyses it.
- replay: the first timed steps' batches, already in memory, stepped again alternately with DDP's
  all-reduce and under no_sync(): both sides do the same work (no data loading on either), so
  exposed communication = median step with all-reduce - median step without.
- reducer: DDP's own timers from `_get_ddp_logging_data()`, over replay iterations only (see
  `reducer_phase`).

The replay lets replicas drift apart (each applies its local gradient under no_sync), so it runs
last, after every check that compares replicas.
"""

from __future__ import annotations

import os
import statistics
import tempfile
from collections.abc import Callable

import torch

from ddpbench.config.spec import DDP_LOGGED_ITERATIONS
from ddpbench.records.store import default_file_mode
from ddpbench.worker.clock import StepClock
from ddpbench.worker.training import DDP_RUNTIME_LOGGING_SAMPLE_RATE


def trace_path(out_dir: str, run_id: str, rank: int) -> str:
    # ".pt.trace.json.gz" is the suffix TensorBoard's profiler plugin looks for; Perfetto opens it too.
    return os.path.join(out_dir, "traces", run_id, f"rank-{rank}.pt.trace.json.gz")


def profiled_phase(
    step: Callable[[], object], device: torch.device, wait: int, warmup: int, active: int, path: str
) -> str:
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
    return export_trace(prof, path)


def export_trace(prof, path: str) -> str:
    """Write a finished profiler's trace to `path` atomically (readers never see half a file)."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
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


NO_SYNC_METHOD = (
    "the same in-memory batches replayed after the timed window, alternating a step with "
    "all-reduce and a step under no_sync(); data loading excluded on both sides"
)


def replay_phase(
    ddp_model, step_on: Callable[[tuple], object], batches: list[tuple], device: torch.device
) -> tuple[list[float], list[float]]:
    """(step times with all-reduce, step times under no_sync) of the given batches, each batch
    stepped once each way, alternating, so that drift in the machine's speed hits both sides."""
    clock = StepClock(device)
    clock.mark()
    for batch in batches:
        step_on(batch)
        clock.mark()
        with ddp_model.no_sync():
            step_on(batch)
        clock.mark()
    times = clock.step_times_s()
    return times[0::2], times[1::2]


def exposed_from_no_sync(with_allreduce_s: list[float], without_allreduce_s: list[float]) -> dict:
    with_median = statistics.median(with_allreduce_s)
    without_median = statistics.median(without_allreduce_s)
    return {
        "step_time_median_s": with_median,
        "no_sync_step_time_median_s": without_median,
        "exposed_comm_s": with_median - without_median,
        "steps": len(without_allreduce_s),
    }


REDUCER_TIMERS = (
    "avg_forward_compute_time",
    "avg_backward_compute_time",
    "avg_backward_comm_time",
    "avg_backward_compute_comm_overlap_time",
)


def _sizes(text: str) -> list[int]:
    return [int(size) for size in str(text).split(",") if size.strip()]


def reducer_statistics(data: dict) -> dict:
    """DDP's reducer timers (nanoseconds, converted to seconds) and its buckets, from one reading
    of `_get_ddp_logging_data()`."""
    stats = {name.replace("avg_", "") + "_s": data[name] / 1e9 for name in REDUCER_TIMERS if name in data}
    if "backward_comm_time_s" in stats and "backward_compute_comm_overlap_time_s" in stats:
        stats["exposed_comm_s"] = stats["backward_comm_time_s"] - stats["backward_compute_comm_overlap_time_s"]
    stats.update(
        {
            "sampled_iteration": data.get("iteration"),
            "bucket_cap_bytes": data.get("bucket_cap_bytes"),
            "bucket_sizes_bytes": _sizes(data.get("bucket_sizes", "")),
            "rebuilt_bucket_sizes_bytes": _sizes(data.get("rebuilt_bucket_sizes", "")),
            "has_rebuilt_buckets": bool(data.get("has_rebuilt_buckets")),
        }
    )
    stats["num_buckets"] = len(stats["rebuilt_bucket_sizes_bytes"] or stats["bucket_sizes_bytes"])
    return stats


def recorded_before(last_recorded: int) -> int:
    """How many iterations DDP's running averages hold, right after the first forward with sample
    rate 1, when the run so far used a sample rate no run reaches: DDP records iterations 1 to 10
    (torch's should_collect_runtime_stats: iteration <= 10 or a multiple of the rate), and that
    first forward with rate 1 records the iteration before it, `last_recorded`, too."""
    return min(last_recorded, DDP_LOGGED_ITERATIONS) + (1 if last_recorded > DDP_LOGGED_ITERATIONS else 0)


def reducer_phase(ddp_model, step_on: Callable[[tuple], object], batches: list[tuple]) -> dict:
    """DDP's reducer timers over the given batches only, not over the warm-up.

    DDP keeps running averages over the iterations it samples, and the first ten (the one-bucket
    first iteration among them) are always sampled. So: sample every iteration (rate 1) for this
    phase, read the averages after one priming step and again after the batches, and take the
    mean of just the iterations in between from the two running averages. Each iteration's timers
    are logged at the next forward, hence one step more at the end. Outside the timed window, so
    on GPUs the waits that sampling costs touch no measurement."""
    ddp_model._set_ddp_runtime_logging_sample_rate(1)
    try:
        step_on(batches[0])  # priming: from here on every iteration is recorded
        before = ddp_model._get_ddp_logging_data()
        for batch in batches:
            step_on(batch)
        step_on(batches[0])  # logs the last batch's iteration
        after = ddp_model._get_ddp_logging_data()
    finally:
        ddp_model._set_ddp_runtime_logging_sample_rate(DDP_RUNTIME_LOGGING_SAMPLE_RATE)
    first, last = before.get("iteration", 0), after.get("iteration", 0)
    covered = last - first
    stats = reducer_statistics(after)
    if covered <= 0:
        return {**stats, "covers": "no iteration was recorded: these are DDP's running averages since the start"}
    count_before = recorded_before(first)
    for name in REDUCER_TIMERS:
        if name in before and name in after:
            total_ns = after[name] * (count_before + covered) - before[name] * count_before
            stats[name.replace("avg_", "") + "_s"] = total_ns / covered / 1e9
    if "backward_comm_time_s" in stats and "backward_compute_comm_overlap_time_s" in stats:
        stats["exposed_comm_s"] = stats["backward_comm_time_s"] - stats["backward_compute_comm_overlap_time_s"]
    stats["iterations"] = covered
    stats["covers"] = (
        f"mean of DDP iterations {first + 1} to {last}: {covered} steps replayed after the timed "
        "window, warm-up excluded"
    )
    return stats
