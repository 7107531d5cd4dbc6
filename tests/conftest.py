import contextlib
import io
import os
import re
import shutil
import signal
import subprocess
import sys
import traceback
import warnings

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURES = os.path.join(REPO, "tests", "fixtures")


# Tests meant for CPU run with the GPUs hidden: on a GPU machine `--device auto` would otherwise
# pick CUDA (and every `--nproc 2` run would be refused on a one-GPU box).
HIDE_GPUS = {"CUDA_VISIBLE_DEVICES": ""}
# The machine canary costs each sweep a few seconds at its start and end; tests/test_canary.py
# measures it, the suite's other sweeps leave it out.
os.environ.setdefault("DDPBENCH_CANARY", "off")
# Tests run beside each other: a busy machine is what they expect (tests/test_busy_machine.py turns it on).
os.environ.setdefault("DDPBENCH_BUSY_WARNING", "off")


def cpu_environment(**changes: str) -> dict:
    """os.environ with the GPUs hidden, for subprocesses started by CPU tests."""
    return {**os.environ, **HIDE_GPUS, **changes}


def command_environment(env: dict | None, base: dict | None, gpus: bool) -> dict:
    """The environment a command runs in: `base` (by default this one, GPUs hidden unless `gpus`)
    with the changes in `env`."""
    if base is None:
        base = dict(os.environ) if gpus else cpu_environment()
    return {**base, **(env or {})}


def ddpbench_process(
    *args: str,
    timeout: float = 240,
    env: dict | None = None,
    cwd=REPO,
    gpus: bool = False,
    base: dict | None = None,
) -> subprocess.CompletedProcess:
    """Run the real command line in a fresh process, as a user would: for tests whose point needs
    one (what reaches the terminal from the processes a run starts, signals, the interpreter's
    exit, what a fresh interpreter imports). Commands that write to the working folder (a sweep's
    report goes to ./reports/) get a temporary `cwd` from their test. GPUs stay hidden unless
    `gpus` (the CUDA tests); `base` replaces this process's environment (a SLURM cluster's)."""
    return subprocess.run(
        [sys.executable, "-m", "ddpbench", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=command_environment(env, base, gpus),
    )


def _show_warning(message, category, filename, lineno, file=None, line=None):
    # As a fresh interpreter shows a warning: on stderr (pytest would otherwise collect it).
    sys.stderr.write(warnings.formatwarning(message, category, filename, lineno, line))


def ddpbench(
    *args: str,
    timeout: float = 240,
    env: dict | None = None,
    cwd=REPO,
    gpus: bool = False,
    base: dict | None = None,
) -> subprocess.CompletedProcess:
    """The command line run in this process (`ddpbench.cli.main`), for tests that read only its
    output, exit code and files: the same result as `ddpbench_process` without starting an
    interpreter and importing the libraries again for each command. The environment (`env`,
    `base`, `gpus` as there) and working folder apply for the call and are put back after it; an
    exit through SystemExit or an uncaught exception ends as it would in a process (its code, or
    the traceback on stderr and code 1). `timeout` is accepted for the same calls and not enforced:
    a command started in this process cannot be ended from outside it."""
    from ddpbench.cli import main

    stdout, stderr = (io.TextIOWrapper(io.BytesIO(), encoding="utf-8", write_through=True) for _ in range(2))
    saved_environ, saved_cwd = dict(os.environ), os.getcwd()
    saved_sigterm = signal.getsignal(signal.SIGTERM)  # main() installs its own handler
    # Made before the clear: it starts from this process's environment, as ddpbench_process's does
    # (made after it, every command ran with GPUs hidden and nothing else: no PATH, no PYTHONPATH).
    environment = command_environment(env, base, gpus)
    os.environ.clear()
    os.environ.update(environment)
    try:
        os.chdir(cwd)
        with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr), warnings.catch_warnings():
            warnings.resetwarnings()
            warnings.simplefilter("default")
            for category in (DeprecationWarning, PendingDeprecationWarning, ImportWarning, ResourceWarning):
                warnings.simplefilter("ignore", category)
            warnings.showwarning = _show_warning
            try:
                code = main(list(args))
            except SystemExit as exc:
                if exc.code is None or isinstance(exc.code, int):
                    code = exc.code or 0
                else:
                    print(exc.code, file=sys.stderr)
                    code = 1
            except Exception:
                traceback.print_exc()
                code = 1
    finally:
        os.chdir(saved_cwd)
        os.environ.clear()
        os.environ.update(saved_environ)
        signal.signal(signal.SIGTERM, saved_sigterm)
    return subprocess.CompletedProcess(
        ["ddpbench", *args], code or 0, stdout.buffer.getvalue().decode(), stderr.buffer.getvalue().decode()
    )


