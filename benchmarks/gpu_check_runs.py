"""The runs `make gpu-check` makes that tests/test_cuda.py needs too, named once for both, so that under
gpu-check the CUDA tests read those runs' records instead of launching the same gpt2 runs again.

gpu-check writes each run's options beside its record (`runs/<check>/command.json`) and starts the
CUDA tests with MADE_RUNS_ENV naming its runs folder; test_cuda's `gpu_run` takes a record from there
when one was made with the same options, and launches its own otherwise (pytest alone, or a gpu-check
check that did not get to run). No torch here.
"""

from __future__ import annotations

import glob
import json
import os

MADE_RUNS_ENV = "DDPBENCH_GPU_CHECK_RUNS"
"""The folder of runs gpu-check made (its `runs/`), for the CUDA tests it starts."""
COMMAND_FILE = "command.json"

GPT2 = ["--workload", "gpt2", "--size", "full", "--steps", "25", "--batch-size", "8"]
GPT2_FP16 = [*GPT2, "--precision", "fp16", "--strategy", "ddp", "--comm-hook", "fp16_compress", "--num-workers", "2"]
"""gpt2 in fp16 with fp16 gradient compression and 2 loader workers, on one GPU."""
GPT2_DDP_TWO_GPUS = [*GPT2, "--precision", "bf16", "--strategy", "ddp", "--nproc", "2"]
"""gpt2 in bf16 under DDP over NCCL at world size 2: averaging, replicas, and a trace from 2 ranks."""

ONE_GPU_SKIP = "not applicable on one GPU: "
"""How a CUDA test that needs a second GPU starts its skip reason; the CUDA-test check accepts such a
skip on a one-GPU node, and no other."""


def options(args: list[str]) -> frozenset:
    """A run's options as a set of (flag, value) pairs, whatever their order."""
    pairs, index = set(), 0
    while index < len(args):
        flag = args[index]
        if index + 1 < len(args) and not args[index + 1].startswith("--"):
            pairs.add((flag, args[index + 1]))
            index += 2
        else:
            pairs.add((flag, None))
            index += 1
    return frozenset(pairs)


def write_command(run_folder: str, args: list[str]) -> None:
    os.makedirs(run_folder, exist_ok=True)
    with open(os.path.join(run_folder, COMMAND_FILE), "w", encoding="utf-8") as handle:
        json.dump({"args": args}, handle)


def made_run(args: list[str], runs_folder: str | None = None) -> str | None:
    """The record of a run gpu-check made with these options (MADE_RUNS_ENV's folder unless given), or
    None: no such folder, no such run, or its run left no record."""
    runs_folder = runs_folder or os.environ.get(MADE_RUNS_ENV)
    if not runs_folder:
        return None
    wanted = options(args)
    for command in sorted(glob.glob(os.path.join(runs_folder, "*", COMMAND_FILE))):
        with open(command, encoding="utf-8") as handle:
            if options(json.load(handle)["args"]) != wanted:
                continue
        records = glob.glob(os.path.join(os.path.dirname(command), "runs", "*.json"))
        return records[0] if len(records) == 1 else None
    return None
