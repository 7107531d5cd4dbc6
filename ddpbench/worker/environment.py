"""The software facts of a run that only torch can tell: versions, GPUs, NCCL, the math settings
that change GPU speed (TF32, cuDNN autotuning), and which GPU a rank drove."""

from __future__ import annotations

import importlib.util
import os
import re
import sys

import torch

from ddpbench.host.placement import rank_placement


def tf32_allowed() -> dict:
    """Whether fp32 matrix products (cuBLAS; set by `float32_matmul_precision` too) and
    convolutions (cuDNN) may run on TF32 tensor cores: two settings with different defaults.
    NVIDIA_TF32_OVERRIDE=0 turns TF32 off inside cuBLAS and cuDNN themselves, below torch, whatever
    torch allows: fp32 MFU is then counted against the fp32 peak."""
    if os.environ.get("NVIDIA_TF32_OVERRIDE", "").strip() == "0":
        return {"matmul": False, "conv": False}
    return {"matmul": bool(torch.backends.cuda.matmul.allow_tf32), "conv": bool(torch.backends.cudnn.allow_tf32)}


def math_settings() -> dict:
    """Settings that change what the GPU computes and how fast. cuDNN allows TF32 convolutions
    by default, cuBLAS does not for matrix products; `benchmark` autotunes convolutions."""
    return {
        "matmul_allow_tf32": bool(torch.backends.cuda.matmul.allow_tf32),
        "cudnn_allow_tf32": bool(torch.backends.cudnn.allow_tf32),
        "float32_matmul_precision": torch.get_float32_matmul_precision(),
        "cudnn_benchmark": bool(torch.backends.cudnn.benchmark),
        "cudnn_deterministic": bool(torch.backends.cudnn.deterministic),
    }


def torchvision_version() -> str | None:
    """torchvision's own version string (with its build tag, e.g. "0.29.1+cu130"), without
    importing it, which a workload that never uses torchvision should not pay (0.14-0.2 s a rank
    here once torch._dynamo is loaded, as the optimizer's first zero_grad loads it anyway). Read
    from the installed package's version.py; imported only where that file cannot be read."""
    if "torchvision" in sys.modules:
        return str(sys.modules["torchvision"].__version__)
    spec = importlib.util.find_spec("torchvision")
    if spec is None:
        return None
    for folder in spec.submodule_search_locations or []:
        try:
            with open(os.path.join(folder, "version.py"), encoding="utf-8") as handle:
                found = re.search(r"^__version__\s*=\s*['\"]([^'\"]+)['\"]", handle.read(), re.MULTILINE)
        except OSError:
            continue
        if found:
            return found.group(1)
    import torchvision

    return str(torchvision.__version__)


def torch_facts() -> dict:
    facts = {
        "torch": str(torch.__version__),  # a TorchVersion, which the record encoder refuses
        "torchvision": torchvision_version(),
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
        "nccl": None,
        "gpu_count": 0,
        "gpu_names": [],
        "gpu_capabilities": [],
        "gpu_memory_bytes": [],
        "bf16_supported": None,
        **math_settings(),
    }
    if torch.cuda.is_available():
        facts["gpu_count"] = torch.cuda.device_count()
        properties = [torch.cuda.get_device_properties(i) for i in range(facts["gpu_count"])]
        facts["gpu_names"] = [p.name for p in properties]
        facts["gpu_capabilities"] = [f"{p.major}.{p.minor}" for p in properties]
        facts["gpu_memory_bytes"] = [p.total_memory for p in properties]
        facts["bf16_supported"] = torch.cuda.is_bf16_supported(including_emulation=False)
        try:
            facts["nccl"] = ".".join(map(str, torch.cuda.nccl.version()))
        except (AttributeError, RuntimeError):
            pass
    return facts


def where_this_rank_ran(device: torch.device) -> dict:
    """The rank's placement fields (`ddpbench.host.placement`): its scheduler node, node rank, CPU
    set and, on a GPU, the device's UUID (torch's) with its serial and PCI bus id (NVML's)."""
    uuid = str(torch.cuda.get_device_properties(device).uuid) if device.type == "cuda" else None
    return rank_placement(uuid)
