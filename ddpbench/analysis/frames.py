"""Records -> pandas DataFrames, and the scaling table. No torch: results can be studied anywhere.

Definitions (also in the README):
- X(N): throughput at world size N, in the workload's unit per second.
- speedup S(N) = X(N) / X(1), where X(1) is the `local` run (one device, no wrapper).
- scaling efficiency E(N) = X(N) / (N * X(1)). With weak scaling (the default) every device keeps
  its batch; with strong scaling the global batch is fixed and split over the devices.
"""

from __future__ import annotations

import dataclasses
import json
import warnings

import numpy as np
import pandas as pd

from ddpbench.analysis import registry
from ddpbench.analysis.labels import strategy_label
from ddpbench.analysis.ladder import in_run_efficiency
from ddpbench.analysis.probes import probe_flags
from ddpbench.config.spec import TORCHRUN_STRATEGIES, strategy_order
from ddpbench.config.workloads import SCRIPT_PREFIX, short_workload_name
from ddpbench.records.schema import Record
from ddpbench.records.sidecar import step_time_matrix
from ddpbench.records.store import read_records

# What defines a run, beside its metrics: the columns every runs frame has.
RUN_COLUMNS = [
    "run_id",
    "status",
    "workload",
    "size",
    "strategy",
    "strategy_label",
    "world_size",
    "device",
    "precision",
    "scaling",
    "batch_size",
    "global_batch",
    "threads_per_rank",
    "threads_per_device",
    "ddp_options",
    "sample_unit",
    "timed_steps",
    "checks_failed",
    "checks_not_decided",
    "error",
    "started_at",
    "ended_at",
    "launch_wall_s",
    "oversubscribed",
    "busy",
    "peak_memory_kind",
    "in_run_efficiency",
    "in_run_efficiency_half",
    "path",
]
# Runs that differ in any of these are never combined into one row, and X(1) must match them.
CONFIGURATION = ["workload", "size", "precision", "device", "scaling", "threads_per_device"]


def runs_columns() -> list[str]:
    return RUN_COLUMNS + [metric.name for metric in registry.METRICS]


def record_row(record: Record, path: str | None = None) -> dict:
    spec, metrics = record.spec, record.metrics
    in_run = in_run_efficiency(record) if spec.strategy == "ddp" else None
    batch = spec.batch_size
    threads = spec.threads_per_rank
    row = {
        "run_id": record.run_id,
        "status": record.status,
        # a script keeps its `script:` prefix in tables: its X(1) is its DDP x1 run, not a local one
        "workload": spec.workload if spec.script else short_workload_name(spec.workload),
        "size": spec.size,
        # compiled runs are strategies of their own in every table: `ddp+compile`
        "strategy": spec.strategy_name,
        "strategy_label": strategy_label(spec),
        "world_size": spec.world_size,
        "device": spec.device,
        "precision": spec.precision,
        "scaling": spec.scaling,
        "batch_size": batch,
        "global_batch": batch * spec.world_size if batch else None,
        "threads_per_rank": threads,
        # DataParallel's one process drives N devices with N slices of cores.
        "threads_per_device": threads // spec.nproc if threads and spec.strategy == "dp" else threads,
        "ddp_options": json.dumps(dataclasses.asdict(spec.ddp), sort_keys=True) if spec.uses_ddp_knobs else "",
        "sample_unit": metrics.sample_unit if metrics else None,
        "timed_steps": metrics.timed_steps if metrics else None,
        "checks_failed": ",".join(record.failed_checks()),
        "checks_not_decided": ",".join(name for name, check in record.checks.items() if check.ok is None),
        "error": record.error.message if record.error else None,
        "started_at": record.started_at,
        "ended_at": record.ended_at,
        "launch_wall_s": record.launch.wall_s if record.launch else None,
        # More threads than usable cores: the point measures time-sharing, not scaling.
        "oversubscribed": record.oversubscribed is not None,
        # Other processes took cores (or GPUs) the run wanted during its window: slower than the
        # machine can give, whatever the code does.
        "busy": bool(record.machine_load and record.machine_load.busy),
        # what the memory peaks measure: CUDA memory allocated, or the process's resident set
        "peak_memory_kind": next((rank.peak_memory_kind for rank in record.ranks if rank.peak_memory_kind), None),
        # A rank alone and unwrapped against full DDP in the run's own processes (the ladder), and
        # the half-width of its 95 % interval: the efficiency no other process's speed can move.
        "in_run_efficiency": in_run[0] if in_run else None,
        "in_run_efficiency_half": in_run[1] if in_run else None,
        "path": path,
    }
    row.update({metric.name: metric.read(record) if metrics else None for metric in registry.METRICS})
    return row


