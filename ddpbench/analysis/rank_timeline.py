"""One rank's torch.profiler trace reduced to what comparing ranks needs: its profiler steps, its
collectives in the order each process group ran them, and the time its training phases took.
No torch.

A reduced trace is a few kilobytes per step whatever the trace's size, so a worker reads one trace,
sends this back and drops the trace: memory holds one trace per worker, and 1,024 ranks' reduced
traces fit a laptop.

Times are the trace's own microseconds (`ts`), kept beside the trace's base time in integer
nanoseconds: added together they would be about 1.8e15 us, where a double's resolution is a
quarter of a microsecond; the merge subtracts the bases first, in integers.

- GPU: collectives are the kernels whose name starts with `nccl` (`ncclKernel_*` before NCCL 2.19,
  `ncclDevKernel_*` after), grouped by the process group named in their arguments, else by their
  stream. A kernel belongs to the step its launch was in (correlation id), and the last step is
  dropped, as in `traces.py`. Its phase is the phase its launch was in: on the training thread the
  annotation around the launch (data loading, DDP's forward, the optimizer), on another thread
  (autograd's device threads) backward.
- CPU (gloo): collectives are the `gloo:*` annotations on gloo's threads, in the order they start.
  gloo's annotations carry no process group and no sequence number: they are one group, matched
  by order. Phases are the training thread's annotations: `enumerate(DataLoader)` (data),
  `DistributedDataParallel.forward` (forward), autograd's nodes (backward), `Optimizer.*`; a step
  without DDP's forward annotation takes its forward as the time from the batch to backward's
  first node.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import msgspec
import numpy as np

from ddpbench.analysis import intervals as iv
from ddpbench.analysis.traces import (
    PROFILER_STEP,
    TraceError,
    TraceEvent,
    TraceFile,
    closure_steps,
    rank_in_trace,
    read_trace,
    trace_decoder,
)

PHASES = ("data", "forward", "backward", "optimizer", "communication", "other", "idle")
"""What the critical path attributes a step's time to (`critical_path` says what `other` and
`idle` hold)."""
TRAINING_PHASES = ("data", "forward", "backward", "optimizer")
PHASE_PREFIXES = {
    "data": ("enumerate(DataLoader)",),
    "forward": ("DistributedDataParallel.forward", "DataParallel.forward"),
    "backward": ("autograd::engine::evaluate_function",),
    "optimizer": ("Optimizer.step#", "Optimizer.zero_grad#"),
}
GPU_KERNEL_CATEGORIES = {"kernel"}
LAUNCH_CATEGORIES = {"cuda_runtime", "cuda_driver"}
COLLECTIVE_PREFIXES = {"gpu": "nccl", "cpu": "gloo:"}
NCCL_KERNEL = re.compile(r"nccl(?:Dev)?Kernel_([A-Za-z]+)")


class _Args(msgspec.Struct):
    stream: Any = None
    correlation: Any = None
    group: Any = msgspec.field(default=None, name="Process Group Name")
    sequence: Any = msgspec.field(default=None, name="Seq")
    collective: Any = msgspec.field(default=None, name="Collective name")
    elements: Any = msgspec.field(default=None, name="In msg nelems")


_DECODER = trace_decoder(_Args)


class Collective(msgspec.Struct, array_like=True):
    """One collective as one rank saw it: `start` is when this rank arrived, `end` when it left."""

    group: str
    name: str
    start: float
    end: float
    sequence: int | None = None
    elements: int | None = None


class RankTimeline(msgspec.Struct):
    """One rank's trace, reduced. Times in the trace's microseconds; `base_ns` is its base time."""

    path: str
    rank: int
    host: str | None
    world_size: int | None
    backend: str | None
    kind: str
    base_ns: int
    steps: dict[int, tuple[float, float]]
    """Step number -> (start, end): the ProfilerStep annotation (CPU), first to last kernel (GPU)."""
    collectives: dict[int, list[Collective]]
    """Step number -> its collectives, in start order."""
    phases: dict[int, dict[str, tuple[list[float], list[float]]]]
    """Step number -> phase -> merged (starts, ends): when that phase kept this rank busy."""
    groups: list[str] = []
    """The process groups of distributedInfo's pg_config, as the trace lists them."""
    group_ranks: dict[str, list[int]] = {}
    """The ranks of each process group whose pg_config lists them; a group not here spans the job."""


@dataclass
class _Spans:
    """The training thread's annotated spans, by phase."""

    by_phase: dict = field(default_factory=lambda: {phase: [] for phase in TRAINING_PHASES})


def _phase_of(name: str) -> str | None:
    for phase, prefixes in PHASE_PREFIXES.items():
        if name.startswith(prefixes):
            return phase
    return None


