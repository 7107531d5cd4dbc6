"""The fault matrix: each fault injected for real inside worker processes of real gloo runs."""
import json
import os
import signal
import socket
import subprocess
import sys
import time

import pytest

from conftest import REPO, cpu_environment, ddpbench
from ddpbench.config.faults import parse_fault
from ddpbench.config.spec import SpecError

pytestmark = pytest.mark.launches
QUICK = ["--nproc", "2", "--steps", "8", "--warmup", "2", "--no-profile"]


def only_record(folder):
    runs = os.path.join(folder, "runs")
    names = os.listdir(runs)
    assert len(names) == 1, names
    return json.load(open(os.path.join(runs, names[0])))


def processes_mentioning(text):
    """Processes whose command line mentions `text` (our run's folder): orphans if any remain."""
    found = []
    for pid in os.listdir("/proc"):
        if pid.isdigit() and int(pid) != os.getpid():
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as handle:
                    if text.encode() in handle.read():
                        found.append(int(pid))
            except OSError:
                continue
    return found


def test_fault_option_is_checked_before_anything_starts(tmp_path):
    assert parse_fault("rank=1,kind=hang,step=3").to_dict() == {"rank": 1, "kind": "hang", "step": 3}
    for text, message in [("rank=1,kind=explode,step=3", "raise, kill, hang, oom"),
                          ("rank=1,step=3", "needs rank, kind and step"),
                          ("rank=one,kind=raise,step=3", "whole numbers")]:
        with pytest.raises(SpecError, match=message):
            parse_fault(text)
    done = ddpbench("run", "--workload", "mlp", *QUICK, "--inject-fault", "rank=5,kind=raise,step=1",
                    "--out", str(tmp_path / "x"))
    assert done.returncode == 2 and "rank 5 does not exist: world size is 2" in done.stderr
    assert not (tmp_path / "x").exists()


def test_a_rank_that_raises_is_named_with_its_traceback_and_the_sweep_goes_on(tmp_path):
    done = ddpbench("sweep", "--workloads", "mlp", "--strategies", "local,ddp", "--nproc", "2", "--steps", "8",
                    "--warmup", "2", "--no-profile", "--inject-fault", "rank=1,kind=raise,step=4",
                    "--out", str(tmp_path), "--sweep-id", "s", cwd=tmp_path)
    assert done.returncode == 1
    runs = tmp_path / "s" / "runs"
    statuses = {name[:-5]: json.load(open(runs / name))["status"] for name in os.listdir(runs)}
    assert statuses == {"mlp-local-n1": "ok", "mlp-ddp-n1": "ok", "mlp-ddp-n2": "failed"}
    error = json.load(open(runs / "mlp-ddp-n2.json"))["error"]
    assert error["message"] == "rank 1 raised RuntimeError: injected fault: rank 1 raises at step 4"
    assert "injected fault" in error["tracebacks"]["1"] and "maybe_inject" in error["tracebacks"]["1"]
    assert json.load(open(tmp_path / "s" / "manifest.json"))["state"] == "finished"
    assert (tmp_path / "s" / "scaling.csv").exists() and "report:" in done.stdout


def test_a_killed_rank_is_named_with_its_signal(tmp_path):
    done = ddpbench("run", "--workload", "mlp", *QUICK, "--inject-fault", "rank=1,kind=kill,step=3",
                    "--out", str(tmp_path))
    record = only_record(tmp_path)
    assert done.returncode == 1 and record["status"] == "failed"
    assert record["error"]["message"] == "rank 1 was killed by SIGKILL"
    assert record["error"]["signals"] == {"1": "SIGKILL"}
    assert processes_mentioning(str(tmp_path)) == []


