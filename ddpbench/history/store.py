"""The history store: every nightly run's measures in one database (SQLite or PostgreSQL), the
backends sharing all of their SQL here. No torch.

Adding a sweep is one transaction, all of it or nothing, and adding it again adds nothing: the
database's UNIQUE constraint on (machine class, suite, sweep, run, measure) decides, through
INSERT ... ON CONFLICT DO NOTHING, so concurrent writers cannot add a run twice. A run's ranks
(`ddpbench.history.ranks`) go in the same transaction under the same rule, per (run, rank).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from ddpbench.gate.values import MEASURE_NAMES
from ddpbench.history.address import NoHistoryYet, StoreAddress
from ddpbench.history.ranks import COLUMNS as RANK_COLUMNS
from ddpbench.history.ranks import RankRow, as_columns, from_columns
from ddpbench.history.schema import MIGRATIONS, SCHEMA_VERSION

SCHEMA_TABLE = "ddpbench_schema"
MEASUREMENTS = "ddpbench_measurements"
RANKS = "ddpbench_ranks"
_RUN_COLUMNS = "machine_class, suite, sweep, run_id, configuration_key, ended_at"
_INSERT_RANK = (
    f"INSERT INTO {RANKS} ({_RUN_COLUMNS}, {RANK_COLUMNS}) VALUES ({', '.join(['?'] * 21)}) "
    "ON CONFLICT (machine_class, suite, sweep, run_id, rank) DO NOTHING"
)
_COLUMNS = "machine_class, suite, sweep, run_id, configuration_key, configuration, git_sha, ended_at, measure, value"
_INSERT = (
    f"INSERT INTO {MEASUREMENTS} ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
    "ON CONFLICT (machine_class, suite, sweep, run_id, measure) DO NOTHING"
)


@dataclass(frozen=True)
class HistoryRun:
    """One run as the history keeps it: where it ran, which configuration, and its own values
    (None where a measure does not apply)."""

    machine_class: str
    suite: str
    key: tuple
    configuration: str
    sweep: str
    run_id: str
    git_sha: str
    ended_at: str
    values: dict[str, float | None] = field(default_factory=dict)
    ranks: tuple[RankRow, ...] = ()
    """Its ranks (`ddpbench.history.ranks`); none where they were not recorded (CSV series)."""
    earlier: Callable[[tuple], bool] | None = field(default=None, compare=False, repr=False)
    """Whether a key an earlier ddpbench stored is this run's configuration (`gate.values.earlier_key_of`):
    adding the run moves such a series to its current key."""

    def row(self) -> dict:
        """As a CSV series row (`ddpbench.gate.history`): ended_at, sweep, run_id, git_sha, measures."""
        return {
            "ended_at": self.ended_at,
            "sweep": self.sweep,
            "run_id": self.run_id,
            "git_sha": self.git_sha,
            **{measure: self.values.get(measure) for measure in MEASURE_NAMES},
        }


@dataclass
class StoredSeries:
    """One configuration's runs on one machine class and suite, oldest first."""

    machine_class: str
    suite: str
    key: tuple
    configuration: str
    runs: list[HistoryRun]

    def points(self, measure: str) -> list[tuple[str, str, str, float]]:
        """(time, sweep, git sha, value) of every run that has this measure, oldest first."""
        return [
            (run.ended_at, run.sweep, run.git_sha, run.values[measure])
            for run in self.runs
            if run.values.get(measure) is not None
        ]


@dataclass(frozen=True)
class StoredRanks:
    """One stored run's ranks, with what places the run in time and in its sweep."""

    machine_class: str
    suite: str
    sweep: str
    run_id: str
    key: tuple
    ended_at: str
    ranks: list[RankRow]


@dataclass(frozen=True)
class Added:
    runs: int
    """runs that were new to the store"""
    given: int
    """runs given (the others were there already)"""


def _key_text(key) -> str:
    return json.dumps(list(key))


def _checked(run: HistoryRun, address: StoreAddress) -> list[tuple]:
    """The run's measurement rows; a run the history cannot hold is refused (nothing is written)."""
    for name in ("machine_class", "suite", "sweep", "run_id", "configuration"):
        if not isinstance(getattr(run, name), str) or not getattr(run, name):
            raise address.error(f"run {run.run_id!r}: no {name.replace('_', ' ')}")
    throughput = run.values.get("throughput")
    if throughput is None or not math.isfinite(throughput) or not throughput > 0:
        raise address.error(f"run {run.run_id!r} of sweep {run.sweep!r}: throughput must be a positive number")
    rows = []
    for measure, value in run.values.items():
        if value is None:
            continue
        if not isinstance(value, int | float) or not math.isfinite(value):
            raise address.error(f"run {run.run_id!r}: {measure} is not a finite number ({value!r})")
        rows.append(
            (
                run.machine_class,
                run.suite,
                run.sweep,
                run.run_id,
                _key_text(run.key),
                run.configuration,
                run.git_sha or "",
                run.ended_at or "",
                measure,
                float(value),
            )
        )
    return rows


