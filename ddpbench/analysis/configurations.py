"""What a configuration is, which runs count, which runs are its X(1), and E(N) pooled over a
configuration's runs. No torch.

A configuration is everything that defines what a run measures, one identity for every view
(`config.identity`). Its runs (a sweep's repeats) are samples of the same thing, in separate
processes at separate times. A run counts (`is_measured`) where it ended ok, with metrics, and
failed no correctness check: a run whose gradients were not averaged measured something else. The
table, explain, the report, the speed check, the gate and the history keep the same runs.

X(1), one rule for every view (`reference_identity`, docs/concepts.md): a workload's `local` runs of
the same configuration but for the strategy, world size, nodes and DDP options, with the batch of
one device and the threads of one device, in the same compile mode (a compiled configuration's X(1)
is the compiled local runs, so that E(N) measures what scaling costs the compiled model, not what
compiling gains; DataParallel, never compiled, divides by the eager ones). A script has no run
without DDP: its X(1) is its DDP runs at world size 1 with the same DDP options (a DDP x1 step holds
DDP's own hooks and bucket copies, which the options change).

One run's E(N) (`efficiency_against`, what explain --detail shows per run and the history stores)
divides its X by N times the pooled X(1): the mean of the kept reference runs of every round, as
the table prints it. A configuration's E(N) is the ratio of its pooled X to that X(1)
(`answers.pooled_efficiency`), so it reproduces the X printed beside it and is the mean of its
runs' E(N): one rule for every view.
"""

from __future__ import annotations

import math
import statistics

from ddpbench.analysis.estimates import Estimate, standard_error
from ddpbench.analysis.registry import record_iteration_times_s
from ddpbench.config.identity import identity, identity_key
from ddpbench.config.spec import RunSpec, compile_fits, strategy_name
from ddpbench.config.workloads import SCRIPT_PREFIX
from ddpbench.records.schema import Record

SCRIPT_REFERENCE = "X(1) is the script's DDP run at world size 1 (a script has no run without DDP)"


def threads_per_device(spec: RunSpec) -> int | None:
    """DataParallel's one process drives N devices with N slices of cores."""
    threads = spec.threads_per_rank
    return threads // spec.nproc if threads and spec.strategy == "dp" else threads


def reference_batch(spec: RunSpec) -> int | None:
    """The batch of the run that is this run's X(1): the per-device batch (weak scaling), or the
    global batch (strong scaling: one device takes it all)."""
    if spec.batch_size is None:
        return None
    return spec.batch_size if spec.scaling == "weak" else spec.batch_size * spec.world_size


def sample_unit(record: Record) -> str | None:
    """What the run's throughput counts, as its record says; None where it measured nothing."""
    return record.metrics.sample_unit if record.metrics is not None else None


def record_identity(record: Record) -> dict[str, object]:
    """A run's configuration (`config.identity`), with the unit its throughput counts."""
    return identity(record.spec, sample_unit(record))


def configuration_key(record: Record) -> tuple:
    """The configuration's identity (`config.identity`) as a key: its runs are repeats of each other."""
    return identity_key(record.spec, sample_unit(record))


def is_script(workload: str) -> bool:
    return str(workload).startswith(SCRIPT_PREFIX)


def is_measured(record: Record) -> bool:
    """Whether a run counts in a configuration's figures, the same in every view: it ended ok, has
    metrics and failed no correctness check."""
    return record.status == "ok" and record.metrics is not None and not record.failed_checks()


def why_not_measured(record: Record) -> str:
    """Why a run is left out of the figures, in words."""
    if record.status != "ok":
        message = record.error.message if record.error else ""
        return f"status {record.status}" + (f": {message}" if message else "")
    if record.failed_checks():
        return "failed correctness check: " + ", ".join(record.failed_checks())
    return "no metrics"


def is_reference(spec: RunSpec) -> bool:
    """X(1): a workload's local run; a script's DDP run at world size 1."""
    if is_script(spec.workload):
        return spec.strategy == "ddp" and spec.world_size == 1
    return spec.strategy == "local"


