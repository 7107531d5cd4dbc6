"""What ddpbench sees of a user's training script from inside its process, without changing it.

Hooks, installed before the script runs:
- init_process_group: the run's --pg-timeout where the script gives no timeout of its own;
- DistributedDataParallel's constructor: the model being trained (its knobs and buckets), and a
  forward pre-hook on it that counts the samples of every forward (the first tensor's leading
  dimension) and marks where a step's data was in hand;
  (and the autocast precision it runs in);
- the optimizers' global step hooks: a step ends when an optimizer holding the DDP model's
  parameters has stepped after a training forward (other optimizers, a GAN's second one or a
  second one over the DDP model's parameters, are part of the step); in
  the warm-up steps, a digest of the DDP model's gradients there, for the gradients_in_sync check;
- DistributedSampler's `__iter__`: the indices each rank read and the epoch the sampler was set
  to when it handed them out, for the shard and reshuffle checks, as the worker's own sampler
  records them.

The hot path pays a few attribute stores and one clock mark per step, the clock the worker uses
(a CUDA event on GPUs, never a synchronize inside the loop).
"""

from __future__ import annotations

import operator
import time
import weakref
from collections.abc import Callable
from datetime import timedelta

import torch
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data.distributed import DistributedSampler

from ddpbench.worker.checks import gradient_digest
from ddpbench.worker.clock import StepClock


class ScriptNotMeasurable(RuntimeError):
    """The script runs, but not as DDP training ddpbench can measure."""


class NotDDPTraining(BaseException):
    """Raised from an optimizer hook when the script trains, but not through DDP. A BaseException,
    so that the script's own `except Exception` cannot keep it training; the worker turns it into
    ScriptNotMeasurable, the error torchrun records."""


# A script that steps an optimizer this many times, or for this long, without training through a
# DDP model is stopped: left alone, each rank would train by itself for as long as the script runs.
UNDISTRIBUTED_STEPS, UNDISTRIBUTED_S = 20, 60.0


class StopScript(BaseException):
    """Raised at a step boundary once ddpbench has measured what it came for. A BaseException, so
    that a script's own `except Exception` cannot swallow it."""


def leading_samples(args: tuple, kwargs: dict) -> int | None:
    """The batch size of a forward: the leading dimension of its first tensor argument."""
    for value in [*args, *kwargs.values()]:
        found = _first_tensor(value)
        if found is not None:
            return int(found.shape[0]) if found.dim() > 0 else 1
    return None


def token_ids_shape(args: tuple, kwargs: dict) -> list[int] | None:
    """[batch, tokens] when a forward's first tensor is a 2-D integer tensor: token ids."""
    for value in [*args, *kwargs.values()]:
        found = _first_tensor(value)
        if found is not None:
            integer = not found.dtype.is_floating_point and not found.dtype.is_complex and found.dtype != torch.bool
            return [int(n) for n in found.shape] if integer and found.dim() == 2 else None
    return None


def _first_tensor(value) -> torch.Tensor | None:
    if isinstance(value, torch.Tensor):
        return value
    if isinstance(value, list | tuple):
        for item in value:
            found = _first_tensor(item)
            if found is not None:
                return found
    if isinstance(value, dict):
        for item in value.values():
            found = _first_tensor(item)
            if found is not None:
                return found
    return None


class Pass:
    """One pass the loop began over its data: the epoch the sampler was set to (None where there is
    no DistributedSampler) and the indices handed out. Open while it is being read; full once read
    to its end; partial when another pass over the same data began first (a peek at one batch, a
    loop that broke off): no epoch, and no evidence for a check, whose indices are dropped."""

    def __init__(self, epoch: int | None, indices: list[int]):
        self.epoch, self.indices, self.state = epoch, indices, "open"


class PassLog:
    """Per sampler (or loader): its first passes that were not abandoned, which the reshuffle and
    shard checks read, and how many were."""

    # Two counted passes are what the checks need; more would only hold memory.
    KEPT = 2

    def __init__(self) -> None:
        self.kept: dict[int, list[Pass]] = {}
        self.partial: dict[int, int] = {}

    def _begin(self, key: int, new: Pass) -> Pass | None:
        kept = self.kept.setdefault(key, [])
        self.partial.setdefault(key, 0)
        for earlier in kept:
            if earlier.state == "open":  # a new pass began before this one was read to its end
                earlier.state, earlier.indices = "partial", []
                self.partial[key] += 1
        kept[:] = [p for p in kept if p.state != "partial"]
        if len(kept) >= self.KEPT:
            return None
        kept.append(new)
        return new


