import os
import traceback

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from ddpbench.worker import checks
from ddpbench.worker.data import NotShardable, RecordingSampler, make_loader


def test_shards_that_split_the_dataset_pass():
    result = checks.shard_checks([[0, 2, 4], [1, 3, 5]], dataset_length=6, world_size=2)
    assert result["shards_disjoint"]["ok"] and result["shards_cover_dataset"]["ok"]


def test_only_distributed_samplers_own_padding_is_allowed():
    # 5 samples on 2 ranks: DistributedSampler repeats exactly one index so both get 3...
    result = checks.shard_checks([[0, 1, 2], [2, 3, 4]], dataset_length=5, world_size=2)
    assert result["shards_disjoint"]["ok"] and result["shards_disjoint"]["details"]["padding_allowed"] == 1
    # ...but ranks reading the same samples are not padding.
    result = checks.shard_checks([[0, 1, 2], [0, 1, 2]], dataset_length=6, world_size=2)
    assert not result["shards_disjoint"]["ok"] and result["shards_disjoint"]["details"]["repeated_indices"] == 3
    assert "read by more than one rank" in result["shards_disjoint"]["reason"]
    assert not result["shards_cover_dataset"]["ok"] and result["shards_cover_dataset"]["details"]["covered"] == 3


def test_every_rank_reading_the_whole_dataset_fails():
    # The bug the old padding allowance hid: 160 samples, both ranks read all 160.
    everything = list(range(160))
    result = checks.shard_checks([everything, everything], dataset_length=160, world_size=2)
    assert result["shards_disjoint"]["ok"] is False
    assert result["shards_disjoint"]["details"]["padding_allowed"] == 0
    assert result["shards_cover_dataset"]["ok"] is True  # covered, but twice over


def _two_passes(call_set_epoch: bool) -> list:
    """The real sampler and loader, two epochs, with or without the set_epoch call."""
    dataset = torch.utils.data.TensorDataset(torch.arange(40.0))
    loader, sampler = make_loader(
        dataset,
        batch_size=4,
        world_size=2,
        rank=0,
        seed=0,
        num_workers=0,
        pin_memory=False,
        sampler_class=RecordingSampler,
    )
    for epoch in range(2):
        if call_set_epoch:
            sampler.set_epoch(epoch)
        for _ in loader:
            pass
    return sampler.passes


def test_a_loop_without_set_epoch_fails_the_reshuffle_check():
    result = checks.reshuffled_each_epoch(_two_passes(call_set_epoch=False))
    assert result["ok"] is False and "set_epoch was not called" in result["reason"]
    assert checks.reshuffled_each_epoch(_two_passes(call_set_epoch=True))["ok"] is True


def test_reshuffle_needs_two_passes_and_a_different_order():
    assert checks.reshuffled_each_epoch([(0, [1, 2, 3])])["ok"] is None
    assert "second epoch" in checks.reshuffled_each_epoch([(0, [1, 2, 3])])["reason"]
    assert checks.reshuffled_each_epoch([(0, [1, 2, 3]), (1, [3, 1, 2])])["ok"] is True
    assert checks.reshuffled_each_epoch([(0, [1, 2, 3]), (1, [1, 2, 3])])["ok"] is False


def test_an_iterable_dataset_is_refused_with_what_to_do():
    class Stream(torch.utils.data.IterableDataset):
        def __iter__(self):
            return iter(range(10))

    with pytest.raises(NotShardable, match="IterableDataset .*Stream.*map-style Dataset"):
        make_loader(Stream(), batch_size=2, world_size=2, rank=0, seed=0, num_workers=0, pin_memory=False)


def test_replicas_in_sync_names_the_odd_rank_out():
    assert checks.replicas_in_sync(["a", "a", "a"])["ok"]
    result = checks.replicas_in_sync(["a", "a", "b", "a"])
    assert not result["ok"] and result["details"]["ranks_differing_from_rank0"] == [2]
    assert result["reason"].startswith("rank(s) 2 hold parameters unlike rank 0's")


