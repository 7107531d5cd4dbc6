"""A real PostgreSQL server for the tests: Debian's postgresql binaries (initdb, pg_ctl under
/usr/lib/postgresql/<version>/bin), a cluster in a new folder under /tmp on a free port, run as
an unprivileged user (user postgres through setpriv when the tests run as root). TCP logins need
a password (scram-sha-256): the test role has one. Where it cannot start, `start` raises
Unavailable saying why, and the tests that need it are skipped with that reason."""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
from dataclasses import dataclass, field
from urllib.parse import quote

ROLE = "ddpbench_test"
# Characters that must be escaped in a URL, so redaction is tested on its encoded forms too.
PASSWORD = "Pw-7:s3cret@x/y"
ADMIN = "ddpbench_admin"


class Unavailable(RuntimeError):
    """PostgreSQL cannot be started here; the message says why."""


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def binaries() -> str | None:
    """The newest installed postgresql's bin folder."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(p.split("/")[4]))
    return os.path.dirname(found[-1]) if found else None


@dataclass
class Server:
    folder: str
    port: int
    bin: str
    as_user: list[str]
    databases: int = 0
    log: str = field(default="")

    def url(self, database: str, password: bool = True) -> str:
        secret = f":{quote(PASSWORD, safe='')}" if password else ""
        return f"postgresql://{ROLE}{secret}@127.0.0.1:{self.port}/{database}"

    def admin(self):
        import psycopg

        return psycopg.connect(
            host=os.path.join(self.folder, "socket"), port=self.port, user=ADMIN, dbname="postgres", autocommit=True
        )

    def new_database(self) -> str:
        """An empty database owned by the test role."""
        self.databases += 1
        name = f"history_{self.databases}"
        with self.admin() as connection:
            connection.execute(f"CREATE DATABASE {name} OWNER {ROLE}")
        return name

    def stop(self) -> None:
        subprocess.run(
            [
                *self.as_user,
                os.path.join(self.bin, "pg_ctl"),
                "-D",
                os.path.join(self.folder, "data"),
                "-m",
                "fast",
                "stop",
            ],
            capture_output=True,
            timeout=60,
        )
        shutil.rmtree(self.folder, ignore_errors=True)


def start() -> Server:
    try:
        import psycopg  # noqa: F401
    except ImportError:
        raise Unavailable("psycopg is not installed (pip install 'ddpbench[postgres]')") from None
    bin_dir = binaries()
    if bin_dir is None:
        raise Unavailable("PostgreSQL is not installed (apt-get install postgresql)")
    as_user: list[str] = []
    folder = tempfile.mkdtemp(prefix="ddpbench-postgres-")
    if os.geteuid() == 0:
        if shutil.which("setpriv") is None:
            raise Unavailable("running as root, and setpriv is missing to start PostgreSQL as user postgres")
        try:
            shutil.chown(folder, "postgres", "postgres")
        except (LookupError, OSError) as exc:
            raise Unavailable(f"no user postgres to run the server as: {exc}") from None
        as_user = ["setpriv", "--reuid=postgres", "--regid=postgres", "--init-groups"]
    os.chmod(folder, 0o755)
    server = Server(folder, _free_port(), bin_dir, as_user)
    data, sockets = os.path.join(folder, "data"), os.path.join(folder, "socket")
    pwfile = os.path.join(folder, "admin-password")
    try:
        for step in (
            ["mkdir", sockets],
            ["sh", "-c", f"echo admin > {pwfile}"],
            [
                os.path.join(bin_dir, "initdb"),
                "-D",
                data,
                "-U",
                ADMIN,
                f"--pwfile={pwfile}",
                "--auth-local=trust",
                "--auth-host=scram-sha-256",
                "--encoding=UTF8",
                "--locale=C.UTF-8",
            ],
            [
                os.path.join(bin_dir, "pg_ctl"),
                "-D",
                data,
                "-l",
                os.path.join(folder, "server.log"),
                "-w",
                "-t",
                "60",
                "-o",
                f"-p {server.port} -k {sockets} -c listen_addresses=127.0.0.1 -c fsync=off",
                "start",
            ],
        ):
            done = subprocess.run([*as_user, *step], capture_output=True, text=True, timeout=120, cwd=folder)
            if done.returncode != 0:
                message = (done.stderr or done.stdout).strip().splitlines()
                raise Unavailable(f"{os.path.basename(step[0])} failed: {message[-1] if message else done.returncode}")
        with server.admin() as connection:
            connection.execute(f"CREATE ROLE {ROLE} LOGIN PASSWORD '{PASSWORD}'")
    except Unavailable:
        server.stop()
        raise
    except Exception as exc:
        server.stop()
        raise Unavailable(f"PostgreSQL did not start: {exc}") from None
    return server
