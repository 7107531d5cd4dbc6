"""The scaling table and ddpbench.load, on a committed sweep made by a real CPU run."""

import json
import os
import shutil

import pytest
from conftest import FIXTURES
from conftest import ddpbench as run_cli

import ddpbench
from ddpbench.analysis.frames import format_side_by_side, runs_frame, scaling_table
from ddpbench.records.store import read_records

SWEEP = os.path.join(FIXTURES, "sweeps", "cpu-mlp-with-failure")


def records_by_id():
    folder = os.path.join(SWEEP, "runs")
    return {name[:-5]: json.load(open(os.path.join(folder, name))) for name in os.listdir(folder)}


def test_load_gives_one_row_per_record():
    runs = ddpbench.load(SWEEP)
    assert len(runs) == 10
    assert sorted(runs["status"].unique()) == ["failed", "ok"]
    failed = runs[runs["status"] == "failed"]
    assert failed["error"].str.contains("broken on purpose").all()


def test_scaling_table_numbers_are_recomputed_from_the_records():
    records = records_by_id()
    table = scaling_table(ddpbench.load(SWEEP)).set_index(["strategy", "world_size"])
    assert len(table) == 5  # ok runs only: the failed workload has no rows
    reference = records["mlp-local-n1"]["metrics"]
    x1 = reference["global_samples"] / reference["window_s"]
    for (strategy, world_size), row in table.iterrows():
        metrics = records[f"mlp-{strategy}-n{world_size}"]["metrics"]
        throughput = metrics["global_samples"] / metrics["window_s"]
        assert row["throughput"] == pytest.approx(throughput)
        assert row["speedup"] == pytest.approx(throughput / x1)
        assert row["efficiency"] == pytest.approx(throughput / (world_size * x1))
        assert row["global_batch"] == 8 * world_size


def test_cpu_data_parallel_is_labelled_for_what_it_is():
    table = scaling_table(ddpbench.load(SWEEP))
    labels = set(table[table["strategy"] == "dp"]["strategy_label"])
    assert labels == {
        "DataParallel on CPU (one process, 1 thread, no replication)",
        "DataParallel on CPU (one process, 2 threads, no replication)",
    }
    assert "nothing is replicated" in format_side_by_side(table)


def test_without_a_local_run_speedup_stays_empty():
    # The table's figures are the records' (the answers model): leave the local runs out of the
    # records, not out of the frame.
    records, _ = read_records(SWEEP)
    table = scaling_table(runs_frame([(path, r) for path, r in records if r.spec.strategy != "local"]))
    assert table["speedup"].isna().all() and table["throughput"].notna().all()


def test_a_corrupt_record_is_named_and_skipped(tmp_path):
    copy = tmp_path / "sweep"
    shutil.copytree(SWEEP, copy)
    (copy / "runs" / "mlp-dp-n2.json").write_text('{"schema_version": 1, "run_id": ')
    with pytest.warns(UserWarning, match="mlp-dp-n2.json"):
        runs = ddpbench.load(str(copy))
    assert len(runs) == 9 and len(runs.attrs["unreadable"]) == 1


def test_table_command_prints_the_table_again_and_lists_failures():
    done = run_cli("table", SWEEP)
    assert done.returncode == 1  # the sweep holds failed runs
    assert "ddp E" in done.stdout and "dp X" in done.stdout
    assert done.stdout.count("FAILED: broken-") == 5


def test_table_of_an_empty_folder_is_a_usage_error(tmp_path):
    done = run_cli("table", str(tmp_path))
    assert done.returncode == 2 and "holds no run records" in done.stderr
