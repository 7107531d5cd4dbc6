"""`make gpu-check`'s plan and budget, driven with a fake clock on a fake node: the real plans of
benchmarks/gpu_check.py and gpu_check_one.py (their checks' names, order and reserves), each check
replaced by one that only moves the clock. Every reserve has its source; a check that applies to the
node and did not run, or that the budget ended, is never a pass; a CUDA-test run that skipped what
applies to the node cannot pass."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "benchmarks"))

import gpu_check  # noqa: E402
import gpu_check_one  # noqa: E402
from gpu_check_cuda_tests import judge_cuda_tests, read_junit, run_cuda_tests  # noqa: E402
from gpu_check_plan import (  # noqa: E402
    FAILED,
    INCOMPLETE,
    PASSED,
    Ledger,
    PlannedCheck,
    Reserve,
    guess,
    node_budget_s,
    run_plan,
)
from gpu_check_processes import ENDED, CheckFailed  # noqa: E402
from gpu_check_runs import ONE_GPU_SKIP  # noqa: E402


class FakeClock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def plans():
    return {
        "gpu-check": gpu_check.build_plan(gpu_check.Checker(os.devnull, None)),
        "gpu-check-one": gpu_check_one.build_one_gpu_plan(gpu_check_one.OneGpuChecker(os.devnull, None)),
    }


def fake_node(tmp_path, gpus: int, slowdown: float, fail: str | None = None, budget_s: float | None = None):
    """(checker, plan): every check takes `slowdown` x its reserve on the fake clock; the first one
    (the preflight) says the node has `gpus` GPUs; the check named `fail` fails."""
    clock = FakeClock()
    checker = gpu_check.Checker(str(tmp_path), budget_s, clock=clock)

    def fake(planned):
        def check(figures: dict) -> str:
            clock.now += slowdown * planned.reserve.seconds(gpus)
            if planned.name == "preflight":
                checker.summary["device"] = {"gpu_count": gpus, "gpu_names": ["NVIDIA H200"] * gpus}
            if planned.name == fail:
                raise CheckFailed("planted failure")
            return "fake"

        return check

    plan = [dataclasses.replace(planned, check=fake(planned)) for planned in gpu_check.build_plan(checker)]
    return checker, plan


# --- every reserve says where it comes from --------------------------------------------------------
@pytest.mark.parametrize("name", ["gpu-check", "gpu-check-one"])
def test_every_checks_reserve_has_its_source(name):
    plan = plans()[name]
    assert plan and len({planned.name for planned in plan}) == len(plan)
    for planned in plan:
        kind, _, said = planned.reserve.source.partition(": ")
        assert kind in ("measured", "guess") and len(said) > 20, (planned.name, planned.reserve.source)
        # not chance: figures the plan states, not measured
        assert planned.reserve.multi_gpu_s > 0 and (planned.min_gpus > 1 or planned.reserve.one_gpu_s > 0)
    # No GPU has run these checks yet: a reserve marked measured would be a figure nobody measured.
    assert {planned.reserve.kind for planned in plan} == {"guess"}


@pytest.mark.parametrize("source", ["", "about a minute", "guess:", "guess:   ", "measured", "estimate: 60 s"])
def test_a_reserve_without_a_source_is_refused(source):
    with pytest.raises(ValueError, match="a reserve needs its source"):
        Reserve(60, 60, source)


def test_a_check_that_runs_on_one_gpu_needs_a_one_gpu_reserve():
    with pytest.raises(ValueError, match="needs a one-GPU figure"):
        PlannedCheck("x", guess(None, 60, "two ranks' start and steps"), lambda figures: "ok")
    PlannedCheck("x", guess(None, 60, "two ranks' start and steps"), lambda figures: "ok", min_gpus=2)


def test_the_compile_checks_reserve_their_cold_caches_and_second_compile():
    plan = {planned.name: planned.reserve for planned in plans()["gpu-check"]}
    for name in ("gpt2 fsdp2 + compile (nccl)", "gpt2 ddp + compiled autograd (nccl)"):
        assert "cold" in plan[name].source and "again" in plan[name].source
        # not chance: figures the plan states, not measured
        assert plan[name].multi_gpu_s >= 2 * plan["resnet50 bf16 ddp (nccl)"].multi_gpu_s
    # The CUDA tests reserve their own runs only: the gpt2 runs gpu-check made are read, not rerun.
    assert "not run again" in plan["tests/test_cuda.py"].source


# --- the budget ---------------------------------------------------------------------------------------
def test_the_budget_of_an_8_gpu_node_holds_every_check_at_its_reserve(tmp_path):
    checker, plan = fake_node(tmp_path, gpus=8, slowdown=1.0)
    needed = sum(planned.reserve.seconds(8) for planned in plan)
    # not chance: the plan's own figures, on a fake clock
    assert node_budget_s(plan, 8) >= needed
    assert run_plan(checker, plan) == PASSED
    assert [c["ok"] for c in checker.summary["checks"]] == [True] * len(plan)
    assert checker.summary["budget_s"] == node_budget_s(plan, 8)
    first = checker.summary["checks"][0]
    assert first["reserve_s"] == 30 and first["reserve_source"].startswith("guess: ")
    line = (tmp_path / "gpu_check.txt").read_text().splitlines()[2]
    assert re.match(r"PASS  preflight +30\.0 s of +30 s guess ", line), line  # seconds beside the reserve


def test_a_check_that_matters_skipped_for_budget_on_8_gpus_exits_non_zero_and_is_named(tmp_path, capsys):
    # Every check twice as slow as its reserve: the budget's headroom (1.25 x) runs out before the end.
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
    checker, plan = fake_node(tmp_path, gpus=8, slowdown=1.0, budget_s=900)
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
        # not chance: the plan's own figures; sized to the node, with no time for the check it cannot run
        assert node_budget_s(plan, 1) < node_budget_s(plan, 8)
    else:
        assert two["ok"] is True
    # It runs before the checks that read its traces and timeline on a node of 2 GPUs.
    names = [planned.name for planned in plan]
    assert names.index("ddp averaging on 2 gpus (nccl)") < names.index("trace analyze (nccl traces)")


def test_only_runs_the_named_checks_and_leaves_the_rest_out_of_the_verdict(tmp_path):
    checker, plan = fake_node(tmp_path, gpus=8, slowdown=1.0)
    assert run_plan(checker, plan, only={"preflight", "tests/test_cuda.py"}) == PASSED
    assert [c["name"] for c in checker.summary["checks"]] == ["preflight", "tests/test_cuda.py"]


@pytest.mark.parametrize(
    "arguments, said",
    [
        (["--only", "preflihgt"], "--only: no check named preflihgt; the checks: "),
        (["--budget-s", "0"], "--budget-s must be a number of seconds > 0; got 0"),
        (["--budget-s", "-5", "--dry-run"], "--budget-s must be a number of seconds > 0; got -5"),
    ],
)
@pytest.mark.parametrize("script", ["gpu_check.py", "gpu_check_one.py"])
def test_a_bad_option_is_refused_in_one_line_before_anything_starts(script, arguments, said):
    done = subprocess.run(
        [sys.executable, os.path.join(REPO, "benchmarks", script), *arguments], capture_output=True, text=True
    )
    assert done.returncode == 2 and said in done.stderr.splitlines()[-1], done.stderr
    assert "Traceback" not in done.stderr


def test_the_one_gpu_plan_fits_its_five_minutes():
    plan = plans()["gpu-check-one"]
    # not chance: the plan's own figures, not measured
    assert sum(planned.reserve.seconds(1) for planned in plan) <= gpu_check_one.BUDGET_S == 300
    assert [planned.min_gpus for planned in plan] == [1] * len(plan)


# --- a kill by the budget is NOT RUN; a hang within the budget is FAIL --------------------------------
SLEEPER = [sys.executable, "-c", "import time; time.sleep(60)"]


def sleeping_check(ledger: Ledger, own_limit_s: float):
    def check(figures: dict) -> str:
        code, output = ledger.run_process(SLEEPER, own_limit_s)
        if code == ENDED:
            raise CheckFailed(f"it outlived its own {own_limit_s:.0f} s limit: hung? {output.strip()}")
        return "done"

    return check


def test_a_check_the_budget_ends_reads_not_run_and_exits_3(tmp_path, capsys):
    """A real process, ended by the budget (2 s left, its own limit 60 s): the check was not made."""
    ledger = Ledger(str(tmp_path), budget_s=2)
    plan = [PlannedCheck("sleeps past the budget", guess(1, 1, "a process that sleeps"), sleeping_check(ledger, 60))]
    assert run_plan(ledger, plan) == INCOMPLETE
    (entry,) = ledger.summary["checks"]
    assert entry["ok"] is None and entry["not_run"] == "budget"
    assert entry["message"].startswith("NOT RUN: ended by the budget after 2 s")
    printed = capsys.readouterr().out
    assert "SKIP  sleeps past the budget" in printed and "FAIL" not in printed
    assert "NOT CHECKED: sleeps past the budget" in ledger.closing_line()
    # not chance: the process was ended at the budget, well before its 60 s sleep
    assert entry["seconds"] < 30


def test_a_check_that_outlives_its_own_limit_with_budget_left_fails(tmp_path):
    ledger = Ledger(str(tmp_path), budget_s=120)
    plan = [PlannedCheck("hangs", guess(1, 1, "a process that sleeps"), sleeping_check(ledger, 1))]
    assert run_plan(ledger, plan) == FAILED
    (entry,) = ledger.summary["checks"]
    assert entry["ok"] is False and "outlived its own 1 s limit" in entry["message"]


def test_the_closing_advice_is_a_make_command_under_make_and_the_scripts_options_without(tmp_path, monkeypatch):
    ledger = Ledger(str(tmp_path), budget_s=600)
    monkeypatch.setenv("MAKELEVEL", "1")  # what make sets in its recipes' environment
    under_make = f"make gpu-check USE_PYTHON={sys.executable} GPU_CHECK_ARGS='--budget-s 900'"
    assert ledger.again("--budget-s 900") == under_make
    one = gpu_check_one.OneGpuChecker(str(tmp_path), 300)
    assert one.again("--only bundle").startswith("make gpu-check-one USE_PYTHON=")
    monkeypatch.delenv("MAKELEVEL")
    assert ledger.again("--budget-s 900") == f"{sys.executable} benchmarks/gpu_check.py --budget-s 900"


# --- the CUDA tests: a partial run cannot pass ------------------------------------------------------------
PARTIAL_RUN = """
import pytest

