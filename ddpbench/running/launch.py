"""Start one run: torchrun for `ddp`, a plain process for `local`. No torch imported here.

The launcher resolves what `auto` means on this machine, checks the output folder, starts the
processes, and makes sure a record exists afterwards: the worker's own, or a `failed` one with
the exit code and the end of the error output, so a failing run is never silently lost.

What the processes print (torchrun, the profiler, the user's workload) goes to the run's log
folder; the terminal gets it only with `verbose`, so a healthy run shows ddpbench's own lines.
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from datetime import datetime

import msgspec

from ddpbench.config.spec import RunSpec, SpecError, check_launchable, resolve_device, threads_per_process
from ddpbench.config.workloads import check_workload_name, short_workload_name
from ddpbench.records.schema import Launch, OomAttempt, Oversubscribed, RunError
from ddpbench.records.store import load_record, new_record, record_path, write_record
from ddpbench.running import slurm
from ddpbench.running.diagnose import diagnose, rendezvous_failed
from ddpbench.running.environment import host_facts, usable_cores, visible_gpu_count
from ddpbench.running.heartbeats import HANG_DUMPS_FOLDER, HEARTBEAT_ENV, read_heartbeats
from ddpbench.running.progress import RunProgress

ERROR_TAIL_LINES = 40


def resolve(spec: RunSpec, gpu_count: int | None = None, cores: int | None = None) -> RunSpec:
    """Turn `auto` and defaults into concrete choices for this machine, or raise SpecError."""
    check_workload_name(spec.workload)
    check_launchable(spec)
    spec = spec.replace(run_id=spec.run_id or make_run_id(spec))
    if spec.launcher == "slurm":  # the allocation's nodes, not this one, say what a node has
        node_gpus, node_cores, rendezvous = slurm.placement(spec)
        gpu_count = node_gpus if gpu_count is None else gpu_count
        cores = node_cores if cores is None else cores
        spec = spec.replace(**rendezvous)
    gpu_count = visible_gpu_count() if gpu_count is None else gpu_count
    cores = usable_cores() if cores is None else cores
    device = resolve_device(spec.device, gpu_count)
    if device == "cuda" and spec.nproc > gpu_count:
        raise SpecError(
            f"nproc {spec.nproc} needs {spec.nproc} GPUs per node with device cuda; " f"this machine has {gpu_count}"
        )
    threads = spec.threads_per_rank or threads_per_process(spec.strategy, spec.nproc, cores, spec.nproc)
    changes = {
        "device": device,
        "size": spec.size or ("full" if device == "cuda" else "tiny"),
        "threads_per_rank": threads,
    }
    return spec.replace(**changes)  # RunSpec re-validates, e.g. fp16 once device is cpu


def oversubscription(spec: RunSpec, cores: int | None = None) -> dict | None:
    """The figures when a resolved CPU run asks for more threads than this node has usable cores
    (None otherwise): its ranks then time-share cores, and its throughput describes that, not
    scaling. A GPU run cannot get here: `resolve` refuses more processes than GPUs."""
    if spec.device != "cpu":
        return None
    cores = usable_cores() if cores is None else cores
    processes = spec.nproc if spec.strategy == "ddp" else 1  # dp and local: one process
    threads = processes * spec.threads_per_rank
    if threads <= cores:
        return None
    return {
        "device": "cpu",
        "processes": processes,
        "threads_per_process": spec.threads_per_rank,
        "threads": threads,
        "usable_cores": cores,
    }


def oversubscription_warning(figures: dict) -> str:
    return (
        f"warning: oversubscribed: {figures['processes']} process{'es' if figures['processes'] != 1 else ''} x "
        f"{figures['threads_per_process']} thread{'s' if figures['threads_per_process'] != 1 else ''} = "
        f"{figures['threads']} threads on {figures['usable_cores']} usable cores; ranks will time-share cores, "
        "so throughput and efficiency describe time-sharing, not scaling (the record says so)"
    )


def make_run_id(spec: RunSpec) -> str:
    workload = short_workload_name(spec.workload)
    stamp = datetime.now().strftime("%Y%m%dT%H%M%S")
    return f"{workload}-{spec.strategy}-n{spec.world_size}-{stamp}-{secrets.token_hex(2)}"


MIN_FREE_BYTES = 200 * 1024 * 1024  # records are small, but traces and logs are not


def check_output_folder(out_dir: str) -> None:
    """Fail before launching if records could not be written there, or the disk is nearly full."""
    runs = os.path.join(out_dir, "runs")
    try:
        os.makedirs(runs, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=runs, prefix=".write-test-"):
            pass
    except OSError as exc:
        raise SpecError(f"output folder {out_dir!r} is not writable: {exc.strerror or exc}") from None
    free = shutil.disk_usage(runs).free
    if free < MIN_FREE_BYTES:
        raise SpecError(
            f"output folder {out_dir!r} has only {free / 2**20:.0f} MiB free; "
            f"ddpbench needs at least {MIN_FREE_BYTES / 2**20:.0f} MiB for records, logs and traces"
        )


def worker_module_args(spec: RunSpec) -> list[str]:
    return ["-m", "ddpbench.worker", "--spec-json", spec.to_json()]


def command_for(spec: RunSpec, log_dir: str | None = None) -> list[str]:
    if spec.launcher == "slurm":  # the same command on every node of the run, started by srun
        return slurm.srun_command(spec) + _command_on_node(spec, log_dir)
    return _command_on_node(spec, log_dir)


def _command_on_node(spec: RunSpec, log_dir: str | None) -> list[str]:
    if spec.strategy != "ddp":
        return [sys.executable, *worker_module_args(spec)]
    command = [sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={spec.nproc}", "--max-restarts=0"]
    if log_dir:
        # Per-rank stdout/stderr files (and @record error files), still shown on the console.
        command += [f"--log-dir={log_dir}", "--tee=3"]
    if spec.rdzv_endpoint:
        # c10d gives agents their node ranks itself; srun starts the same command on every node.
        node_rank = [] if spec.launcher == "slurm" else [f"--node-rank={spec.node_rank}"]
        command += [
            f"--nnodes={spec.nnodes}",
            *node_rank,
            "--rdzv-backend=c10d",
            f"--rdzv-endpoint={spec.rdzv_endpoint}",
            f"--rdzv-id={spec.rdzv_id}",
        ]
    elif spec.rdzv_port:
        # One node on a chosen port: the same c10d rendezvous, on localhost only.
        command += [
            "--nnodes=1",
            "--rdzv-backend=c10d",
            f"--rdzv-endpoint=localhost:{spec.rdzv_port}",
            f"--rdzv-id={spec.run_id}",
        ]
    else:
        # Standalone: a c10d rendezvous on localhost with a free port picked by torchrun.
        command += ["--standalone"]
    return command + worker_module_args(spec)


def port_is_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        try:
            probe.bind(("localhost", port))
        except OSError:
            return False
    return True


# What torchrun tells its workers about their job. A ddpbench run started from inside such a job
# (a torchrun or SLURM script) inherits them; `local` and `dp` are one process of their own.
LAUNCHER_VARIABLES = (
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",
    "GROUP_RANK",
    "GROUP_WORLD_SIZE",
    "ROLE_RANK",
    "ROLE_WORLD_SIZE",
    "ROLE_NAME",
    "TORCHELASTIC_RUN_ID",
    "TORCHELASTIC_RESTART_COUNT",
    "TORCHELASTIC_MAX_RESTARTS",
    "TORCHELASTIC_ERROR_FILE",
)


# Kineto (the profiler's C++ side) logs through its own levels: ... ERROR 4, USDT 5 (its
# profiler_start/stop markers). 6 silences it, and on CPU it has nothing else to say: its one
# ERROR there is "gpuGetDeviceCount failed", i.e. that the machine has no GPU.
KINETO_LOG_LEVEL = "KINETO_LOG_LEVEL"
KINETO_QUIET_ON_CPU = "6"


def child_environment(spec: RunSpec, heartbeat_dir: str, verbose: bool = False) -> dict[str, str]:
    env = dict(os.environ)
    if spec.strategy != "ddp":
        for name in LAUNCHER_VARIABLES:
            env.pop(name, None)
    # torchrun would otherwise force OMP_NUM_THREADS=1; the worker also calls set_num_threads.
    env["OMP_NUM_THREADS"] = str(spec.threads_per_rank)
    # The workers write into a pipe, so they cannot see that a person is watching: tell them.
    # Without `verbose` nobody sees their output, and the launcher draws the bar from heartbeats.
    env["DDPBENCH_PROGRESS"] = "1" if verbose and sys.stderr.isatty() else "0"
    env[HEARTBEAT_ENV] = heartbeat_dir
    # Quiet the profiler at its source rather than filtering its lines; a level the user set wins,
    # and `verbose` shows everything.
    if spec.device == "cpu" and not verbose and KINETO_LOG_LEVEL not in env:
        env[KINETO_LOG_LEVEL] = KINETO_QUIET_ON_CPU
    # NCCL's own Flight Recorder dump when its watchdog times a collective out, beside ours;
    # a user's own settings win.
    dumps = os.path.join(os.path.dirname(os.path.abspath(heartbeat_dir)), HANG_DUMPS_FOLDER)
    env.setdefault("TORCH_NCCL_DUMP_ON_TIMEOUT", "1")
    env.setdefault("TORCH_NCCL_DEBUG_INFO_TEMP_FILE", os.path.join(dumps, "nccl_trace_rank_"))
    env.setdefault("TORCH_FR_BUFFER_SIZE", "2000")
    return env


@dataclass
class LaunchResult:
    spec: RunSpec
    exit_code: int
    wall_s: float
    record_path: str | None
    """The record on this machine, or None when global rank 0 ran on another node."""
    message: str | None = None
    """What went wrong on a node that writes no record (node_rank > 0)."""


def run_log_dir(spec: RunSpec) -> str:
    """`<out>/logs/<run_id>/`, and `node-<R>/` inside it for the other nodes of a multi-node run:
    on a file system the nodes share, each node clears and writes only its own logs."""
    log_dir = os.path.join(spec.out_dir, "logs", spec.run_id)
    return os.path.join(log_dir, f"node-{spec.node_rank}") if spec.node_rank else log_dir


class OutputTee:
    """Copy the children's output to a log file, keep its last lines, and with `echo` (--verbose)
    pass it on as it comes (progress bars redraw with \\r and no newline, so it is read in
    chunks, not lines)."""

    def __init__(self, stream, echo: bool, log_path: str):
        self.stream = stream
        self.echo = echo
        self.log = open(log_path, "wb")
        self.text = ""
        self.thread = threading.Thread(target=self._pump, daemon=True)
        self.thread.start()

    def _pump(self) -> None:
        fd = self.stream.fileno()
        while chunk := os.read(fd, 65536):
            if self.echo:
                sys.stderr.buffer.write(chunk)
                sys.stderr.flush()
            self.log.write(chunk)
            self.text = (self.text + chunk.decode("utf-8", "replace"))[-ERROR_TAIL_LINES * 400 :]
        self.log.close()

    def tail(self, timeout_s: float = 5.0) -> list[str]:
        self.thread.join(timeout=timeout_s)
        # A progress bar line holds many \r-separated redraws: keep only the last of each.
        lines = [line.split("\r")[-1] for line in self.text.splitlines()]
        return [line for line in lines if line.strip()][-ERROR_TAIL_LINES:]


def end_process_group(process: subprocess.Popen, grace_s: float = 15.0) -> None:
    """SIGTERM the whole process group (torchrun's agent forwards it to every rank), then
    SIGKILL whatever is left after the grace period: no orphan keeps a core or a GPU."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        try:
            process.wait(timeout=grace_s)
            return
        except subprocess.TimeoutExpired:
            continue


RENDEZVOUS_ATTEMPTS = 3


def _run_processes(
    spec: RunSpec, log_dir: str, timeout_s: float | None, verbose: bool, show_progress: bool
) -> tuple[list, int, bool, list]:
    """Start the run's processes and wait for them. Returns (command, exit code, timed out,
    output tail); ends the whole group on timeout or on any exception (Ctrl-C, SIGTERM)."""
    # A rerun (resume, OOM back-off, rendezvous retry) starts from empty per-rank folders. Only
    # this node's: other nodes' logs are in their own node-<R>/ folders (see run_log_dir).
    for stale in ("ranks", "heartbeats", HANG_DUMPS_FOLDER):
        shutil.rmtree(os.path.join(log_dir, stale), ignore_errors=True)
    command = command_for(spec, log_dir=os.path.join(log_dir, "ranks"))
    heartbeat_dir = os.path.join(log_dir, "heartbeats")
    # A session of its own, so the run can be ended as a group (and Ctrl-C reaches us first).
    process = subprocess.Popen(
        command,
        env=child_environment(spec, heartbeat_dir, verbose),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    output = OutputTee(process.stdout, verbose, os.path.join(log_dir, "output.log"))
    # Verbose output already holds the worker's own bar; a second one would fight it.
    progress = RunProgress(spec, heartbeat_dir, enabled=show_progress and not verbose and sys.stderr.isatty())
    timed_out = False
    try:
        exit_code = process.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        end_process_group(process)
        exit_code, timed_out = process.returncode, True
    except BaseException:
        end_process_group(process)
        if spec.launcher == "slurm":
            slurm.cancel_step(spec.run_id)
        raise
    finally:
        progress.close()
    kill_leftovers(process)
    if timed_out and spec.launcher == "slurm":
        slurm.cancel_step(spec.run_id)
    return command, exit_code, timed_out, output.tail()


def kill_leftovers(process: subprocess.Popen) -> None:
    """torchrun ends its workers when one fails, but a worker stuck in native code may survive its
    agent: once the group's leader is gone, anything left in the group is an orphan."""
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def launch(
    spec: RunSpec, timeout_s: float | None = None, verbose: bool = False, show_progress: bool = True
) -> LaunchResult:
    """Run a resolved spec to completion; always leaves a record on the node of rank 0.

    Output goes to `<out>/logs/<run_id>/` (torchrun adds per-rank files for ddp) and, with
    `verbose`, to this terminal as it comes; otherwise a terminal gets a progress bar drawn from
    the heartbeats (`show_progress`). After `timeout_s` the run is ended and recorded as
    `timeout`. A rendezvous that fails (port taken, store unreachable) is retried on a fresh port.
    """
    check_output_folder(spec.out_dir)
    log_dir = run_log_dir(spec)
    os.makedirs(log_dir, exist_ok=True)
    path = record_path(spec.out_dir, spec.run_id)
    notes = []
    if spec.strategy == "ddp" and spec.rdzv_port and not spec.rdzv_endpoint and not port_is_free(spec.rdzv_port):
        notes.append(f"port {spec.rdzv_port} was taken; torchrun picked a free one")
        spec = spec.replace(rdzv_port=None)
    started = time.perf_counter()
    for attempt in range(1, RENDEZVOUS_ATTEMPTS + 1):
        command, exit_code, timed_out, tail = _run_processes(spec, log_dir, timeout_s, verbose, show_progress)
        rendezvous_broke = (
            exit_code != 0
            and not timed_out
            and not os.path.exists(path)
            and spec.strategy == "ddp"
            and rendezvous_failed(log_dir)
        )
        # Another node's endpoint cannot be moved (unless ddpbench chose it: slurm): only a
        # single-node rendezvous is retried.
        if not rendezvous_broke or (spec.rdzv_endpoint and spec.launcher != "slurm"):
            break
        notes.append(f"attempt {attempt}: the rendezvous failed; retrying on a fresh port")
        # standalone: torchrun picks a free port
        spec = slurm.fresh_rendezvous(spec) if spec.launcher == "slurm" else spec.replace(rdzv_port=None)
    wall_s = time.perf_counter() - started

    oversubscribed = oversubscription(spec)
    launch_info = Launch(
        command=command,
        wall_s=wall_s,
        exit_code=exit_code,
        node_rank=spec.node_rank,
        timeout_s=timeout_s,
        logs=log_dir,
        attempts=attempt,
        notes=notes,
    )
    diagnosis = None
    if exit_code != 0 or timed_out:
        diagnosis = diagnose(exit_code, timed_out, timeout_s, log_dir, spec.node_rank, spec.nproc, tail)
    if spec.node_rank != 0:
        # Records belong to the node of global rank 0; on a shared file system another node
        # rewriting the same record would race with it. This node's story stays in its logs.
        message = None if diagnosis is None else f"{diagnosis[0]}: {diagnosis[1]['message']}"
        return LaunchResult(spec, 1 if timed_out else exit_code, wall_s, None, message)
    if os.path.exists(path):
        record = load_record(path)
        record.launch = launch_info
        record.oversubscribed = msgspec.convert(oversubscribed, Oversubscribed | None)
        if diagnosis and record.error is None:
            # The worker writes its record as soon as the timed steps are measured; a failure in
            # a later phase (profiling, no_sync) keeps those measurements and says what broke.
            status, error = diagnosis
            error["message"] = f"measurements complete, then the run failed ({status}): {error['message']}"
            record.error = msgspec.convert(error, RunError)
        write_record(record, spec.out_dir)
    else:
        status, error = diagnosis or (
            "failed",
            {"message": "the run exited cleanly but wrote no record", "exit_code": exit_code, "output_tail": tail},
        )
        if rendezvous_broke:
            tries = "once" if attempt == 1 else f"{attempt} times"
            error["message"] = (
                f"the rendezvous failed {tries} (port in use or store unreachable): " f"{error['message']}"
            )
        record = new_record(spec, status, env=host_facts())
        record.error = msgspec.convert(error, RunError)
        record.launch = launch_info
        record.oversubscribed = msgspec.convert(oversubscribed, Oversubscribed | None)
        write_record(record, spec.out_dir)
    return LaunchResult(spec, exit_code, wall_s, path)


def launch_with_oom_backoff(
    spec: RunSpec,
    timeout_s: float | None = None,
    verbose: bool = False,
    oom_backoff: bool = False,
    show_progress: bool = True,
) -> LaunchResult:
    """Launch; with `oom_backoff`, rerun a run that ran out of memory at half the batch (down to
    1), and record the attempts that ran out of memory in the final record's `oom_backoff`."""
    result = launch(spec, timeout_s, verbose, show_progress)
    attempts = []
    while oom_backoff and result.record_path:
        record = load_record(result.record_path)
        batch = record.spec.batch_size or last_batch_size(spec)
        if record.status != "oom" or not batch or batch <= 1:
            break
        attempts.append(OomAttempt(batch_size=batch, status="oom", message=record.error.message))
        spec = spec.replace(batch_size=batch // 2)
        result = launch(spec, timeout_s, verbose, show_progress)
    if attempts and result.record_path:
        record = load_record(result.record_path)
        record.oom_backoff = attempts
        write_record(record, spec.out_dir)
    return result


def last_batch_size(spec: RunSpec) -> int | None:
    """The batch the workers resolved (the workload's default when none was given), from their heartbeats."""
    beats = read_heartbeats(os.path.join(spec.out_dir, "logs", spec.run_id, "heartbeats"))
    return next((beat.get("batch_size") for beat in beats.values() if beat.get("batch_size")), None)
