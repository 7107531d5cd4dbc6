"""The samples behind ddpbench's straggler decisions from a run's traces, read the way ddpbench
reads them (ddpbench/analysis/straggler.py, critical_path.py), as the tests of tests/chance.py's
`verdict`: a test that asserts a rank (and its phase) was named states the chance of that going
wrong computed from the very profiled steps the decision came from.

Each decision is one or more tests on those samples, and each list below holds all of them:
- a rank named: the other rank's wait beyond its own, per profiled step, beyond zero at the 95 %
  interval; and each half of the steps choosing it as the slowest, which is the sign of the same
  differences' mean on that half;
- a phase named: its lead beyond zero at the 95 % interval, and larger than every other phase's
  lead (the sign of the mean of its lead beyond the largest other, step by step);
- what held the critical path most: its time on the path larger than every other (rank, phase)'s
  (the sign of the mean of its time beyond the largest other's, step by step).

Two-rank jobs only: there the median rank is the other rank, so these are the decision's own tests.
`effect` is the planted delay, in seconds: the mean a wait or a lead has with it present (the wait
holds the sleep, less what slowed the waiting rank, plus what woke the sleeping one late). A rival
(another phase, another rank's phase on the path) holds some of a step too, so the named one leads
it by half the effect."""

from __future__ import annotations

import statistics

import numpy as np
from chance import Beyond

from ddpbench.analysis.ablation import PHASES
from ddpbench.analysis.critical_path import job_paths


def _other(ranks: int, rank: int) -> int:
    if ranks != 2:
        raise ValueError(f"the tests of a straggler decision here are those of two ranks, not {ranks}")
    return 1 - rank


def _named(beyond: list[float], halves: dict[str, list[float]], effect: float, what: str) -> list[Beyond]:
    """The wait beyond zero; and each half, which chooses the slowest rank for the other half,
    choosing `rank` (the sign of the differences' mean on it)."""
    return [Beyond(beyond, effect, what=what)] + [
        Beyond(half, effect, level=1.0, what=f"{what}, on {name}") for name, half in halves.items()
    ]


def named_in_traces(job, rank: int, effect: float) -> list[Beyond]:
    """`rank` named from the collectives matched across the traces (`straggler.from_collectives`):
    per profiled step, the other rank's waits inside the step's collectives beyond `rank`'s."""
    other = _other(job.ranks, rank)
    steps = sorted(job.steps)
    position = {step: index for index, step in enumerate(steps)}
    waits = np.zeros((job.ranks, len(steps)))
    for collective in job.collectives:
        waits[:, position[collective.step]] += collective.waits_us / 1e6
    ranks = [timeline.rank for timeline in job.timelines]
    beyond = (waits[ranks.index(other)] - waits[ranks.index(rank)]).tolist()
    # The halves `straggler._split_half` chooses on: even steps and odd steps.
    halves = {"the even steps": beyond[0::2], "the odd steps": beyond[1::2]}
    return _named(beyond, halves, effect, f"rank {other}'s wait beyond rank {rank}'s, s per step")


def path_leads(job, rank: int) -> dict[str, dict[int, float]]:
    """Per phase, per profiled step, `rank`'s time on the critical path beyond the other ranks'
    mean in that phase, seconds (`straggler._path_leads`)."""
    others = [timeline.rank for timeline in job.timelines if timeline.rank != rank]
    held = [path.by_rank_phase() for path in job_paths(job)]
    return {
        phase: {
            index: (step.get((rank, phase), 0.0) - statistics.fmean(step.get((o, phase), 0.0) for o in others)) / 1e6
            for index, step in enumerate(held)
        }
        for phase in PHASES
    }


def _phase(leads: dict[str, dict[int, float]], phase: str, effect: float, what: str) -> list[Beyond]:
    """The phase's lead beyond zero, and larger than every other phase's: per profiled step, its
    lead beyond the largest of the others' (where that mean is positive, so is its lead's mean
    beyond each other's, one test for all of them)."""
    named = leads[phase]
    rivals = [leads[other] for other in PHASES if other != phase and leads.get(other)]
    keys = [key for key in named if all(key in rival for rival in rivals)]
    return [
        Beyond(list(named.values()), effect, what=f"{what}: its {phase}'s lead, s"),
        Beyond(
            [named[key] - max(rival[key] for rival in rivals) for key in keys],
            effect / 2,
            level=1.0,
            what=f"{what}: its {phase}'s lead beyond the largest of the other phases', s",
        ),
    ]


def phase_in_traces(job, rank: int, phase: str, effect: float) -> list[Beyond]:
    """`phase` named for `rank` from the critical path over the profiled steps."""
    return _phase(path_leads(job, rank), phase, effect, f"rank {rank} on the path")


def held_the_path(job, rank: int, phase: str, effect: float) -> list[Beyond]:
    """(rank, phase) first in `path_summary`'s `held`: per profiled step, its time on the critical
    path beyond the largest other (rank, phase)'s in that step, seconds (where that mean is positive,
    its total beyond every other's is too)."""
    held = [path.by_rank_phase() for path in job_paths(job)]
    named = (rank, phase)
    return [
        Beyond(
            [
                (step.get(named, 0.0) - max((us for key, us in step.items() if key != named), default=0.0)) / 1e6
                for step in held
            ],
            effect / 2,
            level=1.0,
            what=f"rank {rank}'s {phase} on the path beyond the largest other (rank, phase), s per step",
        )
    ]