def test_one_rank_has_nothing_to_compare():
    for check in (
        checks.replicas_in_sync(["a"]),
        checks.shard_checks([[0, 1, 2]], dataset_length=3, world_size=1)["shards_disjoint"],
    ):
        assert check["ok"] is None and check["reason"].startswith("one rank")
    # Coverage is still a real check with one rank: it can miss samples.
    assert checks.shard_checks([[0, 1]], dataset_length=3, world_size=1)["shards_cover_dataset"]["ok"] is False


def test_an_old_one_rank_record_that_says_ok_reads_as_not_checked():
    from conftest import REPO

    from ddpbench.records.store import load_record

    runs = os.path.join(REPO, "tests", "fixtures", "sweeps", "cpu-mlp-with-failure", "runs")
    one_rank = load_record(os.path.join(runs, "mlp-ddp-n1.json"))  # written with gradients_averaged ok
    for name in ("gradients_averaged", "replicas_in_sync", "shards_disjoint"):
        assert one_rank.checks[name].ok is None and one_rank.checks[name].reason.startswith("one rank")
    assert one_rank.checks["shards_cover_dataset"].ok is True
    two_ranks = load_record(os.path.join(runs, "mlp-ddp-n2.json"))
    assert all(two_ranks.checks[name].ok is True for name in ("gradients_averaged", "replicas_in_sync"))


def test_parameter_digest_handles_scalar_parameters():
    module = torch.nn.Module()
    module.scale = torch.nn.Parameter(torch.tensor(2.0))
    assert len(checks.parameter_digest(module)) == 64


def test_parameter_digest_sees_a_one_ulp_change():
    model = torch.nn.Linear(4, 4)
    before = checks.parameter_digest(model)
    with torch.no_grad():
        model.weight[0, 0] = torch.nextafter(model.weight[0, 0], torch.tensor(10.0))
    assert checks.parameter_digest(model) != before


def _no_averaging_hook(state, bucket):
    """A broken comm hook: every rank keeps its own gradient, nothing is all-reduced."""
    future = torch.futures.Future()
    future.set_result(bucket.buffer())
    return future


def _gradient_check_on_rank(rank, world_size, store_path, broken, results, diverged=False):
    dist.init_process_group("gloo", init_method=f"file://{store_path}", rank=rank, world_size=world_size)
    try:
        torch.manual_seed(0)
        model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(8, 3))
        if broken:
            model.register_comm_hook(None, _no_averaging_hook)
        torch.manual_seed(100 + rank)  # each rank gets different data, as with a real sampler
        inputs, targets = torch.randn(4, 8), torch.randint(3, (4,))
        if diverged and rank == 1:
            inputs[0, 0] = float("nan")  # one bad sample on one rank poisons every rank's average
        results[rank] = checks.gradients_averaged(
            model, inputs, targets, torch.nn.functional.cross_entropy, world_size, "allreduce"
        )
    finally:
        dist.destroy_process_group()


# (broken, diverged) by case: real DDP, a hook that averages nothing, one rank's non-finite sample.
GRADIENT_CASES = {"real-ddp": (False, False), "no-averaging-hook": (True, False), "not-finite": (False, True)}


def _gradient_cases_on_rank(rank, world_size, folder, results):
    """Every case in turn, each in a process group of its own, in one pair of processes: starting
    them (and importing torch in each) is most of the time. A case that fails keeps its traceback
    for its own test, and the others still run."""
    for name, (broken, diverged) in GRADIENT_CASES.items():
        found = {}
        try:
            _gradient_check_on_rank(rank, world_size, os.path.join(folder, f"store-{name}"), broken, found, diverged)
            results[(name, rank)] = found[rank]
        except Exception:
            results[(name, rank)] = {"error": traceback.format_exc()}


@pytest.fixture(scope="module")
def gradient_cases(tmp_path_factory):
    """Case name -> rank -> the rank's gradients_averaged verdict."""
    folder = str(tmp_path_factory.mktemp("gradient-check"))
    with mp.Manager() as manager:
        results = manager.dict()
        mp.spawn(_gradient_cases_on_rank, args=(2, folder, results), nprocs=2)
        results = dict(results)
    return {name: {rank: results[(name, rank)] for rank in range(2)} for name in GRADIENT_CASES}


