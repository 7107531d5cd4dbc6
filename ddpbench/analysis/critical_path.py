"""The critical path across ranks: for each profiled step, the chain of intervals that set its
length, attributed to (rank, phase). No torch.

Read backwards from the step's end (the rank whose step ended last): that rank's own work back to
the collective it was waiting for, that collective's transfer (from the moment its last rank
arrived), then the last rank's own work back to the collective *it* was waiting for, and so on to
the start of the step on the rank where the chain began. A rank waited for a collective when it was
idle as the collective ended (nothing of its own running: the training thread blocked in DDP's
final wait on CPU, the compute stream held back on GPU), or when it sat idle as the collective's
last rank arrived and resumed only after (gloo records a collective's end late, on its own thread);
a collective that ended while the rank kept computing (an all-reduce hidden under backward) sets
nothing and is passed over.

A rank's own work is split by the phases that kept it busy (data, forward, backward, optimizer);
time on the chain that no phase covers is `other` on CPU (the loss, DDP's copies out of its
buckets, Python between ops) and `idle` on GPU (the stream had nothing to run: it waited for the
host), and GPU kernels whose launch was in no phase are `other` too. HolisticTraceAnalysis's
critical path follows one rank; this one crosses ranks wherever a rank waited for another.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ddpbench.analysis.collectives import CrossRankJob, MatchedCollective
from ddpbench.analysis.rank_timeline import TRAINING_PHASES

OWN_PHASES = TRAINING_PHASES + ("other",)
"""A rank's own work, in the order a moment covered by two of them is given to (GPU streams overlap)."""

WAIT_MIN_US = 200.0
"""An idle gap this long or longer is a wait: the gaps between one rank's ops while it computes are
tens of microseconds on CPU and a few on GPU; waiting for a late rank is longer."""


@dataclass
class Segment:
    rank: int
    phase: str
    start_us: float
    end_us: float

    @property
    def us(self) -> float:
        return self.end_us - self.start_us


@dataclass
class StepPath:
    step: int
    start_us: float
    end_us: float
    segments: list[Segment] = field(default_factory=list)

    @property
    def length_us(self) -> float:
        return self.end_us - self.start_us

    def by_rank_phase(self) -> dict[tuple[int, str], float]:
        totals: dict[tuple[int, str], float] = {}
        for segment in self.segments:
            key = (segment.rank, segment.phase)
            totals[key] = totals.get(key, 0.0) + segment.us
        return totals


def _subtract(remaining: list[tuple[float, float]], starts, ends) -> tuple[list, list]:
    """The pieces of `remaining` the merged intervals cover, and what is left of it."""
    covered, left = [], []
    for low, high in remaining:
        first = int(np.searchsorted(ends, low, side="right"))
        cursor = low
        for begin, finish in zip(starts[first:], ends[first:]):
            if begin >= high:
                break
            if begin > cursor:
                left.append((cursor, float(begin)))
            cut_from, cut_to = max(float(begin), cursor), min(float(finish), high)
            if cut_to > cut_from:
                covered.append((cut_from, cut_to))
                cursor = cut_to
        if cursor < high:
            left.append((cursor, high))
    return covered, left


class _RankStep:
    """One rank's step on the job's clock: its phases as arrays, its busy time merged."""

    def __init__(self, job: CrossRankJob, position: int, step: int):
        timeline, shift = job.timelines[position], job.shifts_us[position]
        self.rank = timeline.rank
        # Time on the chain that no phase covers: on GPU the stream had nothing to run (it waited
        # for the host); on CPU the training thread ran something outside the phases' annotations.
        self.uncovered = "idle" if timeline.kind == "gpu" else "other"
        self.start, self.end = (t + shift for t in timeline.steps[step])
        phases = timeline.phases.get(step, {})
        self.phases = {
            phase: (np.asarray(phases[phase][0]) + shift, np.asarray(phases[phase][1]) + shift)
            for phase in OWN_PHASES
            if phase in phases and phases[phase][0]
        }
        if self.phases:
            starts = np.concatenate([s for s, _ in self.phases.values()])
            ends = np.concatenate([e for _, e in self.phases.values()])
            order = np.argsort(starts)
            starts, ends = starts[order], ends[order]
            self.busy = (starts, np.maximum.accumulate(ends))
        else:
            self.busy = (np.zeros(0), np.zeros(0))

    def idle_at(self, moment: float) -> bool:
        """Nothing of this rank's own was running just before `moment`."""
        starts, ends = self.busy
        i = int(np.searchsorted(starts, moment, side="left")) - 1
        return i < 0 or ends[i] < moment

    def resumed_after(self, moment: float) -> float | None:
        """Where this rank was idle at `moment` for longer than the gaps between its own ops, the
        start of its next own work; else None."""
        starts, ends = self.busy
        i = int(np.searchsorted(starts, moment, side="left"))
        if i < len(starts) and starts[i] == moment or (i > 0 and ends[i - 1] >= moment):
            return None
        before = float(ends[i - 1]) if i > 0 else self.start
        after = float(starts[i]) if i < len(starts) else self.end
        return after if after - before >= WAIT_MIN_US else None

    def attribute(self, low: float, high: float) -> list[Segment]:
        """[low, high) of this rank's own time, split by phase; what no phase covers is `other`."""
        if high <= low:
            return []
        remaining = [(low, high)]
        segments = []
        for phase, (starts, ends) in self.phases.items():
            covered, remaining = _subtract(remaining, starts, ends)
            segments += [Segment(self.rank, phase, a, b) for a, b in covered]
        segments += [Segment(self.rank, self.uncovered, a, b) for a, b in remaining]
        return sorted(segments, key=lambda segment: segment.start_us)