def test_one_that_ran():
    assert True

@pytest.mark.parametrize("case", ["a", "b", "c"])
def test_skipped(case):
    pytest.skip(REASON)
"""


def junit_of(tmp_path, reason: str) -> tuple[int, list[dict]]:
    """A real pytest run of one passing test and three skipped with `reason`, read as the check reads it."""
    (tmp_path / "test_partial.py").write_text(PARTIAL_RUN.replace("REASON", repr(reason)))
    junit = tmp_path / "junit.xml"
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--junitxml", str(junit), "test_partial.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert "1 passed, 3 skipped" in done.stdout, done.stdout
    return done.returncode, read_junit(str(junit))


def test_one_passed_and_n_skipped_cannot_pass_and_says_what_each_skip_means(tmp_path):
    code, tests = junit_of(tmp_path, "needs a CUDA GPU; this machine has none")
    assert code == 0  # pytest itself is content
    figures: dict = {}
    with pytest.raises(CheckFailed) as failed:
        judge_cuda_tests(code, tests, gpu_count=1, figures=figures)
    said = str(failed.value)
    assert said.startswith("1 passed, 0 failed, 0 errors, 3 skipped: 3 skipped that apply to this node: ")
    assert "test_skipped[a] (needs a CUDA GPU; this machine has none: the test did not see" in said
    assert [skip["test"] for skip in figures["skipped"]] == ["test_skipped[a]", "test_skipped[b]", "test_skipped[c]"]


def test_skips_that_need_a_second_gpu_stand_on_one_gpu_only(tmp_path):
    code, tests = junit_of(tmp_path, f"{ONE_GPU_SKIP}DDP over two ranks needs a second GPU")
    said = judge_cuda_tests(code, tests, gpu_count=1, figures={})
    assert said.startswith("1 passed, 0 failed, 0 errors, 3 skipped, each not applicable on one GPU (test_skipped[a]")
    with pytest.raises(CheckFailed, match="skipped as on one GPU, but this node has 2"):
        judge_cuda_tests(code, tests, gpu_count=2, figures={})


@pytest.mark.launches  # pytest on tests/test_cuda.py in a fresh interpreter (torch's import)
def test_the_cuda_tests_on_a_machine_without_a_gpu_fail_the_check_and_stay_in_its_folder(tmp_path, monkeypatch):
    """Where torch sees no GPU every CUDA test skips, and the check must say so, not pass. The GPUs are
    hidden from pytest's process (as every CPU test hides them), so a GPU machine shows the same."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    ledger = Ledger(str(tmp_path), budget_s=300)
    ledger.summary["device"] = {"gpu_count": 1}  # as a one-GPU node whose torch sees no GPU
    with pytest.raises(CheckFailed) as failed:
        run_cuda_tests(ledger, {}, limit_s=240)
    assert "0 passed" in str(failed.value) and "no CUDA test passed" in str(failed.value)
    assert "the test did not see the node's GPU" in str(failed.value)
    assert (tmp_path / "cuda-tests" / "junit.xml").exists() and (tmp_path / "cuda-tests" / "pytest.log").exists()


