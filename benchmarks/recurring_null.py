"""The realistic null of benchmarks/recurring_hosts.py: synthetic histories drawn from real sweeps in
which nothing was planted, to measure how often `ddpbench history hosts` names a host by chance.

A synthetic sweep is a real null sweep drawn at random (with replacement), kept whole: its runs'
stragglers pooled as the store pools them, so its vote (or its lack of one), the rank the vote went
to, and the agreement of its runs with each other are the real sweep's. What the real sweeps share
(a bias towards one rank, runs of one sweep that tend to agree) the synthetic history keeps, and
whatever was the real hosts' own doing is dropped: the synthetic sweep's ranks are placed on hosts
again, by one of two layouts:
- alternating: which node takes node rank 0 alternates from sweep to sweep, as the measurement did;
- fixed: node rank 0 always on node-0, as a rendezvous that orders the nodes by name gives every job
  on the same two machines. A rank bias then looks like a host's; `history hosts` must say the host
  goes with the rank rather than name it.

Each history is judged by the same code as `history hosts` (`ddpbench.history.culprits.judge`); the
rate is the share of histories naming any host, with its Clopper-Pearson 95 % upper bound.
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import replace

from scipy import stats

from ddpbench.history.culprits import SweepOutcome, Window, judge

HOSTS = ("node-0", "node-1")
LAYOUTS = ("alternating", "fixed")


def placed(outcome: SweepOutcome, number: int, layout: str) -> SweepOutcome:
    """The real sweep's vote as synthetic sweep `number`, its ranks on hosts by `layout`."""
    first = number % 2 if layout == "alternating" else 0
    hosts = {rank: HOSTS[(first + rank) % 2] for rank in sorted(outcome.hosts)}
    day = f"2027-01-{1 + number // 24:02d}T{number % 24:02d}:00:00"
    straggler = None
    if outcome.straggler is not None:
        straggler = replace(outcome.straggler, host=hosts.get(outcome.straggler.rank))
    return SweepOutcome(
        "synthetic",
        "null",
        f"synthetic-{number}",
        day,
        hosts,
        {},
        straggler,
        outcome.configuration,
        frozenset(hosts.values()),
    )


def culprit_frequencies(outcomes: list[SweepOutcome]) -> dict:
    """What the real null sweeps show: their votes by rank, and those that named none."""
    votes = Counter(str(one.rank) for one in outcomes if one.voted)
    return {"sweeps": len(outcomes), "no_vote": sum(not one.voted for one in outcomes), "by_rank": dict(votes)}


def upper_bound(hits: int, trials: int) -> float:
    """Clopper-Pearson's one-sided 95 % upper bound of a rate."""
    return 1.0 if hits >= trials else float(stats.beta.ppf(0.95, hits + 1, trials - hits))


def synthetic_rate(outcomes: list[SweepOutcome], length: int, histories: int, layout: str, seed: int = 0) -> dict:
    """Draw `histories` synthetic histories of `length` sweeps from the real null `outcomes`; how many
    name a host (and how many name a rank, or say a host goes with a rank)."""
    if not outcomes:
        return {"histories": 0, "length": length, "layout": layout}
    draw = random.Random(seed)
    named = ranks = confounded = 0
    for _ in range(histories):
        history = [placed(draw.choice(outcomes), number, layout) for number in range(length)]
        verdict = judge(history, Window(last=None))
        named += bool(verdict.named("host"))
        ranks += any(unit.beyond_chance for unit in verdict.families["rank"])
        confounded += bool(verdict.confounded())
    return {
        "histories": histories,
        "length": length,
        "layout": layout,
        "named_host": named,
        "rate": named / histories,
        "upper_95": upper_bound(named, histories),
        "rank_recurs": ranks,
        "host_goes_with_rank": confounded,
    }
