"""The gradient timeline phase: when, within a step, each parameter's gradient became ready, with
DDP's all-reduce and without it (`no_sync()`), and what casting a gradient costs. `ddpbench project`
replays a step from it.

The steps come from the in-process ablation (`ddpbench.worker.ablation`): the module alone and
unwrapped, through DDP over a one-rank group, through the job's DDP, and under `no_sync()`, in
rounds that take turns, so that every kind sees the same machine state and each round is a paired
sample. It runs
last, after the no_sync phase: like that phase it lets replicas drift apart, which no check looks
at any more.

Hooks (all removed afterwards): a forward pre-hook and a forward hook on the wrapped module, a
gradient hook on its output (backward reaches the model), `register_post_accumulate_grad_hook` on
every parameter (its gradient is ready for DDP's bucket), and the optimizer's step pre/post hooks.
All sit on the module, its parameters and the optimizer, none on a wrapper: they fire for every
kind of step alike, unwrapped included.
On CPU a mark is perf_counter; on GPUs a CUDA event on the current stream, read after the step.

Then the contention probe: how much backward and an all-reduce slow each other when they run at
the same time (on CPU, gloo's threads and backward share the cores; on GPUs, NCCL's kernels and
backward share the SMs and memory). Its all-reduce is sized to last about as long as backward
alone. Each round, after a barrier: that all-reduce alone; one no_sync step (backward alone); one
no_sync step that starts the same all-reduce the moment backward starts. The replay applies the
rates this gives while its own all-reduces overlap backward, instead of assuming they do not
interfere. With one rank there is nothing to contend with, and no probe.
"""

from __future__ import annotations

import statistics
import time

import torch
import torch.distributed as dist

from ddpbench.worker.ablation import extra_rounds, run_ablation, step_kinds

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
        self.on_backward_start = None
        """Called when backward reaches the model (the contention probe starts its all-reduce there)."""
        self.on_optimizer_start = None
        """Called before the optimizer's step (the probe waits for its all-reduce there, as DDP does)."""
        self.backward_hooked = False
        """Whether the last forward's output could mark the start of backward (a tensor with grad)."""
        self.handles = [
            module.register_forward_pre_hook(lambda *_: self._mark("forward_start_s")),
            module.register_forward_hook(self._on_forward_end),
            optimizer.register_step_pre_hook(self._on_optimizer_start),
            optimizer.register_step_post_hook(lambda *_: self._mark("optimizer_end_s")),
        ]
        for index, param in enumerate(self.params):
            self.handles.append(param.register_post_accumulate_grad_hook(self._ready_hook(index)))

    def _mark(self, name: str) -> None:
        self.marks[name] = self.clock.now()

    def _on_forward_end(self, module, inputs, output) -> None:
        self._mark("forward_end_s")
        first = _first_tensor_with_grad(output)
        self.backward_hooked = first is not None
        if self.backward_hooked:
            first.register_hook(self._on_backward_start)

    def _on_optimizer_start(self, *_) -> None:
        if self.on_optimizer_start is not None:
            self.on_optimizer_start()
        self._mark("optimizer_start_s")

    def _on_backward_start(self, grad) -> None:
        self._mark("backward_start_s")
        if self.on_backward_start is not None:
            self.on_backward_start()

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


def _first_tensor_with_grad(output, depth: int = 3):
    """The first tensor that backward will reach in a forward's output: the output itself, or
    inside tuples, lists and dicts (Hugging Face models return a ModelOutput, a dict of the loss
    and the logits), a few levels deep. None when there is none."""
    if isinstance(output, torch.Tensor):
        return output if output.requires_grad else None
    if depth == 0:
        return None
    items = output.values() if isinstance(output, dict) else output if isinstance(output, tuple | list) else ()
    return next((found for item in items if (found := _first_tensor_with_grad(item, depth - 1)) is not None), None)


def timeline_phase(
    ddp_model,
    optimizer,
    step_on,
    batches,
    device: torch.device,
    blocks: int,
    rank: int,
    world_size: int,
    solo_step_on=None,
    unwrapped_step_on=None,
    counters=None,
) -> dict:
    """The in-process ablation's rounds (`ddpbench.worker.ablation`: the module alone, unwrapped,
    through DDP over a one-rank group, through the job's DDP, and under no_sync()), every step
    marked; cast costs; the contention probe."""
    timeline = GradTimeline(ddp_model, optimizer, device)
    kinds = step_kinds(ddp_model, step_on, world_size, solo_step_on, unwrapped_step_on)
    try:
        found = run_ablation(timeline, kinds, batches, blocks, rank, world_size, counters, extra_rounds(blocks))
        grad_bytes = [p.numel() * p.element_size() for p in timeline.params]
        contention = contention_probe(ddp_model, timeline, step_on, batches, device, sum(grad_bytes))
    finally:
        timeline.remove()
    return {
        "param_names": timeline.names,
        "param_bytes": grad_bytes,
        **found,
        "ddp_lead_in": True,
        "cast_cost": cast_costs(sum(grad_bytes), device, world_size),
        "contention": contention,
    }


