"""Replay one DDP step from a measured run for another world size, network, bucket size or
gradient compression (`ddpbench project`). No torch.

What the replay takes from the run (its `timeline`: per-parameter gradient-ready times, with
DDP's all-reduce and under no_sync(); medians over the phase's steps, then the slowest rank):
forward, backward and optimizer as measured; the order in which gradients become ready. What it
takes from the network profile: t = alpha + beta * bytes of one all_reduce at world size N.

One step, as DDP runs it:
1. backward produces gradients in the measured order and times (backward alone); DDP copies each
   into its bucket (measured copy cost per byte) on the thread that runs backward;
2. a bucket is ready when its last gradient is; a compression hook then casts it to half on the
   same thread (measured cost per byte), delaying the gradients after it;
3. buckets are all-reduced one at a time, in order, on one communication queue;
4. backward is slowed while communication overlaps it: the run's own backward under DDP against
   backward alone gives the extra backward time per second of overlapped communication, which is
   applied to the what-if's own overlap (iterated to a fixed point);
5. the step ends when backward and the last all-reduce are done, DDP has copied the buckets back
   into the gradients (unless gradient_as_bucket_view), and the optimizer has run.

Re-bucketing (`bucket_cap_mb`) follows DDP's rebuild after its first iteration: parameters in
gradient-ready order (roughly the reverse of definition order), a bucket closes as soon as it
reaches its cap (so a parameter is never split and a bucket may overshoot), and the first bucket
has its own cap. torch 2.14 uses a 1 MiB first bucket only when bucket_cap_mb is left unset; when
it is given (ddpbench always gives it) the first bucket has the same cap.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field, replace

from ddpbench.analysis.network import predict
from ddpbench.records.schema import Record

MIB = 1024 * 1024
COMM_HOOKS = ("allreduce", "fp16_compress", "bf16_compress")
FIXED_POINT_ROUNDS = 6


class ProjectionError(ValueError):
    """A run that cannot be replayed, or a what-if that makes no sense; says which and why."""


def rebucket(order: list[int], param_bytes: list[int], cap_bytes: int, first_cap_bytes: int | None = None) -> list[list[int]]:
    """DDP's bucket assignment (compute_bucket_assignment_by_size) over parameters in `order`."""
    if cap_bytes <= 0:
        raise ProjectionError(f"bucket cap must be > 0 bytes; got {cap_bytes}")
    buckets, current, size = [], [], 0
    limit = first_cap_bytes or cap_bytes
    for index in order:
        current.append(index)
        size += param_bytes[index]
        if size >= limit:
            buckets.append(current)
            current, size, limit = [], 0, cap_bytes
    if current:
        buckets.append(current)
    return buckets


def _median(values) -> float:
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else 0.0


@dataclass
class StepTimes:
    """One representative step (seconds from the step's start, data loading excluded)."""

    data_s: float
    backward_start_s: float
    ready_s: list[float]
    tail_s: float
    """Backward's own work after the last gradient is ready (autograd wrap-up)."""
    optimizer_s: float
    after_s: float
    """From the optimizer's end to the end of the step."""

    @property
    def backward_span_s(self) -> float:
        return max(self.ready_s) - self.backward_start_s

    @property
    def step_s(self) -> float:
        return self.backward_start_s + self.backward_span_s + self.tail_s + self.optimizer_s + self.after_s


def _slowest(values) -> float:
    values = [v for v in values if v is not None]
    return max(values) if values else 0.0


