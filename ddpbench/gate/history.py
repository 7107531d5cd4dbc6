"""Nightly results kept as history: one plain CSV file per configuration ("series") under
`results/history/<machine-class>/<suite>/`, committed like baselines. No torch.

A series file starts with one comment line naming the configuration, then a header, then one row
per ok run, oldest first:

    # ddpbench history 1: mlp/tiny ddp x2 b8 fp32 cpu | ["mlp", "tiny", "ddp", 2, 8, ...]
    ended_at,sweep,run_id,git_sha,throughput,efficiency,exposed_share

`throughput` is in the workload's unit per second, `efficiency` and `exposed_share` are fractions
(empty where they do not apply); every value in a row is that row's run's own. Adding the same
sweep twice adds nothing. A run already in the history is left out of what the gate compares it
with, and counted once in its noise (`leave_out_runs`, `without_runs`).
"""

from __future__ import annotations

import csv
import io
import json
import os
from dataclasses import dataclass, field

from ddpbench.gate.baselines import machine_class, suite_of
from ddpbench.gate.values import (
    MEASURE_NAMES,
    by_start,
    describe,
    earlier_key_of,
    efficiencies,
    group_by_key,
    local_key,
    run_key,
    series_name,
    side_values,
    throughput,
)
from ddpbench.records.schema import Record
from ddpbench.records.store import read_records, write_atomic

DEFAULT_HISTORY = os.path.join("results", "history")
MAGIC = "# ddpbench history 1: "
COLUMNS = ["ended_at", "sweep", "run_id", "git_sha", *MEASURE_NAMES]


class HistoryError(ValueError):
    """A history file that is not one, or a sweep that cannot be added (exit code 2)."""


@dataclass
class Series:
    """One configuration's history, oldest run first."""

    path: str
    configuration: str
    key: tuple
    rows: list[dict] = field(default_factory=list)

    def values(self, measure: str) -> list[float]:
        return [row[measure] for row in self.rows if row[measure] is not None]


def history_dir(records: list[Record], sweep_dir: str, root: str = DEFAULT_HISTORY) -> str:
    return os.path.join(root, machine_class(records[0]), suite_of(sweep_dir))


def read_series(path: str) -> Series:
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    except OSError as exc:
        raise HistoryError(f"{path}: cannot read: {exc.strerror or exc}") from None
    first, _, rest = text.partition("\n")
    if not first.startswith(MAGIC) or " | " not in first:
        raise HistoryError(f"{path}: not a ddpbench history file (its first line should start with {MAGIC.strip()!r})")
    configuration, _, key_text = first[len(MAGIC) :].partition(" | ")
    try:
        key = tuple(json.loads(key_text))
    except ValueError:
        raise HistoryError(f"{path}: not a ddpbench history file (unreadable configuration key)") from None
    reader = csv.DictReader(io.StringIO(rest))
    if reader.fieldnames != COLUMNS:
        raise HistoryError(f"{path}: not a ddpbench history file (columns {reader.fieldnames}, expected {COLUMNS})")
    rows = []
    for line, row in enumerate(reader, start=3):
        try:
            parsed = {name: (float(row[name]) if row[name] not in ("", None) else None) for name in MEASURE_NAMES}
        except ValueError:
            raise HistoryError(f"{path}: line {line}: a value is not a number") from None
        if parsed["throughput"] is None or not parsed["throughput"] > 0:
            raise HistoryError(f"{path}: line {line}: throughput must be a positive number")
        rows.append({**{name: row[name] for name in COLUMNS[:4]}, **parsed})
    return Series(path, configuration, key, rows)


def format_series(series: Series) -> str:
    out = io.StringIO()
    out.write(f"{MAGIC}{series.configuration} | {json.dumps(list(series.key))}\n")
    writer = csv.DictWriter(out, COLUMNS, lineterminator="\n")
    writer.writeheader()
    for row in series.rows:
        writer.writerow({name: ("" if row[name] is None else row[name]) for name in COLUMNS})
    return out.getvalue()


def read_history(folder: str) -> dict[tuple, Series]:
    """Every series of one machine class and suite, by configuration key."""
    if not os.path.isdir(folder):
        raise HistoryError(f"no history at {folder!r}; add nightly sweeps with: ddpbench history add SWEEP_DIR")
    found = {}
    for name in sorted(os.listdir(folder)):
        if name.endswith(".csv"):
            series = read_series(os.path.join(folder, name))
            found[series.key] = series
    if not found:
        raise HistoryError(f"{folder!r} holds no history series (*.csv)")
    return found


def sweep_id(path: str) -> str | None:
    """The name a sweep's rows carry in the history: its folder's name (of a record file, the folder
    above its `runs/`); None for a record file outside a sweep."""
    path = os.path.normpath(path)
    if os.path.isdir(path):
        return os.path.basename(path)
    folder = os.path.dirname(path)
    return os.path.basename(os.path.dirname(folder)) if os.path.basename(folder) == "runs" else None