class ConcurrentAllReduce:
    """One all-reduce started from inside backward, timed from its start to its completion.

    CPU: perf_counter when it is started, and in a callback chained to its future (gloo completes
    the future on its own thread). GPU: a side stream waits for the compute stream to reach the
    start of backward (so the collective starts there on the device, not when the host gets
    ahead), then events bracket the collective on that stream."""

    def __init__(self, buffer: torch.Tensor, device: torch.device):
        self.buffer, self.device = buffer, device
        self.cuda = device.type == "cuda"
        self.stream = torch.cuda.Stream(device) if self.cuda else None
        self.work = self.done = self.begin = self.end = None

    def start(self) -> None:
        if self.cuda:
            reached = torch.cuda.Event()
            reached.record()  # on the compute stream, where backward is
            self.begin, self.end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            with torch.cuda.stream(self.stream):
                self.stream.wait_event(reached)
                self.begin.record()
                self.work = dist.all_reduce(self.buffer, async_op=True)
                self.work.wait()  # the side stream (not the host) waits for the collective
                self.end.record()
            return
        self.begin = time.perf_counter()
        self.work = dist.all_reduce(self.buffer, async_op=True)
        self.done = self.work.get_future().then(self._finished)

    def _finished(self, future) -> None:
        self.end = time.perf_counter()

    def wait(self) -> None:
        """Before the optimizer, as DDP waits for its buckets: the optimizer never overlaps it."""
        if self.work is None:  # never started (backward's start was not seen)
            return
        if self.cuda:
            torch.cuda.current_stream(self.device).wait_event(self.end)
        else:
            self.done.wait()

    def seconds(self) -> float:
        if self.work is None:
            return 0.0  # not a measurement; the analysis drops rounds with a zero
        if self.cuda:
            torch.cuda.synchronize(self.device)  # sync point: after the probe's step
            return self.begin.elapsed_time(self.end) / 1000.0
        self.done.wait()  # the chained future: the callback has run
        return self.end - self.begin


def _all_reduce_alone_s(buffer: torch.Tensor, device: torch.device) -> float:
    """One all-reduce after a barrier, timed as the concurrent one is: CUDA events around it on
    the device (the same clock as ConcurrentAllReduce), perf_counter on CPU."""
    dist.barrier()
    if device.type == "cuda":
        torch.cuda.synchronize(device)  # sync point: nothing else queued before the collective
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        dist.all_reduce(buffer)  # the current stream waits for NCCL's
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1000.0
    started = time.perf_counter()
    dist.all_reduce(buffer)
    return time.perf_counter() - started


def _backward_span(step: dict) -> float:
    ready = [r for r in step["grad_ready_s"] if r is not None]
    return max(ready) - step["backward_start_s"] if ready and step["backward_start_s"] is not None else 0.0


PROBE_ROUNDS = 5


