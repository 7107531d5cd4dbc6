"""Waiting for the slowest rank: one definition for every view (the causes, the report at any world
size, scripts, the traces), the rank it names and the phase that rank was in. No torch.

Under DDP every rank waits for the slowest at each all-reduce, so the ranks' step times come out
equal and the straggler hides inside the others' waits. The wait for it is the median rank's time
beyond the slowest rank's, read where no rank waits for another or where the waits are seen:
- the in-process ablation (DDP runs with profiling on): the median rank's waits inside DDP's
  collectives beyond the slowest rank's, each against its own DDP on one rank, per round;
- the collectives matched across the ranks' traces (a script's run, or any run without the
  ablation): per profiled step, the median rank's wait inside the step's collectives beyond the
  slowest rank's;
- the no_sync replay (older records): each rank's own step without the all-reduce, the slowest
  rank's beyond the median rank's, per replayed step.
In each, the slowest and the median rank are chosen on one half of the rounds (or steps) and the
wait is read on the other half, both ways round: chosen and read on the same data, identical ranks'
noise would read as a positive wait. So identical ranks read zero on average, and the wait is a
straggler only where its 95 % interval excludes zero and both halves chose the same rank.

The phase: with the ablation, the phase (data, forward, backward, optimizer) of the slowest rank's
own step on DDP on one rank that is longest beyond the median rank's, named only where that lead is
beyond noise (its 95 % interval over the rounds, or pooled over the runs, above zero); else the rank
is named with "phase unclear". With traces, the lead is the slowest rank's time on the critical
path across ranks in that phase beyond the other ranks' mean, per profiled step, with its interval
over the steps. The replay times whole steps only: a rank it names has its phase unclear.
"""

from __future__ import annotations

import statistics
from collections import Counter
from dataclasses import dataclass

import numpy as np

from ddpbench.analysis.ablation import PHASES, Ablation, NoAblation, median_of_others, read_ablation
from ddpbench.analysis.estimates import Estimate, pool
from ddpbench.records.schema import Record

SOURCES = {
    "ablation": "the in-process ablation: the median rank's waits in DDP's collectives beyond the slowest rank's",
    "collectives": "the collectives matched across the ranks' traces: the median rank's waits beyond the slowest's",
    "replay": "the no_sync replay: the slowest rank's own step beyond the median rank's, without the all-reduce",
}


@dataclass
class Straggler:
    """One run's (or, pooled, one configuration's) answer to "did a rank hold the others back"."""

    wait: Estimate | None
    """Seconds per step the median rank waits for the slowest; None where nothing could tell."""
    rank: int | None
    """The slowest rank (None where no source chose one)."""
    source: str
    """ablation, collectives, replay, or none."""
    halves_agree: bool = True
    phase: str | None = None
    """The phase the slowest rank was in (data, forward, backward, optimizer), where its lead is
    beyond noise; None: phase unclear."""
    host: str | None = None
    why_not: str = ""
    """Where no source applies: why."""
    leads: dict[str, Estimate] | None = None
    """Per phase, the slowest rank's lead over the median rank's (seconds per step), where measured."""

    @property
    def phase_words(self) -> str:
        """`in its backward`, or `phase unclear` where no phase's lead is beyond noise."""
        return f"in its {self.phase}" if self.phase else "phase unclear"

    @property
    def named(self) -> bool:
        """A straggler: a positive wait beyond noise, the same rank chosen by both halves."""
        return (
            self.wait is not None
            and self.rank is not None
            and self.wait.significant
            and self.wait.value > 0
            and self.halves_agree
        )

    def who(self) -> str:
        return f"rank {self.rank}" + (f" on {self.host}" if self.host else "") if self.rank is not None else "no rank"

    def sentence(self) -> str:
        """The verdict in one sentence."""
        if self.wait is None:
            return f"Cannot tell whether a rank held the others back: {self.why_not}."
        figure = _figure(self.wait)
        if self.named:
            return f"{self.who().capitalize()} held the others back ({self.phase_words}): they wait {figure} for it."
        if self.wait.significant and self.wait.value > 0:
            return (
                f"The ranks take turns being the slowest (the halves name different ranks): the others wait "
                f"{figure} per step."
            )
        return f"No rank held the others back beyond noise (the wait for the slowest, {self.who()}, is {figure})."

    def as_dict(self) -> dict:
        return {
            "named": self.named,
            "rank": self.rank,
            "host": self.host,
            "phase": self.phase,
            "source": self.source,
            "halves_agree": self.halves_agree,
            "wait_s": self.wait.as_dict() if self.wait else None,
            "phase_leads_s": {phase: lead.as_dict() for phase, lead in (self.leads or {}).items()},
            "why_not": self.why_not or None,
        }


