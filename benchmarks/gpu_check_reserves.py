"""The plan of benchmarks/gpu_check.py: its checks in order, each with its reserve (the seconds its real
work takes on one GPU and on 2 or more) and where that figure comes from. The budget adds them up
(gpu_check_plan.py); `--dry-run` prints them; docs/gpu-check.md lists them, and a test holds the two
together.
"""

from __future__ import annotations

from gpu_check_plan import PlannedCheck, guess

# The reserves: what each check's own work takes, on one GPU and on 2 or more, and where the figure
# comes from. No GPU run has timed these checks yet: every figure is a guess, built from what the
# check starts (each `ddpbench run` pays torch's import, CUDA's start and, under torchrun, NCCL's, about
# 15-30 s, before its steps and phases), until a GPU run measures it.
CUDA_TESTS = guess(
    540,
    600,
    "pytest's start and the in-process tests (about 30 s); three gpt2 bf16 runs on one GPU (local, ddp "
    "and dp, about 45 s each), and four more rounds of local and dp, each process one sample of its "
    "strategy's step (about 45 s each); the fp16 run and the 2-GPU DDP run are gpu-check's own records, "
    "read again, not run again; with 2 GPUs, dp on 2 GPUs (about 60 s)",
)


def build_plan(checker) -> list[PlannedCheck]:
    """The checks in order, each with its reserve (the budget adds them up)."""
    return [
        PlannedCheck(
            "preflight",
            guess(30, 30, "torch's import and CUDA's start in a fresh process, two ddpbench refusals that count GPUs"),
            checker.preflight,
        ),
        PlannedCheck(
            "event clock and matmul probe",
            guess(25, 25, "a fresh process: torch's import and CUDA's start, then about 5 s of products"),
            checker.probe,
        ),
        PlannedCheck(
            "resnet50 bf16 local",
            guess(60, 60, "one process: its start, cuDNN's first convolutions, the FLOP count, 30 steps"),
            checker.resnet("local"),
        ),
        PlannedCheck(
            "resnet50 bf16 ddp (nccl)",
            guess(
                90,
                90,
                "torchrun and one rank over NCCL: its start, 30 steps, the profiled phase, the in-process "
                "ablation's rounds, the no_sync replay",
            ),
            checker.resnet("ddp"),
        ),
        PlannedCheck(
            "resnet50 bf16 dp",
            guess(60, 60, "one process: its start and 30 steps, no profiled phase"),
            checker.resnet("dp"),
        ),
        PlannedCheck(
            "gpt2 fp16 + fp16 compression",
            guess(
                90,
                90,
                "one rank with 2 loader workers: its start, 25 steps, the profiled phase and ablation rounds",
            ),
            checker.gpt2_fp16,
        ),
        # One GPU cannot check that DDP averages gradients or keeps replicas in sync: no second rank.
        # Its traces and timeline are the ones the two checks after it read on such a node.
        PlannedCheck(
            "ddp averaging on 2 gpus (nccl)",
            guess(
                None,
                120,
                "two ranks over NCCL: their start, 25 steps, the profiled phase, ablation rounds with each rank "
                "alone in turn, the contention probe, the gradient check across ranks",
            ),
            checker.ddp_two_gpus,
            min_gpus=2,
        ),
        PlannedCheck(
            "trace analyze (nccl traces)",
            guess(20, 25, "`trace analyze` of one or two ranks' traces in both modes, without torch"),
            checker.trace_analyze,
        ),
        PlannedCheck(
            "gradient timeline and project (nccl)",
            guess(15, 15, "`ddpbench project` in a fresh process, without torch"),
            checker.contention_projection,
        ),
        PlannedCheck(
            "gpt2 fsdp2 + compile (nccl)",
            guess(
                240,
                270,
                "Inductor's and Triton's caches start cold: compiling gpt2's 12 FSDP2 units for the warm-up "
                "(90-120 s), compiling again for the gradient check against a plain copy (eval mode, fp32, "
                "outside autocast: 60-90 s), and the run; with 2 ranks both compile at once on the node's CPUs",
            ),
            checker.compiled_and_sharded("fsdp2", "default"),
        ),
        PlannedCheck(
            "gpt2 ddp + compiled autograd (nccl)",
            guess(
                180,
                270,
                "compiling gpt2's forward and, with compiled autograd, its backward from cold caches (90-150 s); "
                "with 2 ranks the gradient check across ranks compiles again (eval mode, fp32, outside autocast), "
                "which one GPU cannot make",
            ),
            checker.compiled_and_sharded("ddp", "compiled-autograd"),
        ),
        PlannedCheck(
            "vit_b_16 bf16 + loader workers",
            guess(75, 75, "one rank with 4 loader worker processes: their start and 25 steps, the profiled phase"),
            checker.vit_workers,
        ),
        PlannedCheck(
            "sweep --gpus 1, table, report",
            guess(
                180,
                180,
                "three runs of mlp (local, ddp, dp), each with its own start, then `table`, the HTML report and "
                "`explain` in fresh processes",
            ),
            checker.sweep,
        ),
        PlannedCheck("tests/test_cuda.py", CUDA_TESTS, checker.cuda_tests),
    ]
