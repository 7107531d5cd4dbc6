"""Injecting the fault asked for with `--inject-fault` (parsed in `ddpbench.config.faults`).

Faults before a step are checked at the start of every step (`maybe_inject`). Faults inside a
step are hooks (`install_in_step_fault`), registered only on the fault's rank and only when one
is asked for, so an ordinary run's step is untouched; they read the step from the heartbeat.
"""

from __future__ import annotations

import os
import signal
import time


def maybe_inject(fault: dict | None, rank: int, step: int) -> None:
    """Called at the start of every step; does nothing unless this is the fault's rank and step."""
    if fault is None or fault["rank"] != rank or fault["step"] != step or fault.get("where"):
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
        hang_forever()


def hang_forever() -> None:
    while True:  # until the harness ends the run
        time.sleep(3600)


class InStepFault:
    """Fires once, in the fault's step, from whichever hook its `where` names."""

    def __init__(self, fault: dict, beat):
        self.step, self.beat, self.fired = fault["step"], beat, False

    def due(self) -> bool:
        if self.fired or self.beat.step != self.step:
            return False
        self.fired = True
        return True

    def hang_if_due(self, *_args, **_kwargs) -> None:
        if self.due():
            hang_forever()


def install_in_step_fault(fault: dict | None, rank: int, trainer, beat) -> None:
    """Register the hook for a hang inside a step or a skipped all-reduce on the fault's rank, or
    the job-wide loss of gradient synchronisation (every rank)."""
    if fault is not None and fault["kind"] == "unsynced":
        trainer.batches = _unsync_from(trainer.batches, InStepFault(fault, beat), trainer)
        return
    if fault is None or fault["rank"] != rank or not (fault.get("where") or fault["kind"] == "skip"):
        return
    trigger = InStepFault(fault, beat)
    where = fault.get("where")
    module = getattr(trainer.model, "module", trainer.model)  # inside DDP / DataParallel
    if where == "data":
        trainer.batches = _hang_fetching(trainer.batches, trigger)
    elif where == "forward":
        module.register_forward_pre_hook(trigger.hang_if_due)
    elif where == "backward":
        module.register_forward_hook(lambda _module, _inputs, output: _hang_in_backward(output, trigger))
    elif where == "optimizer":
        trainer.optimizer.register_step_pre_hook(trigger.hang_if_due)
    else:  # collective, or skip: DDP's communication hook, run for every gradient bucket
        trainer.model.register_comm_hook(state=trigger, hook=_skip_hook if fault["kind"] == "skip" else _hang_hook)


def _unsync_from(batches, trigger: InStepFault, trainer):
    """From the fault's step on, gradients stay local: the wrapper's own switch for accumulation
    without communication, left off (DDP's require_backward_grad_sync, which no_sync() sets;
    set_requires_gradient_sync on fsdp2 and replicate modules)."""
    while True:
        if trigger.due():
            if hasattr(trainer.module, "set_requires_gradient_sync"):
                trainer.module.set_requires_gradient_sync(False)
            else:
                ddp = getattr(trainer.model, "_orig_mod", trainer.model)  # inside torch.compile's wrapper
                ddp.require_backward_grad_sync = False
        yield next(batches)


def _hang_fetching(batches, trigger: InStepFault):
    while True:
        trigger.hang_if_due()
        yield next(batches)


def _hang_in_backward(output, trigger: InStepFault) -> None:
    """Hang at the very start of the backward pass (the gradient of the output), before any
    gradient is ready, so no all-reduce of the step has been issued."""
    import torch

    tensors = (
        [output]
        if isinstance(output, torch.Tensor)
        else [t for t in getattr(output, "values", lambda: output)() if isinstance(t, torch.Tensor)]
    )
    if tensors and tensors[0].requires_grad and trigger.beat.step == trigger.step:
        tensors[0].register_hook(trigger.hang_if_due)


def _hang_hook(trigger: InStepFault, bucket):
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    trigger.hang_if_due()
    return default_hooks.allreduce_hook(None, bucket)


def _skip_hook(trigger: InStepFault, bucket):
    """Skip this bucket's all-reduce once: hand DDP the local gradient as if it were averaged."""
    import torch
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    if trigger.due():
        skipped = torch.futures.Future()
        skipped.set_result(bucket.buffer())
        return skipped
    return default_hooks.allreduce_hook(None, bucket)
