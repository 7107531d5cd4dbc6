"""Large runs: step times in a checksummed .npy sidecar, written by the one writer above a size
threshold and read back by the one loader, so readers never know. Records are built in tmp from
the real fixture run by benchmarks/synthetic.py, small enough to be fast."""

import json
import os
import sys

import numpy as np
import pytest
from conftest import REPO

from ddpbench.analysis.registry import record_iteration_times_s
from ddpbench.records.sidecar import StepTimes, step_time_matrix
from ddpbench.records.store import UnreadableRecord, load_record, read_records, write_record

sys.path.insert(0, os.path.join(REPO, "benchmarks"))
import synthetic  # noqa: E402


def large(tmp_path, world_size=16, steps=50, threshold=100):
    record = synthetic.enlarge(synthetic.fixture_record("mlp-ddp-n2"), world_size, steps, "big", seed=1, slow_rank=5)
    return record, write_record(record, str(tmp_path), sidecar_min_values=threshold)


def sidecars(tmp_path):
    return sorted(name for name in os.listdir(tmp_path / "runs") if name.endswith(".npy"))


def test_step_times_round_trip_through_the_sidecar_exactly(tmp_path):
    record, path = large(tmp_path)
    raw = json.load(open(path))
    reference = raw["step_times_sidecar"]
    assert reference["shape"] == [16, 50] and reference["file"] in sidecars(tmp_path)
    assert all(rank["step_times_s"] == [] for rank in raw["ranks"])  # not twice on disk
    loaded = load_record(path)
    for before, after in zip(record.ranks, loaded.ranks):
        assert isinstance(after.step_times_s, StepTimes)
        assert after.step_times_s == before.step_times_s  # float64: exact
        assert list(after.step_times_s) == before.step_times_s and len(after.step_times_s) == 50
    matrix = step_time_matrix(loaded.ranks)
    assert matrix.shape == (16, 50) and matrix is loaded.ranks[0].step_times_s.matrix  # no copy
    assert record_iteration_times_s(loaded) == record_iteration_times_s(record)
    assert loaded.metrics == record.metrics


def test_small_runs_stay_inline(tmp_path):
    _, path = large(tmp_path, world_size=2, steps=10, threshold=100)
    assert json.load(open(path))["step_times_sidecar"] is None
    assert len(json.load(open(path))["ranks"][0]["step_times_s"]) == 10
    assert sidecars(tmp_path) == []


def test_rewriting_a_loaded_record_keeps_one_sidecar(tmp_path):
    _, path = large(tmp_path)
    first = sidecars(tmp_path)
    loaded = load_record(path)
    loaded.ranks[3].step_times_s = [t * 2 for t in loaded.ranks[3].step_times_s]  # the launcher edits, rewrites
    write_record(loaded, str(tmp_path), sidecar_min_values=100)
    assert len(sidecars(tmp_path)) == 1 and sidecars(tmp_path) != first  # the old one is gone
    again = load_record(path)
    assert again.ranks[3].step_times_s == loaded.ranks[3].step_times_s
    assert again.ranks[4].step_times_s == loaded.ranks[4].step_times_s


def test_a_changed_sidecar_is_an_unreadable_record_naming_the_file(tmp_path):
    _, path = large(tmp_path)
    sidecar = tmp_path / "runs" / sidecars(tmp_path)[0]
    matrix = np.load(sidecar)
    matrix[5, 0] = 0.001  # someone "fixed" the slow rank
    np.save(sidecar, matrix)
    with pytest.raises(UnreadableRecord, match="sha256 .* does not match") as error:
        load_record(path)
    assert str(sidecar) in str(error.value) and path in str(error.value)
    records, unreadable = read_records(str(tmp_path))
    assert records == [] and unreadable[0][0] == path and str(sidecar) in unreadable[0][1]


def test_a_missing_sidecar_is_an_unreadable_record_naming_the_file(tmp_path):
    _, path = large(tmp_path)
    sidecar = tmp_path / "runs" / sidecars(tmp_path)[0]
    os.unlink(sidecar)
    with pytest.raises(UnreadableRecord, match="cannot read") as error:
        load_record(path)
    assert str(sidecar) in str(error.value)


def test_a_sidecar_path_outside_the_record_folder_is_refused(tmp_path):
    _, path = large(tmp_path)
    raw = json.load(open(path))
    raw["step_times_sidecar"]["file"] = "../../elsewhere.npy"
    open(path, "w").write(json.dumps(raw))
    with pytest.raises(UnreadableRecord, match="file name beside the record"):
        load_record(path)


def test_non_numbers_in_large_step_times_are_refused_when_written(tmp_path):
    record, _ = large(tmp_path)
    record.ranks[2].step_times_s = ["fast"] * 50
    with pytest.raises(ValueError, match="does not fit its schema"):
        write_record(record, str(tmp_path / "other"), sidecar_min_values=100)
    assert not os.path.exists(tmp_path / "other" / "runs" / "big.json")


def test_a_saved_baseline_keeps_large_runs_sidecars(tmp_path):
    from ddpbench.gate.baselines import save_baseline

    large(tmp_path / "sweep")
    saved = save_baseline(str(tmp_path / "sweep"), root=str(tmp_path / "baselines"))
    records, unreadable = read_records(saved)
    assert unreadable == [] and len(records) == 1
    assert len(records[0][1].ranks[0].step_times_s) == 50
