"""A busy machine, with a real CPU hog beside real runs: `ddpbench run` warns before it starts, the
record says how busy the machine was during the window, the summary, scaling table and report mark
the run, the canary's shaped probe slows down with it, and the gate calls the regression what it is
(exit 4 with the figures), never a plain REGRESSION.

The hog is `python -c "while True: pass"`: one core of this 2-core machine, taken from runs that want
both. Every test here needs the machine to itself (a test beside it is a hog of its own)."""

import json
import os
import subprocess
import sys
import time
from contextlib import contextmanager

import pytest
from chance import verdict as holds
from conftest import ddpbench

from ddpbench.analysis.frames import format_side_by_side, runs_frame, scaling_table
from ddpbench.config.spec import RunSpec
from ddpbench.host import load as machine_load
from ddpbench.records.store import read_records
from ddpbench.running.canary import run_canary, sweep_shape

pytestmark = [pytest.mark.launches, pytest.mark.alone]

ONE_READING = "one reading of /proc/stat before the run and one over its window, not samples with a spread"
HOG = (
    f"{ONE_READING}, and each rank's waiting for a core over its steps. A hog spins a whole core of two: "
    "the ranks wait for a core a large part of their steps, other processes' share of it far above the "
    "2 % the busy mark needs"
)
QUIET = f"{ONE_READING}. The test holds the machine (alone): the run's processes are all that run"
HOGS = (
    "each canary is one pair of processes, whose repeats share what the process met; one canary a side. Two "
    "hogs on two cores leave the canary about half the machine (0.42-0.58 of quiet with one hog)"
)
GATE = (
    "one run a side, judged at the prior noise the command gives (2 %): no samples spread it. The hog takes one "
    "of the two cores the run wants: its throughput falls by about half, against the 5 % threshold"
)

RUN = ["--workload", "mlp", "--device", "cpu", "--nproc", "2", "--threads-per-rank", "1", "--steps", "60"]
RUN += ["--warmup", "5", "--no-profile"]


@contextmanager
def cpu_hog(processes: int = 1):
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(processes)]
    time.sleep(0.5)  # let them take their cores
    try:
        yield hogs[0]
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()


@pytest.fixture(scope="module")
def loaded(tmp_path_factory):
    out = tmp_path_factory.mktemp("loaded")
    with cpu_hog():
        done = ddpbench("run", *RUN, "--out", str(out), env={"DDPBENCH_BUSY_WARNING": "on"})
    return done, *read_records(str(out))[0][0]


@pytest.fixture(scope="module")
def quiet(tmp_path_factory):
    out = tmp_path_factory.mktemp("quiet")
    done = ddpbench("run", *RUN, "--out", str(out), env={"DDPBENCH_BUSY_WARNING": "on"})
    return done, *read_records(str(out))[0][0]


def test_a_run_beside_a_hog_is_warned_about_and_marked_busy(loaded):
    done, path, record = loaded
    assert done.returncode == 0, done.stderr
    load = record.machine_load
    assert load.cores == os.cpu_count() and load.wanted_cores == 2
    # Warned before it starts, and marked busy over its window: the hog's core, less what it lost to the run.
    holds(
        "warning: the machine is busy: other processes use" in done.stderr
        and load.busy
        and load.others_cores >= 0.5
        and load.own_cores > 0.5,
        rate=1e-4,
        unreachable=HOG,
        what=f"{load}\n{done.stderr}",
    )
    # not chance: the mark's reason, in the words of the ranks' own waiting for a core
    assert "other processes took about" in load.why and "waiting for a core" in load.why, load.why
    # not chance: the run's summary prints the record's busy mark, held above
    assert "!! busy machine" in done.stdout
    assert sum(rank.machine_load is not None for rank in record.ranks) == 1  # local rank 0 of the one node
    table = format_side_by_side(scaling_table(runs_frame([(path, record)])))
    # not chance: the table marks the record's busy run, held above
    assert "busy" in table.splitlines()[0] and "other processes took cores" in table


def test_a_quiet_run_is_not_marked_busy(quiet):
    done, _, record = quiet
    assert done.returncode == 0, done.stderr
    assert record.machine_load is not None, done.stderr
    # Not warned, not marked; what the run used is its own, not others': nearly all of the busy cores.
    load = record.machine_load
    holds(
        "machine is busy" not in done.stderr and not load.busy and load.own_cores >= load.busy_cores - 0.25,
        rate=1e-4,
        unreachable=QUIET,
        what=f"{load}\n{done.stderr}",
    )


def test_the_gate_calls_a_regression_beside_a_hog_a_busy_machine_never_a_plain_regression(quiet, loaded, tmp_path):
    (_, quiet_path, _), (_, loaded_path, record) = quiet, loaded
    # A narrow prior makes one run a side enough to judge, as a team's measured noise would.
    gate = ddpbench(
        "gate", "--baseline", quiet_path, "--candidate", loaded_path, "--metrics", "throughput",
        "--prior-noise", "2%", "--json", str(tmp_path / "gate.json"),
    )  # fmt: skip
    verdict = json.load(open(tmp_path / "gate.json"))
    (comparison,) = verdict["comparisons"]
    holds(comparison["verdict"] == "regression", rate=1e-4, unreachable=GATE, what=gate.stdout)  # the hog
    assert gate.returncode == 4, gate.stdout + gate.stderr  # not 1: the code did not change
    # not chance: the gate reads the loaded record's busy mark, held by the test above
    assert "busy machine" in gate.stdout and "other processes took about" in gate.stdout
    # not chance: the same mark, as the candidate run's record says it
    assert verdict["busy_runs"] == {
        comparison["configuration"]: [f"candidate run {record.run_id}: {record.machine_load.why}"]
    }


