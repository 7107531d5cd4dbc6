"""GPU-path defects shown on CPU, where a CPU can show them: each test fails without its fix.
What only a GPU can show is in test_cuda.py (skipped here) and benchmarks/gpu_check.py."""

import contextlib
import gzip
import json
import os
import threading

import pytest
import torch
from conftest import FIXTURES, REPO, cpu_environment, ddpbench_process

from ddpbench.analysis.peaks import model_flops_utilisation
from ddpbench.analysis.traces import TraceError, analyze_trace, format_trace_table
from ddpbench.config.spec import RunSpec
from ddpbench.host.facts import driver_version_from_proc, parse_gpu_query, visible_gpu_count
from ddpbench.running.command import LAUNCHER_VARIABLES, child_environment
from ddpbench.running.diagnose import out_of_memory
from ddpbench.running.resolve import resolve

REAL_GPU_TRACE = os.path.join(FIXTURES, "traces", "nccl-ddp-2gpu-rank0.json.gz")
# ddpbench's own run on one H200 (torch 2.11, CUDA 13, NCCL 2.28.9): gpt2 bf16 under DDP over NCCL,
# 3 profiled steps; the trace keeps its kernels, launches and step annotations (CPU ops dropped).
H200_TRACE = os.path.join(FIXTURES, "traces", "h200-gpt2-bf16-ddp1-rank0.json.gz")


def test_cpu_tests_run_with_the_gpus_hidden(monkeypatch):
    assert cpu_environment()["CUDA_VISIBLE_DEVICES"] == ""
    # Hidden GPUs are seen as none without importing torch, even where a driver is installed.
    monkeypatch.setattr("ddpbench.host.facts.nvidia_driver_present", lambda: True)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert visible_gpu_count() == 0


# --- DataParallel replicas and autocast ------------------------------------------------------


@pytest.fixture
def accelerator_plumbing_on_cpu(monkeypatch):
    """torch's parallel_apply refuses to run without an accelerator. Replace only its device
    plumbing (which device, which stream) so its own threads and its own autocast re-entry run
    for real on CPU: autocast's dtype is per thread on every device type."""
    acc = torch.accelerator
    monkeypatch.setattr(acc, "is_available", lambda: True)
    monkeypatch.setattr(acc, "current_accelerator", lambda: torch.device("cpu"))
    monkeypatch.setattr(acc, "current_stream", lambda device=None: contextlib.nullcontext())
    monkeypatch.setattr(acc, "device_index", lambda device: contextlib.nullcontext())


def test_data_parallel_replicas_compute_in_the_dtype_the_run_asked_for(accelerator_plumbing_on_cpu):
    from torch.nn.parallel.parallel_apply import parallel_apply

    from ddpbench.worker.training import AutocastDataParallel

    seen = []

    def replica(x):
        seen.append((threading.current_thread() is threading.main_thread(), torch.get_autocast_dtype("cpu")))
        return x

    wrapper = AutocastDataParallel.__new__(AutocastDataParallel)
    torch.nn.Module.__init__(wrapper)
    wrapper.device_ids, wrapper.src_device_obj = [0, 1], torch.device("cpu")
    inputs = [(torch.ones(1),), (torch.ones(1),)]
    # CPU autocast defaults to bf16 (CUDA's to fp16), so ask for the other one, as a bf16 run on
    # GPUs does: torch's own parallel_apply loses it in the replicas' threads...
    with torch.autocast("cpu", dtype=torch.float16):
        parallel_apply([replica, replica], inputs, devices=[0, 1])
    assert seen == [(False, torch.bfloat16)] * 2
    seen.clear()
    # ...and the wrapper's replicas keep it.
    with torch.autocast("cpu", dtype=torch.float16):
        wrapper.parallel_apply([replica, replica], inputs, [{}, {}])
    assert seen == [(False, torch.float16)] * 2


# --- peak memory per phase -------------------------------------------------------------------


