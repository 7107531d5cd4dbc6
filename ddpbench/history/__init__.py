"""The history store: nightly sweeps' runs in a database, SQLite (the default file
results/history.sqlite) or PostgreSQL. No torch.

    with open_store("sqlite:///results/history.sqlite") as store:
        store.add_sweep(runs)                       # one transaction; runs already there are skipped
        for one in store.series("cpu-x-8c", "quick"):
            one.points("throughput")                # [(time, sweep, git sha, value), ...]

The CSV series folders of `ddpbench.gate.history` are imported and exported by
`ddpbench.history.csv_files`; the gate reads a store through `ddpbench.gate.history.read_store_history`.
"""

from __future__ import annotations

from ddpbench.history.address import (
    DEFAULT_STORE,
    STORE_VARIABLE,
    NoHistoryYet,
    StoreAddress,
    StoreError,
    chosen_address,
    parse_address,
    redact,
)
from ddpbench.history.store import Added, HistoryRun, Store, StoredSeries


def open_store(url: str, create: bool = True) -> Store:
    """The store at `url` (sqlite:///PATH, a file path, or postgresql://...), its schema checked
    and brought up to date. `create`: start an empty store where there is none (to add to it);
    otherwise a missing or empty one is refused. Errors are StoreError, one line, password hidden."""
    address = parse_address(url)
    if address.kind == "postgresql":
        from ddpbench.history.postgres_store import PostgresStore

        store: Store = PostgresStore(address, create)
    else:
        from ddpbench.history.sqlite_store import SQLiteStore

        store = SQLiteStore(address, create)
    try:
        store.open_schema(create)
    except BaseException:
        store.close()
        raise
    return store


__all__ = [
    "DEFAULT_STORE",
    "STORE_VARIABLE",
    "Added",
    "HistoryRun",
    "NoHistoryYet",
    "Store",
    "StoreAddress",
    "StoreError",
    "StoredSeries",
    "chosen_address",
    "open_store",
    "parse_address",
    "redact",
]
