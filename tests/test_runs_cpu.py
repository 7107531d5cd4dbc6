"""Real runs on CPU: torchrun, gloo process groups, real workers. A handful, since each launch
imports torch in every process."""

import glob
import json
import os
import signal
import socket
import subprocess
import sys

import numpy as np
import pytest
from conftest import FIXTURES, REPO, cpu_environment, ddpbench_process, foreign_lines

from ddpbench.worker.ablation import EXTRA_STEP, extra_rounds

pytestmark = pytest.mark.launches

REQUIRED_KEYS = {
    "schema_version",
    "run_id",
    "status",
    "spec",
    "env",
    "ranks",
    "metrics",
    "checks",
    "error",
    "started_at",
    "ended_at",
    "launch",
}


def only_record(out_dir) -> dict:
    paths = glob.glob(str(out_dir / "runs" / "*.json"))
    assert len(paths) == 1, paths
    return json.load(open(paths[0]))


def assert_valid_ok_record(record: dict, world_size: int, timed_steps: int) -> None:
    assert REQUIRED_KEYS <= set(record)
    assert record["status"] == "ok" and record["error"] is None
    assert record["spec"]["world_size"] == world_size
    env = record["env"]
    for key in (
        "torch",
        "cuda",
        "nccl",
        "cudnn",
        "gpu_names",
        "gpu_count",
        "cpu_model",
        "cpu_cores",
        "hostname",
        "git_sha",
        "env_vars",
    ):
        assert key in env
    # not chance: each rank writes its own number into the record
    assert [r["rank"] for r in record["ranks"]] == list(range(world_size))
    for rank in record["ranks"]:
        assert len(rank["step_times_s"]) == timed_steps
        assert all(t > 0 for t in rank["step_times_s"])
        # not chance: bytes allocated, not timed
        assert rank["peak_memory_bytes"] > 0
        assert rank["threads"] == record["spec"]["threads_per_rank"]
    # Every derived number is recomputed here from the raw per-rank step times.
    metrics = record["metrics"]
    iteration = np.max([r["step_times_s"] for r in record["ranks"]], axis=0)
    # not chance: the record's percentile recomputed from its own step times
    assert metrics["iteration_time_s"]["p50"] == pytest.approx(np.percentile(iteration, 50))
    # not chance: the record's percentile recomputed from its own step times
    assert metrics["iteration_time_s"]["p99"] == pytest.approx(np.percentile(iteration, 99))
    samples = record["spec"]["batch_size"] * world_size * timed_steps
    assert metrics["global_samples"] == samples
    # not chance: the record's throughput recomputed from its own samples and window
    assert metrics["throughput_samples_per_s"] == pytest.approx(samples / metrics["window_s"])
    # The barrier-aligned window holds the timed steps: it cannot be shorter than their sum on
    # any rank (it also contains the final barrier).
    # not chance: the window holds the timed steps end to end
    assert metrics["window_s"] >= max(sum(r["step_times_s"]) for r in record["ranks"]) * 0.999
    failed = [name for name, check in record["checks"].items() if check["ok"] is False]
    assert not failed, record["checks"]


