"""A sweep folder's runs as the history store keeps them: the rows `ddpbench history add` writes
to CSV series, with the machine class and suite that name the series' folder there, and each run's
ranks (`ddpbench.history.ranks`). No torch."""

from __future__ import annotations

from ddpbench.gate.baselines import machine_class, suite_of
from ddpbench.gate.history import sweep_rows
from ddpbench.gate.values import MEASURE_NAMES, describe, earlier_key_of, run_key
from ddpbench.history.ranks import rank_rows
from ddpbench.history.store import HistoryRun


def sweep_runs(sweep_dir: str) -> tuple[str, str, list[HistoryRun], list[str]]:
    """The machine class, suite and ok runs of a sweep, and notes on what was left out
    (HistoryError where it has no run to add)."""
    good, rows, notes = sweep_rows(sweep_dir)
    machine, suite = machine_class(good[0]), suite_of(sweep_dir)
    first_run = {}
    for record in good:
        first_run.setdefault(run_key(record), record)
    earlier = {key: earlier_key_of(record) for key, record in first_run.items()}
    ranks = {record.run_id: tuple(rank_rows(record)) for record in good}
    runs = [
        HistoryRun(
            machine,
            suite,
            key,
            describe(key),
            row["sweep"],
            row["run_id"],
            row["git_sha"],
            row["ended_at"],
            {measure: row[measure] for measure in MEASURE_NAMES},
            ranks=ranks.get(row["run_id"], ()),
            earlier=earlier[key],
        )
        for key, row in rows
    ]
    return machine, suite, runs, notes
