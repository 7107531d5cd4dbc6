"""How a rank trains: wrap the model, set up mixed precision, take one step.

The step does no host-device synchronisation (no .item(), no printing of tensors), so on GPUs
the CPU runs ahead and the timing events measure the GPU's pace.
"""

from __future__ import annotations

import contextlib
import inspect
from dataclasses import dataclass
from typing import Any, Callable

import torch
from torch.nn.parallel import DistributedDataParallel as DDP

from ddpbench.config.spec import DDPKnobs

AMP_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


def _buffer_sync_option(enabled: bool) -> dict:
    """Newer torch renames per-forward buffer syncing `forward_sync_buffers` and deprecates
    `broadcast_buffers`. Every rank builds identical buffers from the same seed, so the one
    difference (the new flag still syncs once at construction) changes nothing here."""
    if "forward_sync_buffers" in inspect.signature(DDP.__init__).parameters:
        return {"forward_sync_buffers": enabled}
    return {"broadcast_buffers": enabled}


def wrap_ddp(model: torch.nn.Module, device: torch.device, knobs: DDPKnobs) -> DDP:
    # device_ids=[local_rank] on GPUs, as the DDP tutorial does; None for CPU modules.
    device_ids = [device.index] if device.type == "cuda" else None
    ddp_model = DDP(
        model,
        device_ids=device_ids,
        bucket_cap_mb=knobs.bucket_cap_mb,
        gradient_as_bucket_view=knobs.gradient_as_bucket_view,
        static_graph=knobs.static_graph,
        find_unused_parameters=knobs.find_unused_parameters,
        **_buffer_sync_option(knobs.broadcast_buffers),
    )
    if knobs.comm_hook != "allreduce":
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

        hook = {"fp16_compress": default_hooks.fp16_compress_hook,
                "bf16_compress": default_hooks.bf16_compress_hook}[knobs.comm_hook]
        ddp_model.register_comm_hook(state=None, hook=hook)
    return ddp_model


def wrap_data_parallel(model: torch.nn.Module, device: torch.device, devices: int) -> torch.nn.Module:
    """nn.DataParallel over the first `devices` GPUs: one process scatters each batch, replicates
    the module every forward and gathers outputs on the first GPU. Without CUDA it has no devices
    and simply calls the module, so on CPU its only parallelism is the intra-op threads."""
    if device.type == "cuda":
        return torch.nn.DataParallel(model, device_ids=list(range(devices)))
    return torch.nn.DataParallel(model)


@dataclass
class Precision:
    """Autocast context and, for fp16, the GradScaler that keeps small gradients from vanishing."""

    autocast: Callable[[], Any]
    scaler: Any = None


def make_precision(name: str, device: torch.device) -> Precision:
    if name == "fp32":
        return Precision(autocast=contextlib.nullcontext)
    dtype = AMP_DTYPES[name]
    scaler = torch.amp.GradScaler(device.type) if name == "fp16" else None
    return Precision(autocast=lambda: torch.autocast(device_type=device.type, dtype=dtype), scaler=scaler)


def to_device(batch: Any, device: torch.device) -> tuple:
    inputs, targets = batch
    # non_blocking pairs with pin_memory: the copy overlaps instead of stalling the host.
    return inputs.to(device, non_blocking=True), targets.to(device, non_blocking=True)


class Untracked:
    """Stands in for the heartbeat when nobody watches where a step is."""

    where = None


UNTRACKED = Untracked()


def train_step(model: torch.nn.Module, optimizer: torch.optim.Optimizer, loss_fn: Callable,
               precision: Precision, inputs: torch.Tensor, targets: torch.Tensor,
               progress: Any = UNTRACKED) -> torch.Tensor:
    """One optimisation step. Returns the loss tensor without reading it (reading would sync).
    `progress.where` says which part of the step runs: plain stores, for the heartbeat to read."""
    progress.where = "forward"
    optimizer.zero_grad(set_to_none=True)
    with precision.autocast():
        loss = loss_fn(model(inputs), targets)
    progress.where = "backward"
    if precision.scaler is not None:
        precision.scaler.scale(loss).backward()
        progress.where = "optimizer"
        precision.scaler.step(optimizer)
        precision.scaler.update()
    else:
        loss.backward()  # under DDP, the gradient all-reduce runs bucket by bucket during this call
        progress.where = "optimizer"
        optimizer.step()
    return loss.detach()


def flops_per_sample(model: torch.nn.Module, loss_fn: Callable, inputs: torch.Tensor,
                     targets: torch.Tensor) -> float | None:
    """Training FLOPs (forward + backward) per sample, counted by torch's FlopCounterMode on two
    samples (BatchNorm refuses one). Runs before any timing; gradients are cleared after."""
    from torch.utils.flop_counter import FlopCounterMode

    samples = min(2, inputs.shape[0])
    try:
        counter = FlopCounterMode(display=False)
        with counter:
            loss_fn(model(inputs[:samples]), targets[:samples]).backward()
        return counter.get_total_flops() / samples
    except Exception:  # a user's model may use ops the counter cannot trace; FLOPs stay unknown
        return None
    finally:
        model.zero_grad(set_to_none=True)
