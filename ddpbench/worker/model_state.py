"""The model state a rank holds, counted the way each strategy holds it.

Parameters, gradients and optimizer state are what every strategy keeps (under fsdp2, its shards
of them). Two strategies hold more, and a count that leaves it out compares unlike things:

- DDP (and the composable `replicate`, which runs DDP's reducer) keeps gradient buckets: one flat
  tensor per bucket that the all-reduce runs on. Without `gradient_as_bucket_view` they are a
  second copy of every gradient; with it the gradients are views of the buckets, counted once as
  gradients. The sizes are the reducer's own (`_get_ddp_logging_data`'s bucket sizes, in bytes).
- FSDP2 all-gathers a unit's parameters before the unit runs and frees them after (the root's it
  keeps from forward to the end of backward), and holds a unit's unsharded gradients until they
  are reduce-scattered. Between steps none of that is held, so it is measured during a step: the
  most unsharded bytes held at once, sampled at FSDP2's own points (each unit's pre-forward and
  pre-backward, once unsharded, and its post-backward, before the reduce-scatter frees the
  unsharded gradients).
"""

from __future__ import annotations

import torch

from ddpbench.worker.sharding import local

PARTS = ("parameters", "gradients", "optimizer", "gradient_buckets", "unsharded")


def state_bytes(
    module: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    reducer_owner=None,
    unsharded_bytes: int | None = None,
) -> dict:
    """Bytes of model state this rank holds, by part, and their total: its parameters, gradients
    and optimizer state (under fsdp2, its shards of them), DDP's gradient buckets where they are
    a copy (`reducer_owner`: the DDP object, also replicate's), and FSDP2's unsharded peak during
    a step (`unsharded_bytes`, from `UnshardedPeak`). A tensor met twice (the same memory) counts
    once; views of one storage count each (FSDP2's gradients are views of one reduce-scatter
    output per unit, DDP's under gradient_as_bucket_view views of its buckets)."""
    seen: set[tuple[int, int]] = set()

    def size(tensors) -> int:
        total = 0
        for tensor in tensors:
            if not isinstance(tensor, torch.Tensor):
                continue
            tensor = local(tensor)
            key = (tensor.data_ptr(), tensor.numel())
            if key in seen or tensor.numel() == 0:
                continue
            seen.add(key)
            total += tensor.numel() * tensor.element_size()
        return total

    params = list(module.parameters())
    found = {"parameters": size(params), "gradients": size(p.grad for p in params if p.grad is not None)}
    found["optimizer"] = size(value for state in optimizer.state.values() for value in state.values())
    found["gradient_buckets"] = gradient_bucket_bytes(reducer_owner) if reducer_owner is not None else 0
    found["unsharded"] = unsharded_bytes or 0
    found["total"] = sum(found[part] for part in PARTS)
    return found


def gradient_bucket_bytes(ddp) -> int:
    """DDP's buckets that are not the gradients themselves: their bytes, from the reducer's own
    sizes (the buckets rebuilt after the first step in gradient order, when it has rebuilt them;
    the old ones are freed then). Zero under gradient_as_bucket_view: the gradients are the
    buckets' views, and the gradients are counted already."""
    data = ddp._get_ddp_logging_data()
    if data.get("gradient_as_bucket_view"):
        return 0
    sizes = data.get("rebuilt_bucket_sizes") if data.get("has_rebuilt_buckets") else None
    sizes = sizes or data.get("bucket_sizes") or ""
    return sum(int(part) for part in str(sizes).replace(",", " ").split())


def fsdp_param_groups(module: torch.nn.Module) -> list:
    """Every FSDP2 parameter group under `module` (one per fully_shard call that holds parameters)."""
    groups = []
    for inner in module.modules():
        state_of = getattr(inner, "_get_fsdp_state", None)
        if state_of is None:
            continue
        groups.extend(group for group in getattr(state_of(), "_fsdp_param_groups", []) if group is not None)
    return groups


def _storage_bytes(tensor, seen: set[int]) -> int:
    if not isinstance(tensor, torch.Tensor):
        return 0
    storage = local(tensor).untyped_storage()
    if storage.nbytes() == 0 or storage.data_ptr() in seen:
        return 0
    seen.add(storage.data_ptr())
    return storage.nbytes()


def unsharded_now(groups: list) -> int:
    """Bytes of unsharded parameters and gradients FSDP2 holds right now, over all its units: the
    all-gather outputs the unsharded parameters are views of (freed, size 0, while resharded), and
    the unsharded gradients autograd wrote, each storage once."""
    seen: set[int] = set()
    total = 0
    for group in groups:
        for fsdp_param in group.fsdp_params:
            for output in getattr(fsdp_param, "all_gather_outputs", None) or []:
                total += _storage_bytes(output, seen)
            for tensor in getattr(fsdp_param, "_unsharded_inner_tensors", None) or []:
                total += _storage_bytes(tensor, seen)
            unsharded = getattr(fsdp_param, "_unsharded_param", None)
            if unsharded is not None:
                total += _storage_bytes(unsharded, seen)
                total += _storage_bytes(unsharded.grad, seen)
            total += _storage_bytes(getattr(fsdp_param, "unsharded_accumulated_grad", None), seen)
    return total


class UnshardedPeak:
    """The most unsharded bytes FSDP2 holds at once during the steps taken inside `with`.

    It wraps FSDP2's own per-unit methods on the group objects (not hooks on the modules, which a
    compiled model would recompile for); FSDP2 runs them eagerly under torch.compile too."""

    SAMPLED_AFTER = ("pre_forward", "pre_backward")
    SAMPLED_BEFORE = ("post_backward",)

    def __init__(self, module: torch.nn.Module):
        self.groups = fsdp_param_groups(module)
        self.peak_bytes: int | None = None

    def _sample(self) -> None:
        self.peak_bytes = max(self.peak_bytes or 0, unsharded_now(self.groups))

    def _wrapped(self, method, sample_after: bool):
        def run(*args, **kwargs):
            if not sample_after:
                self._sample()
            result = method(*args, **kwargs)
            if sample_after:
                self._sample()
            return result

        return run

    def __enter__(self) -> UnshardedPeak:
        for group in self.groups:
            for name in self.SAMPLED_AFTER + self.SAMPLED_BEFORE:
                # An instance attribute shadows the class's method: FSDP2 looks it up at each call.
                setattr(group, name, self._wrapped(getattr(group, name), name in self.SAMPLED_AFTER))
        return self

    def __exit__(self, *exc) -> None:
        for group in self.groups:
            for name in self.SAMPLED_AFTER + self.SAMPLED_BEFORE:
                group.__dict__.pop(name, None)
