"""Figures shown side by side reproduce each other, on the default suite's stored records: E(N) is
the printed X(N) over N times the printed X(1), a cause's points are its milliseconds over the step
beside them, and no cause has points and milliseconds of opposite signs. Saved records only; every
assert is exact arithmetic on one stored sweep (no false-failure rate)."""

import os

import pytest
from conftest import FIXTURES

from ddpbench.analysis.answers import answer_sweep
from ddpbench.analysis.frames import runs_frame, scaling_table
from ddpbench.records.store import read_records

DEFAULT_SUITE = os.path.join(FIXTURES, "sweeps", "cpu-default-suite")


@pytest.fixture(scope="module")
def records():
    found, unreadable = read_records(DEFAULT_SUITE)
    assert not unreadable
    return found


def test_e_is_the_printed_x_over_n_times_the_printed_x1(records):
    table = scaling_table(runs_frame(records))
    local = table[table["strategy"] == "local"].set_index("workload")["throughput"]
    ddp = table[table["strategy"] == "ddp"]
    assert len(ddp) == 3
    for _, row in ddp.iterrows():
        x_n, x_1, n = row["throughput"], local[row["workload"]], row["world_size"]
        assert row["efficiency"] == x_n / (n * x_1), row["workload"]
        printed = round(x_n, 1) / (n * round(x_1, 1))
        assert abs(100 * (row["efficiency"] - printed)) < 0.1, row["workload"]


def test_explain_gives_the_tables_figures(records):
    table = scaling_table(runs_frame(records)).query("strategy == 'ddp'").set_index("workload")
    answers, problems = answer_sweep(records)
    assert problems == [] and len(answers) == 3
    for answer in answers:
        row = table.loc[answer.workload]
        assert answer.throughput.value == row["throughput"]
        assert answer.efficiency.value == row["efficiency"]
        assert answer.in_process.value == row["in_process_efficiency"]


def test_every_causes_points_are_its_milliseconds_over_the_step(records):
    answers, _ = answer_sweep(records)
    checked = 0
    for answer in answers:
        step = answer.step.value
        lost = 0.0
        for name, cause in answer.causes.items():
            assert abs(cause.points.value - 100 * cause.seconds.value / step) < 0.1, (answer.name, name)
            # Never of opposite signs.
            assert cause.points.value * cause.seconds.value >= 0, name
            lost += cause.points.value
            checked += 1
        # The causes add up to the in-process loss.
        assert lost == pytest.approx(100 * (1 - answer.in_process.value), abs=1e-6)
    assert checked == 3 * 7
