"""Runs on SLURM: the pure parts on their own, then a real single-host SLURM cluster (two nodes
on this machine, see slurm_cluster.py) running a sweep through sbatch and srun. The cluster tests
are skipped, with the reason, where SLURM cannot be started."""

from __future__ import annotations

import glob
import json
import os
import re
import subprocess
import sys

import pytest
from conftest import FIXTURES, REPO, ddpbench, ddpbench_process

from ddpbench.config.errors import SpecError
from ddpbench.config.plan import SweepOptions, plan_sweep
from ddpbench.config.secrets import hide_in_batch_script
from ddpbench.host.facts import scheduler_facts
from ddpbench.running import slurm
from ddpbench.running.diagnose import error_files, rendezvous_failed

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import slurm_cluster  # noqa: E402


def without_slurm() -> dict:
    return {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}


def this_checkout(env: dict) -> dict:
    """`env` with this checkout first on PYTHONPATH, for the commands SLURM starts from it."""
    return {**env, "PYTHONPATH": REPO + os.pathsep + env.get("PYTHONPATH", "")}


# --- without a cluster -----------------------------------------------------------------------


def test_cpus_per_node_as_slurm_writes_them():
    assert slurm.expand_cpus_per_node("72(x2),36") == [72, 72, 36]
    with pytest.raises(SpecError):
        slurm.expand_cpus_per_node("lots")


def test_scheduler_facts_name_the_job_and_nothing_else():
    environ = {
        "SLURM_JOB_ID": "81",
        "SLURM_JOB_PARTITION": "gpu",
        "SLURM_JOB_NODELIST": "n[1-2]",
        "SLURM_JOB_NUM_NODES": "2",
        "SLURMD_NODENAME": "n1",
        "SLURM_SOME_TOKEN": "secret",
    }
    facts = scheduler_facts(environ)
    assert facts["job_id"] == "81" and facts["partition"] == "gpu" and facts["job_nodes"] == "n[1-2]"
    assert facts["job_num_nodes"] == 2 and "secret" not in json.dumps(facts)
    assert scheduler_facts({}) is None


def test_sweep_over_nodes_keeps_one_node_sizes_then_whole_nodes():
    options = SweepOptions(
        device="cuda",
        max_world_size=8,
        cores=64,
        suite="smoke",
        launcher="slurm",
        nodes=(1, 2, 4),
        strategies=("local", "ddp", "dp"),
        repeat=1,
    )
    plan = plan_sweep(options, "/tmp/x")
    shape = [(s.strategy, s.nnodes, s.nproc) for s in plan]
    assert shape == [("local", 1, 1)] + [("ddp", 1, n) for n in (1, 2, 4, 8)] + [("ddp", 2, 8), ("ddp", 4, 8)] + [
        ("dp", 1, n) for n in (1, 2, 4, 8)
    ]
    assert {s.launcher for s in plan} == {"slurm"}
    assert plan[6].run_id == "mlp-ddp-n32" and plan[6].threads_per_rank == 8  # 64 cores / 8 devices
    with pytest.raises(SpecError, match="--launcher slurm"):
        SweepOptions(device="cpu", max_world_size=2, cores=2, suite="smoke", nodes=(1, 2))


def test_error_files_of_several_agents_get_their_global_ranks_from_torchruns_summary(tmp_path):
    # Two agents (nodes) each have a local rank 0; c10d, not the node order, made one of them rank 1.
    for agent, message in (("run_aaa", "peer closed the connection"), ("run_bbb", "FileNotFoundError: shard")):
        folder = tmp_path / agent / "attempt_0" / "0"
        folder.mkdir(parents=True)
        (folder / "error.json").write_text(
            json.dumps(
                {"message": {"message": message, "extraInfo": {"py_callstack": "Traceback ...", "timestamp": "1"}}}
            )
        )
    summary = (
        f"[0]:\n  time      : now\n  host      : vm\n  rank      : 1 (local_rank: 0)\n"
        f"  exitcode  : 1 (pid: 42)\n  error_file: {tmp_path}/run_bbb/attempt_0/0/error.json\n"
    )
    found = error_files(str(tmp_path), 0, 1, summary)
    assert found[1]["message"] == "FileNotFoundError: shard"
    assert found[0]["message"] == "peer closed the connection"


