"""Generated ids (Hypothesis) against the one id check (ddpbench/config/ids.py) and, end to end,
against every command that takes one. Each id is either refused (exit 2, one line, nothing
written) or accepted, and then every file lands under the folder given, the batch script's
#SBATCH lines are exactly the ones ddpbench writes, and every manifest parses with the names it
should have. Nothing trains: a command stops at --print, at the files it writes, or where it would
start its first process. The commands run in this process (cli.main), so that dozens of ids take
seconds, not a Python start each."""

from __future__ import annotations

import contextlib
import io
import os
import re
import shlex
import tempfile

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ddpbench.cli import main
from ddpbench.config.errors import SpecError
from ddpbench.config.ids import MAX_ID_LENGTH, check_id, id_problem

# Characters that matter to a path, a shell, a batch script or YAML, beside plain ones: drawn often,
# so that generated ids hit them (plain text rarely holds a newline next to `#SBATCH`).
TRICKY = ["/", ".", "..", " ", "\n", "\r", "\t", "\0", "#", "$", ";", "'", '"', "\\", "`", "*", ":", "é", "#SBATCH "]
PLAIN = "abcXYZ019._-"
ids = st.one_of(
    st.text(max_size=40),  # anything at all, unicode included
    st.lists(st.sampled_from([*PLAIN, *TRICKY]), max_size=30).map("".join),
    st.lists(st.sampled_from([*PLAIN, "/", "."]), min_size=1, max_size=30).map("".join),  # mostly plain
    st.integers(MAX_ID_LENGTH - 2, MAX_ID_LENGTH + 2).map(lambda n: "a" * n),  # around the length limit
)
PLAIN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)*")


def expected_plain(value: str, nested: bool) -> bool:
    """The rule, written again from its words: parts of letters, digits, '.', '_' and '-' that start
    with a letter or a digit, joined by '/' where sub-folders are allowed, not too long."""
    return bool(PLAIN_ID.fullmatch(value)) and len(value) <= MAX_ID_LENGTH and (nested or "/" not in value)


@settings(max_examples=3000, deadline=None, database=None)
@given(value=ids, nested=st.booleans())
def test_the_id_check_accepts_exactly_the_plain_names(value, nested):
    assert (id_problem(value, nested) is None) == expected_plain(value, nested), value
    if expected_plain(value, nested):
        assert check_id("--x", value, "OUT", nested) == value
    else:
        with pytest.raises(SpecError) as refused:
            check_id("--x", value, "OUT", nested)
        message = str(refused.value)
        assert "\n" not in message and "letters, digits, '.', '_' and '-'" in message and repr(value) in message


class Stop(Exception):
    """Where a command would start its first process: the end of an end-to-end case."""


def stop(*args, **kwargs):
    raise Stop()


def run_command(argv: list[str]) -> tuple[int | str, str]:
    """(exit code, or "stopped" where it would have started a process; stderr)."""
    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except Stop:
            code = "stopped"
        except SystemExit as exc:  # argparse's own refusals
            code = exc.code
    return code, err.getvalue()


def files_under(folder: str) -> list[str]:
    return sorted(os.path.join(root, name) for root, _, names in os.walk(folder) for name in names)


def inside(path: str, folder: str) -> bool:
    return os.path.commonpath([os.path.realpath(path), os.path.realpath(folder)]) == os.path.realpath(folder)


@contextlib.contextmanager
def work_folder():
    """A fresh folder to run in (the commands write relative to it), the old one restored after."""
    before = os.getcwd()
    with tempfile.TemporaryDirectory(prefix="ddpbench-ids-") as folder:
        work = os.path.join(folder, "work", "deep")
        os.makedirs(work)
        os.chdir(work)
        try:
            yield folder, work
        finally:
            os.chdir(before)


def refused_cleanly(code, err: str, value: str, root: str) -> None:
    assert code == 2, (value, code, err)
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert files_under(root) == [], files_under(root)


