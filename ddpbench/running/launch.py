"""Start one run: torchrun for `ddp`, a plain process for `local`. No torch imported here.

The launcher takes a resolved spec (`ddpbench.running.resolve`), checks the output folder, starts
the processes (their command and environment: `ddpbench.running.command`), retries a rendezvous
that failed, and makes sure a record exists afterwards: the worker's own, or a `failed` one with
the exit code and the end of the error output, so a failing run is never silently lost. With OOM
back-off, a run that ran out of memory is rerun at half the batch.

What the processes print (torchrun, the profiler, the user's workload) goes to the run's log
folder; the terminal gets it only with `verbose`, so a healthy run shows ddpbench's own lines.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass

import msgspec

from ddpbench.config.channels import HANG_DUMPS_FOLDER
from ddpbench.config.secrets import redact_command, redact_text
from ddpbench.config.spec import RunSpec
from ddpbench.host.facts import host_facts
from ddpbench.records.schema import Launch, OomAttempt, Oversubscribed, RunError
from ddpbench.records.store import load_record, new_record, record_path, write_record
from ddpbench.running import slurm
from ddpbench.running.command import child_environment, command_for, torchrun_equivalent
from ddpbench.running.diagnose import diagnose, rendezvous_failed
from ddpbench.running.heartbeats import read_heartbeats
from ddpbench.running.progress import RunProgress
from ddpbench.running.resolve import check_output_folder, oversubscription

ERROR_TAIL_LINES = 40


def port_is_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        try:
            probe.bind(("localhost", port))
        except OSError:
            return False
    return True


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


def secrets_hidden(error: dict) -> dict:
    """A failure's evidence as the record keeps it: what the processes printed, their tracebacks and
    the message, with secrets hidden by the rule every output follows (a script that prints its own
    arguments would otherwise leave its token in the record)."""
    found = dict(error)
    found["message"] = redact_text(found.get("message") or "")
    found["output_tail"] = [redact_text(line) for line in found.get("output_tail") or []]
    if found.get("tracebacks"):
        found["tracebacks"] = {rank: redact_text(text) for rank, text in found["tracebacks"].items()}
    return found


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
    if spec.node_rank == 0 and os.path.exists(path):
        # A record left by an earlier run of this id (--run-id, ab --out, a rerun after sweep
        # --resume) must not stand for this run, should this one die before writing its own.
        os.remove(path)
    notes = []
    if spec.launched_by_torchrun and spec.rdzv_port and not spec.rdzv_endpoint and not port_is_free(spec.rdzv_port):
        notes.append(f"port {spec.rdzv_port} was taken; torchrun picked a free one")
        spec = spec.replace(rdzv_port=None)
    started = time.perf_counter()
    for attempt in range(1, RENDEZVOUS_ATTEMPTS + 1):
        command, exit_code, timed_out, tail = _run_processes(spec, log_dir, timeout_s, verbose, show_progress)
        rendezvous_broke = (
            exit_code != 0
            and not timed_out
            and not os.path.exists(path)
            and spec.launched_by_torchrun
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
        command=redact_command(command),  # a script's secret arguments stay out of the record
        torchrun_command=redact_command(torchrun_equivalent(command)) if spec.rank_start == "fork" else None,
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
            record.error = msgspec.convert(secrets_hidden(error), RunError)
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
        record.error = msgspec.convert(secrets_hidden(error), RunError)
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
