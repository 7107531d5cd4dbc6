"""What went wrong in a run that did not finish: which rank, how, and what status to record.

Evidence, read after the processes have ended: torchrun's per-rank error files (written by the
worker's `@record`), torchrun's failure summary in the run's output (exit codes and signals per
rank), the per-rank heartbeats and hang dumps, and whether the launcher had to end the run at
its timeout.
"""

from __future__ import annotations

import glob
import json
import os
import re
import signal

from ddpbench.config.channels import RANK_EXIT_LINE
from ddpbench.running import hang_evidence
from ddpbench.running.heartbeats import find_hang, read_heartbeats

_EXCEPTION_LINE = re.compile(r"^\s*(?:\[[^\]]*\]:?\s*)?([\w.]+(?:Error|Exception|Interrupt)\b.*)$")
_RANK_EXIT = re.compile(r"rank\s*:\s*(\d+)\s*\(local_rank:\s*(\d+)\)\s*\n\s*exitcode\s*:\s*(-?\d+)")
# The same, as ddpbench's agent prints it for every failed rank of a forked group.
_AGENT_RANK_EXIT = re.compile(
    re.escape(RANK_EXIT_LINE.format(rank="RANK", local_rank="LOCAL", code="CODE"))
    .replace("RANK", r"(?P<rank>\d+)", 1)
    .replace("LOCAL", r"(?P<local_rank>\d+)")
    .replace("CODE", r"(?P<code>-?\d+)")
)
_RANK_ERROR_FILE = re.compile(r"rank\s*:\s*(\d+)\s*\(local_rank:[^\n]*\n[^\n]*\n\s*error_file\s*:\s*(\S+)")
_COLLECTIVE_TIMEOUT = re.compile(r"timed out|timeout|Watchdog caught collective", re.IGNORECASE)
# What a rank reports when *another* rank died or stopped: the consequence, not the cause.
_PEER_FAILURE = re.compile(r"by peer|remote worker|timed out|timeout|Watchdog caught collective", re.IGNORECASE)
_RENDEZVOUS_FAILURE = re.compile(
    r"EADDRINUSE|address already in use|RendezvousConnectionError|"
    r"RendezvousTimeoutError|The server socket has failed to listen",
    re.IGNORECASE,
)
# Out of memory, however it is raised: torch.OutOfMemoryError from the caching allocator, but
# also a plain RuntimeError when cuDNN, cuBLAS or NCCL fail to allocate (their workspace or
# communicator buffers) and CUDA's own "out of memory" error (code 2).
_OUT_OF_MEMORY = re.compile(
    r"OutOfMemoryError|CUDA out of memory|CUDNN_STATUS_ALLOC_FAILED|"
    r"CUBLAS_STATUS_ALLOC_FAILED|CUSOLVER_STATUS_ALLOC_FAILED|CUFFT_ALLOC_FAILED|"
    r"cudaErrorMemoryAllocation|\bout of memory\b",
    re.IGNORECASE,
)
OUTPUT_READ_BYTES = 256 * 1024


def out_of_memory(text: str) -> bool:
    return bool(_OUT_OF_MEMORY.search(text))


