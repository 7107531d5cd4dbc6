import pytest

from ddpbench.config.plan import SweepOptions, plan_sweep, world_sizes
from ddpbench.config.spec import SpecError


@pytest.mark.parametrize(
    "largest, sizes", [(1, [1]), (2, [1, 2]), (6, [1, 2, 4, 6]), (8, [1, 2, 4, 8]), (12, [1, 2, 4, 8, 12])]
)
def test_world_sizes_are_powers_of_two_plus_the_largest(largest, sizes):
    assert world_sizes(largest) == sizes


def options(**changes):
    """A one-round sweep of the smoke suite's settings, every strategy from world size 1."""
    return SweepOptions(**{"device": "cpu", "max_world_size": 4, "cores": 8, "suite": "smoke", "repeat": 1, **changes})


def test_plan_has_one_local_reference_then_ddp_and_dp_at_every_size():
    plan = plan_sweep(options(workloads=("mlp",)), "results/x")
    assert [s.run_id for s in plan] == [
        "mlp-local-n1",
        "mlp-ddp-n1",
        "mlp-ddp-n2",
        "mlp-ddp-n4",
        "mlp-dp-n1",
        "mlp-dp-n2",
        "mlp-dp-n4",
    ]
    assert all(s.out_dir == "results/x" and s.size == "tiny" and s.batch_size == 8 for s in plan)


def test_a_cpu_device_is_the_same_slice_of_cores_everywhere():
    plan = {s.run_id: s for s in plan_sweep(options(workloads=("mlp",)), "out")}
    # 8 cores / largest world size 4 = 2 threads per device...
    assert plan["mlp-local-n1"].threads_per_rank == 2
    assert plan["mlp-ddp-n4"].threads_per_rank == 2
    # ...and DataParallel's single process drives N devices' worth of threads.
    assert plan["mlp-dp-n4"].threads_per_rank == 8


def test_a_sweeps_slowdown_reaches_every_run():
    """`sweep --slowdown` was accepted and dropped: no run got the extra work."""
    plan = plan_sweep(options(workloads=("mlp",), slowdown=0.25), "out")
    assert plan and all(spec.slowdown == 0.25 for spec in plan)
    assert all(spec.slowdown == 0.0 for spec in plan_sweep(options(workloads=("mlp",)), "out"))


def test_the_cpu_suite_is_local_and_ddp_from_two_processes_in_three_rounds():
    plan = plan_sweep(SweepOptions(device="cpu", max_world_size=2, cores=2, suite="cpu"), "out")
    assert {s.workload for s in plan} == {"mlp", "gpt2", "resnet50"}
    assert {(s.strategy, s.world_size) for s in plan} == {("local", 1), ("ddp", 2)}
    # Rounds: every configuration once, then again; each run knows its round.
    assert [s.run_id for s in plan[:6]] == [
        f"{w}-{k}-r1" for w in ("mlp", "gpt2", "resnet50") for k in ("local-n1", "ddp-n2")
    ]
    assert [s.repeat for s in plan] == [1] * 6 + [2] * 6 + [3] * 6
    assert [s.run_id for s in plan[6:]] == [s.run_id.replace("-r1", f"-r{r}") for r in (2, 3) for s in plan[:6]]


def test_a_strategy_subset_and_one_round():
    plan = plan_sweep(
        SweepOptions(device="cpu", max_world_size=2, cores=2, suite="cpu", strategies=("ddp",), repeat=1), "out"
    )
    assert {s.strategy for s in plan} == {"ddp"} and [s.run_id for s in plan] == [
        "mlp-ddp-n2",
        "gpt2-ddp-n2",
        "resnet50-ddp-n2",
    ]


def test_workload_files_whose_factories_share_a_name_are_told_apart(tmp_path):
    files = []
    for stem in ("a", "b", "c"):
        (tmp_path / f"{stem}.py").write_text("def factory(size, data_dir=None):\n    pass\n")
        files.append(f"{tmp_path / stem}.py:factory")
    plan = plan_sweep(options(workloads=tuple(files), strategies=("local", "ddp"), max_world_size=2), "out")
    assert len(plan) == 3 * len(
        plan_sweep(options(workloads=files[:1], strategies=("local", "ddp"), max_world_size=2), "out")
    )
    assert {s.run_id for s in plan} >= {"a.factory-local-n1", "b.factory-ddp-n2", "c.factory-ddp-n1"}
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "a.py").write_text("def factory(size, data_dir=None):\n    pass\n")
    with pytest.raises(SpecError, match="would both be named 'a.factory'"):
        plan_sweep(options(workloads=(files[0], f"{tmp_path / 'other' / 'a'}.py:factory")), "out")


def test_strong_scaling_splits_a_fixed_global_batch():
    plan = plan_sweep(options(workloads=("mlp",), scaling="strong", global_batch=32), "out")
    batches = {s.run_id: s.batch_size * s.world_size for s in plan}
    assert set(batches.values()) == {32}
    assert {s.run_id: s.batch_size for s in plan}["mlp-ddp-n4"] == 8


def test_strong_scaling_refuses_a_batch_that_does_not_split():
    with pytest.raises(SpecError, match="global batch 30 does not split evenly over 4 devices"):
        plan_sweep(options(workloads=("mlp",), scaling="strong", global_batch=30), "out")


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"suite": "nightly"}, "unknown suite 'nightly'; valid: cpu, gpu, smoke"),
        ({"strategies": ("ddp", "fsdp")}, "unknown strategy 'fsdp'; valid: local, ddp, dp"),
        ({"workloads": ("bert",)}, "unknown workload 'bert'"),
        ({"global_batch": 64}, "global_batch applies to strong scaling only"),
        ({"max_world_size": 0}, "largest world size must be an integer >= 1"),
    ],
)
def test_bad_sweep_options_are_named(changes, message):
    with pytest.raises(SpecError, match=message.replace("(", r"\(")):
        options(**changes)


def test_a_script_sweep_starts_at_one_device_on_cpu_too(tmp_path):
    """A script's DDP x1 run is its X(1): the CPU suite's start at two processes does not apply to it."""
    from ddpbench.config.spec import ScriptSpec

    script = tmp_path / "train.py"
    script.write_text("print('hi')\n")
    plan = plan_sweep(
        SweepOptions(
            device="cpu", max_world_size=2, cores=2, suite="cpu", repeat=1, script=ScriptSpec(path=str(script))
        ),
        "out",
    )
    assert [s.world_size for s in plan] == [1, 2]
