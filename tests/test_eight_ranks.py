"""Eight ranks on this 2-core machine: a real `ddpbench run --nproc 8` over gloo, time-sharing the
cores (it shows the analysis, not the speed). Every round of its in-process ablation counts,
whichever rank stepped alone in it, so every cause, the in-process efficiency and the wait for the
slowest rank have an interval; before, most ranks never stepped alone and nothing had one."""

import os

import pytest
from conftest import cpu_environment, ddpbench

from ddpbench.analysis.answers import answer_run
from ddpbench.records.store import load_record
from ddpbench.worker.ablation import EXTRA_STEP, extra_rounds

# make test-all only: eight ranks on two cores, about 40 s; make test runs three profiled ranks (test_terminal_output)
pytestmark = [
    pytest.mark.launches,
    pytest.mark.test_all,
]


@pytest.fixture(scope="module")
def eight(tmp_path_factory):
    out = tmp_path_factory.mktemp("eight")
    done = ddpbench(
        "run", "--workload", "mlp", "--device", "cpu", "--nproc", "8", "--threads-per-rank", "1",
        "--steps", "26", "--warmup", "2", "--no-sync-steps", "0", "--out", str(out), "--run-id", "eight",
        env=cpu_environment(), timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    return out, load_record(os.path.join(out, "runs", "eight.json"))


def test_every_figure_has_an_interval_at_eight_ranks(eight):
    _, record = eight
    ladder = record.timeline.ladder
    # 24 timed steps: 5 rounds, the floor that leaves each run 4 degrees of freedom, then EXTRA_STEP
    # more at a time while they leave the largest cause undecided, up to extra_rounds(5): a ladder
    # stopped before its cap stopped because a look decided the lead.
    assert ladder.blocks - ladder.extra_blocks == 5 and ladder.extra_blocks in range(0, extra_rounds(5) + 1, EXTRA_STEP)
    assert ladder.lead_decided is True or ladder.extra_blocks == extra_rounds(5), ladder
    assert ladder.alone_rank_by_block == [block % 8 for block in range(ladder.blocks)]
    found = answer_run(record, [("eight.json", record)])
    assert found.rounds == ladder.blocks and found.in_process.has_interval, found.in_process
    for name, cause in found.causes.items():
        assert cause.seconds.has_interval and cause.points.has_interval, name
    # not chance: a profiled DDP run has the ablation; its wait has an interval over its 5 or more rounds
    assert found.straggler.source == "ablation" and found.straggler.wait.has_interval
    # The causes add up to the in-process loss, at eight ranks too.
    total = sum(cause.points.value for cause in found.causes.values())
    # not chance: the causes add up to the in-process loss in every round, by construction
    assert total == pytest.approx(found.loss_points.value, abs=1e-9)


def test_explain_reads_it_in_one_row(eight):
    out, _ = eight
    done = ddpbench("explain", str(out))
    assert done.returncode == 0, done.stderr
    [row] = [line for line in done.stdout.splitlines() if line.startswith("mlp x8 ")]
    assert row.split()[2:4] == ["1", "n/a"]  # runs, then E(N): no local run here, the causes are
    assert row.count("±") >= 7, row
