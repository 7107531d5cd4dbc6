"""The gradient timeline phase: when, within a step, each parameter's gradient became ready, with
DDP's all-reduce and without it (`no_sync()`), and what casting a gradient costs. `ddpbench project`
replays a step from it.

Steps alternate between plain DDP and `no_sync()` (same model, fresh batches), so both see the
same machine state; the backward alone vs under DDP difference is the slowdown that overlapping
communication causes, measured rather than assumed zero. It runs last, after the no_sync phase:
like that phase it lets replicas drift apart, which no check looks at any more.

Hooks (all removed afterwards): a forward pre-hook and a forward hook on the wrapped module, a
gradient hook on its output (backward reaches the model), `register_post_accumulate_grad_hook` on
every parameter (its gradient is ready for DDP's bucket), and the optimizer's step pre/post hooks.
On CPU a mark is perf_counter; on GPUs a CUDA event on the current stream, read after the step.
"""

from __future__ import annotations

import contextlib
import statistics
import time

import torch

MARKS = ("forward_start_s", "forward_end_s", "backward_start_s", "optimizer_start_s", "optimizer_end_s")


class _Clock:
    """Marks on the device's own timeline: perf_counter on CPU, CUDA events on GPUs."""

    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda"

    def now(self):
        if self.cuda:
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            return event
        return time.perf_counter()

    def seconds_between(self, start, end) -> float:
        if self.cuda:
            return start.elapsed_time(end) / 1000.0  # after the step's synchronize
        return end - start


class GradTimeline:
    """Hooks that mark one step's forward, backward, per-parameter gradient readiness and optimizer."""

    def __init__(self, ddp_model, optimizer, device: torch.device):
        self.clock = _Clock(device)
        self.device = device
        module = ddp_model.module
        self.names = [name for name, p in module.named_parameters() if p.requires_grad]
        self.params = [p for p in module.parameters() if p.requires_grad]
        self.marks: dict = {}
        self.ready: list = [None] * len(self.params)
        self.handles = [
            module.register_forward_pre_hook(lambda *_: self._mark("forward_start_s")),
            module.register_forward_hook(self._on_forward_end),
            optimizer.register_step_pre_hook(lambda *_: self._mark("optimizer_start_s")),
            optimizer.register_step_post_hook(lambda *_: self._mark("optimizer_end_s")),
        ]
        for index, param in enumerate(self.params):
            self.handles.append(param.register_post_accumulate_grad_hook(self._ready_hook(index)))

    def _mark(self, name: str) -> None:
        self.marks[name] = self.clock.now()

    def _on_forward_end(self, module, inputs, output) -> None:
        self._mark("forward_end_s")
        first = output if isinstance(output, torch.Tensor) else next(
            (o for o in (output if isinstance(output, (tuple, list)) else []) if isinstance(o, torch.Tensor)), None)
        if first is not None and first.requires_grad:
            first.register_hook(lambda grad: self._mark("backward_start_s"))

    def _ready_hook(self, index: int):
        def hook(param) -> None:
            self.ready[index] = self.clock.now()
        return hook

    def step(self, step_on, batch) -> dict:
        """Run one step and return its marks in seconds from the step's start (data excluded)."""
        self.marks, self.ready = {}, [None] * len(self.params)
        start = self.clock.now()
        step_on(batch)
        end = self.clock.now()
        if self.clock.cuda:
            torch.cuda.synchronize(self.device)  # sync point: read the events only after the step's work
        since = lambda mark: None if mark is None else self.clock.seconds_between(start, mark)  # noqa: E731
        result = {name: since(self.marks.get(name)) for name in MARKS}
        if result["backward_start_s"] is None:  # output not a tensor: backward starts after forward
            result["backward_start_s"] = result["forward_end_s"]
        result["grad_ready_s"] = [since(mark) for mark in self.ready]
        result["step_s"] = self.clock.seconds_between(start, end)
        return result

    def remove(self) -> None:
        for handle in self.handles:
            handle.remove()


def timeline_phase(ddp_model, optimizer, step_on, batches, device: torch.device, pairs: int, world_size: int) -> dict:
    """`pairs` steps with DDP's all-reduce and `pairs` under no_sync(), alternating; plus cast costs."""
    timeline = GradTimeline(ddp_model, optimizer, device)
    with_ddp, without = [], []
    try:
        for index in range(2 * pairs):
            started = time.perf_counter()
            batch = next(batches)
            data_s = time.perf_counter() - started
            syncing = index % 2 == 0
            with contextlib.nullcontext() if syncing else ddp_model.no_sync():
                step = timeline.step(step_on, batch)
            step["data_s"] = data_s
            (with_ddp if syncing else without).append(step)
    finally:
        timeline.remove()
    grad_bytes = [p.numel() * p.element_size() for p in timeline.params]
    return {"param_names": timeline.names, "param_bytes": grad_bytes, "with_ddp": with_ddp,
            "without_allreduce": without, "cast_cost": cast_costs(sum(grad_bytes), device, world_size)}


def _median_seconds(action, device: torch.device, repeats: int = 5) -> float:
    times = []
    for _ in range(repeats + 1):
        if device.type == "cuda":
            torch.cuda.synchronize(device)  # sync point: time only this action's work
        started = time.perf_counter()
        action()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        times.append(time.perf_counter() - started)
    return statistics.median(times[1:])  # the first call pays for allocation


def cast_costs(total_bytes: int, device: torch.device, world_size: int) -> dict:
    """Seconds per byte of fp32 gradient for what the compression hooks and DDP's bucket copies do:
    compress = cast to half and divide by the world size (fp16/bf16_compress_hook, on the thread
    that runs backward); decompress = copy the half result back into the fp32 bucket; copy = one
    fp32 copy (DDP copies gradients into and out of buckets unless gradient_as_bucket_view)."""
    elements = max(1, total_bytes // 4)
    flat = torch.randn(elements, device=device)
    target = torch.empty_like(flat)
    costs: dict = {"copy_s_per_byte": _median_seconds(lambda: target.copy_(flat), device) / (elements * 4)}
    for hook, dtype in (("fp16_compress", torch.float16), ("bf16_compress", torch.bfloat16)):
        half = flat.to(dtype)
        costs[hook] = {
            "compress_s_per_byte": _median_seconds(lambda: flat.to(dtype).div_(world_size), device) / (elements * 4),
            "decompress_s_per_byte": _median_seconds(lambda: target.copy_(half), device) / (elements * 4),
        }
    return costs


TIMELINE_PAIRS = 6  # steps with DDP and as many without; a step of the tiny CPU workloads is ~0.1 s


def timeline_record(found: list[dict]):
    """The ranks' timeline phases as the record's `timeline` part; None when none ran."""
    import msgspec

    from ddpbench.records.schema import Timeline

    ranks = [f for f in sorted(found, key=lambda f: f["rank"]) if f.get("timeline")]
    if not ranks:
        return None
    first = ranks[0]["timeline"]
    return msgspec.convert({
        "param_names": first["param_names"], "param_bytes": first["param_bytes"],
        "cast_cost": first["cast_cost"],
        "by_rank": [{"rank": f["rank"], "with_ddp": f["timeline"]["with_ddp"],
                     "without_allreduce": f["timeline"]["without_allreduce"]} for f in ranks],
    }, Timeline)
