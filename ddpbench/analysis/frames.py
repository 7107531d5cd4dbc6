"""Records -> pandas DataFrames, and the scaling table. No torch: results can be studied anywhere.

Definitions (also in the README):
- X(N): throughput at world size N, in the workload's unit per second.
- speedup S(N) = X(N) / X(1), where X(1) is the `local` run (one device, no wrapper).
- scaling efficiency E(N) = X(N) / (N * X(1)). With weak scaling (the default) every device keeps
  its batch; with strong scaling the global batch is fixed and split over the devices.
A configuration run several times shows once, with the answers model's figures (`answers`): X(N)
the mean of its runs, E(N) of those X, the in-process efficiency, each with its 95 % interval.
"""

from __future__ import annotations

import dataclasses
import json
import warnings

import numpy as np
import pandas as pd

from ddpbench.analysis import registry
from ddpbench.analysis.ablation import NoAblation, read_ablation
from ddpbench.analysis.answers import table_figures
from ddpbench.analysis.causes import in_process_efficiency as in_process_of
from ddpbench.analysis.configurations import threads_per_device
from ddpbench.analysis.estimates import Estimate
from ddpbench.analysis.labels import strategy_label
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
    "repeat",
    "in_process_efficiency",
    "in_process_low",
    "in_process_high",
    "in_process_se",
    "in_process_samples",
    "path",
]
# Runs that differ in any of these are never combined into one row, and X(1) must match them.
CONFIGURATION = ["workload", "size", "precision", "device", "scaling", "threads_per_device"]


def runs_columns() -> list[str]:
    return RUN_COLUMNS + [metric.name for metric in registry.METRICS]


def record_row(record: Record, path: str | None = None) -> dict:
    spec, metrics = record.spec, record.metrics
    in_process = in_process_efficiency(record)
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
        "threads_per_device": threads_per_device(spec),
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
        "repeat": spec.repeat,
        # One rank alone against DDP inside the run's own processes (the in-process ablation), with
        # its 95 % interval over the rounds: the efficiency no other process's speed can move.
        "in_process_efficiency": in_process.value if in_process else None,
        "in_process_low": in_process.low if in_process else None,
        "in_process_high": in_process.high if in_process else None,
        "in_process_se": in_process.se if in_process else None,
        "in_process_samples": in_process.samples if in_process else None,
        "path": path,
    }
    row.update({metric.name: metric.read(record) if metrics else None for metric in registry.METRICS})
    return row


def in_process_efficiency(record: Record) -> Estimate | None:
    """One ok DDP run's in-process efficiency over its rounds; None without the ablation."""
    if record.status != "ok" or record.spec.strategy != "ddp":
        return None
    try:
        return in_process_of(read_ablation(record))
    except NoAblation:
        return None


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
    # Runs whose processes ran at another speed than the sweep's others on the fixed speed check:
    # the sentence that says so, or empty.
    flags = {flag.run_id: flag.sentence() for flag in probe_flags([record for _, record in records])}
    frame["probe_flag"] = [flags.get(run_id, "") for run_id in frame["run_id"]]
    # Each run's configuration's figures, as explain answers it (`answers.table_figures`): the
    # table prints them, it does not pool them again.
    figures = table_figures(records)
    for name in ("throughput", "efficiency", "in_process"):
        for part in ("value", "low", "high"):
            column = f"configuration_{name}" + ("" if part == "value" else f"_{part}")
            frame[column] = [_part(figures, run_id, name, part) for run_id in frame["run_id"]]
    frame["configuration"] = [figures[r].configuration if r in figures else r for r in frame["run_id"]]
    frame["configuration_reference"] = [figures[r].reference if r in figures else "" for r in frame["run_id"]]
    frame["configuration_runs"] = [figures[r].runs if r in figures else None for r in frame["run_id"]]
    frame["configuration_left_out"] = [figures[r].left_out if r in figures else None for r in frame["run_id"]]
    frame["configuration_reference_runs"] = [figures[r].reference_runs if r in figures else 0 for r in frame["run_id"]]
    return frame


def _part(figures: dict, run_id: str, name: str, part: str) -> float | None:
    estimate = getattr(figures[run_id], name) if run_id in figures else None
    value = getattr(estimate, part) if estimate is not None else None
    return np.nan if value is None else value


