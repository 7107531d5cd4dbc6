"""Injecting the fault asked for with `--inject-fault` (parsed in `ddpbench.config.faults`)."""

from __future__ import annotations

import os
import signal
import time


def maybe_inject(fault: dict | None, rank: int, step: int) -> None:
    """Called at the start of every step; does nothing unless this is the fault's rank and step."""
    if fault is None or fault["rank"] != rank or fault["step"] != step:
        return
    kind = fault["kind"]
    if kind == "raise":
        raise RuntimeError(f"injected fault: rank {rank} raises at step {step}")
    if kind == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    if kind == "oom":
        import torch

        raise torch.OutOfMemoryError(f"injected fault: out of memory on rank {rank} at step {step}")
    if kind == "hang":
        while True:  # until the harness ends the run
            time.sleep(3600)
