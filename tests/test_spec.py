import pytest

from ddpbench.config.spec import DDPKnobs, RunSpec, SpecError
from ddpbench.running.resolve import resolve


def test_defaults_are_valid_and_world_size_multiplies_nodes():
    spec = RunSpec(workload="mlp", nproc=4, nnodes=2, rdzv_endpoint="10.0.0.1:29400", rdzv_id="job")
    assert spec.world_size == 8
    # The warm-up is chosen once the device is known (11 for ddp on GPUs, else 5).
    assert spec.warmup is None and spec.timed_steps == spec.steps - 5
    assert spec.replace(device="cpu").timed_steps == spec.steps - spec.replace(device="cpu").warmup


@pytest.mark.parametrize(
    "changes, words",
    [
        ({"strategy": "fsdp"}, ["strategy", "local, ddp, dp", "'fsdp'"]),
        ({"precision": "fp8"}, ["precision", "fp32, bf16, fp16"]),
        ({"device": "tpu"}, ["device", "auto, cuda, cpu"]),
        ({"batch_size": 0}, ["batch_size", ">= 1"]),
        ({"nproc": 0}, ["nproc", ">= 1"]),
        ({"steps": 5, "warmup": 5}, ["steps must be above warmup", "steps=5", "warmup=5"]),
        ({"warmup": 0}, ["warmup must be at least 1 for ddp"]),
        ({"device": "cpu", "precision": "fp16"}, ["fp16 needs a GPU", "fp32 or bf16"]),
        ({"strategy": "local", "nproc": 2}, ["local is one process"]),
        ({"nnodes": 2}, ["rdzv_endpoint", "rdzv_id"]),
        ({"nnodes": 2, "rdzv_endpoint": "nohostport", "rdzv_id": "x"}, ["host:port"]),
        ({"size": "huge"}, ["size", "tiny, full"]),
    ],
)
def test_bad_values_name_the_field_and_what_is_allowed(changes, words):
    with pytest.raises(SpecError) as error:
        RunSpec(workload="mlp", **changes)
    for word in words:
        assert word in str(error.value)


def test_local_may_skip_warmup_but_ddp_may_not():
    RunSpec(workload="mlp", strategy="local", warmup=0)
    with pytest.raises(SpecError):
        RunSpec(workload="mlp", strategy="ddp", warmup=0)


def test_unknown_comm_hook_lists_the_hooks():
    with pytest.raises(SpecError, match="allreduce, fp16_compress, bf16_compress"):
        DDPKnobs(comm_hook="powersgd")


def test_spec_round_trips_through_json_dict():
    spec = RunSpec(workload="gpt2", nproc=2, ddp=DDPKnobs(bucket_cap_mb=50, comm_hook="bf16_compress"))
    again = RunSpec.from_dict(spec.to_dict())
    assert again == spec
    assert spec.to_dict()["world_size"] == 2 and spec.to_dict()["backend"] == "gloo"


def test_resolve_picks_cpu_tiny_and_slices_cores_when_no_gpu():
    spec = resolve(RunSpec(workload="mlp", nproc=2), gpu_count=0, cores=8)
    assert (spec.device, spec.size, spec.threads_per_rank, spec.backend) == ("cpu", "tiny", 4, "gloo")
    assert spec.run_id.startswith("mlp-ddp-n2-")


def test_resolve_picks_cuda_full_and_nccl_with_gpus():
    spec = resolve(RunSpec(workload="resnet50", nproc=2), gpu_count=8, cores=64)
    assert (spec.device, spec.size, spec.backend) == ("cuda", "full", "nccl")


def test_resolve_refuses_more_processes_than_gpus():
    with pytest.raises(SpecError, match="nproc 4 needs 4 GPUs per node with device cuda; this machine has 1"):
        resolve(RunSpec(workload="mlp", nproc=4, device="cuda"), gpu_count=1, cores=8)


def test_resolve_refuses_fp16_once_auto_becomes_cpu():
    with pytest.raises(SpecError, match="fp16 needs a GPU"):
        resolve(RunSpec(workload="mlp", precision="fp16"), gpu_count=0, cores=2)


def test_threads_never_drop_below_one():
    assert resolve(RunSpec(workload="mlp", nproc=4), gpu_count=0, cores=2).threads_per_rank == 1


def test_ddp_needs_a_warm_up_of_two_before_launch_but_old_records_still_load(tmp_path):
    from ddpbench.config.spec import check_launchable
    from ddpbench.records.store import load_record, new_record, write_record

    one = RunSpec(workload="mlp", strategy="ddp", warmup=1, run_id="old")
    with pytest.raises(SpecError, match="warmup must be at least 2 for ddp; got 1: .*rebuild"):
        check_launchable(one)
    check_launchable(one.replace(warmup=2))
    check_launchable(RunSpec(workload="mlp", strategy="local", warmup=0))  # nothing to rebuild
    # A record made before the rule (warm-up 1 was allowed then) is still a readable record.
    path = write_record(new_record(one, "ok"), str(tmp_path))
    assert load_record(path).spec.warmup == 1
