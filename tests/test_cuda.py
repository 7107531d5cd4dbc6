"""GPU paths: NCCL, CUDA events, AMP. Real runs where a GPU is present, skipped otherwise."""
import glob
import json

import pytest

from conftest import ddpbench, requires_cuda

pytestmark = [requires_cuda, pytest.mark.cuda]


def test_step_clock_reads_cuda_events_after_the_window():
    import torch

    from ddpbench.worker.clock import StepClock

    clock = StepClock(torch.device("cuda", 0))
    matrix = torch.randn(2048, 2048, device="cuda")
    clock.mark()
    for _ in range(3):
        for _ in range(20):
            matrix = matrix @ matrix / 2048 ** 0.5
        clock.mark()
    times = clock.step_times_s()
    assert len(times) == 3 and all(t > 0 for t in times)


@pytest.mark.launches
@pytest.mark.parametrize("strategy, precision", [("ddp", "bf16"), ("local", "bf16"), ("ddp", "fp16")])
def test_one_gpu_run(tmp_path, strategy, precision):
    done = ddpbench("run", "--workload", "gpt2", "--size", "tiny", "--device", "cuda", "--strategy", strategy,
                    "--precision", precision, "--steps", "20", "--warmup", "5", "--out", str(tmp_path))
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    record = json.load(open(glob.glob(str(tmp_path / "runs" / "*.json"))[0]))
    assert record["status"] == "ok"
    assert record["spec"]["backend"] == "nccl" and record["spec"]["device"] == "cuda"
    assert record["env"]["gpu_count"] >= 1 and record["env"]["gpu_names"]
    assert record["ranks"][0]["peak_memory_kind"] == "cuda_max_memory_allocated"
    assert record["ranks"][0]["device"] == "cuda:0"
    if strategy == "ddp":
        assert record["env"]["nccl"]
        assert record["checks"]["replicas_in_sync"]["ok"] and record["checks"]["gradients_averaged"]["ok"]
