"""The bundle of a GPU check's folder holds what docs/gpu-check.md lists, no more and no less: a folder
laid out as gpu-check lays it out (its checks' runs, the one-GPU sweep and its report, the CUDA tests'
folder, each with traces), made of real records, bundled by the real command, its contents compared
with the page's list line by line."""

from __future__ import annotations

import os
import re
import shutil
import sys
import tarfile

import pytest
from conftest import FIXTURES, REPO, ddpbench

sys.path.insert(0, os.path.join(REPO, "benchmarks"))
from gpu_check_bundle import judge_bundle, page_patterns, pattern_regex, unlisted, unmatched  # noqa: E402
from gpu_check_cuda_tests import FOLDER as CUDA_TESTS  # noqa: E402
from gpu_check_plan import Ledger  # noqa: E402
from gpu_check_processes import CheckFailed  # noqa: E402
from gpu_check_runs import GPT2_FP16, write_command  # noqa: E402

STALL = os.path.join(FIXTURES, "stall", "cpu-one-rank")
SWEEP = os.path.join(FIXTURES, "sweeps", "cpu-mlp-with-failure")
JUNIT = """<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest" tests="2">
<testcase classname="tests.test_cuda" name="test_a_host_sleep_inside_a_step_is_in_the_step_time" time="0.5"/>
<testcase classname="tests.test_cuda" name="test_data_parallel_on_two_gpus_keeps_bf16" time="0.0">
<skipped type="pytest.skip" message="not applicable on one GPU: DataParallel replicates only across 2 or more GPUs"/>
</testcase></testsuite></testsuites>"""


def trace(folder) -> None:
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "rank-0.pt.trace.json.gz"), "wb") as handle:
        handle.write(b"\x1f\x8b" + b"\0" * 2000)


def gpu_check_folder(root) -> str:
    """A folder shaped as `make gpu-check` leaves it, from real records and logs."""
    out = os.path.join(root, "gpu-check-20261207T120000")
    os.makedirs(out)
    ledger = Ledger(out, budget_s=1800)
    ledger.write()  # gpu_check.json and gpu_check.txt
    # A check's run: its `--out` folder (record, logs, traces) and the options gpu-check keeps beside it.
    run = os.path.join(out, "runs", "gpt2-fp16")
    shutil.copytree(STALL, run, ignore=shutil.ignore_patterns("README.md"))
    write_command(run, GPT2_FP16)
    trace(os.path.join(run, "traces", "stall"))
    # The one-GPU sweep, its report and explain's answer.
    sweep = os.path.join(out, "sweeps", "gpu-check")
    shutil.copytree(SWEEP, sweep)
    os.makedirs(os.path.join(sweep, "logs", "mlp-ddp-n1"))
    with open(os.path.join(sweep, "logs", "mlp-ddp-n1", "output.log"), "w") as handle:
        handle.write("[default0]: step 3\n")
    os.makedirs(os.path.join(out, "reports", "gpu-check"))
    for name in ("index.html", ".ddpbench-sweep-dir"):
        with open(os.path.join(out, "reports", "gpu-check", name), "w") as handle:
            handle.write("<html></html>" if name.endswith(".html") else sweep)
    with open(os.path.join(out, "explain.json"), "w") as handle:
        handle.write('{"configurations": []}')
    # The CUDA tests: their results, their output, and a run one of them launched in its temporary folder.
    tests = os.path.join(out, CUDA_TESTS)
    shutil.copytree(STALL, os.path.join(tests, "runs", "local0"), ignore=shutil.ignore_patterns("README.md"))
    trace(os.path.join(tests, "runs", "local0", "traces", "stall"))
    with open(os.path.join(tests, "junit.xml"), "w") as handle:
        handle.write(JUNIT)
    with open(os.path.join(tests, "pytest.log"), "w") as handle:
        handle.write("1 passed, 1 skipped\n")
    return out


def bundled_names(path: str) -> list[str]:
    with tarfile.open(path) as archive:
        return [name.split("/", 1)[1] for name in archive.getnames()]


def test_the_bundle_holds_exactly_what_the_page_lists_and_says_its_size(tmp_path):
    folder = gpu_check_folder(tmp_path)
    patterns = page_patterns()
    assert "runs/<check>/runs/<run-id>.json" in patterns and "cuda-tests/junit.xml" in patterns
    done = ddpbench("bundle", folder)
    assert done.returncode == 0, done.stderr
    out = f"{folder}-bundle.tar.gz"
    assert f"bundle: {out} ({os.path.getsize(out) / 2**20:.1f} MiB, " in done.stdout
    names = bundled_names(out)
    assert unlisted(names, patterns) == []  # nothing the page does not list
    assert unmatched(names, patterns) == []  # everything it lists is there
    assert not [name for name in names if "traces/" in name or ".pt.trace." in name]
    assert judge_bundle(names, patterns, ["gpu_check.json", "bundle/environment.json"]).endswith("no trace")
    # The CUDA tests' run is there, with its hang dumps, under the check's folder.
    assert "cuda-tests/runs/local0/runs/stall.json" in names
    assert "cuda-tests/runs/local0/logs/stall/hang-dumps/flight_recorder_rank_0" in names


def test_with_traces_the_bundle_adds_the_traces_and_only_them(tmp_path):
    folder = gpu_check_folder(tmp_path)
    done = ddpbench("bundle", folder, "--with-traces", "--out", str(tmp_path / "all.tar.gz"))
    assert done.returncode == 0, done.stderr
    names = bundled_names(str(tmp_path / "all.tar.gz"))
    extra = unlisted(names, page_patterns())
    assert extra and all("/traces/" in name and name.endswith(".pt.trace.json.gz") for name in extra), extra
    nested = {"runs/gpt2-fp16/traces/stall", "cuda-tests/runs/local0/traces/stall", "sweeps/gpu-check/traces/mlp-dp-n2"}
    assert {os.path.dirname(name) for name in extra} >= nested
    with pytest.raises(CheckFailed, match="traces in a bundle made without --with-traces"):
        judge_bundle(names, page_patterns(), [])


def test_the_pages_patterns_name_one_component_or_a_path():
    assert pattern_regex("runs/<check>/runs/<run-id>.json").match("runs/gpt2-fp16/runs/gpt2-fp16.json")
    assert not pattern_regex("runs/<check>/runs/<run-id>.json").match("runs/a/b/runs/x.json")
    assert pattern_regex("runs/<check>/logs/<run-id>/<path>").match("runs/a/logs/r/ranks/x/attempt_0/0/stdout.log")
    assert not re.search(r"<(?!check>|run-id>|test>|file>|path>)", " ".join(page_patterns()))
