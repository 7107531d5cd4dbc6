"""How busy the machine was while a run measured, and whether it is busy before one starts.

CPU: the non-idle time of the CPUs this process may run on (its affinity: a container's or a
SLURM job's cpuset, not the whole host) from /proc/stat's per-CPU lines, and the CPU time of the
run's own processes (every live process under torchrun's agent, with the children they have
reaped), both as cores averaged over the window; what those CPUs were busy with beyond the run is
other processes'. The run is marked busy when other processes used at least IGNORED_CORES and the
cores they left were fewer than the run wanted (ranks on the node x threads per rank, plus data
loader workers): a run that wanted every core lost some, and OpenMP's spinning barriers make that
cost far more than the share taken.

GPU (through NVML, `nvidia-ml-py`, where the driver has it): compute processes on the run's GPUs
that are not the run's, the SM clock against its maximum, and clock-event (throttle) reasons other
than idle, a clock someone set or the power cap (normal at full load). The readings are taken at the
window's edges, where the GPU has just drained: other processes and slowdown reasons are what
they say, the SM clock is the one at that moment. Where NVML is missing or fails, the record says
why and the run goes on. No torch here.
"""

from __future__ import annotations

import contextlib
import os
import socket
import time
from dataclasses import dataclass, field

# Other processes' CPU below this many cores is the machine's own background (daemons, a shell).
IGNORED_CORES = 0.25
# Before a run starts: how long `ddpbench run` looks at the machine.
PRECHECK_S = 0.25
BUSY_WARNING_ENV = "DDPBENCH_BUSY_WARNING"

# NVML's clock-event reasons that mean the GPU ran slower than it could (not idle, not a setting).
SLOWDOWN_REASONS = {
    "nvmlClocksEventReasonHwSlowdown": "hardware slowdown",
    "nvmlClocksEventReasonHwThermalSlowdown": "hardware thermal slowdown",
    "nvmlClocksEventReasonHwPowerBrakeSlowdown": "power brake",
    "nvmlClocksEventReasonSwThermalSlowdown": "software thermal slowdown",
}


@dataclass
class CpuSample:
    at: float
    busy_s: float
    """All CPUs' non-idle time since boot (user, nice, system, irq, softirq, steal), seconds."""
    steal_s: float
    cores: int
    own_s: float | None
    """CPU time of the process tree under the root, seconds; None without a root."""
    own_pids: set[int] = field(default_factory=set)
    """That tree's processes (NVML's compute processes are told apart by them)."""


