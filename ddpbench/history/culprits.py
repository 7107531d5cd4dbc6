"""Recurring culprits: is the same host (or GPU, or rank) the slowest again and again, beyond what
chance gives for the jobs' layouts? From the history store's ranks (`ddpbench.history.ranks`). No
torch.

What is counted. A sweep gives one vote: its runs of more than one rank, grouped by configuration
and by which host held each rank; in each group, the rank that every run's straggler analysis chose
as the slowest (`ddpbench.analysis.straggler`, each run's stored straggler, both halves agreeing),
where the wait for it over those runs' rounds is beyond noise (`sweep_straggler`); of the groups
with such a rank, the one with the longest wait gives the sweep's vote: that rank, its host and its
device. A sweep that names no straggler gives none (it is counted as such); a vote whose rank's host
was not recorded is counted apart and tests nothing.

Why over the runs' rounds, not pooled over the runs as a configuration's figures are (`pooled`, t
over the runs): a vote asks whether this sweep's ranks had a straggler, not what the configuration's
long-run wait is. Two runs pooled that way have one degree of freedom (t = 12.7), and on the two
hosts a rank held to half a core was chosen as the slowest in every run, named by most runs alone,
and by almost no pair of runs pooled. How often votes fall on a host by chance, with runs that agree
more than independent ones would, is what the test's realistic null measures
(docs/measurements/recurring-hosts.md). The lead shown for a host is pooled over its sweeps, t over
the sweeps, as a figure should be.

The test. Over a window of sweeps (the last K, or since a date), each host's votes are compared with
what chance gives for the layouts it took part in: in a sweep whose voting job had `n` of its `N`
ranks on the host, chance makes it the slowest with probability n / N (4 of 8 ranks: half the time).
With those probabilities the count of its votes is Poisson-binomial (binomial where every sweep had
the same layout), and the p-value is the exact chance of at least that many votes. The hosts are
tested together: a host that could not reach the level even with every vote (too few sweeps, or
chance too high) is not counted (Tarone's rule), and each tested host's p-value is multiplied by the
number counted (Bonferroni), so a window of sweeps names any host by chance alone at most FAMILY_ALPHA
of the time. Devices (GPU UUIDs) and ranks are tested the same way, each family on its own.

A slow rank is not a slow host. Where rank 0 always lands on the same host (a rendezvous orders
nodes by name) a rank that is slow wherever it runs makes that host look slow. A host beyond chance
whose every vote came with the same rank, itself beyond chance, is said to be confounded with it:
not named as the host; the advice is to vary which node takes node rank 0.

What it says of a named host: its lead, the wait for it (ms per step) pooled over its votes with a t
interval over those sweeps, and its phase where a phase's pooled lead is beyond noise
(`straggler.lead_phase`); and where its series changed: the host's wait in every sweep it took part
in (0 where it held nobody back), through the change-point method the gate uses
(`ddpbench.gate.changepoints`, on the values themselves), the lead then pooled since its last change
point.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from ddpbench.analysis.estimates import Estimate, pool
from ddpbench.analysis.straggler import PHASES, Straggler, lead_phase
from ddpbench.history.ranks import RankRow, straggler_of

FAMILY_ALPHA = 0.01
"""How often, at most, a window of sweeps with no slow host names one (each family apart)."""
DEFAULT_LAST = 30
"""The window when none is given: the last 30 sweeps (a month of nightly sweeps)."""
KINDS = ("host", "device", "rank")


@dataclass(frozen=True)
class Window:
    """Which sweeps are tested: those since `since` (an ISO date), else the last `last`."""

    last: int | None = DEFAULT_LAST
    since: str | None = None

    def pick(self, outcomes: list[SweepOutcome]) -> list[SweepOutcome]:
        if self.since is not None:
            return [one for one in outcomes if one.ended_at[:10] >= self.since]
        return outcomes[-self.last :] if self.last else list(outcomes)

    def as_dict(self) -> dict:
        return {"last": None if self.since is not None else self.last, "since": self.since}


@dataclass
class SweepOutcome:
    """One sweep of runs of several ranks: the layout of its voting job, and its vote."""

    machine_class: str
    suite: str
    sweep: str
    ended_at: str
    hosts: dict[int, str | None]
    """Rank -> host of the voting job (or, with no vote, of its largest job)."""
    devices: dict[int, str | None] = field(default_factory=dict)
    straggler: Straggler | None = None
    """The voting job's straggler, beyond noise; None: the sweep named none."""
    configuration: str | None = None
    present: frozenset[str] = frozenset()
    """Every host of the sweep's runs of several ranks (the change points' zeros)."""

    @property
    def voted(self) -> bool:
        return self.straggler is not None and self.straggler.named

    @property
    def rank(self) -> int | None:
        return self.straggler.rank if self.voted else None

    @property
    def host(self) -> str | None:
        return self.hosts.get(self.rank) if self.voted else None

    @property
    def device(self) -> str | None:
        return self.devices.get(self.rank) if self.voted else None

    @property
    def world_size(self) -> int:
        return len(self.hosts)

    def unit_of(self, kind: str) -> str | None:
        return {"host": self.host, "device": self.device, "rank": None if self.rank is None else str(self.rank)}[kind]

    def layout_of(self, kind: str) -> dict[int, str | None]:
        if kind == "rank":
            return {rank: str(rank) for rank in self.hosts}
        return self.hosts if kind == "host" else self.devices