def case_results(gradient_cases, name) -> dict:
    results = gradient_cases[name]
    errors = [found["error"] for found in results.values() if "error" in found]
    assert not errors, errors[0]
    return results


@pytest.mark.launches
@pytest.mark.parametrize("broken", [False, True], ids=["real-ddp", "no-averaging-hook"])
def test_gradient_check_tells_averaged_from_local_gradients(gradient_cases, broken):
    results = case_results(gradient_cases, "no-averaging-hook" if broken else "real-ddp")
    assert all(r["ok"] is (not broken) for r in results.values()), results
    if broken:
        # not chance: seeded data: local gradients differ from averaged ones by the data, not by timing
        assert min(r["details"]["relative_error"] for r in results.values()) > 0.01


@pytest.mark.launches
def test_gradient_check_says_when_gradients_are_not_finite(gradient_cases):
    results = case_results(gradient_cases, "not-finite")
    assert all(r["ok"] is False and "not finite" in r["reason"] for r in results.values()), results
    merged = checks.all_ranks([results[0], results[1]], worst="relative_error")
    assert merged["ok"] is False and merged["reason"].startswith("rank 0: gradients are not finite")
    assert merged["details"]["max_relative_error"] is None


def test_all_ranks_keeps_the_worst_error_and_a_failing_ranks_reason():
    fine = checks.verdict(True, relative_error=1e-7, tolerance=1e-4)
    bad = checks.verdict(False, "gradients are not finite", relative_error=None, tolerance=1e-4)
    worse = checks.verdict(False, relative_error=0.5, tolerance=1e-4)
    merged = checks.all_ranks([fine, bad, worse], worst="relative_error")
    assert merged["ok"] is False and merged["reason"] == "rank 1: gradients are not finite"
    assert merged["details"]["max_relative_error"] == 0.5
    assert checks.all_ranks([fine, fine], worst="relative_error") == checks.verdict(
        True, max_relative_error=1e-7, tolerance=1e-4
    )


# --- gradients_in_sync (scripts): digests of the gradients each rank stepped with -------------------


def gradients(*values_by_parameter) -> list[torch.nn.Parameter]:
    found = []
    for values in values_by_parameter:
        param = torch.nn.Parameter(torch.zeros(len(values)))
        param.grad = torch.tensor(values, dtype=torch.float32)
        found.append(param)
    return found


def test_the_gradient_digest_moves_with_a_scaled_a_moved_or_a_missing_gradient():
    same = checks.gradient_digest(gradients([1.0, -2.0], [0.5]))
    assert checks.gradient_digest(gradients([1.0, -2.0], [0.5])).tolist() == same.tolist()
    changed = {
        "scaled, as clipping on one rank does": gradients([0.5, -1.0], [0.25]),
        "moved to another parameter": gradients([0.5], [1.0, -2.0]),
        "sign flipped": gradients([-1.0, 2.0], [0.5]),
    }
    for what, params in changed.items():
        difference = checks._digest_difference(same.tolist(), checks.gradient_digest(params).tolist())
        assert difference > checks.GRADIENT_DIGEST_TOLERANCE, what
    no_grad = gradients([1.0, -2.0], [0.5])
    no_grad[1].grad = None
    found = checks.gradients_in_sync([[same.tolist()], [checks.gradient_digest(no_grad).tolist()]], [0, 0])
    assert found["ok"] is False and found["details"]["max_relative_difference"] is None  # not the same parameters