def _allowed_cpus() -> set[int] | None:
    try:
        return set(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return None


def _proc_stat() -> tuple[float, float, int]:
    """Non-idle and steal seconds since boot, summed over the CPUs this process may use, and how many."""
    tick = os.sysconf("SC_CLK_TCK")
    allowed = _allowed_cpus()
    busy = steal_total = 0.0
    cores = 0
    with open("/proc/stat", encoding="ascii") as handle:
        for line in handle:
            name = line.split(maxsplit=1)[0]
            if not (name.startswith("cpu") and name[3:].isdigit()):
                continue
            if allowed is not None and int(name[3:]) not in allowed:
                continue
            fields = [int(value) for value in line.split()[1:9]]
            user, nice, system, _idle, _iowait, irq, softirq, steal = (fields + [0] * 8)[:8]
            busy += user + nice + system + irq + softirq + steal
            steal_total += steal
            cores += 1
    return busy / tick, steal_total / tick, cores


def _processes() -> dict[int, tuple[int, float]]:
    """pid -> (parent pid, CPU seconds of it and of its reaped children)."""
    tick = os.sysconf("SC_CLK_TCK")
    found = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", encoding="ascii", errors="replace") as handle:
                text = handle.read()
        except OSError:
            continue  # it ended while we looked
        # The command name (field 2) may hold spaces and parentheses: split after its last ')'.
        rest = text[text.rfind(")") + 2 :].split()
        parent, utime, stime, cutime, cstime = int(rest[1]), int(rest[11]), int(rest[12]), int(rest[13]), int(rest[14])
        found[int(name)] = (parent, (utime + stime + cutime + cstime) / tick)
    return found


def tree_pids(root: int, processes: dict[int, tuple[int, float]]) -> set[int]:
    """The root and every process under it, from one walk over /proc (`_processes`)."""
    children: dict[int, list[int]] = {}
    for pid, (parent, _) in processes.items():
        children.setdefault(parent, []).append(pid)
    found, todo = set(), [root]
    while todo:
        pid = todo.pop()
        if pid in found:
            continue
        found.add(pid)
        todo += children.get(pid, [])
    return found


def tree_cpu_s(root: int) -> float | None:
    """CPU-seconds of a process and everything under it (with the children they have reaped); None
    where /proc cannot be read."""
    try:
        processes = _processes()
    except (OSError, ValueError, IndexError):
        return None
    return sum(processes[pid][1] for pid in tree_pids(root, processes) if pid in processes)


def sample(root: int | None) -> CpuSample | None:
    """None where /proc/stat cannot be read (not Linux)."""
    try:
        busy_s, steal_s, cores = _proc_stat()
        own_s, own_pids = None, set()
        if root is not None:
            processes = _processes()
            own_pids = tree_pids(root, processes)
            own_s = sum(processes[pid][1] for pid in own_pids if pid in processes)
    except (OSError, ValueError, IndexError):
        return None
    return CpuSample(time.perf_counter(), busy_s, steal_s, cores, own_s, own_pids)


@dataclass
class GpuReading:
    index: int
    other_processes: int = 0
    sm_clock_mhz: int | None = None
    max_sm_clock_mhz: int | None = None
    slowdowns: list[str] = field(default_factory=list)


def gpu_readings(uuids: dict[int, str], own_pids: set[int], own_per_gpu: int = 1) -> tuple[list[dict], str | None]:
    """One reading per CUDA device index -> its UUID; ([], why) where NVML cannot be used."""
    if not uuids:
        return [], None
    try:
        import pynvml
    except ImportError:
        return [], "not read: nvidia-ml-py is not installed"
    try:
        pynvml.nvmlInit()
    except Exception as exc:  # NVMLError, or a library that does not match the bindings
        return [], f"not read: NVML: {exc}"
    readings, problems = [], []
    try:
        for index, uuid in sorted(uuids.items()):
            try:
                readings.append(_read_gpu(pynvml, index, uuid, own_pids, own_per_gpu))
            except Exception as exc:  # an old driver, a MIG slice NVML cannot see: one GPU, not the run
                problems.append(f"GPU {index}: {type(exc).__name__}: {exc}")
    finally:
        with contextlib.suppress(Exception):
            pynvml.nvmlShutdown()
    return readings, ("partly read: " + "; ".join(problems)) if problems else None


def nvml_handle(pynvml, uuid: str):
    """NVML's handle of the GPU torch names by `uuid`."""
    # torch gives the bare UUID of a GPU and "MIG-..." for a MIG slice; NVML wants the prefix.
    return pynvml.nvmlDeviceGetHandleByUUID(uuid if uuid.startswith(("GPU-", "MIG-")) else f"GPU-{uuid}")


def _read_gpu(pynvml, index: int, uuid: str, own_pids: set[int], own_per_gpu: int) -> dict:
    handle = nvml_handle(pynvml, uuid)
    reading = GpuReading(index)
    pids = [p.pid for p in pynvml.nvmlDeviceGetComputeRunningProcesses(handle)]
    if any(pid in own_pids for pid in pids):
        reading.other_processes = sum(pid not in own_pids for pid in pids)
    else:  # NVML gives host pids inside a container: count beyond the run's own
        reading.other_processes = max(0, len(pids) - own_per_gpu)
    with contextlib.suppress(Exception):  # a MIG slice has no clocks of its own
        reading.sm_clock_mhz = pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM)
        reading.max_sm_clock_mhz = pynvml.nvmlDeviceGetMaxClockInfo(handle, pynvml.NVML_CLOCK_SM)
    # Drivers before R535 know the same bits only as "throttle reasons".
    reasons = None
    for reader in ("nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons"):
        with contextlib.suppress(Exception):
            reasons = getattr(pynvml, reader)(handle)
            break
    if reasons is not None:
        reading.slowdowns = [
            words
            for name, words in SLOWDOWN_REASONS.items()
            if reasons & getattr(pynvml, name, getattr(pynvml, name.replace("Event", "Throttle"), 0))
        ]
    return reading.__dict__


def gpu_memory_used(uuids: list[str]) -> tuple[list[int] | None, str | None]:
    """NVML's used memory of each GPU (CUDA UUIDs, in the order given): everything on the device, every
    process's allocations, CUDA contexts, NCCL's buffers and cuBLAS's workspaces included, as nvidia-smi
    shows it. (None, why) where NVML cannot be read."""
    if not uuids:
        return None, None
    try:
        import pynvml
    except ImportError:
        return None, "not read: nvidia-ml-py is not installed"
    try:
        pynvml.nvmlInit()
    except Exception as exc:  # NVMLError, or a library that does not match the bindings
        return None, f"not read: NVML: {exc}"
    try:
        used = []
        for uuid in uuids:
            handle = nvml_handle(pynvml, uuid)
            used.append(int(pynvml.nvmlDeviceGetMemoryInfo(handle).used))
        return used, None
    except Exception as exc:  # an old driver, a MIG slice NVML cannot see
        return None, f"not read: NVML: {type(exc).__name__}: {exc}"
    finally:
        with contextlib.suppress(Exception):
            pynvml.nvmlShutdown()


