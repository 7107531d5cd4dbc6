"""The history store in a PostgreSQL database, through psycopg 3 (the optional extra:
pip install 'ddpbench[postgres]'). No torch.

The URL goes to libpq as given, so a password may also come from PGPASSWORD or ~/.pgpass
($PGPASSFILE). Messages name the server by the redacted URL and are scrubbed of the password,
since libpq may echo a connection string it cannot parse. Opening waits CONNECT_TIMEOUT_S for
the server unless the URL sets connect_timeout.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from ddpbench.history.address import StoreAddress
from ddpbench.history.store import Store

CONNECT_TIMEOUT_S = 10
# One number for every ddpbench store: migrations in concurrent openers take their turns on it.
MIGRATION_LOCK = 0x64647062656E6368  # "ddpbench"


def _one_line(exc: Exception) -> str:
    return "; ".join(line.strip() for line in str(exc).splitlines() if line.strip()) or type(exc).__name__


class PostgresStore(Store):
    identity_column = "BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY"

    def __init__(self, address: StoreAddress, create: bool):
        super().__init__(address)
        try:
            import psycopg
        except ImportError:
            raise address.error("needs psycopg: pip install 'ddpbench[postgres]'") from None
        self._errors = psycopg.Error
        options = {} if "connect_timeout" in address.target else {"connect_timeout": CONNECT_TIMEOUT_S}
        try:
            self.connection = psycopg.connect(address.target, autocommit=True, application_name="ddpbench", **options)
        except psycopg.Error as exc:
            raise address.error(f"cannot connect: {_one_line(exc)}") from None

    def _execute(self, sql: str, params: tuple = ()):
        return self.connection.execute(sql.replace("?", "%s"), params)

    def _executemany(self, sql: str, rows: list[tuple]) -> int:
        with self.connection.cursor() as cursor:
            cursor.executemany(sql.replace("?", "%s"), rows)
            return cursor.rowcount

    @contextmanager
    def _write(self) -> Iterator[None]:
        with self.connection.transaction():
            yield

    def _lock_schema(self) -> None:
        self._execute("SELECT pg_advisory_xact_lock(?)", (MIGRATION_LOCK,))

    def _has_table(self, name: str) -> bool:
        (found,) = self._execute("SELECT to_regclass(?::text) IS NOT NULL", (name,)).fetchone()
        return bool(found)

    @contextmanager
    def _guard(self, doing: str) -> Iterator[None]:
        try:
            yield
        except self._errors as exc:
            raise self.address.error(f"{doing}: {_one_line(exc)}") from None

    def close(self) -> None:
        self.connection.close()