# --- from the store's ranks to sweep outcomes ------------------------------------------------------


def sweep_outcomes(stored: list) -> list[SweepOutcome]:
    """Every sweep with runs of several ranks (`Store.ranks()` rows, `StoredRanks`), oldest first."""
    by_sweep: dict[tuple, list] = {}
    for run in stored:
        if len(run.ranks) > 1:
            by_sweep.setdefault((run.machine_class, run.suite, run.sweep), []).append(run)
    found = []
    for (machine, suite, sweep), runs in by_sweep.items():
        groups: dict[tuple, list] = {}
        for run in runs:
            layout = tuple(row.host for row in run.ranks)
            groups.setdefault((json.dumps(list(run.key)), layout), []).append(run)
        best = None
        for (key_text, _), members in groups.items():
            found_here = sweep_straggler([straggler_of(run.ranks) for run in members])
            size = len(members[0].ranks)
            score = (found_here is not None and found_here.named, found_here.wait.value if found_here else 0.0, size)
            if best is None or score > best[0]:
                best = (score, members[0].ranks, found_here, key_text)
        _, rows, straggler, key_text = best
        found.append(
            SweepOutcome(
                machine,
                suite,
                sweep,
                max(run.ended_at for run in runs),
                {row.rank: row.host for row in rows},
                _devices(rows),
                straggler if straggler is not None and straggler.named else None,
                " ".join(str(part) for part in json.loads(key_text)),
                frozenset(row.host for run in runs for row in run.ranks if row.host),
            )
        )
    return sorted(found, key=lambda one: (one.ended_at, one.sweep))


def over_the_rounds(estimates: list[Estimate]) -> Estimate:
    """The mean of runs' figures with an interval over all their rounds: their standard errors
    combined (the mean's), Student's t at the rounds' degrees of freedom summed."""
    if len(estimates) == 1:
        return estimates[0]
    value = sum(e.value for e in estimates) / len(estimates)
    if any(e.se is None or e.samples < 2 for e in estimates):
        return Estimate(value, None, None, sum(e.samples for e in estimates), "rounds", None)
    df = sum(e.samples - 1 for e in estimates)
    return Estimate.combined(value, *(e.se / len(estimates) for e in estimates), df=df)


def sweep_straggler(found: list[Straggler]) -> Straggler | None:
    """One group's straggler in a sweep, from its runs' (see the module docstring): the rank every
    measured run chose, both halves agreeing in each, and the wait for it over their rounds; None
    where no run measured one."""
    measured = [s for s in found if s.wait is not None and s.rank is not None]
    if not measured:
        return None
    ranks = {s.rank for s in measured}
    first = measured[0]
    agree = len(ranks) == 1 and all(s.halves_agree for s in measured)
    with_leads = [s.leads for s in measured if s.leads]
    leads = {
        phase: over_the_rounds([found[phase] for found in with_leads])
        for phase in PHASES
        if len(with_leads) == len(measured) and all(phase in found for found in with_leads)
    }
    sources = {s.source for s in measured}
    return Straggler(
        over_the_rounds([s.wait for s in measured]),
        first.rank,
        sources.pop() if len(sources) == 1 else "mixed",
        agree,
        lead_phase(leads),
        first.host,
        leads=leads or None,
    )


def _devices(rows: list[RankRow]) -> dict[int, str | None]:
    return {row.rank: row.device_uuid for row in rows}