def load(sweep_dir: str) -> pd.DataFrame:
    """One row per run record of a sweep folder. Unreadable files are skipped with a warning
    naming them, and listed in `frame.attrs["unreadable"]`."""
    records, unreadable = read_records(sweep_dir)
    for path, reason in unreadable:
        warnings.warn(f"skipped unreadable record {path}: {reason}", stacklevel=2)
    frame = runs_frame(records)
    frame.attrs["unreadable"] = unreadable
    return frame


def runs_frame(records: list[tuple[str, Record]]) -> pd.DataFrame:
    frame = pd.DataFrame([record_row(record, path) for path, record in records], columns=runs_columns())
    # Runs whose processes ran at another speed than the sweep's others on the fixed probe: the
    # sentence that says so, or empty.
    flags = {flag.run_id: flag.sentence() for flag in probe_flags([record for _, record in records])}
    frame["probe_flag"] = [flags.get(run_id, "") for run_id in frame["run_id"]]
    return frame


def _reference_batch(row: pd.Series) -> float:
    """The local run that is this row's X(1) has the per-device batch (weak scaling) or the
    global batch (strong scaling: one device takes it all)."""
    return row["batch_size"] if row["scaling"] == "weak" else row["global_batch"]


SCRIPT_REFERENCE = "X(1) is the script's DDP run at world size 1 (a script has no run without DDP)"


def is_script(workload: str) -> bool:
    return str(workload).startswith(SCRIPT_PREFIX)


def is_reference(rows: pd.DataFrame) -> pd.Series:
    """The rows that are X(1): a workload's local run; a script's DDP run at world size 1."""
    scripts = rows["workload"].astype(str).str.startswith(SCRIPT_PREFIX)
    ddp_one = (rows["strategy"] == "ddp") & (rows["world_size"] == 1)
    return (~scripts & (rows["strategy"] == "local")) | (scripts & ddp_one)


def is_reference_row(row: dict) -> bool:
    if is_script(row["workload"]):
        return row["strategy"] == "ddp" and row["world_size"] == 1
    return row["strategy"] == "local"


def reference_runs(record: Record, records: list[tuple[str, Record]]) -> tuple[list[Record], str]:
    """The sweep's ok `local` runs that are X(1) for one run, as the scaling table matches them
    (same configuration and reference batch); an empty list with the reason without one."""
    row = record_row(record)
    batch = _reference_batch(row)
    found = []
    for _, other in records:
        candidate = record_row(other)
        if (
            other.status == "ok"
            and is_reference_row(candidate)
            and candidate["batch_size"] == batch
            and all(candidate[column] == row[column] for column in CONFIGURATION)
        ):
            found.append(other)
    if not found:
        reason = (
            f"no {'DDP x1' if is_script(row['workload']) else 'local'} run with batch {batch:.0f} and "
            f"{row['threads_per_device']} thread(s) per device in the sweep"
        )
        if is_script(row["workload"]):
            others = sorted(
                {
                    record_row(other)["batch_size"]
                    for _, other in records
                    if other.status == "ok"
                    and is_reference_row(record_row(other))
                    and all(record_row(other)[column] == row[column] for column in CONFIGURATION)
                }
            )
            if others:
                # A script sweep has no local run to add: the batch itself differs.
                reason += (
                    f": the script's DDP x1 run stepped {', '.join(f'{b:.0f}' for b in others)} samples per "
                    "device, so the script changes its per-device batch with the world size (it keeps its "
                    "global batch, as nanoGPT does by dividing gradient accumulation): strong scaling, "
                    "which weak-scaling efficiency does not cover"
                )
        return [], reason
    kind = "DDP x1" if is_script(row["workload"]) else "local"
    return found, f"X(1) of the sweep's {kind} run ({', '.join(run.run_id for run in found)})"


