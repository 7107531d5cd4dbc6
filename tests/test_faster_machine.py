"""A candidate whose machine got faster does not pass on that speed. Real sweeps, smallest there
are: the baseline sweep (its runs and its canary) held to a quarter of a core by a cgroup CPU quota, the
candidate sweep of a slowed workload (25 % more real work per step, --slowdown) with the machine to
itself. The candidate measures faster, and so does its canary: the gate says how large a slowdown
that could hide and exits 4, never 0 (it passed before: ratio 1.91, canary +143 to +397 %). About
two minutes here, on a shared machine: two sweeps of two local runs each, with the canary at their
start and end. It holds the machine alone: beside the eight-rank run or the eight hanging runs of
tests/test_faults.py, the candidate would get less than the baseline's quarter of a core."""

import json
import os
import subprocess
import sys

import pytest
from chance import verdict as holds
from conftest import cpu_environment, ddpbench

pytestmark = [pytest.mark.launches, pytest.mark.alone]

CPU_CGROUP = "/sys/fs/cgroup/cpu"
SWEEP = ["sweep", "--suite", "smoke", "--workloads", "mlp", "--strategies", "local", "--device", "cpu"]
SWEEP += ["--max-nproc", "1", "--threads-per-rank", "1", "--repeat", "2", "--no-profile"]


@pytest.fixture
def quarter_of_a_core():
    """A cgroup with a quota of a quarter of a core, in 10 ms periods (as tests/test_probe_runs.py
    makes one); removed afterwards."""
    if not os.path.isdir(CPU_CGROUP) or not os.access(CPU_CGROUP, os.W_OK):
        if os.environ.get("DDPBENCH_REQUIRE_CGROUP"):
            pytest.fail(
                f"DDPBENCH_REQUIRE_CGROUP is set but the cgroup v1 cpu controller at {CPU_CGROUP} is not writable"
            )
        pytest.skip(f"needs the cgroup v1 cpu controller writable at {CPU_CGROUP} (root)")
    group = os.path.join(CPU_CGROUP, f"ddpbench-faster-{os.getpid()}")
    os.mkdir(group)
    try:
        for name, value in (("cpu.cfs_period_us", "10000"), ("cpu.cfs_quota_us", "2500")):
            with open(os.path.join(group, name), "w") as handle:
                handle.write(value)
        yield group
    finally:
        os.rmdir(group)


def sweep(out, sweep_id: str, *extra: str, group: str | None = None) -> str:
    command = [sys.executable, "-m", "ddpbench", *SWEEP, "--out", str(out), "--sweep-id", sweep_id, *extra]
    if group is not None:
        # The shell joins the group, then becomes ddpbench: every process it starts stays in it.
        command = ["sh", "-c", f'echo $$ > {group}/cgroup.procs && exec "$@"', "sh", *command]
    done = subprocess.run(
        command, cwd=out, capture_output=True, text=True, timeout=600, env=cpu_environment(DDPBENCH_CANARY="on")
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    return str(out / sweep_id)


def test_a_slowed_workload_on_a_faster_machine_does_not_pass(tmp_path, quarter_of_a_core):
    baseline = sweep(tmp_path, "base", group=quarter_of_a_core)
    candidate = sweep(tmp_path, "cand", "--slowdown", "0.25")
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
    # A quarter of a core against a whole one: the slowed candidate measures no slower than the
    # threshold (the held-out workload measured 1.085 times faster); without the rule it passed.
    hidden = verdict["hidden_slowdown"]["slowdown"]
    holds(
        {c["verdict"] for c in verdict["comparisons"]} <= {"pass", "improvement"}
        and done.returncode == 4
        and "faster machine: the candidate's canary ran" in done.stdout
        and hidden > 0.25,  # a quarter of a core hides more than the planted 25 %
        rate=1e-4,
        basis="a quarter of a core against a whole one (canary +143 to +397 %) hides the planted 25 %",
        what=done.stdout + done.stderr + str(verdict["hidden_slowdown"]),
    )