def reference_identity(record: Record) -> dict[str, object]:
    """The configuration identity (`config.identity`) of the runs that are this run's X(1): see the
    module's docstring. They count in the same unit; none steps the in-process ablation."""
    spec = record.spec
    found = record_identity(record)
    found.update(
        ablation=False,
        world_size=1,
        nnodes=1,
        batch_size=reference_batch(spec),
        threads_per_rank=threads_per_device(spec),
    )
    if spec.script is None:
        mode = spec.compile if compile_fits("local", spec.compile) else "off"
        found.update(strategy=strategy_name("local", mode), ddp=None)
    return found


def reference_name(record: Record) -> str:
    """What the table calls the run X(1) is: `local`, `local+compile`, `DDP x1`."""
    if is_script(record.spec.workload):
        return "DDP x1"
    return str(reference_identity(record)["strategy"])


def reference_runs(record: Record, records: list[tuple[str, Record]]) -> tuple[list[Record], str]:
    """The sweep's measured runs that are X(1) for one run (`reference_identity`); an empty list
    with the reason without one."""
    spec = record.spec
    wanted = reference_identity(record)
    batch = wanted["batch_size"]
    unbatched = {**wanted, "batch_size": None}
    found, near = [], []
    for _, other in records:
        if not is_measured(other) or not is_reference(other.spec):
            continue
        theirs = record_identity(other)
        if theirs == wanted:
            found.append(other)
        elif {**theirs, "batch_size": None} == unbatched:
            near.append(other)
    script = is_script(spec.workload)
    kind = reference_name(record)
    if not found:
        options = " and the same DDP options" if script else ""
        threads = threads_per_device(spec)
        reason = f"no {kind} run with batch {batch} and {threads} thread(s) per device{options} in the sweep"
        others = sorted({other.spec.batch_size for other in near if other.spec.batch_size is not None})
        if script and others:
            # A script sweep has no local run to add: the batch itself differs.
            reason += (
                f": the script's DDP x1 run stepped {', '.join(map(str, others))} samples per device, so the "
                "script changes its per-device batch with the world size (it keeps its global batch, as nanoGPT "
                "does by dividing gradient accumulation): strong scaling, which weak-scaling efficiency does not "
                "cover"
            )
        return [], reason
    return found, f"X(1) of the sweep's {kind} run ({', '.join(run.run_id for run in found)})"


def kept_references(candidates: list[Record], flagged: set[str]) -> list[Record]:
    """The reference runs every run of a configuration is divided by: those of every round, less
    the runs the speed check flagged while others remain (`answers.kept_runs`' rule)."""
    usable = [run for run in candidates if run.metrics]
    return [run for run in usable if run.run_id not in flagged] or usable


def efficiency_against(record: Record, references: list[Record]) -> tuple[float | None, Estimate | None]:
    """(t(1), E(N) = t(1) / t(N) with its interval) against the reference runs given (their mean
    throughput, the pooled X(1)); (None, None) without one. One run's interval holds only its
    steps' spread and the reference's, not the spread from one run to the next."""
    found = [run for run in references if run.metrics]
    if not found or record.metrics is None:
        return None, None
    spec, units = record.spec, record.metrics.units_per_sample
    x1 = statistics.fmean(run.metrics.throughput_units_per_s for run in found)
    batch = reference_batch(spec) or 1
    reference_step = batch * units / x1
    step = batch * spec.world_size * units / record.metrics.throughput_units_per_s
    value = reference_step / step
    own = record_iteration_times_s(record)
    theirs = [t for run in found for t in record_iteration_times_s(run)]
    relative = [standard_error(t) / statistics.fmean(t) if t else math.inf for t in (own, theirs)]
    df = min(len(own), len(theirs)) - 1
    return reference_step, Estimate.combined(value, *(value * r for r in relative), df=df)
