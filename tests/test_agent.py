"""Forked ranks (`ddpbench.worker.agent`, `--rank-start fork`, the default) and plain torchrun
(`--rank-start exec`): the same run started both ways trains with every check passing, and its record
says how its ranks started, what it cost before its first timed step and the torchrun command a
forked run stands for; the agent forks from a process that ran no torch operation, and a forked
rank's CUDA errors are the driver's own. What fork saves, and whether the step times are
equivalent: docs/measurements/start-up.md."""

import json
import os
import subprocess
import sys

import pytest
from conftest import REPO, ddpbench_process

from ddpbench.config.spec import RunSpec
from ddpbench.running.command import AGENT, command_for, torchrun_equivalent

PROBE = """
import os
import ddpbench.worker.agent as agent
import importlib
for name in agent.PRELOAD:
    importlib.import_module(name)
agent.no_driver_no_gpus()
agent.check_fork_safe()
threads = len(os.listdir("/proc/self/task"))
from torch.distributed.launcher.api import LaunchConfig
LaunchConfig(min_nodes=1, max_nodes=1, nproc_per_node=1, rdzv_backend="c10d", rdzv_endpoint="localhost:0",
             run_id="probe", max_restarts=0)
import torch
# A CPU-only torch has no bad-fork flag, and the answer below would be True whatever happened.
print(threads, agent.forked_ranks_can_use_cuda(), hasattr(torch._C, "_cuda_isInBadFork"))
"""


def test_a_forked_run_keeps_the_torchrun_command_it_stands_for():
    spec = RunSpec(workload="mlp", nproc=2, device="cpu", run_id="x", rank_start="fork")
    command = command_for(spec)
    assert command[1:3] == ["-m", AGENT] and "--standalone" in command and "--nproc-per-node=2" in command
    equivalent = torchrun_equivalent(command)
    assert equivalent[1:3] == ["-m", "torch.distributed.run"] and equivalent[3:] == command[3:]
    assert command_for(spec.replace(rank_start="exec"))[1:3] == ["-m", "torch.distributed.run"]


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="needs Linux's /proc")
def test_the_agent_imports_and_forks_without_a_thread_of_its_own_or_a_poisoned_cuda():
    """After its imports the agent runs one thread (with OMP_NUM_THREADS=1, as a run sets it), has
    not initialised CUDA, and a process it forks can still ask for CUDA and get the driver's own
    answer: torchrun's LaunchConfig asks whether an accelerator is there, which without NVML would
    mark every later fork as unable to use CUDA."""
    env = dict(os.environ, PYTHONPATH=REPO, OMP_NUM_THREADS="1")
    done = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    threads, usable, flagged = done.stdout.split()
    if flagged != "True":
        pytest.skip("this torch is a CPU-only build: it keeps no bad-fork flag to read")
    assert (threads, usable) == ("1", "True"), done.stdout


@pytest.mark.launches
def test_one_run_started_both_ways_trains_and_says_how(tmp_path):
    found = {}
    for way in ("fork", "exec"):
        done = ddpbench_process(
            "run", "--workload", "mlp", "--nproc", "2", "--device", "cpu", "--steps", "12", "--warmup", "5",
            "--no-profile", "--rank-start", way, "--out", str(tmp_path), "--run-id", way,
        )  # fmt: skip
        assert done.returncode == 0, done.stdout + done.stderr
        found[way] = json.loads((tmp_path / "runs" / f"{way}.json").read_text())
    for way, record in found.items():
        assert record["status"] == "ok" and record["spec"]["rank_start"] == way
        assert all(check["ok"] in (True, None) for check in record["checks"].values()), record["checks"]
        assert record["start_up"]["rank_start"] == way
        # not chance: both are measured quantities of any run, above zero however slow the machine
        assert record["start_up"]["cpu_s"] > 0 and record["start_up"]["to_first_step_s"] > 0
        assert all(len(rank["cpu"]["waited_s"]) == 7 for rank in record["ranks"])  # one reading per timed step
    assert found["fork"]["launch"]["command"][2] == AGENT
    assert found["fork"]["launch"]["torchrun_command"][2] == "torch.distributed.run"
    assert found["exec"]["launch"]["torchrun_command"] is None
