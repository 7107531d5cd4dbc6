"""Which runs' processes ran at another speed than the rest of their sweep, from each process's own
probe (`ddpbench.worker.probe`: fixed matrix products and a memory copy at the run's thread count,
before the warm-up and after the window). No torch.

On a shared machine the same configuration can run at two speeds from one process to the next,
with nothing else running (five repeats of one `local` run here: 9,064, 5,015, 4,908, 4,859 and
9,193 samples/s). E(N) and a gate comparison divide two processes' throughputs, so such a flip
reads as a scaling result or a regression. The probe sees it: the same fixed work, timed inside
each process.

A run's probe speed is its slowest process's (the slowest rank sets the pace), the geometric mean
of its before and after readings, per kind of work. Runs are compared within a sweep, on the same device
kind and thread count: a run is flagged when its speed lies further from the median of the other
runs than FLAG_FACTOR times their spread and more than MIN_RATIO away.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

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


def run_speed(record: Record) -> dict[str, float] | None:
    """Per kind of work, the slowest process's speed: the geometric mean of its readings before the
    warm-up and after the window (one reading moved up to 1.9x within a process on a quiet sweep
    here; the mean of the two halves that); None without probes."""
    per_process = []
    for rank in record.ranks:
        readings = [r for r in ((rank.probe.before, rank.probe.after) if rank.probe else ()) if r is not None]
        if readings:
            per_process.append(
                {kind: math.exp(statistics.fmean(math.log(getattr(r, kind)) for r in readings)) for kind in KINDS}
            )
    if not per_process:
        return None
    return {kind: min(process[kind] for process in per_process) for kind in KINDS}


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
            f"{self.label}'s process ran {factor:.1f}x {'slower' if slower else 'faster'} on the probe "
            f"({KIND_WORDS[self.kind]}) than the sweep's other runs: {what}"
        )


def _group(record: Record) -> tuple:
    """Runs whose probes compare: the same device kind, threads per process and processes per host
    (the ranks of one host probe at the same moment and share its memory bandwidth)."""
    spec = record.spec
    return spec.device, spec.threads_per_rank, spec.nproc if spec.launched_by_torchrun else 1


def probe_flags(records: list[Record]) -> list[ProbeFlag]:
    """The ok runs whose probe ran further from the rest of their sweep than its noise allows."""
    speeds = {
        record.run_id: (record, speed) for record in records if record.status == "ok" if (speed := run_speed(record))
    }
    flags = []
    for run_id, (record, speed) in speeds.items():
        others = [
            s for other_id, (other, s) in speeds.items() if other_id != run_id and _group(other) == _group(record)
        ]
        if len(others) < 2:
            continue  # one other run cannot say which of the two is off
        worst = None
        for kind in KINDS:
            logs = [math.log(other[kind]) for other in others]
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
