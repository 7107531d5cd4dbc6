"""The ladder's terms: differences between step kinds measured in the same DDP run, block by block
(`ddpbench.worker.ladder` runs them), each with a confidence interval from the paired blocks. No
torch.

Every term is a mean over blocks of a per-block difference of step kinds that were stepped, so
each has its own interval; nothing is computed as what the others leave over. They follow the
loss as the user sees it:

    t(N) - t(1) ~ window_vs_ladder                      the timed window against rung 3
                + data                                  loader's wait, rung 3 against rung 0
                + exposed_comm + overlap_slowdown
                  + slowest_rank + unexplained          rung 3 - rung 2 (communication)
                + ddp_work                              rung 2 - rung 1
                + contention                            rung 1 - rung 0
                + reference_vs_rung0                    rung 0 against the sweep's `local` run

and their sum is compared with the loss, not forced to equal it. The in-run loss (rung 3 against
rung 0 of the same rank in the same block) and the in-run efficiency (rung 0 / rung 3) need no
other process: they stand where a `local` run is missing or ran at another speed.

Rungs 1 to 3 are read on the typical rank (the median rank by its own one-rank DDP step; with an
even count the faster middle one). Its communication rung is split by the step's marks, each
against its own one-rank DDP step: backward's span (`overlap_slowdown`: the all-reduces beside
it), the waits outside the module's work (before its forward, where DDP broadcasts buffers, and
from the last gradient to the optimizer, where it waits for the last all-reduces), and the rest
(`unexplained`: forward, the optimizer, what lies between the marks). The waits are the transfer
and the wait for slower peers. The slowest rank, the one the others wait for, is the one whose
waits grow least from rung 2 to rung 3: its own waits are the transfer (`exposed_comm`), and the
typical rank's wait beyond them is `slowest_rank`. It is chosen on one half of the blocks and read
on the other (both ways), so that identical ranks give a term whose expectation is zero. Contention
comes from the rank that stepped alone in each block (rotating), against its own rung 1 in the
same block; `reference_vs_rung0` compares rung 0 as stepped with the sweep's `local` run.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

from ddpbench.analysis.registry import record_iteration_times_s
from ddpbench.config.workloads import short_workload_name
from ddpbench.records.schema import Record, TimelineRank, TimelineStep

# Two-sided 95 % quantiles of Student's t by degrees of freedom (standard tables); beyond 30, the
# normal's 1.96 is within 4 %.
T_975 = {
    1: 12.706,
    2: 4.303,
    3: 3.182,
    4: 2.776,
    5: 2.571,
    6: 2.447,
    7: 2.365,
    8: 2.306,
    9: 2.262,
    10: 2.228,
    11: 2.201,
    12: 2.179,
    13: 2.160,
    14: 2.145,
    15: 2.131,
    16: 2.120,
    17: 2.110,
    18: 2.101,
    19: 2.093,
    20: 2.086,
    21: 2.080,
    22: 2.074,
    23: 2.069,
    24: 2.064,
    25: 2.060,
    26: 2.056,
    27: 2.052,
    28: 2.048,
    29: 2.045,
    30: 2.042,
}


def t_975(df: int) -> float:
    return T_975.get(df, 1.96) if df >= 1 else math.inf


@dataclass(frozen=True)
class Estimate:
    """A mean over paired blocks, seconds per step, with its 95 % interval."""

    s: float
    ci_low_s: float
    ci_high_s: float
    blocks: int

    @classmethod
    def of(cls, values: list[float]) -> Estimate:
        mean = statistics.fmean(values)
        half = t_975(len(values) - 1) * standard_error(values)
        return cls(mean, mean - half, mean + half, len(values))

    @classmethod
    def exact(cls, value: float) -> Estimate:
        """A term that is zero by construction (one rank: nothing to share, no network)."""
        return cls(value, value, value, 0)


def standard_error(values: list[float]) -> float:
    return statistics.stdev(values) / math.sqrt(len(values)) if len(values) > 1 else math.inf


# --- per-block values of one rank's steps -----------------------------------------------------------


def backward_span(step: TimelineStep) -> float | None:
    ready = [t for t in step.grad_ready_s if t is not None]
    return max(ready) - step.backward_start_s if ready and step.backward_start_s is not None else None


def after_backward(step: TimelineStep) -> float | None:
    """From the last gradient being ready to the optimizer's start: under DDP the wait for the
    last all-reduces (and the copies out of the buckets)."""
    ready = [t for t in step.grad_ready_s if t is not None]
    return step.optimizer_start_s - max(ready) if ready and step.optimizer_start_s is not None else None


def _outside_compute(step: TimelineStep) -> float | None:
    """Where DDP's collectives make a rank wait, outside the module's own work: before the module's
    forward (DDP's forward broadcasts buffers, e.g. BatchNorm's running statistics) and from the
    last gradient to the optimizer (the last all-reduces)."""
    after = after_backward(step)
    if after is None or step.forward_start_s is None:
        return None
    return step.forward_start_s + after


def _forward_and_optimizer(step: TimelineStep) -> float | None:
    """The step's marked spans outside backward and DDP's waits: from the module's forward to the
    start of backward (forward and the loss) and the optimizer's step. What lies after the
    optimizer, unmarked, is left out: it shows as the terms' sum falling short of the loss."""
    marks = (step.forward_start_s, step.backward_start_s, step.optimizer_start_s, step.optimizer_end_s)
    if any(mark is None for mark in marks):
        return None
    return (step.backward_start_s - step.forward_start_s) + (step.optimizer_end_s - step.optimizer_start_s)