def reference_throughput(record: Record, records: list[tuple[str, Record]]) -> tuple[float | None, str]:
    """X(1) for one run, as the scaling table takes it: the median throughput of its reference
    runs (`reference_runs`). None, with the reason, without one."""
    found, basis = reference_runs(record, records)
    values = [run.metrics.throughput_units_per_s for run in found if run.metrics]
    return (float(np.median(values)) if values else None), basis


def scaling_table(runs: pd.DataFrame) -> pd.DataFrame:
    """One row per configuration, strategy and world size (ok runs only): the table's metrics,
    speedup and efficiency against X(1), the local run of the same configuration. Runs that differ
    in size, precision, device, batch, threads per device, scaling mode or DDP options are never
    combined; a configuration run several times (--repeat) counts with the median of its runs.
    Without a matching local run, speedup and efficiency stay empty and `reference` says why."""
    numeric = [metric.name for metric in registry.METRICS if metric.in_scaling_table]
    keys = CONFIGURATION + ["strategy", "world_size", "batch_size", "global_batch", "ddp_options"]
    columns = [
        "workload",
        "strategy",
        "strategy_label",
        "world_size",
        "batch_size",
        "global_batch",
        "size",
        "precision",
        "scaling",
        "threads_per_device",
        "sample_unit",
        *numeric,
        "speedup",
        "efficiency",
        "in_run_efficiency",
        "in_run_efficiency_half",
        "runs",
        "reference",
        "oversubscribed",
        "busy",
    ]
    ok = runs[runs["status"] == "ok"]
    if ok.empty:
        return pd.DataFrame(columns=columns)
    grouped = ok.groupby(keys, as_index=False, dropna=False).agg(
        **{name: (name, "median") for name in numeric},
        in_run_efficiency=("in_run_efficiency", "median"),
        in_run_efficiency_half=("in_run_efficiency_half", "median"),
        strategy_label=("strategy_label", "first"),
        sample_unit=("sample_unit", "first"),
        runs=("run_id", "count"),
        oversubscribed=("oversubscribed", "any"),
        busy=("busy", "any"),
    )
    local = grouped[is_reference(grouped)].set_index(CONFIGURATION + ["batch_size"])["throughput"]
    local = local[~local.index.duplicated()]
    references, notes = [], []
    for _, row in grouped.iterrows():
        key = tuple(row[c] for c in CONFIGURATION) + (_reference_batch(row),)
        found = local.get(key) if key in local.index else None
        references.append(found)
        notes.append(
            (SCRIPT_REFERENCE if is_script(row["workload"]) else "")
            if found is not None
            else f"no {'DDP x1' if is_script(row['workload']) else 'local'} run with batch "
            f"{_reference_batch(row):.0f} and {row['threads_per_device']} thread(s) per device"
        )
    table = grouped.assign(reference=notes)
    table["speedup"] = table["throughput"] / pd.Series(references, index=table.index, dtype=float)
    table["efficiency"] = table["speedup"] / table["world_size"]
    table = table.sort_values(
        ["workload", "size", "precision", "batch_size", "world_size", "strategy"],
        key=lambda c: c.map(strategy_order) if c.name == "strategy" else c,
    )
    return table[columns].reset_index(drop=True)