def read_output(log_path: str) -> str:
    """The end of the run's output log (torchrun's summary is at the end)."""
    try:
        with open(log_path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            handle.seek(max(0, handle.tell() - OUTPUT_READ_BYTES))
            return handle.read().decode("utf-8", "replace")
    except OSError:
        return ""


def error_files(ranks_dir: str, node_rank: int, nproc: int, output: str = "") -> dict[int, dict]:
    """Global rank -> {"message", "traceback"} from torchrun's error files. The file's folder
    names only the local rank; where several agents share the folder (srun on several nodes,
    whose node ranks c10d assigns), torchrun's failure summary in `output` names each file's rank."""
    found = {}
    named = {os.path.realpath(path): int(rank) for rank, path in _RANK_ERROR_FILE.findall(output)}
    paths = glob.glob(os.path.join(ranks_dir, "*", "attempt_*", "*", "error.json"))
    for path in sorted(paths, key=lambda p: os.path.realpath(p) not in named):  # named ones first
        try:
            local_rank = int(os.path.basename(os.path.dirname(path)))
            with open(path, encoding="utf-8") as handle:
                content = json.load(handle)
        except (OSError, ValueError):
            continue
        message = content.get("message", {})
        extra = (message.get("extraInfo") or {}) if isinstance(message, dict) else {}
        text = message.get("message", "") if isinstance(message, dict) else str(message)
        try:
            timestamp = float(extra.get("timestamp", "inf"))
        except (TypeError, ValueError):
            timestamp = float("inf")
        rank = named.get(os.path.realpath(path), node_rank * nproc + local_rank)
        if rank in found:  # an unnamed file whose guess is taken by a named one
            continue
        found[rank] = {"message": text, "traceback": extra.get("py_callstack"), "timestamp": timestamp}
    return found


def root_cause(errors: dict[int, dict]) -> int:
    """The rank whose error caused the others: not one reporting a dead or silent peer, and
    among the rest the earliest."""
    return min(
        errors, key=lambda rank: (bool(_PEER_FAILURE.search(errors[rank]["message"])), errors[rank]["timestamp"], rank)
    )


def exits_by_rank(output: str) -> dict[int, int]:
    """Global rank -> exit code (negative: killed by that signal), from torchrun's failure summary
    and from ddpbench's agent's line for each failed rank."""
    found = {int(rank): int(code) for rank, _, code in _RANK_EXIT.findall(output)}
    for line in _AGENT_RANK_EXIT.finditer(output):
        found[int(line["rank"])] = int(line["code"])
    return found


def signal_name(exit_code: int) -> str | None:
    if exit_code >= 0:
        return None
    try:
        return signal.Signals(-exit_code).name
    except ValueError:
        return f"signal {-exit_code}"


def last_exception(output: str) -> str | None:
    """The last exception named in the output, skipping torchrun's own wrapper error."""
    lines = [line.split("\r")[-1] for line in output.splitlines()]
    found = [m.group(1) for m in map(_EXCEPTION_LINE.match, lines) if m]
    own = [e for e in found if not e.startswith(("torch.distributed.elastic", "ChildFailedError"))]
    return (own or found or [None])[-1]


def rendezvous_failed(log_dir: str) -> bool:
    """Whether the run ended because its rendezvous broke (port taken, store unreachable), so
    that a retry on a fresh port can help. Once a rank has raised an error of its own, the
    rendezvous had worked: on several nodes the other agents then lose the store and print a
    rendezvous error too, but that is the failure's consequence, and retrying would only repeat it."""
    output = read_output(os.path.join(log_dir, "output.log"))
    if not _RENDEZVOUS_FAILURE.search(output):
        return False
    errors = error_files(os.path.join(log_dir, "ranks"), 0, 1, output)
    return not any(
        not _RENDEZVOUS_FAILURE.search(e["message"]) and not _PEER_FAILURE.search(e["message"]) for e in errors.values()
    )


# How torchrun's error file names the worker's verdict on a script it cannot measure
# (ddpbench.worker.script.observer.ScriptNotMeasurable).
NOT_MEASURABLE = "ScriptNotMeasurable: "


def diagnose(
    exit_code: int,
    timed_out: bool,
    timeout_s: float | None,
    log_dir: str,
    node_rank: int = 0,
    nproc: int = 1,
    output_tail: list[str] | None = None,
) -> tuple[str, dict]:
    """(status, error) for a run that wrote no record or failed after writing it."""
    output = read_output(os.path.join(log_dir, "output.log"))
    errors = error_files(os.path.join(log_dir, "ranks"), node_rank, nproc, output)
    exits = exits_by_rank(output)
    beats = read_heartbeats(os.path.join(log_dir, "heartbeats"))
    _, recorder = hang_evidence.flight_recorder_files(hang_evidence.dumps_folder(log_dir))
    hang = find_hang(beats, hang_evidence.collectives_by_rank(recorder))
    if hang and any(not _PEER_FAILURE.search(errors[rank]["message"]) for rank in hang["ranks"] if rank in errors):
        hang = None  # the rank behind raised an error of its own: it failed, it did not hang
    error: dict = {"exit_code": exit_code, "output_tail": output_tail or []}
    killed = {rank: signal_name(code) for rank, code in exits.items() if code < 0 and signal_name(code) != "SIGTERM"}
    texts = [e["message"] for e in errors.values()] + [last_exception(output) or ""]
    # NCCL's watchdog ends a rank whose collective timed out with SIGABRT: after a hang, those
    # signals are its consequence, not its cause (a rank killed by anything else still is).
    aborted_after_hang = bool(hang and killed) and all(name == "SIGABRT" for name in killed.values())

    if timed_out:
        status = "timeout"
        error["message"] = f"ended after the {timeout_s:.0f} s run timeout"
        if hang:
            error["message"] += f"; {'hang' if hang['kind'] == 'hung' else 'out of step'}: {hang['explanation']}"
            describe_hang(error, hang, log_dir, beats)
    elif any(out_of_memory(t) for t in texts):
        status = "oom"
        ranks = sorted(r for r, e in errors.items() if out_of_memory(e["message"]))
        error["message"] = (
            f"out of memory{' on rank ' + ', '.join(map(str, ranks)) if ranks else ''}: "
            f"{next(t for t in texts if out_of_memory(t))}"
        )
    elif killed and not aborted_after_hang:
        status = "failed"
        error["message"] = "; ".join(f"rank {rank} was killed by {name}" for rank, name in sorted(killed.items()))
    elif hang and (any(_COLLECTIVE_TIMEOUT.search(t) for t in texts) or not errors or aborted_after_hang):
        # Victims fail first (their collective times out) and torchrun blames them; the rank
        # that fell behind (or out of step) is the cause.
        status = "timeout"
        error["message"] = f"{'hang' if hang['kind'] == 'hung' else 'out of step'}: {hang['explanation']}"
        describe_hang(error, hang, log_dir, beats)
    elif errors:
        status = "failed"
        cause = root_cause(errors)
        error["message"] = f"rank {cause} raised {errors[cause]['message']}"
        if _COLLECTIVE_TIMEOUT.search(errors[cause]["message"]):  # no rank fell behind: all were slow
            error["message"] += f" ({RAISE_PG_TIMEOUT})"
        pitfall = known_pitfall(errors[cause]["message"])
        if pitfall:
            error["message"], error["kind"] = pitfall, "known_pitfall"
        if errors[cause]["message"].startswith(NOT_MEASURABLE):
            # ddpbench's own verdict on the script, in its words: no traceback of ours to read.
            error["message"] = errors[cause]["message"].removeprefix(NOT_MEASURABLE)
            error["kind"] = "not_measurable"
    else:
        status = "failed"
        error["message"] = f"exit code {exit_code}: {last_exception(output) or 'no exception in the output'}"

    if errors:
        error["failed_ranks"] = sorted(errors)
        error["tracebacks"] = {str(rank): e["traceback"] for rank, e in sorted(errors.items()) if e["traceback"]}
    if killed:
        error["signals"] = {str(rank): name for rank, name in sorted(killed.items())}
    return status, error


# Failures of torch itself that a user meets by choosing a setting, in words that say what to change.
# (pattern in the rank's error, explanation)
PITFALLS = (
    (
        re.compile(r"First bucket should be smaller/equal to other buckets"),
        "torch.compile's DDPOptimizer refused the bucket cap: its own first bucket (1 MiB) is larger than "
        "the cap; use --bucket-cap-mb 1 or more with --compile default, or --compile compiled-autograd",
    ),
    # Public scripts that hard-code CUDA (pytorch/examples' DDP tutorial calls torch.cuda.set_device,
    # nanoGPT builds its device from LOCAL_RANK as cuda:N) fail this way on a machine without GPUs.
    (
        re.compile(r"Found no NVIDIA driver|Torch not compiled with CUDA enabled|No CUDA GPUs are available"),
        "the code asks for a GPU and this machine has none ({raised}): run it on a GPU node with --device cuda",
    ),
    # timm's train.py passes device_ids=[device] to DDP for any device; PyTorch accepts device_ids only
    # for GPU modules, so on CPU the script's own DDP call fails.
    (
        re.compile(r"device_ids and output_device arguments only work with single-device/multiple-device GPU"),
        "the code passes device_ids to DistributedDataParallel for a CPU model, which PyTorch refuses (on CPU "
        "device_ids must be None); run it on GPUs with --device cuda, or leave device_ids out on CPU",
    ),
)


def known_pitfall(message: str) -> str | None:
    """A sentence that says what to do about a failure others have met, or None."""
    for pattern, explanation in PITFALLS:
        found = pattern.search(message)
        if found:
            return explanation.format(raised=found.group(0))
    return None


RAISE_PG_TIMEOUT = (
    "a collective waits at most the process-group timeout (a sweep's is 50 expected steps, at least 60 s, "
    "plus 600 s with --compile); if the ranks were only slow (compiling, loading), raise it with --pg-timeout "
    "SECONDS on run, sweep or trainjob"
)


def describe_hang(error: dict, hang: dict, log_dir: str, beats: dict[int, dict]) -> None:
    """The hang's fields in the record's error: who, where, and the evidence kept for it; and how to
    give the ranks longer, where they were only slow."""
    error["message"] += f" ({RAISE_PG_TIMEOUT})"
    error["hung_ranks"] = hang["ranks"]
    error["hang_evidence"] = hang["explanation"]
    error["hang"] = {**hang, "evidence": hang_evidence.collect(log_dir, beats, hang)}
