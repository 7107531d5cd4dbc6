"""The history store's tables, one list of statements per schema version (forward only). No torch.

`ddpbench_schema` has one row per version applied; the store's version is the highest. A store of
a higher version than SCHEMA_VERSION was written by a newer ddpbench and is refused, never read.

`ddpbench_measurements` has one row per (run, measure): a run's throughput, scaling efficiency and
exposed share are three rows, a measure that does not apply (the efficiency of a local run) none.
The columns are those of a CSV series row (ended_at, sweep, run_id, git_sha, the value) with what
the CSV keeps in its folder and first line (machine class, suite, configuration key and name).
Times are kept as the records write them (ISO 8601 text), so a CSV export reads like the import.
"""

from __future__ import annotations

SCHEMA_VERSION = 1

# {identity}: the backend's auto-numbered key column type.
MIGRATIONS: dict[int, list[str]] = {
    1: [
        """CREATE TABLE ddpbench_measurements (
            id {identity},
            machine_class TEXT NOT NULL,
            suite TEXT NOT NULL,
            sweep TEXT NOT NULL,
            run_id TEXT NOT NULL,
            configuration_key TEXT NOT NULL,
            configuration TEXT NOT NULL,
            git_sha TEXT NOT NULL,
            ended_at TEXT NOT NULL,
            measure TEXT NOT NULL,
            value DOUBLE PRECISION NOT NULL,
            CONSTRAINT ddpbench_one_value_per_run_and_measure UNIQUE (machine_class, suite, sweep, run_id, measure),
            CONSTRAINT ddpbench_throughput_is_positive CHECK (measure <> 'throughput' OR value > 0)
        )""",
        # The gate and the history pages read one machine class and suite at a time.
        "CREATE INDEX ddpbench_measurements_by_place "
        "ON ddpbench_measurements (machine_class, suite, configuration_key)",
    ],
}
