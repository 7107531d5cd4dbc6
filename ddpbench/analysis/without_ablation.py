"""The labelled path for DDP runs without the in-process ablation (a script's run, --no-profile, a
compiled, fsdp2 or replicate run, a record made before the ablation): each cause from wherever the
run measured it, once, without an interval, so none is a finding; the wait for the slowest rank
from the one definition (`straggler`), which has its own interval. No torch.

Nothing here calls the ablation's path, nor it this: a run is answered by one or the other.
"""

from __future__ import annotations

import statistics

from ddpbench.analysis.ablation import after_backward, backward_span, median_of_others
from ddpbench.analysis.causes import Cause, RunAnswer, step_time_s
from ddpbench.analysis.configurations import efficiency_against
from ddpbench.analysis.estimates import Estimate
from ddpbench.analysis.straggler import without_ablation as straggler_without_ablation
from ddpbench.records.schema import Record

NOT_IN_PLACE = "not measured in place (no in-process ablation: {why}); "


def _once(value: float) -> Estimate:
    """One measurement with no interval: never a finding."""
    return Estimate(value, None, None, 1, "once", None)


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def _per_rank(record: Record, kind_a: str, kind_b: str, read) -> list[float]:
    """Per rank, the median of `read` over its `kind_a` steps less over its `kind_b` steps."""
    found = []
    for rank in record.timeline.by_rank if record.timeline else []:
        a = _median([v for v in map(read, getattr(rank, kind_a) or []) if v is not None])
        b = _median([v for v in map(read, getattr(rank, kind_b) or []) if v is not None])
        if a is not None and b is not None:
            found.append(a - b)
    return found


def _median_rank(values: list[float]) -> float:
    return median_of_others(sorted(values))


def ddp_overhead(record: Record) -> tuple[float | None, str]:
    if record.timeline is None:
        return None, "the record has no gradient timeline"
    step = lambda s: s.step_s  # noqa: E731
    if all(rank.unwrapped for rank in record.timeline.by_rank):
        values = _per_rank(record, "solo", "unwrapped", step)
        if values:
            return _median_rank(values), "timeline: DDP on one rank against the model unwrapped, the median rank"
    values = _per_rank(record, "solo", "without_allreduce", step)
    if values:
        return _median_rank(
            values
        ), "timeline: DDP on one rank against no_sync steps (the wrapper's forward is left out)"
    return None, "the gradient timeline has no steps of DDP on one rank"


def bucket_copies(record: Record) -> float | None:
    """DDP on one rank's step against the no_sync step, the median rank: the copies no_sync skips."""
    values = _per_rank(record, "solo", "without_allreduce", lambda step: step.step_s)
    return _median_rank(values) if values else None


def overlap_slowdown(record: Record) -> tuple[float | None, str]:
    values = _per_rank(record, "with_ddp", "solo", backward_span)
    if not values:
        return None, "no gradient timeline with DDP on one rank to compare backward with"
    return _median_rank(values), "timeline: backward with DDP's all-reduce against DDP on one rank, the median rank"


def exposed_comm(record: Record) -> tuple[float | None, str]:
    trace = record.overlap.trace if record.overlap else None
    exposed = [
        view.exposed_comm_us_per_step / 1e6
        for view in (trace.by_rank if trace else [])
        if view.exposed_comm_us_per_step is not None
    ]
    if exposed:
        return min(exposed), "trace: the profiled steps of the rank that waits least (the transfer, not the wait)"
    waits = []
    for rank in record.timeline.by_rank if record.timeline else []:
        value = _median([v for v in map(after_backward, rank.with_ddp) if v is not None])
        if value is not None:
            waits.append(value)
    if waits:
        return min(waits), "timeline: the wait for the last all-reduce after backward, the rank that waits least"
    return None, "no trace and no gradient timeline (both need profiling on: drop --no-profile)"


def data_wait(record: Record) -> float | None:
    """The slowest rank's mean wait for its batch in the timed window (it sets the pace)."""
    values = [rank.data_wait_mean_s for rank in record.ranks if rank.data_wait_mean_s is not None]
    return max(values) if values else None


def answer_without_ablation(
    record: Record, references: list[Record], reference_ids: list[str], why: str, job=None
) -> RunAnswer:
    """The labelled path: causes measured elsewhere in the run, each once; `job` is the run's
    matched traces (`collectives.match_job`) where the caller has them, for the straggler."""
    step = step_time_s(record)
    reference_step, efficiency = efficiency_against(record, references)
    prefix = NOT_IN_PLACE.format(why=why)
    measured = {
        "ddp_overhead": ddp_overhead(record),
        "exposed_comm": exposed_comm(record),
        "overlap_slowdown": overlap_slowdown(record),
    }
    data_n = data_wait(record)
    data_1 = _median([v for v in map(data_wait, references) if v is not None])
    measured["data"] = (
        (data_n - data_1, "timed window: the wait for data at N against the reference's")
        if data_n is not None and data_1 is not None
        else (None, "the run or its reference has no data-loading times")
    )
    causes: dict[str, Cause] = {}
    for name, (value, basis) in measured.items():
        if value is None:
            causes[name] = Cause(None, None, prefix + basis)
        else:
            causes[name] = Cause(_once(value), _once(100 * value / step), prefix + basis)
    for name in ("contention", "forward_optimizer"):
        causes[name] = Cause(None, None, f"not measured: it needs the in-process ablation ({why})")
    straggler = straggler_without_ablation(record, job, why)
    if straggler.wait is None:
        causes["straggler_wait"] = Cause(None, None, straggler.why_not)
    else:
        causes["straggler_wait"] = Cause(straggler.wait, straggler.wait.scaled(100 / step), straggler.source)
    return RunAnswer(
        record,
        step,
        reference_step,
        reference_ids,
        efficiency,
        None,
        causes,
        straggler,
        in_place=False,
        basis=why,
    )