def test_peak_memory_is_reset_at_every_phase():
    from ddpbench.worker.memory import CPU_RESETTABLE_KIND, PeakMemory

    memory = PeakMemory([torch.device("cpu")])
    memory.start("big")
    big = torch.ones(200 * 2**20 // 4)  # 200 MiB, touched
    del big
    big_phase = memory.end()
    memory.start("small")
    small_phase = memory.end()
    if small_phase["kind"] != CPU_RESETTABLE_KIND:
        pytest.skip("this kernel refuses to reset the peak resident set (/proc/self/clear_refs)")
    # not chance: bytes allocated, not timed
    assert big_phase["peak_bytes"] - small_phase["peak_bytes"] > 150 * 2**20
    assert set(memory.by_phase) == {"big", "small"}
    # The GPU's other figures (reserved bytes, NVML's used memory) have no CPU meaning: not made up.
    assert "reserved_bytes" not in big_phase and memory.device_used() == {}


def test_device_memory_from_nvml_says_why_where_it_cannot_be_read():
    from ddpbench.host.load import gpu_memory_used

    assert gpu_memory_used([]) == (None, None)
    used, note = gpu_memory_used(["GPU-00000000-0000-0000-0000-000000000000"])
    if used is not None:
        pytest.skip("NVML answered for a made-up GPU: this machine has a driver (test_cuda.py checks the figures)")
    assert note.startswith("not read: ")


def test_records_from_before_the_device_memory_fields_read_as_not_measured():
    from ddpbench.records.store import load_record

    record = load_record(os.path.join(FIXTURES, "sweeps", "cpu-mlp-with-failure", "runs", "mlp-ddp-n2.json"))
    rank = record.ranks[0]
    assert (rank.peak_memory_reserved_bytes, rank.device_memory_used_bytes, rank.device_memory_note) == (None,) * 3
    assert all(phase.reserved_bytes is None for phase in (rank.peak_memory_by_phase or {}).values())


@pytest.mark.launches
def test_record_reports_the_timed_windows_peak_not_the_gradient_checks(tmp_path):
    workload = f"{REPO}/tests/fixtures/big_in_eval.py:big_in_eval"
    # Two ranks: at one rank there is nothing to compare, and the gradient check does not run.
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
    assert done.returncode == 0, done.stdout + done.stderr[-2000:]
    [name] = os.listdir(tmp_path / "runs")
    rank = json.load(open(tmp_path / "runs" / name))["ranks"][0]
    phases = rank["peak_memory_by_phase"]
    assert set(phases) == {"warm-up", "timed", "checks"}
    assert rank["peak_memory_bytes"] == phases["timed"]["peak_bytes"]
    # The gradient check runs the model in eval mode, which needs 256 MiB more.
    # not chance: bytes allocated, not timed
    assert phases["checks"]["peak_bytes"] - rank["peak_memory_bytes"] > 200 * 2**20


# --- DDP's runtime logging and other host synchronisation ------------------------------------


def test_ddp_on_gpus_warms_up_past_its_logged_iterations():
    assert RunSpec(workload="mlp", device="cuda").warmup == 11
    assert RunSpec(workload="mlp", device="cuda", steps=8).warmup == 7  # always a timed step left
    assert RunSpec(workload="mlp", device="cpu").warmup == 5
    assert RunSpec(workload="mlp", strategy="local", device="cuda").warmup == 5
    assert RunSpec(workload="mlp", device="cuda", warmup=3).warmup == 3  # asked for: kept
    assert resolve(RunSpec(workload="mlp"), gpu_count=1, cores=8).warmup == 11
    assert resolve(RunSpec(workload="mlp"), gpu_count=0, cores=8).warmup == 5


def test_the_record_says_which_timed_steps_wait_on_the_host():
    from ddpbench.worker.training import Precision, host_synchronisation

    gpu = torch.device("cuda", 0)  # a device name only: nothing runs on it
    plain = torch.optim.SGD([torch.nn.Parameter(torch.ones(2))], lr=0.1)
    fp32 = Precision(autocast=contextlib.nullcontext)
    covered = host_synchronisation("ddp", gpu, 11, fp32, plain)
    assert covered["ddp_runtime_logging"]["timed_steps_host_synchronised"] == 0
    short = host_synchronisation("ddp", gpu, 5, fp32, plain)
    assert short["ddp_runtime_logging"]["timed_steps_host_synchronised"] == 6
    assert "first 6 timed steps wait" in short["ddp_runtime_logging"]["how"]
    fp16 = Precision(autocast=contextlib.nullcontext, scaler=object())
    assert "found_inf" in host_synchronisation("local", gpu, 5, fp16, plain)["host_reads_per_step"][0]
    fused = torch.optim.SGD([torch.nn.Parameter(torch.ones(2))], lr=0.1, fused=True)
    assert host_synchronisation("local", gpu, 5, fp16, fused)["host_reads_per_step"] == []


def test_ddp_logs_no_iteration_after_its_first_ten(tmp_path):
    """DDP logs iterations 1..10, then every 100th by default (on GPUs each logged forward waits for
    the GPU). After 105 iterations the last logged one must still be 10."""
    import torch.distributed as dist

    from ddpbench.config.spec import DDPKnobs
    from ddpbench.worker.training import wrap_ddp

    store = dist.FileStore(str(tmp_path / "store"), 1)
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    try:
        model = wrap_ddp(torch.nn.Linear(4, 1), torch.device("cpu"), DDPKnobs())
        inputs = torch.ones(2, 4)
        for _ in range(105):
            model(inputs).sum().backward()
        assert model._get_ddp_logging_data()["iteration"] == 10
    finally:
        dist.destroy_process_group()


# --- launcher variables left by a surrounding job --------------------------------------------


def test_local_and_dp_ignore_the_variables_of_a_surrounding_launcher(monkeypatch):
    from ddpbench.worker.main import Rank

    for name, value in {"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1"}.items():
        monkeypatch.setenv(name, value)
    for strategy in ("local", "dp"):
        spec = RunSpec(workload="mlp", strategy=strategy, device="cpu")
        rank = Rank(spec)
        assert (rank.rank, rank.local_rank, rank.world_size, rank.is_writer) == (0, 0, 1, True)
        assert not set(LAUNCHER_VARIABLES) & set(child_environment(spec, "/tmp/beats"))
    ddp = child_environment(RunSpec(workload="mlp", device="cpu"), "/tmp/beats")
    assert ddp["RANK"] == "3"  # torchrun sets its own for its workers anyway


@pytest.mark.launches
def test_a_local_run_inside_a_torchrun_job_writes_its_record(tmp_path):
    done = ddpbench_process(
        "run",
        "--workload",
        "mlp",
        "--strategy",
        "local",
        "--steps",
        "4",
        "--warmup",
        "1",
        "--no-profile",
        "--out",
        str(tmp_path),
        env={"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2"},
    )
    assert done.returncode == 0, done.stdout + done.stderr[-2000:]
    [name] = os.listdir(tmp_path / "runs")
    record = json.load(open(tmp_path / "runs" / name))
    # not chance: a run started with RANK=1 around it still numbers its own one rank 0
    assert record["status"] == "ok" and record["ranks"][0]["rank"] == 0


# --- environment --------------------------------------------------------------------------


def test_environment_records_the_math_settings_that_change_gpu_speed():
    from ddpbench.worker.environment import torch_facts

    was = torch.backends.cudnn.benchmark
    torch.backends.cudnn.benchmark = True
    try:
        facts = torch_facts()
    finally:
        torch.backends.cudnn.benchmark = was
    assert facts["cudnn_benchmark"] is True
    assert facts["matmul_allow_tf32"] == torch.backends.cuda.matmul.allow_tf32
    assert facts["cudnn_allow_tf32"] == torch.backends.cudnn.allow_tf32
    assert facts["float32_matmul_precision"] == torch.get_float32_matmul_precision()
    for key in ("gpu_capabilities", "gpu_memory_bytes", "bf16_supported", "cudnn_deterministic"):
        assert key in facts


def test_driver_version_and_mig_mode_are_read_from_nvidia_smi_and_proc():
    # nvidia-smi --query-gpu=driver_version,mig.mode.current --format=csv,noheader, two GPUs:
    assert parse_gpu_query("550.54.15, Disabled\n550.54.15, Enabled\n") == ("550.54.15", ["Disabled", "Enabled"])
    assert parse_gpu_query("535.104.05, [N/A]\n") == ("535.104.05", ["[N/A]"])
    assert parse_gpu_query("") == (None, [])
    proc = (
        "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15  Tue Mar  5 22:23:56 UTC 2024\n"
        "GCC version:  gcc version 12.2.0 (Debian 12.2.0-14)\n"
    )
    assert driver_version_from_proc(proc) == "550.54.15"
    open_module = "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  560.35.03  Release Build\n"
    assert driver_version_from_proc(open_module) == "560.35.03"


def test_host_facts_say_when_there_is_no_gpu_driver(monkeypatch):
    from ddpbench.host import facts as environment

    monkeypatch.setattr(environment, "nvidia_driver_present", lambda: False)
    facts = environment.host_facts()
    assert (facts["driver_version"], facts["mig_mode"], facts["gpu_topology"]) == (None, [], None)


# --- out of memory from the libraries ---------------------------------------------------------


@pytest.mark.parametrize(
    "message",
    [
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
        "RuntimeError: cuDNN error: CUDNN_STATUS_ALLOC_FAILED",
        "RuntimeError: CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`",
        "torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, unhandled cuda error "
        "(run with NCCL_DEBUG=INFO for details), NCCL version 2.21.5\nncclUnhandledCudaError: Call to CUDA "
        "function failed.\nLast error:\nCuda failure 2 'out of memory'",
    ],
)
def test_out_of_memory_is_recognised_whichever_library_raised_it(message):
    assert out_of_memory(message)


def test_other_errors_are_not_out_of_memory():
    for message in (
        "RuntimeError: CUDA error: an illegal memory access was encountered",
        "RuntimeError: cuDNN error: CUDNN_STATUS_EXECUTION_FAILED",
        "DistBackendError: NCCL error: remote process exited or there was a network error",
    ):
        assert not out_of_memory(message)


# --- trace analysis failures ----------------------------------------------------------------


def rewritten_trace(tmp_path, keep):
    trace = json.load(gzip.open(REAL_GPU_TRACE))
    trace["traceEvents"] = [event for event in trace["traceEvents"] if keep(event)]
    path = tmp_path / "rank-0.pt.trace.json.gz"
    path.write_bytes(gzip.compress(json.dumps(trace).encode()))
    return str(path)


def test_a_gpu_trace_without_kernels_is_refused_not_read_as_cpu(tmp_path):
    path = rewritten_trace(tmp_path, lambda event: event.get("cat") not in ("kernel", "gpu_memcpy", "gpu_memset"))
    with pytest.raises(TraceError, match="GPU trace .* without kernel events"):
        analyze_trace(path)


def test_kernels_without_a_launch_event_are_counted(tmp_path):
    whole = analyze_trace(REAL_GPU_TRACE).summary()["kernels"]
    assert whole["without_launch"] == 0 and whole["total"] == 2700
    assert whole["analysed"] + whole["outside_analysed_steps"] == whole["total"]
    # Drop every cudaLaunchKernel (as a trace of driver-API launches would look to a reader that
    # knows only the runtime API): their kernels have no step, and the analysis says so.
    path = rewritten_trace(tmp_path, lambda event: event.get("name") != "cudaLaunchKernel")
    analysis = analyze_trace(path)
    kernels = analysis.summary()["kernels"]
    assert kernels["total"] == 2700 and kernels["without_launch"] > 0
    assert kernels["analysed"] + kernels["outside_analysed_steps"] + kernels["without_launch"] == 2700
    assert "have no launch event with their correlation id" in format_trace_table([analysis])


def test_kernels_queued_before_the_profiled_window_are_not_missing_launches(tmp_path):
    # On the H200 the previous step's optimizer kernels (25 multi_tensor_apply) still ran when the
    # window opened: their launches were before it, with lower correlation ids than any recorded.
    kernels = analyze_trace(H200_TRACE).summary()["kernels"]
    assert kernels["launched_before_trace"] == 25 and kernels["without_launch"] == 0, kernels
    placed = kernels["analysed"] + kernels["outside_analysed_steps"] + kernels["launched_before_trace"]
    assert placed == kernels["total"]
    # A launch missing inside the recorded range is still counted as one the analysis cannot link.
    trace = json.load(gzip.open(H200_TRACE))
    launches = sorted(
        e["args"]["correlation"] for e in trace["traceEvents"] if e.get("cat") in ("cuda_runtime", "cuda_driver")
    )
    dropped = set(launches[len(launches) // 2 : len(launches) // 2 + 10])
    trace["traceEvents"] = [
        e
        for e in trace["traceEvents"]
        if not (e.get("cat") in ("cuda_runtime", "cuda_driver") and e["args"]["correlation"] in dropped)
    ]
    path = tmp_path / "rank-0.pt.trace.json.gz"
    path.write_bytes(gzip.compress(json.dumps(trace).encode()))
    kernels = analyze_trace(str(path)).summary()["kernels"]
    assert 0 < kernels["without_launch"] <= 10 and kernels["launched_before_trace"] == 25, kernels


def test_a_bf16_run_on_an_h200_reads_as_bf16_though_cudnn_names_its_attention_f16():
    from test_cuda import BF16_KERNEL, UNTYPED_KERNEL, fp16_only_kernels

    trace = json.load(gzip.open(H200_TRACE))
    names = [e["name"] for e in trace["traceEvents"] if e.get("cat") == "kernel"]
    assert any(BF16_KERNEL.search(n) for n in names)
    assert any(UNTYPED_KERNEL.search(n) and "f16" in n for n in names)  # the case the exclusion is for
    assert fp16_only_kernels(names) == []
    assert fp16_only_kernels(["void at::native::vectorized_elementwise_kernel<4, c10::Half>"])  # fp16 still seen


def test_a_trace_analysis_failure_is_an_error_of_the_run():
    from ddpbench.records.schema import RankResult, Record
    from ddpbench.worker.main import add_overlap

    spec = RunSpec(workload="mlp", nproc=2, device="cpu", no_sync_steps=0, run_id="r")
    record = Record(run_id="r", status="ok", spec=spec, ranks=[RankResult(rank=0), RankResult(rank=1)])
    results = [{"rank": r, "reducer": {}, "step_times_s": [0.1]} for r in (0, 1)]
    found = [
        {"rank": 0, "trace_path": "a", "trace_summary": {"steps_analysed": 2}},
        {"rank": 1, "trace_path": "b", "trace_summary": {"error": "TraceError: b: no ProfilerStep#N"}},
    ]
    add_overlap(record, spec, results, found)
    assert record.error.message == "trace analysis failed: rank 1: TraceError: b: no ProfilerStep#N"
    assert record.error.failed_ranks == [1]
    assert record.status == "ok" and record.overlap.trace.by_rank[0].steps_analysed == 2


# --- MFU --------------------------------------------------------------------------------------


def test_mfu_uses_the_published_peak_of_the_device_and_precision():
    # ResNet-50 trains at about 24.5 GFLOP per 224x224 image (forward + backward).
    found = model_flops_utilisation(24.5e9, 4000.0, "NVIDIA H200", "bf16")
    assert found["mfu"] == pytest.approx(24.5e9 * 4000 / 989.5e12)
    assert found["basis"]["matched"] == "H200 SXM" and "datasheet" in found["basis"]["source"]
    assert model_flops_utilisation(1e9, 1.0, "NVIDIA H200 NVL", "bf16")["basis"]["matched"] == "H200 NVL"
    assert model_flops_utilisation(1e9, 1.0, "NVIDIA H100 80GB HBM3", "fp16")["basis"]["matched"] == "H100 SXM"
    assert model_flops_utilisation(1e9, 1.0, "NVIDIA H100 PCIe", "bf16")["basis"]["matched"] == "H100 PCIe"
    assert model_flops_utilisation(1e9, 1.0, "NVIDIA A100-SXM4-80GB", "fp32", matmul_tf32=True)["basis"][
        "peak_flops_per_s"
    ] == pytest.approx(156e12)
    unknown = model_flops_utilisation(1e9, 1.0, "NVIDIA GeForce RTX 4090", "bf16")
    assert unknown["mfu"] is None
    assert (
        unknown["basis"]["reason"] == "unknown GPU: no published peak for 'NVIDIA GeForce RTX 4090' in ddpbench's table"
    )
    assert model_flops_utilisation(1e9, 1.0, None, "fp32")["mfu"] is None


def test_fp32_mfu_follows_what_each_op_class_computed_in():
    # torch's defaults: cuDNN convolutions may use TF32, cuBLAS matrix products may not.
    matmuls = model_flops_utilisation(
        1e9, 1000.0, "NVIDIA H200", "fp32", matmul_tf32=False, conv_tf32=True, conv_flops_share=0.0
    )  # gpt2, vit_b_16, mlp
    assert matmuls["basis"]["precision"] == "fp32" and matmuls["basis"]["peak_flops_per_s"] == pytest.approx(67e12)
    assert matmuls["mfu"] == pytest.approx(1e12 / 67e12)
    convs = model_flops_utilisation(
        1e9, 1000.0, "NVIDIA H200", "fp32", matmul_tf32=False, conv_tf32=True, conv_flops_share=0.9
    )  # resnet50: mostly convolutions, a linear head
    assert convs["basis"]["precision"] == "fp32+tf32"
    assert convs["basis"]["peak_flops_per_s"] == pytest.approx(1e12 / (0.1 / 67 + 0.9 / 494.5))
    assert convs["basis"]["matmul_precision"] == "fp32" and convs["basis"]["conv_precision"] == "tf32"
    both = model_flops_utilisation(
        1e9, 1.0, "NVIDIA H200", "fp32", matmul_tf32=True, conv_tf32=True, conv_flops_share=0.5
    )
    assert both["basis"]["precision"] == "tf32" and both["basis"]["peak_flops_per_s"] == pytest.approx(494.5e12)
    # Autocast runs both classes in the half precision, whatever the TF32 settings.
    half = model_flops_utilisation(1e9, 1.0, "NVIDIA H200", "bf16", conv_tf32=True, conv_flops_share=0.9)
    assert half["basis"]["precision"] == "bf16" and half["basis"]["peak_flops_per_s"] == pytest.approx(989.5e12)


def test_the_flop_counter_tells_convolutions_from_matrix_products():
    import torch

    from ddpbench.worker.training import flops_per_sample

    loss = torch.nn.functional.cross_entropy
    mlp = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))
    per_sample, conv_share = flops_per_sample(mlp, loss, torch.randn(4, 32), torch.randint(0, 10, (4,)))
    # forward 2*(32*64 + 64*10) per sample, backward twice that (input and weight gradients), but
    # the first layer's input gradient is not needed.
    assert conv_share == 0.0 and per_sample == pytest.approx(6 * (32 * 64 + 64 * 10) - 2 * 32 * 64)
    convnet = torch.nn.Sequential(
        torch.nn.Conv2d(3, 16, 3), torch.nn.ReLU(), torch.nn.Flatten(), torch.nn.Linear(16 * 6 * 6, 10)
    )
    _, conv_share = flops_per_sample(convnet, loss, torch.randn(4, 3, 8, 8), torch.randint(0, 10, (4,)))
    # not chance: counted FLOPs, not timed
    assert 0.5 < conv_share < 1.0


def test_the_worker_reads_the_two_tf32_settings_apart():
    import torch

    from ddpbench.worker.environment import tf32_allowed

    before = torch.get_float32_matmul_precision(), torch.backends.cudnn.allow_tf32
    try:
        torch.set_float32_matmul_precision("highest")
        torch.backends.cudnn.allow_tf32 = True  # torch's default
        assert tf32_allowed() == {"matmul": False, "conv": True}
        torch.set_float32_matmul_precision("high")
        assert tf32_allowed()["matmul"] is True
    finally:
        torch.set_float32_matmul_precision(before[0])
        torch.backends.cudnn.allow_tf32 = before[1]


def test_nvidia_tf32_override_turns_tf32_off_below_torch(monkeypatch):
    """NVIDIA_TF32_OVERRIDE=0 makes cuBLAS and cuDNN compute fp32 in fp32 whatever torch allows: the
    MFU basis must follow the libraries, and the record keeps the variable (its env_vars)."""
    import torch

    from ddpbench.host.facts import captured_env
    from ddpbench.worker.environment import tf32_allowed

    before = torch.get_float32_matmul_precision(), torch.backends.cudnn.allow_tf32
    try:
        torch.set_float32_matmul_precision("high")
        torch.backends.cudnn.allow_tf32 = True
        monkeypatch.setenv("NVIDIA_TF32_OVERRIDE", "0")
        assert tf32_allowed() == {"matmul": False, "conv": False}
        assert captured_env({"NVIDIA_TF32_OVERRIDE": "0"}) == {"NVIDIA_TF32_OVERRIDE": "0"}
        monkeypatch.setenv("NVIDIA_TF32_OVERRIDE", "1")  # only 0 overrides; other values leave torch's choice
        assert tf32_allowed() == {"matmul": True, "conv": True}
    finally:
        torch.set_float32_matmul_precision(before[0])
        torch.backends.cudnn.allow_tf32 = before[1]


# --- public scripts that assume a GPU, run on a machine without one ---------------------------


@pytest.mark.parametrize(
    "raised, says",
    [
        # pytorch/examples distributed/ddp-tutorial-series/multigpu_torchrun.py under --device cpu
        (
            "RuntimeError: Found no NVIDIA driver on your system. Please check that you have an NVIDIA GPU and "
            "installed a driver from http://www.nvidia.com/Download/index.aspx",
            "asks for a GPU and this machine has none (Found no NVIDIA driver): run it on a GPU node",
        ),
        # huggingface/pytorch-image-models train.py --device cpu under --device cpu
        (
            "ValueError: DistributedDataParallel device_ids and output_device arguments only work with "
            "single-device/multiple-device GPU modules or CPU modules, but got device_ids [device(type='cpu')], "
            "output_device None, and module parameters {device(type='cpu')}.",
            "passes device_ids to DistributedDataParallel for a CPU model",
        ),
    ],
)
def test_a_script_that_needs_a_gpu_is_told_so(raised, says):
    from ddpbench.running.diagnose import known_pitfall

    assert says in known_pitfall(raised)
    assert known_pitfall("RuntimeError: something of the script's own") is None
