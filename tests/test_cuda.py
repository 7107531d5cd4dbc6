"""GPU paths on a real GPU: NCCL, CUDA events, autocast, DataParallel, peak memory, traces.
Each test checks a property that would be false if the path were broken, not only that nothing
crashed. Skipped on machines without a GPU (never faked); `make gpu-check` runs them too, and then
the gpt2 runs it already made (benchmarks/gpu_check_runs.py) are read, not launched again."""

import glob
import json
import math
import os
import re
import sys
import time

import pytest
from chance import mean_at_least, mean_at_most
from conftest import REPO, ddpbench_process, requires_cuda

sys.path.insert(0, os.path.join(REPO, "benchmarks"))
from gpu_check_nccl import analyse_traces, expected_steps, judge_nccl_job  # noqa: E402
from gpu_check_runs import GPT2, GPT2_DDP_TWO_GPUS, GPT2_FP16, ONE_GPU_SKIP, made_run  # noqa: E402

# Step times against wall time, and DDP and DP against local within 10 %: a test beside them would blur them.
pytestmark = [requires_cuda, pytest.mark.cuda, pytest.mark.alone]

# Kernel names carry their element type: cuBLAS/CUTLASS gemms spell it (bf16, f16), torch's own
# kernels are templates over c10::BFloat16 / c10::Half.
BF16_KERNEL = re.compile(r"bf16|bfloat16", re.IGNORECASE)
FP16_KERNEL = re.compile(r"c10::Half|(?<!b)f16|fp16|\bhalf\b|_h\d+gemm|hgemm", re.IGNORECASE)
# cuDNN's generated attention kernels name their 16-bit MMA "f16" whatever the element type: on an
# H200 (torch 2.11, cuDNN 9) a bf16 GPT-2 ran cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_*.
# Their names say nothing of bf16 against fp16, so neither check reads them.
UNTYPED_KERNEL = re.compile(r"^cudnn_generated_fort_native_sdpa")


def fp16_only_kernels(names: list[str]) -> list[str]:
    """Kernels whose names say fp16 and not bf16, leaving out names that do not tell the two apart."""
    return [n for n in names if FP16_KERNEL.search(n) and not BF16_KERNEL.search(n) and not UNTYPED_KERNEL.search(n)]


def busy_gpu(seconds: float):
    """Queue about `seconds` of matrix products on the current stream (sized on this GPU)."""
    import torch

    matrix = torch.randn(4096, 4096, device="cuda")
    torch.cuda.synchronize()
    started = time.perf_counter()
    for _ in range(10):
        matrix = torch.tanh(matrix @ matrix)
    torch.cuda.synchronize()
    per_product = (time.perf_counter() - started) / 10
    products = max(1, round(seconds / per_product))

    def work():
        nonlocal matrix
        for _ in range(products):
            matrix = torch.tanh(matrix @ matrix)

    return work


def test_event_step_times_agree_with_the_wall_time_of_the_window():
    import torch

    from ddpbench.worker.clock import StepClock

    work = busy_gpu(0.05)
    clock = StepClock(torch.device("cuda", 0))
    torch.cuda.synchronize()
    started = time.perf_counter()
    clock.mark()
    for _ in range(20):
        work()
        clock.mark()
    torch.cuda.synchronize()
    wall_s = time.perf_counter() - started
    step_times = clock.step_times_s()
    assert len(step_times) == 20
    # not chance: CUDA events and the wall clock time one window; they differ by the host's calls
    # at its two edges, microseconds against the 30 ms allowed
    assert sum(step_times) == pytest.approx(wall_s, rel=0.03)


def test_a_host_sleep_inside_a_step_is_in_the_step_time():
    import torch

    from ddpbench.worker.clock import StepClock

    work = busy_gpu(0.005)
    clock = StepClock(torch.device("cuda", 0))
    clock.mark()
    for _ in range(5):
        work()
        torch.cuda.synchronize()  # the GPU is idle while the host sleeps
        time.sleep(0.05)
        clock.mark()
    # not chance: a sleep never returns early
    assert all(step >= 0.05 for step in clock.step_times_s())


