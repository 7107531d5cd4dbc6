"""What the kernel counts of a rank's CPU, read by the rank itself between its steps: per thread,
the time it ran on a core and the time it was runnable but waited for one; the time its cgroup's CPU
quota held it back; the host's CPU pressure. No torch.

Why the kernel, and not step times: a step that waited for a core is longer, and so is a step whose
code got slower; only the scheduler can tell the two apart. `/proc/<pid>/task/<tid>/schedstat` holds
three numbers per thread: nanoseconds on a CPU, nanoseconds runnable but waiting for a CPU (the run
delay, which includes the time a cgroup quota throttled it), and timeslices. On this 2-core VM a
loop pinned beside a busy loop took 0.153 s against 0.093 alone: 0.074 s on a CPU both times, and
0.082 s waited against 0.015; the waiting accounts for the slowdown.

The threads of a rank fall in three groups, by what waiting costs:
- the training thread (the one that builds this reader): its waiting lengthens the step directly;
- the collective library's threads (gloo's loops, NCCL's watchdog and proxies, by their names): their
  waiting delays communication, so it belongs to communication, never to host contention;
- the rank's other threads (the intra-op pool that runs a matrix product beside the training thread).
The rank's DataLoader workers are processes (its children): their threads are read too, apart.

Reading costs microseconds: every file stays open and is read again from offset 0 (a thread's
schedstat about 1 us here). The training thread's CPU time comes from its own clock
(`time.thread_time_ns`): schedstat's first field lags for the thread that reads it (it is brought up
to date at a tick or a switch), while its run delay is exact for a thread that is running.
The sets of threads and workers are listed again at `refresh()` (each window and each segment of the
in-process ablation), never inside a step; a thread that ends keeps its last reading.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time

COMM_THREAD_PREFIXES = ("gloo", "pt_gloo", "pt_nccl", "nccl", "NCCL")
"""Thread names (`/proc/.../comm`) of the collective libraries: gloo's `gloo_tcp_loop` and
`pt_gloo_runloop` (seen here), ProcessGroupNCCL's `pt_nccl_watchdg`, NCCL's own `NCCL ...` threads."""

FIELDS = (
    "cpu_s",
    "waited_s",
    "threads_cpu_s",
    "threads_waited_s",
    "comm_cpu_s",
    "comm_waited_s",
    "loader_cpu_s",
    "loader_waited_s",
    "throttled_s",
    "pressure_s",
)
"""One reading's differences, in seconds: the training thread's time on a core and waiting for one;
the same summed over the rank's other threads, over the collective library's threads, and over its
DataLoader workers' threads; the time the rank's cgroup was throttled by its CPU quota (None where
no quota applies or it cannot be read); the host's CPU pressure, time some task waited for a CPU
(`/proc/pressure/cpu`, None without PSI)."""
OPTIONAL = ("throttled_s", "pressure_s")


def _schedstat(raw: bytes) -> tuple[int, int]:
    on_cpu, waited, _slices = raw.split()
    return int(on_cpu), int(waited)


class _File:
    """One procfs or cgroupfs file, opened once and read again from the start."""

    __slots__ = ("fd", "last")

    def __init__(self, path: str):
        self.fd = os.open(path, os.O_RDONLY)
        self.last = None

    def read(self) -> bytes | None:
        try:
            return os.pread(self.fd, 4096, 0)
        except OSError:  # the thread or process ended: its counters stop where they were
            return None

    def close(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self.fd)


class _Threads:
    """A group of threads' schedstat files; sums their time on a core and their waiting."""

    def __init__(self):
        self.files: dict[str, _File] = {}
        self.ended = (0, 0)
        """What threads that are no longer listed had counted (kept, so a sum never goes back)."""

    def keep(self, paths: set[str]) -> None:
        for path in list(self.files):
            if path not in paths:
                gone = self.files.pop(path)
                if gone.last is not None:
                    self.ended = (self.ended[0] + gone.last[0], self.ended[1] + gone.last[1])
                gone.close()
        for path in paths - set(self.files):
            with contextlib.suppress(OSError):
                self.files[path] = _File(path)

    def read(self) -> tuple[int, int]:
        on_cpu, waited = self.ended
        for handle in self.files.values():
            raw = handle.read()
            if raw:
                with contextlib.suppress(ValueError):
                    handle.last = _schedstat(raw)
            if handle.last is not None:
                on_cpu += handle.last[0]
                waited += handle.last[1]
        return on_cpu, waited

    def close(self) -> None:
        for handle in self.files.values():
            handle.close()
        self.files = {}