def test_gradients_in_sync_names_the_rank_and_the_first_step_that_differ():
    step = checks.gradient_digest(gradients([1.0, 2.0])).tolist()
    other = checks.gradient_digest(gradients([1.0, 2.5])).tolist()
    found = checks.gradients_in_sync([[step, step, step], [step, step, step], [step, other, other]], [0, 0, 0])
    assert found["ok"] is False
    assert found["details"]["ranks_differing_from_rank0"] == [2] and found["details"]["identical_steps"] == 1
    assert "rank(s) 2 stepped with gradients unlike rank 0's from optimizer step 2 on" in found["reason"]
    assert checks.gradients_in_sync([[step, step], [step, step]], [0, 0])["ok"] is True
    hooked = checks.gradients_in_sync([[step], [other]], [0, 0], own_hook="post_localSGD_hook")
    assert "its own comm hook 'post_localSGD_hook'" in hooked["reason"]


def test_a_difference_inside_the_tolerance_passes_and_is_kept():
    step = [4.0, 8.0, 1.0, 2.0, 2.0]
    near = [4.0 * (1 + 1e-7), 8.0, 1.0, 2.0, 2.0]  # ranks on unlike devices, summing in another order
    found = checks.gradients_in_sync([[step], [near]], [0, 0])
    assert found["ok"] is True and found["details"]["identical_steps"] == 0
    assert 0 < found["details"]["max_relative_difference"] <= checks.GRADIENT_DIGEST_TOLERANCE


def test_steps_after_a_backward_declared_unsynced_are_counted_not_compared():
    found = checks.gradients_in_sync([[], []], [4, 4])
    assert found["ok"] is None and "followed a backward under no_sync()" in found["reason"]
    assert found["details"]["unsynced_steps"] == 4
    assert checks.gradients_in_sync([[]], [0]) == checks.one_rank()


def test_gradients_that_are_zero_on_every_rank_decide_nothing():
    zero = checks.gradient_digest(gradients([0.0, 0.0], [0.0])).tolist()
    found = checks.gradients_in_sync([[zero, zero], [zero, zero]], [0, 0])
    assert found["ok"] is None and "exactly zero at each of the 2 optimizer step(s)" in found["reason"]
    assert found["details"]["steps_compared"] == 2
    # Zero on one rank only is a difference like any other.
    some = checks.gradient_digest(gradients([1.0, 0.0], [0.0])).tolist()
    assert checks.gradients_in_sync([[zero, some], [zero, zero]], [0, 0])["ok"] is False
    # Zero at some steps on every rank, not at others: compared, and in sync.
    assert checks.gradients_in_sync([[zero, some], [zero, some]], [0, 0])["ok"] is True
    # A gradient whose square underflows in float32 is not zero.
    tiny = checks.gradient_digest(gradients([1e-30, 0.0], [0.0])).tolist()
    assert tiny[0] == 0 and checks.gradients_in_sync([[tiny], [tiny]], [0, 0])["ok"] is True
    # No gradient at all is said as such.
    none = [0.0, 0.0, 0.0, 0.0, 0.0]
    found = checks.gradients_in_sync([[none], [none]], [0, 0])
    assert found["ok"] is None and "no parameter of the DDP model had a gradient" in found["reason"]


def test_the_loader_shard_check_decides_overlap_on_a_pass_under_way():
    from ddpbench.worker.script.session import loader_checks

    def loader(indices, full):
        return {
            "passes": [(None, indices)],
            "full": [full],
            "dataset_length": 1000,
            "drop_last": False,
            "batch_size": 4,
            "sampler": "DataLoaderShard > BatchSamplerShard",
        }

    apart = loader_checks([loader([0, 1, 2, 3], False), loader([4, 5, 6, 7], False)], 2)
    assert apart["shards_disjoint"]["ok"] is True and apart["shards_disjoint"]["details"]["whole_pass"] is False
    assert apart["shards_cover_dataset"]["ok"] is None and "no full pass" in apart["shards_cover_dataset"]["reason"]
    # before a pass ends no loader pads: one shared index is an overlap, not padding
    shared = loader_checks([loader([0, 1, 2, 3], False), loader([3, 5, 6, 7], False)], 2)
    assert shared["shards_disjoint"]["ok"] is False and shared["shards_disjoint"]["details"]["padding_allowed"] == 0
    assert "loaders pad only at the end" in shared["shards_disjoint"]["reason"]
