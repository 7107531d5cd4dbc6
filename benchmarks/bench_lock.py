"""The benchmark lock, /tmp/ddpbench-bench.lock: a measurement holds it throughout, so that no two
benchmarks (or a benchmark and the timed tests) share the machine. A script takes it itself, or runs
under a caller's (`flock /tmp/ddpbench-bench.lock python benchmarks/...`): flock will not let a
child take a lock its parent holds, since a new open of the file is a new lock, so the caller's
hold is found in /proc/locks and used instead."""

from __future__ import annotations

import contextlib
import fcntl
import os

LOCK = "/tmp/ddpbench-bench.lock"


def parent_of(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as handle:
            return int(handle.read().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return 0


def held_by_a_caller(path: str) -> bool:
    """Whether a process this one runs under (`flock LOCK python ...`) holds the flock on `path`:
    taking it again would wait for ever, since a new open of the file is a new lock."""
    try:
        stat = os.stat(path)
        with open("/proc/locks", encoding="utf-8") as handle:
            lines = handle.read().splitlines()
    except OSError:
        return False
    key = f"{os.major(stat.st_dev):02x}:{os.minor(stat.st_dev):02x}:{stat.st_ino}"
    # "1: FLOCK  ADVISORY  WRITE 2784 fe:00:2147165 0 EOF"; a waiter's line has "->" after the number.
    holders = {int(f[4]) for f in (line.split() for line in lines) if len(f) > 5 and f[1] == "FLOCK" and f[5] == key}
    pid = os.getppid()
    while pid > 1:
        if pid in holders:
            return True
        pid = parent_of(pid)
    return False


@contextlib.contextmanager
def bench_lock():
    """Hold the benchmark lock for the whole measurement; yields who took it."""
    if held_by_a_caller(LOCK):
        yield "the command that started this one"
        return
    with open(LOCK, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield "this script"