class SamplerLog(PassLog):
    """The DistributedSamplers the script made, in order, and their passes."""

    def __init__(self) -> None:
        super().__init__()
        self.samplers: list[DistributedSampler] = []

    def began(self, sampler: DistributedSampler, indices: list[int]) -> Pass | None:
        if id(sampler) not in self.kept:
            self.samplers.append(sampler)
        return self._begin(id(sampler), Pass(sampler.epoch, indices))

    def passes(self, sampler: DistributedSampler) -> list[tuple[int, list[int]]]:
        """(epoch, indices) of the passes that count: full ones, and the one still being read."""
        return [(p.epoch, p.indices) for p in self.kept.get(id(sampler), [])]

    def partial_passes(self, sampler: DistributedSampler) -> int:
        return self.partial.get(id(sampler), 0)


class LoaderLog(PassLog):
    """The DataLoaders the script iterated over map-style datasets: the indices their batches were
    made of, whatever sampler or batch sampler chose them (a DistributedSampler, Accelerate's shard
    wrappers, a framework's own, a custom one), and how many each drew with gradients enabled, to
    tell the training loader from a validation one."""

    def __init__(self) -> None:
        super().__init__()
        # What the checks read of each loader; not its iterator, whose workers must be free to end.
        self.loaders: dict[int, tuple] = {}
        self.training_draws: dict[int, int] = {}

    def began(self, iterator) -> Pass | None:
        """A pass of the loader whose iterator this is (loaders are known by their index sampler:
        a DataLoader's iterator keeps no reference to the DataLoader)."""
        key = id(iterator._index_sampler)
        self.loaders.setdefault(key, (iterator._index_sampler, iterator._dataset, iterator._drop_last))
        return self._begin(key, Pass(None, []))

    def busiest(self) -> dict | None:
        """The training loader, described for the checks: the one that drew the most indices
        with gradients enabled (a validation loop runs under no_grad), then the most in all; None
        when the script iterated none."""
        if not self.kept:
            return None
        key = max(
            self.kept,
            key=lambda k: (self.training_draws.get(k, 0), sum(len(p.indices) for p in self.kept[k])),
        )
        sampler, dataset, drop_last = self.loaders[key]
        inner = getattr(sampler, "sampler", None)
        innermost = getattr(inner, "sampler", None) or getattr(inner, "batch_sampler", None)
        return {
            "passes": [(None, p.indices) for p in self.kept[key]],
            "full": [p.state == "full" for p in self.kept[key]],
            "partial_passes": self.partial[key],
            "dataset_length": _length(dataset),
            "drop_last": bool(drop_last),
            "batch_size": getattr(sampler, "batch_size", None),
            "sampler": " > ".join(type(s).__name__ for s in (sampler, inner, innermost) if s is not None),
            "repeats": next(filter(None, map(_repeats_by_design, (sampler, inner, innermost))), None),
        }


def _length(dataset) -> int | None:
    try:
        return len(dataset)
    except TypeError:  # a map-style dataset without __len__: nothing to check coverage against
        return None


def _repeats_by_design(sampler) -> str | None:
    """A sampler that hands each sample to several ranks on purpose (repeated augmentation, as
    timm's RepeatAugSampler and DeiT's RASampler do): named, so the shard check does not fail it."""
    if sampler is None:
        return None
    name = type(sampler).__name__
    repeats = getattr(sampler, "num_repeats", None)
    if (isinstance(repeats, int) and repeats > 1) or "repeataug" in name.lower() or name == "RASampler":
        return f"{name} hands each sample to {repeats if isinstance(repeats, int) else 'several'} ranks by design"
    return None


def _reference(obj):
    """A weak reference where the object takes one (a generator does), so that an abandoned pass's
    iterator is not kept alive; the object itself otherwise."""
    try:
        return weakref.ref(obj)
    except TypeError:
        return lambda: obj


def _record_batch(record: Pass, batch) -> None:
    """Indices as a sampler gives them: ints, numpy integers, a tensor or an array of them."""
    if isinstance(batch, torch.Tensor):
        batch = batch.tolist()
    elif hasattr(batch, "tolist") and not isinstance(batch, list | tuple):  # numpy array or scalar
        batch = batch.tolist()
    for index in batch if isinstance(batch, list | tuple) else [batch]:
        try:
            record.indices.append(operator.index(index))
        except TypeError:
            pass  # not an index (a sampler that yields keys, say): nothing to check with


