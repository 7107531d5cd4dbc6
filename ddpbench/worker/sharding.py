"""FSDP2 and the composable `replicate`: wrapping a workload's model, and reading it back whole.

FSDP2 (`torch.distributed.fsdp.fully_shard`) is applied to each unit the workload declares
(`Workload.shard_units`; by default every top-level child that has parameters), then to the root,
as torch's FSDP2 examples do: a unit's parameters are all-gathered just before it runs and freed
after, and its gradients reduce-scattered, so each rank keeps 1/N of the parameters, gradients
and optimizer state.

`unit_problems` says why a model cannot be sharded that way; the command line calls it (on the
meta device, where nothing is allocated) before any process starts.
"""

from __future__ import annotations

from collections.abc import Callable

import torch


def default_shard_units(model: torch.nn.Module) -> list[torch.nn.Module]:
    """Every top-level child that holds parameters."""
    return [child for child in model.children() if any(True for _ in child.parameters())]


def shard_units(model: torch.nn.Module, declared: Callable | None) -> list[torch.nn.Module]:
    return list(declared(model)) if declared is not None else default_shard_units(model)


def unit_problems(model: torch.nn.Module, units: list[torch.nn.Module]) -> str | None:
    """Why FSDP2 cannot shard `model` unit by unit (None when it can): a model without parameters;
    a unit that is not part of the model, is the model itself, or sits inside another unit; a
    parameter shared by two units (tied weights), which FSDP2 would all-gather and free twice."""
    if not any(True for _ in model.parameters()):
        return "the model has no parameters to shard"
    names = {id(module): name for name, module in model.named_modules()}
    owner: dict[int, str] = {}
    for unit in units:
        if not isinstance(unit, torch.nn.Module) or id(unit) not in names:
            return f"shard unit {type(unit).__name__} is not a submodule of the model"
        name = names[id(unit)]
        if unit is model:
            return "a shard unit is the model itself (the root is sharded last, on its own)"
        inner = [other for other in units if names.get(id(other), "").startswith(name + ".")]
        if inner:
            return f"shard unit {name!r} contains shard unit {names[id(inner[0])]!r}: units must not nest"
        for param in unit.parameters():
            if id(param) in owner and owner[id(param)] != name:
                return (
                    f"a parameter is shared by shard units {owner[id(param)]!r} and {name!r} (tied weights): "
                    "declare units that keep tied parameters together, or leave them to the root"
                )
            owner[id(param)] = name
    inside = {id(module) for unit in units for module in unit.modules()}
    for name, module in model.named_modules():
        if id(module) in inside:
            continue
        for param in module.parameters(recurse=False):
            if id(param) in owner:
                return (
                    f"a parameter of shard unit {owner[id(param)]!r} is shared with {name or 'the root'!r}, which the "
                    "root holds (tied weights): declare units that keep tied parameters together, or leave them to "
                    "the root"
                )
    return None


def wrap_fsdp2(model: torch.nn.Module, units: list[torch.nn.Module]) -> torch.nn.Module:
    from torch.distributed.fsdp import fully_shard

    problem = unit_problems(model, units)
    if problem:
        raise ValueError(f"fsdp2 cannot shard this model: {problem}")
    for unit in units:
        fully_shard(unit)
    fully_shard(model)  # the root: whatever parameters no unit holds, and the forward's entry
    return model


def wrap_replicate(model: torch.nn.Module, device: torch.device, knobs) -> torch.nn.Module:
    """The composable replicate: DDP's reducer attached to the module itself, no wrapper object;
    it takes DDP's options and hooks (`knobs`)."""
    from torch.distributed._composable.replicate import replicate

    from ddpbench.worker.training import DDP_RUNTIME_LOGGING_SAMPLE_RATE, ddp_options, register_comm_hook

    model = replicate(model, device_ids=[device.index] if device.type == "cuda" else None, **ddp_options(knobs))
    register_comm_hook(model, knobs)
    # replicate builds its DDP at the first forward; built now, its runtime logging is set out of
    # reach as the ddp strategy's is (on GPUs a logged forward waits for the last step's events).
    state = replicate.state(model)
    state.lazy_init()
    state._ddp._set_ddp_runtime_logging_sample_rate(DDP_RUNTIME_LOGGING_SAMPLE_RATE)
    return model


def is_sharded(tensor) -> bool:
    return hasattr(tensor, "full_tensor") and hasattr(tensor, "to_local")


def full(tensor: torch.Tensor) -> torch.Tensor:
    """The whole tensor: a DTensor's shards all-gathered (collective: every rank calls it in the
    same order), a plain tensor as it is."""
    return tensor.full_tensor() if is_sharded(tensor) else tensor


def local(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.to_local() if is_sharded(tensor) else tensor


def replicate_ddp(model: torch.nn.Module):
    """The DDP object the composable replicate runs on `model` (its reducer, its buckets)."""
    from torch.distributed._composable.replicate import replicate

    return replicate.state(model)._ddp


def shard_layout(module: torch.nn.Module) -> list[tuple[str, int, int, int]]:
    """This rank's piece of every parameter: (name, first row, rows, rows in the whole parameter),
    dimension 0 being the one FSDP2 shards. A parameter that is not sharded is held whole."""
    from torch.distributed.tensor._utils import compute_local_shape_and_global_offset

    layout = []
    for name, param in module.named_parameters():
        if is_sharded(param):
            _, offset = compute_local_shape_and_global_offset(param.shape, param.device_mesh, param.placements)
            held = param.to_local()  # what this rank holds, not what the placement says it should
            rows = held.shape[0] if held.dim() else 1
            layout.append((name, int(offset[0]) if offset else 0, int(rows), int(param.shape[0]) if param.dim() else 1))
        else:
            rows = int(param.shape[0]) if param.dim() else 1
            layout.append((name, 0, rows, rows))
    return layout