def test_peak_memory_is_per_phase_on_every_device():
    import torch

    from ddpbench.worker.memory import CUDA_KIND, PeakMemory

    devices = [torch.device("cuda", i) for i in range(torch.cuda.device_count())]
    memory = PeakMemory(devices)
    memory.start("big")
    big = torch.empty(2**30, dtype=torch.uint8, device=devices[-1])  # 1 GiB on the last device
    del big
    big_phase = memory.end()
    memory.start("small")
    small_phase = memory.end()
    assert big_phase["kind"] == CUDA_KIND and len(big_phase["by_device"]) == len(devices)
    assert big_phase["by_device"][-1] - small_phase["by_device"][-1] >= 2**30
    # The allocator reserved at least what it handed out; the device holds at least that, and more
    # (the CUDA context), as NVML sees it.
    assert all(r >= a for r, a in zip(big_phase["reserved_by_device"], big_phase["by_device"]))
    used = memory.device_used()
    assert used["device_memory_note"] is None, used
    assert all(u > r for u, r in zip(used["device_memory_used_bytes"], small_phase["reserved_by_device"]))


def gpu_run(out_dir, *args: str) -> dict:
    """A run's record: the one `make gpu-check` made with these options, where it made one (under
    gpu-check, which names its runs folder), else a run launched here."""
    made = made_run(list(args))
    if made is not None:
        record = json.load(open(made))
        assert record["status"] == "ok", (made, record.get("error"))
        return record
    done = ddpbench_process(
        "run", "--device", "cuda", "--run-timeout", "300", "--out", str(out_dir), *args, gpus=True, timeout=420
    )
    records = glob.glob(str(out_dir / "runs" / "*.json"))
    assert records, done.stdout[-3000:] + done.stderr[-3000:]
    record = json.load(open(records[0]))
    assert done.returncode == 0 and record["status"] == "ok", (record.get("error"), done.stderr[-3000:])
    return record


def two_gpus_or_skip(what: str):
    import torch

    if torch.cuda.device_count() < 2:
        pytest.skip(f"{ONE_GPU_SKIP}{what}")


@pytest.fixture(scope="module")
def gpt2_bf16_runs(tmp_path_factory):
    """GPT-2 small in bf16 on one GPU: no wrapper, DDP over NCCL (profiled), DataParallel."""
    runs = {}
    for strategy in ("local", "ddp", "dp"):
        # ddp warms up 11 steps by default (DDP's logged iterations); the others the same, to compare.
        extra = [] if strategy == "ddp" else ["--no-profile", "--warmup", "11"]
        runs[strategy] = gpu_run(
            tmp_path_factory.mktemp(strategy), *GPT2, "--precision", "bf16", "--strategy", strategy, *extra
        )
    return runs


def kernel_names(trace_path: str) -> list[str]:
    import gzip

    with gzip.open(trace_path) as handle:
        trace = json.load(handle)
    return [event["name"] for event in trace["traceEvents"] if event.get("cat") == "kernel"]


@pytest.mark.launches
def test_losses_are_finite_and_the_checks_pass(gpt2_bf16_runs):
    for strategy, record in gpt2_bf16_runs.items():
        assert math.isfinite(record["metrics"]["final_loss"]), strategy
        # The spec's backend follows the device (nccl on GPUs); only ddp makes a process group.
        assert record["spec"]["backend"] == "nccl", strategy
    ddp = gpt2_bf16_runs["ddp"]
    assert ddp["env"]["nccl"]
    # One GPU, one rank: averaging and replica sync have nothing to compare, and say so.
    # test_ddp_on_two_gpus_averages_gradients checks them where there are two.
    for name in ("replicas_in_sync", "gradients_averaged"):
        assert ddp["checks"][name]["ok"] is None and "one rank" in ddp["checks"][name]["reason"]
    assert ddp["spec"]["warmup"] == 11
    assert ddp["host_sync"]["ddp_runtime_logging"]["timed_steps_host_synchronised"] == 0


def mean_step(record: dict) -> float:
    steps = record["ranks"][0]["step_times_s"]
    return sum(steps) / len(steps)


DP_ROUNDS = 5
"""Processes of local and of dp, paired round by round. The steps of one process are not independent
samples of a strategy's speed: they share what that process met at its start (the GPU's clocks, the
allocator's layout, the kernels chosen), which moves its whole window and is not in their spread. So
each process is one sample, its mean step, and two processes of one round a pair: 4 degrees of
freedom, the fewest at which a 1-in-10,000 check of 10 % still has room (t of 8.6 against per-round
ratios that spread about 1 % on a GPU)."""