READS = {
    "step": lambda step: step.step_s,
    "data": lambda step: step.data_s,
    "backward_span": backward_span,
    "after_backward": after_backward,
    "waits": _outside_compute,
    "forward_and_optimizer": _forward_and_optimizer,
}


def by_block(steps: list[TimelineStep] | None, read: str) -> dict[int, float]:
    """Block -> the median of `read` over that block's marked steps of one kind."""
    grouped: dict[int, list[float]] = {}
    for step in steps or []:
        value = READS[read](step)
        if step.block is not None and value is not None:
            grouped.setdefault(step.block, []).append(value)
    return {block: statistics.median(values) for block, values in grouped.items()}


def paired(*series: tuple[int, dict[int, float]]) -> dict[int, float]:
    """Per block present in every series, the sum of sign x value (a difference of step kinds)."""
    blocks = set.intersection(*(set(values) for _, values in series))
    return {block: sum(sign * values[block] for sign, values in series) for block in sorted(blocks)}


# --- the ladder of one record ---------------------------------------------------------------------------


SCRIPT_LOOP = (
    "a script's run: the script runs its own loop, so ddpbench cannot step its model alone, "
    "unwrapped or through a one-rank DDP"
)


class NoLadder(ValueError):
    """The record has no ladder to read; the message says why."""


@dataclass
class Ladder:
    """One record's ladder, read from its timeline: per-block differences by term, and the ranks read."""

    world_size: int
    typical_rank: int
    slowest_rank: int
    blocks: dict[str, dict[int, float]]
    """Term -> block -> seconds: contention, ddp_work, communication, data, slowest_rank,
    exposed_comm, overlap_slowdown, unexplained, top (the typical rank's rung 3 with its data: the
    ladder's DDP step), bottom (rung 0 with its data, the typical rank alone, in its own blocks),
    in_run_loss (its rung 3 with data - bottom), in_run_efficiency (bottom / its rung 3 with data)
    and own_step_gap (the slowest rank's one-rank DDP step beyond the typical rank's)."""
    wall_s: float | None
    halves_agree: bool = True
    """Whether both halves of the blocks chose the same slowest rank (see `_choose`)."""

    def estimate(self, name: str) -> Estimate:
        values = list(self.blocks[name].values())
        if self.world_size == 1 and name in ONE_RANK_ZERO:
            return Estimate.exact(0.0)
        return Estimate.of(values)