# --- make ------------------------------------------------------------------------------------------------
def make(*arguments: str, dry: bool = False) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["make", "--no-print-directory", *(["-n"] if dry else []), *arguments],
        cwd=REPO,
        capture_output=True,
        text=True,
        env={key: value for key, value in os.environ.items() if key not in ("PYTHON", "USE_PYTHON", "MAKEFLAGS")},
    )


def test_make_gpu_check_takes_use_python_like_every_target_and_python_as_a_deprecated_alias():
    done = make("gpu-check", "USE_PYTHON=/opt/node/bin/python", dry=True)
    assert done.returncode == 0 and "/opt/node/bin/python benchmarks/gpu_check.py" in done.stdout
    assert "deprecated" not in done.stdout + done.stderr
    done = make("gpu-check", "PYTHON=/opt/node/bin/python", dry=True)
    assert "/opt/node/bin/python benchmarks/gpu_check.py" in done.stdout
    assert "PYTHON= is deprecated here, use USE_PYTHON=/opt/node/bin/python" in done.stdout
    # Two interpreters named: refused, never one of them silently. Neither of these may start the check:
    # under `make test USE_PYTHON=...` the outer make's MAKEFLAGS would carry USE_PYTHON into them, so
    # they run with it cleared.
    done = make("gpu-check", "PYTHON=/a/python", "USE_PYTHON=/b/python")
    assert done.returncode != 0 and "name two interpreters" in done.stderr
    done = make("gpu-check")
    assert done.returncode != 0 and "make gpu-check USE_PYTHON=python3" in done.stderr


