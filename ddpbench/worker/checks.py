"""Correctness checks that prove a run was real DDP. Each returns a check in the record's shape
(`ddpbench.records.schema.Check`): {"ok": True/False/None, "reason": words or None, "details": {...}}.

- replicas_in_sync: after the window every rank's parameters hash to the same digest.
- shards_disjoint / shards_cover_dataset: DistributedSampler gave each rank its own indices.
- reshuffled_each_epoch: set_epoch was called (epoch orders differ), when a run spans epochs.
- gradients_averaged: DDP's gradient equals the mean of the ranks' local gradients, i.e. the
  all-reduce during backward really averaged them. Under fsdp2 and replicate: the full gradient
  (fsdp2's shards reassembled) equals the mean of the gradients a one-process copy of the model
  computes on each rank's batch.
- gradients_in_sync (scripts): every rank stepped its optimizer with the same gradients, from a
  digest of the DDP model's gradients at each warm-up step (no loss of ddpbench's own needed).
- parameters_sharded (fsdp2): every parameter's rows are held by exactly one rank. (Under fsdp2
  replicas_in_sync is not decided: there is one copy of each parameter.)

Checks that compare ranks are not decided (`ok` None, "not checked") at world size 1: one rank's
gradient is its own mean and one digest always agrees with itself, so an `ok` there would say
nothing.
"""

from __future__ import annotations

import contextlib
import hashlib
import math
from collections import Counter
from collections.abc import Sequence

import torch
import torch.distributed as dist

from ddpbench.records.schema import ONE_RANK_REASON

# Relative error allowed between DDP's gradient and the mean of local gradients. fp32 all-reduce
# differs only by summation order; the compression hooks round every gradient to 16 bits.
GRADIENT_TOLERANCE = {"allreduce": 1e-4, "fp16_compress": 5e-3, "bf16_compress": 3e-2}


def verdict(ok: bool | None, reason: str | None = None, **details) -> dict:
    return {"ok": ok, "reason": reason, "details": details}


def one_rank() -> dict:
    """A check that compares ranks, at world size 1."""
    return verdict(None, ONE_RANK_REASON)


def all_ranks(per_rank: Sequence[dict], worst: str) -> dict:
    """One check from every rank's own: ok only if every rank's is, with the worst `worst` detail
    over the ranks that have one, and the first rank's reason where a rank gave one."""
    values = [c["details"][worst] for c in per_rank if c["details"].get(worst) is not None]
    reason = next((f"rank {rank}: {c['reason']}" for rank, c in enumerate(per_rank) if c.get("reason")), None)
    return verdict(
        all(c["ok"] for c in per_rank),
        reason,
        **{f"max_{worst}": max(values) if values else None, "tolerance": per_rank[0]["details"]["tolerance"]},
    )


