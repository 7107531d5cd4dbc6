"""Real CPU sweeps: torchrun and plain workers, gloo, the smallest workload."""

import json
import os

import pytest
from conftest import REPO, foreign_lines
from conftest import ddpbench_process as run_cli

import ddpbench
from ddpbench.analysis.frames import scaling_table
from ddpbench.records.store import load_record
from ddpbench.report.summary import format_summary

pytestmark = pytest.mark.launches


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    out = tmp_path_factory.mktemp("sweeps")
    done = run_cli(
        "sweep",
        "--suite",
        "smoke",
        "--repeat",
        "1",
        "--workloads",
        "mlp",
        "--nproc",
        "2",
        "--steps",
        "8",
        "--warmup",
        "2",
        "--out",
        str(out),
        "--sweep-id",
        "s",
        cwd=out,
    )
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    # Five healthy runs, profiled: the terminal holds ddpbench's lines only.
    assert not foreign_lines(done.stdout + done.stderr), done.stdout + done.stderr
    return out / "s", done


def load_json(path):
    with open(path) as handle:
        return json.load(handle)


def test_sweep_runs_local_ddp_and_dp_at_world_sizes_1_and_2(sweep):
    folder, done = sweep
    names = sorted(os.listdir(folder / "runs"))
    assert names == ["mlp-ddp-n1.json", "mlp-ddp-n2.json", "mlp-dp-n1.json", "mlp-dp-n2.json", "mlp-local-n1.json"]
    manifest = load_json(folder / "manifest.json")
    assert manifest["state"] == "finished" and set(manifest["runs"].values()) == {"ok"}
    assert [spec["run_id"] for spec in manifest["plan"]] == [
        "mlp-local-n1",
        "mlp-ddp-n1",
        "mlp-ddp-n2",
        "mlp-dp-n1",
        "mlp-dp-n2",
    ]
    dp2 = load_json(folder / "runs" / "mlp-dp-n2.json")
    ddp2 = load_json(folder / "runs" / "mlp-ddp-n2.json")
    # Same per-device batch and the same cores per device: DP takes the global batch in one process.
    assert ddp2["spec"]["batch_size"] == dp2["spec"]["batch_size"] == 8
    assert dp2["metrics"]["global_samples"] == 8 * 2 * 6 and len(dp2["ranks"]) == 1
    assert dp2["spec"]["threads_per_rank"] == 2 * ddp2["spec"]["threads_per_rank"]
    assert "[5/5]" in done.stderr and "ETA" in done.stderr
    assert os.path.exists(folder / "logs" / "mlp-ddp-n2" / "output.log")
    # The raw file, not the loader: the worker itself leaves one rank's comparisons undecided.
    ddp1 = load_json(folder / "runs" / "mlp-ddp-n1.json")["checks"]
    for name in ("gradients_averaged", "replicas_in_sync", "shards_disjoint"):
        assert ddp1[name]["ok"] is None and "one rank" in ddp1[name]["reason"], name
        assert ddp2["checks"][name]["ok"] is True, name
    summary = format_summary(load_record(str(folder / "runs" / "mlp-ddp-n1.json")), "r.json")
    assert "not checked  gradients_averaged, replicas_in_sync, shards_disjoint: one rank" in summary
    # The closing screen: the scaling table, at most one line per run with a finding, the report.
    closing = done.stdout
    assert "ddpbench explain" in closing and "report: " in closing
    assert sum(line.startswith("finding  ") for line in closing.splitlines()) <= 2  # mlp x1 and x2
    assert "memory per rank" not in closing and "communication: overlap" not in closing  # local, ddp, dp only


