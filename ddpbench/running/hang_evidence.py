"""The evidence a hung run leaves in its log folder, read back without torch: the ranks'
Flight Recorder dumps (which collectives each issued), their stack dumps (where the main thread
was), and the verdict of PyTorch's own Flight Recorder analyzer on the dumps.

The dumps are written by `ddpbench.worker.hang_dumps` (ours, when progress stalls) and, on NCCL,
by NCCL's watchdog when a collective times out (`nccl_trace_rank_<r>`).
"""

from __future__ import annotations

import glob
import os
import pickle
import re
import subprocess
import sys

from ddpbench.config.channels import HANG_DUMPS_FOLDER

DUMP_PREFIXES = ("flight_recorder_rank_", "nccl_trace_rank_")
TOP_FRAMES = 6
ANALYZER_TIMEOUT_S = 60
ANALYZER_LINES = 16
_THREAD = re.compile(r"^(?:Current thread|Thread) (0x[0-9a-f]+)", re.MULTILINE)


def dumps_folder(log_dir: str) -> str:
    return os.path.join(log_dir, HANG_DUMPS_FOLDER)


def flight_recorder_files(folder: str) -> tuple[str | None, dict[int, str]]:
    """(prefix, rank -> path) of the first kind of dump found: ours, else NCCL's."""
    for prefix in DUMP_PREFIXES:
        found = {}
        for path in glob.glob(os.path.join(folder, prefix + "*")):
            suffix = os.path.basename(path)[len(prefix) :]
            if suffix.isdigit():
                found[int(suffix)] = path
        if found:
            return prefix, found
    return None, {}


def collectives_by_rank(paths: dict[int, str]) -> dict[int, dict[int, tuple]]:
    """rank -> collective number -> (operation, sizes), from the Flight Recorder dumps. The dumps
    are our own ranks' pickles of plain Python values (torch's format); unreadable ones are skipped."""
    found = {}
    for rank, path in paths.items():
        try:
            with open(path, "rb") as handle:
                dump = pickle.load(handle)
            found[rank] = {
                entry["collective_seq_id"]: (entry["profiling_name"], repr(entry.get("input_sizes")))
                for entry in dump.get("entries", [])
                if not entry.get("is_p2p")
            }
        except Exception:  # a truncated or foreign file is no evidence, not a reason to fail
            continue
    return found


def main_thread_frames(path: str, thread: str | None, count: int = TOP_FRAMES) -> list[str]:
    """The innermost frames of the main thread in a faulthandler dump ("file:line in function")."""
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            text = handle.read()
    except OSError:
        return []
    blocks = {match.group(1): text[match.end() :] for match in _THREAD.finditer(text)}
    block = blocks.get(thread) if thread else None
    if block is None:
        return []
    frames = []
    for line in block.splitlines()[1:]:
        match = re.match(r'\s+File "(.+)", line (\d+) in (.+)', line)
        if not match:
            break
        frames.append(f"{match.group(1)}:{match.group(2)} in {match.group(3)}")
    return frames[:count]


def stacks_file(folder: str, rank: int) -> str | None:
    """The rank's stall dump, else the one written when torchrun ended it."""
    for when in ("stalled", "sigterm"):
        path = os.path.join(folder, f"stacks_{when}_rank_{rank}.txt")
        if os.path.exists(path) and os.path.getsize(path) > 0:
            return path
    return None


def torch_analyzer_verdict(folder: str, prefix: str) -> str:
    """What `torch.distributed.flight_recorder.fr_trace` says about the dumps (run in its own
    process: the launcher never imports torch)."""
    command = [sys.executable, "-m", "torch.distributed.flight_recorder.fr_trace", folder, "-p", prefix]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=ANALYZER_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"the analyzer did not finish: {exc}"
    lines = [
        line
        for line in (done.stdout + done.stderr).splitlines()
        if line.strip() and "tabulate is not installed" not in line
    ]
    if done.returncode != 0:
        return f"the analyzer failed (exit code {done.returncode}): {lines[-1] if lines else 'no output'}"
    return "\n".join(lines[:ANALYZER_LINES]) or "no mismatch or missing rank found"


def collect(log_dir: str, beats: dict[int, dict], hang: dict | None, analyze: bool = True) -> dict:
    """Evidence paths for the record, the hung ranks' top frames, and the analyzer's verdict."""
    folder = dumps_folder(log_dir)
    prefix, recorder = flight_recorder_files(folder)
    stacks = {rank: path for rank in sorted(beats) if (path := stacks_file(folder, rank))}
    evidence: dict = {
        "heartbeats": os.path.join(log_dir, "heartbeats"),
        "stacks": {str(rank): path for rank, path in stacks.items()},
        "flight_recorder": {str(rank): path for rank, path in sorted(recorder.items())},
    }
    if hang:
        evidence["top_frames"] = {
            str(rank): main_thread_frames(stacks[rank], beats[rank].get("main_thread"))
            for rank in hang["ranks"]
            if rank in stacks
        }
    if analyze and prefix and len(recorder) == len(beats) > 1:
        evidence["flight_recorder_analysis"] = torch_analyzer_verdict(folder, prefix)
    return evidence