def test_a_hung_rank_is_found_and_every_process_ended(tmp_path):
    started = time.monotonic()
    done = ddpbench("run", "--workload", "mlp", *QUICK, "--pg-timeout", "8", "--inject-fault",
                    "rank=1,kind=hang,step=4", "--out", str(tmp_path))
    elapsed = time.monotonic() - started
    record = only_record(tmp_path)
    assert done.returncode == 1 and record["status"] == "timeout"
    # torchrun blames rank 0, whose collective timed out waiting; the heartbeat points at rank 1.
    assert record["error"]["hung_ranks"] == [1]
    assert "rank 1 at step 3" in record["error"]["hang_evidence"]
    assert elapsed < 8 + 60, "detected within the process-group timeout plus start-up"
    assert processes_mentioning(str(tmp_path)) == []


def test_out_of_memory_is_its_own_status(tmp_path):
    done = ddpbench("run", "--workload", "mlp", *QUICK, "--inject-fault", "rank=0,kind=oom,step=3",
                    "--out", str(tmp_path))
    record = only_record(tmp_path)
    assert done.returncode == 1 and record["status"] == "oom"
    assert "out of memory on rank 0" in record["error"]["message"]


@pytest.mark.parametrize("factory", ["oom_above_batch", "cudnn_oom_above_batch"])
def test_oom_backoff_reruns_at_half_the_batch(tmp_path, factory):
    # Also when the library that ran out (cuDNN here) raises a plain RuntimeError.
    workload = f"{REPO}/tests/fixtures/oom_above_batch.py:{factory}"
    done = ddpbench("run", "--workload", workload, *QUICK, "--oom-backoff", "--out", str(tmp_path))
    record = only_record(tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr[-2000:]
    assert record["status"] == "ok" and record["spec"]["batch_size"] == 4
    assert [(a["batch_size"], a["status"]) for a in record["oom_backoff"]] == [(8, "oom")]
    assert "ran out of memory; measured at batch 4/device" in done.stdout


def test_a_taken_port_is_replaced_by_a_free_one(tmp_path):
    with socket.socket() as squatter:
        squatter.bind(("localhost", 0))
        squatter.listen()
        port = squatter.getsockname()[1]
        done = ddpbench("run", "--workload", "mlp", *QUICK, "--rdzv-port", str(port), "--out", str(tmp_path))
    record = only_record(tmp_path)
    assert done.returncode == 0 and record["status"] == "ok"
    assert record["launch"]["notes"] == [f"port {port} was taken; torchrun picked a free one"]


def test_sigterm_ends_the_sweep_cleanly_and_resume_finishes_it(tmp_path):
    command = [sys.executable, "-m", "ddpbench", "sweep", "--workloads", "mlp", "--strategies", "local,ddp",
               "--nproc", "2", "--steps", "60", "--warmup", "2", "--no-profile", "--out", str(tmp_path),
               "--sweep-id", "s"]
    sweep = subprocess.Popen(command, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             env=cpu_environment())
    runs = tmp_path / "s" / "runs"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not (runs.exists() and any(n.endswith(".json") for n in os.listdir(runs))):
        time.sleep(0.2)
    time.sleep(1.0)  # now inside the second run
    sweep.send_signal(signal.SIGTERM)
    _, stderr = sweep.communicate(timeout=60)
    assert sweep.returncode == 143, stderr[-2000:]
    manifest = json.load(open(tmp_path / "s" / "manifest.json"))
    assert manifest["state"] == "interrupted"
    finished = [json.load(open(runs / n)) for n in os.listdir(runs) if n.endswith(".json")]
    assert finished and all(r["status"] == "ok" for r in finished)  # intact, nothing half-written
    assert processes_mentioning(str(tmp_path)) == []
    done = ddpbench("sweep", "--resume", "--sweep-id", "s", "--out", str(tmp_path), cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.load(open(tmp_path / "s" / "manifest.json"))["state"] == "finished"
    assert sorted(os.listdir(runs)) == ["mlp-ddp-n1.json", "mlp-ddp-n2.json", "mlp-local-n1.json"]
