"""The planted-causes page judges each cause from the runs' answers given: the contention criterion
(within 40 % of what two one-device runs at once lose) says yes or no with its numbers, and a
cause shows ± its half-width only where it has an interval. Hand-made answers; no runs."""

import os
import sys

from conftest import REPO

sys.path.insert(0, os.path.join(REPO, "benchmarks"))

from planted_causes import attribution_table, criterion, findings, judge  # noqa: E402

from ddpbench.analysis.ablation import CAUSE_NAMES  # noqa: E402
from ddpbench.analysis.causes import Cause, RunAnswer  # noqa: E402
from ddpbench.analysis.estimates import Estimate  # noqa: E402
from ddpbench.analysis.straggler import Straggler  # noqa: E402

MS = 1e-3


def breakdown(step_ms: float, reference_ms: float, interval_ms: float | None = 0.5, **causes_ms) -> RunAnswer:
    causes = {}
    for name in CAUSE_NAMES:
        value = causes_ms.get(name, 0.1) * MS
        low, high = (None, None) if interval_ms is None else (value - interval_ms * MS, value + interval_ms * MS)
        seconds = Estimate(value, low, high, 4, "rounds", None)
        causes[name] = Cause(seconds, seconds.scaled(100 / (step_ms * MS)), "hand-made")
    efficiency = Estimate(reference_ms / step_ms, None, None, 1, "rounds")
    straggler = Straggler(causes["straggler_wait"].seconds, 1, "ablation", phase="forward")
    return RunAnswer(None, step_ms * MS, reference_ms * MS, [], efficiency, None, causes, straggler, True, rounds=4)


def test_contention_is_judged_within_40_percent_of_the_loss_with_its_numbers():
    baseline = breakdown(5.0, 1.0, contention=-0.2)
    # Two at once: 9 and 11 ms against 4 ms alone, a 6 ms loss; the limit is 2.4 ms.
    near = judge({"baseline": baseline, "greedy": breakdown(16.0, 4.0, contention=4.0)}, [9 * MS, 11 * MS], None)
    assert near["greedy"]["ok"] and abs(near["greedy"]["ratio"] - 4.2 / 6.0) < 1e-9
    assert criterion(near) == "yes, |4.20 - 6.00| = 1.80 ms ≤ 2.40 ms (40 % of 6.00)"
    far = judge({"baseline": baseline, "greedy": breakdown(16.0, 4.0, contention=1.0)}, [9 * MS, 11 * MS], None)
    assert criterion(far) == "no, |1.20 - 6.00| = 4.80 ms > 2.40 ms (40 % of 6.00)"
    assert "missing: not judged" in criterion(judge({"baseline": baseline}, [], None))


def test_the_slow_rank_is_judged_against_its_logged_sleep():
    baseline = breakdown(5.0, 1.0, straggler_wait=0.5)
    judged = judge({"baseline": baseline, "slow_rank": breakdown(15.0, 1.0, straggler_wait=11.0)}, [], 10.4 * MS)
    case = judged["slow_rank"]
    assert case["logged"] and abs(case["planted"] - 10.4 * MS) < 1e-12 and case["ok"]
    said = findings(judged, {"baseline": baseline}, None)
    assert "slept 10.40 ms per call as logged (10.00 asked)" in said[0]
    assert "grew by 10.50 ± 0.71 ms" in said[0]  # two half-widths of 0.5 ms in quadrature
    assert "the verdict names rank 1, in its forward" in said[0]
    assert said[-1].startswith("**One run is one sample**: each case above ran once")


def test_a_term_without_an_interval_shows_no_half_width():
    table = attribution_table({"with": breakdown(5.0, 1.0), "without": breakdown(5.0, 1.0, interval_ms=None)})
    assert "| 0.10 ± 0.50 (2.0) |" in table[2]
    assert "±" not in table[3] and "| 0.10 (2.0) |" in table[3]