def configuration_label(table: pd.DataFrame) -> pd.Series:
    """Words for what else defines a row (its X(1) must match them): size, precision, the batch
    that stays fixed (per device for weak scaling, global for strong) and the thread slice."""
    batch = table.apply(
        lambda row: f"batch {row['batch_size']:.0f}/device"
        if row["scaling"] == "weak"
        else f"global batch {row['global_batch']:.0f}",
        axis=1,
    )
    return (
        table["size"].astype(str)
        + " "
        + table["precision"].astype(str)
        + ", "
        + batch
        + ", "
        + table["threads_per_device"].astype(str)
        + " thread(s)/device"
    )


def side_by_side(table: pd.DataFrame) -> pd.DataFrame:
    """The scaling table with DDP and DataParallel next to each other, one row per workload and
    world size: what a person reads at the end of a sweep. Where one workload was run in more
    than one configuration, each configuration gets its own rows."""
    if table.empty:
        return table
    table = table.assign(configuration=configuration_label(table))
    mixed = table.groupby("workload")["configuration"].nunique().max() > 1
    index = ["workload", "configuration", "world_size"] if mixed else ["workload", "world_size"]
    wide = table.pivot_table(
        index=index, columns="strategy", values=["throughput", "efficiency"], aggfunc="first", dropna=False
    )
    wide.columns = [f"{strategy} {'X' if metric == 'throughput' else 'E'}" for metric, strategy in wide.columns]
    names = sorted(table["strategy"].unique(), key=strategy_order)
    ordered = [c for s in names for c in (f"{s} X", f"{s} E") if c in wide.columns]
    wide = wide[ordered].dropna(how="all")
    measured = table[table["in_run_efficiency"].notna()]
    for strategy in sorted(measured["strategy"].unique(), key=strategy_order):
        # Beside E(N), which divides two processes' throughputs, the ladder's in-run efficiency.
        rows = measured[measured["strategy"] == strategy].set_index(index)
        cells = {
            point: _with_half(row["in_run_efficiency"], row["in_run_efficiency_half"]) for point, row in rows.iterrows()
        }
        wide.insert(
            list(wide.columns).index(f"{strategy} E") + 1,
            f"{strategy} E in-run",
            [cells.get(p, "") for p in wide.index],
        )
    units = table.groupby("workload")["sample_unit"].first()
    wide.insert(0, "unit", [f"{units[key[0]]}/s" for key in wide.index])
    if table["oversubscribed"].any():
        marked = table[table["oversubscribed"]].groupby(index)["strategy"].agg(",".join)
        wide["oversubscribed"] = [marked.get(point, "") for point in wide.index]
    if table["busy"].any():
        marked = table[table["busy"]].groupby(index)["strategy"].agg(",".join)
        wide["busy"] = [marked.get(point, "") for point in wide.index]
    return wide


def _with_half(value: float, half: float | None) -> str:
    return f"{value:.1%}" if half is None or half != half else f"{value:.1%}±{100 * half:.1f}"


def format_side_by_side(table: pd.DataFrame) -> str:
    wide = side_by_side(table)
    if wide.empty:
        return "(no successful runs to tabulate)"
    formatters = {c: "{:6.1%}".format for c in wide.columns if c.endswith(" E")}
    formatters.update({c: "{:,.1f}".format for c in wide.columns if c.endswith(" X")})
    scripts = table["workload"].astype(str).str.startswith(SCRIPT_PREFIX)
    against = (
        "DDP x1 (a script's reference)"
        if scripts.all()
        else "local"
        if not scripts.any()
        else ("local (a script's: DDP x1)")
    )
    note = f"X = throughput, E = efficiency X(N) / (N * X(1)) against {against}."
    if any(column.endswith(" E in-run") for column in wide.columns):
        note += (
            " E in-run = a rank alone and unwrapped against full DDP inside the run's own processes (the ladder), "
            "± its 95 % interval: no other process's speed moves it."
        )
    if (table["strategy_label"].str.startswith("DataParallel on CPU")).any():
        note += " dp on CPU = one process with N x the threads: nothing is replicated."
    if "oversubscribed" in wide:
        note += (
            "\noversubscribed: those strategies ran more threads than usable cores;"
            " their X and E describe time-sharing, not scaling."
        )
    if "busy" in wide:
        note += (
            "\nbusy: other processes took cores or GPUs those strategies' runs wanted while they measured"
            " (the records' machine_load); their X and E are slower than this machine can give."
        )
    return wide.to_string(formatters=formatters, na_rep="") + "\n" + note