# Under `make test` the files are shared out to two pytest workers (pytest-xdist, whole files).
# Most launches leave a core idle much of the time (torchrun's start, one-process runs, a hang
# waiting out its timeout), but some files measure timing that a neighbour would blur. Each test,
# from its setup (fixtures of wider scope are made there) to its teardown, holds locks on two
# files, `machine` and `launches`, as its markers say:
# - `alone` (two runs compared, a process held to part of a core): `machine` exclusive, nothing
#   runs beside it;
# - `one_core` (one process at a time, timed): `launches` exclusive, so only tests not marked
#   `launches` run beside it, on the other core: in the pytest process, now and then with short
#   subprocesses (a refused command line, trace files read in two processes for a moment, two
#   pods for two seconds in test_trainjob);
# - `launches`: both shared; any other test: `machine` shared.
# A turnstile taken first keeps a waiting exclusive test from being overtaken by the other
# worker's next shared one. The wait is outside the test's phases, so --durations does not count it.
@contextlib.contextmanager
def _machine_share(item):
    # This pytest's own xdist worker id, not the environment's: a pytest a test starts (gpu-check's
    # CUDA tests) inherits PYTEST_XDIST_TESTRUNUID, and would wait for the lock its parent holds.
    run = getattr(item.config, "workerinput", {}).get("testrunuid")
    if not run:  # one pytest process: the tests run one after another anyway
        yield
        return
    import fcntl
    import tempfile

    alone, one_core = (item.get_closest_marker(name) is not None for name in ("alone", "one_core"))
    launches = item.get_closest_marker("launches") is not None
    folder = os.path.join(tempfile.gettempdir(), f"ddpbench-tests-{run}")
    os.makedirs(folder, exist_ok=True)
    with contextlib.ExitStack() as held:
        turnstile, machine, launching = (
            held.enter_context(open(os.path.join(folder, name), "a")) for name in ("turnstile", "machine", "launches")
        )
        fcntl.flock(turnstile, fcntl.LOCK_EX)
        try:
            fcntl.flock(machine, fcntl.LOCK_EX if alone else fcntl.LOCK_SH)
            held.callback(fcntl.flock, machine, fcntl.LOCK_UN)
            if one_core or launches:
                fcntl.flock(launching, fcntl.LOCK_EX if one_core else fcntl.LOCK_SH)
                held.callback(fcntl.flock, launching, fcntl.LOCK_UN)
        finally:
            fcntl.flock(turnstile, fcntl.LOCK_UN)
        yield


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item, nextitem):
    with _machine_share(item):
        return (yield)


