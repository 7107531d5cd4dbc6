"""The overlap phases against the installed torch: the replay compares like with like, and the
reducer timers describe the replayed iterations, not DDP's warm-up."""
import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from ddpbench.worker import phases


def _small_then_big(rank, store_path, results):
    dist.init_process_group("gloo", init_method=f"file://{store_path}", rank=rank, world_size=1)
    torch.set_num_threads(1)
    try:
        torch.manual_seed(0)
        # Backward of the big batch is ~1000x the tiny one's work: timing noise cannot blur the two.
        small, big = torch.randn(1, 256), torch.randn(2048, 256)

        def model():
            ddp = torch.nn.parallel.DistributedDataParallel(
                torch.nn.Sequential(torch.nn.Linear(256, 2048), torch.nn.ReLU(), torch.nn.Linear(2048, 1)))
            ddp._set_ddp_runtime_logging_sample_rate(phases.DDP_RUNTIME_LOGGING_SAMPLE_RATE)  # as wrap_ddp does
            return ddp

        def stepper(ddp):
            return lambda batch: ddp(batch).sum().backward()

        # A warm-up of 14 tiny steps, then the phase over big batches only.
        warmed = model()
        for _ in range(14):
            stepper(warmed)(small)
        running_before = warmed._get_ddp_logging_data()["avg_backward_compute_time"] / 1e9
        phase = phases.reducer_phase(warmed, stepper(warmed), [big] * 8)
        # Reference: a fresh model whose averages hold big steps only (its first iteration aside).
        fresh = model()
        for _ in range(10):
            stepper(fresh)(big)
        results["phase"] = phase
        results["big_only_s"] = fresh._get_ddp_logging_data()["avg_backward_compute_time"] / 1e9
        results["small_only_s"] = running_before
        results["plain_running_mean_s"] = warmed._get_ddp_logging_data()["avg_backward_compute_time"] / 1e9
    finally:
        dist.destroy_process_group()


def test_reducer_phase_describes_the_replayed_iterations_only(tmp_path):
    with mp.Manager() as manager:
        results = manager.dict()
        mp.spawn(_small_then_big, args=(str(tmp_path / "store"), results), nprocs=1)
        results = dict(results)
    phase = results["phase"]
    assert phase["iterations"] == 9 and "warm-up excluded" in phase["covers"]
    big, small = results["big_only_s"], results["small_only_s"]
    assert big > 5 * small  # the two kinds of step really differ
    # DDP's own running average mixes in the ten tiny warm-up steps; the phase's figure does not,
    # so it is closer to a model that only ever ran big steps (no tolerance on timings: the
    # machine may be loaded, the ordering still holds).
    assert abs(phase["backward_compute_time_s"] - big) < abs(results["plain_running_mean_s"] - big)
    assert phase["backward_compute_time_s"] > 5 * small


def test_recorded_iteration_count_follows_torchs_sampling_rule():
    assert phases.recorded_before(6) == 6      # iterations 1-6, all among the first ten
    assert phases.recorded_before(10) == 10
    assert phases.recorded_before(25) == 11    # 1-10, plus iteration 25 logged by the first rate-1 forward
