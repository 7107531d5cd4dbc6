"""GPU paths that no GPU here can run, decided on CPU: the process-group timeout of a compiled run,
the torch a strategy needs, the Flight Recorder's variables for every torch ddpbench takes, ROCm,
and nn.DataParallel's first GPU at 8 GPUs."""

from __future__ import annotations

import json
import os
import sys

import pytest
from test_hangs import nccl_run_evidence

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks"))
from gpu_check_probe import judge_probe  # noqa: E402
from gpu_check_processes import CheckFailed  # noqa: E402

from ddpbench.analysis.peaks import device_peak, model_flops_utilisation  # noqa: E402
from ddpbench.config.errors import SpecError  # noqa: E402
from ddpbench.config.spec import RunSpec  # noqa: E402
from ddpbench.running import resolve as resolve_module  # noqa: E402
from ddpbench.running.command import child_environment  # noqa: E402
from ddpbench.running.diagnose import diagnose  # noqa: E402
from ddpbench.running.sweep import pg_timeout_s, run_timeout_s  # noqa: E402

GIB = 2**30


def needs():
    """ddpbench.host.gpu_needs, imported by each test that uses it: a test fails on its own without it."""
    from ddpbench.host import gpu_needs

    return gpu_needs


# --- the process-group timeout ----------------------------------------------------------------
def test_a_compiled_runs_process_group_timeout_leaves_room_for_ranks_compiling_apart():
    from ddpbench.config.spec import COMPILE_ALLOWANCE_S

    reference = {"gpt2": 0.05}  # the eager local run's step: 50 steps are 2.5 s, 60 s the floor
    eager = RunSpec(workload="gpt2", device="cpu", nproc=8)
    compiled = eager.replace(compile="default")
    assert pg_timeout_s(eager, reference, None) == 60.0
    assert pg_timeout_s(compiled, reference, None) == 60.0 + COMPILE_ALLOWANCE_S >= 600
    assert run_timeout_s(compiled, reference, None) - run_timeout_s(eager, reference, None) == COMPILE_ALLOWANCE_S
    # Before the local run gave a step time, the spec's own timeout, with the allowance too.
    assert pg_timeout_s(compiled, {}, None) == compiled.pg_timeout_s + COMPILE_ALLOWANCE_S
    assert pg_timeout_s(compiled, reference, 45.0) == 45.0  # --pg-timeout sets it outright


def test_a_compiled_run_outside_a_sweep_gets_the_sweeps_allowance_too():
    """`ddpbench run --compile` kept the 300 s process-group timeout where a sweep's compiled run gets
    600 s more; ab's and bisect's rounds are `ddpbench run`s and kept it too. Given outright, the
    timeout is what was given."""
    from ddpbench.commands.arguments import OneLineErrorParser, add_run_arguments, spec_from_args

    allowance = 600.0  # a sweep's compiled run's (config.spec.COMPILE_ALLOWANCE_S)
    parser = OneLineErrorParser(prog="ddpbench run")
    add_run_arguments(parser, script=True)

    def timeout(*given: str) -> float:
        return spec_from_args(parser.parse_args(["--workload", "mlp", "--device", "cpu", *given])).pg_timeout_s

    assert timeout() == 300.0 and timeout("--compile", "off") == 300.0
    assert timeout("--compile", "default") == 300.0 + allowance
    assert timeout("--compile", "compiled-autograd", "--nproc", "2") == 300.0 + allowance
    assert timeout("--compile", "default", "--pg-timeout", "300") == 300.0  # given outright


def test_a_hang_says_how_to_give_the_ranks_longer(tmp_path):
    nccl_run_evidence(tmp_path, code0=-6, code1=-15)
    status, error = diagnose(-6, False, None, str(tmp_path), nproc=2)
    assert status == "timeout" and error["message"].startswith("hang: rank 1 stuck in forward of step 7")
    assert "raise it with --pg-timeout SECONDS" in error["message"]