def scaling_table(runs: pd.DataFrame) -> pd.DataFrame:
    """One row per configuration, strategy and world size (ok runs only): X, E(N) against X(1) (the
    local run of the same configuration) and the in-process efficiency from the answers model
    (`answers.table_figures`), with their 95 % intervals, the table's other metrics (the median of
    its runs), and
    speedup = E(N) x N. Runs that differ in size, precision, device, batch, threads per device,
    scaling mode or DDP options are never combined. Without a matching local run, speedup and
    efficiency stay empty and `reference` says why. `in_run_efficiency` and its half-width are the
    in-process efficiency under the names scaling.csv had before 0.2."""
    numeric = [metric.name for metric in registry.METRICS if metric.in_scaling_table]
    # `configuration` is the identity (`config.identity`): it alone decides which runs are one row;
    # the other keys are what the row shows of it.
    keys = ["configuration", *CONFIGURATION, "strategy", "world_size", "batch_size", "global_batch", "ddp_options"]
    pooled = [
        f"{name}{part}" for name in ("efficiency", "in_process_efficiency") for part in ("", "_low", "_high", "_runs")
    ]
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
        *pooled,
        "in_run_efficiency",
        "in_run_efficiency_half",
        "runs",
        "runs_left_out",
        "reference",
        "reference_runs",
        "oversubscribed",
        "busy",
    ]
    # The runs every view keeps (`configurations.is_measured`): ok, and no failed correctness check.
    ok = runs[(runs["status"] == "ok") & (runs["checks_failed"].fillna("") == "")]
    failed = runs[(runs["status"] == "ok") & (runs["checks_failed"].fillna("") != "")]
    left_out = {row["run_id"]: f"failed correctness check: {row['checks_failed']}" for _, row in failed.iterrows()}
    if ok.empty:
        empty = pd.DataFrame(columns=columns)
        empty.attrs["left_out"] = left_out
        return empty
    # X, E(N) and the in-process efficiency are the configuration's, from the answers model; the
    # table's other metrics are the median of the runs.
    medians = [name for name in numeric if name != "throughput"]
    grouped = ok.groupby(keys, as_index=False, dropna=False).agg(
        **{name: (name, "median") for name in medians},
        throughput=("configuration_throughput", "first"),
        efficiency=("configuration_efficiency", "first"),
        efficiency_low=("configuration_efficiency_low", "first"),
        efficiency_high=("configuration_efficiency_high", "first"),
        in_process_efficiency=("configuration_in_process", "first"),
        in_process_efficiency_low=("configuration_in_process_low", "first"),
        in_process_efficiency_high=("configuration_in_process_high", "first"),
        runs_left_out=("configuration_left_out", "first"),
        reference=("configuration_reference", "first"),
        reference_runs=("configuration_reference_runs", "first"),
        strategy_label=("strategy_label", "first"),
        sample_unit=("sample_unit", "first"),
        runs=("run_id", "count"),
        oversubscribed=("oversubscribed", "any"),
        busy=("busy", "any"),
    )
    grouped["efficiency_runs"] = grouped["runs"] - grouped["runs_left_out"]
    grouped["in_process_efficiency_runs"] = np.where(
        grouped["in_process_efficiency"].notna(), grouped["efficiency_runs"], 0
    )
    table = grouped
    without = table["reference"].str.startswith("no ")
    for column in ("efficiency", "efficiency_low", "efficiency_high"):
        table.loc[without, column] = np.nan
    table["speedup"] = table["efficiency"] * table["world_size"]
    table["in_run_efficiency"] = table["in_process_efficiency"]
    table["in_run_efficiency_half"] = (table["in_process_efficiency_high"] - table["in_process_efficiency_low"]) / 2
    table = table.sort_values(
        ["workload", "size", "precision", "batch_size", "world_size", "strategy"],
        key=lambda c: c.map(strategy_order) if c.name == "strategy" else c,
    )
    table = table[columns].reset_index(drop=True)
    table.attrs["left_out"] = left_out
    return table


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


def figure_cell(value: float, low: float | None, high: float | None) -> str:
    """An efficiency as `59.6%±1.1`, or `59.6%` without an interval; empty without a value."""
    if value is None or value != value:
        return ""
    if low is None or high is None or low != low or high != high or low == high:
        return f"{value:.1%}"
    return f"{value:.1%}±{100 * (high - low) / 2:.1f}"