MEMORY_COLUMNS = {
    "peak_memory_bytes": "timed peak",
    "warmup_peak_memory_bytes": "warm-up peak",
    "compile_peak_memory_bytes": "compile peak",
    "model_state_bytes": "model state",
}


def memory_table(table: pd.DataFrame) -> pd.DataFrame:
    """Memory per rank, one row per workload, world size and strategy of the scaling table: each
    phase's peak and the model state in MiB, and two changes, each against a like run at the same
    world size and batch: "vs eager", a compiled strategy against the same strategy uncompiled
    (what compiling added: fsdp2+compile against fsdp2), and "vs DDP", any strategy against eager
    DDP (what the strategy and compiling added together: fsdp2+compile's includes fsdp2's own)."""
    rows = table[table["world_size"].notna()].copy()
    if rows.empty or rows["peak_memory_bytes"].isna().all():
        return pd.DataFrame()
    keys = [c for c in CONFIGURATION if c in rows.columns] + ["world_size", "batch_size"]
    compared = {"peak_memory_bytes": "timed peak", "model_state_bytes": "model state"}
    rows["eager"] = rows["strategy"].astype(str).str.partition("+")[0]
    eager = rows[rows["strategy"] == rows["eager"]][keys + ["strategy", *compared]].drop_duplicates(keys + ["strategy"])
    eager = eager.rename(columns={"strategy": "eager", **{c: f"{c} of eager" for c in compared}})
    ddp = rows[rows["strategy"] == "ddp"][keys + list(compared)].drop_duplicates(keys)
    ddp = ddp.rename(columns={c: f"{c} of ddp" for c in compared})
    rows = rows.merge(eager, on=keys + ["eager"], how="left").merge(ddp, on=keys, how="left")
    found = rows[["workload", "world_size", "strategy", "batch_size"]].copy()
    for column, heading in MEMORY_COLUMNS.items():
        found[f"{heading} MiB"] = rows[column] / 2**20
    compiled = rows["strategy"] != rows["eager"]
    for against, shown, applies in (("eager", "vs eager", compiled), ("ddp", "vs DDP", rows["strategy"] != "ddp")):
        for column, heading in compared.items():
            base = rows[f"{column} of {against}"].where(rows[f"{column} of {against}"] > 0)
            found[f"{heading} {shown}"] = (rows[column] / base - 1).where(applies)
    found = found.dropna(axis=1, how="all")
    return found.sort_values(
        ["workload", "world_size", "strategy"], key=lambda c: c.map(strategy_order) if c.name == "strategy" else c
    ).reset_index(drop=True)


MEMORY_CHANGES = ("vs eager", "vs DDP")
MEMORY_LEGEND = (
    "vs eager = a compiled strategy against the same strategy uncompiled (what compiling added); vs DDP = against "
    "eager DDP (what the strategy and compiling added together), both at the same world size and batch"
)
MODEL_STATE_LEGEND = (
    "model state = what the rank holds for training: parameters, gradients and optimizer state (its shards "
    "under fsdp2), DDP's gradient buckets (a second copy of the gradients without gradient_as_bucket_view), "
    "fsdp2's unsharded parameters and gradients at their peak in a step"
)