class Observer:
    """The state the hooks share. `on_step_end(step)` is called after every step the script
    completes, with the count of completed steps; it may raise StopScript."""

    def __init__(self, pg_timeout_s: float | None = None) -> None:
        self.pg_timeout_s = pg_timeout_s
        self.precision: str | None = None
        self.ddp: DistributedDataParallel | None = None
        self.ddp_count = 0
        self._ddp_parameters: set[int] = set()
        self._owners: dict[int, bool] = {}
        self.steps_done = 0
        self.samples_in_step = 0
        self.samples_per_step: list[int] = []
        self.forwards_in_step = 0
        self.forwards_per_step: list[int] = []
        self.training_forwards = 0
        self.token_shape: list[int] | None = None
        """(batch, tokens) when the first training forward's first tensor is integer ids."""
        self.eval_forwards = 0
        self.eval_steps: set[int] = set()
        self.steps_without_ddp = 0
        self.first_step_without_ddp_at: float | None = None
        self.optimizers_seen = 0
        self.clock: StepClock | None = None
        self.timing = False
        self.on_step_end: Callable[[int], None] = lambda steps: None
        self.beat = None  # the heartbeat, once the process group exists
        self.sampler_log = SamplerLog()
        self.loader_log = LoaderLog()
        # The gradients every rank stepped with, digested at the optimizer's step until the session
        # turns it off (the timed window pays nothing for it); steps after a backward the script
        # declared unsynced (no_sync(), require_backward_grad_sync = False) are counted, not digested.
        self.digesting = True
        self.gradient_digests: list[torch.Tensor] = []
        self.unsynced_steps = 0
        self.synced_backward = True
        self.digest_error: str | None = None
        self._owner_steps_open = 0  # steps of optimizers over the DDP model's parameters under way
        self._removers: list[Callable[[], None]] = []

    # -- DDP -----------------------------------------------------------------------------------
    def saw_ddp(self, model: DistributedDataParallel) -> None:
        self.ddp_count += 1
        if self.ddp is None:  # the first DDP model is the one trained; a second is reported
            self.ddp = model
            self._ddp_parameters = {id(p) for p in model.parameters()}
            self._removers.append(model.register_forward_pre_hook(self._before_forward, with_kwargs=True).remove)
            self._removers.append(model.register_forward_hook(self._after_forward).remove)

    def _before_forward(self, module, args, kwargs):
        if not torch.is_grad_enabled() or torch.is_inference_mode_enabled():
            # Evaluation through the DDP model (nanoGPT's estimate_loss, a validation pass): no
            # training batch, and no mark. Counted, with the step it fell in, for the record. eval()
            # alone is not evaluation: fine-tuning with frozen BatchNorm trains in eval mode.
            self.eval_forwards += 1
            self.eval_steps.add(self.steps_done)
            return
        self.training_forwards += 1
        # The reducer reads this flag in the forward: the backward after it all-reduces only if set.
        self.synced_backward = bool(getattr(module, "require_backward_grad_sync", True))
        if self.training_forwards == 1:
            self.token_shape = token_ids_shape(args, kwargs)
        if self.timing and self.forwards_in_step == 0 and self.clock is not None:
            self.clock.mark_data()  # the step's first batch is in hand
        self.forwards_in_step += 1
        self.samples_in_step += leading_samples(args, kwargs) or 0
        if self.precision is None:  # autocast is the script's: read it where the model runs
            self.precision = autocast_precision(self.device())
        if self.beat is not None:
            self.beat.where = "forward"

    def _after_forward(self, module, args, output):
        if self.beat is not None:
            self.beat.where = "backward"  # what follows a training forward

    # -- optimizers ----------------------------------------------------------------------------
    def owns_ddp_parameters(self, optimizer: torch.optim.Optimizer) -> bool:
        key = id(optimizer)
        if key not in self._owners:
            self._owners[key] = any(
                id(p) in self._ddp_parameters for group in optimizer.param_groups for p in group["params"]
            )
        return self._owners[key]

    def before_optimizer_step(self, optimizer, args, kwargs) -> None:
        if self.ddp is not None and self.owns_ddp_parameters(optimizer):
            self._owner_steps_open += 1
            if self.beat is not None:
                self.beat.where = "optimizer"

    def after_optimizer_step(self, optimizer, args, kwargs) -> None:
        self.optimizers_seen += 1
        if self.ddp is None:
            self._training_without_ddp()
            return
        if not self.owns_ddp_parameters(optimizer):
            return
        self._owner_steps_open = max(0, self._owner_steps_open - 1)
        if self._owner_steps_open:
            # Stepped inside another one's step (ZeroRedundancyOptimizer steps its local optimizer, then
            # broadcasts the updated shards): the outer one ends the step, once the replicas agree again.
            return
        if self.forwards_in_step == 0 and self.training_forwards > 0:
            # Another optimizer over the DDP model's parameters in the step just ended (one per part
            # of the model): no training forward since, so no new step, whose batch would read 0.
            return
        if self.digesting:
            self._digest_gradients()
        self.steps_done += 1
        if self.steps_done >= UNDISTRIBUTED_STEPS and self.training_forwards == 0:
            raise NotDDPTraining(
                f"the script stepped the DDP model's optimizer {self.steps_done} times but never ran the DDP "
                "model's forward in training mode (it calls the module inside, or only evaluates): no gradient "
                "is all-reduced, so each rank trains alone; call the DDP model itself in train() mode"
            )
        self.samples_per_step.append(self.samples_in_step)
        self.forwards_per_step.append(self.forwards_in_step)
        self.samples_in_step = self.forwards_in_step = 0
        if self.timing and self.clock is not None:
            self.clock.mark()
        if self.beat is not None:
            self.beat.step, self.beat.where = self.steps_done, "data"
        self.on_step_end(self.steps_done)

    def _digest_gradients(self) -> None:
        """After the optimizer stepped, not before: Lightning (and any optimizer.step(closure)) runs
        forward and backward inside step(), so a pre-hook would see the previous step's gradients.
        The gradients are read as they are after the step (optimizers read them, they do not change
        them; GradScaler has unscaled them in place before). All of the DDP model's parameters, in
        its order, not the optimizer's own: an optimizer over a subset (ZeroRedundancyOptimizer's
        local one, one per part of the model) holds different parameters on each rank."""
        if not self.synced_backward:
            self.unsynced_steps += 1
            return
        try:
            self.gradient_digests.append(gradient_digest(self.ddp.parameters()))
        except Exception as exc:  # gradients of a kind the digest cannot read: the script must go on
            self.digesting = False
            self.digest_error = f"{type(exc).__name__}: {exc}"

    def _training_without_ddp(self) -> None:
        self.steps_without_ddp += 1
        now = time.monotonic()
        if self.first_step_without_ddp_at is None:
            self.first_step_without_ddp_at = now
        elapsed = now - self.first_step_without_ddp_at
        if self.steps_without_ddp >= UNDISTRIBUTED_STEPS or elapsed >= UNDISTRIBUTED_S:
            raise NotDDPTraining(
                f"the script stepped an optimizer {self.steps_without_ddp} times in {elapsed:.0f} s but built no "
                "DistributedDataParallel model: each rank trains alone, and --script measures DDP training "
                "(wrap the model: DistributedDataParallel(model, device_ids=[local_rank]))"
            )

    # -- installing ----------------------------------------------------------------------------
    def install(self) -> None:
        from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

        self._removers.append(register_optimizer_step_pre_hook(self.before_optimizer_step).remove)
        self._removers.append(register_optimizer_step_post_hook(self.after_optimizer_step).remove)
        self._patch_init_process_group()
        self._patch_ddp()
        self._patch_data_parallel()
        self._patch_sampler()
        self._patch_loader()

    def uninstall(self) -> None:
        for remove in reversed(self._removers):
            remove()
        self._removers.clear()

    def _patch_ddp(self) -> None:
        original = DistributedDataParallel.__init__
        observer = self

        def init(model, *args, **kwargs):
            original(model, *args, **kwargs)
            observer.saw_ddp(model)

        DistributedDataParallel.__init__ = init
        self._removers.append(lambda: setattr(DistributedDataParallel, "__init__", original))

    def _patch_init_process_group(self) -> None:
        """The run's process-group timeout, where the script sets none: a hung collective then
        fails after --pg-timeout, as in a workload's run, instead of torch's 30 minutes."""
        import torch.distributed as dist

        original = dist.init_process_group
        timeout_s = self.pg_timeout_s

        def init_process_group(*args, **kwargs):
            if timeout_s is not None and kwargs.get("timeout") is None:
                kwargs["timeout"] = timedelta(seconds=timeout_s)
            return original(*args, **kwargs)

        dist.init_process_group = init_process_group
        self._removers.append(lambda: setattr(dist, "init_process_group", original))

    def _patch_data_parallel(self) -> None:
        original = torch.nn.DataParallel.__init__

        def refuse(model, *args, **kwargs):
            raise ScriptNotMeasurable(
                "the script wraps its model in nn.DataParallel: --script measures DDP training; "
                "DataParallel is measured with workloads (--workload ... --strategy dp)"
            )

        torch.nn.DataParallel.__init__ = refuse
        self._removers.append(lambda: setattr(torch.nn.DataParallel, "__init__", original))

    def _patch_sampler(self) -> None:
        original_iter = DistributedSampler.__iter__
        log = self.sampler_log

        def recording_iter(sampler):
            indices = list(original_iter(sampler))
            record = log.began(sampler, indices)
            if record is None:
                return iter(indices)
            return _read_to_the_end(indices, record)

        DistributedSampler.__iter__ = recording_iter
        self._removers.append(lambda: setattr(DistributedSampler, "__iter__", original_iter))

    def _patch_loader(self) -> None:
        """A DataLoader iterator over a map-style dataset draws each batch's indices through
        `_next_index` (workers or not): recorded there, and a new index iterator is a new pass
        (torch's private hook point; on a torch without it the checks use DistributedSampler alone)."""
        from torch.utils.data import dataloader

        base = getattr(dataloader, "_BaseDataLoaderIter", None)
        original = getattr(base, "_next_index", None)
        if original is None:
            return
        log = self.loader_log

        def next_index(iterator):
            if iterator._dataset_kind != dataloader._DatasetKind.Map:
                return original(iterator)
            current = iterator._sampler_iter
            seen = iterator.__dict__.get("_ddpbench_pass")
            if seen is None or seen[0]() is not current:
                seen = (_reference(current), log.began(iterator))
                iterator._ddpbench_pass = seen
            record = seen[1]
            if torch.is_grad_enabled():
                key = id(iterator._index_sampler)
                log.training_draws[key] = log.training_draws.get(key, 0) + 1
            try:
                batch = original(iterator)
            except StopIteration:
                if record is not None and record.state == "open":
                    record.state = "full"
                raise
            if record is not None:
                _record_batch(record, batch)
            return batch

        base._next_index = next_index
        self._removers.append(lambda: setattr(base, "_next_index", original))

    # -- reading -------------------------------------------------------------------------------
    def knobs(self) -> dict:
        """What the script gave DDP, read from the model itself."""
        model = self.ddp
        hook = getattr(model, "_comm_hooks", None) or []
        hook_names = [getattr(entry[0], "__name__", str(entry[0])) for entry in hook if entry]
        return {
            "bucket_cap_mb": model.bucket_bytes_cap / (1024 * 1024),
            "gradient_as_bucket_view": bool(model.gradient_as_bucket_view),
            "static_graph": bool(model.static_graph),
            "find_unused_parameters": bool(model.find_unused_parameters),
            # torch 2.14 renamed broadcast_buffers to forward_sync_buffers
            "broadcast_buffers": bool(
                getattr(model, "forward_sync_buffers", getattr(model, "broadcast_buffers", True))
            ),
            "comm_hook": COMM_HOOK_NAMES.get(hook_names[0], hook_names[0]) if hook_names else "allreduce",
        }

    def device(self) -> torch.device:
        first = next(self.ddp.parameters(), None)
        return first.device if first is not None else torch.device("cpu")


def _read_to_the_end(indices: list[int], record: Pass):
    """The pass's indices, marking it full when the loop has read the last of them."""
    yield from indices
    if record.state == "open":
        record.state = "full"


# torch's own hooks, by the names ddpbench's knobs give them
COMM_HOOK_NAMES = {
    "allreduce_hook": "allreduce",
    "fp16_compress_hook": "fp16_compress",
    "bf16_compress_hook": "bf16_compress",
}


def autocast_precision(device: torch.device) -> str:
    if not torch.is_autocast_enabled(device.type):
        return "fp32"
    dtype = torch.get_autocast_dtype(device.type)
    return {torch.bfloat16: "bf16", torch.float16: "fp16"}.get(dtype, str(dtype).removeprefix("torch."))