def device_names(stored: list) -> dict[str, dict]:
    """Device UUID -> its host, serial and PCI bus id, as last recorded."""
    found = {}
    for run in stored:
        for row in run.ranks:
            if row.device_uuid:
                found[row.device_uuid] = {"host": row.host, "serial": row.device_serial, "bus": row.device_pci_bus_id}
    return found


# --- the exact test ------------------------------------------------------------------------------


def at_least(probabilities: list[float], votes: int) -> float:
    """P(at least `votes` successes) over independent trials with these probabilities: the exact
    Poisson-binomial upper tail (binomial when they are equal), by convolution."""
    if votes <= 0:
        return 1.0
    counts = np.array([1.0])
    for p in probabilities:
        counts = np.convolve(counts, [1.0 - p, p])
    return float(min(1.0, max(0.0, counts[votes:].sum())))


def units_tested(smallest: list[float], alpha: float) -> int:
    """Tarone's count: the least m such that at most m units could reach alpha / m with every vote
    (their smallest p-values); units that cannot are left out of the correction."""
    m = 1
    while sum(p <= alpha / m for p in smallest) > m:
        m += 1
    return m


@dataclass
class Culprit:
    """One host, device or rank over the window's voting sweeps it took part in."""

    kind: str
    name: str
    votes: int
    chances: list[float]
    """Per voting sweep it took part in, the chance it was the slowest (its ranks over the job's)."""
    p_value: float = 1.0
    corrected: float | None = None
    """The p-value times the units tested; None: it could not reach the level, not tested."""
    tested: int = 0
    beyond_chance: bool = False
    confounded_with: str | None = None
    lead: Estimate | None = None
    """The wait for it, seconds per step, over its votes since its last change point."""
    phase: str | None = None
    since: str | None = None
    """The sweep its series' last segment starts at, where it changed."""
    since_at: str | None = None
    with_ranks: Counter = field(default_factory=Counter)
    """A host's or device's votes by the rank that held it; a rank's by host."""
    with_devices: Counter = field(default_factory=Counter)

    @property
    def trials(self) -> int:
        return len(self.chances)

    @property
    def expected(self) -> float:
        return sum(self.chances)

    @property
    def named(self) -> bool:
        """Beyond chance and not confounded with a rank: named as the culprit."""
        return self.beyond_chance and self.confounded_with is None

    def as_dict(self) -> dict:
        return {
            "kind": self.kind,
            "name": self.name,
            "votes": self.votes,
            "sweeps": self.trials,
            "chance_votes": self.expected,
            "p_value": self.p_value,
            "corrected_p_value": self.corrected,
            "tested_with": self.tested,
            "beyond_chance": self.beyond_chance,
            "confounded_with": self.confounded_with,
            "named": self.named,
            "lead_s": {**self.lead.as_dict(), "se": self.lead.se} if self.lead is not None else None,
            "phase": self.phase,
            "since_sweep": self.since,
            "votes_by_rank": {str(k): v for k, v in sorted(self.with_ranks.items(), key=lambda kv: str(kv[0]))},
            "votes_by_device": dict(sorted(self.with_devices.items())),
        }


def tested_family(kind: str, voting: list[SweepOutcome], alpha: float) -> list[Culprit]:
    """Every unit of one kind that took part in a voting sweep, tested (see the module docstring)."""
    units: dict[str, Culprit] = {}
    for one in voting:
        layout = one.layout_of(kind)
        if any(name is None for name in layout.values()):
            continue  # a layout not wholly recorded cannot say what chance gives
        held = Counter(layout.values())
        for name, ranks in held.items():
            units.setdefault(name, Culprit(kind, name, 0, [])).chances.append(ranks / one.world_size)
        voted = one.unit_of(kind)
        if voted is not None and voted in units:
            unit = units[voted]
            unit.votes += 1
            unit.with_ranks[one.host if kind == "rank" else one.rank] += 1
            if kind == "host" and one.device:
                unit.with_devices[one.device] += 1
    found = sorted(units.values(), key=lambda unit: (-unit.votes, unit.name))
    smallest = [math.prod(unit.chances) for unit in found]
    m = units_tested(smallest, alpha)
    for unit, least in zip(found, smallest):
        unit.p_value = at_least(unit.chances, unit.votes)
        if least <= alpha / m:
            unit.tested = m
            unit.corrected = min(1.0, unit.p_value * m)
            unit.beyond_chance = unit.p_value <= alpha / m
    return found


