"""Records -> pandas DataFrames, and the scaling table. No torch: results can be studied anywhere.

Definitions (also in the README):
- X(N): throughput at world size N, in the workload's unit per second.
- speedup S(N) = X(N) / X(1), where X(1) is the `local` run (one device, no wrapper).
- scaling efficiency E(N) = X(N) / (N * X(1)). With weak scaling (the default) every device keeps
  its batch; with strong scaling the global batch is fixed and split over the devices.
"""

from __future__ import annotations

import glob
import json
import os
import warnings

import pandas as pd

from ddpbench.analysis.labels import strategy_label
from ddpbench.records.store import SCHEMA_VERSION
from ddpbench.records.store import failed_checks

RECORD_COLUMNS = [
    "run_id", "status", "workload", "size", "strategy", "strategy_label", "world_size", "device",
    "precision", "batch_size", "global_batch", "threads_per_rank", "throughput", "throughput_per_device",
    "sample_unit", "iteration_p50_s", "iteration_p90_s", "iteration_mean_s", "window_s", "timed_steps",
    "overlap_pct", "exposed_comm_trace_s", "exposed_comm_no_sync_s", "exposed_comm_reducer_s",
    "checks_failed", "error", "started_at", "ended_at", "launch_wall_s", "oversubscribed", "path",
]


def overlap_columns(overlap: dict | None) -> dict:
    """The three estimates of exposed communication per step, side by side (worst rank for each;
    overlap % is the mean over ranks). Missing views stay None."""
    overlap = overlap or {}
    trace = [view for view in ((overlap.get("trace") or {}).get("by_rank") or []) if "comm_us" in view]
    with_comm = [view["overlap_pct"] for view in trace if view.get("overlap_pct") is not None]
    per_step = [view["exposed_comm_us_per_step"] for view in trace if view.get("exposed_comm_us_per_step") is not None]
    reducer = [view["exposed_comm_s"] for view in ((overlap.get("reducer") or {}).get("by_rank") or [])
               if "exposed_comm_s" in view]
    return {
        "overlap_pct": sum(with_comm) / len(with_comm) if with_comm else None,
        "exposed_comm_trace_s": max(per_step) / 1e6 if per_step else None,
        "exposed_comm_no_sync_s": (overlap.get("no_sync") or {}).get("exposed_comm_s_max"),
        "exposed_comm_reducer_s": max(reducer) if reducer else None,
    }


def record_paths(sweep_dir: str) -> list[str]:
    return sorted(glob.glob(os.path.join(sweep_dir, "runs", "*.json")))


def read_records(sweep_dir: str) -> tuple[list[dict], list[tuple[str, str]]]:
    """All records of a sweep (or of a `ddpbench run --out` folder), plus (path, reason) for any
    file that could not be read: one bad file never hides the others."""
    if not os.path.isdir(sweep_dir):
        raise FileNotFoundError(f"{sweep_dir!r} is not a folder")
    records, unreadable = [], []
    for path in record_paths(sweep_dir):
        try:
            with open(path, encoding="utf-8") as handle:
                record = json.load(handle)
            if record.get("schema_version") != SCHEMA_VERSION:
                raise ValueError(f"schema_version {record.get('schema_version')!r}, "
                                 f"this ddpbench reads {SCHEMA_VERSION}")
        except (OSError, ValueError) as exc:
            unreadable.append((path, str(exc)))
            continue
        record["_path"] = path
        records.append(record)
    return records, unreadable


def record_row(record: dict) -> dict:
    spec, metrics = record["spec"], record.get("metrics") or {}
    iteration = metrics.get("iteration_time_s") or {}
    batch = spec.get("batch_size")
    return {
        "run_id": record["run_id"],
        "status": record["status"],
        "workload": spec["workload"],
        "size": spec.get("size"),
        "strategy": spec["strategy"],
        "strategy_label": strategy_label(spec),
        "world_size": spec["world_size"],
        "device": spec.get("device"),
        "precision": spec.get("precision"),
        "batch_size": batch,
        "global_batch": batch * spec["world_size"] if batch else None,
        "threads_per_rank": spec.get("threads_per_rank"),
        "throughput": metrics.get("throughput_units_per_s"),
        "throughput_per_device": metrics.get("throughput_units_per_s_per_device"),
        "sample_unit": metrics.get("sample_unit"),
        "iteration_p50_s": iteration.get("p50"),
        "iteration_p90_s": iteration.get("p90"),
        "iteration_mean_s": iteration.get("mean"),
        "window_s": metrics.get("window_s"),
        "timed_steps": metrics.get("timed_steps"),
        **overlap_columns(record.get("overlap")),
        "checks_failed": ",".join(failed_checks(record)),
        "error": (record.get("error") or {}).get("message"),
        "started_at": record.get("started_at"),
        "ended_at": record.get("ended_at"),
        "launch_wall_s": (record.get("launch") or {}).get("wall_s"),
        # More threads than usable cores: the point measures time-sharing, not scaling.
        "oversubscribed": bool(record.get("oversubscribed")),
        "path": record.get("_path"),
    }


