"""Which runs' processes ran at another speed than the rest of their sweep, from each process's own
probe (`ddpbench.worker.probe`: fixed matrix products and a memory copy at the run's thread count,
before the warm-up and after the window). No torch.

On a shared machine the same configuration can run at two speeds from one process to the next,
with nothing else running (five repeats of one `local` run here: 9,064, 5,015, 4,908, 4,859 and
9,193 samples/s). E(N) and a gate comparison divide two processes' throughputs, so such a flip
reads as a scaling result or a regression. The probe sees it: the same fixed work, timed inside
each process.

A run's probe speed is its slowest process's (the slowest rank sets the pace), the geometric mean
of its before and after readings, per kind of work. Where the kernel counted the probe's waiting
for a core, that waiting is taken out (`on_core`): a run the scheduler shows unharmed is not flagged
for a moment of contention its probe alone met. But where the process's timed steps were held back
too, by other processes beyond noise or by its CPU quota (`ddpbench.analysis.cpu_denied`), the
probe's reading stands as it came: the steps met the same denial, and the run's X is not the
machine's. (Its own job's waiting, two ranks and their threads on few cores, decides nothing.) It is
compared with every process of the
sweep's other runs on the same device kind and thread count, whatever their strategy or world size
(the memory copy only with processes that shared their host alike, since ranks probe at once):
a run is flagged when its speed lies further from their median than FLAG_FACTOR times their spread
and more than MIN_RATIO away. (A sweep of `local` and `ddp` alone has three other processes to
compare its `local` run with; comparing runs only with runs like them left it none.)
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

from ddpbench.analysis.configurations import is_measured
from ddpbench.analysis.cpu_denied import rank_cpu
from ddpbench.config.workloads import short_workload_name
from ddpbench.records.schema import Record

KINDS = ("matmul_gflops", "copy_gbps")
KIND_WORDS = {"matmul_gflops": "matrix products", "copy_gbps": "memory copy"}
MIN_RATIO = 1.5
"""A run must be at least this many times slower or faster than the others to be flagged. On a
quiet CPU suite here (20 runs, 2026-12-02) healthy processes' probes, the mean of their two
readings, spread up to 1.4x from the median of their kind; a process limited to half a core reads
about 2x, and the speed flips this VM shows between processes are 1.8-2x."""
FLAG_FACTOR = 3.0
"""... and further from them than this many times their spread (1.4826 MAD, in log)."""


def on_core(reading, kind: str) -> float:
    """A reading's rate on a core: where the kernel counted the probing thread's waiting for a core
    (`waited_s`), the rate as if the probe had not waited. A probe that waited measured the moment's
    contention, which the window's own counters judge (`ddpbench.analysis.cpu_denied`), not how fast
    the process runs on a core: a slower core, a flip of the VM's speed, stays in full."""
    rate = getattr(reading, kind)
    waited = reading.waited_s
    if waited is None or reading.seconds <= 0:
        return rate
    return rate * reading.seconds / max(reading.seconds - waited, 0.05 * reading.seconds)


def process_speeds(record: Record) -> list[dict[str, float]]:
    """Per process, per kind of work, the geometric mean of its readings before the warm-up and after
    the window (one reading moved up to 1.9x within a process on a quiet sweep here; the mean of the
    two halves that), each on a core (`on_core`) unless the process's window waited beyond noise."""
    found = []
    for rank in record.ranks:
        readings = [r for r in ((rank.probe.before, rank.probe.after) if rank.probe else ()) if r is not None]
        if not readings:
            continue
        cpu = rank_cpu(record, rank)
        # Other processes' share of its waiting, or its quota, beyond noise: the steps met it too. Its
        # own job's waiting (two ranks and their threads on few cores) does not decide this.
        window_waited = cpu is not None and (cpu.harmed_by_others or cpu.throttled)
        speed = (lambda r, kind: getattr(r, kind)) if window_waited else on_core
        found.append({kind: math.exp(statistics.fmean(math.log(speed(r, kind)) for r in readings)) for kind in KINDS})
    return found