def test_a_lost_store_after_a_rank_raised_is_not_a_rendezvous_failure(tmp_path):
    # On two nodes, the agent whose partner died loses the c10d store and prints a rendezvous
    # error; retrying on a fresh port would only repeat the rank's own failure.
    (tmp_path / "output.log").write_text(
        "torch.distributed.elastic.rendezvous.api.RendezvousConnectionError: "
        "The connection to the C10d store has failed.\n"
    )
    assert rendezvous_failed(str(tmp_path))
    folder = tmp_path / "ranks" / "run_x" / "attempt_0" / "1"
    folder.mkdir(parents=True)
    (folder / "error.json").write_text(
        json.dumps(
            {
                "message": {
                    "message": "FileNotFoundError: shard",
                    "extraInfo": {"py_callstack": "Traceback ...", "timestamp": "1"},
                }
            }
        )
    )
    assert not rendezvous_failed(str(tmp_path))


def test_sbatch_script_resumes_when_submitted_again():
    script = slurm.sbatch_script(
        ["--node-counts", "1,2", "--sweep-id", "s1"],
        "/shared/results/s1",
        2,
        8,
        ["--partition=gpu"],
        "/venv/bin/python",
        "/shared/ddpbench",
    )
    assert "#SBATCH --nodes=2\n" in script and "#SBATCH --gpus-per-node=8\n" in script
    assert "#SBATCH --partition=gpu\n" in script and "#SBATCH --exclusive\n" in script
    assert "if [ -e /shared/results/s1/manifest.json ]" in script
    assert "--launcher slurm --node-counts 1,2 --sweep-id s1 --resume" in script


def test_a_batch_script_reads_the_scripts_secrets_from_the_jobs_environment(tmp_path):
    token = "hf_" + "Zq8" * 8
    argv = ["--script", "train.py", "--", "--hf-token", token, "--lr", "1", "--api-key=abc"]
    shown, words, secrets = hide_in_batch_script(argv)
    text = slurm.sbatch_script(shown, str(tmp_path / "s1"), 1, None, [], "echo", str(tmp_path))
    for placeholder, word in words.items():
        text = text.replace(placeholder, word)
    assert (
        token not in text and "abc" not in text and secrets == {"DDPBENCH_SECRET_1": token, "DDPBENCH_SECRET_2": "abc"}
    )
    # What the job runs gets them back from its environment (sbatch passes the submitter's on).
    ran = subprocess.run(["bash", "-c", text], capture_output=True, text=True, env={**os.environ, **secrets})
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.split() == [*"-m ddpbench sweep --launcher slurm".split(), *argv]
    missing = subprocess.run(["bash", "-c", text], capture_output=True, text=True, env={"PATH": os.environ["PATH"]})
    assert missing.returncode != 0 and "export DDPBENCH_SECRET_1" in missing.stderr


