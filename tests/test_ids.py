"""Ids that name a file or folder inside a folder the user chose: one check (ddpbench/config/ids.py)
for run ids, sweep ids, suite names, baseline folders, a history store's names and TrainJob names.
Every command that takes an id is tried with `../` and absolute ids: one line, exit code 2, and
nothing written anywhere, neither inside the output folder nor where the id points."""

from __future__ import annotations

import os

import pytest

from ddpbench.cli import main
from ddpbench.config.errors import SpecError
from ddpbench.config.ids import check_id, id_problem, is_plain_id

ESCAPES = ["../../escaped", "/tmp/ddpbench-escaped", "a/../../escaped", "..", "a\\..\\b"]


@pytest.mark.parametrize(
    "value, nested, problem",
    [
        ("mlp-ddp-n2", False, None),
        ("nightly/2026-12-01", True, None),
        ("nightly/2026-12-01", False, "it holds a '/'"),
        ("../x", True, "it holds '..', '.' or an empty folder name"),
        ("a/./b", True, "it holds '..', '.' or an empty folder name"),
        ("a//b", True, "it holds '..', '.' or an empty folder name"),
        ("a/", True, "it holds '..', '.' or an empty folder name"),
        ("/abs", True, "it is an absolute path"),
        ("a\\b", True, "it holds '\\\\'"),
        ("a\0b", False, "it holds '\\x00'"),
        (" x", False, "it holds ' '"),
        ("inj\n#SBATCH --mail-user=x", True, "it holds '\\n'"),
        ("a;b", False, "it holds ';'"),
        ("$(x)", False, "it holds '$'"),
        ("x" * 129, False, "it is 129 characters long"),
        ("x" * 128, False, None),
        ("Nightly_1.2-b", False, None),
        ("", False, "it is empty"),
        (None, False, "it is empty"),
    ],
)
def test_what_an_id_may_be(value, nested, problem):
    assert id_problem(value, nested) == problem
    if problem is None:
        assert check_id("--x", value, "OUT", nested) == value
    else:
        with pytest.raises(SpecError, match=r"^--x must be .* OUT"):
            check_id("--x", value, "OUT", nested)


def test_a_suite_name_from_a_stored_manifest_is_one_folder_or_custom(tmp_path):
    from ddpbench.gate.baselines import suite_of

    assert is_plain_id("cpu") and not is_plain_id("../cpu")
    (tmp_path / "manifest.json").write_text('{"options": {"suite": "../../elsewhere"}}')
    assert suite_of(str(tmp_path)) == "custom"


SWEEP_ARGS = ["--suite", "smoke", "--strategies", "local", "--device", "cpu"]
TRAINJOB_ARGS = ["--max-nproc", "1", "--image", "registry.example/ddpbench:1", "--manifests", "m"]
COMMANDS = {
    "run --run-id": lambda bad: ["run", "--workload", "mlp", "--device", "cpu", "--out", "out", "--run-id", bad],
    "tune --run-id": lambda bad: ["tune", "--workload", "mlp", "--device", "cpu", "--nproc", "2", "--run-id", bad],
    "sweep --sweep-id": lambda bad: ["sweep", *SWEEP_ARGS, "--out", "out", "--sweep-id", bad],
    "sweep --resume --sweep-id": lambda bad: ["sweep", "--resume", "--out", "out", "--sweep-id", bad],
    "sbatch --sweep-id": lambda bad: ["sbatch", *SWEEP_ARGS, "--out", "out", "--sweep-id", bad, "--print"],
    "trainjob --sweep-id": lambda bad: ["trainjob", *TRAINJOB_ARGS, "--sweep-id", bad],
}


@pytest.mark.parametrize("bad", ESCAPES)
@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_command_with_an_id_refuses_one_that_leaves_its_folder(command, bad, tmp_path, monkeypatch, capsys):
    from ddpbench.running import launch, tune

    work = tmp_path / "work" / "deep"
    work.mkdir(parents=True)
    monkeypatch.chdir(work)
    refuse = lambda *a, **k: pytest.fail(f"{command} {bad!r} started a run")  # noqa: E731
    monkeypatch.setattr(launch, "launch_with_oom_backoff", refuse)
    monkeypatch.setattr(tune, "launch", refuse)
    code = main(COMMANDS[command](bad))
    out, err = capsys.readouterr()
    assert code == 2, out + err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert f"got {bad!r}" in err, err
    written = [os.path.join(folder, name) for folder, _, names in os.walk(tmp_path) for name in names]
    assert written == [] and sorted(os.listdir(work)) == [], written
    assert not os.path.exists("/tmp/ddpbench-escaped")