def run_speed(record: Record) -> dict[str, float] | None:
    """Per kind of work, the run's slowest process's speed (the slowest rank sets the pace); None
    without probes."""
    found = process_speeds(record)
    return {kind: min(process[kind] for process in found) for kind in KINDS} if found else None


def run_label(record: Record) -> str:
    spec = record.spec
    if spec.strategy == "local":
        return f"the local run of {short_workload_name(spec.workload)}"
    return f"{short_workload_name(spec.workload)} {spec.strategy_name} x{spec.world_size}"


@dataclass(frozen=True)
class ProbeFlag:
    run_id: str
    label: str
    kind: str
    ratio: float
    """The others' median speed over this run's: above 1, this run's processes ran slower."""
    strategy: str

    def sentence(self) -> str:
        slower = self.ratio > 1
        factor = self.ratio if slower else 1 / self.ratio
        what = (
            "its X(1) is the machine's, not the workload's"
            if self.strategy == "local"
            else ("its throughput, and any ratio with it, is the machine's, not the workload's")
        )
        return (
            f"{self.label}'s process ran {factor:.1f}x {'slower' if slower else 'faster'} on the speed check "
            f"({KIND_WORDS[self.kind]}) than the sweep's other runs: {what}"
        )


def _group(record: Record) -> tuple:
    """Processes whose probes compare: the same device kind and threads per process."""
    return record.spec.device, record.spec.threads_per_rank


def _per_host(record: Record) -> int:
    return record.spec.nproc if record.spec.launched_by_torchrun else 1


def _peers(other: Record, record: Record, kind: str) -> bool:
    """Whether `other`'s processes are a fair comparison for `record`'s on this kind of work: the
    same device kind and threads; for the memory copy also as many processes per host, which probe at
    the same moment and share its memory bandwidth (two at once read up to 1.3x slower here)."""
    if _group(other) != _group(record):
        return False
    return kind != "copy_gbps" or _per_host(other) == _per_host(record)


def probe_flags(records: list[Record]) -> list[ProbeFlag]:
    """The ok runs whose slowest process ran further from every other process of the sweep (of the
    same device kind and threads) than their spread allows: whatever else the sweep holds, a run is
    compared with all the other runs' processes, not only with runs like it."""
    speeds = {
        record.run_id: (record, process_speeds(record), speed)
        for record in records
        if is_measured(record)  # the runs every view keeps: the gate's and the table's flags agree
        if (speed := run_speed(record))
    }
    flags = []
    for run_id, (record, _, speed) in speeds.items():
        worst = None
        for kind in KINDS:
            others = [
                process[kind]
                for other_id, (other, processes, _) in speeds.items()
                if other_id != run_id and _peers(other, record, kind)
                for process in processes
            ]
            if len(others) < 2:
                continue  # one other process cannot say which of the two is off
            logs = [math.log(value) for value in others]
            middle = statistics.median(logs)
            spread = 1.4826 * statistics.median(abs(value - middle) for value in logs)
            distance = middle - math.log(speed[kind])
            if abs(distance) > max(math.log(MIN_RATIO), FLAG_FACTOR * spread):
                if worst is None or abs(distance) > abs(worst[1]):
                    worst = (kind, distance)
        if worst is not None:
            kind, distance = worst
            flags.append(ProbeFlag(run_id, run_label(record), kind, math.exp(distance), record.spec.strategy))
    return sorted(flags, key=lambda flag: flag.run_id)


def probe_seconds(record: Record) -> float | None:
    """What the probes cost the run: the slowest process's two probes, seconds."""
    found = [
        sum(reading.seconds for reading in (rank.probe.before, rank.probe.after) if reading is not None)
        for rank in record.ranks
        if rank.probe is not None
    ]
    return max(found) if found else None
