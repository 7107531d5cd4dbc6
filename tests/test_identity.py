"""One configuration identity for the table, explain, the gate and the history: a workload file is
one however its path is written, two files of one name are two, a change of data-loader workers is
another configuration, and records and history written before it still match. Saved records only;
every assert is exact (no false-failure rate)."""

import dataclasses
import json
import os
import shutil

from conftest import FIXTURES
from msgspec.structs import replace

from ddpbench.analysis.answers import answer_sweep
from ddpbench.analysis.frames import runs_frame, scaling_table
from ddpbench.config.identity import FIELD_NAMES, canonical_path, identity_key
from ddpbench.gate.compare import compare
from ddpbench.gate.history import add_sweep, key_of, read_history, with_current_keys
from ddpbench.gate.stats import GateSettings
from ddpbench.gate.values import LEGACY_KEY_LENGTH, describe, run_key
from ddpbench.records.store import load_record, read_records

SWEEP = os.path.join(FIXTURES, "sweeps", "cpu-mlp-with-failure")
SLOW_RANK = os.path.join(FIXTURES, "sweeps", "slow-rank")
HISTORY = os.path.join(FIXTURES, "history", "cpu-amd-epyc-2c", "custom")


def _with(record, **changes):
    return replace(record, spec=dataclasses.replace(record.spec, **changes))


WORKLOAD_FILE = "def make(size, data_dir=None):\n    raise NotImplementedError\n"


def started(folder, workload: str, record, monkeypatch, **changes):
    """`record` as a run of `workload` started in `folder` would be recorded: its spec resolved there,
    as `ddpbench run` resolves it before the run starts."""
    from ddpbench.running.resolve import resolve

    monkeypatch.chdir(folder)
    spec = resolve(dataclasses.replace(record.spec, workload=workload, **changes), gpu_count=0, cores=2)
    return replace(record, spec=spec)


def test_one_file_written_three_ways_is_one_workload_from_any_folder_and_two_files_of_one_name_are_two(
    tmp_path, monkeypatch
):
    """A record kept the path as typed and the identity resolved it against the folder of whoever read
    it: from another folder `./w.py` read as `w.py` and `/proj/w.py` stayed as it was, and the
    `train.py` of sweeps run in `/proj/a` and `/proj/b` became one. Fixed when the run is recorded."""
    record = load_record(os.path.join(SLOW_RANK, "runs", "slow2.json"))
    for folder in ("proj", "proj/a", "proj/b", "elsewhere"):
        (tmp_path / folder).mkdir(parents=True)
    for folder in ("proj", "proj/a", "proj/b"):
        for name in ("w.py", "train.py"):
            (tmp_path / folder / name).write_text(WORKLOAD_FILE)
    proj = tmp_path / "proj"
    spellings = ("./w.py:make", "w.py:make", f"{proj}/w.py:make")
    runs = [started(proj, spelling, record, monkeypatch) for spelling in spellings]
    runs.append(started(proj / "a", "../w.py:make", record, monkeypatch))
    a_b = [started(proj / folder, "train.py:make", record, monkeypatch) for folder in ("a", "b")]
    for reader in (proj, tmp_path / "elsewhere", proj / "a"):
        monkeypatch.chdir(reader)
        keys = {identity_key(run.spec) for run in runs}
        assert len(keys) == 1, (reader, keys)
        assert len({identity_key(run.spec) for run in a_b}) == 2, reader
    assert [run.spec.workload for run in runs[:3]] == list(spellings)  # as typed, for display
    assert canonical_path("a/../w.py") == "w.py" and canonical_path("/elsewhere/w.py") == "/elsewhere/w.py"
    assert FIELD_NAMES[0] == "workload" and {"num_workers", "data_dir", "sample_unit", "ablation"} <= set(FIELD_NAMES)