def side_by_side(table: pd.DataFrame) -> pd.DataFrame:
    """The scaling table with the strategies next to each other, one row per workload and world
    size: what a person reads at the end of a sweep. E(N) and the in-process efficiency carry their
    95 % intervals over the configuration's runs. Where one workload was run in more than one
    configuration, each configuration gets its own rows."""
    if table.empty:
        return table
    table = table.assign(
        configuration=configuration_label(table),
        efficiency_cell=[
            figure_cell(r["efficiency"], r["efficiency_low"], r["efficiency_high"]) for _, r in table.iterrows()
        ],
        in_process_cell=[
            figure_cell(r["in_process_efficiency"], r["in_process_efficiency_low"], r["in_process_efficiency_high"])
            for _, r in table.iterrows()
        ],
    )
    mixed = table.groupby("workload")["configuration"].nunique().max() > 1
    index = ["workload", "configuration", "world_size"] if mixed else ["workload", "world_size"]
    wide = table.pivot_table(
        index=index, columns="strategy", values=["throughput", "efficiency_cell"], aggfunc="first", dropna=False
    )
    wide.columns = [f"{strategy} {'X' if metric == 'throughput' else 'E'}" for metric, strategy in wide.columns]
    names = sorted(table["strategy"].unique(), key=strategy_order)
    ordered = [c for s in names for c in (f"{s} X", f"{s} E") if c in wide.columns]
    wide = wide[ordered].dropna(how="all")
    measured = table[table["in_process_cell"] != ""]
    for strategy in sorted(measured["strategy"].unique(), key=strategy_order):
        # Beside E(N), which divides two processes' throughputs, the in-process efficiency.
        rows = measured[measured["strategy"] == strategy].set_index(index)
        cells = dict(zip(rows.index, rows["in_process_cell"]))
        wide.insert(
            list(wide.columns).index(f"{strategy} E") + 1,
            f"{strategy} E in-process",
            [cells.get(p, "") for p in wide.index],
        )
    runs = table.groupby(index)["runs"].max()
    wide.insert(0, "runs", [int(runs.get(point, 0)) for point in wide.index])
    units = table.groupby("workload")["sample_unit"].first()
    wide.insert(0, "unit", [f"{units[key[0]]}/s" for key in wide.index])
    if table["oversubscribed"].any():
        marked = table[table["oversubscribed"]].groupby(index)["strategy"].agg(",".join)
        wide["oversubscribed"] = [marked.get(point, "") for point in wide.index]
    if table["busy"].any():
        marked = table[table["busy"]].groupby(index)["strategy"].agg(",".join)
        wide["busy"] = [marked.get(point, "") for point in wide.index]
    return wide


def format_side_by_side(table: pd.DataFrame) -> str:
    wide = side_by_side(table)
    if wide.empty:
        return "(no successful runs to tabulate)"
    formatters = {c: "{:,.1f}".format for c in wide.columns if c.endswith(" X")}
    formatters.update({c: str for c in wide.columns if c.endswith(" E") or c.endswith(" E in-process")})
    scripts = table["workload"].astype(str).str.startswith(SCRIPT_PREFIX)
    against = (
        "DDP x1 (a script's reference)"
        if scripts.all()
        else "local"
        if not scripts.any()
        else ("local (a script's: DDP x1)")
    )
    most = int(table["runs"].max())
    pooled = (
        f" Each configuration ran {most} times: X is their mean, E is the X(N) beside it over N times X(1), ± its"
        " 95 % interval (delta method, Student's t over the runs)."
        if most > 1
        else " One run per configuration: each ± covers that run's steps only, not the next run."
    )
    note = f"X = throughput, E = efficiency X(N) / (N * X(1)) against {against}.{pooled}"
    if any(column.endswith(" E in-process") for column in wide.columns):
        note += (
            " E in-process = one rank alone against DDP inside the run's own processes: no other process's speed "
            "moves it."
        )
    if (table["strategy_label"].str.startswith("DataParallel on CPU")).any():
        note += " dp on CPU = one process with N x the threads: nothing is replicated, not comparable with DDP."
    if (table["runs_left_out"] > 0).any():
        note += " Runs the speed check flagged (!! below) are left out of E."
    once = table[(table["runs"] - table["runs_left_out"] > 1) & (table["reference_runs"] == 1)]
    if once["efficiency"].notna().any():
        note += (
            " Where X(1) ran once and X(N) more often, E's ± holds the X(N) runs' spread and that X(1) run's own "
            "steps', not how X(1) moves from one run to the next."
        )
    for run_id, why in table.attrs.get("left_out", {}).items():
        note += f"\nleft out: {run_id} ({why})"
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
    return wide.to_string(formatters=formatters, na_rep="") + "\n" + note + blank_efficiency_lines(table)


def blank_efficiency_lines(table: pd.DataFrame) -> str:
    """Why a row's E is blank: the X(1) it needs is not in the sweep (`configurations.reference_runs`
    says why; a script that keeps its global batch, as nanoGPT does, steps another per-device batch
    at world size 1)."""
    lines = [
        f"\nE blank for {row['workload']} {row['strategy']} x{row['world_size']}: {row['reference']}"
        for _, row in table[table["reference"].str.startswith("no ")].iterrows()
    ]
    return "".join(dict.fromkeys(lines))


SAME_MEMORY = ("local", "ddp", "dp")
"""Strategies that hold the same model state per rank: a memory table of only these says nothing."""


def changes_memory(runs: pd.DataFrame) -> bool:
    """Whether a strategy of the sweep is one that changes memory per rank (fsdp2, compiled, ...)."""
    return bool((~runs["strategy"].astype(str).isin(SAME_MEMORY)).any())


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
