"""A candidate whose machine got faster does not pass on that speed. Real sweeps, smallest there
are: the baseline sweep (its runs and its canary) held to half a core by a cgroup CPU quota, and at
the same time the candidate sweep of a slowed workload (60 % more real work per step, --slowdown) on
the rest of the machine. The candidate measures faster, and so does its canary: the gate takes the
canary's speed-up out of the ratio, says how large a slowdown that speed-up could hide and exits 4,
never 0 (it passed before: ratio 1.91, canary +143 to +397 %). The canary does not track the
workload's own speed-up exactly: in one run the quota slowed the workload 2.56 times and the canary
2.02 times, so a planted 25 % slowdown (as this test first planted) corrected to 1.4 % faster and
passed. 60 % more work is a ratio of 0.625, seen through a canary that is off by that much (0.79).
Two sweeps of two local runs each, with the canary at their start and end: about 35 s here (at a
quarter of a core, one sweep after the other, 89 s). It holds the machine alone: beside the
eight-rank run or the eight hanging runs of tests/test_faults.py, the candidate would get less than
the baseline's half core."""

import json
import os
import subprocess
import sys

import pytest
from chance import verdict as holds
from conftest import cpu_environment, ddpbench

# make test-all only: holds the machine alone about 30 s; make test runs a sweep's canary for real (test_canary) and
# this rule on fixture records (test_gate_base)
pytestmark = [
    pytest.mark.launches,
    pytest.mark.alone,
    pytest.mark.test_all,
]

CPU_CGROUP = "/sys/fs/cgroup/cpu"
SWEEP = ["sweep", "--suite", "smoke", "--workloads", "mlp", "--strategies", "local", "--device", "cpu"]
SWEEP += ["--max-nproc", "1", "--threads-per-rank", "1", "--repeat", "2", "--no-profile"]


@pytest.fixture
def half_a_core():
    """A cgroup with a quota of half a core, in 10 ms periods (as tests/test_probe_runs.py makes one);
    removed afterwards. Half, not a quarter: the candidate's canary still read 95-167 % faster at
    least (three runs here), where 33 % hides the planted 25 %, and the baseline takes half as long."""
    if not os.path.isdir(CPU_CGROUP) or not os.access(CPU_CGROUP, os.W_OK):
        if os.environ.get("DDPBENCH_REQUIRE_CGROUP"):
            pytest.fail(
                f"DDPBENCH_REQUIRE_CGROUP is set but the cgroup v1 cpu controller at {CPU_CGROUP} is not writable"
            )
        pytest.skip(f"needs the cgroup v1 cpu controller writable at {CPU_CGROUP} (root)")
    group = os.path.join(CPU_CGROUP, f"ddpbench-faster-{os.getpid()}")
    os.mkdir(group)
    try:
        for name, value in (("cpu.cfs_period_us", "10000"), ("cpu.cfs_quota_us", "5000")):
            with open(os.path.join(group, name), "w") as handle:
                handle.write(value)
        yield group
    finally:
        os.rmdir(group)


def start_sweep(out, sweep_id: str, *extra: str, group: str | None = None) -> tuple[subprocess.Popen, str]:
    command = [sys.executable, "-m", "ddpbench", *SWEEP, "--out", str(out), "--sweep-id", sweep_id, *extra]
    if group is not None:
        # The shell joins the group, then becomes ddpbench: every process it starts stays in it.
        command = ["sh", "-c", f'echo $$ > {group}/cgroup.procs && exec "$@"', "sh", *command]
    started = subprocess.Popen(
        command,
        cwd=out,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=cpu_environment(DDPBENCH_CANARY="on"),
    )
    return started, str(out / sweep_id)


def finished(*started: subprocess.Popen) -> None:
    """Waits for every sweep before judging any: a failed one leaves none running in the cgroup."""
    ended = [(process, *process.communicate(timeout=600)) for process in started]
    for process, stdout, stderr in ended:
        assert process.returncode == 0, stdout[-2000:] + stderr[-3000:]


PLANTED = 0.6
"""More real work per step in the candidate's workload (--slowdown)."""


def test_a_slowed_workload_on_a_faster_machine_does_not_pass(tmp_path, half_a_core):
    # Both sweeps at once: the baseline's quota leaves the candidate at least 1.5 of the 2 cores, and
    # the test holds the machine for the baseline's time only, not for both sweeps one after the other.
    base, baseline = start_sweep(tmp_path, "base", group=half_a_core)
    cand, candidate = start_sweep(tmp_path, "cand", "--slowdown", str(PLANTED))
    finished(cand, base)
    out = tmp_path / "verdict.json"
    done = ddpbench(
        "gate",
        "--baseline",
        baseline,
        "--candidate",
        candidate,
        "--metrics",
        "throughput",
        "--json-file",
        str(out),
        cwd=tmp_path,
    )
    verdict = json.loads(out.read_text())
    print(done.stdout)
    # Half a core against a whole one: the slowed candidate measures no slower than the
    # threshold (the held-out workload measured 1.085 times faster); without the rule it passed.
    corrected = verdict["hidden_slowdown"]["corrected"]
    holds(
        {c["verdict"] for c in verdict["comparisons"]} <= {"pass", "improvement"}
        and done.returncode == 4
        and "faster machine: the candidate's canary ran" in done.stdout
        and all(one["ratio"] < 0.95 and one["verdict"] in ("regression", "inconclusive") for one in corrected)
        and corrected,
        rate=1e-4,
        unreachable=(
            "the canary's rule compares the ranges of two readings a side (each sweep's start and end), and the "
            "verdict two runs a side at a noise pooled from them, not one mean over samples: no t gives its "
            "chance. The rate is a judgement from few runs: the check fails only where the canary under-reads "
            "the workload's own speed-up by more than 1.6 x 0.95 = 1.52 times; it read at least +95 to +167 % "
            "in four runs here, under-reading by at most 1.27 times (one run, whose 25 % plant then passed)"
        ),
        what=done.stdout + done.stderr + str(verdict["hidden_slowdown"]),
    )
