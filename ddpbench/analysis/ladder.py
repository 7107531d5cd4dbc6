"""The ladder's terms: differences between step kinds measured in the same DDP run, block by block
(`ddpbench.worker.ladder` runs them), each with a confidence interval from the paired blocks. No
torch.

Every term is a mean over blocks of a per-block difference, so the terms add up exactly:

    t(N) - t(1) = window_vs_ladder                      the timed window against rung 3
                + data                                  loader's wait, rung 3 against rung 0
                + exposed_comm + overlap_slowdown
                  + slowest_rank + unexplained          rung 3 - rung 2 (communication)
                + ddp_work                              rung 2 - rung 1
                + contention                            rung 1 - rung 0
                + reference_vs_rung0                    rung 0 against the sweep's `local` run

Rungs 1 to 3 are read on the typical rank (the median rank by its own one-rank DDP step; with an
even count the faster middle one). Its communication rung is split by the step's marks, each
against its own one-rank DDP step: backward's span (`overlap_slowdown`: the all-reduces beside
it), the waits outside the module's work (before its forward, where DDP broadcasts buffers, and
from the last gradient to the optimizer, where it waits for the last all-reduces), and the rest
(`unexplained`: forward, the optimizer, what lies between the marks). The waits are the transfer
and the wait for slower peers. The slowest rank, the one the others wait for, is the one whose
waits grow least from rung 2 to rung 3: its own waits are the transfer (`exposed_comm`), and the
typical rank's wait beyond them is `slowest_rank`. Contention comes from the rank that stepped
alone in each block (rotating), against its own rung 1 in the same block; rung 0 for the typical
rank is therefore what its rung 3 less every difference leaves, and `reference_vs_rung0` compares
that with the sweep's `local` run.
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


def _backward_span(step: TimelineStep) -> float | None:
    ready = [t for t in step.grad_ready_s if t is not None]
    return max(ready) - step.backward_start_s if ready and step.backward_start_s is not None else None


def _after_backward(step: TimelineStep) -> float | None:
    """From the last gradient being ready to the optimizer's start: under DDP the wait for the
    last all-reduces (and the copies out of the buckets)."""
    ready = [t for t in step.grad_ready_s if t is not None]
    return step.optimizer_start_s - max(ready) if ready and step.optimizer_start_s is not None else None


def _outside_compute(step: TimelineStep) -> float | None:
    """Where DDP's collectives make a rank wait, outside the module's own work: before the module's
    forward (DDP's forward broadcasts buffers, e.g. BatchNorm's running statistics) and from the
    last gradient to the optimizer (the last all-reduces)."""
    after = _after_backward(step)
    if after is None or step.forward_start_s is None:
        return None
    return step.forward_start_s + after


READS = {
    "step": lambda step: step.step_s,
    "data": lambda step: step.data_s,
    "backward_span": _backward_span,
    "after_backward": _after_backward,
    "waits": _outside_compute,
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
    exposed_comm, overlap_slowdown, unexplained, top (rung 3 with its data: the ladder's DDP
    step) and own_step_gap (the slowest rank's one-rank DDP step beyond the typical rank's)."""
    wall_s: float | None

    def estimate(self, name: str) -> Estimate:
        values = list(self.blocks[name].values())
        if self.world_size == 1 and name in ONE_RANK_ZERO:
            return Estimate.exact(0.0)
        return Estimate.of(values)


ONE_RANK_ZERO = ("contention", "communication", "slowest_rank", "exposed_comm", "overlap_slowdown", "unexplained")
"""Zero by construction at world size 1: nothing to share, no network, no peer."""


