"""The in-process ablation: step kinds that differ by one thing each, taken in turns inside the DDP
run, so that the causes of lost scaling are differences measured in one process, in the same
minutes, on the same kind of batches and thread settings (`ddpbench.analysis.ablation` reads them).
In the record they are the gradient timeline's kinds.

Its steps, each adding one thing to the one before:
- `alone`: the module unwrapped, this rank alone (the other ranks wait at a barrier): the one-device
  step. One rank per round takes this turn, in rotation (`alone_rank`), so its cost does not
  grow with the world size.
- `unwrapped`: the module unwrapped, every rank at once: adds host contention (ranks sharing memory
  bandwidth, caches, host CPU and PCIe).
- `solo`: DDP over a process group of this rank alone: adds DDP overhead, without a network.
- `with_ddp`: the job's DDP: adds communication (and waiting for the slowest rank).
Beside them `without_allreduce` (the job's DDP under no_sync()), which `ddpbench project` replays.

A round holds one segment of each kind; a segment is a barrier (with more than one rank: every
kind starts from the same place, and no kind inherits the skew another left), one unmarked
lead-in step of that kind (a step that follows a step of its own kind, as in the timed window),
then MARKED_PER_SEGMENT marked steps, each after a barrier too: every rank starts it at once, as
DDP's steps start, so the kinds without DDP's collectives share the host as DDP's steps do.
Rounds alternate the order of their segments (up, then down), so a drift of the machine's speed
during a round hits every kind alike, and each round is one paired sample of every difference.
(The record calls a round a `block`, and the rounds its `ladder`.)

With one rank there is nothing to share and no network: `alone` is `unwrapped` and `solo` is
`with_ddp`, so neither runs.

Every marked step also carries what the kernel counted of the rank's CPU over it
(`ddpbench.host.cpu_denied`): host contention's waiting for a core is read from it. And where the
base rounds leave the run's largest cause undecided (`lead_decided`: no cause, or several whose lead
would not hold), the run adds rounds, EXTRA_STEP at a time, up to `extra_rounds`. The look is the
run's own (its rounds paired, the rule explain applies to a configuration of one run), at that rule's
level each time, uncorrected for the repeated looks: it only decides when to stop adding rounds.
What a configuration answers is computed afterwards over all its runs' rounds
(`ddpbench.analysis.answers`), where a stop that came early costs rounds, never a wrong name.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch.distributed as dist

from ddpbench.host.cpu_denied import difference

MARKED_PER_SEGMENT = 1
"""Marked steps per segment (a block's value of a kind is their median). One: on the default CPU
suite two cost resnet50 x2 32 % of its run's wall time; more blocks buy the interval more than
more steps per block."""
LEAD_IN_PER_SEGMENT = 1


EXTRA_STEP = 4
"""Rounds added at a time while the largest cause is undecided: four, the period of `alone_rank` at
2 ranks (0, 0, 1, 1) and of `ddpbench.analysis.ablation.split_rounds`' halves (rounds 0 and 3 of every
four against 1 and 2), so added rounds leave each rank's turns alone and the halves as even as the
base rounds left them (an odd base, 5, leaves one more for rank 0 however many are added)."""

SETTLE_S = 0.02
"""Before an alone segment its rank sleeps this long after the barrier: the waiting ranks' runtime
threads go quiet first (OpenMP's threads spin for milliseconds after a parallel region; on a
2-core VM a waiting rank's spinning threads slowed the alone rank's step from 2.6 to 5-7 ms)."""


def ablation_rounds(timed_steps: int) -> int:
    """Rounds of the ablation: an eighth of the timed steps, between 5 and 8 (a round costs
    LEAD_IN_PER_SEGMENT + MARKED_PER_SEGMENT steps of each of its five kinds). At least 5 rounds:
    4 degrees of freedom within each run, whatever the steps (`ddpbench run`'s defaults would give
    4); the default CPU suite's 55 timed steps get 6 rounds."""
    return max(5, min(8, timed_steps // 8))


def extra_rounds(blocks: int) -> int:
    """At most this many rounds more while the largest cause is undecided: the base rounds rounded up
    to a multiple of EXTRA_STEP. For the 5-8 base rounds of `ablation_rounds` that is 8: the ablation
    grows at most 2.6 times (5 rounds to 13), 2 times at 8."""
    return EXTRA_STEP * -(-blocks // EXTRA_STEP)


@dataclass(frozen=True)
class StepKind:
    name: str
    step_on: Callable
    """Steps one batch."""
    context: Callable = contextlib.nullcontext
    """Entered around each of its steps (DDP's no_sync() keeps the job's reducer out)."""
    alone: bool = False
    """Only the block's alone rank steps; the others wait at the next barrier."""


def step_kinds(ddp_model, step_on, world_size: int, solo_step_on=None, unwrapped_step_on=None) -> list[StepKind]:
    """The kinds a round runs, `alone` first; `without_allreduce` last."""
    kinds = []
    if unwrapped_step_on is not None:
        if world_size > 1:
            kinds.append(StepKind("alone", unwrapped_step_on, alone=True))
        # No DDP forward runs, so no reducer expects this backward: the gradient hooks that both
        # DDPs keep on the parameters return at once (with find_unused_parameters, after marking
        # the parameter used, as under no_sync()).
        kinds.append(StepKind("unwrapped", unwrapped_step_on))
    if solo_step_on is not None and world_size > 1:
        # The job's wrapper under no_sync() keeps its own reducer out of these steps.
        kinds.append(StepKind("solo", solo_step_on, ddp_model.no_sync))
    kinds.append(StepKind("with_ddp", step_on))
    kinds.append(StepKind("without_allreduce", step_on, ddp_model.no_sync))
    return kinds


def alone_rank(block: int, world_size: int) -> int:
    """The rank that steps alone in a block. The segments' order alternates every block; at 2 ranks
    each rank takes two blocks in a row (0, 0, 1, 1, ...), so that the alone rank and the order vary
    apart: each half the analysis splits the rounds into (`ablation.split_rounds`: rounds 0 and 3
    of every four against 1 and 2) holds a round where each rank stepped alone, one in each order.
    With more ranks, plain rotation, so that every rank takes a turn soonest."""
    return (block // 2) % 2 if world_size == 2 else block % world_size


def lead_decided(found: dict, rank: int, world_size: int, blocks: int) -> bool:
    """Whether the rounds so far decide the run's largest cause: one cause beyond noise whose lead
    over every other would hold in another run (`ddpbench.analysis.answers.largest_in_rounds`, the
    rule explain applies). Collective: every rank sends its steps to rank 0, which reads them and
    tells every rank its answer."""
    import msgspec

    from ddpbench.analysis.ablation import NoAblation, read_rounds
    from ddpbench.analysis.answers import largest_in_rounds
    from ddpbench.records.schema import TimelineRank

    gathered = [None] * world_size if rank == 0 else None
    dist.gather_object({"rank": rank, **found}, gathered, dst=0)
    verdict = [False]
    if rank == 0:
        try:
            ranks = [msgspec.convert(steps, TimelineRank) for steps in gathered]
            ablation = read_rounds(ranks, world_size, [alone_rank(b, world_size) for b in range(blocks)])
            verdict[0] = len(largest_in_rounds(ablation.rounds)) == 1
        except (NoAblation, msgspec.ValidationError, ValueError, ZeroDivisionError):
            verdict[0] = False  # too few complete rounds to read: not decided
    dist.broadcast_object_list(verdict, src=0)
    return bool(verdict[0])


def run_ablation(
    timeline,
    kinds: list[StepKind],
    batches,
    blocks: int,
    rank: int,
    world_size: int,
    counters=None,
    extra_blocks: int = 0,
) -> dict:
    """Every block's segments; returns each kind's marked steps (each with its `block` and, with
    `counters`, what the kernel counted of the rank's CPU over the step), the alone rank of each
    block, and the wall time the blocks took on this rank. With `extra_blocks` (and more than one
    rank), while the rounds so far leave the largest cause undecided (`lead_decided`), up to that
    many more rounds, EXTRA_STEP at a time."""
    found: dict = {kind.name: [] for kind in kinds}
    started = time.perf_counter()
    done, planned, decided = 0, blocks, None
    while True:
        for block in range(done, planned):
            _run_block(timeline, kinds, batches, block, rank, world_size, counters, found)
        done = planned
        if world_size < 2 or extra_blocks <= 0:
            break  # nothing may be added: no look
        # Looked at after the base rounds and after each addition, the last included: the record
        # says whether the rounds it holds decided the run's lead.
        decided = lead_decided(found, rank, world_size, planned)
        if decided or planned >= blocks + extra_blocks:
            break
        planned = min(planned + EXTRA_STEP, blocks + extra_blocks)
    if world_size > 1:
        dist.barrier()  # the last segment's steps end before anything else starts
    return {
        **found,
        "ladder": {
            "blocks": planned,
            "extra_blocks": planned - blocks,
            "lead_decided": decided,
            "marked_per_segment": MARKED_PER_SEGMENT,
            "lead_in_per_segment": LEAD_IN_PER_SEGMENT,
            "alone_rank_by_block": [alone_rank(b, world_size) for b in range(planned)] if world_size > 1 else [],
            "wall_s": time.perf_counter() - started,
        },
    }


def _run_block(timeline, kinds, batches, block: int, rank: int, world_size: int, counters, found: dict) -> None:
    """One round: a segment of every kind, in this round's order."""
    order = kinds if block % 2 == 0 else kinds[::-1]
    for kind in order:
        if world_size > 1:
            dist.barrier()  # sync point: every segment starts with the ranks together
        if kind.alone:
            if rank != alone_rank(block, world_size):
                continue  # waits at the next segment's barrier while the alone rank steps
            time.sleep(SETTLE_S)
        if counters is not None:
            counters.refresh()  # outside the steps: threads and workers listed again
        with kind.context():
            for _ in range(LEAD_IN_PER_SEGMENT):
                kind.step_on(next(batches))
            for _ in range(MARKED_PER_SEGMENT):
                if world_size > 1 and not kind.alone:
                    # Sync point: the ranks start every marked step together, as DDP's steps
                    # do; unsynchronised kinds would drift apart and share the host less.
                    dist.barrier()
                loaded = time.perf_counter()
                batch = next(batches)
                data_s = time.perf_counter() - loaded
                first = counters.read() if counters is not None else None
                step = timeline.step(kind.step_on, batch)
                last = counters.read() if counters is not None else None
                step["data_s"], step["block"] = data_s, block
                step["cpu"] = difference(first, last)
                found[kind.name].append(step)