def representative(steps_by_rank: list[list]) -> StepTimes:
    """Per step, the slowest rank for every quantity (ranks meet at every bucket's all-reduce, so
    the last rank to get there sets the pace), then the median over steps. The order matters:
    the median of per-step maxima is larger than the maximum of per-rank medians when ranks
    take turns being slow, which they do on a busy machine."""
    steps = min(len(rank_steps) for rank_steps in steps_by_rank)
    count = len(steps_by_rank[0][0].grad_ready_s)
    combined = []
    for index in range(steps):
        same_step = [rank_steps[index] for rank_steps in steps_by_rank]
        ready = [_slowest(s.grad_ready_s[i] for s in same_step) for i in range(count)]
        optimizer_start = _slowest(s.optimizer_start_s for s in same_step)
        optimizer_end = _slowest(s.optimizer_end_s for s in same_step)
        step_end = _slowest(s.step_s for s in same_step)
        combined.append(StepTimes(
            data_s=_slowest(s.data_s for s in same_step),
            backward_start_s=_slowest(s.backward_start_s for s in same_step),
            ready_s=ready, tail_s=max(0.0, optimizer_start - max(ready)),
            optimizer_s=max(0.0, optimizer_end - optimizer_start), after_s=max(0.0, step_end - optimizer_end)))
    return StepTimes(
        data_s=_median(c.data_s for c in combined), backward_start_s=_median(c.backward_start_s for c in combined),
        ready_s=[_median(c.ready_s[i] for c in combined) for i in range(count)],
        tail_s=_median(c.tail_s for c in combined), optimizer_s=_median(c.optimizer_s for c in combined),
        after_s=_median(c.after_s for c in combined))


@dataclass
class WhatIf:
    world_size: int
    bucket_cap_mb: float
    comm_hook: str = "allreduce"
    bandwidth_scale: float = 1.0
    gradient_as_bucket_view: bool = False
    first_bucket_mb: float | None = None

    def __post_init__(self):
        if self.world_size < 1:
            raise ProjectionError(f"world size must be >= 1; got {self.world_size}")
        if not self.bucket_cap_mb > 0:
            raise ProjectionError(f"bucket cap must be > 0 MB; got {self.bucket_cap_mb}")
        if self.comm_hook not in COMM_HOOKS:
            raise ProjectionError(f"comm hook must be one of {', '.join(COMM_HOOKS)}; got {self.comm_hook!r}")
        if not self.bandwidth_scale > 0:
            raise ProjectionError(f"bandwidth scale must be > 0; got {self.bandwidth_scale}")


@dataclass
class Replay:
    step_s: float
    backward_end_s: float
    comm_end_s: float
    exposed_comm_s: float
    overlapped_comm_s: float
    comm_s: float
    backward_stretch: float
    buckets: list[dict] = field(default_factory=list)