@pytest.fixture(scope="module")
def dp_rounds(tmp_path_factory, gpt2_bf16_runs):
    """(local, dp) records per round: the first round gpt2_bf16_runs', the others launched here with
    the same options, the order alternating from round to round."""
    rounds = [(gpt2_bf16_runs["local"], gpt2_bf16_runs["dp"])]
    for index in range(2, DP_ROUNDS + 1):
        made = {}
        for strategy in ("dp", "local") if index % 2 == 0 else ("local", "dp"):
            made[strategy] = gpu_run(
                tmp_path_factory.mktemp(f"{strategy}-r{index}"),
                *GPT2, "--precision", "bf16", "--strategy", strategy, "--no-profile", "--warmup", "11",
                "--run-id", f"{strategy}-r{index}",  # its own run, not gpu-check's made one
            )  # fmt: skip
        rounds.append((made["local"], made["dp"]))
    return rounds


@pytest.mark.launches
def test_ddp_and_data_parallel_on_one_gpu_are_within_10_percent_of_local(gpt2_bf16_runs, dp_rounds):
    """Each within 10 % of local's step, either way, at 1 in 10,000 each. DDP against the bare module
    round by round inside the DDP run's own process (its in-process ablation: at one rank, DDP's
    step and the unwrapped module's step in every round, as local steps it), so what the process met
    at its start is in both; DataParallel against local over DP_ROUNDS pairs of processes."""
    import msgspec

    from ddpbench.analysis.ablation import per_round
    from ddpbench.records.schema import TimelineRank

    (rank,) = [msgspec.convert(steps, TimelineRank) for steps in gpt2_bf16_runs["ddp"]["timeline"]["by_rank"]]
    wrapped, bare = per_round(rank.with_ddp, "step"), per_round(rank.unwrapped, "step")
    ddp_beyond = [wrapped[r] / bare[r] - 1 for r in sorted(set(wrapped) & set(bare))]
    mean_at_most(ddp_beyond, 0.1, what="ddp's step beyond the bare module's, a fraction, per round")
    mean_at_least(ddp_beyond, -0.1, what="ddp's step beyond the bare module's, a fraction, per round")
    dp_beyond = [mean_step(dp) / mean_step(local) - 1 for local, dp in dp_rounds]
    mean_at_most(dp_beyond, 0.1, what="dp's mean step beyond local's, a fraction, per round of processes")
    mean_at_least(dp_beyond, -0.1, what="dp's mean step beyond local's, a fraction, per round of processes")


@pytest.mark.launches
def test_peak_memory_in_the_record_is_the_timed_windows(gpt2_bf16_runs):
    for record in gpt2_bf16_runs.values():
        rank = record["ranks"][0]
        assert rank["peak_memory_kind"] == "cuda_max_memory_allocated"
        phases = rank["peak_memory_by_phase"]
        # not chance: bytes allocated, not timed
        assert rank["peak_memory_bytes"] == phases["timed"]["peak_bytes"] > 0
        assert set(phases) == {"warm-up", "timed", "checks"}
        # What the device held beyond torch's allocated bytes: reserved, then everything NVML sees
        # (the CUDA context alone is hundreds of MB).
        # not chance: bytes the allocator counted, not timed
        assert rank["peak_memory_reserved_bytes"] >= rank["peak_memory_bytes"]
        # not chance: a count of devices
        assert rank["device_memory_note"] is None and len(rank["device_memory_used_bytes"]) >= 1
        # not chance: bytes on the device, not timed
        assert rank["device_memory_used_bytes"][0] > rank["peak_memory_reserved_bytes"]
        # Which GPU it was, for the history's devices: torch's UUID, and NVML (read above) its PCI bus id.
        assert rank["device_uuid"] and rank["device_pci_bus_id"]
        assert rank["data_wait_mean_s"] is not None  # read from CUDA events after the window, every strategy


@pytest.mark.launches
def test_mfu_is_a_fraction_of_the_published_peak_where_the_device_is_known(gpt2_bf16_runs):
    metrics = gpt2_bf16_runs["local"]["metrics"]
    if metrics["mfu_basis"].get("matched") is None:
        pytest.skip(f"no published peak for {metrics['mfu_basis'].get('device')}")
    assert 0.01 < metrics["mfu"] < 1.0