def test_sbatch_print_writes_the_hosts_to_avoid_as_slurms_exclude(tmp_path):
    done = ddpbench(
        "sbatch", "--print", "--device", "cpu", "--suite", "smoke", "--avoid-hosts", "node-1,gpu7.cluster",
        "--out", str(tmp_path / "results"), "--sweep-id", "avoid", base=without_slurm(), cwd=str(tmp_path),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "\n#SBATCH --exclude=node-1,gpu7.cluster\n" in done.stdout
    # The option is the job's, not the sweep's: the sweep the job runs never sees it.
    assert (
        "--avoid-hosts" not in done.stdout and "gpu7" not in done.stdout.split("#SBATCH --exclude")[1].split("\n", 1)[1]
    )
    for bad, message in (("node[1-3]", "got 'node[1-3]'"), ("/etc/hosts", "got '/etc/hosts'"), ("", "got ''")):
        refused = ddpbench("sbatch", "--print", "--avoid-hosts", bad, "--out", str(tmp_path / "r"), cwd=str(tmp_path))
        assert refused.returncode == 2 and refused.stderr.count("\n") == 1, refused.stderr
        assert "--avoid-hosts: takes host names separated by commas" in refused.stderr and message in refused.stderr


@pytest.mark.parametrize(
    "command",
    [
        ["sweep", "--launcher", "slurm", "--suite", "smoke"],
        ["run", "--launcher", "slurm", "--workload", "mlp", "--nnodes", "2"],
    ],
)
def test_slurm_launcher_outside_an_allocation_is_one_line_exit_2(tmp_path, command):
    done = ddpbench(*command, "--out", str(tmp_path / "out"), base=without_slurm(), cwd=str(tmp_path))
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1 and "needs a SLURM allocation" in done.stderr and "salloc" in done.stderr
    assert not os.path.exists(tmp_path / "out" / "runs")


def test_slurm_launcher_inside_a_job_step_is_refused(tmp_path):
    environ = {"SLURM_JOB_ID": "5", "SLURM_JOB_NODELIST": "n1", "SLURM_STEP_ID": "0"}
    with pytest.raises(SpecError, match="inside a SLURM job step"):
        slurm.current_allocation(environ)


# --- a real single-host cluster ----------------------------------------------------------------


@pytest.fixture(scope="module")
def cluster():
    try:
        started = slurm_cluster.start()
    except slurm_cluster.Unavailable as exc:
        pytest.skip(f"no SLURM here: {exc}")
    yield started
    started.stop()


@pytest.mark.launches
def test_bad_slurm_input_is_one_line_exit_2_and_starts_nothing(cluster, tmp_path):
    env, out = cluster.env(), str(tmp_path / "results")
    in_one_node = subprocess.run(
        [
            "salloc",
            "--nodes=1",
            "--quiet",
            sys.executable,
            "-m",
            "ddpbench",
            "sweep",
            "--launcher",
            "slurm",
            "--node-counts",
            "1,2",
            "--suite",
            "smoke",
            "--out",
            out,
        ],
        env={**env, "PYTHONPATH": REPO},
        cwd=str(tmp_path),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert in_one_node.returncode == 2, in_one_node.stderr
    assert "asked for 2 nodes; SLURM job" in in_one_node.stderr and in_one_node.stderr.count("\n") == 1
    no_partition = ddpbench_process(
        "sbatch",
        "--partition",
        "nope",
        "--suite",
        "smoke",
        "--out",
        out,
        base=this_checkout(env),
        cwd=str(tmp_path),
        timeout=900,
    )
    assert no_partition.returncode == 2
    assert no_partition.stderr.strip().endswith("partition 'nope' does not exist on this cluster; valid: debug")
    too_many = ddpbench_process(
        "sbatch",
        "--node-counts",
        "1,3",
        "--suite",
        "smoke",
        "--device",
        "cpu",
        "--out",
        out,
        base=this_checkout(env),
        cwd=str(tmp_path),
        timeout=900,
    )
    assert too_many.returncode == 2 and too_many.stderr.count("\n") == 1, too_many.stderr
    assert "SLURM would refuse the job" in too_many.stderr
    assert not glob.glob(os.path.join(out, "*", "manifest.json"))
    queue = subprocess.run(["squeue", "--noheader"], env=env, capture_output=True, text=True)
    assert queue.stdout.strip() == ""


@pytest.mark.launches
def test_the_hosts_to_avoid_are_excluded_by_slurm_itself(cluster, tmp_path):
    """The batch script's --exclude as SLURM reads it: `sbatch --test-only` places a one-node job on the
    node not excluded; with both excluded SLURM refuses it, and ddpbench sbatch says so in one line."""
    env, out = cluster.env(), str(tmp_path / "results")
    common = ("--device", "cpu", "--suite", "smoke", "--out", out)
    done = ddpbench_process(
        "sbatch", "--print", *common, "--sweep-id", "off-node1", "--avoid-hosts", "node1",
        base=this_checkout(env), cwd=str(tmp_path),
    )  # fmt: skip
    assert done.returncode == 0 and "#SBATCH --exclude=node1\n" in done.stdout, done.stderr
    placed = subprocess.run(
        ["sbatch", "--test-only", os.path.join(out, "off-node1", "sbatch.sh")], env=env, capture_output=True, text=True
    )
    assert placed.returncode == 0 and "on nodes node2 " in placed.stderr, placed.stderr
    refused = ddpbench_process(
        "sbatch", *common, "--sweep-id", "off-both", "--avoid-hosts", "node1,node2",
        base=this_checkout(env), cwd=str(tmp_path), timeout=300,
    )  # fmt: skip
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1, refused.stderr
    assert "SLURM would refuse the job: " in refused.stderr and "node configuration is not available" in refused.stderr
    queue = subprocess.run(["squeue", "--noheader"], env=env, capture_output=True, text=True)
    assert queue.stdout.strip() == ""


@pytest.mark.launches
def test_sbatch_runs_a_two_node_sweep_through_srun_and_writes_the_report(cluster, tmp_path):
    env = cluster.env()
    done = ddpbench_process(
        "sbatch",
        "--wait",
        "--device",
        "cpu",
        "--node-counts",
        "1,2",
        "--max-nproc",
        "1",
        "--suite",
        "smoke",
        "--strategies",
        "ddp",
        "--repeat",
        "1",
        "--no-profile",
        "--out",
        str(tmp_path / "results"),
        "--sweep-id",
        "two-nodes",
        base=this_checkout(env),
        cwd=str(tmp_path),
        timeout=900,
    )
    sweep_dir = tmp_path / "results" / "two-nodes"
    log = "".join(open(path).read() for path in glob.glob(str(sweep_dir / "slurm-*.out")))
    assert done.returncode == 0, done.stdout + done.stderr + log
    records = {os.path.basename(p): json.load(open(p)) for p in glob.glob(str(sweep_dir / "runs" / "*.json"))}
    assert sorted(records) == ["mlp-ddp-n1.json", "mlp-ddp-n2.json"]
    two = records["mlp-ddp-n2.json"]
    assert two["status"] == "ok" and two["spec"]["nnodes"] == 2 and two["spec"]["launcher"] == "slurm"
    assert two["launch"]["command"][:2] == ["srun", "--nodes=2"]
    assert "--nnodes=2" in two["launch"]["command"] and "--rdzv-backend=c10d" in two["launch"]["command"]
    # not chance: each rank writes its own number into the record
    assert sorted(rank["rank"] for rank in two["ranks"]) == [0, 1]
    # two torchrun agents, one per SLURM node, under one step
    assert len(glob.glob(str(sweep_dir / "logs" / "mlp-ddp-n2" / "ranks" / "*"))) == 2
    scheduler = two["env"]["scheduler"]
    assert scheduler["name"] == "slurm" and scheduler["step_nodes"] == "node[1-2]"
    assert scheduler["job_nodes"] == "node[1-2]" and scheduler["partition"] == "debug"
    assert records["mlp-ddp-n1.json"]["env"]["scheduler"]["step_nodes"] == "node1"
    assert json.load(open(sweep_dir / "manifest.json"))["state"] == "finished"
    report = (tmp_path / "reports" / "two-nodes" / "index.html").read_text()
    assert re.search(rf">SLURM job</td>\s*<td[^>]*>{scheduler['job_id']}</td>", report), "no job id in the report"
    assert re.search(r">SLURM job nodes</td>\s*<td[^>]*>node\[1-2\]</td>", report)


@pytest.mark.launches
def test_a_rank_failing_on_another_node_is_named_in_the_record(cluster, tmp_path):
    workload = os.path.join(FIXTURES, "missing_shard_on_rank_1.py:missing_shard_on_rank_1")
    done = subprocess.run(
        [
            "salloc",
            "--nodes=2",
            "--exclusive",
            "--quiet",
            sys.executable,
            "-m",
            "ddpbench",
            "run",
            "--launcher",
            "slurm",
            "--workload",
            workload,
            "--nnodes",
            "2",
            "--device",
            "cpu",
            "--steps",
            "8",
            "--warmup",
            "2",
            "--no-profile",
            "--run-id",
            "shard",
            "--out",
            str(tmp_path / "out"),
        ],
        env={**cluster.env(), "PYTHONPATH": REPO},
        cwd=str(tmp_path),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 1, done.stdout + done.stderr
    record = json.load(open(tmp_path / "out" / "runs" / "shard.json"))
    assert record["status"] == "failed"
    assert record["error"]["message"].startswith("rank 1 raised FileNotFoundError"), record["error"]
    assert 1 in record["error"]["failed_ranks"] and "FileNotFoundError" in record["error"]["tracebacks"]["1"]
    assert record["launch"]["command"][0] == "srun" and record["env"]["scheduler"]["job_num_nodes"] == 2
    assert record["launch"]["attempts"] == 1, record["launch"]["notes"]