def test_sbatch_with_an_escaping_sweep_id_writes_no_batch_script(tmp_path, capsys):
    """The issue's own case: `sbatch --out o --sweep-id ../../escaped --print` once wrote
    sbatch.sh two folders above `o`."""
    out = tmp_path / "a" / "b" / "o"
    code = main(["sbatch", *SWEEP_ARGS, "--out", str(out), "--sweep-id", "../../escaped", "--print"])
    _, err = capsys.readouterr()
    assert code == 2 and err.startswith("ddpbench sbatch: error: --sweep-id must be a plain name inside --out")
    assert not os.path.exists(tmp_path / "a" / "escaped") and not os.path.exists(out)


def test_a_sweep_id_may_hold_sub_folders(tmp_path, capsys):
    code = main(["sbatch", *SWEEP_ARGS, "--out", str(tmp_path), "--sweep-id", "nightly/2026-12-01", "--print"])
    _, err = capsys.readouterr()
    assert code == 0, err
    assert (tmp_path / "nightly" / "2026-12-01" / "sbatch.sh").is_file()


def test_history_export_refuses_a_stored_name_that_leaves_its_folder(tmp_path, capsys):
    from ddpbench.history import open_store
    from ddpbench.history.store import HistoryRun

    url = f"sqlite:///{tmp_path / 'history.sqlite'}"
    values = {"throughput": 1.0, "efficiency": None, "exposed_share": None}
    with open_store(url) as store:
        store.add_sweep(
            [HistoryRun("cpu-x-2c", "../../escaped", ("mlp",), "mlp", "s1", "r1", "", "2026-12-01T00:00:00", values)]
        )
    out = tmp_path / "csv" / "deep"
    code = main(["history", "export", str(out), "--store", url])
    _, err = capsys.readouterr()
    assert code == 2 and "a stored suite must stay inside" in err, err
    assert not os.path.exists(tmp_path / "csv") and not os.path.exists(tmp_path / "escaped")


def sbatch_directive_words(line: str) -> list[str]:
    """An #SBATCH line's words as sbatch reads them (slurm src/sbatch/opt.c, _get_argument): blanks
    split words, a backslash takes the next character as it is, single or double quotes group,
    and an unquoted '#' ends the line."""
    words, word, quote, escaped, started = [], "", None, False, False
    for character in line[len("#SBATCH") :]:
        if escaped:
            word, escaped, started = word + character, False, True
        elif character == "\\":
            escaped = True
        elif quote:
            if character == quote:
                quote = None
            else:
                word += character
        elif character in "'\"":
            quote, started = character, True
        elif character == "#":
            break
        elif character.isspace():
            if started:
                words.append(word)
            word, started = "", False
        else:
            word, started = word + character, True
    return words + ([word] if started else [])


def test_a_user_path_with_quotes_blanks_and_a_hash_is_quoted_in_the_batch_script(tmp_path, capsys):
    out = tmp_path / 'my "out" #1 \\ $HOME'
    code = main(["sbatch", *SWEEP_ARGS, "--out", str(out), "--sweep-id", "n1", "--print", "--account", "a b"])
    _, err = capsys.readouterr()
    assert code == 0, err
    lines = (out / "n1" / "sbatch.sh").read_text().splitlines()
    directives = {line.split("=")[0]: sbatch_directive_words(line) for line in lines if line.startswith("#SBATCH")}
    assert directives["#SBATCH --output"] == [f"--output={out / 'n1' / 'slurm-%j.out'}"]
    assert directives["#SBATCH --account"] == ["--account=a b"]
    assert directives["#SBATCH --job-name"] == ["--job-name=ddpbench-n1"]


@pytest.mark.parametrize("option", ["--out", "--sbatch-option"])
def test_a_line_break_that_would_write_its_own_directive_is_refused(tmp_path, capsys, option):
    value = "o\n#SBATCH --mail-user=x"
    args = ["--out", str(tmp_path / value)] if option == "--out" else ["--out", str(tmp_path / "o"), option, value]
    code = main(["sbatch", *SWEEP_ARGS, "--sweep-id", "n1", "--print", *args])
    _, err = capsys.readouterr()
    assert code == 2 and len(err.strip().splitlines()) == 1 and "line break" in err, err
    assert os.listdir(tmp_path) == []