def values_by_run(records: list[Record]) -> list[tuple[Record, dict[str, float | None]]]:
    """Each run with its own value of every measure (None where it has none). Every run needs a
    throughput; E(N) is the run's X over N times the pooled X(1), as the gate reads it
    (`values.efficiencies`), none for a run the speed check flagged."""
    from ddpbench.analysis.probes import probe_flags

    groups = group_by_key(records)
    flags = {flag.run_id for flag in probe_flags(records)}
    measured = []
    for key, runs in groups.items():
        ordered = by_start(runs)
        local = groups.get(local_key(runs[0])) if key[2] != "local" and key[3] > 1 else None
        # One value (or None) per run, in start order.
        scaling = efficiencies(ordered, local, flags) if local else []
        for position, record in enumerate(ordered):
            own = side_values([record]).get(key, {})  # this run alone: its throughput and exposed share
            values = {measure: (own.get(measure) or [None])[0] for measure in MEASURE_NAMES}
            values["efficiency"] = scaling[position] if len(scaling) == len(ordered) else None
            measured.append((record, values))
    return measured


def sweep_rows(sweep_dir: str) -> tuple[list[Record], list[tuple[tuple, dict]], list[str]]:
    """A sweep's ok runs (without failed checks), each as its configuration key and history row,
    and notes on what was left out."""
    if not os.path.isdir(sweep_dir):
        raise HistoryError(f"{sweep_dir!r} is not a sweep folder")
    found, unreadable = read_records(sweep_dir)
    notes = [f"skipped unreadable record {path}: {reason}" for path, reason in unreadable]
    good = []
    for _, record in found:
        if record.status != "ok" or record.failed_checks() or record.metrics is None:
            why = record.status if record.status != "ok" else "failed checks: " + ", ".join(record.failed_checks())
            notes.append(f"left out {record.run_id} ({why})")
        elif throughput(record) is None:
            notes.append(f"left out {record.run_id} (no throughput: a history row needs one)")
        else:
            good.append(record)
    if not good:
        raise HistoryError(f"{sweep_dir!r} holds no successful run records to add")
    sweep = sweep_id(sweep_dir)
    rows = [
        (
            run_key(record),
            {
                "ended_at": record.ended_at or "",
                "sweep": sweep,
                "run_id": record.run_id,
                "git_sha": record.env.git_sha or "",
                **values,
            },
        )
        for record, values in values_by_run(good)
    ]
    return good, rows, notes


def add_sweep(sweep_dir: str, root: str = DEFAULT_HISTORY) -> tuple[str, list[str]]:
    """Append a sweep's ok runs (without failed checks) to their series; returns the folder and
    notes on what was left out. Every file is checked before any is written."""
    good, rows, notes = sweep_rows(sweep_dir)
    folder = history_dir(good, sweep_dir, root)
    by_key: dict[tuple, list[dict]] = {}
    for key, row in rows:
        by_key.setdefault(key, []).append(row)
    first_run = {}
    for record in good:
        first_run.setdefault(run_key(record), record)
    updated, retired = [], []
    for key, new_rows in by_key.items():
        path = os.path.join(folder, series_name(key) + ".csv")
        series = read_series(path) if os.path.exists(path) else Series(path, describe(key), key)
        # A history written by an earlier ddpbench: its series move to the current name and key.
        for legacy in earlier_series(folder, first_run[key]):
            if os.path.abspath(legacy.path) == os.path.abspath(path):
                continue
            series.rows += legacy.rows
            retired.append(legacy.path)
        if tuple(series.key) != tuple(json.loads(json.dumps(list(key)))):
            raise HistoryError(f"{path}: holds another configuration ({series.configuration})")
        seen = {(row["sweep"], row["run_id"]) for row in series.rows}
        series.rows += [row for row in new_rows if (row["sweep"], row["run_id"]) not in seen]
        series.rows.sort(key=lambda row: (row["ended_at"], row["sweep"], row["run_id"]))
        updated.append(series)
    for series in updated:
        write_atomic(series.path, format_series(series))
    for path in retired:
        os.remove(path)
    return folder, notes


def earlier_series(folder: str, record: Record) -> list[Series]:
    """The series in `folder` stored under a key an earlier ddpbench gave this run's configuration
    (`values.earlier_key_of`)."""
    if not os.path.isdir(folder):
        return []
    matches, found = earlier_key_of(record), []
    for name in sorted(os.listdir(folder)):
        if name.endswith(".csv"):
            series = read_series(os.path.join(folder, name))
            if matches(tuple(series.key)):
                found.append(series)
    return found


def with_current_keys(series: dict[tuple, Series], records: list[Record]) -> dict[tuple, Series]:
    """The series with those stored under an earlier ddpbench's key re-keyed to the configurations
    of `records` they are (rows merged, oldest first, where the current key has a series of its own
    too); a series that matches none keeps its key."""
    by_key = {}
    for record in records:
        by_key.setdefault(key_of(record), record)
    earlier = {key: earlier_key_of(record) for key, record in by_key.items()}
    found: dict[tuple, Series] = {}
    for key, one in series.items():
        targets = [k for k, matches in earlier.items() if tuple(key) != k and matches(tuple(key))]
        targets = targets or [tuple(key)]
        for target in targets:
            if target in found:
                rows = sorted(
                    found[target].rows + one.rows, key=lambda row: (row["ended_at"], row["sweep"], row["run_id"])
                )
                found[target] = Series(found[target].path, found[target].configuration, target, rows)
            else:
                found[target] = Series(
                    one.path, describe(target) if target != tuple(key) else one.configuration, target, list(one.rows)
                )
    return found