# --- what is said of a named host ----------------------------------------------------------------


def _lead(votes: list[SweepOutcome]) -> tuple[Estimate | None, str | None]:
    """The wait for it pooled over its votes (t over the sweeps), and the phase whose pooled lead is
    beyond noise."""
    if not votes:
        return None, None
    wait = pool([one.straggler.wait for one in votes])
    with_leads = [one.straggler.leads for one in votes if one.straggler.leads]
    leads = {
        phase: pool([found[phase] for found in with_leads])
        for phase in PHASES
        if with_leads and all(phase in found for found in with_leads)
    }
    return wait, lead_phase(leads)


def series_of(name: str, outcomes: list[SweepOutcome]) -> list[tuple[SweepOutcome, float]]:
    """The host's wait in every sweep it took part in: the wait for it where it held the vote, else 0."""
    return [(one, one.straggler.wait.value if one.host == name else 0.0) for one in outcomes if name in one.present]


def describe(culprit: Culprit, window: list[SweepOutcome], outcomes: list[SweepOutcome], changes: dict) -> None:
    """Fill in a host's lead, phase and last change point."""
    series = series_of(culprit.name, outcomes)
    points = changes.get(culprit.name) or []
    start = series[points[-1]][0] if points else None
    votes = [one for one in window if one.host == culprit.name]
    if start is not None:
        culprit.since, culprit.since_at = start.sweep, start.ended_at
        votes = [one for one in votes if (one.ended_at, one.sweep) >= (start.ended_at, start.sweep)] or votes
    culprit.lead, culprit.phase = _lead(votes)


def confound(families: dict[str, list[Culprit]]) -> None:
    """A host or device beyond chance whose every vote came with one rank that is itself beyond
    chance cannot be told from that rank."""
    ranks = {unit.name for unit in families.get("rank", []) if unit.beyond_chance}
    for kind in ("host", "device"):
        for unit in families.get(kind, []):
            held = [rank for rank, count in unit.with_ranks.items() if count]
            if unit.beyond_chance and len(held) == 1 and str(held[0]) in ranks:
                unit.confounded_with = f"rank {held[0]}"


@dataclass
class HostsVerdict:
    """The window's hosts, devices and ranks, each tested against chance."""

    window: Window
    sweeps: list[SweepOutcome]
    families: dict[str, list[Culprit]]
    alpha: float
    method: str
    """The change-point method, in words."""
    devices: dict[str, dict] = field(default_factory=dict)

    @property
    def voting(self) -> list[SweepOutcome]:
        return [one for one in self.sweeps if one.voted]

    @property
    def not_recorded(self) -> int:
        """Votes whose rank's host was not recorded."""
        return sum(one.host is None for one in self.voting)

    def named(self, kind: str) -> list[Culprit]:
        return [unit for unit in self.families.get(kind, []) if unit.named]

    def confounded(self) -> list[Culprit]:
        return [unit for kind in ("host", "device") for unit in self.families.get(kind, []) if unit.confounded_with]

    def host(self, name: str) -> Culprit | None:
        return next((unit for unit in self.named("host") if unit.name == name), None)


def judge(outcomes: list[SweepOutcome], window: Window | None = None, alpha: float = FAMILY_ALPHA) -> HostsVerdict:
    """The test over the window's sweeps (default: the last DEFAULT_LAST); the change points over
    every sweep given."""
    from ddpbench.gate.changepoints import change_points

    window = window or Window()
    picked = window.pick(outcomes)
    voting = [one for one in picked if one.voted]
    families = {kind: tested_family(kind, voting, alpha) for kind in KINDS}
    confound(families)
    hosts = [unit for unit in families["host"] if unit.named]
    changes, method = change_points(
        {unit.name: [value for _, value in series_of(unit.name, outcomes)] for unit in hosts}, log=False
    )
    for unit in hosts:
        describe(unit, picked, outcomes, changes)
    return HostsVerdict(window, picked, families, alpha, method)


def store_verdict(
    store, window: Window | None = None, alpha: float = FAMILY_ALPHA, leave_out: str | None = None
) -> HostsVerdict:
    """The verdict over a history store's ranks; `leave_out` a sweep (the gate's candidate: a sweep is
    no evidence about itself)."""
    stored = [run for run in store.ranks() if leave_out is None or run.sweep != leave_out]
    verdict = judge(sweep_outcomes(stored), window, alpha)
    verdict.devices = device_names(stored)
    return verdict
