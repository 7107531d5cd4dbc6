"""Scripts as people write them, each a real 2-rank gloo run under `ddpbench run --script`: a loop
that peeks at its loader before set_epoch (PyTorch's tutorial series) passes the reshuffle check,
one that never calls set_epoch still fails it; a loop without its sampler fails the shard check
before any pass ends, and one that clips gradients on rank 0 only fails gradients_in_sync;
evaluation forwards through the DDP model are not training batch; a script that trains without DDP
is stopped within seconds with its own exit code; token ids are counted as tokens when asked and
named when not; secret arguments never reach the record. Plus `sweep --script` filling {nproc} per
run."""

import json
import os

import pytest
from conftest import FIXTURES, ddpbench

from ddpbench.config.plan import script_for
from ddpbench.config.spec import ScriptSpec
from ddpbench.worker.script.observer import UNDISTRIBUTED_STEPS

SCRIPTS = os.path.join(FIXTURES, "scripts")
COMMON = ("--nproc", "2", "--device", "cpu", "--steps", "30", "--warmup", "5", "--no-profile")
TOKEN = "hf_" + "Zq8" * 8  # looks like a Hugging Face token: redacted by its look, under any option


def run_script(tmp_path, name: str, *options: str, script_args: tuple[str, ...] = ()):
    done = ddpbench(
        "run", "--script", os.path.join(SCRIPTS, f"{name}.py"), *COMMON, "--run-id", name, "--out", str(tmp_path),
        *options, *(("--", *script_args) if script_args else ()), cwd=str(tmp_path),
    )  # fmt: skip
    path = tmp_path / "runs" / f"{name}.json"
    return done, (json.loads(path.read_text()) if path.exists() else None), path


@pytest.mark.launches
@pytest.mark.test_all  # this shape's checks; make test launches scripts in test_script_runs, one failing here
def test_a_peek_at_the_loader_before_set_epoch_is_no_epoch(tmp_path):
    done, record, _ = run_script(tmp_path, "peeks_before_set_epoch")
    assert done.returncode == 0, done.stdout + done.stderr
    assert record["checks"]["reshuffled_each_epoch"]["ok"] is True, record["checks"]
    assert record["checks"]["shards_disjoint"]["ok"] and record["checks"]["shards_cover_dataset"]["ok"]
    assert any("left before their end" in note for note in record["script"]["notes"])


@pytest.mark.launches
@pytest.mark.test_all  # this shape's checks; make test launches scripts in test_script_runs, one failing here
def test_a_loop_that_never_sets_the_epoch_still_fails_the_reshuffle_check(tmp_path):
    done, record, _ = run_script(tmp_path, "never_sets_epoch")
    assert done.returncode == 1
    check = record["checks"]["reshuffled_each_epoch"]
    assert check["ok"] is False and "set_epoch was not called" in check["reason"]


@pytest.mark.launches
@pytest.mark.test_all  # this shape's checks; make test launches scripts in test_script_runs, one failing here
def test_evaluation_forwards_are_not_training_batch(tmp_path):
    done, record, _ = run_script(tmp_path, "evaluates_on_rank_0")
    assert done.returncode == 0, done.stdout + done.stderr
    assert record["spec"]["batch_size"] == 16  # the training batch, not 16 + 3 x 64
    notes = record["script"]["notes"]
    assert not any("samples per step varied" in note for note in notes)
    assert any(note.startswith("rank 0 ran ") and "evaluation forward" in note for note in notes), notes
    assert not any(note.startswith("rank 1 ran ") for note in notes)


@pytest.mark.launches
@pytest.mark.test_all  # this shape's checks; make test launches scripts in test_script_runs, one failing here
def test_a_script_that_trains_without_ddp_is_stopped_within_seconds(tmp_path):
    done, record, _ = run_script(tmp_path, "trains_without_ddp_forever")
    assert done.returncode == 5, done.stdout + done.stderr
    assert record["status"] == "failed"
    assert "built no DistributedDataParallel model" in record["error"]["message"]
    # Stopped at its 20th optimizer step, not by the minute the check also allows: the script would
    # train forever. (A wall-clock bound here read 9 s in one full test run and 36 s in the next, with
    # other files' runs beside it; a count of steps does not move with the machine's load.)
    assert f"stepped an optimizer {UNDISTRIBUTED_STEPS} times in " in record["error"]["message"]
    assert "built no DistributedDataParallel model" in done.stdout
    assert "Traceback" not in done.stdout