def test_two_sweep_ids_never_share_a_trainjob_name():
    """`Nightly/1`, `nightly-1`, `nightly_1` and `nightly.1` once all made ddpbench-nightly-1-n2: the
    one applied last replaced the other jobs. An id that is a name already keeps it as it is."""
    from ddpbench.running.trainjob import job_name

    ids = ["Nightly/1", "nightly-1", "nightly_1", "nightly.1", "nightly/1", "NIGHTLY-1"]
    names = [job_name(sweep_id, 2) for sweep_id in ids]
    assert len(set(names)) == len(ids), names
    assert job_name("nightly-1", 2) == "ddpbench-nightly-1-n2"
    assert all(name.startswith("ddpbench-nightly-1-") and name.endswith("-n2") for name in names)


def test_ids_stored_before_the_plain_name_rule_keep_loading(tmp_path):
    """A record whose run id has a blank (written before the rule) loads, and gates; a new run
    with that id is refused."""
    import json
    import shutil

    from conftest import FIXTURES

    from ddpbench.records.store import load_record

    source = os.path.join(FIXTURES, "sweeps", "cpu-mlp-with-failure", "runs", "mlp-ddp-n2.json")
    record = json.load(open(source))
    record["run_id"] = record["spec"]["run_id"] = "old run #1"
    path = tmp_path / "old.json"
    path.write_text(json.dumps(record))
    assert load_record(str(path)).spec.run_id == "old run #1"
    shutil.copy(path, tmp_path / "again.json")
    assert main(["gate", "--baseline", str(path), "--candidate", str(tmp_path / "again.json")]) == 0
    with pytest.raises(SpecError, match="--run-id must be a plain name"):
        check_id("--run-id", "old run #1", "--out")


def test_a_run_id_made_from_a_workload_file_of_any_name_is_a_plain_name_of_its_own(tmp_path):
    """A user's file may be named anything (`my model.py`); the run ids made from it are plain
    names, and two files whose names clean up alike keep apart by a short hash."""
    from ddpbench.config.ids import plain_name

    assert plain_name("mlp") == "mlp"  # a plain name stays as it is
    made = [plain_name(name) for name in ("my model.make", "my-model.make", "my_model;make", "-x.make", "é")]
    assert all(id_problem(name) is None for name in made) and len(set(made)) == len(made), made
    assert made[1] == "my-model.make" and made[0].startswith("my-model.make-")
    from ddpbench.config.plan import SweepOptions, plan_sweep

    for name in ("my model.py", "my-model.py"):
        (tmp_path / name).write_text("def make(size='tiny'):\n    raise NotImplementedError\n")
    options = SweepOptions(
        device="cpu",
        max_world_size=2,
        cores=2,
        suite="cpu",
        workloads=(f"{tmp_path / 'my model.py'}:make", f"{tmp_path / 'my-model.py'}:make"),
        strategies=("local",),
    )
    run_ids = [spec.run_id for spec in plan_sweep(options, str(tmp_path / "out"))]
    assert all(id_problem(run_id) is None for run_id in run_ids) and len(set(run_ids)) == len(run_ids), run_ids


@pytest.mark.parametrize("command", ["run --run-id", "tune --run-id"])
def test_a_run_id_argparse_reads_as_nothing_is_refused_not_replaced(command, tmp_path, monkeypatch, capsys):
    """`--run-id=--` reaches the command as [] (argparse drops the '--'): refused in one line, where a
    check on truthiness took it for "choose one" and ran under a made-up id (found by the property test)."""
    from ddpbench.running import launch, tune

    monkeypatch.chdir(tmp_path)
    refuse = lambda *a, **k: pytest.fail(f"{command} '--' started a run")  # noqa: E731
    monkeypatch.setattr(launch, "launch_with_oom_backoff", refuse)
    monkeypatch.setattr(tune, "launch", refuse)
    argv = [arg for arg in COMMANDS[command]("X") if arg not in ("--run-id", "X")] + ["--run-id=--"]
    code = main(argv)
    out, err = capsys.readouterr()
    assert code == 2 and len(err.strip().splitlines()) == 1 and "--run-id must be a plain name" in err, out + err
    assert os.listdir(tmp_path) == []