# The order the two workers take whole files in.
# - First the `one_core` confirmation rounds (67-94 s in five runs); the other worker runs files
#   with no `launches` test beside them (about 70 s of them under `make test-fast` at 8e6acc3)
#   instead of waiting. Not test_cross_rank or test_trace_job: most of their time is trace files
#   read in two processes.
# - The third file is the one the first worker takes next: xdist hands a worker its next file as
#   soon as two of its tests are left, seconds into the confirmation. It is an `alone` file: an
#   in-process file there waited for the other worker's `alone` tests, its worker idle (62 s).
# - Then the other `alone` files: each holds the machine to itself, and one that waits for the
#   other worker's current test leaves both idle as long as that test runs (a minute for the hanging
#   runs); together they only wait for each other. The other `one_core` file comes after them:
#   before them, it waited them out (58 s). test_busy_machine reads the whole machine's load: it
#   comes before any hanging or failing run, whose processes end late (a run after them read 0.27
#   of 2 cores used by others).
# - Then the files whose tests take longest (worker-seconds under `make test`, measured at 0242eb2
#   on the 2-core machine: test_faults 201, test_script_shapes 110, test_strategies 107,
#   test_script_runs 101, ...), so that neither worker is left finishing a long file alone; xdist's
#   own order (most tests first) put them last.
# `make test` passes --no-loadscope-reorder so that this order holds.
FILE_ORDER = (
    "test_gate_confirm.py",  # one_core: paired rounds, one process at a time, 67-94 s
    "test_gate.py",  # in-process: 13 s under make test-fast
    "test_probe_runs.py",  # alone: a cgroup-slowed local run beside two quiet ones
    # in-process: beside the confirmation rounds (seconds under make test-fast)
    "test_trainjob.py",  # 10
    "test_id_property.py",  # 8
    "test_one_figure.py",  # 8
    "test_gate_power.py",  # 7.4
    "test_report_place.py",  # 6.8
    "test_gate_why.py",  # 4.3
    "test_hangs.py",  # 3.3
    "test_chance.py",  # 3.1
    "test_report_breakdown.py",  # 2.1
    "test_gate_history.py",  # 2.1
    "test_large_reports.py",  # 2.0
    "test_agreement.py",  # 1.9
    "test_projection.py",  # 1.6
    "test_layers.py",  # 1.4
    "test_registry.py",  # 1.4
    "test_faster_machine.py",  # alone: a sweep held to half a core beside a free one: about 30 s
    "test_busy_machine.py",  # alone: reads the machine's load, about 30 s
    "test_overlap_phases.py",  # one_core: one process
    "test_cross_rank_runs.py",  # four real runs, profiled; the shaped pair alone
    "test_faults.py",
    "test_script_shapes.py",
    "test_strategies.py",
    "test_script_runs.py",
    "test_runs_cpu.py",
    "test_two_hosts.py",  # two 2-node jobs between network namespaces: about 40 s
    "test_sweep_cpu.py",
    "test_tune.py",
    "test_slurm.py",
    "test_install.py",  # pip installs beside a torch, two small sweeps: about 1.5 minutes
    "test_bisect.py",
    "test_eight_ranks.py",  # eight ranks time-sharing two cores: about a minute
    "test_gate_ab.py",
    "test_breakdown_runs.py",
    "test_terminal_output.py",
    "test_gate_ci.py",  # the documented CI job and make gate, run as written: about 30 s
    "test_gpu_paths.py",
    "test_comm.py",
    "test_torch_env.py",  # installs a CPU-only torch: about 30 s
    "test_report.py",
)


def pytest_collection_modifyitems(config, items):
    position = {name: index for index, name in enumerate(FILE_ORDER)}
    items.sort(key=lambda item: position.get(item.path.name, len(FILE_ORDER)))  # stable: files keep their order


def cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


requires_cuda = pytest.mark.skipif(
    "not __import__('torch').cuda.is_available()", reason="needs a CUDA GPU; this machine has none"
)


@pytest.fixture
def fixture_path():
    return lambda name: os.path.join(FIXTURES, name)


# Lines that come from torchrun, the profiler (Kineto) or c10's logging, not from ddpbench.
_FOREIGN = re.compile(
    r"^\[(default|rank)\d+\]:|USDT:|^(ERROR|WARNING|INFO):|^[EWI]\d{4} \d\d:\d\d|"
    r"torch\.distributed|gpuGetDeviceCount|ChildFailedError"
)


def foreign_lines(text: str) -> list[str]:
    """The lines of a terminal transcript that ddpbench did not write itself."""
    return [line for line in text.splitlines() if _FOREIGN.search(line)]


def netns_cannot(reason: str) -> None:
    """Skip where a network namespace cannot be made or shaped; where CI says it can
    (DDPBENCH_REQUIRE_NETNS), fail instead, so that no shaped-network case goes unchecked in silence."""
    if os.environ.get("DDPBENCH_REQUIRE_NETNS"):
        pytest.fail(f"DDPBENCH_REQUIRE_NETNS is set but {reason}")
    pytest.skip(reason)


@contextlib.contextmanager
def shaped_loopback(name: str, rate: str):
    """A network namespace whose loopback is up (MTU 9000) and rate-limited by tbf to `rate` (its
    burst must exceed the MTU, or no packet ever leaves); deleted afterwards. Yields its name."""
    if not (shutil.which("ip") and shutil.which("tc")):
        netns_cannot("needs `ip` and `tc` (iproute2) to shape a network namespace's loopback")
    added = subprocess.run(["ip", "netns", "add", name], capture_output=True, text=True)
    if added.returncode != 0:
        netns_cannot(f"`ip netns add` does not work here: {added.stderr.strip()}")
    try:
        for command in (
            ["ip", "link", "set", "lo", "up", "mtu", "9000"],
            ["tc", "qdisc", "add", "dev", "lo", "root", "tbf", "rate", rate, "burst", "200kb", "latency", "50ms"],
        ):
            done = subprocess.run(["ip", "netns", "exec", name, *command], capture_output=True, text=True)
            if done.returncode != 0:
                netns_cannot(f"cannot shape the namespace's loopback ({' '.join(command)}): {done.stderr.strip()}")
        yield name
    finally:
        subprocess.run(["ip", "netns", "delete", name], capture_output=True)