@pytest.fixture
def no_launches(monkeypatch):
    from ddpbench.running import launch, sweep, tune

    monkeypatch.setattr(launch, "launch_with_oom_backoff", stop)
    monkeypatch.setattr(sweep, "launch_with_oom_backoff", stop)
    monkeypatch.setattr(tune, "launch", stop)


# No example database: nothing is written into the checkout (a failure prints its example to rerun).
END_TO_END = settings(
    max_examples=30, deadline=None, database=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
SWEEP = ["--suite", "smoke", "--strategies", "local", "--device", "cpu"]


@END_TO_END
@given(value=ids)
def test_sbatch_writes_only_its_own_directives_for_any_sweep_id(value):
    with work_folder() as (root, work):
        out = os.path.join(work, "o")
        code, err = run_command(["sbatch", *SWEEP, "--out", out, f"--sweep-id={value}", "--print"])
        if not expected_plain(value, nested=True):
            return refused_cleanly(code, err, value, root)
        assert code == 0, err
        script_path = os.path.join(out, value, "sbatch.sh")
        assert files_under(root) == [script_path]
        with open(script_path, encoding="utf-8") as handle:
            lines = handle.read().splitlines()
    directives = [line for line in lines if line.startswith("#SBATCH")]
    assert directives == [
        f"#SBATCH --job-name=ddpbench-{value.rsplit('/', 1)[-1]}",
        "#SBATCH --nodes=1",
        "#SBATCH --ntasks-per-node=1",
        "#SBATCH --exclusive",
        f"#SBATCH --output={os.path.join(out, value, 'slurm-%j.out')}",
    ]
    sweep = shlex.split(lines[-1])
    assert sweep[0] == "exec" and f"--sweep-id={value}" in sweep


@END_TO_END
@given(value=ids)
def test_trainjob_manifests_carry_the_names_they_should_for_any_sweep_id(value):
    from ddpbench.running.trainjob import job_name

    with work_folder() as (root, work):
        folder = os.path.join(work, "m")
        argv = ["trainjob", "--max-nproc", "1", "--image", "registry.example/ddpbench:1", "--manifests", folder]
        code, err = run_command([*argv, f"--sweep-id={value}"])
        if not expected_plain(value, nested=True) or code == 2 and "too long" in err:
            return refused_cleanly(code, err, value, root)
        assert code == 0, err
        written = files_under(root)
        assert written and all(inside(path, folder) and path.endswith(".yaml") for path in written), written
        for path in written:
            with open(path, encoding="utf-8") as handle:
                manifest = yaml.safe_load(handle)
            name = manifest["metadata"]["name"]
            assert name == job_name(value, manifest["spec"]["trainer"]["numNodes"])
            assert os.path.basename(path) == f"{name}.yaml"
            assert re.fullmatch(r"[a-z]([-a-z0-9]*[a-z0-9])?", name) and len(name) <= 63, name
            assert manifest["metadata"]["annotations"]["ddpbench/sweep-id"] == value
            report = shlex.split(manifest["metadata"]["annotations"]["ddpbench/report-command"])
            assert report[4:] == [os.path.join("/results", value), "--sweep-id", value], report


@END_TO_END
@given(value=ids)
def test_sweep_writes_only_under_its_out_for_any_sweep_id(value, no_launches):
    with work_folder() as (root, work):
        out = os.path.join(work, "o")
        code, err = run_command(["sweep", *SWEEP, "--out", out, f"--sweep-id={value}"])
        if not expected_plain(value, nested=True):
            return refused_cleanly(code, err, value, root)
        assert code == "stopped", err
        written = files_under(root)
        assert written and all(inside(path, os.path.join(out, value)) for path in written), written


@END_TO_END
@given(value=ids, command=st.sampled_from(["run", "tune"]))
def test_run_and_tune_write_only_under_their_out_for_any_run_id(value, command, no_launches):
    with work_folder() as (root, work):
        out = os.path.join(work, "o")
        argv = [command, "--workload", "mlp", "--device", "cpu", f"--run-id={value}"]
        argv += ["--out", out] if command == "run" else ["--nproc", "2"]
        code, err = run_command(argv)
        if value and not expected_plain(value, nested=False):  # an empty run id means "choose one"
            return refused_cleanly(code, err, value, root)
        assert code == "stopped", err
        assert all(inside(path, out if command == "run" else work) for path in files_under(root))


@END_TO_END
@given(value=ids.filter(bool))  # the store itself refuses an empty suite
def test_history_export_writes_a_stored_suite_only_as_a_folder_of_its_own(value):
    """A shared store's names become folders: a stored suite that would leave the folder is refused,
    one stored before the plain-name rule is written as its plain name (`ids.plain_name`), and either
    way nothing lands outside the folder of its own."""
    from ddpbench.config.ids import plain_name, stored_id_problem
    from ddpbench.history import open_store
    from ddpbench.history.store import HistoryRun

    with work_folder() as (root, work):
        url = f"sqlite:///{os.path.join(root, 'history.sqlite')}"
        values = {"throughput": 1.0, "efficiency": None, "exposed_share": None}
        with open_store(url) as store:
            store.add_sweep([HistoryRun("cpu-x-2c", value, ("mlp",), "mlp", "s1", "r1", "", "2026-12-01", values)])
        out = os.path.join(work, "csv")
        code, err = run_command(["history", "export", out, "--store", url])
        written = [path for path in files_under(root) if not path.startswith(os.path.join(root, "history.sqlite"))]
        if stored_id_problem(value) is not None:
            assert code == 2 and len(err.strip().splitlines()) == 1 and written == [], (code, err, written)
            return
        assert code == 0, err
        folder = os.path.join(out, "cpu-x-2c", plain_name(value))
        assert written and all(inside(path, folder) for path in written), (value, written)
        assert plain_name(value) == value or not expected_plain(value, nested=False)


@settings(max_examples=2000, deadline=None, database=None)
@given(first=ids, second=ids)
def test_two_plain_sweep_ids_never_share_a_trainjob_name(first, second):
    from ddpbench.running.trainjob import job_name

    if first == second or not (expected_plain(first, True) and expected_plain(second, True)):
        return
    try:
        names = job_name(first, 2), job_name(second, 2)
    except SpecError as exc:  # too long for the pods' names: refused, never shared
        assert "too long" in str(exc)
        return
    assert names[0] != names[1], (first, second, names)


SAVED_SWEEP = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures", "sweeps", "cpu-mlp-with-failure")


@END_TO_END
@given(value=ids)
def test_a_baseline_is_saved_under_its_machine_class_and_a_plain_suite_only(value):
    """`history baseline` names its folder after the sweep's stored suite: a plain name is kept, any
    other becomes `custom`, and nothing lands outside --baselines."""
    import json
    import shutil

    with work_folder() as (root, work):
        sweep = os.path.join(root, "sweep")
        shutil.copytree(SAVED_SWEEP, sweep, ignore=shutil.ignore_patterns("traces", "logs"))
        with open(os.path.join(sweep, "manifest.json")) as handle:
            manifest = json.load(handle)
        manifest["options"] = {"suite": value}
        with open(os.path.join(sweep, "manifest.json"), "w") as handle:
            json.dump(manifest, handle)
        baselines = os.path.join(work, "b")
        code, err = run_command(["history", "baseline", sweep, "--baselines", baselines])
        assert code == 0, err
        folders = {os.path.relpath(os.path.dirname(path), baselines) for path in files_under(baselines)}
        suite = value if expected_plain(value, nested=False) else "custom"
        assert {folder.split(os.sep)[1] for folder in folders} == {suite}, (value, folders)
        assert all(inside(path, baselines) for path in files_under(root) if not inside(path, sweep))