# --- the Flight Recorder's variables -----------------------------------------------------------
def test_the_flight_recorder_is_armed_under_the_names_of_old_and_new_torch(monkeypatch, tmp_path):
    for name in ("TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE", "TORCH_FR_DUMP_TEMP_FILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("TORCH_NCCL_DEBUG_INFO_TEMP_FILE", raising=False)
    spec = RunSpec(workload="mlp", device="cpu", nproc=2)
    env = child_environment(spec, str(tmp_path / "logs" / "run" / "heartbeats"))
    # torch 2.5-2.7 read only the TORCH_NCCL_* names: without them their buffer is 0 and dumps are empty.
    assert env["TORCH_NCCL_TRACE_BUFFER_SIZE"] == env["TORCH_FR_BUFFER_SIZE"] == "2000"
    assert env["TORCH_NCCL_DEBUG_INFO_TEMP_FILE"] == env["TORCH_FR_DUMP_TEMP_FILE"]
    assert env["TORCH_FR_DUMP_TEMP_FILE"].endswith("hang-dumps/nccl_trace_rank_")
    # A user's value under either name wins, under both.
    monkeypatch.setenv("TORCH_NCCL_TRACE_BUFFER_SIZE", "500")
    env = child_environment(spec, str(tmp_path / "beats"))
    assert env["TORCH_NCCL_TRACE_BUFFER_SIZE"] == env["TORCH_FR_BUFFER_SIZE"] == "500"


# --- the torch a strategy needs ----------------------------------------------------------------
def test_fsdp2_is_refused_where_torch_has_no_fully_shard_whatever_its_version_says(monkeypatch, capsys):
    """A pre-release labelled 2.6.0a0 may predate the public fully_shard: the check asks torch for the
    attribute itself, in the process that checks an fsdp2 run's model before anything is launched."""
    import torch
    from torch.distributed import fsdp

    from ddpbench.worker import shardable

    shardable.check_fully_shard()  # this torch has it
    assert shardable.main(["mlp", "tiny"]) == 0
    monkeypatch.setattr(torch, "__version__", "2.6.0a0+ecf3bae40a")  # a version a gate on 2.6 would pass
    monkeypatch.delattr(fsdp, "fully_shard")
    with pytest.raises(SpecError, match=r"fsdp2 needs torch.distributed.fsdp.fully_shard, which torch 2.6.0a0"):
        shardable.check_fully_shard()
    capsys.readouterr()
    # The launcher's side (resolve) reads exit code 2 and this one line as its refusal.
    assert shardable.main(["mlp", "tiny"]) == 2
    said = capsys.readouterr().out.strip()
    assert len(said.splitlines()) == 1 and "use a newer torch, or leave fsdp2 out (--strategy ddp)" in said


# --- torch.compile on a bare GPU node ---------------------------------------------------------------
def test_a_gpu_compile_without_a_c_compiler_or_python_headers_is_refused_in_one_line(monkeypatch, tmp_path):
    """Triton builds its launcher with a C compiler and Python.h: a bare node without them is told
    which packages to install before any rank starts, not shown Inductor's traceback from every rank."""
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    monkeypatch.delenv("CC", raising=False)
    monkeypatch.setattr(needs().shutil, "which", lambda name: None)
    with pytest.raises(SpecError) as refused:
        needs().check_gpu_compile_tools("default")
    said = str(refused.value)
    assert "\n" not in said and said.startswith("--compile default on a GPU needs a C compiler (gcc or clang")
    assert "install gcc (apt-get, Debian and Ubuntu) or gcc (dnf" in said and "or use --compile off" in said
    # A compiler but no headers (a venv on a system Python without its -dev package).
    monkeypatch.setattr(needs().shutil, "which", lambda name: f"/usr/bin/{name}")
    monkeypatch.setattr(needs(), "python_headers", lambda: str(tmp_path))
    with pytest.raises(SpecError) as refused:
        needs().check_gpu_compile_tools("compiled-autograd")
    said = str(refused.value)
    assert f"needs Python's headers (no Python.h in {tmp_path})" in said and "C compiler" not in said
    assert f"install python{version}-dev (apt-get" in said and f"python{version}-devel (dnf" in said
    (tmp_path / "Python.h").write_text("")
    needs().check_gpu_compile_tools("default")  # both there: nothing to say
    # CC names the compiler Triton uses; one that is not there counts as none.
    monkeypatch.setenv("CC", "/opt/missing/cc")
    monkeypatch.setattr(needs().shutil, "which", lambda name: None if name.startswith("/opt/missing") else name)
    with pytest.raises(SpecError, match="needs a C compiler"):
        needs().check_gpu_compile_tools("default")


def test_resolve_refuses_a_gpu_compile_on_a_node_without_the_tools(monkeypatch):
    monkeypatch.setattr(resolve_module, "visible_gpu_count", lambda: 1)
    monkeypatch.setattr(resolve_module, "gpu_build", lambda: {"version": "2.14.1", "cuda": "13.0", "nccl": True})
    monkeypatch.setattr(resolve_module, "check_gpu_build", lambda ranks: None)
    monkeypatch.setattr(needs(), "c_compiler", lambda: None)
    with pytest.raises(SpecError, match="--compile default on a GPU needs a C compiler"):
        resolve_module.resolve(RunSpec(workload="mlp", device="cuda", compile="default"))
    resolve_module.resolve(RunSpec(workload="mlp", device="cuda"))  # eager: nothing to build


# --- ROCm --------------------------------------------------------------------------------------
ROCM_BUILD = {"version": "2.6.0+rocm6.3", "cuda": None, "hip": "6.3.42131", "nccl": True}


def test_a_rocm_build_is_refused_in_one_line_before_a_gpu_run(monkeypatch):
    with pytest.raises(SpecError, match=r"ROCm build \(HIP 6.3.42131\): ddpbench supports NVIDIA GPUs only"):
        needs().check_not_rocm(ROCM_BUILD)
    needs().check_not_rocm({"version": "2.14.1+cu130", "cuda": "13.0", "hip": None, "nccl": True})
    monkeypatch.setattr(resolve_module, "gpu_build", lambda: ROCM_BUILD)
    monkeypatch.setattr(resolve_module, "visible_gpu_count", lambda: 8)
    with pytest.raises(SpecError, match="ROCm"):
        resolve_module.resolve(RunSpec(workload="mlp", device="cuda", nproc=2))


# --- nn.DataParallel's first GPU -----------------------------------------------------------------
def gpt2_dp(nproc: int, precision: str = "bf16", batch_size: int | None = None) -> RunSpec:
    return RunSpec(
        workload="gpt2",
        strategy="dp",
        device="cuda",
        nproc=nproc,
        size="full",
        precision=precision,
        batch_size=batch_size,
    )


def test_dp_estimates_gpt2s_gathered_logits_on_its_first_gpu_and_refuses_what_does_not_fit():
    eight = gpt2_dp(8)
    # 64 sequences x 1024 positions x 50257 logits: 6.6 GB in bf16; with log_softmax's saved float32
    # output and the two float32 gradients of the loss's backward, 46.1 GB.
    assert needs().dp_gathered_bytes(eight) == pytest.approx(64 * 1024 * 50257 * 14)
    assert needs().dp_gathered_bytes(eight) / 1e9 == pytest.approx(46.1, abs=0.1)
    needs().check_dp_memory(eight, 141 * GIB)  # an H200 holds it, within half its memory
    with pytest.raises(SpecError) as refused:
        needs().check_dp_memory(eight, 80 * GIB)  # an H100 80GB does not
    assert str(refused.value) == (
        "dp at world size 8 gathers gpt2's outputs for all 64 samples on its first GPU: about 46.1 GB (bf16 "
        "logits, and log_softmax's float32 output with two float32 gradients of the same size in the loss's "
        "backward), more than half of its 86 GB; give --batch-size 7 or less, or leave dp out (--strategies "
        "local,ddp)"
    )
    needs().check_dp_memory(gpt2_dp(8, batch_size=7), 80 * GIB)  # the advice fits
    with pytest.raises(SpecError, match="about 52.7 GB"):
        needs().check_dp_memory(gpt2_dp(8, precision="fp32"), 80 * GIB)


class LiveStorages:
    """Bytes of the tensor storages alive while it is entered, and their peak: every op's output
    storage is counted when it is made and uncounted when torch frees it (a finalizer on the storage
    itself, so views and tensors autograd saves keep it counted)."""

    def __init__(self):
        from torch.utils._python_dispatch import TorchDispatchMode

        outer = self

        class Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                import torch
                from torch.utils._pytree import tree_flatten

                out = func(*args, **(kwargs or {}))
                for tensor in tree_flatten(out)[0]:
                    if isinstance(tensor, torch.Tensor):
                        outer.add(tensor.untyped_storage())
                return out

        self.mode, self.live, self.now, self.peak = Mode(), {}, 0, 0

    def add(self, storage) -> None:
        import weakref

        key = storage.data_ptr()
        if key in self.live or not storage.nbytes():
            return
        self.live[key] = storage.nbytes()
        self.now += storage.nbytes()
        self.peak = max(self.peak, self.now)
        weakref.finalize(storage, self.free, key)

    def free(self, key) -> None:
        self.now -= self.live.pop(key, 0)


@pytest.mark.parametrize("precision", ["bf16", "fp32"])
def test_dps_estimate_per_logit_is_the_peak_of_the_workers_own_step_measured_on_cpu(precision):
    """The worker's training step with gpt2's loss on outputs as dp gathers them (one tensor of the
    whole batch's logits, made by the model's forward): the peak bytes alive per logit, measured on
    CPU from the tensors' own lifetimes, are what the estimate counts. The lifetimes are autograd's,
    the same on a GPU; only the caching allocator's rounding comes on top there."""
    import contextlib

    import torch

    from ddpbench.worker.training import Precision, train_step
    from workloads.gpt import next_token_loss

    dtype = {"bf16": torch.bfloat16, "fp32": torch.float32}[precision]
    batch, context, vocabulary = 2, 64, 50257
    logits = torch.randn(batch, context, vocabulary).to(dtype)
    targets = torch.randint(vocabulary, (batch, context))

    class GatheredOutputs(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.shift = torch.nn.Parameter(torch.zeros(1, dtype=dtype))

        def forward(self, inputs):
            return logits + self.shift  # a fresh output the size of the gathered logits, as dp's gather

    model = GatheredOutputs()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    plain = Precision(autocast=contextlib.nullcontext)
    train_step(model, optimizer, next_token_loss, plain, None, targets)  # the optimizer's first step
    live = LiveStorages()
    with live.mode:
        train_step(model, optimizer, next_token_loss, plain, None, targets)
    measured = live.peak / (batch * context * vocabulary)
    # not chance: bytes counted, not timed
    assert measured == pytest.approx(needs().dp_bytes_per_output(precision), abs=0.01), measured
    # Small outputs and other strategies are never estimated.
    assert needs().dp_gathered_bytes(RunSpec(workload="resnet50", strategy="dp", device="cuda", nproc=8)) is None
    assert needs().dp_gathered_bytes(RunSpec(workload="gpt2", device="cuda", nproc=8, size="full")) is None


def test_resolve_refuses_a_dp_run_its_first_gpu_cannot_hold(monkeypatch):
    monkeypatch.setattr(resolve_module, "visible_gpu_count", lambda: 8)
    monkeypatch.setattr(resolve_module, "gpu_build", lambda: {"version": "2.14.1", "cuda": "13.0", "nccl": True})
    monkeypatch.setattr(resolve_module, "check_gpu_build", lambda ranks: None)
    monkeypatch.setattr(resolve_module, "first_gpu_memory_bytes", lambda: 40 * GIB)
    with pytest.raises(SpecError, match="dp at world size 8 gathers gpt2's outputs"):
        resolve_module.resolve(gpt2_dp(8))


# --- the peak table and unknown GPUs -----------------------------------------------------------
@pytest.mark.parametrize(
    "name, label, bf16",
    [
        ("NVIDIA B200", "B200", 2250.0),
        ("NVIDIA GB200", "GB200", 2500.0),
        ("NVIDIA H800", "H800 SXM", 989.5),
        ("NVIDIA H800 PCIe", "H800 PCIe", 756.5),
        ("NVIDIA A800-SXM4-80GB", "A800", 312.0),
        ("NVIDIA H200", "H200 SXM", 989.5),
        ("NVIDIA H100 80GB HBM3", "H100 SXM", 989.5),
        ("NVIDIA B300 SXM6 AC", "B300", 2250.0),
        ("NVIDIA GB300", "GB300", 2500.0),
        ("NVIDIA L40", "L40", 181.05),
        ("NVIDIA L40S", "L40S", 362.05),
        ("NVIDIA A10", "A10", 125.0),
        ("NVIDIA A100-SXM4-80GB", "A100", 312.0),
    ],
)
def test_current_datacenter_gpus_have_their_datasheets_dense_peak(name, label, bf16):
    peak = device_peak(name)
    assert peak is not None and peak.label == label and peak.tflops["bf16"] == bf16 and peak.source


@pytest.mark.parametrize("name", ["NVIDIA H20", "AMD Instinct MI300X", "NVIDIA GeForce RTX 4090", "NVIDIA A10G"])
def test_an_unknown_gpu_gets_no_mfu_and_fails_the_matmul_check_instead_of_passing(name):
    assert device_peak(name) is None
    found = model_flops_utilisation(24.5e9, 4000.0, name, "bf16")
    assert found["mfu"] is None and found["basis"]["reason"].startswith("unknown GPU: ")
    probe = {"events_over_wall": 1.0, "min_step_with_sleep_s": 0.06, "bf16_matmul_tflops": 150.0}
    with pytest.raises(CheckFailed, match="unknown GPU .*no published peak"):
        judge_probe(probe, name, {})
    assert "of 989.5 peak" in judge_probe({**probe, "bf16_matmul_tflops": 700.0}, "NVIDIA H200", {})


def test_a_collective_timeout_with_no_rank_behind_says_how_to_raise_the_timeout(tmp_path):
    # Every rank compiling longer than the timeout: NCCL's watchdog ends them all, none is behind.
    (tmp_path / "output.log").write_text("")
    error_file = tmp_path / "ranks" / "x" / "attempt_0" / "0" / "error.json"
    error_file.parent.mkdir(parents=True)
    watchdog = (
        "DistBackendError: [Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1, "
        "OpType=ALLREDUCE) ran for 60000 milliseconds before timing out."
    )
    error_file.write_text(json.dumps({"message": {"message": watchdog, "extraInfo": {}}}))
    status, error = diagnose(1, False, None, str(tmp_path), nproc=1)
    assert status == "failed" and error["message"].startswith("rank 0 raised DistBackendError")
    assert "raise it with --pg-timeout SECONDS" in error["message"]