def contention_probe(
    ddp_model,
    timeline: GradTimeline,
    step_on,
    batches,
    device: torch.device,
    grad_bytes: int,
    rounds: int = PROBE_ROUNDS,
) -> dict | None:
    """Per round: the all-reduce alone, backward alone, and both at once (see the module's
    docstring). None where it cannot say anything: one rank (no network to contend with), or a
    model whose output cannot mark the start of backward (the same on every rank)."""
    if dist.get_world_size() < 2:
        return None
    with ddp_model.no_sync():
        backward_s = _backward_span(timeline.step(step_on, next(batches)))
    if not timeline.backward_hooked:
        return None
    # Size the all-reduce to last about as long as backward: then neither finishes long before
    # the other, and the overlap that the rates are divided by is not a sliver.
    full = torch.ones(max(1, grad_bytes // 4), device=device)
    _all_reduce_alone_s(full, device)  # warm-up: the first call on a new buffer size pays extra
    comm_s = _all_reduce_alone_s(full, device)
    wanted = int(grad_bytes * backward_s / comm_s) if comm_s > 0 else grad_bytes
    size = torch.tensor([float(min(4 * grad_bytes, max(64 * 1024, wanted)))], device=device)
    dist.all_reduce(size, op=dist.ReduceOp.MAX)  # every rank must all-reduce the same size
    buffer = torch.ones(max(1, int(size.item()) // 4), device=device)  # float32, as DDP's buckets
    found: dict = {
        "probe_bytes": buffer.numel() * 4,
        "comm_alone_s": [],
        "backward_alone_s": [],
        "backward_with_comm_s": [],
        "comm_with_backward_s": [],
    }
    _all_reduce_alone_s(buffer, device)
    for _ in range(rounds):
        found["comm_alone_s"].append(_all_reduce_alone_s(buffer, device))
        dist.barrier()
        with ddp_model.no_sync():
            found["backward_alone_s"].append(_backward_span(timeline.step(step_on, next(batches))))
        probe = ConcurrentAllReduce(buffer, device)
        dist.barrier()
        timeline.on_backward_start, timeline.on_optimizer_start = probe.start, probe.wait
        try:
            with ddp_model.no_sync():
                found["backward_with_comm_s"].append(_backward_span(timeline.step(step_on, next(batches))))
        finally:
            timeline.on_backward_start = timeline.on_optimizer_start = None
        found["comm_with_backward_s"].append(probe.seconds())
    return found


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


CALLS = 100


def cast_costs(total_bytes: int, device: torch.device, world_size: int) -> dict:
    """Seconds per byte of fp32 gradient for what the compression hooks and DDP's bucket copies do:
    compress = cast to half and divide by the world size (fp16/bf16_compress_hook, on the thread
    that runs backward); decompress = copy the half result back into the fp32 bucket; copy = one
    fp32 copy (DDP copies gradients into and out of buckets unless gradient_as_bucket_view);
    scaled copy = the same copy divided by the world size on the way."""
    elements = max(1, total_bytes // 4)
    flat = torch.randn(elements, device=device)
    target = torch.empty_like(flat)
    costs: dict = {
        "copy_s_per_byte": _median_seconds(lambda: target.copy_(flat), device) / (elements * 4),
        # Without a comm hook DDP divides while it copies a gradient into its bucket
        # (the reducer's mul_out), a slower pass than a plain copy.
        "scaled_copy_s_per_byte": _median_seconds(lambda: torch.mul(flat, 1.0 / world_size, out=target), device)
        / (elements * 4),
    }
    # DDP copies every parameter's gradient on its own (into the bucket, and back unless
    # gradient_as_bucket_view): each copy also pays a fixed cost per call (dispatch, a kernel launch).
    tiny, tiny_target = torch.ones(1, device=device), torch.empty(1, device=device)
    costs["copy_call_s"] = _median_seconds(lambda: [tiny_target.copy_(tiny) for _ in range(CALLS)], device) / CALLS
    for hook, dtype in (("fp16_compress", torch.float16), ("bf16_compress", torch.bfloat16)):
        half = flat.to(dtype)
        costs[hook] = {
            # the lambdas are called here, in this iteration: binding the loop variables is for the linter
            "compress_s_per_byte": _median_seconds(lambda d=dtype: flat.to(d).div_(world_size), device)
            / (elements * 4),
            "decompress_s_per_byte": _median_seconds(lambda h=half: target.copy_(h), device) / (elements * 4),
        }
    return costs


def timeline_record(found: list[dict]):
    """The ranks' timeline phases as the record's `timeline` part; None when none ran."""
    import msgspec

    from ddpbench.records.schema import Timeline

    ranks = [f for f in sorted(found, key=lambda f: f["rank"]) if f.get("timeline")]
    if not ranks:
        return None
    first = ranks[0]["timeline"]
    return msgspec.convert(
        {
            "param_names": first["param_names"],
            "param_bytes": first["param_bytes"],
            "cast_cost": first["cast_cost"],
            "ddp_lead_in": first.get("ddp_lead_in", False),
            # Rank 0's blocks; every rank ran the same blocks between the same barriers.
            "ladder": first.get("ladder"),
            "by_rank": [
                {
                    "rank": f["rank"],
                    "with_ddp": f["timeline"]["with_ddp"],
                    "without_allreduce": f["timeline"]["without_allreduce"],
                    "solo": f["timeline"].get("solo"),
                    "unwrapped": f["timeline"].get("unwrapped"),
                    "alone": f["timeline"].get("alone"),
                    "ladder_wall_s": (f["timeline"].get("ladder") or {}).get("wall_s"),
                    "contention": f["timeline"].get("contention"),
                }
                for f in ranks
            ],
        },
        Timeline,
    )