def change(value) -> str:
    """A relative change for a table: +13%, -50%, 0% (below half a percent), blank without one."""
    if value is None or value != value:
        return ""
    return "0%" if abs(value) < 0.005 else f"{value:+.0%}"


def format_memory(table: pd.DataFrame, kind: str | None) -> str:
    """The memory table for the terminal, with what its peaks measure; empty without figures."""
    found = memory_table(table)
    if found.empty:
        return ""
    formatters = {c: "{:,.0f}".format for c in found.columns if c.endswith(" MiB")}
    formatters.update({c: change for c in found.columns if c.endswith(MEMORY_CHANGES)})
    what = (
        "peaks are CUDA memory allocated"
        if kind == "cuda_max_memory_allocated"
        else "peaks are each process's resident set, torch and Python included: a small model's savings show in "
        "the model state more than in the peaks"
    )
    return f"memory per rank (largest rank; {what}; {MODEL_STATE_LEGEND}; {MEMORY_LEGEND}):\n" + found.to_string(
        index=False, formatters=formatters, na_rep=""
    )


def overlap_table(runs: pd.DataFrame) -> pd.DataFrame:
    """Runs launched by torchrun (ddp, fsdp2, replicate, compiled or not): overlap % from the traces
    and exposed communication per step, three ways (no_sync and the reducer for eager DDP only:
    the others leave them empty); the timed steps' iteration p50 and, beside it, the profiled
    steps' (the ones overlap and the trace's estimate come from, slowed by the profiler)."""
    base = runs["strategy"].astype(str).str.partition("+")[0]
    ddp = runs[(runs["status"] == "ok") & base.isin(TORCHRUN_STRATEGIES)]
    columns = [
        "run_id",
        "workload",
        "strategy",
        "world_size",
        "overlap_pct",
        "exposed_comm_trace_s",
        "exposed_comm_no_sync_s",
        "exposed_comm_reducer_s",
        "iteration_p50_s",
        "profiled_step_p50_s",
    ]
    return (
        ddp[columns]
        .sort_values(
            ["workload", "strategy", "world_size"], key=lambda c: c.map(strategy_order) if c.name == "strategy" else c
        )
        .reset_index(drop=True)
    )


STEP_COLUMNS = ["run_id", "workload", "strategy", "world_size", "rank", "step", "step_time_s"]


def _run_identity(record: Record) -> dict:
    """The columns that say which run a row of the step, iteration and breakdown frames is from."""
    spec = record.spec
    return {
        "run_id": record.run_id,
        "workload": short_workload_name(spec.workload),
        "strategy": spec.strategy,
        "world_size": spec.world_size,
    }


def step_time_frame(records: list[tuple[str, Record]]) -> pd.DataFrame:
    """One row per ok run, rank and timed step: the raw step times, for distributions. Built from
    each run's step-time matrix with numpy (a 1,024-rank run has millions of rows; for views of
    large runs use `ddpbench.analysis.ranks`, which never builds them)."""
    parts = []
    for _, record in records:
        if record.status != "ok" or not record.ranks:
            continue
        ordered = sorted(record.ranks, key=lambda rank: rank.rank)
        matrix = step_time_matrix(ordered)
        if matrix is None:  # ranks timed different numbers of steps: row by row
            rank_numbers = np.concatenate([[rank.rank] * len(rank.step_times_s) for rank in ordered])
            steps = np.concatenate([np.arange(len(rank.step_times_s)) for rank in ordered])
            values = np.concatenate([np.asarray(rank.step_times_s, dtype=float) for rank in ordered])
        else:
            rank_numbers = np.repeat([rank.rank for rank in ordered], matrix.shape[1])
            steps = np.tile(np.arange(matrix.shape[1]), matrix.shape[0])
            values = matrix.ravel()
        parts.append(
            pd.DataFrame(
                {
                    **_run_identity(record),
                    "rank": rank_numbers,
                    "step": steps,
                    "step_time_s": values,
                }
            )
        )
    if not parts:
        return pd.DataFrame(columns=STEP_COLUMNS)
    return pd.concat(parts, ignore_index=True)[STEP_COLUMNS]


