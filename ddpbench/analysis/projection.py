"""Replay one DDP step from a measured run for another world size, network, bucket size or
gradient compression (`ddpbench project`). No torch.

What the replay takes from the run (its `timeline`; per step the slowest rank, then the median
over steps): forward, backward and optimizer as measured; the order in which gradients become
ready; DDP's own work per step, from steps through DDP over a process group of one rank (or, in
older records, modelled from the measured cost of its copies and the hooks' casts); and from the
contention probe, how much backward and an all-reduce slow each other when they run at once.
What it takes from the network profile: the time of one all_reduce of S bytes (of the element
type on the wire) at world size N.

One step, as DDP runs it:
0. forward, data loading and the optimizer as measured in the DDP steps (the timeline's steps
   most like the timed ones: each follows a DDP step; the optimizer works on the gradients DDP
   copied back);
1. backward produces gradients in the measured order and times. From the one-rank DDP steps,
   DDP's own work under the run's knobs (copies into buckets, a hook's casts, finalizing) is in
   the measurement, and only what a what-if changes (another hook, gradient_as_bucket_view) is
   added at the measured cost per byte. Older records replay backward alone (no_sync steps) and
   add all of DDP's copies on the thread that runs backward;
2. a bucket is ready when its last gradient is (and, with a compression hook, cast to half on
   the same thread);
3. buckets are all-reduced one at a time, in order, on one communication queue (NCCL's one
   stream; gloo can run two at once, which this does not model);
4. while an all-reduce and backward run at the same time, backward advances at the probe's
   backward rate and the all-reduce at its communication rate (both 1 when they do not
   interfere or were not measured);
5. the step ends when backward and the last all-reduce are done, DDP has finalized (copied the
   buckets back into the gradients unless gradient_as_bucket_view), and the optimizer has run.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from dataclasses import dataclass, field, replace

from ddpbench.analysis.network import ProfileError, predict
from ddpbench.config.spec import COMM_HOOKS
from ddpbench.records.schema import Record

MIB = 1024 * 1024
SLOWEST_RATE = 0.05
"""A floor on the rates: an estimate below it (an all-reduce that barely moves while backward
runs) is taken as this, so that a replay always ends."""
WIRE_DTYPE = {"allreduce": "float32", "fp16_compress": "float16", "bf16_compress": "bfloat16"}
"""What each hook all-reduces (gradients are float32; the compression hooks send halves)."""


class ProjectionError(ValueError):
    """A run that cannot be replayed, or a what-if that makes no sense; says which and why."""


def rebucket(
    order: list[int], param_bytes: list[int], cap_bytes: int, first_cap_bytes: int | None = None
) -> list[list[int]]:
    """DDP's bucket assignment (compute_bucket_assignment_by_size) over parameters in `order`.

    Re-bucketing (`bucket_cap_mb`) follows DDP's rebuild after its first iteration: parameters in
    gradient-ready order (roughly the reverse of definition order), a bucket closes as soon as it
    reaches its cap (so a parameter is never split and a bucket may overshoot), and the first bucket
    has its own cap. torch 2.14 uses a 1 MiB first bucket only when bucket_cap_mb is left unset; when
    it is given (ddpbench always gives it) the first bucket has the same cap.
    """
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
        combined.append(
            StepTimes(
                data_s=_slowest(s.data_s for s in same_step),
                backward_start_s=_slowest(s.backward_start_s for s in same_step),
                ready_s=ready,
                tail_s=max(0.0, optimizer_start - max(ready)),
                optimizer_s=max(0.0, optimizer_end - optimizer_start),
                after_s=max(0.0, step_end - optimizer_end),
            )
        )
    return StepTimes(
        data_s=_median(c.data_s for c in combined),
        backward_start_s=_median(c.backward_start_s for c in combined),
        ready_s=[_median(c.ready_s[i] for c in combined) for i in range(count)],
        tail_s=_median(c.tail_s for c in combined),
        optimizer_s=_median(c.optimizer_s for c in combined),
        after_s=_median(c.after_s for c in combined),
    )


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
    """Time during which an all-reduce and backward ran at once."""
    comm_s: float
    """All-reduce time on an idle machine (the profile's), plus a hook's decompression, summed
    over buckets."""
    backward_slowdown: float
    """Backward's span in the replay over its span alone (copies, casts and contention)."""
    buckets: list[dict] = field(default_factory=list)


@dataclass(frozen=True)
class Contention:
    """While an all-reduce and backward run at once: backward seconds done per second, and
    all-reduce seconds (of its time alone) done per second."""

    backward_rate: float = 1.0
    comm_rate: float = 1.0
    basis: str = "not measured: assumed none"


SHORTEST_OVERLAP = 0.25
"""Rates need the shorter job to last at least this share of the longer one: the rate is one
minus the slowdown divided by the overlap, and a short overlap turns jitter into a rate."""


def _round_rates(c0: float, c1: float, b0: float, b1: float) -> tuple[float, float] | None:
    """One round's (backward rate, all-reduce rate): the job that finished first ran at its rate
    for the whole overlap, the other for the overlap and then at full speed."""
    if min(c0, c1, b0, b1) <= 0 or min(b1, c1) < SHORTEST_OVERLAP * max(b1, c1):
        return None
    if c1 <= b1:  # the all-reduce finished inside backward
        return (b0 - (b1 - c1)) / c1, c0 / c1
    return b0 / b1, (c0 - (c1 - b1)) / b1  # backward finished first


def contention_rates(probes: list) -> Contention:
    """Both rates from the ranks' contention probes. Per round the all-reduce's times are the
    minimum over ranks (a rank's interval includes waiting for its peer) and backward's the
    maximum (the slowest rank sets the pace); each round gives its rates (`_round_rates`), and the
    median over rounds is the estimate. Rounds whose overlap is too short to tell are left out;
    with fewer than half the rounds left, nothing is claimed."""
    probes = [p for p in probes if p is not None and p.comm_alone_s]
    if not probes:
        return Contention(
            basis="not measured (no probe: one rank, a model output that cannot mark the start of "
            "backward, or an older record): assumed none"
        )
    rounds = min(len(p.comm_alone_s) for p in probes)
    found = []
    for i in range(rounds):
        rates = _round_rates(
            min(p.comm_alone_s[i] for p in probes),
            min(p.comm_with_backward_s[i] for p in probes),
            max(p.backward_alone_s[i] for p in probes),
            max(p.backward_with_comm_s[i] for p in probes),
        )
        if rates is not None:
            found.append(rates)
    if len(found) * 2 < rounds:
        return Contention(
            basis=f"not measured: in {rounds - len(found)} of {rounds} probe rounds backward and the "
            f"all-reduce overlapped too little to tell; assumed none"
        )
    clamp = lambda rate: min(1.0, max(SLOWEST_RATE, rate))  # noqa: E731
    backward, comm = clamp(_median(r[0] for r in found)), clamp(_median(r[1] for r in found))
    middle = lambda name, pick: _median(pick(getattr(p, name)[i] for p in probes) for i in range(rounds))  # noqa: E731
    return Contention(
        backward,
        comm,
        f"measured: {len(probes)} ranks x {len(found)} rounds, backward "
        f"{middle('backward_alone_s', max) * 1e3:.1f} ms alone and "
        f"{middle('backward_with_comm_s', max) * 1e3:.1f} ms with an all-reduce of "
        f"{probes[0].probe_bytes / MIB:.1f} MiB that took {middle('comm_alone_s', min) * 1e3:.1f} ms "
        f"alone and {middle('comm_with_backward_s', min) * 1e3:.1f} ms with backward",
    )


class RunModel:
    """What a record's timeline says about one step, ready to replay under what-ifs."""

    def __init__(self, record: Record):
        if record.spec.strategy != "ddp":
            raise ProjectionError(
                f"run {record.run_id} is not a DDP run (strategy {record.spec.strategy}); "
                "projection replays DDP's gradient buckets"
            )
        if record.timeline is None or not record.timeline.by_rank:
            raise ProjectionError(
                f"run {record.run_id} has no gradient timeline (it ran with --no-profile, failed "
                "before profiling, or was recorded by an older ddpbench); rerun it with profiling on"
            )
        timeline = record.timeline
        self.record = record
        self.param_bytes = timeline.param_bytes
        self.alone = representative([r.without_allreduce for r in timeline.by_rank])
        solo = [r.solo for r in timeline.by_rank]
        if not all(solo) and timeline.ladder is not None and record.spec.world_size == 1:
            # The ladder steps no separate one-rank DDP at one rank: the run's own DDP is one.
            solo = [r.with_ddp for r in timeline.by_rank]
        self.solo = representative(solo) if all(solo) else None
        self.with_ddp = representative([r.with_ddp for r in timeline.by_rank])
        # DDP's rebuilt buckets follow the order in which gradients became ready under DDP.
        self.order = sorted(range(len(self.param_bytes)), key=lambda i: (self.with_ddp.ready_s[i], -i))
        self.costs = timeline.cast_cost
        self.contention = contention_rates([r.contention for r in timeline.by_rank])
        self.source = WhatIf(
            world_size=record.spec.world_size,
            bucket_cap_mb=record.spec.ddp.bucket_cap_mb,
            comm_hook=record.spec.ddp.comm_hook,
            gradient_as_bucket_view=record.spec.ddp.gradient_as_bucket_view,
        )
        self.source_buckets = self.buckets(self.source)  # the run's own, which every what-if compares with
        self.batch_size = record.spec.batch_size or 1
        self.units_per_sample = record.metrics.units_per_sample if record.metrics else 1
        self.sample_unit = record.metrics.sample_unit if record.metrics else "samples"

    def buckets(self, what: WhatIf) -> list[list[int]]:
        first = int(what.first_bucket_mb * MIB) if what.first_bucket_mb else None
        return rebucket(self.order, self.param_bytes, int(what.bucket_cap_mb * MIB), first)

    @property
    def base(self) -> StepTimes:
        """The steps the replay's backward comes from (when each gradient is ready, and what
        follows the last one): DDP over a one-rank group (DDP's own work, no network) where the
        record has them, else the no_sync steps (backward alone). Forward comes from the DDP
        steps (see `replay`)."""
        return self.solo or self.alone

    def _ddp_work(self, what: WhatIf, order: list[int], buckets: list[list[int]]) -> tuple[dict[int, float], float]:
        """Modelled work DDP adds under `what`: per parameter in `order`, the seconds added on
        backward's thread up to and including it (its copy into the bucket; a hook's cast when it
        completes a bucket); and the copy back into the gradients after the all-reduce."""
        hook = None if what.comm_hook == "allreduce" else getattr(self.costs, what.comm_hook)
        # Into the bucket: with a hook a plain copy (the hook divides); without, the copy divides.
        # With gradient_as_bucket_view the gradient already is the bucket: no copy; without a hook
        # DDP still divides it in place, a pass over the same bytes.
        if what.gradient_as_bucket_view:
            copy_rate = 0.0 if hook else self.costs.copy_s_per_byte
        else:
            copy_rate = (
                self.costs.copy_s_per_byte
                if hook
                else (self.costs.scaled_copy_s_per_byte or self.costs.copy_s_per_byte)
            )
        per_call = 0.0 if what.gradient_as_bucket_view and hook else (self.costs.copy_call_s or 0.0)
        bucket_of = {index: number for number, members in enumerate(buckets) for index in members}
        remaining = [len(members) for members in buckets]
        added, total = {}, 0.0
        for index in order:
            total += per_call + copy_rate * self.param_bytes[index]
            number = bucket_of[index]
            remaining[number] -= 1
            if remaining[number] == 0 and hook:
                total += hook.compress_s_per_byte * sum(self.param_bytes[i] for i in buckets[number])
            added[index] = total
        copy_back = (
            0.0
            if what.gradient_as_bucket_view
            else self.costs.copy_s_per_byte * sum(self.param_bytes) + per_call * len(self.param_bytes)
        )
        return added, copy_back

    def backward_work(self, what: WhatIf, buckets: list[list[int]]) -> tuple[list[float], float, float]:
        """In seconds from backward's start: when each bucket is ready and backward's whole work,
        with DDP's work on the thread that runs backward; and what follows the last all-reduce
        before the optimizer. From one-rank DDP steps, DDP's own work under the run's knobs is in
        the measurement and only the what-if's difference to them is added; from no_sync steps,
        all of it is modelled."""
        base = self.base
        order = sorted(range(len(self.param_bytes)), key=lambda i: base.ready_s[i])
        added, copy_back = self._ddp_work(what, order, buckets)
        if self.solo is not None:
            measured, measured_back = self._ddp_work(self.source, order, self.source_buckets)
            added = {index: added[index] - measured[index] for index in order}
            # The solo steps' tail holds finalizing: the copy back, and a one-rank all-reduce.
            after_comm, tail = base.tail_s + copy_back - measured_back, 0.0
        else:
            after_comm, tail = copy_back, base.tail_s
        done = {index: base.ready_s[index] - base.backward_start_s + added[index] for index in order}
        ready_at = [max(done[index] for index in members) for members in buckets]
        return ready_at, max(done.values()) + tail, max(0.0, after_comm)

    def replay(self, what: WhatIf, comm_seconds, contention: Contention | None = None) -> Replay:
        """One step under `what`; comm_seconds(bytes, dtype) is one all-reduce's time on an idle
        network. Backward and the all-reduce queue advance together, each at its contention rate
        while the other is busy, from event to event (a bucket ready, an all-reduce done,
        backward done)."""
        contention = contention or self.contention
        # Forward as the DDP steps measured it: with the lead-in (`Timeline.ddp_lead_in`) they are
        # the timeline's steps that run as the timed ones do, each after a DDP step. Their forward
        # and that of the no_sync steps right after them took longer than the one-rank steps'
        # (medians over two validation sets' runs: mlp 4.0 and 3.9 ms against 3.0; resnet50 23.2
        # to 23.7 and 21.8 to 22.1 against 20.4 to 20.5; vit_b_16 2.2 to 2.3 ms in all three).
        # Why, the timeline cannot tell; taking the one-rank steps' forward left replays shorter.
        forward_s = self.with_ddp.backward_start_s
        hook = None if what.comm_hook == "allreduce" else getattr(self.costs, what.comm_hook)
        buckets = self.buckets(what)
        ready_at, work, finalize = self.backward_work(what, buckets)
        sizes = [sum(self.param_bytes[i] for i in members) for members in buckets]
        wire = [size / 2 if hook else size for size in sizes]
        durations = [
            comm_seconds(wire[n], WIRE_DTYPE[what.comm_hook]) + (hook.decompress_s_per_byte * sizes[n] if hook else 0.0)
            for n in range(len(buckets))
        ]
        if not all(math.isfinite(d) and d >= 0 for d in durations):
            raise ProjectionError(
                "the profile gives an all-reduce time that is not a finite, non-negative number "
                f"of seconds: {next(d for d in durations if not (math.isfinite(d) and d >= 0))}"
            )
        clock, done, overlapped = 0.0, 0.0, 0.0  # from backward's start; backward's work done so far
        current, left, backward_end = 0, None, None  # the bucket being all-reduced, and its time left
        starts, ends = [0.0] * len(buckets), [0.0] * len(buckets)
        for _ in range(4 * len(buckets) + 8):  # each pass starts or ends a bucket, or ends backward
            if left is None and current < len(buckets) and done >= ready_at[current] - 1e-12:
                left, starts[current] = durations[current], clock
            backward_busy, comm_busy = done < work - 1e-12, left is not None
            if backward_end is None and not backward_busy:
                backward_end = clock
            if not backward_busy and not comm_busy:
                break
            both = backward_busy and comm_busy
            backward_rate = contention.backward_rate if both else 1.0
            comm_rate = contention.comm_rate if both else 1.0
            # Backward runs to the next bucket it makes ready (when the queue waits for it) or to its end.
            target = ready_at[current] if (not comm_busy and current < len(buckets)) else work
            steps = [(target - done) / backward_rate] if backward_busy else []
            if comm_busy:
                steps.append(left / comm_rate)
            step = max(0.0, min(steps))
            clock += step
            if backward_busy:
                done = min(work, done + step * backward_rate)
            if both:
                overlapped += step
            if comm_busy:
                left -= step * comm_rate
                if left <= 1e-12:
                    ends[current], current, left = clock, current + 1, None
        else:
            raise ProjectionError("the replay did not finish (a bug: please report it with the record)")
        comm_end = ends[-1] if buckets else 0.0
        optimizer_start = forward_s + max(backward_end, comm_end) + finalize
        rows = [
            {
                "bucket": n,
                "params": len(members),
                "bytes": sizes[n],
                "wire_bytes": wire[n],
                "ready_s": forward_s + ready_at[n],
                "start_s": forward_s + starts[n],
                "end_s": forward_s + ends[n],
            }
            for n, members in enumerate(buckets)
        ]
        span_alone = self.alone.backward_span_s + self.alone.tail_s
        # The optimizer (and what follows it) as the DDP steps measured it: it runs on the
        # gradients DDP has just copied back, which the bucket cap and the hook do not change.
        after = self.with_ddp
        return Replay(
            step_s=after.data_s + optimizer_start + after.optimizer_s + after.after_s,
            backward_end_s=forward_s + backward_end,
            comm_end_s=forward_s + comm_end,
            exposed_comm_s=max(0.0, comm_end - backward_end),
            overlapped_comm_s=overlapped,
            comm_s=sum(durations),
            backward_slowdown=backward_end / span_alone if span_alone > 0 else 1.0,
            buckets=rows,
        )

    def timeline_step_s(self) -> float:
        """The run's own DDP step in the timeline phase (slowest rank's median), measured at the
        end of the run, apart from the timed window: the replay's inputs and this come from the
        same steps."""
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
    backward_slowdown: float
    contention: Contention
    buckets: int
    throughput: float
    throughput_low: float
    throughput_high: float
    efficiency: float
    efficiency_low: float
    efficiency_high: float
    efficiency_reference: str
    """What X(1) the efficiency divides by: the sweep's local run, or the run's own no_sync steps."""
    sample_unit: str
    measured_step_s: float | None = None
    """The source run's median iteration time (when the what-if is the run itself)."""
    ddp_work: str = ""
    """Where DDP's own work per step came from: measured in one-rank DDP steps, or modelled."""
    modelled_step_s: float = 0.0
    """The replay from the run's parts alone, before anchoring on its measured step."""
    unexplained_s: float | None = None
    """The run's measured step minus the replay of the run itself (added to step_s); None when
    the projection is not anchored."""
    anchor: str = ""
    """How the projection is anchored on the run's measurement, or why it is not."""

    def as_dict(self) -> dict:
        data = dict(self.__dict__)
        data["what"] = dict(self.what.__dict__)
        data["contention"] = dataclasses.asdict(self.contention)
        return data


def all_reduce_seconds(profile: dict, world_size: int, bandwidth_scale: float = 1.0, which: str = "mid"):
    """The replay's comm_seconds(bytes, dtype) from a network profile: its prediction, or the low
    or high end of its band."""

    def seconds(size_bytes: float, dtype: str) -> float:
        prediction = predict(profile, "all_reduce", world_size, size_bytes, bandwidth_scale, dtype)
        return {"mid": prediction.seconds, "low": prediction.low_s, "high": prediction.high_s}[which]

    return seconds


NO_SYNC_REFERENCE = "one device without DDP from the run's own no_sync steps"


def project(
    record: Record, profile: dict, what: WhatIf, reference_throughput: float | None = None, reference: str = ""
) -> Projection:
    """`reference_throughput` is X(1) in the run's unit per second, the scaling table's (its
    sweep's local run), so the projection's efficiency is the table's; without it, X(1) is the
    step of one device from the run's own no_sync steps, and `efficiency_reference` says so."""
    model = RunModel(record)
    if profile.get("backend") and profile.get("backend") != record.spec.backend:
        # The probe measured this machine's backward against its own collectives: it says nothing
        # about another fabric's (a gloo CPU run projected onto an NVSwitch preset).
        model.contention = Contention(
            basis=f"measured on {record.spec.backend}, not applied to a "
            f"{profile.get('backend')} profile: assumed none"
        )

    mid, fast, slow = (
        model.replay(what, all_reduce_seconds(profile, what.world_size, what.bandwidth_scale, which))
        for which in ("mid", "low", "high")
    )
    unexplained, anchor = _anchor(model, record, profile, what)
    if unexplained is not None and fast.step_s + unexplained <= 0:  # a guard: _anchor refuses such runs first
        unexplained, anchor = (
            None,
            (
                f"not anchored: taking the {-unexplained * 1e3:.2f} ms by which the replay "
                "overestimates the run's own step would leave no step"
            ),
        )
    shift = unexplained or 0.0
    step, step_low, step_high = mid.step_s + shift, fast.step_s + shift, slow.step_s + shift
    basis = predict(profile, "all_reduce", what.world_size, 1.0, dtype=WIRE_DTYPE[what.comm_hook]).basis
    samples = model.batch_size * what.world_size * model.units_per_sample
    if reference_throughput and record.spec.scaling != "weak":
        # The projection keeps the per-device batch: a strong-scaling X(1) (one device taking the
        # whole global batch) is not the reference of its world sizes.
        reference_throughput, reference = None, "strong-scaling record: its local run is not a per-device reference"
    if reference_throughput:

        def efficiency(step: float) -> float:  # E(N) = X(N) / (N X(1))
            return samples / step / (what.world_size * reference_throughput)
    else:
        single = model.single_device_step_s()

        def efficiency(step: float) -> float:  # weak scaling: X(N)/(N X(1)) = step(1)/step(N)
            return single / step

        reference = f"{NO_SYNC_REFERENCE}{f' ({reference})' if reference else ''}"
    same_as_run = what == replace(model.source, first_bucket_mb=what.first_bucket_mb)
    measured = record.metrics.iteration_time_s.p50 if (record.metrics and same_as_run) else None
    return Projection(
        what=what,
        profile_name=str(profile.get("name")),
        basis=basis,
        step_s=step,
        step_low_s=step_low,
        step_high_s=step_high,
        exposed_comm_s=mid.exposed_comm_s,
        comm_s=mid.comm_s,
        backward_slowdown=mid.backward_slowdown,
        contention=model.contention,
        buckets=len(mid.buckets),
        throughput=samples / step,
        throughput_low=samples / step_high,
        throughput_high=samples / step_low,
        efficiency=efficiency(step),
        efficiency_low=efficiency(step_high),
        efficiency_high=efficiency(step_low),
        efficiency_reference=reference,
        sample_unit=model.sample_unit,
        measured_step_s=measured,
        ddp_work="measured (steps through DDP over a one-rank group)"
        if model.solo is not None
        else "modelled from the measured cost of its copies (the record has no one-rank DDP steps)",
        modelled_step_s=mid.step_s,
        unexplained_s=unexplained,
        anchor=anchor,
    )


def _anchor(model: RunModel, record: Record, profile: dict, what: WhatIf) -> tuple[float | None, str]:
    """What the replay from parts misses of the run's own step, on this profile: the run's median
    iteration time minus the replay of the run itself (its own world size and knobs). None, with
    the reason, where it cannot be applied.

    Anchored on the run's own measurement. The replay from these parts does not explain all of a
    measured step: besides the model's own miss (on gloo a small all-reduce inside a step can take
    several times what `ddpbench comm` measures after a barrier), the parts are measured at the end of
    the run, after the profiled and no_sync phases, and a shared machine moves in between. So a
    projection is the run's measured median step plus what the replay says changes: replay(what-if) -
    replay(the run itself), both on the same profile. What the parts miss, measured minus replay of
    the run itself, is shown as `unexplained_s`, and is assumed the same for every what-if and world
    size. It is not applied to a profile of another backend, or one that does not name its backend
    (what gloo on this CPU misses says nothing about NCCL on NVSwitch); to one device from a run of
    several (no all-reduce left to be slow); where the record has no timed steps; or where the
    measured step is less than half the replay's (a replay that far off is not corrected by a shift).
    The projection then is the replay from parts alone, and says so.
    """
    backend = profile.get("backend")
    if backend != record.spec.backend:
        return None, (
            f"not anchored: the run is {record.spec.backend} and the profile "
            f"{backend or 'does not say which backend it measured'}; what the replay misses on one "
            "backend says nothing about another"
        )
    if record.metrics is None:
        return None, "not anchored: the record has no timed steps"
    if what.world_size == 1 and model.source.world_size > 1:
        return None, (
            "not anchored: one device has no all-reduce, and what the replay misses of a "
            f"{model.source.world_size}-rank step is mostly its all-reduces' time inside the step"
        )
    try:
        own = model.replay(model.source, all_reduce_seconds(profile, model.source.world_size))
    except (ProfileError, ProjectionError) as exc:  # e.g. a profile without the run's own element type
        return None, f"not anchored: the profile cannot replay the run itself ({exc})"
    measured = record.metrics.iteration_time_s.p50
    if measured < own.step_s / 2:
        return None, (
            f"not anchored: the run's measured step, {measured * 1e3:.2f} ms, is less than half its "
            f"replay's {own.step_s * 1e3:.2f} ms; the replay is too far off to correct"
        )
    return measured - own.step_s, (
        f"the run's measured step, {measured * 1e3:.2f} ms: its replay from parts gives {own.step_s * 1e3:.2f} ms, "
        f"and the {(measured - own.step_s) * 1e3:+.2f} ms it misses is added"
    )
