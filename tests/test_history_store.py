"""The history store on both backends, SQLite and a real PostgreSQL server (tests/postgres_server.py):
concurrent and interrupted writers, schema versions, passwords kept out of messages, CSV import and
export of the committed series, and the gate over a store against the gate over the same CSV folder."""

import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from urllib.parse import quote

import postgres_server
import pytest
from conftest import FIXTURES, REPO, ddpbench
from test_gate import OK_RUNS, SWEEP, scaled_copy
from test_gate_history import NO_OTAVA

from ddpbench.history import HistoryRun, StoreError, open_store, parse_address
from ddpbench.history import store as store_module

HISTORY = os.path.join(FIXTURES, "history")
PLACE = os.path.join(HISTORY, "cpu-amd-epyc-2c", "custom")
NIGHTS, CONFIGURATIONS = 14, 5


@pytest.fixture(scope="session")
def postgres():
    try:
        server = postgres_server.start()
    except postgres_server.Unavailable as exc:
        if os.environ.get("DDPBENCH_REQUIRE_POSTGRES"):
            pytest.fail(f"DDPBENCH_REQUIRE_POSTGRES is set but PostgreSQL cannot start: {exc}")
        pytest.skip(f"PostgreSQL cannot start here: {exc}")
    yield server
    server.stop()


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request, tmp_path):
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/history.sqlite"
    server = request.getfixturevalue("postgres")
    return server.url(server.new_database())


def run(run_id: str, sweep: str = "s1", throughput: float | None = 100.0, **changes) -> HistoryRun:
    fields = dict(
        machine_class="cpu-test-2c",
        suite="quick",
        key=("mlp", "tiny", "local", 1, 8, "fp32", "cpu", ""),
        configuration="mlp/tiny local x1 b8 fp32 cpu",
        sweep=sweep,
        run_id=run_id,
        git_sha="abc",
        ended_at="2026-12-01T00:00:00",
        values={"throughput": throughput, "efficiency": None, "exposed_share": 0.25},
    )
    fields.update(changes)
    return HistoryRun(**fields)


def stored_runs(url: str) -> list[tuple]:
    with open_store(url) as store:
        return [(r.machine_class, r.suite, r.sweep, r.run_id, tuple(sorted(r.values.items()))) for r in store.runs()]


def test_a_sweep_is_added_once_and_reads_back_as_given(store_url):
    with open_store(store_url) as store:
        assert store.schema_version == store_module.SCHEMA_VERSION
        first = store.add_sweep([run("a"), run("b", ended_at="2026-12-01T01:00:00")])
        again = store.add_sweep([run("a"), run("b", ended_at="2026-12-01T01:00:00"), run("c", sweep="s2")])
        assert (first.runs, first.given, again.runs, again.given) == (2, 2, 1, 3)
        [series] = store.series("cpu-test-2c", "quick")
        assert [r.run_id for r in series.runs] == ["a", "c", "b"]  # by end time, then sweep, then run
        assert series.points("exposed_share")[0] == ("2026-12-01T00:00:00", "s1", "abc", 0.25)
        assert series.runs[0].row()["efficiency"] is None and store.places() == [("cpu-test-2c", "quick")]


def test_an_add_with_a_bad_run_writes_nothing(store_url):
    with open_store(store_url) as store:
        store.add_sweep([run("a")])
        with pytest.raises(StoreError, match="throughput must be a positive number"):
            store.add_sweep([run("b"), run("c"), run("d", throughput=0.0)])
        assert [r.run_id for r in store.runs()] == ["a"]


WORKER = """
import sys, time
import ddpbench.cli, ddpbench.history.postgres_store, ddpbench.history.sqlite_store, ddpbench.history.sweeps
go, args = sys.argv[1], sys.argv[2:]
while not __import__("os").path.exists(go):  # every writer starts at once
    time.sleep(0.01)
sys.exit(ddpbench.cli.main(args))
"""


