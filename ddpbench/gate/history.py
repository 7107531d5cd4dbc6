"""Nightly results kept as history: one plain CSV file per configuration ("series") under
`results/history/<machine-class>/<suite>/`, committed like baselines. No torch.

A series file starts with one comment line naming the configuration, then a header, then one row
per ok run, oldest first:

    # ddpbench history 1: mlp/tiny ddp x2 b8 fp32 cpu | ["mlp", "tiny", "ddp", 2, 8, ...]
    ended_at,sweep,run_id,git_sha,throughput,efficiency,exposed_share

`throughput` is in the workload's unit per second, `efficiency` and `exposed_share` are fractions
(empty where they do not apply). Adding the same sweep twice adds nothing.
"""

from __future__ import annotations

import csv
import io
import json
import os
from dataclasses import dataclass, field

from ddpbench.gate.baselines import machine_class, suite_of
from ddpbench.gate.values import MEASURE_NAMES, describe, group_by_key, run_key, series_name, side_values
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
    configuration, _, key_text = first[len(MAGIC):].partition(" | ")
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


def add_sweep(sweep_dir: str, root: str = DEFAULT_HISTORY) -> tuple[str, list[str]]:
    """Append a sweep's ok runs (without failed checks) to their series; returns the folder and
    notes on what was left out. Every file is checked before any is written."""
    if not os.path.isdir(sweep_dir):
        raise HistoryError(f"{sweep_dir!r} is not a sweep folder")
    found, unreadable = read_records(sweep_dir)
    notes = [f"skipped unreadable record {path}: {reason}" for path, reason in unreadable]
    good = []
    for _, record in found:
        if record.status != "ok" or record.failed_checks() or record.metrics is None:
            why = record.status if record.status != "ok" else "failed checks: " + ", ".join(record.failed_checks())
            notes.append(f"left out {record.run_id} ({why})")
        else:
            good.append(record)
    if not good:
        raise HistoryError(f"{sweep_dir!r} holds no successful run records to add")
    folder = history_dir(good, sweep_dir, root)
    sweep = os.path.basename(os.path.normpath(sweep_dir))
    values = side_values(good)
    updated = []
    for key, runs in group_by_key(good).items():
        path = os.path.join(folder, series_name(key) + ".csv")
        series = read_series(path) if os.path.exists(path) else Series(path, describe(key), key)
        if tuple(series.key) != tuple(json.loads(json.dumps(list(key)))):
            raise HistoryError(f"{path}: holds another configuration ({series.configuration})")
        seen = {(row["sweep"], row["run_id"]) for row in series.rows}
        ordered = sorted(runs, key=lambda r: (r.started_at or r.ended_at or "", r.run_id))
        for index, record in enumerate(ordered):
            if (sweep, record.run_id) in seen:
                continue
            row = {"ended_at": record.ended_at or "", "sweep": sweep, "run_id": record.run_id,
                   "git_sha": record.env.git_sha or ""}
            for measure in MEASURE_NAMES:
                measured = values.get(key, {}).get(measure, [])
                row[measure] = measured[index] if index < len(measured) else None
            series.rows.append(row)
        series.rows.sort(key=lambda row: (row["ended_at"], row["sweep"], row["run_id"]))
        updated.append(series)
    for series in updated:
        write_atomic(series.path, format_series(series))
    return folder, notes


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
            rows.append({"configuration": one.configuration, "position": position, "throughput": row["throughput"],
                         "segment": segment, "change": (position - 1) in points[key], "sweep": row["sweep"]})
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
