"""Published peak FLOP/s of a few GPUs, and model FLOPs utilisation (MFU) from them. No torch.

MFU = model FLOPs per sample x samples per second per device / the device's peak FLOP/s for the
precision each op class computed in. The FLOPs per sample are counted by torch's FlopCounterMode
(forward + backward, 2 per multiply-add), so MFU counts only the model's own arithmetic, not
recomputation or communication.

An fp32 run does not compute in one precision: cuBLAS matrix products use TF32 only when asked
(`torch.backends.cuda.matmul.allow_tf32`, i.e. `float32_matmul_precision` "high" or "medium":
on CUDA both mean TF32, as torch's docs for set_float32_matmul_precision say),
while cuDNN convolutions use TF32 by default (`torch.backends.cudnn.allow_tf32`). So the peak is
the one of the mix: the time the device would need at peak is each class's FLOPs over its own
peak, summed; the effective peak is the FLOPs over that time.

Peaks are the dense tensor-core figures of NVIDIA's datasheets: the datasheets print bf16, fp16
and tf32 *with sparsity*, which is twice the dense rate, so those are halved here. fp32 is the
non-tensor-core rate. A device not in the table gets no MFU ("unknown GPU"), never a guess, and the
GPU check's matrix-product probe fails on it rather than pass unchecked.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

TERA = 1e12


@dataclass(frozen=True)
class DevicePeak:
    label: str
    name_pattern: str
    """Regular expression matched against torch.cuda.get_device_name()."""
    tflops: dict
    """precision (bf16, fp16, tf32, fp32) -> dense peak TFLOP/s."""
    source: str


H100_H200_SXM = {"bf16": 989.5, "fp16": 989.5, "tf32": 494.5, "fp32": 67.0}
NVL = {"bf16": 835.5, "fp16": 835.5, "tf32": 417.5, "fp32": 60.0}
H100_PCIE = {"bf16": 756.5, "fp16": 756.5, "tf32": 378.0, "fp32": 51.0}
A100 = {"bf16": 312.0, "fp16": 312.0, "tf32": 156.0, "fp32": 19.5}

# Most specific first: "H200 NVL" before "H200", "H100 PCIe" before "H100", "L40S" before "L40". A GPU's
# name is matched as a word (r"\bB300\b" is not "GB300", r"\bA10\b" is neither "A100" nor AWS's "A10G",
# whose figures differ).
# Not here, so "unknown GPU": H20 (NVIDIA publishes no datasheet for it on nvidia.com; the figures in
# circulation are second-hand) and AMD's Instinct GPUs (ddpbench refuses ROCm builds of torch).
PEAKS = (
    # Blackwell Ultra. NVIDIA gives these per rack (GB300 NVL72) and per 8-GPU board (HGX B300), with
    # sparsity; the per-GPU dense figures below are those divided by the GPU count and halved. Read from
    # the figures as reproduced at verda.com/blog/gb300-nvl72-architecture (per GPU, without sparsity:
    # GB300 FP16/BF16 2.5 PFLOPS, TF32 1.25 PFLOPS, FP32 0.080 PFLOPS) and glennklockwood.com/garden/
    # processors/B300 (HGX B300 per GPU, dense: BF16/FP16 2250, TF32 1125, FP32 75 TFLOPS), which agree
    # with the HGX B300 board's 36 PFLOPS FP16/BF16 and 18 PFLOPS TF32 with sparsity and 600 TFLOPS
    # FP32 for 8 GPUs (fibermall.com/blog/?p=17161). The same dense rates as B200 and GB200 for these
    # precisions: Blackwell Ultra adds FP4 throughput, not 16-bit.
    DevicePeak(
        "GB300",
        r"\bGB300\b",
        {"bf16": 2500.0, "fp16": 2500.0, "tf32": 1250.0, "fp32": 80.0},
        "NVIDIA GB300 NVL72 figures per GPU without sparsity, as reproduced at verda.com/blog/gb300-nvl72-"
        "architecture: FP16/BF16 2.5 PFLOPS, TF32 1.25 PFLOPS, FP32 0.080 PFLOPS",
    ),
    DevicePeak(
        "B300",
        r"\bB300\b",
        {"bf16": 2250.0, "fp16": 2250.0, "tf32": 1125.0, "fp32": 75.0},
        "NVIDIA HGX B300 figures per 8 GPUs, as reproduced at fibermall.com/blog/?p=17161: FP16/BF16 36 PFLOPS, "
        "TF32 18 PFLOPS with sparsity; FP32 600 TFLOPS",
    ),
    DevicePeak(
        "GB200",
        r"GB200",
        {"bf16": 2500.0, "fp16": 2500.0, "tf32": 1250.0, "fp32": 80.0},
        "NVIDIA GB200 NVL72 page (nvidia.com/en-us/data-center/gb200-nvl72), per 72 GPUs: FP16/BF16 360 PFLOPS, "
        "TF32 180 PFLOPS with sparsity; FP32 5,760 TFLOPS",
    ),
    DevicePeak(
        "B200",
        r"\bB200\b",
        {"bf16": 2250.0, "fp16": 2250.0, "tf32": 1125.0, "fp32": 75.0},
        "NVIDIA HGX B200 specifications (nvidia.com/en-us/data-center/hgx), per 8 GPUs: FP16/BF16 36 PFLOPS, "
        "TF32 18 PFLOPS with sparsity; FP32 600 TFLOPS",
    ),
    DevicePeak(
        "H200 NVL",
        r"H200 NVL",
        NVL,
        "NVIDIA H200 datasheet (nvidia.com/en-us/data-center/h200): BF16/FP16 1,671, TF32 835 TFLOPS "
        "with sparsity; FP32 60 TFLOPS",
    ),
    DevicePeak(
        "H200 SXM",
        r"H200",
        H100_H200_SXM,
        "NVIDIA H200 datasheet (nvidia.com/en-us/data-center/h200): BF16/FP16 1,979, TF32 989 TFLOPS "
        "with sparsity; FP32 67 TFLOPS",
    ),
    DevicePeak(
        "H100 NVL",
        r"H100 NVL",
        NVL,
        "NVIDIA H100 datasheet (nvidia.com/en-us/data-center/h100): BF16/FP16 1,671, TF32 835 TFLOPS "
        "with sparsity; FP32 60 TFLOPS",
    ),
    DevicePeak(
        "H100 PCIe",
        r"H100 PCIe",
        H100_PCIE,
        "NVIDIA H100 datasheet (nvidia.com/en-us/data-center/h100): BF16/FP16 1,513, TF32 756 TFLOPS "
        "with sparsity; FP32 51 TFLOPS",
    ),
    # The H800 and A800 are the H100 and A100 with a slower NVLink for export; their datasheets give
    # the same compute.
    DevicePeak(
        "H800 PCIe",
        r"H800 PCIe",
        H100_PCIE,
        "NVIDIA H800 PCIe datasheet (NVIDIA China data-center site): BF16/FP16 1,513, TF32 756 TFLOPS "
        "with sparsity; FP32 51 TFLOPS",
    ),
    DevicePeak(
        "H800 SXM",
        r"H800",
        H100_H200_SXM,
        "NVIDIA H800 SXM5 datasheet (NVIDIA China data-center site): BF16/FP16 1,979, TF32 989 TFLOPS "
        "with sparsity; FP32 67 TFLOPS",
    ),
    DevicePeak(
        "H100 SXM",
        r"H100",
        H100_H200_SXM,
        "NVIDIA H100 datasheet (nvidia.com/en-us/data-center/h100): BF16/FP16 1,979, TF32 989 TFLOPS "
        "with sparsity; FP32 67 TFLOPS",
    ),
    DevicePeak(
        "A100",
        r"A100",
        A100,
        "NVIDIA A100 datasheet (nvidia.com/en-us/data-center/a100): BF16/FP16 312, TF32 156 TFLOPS "
        "dense; FP32 19.5 TFLOPS",
    ),
    DevicePeak(
        "A800",
        r"A800",
        A100,
        "NVIDIA A800 datasheet (NVIDIA China data-center site): BF16/FP16 312, TF32 156 TFLOPS dense; FP32 19.5 TFLOPS",
    ),
    # The A10 datasheet (nvidia.com/content/dam/en-zz/Solutions/Data-Center/a10/pdf/a10-datasheet.pdf)
    # prints dense | sparse: BF16 and FP16 Tensor Core 125 | 250, TF32 62.5 | 125, FP32 31.2 TFLOPS (as
    # listed from it at github.com/winston-zhang-orz/gpu-specs and github.com/astroC86/gpu-datasheet).
    DevicePeak(
        "A10",
        r"\bA10\b",
        {"bf16": 125.0, "fp16": 125.0, "tf32": 62.5, "fp32": 31.2},
        "NVIDIA A10 datasheet (nvidia.com/en-us/data-center/products/a10-gpu): BF16/FP16 125, TF32 62.5 TFLOPS "
        "dense; FP32 31.2 TFLOPS",
    ),
    DevicePeak(
        "L40S",
        r"L40S",
        {"bf16": 362.05, "fp16": 362.05, "tf32": 183.0, "fp32": 91.6},
        "NVIDIA L40S datasheet (nvidia.com/en-us/data-center/l40s): BF16/FP16 362.05, TF32 183 TFLOPS "
        "dense; FP32 91.6 TFLOPS",
    ),
    # The L40 datasheet (nvidia.com/en-us/data-center/l40) prints dense | sparse: BF16 and FP16 Tensor Core
    # 181.05 | 362.1, TF32 90.5 | 181, FP32 90.5 TFLOPS (the table as reproduced at
    # mullet.se/product.html?product_id=355414, L40 and L40S side by side).
    DevicePeak(
        "L40",
        r"\bL40\b",
        {"bf16": 181.05, "fp16": 181.05, "tf32": 90.5, "fp32": 90.5},
        "NVIDIA L40 datasheet (nvidia.com/en-us/data-center/l40): BF16/FP16 181.05, TF32 90.5 TFLOPS dense; "
        "FP32 90.5 TFLOPS",
    ),
    DevicePeak(
        "L4",
        r"\bL4\b",
        {"bf16": 121.0, "fp16": 121.0, "tf32": 60.0, "fp32": 30.3},
        "NVIDIA L4 datasheet (nvidia.com/en-us/data-center/l4): BF16/FP16 242, TF32 120 TFLOPS "
        "with sparsity; FP32 30.3 TFLOPS",
    ),
)


def device_peak(device_name: str | None) -> DevicePeak | None:
    if not device_name:
        return None
    return next((peak for peak in PEAKS if re.search(peak.name_pattern, device_name)), None)


def fp32_class_precisions(matmul_tf32: bool, conv_tf32: bool) -> dict:
    """What an fp32 run's matrix products and convolutions computed in."""
    return {"matmul": "tf32" if matmul_tf32 else "fp32", "conv": "tf32" if conv_tf32 else "fp32"}