def test_the_gate_compares_a_file_written_three_ways_as_one_workload_from_any_folder(tmp_path, monkeypatch):
    (tmp_path / "proj").mkdir()
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "proj" / "planted.py").write_text("def slow(size, data_dir=None):\n    raise NotImplementedError\n")
    sides = [
        [started(tmp_path / "proj", w, r, monkeypatch, run_id=f"{r.run_id}-{i}") for _, r in read_records(SLOW_RANK)[0]]
        for i, w in enumerate(("./planted.py:slow", "planted.py:slow", f"{tmp_path}/proj/planted.py:slow"))
    ]
    for reader in ("proj", "elsewhere"):
        monkeypatch.chdir(tmp_path / reader)
        for baseline, candidate in ((sides[0], sides[1]), (sides[1], sides[2])):
            comparisons, notes = compare(baseline, candidate, GateSettings(), allow_failed=True)
            assert not any(c.verdict == "not comparable" for c in comparisons), comparisons
            assert not any("only in the candidate" in note for note in notes), notes
            compared = {c.configuration.split("/")[-2] for c in comparisons if c.measure == "throughput"}
            assert len(compared) == 1 and compared.pop().endswith("planted.py:slow"), comparisons
            assert len([c for c in comparisons if c.measure == "throughput"]) == 3  # local x1, ddp x1, ddp x2


def git(folder, *args):
    import subprocess

    return subprocess.run(["git", "-C", str(folder), *args], check=True, capture_output=True, text=True).stdout


def test_two_worktrees_and_a_clone_of_a_repository_are_one_configuration_shown_by_the_path_inside_it(
    tmp_path, monkeypatch
):
    """`ab` and `bisect` run each side in a worktree of its own, and CI checks out at other paths: the
    file is its path inside the repository and the repository its root commit, the same in each."""
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q")
    git(repo, "config", "user.email", "t@example.com")
    git(repo, "config", "user.name", "t")
    (repo / "models").mkdir()
    (repo / "models" / "w.py").write_text(WORKLOAD_FILE)
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "one")
    (repo / "models" / "w.py").write_text(WORKLOAD_FILE + "# two\n")
    git(repo, "commit", "-qam", "two")
    git(repo, "worktree", "add", "-q", str(tmp_path / "tree-a"), "HEAD~1")
    git(repo, "worktree", "add", "-q", str(tmp_path / "tree-b"), "HEAD")
    git(tmp_path, "clone", "-q", str(repo), str(tmp_path / "ci" / "checkout"))
    record = load_record(os.path.join(SLOW_RANK, "runs", "slow2.json"))
    runs = [
        started(tmp_path / "tree-a", "models/w.py:make", record, monkeypatch),
        started(tmp_path / "tree-b" / "models", "w.py:make", record, monkeypatch),
        started(tmp_path / "ci" / "checkout", "./models/w.py:make", record, monkeypatch),
    ]
    monkeypatch.chdir(tmp_path)
    assert len({run_key(run) for run in runs}) == 1
    assert describe(run_key(runs[0])).startswith("models/w.py:make/")
    # Outside the repository, a copy of the file is another file.
    (tmp_path / "copy").mkdir()
    (tmp_path / "copy" / "models").mkdir()
    (tmp_path / "copy" / "models" / "w.py").write_text(WORKLOAD_FILE)
    other = started(tmp_path / "copy", "models/w.py:make", record, monkeypatch)
    assert run_key(other) != run_key(runs[0])


def test_records_made_before_are_located_from_the_folder_they_ran_in_or_matched_as_typed_with_a_note(
    tmp_path, monkeypatch
):
    """A record written before runs kept their files' places lies in `<the folder it ran in>/<its
    out_dir>/runs/`: its loader takes that folder, and its relative path is the file there, whoever
    reads it. Where its folder is not known (an absolute out_dir, or records moved), it is matched
    by its path as typed, and the gate says so."""
    from ddpbench.records.store import write_record

    record = load_record(os.path.join(SLOW_RANK, "runs", "slow2.json"))
    proj = tmp_path / "proj"
    proj.mkdir()
    (proj / "w.py").write_text(WORKLOAD_FILE)
    for spelling, out, run_id in (("./w.py:make", "results/s1", "old-1"), ("w.py:make", "results/s2", "old-2")):
        old = replace(
            record, run_id=run_id, spec=dataclasses.replace(record.spec, workload=spelling, out_dir=out, run_id=run_id)
        )
        write_record(old, str(proj / out))
    new = started(proj, "w.py:make", record, monkeypatch)
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    found = [r for folder in ("s1", "s2") for _, r in read_records(str(proj / "results" / folder))[0]]
    assert {r.spec.started_in for r in found} == {str(proj)}
    assert {run_key(r) for r in found} == {run_key(new)}
    # Moved out of the folder they ran in: matched as typed, with a note.
    shutil.copytree(proj / "results", tmp_path / "moved")
    moved = [r for folder in ("s1", "s2") for _, r in read_records(str(tmp_path / "moved" / folder))[0]]
    assert {r.spec.started_in for r in moved} == {None}
    assert len({run_key(r) for r in moved}) == 1 and run_key(moved[0]) != run_key(new)
    _, notes = compare(moved, moved, GateSettings(), allow_failed=True)
    assert any("2 record(s) name ./w.py, w.py without saying which folder they ran in" in note for note in notes), notes