@pytest.mark.launches
@pytest.mark.test_all  # this shape's checks; make test launches scripts in test_script_runs, one failing here
def test_token_ids_are_counted_when_asked_and_secrets_never_written(tmp_path):
    done, record, path = run_script(
        tmp_path, "language_model", "--sample-unit", "tokens", script_args=("--context", "24", "--hf-token", TOKEN)
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert record["metrics"]["units_per_sample"] == 24 and record["metrics"]["sample_unit"] == "tokens"
    assert any("token ids of shape (8, 24)" in note for note in record["script"]["notes"])
    assert record["spec"]["script"]["args"] == ["--context", "24", "--hf-token", "<redacted>"]
    # nowhere in what ddpbench wrote: the record, its launch command, the logs of the run
    for folder, _, files in os.walk(tmp_path):
        for name in files:
            assert TOKEN not in open(os.path.join(folder, name), errors="replace").read(), name


@pytest.mark.launches
@pytest.mark.test_all  # this shape's checks; make test launches scripts in test_script_runs, one failing here
def test_token_ids_counted_as_samples_are_named(tmp_path):
    done, record, _ = run_script(tmp_path, "language_model")
    assert done.returncode == 0, done.stdout + done.stderr
    assert record["metrics"]["units_per_sample"] == 1
    assert any("--sample-unit tokens counts 32 tokens per sample" in note for note in record["script"]["notes"])


def test_a_sweep_fills_the_world_size_into_the_scripts_arguments():
    script = ScriptSpec(path="train.py", args=("--trainer.devices", "{nproc}", "--name", "run-{world_size}x{nnodes}"))
    assert script_for(script, 4, 8, 2).args == ("--trainer.devices", "4", "--name", "run-8x2")
    plain = ScriptSpec(path="train.py", args=("--lr", "{not a placeholder}"))
    assert script_for(plain, 4, 8, 2) is plain


@pytest.mark.launches
@pytest.mark.test_all  # this shape's checks; make test launches scripts in test_script_runs, one failing here
def test_an_accelerate_loop_is_checked_from_the_indices_its_loader_drew(tmp_path):
    pytest.importorskip("accelerate")
    done, record, _ = run_script(tmp_path, "accelerate_loop")
    assert done.returncode == 0, done.stdout + done.stderr
    checks = record["checks"]
    assert all(checks[name]["ok"] is True for name in CHECKED), checks
    assert checks["shards_disjoint"]["details"].get("whole_pass") is None  # decided on a whole pass
    assert record["spec"]["batch_size"] == 16
    # the warm-up's five optimizer steps, after Accelerate's backward: the same gradients on both ranks
    assert checks["gradients_in_sync"]["ok"] is True
    assert checks["gradients_in_sync"]["details"]["identical_steps"] == 5, checks["gradients_in_sync"]


@pytest.mark.launches
@pytest.mark.test_all  # this shape's checks; make test launches scripts in test_script_runs, one failing here
def test_an_accelerate_epoch_longer_than_the_run_is_checked_for_overlap_on_the_indices_drawn(tmp_path):
    pytest.importorskip("accelerate")
    done, record, _ = run_script(tmp_path, "accelerate_loop", script_args=("--samples", "20000"))
    assert done.returncode == 0, done.stdout + done.stderr
    disjoint, covered = record["checks"]["shards_disjoint"], record["checks"]["shards_cover_dataset"]
    assert disjoint["ok"] is True and disjoint["details"]["whole_pass"] is False, disjoint
    # 30 steps of 16 per rank, and what the loader had fetched ahead: drawn, not the epoch's 10,000
    assert all(480 <= size < 10_000 for size in disjoint["details"]["shard_sizes"]), disjoint
    assert covered["ok"] is None and "no full pass of the loader" in covered["reason"]


@pytest.mark.launches
def test_a_loop_without_the_sampler_fails_the_shard_check_before_any_pass_ends(tmp_path):
    done, record, _ = run_script(tmp_path, "forgets_the_sampler")
    assert done.returncode == 1, done.stdout + done.stderr
    disjoint = record["checks"]["shards_disjoint"]
    assert disjoint["ok"] is False and disjoint["details"]["whole_pass"] is False, disjoint
    # the same shuffled order on both ranks: every index rank 1 drew, rank 0 drew too
    # not chance: counts of samples
    assert disjoint["details"]["repeated_indices"] == disjoint["details"]["shard_sizes"][1] >= 480
    assert "indices were read by more than one rank" in disjoint["reason"]
    assert record["checks"]["shards_cover_dataset"]["ok"] is None
    # the gradients were averaged (over the same batches): that check has nothing against this script
    assert record["checks"]["gradients_in_sync"]["ok"] is True


@pytest.mark.launches
@pytest.mark.test_all  # this shape's checks; make test launches scripts in test_script_runs, one failing here
def test_zero_redundancy_steps_once_per_step_after_its_broadcast(tmp_path):
    done, record, _ = run_script(tmp_path, "zero_redundancy")
    assert done.returncode == 0, done.stdout + done.stderr
    # its local optimizer steps inside ZeRO's own: one step of 16 samples each, not a second of 0
    assert record["spec"]["batch_size"] == 16 and record["script"]["steps_seen"] == 30
    # the window closes after ZeRO broadcast the shards: the replicas agree
    assert record["checks"]["replicas_in_sync"]["ok"] is True
    assert record["checks"]["gradients_in_sync"]["ok"] is True


@pytest.mark.launches
@pytest.mark.test_all  # this shape's checks; make test launches scripts in test_script_runs, one failing here
def test_gradients_changed_on_one_rank_after_the_all_reduce_fail_gradients_in_sync(tmp_path):
    done, record, _ = run_script(tmp_path, "clips_on_rank_0")
    assert done.returncode == 1, done.stdout + done.stderr
    check = record["checks"]["gradients_in_sync"]
    assert check["ok"] is False, check
    assert check["details"]["ranks_differing_from_rank0"] == [1] and check["details"]["identical_steps"] == 0
    assert check["details"]["steps_compared"] == 5 and check["details"]["max_relative_difference"] > 0.5
    assert "rank(s) 1 stepped with gradients unlike rank 0's from optimizer step 1 on" in check["reason"]
    assert "gradients_in_sync" in done.stdout


@pytest.mark.parametrize(
    "args, failed",
    [((), None), (("--every-rank-reads-all",), "indices were read by more than one rank")],
    ids=["shards", "forgets-to-shard"],
)
@pytest.mark.launches
@pytest.mark.test_all  # this shape's checks; make test launches scripts in test_script_runs, one failing here
def test_a_custom_sampler_is_checked_and_its_overlap_fails(tmp_path, args, failed):
    done, record, _ = run_script(tmp_path, "custom_sampler", script_args=args)
    checks = record["checks"]
    if failed is None:
        assert done.returncode == 0 and all(checks[name]["ok"] is True for name in CHECKED), checks
    else:
        assert done.returncode == 1 and checks["shards_disjoint"]["ok"] is False
        assert failed in checks["shards_disjoint"]["reason"]


@pytest.mark.launches
@pytest.mark.test_all  # this shape's checks; make test launches scripts in test_script_runs, one failing here
def test_repeated_augmentation_is_named_not_failed(tmp_path):
    done, record, _ = run_script(tmp_path, "repeated_augmentation")
    assert done.returncode == 0, done.stdout + done.stderr
    for name in ("shards_disjoint", "shards_cover_dataset"):
        check = record["checks"][name]
        assert check["ok"] is None and "RepeatAugSampler hands each sample to 3 ranks by design" in check["reason"]


CHECKED = ("shards_disjoint", "shards_cover_dataset", "reshuffled_each_epoch")


def test_a_sweep_keeps_no_secret_and_resumes_only_with_the_same_arguments(tmp_path):
    from ddpbench.config.errors import SpecError
    from ddpbench.config.spec import RunSpec
    from ddpbench.running.slurm import sbatch_script
    from ddpbench.running.sweep import prepare

    script = ScriptSpec(path="train.py", args=("--devices", "{nproc}", f"--hf-token={TOKEN}"))
    plan = [
        RunSpec(
            workload=script.workload_name,
            strategy="ddp",
            nproc=n,
            script=script_for(script, n, n, 1),
            run_id=f"s-n{n}",
            out_dir=str(tmp_path),
        )  # fmt: skip
        for n in (1, 2)
    ]
    prepare(str(tmp_path), plan, {"script": {"path": "train.py", "args": list(script.args)}}, resume=False)
    manifest = (tmp_path / "manifest.json").read_text()
    assert TOKEN not in manifest and "--hf-token=<redacted>" in manifest
    with pytest.raises(SpecError, match="resume it with the same arguments after --"):
        prepare(str(tmp_path), None, None, resume=True)
    with pytest.raises(SpecError, match="differ from the ones this sweep ran with"):
        prepare(str(tmp_path), None, None, resume=True, script_args=("--devices", "4", f"--hf-token={TOKEN}"))
    _, resumed = prepare(str(tmp_path), None, None, resume=True, script_args=script.args)
    assert [spec.script.args for spec in resumed] == [
        ("--devices", "1", f"--hf-token={TOKEN}"),
        ("--devices", "2", f"--hf-token={TOKEN}"),
    ]
    # A requeued batch script resumes the sweep: --resume goes before the script's arguments.
    text = sbatch_script(["--script", "train.py", "--", "--devices", "{nproc}"], str(tmp_path), 1, None, [], "py", ".")
    assert "--script train.py --resume -- --devices '{nproc}'" in text