@pytest.mark.launches
def test_concurrent_writers_add_every_run_exactly_once(store_url, tmp_path):
    different = [scaled_copy(tmp_path, f"night-{i}", 1.0 + i / 100, keep=OK_RUNS) for i in range(8)]
    same = scaled_copy(tmp_path, "same-night", 0.9, keep=OK_RUNS)
    go = tmp_path / "go"
    writers = [
        subprocess.Popen(
            [sys.executable, "-c", WORKER, str(go), "history", "add", sweep, "--store", store_url],
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for sweep in different + [same] * 8
    ]
    time.sleep(3)  # let them all import and wait
    go.touch()
    outputs = [writer.communicate(timeout=240) for writer in writers]
    failed = [(writer.returncode, err[-1500:]) for writer, (_, err) in zip(writers, outputs) if writer.returncode]
    assert not failed, failed
    # The same sweep: exactly one writer added its runs, the seven others found them there.
    same_lines = [out.splitlines()[-1] for out, _ in outputs[8:]]
    assert sum("5 new run(s), 0 already there" in line for line in same_lines) == 1, same_lines
    assert sum("0 new run(s), 5 already there" in line for line in same_lines) == 7, same_lines
    runs = stored_runs(store_url)
    assert len(runs) == len(set(runs)) == 9 * len(OK_RUNS)
    assert {sweep for _, _, sweep, _, _ in runs} == {f"night-{i}" for i in range(8)} | {"same-night"}


KILLED = """
import os, sys, time
from ddpbench.history import HistoryRun, open_store
url, ready = sys.argv[1], sys.argv[2]
def runs():
    for i in range(int(sys.argv[3])):
        yield HistoryRun("cpu-test-2c", "quick", ("mlp",), "mlp", "big", f"run-{i}", "sha", "2026-12-02", {
            "throughput": 1.0 + i, "efficiency": 0.5, "exposed_share": 0.1})
    open(ready, "w").close()  # the rows are written inside the transaction: now kill this writer
    time.sleep(600)
    yield HistoryRun("cpu-test-2c", "quick", ("mlp",), "mlp", "big", "last", "sha", "2026-12-02", {"throughput": 1.0})
with open_store(url) as store:
    store.add_sweep(runs())
"""


@pytest.mark.launches
def test_a_writer_killed_in_the_middle_of_an_add_leaves_the_store_as_before(store_url, tmp_path):
    with open_store(store_url) as store:
        store.add_sweep([run("a"), run("b")])
    before = stored_runs(store_url)
    ready = tmp_path / "ready"
    # Enough rows that SQLite spills them to the file before the commit (its journal undoes them).
    count = "20000" if store_url.startswith("sqlite") else "2000"
    writer = subprocess.Popen([sys.executable, "-c", KILLED, store_url, str(ready), count], cwd=REPO)
    deadline = time.monotonic() + 120
    while not ready.exists():
        # not chance: a two-minute deadline for a write of under a second: only a stuck writer crosses it
        assert writer.poll() is None and time.monotonic() < deadline, "the writer ended before it was killed"
        time.sleep(0.05)
    if store_url.startswith("sqlite"):
        assert os.path.exists(parse_address(store_url).target + "-journal")  # its writes are under way
    writer.send_signal(signal.SIGKILL)
    writer.wait(timeout=30)
    assert stored_runs(store_url) == before
    with open_store(store_url) as store:  # and the next writer is not blocked by the dead one
        assert store.add_sweep([run("c")]).runs == 1


def set_version(url: str, version: int) -> None:
    with open_store(url) as store:
        with store._write():
            store._execute("INSERT INTO ddpbench_schema (version, applied_at) VALUES (?, 'later')", (version,))


def test_a_store_another_writer_creates_while_this_one_opens_it_is_not_taken_for_a_foreign_one(tmp_path, monkeypatch):
    """Two writers opening a new SQLite file at once: the first finds no schema, the second
    creates the store before the first lists the file's tables. The first must take them for
    ddpbench's own (seen under 16 concurrent writers as 'it holds other tables')."""
    from ddpbench.history.sqlite_store import SQLiteStore

    listed = SQLiteStore._foreign_tables

    def another_writer_first(url):
        def listing(store):
            monkeypatch.setattr(SQLiteStore, "_foreign_tables", listed)  # the other writer lists them plainly
            open_store(url).close()
            return listed(store)

        monkeypatch.setattr(SQLiteStore, "_foreign_tables", listing)

    url = f"sqlite:///{tmp_path / 'history.sqlite'}"
    another_writer_first(url)
    with open_store(url) as store:
        assert store.schema_version == store_module.SCHEMA_VERSION
        store.add_sweep([run("a")])
        assert [r.run_id for r in store.runs()] == ["a"]
    # A reader (create=False) of a file that exists but is empty until the other writer's schema lands.
    url = f"sqlite:///{tmp_path / 'read.sqlite'}"
    sqlite3.connect(tmp_path / "read.sqlite").close()
    another_writer_first(url)
    with open_store(url, create=False) as store:
        assert store.schema_version == store_module.SCHEMA_VERSION and store.runs() == []


def test_a_store_of_a_newer_schema_is_refused_with_its_version(store_url):
    set_version(store_url, 7)
    with pytest.raises(StoreError, match=r"newer ddpbench \(schema version 7; this one reads up to 2\)"):
        open_store(store_url)
    done = ddpbench("history", "add", SWEEP, "--store", store_url)
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1
    assert "schema version 7" in done.stderr and parse_address(store_url).shown in done.stderr


def test_an_older_store_is_migrated_forward_once(store_url, monkeypatch):
    with open_store(store_url) as store:
        store.add_sweep([run("a")])
    monkeypatch.setattr(store_module, "SCHEMA_VERSION", 3)
    monkeypatch.setitem(
        store_module.MIGRATIONS, 3, ["CREATE TABLE ddpbench_notes (id INTEGER PRIMARY KEY, note TEXT NOT NULL)"]
    )
    for _ in range(2):
        with open_store(store_url) as store:
            assert store.schema_version == 3 and [r.run_id for r in store.runs()] == ["a"]
            versions = store._execute("SELECT version FROM ddpbench_schema ORDER BY version").fetchall()
            assert [v for (v,) in versions] == [1, 2, 3]
    monkeypatch.undo()
    with pytest.raises(StoreError, match="schema version 3"):
        open_store(store_url)


def test_a_store_of_version_1_gains_ranks_and_its_old_runs_read_as_host_not_recorded(store_url, monkeypatch):
    from ddpbench.history.ranks import RankRow

    monkeypatch.setattr(store_module, "SCHEMA_VERSION", 1)  # a store as the ddpbench before ranks made it
    with open_store(store_url) as store:
        store.add_sweep([run("old", sweep="s0")])
        assert not store._has_table("ddpbench_ranks")
    monkeypatch.undo()
    ranks = (
        RankRow(0, 2, host="node-0", node_rank=0, cpu_set="0-3", causes=()),
        RankRow(
            1,
            2,
            host="node-1",
            node_rank=1,
            device_uuid="GPU-1",
            cpu_denied_share=0.4,
            causes=("cpu_quota",),
            slowest=True,
            straggler={"wait": {"value": 0.012, "low": 0.01, "high": 0.014, "samples": 8, "over": "rounds"}},
        ),
    )
    with open_store(store_url) as store:
        assert store.schema_version == 2
        # A run stored before ranks has no rows: its hosts read as not recorded.
        assert store.ranks() == []
        store.add_sweep([run("new", sweep="s1", ended_at="2026-12-02T00:00:00", ranks=ranks)])
        (stored,) = store.ranks()
        assert (stored.sweep, stored.run_id, stored.ended_at) == ("s1", "new", "2026-12-02T00:00:00")
        assert tuple(stored.ranks) == ranks and stored.ranks[1].straggler == ranks[1].straggler
        assert stored.ranks[1].lead_s == 0.012 and stored.ranks[0].lead_s is None
        # The old run added again with its ranks: its measures stay as they were, its ranks are added.
        again = store.add_sweep([run("old", sweep="s0", ranks=ranks[:1])])
        assert again.runs == 0 and [r.run_id for r in store.ranks()] == ["old", "new"]
        assert len(store.runs()) == 2


def test_csv_series_import_and_export_round_trip(store_url, tmp_path):
    done = ddpbench("history", "import", HISTORY, "--store", store_url)
    assert done.returncode == 0, done.stderr
    assert f"({CONFIGURATIONS} series)" in done.stdout and f"{NIGHTS * CONFIGURATIONS} new run(s)" in done.stdout
    again = ddpbench("history", "import", PLACE, "--store", store_url)  # one <class>/<suite> folder: the same series
    assert again.returncode == 0 and f"0 new run(s), {NIGHTS * CONFIGURATIONS} already there" in again.stdout
    out = tmp_path / "exported"
    done = ddpbench("history", "export", str(out), "--store", store_url)
    assert done.returncode == 0 and f"({CONFIGURATIONS} series)" in done.stdout, done.stderr
    originals = sorted(os.listdir(PLACE))
    assert sorted(os.listdir(out / "cpu-amd-epyc-2c" / "custom")) == originals and len(originals) == CONFIGURATIONS
    for name in originals:
        assert (out / "cpu-amd-epyc-2c" / "custom" / name).read_bytes() == open(os.path.join(PLACE, name), "rb").read()
    # history changes reads the store as it reads the folder.
    from_store = ddpbench("history", "changes", "--store", store_url, env=NO_OTAVA)
    from_folder = ddpbench("history", "changes", PLACE, env=NO_OTAVA)
    assert from_store.returncode == 0 and from_store.stdout == from_folder.stdout, from_store.stderr
    assert from_store.stdout.count("change points: run 9 (night-08") == CONFIGURATIONS


def gate(tmp_path, name: str, *where: str, cwd=REPO, env=None) -> tuple[int, dict, str]:
    verdict = tmp_path / f"{name}.json"
    candidate = scaled_copy(
        tmp_path, name, 1.3, keep=OK_RUNS, edit=lambda r: r.update(ended_at="2026-11-20T02:00:00+00:00")
    )
    done = ddpbench(
        "gate", "--baseline", "history", "--candidate", candidate, "--json", str(verdict), *where,
        cwd=cwd, env={**NO_OTAVA, **(env or {})},
    )  # fmt: skip
    assert done.returncode in (0, 1), done.stdout + done.stderr
    return done.returncode, json.loads(verdict.read_text()), done.stdout


def test_the_gate_over_a_store_equals_the_gate_over_the_csv_folder(store_url, tmp_path):
    assert ddpbench("history", "import", HISTORY, "--store", store_url).returncode == 0
    code, from_folder, _ = gate(tmp_path, "csv", "--history-folder", PLACE)
    store_code, from_store, printed = gate(tmp_path, "store", "--store", store_url)
    assert (store_code, from_store["comparisons"]) == (code, from_folder["comparisons"])
    # not chance: a count of stored rows
    assert len(from_store["comparisons"]) >= CONFIGURATIONS and code == 0
    assert "baseline: the history since each series' last change point" in printed
    # The same store found through $DDPBENCH_HISTORY, and as the default file of the working folder.
    env_code, from_env, _ = gate(tmp_path, "env", env={"DDPBENCH_HISTORY": store_url})
    assert (env_code, from_env["comparisons"]) == (code, from_folder["comparisons"])
    if store_url.startswith("sqlite"):
        work = tmp_path / "work"
        (work / "results").mkdir(parents=True)
        shutil.copy(parse_address(store_url).target, work / "results" / "history.sqlite")
        default_code, by_default, printed = gate(tmp_path, "default", cwd=str(work))
        assert (default_code, by_default["comparisons"]) == (code, from_folder["comparisons"])
        assert "results/history.sqlite (cpu-amd-epyc-2c/custom)" in printed


def test_history_add_into_a_store_then_gate_leaves_out_the_candidates_own_runs(store_url, tmp_path):
    assert ddpbench("history", "import", HISTORY, "--store", store_url).returncode == 0
    candidate = scaled_copy(tmp_path, "tonight", 1.3, keep=OK_RUNS)
    added = ddpbench("history", "add", candidate, "--store", store_url)
    assert added.returncode == 0 and "5 new run(s), 0 already there" in added.stdout, added.stderr
    done = ddpbench("gate", "--baseline", "history", "--candidate", candidate, "--store", store_url, env=NO_OTAVA)
    assert done.returncode == 0 and "5 history row(s) that are the candidate's own runs" in done.stdout, done.stdout


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda tmp: "mysql://user:hunter2@db/history", "unknown kind of store 'mysql'"),
        (lambda tmp: str(tmp), "is a folder, not a store file"),
        (lambda tmp: (tmp / "notes.txt").write_text("hello\n") and str(tmp / "notes.txt"), "not an SQLite database"),
        (
            lambda tmp: sqlite3.connect(tmp / "other.db").execute("CREATE TABLE orders (id INTEGER)")
            and str(tmp / "other.db"),
            "not a ddpbench history (it holds other tables: orders)",
        ),
        (lambda tmp: str(tmp / "missing.sqlite"), "no such file"),
    ],
    ids=["unknown scheme", "a folder", "a text file", "another database", "missing"],
)
def test_a_store_that_is_not_one_is_refused_in_one_line(tmp_path, make, message):
    url = make(tmp_path)
    done = ddpbench("history", "changes", "--store", url)
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert message in done.stderr and "history store " in done.stderr and "hunter2" not in done.stderr


