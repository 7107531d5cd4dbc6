"""The rounds the ablation adds while a run's largest cause is undecided (`worker.ablation.run_ablation`)
and the rule that decides it (`analysis.answers.largest_in_rounds`), in process: the blocks are
counted, not run, and the looks' answers are scripted. Real ladders: tests/test_overlap_phases.py
and tests/test_eight_ranks.py."""

from __future__ import annotations

import random

import pytest

from ddpbench.analysis.ablation import CAUSE_NAMES
from ddpbench.analysis.answers import largest_in_rounds
from ddpbench.worker import ablation
from ddpbench.worker.ablation import EXTRA_STEP, extra_rounds, run_ablation


@pytest.fixture
def ladder(monkeypatch):
    """run_ablation with its blocks counted and its looks answered from `answers` in turn."""
    state = {"blocks": [], "looks": [], "answers": []}

    def block(timeline, kinds, batches, number, rank, world_size, counters, found):
        state["blocks"].append(number)

    def look(found, rank, world_size, blocks):
        state["looks"].append(blocks)
        return state["answers"].pop(0)

    monkeypatch.setattr(ablation, "_run_block", block)
    monkeypatch.setattr(ablation, "lead_decided", look)
    monkeypatch.setattr(ablation.dist, "barrier", lambda *args, **kwargs: None)

    def run(answers, base=5, world_size=2, extra=None):
        state.update(blocks=[], looks=[], answers=list(answers))
        found = run_ablation(None, [], None, base, 0, world_size, None, extra_rounds(base) if extra is None else extra)
        return found["ladder"], state

    return run


def test_a_lead_decided_after_the_base_rounds_adds_none(ladder):
    found, state = ladder([True])
    assert state["looks"] == [5] and state["blocks"] == list(range(5))
    assert (found["blocks"], found["extra_blocks"], found["lead_decided"]) == (5, 0, True)


def test_an_undecided_lead_adds_extra_step_rounds_at_a_time_until_decided(ladder):
    found, state = ladder([False, True])
    assert state["looks"] == [5, 5 + EXTRA_STEP] and state["blocks"] == list(range(5 + EXTRA_STEP))
    assert (found["extra_blocks"], found["lead_decided"]) == (EXTRA_STEP, True)


def test_a_lead_never_decided_runs_to_the_cap_and_is_looked_at_there_too(ladder):
    cap = extra_rounds(5)
    assert cap == 8  # the base rounds rounded up to a multiple of EXTRA_STEP
    found, state = ladder([False] * 3)
    assert state["looks"] == [5, 9, 13] and state["blocks"] == list(range(13))
    assert (found["blocks"], found["extra_blocks"], found["lead_decided"]) == (13, cap, False)
    # The last rounds decide it: the record says so, though nothing more may be added.
    found, _ = ladder([False, False, True])
    assert (found["extra_blocks"], found["lead_decided"]) == (cap, True)


def test_no_look_where_nothing_may_be_added(ladder):
    found, state = ladder([], extra=0)
    assert state["looks"] == [] and found["lead_decided"] is None and found["blocks"] == 5
    found, state = ladder([], world_size=1)
    assert state["looks"] == [] and found["lead_decided"] is None and found["alone_rank_by_block"] == []


def _rounds(costs: dict[str, list[float]], step_s: float = 0.1) -> dict[str, dict[int, float]]:
    """Rounds of one run: each named cause's seconds per round, the others zero, the DDP step `top`."""
    count = len(next(iter(costs.values())))
    found = {name: dict(enumerate(costs.get(name, [0.0] * count))) for name in CAUSE_NAMES}
    found["top"] = dict(enumerate([step_s] * count))
    return found


def test_a_lead_that_holds_in_every_round_is_named_alone_and_a_close_one_is_tied():
    draw = random.Random(7)  # fixed rounds, drawn from a seeded generator: the same every run
    clear = _rounds(
        {
            "exposed_comm": [0.030 + draw.gauss(0, 0.001) for _ in range(8)],
            "contention": [0.010 + draw.gauss(0, 0.001) for _ in range(8)],
        }
    )
    assert largest_in_rounds(clear) == ["exposed_comm"]
    # Two causes a millisecond apart in a 100 ms step, each spread 5 ms over the rounds: no lead holds.
    close = _rounds(
        {
            "exposed_comm": [0.030 + draw.gauss(0, 0.005) for _ in range(8)],
            "contention": [0.029 + draw.gauss(0, 0.005) for _ in range(8)],
        }
    )
    assert sorted(largest_in_rounds(close)) == ["contention", "exposed_comm"]
    # Nothing beyond noise: no largest cause.
    assert largest_in_rounds(_rounds({"exposed_comm": [0.001 * (-1) ** r for r in range(8)]})) == []
