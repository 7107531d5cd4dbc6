"""The machine canary: its probes give positive finite rates, a sweep keeps one run at its start and
one at its end in the manifest, a canary that cannot run is kept as its error, and sweeps from
before the canary still load."""

import json
import math
import os
import time

import pytest
from conftest import FIXTURES, ddpbench

from ddpbench.gate.drift import readings, sweep_canary
from ddpbench.running.canary import format_canary, run_canary
from ddpbench.running.sweep import prepare, read_manifest, run_sweep

SWEEP = os.path.join(FIXTURES, "sweeps", "cpu-mlp-with-failure")
CPU_PROBES = ("gloo_allreduce", "matmul_fp32", "memory_copy", "python_loop")


def assert_measured(canary: dict) -> None:
    assert "error" not in canary, canary
    for name in CPU_PROBES:
        probe = canary["probes"][name]
        # not chance: a measured rate is positive
        assert probe["value"] > 0 and math.isfinite(probe["value"]), (name, probe)
        assert len(probe["repeats"]) >= 3 and all(r > 0 and math.isfinite(r) for r in probe["repeats"])
    assert canary["probes"]["gloo_allreduce"]["processes"] == 2
    # On CPU the NCCL probe says why it did not run instead of giving a figure.
    assert canary["probes"]["nccl_allreduce"] == {"skipped": "no CUDA GPU is visible"}


@pytest.mark.launches
def test_a_sweep_keeps_a_canary_at_its_start_and_end(tmp_path, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    monkeypatch.setenv("DDPBENCH_CANARY", "on")  # the suite leaves it out of other tests' sweeps
    sweep_dir = str(tmp_path / "sweep")
    # No runs planned: the sweep's own steps only, so the canary is all that runs.
    manifest, plan = prepare(sweep_dir, [], {"suite": "cpu"}, resume=False)
    run_sweep(sweep_dir, manifest, plan)
    kept = read_manifest(sweep_dir)["canary"]
    assert [run["at"] for run in kept] == ["start", "end"]
    for run in kept:
        assert_measured(run)
        assert run["started_at"] <= run["ended_at"]
    assert set(readings(sweep_canary(sweep_dir))) == set(CPU_PROBES)
    text = format_canary(kept[0])
    assert "matmul_fp32" in text and "skipped: no CUDA GPU is visible" in text


def test_ddpbench_canary_off_leaves_it_out_of_a_sweep(tmp_path, monkeypatch):
    monkeypatch.setenv("DDPBENCH_CANARY", "off")
    sweep_dir = str(tmp_path / "sweep")
    manifest, plan = prepare(sweep_dir, [], {"suite": "cpu"}, resume=False)
    run_sweep(sweep_dir, manifest, plan)
    assert "canary" not in read_manifest(sweep_dir)


def test_a_canary_that_cannot_run_is_kept_as_its_error_and_never_raises(tmp_path):
    broken = tmp_path / "python"
    broken.write_text("#!/bin/sh\necho 'ModuleNotFoundError: No module named torch' >&2\nexit 1\n")
    broken.chmod(0o755)
    canary = run_canary("start", python=str(broken))
    assert canary["at"] == "start" and "probes" not in canary
    assert canary["error"] == "the canary failed (exit 1): ModuleNotFoundError: No module named torch"
    assert format_canary(canary) == f"canary: {canary['error']}"


def test_sweeps_from_before_the_canary_still_load_and_gate_without_a_canary_table(tmp_path):
    assert "canary" not in read_manifest(SWEEP)
    assert sweep_canary(SWEEP) == [] and sweep_canary(os.path.join(SWEEP, "runs", "mlp-ddp-n1.json")) == []
    verdict = tmp_path / "v.json"
    done = ddpbench("gate", "--baseline", SWEEP, "--candidate", SWEEP, "--allow-failed-runs", "--json", str(verdict))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "canary" not in done.stdout and "canary" not in json.loads(verdict.read_text())


def test_probes_that_were_skipped_or_failed_are_no_readings():
    runs = [
        {"probes": {"matmul_fp32": {"value": 30.0, "unit": "GFLOP/s"}, "nccl_allreduce": {"skipped": "no GPU"}}},
        {"probes": {"matmul_fp32": {"value": 20.0, "unit": "GFLOP/s"}, "memory_copy": {"error": "boom"}}},
        {"error": "the canary did not finish"},
    ]
    assert readings(runs) == {"matmul_fp32": ("GFLOP/s", [30.0, 20.0])}


def test_a_canary_that_hangs_is_ended_with_its_processes(tmp_path):
    stuck = tmp_path / "python"
    pid_file = tmp_path / "child.pid"
    # A probe that starts a child of its own and hangs, as the all-reduce probe's peer could.
    stuck.write_text(f"#!/bin/sh\nsh -c 'echo $$ > {pid_file}; exec sleep 30' &\nsleep 30\n")
    stuck.chmod(0o755)
    canary = run_canary("end", python=str(stuck), timeout_s=1)
    assert canary["error"] == "the canary did not finish in 1 s"
    child = int(pid_file.read_text())
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and alive(child):
        time.sleep(0.1)
    assert not alive(child)


def alive(pid: int) -> bool:
    """Running, not merely a zombie waiting to be reaped."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False
