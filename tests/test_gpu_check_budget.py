"""`make gpu-check`'s budget, driven with a fake clock on a fake node: the real plan of
benchmarks/gpu_check.py (its checks' names, order and minimum times), each check replaced by one
that only moves the clock. A check that applies to the node and did not run is never a pass."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "benchmarks"))

import gpu_check  # noqa: E402
from gpu_check_plan import FAILED, INCOMPLETE, PASSED, node_budget_s, run_plan  # noqa: E402
from gpu_check_processes import CheckFailed  # noqa: E402


class FakeClock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def fake_node(tmp_path, gpus: int, slowdown: float, fail: str | None = None, budget_s: float | None = None):
    """(checker, plan): every check takes `slowdown` x its minimum time on the fake clock; the first
    one (the preflight) says the node has `gpus` GPUs; the check named `fail` fails."""
    clock = FakeClock()
    checker = gpu_check.Checker(str(tmp_path), budget_s, clock=clock)

    def fake(planned):
        def check(figures: dict) -> str:
            clock.now += slowdown * planned.needs_s
            if planned.name == "preflight":
                checker.summary["device"] = {"gpu_count": gpus, "gpu_names": ["NVIDIA H200"] * gpus}
            if planned.name == fail:
                raise CheckFailed("planted failure")
            return "fake"

        return check

    plan = [dataclasses.replace(planned, check=fake(planned)) for planned in gpu_check.build_plan(checker)]
    return checker, plan


def test_the_budget_of_an_8_gpu_node_holds_every_check_at_its_minimum_time(tmp_path):
    checker, plan = fake_node(tmp_path, gpus=8, slowdown=1.0)
    needed = sum(planned.needs_s for planned in plan)
    assert needed == 710  # the sum the old fixed 540 s budget could not hold
    assert node_budget_s(plan, 8) >= needed
    assert run_plan(checker, plan) == PASSED
    assert [c["ok"] for c in checker.summary["checks"]] == [True] * len(plan)
    assert checker.summary["budget_s"] == node_budget_s(plan, 8)


def test_a_check_that_matters_skipped_for_budget_on_8_gpus_exits_non_zero_and_is_named(tmp_path, capsys):
    # Every check twice as slow as its minimum: the budget's headroom (1.25 x) runs out before the end.
    checker, plan = fake_node(tmp_path, gpus=8, slowdown=2.0)
    assert run_plan(checker, plan) == INCOMPLETE
    not_run = checker.not_run()
    assert "tests/test_cuda.py" in not_run and "sweep --gpus 1, table, report" in not_run
    assert checker.summary["failed"] == 0
    summary = json.loads((tmp_path / "gpu_check.json").read_text())
    assert summary["exit_code"] == INCOMPLETE and summary["not_run"] == len(not_run)
    last = (tmp_path / "gpu_check.txt").read_text().splitlines()[-1]
    assert "NOT CHECKED: " in last and "tests/test_cuda.py" in last and "--budget-s" in last
    assert "SKIP  tests/test_cuda.py" in capsys.readouterr().out


def test_a_fixed_budget_too_small_for_the_node_is_incomplete_not_passed(tmp_path):
    checker, plan = fake_node(tmp_path, gpus=8, slowdown=1.0, budget_s=540)
    assert run_plan(checker, plan) == INCOMPLETE
    assert checker.not_run()[-1] == "tests/test_cuda.py"


def test_a_failed_check_exits_1_even_when_others_did_not_run(tmp_path):
    checker, plan = fake_node(tmp_path, gpus=8, slowdown=2.0, fail="resnet50 bf16 dp")
    assert run_plan(checker, plan) == FAILED


@pytest.mark.parametrize("gpus", [1, 2])
def test_the_two_gpu_check_is_not_applicable_on_one_gpu_and_counted_on_two(tmp_path, gpus):
    checker, plan = fake_node(tmp_path, gpus=gpus, slowdown=1.0)
    assert run_plan(checker, plan) == PASSED
    (two,) = [c for c in checker.summary["checks"] if c["name"].startswith("ddp averaging")]
    if gpus == 1:
        assert two["not_run"] == "not applicable" and two["ok"] is None
        assert node_budget_s(plan, 1) < node_budget_s(plan, 8)  # sized to the node: no time for it
    else:
        assert two["ok"] is True


def test_only_runs_the_named_checks_and_leaves_the_rest_out_of_the_verdict(tmp_path):
    checker, plan = fake_node(tmp_path, gpus=8, slowdown=1.0)
    assert run_plan(checker, plan, only={"preflight", "tests/test_cuda.py"}) == PASSED
    assert [c["name"] for c in checker.summary["checks"]] == ["preflight", "tests/test_cuda.py"]


def make_gpu_check(*assignments: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["make", "--no-print-directory", "-n", "gpu-check", *assignments],
        cwd=REPO,
        capture_output=True,
        text=True,
        env={key: value for key, value in os.environ.items() if key not in ("PYTHON", "USE_PYTHON", "MAKEFLAGS")},
    )


def test_make_gpu_check_takes_use_python_like_every_target_and_python_as_a_deprecated_alias():
    done = make_gpu_check("USE_PYTHON=/opt/node/bin/python")
    assert done.returncode == 0 and "/opt/node/bin/python benchmarks/gpu_check.py" in done.stdout
    assert "deprecated" not in done.stdout + done.stderr
    done = make_gpu_check("PYTHON=/opt/node/bin/python")
    assert "/opt/node/bin/python benchmarks/gpu_check.py" in done.stdout
    assert "PYTHON= is deprecated here, use USE_PYTHON=/opt/node/bin/python" in done.stdout
    # Two interpreters named: refused, never one of them silently.
    # Neither of these may start the check: under `make test USE_PYTHON=...` the outer make's
    # MAKEFLAGS would carry USE_PYTHON into them, so they run with it cleared, as make_gpu_check does.
    clean = {key: value for key, value in os.environ.items() if key not in ("PYTHON", "USE_PYTHON", "MAKEFLAGS")}
    done = subprocess.run(
        ["make", "--no-print-directory", "gpu-check", "PYTHON=/a/python", "USE_PYTHON=/b/python"],
        cwd=REPO,
        capture_output=True,
        text=True,
        env=clean,
    )
    assert done.returncode != 0 and "name two interpreters" in done.stderr
    done = subprocess.run(
        ["make", "--no-print-directory", "gpu-check"], cwd=REPO, capture_output=True, text=True, env=clean
    )
    assert done.returncode != 0 and "make gpu-check USE_PYTHON=python3" in done.stderr


def test_the_docs_state_the_budget_the_plan_gives(tmp_path):
    _, plan = fake_node(tmp_path, gpus=8, slowdown=1.0)
    two, one = node_budget_s(plan, 2) / 60, node_budget_s(plan, 1) / 60
    assert (two, one) == (15, 14)
    with open(os.path.join(REPO, "docs", "gpu-check.md"), encoding="utf-8") as handle:
        page = " ".join(handle.read().split())
    assert f"{two:.0f} minutes on a node of 2 or more GPUs (710 s of minimums), {one:.0f} on one GPU" in page
    with open(os.path.join(REPO, "docs", "gpu-quickstart.md"), encoding="utf-8") as handle:
        assert f"{two:.0f} minutes with 2 or more GPUs" in " ".join(handle.read().split())
