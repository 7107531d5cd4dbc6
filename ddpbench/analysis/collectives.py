"""Collectives matched across ranks: in each profiled step, each collective as every rank saw it,
and what that separates: who arrived last, how long the transfer took, how long each rank waited.
No torch.

A collective is matched across ranks by its process group's sequence number where the trace has
one, otherwise by its order within its process group (its stream, when the trace names no group).
gloo's annotations carry neither group nor sequence number: they are matched by order.

For one collective, on the job's one clock (`rank_clocks`):
- arrival spread: the last rank's start minus the first rank's;
- transfer: the shortest duration across ranks, the time it takes when nobody is waiting (the
  last rank to arrive finds the others there); AMD's TraceLens reads it the same way;
- wait (per rank): its duration minus the transfer;
- the last rank: the one that started last, whom everybody else waited for.

Per bucket (a collective's place in its group within a step: DDP's buckets all-reduce in the same
order every step) the run's table gives medians over steps and each rank's share of last arrivals.

Some of a job's ranks (`match_job(..., subset=True)`, people profile a few ranks of a large job):
the ranks at hand are still matched collective by collective, which puts them on one clock, but a
collective's transfer, waits and last rank need every rank of its process group, so only the
collectives of groups whose every rank is here are analysed; the others are named, with why, in
`CrossRankJob.unmatched`.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

import numpy as np

from ddpbench.analysis.rank_clocks import (
    ClockOffset,
    JobError,
    align_clocks,
    base_shift_us,
    check_job,
    clock_of,
    format_offsets,
    job_ranks,
    read_timelines,
)
from ddpbench.analysis.rank_timeline import RankTimeline

TOP_RANKS = 5
"""Ranks named in a table's cells and summaries; --json has every rank."""


@dataclass
class MatchedCollective:
    """One collective of one step across every rank; arrays in rank order, on the job's clock."""

    step: int
    group: str
    index: int
    """Its place among its group's collectives in the step: DDP's bucket order."""
    name: str
    elements: int | None
    starts: np.ndarray
    ends: np.ndarray

    @property
    def durations(self) -> np.ndarray:
        return self.ends - self.starts

    @property
    def spread_us(self) -> float:
        return float(self.starts.max() - self.starts.min())

    @property
    def transfer_us(self) -> float:
        return float(self.durations.min())

    @property
    def waits_us(self) -> np.ndarray:
        return self.durations - self.transfer_us

    @property
    def last_rank(self) -> int | None:
        """None when every rank started at the same moment (a trace merged with its own copy)."""
        return int(np.argmax(self.starts)) if self.spread_us > 0 else None

    def as_dict(self) -> dict:
        return {
            "step": self.step,
            "group": self.group,
            "index": self.index,
            "name": self.name,
            "elements": self.elements,
            "spread_us": self.spread_us,
            "transfer_us": self.transfer_us,
            "last_rank": self.last_rank,
            "waits_us": self.waits_us.tolist(),
        }


@dataclass
class CrossRankJob:
    """A job's rank traces, checked, matched and on one clock."""

    timelines: list[RankTimeline]
    steps: list[int]
    collectives: list[MatchedCollective]
    offsets: dict[str, ClockOffset]
    shifts_us: list[float] = field(default_factory=list)
    """Per rank: what its trace's `ts` needs added to read on the job's clock (base and offset)."""
    world_size: int = 0
    """The job's ranks, given or not (0: as many as given)."""
    missing: list[int] = field(default_factory=list)
    """The job's ranks with no trace among those given (a subset of the job)."""
    unmatched: list[str] = field(default_factory=list)
    """Per process group whose collectives were not analysed: which, and why."""

    @property
    def ranks(self) -> int:
        return len(self.timelines)


def _ordered(timeline: RankTimeline, step: int) -> dict[str, list]:
    by_group: dict[str, list] = {}
    for collective in timeline.collectives.get(step, []):
        by_group.setdefault(collective.group, []).append(collective)
    return by_group


def _match_step(timelines: list[RankTimeline], step: int) -> list[tuple[str, int, list]]:
    """(group, index, one Collective per rank) for every collective of the step."""
    per_rank = [_ordered(timeline, step) for timeline in timelines]
    first = timelines[0]
    groups = sorted(set().union(*(set(groups) for groups in per_rank)))
    matched = []
    for group in groups:
        lists = [groups_of_rank.get(group, []) for groups_of_rank in per_rank]
        if all(c.sequence is not None for own in lists for c in own):
            lists = _by_sequence(timelines, lists, step, group)
        for timeline, own in zip(timelines[1:], lists[1:]):
            if len(own) != len(lists[0]):
                raise JobError(
                    f"rank {timeline.rank}, step {step}: {len(own)} collectives in group {group} where rank "
                    f"{first.rank} has {len(lists[0])}: the ranks did not run the same collectives"
                )
        for index, row in enumerate(zip(*lists)):
            for timeline, collective in zip(timelines[1:], row[1:]):
                if collective.name != row[0].name:
                    raise JobError(
                        f"rank {timeline.rank}, step {step}: collective {index} of group {group} is "
                        f"{collective.name} where rank {first.rank}'s is {row[0].name}"
                    )
            matched.append((group, index, list(row)))
    return matched