def test_the_dry_runs_through_make_print_each_plan_and_every_reserves_source():
    python = sys.executable
    done = make("gpu-check", f"USE_PYTHON={python}", "GPU_CHECK_ARGS=--dry-run")
    assert done.returncode == 0, done.stderr
    assert "make gpu-check: 14 checks, nothing started (dry run)" in done.stdout
    for planned in plans()["gpu-check"]:
        assert f"  {planned.reserve.source}" in done.stdout and planned.name in done.stdout
    done = make("gpu-check-one", f"USE_PYTHON={python}", "GPU_CHECK_ARGS=--dry-run")
    assert done.returncode == 0, done.stderr
    assert "budget: 300 s (fixed) on one GPU" in done.stdout and "wheels: " in done.stdout
    for planned in plans()["gpu-check-one"]:
        assert re.search(rf"{re.escape(planned.name)} +{planned.reserve.one_gpu_s:.0f} s  guess: ", done.stdout)
    assert not os.path.exists(os.path.join(REPO, "results", "gpu-check-one"))  # nothing started


# --- the docs say what the plan says ------------------------------------------------------------------------
def page() -> str:
    with open(os.path.join(REPO, "docs", "gpu-check.md"), encoding="utf-8") as handle:
        return handle.read()


def test_the_docs_state_the_budget_the_plan_gives(tmp_path):
    _, plan = fake_node(tmp_path, gpus=8, slowdown=1.0)
    two, one = node_budget_s(plan, 2) / 60, node_budget_s(plan, 1) / 60
    reserves = {gpus: sum(p.reserve.seconds(gpus) for p in plan if p.applies(gpus)) for gpus in (1, 2)}
    text = " ".join(page().split())
    assert (
        f"{two:.0f} minutes on a node of 2 or more GPUs ({reserves[2]:.0f} s of reserves), {one:.0f} on one GPU "
        f"({reserves[1]:.0f} s)" in text
    )
    with open(os.path.join(REPO, "docs", "gpu-quickstart.md"), encoding="utf-8") as handle:
        quickstart = " ".join(handle.read().split())
    assert f"about {two:.0f} minutes with 2 or more GPUs" in quickstart and "GPU_CHECK_ARGS" in quickstart


def reserve_rows(text: str, columns: int) -> dict[str, list[str]]:
    header = "| check | one GPU | 2+ GPUs | source |" if columns == 3 else "| check | one GPU | source |"
    table = text[text.index(header) :].split("\n\n")[0].splitlines()[2:]
    return {cells[0]: cells[1:] for cells in ([c.strip() for c in row.strip("|").split("|")] for row in table)}


def test_the_docs_list_every_checks_reserve_and_its_kind_as_the_plans_give_them():
    def seconds(value):
        return "N/A" if value is None else f"{value:.0f} s"

    full = reserve_rows(page(), 3)
    assert full == {
        p.name: [seconds(p.reserve.one_gpu_s if p.applies(1) else None), seconds(p.reserve.multi_gpu_s), p.reserve.kind]
        for p in plans()["gpu-check"]
    }
    one = reserve_rows(page(), 2)
    assert one == {p.name: [seconds(p.reserve.one_gpu_s), p.reserve.kind] for p in plans()["gpu-check-one"]}