ONE_RANK_ZERO = ("contention", "communication", "slowest_rank", "exposed_comm", "overlap_slowdown", "unexplained")
"""Zero by construction at world size 1: nothing to share, no network, no peer."""


def _rank_view(rank: TimelineRank, kind: str, read: str) -> dict[int, float]:
    return by_block(getattr(rank, kind), read)


def _mean_over(values: dict[int, float], blocks) -> float:
    found = [values[block] for block in blocks if block in values]
    return statistics.fmean(found) if found else math.inf


def lower_middle(items: list):
    """The typical one of items sorted by speed: the median, and with an even count the lower middle
    (the faster of the two middle ones). The one definition of the typical rank."""
    return items[(len(items) - 1) // 2]


def _choose(own: dict[int, dict[int, float]], waits: dict[int, dict[int, float]], blocks) -> tuple[int, int]:
    """(slowest, typical) as `blocks` show them. The slowest rank is the one the others wait for:
    the one whose waits in DDP's collectives grow least from its one-rank DDP steps to the DDP
    steps (ties: the longest own step). The typical rank is the median of the others by their own
    one-rank DDP step (with an even count the lower middle, the faster one); with one rank, itself."""
    ranks = sorted(own)
    if len(ranks) == 1:
        return ranks[0], ranks[0]
    slowest = min(ranks, key=lambda r: (_mean_over(waits[r], blocks), -_mean_over(own[r], blocks)))
    others = sorted((r for r in ranks if r != slowest), key=lambda r: _mean_over(own[r], blocks))
    return slowest, lower_middle(others)


def read_ladder(record: Record) -> Ladder:
    timeline = record.timeline
    if record.spec.script:
        raise NoLadder(f"no ladder in {SCRIPT_LOOP}")
    spec = record.spec
    if spec.strategy != "ddp" or getattr(spec, "compile", "off") != "off":
        raise NoLadder(
            f"no ladder for {spec.strategy_name}: its rungs are eager DDP rebuilt around the same module (DDP over "
            "one rank, no wrapper), which a compiled or non-DDP run does not step"
        )
    if timeline is None and not record.spec.profile:
        raise NoLadder("no ladder: it runs with profiling on (drop --no-profile)")
    if timeline is None or timeline.ladder is None:
        raise NoLadder("the record has no ladder (made before ddpbench measured one)")
    ranks = sorted(timeline.by_rank, key=lambda r: r.rank)
    world_size = record.spec.world_size
    if [rank.rank for rank in ranks] != list(range(world_size)):
        raise NoLadder(f"the ladder holds ranks {[rank.rank for rank in ranks]} of {world_size}")
    # With one rank, rung 2 is the job's DDP itself and rung 0 is rung 1.
    own_kind = "solo" if world_size > 1 else "with_ddp"
    bottom_kind = "alone" if world_size > 1 else "unwrapped"
    own = {rank.rank: _rank_view(rank, own_kind, "step") for rank in ranks}
    if any(not values for values in own.values()):
        raise NoLadder(f"the ladder has no {own_kind} steps on some rank")
    by_rank = {rank.rank: rank for rank in ranks}
    waits = {
        rank.rank: paired((1, _rank_view(rank, "with_ddp", "waits")), (-1, _rank_view(rank, own_kind, "waits")))
        for rank in ranks
    }
    all_blocks = sorted(set().union(*(values.keys() for values in own.values())))
    # Chosen on one half of the blocks, read on the other (and the other way round): a rank picked
    # as the slowest on the blocks it is then measured on would make identical ranks' noise a
    # positive wait. The halves interleave, so a drift of the machine's speed hits both alike.
    halves = (all_blocks[0::2], all_blocks[1::2])
    if len(all_blocks) >= 2:
        choice = {block: _choose(own, waits, halves[1 - index % 2]) for index, block in enumerate(all_blocks)}
    else:
        choice = {block: _choose(own, waits, all_blocks) for block in all_blocks}
    slowest, typical = _choose(own, waits, all_blocks)  # named in the advice; the terms use `choice`
    halves_agree = len({choice[block][0] for block in all_blocks}) <= 1

    def on_typical(kind: str, read: str) -> dict[int, float]:
        """Per block, `read` of `kind` on that block's typical rank."""
        views = {rank: _rank_view(by_rank[rank], kind, read) for rank in by_rank}
        return {block: views[t][block] for block, (_, t) in choice.items() if block in views[t]}

    blocks: dict[str, dict[int, float]] = {}
    # Rung 0 on the block's alone rank, against that rank's rung 1 in the same block.
    contention: dict[int, float] = {}
    data_bottom: dict[int, float] = {}
    bottom: dict[int, float] = {}
    top_of_alone: dict[int, float] = {}
    alone_ranks = timeline.ladder.alone_rank_by_block or [typical] * timeline.ladder.blocks
    for block, who in enumerate(alone_ranks):
        rank = by_rank[who]
        stepped = _rank_view(rank, bottom_kind, "step")
        unwrapped = _rank_view(rank, "unwrapped", "step")
        rung3 = _rank_view(rank, "with_ddp", "step")
        if block in stepped and block in unwrapped:
            contention[block] = unwrapped[block] - stepped[block]
            data_bottom[block] = _rank_view(rank, bottom_kind, "data")[block]
            bottom[block] = stepped[block] + data_bottom[block]
            if block in rung3:
                top_of_alone[block] = rung3[block] + _rank_view(rank, "with_ddp", "data")[block]
    blocks["contention"] = contention
    own_t = on_typical(own_kind, "step")
    blocks["ddp_work"] = paired((1, own_t), (-1, on_typical("unwrapped", "step")))
    rung3 = on_typical("with_ddp", "step")
    blocks["communication"] = paired((1, rung3), (-1, own_t))
    blocks["data"] = paired((1, on_typical("with_ddp", "data")), (-1, data_bottom))
    blocks["top"] = paired((1, rung3), (1, on_typical("with_ddp", "data")))
    # Communication split by the marks. The slowest rank waits for no one: its waits (before the
    # module's forward, and from the last gradient to the optimizer), DDP against one-rank DDP,
    # are the transfer alone. The typical rank's are longer by its wait for the slowest rank.
    # Backward's span and the rest of the step (forward, optimizer, what lies between the marks)
    # are read on the typical rank, whose steps the communication rung is.
    after_s = {block: waits[s][block] for block, (s, _) in choice.items() if block in waits[s]}
    after_t = {block: waits[t][block] for block, (_, t) in choice.items() if block in waits[t]}
    span_t = paired((1, on_typical("with_ddp", "backward_span")), (-1, on_typical(own_kind, "backward_span")))
    blocks["exposed_comm"] = after_s
    blocks["slowest_rank"] = paired((1, after_t), (-1, after_s))
    blocks["overlap_slowdown"] = span_t
    # The typical rank's forward, loss and optimizer, DDP against one-rank DDP, measured per block
    # from their own marks (not the communication rung less the other parts: an unmarked gap then
    # shows as the sum falling short, instead of being absorbed).
    blocks["unexplained"] = paired(
        (1, on_typical("with_ddp", "forward_and_optimizer")), (-1, on_typical(own_kind, "forward_and_optimizer"))
    )
    own_s = {block: own[s][block] for block, (s, _) in choice.items() if block in own[s]}
    blocks["own_step_gap"] = paired((1, own_s), (-1, own_t))
    # The in-run reference: rung 0 as the typical rank stepped it alone (with its data wait) in
    # its own blocks, the one device a `local` run would be; the in-run loss and efficiency
    # against its DDP step in the same blocks. (With more ranks than blocks it may never have
    # stepped alone: then every alone rank's blocks.)
    own_blocks = [b for b, who in enumerate(alone_ranks) if who == typical and b in bottom and b in top_of_alone]
    used = own_blocks or sorted(set(bottom) & set(top_of_alone))
    blocks["bottom"] = {block: bottom[block] for block in used}
    blocks["in_run_loss"] = {block: top_of_alone[block] - bottom[block] for block in used}
    blocks["in_run_efficiency"] = {block: bottom[block] / top_of_alone[block] for block in used}
    empty = [name for name, values in blocks.items() if not values]
    if empty:
        raise NoLadder(f"the ladder's blocks have no paired steps for {', '.join(empty)}")
    wall = [rank.ladder_wall_s for rank in ranks if rank.ladder_wall_s is not None]
    return Ladder(
        world_size, typical, slowest, blocks, max(wall) if wall else timeline.ladder.wall_s, halves_agree=halves_agree
    )


def in_run_efficiency(record: Record) -> tuple[float, float | None] | None:
    """(the in-run efficiency, the half-width of its 95 % interval or None) of an ok DDP record with
    a ladder; None without one."""
    if record.status != "ok":
        return None
    try:
        estimate = read_ladder(record).estimate("in_run_efficiency")
    except NoLadder:
        return None
    half = estimate.ci_high_s - estimate.s
    return estimate.s, half if math.isfinite(half) else None


# --- the terms ------------------------------------------------------------------------------------


def _combined(value: float, *errors: float, df: int) -> Estimate:
    """A difference between the ladder and a measurement outside it, with an interval from both
    standard errors (the ladder's blocks set the degrees of freedom)."""
    half = t_975(df) * math.sqrt(sum(error * error for error in errors))
    return Estimate(value, value - half, value + half, df + 1)


def _ms(value: float) -> str:
    return f"{value * 1e3:.2f} ms"


def ladder_terms(
    record: Record, ladder: Ladder, step_s: float, reference_step_s: float | None, reference_steps_s: list[float]
) -> dict[str, tuple[Estimate | None, str]]:
    """Every term of the breakdown from the ladder, as (estimate, basis), each a measured
    difference with its own interval: nothing is what the others leave over, so their sum is
    compared with the loss rather than equal to it by construction. Without a reference run
    (`reference_step_s` None) the in-run rung 0 is the reference and `reference_vs_rung0` is None."""
    one = ladder.world_size == 1
    blocks = len(ladder.blocks["top"])
    t, s = ladder.typical_rank, ladder.slowest_rank
    found: dict[str, tuple[Estimate | None, str]] = {}
    found["contention"] = (
        (Estimate.exact(0.0), "one rank: no other rank shares the host")
        if one
        else (
            ladder.estimate("contention"),
            f"ladder: unwrapped with every rank against the same rank alone, {len(ladder.blocks['contention'])} "
            "blocks (the alone rank rotates)",
        )
    )
    found["ddp_work"] = (
        ladder.estimate("ddp_work"),
        f"ladder: {'DDP' if one else 'one-rank DDP'} against unwrapped steps, the typical rank, {blocks} blocks",
    )
    found["data"] = (
        ladder.estimate("data"),
        "ladder: the wait for the next batch in DDP steps against steps of one rank alone",
    )
    if one:
        for name in ("exposed_comm", "overlap_slowdown", "slowest_rank"):
            found[name] = (Estimate.exact(0.0), "one rank: no network and no other rank")
        found["unexplained"] = (Estimate.exact(0.0), "one rank: no communication rung to split")
    else:
        gap = ladder.estimate("own_step_gap")
        chosen = (
            "chosen on one half of the blocks and read on the other"
            if ladder.halves_agree
            else "chosen on one half of the blocks and read on the other; the halves chose different ranks"
        )
        found["slowest_rank"] = (
            ladder.estimate("slowest_rank"),
            f"ladder: rank {t}'s waits in DDP's collectives beyond rank {s}'s (DDP against one-rank "
            f"DDP; the slowest rank {chosen}); rank {s}'s own one-rank DDP step is {_ms(gap.s)} longer than "
            f"rank {t}'s",
        )
        found["exposed_comm"] = (
            ladder.estimate("exposed_comm"),
            f"ladder: rank {s}'s waits before forward (buffers) and from the last gradient to the "
            "optimizer, DDP against one-rank DDP (the slowest rank waits for no one: the transfer alone)",
        )
        found["overlap_slowdown"] = (
            ladder.estimate("overlap_slowdown"),
            f"ladder: rank {t}'s backward span, DDP against one-rank DDP",
        )
        found["unexplained"] = (
            ladder.estimate("unexplained"),
            f"ladder: rank {t}'s forward (with the loss) and optimizer spans, DDP against one-rank DDP, "
            "each from its own marks",
        )
    top = ladder.estimate("top")
    found["window_vs_ladder"] = (
        _combined(
            step_s - top.s,
            standard_error(record_iteration_times_s(record)),
            standard_error(list(ladder.blocks["top"].values())),
            df=blocks - 1,
        ),
        f"the timed window's step {_ms(step_s)} against the ladder's DDP step with its data wait {_ms(top.s)}",
    )
    bottom = ladder.estimate("bottom")
    if reference_step_s is None:
        found["reference_vs_rung0"] = (None, "no reference run: the in-run rung 0 is the reference")
    else:
        found["reference_vs_rung0"] = (
            _combined(
                bottom.s - reference_step_s,
                standard_error(list(ladder.blocks["bottom"].values())),
                standard_error(reference_steps_s),
                df=len(ladder.blocks["bottom"]) - 1,
            ),
            f"rung 0 as rank {t} stepped it alone, unwrapped, with its data wait ({_ms(bottom.s)}) against "
            f"the reference run's {_ms(reference_step_s)}: two processes at two times",
        )
    return found


RUNG_LABELS = {
    "alone": "0: unwrapped, this rank alone",
    "unwrapped": "1: unwrapped, every rank",
    "solo": "2: DDP over a one-rank group",
    "with_ddp": "3: DDP",
}


def rung_rows(record: Record) -> list[dict]:
    """The ladder's rungs of one record as measured (compute only, data wait apart): one row per
    rung with its mean over blocks and the half-width of its 95 % interval, all of the typical rank
    (rung 0 from the blocks it stepped alone in); with one rank rungs 0 and 2 are not stepped
    (they are rungs 1 and 3)."""
    ladder = read_ladder(record)
    typical = next(rank for rank in record.timeline.by_rank if rank.rank == ladder.typical_rank)
    series: dict[str, list[float]] = {}
    for kind in ("alone", "unwrapped", "solo", "with_ddp"):
        values = list(_rank_view(typical, kind, "step").values())
        if values:
            series[kind] = values
    rows = []
    for kind, values in series.items():
        estimate = Estimate.of(values)
        rows.append(
            {
                "run_id": record.run_id,
                "workload": short_workload_name(record.spec.workload),
                "world_size": record.spec.world_size,
                "rung": RUNG_LABELS[kind],
                "step_s": estimate.s,
                # One block alone gives no interval (NaN: no whisker is drawn).
                "ci_half_s": half if math.isfinite(half := estimate.ci_high_s - estimate.s) else math.nan,
            }
        )
    return rows


def ladder_frame(records: list[tuple[str, Record]]):
    """One row per rung of every ok DDP run with a ladder (see `rung_rows`), as a DataFrame."""
    import pandas as pd

    rows = []
    for _, record in records:
        if record.status != "ok" or record.spec.strategy != "ddp":
            continue
        try:
            rows += rung_rows(record)
        except NoLadder:
            continue
    return pd.DataFrame(rows, columns=["run_id", "workload", "world_size", "rung", "step_s", "ci_half_s"])
