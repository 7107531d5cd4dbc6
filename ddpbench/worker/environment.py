"""The software facts of a run that only torch can tell: versions, GPUs, NCCL."""

from __future__ import annotations

import torch
import torchvision


def torch_facts() -> dict:
    facts = {
        "torch": str(torch.__version__),  # TorchVersion is a str subclass the record encoder refuses
        "torchvision": str(torchvision.__version__),
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
        "nccl": None,
        "gpu_count": 0,
        "gpu_names": [],
    }
    if torch.cuda.is_available():
        facts["gpu_count"] = torch.cuda.device_count()
        facts["gpu_names"] = [torch.cuda.get_device_name(i) for i in range(facts["gpu_count"])]
        try:
            facts["nccl"] = ".".join(map(str, torch.cuda.nccl.version()))
        except (AttributeError, RuntimeError):
            pass
    return facts