@pytest.mark.launches
def test_a_one_rank_trace_is_gpu_with_its_steps_whole_and_every_launch_linked(gpt2_bf16_runs):
    """One rank's all-reduce launches no NCCL kernel: this reads kernels and launches, not communication
    (test_two_ranks_trace_holds_nccl_kernels_each_linked_to_its_launch does, where there are 2 GPUs)."""
    trace = gpt2_bf16_runs["ddp"]["overlap"]["trace"]["by_rank"][0]
    assert trace.get("error") is None, trace
    assert trace["kind"] == "gpu" and trace["backend"] == "nccl"
    assert trace["steps_analysed"] == 2  # 3 profiled steps, the last dropped
    # not chance: a measured duration is positive
    assert trace["compute_us"] > 0
    assert trace["kernels"]["without_launch"] == 0, trace["kernels"]


@pytest.mark.launches
def test_bf16_runs_launch_bf16_kernels(gpt2_bf16_runs):
    names = kernel_names(gpt2_bf16_runs["ddp"]["overlap"]["trace"]["paths"][0])
    assert any(BF16_KERNEL.search(name) for name in names)
    assert not fp16_only_kernels(names), fp16_only_kernels(names)[:5]


@pytest.mark.launches
def test_fp16_with_fp16_compression_and_loader_workers(tmp_path):
    record = gpu_run(tmp_path, *GPT2_FP16)
    assert math.isfinite(record["metrics"]["final_loss"])
    assert record["checks"]["gradients_averaged"]["ok"] is None and record["spec"]["num_workers"] == 2
    names = kernel_names(record["overlap"]["trace"]["paths"][0])
    assert fp16_only_kernels(names)
    assert "found_inf" in " ".join(record["host_sync"]["host_reads_per_step"])


@pytest.fixture(scope="module")
def ddp_on_two_gpus(tmp_path_factory):
    two_gpus_or_skip("DDP over two ranks needs a second GPU")
    return gpu_run(tmp_path_factory.mktemp("ddp-2gpu"), *GPT2_DDP_TWO_GPUS)


@pytest.mark.launches
def test_ddp_on_two_gpus_averages_gradients(ddp_on_two_gpus):
    record = ddp_on_two_gpus
    checks = record["checks"]
    assert record["spec"]["world_size"] == 2 and record["spec"]["backend"] == "nccl"
    assert checks["gradients_averaged"]["ok"] is True and checks["replicas_in_sync"]["ok"] is True
    assert (
        checks["gradients_averaged"]["details"]["max_relative_error"]
        <= checks["gradients_averaged"]["details"]["tolerance"]
    )
    assert (
        checks["shards_disjoint"]["details"]["shard_sizes"][0] == checks["shards_disjoint"]["details"]["shard_sizes"][1]
    )


@pytest.mark.launches
def test_two_ranks_trace_holds_nccl_kernels_each_linked_to_its_launch(ddp_on_two_gpus):
    """Both ranks' traces, read as gpu-check reads them: NCCL kernels on each, every one linked to its
    launch (NCCL's go through the driver API), communication time, the whole profiled steps."""
    paths = ddp_on_two_gpus["overlap"]["trace"]["paths"]
    assert len(paths) == 2
    judge_nccl_job(analyse_traces(paths), expected_steps(ddp_on_two_gpus))
    # The record's own analysis of the same traces counted NCCL's kernels too.
    assert all(rank["kernels"]["communication"] > 0 for rank in ddp_on_two_gpus["overlap"]["trace"]["by_rank"])


@pytest.mark.launches
def test_data_parallel_on_two_gpus_keeps_bf16(tmp_path):
    two_gpus_or_skip("DataParallel replicates only across 2 or more GPUs")
    record = gpu_run(tmp_path, *GPT2, "--precision", "bf16", "--strategy", "dp", "--nproc", "2")
    names = kernel_names(record["overlap"]["trace"]["paths"][0])
    assert any(BF16_KERNEL.search(name) for name in names)
    assert not fp16_only_kernels(names), fp16_only_kernels(names)[:5]
    assert len(record["ranks"][0]["peak_memory_bytes_by_device"]) == 2


def test_more_gpus_than_the_machine_has_are_refused(tmp_path):
    import torch

    too_many = str(torch.cuda.device_count() + 1)
    done = ddpbench_process(
        "run", "--workload", "mlp", "--device", "cuda", "--nproc", too_many, "--out", str(tmp_path), gpus=True
    )
    assert done.returncode == 2 and f"this machine has {torch.cuda.device_count()}" in done.stderr
    done = ddpbench_process("sweep", "--gpus", too_many, "--out", str(tmp_path), gpus=True)
    assert done.returncode == 2, done.stderr