def test_the_sample_unit_and_the_ablation_are_part_of_the_configuration():
    """Throughputs in two units pooled into one X, and runs with and without the in-process ablation
    (`--no-profile`) into one answer."""
    records = [(p, r) for p, r in read_records(os.path.join(FIXTURES, "sweeps", "cpu-default-suite"))[0]]
    mlp = [(p, r) for p, r in records if r.spec.workload == "mlp"]
    tokens = [
        (p, replace(r, run_id=r.run_id + "-t", metrics=replace(r.metrics, sample_unit="tokens")))
        for p, r in mlp
        if r.spec.strategy == "ddp"
    ]
    answers, _ = answer_sweep(mlp + tokens)
    assert sorted(len(a.runs) for a in answers) == [3, 3], [a.run_ids for a in answers]
    # Each unit's configuration has its own X(1): the tokens one none (no local run counts tokens).
    assert sorted(a.efficiency is None for a in answers) == [False, True]
    profiled = [(p, r) for p, r in mlp if r.spec.strategy == "ddp"]
    unprofiled = [(p, _with(r, profile=False)) for p, r in profiled[:1]]
    unprofiled = [(p, replace(r, run_id=r.run_id + "-np")) for p, r in unprofiled]
    keys = {run_key(r) for _, r in profiled + unprofiled}
    assert len(keys) == 2
    table = scaling_table(runs_frame(mlp + unprofiled))
    assert len(table[(table["strategy"] == "ddp")]) == 2


def test_a_change_of_data_loader_workers_is_another_configuration():
    records = read_records(SLOW_RANK)[0]
    more = [(p, replace(_with(r, num_workers=2, run_id=r.run_id + "-w"), run_id=r.run_id + "-w")) for p, r in records]
    both = records + more
    answers, _ = answer_sweep(both)
    assert sorted(len(a.runs) for a in answers if a.world_size == 2) == [1, 1]
    table = scaling_table(runs_frame(both))
    assert len(table[(table["strategy"] == "ddp") & (table["world_size"] == 2)]) == 2
    keys = {run_key(r) for _, r in both if r.spec.strategy == "ddp" and r.spec.world_size == 2}
    assert len(keys) == 2
    # Each configuration's X(1) is the local run with its own workers.
    assert all(a.efficiency is not None and len(a.runs[0].reference_run_ids) == 1 for a in answers if a.world_size == 2)
    workers = {a.runs[0].reference_run_ids[0] for a in answers if a.world_size == 2}
    assert workers == {"loc", "loc-w"}


def test_records_written_before_still_gate_against_new_ones():
    """The fixture sweep was recorded before the identity: gated against itself, every ok
    configuration is compared, none left unmatched."""
    old = [r for _, r in read_records(SWEEP)[0]]
    comparisons, notes = compare(old, old, GateSettings(), allow_failed=True)
    compared = {c.configuration for c in comparisons if c.measure == "throughput"}
    assert len(compared) == 5 and not any("only in the candidate" in note for note in notes)


def test_history_stored_under_legacy_keys_matches_and_migrates(tmp_path):
    stored = read_history(HISTORY)
    assert all(len(key) == LEGACY_KEY_LENGTH for key in stored)
    records = [r for _, r in read_records(SWEEP)[0] if r.status == "ok" and not r.failed_checks()]
    found = with_current_keys(stored, records)
    for record in records:
        key = key_of(record)
        assert key in found, key
        legacy = next(s for k, s in stored.items() if k[2] == record.spec.strategy and k[3] == record.spec.world_size)
        assert found[key].rows == legacy.rows
    # `history add` moves each legacy series to its current name, keeping its rows, and adds the new ones.
    root = tmp_path / "history"
    folder = root / "cpu-amd-epyc-2c" / "custom"
    shutil.copytree(HISTORY, folder)
    before = {tuple(s.key): len(s.rows) for s in stored.values()}
    written, _ = add_sweep(SWEEP, str(root))
    assert os.path.normpath(written) == os.path.normpath(folder)
    after = read_history(str(folder))
    assert all(len(key) == LEGACY_KEY_LENGTH + 1 for key in after) and len(after) == len(before)
    assert sorted(len(s.rows) for s in after.values()) == sorted(n + 1 for n in before.values())