def _figure(estimate: Estimate) -> str:
    half = f" ± {estimate.half * 1e3:.2f}" if estimate.has_interval else ""
    runs = f", {estimate.samples} runs" if estimate.over == "runs" else ""
    return f"{estimate.value * 1e3:.2f}{half} ms per step{runs}"


def _host(record: Record, rank: int | None) -> str | None:
    if rank is None:
        return None
    found = next((r for r in record.ranks if r.rank == rank), None)
    return found.hostname if found else None


def from_ablation(record: Record, ablation: Ablation) -> Straggler:
    if ablation.world_size < 2:
        return Straggler(Estimate.exact(0.0), None, "ablation", why_not="one rank: no other rank to wait for")
    wait = Estimate.of_rounds(list(ablation.rounds["straggler_wait"].values()))
    leads = {
        phase: Estimate.of_rounds(list(values.values()))
        for phase in PHASES
        if (values := ablation.rounds.get(f"lead:{phase}"))
    }
    slowest = ablation.slowest_rank
    return Straggler(
        wait, slowest, "ablation", ablation.halves_agree, lead_phase(leads), _host(record, slowest), leads=leads
    )


def lead_phase(leads: dict[str, Estimate]) -> str | None:
    """The phase whose lead is largest among those beyond noise and positive; None: phase unclear."""
    beyond = {phase: lead.value for phase, lead in leads.items() if lead.significant and lead.value > 0}
    return max(beyond, key=beyond.get) if beyond else None


def _split_half(per_rank: np.ndarray, slowest_is_min: bool) -> tuple[list[float], list[int], bool]:
    """per_rank: (ranks x steps). Per step of one half, the median rank's value less the slowest's
    (or the slowest's less the median's, when the slowest has the largest value), the two chosen on
    the other half; and the slowest rank each half chose."""
    steps = per_rank.shape[1]
    halves = (np.arange(0, steps, 2), np.arange(1, steps, 2))
    found, chosen = [], []
    for index in (0, 1):
        choose_on, read_on = halves[1 - index], halves[index]
        if len(choose_on) == 0 or len(read_on) == 0:
            choose_on = read_on = np.arange(steps)  # one step: nothing to split
        means = per_rank[:, choose_on].mean(axis=1)
        slowest = int(means.argmin() if slowest_is_min else means.argmax())
        others = sorted((r for r in range(per_rank.shape[0]) if r != slowest), key=lambda r: means[r])
        # The median of the others by speed: by the wait (longest waits first: fastest), or by own time.
        median = median_of_others(others[::-1] if slowest_is_min else others)
        sign = 1.0 if slowest_is_min else -1.0
        found += (sign * (per_rank[median, read_on] - per_rank[slowest, read_on])).tolist()
        chosen.append(slowest)
        if len(halves[0]) == 0 or len(halves[1]) == 0:
            break
    return found, chosen, len(set(chosen)) == 1


def from_collectives(record: Record, job) -> Straggler:
    """From a CrossRankJob (`ddpbench.analysis.collectives.match_job`) of the run's traces."""
    steps = sorted(job.steps)
    waits = np.zeros((job.ranks, len(steps)))
    position = {step: i for i, step in enumerate(steps)}
    for collective in job.collectives:
        waits[:, position[collective.step]] += collective.waits_us / 1e6
    if len(steps) == 0:
        return Straggler(None, None, "collectives", why_not="the traces hold no whole profiled step")
    values, chosen, agree = _split_half(waits, slowest_is_min=True)
    wait = Estimate.of_rounds(values)
    slowest = Counter(chosen).most_common(1)[0][0]
    rank = job.timelines[slowest].rank
    leads = _path_leads(job, rank)
    return Straggler(wait, rank, "collectives", agree, lead_phase(leads), _host(record, rank), leads=leads or None)