def _rank_of(trace: TraceFile, path: str) -> int:
    rank, _ = rank_in_trace(trace, path)
    if rank is None:
        raise TraceError(f"{path}: no rank: the trace has no distributedInfo and its file name names no rank")
    return rank


def _collective_name(event: TraceEvent, kind: str) -> str:
    args = event.args
    if args is not None and isinstance(args.collective, str):
        return args.collective
    if kind == "gpu":
        match = NCCL_KERNEL.match(event.name)
        return match.group(1) if match else event.name.split("(")[0]
    return event.name


def _as_int(value) -> int | None:
    try:
        return int(value) if value is not None else None
    except (TypeError, ValueError):
        return None


def read_rank_timeline(path: str) -> RankTimeline:
    """Read one rank's trace and reduce it; TraceError names the file and the problem."""
    trace = read_trace(path, _DECODER)
    info = trace.distributedInfo or {}
    rank = _rank_of(trace, path)
    events = trace.traceEvents
    steps: dict[int, tuple[float, float]] = {}
    training_threads = set()
    launches = {}  # correlation id -> (launch time, launched from the training thread?)
    kernels = []
    for event in events:
        if event.ph != "X" or not isinstance(event.name, str):
            continue
        if event.name.startswith("ProfilerStep#"):
            match = PROFILER_STEP.match(event.name)
            if match:
                steps[int(match.group(1))] = (event.ts, event.ts + event.dur)
                training_threads.add((event.pid, event.tid))
        elif event.cat in GPU_KERNEL_CATEGORIES and event.args is not None and event.args.stream is not None:
            kernels.append(event)
    if not steps:
        raise TraceError(f"{path}: no ProfilerStep#N annotations; profile with a schedule and call prof.step()")
    kind = "gpu" if kernels else "cpu"
    spans = _Spans()
    cpu_collectives = []
    for event in events:
        if event.ph != "X" or not isinstance(event.name, str):
            continue
        if kind == "gpu" and event.cat in LAUNCH_CATEGORIES and event.args is not None:
            if event.args.correlation is not None:
                launches[event.args.correlation] = (event.ts, (event.pid, event.tid) in training_threads)
        elif (event.pid, event.tid) in training_threads:
            phase = _phase_of(event.name)
            if phase is not None:
                spans.by_phase[phase].append((event.ts, event.ts + event.dur))
        elif kind == "cpu" and event.name.startswith(COLLECTIVE_PREFIXES["cpu"]):
            cpu_collectives.append(event)
    # An optimizer step that holds a backward (a closure, as Lightning steps) is not the
    # optimizer's work: its wait for DDP's all-reduce would read as optimizer time. Its update ops
    # after the closure are left to `other`.
    closures = closure_steps(spans.by_phase["optimizer"], [start for start, _ in spans.by_phase["backward"]])
    spans.by_phase["optimizer"] = [span for span in spans.by_phase["optimizer"] if span not in closures]
    numbers = sorted(steps)
    starts = np.array([steps[n][0] for n in numbers])
    timeline = RankTimeline(
        path=path,
        rank=rank,
        host=trace.host_name,
        world_size=info.get("world_size") if isinstance(info.get("world_size"), int) else None,
        backend=info.get("backend"),
        kind=kind,
        base_ns=int(trace.baseTimeNanoseconds or 0),
        steps={},
        collectives={},
        phases={},
        groups=[str(g.get("pg_name")) for g in info.get("pg_config") or [] if isinstance(g, dict)],
        group_ranks={
            str(g.get("pg_name")): [int(r) for r in g["ranks"]]
            for g in info.get("pg_config") or []
            if isinstance(g, dict) and isinstance(g.get("ranks"), list) and all(isinstance(r, int) for r in g["ranks"])
        },
    )
    if kind == "cpu":
        _reduce_cpu(timeline, steps, numbers, starts, spans, cpu_collectives)
    else:
        _reduce_gpu(timeline, steps, numbers, starts, spans, kernels, launches)
    return timeline


def _step_index(starts: np.ndarray, times) -> np.ndarray:
    return np.searchsorted(starts, np.asarray(times, dtype=float), side="right") - 1


def _merged(rows: list[tuple[float, float]], low: float, high: float) -> tuple[list[float], list[float]]:
    if not rows:
        return [], []
    begin, finish = iv.clip(iv.merge(np.array([r[0] for r in rows]), np.array([r[1] for r in rows])), low, high)
    return begin.tolist(), finish.tolist()