def test_the_canary_runs_shaped_like_the_sweep_and_loses_what_its_runs_lose():
    quiet = run_canary("start", shape=(2, 1))["probes"]["matmul_2x1"]
    with cpu_hog(processes=2):
        loaded = run_canary("start", shape=(2, 1))["probes"]["matmul_2x1"]
    # Quiet again after the hogs: the better of the two quiet readings is the machine's quiet speed
    # (one suite run read 73.2 GFLOP/s quiet, then 89.5 beside the hogs: the first quiet reading
    # was itself slowed, by processes of the test before it still ending).
    again = run_canary("start", shape=(2, 1))["probes"]["matmul_2x1"]
    assert quiet["processes"] == 2 and quiet["threads"] == 1 and quiet["unit"] == "GFLOP/s"
    # Two processes that meet after every product, beside a hog on each core: they get about half the
    # machine. (With one hog the loss ranged from 0.42-0.58 of the quiet rate to 0.88 in one suite run.)
    best = max(quiet["value"], again["value"])
    holds(loaded["value"] < 0.8 * best, rate=1e-4, unreachable=HOGS, what=str((quiet, loaded, again)))


def test_a_sweep_shapes_its_canary_like_its_largest_run():
    plan = [RunSpec(workload="mlp", strategy=s, nproc=n, threads_per_rank=t) for s, n, t in SHAPES]
    assert sweep_shape(plan) == (4, 2)
    assert sweep_shape([]) is None


SHAPES = [("local", 1, 8), ("ddp", 2, 4), ("ddp", 4, 2), ("dp", 4, 2)]


def test_the_busy_rule_needs_more_than_the_readings_resolution():
    load = {"hostname": "h", "window_s": 0.06, "cores": 2, "others_cores": 0.4, "wanted_cores": 2}
    # not chance: the rule on readings written here (60 ms: a tick per CPU each side is 0.67 of a core)
    assert not machine_load.judge(load)["busy"]
    # not chance: the rule on readings written here, over a 5 s window
    assert machine_load.judge({**load, "window_s": 5.0})["busy"]
    # not chance: the rule on readings written here; the others left what the run wanted
    assert not machine_load.judge({**load, "window_s": 5.0, "wanted_cores": 1})["busy"]


class FakeNvml:
    """The slice of nvidia-ml-py's API the readings use, for the logic around it (no GPU here):
    handles by UUID, compute processes, clocks, and an old driver that only knows throttle reasons."""

    NVML_CLOCK_SM = 1
    nvmlClocksThrottleReasonHwSlowdown = 0x8
    nvmlClocksEventReasonHwSlowdown = 0x8
    nvmlClocksEventReasonSwPowerCap = 0x4
    nvmlClocksEventReasonHwThermalSlowdown = 0x40
    nvmlClocksEventReasonHwPowerBrakeSlowdown = 0x80
    nvmlClocksEventReasonSwThermalSlowdown = 0x20

    class Process:
        def __init__(self, pid):
            self.pid = pid

    def __init__(self, pids, reasons):
        self.pids, self.reasons, self.asked = pids, reasons, []

    def nvmlInit(self):
        pass

    def nvmlShutdown(self):
        pass

    def nvmlDeviceGetHandleByUUID(self, uuid):
        self.asked.append(uuid)
        return uuid

    def nvmlDeviceGetComputeRunningProcesses(self, handle):
        return [self.Process(pid) for pid in self.pids]

    def nvmlDeviceGetClockInfo(self, handle, clock):
        return 1200

    def nvmlDeviceGetMaxClockInfo(self, handle, clock):
        return 1980

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle):
        raise RuntimeError("Function Not Found")  # a driver before R535

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, handle):
        return self.reasons


def test_gpu_readings_tell_other_processes_and_slowdowns(monkeypatch):
    fake = FakeNvml(pids=[100, 200, 300], reasons=0x8 | 0x4)
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    readings, note = machine_load.gpu_readings({0: "abcd", 1: "MIG-ef01"}, own_pids={100})
    assert note is None and fake.asked == ["GPU-abcd", "MIG-ef01"]
    assert readings[0]["other_processes"] == 2  # 200 and 300 are not the run's
    assert readings[0]["slowdowns"] == ["hardware slowdown"]  # the power cap is normal at full load
    assert (readings[0]["sm_clock_mhz"], readings[0]["max_sm_clock_mhz"]) == (1200, 1980)
    # Inside a container NVML shows host pids: none is the run's, so count beyond its one per GPU.
    readings, _ = machine_load.gpu_readings({0: "abcd"}, own_pids={1, 2})
    assert readings[0]["other_processes"] == 2
    load = machine_load.judge(
        {"hostname": "h", "window_s": 5.0, "cores": 8, "others_cores": 0.0, "wanted_cores": 2, "gpus": readings}
    )
    # not chance: the fake NVML's readings, written by hand
    assert load["busy"] and "GPU 0: 2 other compute process(es)" in load["why"] and "hardware slowdown" in load["why"]


def test_nvml_that_fails_never_stops_a_run(monkeypatch):
    class Broken(FakeNvml):
        def nvmlInit(self):
            raise ValueError("library and bindings do not match")

    monkeypatch.setitem(sys.modules, "pynvml", Broken([], 0))
    assert machine_load.gpu_readings({0: "abcd"}, set()) == ([], "not read: NVML: library and bindings do not match")
