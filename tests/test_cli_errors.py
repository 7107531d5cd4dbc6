"""Bad command lines: one line on stderr naming the problem, exit code 2, nothing started."""

import os
import stat

import pytest
from conftest import ddpbench


@pytest.mark.parametrize(
    "args, message",
    [
        (["--workload", "nope"], "unknown workload 'nope'; valid: gpt2, mlp, resnet50, vit_b_16"),
        (["--workload", "mlp", "--batch-size", "0"], "batch_size must be an integer >= 1; got 0"),
        (["--workload", "mlp", "--steps", "3", "--warmup", "3"], "steps must be above warmup"),
        (["--workload", "mlp", "--device", "cpu", "--precision", "fp16"], "fp16 needs a GPU"),
        (
            ["--workload", "mlp", "--device", "cuda", "--nproc", "2"],
            "nproc 2 needs 2 GPUs per node with device cuda; this machine has 0",
        ),
        (["--workload", "tests/fixtures/user_workload.py:nothing"], "defines no 'nothing'"),
    ],
)
def test_bad_run_arguments_fail_fast_with_exit_code_2(args, message, tmp_path):
    if "cuda" in args and __import__("ddpbench.host.facts").host.facts.visible_gpu_count() >= 2:
        pytest.skip("this machine has the GPUs that this error is about")
    done = ddpbench("run", *args, "--out", str(tmp_path / "out"))
    assert done.returncode == 2
    assert message in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists()  # nothing was started or written


@pytest.mark.parametrize("run_id", ["../../victim", "..", "/tmp/victim", "a\\b"])
def test_a_run_id_that_is_a_path_is_refused_before_anything_is_removed(run_id, tmp_path):
    # A run removes <out>/runs/<run_id>.json before it starts: with a path for an id, that file
    # would be outside --out.
    victim = tmp_path / "victim.json"
    victim.write_text("{}")
    (tmp_path / "out" / "runs").mkdir(parents=True)
    done = ddpbench("run", "--workload", "mlp", "--run-id", run_id, "--out", str(tmp_path / "out" / "runs" / ".."))
    assert done.returncode == 2
    assert "--run-id must be a plain name inside --out: letters, digits, '.', '_' and '-' (one name, no '/')" in (
        done.stderr
    )
    assert f"got {run_id!r}" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    assert victim.read_text() == "{}"
    assert sorted(os.listdir(tmp_path)) == ["out", "victim.json"]


def test_argparse_rejects_unknown_precision_with_the_choices():
    done = ddpbench("run", "--workload", "mlp", "--precision", "fp8")
    assert done.returncode == 2 and "'fp32', 'bf16', 'fp16'" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


@pytest.mark.skipif(os.geteuid() == 0, reason="root can write anywhere, so a read-only folder is no obstacle")
def test_unwritable_output_folder_is_refused(tmp_path):
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(stat.S_IRUSR | stat.S_IXUSR)
    done = ddpbench("run", "--workload", "mlp", "--out", str(locked / "x"))
    assert done.returncode == 2 and "not writable" in done.stderr


def test_output_path_that_is_a_file_is_refused(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    done = ddpbench("run", "--workload", "mlp", "--out", str(blocker))
    assert done.returncode == 2 and f"output folder '{blocker}' is not writable" in done.stderr


def test_checking_input_does_not_import_torch():
    import subprocess
    import sys

    code = (
        "import sys; from ddpbench.running.resolve import resolve; from ddpbench.config.spec import RunSpec;"
        "resolve(RunSpec(workload='mlp', nproc=2), gpu_count=0, cores=2);"
        "print('torch' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"


def test_a_nearly_full_disk_is_refused_before_any_run(tmp_path, monkeypatch):
    import shutil as real_shutil

    from ddpbench.config.spec import SpecError
    from ddpbench.running import launch

    full = real_shutil.disk_usage(tmp_path)._replace(free=50 * 2**20)
    monkeypatch.setattr(launch.shutil, "disk_usage", lambda path: full)
    with pytest.raises(SpecError, match="has only 50 MiB free; ddpbench needs at least 200 MiB"):
        launch.check_output_folder(str(tmp_path / "out"))


@pytest.mark.parametrize(
    "args, message",
    [
        (["sweep", "--gpus", "0"], "--gpus-per-node/--gpus: must be a whole number >= 1; got '0'"),
        (["sweep", "--gpus", "eight"], "must be a whole number >= 1; got 'eight'"),
        (["sweep", "--suite", "nightly"], "unknown suite 'nightly'"),
        (["sweep", "--strategies", "ddp,fsdp"], "unknown strategy 'fsdp'"),
        (["sweep", "--warmup", "1"], "warmup must be at least 2 for ddp; got 1"),
        (["sweep", "--resume"], "--resume needs --sweep-id"),
        (["sweep", "--resume", "--sweep-id", "never-made"], "nothing to resume"),
        (["sweep", "--sweep-id", "/tmp/elsewhere"], "must be a plain name inside --out"),
        (["sweep", "--sweep-id", "../outside"], "must be a plain name inside --out"),
        (["sweep", "--inject-fault", "kind=raise"], "needs rank, kind and step"),
        (["table", "/nonexistent/sweep"], "is not a folder"),
        (["report", "/nonexistent/sweep"], "is not a sweep folder"),
        (["trace", "analyze", "/nonexistent/trace.json.gz"], "cannot read"),
        (["trace", "analyze"], "the following arguments are required: PATH"),
        (["trace", "explain", "x"], "invalid choice: 'explain'"),
        (["frobnicate"], "invalid choice: 'frobnicate'"),
        (["run"], "one of the arguments --workload --script is required"),
    ],
)
def test_bad_command_lines_across_subcommands(args, message):
    done = ddpbench(*args)
    assert done.returncode == 2, done.stderr
    assert message in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