class RunModel:
    """What a record's timeline says about one step, ready to replay under what-ifs."""

    def __init__(self, record: Record):
        if record.spec.strategy != "ddp":
            raise ProjectionError(f"run {record.run_id} is not a DDP run (strategy {record.spec.strategy}); "
                                  "projection replays DDP's gradient buckets")
        if record.timeline is None or not record.timeline.by_rank:
            raise ProjectionError(f"run {record.run_id} has no gradient timeline (it ran with --no-profile, failed "
                                  "before profiling, or was recorded by an older ddpbench); rerun it with profiling on")
        timeline = record.timeline
        self.record = record
        self.param_bytes = timeline.param_bytes
        self.alone = representative([r.without_allreduce for r in timeline.by_rank])
        self.with_ddp = representative([r.with_ddp for r in timeline.by_rank])
        # DDP's rebuilt buckets follow the order in which gradients became ready under DDP.
        self.order = sorted(range(len(self.param_bytes)), key=lambda i: (self.with_ddp.ready_s[i], -i))
        self.costs = timeline.cast_cost
        self.source = WhatIf(world_size=record.spec.world_size, bucket_cap_mb=record.spec.ddp.bucket_cap_mb,
                             comm_hook=record.spec.ddp.comm_hook,
                             gradient_as_bucket_view=record.spec.ddp.gradient_as_bucket_view)
        self.batch_size = record.spec.batch_size or 1
        self.units_per_sample = record.metrics.units_per_sample if record.metrics else 1
        self.sample_unit = record.metrics.sample_unit if record.metrics else "samples"

    def buckets(self, what: WhatIf) -> list[list[int]]:
        first = int(what.first_bucket_mb * MIB) if what.first_bucket_mb else None
        return rebucket(self.order, self.param_bytes, int(what.bucket_cap_mb * MIB), first)

    def replay(self, what: WhatIf, comm_seconds, extra_per_overlap: float = 0.0, fixed_extra_s: float = 0.0) -> Replay:
        """One step under `what`; comm_seconds(bytes) is one all-reduce's time on the network."""
        base = self.alone
        span_alone = base.backward_span_s
        hook = None if what.comm_hook == "allreduce" else getattr(self.costs, what.comm_hook)
        copy_rate = self.costs.copy_s_per_byte
        bucket_of = {}
        buckets = self.buckets(what)
        for number, members in enumerate(buckets):
            for index in members:
                bucket_of[index] = number
        stretch, result = 1.0 + (fixed_extra_s / span_alone if span_alone > 0 else 0.0), None
        for _ in range(FIXED_POINT_ROUNDS):
            overhead, remaining = 0.0, [len(m) for m in buckets]
            ready_at, last_grad = [0.0] * len(buckets), base.backward_start_s
            for index in sorted(range(len(self.param_bytes)), key=lambda i: base.ready_s[i]):
                now = base.backward_start_s + (base.ready_s[index] - base.backward_start_s) * stretch + overhead
                overhead += copy_rate * self.param_bytes[index]  # into the bucket, on the backward thread
                number = bucket_of[index]
                remaining[number] -= 1
                if remaining[number] == 0:
                    size = sum(self.param_bytes[i] for i in buckets[number])
                    if hook:
                        overhead += hook.compress_s_per_byte * size
                    ready_at[number] = now + copy_rate * self.param_bytes[index] + (hook.compress_s_per_byte * size if hook else 0)
                last_grad = max(last_grad, now + copy_rate * self.param_bytes[index])
            backward_end = max([last_grad, *ready_at]) + base.tail_s  # a last bucket's cast runs on backward's thread
            queue_free, rows, overlapped, total_comm = 0.0, [], 0.0, 0.0
            for number, members in enumerate(buckets):
                size = sum(self.param_bytes[i] for i in members)
                wire_bytes = size / 2 if hook else size
                seconds = comm_seconds(wire_bytes) + (hook.decompress_s_per_byte * size if hook else 0.0)
                start = max(ready_at[number], queue_free)
                queue_free = start + seconds
                total_comm += seconds
                overlapped += max(0.0, min(queue_free, backward_end) - max(start, base.backward_start_s))
                rows.append({"bucket": number, "params": len(members), "bytes": size, "wire_bytes": wire_bytes,
                             "ready_s": ready_at[number], "start_s": start, "end_s": queue_free})
            finalize = 0.0 if what.gradient_as_bucket_view else copy_rate * sum(self.param_bytes)
            optimizer_start = max(backward_end, queue_free) + finalize
            step = base.data_s + optimizer_start + base.optimizer_s + base.after_s
            result = Replay(step_s=step, backward_end_s=backward_end, comm_end_s=queue_free,
                            exposed_comm_s=max(0.0, queue_free - backward_end), overlapped_comm_s=overlapped,
                            comm_s=total_comm, backward_stretch=stretch, buckets=rows)
            new_stretch = 1.0 + (extra_per_overlap * overlapped + fixed_extra_s) / span_alone if span_alone > 0 else 1.0
            if abs(new_stretch - stretch) < 1e-4:
                break
            stretch = new_stretch
        return result

    def interference(self, profile: dict) -> tuple[float, float]:
        """From the run itself: extra backward seconds per second of overlapped communication, and
        (when the run had no overlap to blame) a fixed extra. Backward under DDP minus backward
        alone, after the copies and casts the replay models anyway."""
        measured_span = self.with_ddp.backward_span_s
        plain = self.replay(self.source, lambda b: predict(profile, "all_reduce", self.source.world_size, b).seconds)
        modelled_span = plain.backward_end_s - self.alone.tail_s - self.alone.backward_start_s
        extra = max(0.0, measured_span - modelled_span)
        if plain.overlapped_comm_s > 0.01 * self.alone.backward_span_s:
            return extra / plain.overlapped_comm_s, 0.0
        return 0.0, extra

    def timeline_step_s(self) -> float:
        """The run's own DDP step in the timeline phase (slowest rank's median), measured minutes
        apart from the timed window: the replay's inputs and this come from the same steps."""
        return self.with_ddp.data_s + self.with_ddp.step_s

    def single_device_step_s(self) -> float:
        """X(1)'s step: one device, no wrapper, no communication (the timeline's no_sync steps)."""
        return self.alone.data_s + self.alone.step_s


