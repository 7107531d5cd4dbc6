"""The gate calibrations' A/A trials: each trial's pairs are made of different runs, as `ab`'s
rounds are. Chained pairs (run i with run i+1) telescope and made the false alarms look rarer."""

import os
import sys

from conftest import REPO

sys.path.insert(0, os.path.join(REPO, "benchmarks"))

from gate_calibration import disjoint_pairs  # noqa: E402


def test_no_run_sits_in_two_pairs_of_one_trial():
    runs = list(range(10))
    trials = disjoint_pairs(runs, 4)
    assert trials[0] == ([0, 2, 4, 6], [1, 3, 5, 7])
    assert len(trials) == 2  # stretches of 8 runs starting at 0 and 2
    for a, b in trials:
        assert len(a) == len(b) == 4
        assert len(set(a) | set(b)) == 8, (a, b)
        assert all(second == first + 1 for first, second in zip(a, b))  # each pair ran back to back


def test_too_few_runs_give_no_trial():
    assert disjoint_pairs(list(range(7)), 4) == []
