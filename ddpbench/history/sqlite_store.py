"""The history store in one SQLite file (the standard library's sqlite3; nothing to set up). No torch.

Writers take the database's write lock at the start of their transaction (BEGIN IMMEDIATE) and
wait up to BUSY_TIMEOUT_S for one another. A writer killed mid-transaction leaves its rollback
journal, which the next connection plays back: the file reads as before that writer began.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager

from ddpbench.history.address import NoHistoryYet, StoreAddress
from ddpbench.history.store import Store

BUSY_TIMEOUT_S = 120.0


class SQLiteStore(Store):
    identity_column = "INTEGER PRIMARY KEY"

    def __init__(self, address: StoreAddress, create: bool):
        super().__init__(address)
        path = address.target
        if os.path.isdir(path):
            raise address.error(
                "is a folder, not a store file (a CSV history folder is read with --history-folder, "
                "or imported with: ddpbench history import DIR)"
            )
        if not os.path.exists(path):
            if not create:
                raise address.error(
                    "no such file; add sweeps with: ddpbench history add SWEEP_DIR --store URL", NoHistoryYet
                )
            os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        try:
            # isolation_level=None: transactions are begun and ended here, not by the driver.
            self.connection = sqlite3.connect(path, timeout=BUSY_TIMEOUT_S, isolation_level=None)
        except sqlite3.Error as exc:
            raise address.error(f"cannot open: {exc}") from None

    def _execute(self, sql: str, params: tuple = ()):
        return self.connection.execute(sql, params)

    def _executemany(self, sql: str, rows: list[tuple]) -> int:
        return self.connection.executemany(sql, rows).rowcount

    @contextmanager
    def _write(self) -> Iterator[None]:
        self.connection.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            self.connection.execute("ROLLBACK")
            raise
        self.connection.execute("COMMIT")

    def _has_table(self, name: str) -> bool:
        found = self._execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (name,))
        return found.fetchone() is not None

    def _foreign_tables(self) -> list[str]:
        found = self._execute("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name").fetchall()
        return [name for (name,) in found]

    @contextmanager
    def _guard(self, doing: str) -> Iterator[None]:
        try:
            yield
        except sqlite3.DatabaseError as exc:
            if "file is not a database" in str(exc):
                raise self.address.error("not a ddpbench history (not an SQLite database)") from None
            raise self.address.error(f"{doing}: {exc}") from None
        except sqlite3.Error as exc:
            raise self.address.error(f"{doing}: {exc}") from None

    def close(self) -> None:
        self.connection.close()