@dataclass
class Projection:
    what: WhatIf
    profile_name: str
    basis: str
    step_s: float
    step_low_s: float
    step_high_s: float
    exposed_comm_s: float
    comm_s: float
    backward_stretch: float
    buckets: int
    throughput: float
    throughput_low: float
    throughput_high: float
    efficiency: float
    efficiency_low: float
    efficiency_high: float
    sample_unit: str
    measured_step_s: float | None = None
    """The source run's median iteration time (when the what-if is the run itself)."""

    def as_dict(self) -> dict:
        data = dict(self.__dict__)
        data["what"] = dict(self.what.__dict__)
        return data


def project(record: Record, profile: dict, what: WhatIf) -> Projection:
    model = RunModel(record)
    per_overlap, fixed = model.interference(profile)

    def run_with(which: str) -> Replay:
        def seconds(size_bytes: float) -> float:
            prediction = predict(profile, "all_reduce", what.world_size, size_bytes, what.bandwidth_scale)
            return {"mid": prediction.seconds, "low": prediction.low_s, "high": prediction.high_s}[which]
        return model.replay(what, seconds, per_overlap, fixed)

    mid, fast, slow = run_with("mid"), run_with("low"), run_with("high")
    basis = predict(profile, "all_reduce", what.world_size, 1.0).basis
    samples = model.batch_size * what.world_size * model.units_per_sample
    single = model.single_device_step_s()
    efficiency = lambda step: single / step  # noqa: E731  (weak scaling: X(N)/(N X(1)) = step(1)/step(N))
    same_as_run = what == replace(model.source, first_bucket_mb=what.first_bucket_mb)
    measured = record.metrics.iteration_time_s.p50 if (record.metrics and same_as_run) else None
    return Projection(
        what=what, profile_name=str(profile.get("name")), basis=basis, step_s=mid.step_s,
        step_low_s=fast.step_s, step_high_s=slow.step_s, exposed_comm_s=mid.exposed_comm_s, comm_s=mid.comm_s,
        backward_stretch=mid.backward_stretch, buckets=len(mid.buckets),
        throughput=samples / mid.step_s, throughput_low=samples / slow.step_s, throughput_high=samples / fast.step_s,
        efficiency=efficiency(mid.step_s), efficiency_low=efficiency(slow.step_s),
        efficiency_high=efficiency(fast.step_s), sample_unit=model.sample_unit, measured_step_s=measured)


