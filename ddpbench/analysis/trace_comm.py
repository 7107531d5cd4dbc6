"""All-reduce times per bucket as a run's traces saw them, against a network profile. No torch.

On CPU (gloo) every bucket's all-reduce is one `gloo:all_reduce` event on gloo's threads, in
bucket order within a profiler step. A rank's interval also includes waiting for its peer (the
collective starts when the last rank joins), so the time a bucket's all-reduce took on the wire is
the minimum over ranks of that bucket's interval in that step.
"""

from __future__ import annotations

import statistics

from ddpbench.analysis.network import predict
from ddpbench.analysis.projection import WIRE_DTYPE, ProjectionError, RunModel, all_reduce_seconds
from ddpbench.analysis.traces import PROFILER_STEP, read_trace
from ddpbench.records.schema import Record


def allreduce_intervals_us(path: str) -> dict[int, list[float]]:
    """Profiler step -> durations of its gloo:all_reduce events in start order."""
    trace = read_trace(path)
    steps = []
    for event in trace.traceEvents:
        if event.ph == "X" and isinstance(event.name, str):
            match = PROFILER_STEP.match(event.name)
            if match:
                steps.append((event.ts, event.ts + event.dur, int(match.group(1))))
    found: dict[int, list[tuple[float, float]]] = {}
    for event in trace.traceEvents:
        if event.ph == "X" and event.name == "gloo:all_reduce":
            for start, end, number in steps:
                if start <= event.ts < end:
                    found.setdefault(number, []).append((event.ts, event.dur))
    return {number: [dur for _, dur in sorted(events)] for number, events in found.items()}


def bucket_times_s(record: Record) -> list[dict]:
    """Per bucket: its bytes and the median over steps of the minimum over ranks of its interval.
    Steps whose event count differs from the bucket count are skipped."""
    reducer = record.overlap.reducer.by_rank[0] if record.overlap and record.overlap.reducer else None
    paths = record.overlap.trace.paths if record.overlap and record.overlap.trace else []
    if reducer is None or not paths:
        return []
    sizes = reducer.rebuilt_bucket_sizes_bytes or reducer.bucket_sizes_bytes
    per_rank = [allreduce_intervals_us(path) for path in paths]
    common = set.intersection(*(set(r) for r in per_rank))
    per_bucket: list[list[float]] = [[] for _ in sizes]
    for number in sorted(common):
        if any(len(r[number]) != len(sizes) for r in per_rank):
            continue
        for bucket in range(len(sizes)):
            per_bucket[bucket].append(min(r[number][bucket] for r in per_rank) / 1e6)
    wire_factor = 0.5 if record.spec.ddp.comm_hook != "allreduce" else 1.0
    return [{"bucket": i, "bytes": sizes[i], "wire_bytes": int(sizes[i] * wire_factor), "steps": len(times),
             "trace_s": statistics.median(times)} for i, times in enumerate(per_bucket) if times]


def profile_vs_trace(record: Record, profile: dict) -> list[dict]:
    """Each bucket's all-reduce in the trace next to the profile's time for its bytes (an idle
    network), and next to the replay of the run itself, which adds the measured contention with
    backward (None for a run without a timeline)."""
    rows = bucket_times_s(record)
    replayed: list = [None] * len(rows)
    try:
        model = RunModel(record)
        replay = model.replay(model.source, all_reduce_seconds(profile, record.spec.world_size))
        # The same buckets (by size, in order), or no comparison. A hook's replayed time also holds
        # the cast back to float32, which the trace's gloo:all_reduce event does not.
        if [bucket["bytes"] for bucket in replay.buckets] == [row["bytes"] for row in rows]:
            hook = getattr(model.costs, record.spec.ddp.comm_hook, None)
            cast_back = hook.decompress_s_per_byte if hook is not None else 0.0
            replayed = [bucket["end_s"] - bucket["start_s"] - cast_back * bucket["bytes"] for bucket in replay.buckets]
    except ProjectionError:
        pass
    result = []
    for row, replay_s in zip(rows, replayed):
        predicted = predict(profile, "all_reduce", record.spec.world_size, row["wire_bytes"],
                            dtype=WIRE_DTYPE[record.spec.ddp.comm_hook])
        result.append({**row, "predicted_s": predicted.seconds, "error": predicted.seconds / row["trace_s"] - 1,
                       "replayed_s": replay_s, "replay_error": None if replay_s is None else replay_s / row["trace_s"] - 1})
    return result