def _by_sequence(timelines, lists, step, group):
    """Each rank's collectives put in sequence-number order; every rank must have the same numbers."""
    reference = sorted(c.sequence for c in lists[0])
    ordered = []
    for timeline, own in zip(timelines, lists):
        numbers = sorted(c.sequence for c in own)
        if numbers != reference:
            missing = sorted(set(reference) - set(numbers)) or sorted(set(numbers) - set(reference))
            raise JobError(
                f"rank {timeline.rank}, step {step}: group {group}'s collective with sequence number "
                f"{missing[0] if missing else '?'} does not match rank {timelines[0].rank}'s "
                f"({len(numbers)} collectives against {len(reference)})"
            )
        ordered.append(sorted(own, key=lambda c: c.sequence))
    return ordered


def match_job(paths: list[str], jobs: int | None = None, subset: bool = False) -> CrossRankJob:
    """Read, check, match and align a job's rank traces (JobError or TraceError on bad input).
    With `subset`, ranks of the job may be missing: see the module's docstring."""
    timelines = read_timelines(paths, jobs)
    steps = check_job(timelines, subset)
    world_size, missing = job_ranks(timelines)
    origin_ns = timelines[0].base_ns
    bases = [base_shift_us(timeline, origin_ns) for timeline in timelines]
    rows = []
    for step in steps:
        for group, index, row in _match_step(timelines, step):
            starts = np.array([c.start for c in row]) + bases
            ends = np.array([c.end for c in row]) + bases
            rows.append((step, group, index, row[0].name, row[0].elements, starts, ends))
    ends_by_rank = {timeline.rank: [row[6][i] for row in rows] for i, timeline in enumerate(timelines)}
    offsets = align_clocks(timelines, ends_by_rank)
    shifts = np.array([bases[i] + offsets[clock_of(t)].offset_us for i, t in enumerate(timelines)])
    incomplete = _incomplete_groups(timelines, world_size, {row[1] for row in rows}) if missing else {}
    collectives = [
        MatchedCollective(step, group, index, name, elements, starts - bases + shifts, ends - bases + shifts)
        for step, group, index, name, elements, starts, ends in rows
        if group not in incomplete
    ]
    unmatched = [
        f"group {group}: {sum(1 for row in rows if row[1] == group)} collectives over {len(steps)} steps: " f"{why}"
        for group, why in sorted(incomplete.items())
    ]
    return CrossRankJob(timelines, steps, collectives, offsets, shifts.tolist(), world_size, missing, unmatched)


def _incomplete_groups(timelines: list[RankTimeline], world_size: int, groups: set[str]) -> dict[str, str]:
    """The groups some of whose ranks have no trace here, each with why its collectives cannot be
    analysed. A group whose ranks the traces do not list spans the job (gloo's annotations name no
    group at all)."""
    given = {timeline.rank for timeline in timelines}
    known = {}
    for timeline in timelines:
        known.update(timeline.group_ranks)
    found = {}
    for group in groups:
        members = known.get(group) or list(range(world_size))
        absent = sorted(set(members) - given)
        if absent:
            found[group] = (
                f"its {len(members)} ranks' traces are needed (a collective's transfer is its shortest duration "
                f"over all of them, the waits and the last to arrive are read against it); missing: "
                f"{ranks_named(absent)}"
            )
    return found


def ranks_named(ranks: list[int]) -> str:
    """`rank 1`, or `126 ranks, 2-127`."""
    return f"rank {ranks[0]}" if len(ranks) == 1 else f"{len(ranks)} ranks, {rank_ranges(ranks)}"


def rank_ranges(ranks: list[int]) -> str:
    """`0-3, 7, 9-127`: sorted ranks as runs of consecutive numbers."""
    runs: list[list[int]] = []
    for rank in sorted(ranks):
        if runs and rank == runs[-1][1] + 1:
            runs[-1][1] = rank
        else:
            runs.append([rank, rank])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


def bucket_table(job: CrossRankJob) -> list[dict]:
    """One row per bucket (group and place in the step): medians over steps, and who arrived last."""
    by_bucket: dict[tuple[str, int], list[MatchedCollective]] = {}
    for collective in job.collectives:
        by_bucket.setdefault((collective.group, collective.index), []).append(collective)
    rows = []
    for (group, index), found in sorted(by_bucket.items()):
        waits = np.median(np.array([c.waits_us for c in found]), axis=0)  # per rank, over steps
        last = _last_counts(found, job.ranks)
        ranks = [t.rank for t in job.timelines]
        rows.append(
            {
                "group": group,
                "bucket": index,
                "name": found[0].name,
                "elements": found[0].elements,
                "steps": len(found),
                "spread_ms": statistics.median(c.spread_us for c in found) / 1000,
                "transfer_ms": statistics.median(c.transfer_us for c in found) / 1000,
                "wait_ms_by_rank": {rank: float(w) / 1000 for rank, w in zip(ranks, waits)},
                "last_arrival_share_by_rank": {rank: float(n) / len(found) for rank, n in zip(ranks, last) if n},
            }
        )
    return rows