def load(sweep_dir: str) -> pd.DataFrame:
    """One row per run record of a sweep folder. Unreadable files are skipped with a warning
    naming them, and listed in `frame.attrs["unreadable"]`."""
    records, unreadable = read_records(sweep_dir)
    for path, reason in unreadable:
        warnings.warn(f"skipped unreadable record {path}: {reason}", stacklevel=2)
    frame = pd.DataFrame([record_row(r) for r in records], columns=RECORD_COLUMNS)
    frame.attrs["unreadable"] = unreadable
    return frame


def scaling_table(runs: pd.DataFrame) -> pd.DataFrame:
    """One row per workload, strategy and world size (ok runs only): throughput, speedup and
    efficiency against the workload's `local` run. Without a local run they stay empty (NaN)."""
    ok = runs[runs["status"] == "ok"]
    columns = ["workload", "strategy", "strategy_label", "world_size", "batch_size", "global_batch",
               "throughput", "sample_unit", "throughput_per_device", "speedup", "efficiency", "iteration_p50_s",
               "oversubscribed"]
    if ok.empty:
        return pd.DataFrame(columns=columns)
    # A configuration run several times (--repeat) counts with the median of its runs.
    numeric = ["throughput", "throughput_per_device", "iteration_p50_s"]
    ok = (ok.groupby(["workload", "strategy", "world_size"], as_index=False)
          .agg({**{c: "median" for c in numeric},
                **{c: "first" for c in ok.columns if c not in numeric + ["workload", "strategy", "world_size"]},
                "oversubscribed": "max"}))
    reference = ok[ok["strategy"] == "local"].set_index("workload")["throughput"]
    table = ok.assign(reference=ok["workload"].map(reference))
    table["speedup"] = table["throughput"] / table["reference"]
    table["efficiency"] = table["speedup"] / table["world_size"]
    order = {"local": 0, "ddp": 1, "dp": 2}
    table = table.sort_values(["workload", "world_size", "strategy"], key=lambda c: c.map(order) if c.name == "strategy" else c)
    return table[columns].reset_index(drop=True)


def side_by_side(table: pd.DataFrame) -> pd.DataFrame:
    """The scaling table with DDP and DataParallel next to each other, one row per workload and
    world size: what a person reads at the end of a sweep."""
    if table.empty:
        return table
    wide = table.pivot_table(index=["workload", "world_size"], columns="strategy",
                             values=["throughput", "efficiency"], aggfunc="first")
    wide.columns = [f"{strategy} {'X' if metric == 'throughput' else 'E'}" for metric, strategy in wide.columns]
    ordered = [c for s in ("local", "ddp", "dp") for c in (f"{s} X", f"{s} E") if c in wide.columns]
    wide = wide[ordered]
    units = table.groupby("workload")["sample_unit"].first()
    wide.insert(0, "unit", [f"{units[w]}/s" for w, _ in wide.index])
    if "oversubscribed" in table and table["oversubscribed"].any():
        marked = table[table["oversubscribed"]]
        marked = marked.groupby(["workload", "world_size"])["strategy"].agg(",".join)
        wide["oversubscribed"] = [marked.get(point, "") for point in wide.index]
    return wide


