"""Start one run: torchrun for `ddp`, a plain process for `local`. No torch imported here.

The launcher resolves what `auto` means on this machine, checks the output folder, starts the
processes, and makes sure a record exists afterwards: the worker's own, or a `failed` one with
the exit code and the end of the error output, so a failing run is never silently lost.
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

from ddpbench.running.diagnose import diagnose, read_output, rendezvous_failed
from ddpbench.running.environment import host_facts, usable_cores, visible_gpu_count
from ddpbench.running.heartbeats import HANG_DUMPS_FOLDER, HEARTBEAT_ENV, read_heartbeats
from ddpbench.records.schema import Launch, OomAttempt, RunError
from ddpbench.records.store import load_record, new_record, record_path, write_record
from ddpbench.config.spec import RunSpec, SpecError, resolve_device, threads_per_process
from ddpbench.config.workloads import check_workload_name, short_workload_name

ERROR_TAIL_LINES = 40


def resolve(spec: RunSpec, gpu_count: int | None = None, cores: int | None = None) -> RunSpec:
    """Turn `auto` and defaults into concrete choices for this machine, or raise SpecError."""
    check_workload_name(spec.workload)
    gpu_count = visible_gpu_count() if gpu_count is None else gpu_count
    cores = usable_cores() if cores is None else cores
    device = resolve_device(spec.device, gpu_count)
    if device == "cuda" and spec.nproc > gpu_count:
        raise SpecError(f"nproc {spec.nproc} needs {spec.nproc} GPUs per node with device cuda; "
                        f"this machine has {gpu_count}")
    threads = spec.threads_per_rank or threads_per_process(spec.strategy, spec.nproc, cores, spec.nproc)
    changes = {
        "device": device,
        "size": spec.size or ("full" if device == "cuda" else "tiny"),
        "threads_per_rank": threads,
        "run_id": spec.run_id or make_run_id(spec),
    }
    return spec.replace(**changes)  # RunSpec re-validates, e.g. fp16 once device is cpu


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
        raise SpecError(f"output folder {out_dir!r} has only {free / 2**20:.0f} MiB free; "
                        f"ddpbench needs at least {MIN_FREE_BYTES / 2**20:.0f} MiB for records, logs and traces")


def worker_module_args(spec: RunSpec) -> list[str]:
    return ["-m", "ddpbench.worker", "--spec-json", spec.to_json()]


def command_for(spec: RunSpec, log_dir: str | None = None) -> list[str]:
    if spec.strategy != "ddp":
        return [sys.executable, *worker_module_args(spec)]
    command = [sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={spec.nproc}",
               "--max-restarts=0"]
    if log_dir:
        # Per-rank stdout/stderr files (and @record error files), still shown on the console.
        command += [f"--log-dir={log_dir}", "--tee=3"]
    if spec.rdzv_endpoint:
        command += [f"--nnodes={spec.nnodes}", f"--node-rank={spec.node_rank}", "--rdzv-backend=c10d",
                    f"--rdzv-endpoint={spec.rdzv_endpoint}", f"--rdzv-id={spec.rdzv_id}"]
    elif spec.rdzv_port:
        # One node on a chosen port: the same c10d rendezvous, on localhost only.
        command += ["--nnodes=1", "--rdzv-backend=c10d", f"--rdzv-endpoint=localhost:{spec.rdzv_port}",
                    f"--rdzv-id={spec.run_id}"]
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


def child_environment(spec: RunSpec, heartbeat_dir: str) -> dict[str, str]:
    env = dict(os.environ)
    # torchrun would otherwise force OMP_NUM_THREADS=1; the worker also calls set_num_threads.
    env["OMP_NUM_THREADS"] = str(spec.threads_per_rank)
    # The workers write into a pipe, so they cannot see that a person is watching: tell them.
    env["DDPBENCH_PROGRESS"] = "1" if sys.stderr.isatty() else "0"
    env[HEARTBEAT_ENV] = heartbeat_dir
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


class OutputTee:
    """Pass the children's output on as it comes (progress bars redraw with \\r and no newline,
    so it is read in chunks, not lines), copy it to a log file, and keep its last lines."""

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
            self.text = (self.text + chunk.decode("utf-8", "replace"))[-ERROR_TAIL_LINES * 400:]
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


def _run_processes(spec: RunSpec, log_dir: str, timeout_s: float | None, echo: bool) -> tuple[list, int, bool, list]:
    """Start the run's processes and wait for them. Returns (command, exit code, timed out,
    output tail); ends the whole group on timeout or on any exception (Ctrl-C, SIGTERM)."""
    for stale in ("ranks", "heartbeats", HANG_DUMPS_FOLDER):
        shutil.rmtree(os.path.join(log_dir, stale), ignore_errors=True)
    command = command_for(spec, log_dir=os.path.join(log_dir, "ranks"))
    # A session of its own, so the run can be ended as a group (and Ctrl-C reaches us first).
    process = subprocess.Popen(command, env=child_environment(spec, os.path.join(log_dir, "heartbeats")),
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    output = OutputTee(process.stdout, echo, os.path.join(log_dir, "output.log"))
    timed_out = False
    try:
        exit_code = process.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        end_process_group(process)
        exit_code, timed_out = process.returncode, True
    except BaseException:
        end_process_group(process)
        raise
    kill_leftovers(process)
    return command, exit_code, timed_out, output.tail()


def kill_leftovers(process: subprocess.Popen) -> None:
    """torchrun ends its workers when one fails, but a worker stuck in native code may survive its
    agent: once the group's leader is gone, anything left in the group is an orphan."""
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def launch(spec: RunSpec, timeout_s: float | None = None, echo: bool = True) -> LaunchResult:
    """Run a resolved spec to completion; always leaves a record on the node of rank 0.

    Output goes to `<out>/logs/<run_id>/` (torchrun adds per-rank files for ddp) and, with `echo`,
    to this terminal. After `timeout_s` the run is ended and recorded as `timeout`. A rendezvous
    that fails (port taken, store unreachable) is retried on a fresh port.
    """
    check_output_folder(spec.out_dir)
    log_dir = os.path.join(spec.out_dir, "logs", spec.run_id)
    os.makedirs(log_dir, exist_ok=True)
    path = record_path(spec.out_dir, spec.run_id)
    notes = []
    if spec.strategy == "ddp" and spec.rdzv_port and not spec.rdzv_endpoint and not port_is_free(spec.rdzv_port):
        notes.append(f"port {spec.rdzv_port} was taken; torchrun picked a free one")
        spec = spec.replace(rdzv_port=None)
    started = time.perf_counter()
    for attempt in range(1, RENDEZVOUS_ATTEMPTS + 1):
        command, exit_code, timed_out, tail = _run_processes(spec, log_dir, timeout_s, echo)
        rendezvous_broke = (exit_code != 0 and not timed_out and not os.path.exists(path)
                            and spec.strategy == "ddp"
                            and rendezvous_failed(read_output(os.path.join(log_dir, "output.log"))))
        # Another node's endpoint cannot be moved: only a single-node rendezvous is retried.
        if not rendezvous_broke or spec.rdzv_endpoint:
            break
        notes.append(f"attempt {attempt}: the rendezvous failed; retrying on a fresh port")
        spec = spec.replace(rdzv_port=None)  # standalone: torchrun picks a free port
    wall_s = time.perf_counter() - started

    launch_info = Launch(command=command, wall_s=wall_s, exit_code=exit_code, node_rank=spec.node_rank,
                         timeout_s=timeout_s, logs=log_dir, attempts=attempt, notes=notes)
    diagnosis = None
    if exit_code != 0 or timed_out:
        diagnosis = diagnose(exit_code, timed_out, timeout_s, log_dir, spec.node_rank, spec.nproc, tail)
    if os.path.exists(path):
        record = load_record(path)
        record.launch = launch_info
        if diagnosis and record.error is None:
            # The worker writes its record as soon as the timed steps are measured; a failure in
            # a later phase (profiling, no_sync) keeps those measurements and says what broke.
            status, error = diagnosis
            error["message"] = f"measurements complete, then the run failed ({status}): {error['message']}"
            record.error = msgspec.convert(error, RunError)
        write_record(record, spec.out_dir)
    elif exit_code == 0 and spec.nnodes > 1:
        return LaunchResult(spec, exit_code, wall_s, None)
    else:
        status, error = diagnosis or ("failed", {"message": "the run exited cleanly but wrote no record",
                                                 "exit_code": exit_code, "output_tail": tail})
        if rendezvous_broke:
            tries = "once" if attempt == 1 else f"{attempt} times"
            error["message"] = (f"the rendezvous failed {tries} (port in use or store unreachable): "
                                f"{error['message']}")
        record = new_record(spec, status, env=host_facts())
        record.error = msgspec.convert(error, RunError)
        record.launch = launch_info
        write_record(record, spec.out_dir)
    return LaunchResult(spec, exit_code, wall_s, path)