def parameter_digest(model: torch.nn.Module) -> str:
    """sha256 over every parameter's bytes, in registration order; sharded (fsdp2) parameters are
    gathered whole first (collective), so the record's digest is the full model's."""
    from ddpbench.worker.sharding import full

    digest = hashlib.sha256()
    for param in (full(p) for p in model.parameters()):
        # reshape(-1) first: a 0-dimensional parameter cannot be viewed as bytes directly.
        digest.update(param.detach().to("cpu").reshape(-1).contiguous().view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


NO_REPLICAS_REASON = (
    "fsdp2 holds one copy of each parameter, sharded over the ranks: there are no replicas to compare "
    "(parameters_sharded checks the shards, gradients_averaged the full gradient)"
)


def no_replicas() -> dict:
    """replicas_in_sync under fsdp2. Every rank gathering the same shards would hash alike by
    construction, a check that could not fail; so it is not decided, and says why."""
    return verdict(None, NO_REPLICAS_REASON)


def replicas_in_sync(digests: Sequence[str]) -> dict:
    if len(digests) < 2:
        return one_rank()
    distinct = sorted(set(digests))
    out_of_sync = [rank for rank, digest in enumerate(digests) if digest != digests[0]]
    reason = None
    if out_of_sync:  # a failed check says what it saw, as the others do
        reason = (
            f"rank(s) {', '.join(map(str, out_of_sync))} hold parameters unlike rank 0's after the window: the "
            "replicas drifted apart (gradients not averaged alike, or parameters changed on some ranks only)"
        )
    return verdict(len(distinct) == 1, reason, distinct_digests=len(distinct), ranks_differing_from_rank0=out_of_sync)


def shard_checks(
    indices_by_rank: Sequence[Sequence[int]],
    dataset_length: int,
    world_size: int,
    padding: int | None = None,
    padder: str = "DistributedSampler's padding",
    missing_allowed: int = 0,
) -> dict:
    """What the ranks' samplers handed out in one pass over the data. DistributedSampler pads the
    last shard (drop_last=False) by repeating exactly (-length) % world_size indices, at most
    world_size - 1, so that every rank gets as many; those repeats are allowed, nothing more.
    Indices read from a loader's batches allow their own `padding` (even batches on every rank)
    and `missing_allowed` (the last, incomplete batches a drop_last loader leaves out)."""
    counts = Counter(i for indices in indices_by_rank for i in indices)
    padding = -dataset_length % world_size if padding is None else padding
    repeats = sum(c - 1 for c in counts.values() if c > 1)
    covered = set(counts)
    shard_sizes = [len(s) for s in indices_by_rank]
    disjoint = repeats <= padding
    return {
        "shards_disjoint": one_rank()
        if len(indices_by_rank) < 2
        else verdict(
            disjoint,
            None if disjoint else f"{repeats} indices were read by more than one rank; {padder} allows {padding}",
            repeated_indices=repeats,
            padding_allowed=padding,
            shard_sizes=shard_sizes,
        ),
        "shards_cover_dataset": verdict(
            len(covered & set(range(dataset_length))) >= dataset_length - missing_allowed,
            None
            if len(covered & set(range(dataset_length))) >= dataset_length - missing_allowed
            else f"the ranks read {len(covered)} distinct indices of {dataset_length}"
            + (f" (drop_last allows {missing_allowed} fewer)" if missing_allowed else ""),
            covered=len(covered),
            dataset_length=dataset_length,
        ),
    }


def loader_reshuffled(passes: Sequence[tuple[int | None, Sequence[int]]], sampler: str) -> dict:
    """From a loader's first two passes (indices in the order its batches drew them; the second
    may be under way): the order must differ. No epoch to read: the sampler is not a
    DistributedSampler."""
    if len(passes) < 2 or not passes[1][1]:
        return verdict(None, "the run did not reach a second epoch: nothing to compare")
    first, second = list(passes[0][1]), list(passes[1][1])
    n = min(len(first), len(second))
    if first[:n] == second[:n]:
        return verdict(
            False,
            f"the loader read its data in the same order in its first two passes ({sampler}): every epoch "
            "reads the same order",
            compared=n,
        )
    return verdict(True, None, compared=n)


def reshuffled_each_epoch(passes: Sequence[tuple[int, Sequence[int]]]) -> dict:
    """From the sampler's first two passes over the data as (epoch it was set to, indices):
    set_epoch must have moved the epoch on, and the order must differ."""
    if len(passes) < 2:
        return verdict(None, "the run did not reach a second epoch: nothing to compare")
    (first_epoch, first), (second_epoch, second) = passes[0], passes[1]
    if first_epoch == second_epoch:
        return verdict(
            False,
            f"set_epoch was not called between epochs: the sampler stayed at epoch "
            f"{first_epoch}, so every epoch reads the data in the same order",
            epochs=[first_epoch, second_epoch],
        )
    same_order = list(first) == list(second)
    return verdict(
        not same_order,
        "the order did not change between epochs" if same_order else None,
        epochs=[first_epoch, second_epoch],
    )


def _flat_gradients(model: torch.nn.Module) -> torch.Tensor:
    return torch.cat(
        [(p.grad if p.grad is not None else torch.zeros_like(p)).detach().float().flatten() for p in model.parameters()]
    )


def gradients_averaged(
    ddp_model, inputs, targets, loss_fn, world_size: int, comm_hook: str, context=contextlib.nullcontext
) -> dict:
    """Compare DDP's gradient with the mean of local gradients, on this rank's next batch.

    Runs in eval mode so both backward passes see identical forward results (no dropout, fixed
    BatchNorm statistics), and in fp32. Leaves gradients cleared; parameters are untouched.
    """
    was_training = ddp_model.training
    ddp_model.eval()
    try:
        ddp_model.zero_grad(set_to_none=True)
        with ddp_model.no_sync(), context():
            loss_fn(ddp_model(inputs), targets).backward()
        expected = _flat_gradients(ddp_model.module)
        dist.all_reduce(expected)  # sum of local gradients, by hand
        expected /= world_size
        ddp_model.zero_grad(set_to_none=True)
        with context():  # compiled autograd: the all-reduces are traced into this backward
            loss_fn(ddp_model(inputs), targets).backward()  # DDP all-reduces during this backward
        actual = _flat_gradients(ddp_model.module)
        ddp_model.zero_grad(set_to_none=True)
    finally:
        ddp_model.train(was_training)
    return compare_gradients(actual, expected, GRADIENT_TOLERANCE[comm_hook])


def parameters_sharded(layouts: Sequence[Sequence[tuple[str, int, int, int]]]) -> dict:
    """From every rank's (parameter, first row, rows, rows in all) under fsdp2: the ranks' pieces
    of each parameter must be disjoint and together cover it."""
    if len(layouts) < 2:
        return one_rank()
    pieces: dict[str, list[tuple[int, int, int]]] = {}
    for layout in layouts:
        for name, first, rows, total in layout:
            pieces.setdefault(name, []).append((first, rows, total))
    overlapping, uncovered = [], []
    for name, found in pieces.items():
        total = found[0][2]
        held = [0] * total
        for first, rows, _ in found:
            for row in range(first, min(total, first + rows)):
                held[row] += 1
        if any(count > 1 for count in held):
            overlapping.append(name)
        if any(count == 0 for count in held):
            uncovered.append(name)
    ok = not overlapping and not uncovered
    reason = None
    if overlapping:
        reason = f"{len(overlapping)} parameter(s) held by more than one rank, e.g. {overlapping[0]} (not sharded)"
    elif uncovered:
        reason = f"{len(uncovered)} parameter(s) with rows no rank holds, e.g. {uncovered[0]}"
    return verdict(ok, reason, parameters=len(pieces), overlapping=len(overlapping), uncovered=len(uncovered))


def gradients_match_reference(
    module: torch.nn.Module,
    model,
    reference: torch.nn.Module,
    inputs,
    targets,
    loss_fn,
    world_size: int,
    context,
    comm_hook: str = "allreduce",
) -> dict:
    """fsdp2 and replicate: the gradient the strategy left on `module` (fsdp2's shards gathered)
    against the mean of the gradients `reference`, a plain copy of the model loaded with the full
    parameters, computes on every rank's batch. Eval mode and fp32, as for DDP; leaves gradients
    cleared."""
    from ddpbench.worker.sharding import full

    was_training = model.training
    model.eval()
    try:
        module.zero_grad(set_to_none=True)
        with context():
            loss_fn(model(inputs), targets).backward()  # the strategy's own reduction runs here
        named = list(module.named_parameters())
        actual = torch.cat([_full_gradient(p, inputs.device) for _, p in named])
        module.zero_grad(set_to_none=True)
        reference.load_state_dict({name: full(value).detach() for name, value in module.state_dict().items()})
        reference.eval()
        loss_fn(reference(inputs), targets).backward()
        own = dict(reference.named_parameters())
        expected = torch.cat([_full_gradient(own[name], inputs.device) for name, _ in named])
        dist.all_reduce(expected)
        expected /= world_size
    finally:
        model.train(was_training)
    return compare_gradients(actual, expected, GRADIENT_TOLERANCE[comm_hook])


def _full_gradient(param, device) -> torch.Tensor:
    """A parameter's whole gradient, flat, in fp32 (zeros where it got none)."""
    from ddpbench.worker.sharding import full

    grad = full(param.grad) if param.grad is not None else torch.zeros(param.shape, device=device)
    return grad.detach().float().flatten()


def compare_gradients(actual: torch.Tensor, expected: torch.Tensor, tolerance: float) -> dict:
    if not (bool(torch.isfinite(expected).all()) and bool(torch.isfinite(actual).all())):
        # A diverged model (loss NaN or inf): no error can be computed, and a NaN would compare
        # False without saying why.
        return verdict(
            False,
            "gradients are not finite (NaN or inf; has the loss diverged?), so their average " "cannot be checked",
            relative_error=None,
            tolerance=tolerance,
        )
    relative_error = float((actual - expected).norm() / expected.norm().clamp_min(1e-30))
    return verdict(relative_error <= tolerance, relative_error=relative_error, tolerance=tolerance)


# Digests of gradients that every rank holds after one all-reduce agree exactly: all-reduce hands
# every rank the same bytes (gloo and NCCL reduce each chunk once and copy it out), DDP divides them
# by the same world size, and one kind of device digests them with the same kernels. The tolerance
# leaves room only for ranks on unlike devices, whose reduction kernels may sum in another order;
# gradients that were not averaged differ by far more (each rank's own batch, or a factor).
GRADIENT_DIGEST_TOLERANCE = 1e-5


def gradient_digest(parameters) -> torch.Tensor:
    """A few numbers that change with any rank's gradients, kept on their device (reading them
    would wait for it): over the parameters that have a gradient, in order, the sums of squares and
    the plain sums, each also weighted by the parameter's position (a gradient moved to another
    parameter changes those), and how many parameters have one. float64, 5 values."""
    squares, sums = [], []
    for param in parameters:
        grad = param.grad
        if grad is None:
            continue
        if grad.is_sparse:  # an embedding with sparse=True: its values are what was all-reduced
            grad = grad.coalesce()._values()
        grad = grad.detach().float()
        squares.append(grad.square().sum())
        sums.append(grad.sum())
    if not squares:
        return torch.zeros(5, dtype=torch.float64)
    squares_t, sums_t = torch.stack(squares).double(), torch.stack(sums).double()
    position = torch.arange(1, len(squares) + 1, dtype=torch.float64, device=squares_t.device)
    count = torch.tensor(float(len(squares)), dtype=torch.float64, device=squares_t.device)
    return torch.stack([squares_t.sum(), (squares_t * position).sum(), sums_t.sum(), (sums_t * position).sum(), count])


def _digest_difference(first: Sequence[float], other: Sequence[float]) -> float:
    """The largest difference of two digests, relative to its size: a sum of squares against
    itself, a plain sum against the gradients' norm (times the largest weight, for the weighted
    one), since a sum may cancel to near zero. Infinite when not the same parameters had gradients."""
    if first[4] != other[4]:
        return math.inf
    norm = max(abs(first[0]), abs(other[0])) ** 0.5
    scales = (max(abs(first[0]), abs(other[0])), max(abs(first[1]), abs(other[1])), norm, norm * first[4])
    return max(abs(first[i] - other[i]) / max(scale, 1e-30) for i, scale in enumerate(scales))


def gradients_in_sync(
    digests_by_rank: Sequence[Sequence[Sequence[float]]],
    unsynced_steps: Sequence[int],
    own_hook: str | None = None,
    tolerance: float = GRADIENT_DIGEST_TOLERANCE,
) -> dict:
    """From each rank's gradient digests at its optimizer steps (the warm-up's): every rank's must
    match rank 0's at every step. Steps after a backward the script declared unsynced (no_sync(),
    require_backward_grad_sync = False) were not digested and are counted."""
    if len(digests_by_rank) < 2:
        return one_rank()
    steps = min(len(digests) for digests in digests_by_rank)
    skipped = max(unsynced_steps) if unsynced_steps else 0
    if steps == 0:
        reason = (
            f"each of the {skipped} optimizer step(s) before the window followed a backward under no_sync(): "
            "no gradients that should agree"
            if skipped
            else "no optimizer step of the DDP model's parameters before the window"
        )
        return verdict(None, reason, steps_compared=0, unsynced_steps=skipped)
    worst, identical, first_bad, bad_ranks = 0.0, 0, None, set()
    for step in range(steps):
        reference = digests_by_rank[0][step]
        differences = [_digest_difference(reference, digests[step]) for digests in digests_by_rank[1:]]
        worst = max(worst, *differences)
        identical += all(list(digests[step]) == list(reference) for digests in digests_by_rank[1:])
        out = [rank for rank, difference in enumerate(differences, start=1) if difference > tolerance]
        if out and first_bad is None:
            first_bad = step + 1
        bad_ranks.update(out)
    ok = not bad_ranks
    reason = None
    compared = [digests[step] for digests in digests_by_rank for step in range(steps)]
    if ok and all(digest[4] == 0 for digest in compared):
        ok, reason = None, f"no parameter of the DDP model had a gradient at any of the {steps} optimizer step(s)"
    elif ok and all(list(digest[:4]) == [0, 0, 0, 0] for digest in compared):
        # Zero gradients agree whatever the all-reduce did: passing would be a check that cannot fail.
        # PyTorch's DDP tutorial series trains Linear(20, 1) under cross_entropy: over one class its
        # loss is 0 whatever the weights, and so are its gradients. (Sums as well as squares: a
        # tiny gradient's float32 square may underflow to 0, its sum does not.)
        ok = None
        reason = (
            f"every rank's gradients were exactly zero at each of the {steps} optimizer step(s) compared: they "
            "agree whatever the all-reduce did, so nothing could be checked (does the loss depend on the "
            "parameters? cross_entropy over a single class is 0 for any weights)"
        )
    if ok is False:
        reason = (
            f"rank(s) {', '.join(map(str, sorted(bad_ranks)))} stepped with gradients unlike rank 0's from optimizer "
            f"step {first_bad} on: the gradients were not averaged across ranks, or were changed after the "
            "all-reduce on some ranks only"
            + (f" (the script registers its own comm hook {own_hook!r}; one that averages parameters instead, as "
               "local SGD does, leaves gradients unlike by design)" if own_hook else "")
        )  # fmt: skip
    return verdict(
        ok,
        reason,
        steps_compared=steps,
        identical_steps=identical,
        max_relative_difference=worst if math.isfinite(worst) else None,
        tolerance=tolerance,
        unsynced_steps=skipped,
        ranks_differing_from_rank0=sorted(bad_ranks),
    )