def _reduce_cpu(timeline, steps, numbers, starts, spans, cpu_collectives) -> None:
    index = _step_index(starts, [event.ts for event in cpu_collectives])
    by_step: dict[int, list[Collective]] = {n: [] for n in numbers}
    for event, i in zip(cpu_collectives, index):
        if i < 0 or event.ts >= steps[numbers[i]][1]:
            continue  # outside every profiled step (the profiler's warm-up, the last flush)
        args = event.args
        by_step[numbers[i]].append(
            Collective(
                group=str(args.group) if args is not None and args.group is not None else "gloo",
                name=_collective_name(event, "cpu"),
                start=event.ts,
                end=event.ts + event.dur,
                sequence=_as_int(args.sequence) if args is not None else None,
            )
        )
    for number in numbers:
        low, high = steps[number]
        timeline.steps[number] = (low, high)
        timeline.collectives[number] = sorted(by_step[number], key=lambda c: c.start)
        in_step = {phase: [r for r in rows if low <= r[0] < high] for phase, rows in spans.by_phase.items()}
        if not in_step["forward"] and in_step["backward"]:
            # No DDP around the model (a plain or FSDP job): its forward is not annotated, but it is
            # what runs between the batch's arrival and backward's first node.
            begin = max([low] + [end for _, end in in_step["data"]])
            finish = min(start for start, _ in in_step["backward"])
            in_step["forward"] = [(begin, finish)] if finish > begin else []
        timeline.phases[number] = {phase: _merged(rows, low, high) for phase, rows in in_step.items()}


@dataclass
class _StepSpans:
    """One step's annotated spans on the training thread, for placing its kernels' launches."""

    spans: list  # (begin, finish, phase) of data, forward and optimizer
    backward_from: float | None  # the end of the step's forward
    backward_until: float | None  # the start of its optimizer


def _step_spans(spans: _Spans, step: tuple[float, float]) -> _StepSpans:
    inside = [
        (begin, finish, phase)
        for phase in ("data", "forward", "optimizer")
        for begin, finish in spans.by_phase[phase]
        if step[0] <= begin < step[1]
    ]
    forward_ends = [finish for _, finish, phase in inside if phase == "forward"]
    optimizer_starts = [begin for begin, _, phase in inside if phase == "optimizer"]
    return _StepSpans(
        inside,
        max(forward_ends) if forward_ends else None,
        min(optimizer_starts) if optimizer_starts else None,
    )


def _launch_phase(launch_ts: float, on_training_thread: bool, step: _StepSpans) -> str:
    """The phase a kernel's launch was in (a step has a few spans: a linear look is enough)."""
    if not on_training_thread:
        return "backward"  # autograd's device threads launch backward's kernels
    for begin, finish, phase in step.spans:
        if begin <= launch_ts < finish:
            return phase
    if step.backward_from is not None and step.backward_until is not None:
        if step.backward_from <= launch_ts < step.backward_until:
            return "backward"  # the loss's backward launched from the training thread
    return "other"


def _reduce_gpu(timeline, steps, numbers, starts, spans, kernels, launches) -> None:
    launch_times = [launches.get(k.args.correlation, (np.nan, False))[0] for k in kernels]
    index = _step_index(starts, launch_times)
    rows: dict[int, dict[str, list]] = {n: {phase: [] for phase in PHASES} for n in numbers[:-1]}
    collectives: dict[int, list[Collective]] = {n: [] for n in numbers[:-1]}
    placed = {n: _step_spans(spans, steps[n]) for n in numbers[:-1]}
    for kernel, launch_ts, i in zip(kernels, launch_times, index):
        # The last step's kernels may be cut off by the profiler's stop: it is left out.
        if np.isnan(launch_ts) or i < 0 or i >= len(numbers) - 1 or launch_ts >= steps[numbers[i]][1]:
            continue
        number = numbers[i]
        args = kernel.args
        if kernel.name.startswith(COLLECTIVE_PREFIXES["gpu"]):
            group = args.group if args.group is not None else f"stream {args.stream}"
            collectives[number].append(
                Collective(
                    group=str(group),
                    name=_collective_name(kernel, "gpu"),
                    start=kernel.ts,
                    end=kernel.ts + kernel.dur,
                    sequence=_as_int(args.sequence),
                    elements=_as_int(args.elements),
                )
            )
            rows[number]["communication"].append((kernel.ts, kernel.ts + kernel.dur))
        else:
            phase = _launch_phase(launch_ts, launches[args.correlation][1], placed[number])
            rows[number][phase].append((kernel.ts, kernel.ts + kernel.dur))
    for number in numbers[:-1]:
        busy = [row for phase_rows in rows[number].values() for row in phase_rows]
        if not busy:
            continue
        low, high = min(r[0] for r in busy), max(r[1] for r in busy)
        timeline.steps[number] = (low, high)
        timeline.collectives[number] = sorted(collectives[number], key=lambda c: c.start)
        timeline.phases[number] = {
            phase: _merged(rows[number][phase], low, high) for phase in TRAINING_PHASES + ("other",)
        }
