"""The coverage page's agreement test can tell calibrated intervals from too narrow ones: on pairs of
independent estimates drawn from one normal law (3 runs a side, pooled as the answers model pools
them), Welch's t at 95 % agrees about 95 % of the time, the same pairs with halved standard errors
fall well below 90 %, while the half-widths in quadrature it replaced leave halved intervals at
about 90 %. Synthetic data from a fixed seed: each share is one deterministic number, so these
asserts cannot fail by chance."""

import os
import random
import sys

from conftest import REPO

sys.path.insert(0, os.path.join(REPO, "benchmarks"))

from coverage import agree, lower_bound  # noqa: E402

from ddpbench.analysis.estimates import Estimate  # noqa: E402

PAIRS = 4000


def drawn_pairs(runs: int = 3) -> list[tuple[Estimate, Estimate]]:
    generator = random.Random(20261206)
    return [
        tuple(Estimate.of_runs([generator.gauss(100.0, 8.0) for _ in range(runs)]) for _ in range(2))
        for _ in range(PAIRS)
    ]


def share(found: list[bool]) -> float:
    return sum(found) / len(found)


def test_calibrated_intervals_agree_about_95_percent_and_halved_ones_fall_below_90():
    pairs = drawn_pairs()
    calibrated = share([agree(a, b) for a, b in pairs])
    halved = share([agree(a, b, shrink=0.5) for a, b in pairs])
    # Exact: 95 %; these 4,000 pairs give 96.1 %.
    assert 0.93 <= calibrated <= 0.97, calibrated
    # Halving each standard error halves the threshold: these pairs give 81.2 %.
    assert halved < 0.85, halved


def test_half_widths_in_quadrature_barely_told_halved_intervals_apart_on_the_same_data():
    # The rule the page used before: |a - b| <= hypot(half_a, half_b). Calibrated or halved, it
    # agrees about 90 % or more (these pairs: 98.7 % and 89.8 %), so it could hardly show intervals too narrow.
    pairs = drawn_pairs()
    old = share([abs(a.value - b.value) <= (a.half**2 + b.half**2) ** 0.5 for a, b in pairs])
    old_halved = share([abs(a.value - b.value) <= ((a.half / 2) ** 2 + (b.half / 2) ** 2) ** 0.5 for a, b in pairs])
    assert old > 0.98 and old_halved > 0.88, (old, old_halved)


def test_an_estimate_without_an_interval_is_not_compared():
    one_run = Estimate(1.0, None, None, 1, "runs")
    assert agree(one_run, Estimate.of_runs([1.0, 1.1, 0.9])) is None


def test_the_lower_bound_of_the_share_is_below_the_share_and_zero_for_none():
    assert 0.88 < lower_bound(95, 100) < 0.95
    assert lower_bound(0, 10) == 0.0
