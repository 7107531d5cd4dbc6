"""What the gate compares: one value per run for each measure, and which runs are the same
configuration. No torch.

Measures (each one number per run, the numbers users read):
- throughput: global samples (or tokens) in the timed window / its wall time, i.e. the mean step,
  so a stall in one step out of ten counts;
- efficiency: per run, its X(N) over N times X(1), with X(1) the answers model's (the mean of the
  sweep's local runs the speed check did not flag), so the mean of a configuration's values is the
  E(N) the table and explain show; runs the speed check flagged have none, as they enter no E(N)
  there;
- exposed_share: a cross-check, not the report's exposed communication: the share of a DDP step
  beyond the same steps under no_sync() (it holds bucket copies and waits too), from the replay of
  the rank exposing most: exposed / step time. Compared as -log(1 - share), the log of how much
  faster the step would be without it, so "10 % worse" means the same thing as for throughput.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable
from dataclasses import asdict

from ddpbench.analysis import registry
from ddpbench.records.schema import Record

MEASURE_NAMES = ("throughput", "efficiency", "exposed_share")
MEASURE_LABELS = {
    "throughput": "throughput",
    "efficiency": "scaling efficiency",
    "exposed_share": "no_sync share (cross-check)",
}


def run_key(record: Record) -> tuple:
    """What defines a configuration: runs with equal keys are repeats of each other."""
    spec = record.spec
    ddp = json.dumps(asdict(spec.ddp), sort_keys=True) if spec.uses_ddp_knobs else ""
    # Compiled runs are series of their own (`ddp+compile`); eager ones keep the plain name.
    name = spec.strategy_name
    return (spec.workload, spec.size, name, spec.world_size, spec.batch_size, spec.precision, spec.device, ddp)


def describe(key: tuple) -> str:
    workload, size, strategy, world_size, batch, precision, device, ddp = key
    return f"{workload}/{size} {strategy} x{world_size} b{batch} {precision} {device}"


def series_name(key: tuple) -> str:
    """A file name for a configuration's history: readable, and unique through a hash of the key."""
    readable = "-".join(str(part) for part in key[:7]).replace("/", "_").replace(":", "_").replace(".py", "")
    digest = hashlib.sha1(json.dumps(list(key)).encode("utf-8")).hexdigest()[:8]
    return f"{readable}-{digest}"


def local_key(record: Record) -> tuple:
    """The key of the local run that is X(1) for this run: same workload, size, precision and
    device, with the per-device batch (weak scaling) or the global batch (strong scaling)."""
    workload, size, _, world_size, batch, precision, device, _ = run_key(record)
    if getattr(record.spec, "scaling", "weak") == "strong":
        batch = batch * world_size
    return (workload, size, "local", 1, batch, precision, device, "")


def throughput(record: Record) -> float | None:
    """The registry's throughput (the one definition the tables and the report show)."""
    value = registry.metric("throughput").read(record)
    return value if value and value > 0 else None


def exposed_share(record: Record) -> float | None:
    """Exposed communication / step time of the rank exposing most (no_sync replay); None without one."""
    view = record.overlap.no_sync if record.overlap else None
    if not view or not view.by_rank:
        return None
    worst = max(view.by_rank, key=lambda rank: rank.exposed_comm_s)
    if not worst.step_time_median_s > 0:
        return None
    return min(worst.exposed_comm_s / worst.step_time_median_s, 0.99)


def to_log(measure: str, value: float) -> float:
    """The scale the statistics work on; higher is better on it for every measure."""
    if measure == "exposed_share":
        return math.log(1 - value)  # = -(-log(1 - share)): less exposed communication is higher
    return math.log(value)


def from_log(measure: str, log_value: float) -> float:
    return 1 - math.exp(log_value) if measure == "exposed_share" else math.exp(log_value)


def by_start(records: list[Record]) -> list[Record]:
    """Runs in the order they started: the order every per-run list of values is kept in."""
    return sorted(records, key=lambda r: (r.started_at or r.ended_at or "", r.run_id))


def efficiencies(runs: list[Record], local_runs: list[Record], flags=frozenset()) -> list[float | None]:
    """Per run (in the order given), X(N) / (N X(1)) with X(1) pooled over the kept local runs
    (`answers.pooled_throughput`); None for a run the speed check flagged (while others remain) or
    without a throughput."""
    from ddpbench.analysis.answers import kept_runs, pooled_throughput

    reference = pooled_throughput([run for run in local_runs if throughput(run)], flags)
    if reference is None:
        return [None for _ in runs]
    kept = {run.run_id for run in kept_runs(runs, flags)}
    world_size = runs[0].spec.world_size
    found = []
    for run in runs:
        x = throughput(run)
        found.append(x / (world_size * reference.value) if x and run.run_id in kept else None)
    return found


def group_by_key(records: list[Record]) -> dict[tuple, list[Record]]:
    groups: dict[tuple, list[Record]] = {}
    for record in records:
        groups.setdefault(run_key(record), []).append(record)
    return groups


def side_values(records: list[Record]) -> dict[tuple, dict[str, list[float]]]:
    """Per configuration and measure, the per-run values (natural scale) of one side's ok runs.
    Measures that do not apply (efficiency of a local run, exposed share without replay) are absent."""
    from ddpbench.analysis.probes import probe_flags

    groups = group_by_key(records)
    flags = {flag.run_id for flag in probe_flags(records)}
    values: dict[tuple, dict[str, list[float]]] = {}
    readers: dict[str, Callable[[Record], float | None]] = {"throughput": throughput, "exposed_share": exposed_share}
    for key, runs in groups.items():
        found: dict[str, list[float]] = {}
        for measure, read in readers.items():
            if measure == "exposed_share" and not (key[2] == "ddp" and key[3] >= 2):
                continue  # one rank has nobody to communicate with
            measured = [v for v in (read(r) for r in runs) if v is not None]
            if measured:
                found[measure] = measured
        reference = local_key(runs[0])
        if key[2] != "local" and key[3] > 1 and reference in groups:
            measured = [value for value in efficiencies(by_start(runs), groups[reference], flags) if value is not None]
            if measured:
                found["efficiency"] = measured
        values[key] = found
    return values