def _rank_view(rank: TimelineRank, kind: str, read: str) -> dict[int, float]:
    return by_block(getattr(rank, kind), read)


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
    means = {rank: statistics.fmean(values.values()) for rank, values in own.items()}
    order = sorted(means, key=means.__getitem__)
    typical = order[(len(order) - 1) // 2]  # the lower middle: the faster of two
    by_rank = {rank.rank: rank for rank in ranks}
    # The slowest rank is the one the others wait for: the one whose waits in DDP's collectives
    # grow least from its one-rank DDP steps to the DDP steps (ties: the longest own step).
    waits = {
        rank.rank: paired((1, _rank_view(rank, "with_ddp", "waits")), (-1, _rank_view(rank, own_kind, "waits")))
        for rank in ranks
    }
    slowest = min(order, key=lambda r: (statistics.fmean(waits[r].values()) if waits[r] else math.inf, -means[r]))
    if world_size > 1 and slowest == typical:
        # The median rank by its own step is the one the others wait for: the typical rank is
        # then the median of the others (with two ranks, the other one).
        others = [r for r in order if r != slowest]
        typical = others[(len(others) - 1) // 2]
    t = by_rank[typical]

    blocks: dict[str, dict[int, float]] = {}
    # Rung 0 on the block's alone rank, against that rank's rung 1 in the same block.
    contention: dict[int, float] = {}
    data_bottom: dict[int, float] = {}
    alone_ranks = timeline.ladder.alone_rank_by_block or [typical] * timeline.ladder.blocks
    for block, who in enumerate(alone_ranks):
        rank = by_rank[who]
        bottom = _rank_view(rank, bottom_kind, "step")
        unwrapped = _rank_view(rank, "unwrapped", "step")
        if block in bottom and block in unwrapped:
            contention[block] = unwrapped[block] - bottom[block]
            data_bottom[block] = _rank_view(rank, bottom_kind, "data")[block]
    blocks["contention"] = contention
    blocks["ddp_work"] = paired((1, own[typical]), (-1, _rank_view(t, "unwrapped", "step")))
    rung3 = _rank_view(t, "with_ddp", "step")
    blocks["communication"] = paired((1, rung3), (-1, own[typical]))
    blocks["data"] = paired((1, _rank_view(t, "with_ddp", "data")), (-1, data_bottom))
    blocks["top"] = paired((1, rung3), (1, _rank_view(t, "with_ddp", "data")))
    # Communication split by the marks. The slowest rank waits for no one: its waits (before the
    # module's forward, and from the last gradient to the optimizer), DDP against one-rank DDP,
    # are the transfer alone. The typical rank's are longer by its wait for the slowest rank.
    # Backward's span and the rest of the step (forward, optimizer, what lies between the marks)
    # are read on the typical rank, whose steps the communication rung is.
    after_s, after_t = waits[slowest], waits[typical]
    span_t = paired((1, _rank_view(t, "with_ddp", "backward_span")), (-1, _rank_view(t, own_kind, "backward_span")))
    blocks["exposed_comm"] = after_s
    blocks["slowest_rank"] = paired((1, after_t), (-1, after_s))
    blocks["overlap_slowdown"] = span_t
    blocks["unexplained"] = paired((1, blocks["communication"]), (-1, span_t), (-1, after_t))
    blocks["own_step_gap"] = paired((1, own[slowest]), (-1, own[typical]))
    # Rung 0 as the ladder implies it for the typical rank (its rung 3 less every rung's
    # difference), and as the typical rank stepped it in its own blocks alone, for the reference's term.
    blocks["bottom"] = paired(
        (1, blocks["top"]),
        (-1, blocks["data"]),
        (-1, blocks["communication"]),
        (-1, blocks["ddp_work"]),
        (-1, blocks["contention"]),
    )
    stepped: dict[int, float] = {}
    for block, who in enumerate(alone_ranks):
        step = _rank_view(t, bottom_kind, "step").get(block) if who == typical else None
        if step is not None and block in data_bottom:
            stepped[block] = step + data_bottom[block]
    blocks["stepped_bottom"] = stepped
    # (stepped_bottom may be empty: with more ranks than blocks the typical rank may never step alone.)
    empty = [name for name, values in blocks.items() if not values and name != "stepped_bottom"]
    if empty:
        raise NoLadder(f"the ladder's blocks have no paired steps for {', '.join(empty)}")
    wall = [rank.ladder_wall_s for rank in ranks if rank.ladder_wall_s is not None]
    return Ladder(world_size, typical, slowest, blocks, max(wall) if wall else timeline.ladder.wall_s)


# --- the terms ------------------------------------------------------------------------------------


def _combined(value: float, *errors: float, df: int) -> Estimate:
    """A difference between the ladder and a measurement outside it, with an interval from both
    standard errors (the ladder's blocks set the degrees of freedom)."""
    half = t_975(df) * math.sqrt(sum(error * error for error in errors))
    return Estimate(value, value - half, value + half, df + 1)


def _ms(value: float) -> str:
    return f"{value * 1e3:.2f} ms"


def ladder_terms(
    record: Record, ladder: Ladder, step_s: float, reference_step_s: float, reference_steps_s: list[float]
) -> dict[str, tuple[Estimate, str]]:
    """Every term of the breakdown from the ladder, as (estimate, basis); they add up to
    step_s - reference_step_s exactly."""
    one = ladder.world_size == 1
    blocks = len(ladder.blocks["top"])
    t, s = ladder.typical_rank, ladder.slowest_rank
    found: dict[str, tuple[Estimate, str]] = {}
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
        f"ladder: {'DDP' if one else 'one-rank DDP'} against unwrapped steps, rank {t}, {blocks} blocks",
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
        found["slowest_rank"] = (
            ladder.estimate("slowest_rank"),
            f"ladder: rank {t}'s waits in DDP's collectives beyond rank {s}'s (DDP against one-rank "
            f"DDP); rank {s}'s own one-rank DDP step is {_ms(gap.s)} longer than rank {t}'s",
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
        communication = ladder.estimate("communication")
        found["unexplained"] = (
            ladder.estimate("unexplained"),
            f"ladder: communication (rank {t}'s DDP step against its one-rank DDP step, "
            f"{_ms(communication.s)}) outside backward and DDP's waits (forward, optimizer, between "
            "the marks)",
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
    rungs = ("contention", "ddp_work", "data", "slowest_rank", "exposed_comm", "overlap_slowdown", "unexplained")
    bottom = top.s - sum(found[name][0].s for name in rungs)
    stepped = list(ladder.blocks["stepped_bottom"].values())
    found["reference_vs_rung0"] = (
        _combined(
            bottom - reference_step_s,
            standard_error(list(ladder.blocks["bottom"].values())),
            standard_error(reference_steps_s),
            df=blocks - 1,
        ),
        f"rung 0 as the ladder gives it for rank {t} ({_ms(bottom)}: its DDP step less every rung's "
        "difference; in its own blocks alone, rung 0 with its data wait took "
        f"{_ms(statistics.fmean(stepped)) if stepped else 'n/a'}) against the reference run's "
        f"{_ms(reference_step_s)}: two processes at two times",
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
