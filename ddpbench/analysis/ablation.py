"""Read a DDP run's in-process ablation: per round, what each step of the ablation added. No torch.

Inside the DDP run's own processes (`ddpbench.worker.ablation` runs them) the same module is stepped
four ways, each adding one thing to the one before, in rounds that take every way in turn:
- alone: unwrapped, one rank computing while the others wait (the one device of a `local` run);
  the rank that steps alone rotates from round to round;
- all ranks: unwrapped, every rank computing at once (adds host contention);
- DDP on one rank: DDP over a process group of this rank alone (adds DDP's overhead: hooks, bucket
  copies, the wrapper; no network);
- DDP: the job's own DDP (adds communication, and waiting for the slowest rank).

Per round, with `a` the rank that stepped alone and `m` the median rank (chosen, with the slowest
rank `s`, on the other half of the rounds, so identical ranks give no straggler on average):
    DDP step       top    = DDP(m) + its data wait
    one device     bottom = all-ranks(m) - host contention + the alone step's data wait
    host contention       = all-ranks(a) - alone(a)
    DDP overhead          = DDP on one rank(m) - all-ranks(m)
    DDP(m) - DDP on one rank(m), split by the step's marks:
      exposed communication      = s's waits inside DDP's collectives, DDP against DDP on one rank
      waiting for the slowest    = m's waits beyond s's
      backward slowed            = m's backward span, DDP against DDP on one rank
      forward and optimizer      = the rest of m's step, DDP against DDP on one rank
    data loading          = top's data wait - the alone step's
So in every round the causes add up to top - bottom, the in-process loss, by construction: each is
a difference of two neighbouring steps of the ablation in the same round. Every round counts,
whichever rank stepped alone in it. With one rank there is nothing to share and no network: the
alone and all-ranks steps are one, DDP on one rank is DDP, and those causes are zero exactly.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

from ddpbench.records.schema import Record, TimelineRank, TimelineStep

SCRIPT_LOOP = (
    "a script's run: the script runs its own loop, so ddpbench cannot step its model alone, unwrapped or "
    "through a one-rank DDP"
)

CAUSE_NAMES = (
    "contention",
    "ddp_overhead",
    "exposed_comm",
    "overlap_slowdown",
    "straggler_wait",
    "forward_optimizer",
    "data",
)
"""The causes, in the order the ablation adds them (`ddpbench.analysis.causes` defines each)."""
ZERO_AT_ONE_RANK = ("contention", "exposed_comm", "overlap_slowdown", "straggler_wait")
"""Zero by construction at world size 1: nothing shared, no network, no peer. (DDP on one rank is
the job's DDP there, so forward_optimizer is zero too; it is measured to say so.)"""
PHASES = ("data", "forward", "backward", "optimizer")


class NoAblation(ValueError):
    """The record has no in-process ablation; the message says why."""


# --- what one step's marks say -------------------------------------------------------------------


def backward_span(step: TimelineStep) -> float | None:
    ready = [t for t in step.grad_ready_s if t is not None]
    return max(ready) - step.backward_start_s if ready and step.backward_start_s is not None else None


def after_backward(step: TimelineStep) -> float | None:
    """From the last gradient to the optimizer: under DDP, the wait for the last all-reduces."""
    ready = [t for t in step.grad_ready_s if t is not None]
    return step.optimizer_start_s - max(ready) if ready and step.optimizer_start_s is not None else None


def waits(step: TimelineStep) -> float | None:
    """Where DDP's collectives make a rank wait, outside the module's work: before its forward
    (DDP's forward broadcasts buffers) and from the last gradient to the optimizer."""
    after = after_backward(step)
    return None if after is None or step.forward_start_s is None else step.forward_start_s + after


def rest_of_step(step: TimelineStep) -> float | None:
    """The step less its waits and backward span: forward, the loss, the optimizer and what runs
    between and after them."""
    found, span = waits(step), backward_span(step)
    return None if found is None or span is None else step.step_s - found - span


def phase_seconds(step: TimelineStep, phase: str) -> float | None:
    """A phase of the rank's own work: data, forward (with the loss), backward, optimizer."""
    if phase == "data":
        return step.data_s
    if phase == "forward":
        marks = (step.forward_start_s, step.backward_start_s)
        return None if None in marks else step.backward_start_s - step.forward_start_s
    if phase == "backward":
        return backward_span(step)
    marks = (step.optimizer_start_s, step.optimizer_end_s)
    return None if None in marks else step.optimizer_end_s - step.optimizer_start_s


def waited(step: TimelineStep) -> float | None:
    """The training thread's waiting for a core over the step, as the kernel counted it; None in
    records from before it was read."""
    return None if step.cpu is None else step.cpu.waited_s


READS = {
    "step": lambda step: step.step_s,
    "waited": waited,
    "data": lambda step: step.data_s,
    "waits": waits,
    "backward": backward_span,
    "rest": rest_of_step,
    **{f"phase:{phase}": (lambda step, phase=phase: phase_seconds(step, phase)) for phase in PHASES},
}


def per_round(steps: list[TimelineStep] | None, read: str) -> dict[int, float]:
    """Round -> the median of `read` over that round's marked steps of one kind."""
    grouped: dict[int, list[float]] = {}
    for step in steps or []:
        value = READS[read](step)
        if step.block is not None and value is not None:
            grouped.setdefault(step.block, []).append(value)
    return {round_: statistics.median(values) for round_, values in grouped.items()}


def median_of_others(ordered: list):
    """The median of items sorted by speed; with an even count the lower middle (the faster of the
    two middle ones): a real rank, not a mean of two."""
    return ordered[(len(ordered) - 1) // 2]


# --- the ablation of one record ------------------------------------------------------------------


@dataclass
class Ablation:
    """One record's ablation: per quantity, round -> seconds (or a ratio)."""

    world_size: int
    median_rank: int
    slowest_rank: int
    """As all rounds together show them (named in words); each round's figures use the ranks its
    other half chose."""
    halves_agree: bool
    """Whether both halves of the rounds chose the same slowest rank."""
    rounds: dict[str, dict[int, float]]
    """Per round: every cause (CAUSE_NAMES), top, bottom, loss (top - bottom), efficiency
    (bottom / top), per phase `lead:<phase>`, the slowest rank's own phase beyond the median
    rank's (in DDP on one rank, where no rank waits for another), and `contention:waiting`, the part
    of host contention the alone rank's training thread spent waiting for a core (where the kernel's
    counters were read), and `contention:on_core`, the rest: its step running slower on a core."""
    wall_s: float | None

    def round_count(self) -> int:
        return len(self.rounds["top"])


def _mean(values: dict[int, float], rounds) -> float:
    found = [values[r] for r in rounds if r in values]
    return statistics.fmean(found) if found else math.inf


def _choose(own: dict, waits_grown: dict, rounds) -> tuple[int, int]:
    """(slowest, median) as `rounds` show them. The slowest rank is the one the others wait for:
    its waits in DDP's collectives grow least from DDP on one rank to DDP (ties: its longer own
    step). The median rank is the median of the others by their own step on DDP on one rank."""
    ranks = sorted(own)
    if len(ranks) == 1:
        return ranks[0], ranks[0]
    slowest = min(ranks, key=lambda r: (_mean(waits_grown[r], rounds), -_mean(own[r], rounds)))
    others = sorted((r for r in ranks if r != slowest), key=lambda r: _mean(own[r], rounds))
    return slowest, median_of_others(others)


def split_rounds(rounds: list[int]) -> tuple[list[int], list[int]]:
    """The two halves the slowest rank is chosen on and read on: rounds 0 and 3 of every four
    against rounds 1 and 2. The worker gives each rank two rounds alone in a row and alternates the
    segments' order every round (`ddpbench.worker.ablation`), so at 2 ranks each half holds a round
    where each rank stepped alone, one in each order. (Older records, whose alone rank alternated
    with the order, still get each rank alone in each half.)"""
    first = [r for i, r in enumerate(rounds) if i % 4 in (0, 3)]
    second = [r for i, r in enumerate(rounds) if i % 4 in (1, 2)]
    return first, second


def check_has_ablation(record: Record) -> None:
    """Raise NoAblation, saying why, for a record the ablation does not apply to."""
    spec = record.spec
    if spec.script:
        raise NoAblation(f"no in-process ablation in {SCRIPT_LOOP}")
    if spec.strategy != "ddp" or getattr(spec, "compile", "off") != "off":
        raise NoAblation(
            f"no in-process ablation for {spec.strategy_name}: its steps rebuild eager DDP around the same module "
            "(DDP on one rank, no wrapper), which a compiled or non-DDP run does not step"
        )
    if record.timeline is None and not spec.profile:
        raise NoAblation("no in-process ablation: it runs with profiling on (drop --no-profile)")
    if record.timeline is None or record.timeline.ladder is None:
        raise NoAblation("the record has no in-process ablation (made before ddpbench measured one)")


def read_ablation(record: Record) -> Ablation:
    check_has_ablation(record)
    timeline = record.timeline
    return read_rounds(timeline.by_rank, record.spec.world_size, timeline.ladder.alone_rank_by_block, timeline.ladder)


def read_rounds(
    by_rank_steps: list[TimelineRank], world_size: int, alone_rank_by_block: list[int], ladder=None
) -> Ablation:
    """The ablation from the ranks' steps (a record's timeline, or the worker's rounds so far)."""
    ranks = sorted(by_rank_steps, key=lambda r: r.rank)
    if [rank.rank for rank in ranks] != list(range(world_size)):
        raise NoAblation(f"the ablation holds ranks {[rank.rank for rank in ranks]} of {world_size}")
    # With one rank, DDP on one rank is the job's DDP and the alone step is the all-ranks step.
    own_kind = "solo" if world_size > 1 else "with_ddp"
    bottom_kind = "alone" if world_size > 1 else "unwrapped"
    by_rank = {rank.rank: rank for rank in ranks}

    def view(rank: int, kind: str, read: str) -> dict[int, float]:
        return per_round(getattr(by_rank[rank], kind), read)

    own = {r: view(r, own_kind, "step") for r in by_rank}
    if any(not values for values in own.values()):
        raise NoAblation(f"the ablation has no {own_kind} steps on some rank")
    grown = {r: _difference(view(r, "with_ddp", "waits"), view(r, own_kind, "waits")) for r in by_rank}
    all_rounds = sorted(set().union(*(values.keys() for values in own.values())))
    # Chosen on one half of the rounds, read on the other (and the other way round): a rank chosen
    # as the slowest on the rounds it is measured on would turn identical ranks' noise into a
    # positive wait. The halves interleave, so a drift of the machine hits both alike.
    halves = split_rounds(all_rounds)
    if len(all_rounds) >= 2:
        choice = {r: _choose(own, grown, halves[1] if r in halves[0] else halves[0]) for r in all_rounds}
    else:
        choice = {r: _choose(own, grown, all_rounds) for r in all_rounds}
    slowest, median = _choose(own, grown, all_rounds)
    alone_by_round = alone_rank_by_block or [median] * (max(all_rounds) + 1)

    found: dict[str, dict[int, float]] = {name: {} for name in (*CAUSE_NAMES, "top", "bottom", "loss", "efficiency")}
    found.update({f"lead:{phase}": {} for phase in PHASES})
    found["contention:waiting"] = {}
    found["contention:on_core"] = {}
    for round_ in all_rounds:
        if round_ >= len(alone_by_round):
            continue
        s, m = choice[round_]
        a = alone_by_round[round_]
        values = _round_values(view, round_, a, s, m, own_kind, bottom_kind)
        if values is None:
            continue
        for name, value in values.items():
            found[name][round_] = value
    empty = [name for name in ("top", *CAUSE_NAMES) if not found[name]]
    if empty:
        raise NoAblation(f"the ablation's rounds have no complete steps for {', '.join(empty)}")
    wall = [rank.ladder_wall_s for rank in ranks if rank.ladder_wall_s is not None]
    agree = len({choice[r][0] for r in all_rounds}) <= 1
    wall_s = max(wall) if wall else (ladder.wall_s if ladder is not None else None)
    return Ablation(world_size, median, slowest, agree, found, wall_s)


def _difference(a: dict[int, float], b: dict[int, float]) -> dict[int, float]:
    return {r: a[r] - b[r] for r in sorted(set(a) & set(b))}


def _round_values(view, round_: int, a: int, s: int, m: int, own_kind: str, bottom_kind: str) -> dict | None:
    """One round's figures (see the module's docstring), or None where a step it needs is missing."""

    def at(rank: int, kind: str, read: str) -> float | None:
        return view(rank, kind, read).get(round_)

    needed = {
        "alone_a": at(a, bottom_kind, "step"),
        "alone_data_a": at(a, bottom_kind, "data"),
        "all_a": at(a, "unwrapped", "step"),
        "all_m": at(m, "unwrapped", "step"),
        "own_m": at(m, own_kind, "step"),
        "ddp_m": at(m, "with_ddp", "step"),
        "ddp_data_m": at(m, "with_ddp", "data"),
        "waits_ddp_m": at(m, "with_ddp", "waits"),
        "waits_own_m": at(m, own_kind, "waits"),
        "waits_ddp_s": at(s, "with_ddp", "waits"),
        "waits_own_s": at(s, own_kind, "waits"),
        "span_ddp_m": at(m, "with_ddp", "backward"),
        "span_own_m": at(m, own_kind, "backward"),
    }
    if any(value is None for value in needed.values()):
        return None
    v = needed
    contention = v["all_a"] - v["alone_a"]
    top = v["ddp_m"] + v["ddp_data_m"]
    bottom = v["all_m"] - contention + v["alone_data_a"]
    exposed = v["waits_ddp_s"] - v["waits_own_s"]
    waits_m = v["waits_ddp_m"] - v["waits_own_m"]
    span = v["span_ddp_m"] - v["span_own_m"]
    found = {
        "contention": contention,
        "ddp_overhead": v["own_m"] - v["all_m"],
        "exposed_comm": exposed,
        "straggler_wait": waits_m - exposed,
        "overlap_slowdown": span,
        # The rest of the communication step, so that nothing falls between the causes.
        "forward_optimizer": (v["ddp_m"] - v["own_m"]) - waits_m - span,
        "data": v["ddp_data_m"] - v["alone_data_a"],
        "top": top,
        "bottom": bottom,
        "loss": top - bottom,
        "efficiency": bottom / top if top > 0 else math.nan,
    }
    waited_all, waited_alone = at(a, "unwrapped", "waited"), at(a, bottom_kind, "waited")
    if waited_all is not None and waited_alone is not None:
        found["contention:waiting"] = waited_all - waited_alone
        found["contention:on_core"] = contention - found["contention:waiting"]
    for phase in PHASES:
        lead_s, lead_m = at(s, own_kind, f"phase:{phase}"), at(m, own_kind, f"phase:{phase}")
        if lead_s is not None and lead_m is not None:
            found[f"lead:{phase}"] = lead_s - lead_m
    return found


def own_steps_by_rank(record: Record) -> list[float] | None:
    """Per rank, its mean step on DDP on one rank: its own speed, with no rank to wait for. None
    without an ablation."""
    timeline = record.timeline
    if timeline is None or timeline.ladder is None:
        return None
    found = []
    for rank in sorted(timeline.by_rank, key=lambda r: r.rank):
        steps = [step.step_s for step in (rank.solo or [])]
        if not steps:
            return None
        found.append(statistics.fmean(steps))
    return found
