"""The history store's tables, one list of statements per schema version (forward only). No torch.

`ddpbench_schema` has one row per version applied; the store's version is the highest. A store of
a higher version than SCHEMA_VERSION was written by a newer ddpbench and is refused, never read.

`ddpbench_measurements` has one row per (run, measure): a run's throughput, scaling efficiency and
exposed share are three rows, a measure that does not apply (the efficiency of a local run) none.
The columns are those of a CSV series row (ended_at, sweep, run_id, git_sha, the value) with what
the CSV keeps in its folder and first line (machine class, suite, configuration key and name).
Times are kept as the records write them (ISO 8601 text), so a CSV export reads like the import.

`ddpbench_ranks` (version 2) has one row per (run, rank): where the rank ran (its host, node rank,
device and CPU set), its CPU denied and its causes where measured, and on the row of the rank the run's
straggler analysis chose as the slowest, that straggler's figures (`ddpbench.history.ranks`). Runs
stored before version 2, or imported from CSV series, have none: their hosts read as not recorded.
Adding a sweep again adds the rank rows it lacks, so a store can be filled in from the sweep folders.
"""

from __future__ import annotations

SCHEMA_VERSION = 2

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
    2: [
        """CREATE TABLE ddpbench_ranks (
            id {identity},
            machine_class TEXT NOT NULL,
            suite TEXT NOT NULL,
            sweep TEXT NOT NULL,
            run_id TEXT NOT NULL,
            configuration_key TEXT NOT NULL,
            ended_at TEXT NOT NULL,
            world_size INTEGER NOT NULL,
            rank INTEGER NOT NULL,
            host TEXT,
            node_rank INTEGER,
            local_rank INTEGER,
            device_uuid TEXT,
            device_serial TEXT,
            device_pci_bus_id TEXT,
            cpu_set TEXT,
            cpu_denied_share DOUBLE PRECISION,
            causes TEXT NOT NULL,
            slowest INTEGER NOT NULL,
            lead_s DOUBLE PRECISION,
            phase TEXT,
            straggler TEXT,
            CONSTRAINT ddpbench_one_row_per_run_and_rank UNIQUE (machine_class, suite, sweep, run_id, rank)
        )""",
        # `history hosts` and the gate read every sweep's ranks in time order.
        "CREATE INDEX ddpbench_ranks_by_sweep ON ddpbench_ranks (ended_at, machine_class, suite, sweep)",
    ],
}