def test_two_rank_gloo_ddp_run_is_textbook_ddp(tmp_path):
    done = ddpbench_process(
        "run", "--workload", "mlp", "--nproc", "2", "--steps", "25", "--warmup", "3", "--out", str(tmp_path)
    )
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    record = only_record(tmp_path)
    assert_valid_ok_record(record, world_size=2, timed_steps=22)
    spec = record["spec"]
    assert (spec["device"], spec["backend"], spec["size"], spec["threads_per_rank"]) == ("cpu", "gloo", "tiny", 1)
    checks = record["checks"]
    assert checks["replicas_in_sync"]["ok"] and checks["replicas_in_sync"]["details"]["distinct_digests"] == 1
    assert checks["gradients_averaged"]["ok"]
    # One epoch holds the 25 steps (8 samples x 2 ranks each): no epoch boundary in the window.
    assert checks["shards_disjoint"]["details"]["shard_sizes"] == [200, 200]
    assert checks["shards_cover_dataset"]["details"]["covered"] == 400
    assert checks["reshuffled_each_epoch"]["ok"] is True  # the batch after the window starts epoch 1: set_epoch ran
    assert record["ranks"][0]["epochs_started"] == 2
    # Ranks forked from ddpbench's agent (the default): the record keeps torchrun's own equivalent command.
    launch = record["launch"]
    assert "ddpbench.worker.agent" in launch["command"] and "--standalone" in launch["command"]
    assert "torch.distributed.run" in launch["torchrun_command"] and "--standalone" in launch["torchrun_command"]
    assert "--nproc-per-node=2" in launch["torchrun_command"]
    # not chance: counted from the model, not timed
    assert record["metrics"]["flops_per_sample"] > 0
    assert "throughput" in done.stdout and "replicas_in_sync ok" in done.stdout
    # A healthy run (profiled, so Kineto ran on every rank) shows ddpbench's summary and nothing else.
    assert done.stderr == "" and not foreign_lines(done.stdout), done.stdout + done.stderr
    # The three views of communication overlap, per rank.
    overlap = record["overlap"]
    assert [os.path.basename(p) for p in overlap["trace"]["paths"]] == [
        "rank-0.pt.trace.json.gz",
        "rank-1.pt.trace.json.gz",
    ]
    assert all(os.path.exists(p) for p in overlap["trace"]["paths"])
    for rank, view in enumerate(overlap["trace"]["by_rank"]):
        # not chance: one trace view per rank, on CPU over gloo, of the 3 profiled steps asked for
        assert (view["rank"], view["kind"], view["backend"], view["steps_analysed"]) == (rank, "cpu", "gloo", 3)
        # not chance: a duration is positive, a share lies in 0-100
        assert view["comm_us"] > 0 and 0 <= view["overlap_pct"] <= 100
        # not chance: exposed communication is communication less its overlap, by the view's formula
        assert view["exposed_comm_us"] == pytest.approx(view["comm_us"] - view["overlap_us"])
    assert len(overlap["no_sync"]["by_rank"]) == 2 and overlap["no_sync"]["by_rank"][0]["steps"] == 10
    assert all(len(r["no_sync_step_times_s"]) == 10 for r in record["ranks"])
    # Every rank's wait for its batches in the timed window, summarised (the per-step list is not kept).
    for entry in record["ranks"]:
        # not chance: a measured duration is positive
        assert entry["data_wait_mean_s"] >= 0 and entry["data_wait_p50_s"] >= 0, entry
        # not chance: the wait for data is part of each step
        assert entry["data_wait_mean_s"] < sum(entry["step_times_s"]) / len(entry["step_times_s"])
    for view in overlap["reducer"]["by_rank"]:
        # not chance: a count, and a measured duration is positive
        assert view["num_buckets"] >= 1 and view["backward_comm_time_s"] > 0 and view["has_rebuilt_buckets"]
    # The gradient timeline, run as the ladder's blocks (22 timed steps: the minimum of 5 blocks),
    # one marked step of each kind per block on every rank, and the rank stepping alone two blocks
    # in a row (0, 0, 1, 1, 0, ...: the order of the kinds alternates every block); then its contention
    # probe: every round measured on every rank, over a buffer the
    # size of all gradients.
    timeline = record["timeline"]
    # not chance: a measured duration is positive
    assert timeline["cast_cost"]["scaled_copy_s_per_byte"] > 0
    ladder = timeline["ladder"]
    # Whether rounds were added depends on what the base rounds measured (the lead undecided: 4 at
    # a time, up to 8); which were run, and why the adding stopped (the rule, whatever it decided), does not.
    blocks, extra = ladder["blocks"], ladder["extra_blocks"]
    cap = extra_rounds(5)
    assert blocks - extra == 5 and extra in range(0, cap + 1, EXTRA_STEP) and (ladder["lead_decided"] or extra == cap)
    assert ladder["alone_rank_by_block"] == [(block // 2) % 2 for block in range(blocks)]
    # not chance: a measured duration is positive
    assert ladder["wall_s"] > 0
    for rank, view in enumerate(timeline["by_rank"]):
        # not chance: a measured duration is positive
        assert view["rank"] == rank and view["ladder_wall_s"] > 0
        for kind in ("with_ddp", "without_allreduce", "solo", "unwrapped"):
            assert [step["block"] for step in view[kind]] == list(range(blocks)), kind
            # not chance: a measured duration is positive
            assert all(step["step_s"] > 0 for step in view[kind]), kind
        # Rung 0: this rank alone, in the blocks that were its turn.
        # not chance: the rounds each rank steps alone follow the fixed schedule 0, 0, 1, 1, 0, ...
        assert [step["block"] for step in view["alone"]] == [b for b in range(blocks) if (b // 2) % 2 == rank]
        probe = view["contention"]
        # Sized to last about as long as backward: between 64 KiB and 4 x the gradients' bytes.
        # not chance: sizes chosen from the model, not timed
        assert 64 * 1024 <= probe["probe_bytes"] <= 4 * sum(timeline["param_bytes"]) and probe["probe_bytes"] % 4 == 0
        for name in ("comm_alone_s", "backward_alone_s", "backward_with_comm_s", "comm_with_backward_s"):
            # not chance: a measured rate is positive
            assert len(probe[name]) == 5 and all(value > 0 for value in probe[name]), (name, probe[name])


def test_local_run_with_bf16_autocast_on_cpu(tmp_path):
    done = ddpbench_process(
        "run",
        "--workload",
        "vit_b_16",
        "--strategy",
        "local",
        "--precision",
        "bf16",
        "--steps",
        "6",
        "--warmup",
        "1",
        "--out",
        str(tmp_path),
    )
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    record = only_record(tmp_path)
    assert_valid_ok_record(record, world_size=1, timed_steps=5)
    assert record["spec"]["threads_per_rank"] == record["env"]["cpu_cores"]  # one device: all cores
    assert "replicas_in_sync" not in record["checks"]  # nothing to compare without replicas
    trace_view = record["overlap"]["trace"]["by_rank"][0]
    assert trace_view["comm_us"] == 0 and trace_view["overlap_pct"] is None  # no communication: not applicable
    assert record["overlap"]["no_sync"] is None and record["overlap"]["reducer"] is None
    assert record["metrics"]["sample_unit"] == "images"
    assert "torch.distributed.run" not in record["launch"]["command"]


def test_user_workload_file_with_ddp_knobs_and_compression_hook(tmp_path):
    workload = f"{REPO}/tests/fixtures/user_workload.py:regression"
    done = ddpbench_process(
        "run",
        "--workload",
        workload,
        "--nproc",
        "2",
        "--steps",
        "8",
        "--warmup",
        "2",
        "--comm-hook",
        "fp16_compress",
        "--bucket-cap-mb",
        "1",
        "--gradient-as-bucket-view",
        "--static-graph",
        "--no-broadcast-buffers",
        "--batch-size",
        "3",
        "--no-profile",
        "--out",
        str(tmp_path),
    )
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    record = only_record(tmp_path)
    assert_valid_ok_record(record, world_size=2, timed_steps=6)
    # not chance: a file workload's run id is its stem and factory, here named regression
    assert record["run_id"].startswith("user_workload.regression-ddp-n2-")  # a file's workload: stem.factory
    assert record["spec"]["ddp"] == {
        "bucket_cap_mb": 1.0,
        "gradient_as_bucket_view": True,
        "static_graph": True,
        "find_unused_parameters": False,
        "broadcast_buffers": False,
        "comm_hook": "fp16_compress",
    }
    assert record["spec"]["batch_size"] == 3
    assert record["metrics"]["sample_unit"] == "rows"
    assert record["checks"]["gradients_averaged"]["details"]["tolerance"] == 5e-3
    assert record["overlap"]["trace"] is None and not (tmp_path / "traces").exists()


def test_a_run_that_fails_in_the_worker_still_leaves_a_record(tmp_path):
    workload = f"{REPO}/tests/fixtures/failing_workload.py:broken"
    # An ok record of an earlier run with the same id: the failed run must not lend it its status.
    earlier = json.loads(
        open(os.path.join(FIXTURES, "sweeps", "cpu-mlp-with-failure", "runs", "mlp-ddp-n2.json")).read()
    )
    (tmp_path / "runs").mkdir()
    (tmp_path / "runs" / "again.json").write_text(json.dumps({**earlier, "run_id": "again"}))
    done = ddpbench_process(
        "run", "--workload", workload, "--nproc", "2", "--steps", "5", "--warmup", "2", "--out", str(tmp_path),
        "--run-id", "again",
    )  # fmt: skip
    assert done.returncode == 1
    record = only_record(tmp_path)
    assert record["status"] == "failed" and record["spec"]["workload"] == workload
    assert record["error"]["exit_code"] != 0
    assert any("broken on purpose" in line for line in record["error"]["output_tail"])
    assert "FAILED" in done.stdout
    # The failing rank's own error reaches the terminal, and where the full logs are.
    assert "RuntimeError: this workload is broken on purpose" in done.stdout.split("record ")[0]
    assert "'s traceback:" in done.stdout and 'failing_workload.py", line' in done.stdout
    assert f"logs         {record['launch']['logs']}" in done.stdout
    assert os.path.getsize(os.path.join(record["launch"]["logs"], "output.log")) > 0
    # What the workload printed and raised held a token: neither the record nor the terminal keeps it.
    assert "hf_planted0secret0value" not in json.dumps(record), record["error"]
    assert "hf_planted0secret0value" not in done.stdout + done.stderr
    assert any("--hf-token" in line for line in record["error"]["output_tail"])


def test_a_crash_after_the_timed_steps_keeps_the_measurements(tmp_path):
    workload = f"{REPO}/tests/fixtures/crash_when_profiled.py:crash_when_profiled"
    done = ddpbench_process(
        "run", "--workload", workload, "--nproc", "2", "--steps", "8", "--warmup", "2", "--out", str(tmp_path)
    )
    assert done.returncode == 1
    record = only_record(tmp_path)
    assert record["status"] == "ok" and len(record["ranks"][0]["step_times_s"]) == 6
    assert record["checks"]["replicas_in_sync"]["ok"]
    assert record["error"]["message"].startswith("measurements complete, then the run failed")
    assert record["error"]["exit_code"] != 0
    assert record["overlap"]["trace"] is None  # the phase that crashed left nothing half-written
    assert "measurements complete" in done.stdout


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_two_agents_on_loopback_form_one_two_rank_job(tmp_path):
    """Multi-node pass-through: the same command on each 'node', joined by a c10d rendezvous,
    writing to one folder as nodes sharing a file system do (same run id, as in a sweep)."""
    endpoint = f"127.0.0.1:{free_port()}"
    nodes = []
    for node_rank in (0, 1):
        command = [
            sys.executable,
            "-m",
            "ddpbench",
            "run",
            "--workload",
            "mlp",
            "--nproc",
            "1",
            "--nnodes",
            "2",
            "--node-rank",
            str(node_rank),
            "--rdzv-endpoint",
            endpoint,
            "--rdzv-id",
            "loopback-job",
            "--steps",
            "7",
            "--warmup",
            "2",
            "--threads-per-rank",
            "1",
            "--run-timeout",
            "180",
            "--run-id",
            "shared-run",
            "--out",
            str(tmp_path / "shared"),
        ]
        nodes.append(
            subprocess.Popen(
                command, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=cpu_environment()
            )
        )
    try:
        outputs = [node.communicate(timeout=240) for node in nodes]
    finally:
        for node in nodes:  # a node whose partner died must not wait out the rendezvous timeout
            if node.poll() is None:
                node.send_signal(signal.SIGTERM)
                node.wait(timeout=60)
    assert [node.returncode for node in nodes] == [0, 0], [err[-2000:] for _, err in outputs]
    records = glob.glob(str(tmp_path / "shared" / "runs" / "*.json"))
    assert len(records) == 1, "exactly one record: global rank 0 writes, no one else"
    record = json.load(open(records[0]))
    assert record["launch"]["node_rank"] == 0  # node 1 never rewrote rank 0's record
    # Each node kept its own logs: neither cleared nor overwrote the other's.
    logs = tmp_path / "shared" / "logs" / "shared-run"
    for node_logs in (logs, logs / "node-1"):
        assert (node_logs / "output.log").is_file() and (node_logs / "ranks").is_dir()
    assert_valid_ok_record(record, world_size=2, timed_steps=5)
    assert record["spec"]["nnodes"] == 2 and record["spec"]["nproc"] == 1
    assert record["checks"]["replicas_in_sync"]["ok"]
    assert sum("wrote the record there" in out for out, _ in outputs) == 1


def test_replicas_that_drift_apart_fail_their_check_in_a_real_run(tmp_path):
    workload = f"{REPO}/tests/fixtures/misbehaving_workloads.py:drifting_replicas"
    done = ddpbench_process(
        "run",
        "--workload",
        workload,
        "--nproc",
        "2",
        "--steps",
        "8",
        "--warmup",
        "2",
        "--no-profile",
        "--no-sync-steps",
        "0",
        "--out",
        str(tmp_path),
    )
    assert done.returncode == 1, done.stdout + done.stderr[-2000:]  # measured, but a check failed
    record = only_record(tmp_path)
    assert record["status"] == "ok"
    check = record["checks"]["replicas_in_sync"]
    assert check["ok"] is False and check["details"]["ranks_differing_from_rank0"] == [1]
    assert "CHECK FAILED: replicas_in_sync" in done.stdout


def test_a_dataset_no_sampler_can_shard_is_refused_in_a_real_run(tmp_path):
    workload = f"{REPO}/tests/fixtures/misbehaving_workloads.py:streaming_dataset"
    done = ddpbench_process(
        "run",
        "--workload",
        workload,
        "--nproc",
        "2",
        "--steps",
        "6",
        "--warmup",
        "2",
        "--no-profile",
        "--out",
        str(tmp_path),
    )
    assert done.returncode == 1
    record = only_record(tmp_path)
    assert record["status"] == "failed"
    assert "IterableDataset" in record["error"]["message"] and "map-style Dataset" in record["error"]["message"]