def iteration_frame(records: list[tuple[str, Record]]) -> pd.DataFrame:
    """Iteration time per ok run and step, from the one definition (the slowest rank's step)."""
    columns = ["run_id", "workload", "strategy", "world_size", "step", "iteration_time_s"]
    parts = []
    for _, record in records:
        if record.status != "ok":
            continue
        iterations = registry.record_iteration_times_s(record)
        parts.append(
            pd.DataFrame(
                {
                    **_run_identity(record),
                    "step": np.arange(len(iterations)),
                    "iteration_time_s": iterations,
                }
            )
        )
    return pd.concat(parts, ignore_index=True)[columns] if parts else pd.DataFrame(columns=columns)


BREAKDOWN_PARTS = ("compute_us", "exposed_comm_us", "other_us", "idle_us")


def breakdown_frame(records: list[tuple[str, Record]]) -> pd.DataFrame:
    """Per ok run with a trace: the mean profiled step split into compute, exposed communication,
    other and idle (microseconds), averaged over ranks and steps."""
    rows = []
    for _, record in records:
        trace = record.overlap.trace if record.status == "ok" and record.overlap else None
        steps = [step for view in (trace.by_rank if trace else []) for step in view.steps]
        if not steps:
            continue
        row = _run_identity(record)
        row.update({part: sum(getattr(step, part) for step in steps) / len(steps) for part in BREAKDOWN_PARTS})
        rows.append(row)
    return pd.DataFrame(rows, columns=["run_id", "workload", "strategy", "world_size", *BREAKDOWN_PARTS])


def headlines(runs: pd.DataFrame, table: pd.DataFrame) -> dict[str, str]:
    """One sentence per workload: efficiency at the largest world size, DDP against DataParallel,
    and how much of the all-reduce hides behind backward."""
    sentences = {}
    for workload, rows in table.groupby("workload"):
        parts = []
        ddp = rows[rows["strategy"] == "ddp"].sort_values("world_size")
        dp = rows[rows["strategy"] == "dp"].sort_values("world_size")
        device = runs[runs["workload"] == workload]["device"].iloc[0]
        devices = "GPUs" if device == "cuda" else "CPU processes"
        if not ddp.empty and ddp["efficiency"].notna().any():
            last = ddp.iloc[-1]
            parts.append(f"DDP reaches {last['efficiency']:.0%} scaling efficiency at {last['world_size']} {devices}")
            same = dp[dp["world_size"] == last["world_size"]]
            if not same.empty and pd.notna(same["efficiency"].iloc[0]):
                note = " (on CPU: one process, nothing replicated)" if device == "cpu" else ""
                parts.append(f"DataParallel {same['efficiency'].iloc[0]:.0%}{note}")
        elif not ddp.empty:
            parts.append(
                f"DDP runs at {ddp.iloc[-1]['world_size']} {devices}, but without a local run there is no efficiency"
            )
        overlap = runs[(runs["workload"] == workload) & (runs["strategy"] == "ddp") & (runs["status"] == "ok")]
        overlap = overlap.sort_values("world_size")
        overlap = overlap[overlap["world_size"] > 1] if (overlap["world_size"] > 1).any() else overlap
        if not overlap.empty and pd.notna(overlap["overlap_pct"].iloc[-1]):
            parts.append(
                f"all-reduce {overlap['overlap_pct'].iloc[-1]:.0f} % hidden behind computation "
                f"at {overlap['world_size'].iloc[-1]} {devices}"
            )
        if parts:
            sentences[workload] = "; ".join(parts) + "."
    return sentences
