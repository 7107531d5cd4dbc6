"""Other work planted on the machine while a benchmark measures, and what it really took.

- `background(cores)`: plain Python processes that spin and sleep in turns (10 ms busy, then idle
  for as long as makes each one's share), as many as it takes at most half a core each, so that
  together they ask for `cores` of the machine: other jobs' work, whose phase against the
  benchmark's steps is left to chance.
- `pinned_hog(cpu)`: one `while True: pass` held to one CPU (`os.sched_setaffinity`).

Both yield a `Planted` whose `cores()` says what the processes really used over the time they ran
(their CPU time from /proc over the wall time): under contention they get less than they ask for,
and a page states what was there, not what was asked.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time

DUTY_PERIOD_S = 0.020
"""One busy-and-idle cycle of a background process: 20 ms, a few of the benchmark's steps."""

SPIN = """
import os, sys, time
busy, period = float(sys.argv[1]), float(sys.argv[2])
if len(sys.argv) > 3:
    os.sched_setaffinity(0, {int(sys.argv[3])})
while True:
    started = time.perf_counter()
    while time.perf_counter() - started < busy:
        pass
    idle = period - busy
    if idle > 0:
        time.sleep(idle)
"""


def _cpu_seconds(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as handle:
            fields = handle.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Planted:
    """The planted processes; `cores()` is what they used per second of wall time so far."""

    def __init__(self, processes: list[subprocess.Popen], asked_cores: float, what: str):
        self.processes = processes
        self.asked_cores = asked_cores
        self.what = what
        self.started = time.perf_counter()
        self.used_s = 0.0

    def cores(self) -> float:
        used = sum(_cpu_seconds(process.pid) for process in self.processes) or self.used_s
        return used / max(time.perf_counter() - self.started, 1e-9)

    def stop(self) -> dict:
        """Ends the processes; returns what they asked for and what they used."""
        self.used_s = sum(_cpu_seconds(process.pid) for process in self.processes)
        wall = time.perf_counter() - self.started
        for process in self.processes:
            process.kill()
        for process in self.processes:
            process.wait()
        return {"what": self.what, "asked_cores": self.asked_cores, "used_cores": self.used_s / max(wall, 1e-9),
                "wall_s": wall}  # fmt: skip


def _spawn(busy_s: float, period_s: float, cpu: int | None = None) -> subprocess.Popen:
    command = [sys.executable, "-c", SPIN, str(busy_s), str(period_s)]
    if cpu is not None:
        command.append(str(cpu))
    return subprocess.Popen(command, stdin=subprocess.DEVNULL)


@contextlib.contextmanager
def background(cores: float):
    """Processes that together ask for `cores` of the machine, each at most half a core."""
    count = max(1, int(-(-cores // 0.5)))
    share = cores / count
    processes = [_spawn(share * DUTY_PERIOD_S, DUTY_PERIOD_S) for _ in range(count)]
    what = f"{count} processes, each busy {share:.0%} of every {DUTY_PERIOD_S * 1e3:.0f} ms"
    planted = Planted(processes, cores, what)
    try:
        yield planted
    finally:
        if planted.processes and planted.processes[0].poll() is None:
            planted.stop()


@contextlib.contextmanager
def pinned_hog(cpu: int = 0):
    """One process spinning for ever, held to CPU `cpu`."""
    planted = Planted([_spawn(1.0, 1.0, cpu)], 1.0, f"one `while True` held to CPU {cpu}")
    try:
        yield planted
    finally:
        if planted.processes[0].poll() is None:
            planted.stop()