def read_store_history(store, machine_class: str, suite: str) -> dict[tuple, Series]:
    """Every series of one machine class and suite in a history store (`ddpbench.history`), as
    `read_history` gives a folder's; empty where the store has none. A series is named by the
    store (password hidden) and the file name its CSV export would have."""
    found = {}
    for stored in store.series(machine_class, suite):
        key = tuple(stored.key)
        name = f"{store.shown} {machine_class}/{suite}/{series_name(key)}"
        found[key] = Series(name, stored.configuration, key, [run.row() for run in stored.runs])
    return found


def is_run_of(row: dict, sweep: str | None, record: Record) -> bool:
    """Whether a history row is this run: the same run id in the same sweep, or with the same end
    time (a stored baseline is a copy of a sweep under another folder name)."""
    if row["run_id"] != record.run_id:
        return False
    return (sweep is not None and row["sweep"] == sweep) or bool(row["ended_at"] and row["ended_at"] == record.ended_at)


def without_runs(rows: list[dict], sweep: str | None, records: list[Record]) -> list[dict]:
    """The rows that are none of these runs (`records`, from the sweep named `sweep`)."""
    by_id: dict[str, list[Record]] = {}
    for record in records:
        by_id.setdefault(record.run_id, []).append(record)
    return [row for row in rows if not any(is_run_of(row, sweep, r) for r in by_id.get(row["run_id"], []))]


def leave_out_runs(
    series: dict[tuple, Series], sweep: str | None, records: list[Record]
) -> tuple[dict[tuple, Series], int]:
    """The series without the rows that are these runs (series left empty are dropped), and how
    many rows that left out."""
    kept, left_out = {}, 0
    for key, one in series.items():
        rows = without_runs(one.rows, sweep, records)
        left_out += len(one.rows) - len(rows)
        if rows:
            kept[key] = Series(one.path, one.configuration, one.key, rows)
    return kept, left_out


def recent_rows(series: dict[tuple, Series]) -> tuple[dict[tuple, list[dict]], str]:
    """Each series' rows since its last change point, and the change-point method in words."""
    from ddpbench.gate.changepoints import change_points, since_last_change

    points, method = change_points({key: s.values("throughput") for key, s in series.items()})
    return {key: since_last_change(s.rows, points[key]) for key, s in series.items()}, method


def values_of(rows_by_key: dict[tuple, list[dict]]) -> dict[tuple, dict[str, list[float]]]:
    """Per configuration and measure, the stored values (as `values.side_values` gives a sweep's)."""
    return {
        key: {measure: [row[measure] for row in rows if row[measure] is not None] for measure in MEASURE_NAMES}
        for key, rows in rows_by_key.items()
    }


def key_of(record: Record) -> tuple:
    """The key as it reads back from a series file (JSON round trip)."""
    return tuple(json.loads(json.dumps(list(run_key(record)))))


def history_frame(folder: str):
    """One row per stored run of every series in `folder`, with its segment and whether a change
    point starts there (for the report), and the change-point method in words."""
    import pandas as pd

    from ddpbench.gate.changepoints import change_points

    series = read_history(folder)
    points, method = change_points({key: s.values("throughput") for key, s in series.items()})
    rows = []
    for key, one in series.items():
        for position, row in enumerate(one.rows, start=1):
            segment = sum(1 for p in points[key] if p <= position - 1)
            rows.append(
                {
                    "configuration": one.configuration,
                    "position": position,
                    "throughput": row["throughput"],
                    "segment": segment,
                    "change": (position - 1) in points[key],
                    "sweep": row["sweep"],
                }
            )
    return pd.DataFrame(rows), method


def missing_from_history(series: dict[tuple, Series], candidate: list[Record], allowed: bool):
    """Configurations of the latest sweep in the history that the candidate lacks: failures
    ("not comparable"), or notes where allowed. Older series (configurations no longer run) are not."""
    from ddpbench.gate.compare import Comparison

    failures, notes = [], []
    latest = max((s.rows[-1]["ended_at"], s.rows[-1]["sweep"]) for s in series.values() if s.rows)[1]
    present = {key_of(r) for r in candidate}
    for key, one in sorted(series.items(), key=lambda item: item[1].configuration):
        if one.rows and one.rows[-1]["sweep"] == latest and key not in present:
            reason = f"in the history's latest sweep ({latest}) but missing from the candidate"
            if allowed:
                notes.append(f"{one.configuration}: {reason} (allowed)")
            else:
                failures.append(Comparison(one.configuration, "run", "not comparable", note=reason))
    return failures, notes
