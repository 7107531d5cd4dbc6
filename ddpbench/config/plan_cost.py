"""How long a planned sweep will take and how much disk its traces will use, from the plan alone
(`ddpbench sweep --dry-run` prints it). No torch, nothing measured here.

These are estimates with stated assumptions, not measurements: no GPU run has been timed by
ddpbench. A run costs its start (interpreter, torch, CUDA and the process group, the model: an
assumed START_S) plus the steps it executes (the timed steps, the profiled phase, the no_sync replay
and the in-process ablation's rounds: about STEPS_EXECUTED times `--steps`), each at the time the
workload's FLOPs take on an H100/H200-class GPU at an assumed MFU, never under a floor for a tiny
model's launch-bound step. Traces: every rank of a profiled run writes its profiled steps, at the
size per step of a real 2-GPU NCCL DDP trace (tests/fixtures/traces/nccl-ddp-2gpu-rank0.json.gz:
750 kB for 3 steps). Once a sweep runs, its progress line's ETA, from the runs so far, replaces this.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ddpbench.config.spec import RunSpec, strategy_name

START_S = {"cuda": 30.0, "cpu": 10.0}
"""Seconds a run spends before its first step. cpu: `import torch, torchvision` alone is about 7 s on
the 2-core machine ddpbench is developed on; cuda adds CUDA's and NCCL's start (assumed)."""
STEPS_EXECUTED = 3.0
"""Steps a run executes per step of `--steps`: the timed window, then the profiled phase, the no_sync
replay and the ablation's rounds, which replay steps of the same batches."""
GPU_PEAK_FLOPS = 989.5e12
"""H100/H200 SXM dense bf16 (ddpbench.analysis.peaks): the GPU the estimate assumes."""
ASSUMED_MFU = 0.35
STEP_FLOOR_S = {"cuda": 0.005, "cpu": 0.02}
"""A step never takes less: kernel launches and Python for a tiny model (cuda, assumed); on CPU a tiny
workload's step at one thread here."""
FLOPS_PER_SAMPLE = {
    "resnet50": 24.5e9,  # 4.1 GMAC forward a 224x224 image, x2 FLOPs, x3 with backward
    "vit_b_16": 105.6e9,  # 17.6 GMAC forward
    "gpt2": 8.8e11,  # 6 x 124M parameters x 1024 tokens, plus attention over 1024 positions
    "mlp": 0.8e9,  # 6 x 134M parameters
}
"""Forward + backward FLOPs of one sample of each built-in workload at its full size; tiny sizes
and a user's workloads are estimated at the step floor."""
TRACE_BYTES_PER_STEP = 250e3
"""One profiled step of one rank, gzip'd: the reference NCCL DDP trace's 750 kB over its 3 steps."""


@dataclass(frozen=True)
class PlanCost:
    runs: int
    seconds: float
    trace_bytes: float
    ranks_traced: int
    device: str

    @property
    def minutes(self) -> int:
        return max(1, round(self.seconds / 60))

    def lines(self) -> list[str]:
        start_s = START_S[self.device]
        return [
            f"estimated time: about {self.minutes} minutes for {self.runs} runs (each about {start_s:.0f} s to start,"
            f" then {STEPS_EXECUTED:g} x its steps{STEP_BASIS[self.device]}: an estimate; the sweep's "
            "progress line gives the real ETA after its first runs)",
            f"estimated trace disk: about {megabytes(self.trace_bytes)} ({self.ranks_traced} rank traces of "
            f"{TRACE_BYTES_PER_STEP / 1e3:.0f} kB per profiled step; --no-profile writes none)",
        ]


STEP_BASIS = {"cuda": f" at {ASSUMED_MFU:.0%} of an H100/H200's bf16 peak", "cpu": " of a tiny workload"}


def megabytes(count: float) -> str:
    return f"{count / 1e9:.1f} GB" if count >= 1e9 else f"{max(1, round(count / 1e6))} MB"


def step_seconds(spec: RunSpec) -> float:
    floor = STEP_FLOOR_S[spec.device]
    flops = FLOPS_PER_SAMPLE.get(spec.workload) if (spec.size or "full") == "full" else None
    if flops is None or spec.device != "cuda":
        return floor
    per_device_batch = spec.batch_size or 1
    return max(floor, flops * per_device_batch / (GPU_PEAK_FLOPS * ASSUMED_MFU))


def processes_traced(spec: RunSpec) -> int:
    return spec.world_size if spec.launched_by_torchrun else 1


def plan_cost(plan: Sequence[RunSpec]) -> PlanCost:
    seconds = sum(START_S[s.device] + STEPS_EXECUTED * s.steps * step_seconds(s) for s in plan)
    profiled = [s for s in plan if s.profile]
    trace_bytes = sum(processes_traced(s) * s.profile_active * TRACE_BYTES_PER_STEP for s in profiled)
    ranks = sum(processes_traced(s) for s in profiled)
    device = plan[0].device if plan else "cpu"
    return PlanCost(runs=len(plan), seconds=seconds, trace_bytes=trace_bytes, ranks_traced=ranks, device=device)


def plan_lines(plan: Sequence[RunSpec]) -> list[str]:
    """The plan in a few lines: per workload its settings and rounds, each strategy's world sizes and
    what carries its communication."""
    lines = []
    for workload in dict.fromkeys(s.workload for s in plan):
        runs = [s for s in plan if s.workload == workload]
        first = runs[0]
        rounds = max(s.repeat for s in runs)
        by_strategy: dict[str, list[int]] = {}
        for s in runs:
            sizes = by_strategy.setdefault(strategy_name(s.strategy, s.compile), [])
            if s.world_size not in sizes:
                sizes.append(s.world_size)
        series = "; ".join(
            f"{name} {', '.join(f'x{n}' for n in sizes)}{CARRIER[first.device].get(name.split('+')[0], '')}"
            for name, sizes in by_strategy.items()
        )
        lines.append(
            f"  {workload} {first.size} {first.precision}, {first.steps} steps ({first.warmup} warm-up), "
            f"{rounds} round(s), {len(runs)} runs: {series}"
        )
    return lines


# dp has no process group, but on GPUs nn.DataParallel copies the module to its GPUs and sums their
# gradients through torch.cuda.comm (broadcast_coalesced, reduce_add_coalesced), which call NCCL's
# broadcast and reduce where torch is built with NCCL.
CARRIER = {
    "cuda": {
        "ddp": " (NCCL)",
        "fsdp2": " (NCCL)",
        "replicate": " (NCCL)",
        "dp": " (one process; NCCL through torch.cuda.comm)",
    },
    "cpu": {"ddp": " (gloo)", "fsdp2": " (gloo)", "replicate": " (gloo)", "dp": " (one process)"},
}
