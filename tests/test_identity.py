"""One configuration identity for the table, explain, the gate and the history: a workload file is
one however its path is written, two files of one name are two, a change of data-loader workers is
another configuration, and records and history written before it still match. Saved records only;
every assert is exact (no false-failure rate)."""

import dataclasses
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
from ddpbench.gate.values import LEGACY_KEY_LENGTH, run_key
from ddpbench.records.store import load_record, read_records

SWEEP = os.path.join(FIXTURES, "sweeps", "cpu-mlp-with-failure")
SLOW_RANK = os.path.join(FIXTURES, "sweeps", "slow-rank")
HISTORY = os.path.join(FIXTURES, "history", "cpu-amd-epyc-2c", "custom")


def _with(record, **changes):
    return replace(record, spec=dataclasses.replace(record.spec, **changes))


def _slow_rank(workload: str, suffix: str = ""):
    """The slow-rank sweep's records with their workload written another way."""
    found = []
    for path, record in read_records(SLOW_RANK)[0]:
        run_id = record.run_id + suffix
        found.append((path, replace(_with(record, workload=workload, run_id=run_id), run_id=run_id)))
    return found


def test_one_file_written_three_ways_is_one_workload_and_two_files_of_one_name_are_two(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    record = load_record(os.path.join(SLOW_RANK, "runs", "slow2.json"))
    absolute = str(tmp_path / "w.py")
    keys = {identity_key(_with(record, workload=w).spec) for w in ("./w.py:make", "w.py:make", f"{absolute}:make")}
    assert len(keys) == 1 and next(iter(keys))[0] == "w.py:make"
    assert canonical_path("a/../w.py") == "w.py" and canonical_path("/elsewhere/w.py") == "/elsewhere/w.py"
    apart = {identity_key(_with(record, workload=f"{d}/train.py:make").spec) for d in ("a", "b")}
    assert len(apart) == 2
    assert FIELD_NAMES[0] == "workload" and "num_workers" in FIELD_NAMES and "data_dir" in FIELD_NAMES


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


def test_the_gate_compares_a_file_written_three_ways_as_one_workload(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    sides = [
        [r for _, r in _slow_rank(w, f"-{i}")]
        for i, w in enumerate(("./planted.py:slow", "planted.py:slow", f"{tmp_path}/planted.py:slow"))
    ]
    for baseline, candidate in ((sides[0], sides[1]), (sides[1], sides[2])):
        comparisons, notes = compare(baseline, candidate, GateSettings(), allow_failed=True)
        assert not any(c.verdict == "not comparable" for c in comparisons), comparisons
        assert not any("only in the candidate" in note for note in notes), notes
        compared = {c.configuration.split("/")[0] for c in comparisons if c.measure == "throughput"}
        assert compared == {"planted.py:slow"}, comparisons
        assert len([c for c in comparisons if c.measure == "throughput"]) == 3  # local x1, ddp x1, ddp x2


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
    through = {"nproc": "world_size", "compile": "strategy", "script": "script", "ddp": "ddp"}
    covered = set()
    for option in CONFIGURATION_OPTIONS:
        if option.dest in UNKEYED:
            continue
        for field in option.fields:
            top = field.split(".")[0]
            name = through.get(top, top)
            assert name in FIELD_NAMES, f"{option.flag} sets {field}, which the identity does not key by"
            covered.add(name)
    assert set(UNKEYED) <= {option.dest for option in CONFIGURATION_OPTIONS}
    # Every part of the identity comes from a declared option (world_size from nproc and nodes).
    assert set(FIELD_NAMES) - covered == set(), set(FIELD_NAMES) - covered