def cgroup_cpu_dirs(proc_cgroup: str = "/proc/self/cgroup", root: str = "/sys/fs/cgroup") -> list[str]:
    """The cgroup folders whose CPU quota can hold this process back, its own first, then its
    ancestors: cgroup v1's `cpu` controller where it is mounted, else the v2 hierarchy. Empty where
    none can be read (not Linux, a container that hides them)."""
    try:
        with open(proc_cgroup, encoding="utf-8") as handle:
            lines = handle.read().splitlines()
    except OSError:
        return []
    v1 = v2 = None
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        hierarchy, controllers, path = parts
        if "cpu" in controllers.split(","):
            v1 = path
        elif hierarchy == "0" and controllers == "":
            v2 = path
    candidates = []
    if v1 is not None:
        candidates = [os.path.join(root, mount) for mount in ("cpu", "cpu,cpuacct", "cpuacct,cpu")]
        path = v1
    elif v2 is not None:
        candidates = [root]
        path = v2
    for base in candidates:
        if not os.path.exists(os.path.join(base, "cpu.stat")):
            continue
        found, current = [], path
        while True:
            folder = os.path.normpath(base + current)
            if os.path.exists(os.path.join(folder, "cpu.stat")):
                found.append(folder)
            if current in ("/", ""):
                break
            current = os.path.dirname(current)
        return found
    return []


def quota_cores(folder: str) -> float | None:
    """The CPU quota of one cgroup folder in cores (quota over period), None where it has none."""
    try:
        if os.path.exists(os.path.join(folder, "cpu.max")):  # v2: "max 100000" or "50000 100000"
            with open(os.path.join(folder, "cpu.max"), encoding="ascii") as handle:
                quota, period = handle.read().split()
            return None if quota == "max" else int(quota) / int(period)
        with open(os.path.join(folder, "cpu.cfs_quota_us"), encoding="ascii") as handle:
            quota = int(handle.read())
        with open(os.path.join(folder, "cpu.cfs_period_us"), encoding="ascii") as handle:
            period = int(handle.read())
    except (OSError, ValueError):
        return None
    return None if quota <= 0 else quota / period


def throttled_ns(raw: bytes) -> int | None:
    """cpu.stat's throttled time, ns: v1's `throttled_time` (ns) or v2's `throttled_usec`."""
    for line in raw.decode("ascii", "replace").splitlines():
        name, _, value = line.partition(" ")
        if name == "throttled_time":
            return int(value)
        if name == "throttled_usec":
            return 1000 * int(value)
    return None


def pressure_ns(raw: bytes) -> int | None:
    """`/proc/pressure/cpu`'s `some ... total=<us>`: time at least one task waited for a CPU, ns."""
    for line in raw.decode("ascii", "replace").splitlines():
        if line.startswith("some "):
            for item in line.split():
                if item.startswith("total="):
                    return 1000 * int(item[len("total=") :])
    return None


