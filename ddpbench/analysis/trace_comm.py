"""All-reduce times per bucket as a run's traces saw them, against a network profile. No torch.

On CPU (gloo) every bucket's all-reduce is one `gloo:all_reduce` event on gloo's threads, in
bucket order within a profiler step. A rank's interval also includes waiting for its peer (the
collective starts when the last rank joins), so the time a bucket's all-reduce took on the wire is
the minimum over ranks of that bucket's interval in that step.

A network profile is an idle network: it predicts a bucket's time best in the steps where that
bucket ran alone, with hardly any backward or other all-reduce beside it on any rank (gloo runs up
to two at once, on its two threads). So each bucket also says in how many steps it ran alone, and
its time in those steps. "Hardly any" is measured against the profile's own time for the bucket,
not against the step's interval: a share of that interval would let a slow instance (a long
interval dilutes the same overlap) pass more often than a fast one, and bias the steps kept. And
the profiled steps themselves are slower than the run's timed steps (the profiler records every
op, which on a busy CPU also delays gloo's threads): the registry's `profiled_step_p50_s` gives the
traces' own step time, to set beside the run's measured one.
"""

from __future__ import annotations

import statistics

import numpy as np

from ddpbench.analysis import intervals
from ddpbench.analysis.network import predict
from ddpbench.analysis.projection import WIRE_DTYPE, ProjectionError, RunModel, all_reduce_seconds
from ddpbench.analysis.traces import PROFILER_STEP, read_trace
from ddpbench.records.schema import Record

BACKWARD_OP = "autograd::engine::evaluate_function"
"""The events of backward's nodes (on CPU, on the thread that called backward)."""
ALONE_AT_MOST = 0.1
"""A bucket ran alone in a step when, on every rank, backward or another all-reduce overlapped
its interval for at most this share of the profile's time for it."""


def allreduce_intervals_us(path: str) -> dict[int, list[tuple[float, float]]]:
    """Profiler step -> its gloo:all_reduce events in start order, each as (duration, and how
    long backward or another all-reduce also ran during it), in microseconds."""
    trace = read_trace(path)
    steps, all_reduces, backward = [], [], []
    for event in trace.traceEvents:
        if event.ph != "X" or not isinstance(event.name, str):
            continue
        match = PROFILER_STEP.match(event.name)
        if match:
            steps.append((event.ts, event.ts + event.dur, int(match.group(1))))
        elif event.name == "gloo:all_reduce":
            all_reduces.append((event.ts, event.ts + event.dur))
        elif event.name.startswith(BACKWARD_OP):
            backward.append((event.ts, event.ts + event.dur))
    found: dict[int, list[tuple[float, float]]] = {}
    for start, end, number in steps:
        mine = sorted(interval for interval in all_reduces if start <= interval[0] < end)
        busy = [interval for interval in backward if interval[0] < end and interval[1] > start]
        rows = []
        for index, (begin, finish) in enumerate(mine):
            others = busy + mine[:index] + mine[index + 1 :]
            merged = intervals.merge(np.array([o[0] for o in others], float), np.array([o[1] for o in others], float))
            shared = intervals.intersection((np.array([begin]), np.array([finish])), merged)
            rows.append((finish - begin, shared))
        if rows:
            found[number] = rows
    return found


def bucket_times_s(record: Record) -> list[dict]:
    """Per bucket: its bytes; over the profiled steps, the median of the minimum over ranks of its
    interval (`trace_s`); and per step (`per_step`) that minimum with the longest overlap over
    ranks, in seconds. Steps whose event count differs from the bucket count are skipped."""
    reducer = record.overlap.reducer.by_rank[0] if record.overlap and record.overlap.reducer else None
    paths = record.overlap.trace.paths if record.overlap and record.overlap.trace else []
    if reducer is None or not paths:
        return []
    sizes = reducer.rebuilt_bucket_sizes_bytes or reducer.bucket_sizes_bytes
    per_rank = [allreduce_intervals_us(path) for path in paths]
    common = set.intersection(*(set(r) for r in per_rank))
    per_bucket: list[list[tuple[float, float]]] = [[] for _ in sizes]
    for number in sorted(common):
        if any(len(r[number]) != len(sizes) for r in per_rank):
            continue
        for bucket in range(len(sizes)):
            per_bucket[bucket].append(
                (min(r[number][bucket][0] for r in per_rank) / 1e6, max(r[number][bucket][1] for r in per_rank) / 1e6)
            )
    wire_factor = 0.5 if record.spec.ddp.comm_hook != "allreduce" else 1.0
    return [
        {
            "bucket": i,
            "bytes": sizes[i],
            "wire_bytes": int(sizes[i] * wire_factor),
            "steps": len(steps),
            "trace_s": statistics.median(seconds for seconds, _ in steps),
            "per_step": steps,
        }
        for i, steps in enumerate(per_bucket)
        if steps
    ]


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
    relative = lambda predicted, seen: predicted / seen - 1 if seen > 0 else None  # noqa: E731
    for row, replay_s in zip(rows, replayed):
        predicted = predict(
            profile,
            "all_reduce",
            record.spec.world_size,
            row["wire_bytes"],
            dtype=WIRE_DTYPE[record.spec.ddp.comm_hook],
        ).seconds
        alone = [seconds for seconds, overlapped in row.pop("per_step") if overlapped <= ALONE_AT_MOST * predicted]
        alone_s = statistics.median(alone) if alone else None
        result.append(
            {
                **row,
                "predicted_s": predicted,
                "error": relative(predicted, row["trace_s"]),
                "alone_steps": len(alone),
                "alone_s": alone_s,
                "alone_error": None if alone_s is None else relative(predicted, alone_s),
                "replayed_s": replay_s,
                "replay_error": None if replay_s is None else relative(replay_s, row["trace_s"]),
            }
        )
    return result