def launch_with_oom_backoff(spec: RunSpec, timeout_s: float | None = None, echo: bool = True,
                            oom_backoff: bool = False) -> LaunchResult:
    """Launch; with `oom_backoff`, rerun a run that ran out of memory at half the batch (down to
    1), and record the attempts that ran out of memory in the final record's `oom_backoff`."""
    result = launch(spec, timeout_s, echo)
    attempts = []
    while oom_backoff and result.record_path:
        record = load_record(result.record_path)
        batch = record.spec.batch_size or last_batch_size(spec)
        if record.status != "oom" or not batch or batch <= 1:
            break
        attempts.append(OomAttempt(batch_size=batch, status="oom", message=record.error.message))
        spec = spec.replace(batch_size=batch // 2)
        result = launch(spec, timeout_s, echo)
    if attempts and result.record_path:
        record = load_record(result.record_path)
        record.oom_backoff = attempts
        write_record(record, spec.out_dir)
    return result

def last_batch_size(spec: RunSpec) -> int | None:
    """The batch the workers resolved (the workload's default when none was given), from their heartbeats."""
    beats = read_heartbeats(os.path.join(spec.out_dir, "logs", spec.run_id, "heartbeats"))
    return next((beat.get("batch_size") for beat in beats.values() if beat.get("batch_size")), None)