def format_projection(projection: Projection, record: Record) -> str:
    what = projection.what
    knobs = [f"bucket cap {what.bucket_cap_mb:g} MB", f"comm hook {what.comm_hook}"]
    if what.bandwidth_scale != 1:
        knobs.append(f"bandwidth x{what.bandwidth_scale:g}")
    lines = [
        f"PROJECTION (not a measurement) of {record.run_id} "
        f"(measured: {record.spec.world_size} ranks, {record.spec.backend}, bucket cap {record.spec.ddp.bucket_cap_mb:g} MB, "
        f"{record.spec.ddp.comm_hook})",
        f"  to world size {what.world_size} on profile {projection.profile_name} ({projection.basis}), {', '.join(knobs)}",
        f"  step time        {projection.step_s * 1e3:9.2f} ms   band {projection.step_low_s * 1e3:.2f} .. {projection.step_high_s * 1e3:.2f} ms",
        f"  exposed comm     {projection.exposed_comm_s * 1e3:9.2f} ms   of {projection.comm_s * 1e3:.2f} ms all-reduce over {projection.buckets} buckets",
        f"  backward slowed  x{projection.backward_stretch:.3f} by overlapping communication (measured rate)",
        f"  throughput       {projection.throughput:9.1f} {projection.sample_unit}/s   band {projection.throughput_low:.1f} .. {projection.throughput_high:.1f}",
        f"  efficiency E(N)  {projection.efficiency:9.1%}   band {projection.efficiency_low:.1%} .. {projection.efficiency_high:.1%} "
        "(against one device without DDP, from the run's no_sync steps)",
    ]
    if projection.measured_step_s is not None:
        error = projection.step_s / projection.measured_step_s - 1
        lines.append(f"  measured         {projection.measured_step_s * 1e3:9.2f} ms   (median iteration time of the run; "
                     f"projection {error:+.1%})")
    return "\n".join(lines)


def _setting(record: Record) -> tuple:
    spec = record.spec
    return (spec.workload, spec.size, spec.batch_size, spec.world_size, spec.precision, spec.device)


def _is_default(record: Record) -> bool:
    knobs = record.spec.ddp
    return knobs.bucket_cap_mb == 25.0 and knobs.comm_hook == "allreduce" and not knobs.gradient_as_bucket_view \
        and not knobs.static_graph


def validation_cases(records: list[Record], profile: dict) -> list[dict]:
    """Projection against measurement, for every group of DDP runs that share everything but the
    bucket cap and the comm hook: the first run with the defaults (cap 25 MB, plain all-reduce)
    is replayed as itself (next to the spread between default runs) and projected to every other
    run's knobs."""
    groups: dict[tuple, list[Record]] = {}
    for record in records:
        if record.status == "ok" and record.spec.strategy == "ddp" and record.timeline and record.metrics:
            groups.setdefault(_setting(record), []).append(record)
    cases = []
    for setting, members in sorted(groups.items(), key=lambda item: str(item[0])):
        defaults = sorted((r for r in members if _is_default(r)), key=lambda r: (r.started_at or "", r.run_id))
        if not defaults:
            continue
        source = defaults[0]
        measured = source.metrics.iteration_time_s.p50
        replayed = project(source, profile, RunModel(source).source)
        spread = defaults[1].metrics.iteration_time_s.p50 / measured - 1 if len(defaults) > 1 else None
        cases.append({"workload": setting[0], "kind": "replay", "case": "replay of the run itself",
                      "source": source.run_id, "target": source.run_id, "projected_s": replayed.step_s,
                      "measured_s": measured, "error": replayed.step_s / measured - 1, "spread": spread,
                      "timeline_step_s": RunModel(source).timeline_step_s(),
                      "band_s": [replayed.step_low_s, replayed.step_high_s]})
        for target in sorted(members, key=lambda r: r.run_id):
            if _is_default(target):
                continue
            knobs = target.spec.ddp
            what = WhatIf(world_size=target.spec.world_size, bucket_cap_mb=knobs.bucket_cap_mb,
                          comm_hook=knobs.comm_hook, gradient_as_bucket_view=knobs.gradient_as_bucket_view)
            projected = project(source, profile, what)
            label = f"bucket cap {knobs.bucket_cap_mb:g} MB" if knobs.comm_hook == "allreduce" else knobs.comm_hook
            measured = target.metrics.iteration_time_s.p50
            cases.append({"workload": setting[0], "kind": "what-if", "case": label, "source": source.run_id,
                          "target": target.run_id, "projected_s": projected.step_s, "measured_s": measured,
                          "error": projected.step_s / measured - 1, "spread": spread,
                          "timeline_step_s": RunModel(target).timeline_step_s(),
                          "band_s": [projected.step_low_s, projected.step_high_s]})
    return cases
