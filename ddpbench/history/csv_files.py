"""A history store to and from CSV series folders, the layout `ddpbench history add --history`
writes (ROOT/<machine class>/<suite>/<series>.csv, see `ddpbench.gate.history`), so spreadsheets,
Otava and an older history keep working with a store. No torch."""

from __future__ import annotations

import os

from ddpbench.config.ids import check_stored_id, plain_name
from ddpbench.gate.history import HistoryError, Series, format_series, read_history
from ddpbench.gate.values import MEASURE_NAMES, series_name
from ddpbench.history.store import Added, HistoryRun, Store
from ddpbench.records.store import write_atomic


def series_folders(root: str) -> list[str]:
    """Folders under `root` (itself included) that hold series files, in name order."""
    if not os.path.isdir(root):
        raise HistoryError(f"{root!r} is not a folder")
    found = []
    for folder, names, files in os.walk(root):
        names.sort()
        if any(name.endswith(".csv") for name in files):
            found.append(folder)
    if not found:
        raise HistoryError(f"{root!r} holds no history series (*.csv)")
    return found


def import_folder(store: Store, root: str) -> tuple[Added, int]:
    """Add every series under `root` to the store in one transaction; the machine class and suite
    of a series are the names of its folder's parent and of its folder. Every file is read and
    checked before anything is written. Returns what was added and how many series files."""
    runs, files = [], 0
    for folder in series_folders(root):
        place = os.path.abspath(folder)
        machine, suite = os.path.basename(os.path.dirname(place)), os.path.basename(place)
        for series in read_history(folder).values():
            files += 1
            for row in series.rows:
                values = {measure: row[measure] for measure in MEASURE_NAMES}
                runs.append(
                    HistoryRun(
                        machine,
                        suite,
                        tuple(series.key),
                        series.configuration,
                        row["sweep"],
                        row["run_id"],
                        row["git_sha"],
                        row["ended_at"],
                        values,
                    )
                )
    return store.add_sweep(runs), files


def export_folder(store: Store, root: str) -> list[str]:
    """Write every series of the store as a CSV file under `root` (replacing files of the same
    name); returns their paths."""
    places = store.places()
    for machine, suite in places:  # a shared store's names become folders here: checked before any is written
        check_stored_id("a stored machine class", machine, root)
        check_stored_id("a stored suite", suite, root)
    written = []
    for machine, suite in places:
        # Names stored before the plain-name rule (`nightly gpu`) still export, as plain folder names.
        folder = os.path.join(root, plain_name(machine), plain_name(suite))
        for stored in store.series(machine, suite):
            path = os.path.join(folder, series_name(tuple(stored.key)) + ".csv")
            series = Series(path, stored.configuration, tuple(stored.key), [run.row() for run in stored.runs])
            write_atomic(path, format_series(series))
            written.append(path)
    return written