def format_side_by_side(table: pd.DataFrame) -> str:
    wide = side_by_side(table)
    if wide.empty:
        return "(no successful runs to tabulate)"
    formatters = {c: "{:6.1%}".format for c in wide.columns if c.endswith(" E")}
    formatters.update({c: "{:,.1f}".format for c in wide.columns if c.endswith(" X")})
    note = ("X = throughput, E = efficiency X(N) / (N * X(1)) against local.")
    if (table["strategy_label"].str.startswith("DataParallel on CPU")).any():
        note += " dp on CPU = one process with N x the threads: nothing is replicated."
    if "oversubscribed" in wide:
        note += ("\noversubscribed: those strategies ran more threads than usable cores;"
                 " their X and E describe time-sharing, not scaling.")
    return wide.to_string(formatters=formatters, na_rep="") + "\n" + note


def overlap_table(runs: pd.DataFrame) -> pd.DataFrame:
    """DDP runs only: overlap % from the traces and exposed communication per step, three ways."""
    ddp = runs[(runs["status"] == "ok") & (runs["strategy"] == "ddp")]
    columns = ["workload", "world_size", "overlap_pct", "exposed_comm_trace_s", "exposed_comm_no_sync_s",
               "exposed_comm_reducer_s", "iteration_p50_s"]
    return ddp[columns].sort_values(["workload", "world_size"]).reset_index(drop=True)


def format_overlap(runs: pd.DataFrame) -> str:
    table = overlap_table(runs)
    if table.empty:
        return ""
    shown = table.set_index(["workload", "world_size"])
    shown.columns = ["overlap %", "exposed ms (trace)", "exposed ms (no_sync)", "exposed ms (reducer)", "iteration p50 ms"]
    for column in shown.columns[1:]:
        shown[column] = shown[column] * 1000
    return ("DDP communication: overlap of all-reduce with computation, exposed communication per step\n"
            + shown.to_string(float_format="{:,.2f}".format, na_rep="") )


def step_time_frame(records: list[dict]) -> pd.DataFrame:
    """One row per ok run, rank and timed step: the raw step times, for distributions."""
    rows = []
    for record in records:
        if record["status"] != "ok":
            continue
        spec = record["spec"]
        for rank in record["ranks"]:
            for step, seconds in enumerate(rank["step_times_s"]):
                rows.append({"run_id": record["run_id"], "workload": spec["workload"], "strategy": spec["strategy"],
                             "world_size": spec["world_size"], "rank": rank["rank"], "step": step,
                             "step_time_s": seconds})
    return pd.DataFrame(rows, columns=["run_id", "workload", "strategy", "world_size", "rank", "step", "step_time_s"])


def iteration_frame(step_times: pd.DataFrame) -> pd.DataFrame:
    """Iteration time per run and step: the slowest rank's step time."""
    return (step_times.groupby(["run_id", "workload", "strategy", "world_size", "step"], as_index=False)["step_time_s"]
            .max().rename(columns={"step_time_s": "iteration_time_s"}))


BREAKDOWN_PARTS = ("compute_us", "exposed_comm_us", "other_us", "idle_us")


def breakdown_frame(records: list[dict]) -> pd.DataFrame:
    """Per ok run with a trace: the mean profiled step split into compute, exposed communication,
    other and idle (microseconds), averaged over ranks and steps."""
    rows = []
    for record in records:
        trace = ((record.get("overlap") or {}).get("trace") or {}) if record["status"] == "ok" else {}
        steps = [step for view in trace.get("by_rank") or [] for step in view.get("steps") or []]
        if not steps:
            continue
        spec = record["spec"]
        row = {"run_id": record["run_id"], "workload": spec["workload"], "strategy": spec["strategy"],
               "world_size": spec["world_size"]}
        row.update({part: sum(step[part] for step in steps) / len(steps) for part in BREAKDOWN_PARTS})
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
            parts.append(f"DDP runs at {ddp.iloc[-1]['world_size']} {devices}, but without a local run there is no efficiency")
        overlap = runs[(runs["workload"] == workload) & (runs["strategy"] == "ddp") & (runs["status"] == "ok")]
        overlap = overlap.sort_values("world_size")
        overlap = overlap[overlap["world_size"] > 1] if (overlap["world_size"] > 1).any() else overlap
        if not overlap.empty and pd.notna(overlap["overlap_pct"].iloc[-1]):
            parts.append(f"all-reduce {overlap['overlap_pct'].iloc[-1]:.0f} % hidden behind computation "
                         f"at {overlap['world_size'].iloc[-1]} {devices}")
        if parts:
            sentences[workload] = "; ".join(parts) + "."
    return sentences