def merge_gpu(first: list[dict], last: list[dict]) -> list[dict]:
    """Start and end of the window: the most other processes, the lowest clock, every slowdown."""
    by_index = {reading["index"]: dict(reading) for reading in first}
    for reading in last:
        merged = by_index.setdefault(reading["index"], dict(reading))
        merged["other_processes"] = max(merged["other_processes"], reading["other_processes"])
        clocks = [c for c in (merged["sm_clock_mhz"], reading["sm_clock_mhz"]) if c is not None]
        merged["sm_clock_mhz"] = min(clocks) if clocks else None
        merged["slowdowns"] = sorted(set(merged["slowdowns"]) | set(reading["slowdowns"]))
    return [by_index[index] for index in sorted(by_index)]


def cores_over(first: CpuSample, last: CpuSample, wanted_cores: int) -> dict:
    """The CPU part of the record's `machine_load` between two samples."""
    window_s = max(last.at - first.at, 1e-9)
    busy = max(0.0, (last.busy_s - first.busy_s) / window_s)
    own = None if first.own_s is None or last.own_s is None else max(0.0, (last.own_s - first.own_s) / window_s)
    others = max(0.0, busy - (own or 0.0))
    return {
        "hostname": socket.gethostname(),
        "window_s": window_s,
        "cores": last.cores,
        "busy_cores": round(busy, 3),
        "own_cores": None if own is None else round(own, 3),
        "others_cores": round(others, 3),
        "steal_cores": round(max(0.0, (last.steal_s - first.steal_s) / window_s), 3),
        "wanted_cores": wanted_cores,
    }


def resolution_cores(window_s: float, cores: int) -> float:
    """How far off a figure in cores can be: /proc counts CPU time in clock ticks (10 ms), and a
    window's two readings each cut up to a tick per CPU (a 60 ms window: 0.7 of a core on 2 CPUs)."""
    return 2 * cores / (os.sysconf("SC_CLK_TCK") * max(window_s, 1e-9))


def judge(load: dict, cpu_why: str | None = None, counted: bool = False) -> dict:
    """Adds `busy` and `why` (one line with the figures) to a node's load. `counted`: the ranks' own
    counters of their waiting for a core were read (`ddpbench.analysis.cpu_denied`), and `cpu_why`
    is what they say (None: no rank's waiting other processes took beyond noise); they replace the
    rule on the window's cores, which cannot tell whether the others' CPU time cost the run anything."""
    reasons = []
    others, cores, wanted = load["others_cores"], load["cores"], load["wanted_cores"]
    if counted:
        if cpu_why:
            reasons.append(cpu_why)
    elif others >= IGNORED_CORES + resolution_cores(load["window_s"], cores) and cores - others < wanted:
        reasons.append(
            f"other processes used {others:.2f} of {cores} cores while the run wanted {wanted} " f"({load['hostname']})"
        )
    for gpu in load.get("gpus") or []:
        if gpu["other_processes"]:
            reasons.append(f"GPU {gpu['index']}: {gpu['other_processes']} other compute process(es)")
        if gpu["slowdowns"]:
            reasons.append(f"GPU {gpu['index']}: {', '.join(gpu['slowdowns'])}")
    return {**load, "busy": bool(reasons), "why": "; ".join(reasons) or None}


def busiest(loads: list[dict]) -> dict | None:
    """The run's `machine_load`: the node whose window was the busiest (a busy one before a quiet one)."""
    loads = [load for load in loads if load]
    if not loads:
        return None
    return max(loads, key=lambda load: (load["busy"], load["others_cores"] / max(1, load["cores"])))


def before_start(wanted_cores: int, seconds: float = PRECHECK_S) -> str | None:
    """A warning line when the machine is already busy, from a look of `seconds` before a run
    starts (nothing of the run is running yet: every busy core is another process's); else None.
    DDPBENCH_BUSY_WARNING=off leaves it out (a test suite, whose neighbours are expected)."""
    if os.environ.get(BUSY_WARNING_ENV, "on").strip().lower() == "off":
        return None
    first = sample(None)
    if first is None:
        return None
    time.sleep(seconds)
    last = sample(None)
    load = cores_over(first, last, wanted_cores)
    others, cores = load["busy_cores"], load["cores"]
    if others >= IGNORED_CORES and cores - others < wanted_cores:
        return (
            f"warning: the machine is busy: other processes use {others:.2f} of {cores} cores, and this run "
            f"wants {wanted_cores}; its figures will be slower than this machine can give and its record says so"
        )
    return None