def _path_leads(job, rank: int) -> dict[str, Estimate]:
    """Per phase, per profiled step, the slowest rank's time on the critical path across ranks
    beyond the other ranks' mean in the same phase, with its interval over the steps."""
    from ddpbench.analysis.critical_path import job_paths

    others = [timeline.rank for timeline in job.timelines if timeline.rank != rank]
    paths = job_paths(job)
    if not others or len(paths) < 2:
        return {}
    held = [path.by_rank_phase() for path in paths]
    return {
        phase: Estimate.of_rounds(
            [
                (step.get((rank, phase), 0.0) - statistics.fmean(step.get((o, phase), 0.0) for o in others)) / 1e6
                for step in held
            ]
        )
        for phase in PHASES
    }


def from_replay(record: Record) -> Straggler | None:
    """From the no_sync replay's per-rank step times; None where the record has none."""
    ranks = sorted(record.ranks, key=lambda r: r.rank)
    times = [r.no_sync_step_times_s for r in ranks]
    if len(ranks) < 2 or any(not t for t in times) or len({len(t) for t in times}) != 1:
        return None
    values, chosen, agree = _split_half(np.asarray(times, dtype=float), slowest_is_min=False)
    slowest = ranks[Counter(chosen).most_common(1)[0][0]].rank
    return Straggler(Estimate.of_rounds(values), slowest, "replay", agree, None, _host(record, slowest))


def without_ablation(record: Record, job=None, why: str = "") -> Straggler:
    """The straggler of a run without the ablation: from its matched traces where given, else its
    replay; otherwise why nothing can tell."""
    if record.spec.world_size < 2:
        return Straggler(Estimate.exact(0.0), None, "none", why_not="one rank: no other rank to wait for")
    if job is not None:
        return from_collectives(record, job)
    replayed = from_replay(record)
    if replayed is not None:
        return replayed
    return Straggler(
        None, None, "none", why_not=why or "no in-process ablation, no matched traces and no no_sync replay"
    )


def pooled(found: list[Straggler]) -> Straggler:
    """One configuration's straggler from its runs': the waits pooled, the rank and phase its runs
    name most; the halves agree only where every run's did and all runs chose the same rank."""
    measured = [s for s in found if s.wait is not None]
    if not measured:
        return found[0] if found else Straggler(None, None, "none", why_not="no run")
    if len(measured) == 1:
        return measured[0]
    ranks = Counter(s.rank for s in measured if s.rank is not None)
    rank = ranks.most_common(1)[0][0] if ranks else None
    agree = all(s.halves_agree for s in measured) and len(ranks) <= 1
    sources = {s.source for s in measured}
    # Each phase's lead pooled over the runs that name this rank (t over those runs): the phase is
    # named only where its pooled lead is beyond noise.
    same = [s for s in measured if s.rank == rank and s.leads]
    leads = {
        phase: pool([s.leads[phase] for s in same]) for phase in PHASES if same and all(phase in s.leads for s in same)
    }
    return Straggler(
        pool([s.wait for s in measured]),
        rank,
        sources.pop() if len(sources) == 1 else "mixed",
        agree,
        lead_phase(leads),
        next((s.host for s in measured if s.rank == rank), None),
        leads=leads or None,
    )


def run_straggler(record: Record, job=None) -> Straggler:
    """One run's straggler from the best source it has: its ablation, else its matched traces
    (`job`, where the caller read them), else its replay."""
    try:
        return from_ablation(record, read_ablation(record))
    except NoAblation as exc:
        return without_ablation(record, job, f"no in-process ablation ({exc}), no matched traces, no no_sync replay")