class Store:
    """A history store. Backends provide the connection, transactions and the migration lock;
    everything else, every query with bound parameters, is here."""

    identity_column = ""
    """the auto-numbered key column's type in this backend's SQL"""

    def __init__(self, address: StoreAddress):
        self.address = address
        self.schema_version = 0

    # What a backend provides.
    def _execute(self, sql: str, params: tuple = ()):
        """Run one statement with its parameters bound (`?` marks them); returns a cursor."""
        raise NotImplementedError

    def _executemany(self, sql: str, rows: list[tuple]) -> int:
        """Run one statement per row; returns the rows it changed."""
        raise NotImplementedError

    @contextmanager
    def _write(self) -> Iterator[None]:
        """One write transaction: committed when the block ends, rolled back when it raises."""
        raise NotImplementedError
        yield

    def _lock_schema(self) -> None:
        """Inside a write transaction: keep other writers out until it ends (migrations)."""

    def _has_table(self, name: str) -> bool:
        raise NotImplementedError

    def _foreign_tables(self) -> list[str]:
        """Tables that show the database belongs to something else (the store refuses it)."""
        return []

    @contextmanager
    def _guard(self, doing: str) -> Iterator[None]:
        """The driver's errors as StoreError naming the store (password hidden)."""
        yield

    def close(self) -> None:
        raise NotImplementedError

    # The interface.
    @property
    def shown(self) -> str:
        return self.address.shown

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _version(self) -> int:
        if not self._has_table(SCHEMA_TABLE):
            return 0
        (version,) = self._execute(f"SELECT MAX(version) FROM {SCHEMA_TABLE}").fetchone()
        return int(version or 0)

    def open_schema(self, create: bool) -> None:
        """Check the schema, and bring an older one up to date (each step in the transaction that
        checks it, so concurrent openers migrate once). `create`: make the tables in a store that
        has none; otherwise such a store is refused as holding no history."""
        with self._guard("reading its schema"):
            version = self._version()
            if version == 0:
                foreign = self._foreign_tables()
                if SCHEMA_TABLE in foreign:  # another opener created the store since the version was read
                    version = self._version()
            if version == 0:
                if foreign:
                    raise self.address.error(
                        f"not a ddpbench history (it holds other tables: {', '.join(foreign[:5])})"
                    )
                if not create:
                    raise self.address.error(
                        "holds no ddpbench history yet; add sweeps with: ddpbench history add SWEEP_DIR --store URL",
                        NoHistoryYet,
                    )
            if version < SCHEMA_VERSION:
                with self._write():
                    self._lock_schema()
                    self._execute(
                        f"CREATE TABLE IF NOT EXISTS {SCHEMA_TABLE} "
                        "(version INTEGER PRIMARY KEY, applied_at TEXT NOT NULL)"
                    )
                    version = self._version()
                    for step in range(version + 1, SCHEMA_VERSION + 1):
                        for statement in MIGRATIONS[step]:
                            self._execute(statement.format(identity=self.identity_column))
                        self._execute(
                            f"INSERT INTO {SCHEMA_TABLE} (version, applied_at) VALUES (?, CURRENT_TIMESTAMP)", (step,)
                        )
                    version = self._version()
        if version > SCHEMA_VERSION:
            raise self.address.error(
                f"written by a newer ddpbench (schema version {version}; this one reads up to "
                f"{SCHEMA_VERSION}): upgrade ddpbench to use it"
            )
        self.schema_version = version

    def add_sweep(self, runs: Iterable[HistoryRun]) -> Added:
        """Add runs (a sweep) in one transaction: all of them or, on any error, none. Runs already
        stored are left as they are. `runs` is read inside the transaction."""
        added = given = 0
        with self._guard("adding runs"), self._write():
            stored: dict[tuple, set[str]] = {}
            moved: set[tuple] = set()
            for run in runs:
                if run.earlier is not None and (run.machine_class, run.suite, _key_text(run.key)) not in moved:
                    moved.add((run.machine_class, run.suite, _key_text(run.key)))
                    self._move_earlier(run, stored)
                added += self._executemany(_INSERT, _checked(run, self.address)) > 0
                if run.ranks:
                    place = (
                        run.machine_class,
                        run.suite,
                        run.sweep,
                        run.run_id,
                        _key_text(run.key),
                        run.ended_at or "",
                    )
                    self._executemany(_INSERT_RANK, [place + as_columns(rank) for rank in run.ranks])
                given += 1
        return Added(added, given)

    def _move_earlier(self, run: HistoryRun, stored: dict[tuple, set[str]]) -> None:
        """Inside `add_sweep`'s transaction: the series an earlier ddpbench stored this run's
        configuration under take its current key and name, so that the history keeps one series."""
        place = (run.machine_class, run.suite)
        if place not in stored:
            found = self._execute(
                f"SELECT DISTINCT configuration_key FROM {MEASUREMENTS} WHERE machine_class = ? AND suite = ?", place
            ).fetchall()
            stored[place] = {str(text) for (text,) in found}
        current = _key_text(run.key)
        for text in sorted(stored[place]):
            if text != current and run.earlier(tuple(json.loads(text))):
                self._execute(
                    f"UPDATE {MEASUREMENTS} SET configuration_key = ?, configuration = ? "
                    "WHERE machine_class = ? AND suite = ? AND configuration_key = ?",
                    (current, run.configuration, *place, text),
                )
                # The run's ranks were stored under the same key: they follow their series.
                self._execute(
                    f"UPDATE {RANKS} SET configuration_key = ? "
                    "WHERE machine_class = ? AND suite = ? AND configuration_key = ?",
                    (current, *place, text),
                )
                stored[place].discard(text)
        stored[place].add(current)

    def ranks(self) -> list[StoredRanks]:
        """Every stored run's ranks, oldest run first (runs stored without ranks are not listed)."""
        with self._guard("reading ranks"):
            found = self._execute(f"SELECT {_RUN_COLUMNS}, {RANK_COLUMNS} FROM {RANKS}").fetchall()
        runs: dict[tuple, StoredRanks] = {}
        for machine, suite, sweep, run_id, key_text, ended_at, *values in found:
            ident = (machine, suite, sweep, run_id)
            if ident not in runs:
                runs[ident] = StoredRanks(machine, suite, sweep, run_id, tuple(json.loads(key_text)), ended_at, [])
            runs[ident].ranks.append(from_columns(tuple(values)))
        for run in runs.values():
            run.ranks.sort(key=lambda row: row.rank)
        # Sorted here, not by the database: PostgreSQL's text order follows its locale.
        return sorted(runs.values(), key=lambda r: (r.ended_at, r.machine_class, r.suite, r.sweep, r.run_id))

    def places(self) -> list[tuple[str, str]]:
        """The (machine class, suite) pairs that have runs."""
        with self._guard("listing its machine classes"):
            found = self._execute(f"SELECT DISTINCT machine_class, suite FROM {MEASUREMENTS}").fetchall()
        return sorted((str(a), str(b)) for a, b in found)

    def _runs(self, where: str, params: tuple) -> list[HistoryRun]:
        with self._guard("reading runs"):
            found = self._execute(
                f"SELECT {_COLUMNS} FROM {MEASUREMENTS}{where}",
                params,
            ).fetchall()
        runs: dict[tuple, HistoryRun] = {}
        for machine, suite, sweep, run_id, key_text, configuration, git_sha, ended_at, measure, value in found:
            ident = (machine, suite, sweep, run_id)
            if ident not in runs:
                key = tuple(json.loads(key_text))
                runs[ident] = HistoryRun(machine, suite, key, configuration, sweep, run_id, git_sha, ended_at, {})
            runs[ident].values[measure] = float(value)
        # Sorted here, not by the database: PostgreSQL's text order follows its locale.
        return sorted(runs.values(), key=lambda r: (r.machine_class, r.suite, r.ended_at, r.sweep, r.run_id))

    def runs(self, machine_class: str | None = None, suite: str | None = None) -> list[HistoryRun]:
        """Every stored run (of one machine class and suite, where given), oldest first."""
        clauses, params = [], []
        for column, value in (("machine_class", machine_class), ("suite", suite)):
            if value is not None:
                clauses.append(f"{column} = ?")
                params.append(value)
        return self._runs(" WHERE " + " AND ".join(clauses) if clauses else "", tuple(params))

    def series(self, machine_class: str, suite: str) -> list[StoredSeries]:
        """Each configuration's runs on this machine class and suite, every measure of a run
        together, oldest run first; configurations in the order of their keys."""
        by_key: dict[str, StoredSeries] = {}
        for run in self.runs(machine_class, suite):
            text = _key_text(run.key)
            if text not in by_key:
                by_key[text] = StoredSeries(machine_class, suite, run.key, run.configuration, [])
            by_key[text].runs.append(run)
        return [by_key[text] for text in sorted(by_key)]