def secrets_of(password: str) -> list[str]:
    return [password, quote(password, safe=""), quote(password)]


def test_a_postgres_password_never_reaches_a_message(postgres, tmp_path):
    database = postgres.new_database()
    wrong = "Wr0ng:pass@word"
    good_url = postgres.url(database)
    cases = {
        "wrong password": (good_url.replace(quote(postgres_server.PASSWORD, safe=""), quote(wrong, safe="")), wrong),
        "no server": (f"postgresql://{postgres_server.ROLE}:{quote(wrong, safe='')}@127.0.0.1:1/x", wrong),
        "bad port": (f"postgresql://{postgres_server.ROLE}:{wrong}@127.0.0.1:notaport/x", wrong),
        "password parameter": (f"postgresql://127.0.0.1:1/x?user=u&password={quote(wrong, safe='')}", wrong),
    }
    for name, (url, password) in cases.items():
        done = ddpbench("history", "add", SWEEP, "--store", url)
        assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, (name, done.stderr)
        assert "history store postgresql://" in done.stderr and "***" in done.stderr, (name, done.stderr)
        assert not any(secret in done.stderr + done.stdout for secret in secrets_of(password)), (name, done.stderr)
    assert (
        "password authentication failed" in ddpbench("history", "changes", "--store", cases["wrong password"][0]).stderr
    )
    # With the right password: the gate's output and verdict file name the store without it.
    assert ddpbench("history", "import", HISTORY, "--store", good_url).returncode == 0
    _, verdict, printed = gate(tmp_path, "tonight", "--store", good_url)
    shown = json.dumps(verdict) + printed
    assert f"{postgres_server.ROLE}:***@127.0.0.1" in shown
    assert not any(secret in shown for secret in secrets_of(postgres_server.PASSWORD))


