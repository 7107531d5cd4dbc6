"""gpu-check's run of tests/test_cuda.py, and what its results must show to pass.

pytest runs with its temporary folders under the check's own folder (`cuda-tests/`), so the runs the
tests launch are kept with the check's output and go into the bundle, and with MADE_RUNS_ENV naming
gpu-check's runs, so the tests read the gpt2 runs gpu-check already made instead of launching them
again. Its results come from pytest's JUnit XML, test by test.

"1 passed, 12 skipped" is not a pass: every skipped test is a check not made. A skip passes only when
it says it does not apply to this node (ONE_GPU_SKIP on a one-GPU node); any other skip fails the
check, each named with its reason and what it means.
"""

from __future__ import annotations

import os
import sys
import xml.etree.ElementTree as ElementTree

from gpu_check_processes import PROJECT, CheckFailed
from gpu_check_runs import MADE_RUNS_ENV, ONE_GPU_SKIP

FOLDER = "cuda-tests"
"""Under the check's output folder: pytest's temporary folders (`runs/`), its JUnit XML and its output."""


def pytest_command(out_dir: str) -> list[str]:
    folder = os.path.join(out_dir, FOLDER)
    return [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-rfEs",
        "-p",
        "no:cacheprovider",
        "--basetemp",
        os.path.join(folder, "runs"),
        # Keep every test's folder, passed or not (pytest's default since 7.3; older ones keep all too).
        "-o",
        "tmp_path_retention_policy=all",
        "--junitxml",
        os.path.join(folder, "junit.xml"),
        os.path.join(PROJECT, "tests", "test_cuda.py"),
    ]


def pytest_environment(out_dir: str) -> dict:
    return {MADE_RUNS_ENV: os.path.join(out_dir, "runs")}


def read_junit(path: str) -> list[dict]:
    """One entry per test: name, outcome (passed, failed, error, skipped) and pytest's message."""
    tests = []
    for case in ElementTree.parse(path).getroot().iter("testcase"):
        outcome, message = "passed", ""
        for child in case:
            if child.tag in ("failure", "error", "skipped"):
                outcome = {"failure": "failed"}.get(child.tag, child.tag)
                message = child.get("message") or (child.text or "").strip()
                break
        tests.append({"name": case.get("name"), "outcome": outcome, "message": message})
    return tests


def skip_meaning(message: str, gpu_count: int) -> str | None:
    """What a skip means on this node; None for a skip that may stand (the test does not apply here)."""
    reason = message.removeprefix("Skipped: ").strip()
    if reason.startswith(ONE_GPU_SKIP) and gpu_count < 2:
        return None
    if reason.startswith(ONE_GPU_SKIP):
        return f"skipped as on one GPU, but this node has {gpu_count}: the test did not check what it is for"
    if "CUDA" in reason or "GPU" in reason:
        return "the test did not see the node's GPU: nothing was checked on it"
    return "the check it makes was not made here"


def judge_cuda_tests(code: int, tests: list[dict], gpu_count: int, figures: dict) -> str:
    """The check's line, or CheckFailed: a failed or erroring test, no test passed, or a skip that does
    not apply to this node."""
    counts = {outcome: sum(t["outcome"] == outcome for t in tests) for outcome in ("passed", "failed", "error")}
    skipped = [t for t in tests if t["outcome"] == "skipped"]
    meanings = {t["name"]: skip_meaning(t["message"], gpu_count) for t in skipped}
    unexplained = [t for t in skipped if meanings[t["name"]] is not None]
    figures.update(
        tests=len(tests),
        **counts,
        skipped=[{"test": t["name"], "reason": t["message"], "meaning": meanings[t["name"]]} for t in skipped],
    )
    said = f"{counts['passed']} passed, {counts['failed']} failed, {counts['error']} errors, {len(skipped)} skipped"
    problems = []
    if counts["failed"] or counts["error"]:
        bad = [t["name"] for t in tests if t["outcome"] in ("failed", "error")]
        problems.append(f"failed: {', '.join(bad)}")
    if unexplained:
        problems.append(
            f"{len(unexplained)} skipped that apply to this node: "
            + "; ".join(f"{t['name']} ({t['message']}: {meanings[t['name']]})" for t in unexplained)
        )
    if not counts["passed"]:
        problems.append("no CUDA test passed")
    if code != 0 and not problems:
        problems.append(f"pytest exit code {code}")
    if problems:
        raise CheckFailed(f"{said}: " + "; ".join(problems))
    if skipped:
        said += f", each not applicable on one GPU ({', '.join(t['name'] for t in skipped)})"
    return said


def run_cuda_tests(ledger, figures: dict, limit_s: float) -> str:
    """Run the CUDA tests through the ledger (the budget may end them: NOT RUN) and judge them."""
    folder = os.path.join(ledger.out_dir, FOLDER)
    os.makedirs(folder, exist_ok=True)
    junit = os.path.join(folder, "junit.xml")
    if os.path.exists(junit):
        os.remove(junit)  # a result of an earlier check into the same folder is not this one's
    code, output = ledger.run_process(
        pytest_command(ledger.out_dir), limit_s, cwd=PROJECT, extra_env=pytest_environment(ledger.out_dir)
    )
    with open(os.path.join(folder, "pytest.log"), "w", encoding="utf-8") as handle:
        handle.write(output)
    figures["output_tail"] = output.strip().splitlines()[-40:]
    if not os.path.exists(junit):
        raise CheckFailed(f"pytest exit code {code} and no results: {' | '.join(figures['output_tail'][-5:])}")
    return judge_cuda_tests(code, read_junit(junit), ledger.gpu_count, figures)
