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

from ddpbench.analysis import registry
from ddpbench.config.identity import canonical_path, canonical_workload, shown_workload
from ddpbench.host.repository import shown
from ddpbench.records.schema import Record

MEASURE_NAMES = ("throughput", "efficiency", "exposed_share")
MEASURE_LABELS = {
    "throughput": "throughput",
    "efficiency": "scaling efficiency",
    "exposed_share": "no_sync share (cross-check)",
}


LEGACY_KEY_LENGTH = 8
"""Keys of before the one identity: (workload as written, size, strategy, world size, batch,
precision, device, DDP options), without threads, scaling, data-loader workers, data folder, nodes
or a script's path and arguments. History series stored under them still match (`earlier_key_of`)."""
DEFAULTS = {"script": None, "nnodes": 1, "scaling": "weak", "num_workers": 0, "data_dir": None}
"""What a legacy key's runs are taken to have had (ddpbench's defaults: the options it lacked)."""
REST = (*DEFAULTS, "threads_per_rank", "sample_unit", "ablation")
"""The identity's fields a key holds as sorted JSON in its last part."""
PREVIOUS_REST = (*DEFAULTS, "threads_per_rank")
"""The last part's fields of before the sample unit, the ablation and the files' places were keyed."""


def _key(found: dict, rest_fields: tuple[str, ...] = REST) -> tuple:
    ddp = json.dumps(found["ddp"], sort_keys=True) if found["ddp"] else ""
    rest = {name: found[name] for name in rest_fields}
    return (
        found["workload"],
        found["size"],
        found["strategy"],
        found["world_size"],
        found["batch_size"],
        found["precision"],
        found["device"],
        ddp,
        json.dumps(rest, sort_keys=True),
    )


def run_key(record: Record) -> tuple:
    """What defines a configuration (`config.identity`, the table's and explain's too): runs with
    equal keys are repeats of each other. The first eight parts are the legacy key's, with a user's
    file where it is (`config.identity`); the last holds the rest of the identity as sorted JSON."""
    from ddpbench.analysis.configurations import record_identity

    return _key(record_identity(record))


def previous_key(record: Record, cwd: str | None = None) -> tuple:
    """The key this run's configuration had before its files were keyed by where they are, and its
    unit and ablation at all: a user's path relative to the folder the key was made from (`cwd`,
    default this one, where `history add` ran) where it lay inside it, else absolute."""
    from ddpbench.analysis.configurations import record_identity

    spec = record.spec
    found = record_identity(record)
    found["workload"] = canonical_workload(spec.workload, cwd)
    if spec.script is not None:
        found["script"] = [canonical_path(spec.script.path, cwd), *spec.script.args]
    found["data_dir"] = canonical_path(spec.data_dir, cwd) if spec.data_dir else None
    return _key(found, PREVIOUS_REST)


def legacy_matches(legacy: tuple, key: tuple) -> bool:
    """Whether a series stored under a legacy key is the configuration of `key`, a key in the
    previous form (`previous_key`): the same eight parts (its workload in canonical form) and
    ddpbench's defaults for what the legacy key lacked; any threads per rank (a machine class and
    suite ran one)."""
    if len(legacy) != LEGACY_KEY_LENGTH or len(key) != LEGACY_KEY_LENGTH + 1:
        return False
    rest = json.loads(key[-1])
    same = (canonical_workload(str(legacy[0])), *legacy[1:]) == tuple(key[:LEGACY_KEY_LENGTH])
    return same and all(rest.get(name) == value for name, value in DEFAULTS.items())


def earlier_key_of(record: Record):
    """Whether a history series stored under a key of an earlier ddpbench (the previous form, or the
    legacy eight parts) is this run's configuration, as a test of the stored key: history series
    follow the key as it changes. The run's previous key is worked out once."""
    previous = tuple(json.loads(json.dumps(list(previous_key(record)))))

    def matches(stored: tuple) -> bool:
        stored = tuple(json.loads(json.dumps(list(stored))))
        return stored == previous or legacy_matches(stored, previous)

    return matches


def describe(key: tuple) -> str:
    workload, size, strategy, world_size, batch, precision, device = key[:7]
    text = f"{shown_workload(str(workload))}/{size} {strategy} x{world_size} b{batch} {precision} {device}"
    if len(key) > LEGACY_KEY_LENGTH:
        # What else sets this configuration apart, where it is not ddpbench's default.
        rest = json.loads(key[-1])
        if rest.get("script") and len(rest["script"]) > 1:
            text += " args " + " ".join(rest["script"][1:])
        if rest.get("nnodes", 1) != 1:
            text += f" {rest['nnodes']} nodes"
        if rest.get("scaling", "weak") != "weak":
            text += f" {rest['scaling']} scaling"
        if rest.get("num_workers"):
            text += f" {rest['num_workers']} loader workers"
        if rest.get("data_dir"):
            text += f" data {shown(rest['data_dir'])}"
        if rest.get("ablation") is False and strategy == "ddp" and not rest.get("script"):
            text += " --no-profile"  # eager DDP of a workload has the in-process ablation but for this
    return text


def series_name(key: tuple) -> str:
    """A file name for a configuration's history: readable, and unique through a hash of the key."""
    parts = (shown_workload(str(key[0])), *key[1:7])
    readable = "-".join(str(part) for part in parts).replace("/", "_").replace(":", "_").replace(".py", "")
    digest = hashlib.sha1(json.dumps(list(key)).encode("utf-8")).hexdigest()[:8]
    return f"{readable}-{digest}"


def local_key(record: Record) -> tuple:
    """The key of the runs that are X(1) for this run, by the one rule every view divides by
    (`configurations.reference_identity`: a compiled configuration's compiled local runs, a script's
    DDP x1 runs with the same DDP options)."""
    from ddpbench.analysis.configurations import reference_identity

    return _key(reference_identity(record))


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


def reference_values(records: list[Record]) -> dict[tuple, list[float]]:
    """Per configuration that has an E(N), the throughput of the X(1) runs its per-run E values
    share as their denominator (the kept local runs, as `efficiencies` pools them). Every run's E
    of one side divides by the same pooled X(1), so the spread of those values holds none of
    X(1)'s noise: the comparison adds it from these (`compare.compare_values`)."""
    from ddpbench.analysis.answers import kept_runs
    from ddpbench.analysis.probes import probe_flags

    groups = group_by_key(records)
    flags = {flag.run_id for flag in probe_flags(records)}
    found: dict[tuple, list[float]] = {}
    for key, runs in groups.items():
        reference = local_key(runs[0])
        if key[2] != "local" and key[3] > 1 and reference in groups:
            kept = kept_runs([run for run in groups[reference] if throughput(run)], flags)
            found[key] = [throughput(run) for run in kept]
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
