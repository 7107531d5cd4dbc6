"""What a GPU run needs that can be said before any process starts, in one line each: a GPU ddpbench
can drive (NVIDIA's: ROCm is refused), for `--compile` the C compiler and Python headers Triton builds
with, and for `nn.DataParallel` room on its first GPU for the whole batch's outputs. (Whether this
torch has FSDP2's `fully_shard` is asked of torch itself, in the process that checks an fsdp2 run's
model: `ddpbench.worker.shardable`.)

No torch imported: the GPU's memory comes from nvidia-smi, the ROCm build from the facts
`torch_env.gpu_build` already asked of torch.
"""

from __future__ import annotations

import functools
import os
import shutil
import sys
import sysconfig

from ddpbench.config.errors import SpecError
from ddpbench.config.spec import RunSpec
from ddpbench.host import facts


def check_not_rocm(build: dict) -> None:
    """SpecError for a ROCm build of torch (`build` as torch_env.gpu_build returns it): AMD GPUs go through
    torch.cuda, but ddpbench counts GPUs, reads the driver and topology, and names communication kernels
    the NVIDIA way, so a run there would measure wrongly or not at all."""
    if build.get("hip"):
        raise SpecError(
            f"torch {build.get('version')} is a ROCm build (HIP {build['hip']}): ddpbench supports NVIDIA GPUs "
            "only (it counts GPUs, reads the driver, topology and NCCL kernels the NVIDIA way); run on CPU "
            "(--device cpu) or on an NVIDIA node"
        )


# --- torch.compile on a GPU ------------------------------------------------------------------------
def c_compiler() -> str | None:
    """The C compiler Triton builds its kernel launcher with, found as Triton finds it: $CC, else gcc,
    else clang on PATH."""
    if os.environ.get("CC"):
        return shutil.which(os.environ["CC"])
    return shutil.which("gcc") or shutil.which("clang")


def python_headers() -> str:
    """The folder Triton passes to the compiler for Python.h: this interpreter's include path (Debian's
    posix_local scheme read as posix_prefix, as Triton reads it)."""
    scheme = sysconfig.get_default_scheme()
    return sysconfig.get_paths(scheme="posix_prefix" if scheme == "posix_local" else scheme)["include"]


def check_gpu_compile_tools(compile_mode: str) -> None:
    """SpecError where `--compile` on a GPU would fail in Triton's first kernel launch: Inductor's GPU
    kernels are Triton kernels, and Triton compiles a small C launcher for them with a C compiler and
    this Python's headers. Without them every rank ends in an Inductor traceback after starting."""
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    missing, debian, redhat = [], [], []
    if c_compiler() is None:
        missing.append("a C compiler (gcc or clang on PATH, or CC)")
        debian.append("gcc")
        redhat.append("gcc")
    headers = python_headers()
    if not os.path.exists(os.path.join(headers, "Python.h")):
        missing.append(f"Python's headers (no Python.h in {headers})")
        debian.append(f"python{version}-dev")
        redhat.append(f"python{version}-devel")
    if missing:
        raise SpecError(
            f"--compile {compile_mode} on a GPU needs {' and '.join(missing)}: Triton builds its kernel launcher "
            f"with them; install {' '.join(debian)} (apt-get, Debian and Ubuntu) or {' '.join(redhat)} (dnf, RHEL "
            "and Fedora), or use --compile off"
        )


# --- nn.DataParallel's first GPU ---------------------------------------------------------------
OUTPUT_ELEMENTS_PER_SAMPLE = {("gpt2", "full"): 1024 * 50257}
"""Built-in workloads whose outputs are large enough to matter: gpt2's logits, context x vocabulary.
The vision models' 1000 logits and the MLP's outputs are a few kB a sample."""
PRECISION_BYTES = {"bf16": 2, "fp16": 2, "fp32": 4}
FLOAT32_BYTES = 4
LOSS_FLOAT32_COPIES_AT_PEAK = 3
"""Float32 tensors the size of the logits that gpt2's loss holds at once at its peak, in backward:
log_softmax's output (cross_entropy saves it for backward), nll_loss's gradient of it, and
log_softmax's gradient of its input. The loss's float32 copy of the logits is freed in the forward,
once log_softmax has its output, and the gradient of the gathered logits comes after the saved output
is gone: neither adds to the peak. Counted from the tensors' lifetimes in the worker's own step on CPU
(tests/test_gpu_needs.py measures them: 14 bytes per logit in bf16, 16 in fp32)."""
DP_FIRST_GPU_SHARE = 0.5
"""The share of the first GPU the gathered outputs may take: it also holds its own replica, its
activations, the optimizer state and the scatter of the inputs."""


def dp_bytes_per_output(precision: str) -> int:
    """Bytes on dp's first GPU per element of the gathered outputs at the loss's peak: the gathered
    logits in the run's precision (the training step holds them until its backward ends) and the loss's
    float32 tensors alive at once (LOSS_FLOAT32_COPIES_AT_PEAK)."""
    return PRECISION_BYTES[precision] + LOSS_FLOAT32_COPIES_AT_PEAK * FLOAT32_BYTES


def dp_gathered_bytes(spec: RunSpec) -> float | None:
    """Bytes nn.DataParallel needs on its first GPU for the whole batch's outputs at the loss's peak
    (dp_bytes_per_output). None for a workload whose outputs are small or unknown."""
    per_sample = OUTPUT_ELEMENTS_PER_SAMPLE.get((spec.workload, spec.size or "full"))
    if spec.strategy != "dp" or per_sample is None:
        return None
    batch = (spec.batch_size or 8) * spec.world_size  # gpt2's own batch is 8 a device
    return batch * per_sample * dp_bytes_per_output(spec.precision)


@functools.cache
def first_gpu_memory_bytes() -> int | None:
    """Total memory of GPU 0 from nvidia-smi (MiB), without starting CUDA in this process."""
    found = facts._nvidia_smi("--query-gpu=memory.total", "--format=csv,noheader,nounits", "--id=0")
    try:
        return int(float(found.strip().splitlines()[0])) * 2**20 if found else None
    except (ValueError, IndexError):
        return None


def check_dp_memory(spec: RunSpec, memory_bytes: int | None) -> None:
    """SpecError where dp's gathered outputs would take more than half of the first GPU."""
    needed = dp_gathered_bytes(spec)
    if needed is None or memory_bytes is None or needed <= DP_FIRST_GPU_SHARE * memory_bytes:
        return
    batch = (spec.batch_size or 8) * spec.world_size
    fits = int(DP_FIRST_GPU_SHARE * memory_bytes / (needed / batch)) // spec.world_size
    advice = f"give --batch-size {fits} or less, " if fits >= 1 else ""
    raise SpecError(
        f"dp at world size {spec.world_size} gathers {spec.workload}'s outputs for all {batch} samples on its first "
        f"GPU: about {needed / 1e9:.1f} GB ({spec.precision} logits, and log_softmax's float32 output with two float32 "
        "gradients of the same size in the loss's backward), "
        f"more than half of its {memory_bytes / 1e9:.0f} GB; {advice}or leave dp out (--strategies local,ddp)"
    )