def _last_counts(collectives: list[MatchedCollective], ranks: int) -> np.ndarray:
    return np.bincount([c.last_rank for c in collectives if c.last_rank is not None], minlength=ranks)


def rank_summary(job: CrossRankJob) -> list[dict]:
    """Per rank over every matched collective: its share of last arrivals and its median wait."""
    if not job.collectives:
        return []
    last = _last_counts(job.collectives, job.ranks)
    waits = np.median(np.array([c.waits_us for c in job.collectives]), axis=0)
    rows = [
        {
            "rank": timeline.rank,
            "host": timeline.host,
            "last_arrivals": int(last[i]),
            "last_arrival_share": float(last[i]) / len(job.collectives),
            "median_wait_ms": float(waits[i]) / 1000,
        }
        for i, timeline in enumerate(job.timelines)
    ]
    return sorted(rows, key=lambda row: (-row["last_arrivals"], row["median_wait_ms"], row["rank"]))


def _size(elements: int | None) -> str:
    if elements is None:
        return "?"
    return f"{elements / 1e6:.2f} M" if elements >= 1e5 else str(elements)


def format_bucket_table(job: CrossRankJob) -> str:
    """What `ddpbench trace collectives` prints about the collectives."""
    table = bucket_table(job)
    if not table and job.unmatched:
        return "\n".join(
            [
                f"{job.ranks} rank trace{'s' if job.ranks != 1 else ''} of a job of {job.world_size}, "
                f"{len(job.steps)} profiled steps: no collective could be analysed",
                *format_offsets(job.offsets),
                *(f"not analysed: {line}" for line in job.unmatched),
            ]
        )
    if not table:
        return f"{job.ranks} rank traces, {len(job.steps)} profiled steps: no collectives in them"
    lines = [
        f"{job.ranks} rank traces ({job.timelines[0].kind}, backend {job.timelines[0].backend}), "
        f"{len(job.steps)} profiled steps, {len(job.collectives)} collectives matched across ranks",
        *format_offsets(job.offsets),
        "",
        f"{'group':>6} {'bucket':>6} {'collective':<16} {'elements':>9} {'steps':>5} {'spread ms':>9} "
        f"{'transfer ms':>11} {'wait ms':>21}  last to arrive",
    ]
    for row in table:
        waits = row["wait_ms_by_rank"]
        most = max(waits, key=waits.get)
        shares = sorted(row["last_arrival_share_by_rank"].items(), key=lambda item: -item[1])[:2]
        last = ", ".join(f"rank {rank} {share:.0%}" for rank, share in shares) or "a tie: every rank at once"
        lines.append(
            f"{row['group']:>6} {row['bucket']:>6} {row['name'][:16]:<16} {_size(row['elements']):>9} "
            f"{row['steps']:>5} {row['spread_ms']:9.3f} {row['transfer_ms']:11.3f} "
            f"{f'median {statistics.median(waits.values()):.3f}, max {waits[most]:.3f} (rank {most})':>21}  {last}"
        )
    lines.append("")
    late = [row for row in rank_summary(job) if row["last_arrivals"]]
    if late:
        lines.append("last to arrive (everybody else waited for it), over all matched collectives:")
    else:
        lines.append("last to arrive: nobody, every collective started on every rank at the same moment")
    for row in late[:TOP_RANKS]:
        lines.append(
            f"  rank {row['rank']}: last at {row['last_arrivals']} of {len(job.collectives)} "
            f"({row['last_arrival_share']:.0%}), median wait {row['median_wait_ms']:.3f} ms"
        )
    lines.append(
        "medians over steps; transfer = shortest duration across ranks, wait = a rank's duration minus it; "
        "spread = last arrival minus first"
    )
    lines += [f"not analysed: {line}" for line in job.unmatched]
    return "\n".join(lines)


def job_summary(job: CrossRankJob) -> dict:
    """Everything `--json` gives about the collectives."""
    return {
        "ranks": [
            {"rank": t.rank, "host": t.host, "path": t.path, "clock": clock_of(t), "shift_us": shift}
            for t, shift in zip(job.timelines, job.shifts_us)
        ],
        "steps": job.steps,
        "clocks": [offset.as_dict() for offset in job.offsets.values()],
        "buckets": bucket_table(job),
        "last_arrivals": rank_summary(job),
        "collectives": [c.as_dict() for c in job.collectives],
        "world_size": job.world_size,
        "missing_ranks": job.missing,
        "not_analysed": job.unmatched,
    }