def model_flops_utilisation(
    flops_per_sample: float | None,
    samples_per_s_per_device: float,
    device_name: str | None,
    precision: str,
    matmul_tf32: bool = False,
    conv_tf32: bool = False,
    conv_flops_share: float | None = None,
) -> dict:
    """{"mfu": fraction or None, "basis": how it was computed, or why it is unknown}.

    `conv_flops_share` is the fraction of the FLOPs in convolutions; the rest counts as matrix
    products (linear layers, attention). It matters only for fp32, where the two classes may run
    in different precisions; None (unknown) is taken as no convolutions."""
    conv_share = conv_flops_share or 0.0
    if precision == "fp32":
        by_class = fp32_class_precisions(matmul_tf32, conv_tf32)
    else:  # autocast: both classes run in the half precision
        by_class = {"matmul": precision, "conv": precision}
    used = {kind for kind, share in (("matmul", 1 - conv_share), ("conv", conv_share)) if share > 0}
    kinds = sorted({by_class[kind] for kind in used}) or [by_class["matmul"]]
    computed_in = kinds[0] if len(kinds) == 1 else "+".join(kinds)
    basis = {
        "device": device_name,
        "precision": computed_in,
        "matmul_precision": by_class["matmul"],
        "conv_precision": by_class["conv"],
        "conv_flops_share": conv_flops_share,
    }
    peak = device_peak(device_name)
    if peak is None:
        basis["reason"] = (
            f"unknown GPU: no published peak for {device_name!r} in ddpbench's table"
            if device_name
            else "no GPU (CPU run): no published peak"
        )
        return {"mfu": None, "basis": basis}
    # Seconds per FLOP at peak, weighted by each class's share: a harmonic mean of the two peaks.
    seconds_per_flop = (
        (1 - conv_share) / peak.tflops[by_class["matmul"]] + conv_share / peak.tflops[by_class["conv"]]
    ) / TERA
    basis.update(matched=peak.label, peak_flops_per_s=1 / seconds_per_flop, source=peak.source)
    if not flops_per_sample:
        basis["reason"] = "FLOPs per sample unknown (the FLOP counter could not trace the model)"
        return {"mfu": None, "basis": basis}
    return {"mfu": flops_per_sample * samples_per_s_per_device / basis["peak_flops_per_s"], "basis": basis}
