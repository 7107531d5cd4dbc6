"""How a rank trains: wrap the model, set up mixed precision, take one step.

The step does no host-device synchronisation (no .item(), no printing of tensors), so on GPUs
the CPU runs ahead and the timing events measure the GPU's pace.
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch.nn.parallel import DistributedDataParallel as DDP

from ddpbench.config.spec import DDP_LOGGED_ITERATIONS, DDPKnobs

AMP_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


def _buffer_sync_option(enabled: bool) -> dict:
    """Newer torch renames per-forward buffer syncing `forward_sync_buffers` and deprecates
    `broadcast_buffers`. Every rank builds identical buffers from the same seed, so the one
    difference (the new flag still syncs once at construction) changes nothing here."""
    if "forward_sync_buffers" in inspect.signature(DDP.__init__).parameters:
        return {"forward_sync_buffers": enabled}
    return {"broadcast_buffers": enabled}


DDP_RUNTIME_LOGGING_SAMPLE_RATE = 2**30


def wrap_ddp(model: torch.nn.Module, device: torch.device, knobs: DDPKnobs, process_group=None) -> DDP:
    """DDP as the tutorial builds it; `process_group` None is the whole job (the gradient
    timeline also wraps the same module over a group of one rank: DDP's work without a network)."""
    # device_ids=[local_rank] on GPUs, as the DDP tutorial does; None for CPU modules.
    device_ids = [device.index] if device.type == "cuda" else None
    ddp_model = DDP(
        model,
        device_ids=device_ids,
        process_group=process_group,
        **ddp_options(knobs),
    )
    # After its first 10 iterations DDP logs every 100th; on GPUs a logged forward waits for the
    # previous iteration's CUDA events. A rate no run reaches keeps later timed steps free of it;
    # the reducer phase after the window samples its own iterations (phases.reducer_phase).
    ddp_model._set_ddp_runtime_logging_sample_rate(DDP_RUNTIME_LOGGING_SAMPLE_RATE)
    register_comm_hook(ddp_model, knobs, process_group)
    return ddp_model


def ddp_options(knobs: DDPKnobs) -> dict:
    """DDP's constructor options from the knobs (the comm hook is registered apart)."""
    return {
        "bucket_cap_mb": knobs.bucket_cap_mb,
        "gradient_as_bucket_view": knobs.gradient_as_bucket_view,
        "static_graph": knobs.static_graph,
        "find_unused_parameters": knobs.find_unused_parameters,
        **_buffer_sync_option(knobs.broadcast_buffers),
    }


def register_comm_hook(model, knobs: DDPKnobs, process_group=None) -> None:
    """The knobs' compression hook, on a DDP model or a replicate module (both take DDP's hooks)."""
    if knobs.comm_hook != "allreduce":
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

        hook = {"fp16_compress": default_hooks.fp16_compress_hook, "bf16_compress": default_hooks.bf16_compress_hook}[
            knobs.comm_hook
        ]
        model.register_comm_hook(state=process_group, hook=hook)  # the hooks' state is their group


class AutocastReplica:
    """One DataParallel replica, called in its own thread with the caller's autocast dtype.

    torch's parallel_apply re-enters autocast in each replica's thread with `enabled` only, and
    autocast's dtype is per thread (fp16 by default on CUDA): without this, replicas asked for
    bf16 would compute in fp16. Entering autocast again with the dtype read on the calling thread
    makes the replicas use what the run asked for.
    """

    def __init__(self, replica: Any, device_type: str, enabled: bool, dtype: torch.dtype):
        self.replica = replica
        self.device_type = device_type
        self.enabled = enabled
        self.dtype = dtype

    def __call__(self, *inputs: Any, **kwargs: Any) -> Any:
        with torch.autocast(device_type=self.device_type, dtype=self.dtype, enabled=self.enabled):
            return self.replica(*inputs, **kwargs)


def with_callers_autocast(replicas: list, device_type: str) -> list[AutocastReplica]:
    """Wrap replicas so each runs under the autocast state of the thread calling this."""
    enabled = torch.is_autocast_enabled(device_type)
    dtype = torch.get_autocast_dtype(device_type)
    return [AutocastReplica(replica, device_type, enabled, dtype) for replica in replicas]


class AutocastDataParallel(torch.nn.DataParallel):
    """nn.DataParallel whose replicas keep the autocast dtype of the forward's caller."""

    def parallel_apply(self, replicas, inputs, kwargs):
        return super().parallel_apply(with_callers_autocast(replicas, self.src_device_obj.type), inputs, kwargs)


def wrap_data_parallel(model: torch.nn.Module, device: torch.device, devices: int) -> torch.nn.Module:
    """nn.DataParallel over the first `devices` GPUs: one process scatters each batch, replicates
    the module every forward and gathers outputs on the first GPU. Without CUDA it has no devices
    and simply calls the module, so on CPU its only parallelism is the intra-op threads."""
    if device.type == "cuda":
        return AutocastDataParallel(model, device_ids=list(range(devices)))
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


def train_step(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    loss_fn: Callable,
    precision: Precision,
    inputs: torch.Tensor,
    targets: torch.Tensor,
    progress: Any = UNTRACKED,
    context: Callable[[], Any] = contextlib.nullcontext,
    planted: Callable[[], Any] | None = None,
) -> torch.Tensor:
    """One optimisation step. Returns the loss tensor without reading it (reading would sync).
    `progress.where` says which part of the step runs: plain stores, for the heartbeat to read.
    `context` holds forward and backward (compiled autograd, for --compile compiled-autograd).
    `planted` is --slowdown's extra work, run right after the model's forward in every kind of
    step alike (timed, each kind of the in-process ablation, the local reference), so that it is compute everywhere."""
    progress.where = "forward"
    optimizer.zero_grad(set_to_none=True)
    with context():
        with precision.autocast():
            output = model(inputs)
        if planted is not None:
            planted()  # outside autocast: the work is sized on the device's own precision
        with precision.autocast():
            loss = loss_fn(output, targets)
        progress.where = "backward"
        if precision.scaler is not None:
            precision.scaler.scale(loss).backward()
        else:
            loss.backward()  # under DDP, the gradient all-reduce runs bucket by bucket during this call
    progress.where = "optimizer"
    if precision.scaler is not None:
        precision.scaler.step(optimizer)
        precision.scaler.update()
    else:
        optimizer.step()
    return loss.detach()


def flops_per_sample(
    model: torch.nn.Module, loss_fn: Callable, inputs: torch.Tensor, targets: torch.Tensor
) -> tuple[float | None, float | None]:
    """Training FLOPs (forward + backward) per sample and the share of them in convolutions,
    counted by torch's FlopCounterMode on two samples (BatchNorm refuses one). The share sets the
    MFU peak of fp32 runs: cuDNN convolutions and cuBLAS matrix products differ in their TF32
    defaults. Runs before any timing; gradients are cleared after."""
    from torch.utils.flop_counter import FlopCounterMode

    samples = min(2, inputs.shape[0])
    try:
        counter = FlopCounterMode(display=False)
        with counter:
            loss_fn(model(inputs[:samples]), targets[:samples]).backward()
        total = counter.get_total_flops()
        by_op = counter.get_flop_counts().get("Global", {})
        conv = sum(count for op, count in by_op.items() if "convolution" in str(op))
        return total / samples, (conv / total if total else None)
    except Exception:  # a user's model may use ops the counter cannot trace; FLOPs stay unknown
        return None, None
    finally:
        model.zero_grad(set_to_none=True)


def host_synchronisation(
    strategy: str, device: torch.device, warmup: int, precision: Precision, optimizer: torch.optim.Optimizer
) -> dict:
    """Where timed steps would wait for the GPU on the host, and what was done about it: for the
    record, since a step that waits hides the GPU's pace behind the CPU's."""
    on_gpu = device.type == "cuda"
    found: dict = {"ddp_runtime_logging": None, "host_reads_per_step": []}
    if strategy in ("ddp", "replicate"):  # replicate runs DDP's reducer, logging included
        # Forwards 2..11 read the timers of the iteration before; warm-up steps are forwards 1..warmup.
        waiting = max(0, DDP_LOGGED_ITERATIONS + 1 - warmup) if on_gpu else 0
        if not on_gpu:
            how = "CPU timers: DDP's runtime logging never waits"
        elif waiting:
            how = (
                f"warm-up of {warmup} is shorter than {DDP_LOGGED_ITERATIONS + 1}: the first {waiting} timed "
                f"steps wait for the previous step's CUDA events (DDP runtime logging)"
            )
        else:
            how = f"warm-up of {warmup} covers DDP's {DDP_LOGGED_ITERATIONS} logged iterations"
        found["ddp_runtime_logging"] = {
            "sample_rate": DDP_RUNTIME_LOGGING_SAMPLE_RATE,
            "logged_iterations": DDP_LOGGED_ITERATIONS,
            "timed_steps_host_synchronised": waiting,
            "how": how,
        }
    if on_gpu and precision.scaler is not None and not getattr(optimizer, "_step_supports_amp_scaling", False):
        # torch.amp.GradScaler._maybe_opt_step: sum(v.item() for v in found_inf_per_device)
        found["host_reads_per_step"].append(
            "GradScaler.step reads found_inf on the host every step (the optimizer has no fused AMP "
            "step), so each step's optimizer waits for its backward"
        )
    return found
