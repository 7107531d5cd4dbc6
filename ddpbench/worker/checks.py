"""Correctness checks that prove a run was real DDP. Each returns a check in the record's shape
(`ddpbench.records.schema.Check`): {"ok": True/False/None, "reason": words or None, "details": {...}}.

- replicas_in_sync: after the window every rank's parameters hash to the same digest.
- shards_disjoint / shards_cover_dataset: DistributedSampler gave each rank its own indices.
- reshuffled_each_epoch: set_epoch was called (epoch orders differ), when a run spans epochs.
- gradients_averaged: DDP's gradient equals the mean of the ranks' local gradients, i.e. the
  all-reduce during backward really averaged them.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from typing import Sequence

import torch
import torch.distributed as dist

# Relative error allowed between DDP's gradient and the mean of local gradients. fp32 all-reduce
# differs only by summation order; the compression hooks round every gradient to 16 bits.
GRADIENT_TOLERANCE = {"allreduce": 1e-4, "fp16_compress": 5e-3, "bf16_compress": 3e-2}


def verdict(ok: bool | None, reason: str | None = None, **details) -> dict:
    return {"ok": ok, "reason": reason, "details": details}


def all_ranks(per_rank: Sequence[dict], worst: str) -> dict:
    """One check from every rank's own: ok only if every rank's is, with the worst `worst` detail."""
    return verdict(all(c["ok"] for c in per_rank),
                   **{f"max_{worst}": max(c["details"][worst] for c in per_rank),
                      "tolerance": per_rank[0]["details"]["tolerance"]})


def parameter_digest(model: torch.nn.Module) -> str:
    """sha256 over every parameter's bytes, in registration order."""
    digest = hashlib.sha256()
    for param in model.parameters():
        # reshape(-1) first: a 0-dimensional parameter cannot be viewed as bytes directly.
        digest.update(param.detach().to("cpu").reshape(-1).contiguous().view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def replicas_in_sync(digests: Sequence[str]) -> dict:
    distinct = sorted(set(digests))
    out_of_sync = [rank for rank, digest in enumerate(digests) if digest != digests[0]]
    return verdict(len(distinct) == 1, distinct_digests=len(distinct), ranks_differing_from_rank0=out_of_sync)


def shard_checks(indices_by_rank: Sequence[Sequence[int]], dataset_length: int) -> dict:
    """DistributedSampler pads the last shard by repeating indices when the dataset does not
    divide evenly; exactly those repeats are allowed and reported."""
    counts = Counter(i for indices in indices_by_rank for i in indices)
    total = sum(counts.values())
    padding = total - dataset_length if total > dataset_length else 0
    repeats = sum(c - 1 for c in counts.values() if c > 1)
    covered = set(counts)
    return {
        "shards_disjoint": verdict(repeats <= padding, repeated_indices=repeats, padding_allowed=padding,
                                   shard_sizes=[len(s) for s in indices_by_rank]),
        "shards_cover_dataset": verdict(covered == set(range(dataset_length)), covered=len(covered),
                                        dataset_length=dataset_length),
    }


def reshuffled_each_epoch(first_epoch: Sequence[int], second_epoch: Sequence[int] | None) -> dict:
    if second_epoch is None:
        return verdict(None, "the run did not reach a second epoch")
    return verdict(list(first_epoch) != list(second_epoch))


def _flat_gradients(model: torch.nn.Module) -> torch.Tensor:
    return torch.cat([
        (p.grad if p.grad is not None else torch.zeros_like(p)).detach().float().flatten()
        for p in model.parameters()
    ])


def gradients_averaged(ddp_model, inputs, targets, loss_fn, world_size: int, comm_hook: str) -> dict:
    """Compare DDP's gradient with the mean of local gradients, on this rank's next batch.

    Runs in eval mode so both backward passes see identical forward results (no dropout, fixed
    BatchNorm statistics), and in fp32. Leaves gradients cleared; parameters are untouched.
    """
    was_training = ddp_model.training
    ddp_model.eval()
    try:
        ddp_model.zero_grad(set_to_none=True)
        with ddp_model.no_sync():
            loss_fn(ddp_model(inputs), targets).backward()
        expected = _flat_gradients(ddp_model.module)
        dist.all_reduce(expected)  # sum of local gradients, by hand
        expected /= world_size
        ddp_model.zero_grad(set_to_none=True)
        loss_fn(ddp_model(inputs), targets).backward()  # DDP all-reduces during this backward
        actual = _flat_gradients(ddp_model.module)
        ddp_model.zero_grad(set_to_none=True)
    finally:
        ddp_model.train(was_training)
    relative_error = float((actual - expected).norm() / expected.norm().clamp_min(1e-30))
    tolerance = GRADIENT_TOLERANCE[comm_hook]
    return verdict(relative_error <= tolerance, relative_error=relative_error, tolerance=tolerance)