def step_path(job: CrossRankJob, step: int) -> StepPath:
    """The chain for one step, its segments in time order."""
    ranks = [_RankStep(job, position, step) for position in range(job.ranks)]
    unused: list[MatchedCollective] = [c for c in job.collectives if c.step == step]
    here = max(range(job.ranks), key=lambda p: ranks[p].end)
    moment = ranks[here].end
    path = StepPath(step, ranks[here].start, moment)
    while True:
        own = ranks[here]
        waited, left = None, moment
        # The collective it waited for: the latest one, ended by `moment`, at whose end it was idle.
        # Or one whose end is recorded after this rank went on (gloo closes its record on its own
        # thread, up to milliseconds after the training thread resumed): this rank sat idle when
        # the collective's last rank arrived, and was released where its own work resumed.
        for collective in sorted(unused, key=lambda c: -c.ends[here]):
            end = float(collective.ends[here])
            if end <= moment and own.idle_at(end):
                waited, left = collective, end
                break
            last = collective.last_rank if collective.last_rank is not None else here
            arrived = float(collective.starts[last])
            resumed = own.resumed_after(arrived) if collective.starts[here] <= arrived < moment else None
            if resumed is not None and resumed <= moment:
                waited, left = collective, min(end, resumed)
                break
        if waited is None:
            path.segments += own.attribute(own.start, moment)
            path.start_us = own.start
            break
        unused.remove(waited)
        path.segments += own.attribute(left, moment)
        last = waited.last_rank if waited.last_rank is not None else here
        arrived = min(float(waited.starts[last]), left)
        path.segments.append(Segment(ranks[last].rank, "communication", arrived, left))
        here, moment = last, arrived
    path.segments.sort(key=lambda segment: segment.start_us)
    return path


def job_paths(job: CrossRankJob) -> list[StepPath]:
    return [step_path(job, step) for step in job.steps]


def path_summary(paths: list[StepPath]) -> dict:
    """Over the steps: each (rank, phase)'s mean milliseconds on the path and its share of the
    paths' total length, largest first."""
    total = sum(path.length_us for path in paths)
    sums: dict[tuple[int, str], float] = {}
    for path in paths:
        for key, us in path.by_rank_phase().items():
            sums[key] = sums.get(key, 0.0) + us
    held = [
        {"rank": rank, "phase": phase, "ms_per_step": us / len(paths) / 1000, "share": us / total if total else 0.0}
        for (rank, phase), us in sorted(sums.items(), key=lambda item: -item[1])
    ]
    return {
        "steps": len(paths),
        "step_ms": total / len(paths) / 1000 if paths else None,
        "held": held,
        "by_step": [
            {
                "step": path.step,
                "length_ms": path.length_us / 1000,
                "held": [
                    {"rank": rank, "phase": phase, "ms": us / 1000}
                    for (rank, phase), us in sorted(path.by_rank_phase().items(), key=lambda item: -item[1])
                ],
            }
            for path in paths
        ],
    }


def format_path(summary: dict, limit: int = 6) -> list[str]:
    """The critical path in a few lines: who held the step, in what phase."""
    if not summary["steps"]:
        return []
    lines = [
        f"critical path across ranks (mean over {summary['steps']} profiled steps of "
        f"{summary['step_ms']:.2f} ms): who held the step"
    ]
    for row in summary["held"][:limit]:
        lines.append(f"  rank {row['rank']} {row['phase']:<13} {row['ms_per_step']:8.3f} ms  {row['share']:6.1%}")
    if len(summary["held"]) > limit:
        rest = sum(row["share"] for row in summary["held"][limit:])
        lines.append(f"  ... {len(summary['held']) - limit} more (rank, phase) pairs, {rest:.1%} together")
    return lines


def held_sentence(summary: dict) -> str | None:
    """The largest holder in words: "rank 1's forward held 8.9 of the step's 21.0 ms"."""
    if not summary["steps"] or not summary["held"]:
        return None
    top = summary["held"][0]
    return (
        f"rank {top['rank']}'s {top['phase']} held {top['ms_per_step']:.1f} of the step's "
        f"{summary['step_ms']:.1f} ms ({top['share']:.0%} of the critical path across ranks)"
    )