class CpuCounters:
    """The rank's counters, read with `read()`; build it on the training thread. Where the kernel
    does not give them (not Linux), `available` is False and `read()` returns None."""

    def __init__(self):
        self.training_tid = threading.get_native_id()
        self.task = f"/proc/self/task/{self.training_tid}"
        self.available = os.path.exists(os.path.join(self.task, "schedstat"))
        self.training: _File | None = None
        self.threads, self.comm, self.loader = _Threads(), _Threads(), _Threads()
        self.throttle: list[_File] = []
        self.quota: float | None = None
        self.cgroup: str | None = None
        self.pressure: _File | None = None
        self.counts = {"threads": 0, "comm": 0, "loader_processes": 0}
        if self.available:
            self.training = _File(os.path.join(self.task, "schedstat"))
            with contextlib.suppress(OSError):
                self.pressure = _File("/proc/pressure/cpu")
            self.refresh()

    def refresh(self) -> None:
        """List the rank's threads and DataLoader workers and its cgroup again (outside any step)."""
        if not self.available:
            return
        harness = {t.native_id for t in threading.enumerate()} - {self.training_tid}
        threads, comm = set(), set()
        for tid in _listdir("/proc/self/task"):
            if tid == str(self.training_tid):
                continue
            name = _read_text(f"/proc/self/task/{tid}/comm")
            path = f"/proc/self/task/{tid}/schedstat"
            if name.startswith(COMM_THREAD_PREFIXES):
                comm.add(path)
            elif int(tid) not in harness:  # the harness's own Python threads (heartbeat) are no part of the step
                threads.add(path)
        self.threads.keep(threads)
        self.comm.keep(comm)
        workers = set()
        children = _read_text(os.path.join(self.task, "children")).split()
        for pid in children:
            workers |= {f"/proc/{pid}/task/{tid}/schedstat" for tid in _listdir(f"/proc/{pid}/task")}
        self.loader.keep(workers)
        self.counts = {"threads": len(threads), "comm": len(comm), "loader_processes": len(children)}
        for handle in self.throttle:
            handle.close()
        # The tightest quota of the rank's cgroup and its ancestors is the one that holds it back:
        # its throttled time is read (one counter, so differences of readings stay its own).
        quotas = [(quota, folder) for folder in cgroup_cpu_dirs() if (quota := quota_cores(folder)) is not None]
        self.throttle, self.quota, self.cgroup = [], None, None
        if quotas:
            self.quota, self.cgroup = min(quotas)
            with contextlib.suppress(OSError):
                self.throttle.append(_File(os.path.join(self.cgroup, "cpu.stat")))

    def read(self) -> tuple[int | None, ...] | None:
        """One reading, ns, in FIELDS' order (cumulative: differences of two readings are the
        counters of what ran between them)."""
        if not self.available:
            return None
        cpu = time.thread_time_ns()
        raw = self.training.read()
        waited = _schedstat(raw)[1] if raw else 0
        found = [cpu, waited, *self.threads.read(), *self.comm.read(), *self.loader.read()]
        throttled = None
        for handle in self.throttle:
            raw = handle.read()
            throttled = throttled_ns(raw) if raw else None
        raw = self.pressure.read() if self.pressure else None
        found += [throttled, pressure_ns(raw) if raw else None]
        return tuple(found)

    def close(self) -> None:
        for handle in (self.training, self.pressure, *self.throttle):
            if handle is not None:
                handle.close()
        for group in (self.threads, self.comm, self.loader):
            group.close()


RANK_NAME = "ddpbench-r{rank}"
"""What a rank calls its training thread (`/proc/<pid>/comm`, which `ps` and `top` show): a forked
rank's command line and environment are its agent's, so its name is what tells the ranks apart."""


def name_this_rank(rank: int) -> None:
    """Names the calling (training) thread after its rank, where the kernel lets it (Linux)."""
    try:
        with open(f"/proc/self/task/{threading.get_native_id()}/comm", "w", encoding="ascii") as handle:
            handle.write(RANK_NAME.format(rank=rank)[:15])
    except OSError:
        pass


def difference(first: tuple | None, last: tuple | None) -> dict[str, float | None] | None:
    """The counters between two readings, seconds by field name; None without both readings."""
    if first is None or last is None:
        return None
    return {name: None if a is None or b is None else max(0, b - a) / 1e9 for name, a, b in zip(FIELDS, first, last)}


class StepCounters:
    """Readings at step boundaries, kept as raw tuples while steps run (appending a tuple is the only
    work inside the loop); `per_step()` turns them into per-field lists afterwards."""

    def __init__(self, counters: CpuCounters):
        self.counters = counters
        self.readings: list = []

    def mark(self) -> None:
        self.readings.append(self.counters.read())

    def per_step(self) -> dict[str, list[float | None]] | None:
        """Field -> one value per step (reading i to reading i + 1); None where not read."""
        if len(self.readings) < 2 or any(reading is None for reading in self.readings):
            return None
        steps = [difference(a, b) for a, b in zip(self.readings, self.readings[1:])]
        return {name: [step[name] for step in steps] for name in FIELDS}


def _listdir(path: str) -> list[str]:
    try:
        return [name for name in os.listdir(path) if name.isdigit()]
    except OSError:
        return []


def _read_text(path: str) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read().strip()
    except OSError:
        return ""