def test_postgres_reads_the_password_from_pgpassword_or_pgpass(postgres, tmp_path):
    url = postgres.url(postgres.new_database(), password=False)
    done = ddpbench("history", "add", SWEEP, "--store", url, env={"PGPASSWORD": postgres_server.PASSWORD})
    assert done.returncode == 0 and "5 new run(s)" in done.stdout, done.stderr
    passfile = tmp_path / "pgpass"
    escaped = postgres_server.PASSWORD.replace(":", "\\:")  # .pgpass escapes its separator
    passfile.write_text(f"127.0.0.1:{postgres.port}:*:{postgres_server.ROLE}:{escaped}\n")
    passfile.chmod(0o600)
    done = ddpbench("history", "add", SWEEP, "--store", url, env={"PGPASSFILE": str(passfile)})
    assert done.returncode == 0 and "0 new run(s), 5 already there" in done.stdout, done.stderr


def test_names_stored_before_the_plain_name_rule_still_export(tmp_path):
    from ddpbench.config.ids import plain_name

    old, escaping = f"sqlite:///{tmp_path}/old.sqlite", f"sqlite:///{tmp_path}/escaping.sqlite"
    with open_store(old) as store:
        store.add_sweep([run("a", suite="nightly gpu")])
    with open_store(escaping) as store:
        store.add_sweep([run("b", suite="../escape")])
    # A name that is only not plain exports, as a plain folder name; one that would leave the
    # folder is still refused, before anything is written.
    done = ddpbench("history", "export", str(tmp_path / "out"), "--store", old)
    assert done.returncode == 0, done.stderr
    assert os.listdir(tmp_path / "out" / "cpu-test-2c" / plain_name("nightly gpu"))
    done = ddpbench("history", "export", str(tmp_path / "out2"), "--store", escaping)
    assert done.returncode == 2 and "../escape" in done.stderr and not (tmp_path / "out2").exists(), done.stderr