def test_printed_and_saved_table_match_the_records(sweep):
    folder, done = sweep
    saved = ddpbench.load(str(folder))
    table = scaling_table(saved).set_index(["strategy", "world_size"])
    local = load_json(folder / "runs" / "mlp-local-n1.json")["metrics"]
    x1 = local["global_samples"] / local["window_s"]
    for (strategy, world_size), row in table.iterrows():
        metrics = load_json(folder / "runs" / f"mlp-{strategy}-n{world_size}.json")["metrics"]
        x = metrics["global_samples"] / metrics["window_s"]
        # not chance: E recomputed from the records' own throughputs, as the table computes it
        assert row["efficiency"] == pytest.approx(x / (world_size * x1))
        assert f"{x:,.1f}" in done.stdout  # the printed table shows the same throughput
    csv = (folder / "scaling.csv").read_text().splitlines()
    assert csv[0].startswith("workload,strategy") and len(csv) == 6


def test_an_existing_sweep_is_not_rewritten_without_resume(sweep):
    folder, _ = sweep
    before = sorted(os.listdir(folder / "runs"))
    done = run_cli(
        "sweep",
        "--suite",
        "smoke",
        "--repeat",
        "1",
        "--workloads",
        "mlp",
        "--nproc",
        "2",
        "--out",
        str(folder.parent),
        "--sweep-id",
        "s",
        cwd=folder.parent,
    )
    assert done.returncode == 2 and "already exists; add --resume" in done.stderr
    assert sorted(os.listdir(folder / "runs")) == before


def test_resume_reruns_only_what_has_no_ok_record(sweep, tmp_path):
    folder, _ = sweep
    import shutil

    copy = tmp_path / "s"
    shutil.copytree(folder, copy)
    kept = {n: load_json(copy / "runs" / n)["ended_at"] for n in os.listdir(copy / "runs")}
    os.remove(copy / "runs" / "mlp-local-n1.json")  # the quickest run to redo: one process, no torchrun
    done = run_cli("sweep", "--resume", "--out", str(tmp_path), "--sweep-id", "s", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    after = {n: load_json(copy / "runs" / n)["ended_at"] for n in os.listdir(copy / "runs")}
    assert set(after) == set(kept), set(after) ^ set(kept)
    rerun = [n for n in after if after[n] != kept[n]]
    assert rerun == ["mlp-local-n1.json"]
    assert done.stderr.count("kept the ok record") == 4
    manifest = load_json(copy / "manifest.json")
    assert manifest["state"] == "finished" and len(manifest["resumed_at"]) == 1


def test_a_failing_configuration_is_recorded_and_the_sweep_finishes(tmp_path):
    failing = f"{REPO}/tests/fixtures/failing_workload.py:broken"
    done = run_cli(
        "sweep",
        "--repeat",
        "1",
        "--workloads",
        f"{failing},mlp",
        "--strategies",
        "local",
        "--nproc",
        "1",
        "--steps",
        "5",
        "--warmup",
        "1",
        "--out",
        str(tmp_path),
        "--sweep-id",
        "f",
        cwd=tmp_path,
    )
    assert done.returncode == 1  # the sweep finished, and says that not everything is ok
    broken = load_json(tmp_path / "f" / "runs" / "failing_workload.broken-local-n1.json")
    assert broken["status"] == "failed" and "broken on purpose" in broken["error"]["message"]
    assert load_json(tmp_path / "f" / "runs" / "mlp-local-n1.json")["status"] == "ok"
    assert load_json(tmp_path / "f" / "manifest.json")["state"] == "finished"
    assert "FAILED: failing_workload.broken-local-n1" in done.stdout
    assert f"logs: {broken['launch']['logs']}" in done.stderr  # where the full output is


def test_a_run_past_its_timeout_is_ended_and_recorded(tmp_path):
    done = run_cli(
        "sweep",
        "--repeat",
        "1",
        "--workloads",
        "mlp",
        "--strategies",
        "ddp",
        "--nproc",
        "1",
        "--steps",
        "5",
        "--warmup",
        "2",
        "--run-timeout",
        "2",
        "--out",
        str(tmp_path),
        "--sweep-id",
        "t",
        cwd=tmp_path,
    )
    record = load_json(tmp_path / "t" / "runs" / "mlp-ddp-n1.json")
    assert record["status"] == "timeout" and "2 s run timeout" in record["error"]["message"]
    assert done.returncode == 1 and "TIMEOUT" in done.stderr