def test_the_identity_keys_by_every_declared_option_that_sets_runs_apart():
    # One declaration (config.configuration) for the reproduce command and the identity: every
    # sweep option it declares is either in the identity or named in UNKEYED with why.
    from ddpbench.config.configuration import CONFIGURATION_OPTIONS, UNKEYED

    # RunSpec fields that reach the identity under another name: nproc through world_size,
    # compile through the strategy's name (ddp+compile), the script's parts through `script`.
    through = {"nproc": "world_size", "compile": "strategy", "script": "script", "ddp": "ddp", "profile": "ablation"}
    # What a script counts its throughput in keys the sample unit, as a workload's does.
    through_field = {"script.sample_unit": "sample_unit"}
    covered = set()
    for option in CONFIGURATION_OPTIONS:
        if option.dest in UNKEYED:
            continue
        for field in option.fields:
            top = field.split(".")[0]
            name = through_field.get(field, through.get(top, top))
            assert name in FIELD_NAMES, f"{option.flag} sets {field}, which the identity does not key by"
            covered.add(name)
    assert set(UNKEYED) <= {option.dest for option in CONFIGURATION_OPTIONS}
    # Every part of the identity comes from a declared option (world_size from nproc and nodes).
    assert set(FIELD_NAMES) - covered == set(), set(FIELD_NAMES) - covered


def previous_key(record) -> tuple:
    """The key the gate gave `record`'s configuration before its files were keyed by where they are
    and its unit and ablation at all, written out by hand (a built-in workload: no path to place)."""
    spec = record.spec
    ddp = json.dumps(dataclasses.asdict(spec.ddp), sort_keys=True) if spec.uses_ddp_knobs else ""
    rest = {"script": None, "nnodes": spec.nnodes, "scaling": spec.scaling, "num_workers": spec.num_workers}
    rest.update(data_dir=None, threads_per_rank=spec.threads_per_rank)
    parts = (spec.workload, spec.size, spec.strategy_name, spec.world_size, spec.batch_size, spec.precision)
    return (*parts, spec.device, ddp, json.dumps(rest, sort_keys=True))


def test_history_stored_under_the_previous_keys_follows_the_configuration_to_its_key(tmp_path):
    """Keys gained the sample unit and the ablation: a history stored before, as CSV series or in the
    store, still is each configuration's, and adding a sweep moves it to the current key."""
    from ddpbench.gate.history import Series, format_series
    from ddpbench.history import open_store
    from ddpbench.history.sweeps import sweep_runs

    records = [r for _, r in read_records(SWEEP)[0] if r.status == "ok" and not r.failed_checks()]
    ddp = next(r for r in records if r.spec.strategy == "ddp" and r.spec.world_size == 2)
    old = previous_key(ddp)
    assert old != key_of(ddp)
    rows = [{"ended_at": "2026-01-01T00:00:00", "sweep": "old", "run_id": "r", "git_sha": "", "throughput": 1.0}]
    rows[0].update(efficiency=0.5, exposed_share=None)
    folder = tmp_path / "history" / "cpu-amd-epyc-2c" / "custom"
    folder.mkdir(parents=True)
    (folder / "old.csv").write_text(format_series(Series(str(folder / "old.csv"), "old name", old, rows)))
    found = with_current_keys(read_history(str(folder)), records)
    assert key_of(ddp) in found and found[key_of(ddp)].rows[0]["sweep"] == "old"
    add_sweep(SWEEP, str(tmp_path / "history"))
    after = read_history(str(folder))
    assert old not in after and [row["sweep"] for row in after[key_of(ddp)].rows] == ["old", SWEEP.split(os.sep)[-1]]
    # The store: a series stored under the previous key takes the current one when a sweep is added.
    machine, suite, runs, _ = sweep_runs(SWEEP)
    with open_store(f"sqlite:///{tmp_path}/history.sqlite") as store:
        first = dataclasses.replace(runs[0], key=previous_key(ddp), sweep="old", run_id="r", configuration="old name")
        store.add_sweep([dataclasses.replace(first, earlier=None)])
        store.add_sweep(runs)
        keys = {tuple(s.key): len(s.runs) for s in store.series(machine, suite)}
    assert tuple(json.loads(json.dumps(list(previous_key(ddp))))) not in keys
    assert keys[key_of(ddp)] == 2
