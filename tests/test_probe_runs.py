"""A `local` run made slow on purpose, for real: its process (and the workers it starts) in a cgroup
whose CPU quota is a quarter of a core, in 10 ms periods, with no other process on the machine. The sweep is
what `--workloads mlp --strategies local,ddp --repeat 1` plans on 2 cores (a local run and a 2-rank
DDP run, one thread per process): the speed check names the slow process in the table and in explain,
whatever else the sweep holds, and the check says the reference process ran slower, while the
in-process efficiency, measured inside the DDP run's own processes, owes nothing to it."""

import json
import os
import subprocess
import sys

import pytest
from chance import verdict
from conftest import cpu_environment, ddpbench

# make test-all only: holds the machine alone about 25 s; make test runs the probes in every sweep
pytestmark = [
    pytest.mark.launches,
    pytest.mark.alone,
    pytest.mark.test_all,
]

CPU_CGROUP = "/sys/fs/cgroup/cpu"
"""The cgroup v1 cpu controller (a quota per group: cfs_quota_us of every cfs_period_us)."""
WORKLOAD = "mlp"
STEPS, WARMUP = 40, 8


def cannot(reason: str) -> None:
    if os.environ.get("DDPBENCH_REQUIRE_CGROUP"):
        pytest.fail(f"DDPBENCH_REQUIRE_CGROUP is set but {reason}")
    pytest.skip(reason)


QUARTER = (
    "the speed check compares one process's probe with the median and spread of the sweep's other processes "
    "(two here, two readings each), not a mean over samples: no t gives its chance. A quarter of a core slows "
    "the reference about 4x against the check's 1.5x"
)
GAP = (
    "E(N) divides the throughputs of two processes, one run each, and the spread that matters between them is "
    "between processes, which one run a side does not show. The reference held to a quarter of a core moves E(N) "
    "about 4x, hundreds of points, against this CPU's 8-17 % between runs (ddpbench/gate/stats.py, PRIOR_NOISE)"
)


@pytest.fixture(scope="module")
def quarter_of_a_core():
    """A cgroup with a quota of a quarter of a core; removed afterwards (its processes have ended).

    A quarter, not half: on the 2-core Intel VM a local run held to half a core read its matrix
    products only 1.39x slower than the DDP run's two processes (which share the cores with each
    other), under the speed check's 1.5x, and was not named (2026-12-06, a full `make test`). A
    quarter plants about 4x, well beyond 1.5x however much the DDP processes are slowed.

    In 10 ms periods, not Linux's default 100 ms: a probe reading takes 50-70 ms, less than one
    default period, so under a 100 ms quota its one pause of ~50 ms lands in one kind of work or
    in neither (here, one such process read its memory copy 3x slow and its matrix products at
    full speed; CI once read the pair too close to the others to flag). In 10 ms periods every
    kind is held to its quota alike (at half a core both read about 2x slow on AMD EPYC)."""
    if not os.path.isdir(CPU_CGROUP) or not os.access(CPU_CGROUP, os.W_OK):
        cannot(f"needs the cgroup v1 cpu controller writable at {CPU_CGROUP} (root)")
    group = os.path.join(CPU_CGROUP, f"ddpbench-probe-{os.getpid()}")
    try:
        os.mkdir(group)
        with open(os.path.join(group, "cpu.cfs_period_us"), "w") as handle:
            handle.write("10000")
        with open(os.path.join(group, "cpu.cfs_quota_us"), "w") as handle:
            handle.write("2500")
    except OSError as exc:
        cannot(f"cannot make a cgroup with a CPU quota: {exc}")
    try:
        yield group
    finally:
        os.rmdir(group)


def launch(out, strategy: str, run_id: str, group: str | None = None, nproc: int = 1) -> None:
    command = [
        sys.executable,
        "-m",
        "ddpbench",
        "run",
        "--workload",
        WORKLOAD,
        "--strategy",
        strategy,
        "--nproc",
        str(nproc),
        "--threads-per-rank",
        "1",
        "--steps",
        str(STEPS),
        "--warmup",
        str(WARMUP),
        "--out",
        str(out),
        "--run-id",
        run_id,
    ]
    if group is not None:
        # The shell joins the group, then becomes ddpbench: every process it starts stays in it.
        command = ["sh", "-c", f'echo $$ > {group}/cgroup.procs && exec "$@"', "sh", *command]
    done = subprocess.run(command, cwd=out, capture_output=True, text=True, timeout=300, env=cpu_environment())
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]


@pytest.fixture(scope="module")
def sweep(tmp_path_factory, quarter_of_a_core):
    out = tmp_path_factory.mktemp("slow-local")
    launch(out, "local", "local", group=quarter_of_a_core)
    launch(out, "ddp", "ddp", nproc=2)
    return out


def probe_speeds(folder) -> str:
    """Each run's probe speed per kind of work, for a failure's message."""
    from ddpbench.analysis.probes import run_speed
    from ddpbench.records.store import read_records

    records, _ = read_records(str(folder))
    return "\n" + "\n".join(f"{record.run_id}: {run_speed(record)}" for _, record in records)


def test_the_slow_local_process_is_named_and_the_in_process_efficiency_owes_it_nothing(sweep, tmp_path):
    table = ddpbench("table", str(sweep))
    assert table.returncode == 0, table.stderr
    named = [line for line in table.stdout.splitlines() if line.startswith("!! the local run of mlp's process ran")]
    verdict(
        len(named) == 1 and "slower on the speed check" in named[0],
        rate=1e-4,
        unreachable=QUARTER,
        what=table.stdout + probe_speeds(sweep),
    )
    # not chance: the flag raised above, said in the table's words
    assert "its X(1) is the machine's, not the workload's" in named[0]
    explained = ddpbench("explain", str(sweep), "--json-file", str(tmp_path / "why.json"))
    assert explained.returncode == 0, explained.stderr
    # not chance: explain reads the same records and prints the one flag the table printed
    assert named[0] in explained.stdout, explained.stdout
    (ddp,) = json.load(open(tmp_path / "why.json"))["configurations"]
    assert ddp["machine"] == [named[0][3:]]
    # E(N) divides by the slowed process; the in-process efficiency does not: E(N) lies well above it,
    # and the check names the reference process.
    gap = ddp["check"]["efficiency_minus_in_process_points"]
    verdict(gap["value"] > 0, rate=1e-4, unreachable=GAP, what=f"{gap}\n{explained.stdout}")
    # not chance: explain says why wherever E(N) lies above the in-process figure, the verdict above
    assert "the reference process ran slower than one rank computing alone" in explained.stdout, explained.stdout
