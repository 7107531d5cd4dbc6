"""Communication/computation overlap from torch.profiler chrome traces, per rank and per step.

Overlap follows HolisticTraceAnalysis, so numbers are comparable: merge communication intervals
and computation intervals separately; overlap = time both are active / communication time.

- GPU traces: events with a CUDA stream. Communication = kernels whose name starts with `nccl`
  (only the prefix is reliable); computation = the other kernels; memcpy/memset are "other".
  A kernel belongs to the profiler step in which the CPU launched it (linked by correlation id).
  The last step is dropped: the profiler may stop before its kernels have all been recorded.
- CPU traces (gloo): communication = `gloo:*` events, which run on gloo's own threads (DDP's
  all-reduce; FSDP2's all-gather, and its reduce-scatter, which gloo runs as an all-reduce);
  computation = the ops of the training thread (the one that carries `ProfilerStep#N`), with data
  loading counted as "other" and FSDP2's own annotations left out. Every whole step counts.
  (GPU: NCCL's AllGather and ReduceScatter kernels start with `nccl` like its AllReduce.)

Temporal breakdown of a step: compute + exposed communication + other + idle = the step's span
(GPU: first to last kernel of the step; CPU: the ProfilerStep annotation).

`mode="hta"` reproduces HolisticTraceAnalysis 0.5.0 exactly on GPU traces: it keeps kernels
launched before the last step starts, rounds timestamps as HTA does (start up, end down to whole
microseconds) and reports one figure over all kept kernels. No torch, no pandas on this path.
"""

from __future__ import annotations

import gc
import os
import re
import zlib
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import msgspec
import numpy as np

try:
    from isal import igzip  # ISA-L: the same gzip, about twice as fast as zlib
except ImportError:  # a machine without the wheel still reads traces, at zlib's pace
    import gzip as igzip

from ddpbench.analysis import intervals as iv
from ddpbench.records.schema import TraceStep  # one profiler step of one rank, as records store it

MODES = ("ddpbench", "hta")
GPU_EVENT_CATEGORIES = {"kernel", "gpu_memcpy", "gpu_memset"}
LAUNCH_CATEGORIES = {"cuda_runtime", "cuda_driver"}
CPU_WORK_CATEGORIES = {"cpu_op", "user_annotation"}
COLLECTIVE_LAUNCH_PREFIXES = ("c10d::", "record_param_comms")
"""Ops on the training thread that only start a collective (its launch, its bookkeeping): neither
computation nor the collective itself, which runs on gloo's threads."""
WRAPPER_ANNOTATION_PREFIXES = ("FSDP::",)
"""FSDP2's own annotations on the training thread (`FSDP::all_gather (2)`, `FSDP::pre_forward`):
spans around its steps that include waiting for a collective, so they are neither computation
nor communication, and neither are the ops that hold one of them whole (autograd's node around a
pre-backward all-gather); the ops inside them (copies into and out of the collectives' buffers,
the layer's own ops) are recorded apart and count as they are."""
BACKWARD_OP = "autograd::engine::evaluate_function"
PROFILER_STEP = re.compile(r"ProfilerStep#(\d+)")
RANK_IN_FILE_NAME = re.compile(r"rank[-_.]?(\d+)", re.IGNORECASE)


class TraceError(ValueError):
    """A file that cannot be analysed; the message names the file and what is wrong."""


class _Args(msgspec.Struct):
    stream: Any = None
    correlation: Any = None


Args = TypeVar("Args")


class TraceEvent(msgspec.Struct, Generic[Args]):
    """The fields of an event every reader needs, `args` holding the reader's own; msgspec skips
    every other field without building it, which is most of why loading is several times faster
    than json.loads."""

    ph: str = ""
    cat: Any = None
    name: Any = ""
    ts: float = 0.0
    dur: float = 0.0
    pid: Any = None
    tid: Any = None
    args: Args | None = None


class TraceFile(msgspec.Struct, Generic[Args]):
    traceEvents: list[TraceEvent[Args]]
    distributedInfo: dict | None = None
    baseTimeNanoseconds: int | None = None
    host_name: str | None = None


def trace_decoder(args: type[msgspec.Struct]) -> msgspec.json.Decoder:
    """A decoder of a trace's events with the args fields `args` names, for read_trace."""
    return msgspec.json.Decoder(TraceFile[args])


_DECODER = trace_decoder(_Args)


def read_trace(path: str, decoder: msgspec.json.Decoder = _DECODER):
    """A trace file decoded (gzipped or not) with `decoder`: by default into the fields overlap
    needs; other readers pass a decoder of their own fields and share the error messages."""
    try:
        with open(path, "rb") as handle:
            raw = handle.read()
    except OSError as exc:
        raise TraceError(f"{path}: cannot read: {exc.strerror or exc}") from None
    if raw[:2] == b"\x1f\x8b":
        try:
            raw = igzip.decompress(raw)
        except (EOFError, OSError, zlib.error) as exc:
            raise TraceError(f"{path}: truncated or corrupt gzip: {exc}") from None
    # Tens of thousands of small objects: the cyclic GC would stop to scan them several times.
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        return decoder.decode(raw)
    except msgspec.ValidationError as exc:
        raise TraceError(f"{path}: not a torch.profiler chrome trace: {exc}") from None
    except msgspec.DecodeError as exc:
        raise TraceError(f"{path}: not a JSON chrome trace: {exc}") from None
    finally:
        if gc_was_enabled:
            gc.enable()


@dataclass
class TraceAnalysis:
    path: str
    rank: int | None
    rank_source: str
    world_size: int | None
    backend: str | None
    kind: str
    """gpu or cpu."""
    mode: str
    steps: list[TraceStep] = field(default_factory=list)
    kernels: dict | None = None
    """GPU: how many kernels the trace holds, and how many (and how much of their time) could not
    be placed in an analysed step: no launch event with their correlation id, launched before the
    trace began (queued in the step before the profiled window), or launched outside the analysed
    steps (the last step is always dropped)."""
    hta: dict | None = None
    """mode hta: overlap_pct, compute_us, non_compute_us, idle_us, kernel_span_us over all kept kernels."""

    def summary(self) -> dict:
        """Totals over the analysed steps, and the steps themselves."""
        totals = {
            key: sum(getattr(s, key) for s in self.steps)
            for key in ("span_us", "comm_us", "compute_us", "overlap_us", "exposed_comm_us", "other_us", "idle_us")
        }
        comm = totals["comm_us"]
        return {
            "path": self.path,
            "rank": self.rank,
            "rank_source": self.rank_source,
            "world_size": self.world_size,
            "backend": self.backend,
            "kind": self.kind,
            "mode": self.mode,
            "steps_analysed": len(self.steps),
            **totals,
            "overlap_pct": 100.0 * totals["overlap_us"] / comm if comm > 0 else None,
            "exposed_comm_us_per_step": totals["exposed_comm_us"] / len(self.steps) if self.steps else None,
            "steps": [msgspec.structs.asdict(s) for s in self.steps],
            "kernels": self.kernels,
            "hta": self.hta,
        }


@dataclass
class _Events:
    """Interval arrays pulled out of a trace in one pass."""

    starts: np.ndarray
    ends: np.ndarray
    role: np.ndarray  # 0 compute, 1 communication, 2 other
    anchor: np.ndarray  # the time that decides the event's step (CPU launch time for GPU kernels)
    early: np.ndarray | None = None  # GPU: no launch event, launched before the trace's first one


def rank_in_trace(trace: TraceFile, path: str) -> tuple[int | None, str]:
    """The rank a trace names (distributedInfo, else its file name) and where that came from."""
    info = trace.distributedInfo or {}
    if isinstance(info.get("rank"), int):
        return info["rank"], "distributedInfo"
    match = RANK_IN_FILE_NAME.search(os.path.basename(path))
    if match:
        return int(match.group(1)), "file name"
    return None, "unknown"


@dataclass
class _Scan:
    """What one pass over the events finds."""

    steps: dict  # step number -> (start, end)
    step_threads: set  # (pid, tid) of the thread that runs the training loop
    launches: dict  # correlation id -> CPU launch time
    gpu_rows: list  # (ts, dur, name, category, correlation)


def _scan(events: list[TraceEvent]) -> _Scan:
    scan = _Scan({}, set(), {}, [])
    for event in events:
        category = event.cat
        if category in GPU_EVENT_CATEGORIES:
            args = event.args
            if args is not None and args.stream is not None:
                scan.gpu_rows.append((event.ts, event.dur, event.name, category, args.correlation))
        elif category in LAUNCH_CATEGORIES:
            args = event.args
            if args is not None and args.correlation is not None:
                scan.launches[args.correlation] = event.ts
        elif category in CPU_WORK_CATEGORIES and event.ph == "X" and event.name.startswith("ProfilerStep#"):
            match = PROFILER_STEP.match(event.name)
            if match:
                scan.steps[int(match.group(1))] = (event.ts, event.ts + event.dur)
                scan.step_threads.add((event.pid, event.tid))
    return scan


def _gpu_events(scan: _Scan, hta_rounding: bool) -> _Events:
    if not scan.gpu_rows:
        return _Events(*(np.zeros(0),) * 4, early=np.zeros(0, dtype=bool))
    ts, dur, names, categories, correlations = zip(*scan.gpu_rows)
    starts = np.asarray(ts, dtype=float)
    ends = starts + np.asarray(dur, dtype=float)
    if hta_rounding:
        # HTA 0.5.0 rounds microsecond timestamps: start up, end down (so short kernels may end
        # up with zero or negative length, which HTA keeps; so do we, to agree with it).
        starts, ends = np.ceil(starts), np.floor(ends)
    role = np.array(
        [1 if c == "kernel" and n.startswith("nccl") else 0 if c == "kernel" else 2 for n, c in zip(names, categories)],
        dtype=int,
    )
    launches = scan.launches
    anchor = np.array([launches.get(c, np.nan) for c in correlations], dtype=float)
    # Correlation ids grow with every launch. A kernel with no launch event whose id is below the
    # trace's first recorded launch was queued before the profiler's active window opened (the GPU
    # still ran the step before it: seen on an H200, the previous optimizer step's kernels): it
    # belongs to no profiled step, and nothing is missing. One with an id inside the recorded range
    # is a launch the analysis cannot link.
    first = min((c for c in launches if isinstance(c, int | float)), default=None)
    early = np.array(
        [c not in launches and first is not None and isinstance(c, int | float) and c < first for c in correlations],
        dtype=bool,
    )
    return _Events(starts, ends, role, anchor, early)


def closure_steps(optimizer_steps: list[tuple[float, float]], backward_starts: list[float]) -> set:
    """The optimizer steps that hold a backward: `optimizer.step(closure)`, as Lightning's automatic
    optimization calls it, runs the forward, the backward and DDP's wait for its all-reduce inside
    the step's annotation. Such a span is a container, not the optimizer's work."""
    if not optimizer_steps or not backward_starts:
        return set()
    starts = np.sort(np.asarray(backward_starts, dtype=float))
    return {
        span
        for span in optimizer_steps
        if np.searchsorted(starts, span[1], side="left") > np.searchsorted(starts, span[0], side="left")
    }


def _cpu_events(events: list[TraceEvent], training_threads: set) -> _Events:
    rows = []
    waits = []  # FSDP2's annotations, which span its collective waits
    optimizer_steps, backward_starts = [], []
    for event in events:
        if event.ph != "X" or not isinstance(event.name, str):
            continue
        name = event.name
        if name.startswith("gloo:"):
            role = 1
        elif event.cat in CPU_WORK_CATEGORIES and (event.pid, event.tid) in training_threads:
            if name.startswith(("ProfilerStep#", *COLLECTIVE_LAUNCH_PREFIXES)):
                continue
            if event.cat == "user_annotation" and name.startswith(WRAPPER_ANNOTATION_PREFIXES):
                waits.append((event.ts, event.ts + event.dur))
                continue
            if event.cat == "user_annotation" and name.startswith("Optimizer.step#"):
                optimizer_steps.append((event.ts, event.ts + event.dur))
            elif name.startswith(BACKWARD_OP):
                backward_starts.append(event.ts)
            role = 2 if name.startswith("enumerate(DataLoader)") else 0
        else:
            continue
        rows.append((event.ts, event.ts + event.dur, role))
    closures = closure_steps(optimizer_steps, backward_starts)
    if closures:  # the ops inside the closure are recorded apart and count as they are
        rows = [row for row in rows if row[2] != 0 or (row[0], row[1]) not in closures]
    if waits:
        rows = [row for row in rows if row[2] != 0 or not _encloses_any(row, waits)]
    if not rows:
        return _Events(*(np.zeros(0),) * 4)
    starts, ends, role = (np.asarray(column) for column in zip(*rows))
    return _Events(starts.astype(float), ends.astype(float), role.astype(int), starts.astype(float))


def _encloses_any(row: tuple, spans: list[tuple[float, float]]) -> bool:
    """Whether an op holds one of FSDP2's annotated spans whole (autograd's evaluate_function
    around a pre-backward all-gather, FSDP2's post-backward node): such an op is a container whose
    time is mostly the wait; the work inside it is recorded as ops of its own and counts as them."""
    start, end = row[0], row[1]
    return any(
        start <= span_start and span_end <= end and (start, end) != (span_start, span_end)
        for span_start, span_end in spans
    )


def _sets(starts, ends, role, keep):
    return tuple(iv.merge(starts[keep & (role == r)], ends[keep & (role == r)]) for r in (0, 1, 2))


def _step_overlap(step: int, compute, comm, other, span_start: float, span_end: float, base_us: float) -> TraceStep:
    comm_us, compute_us = iv.total(comm), iv.total(compute)
    overlap_us = iv.intersection(comm, compute)
    busy_us = iv.total(iv.union(compute, comm, other))
    span_us = float(span_end - span_start)
    exposed = comm_us - overlap_us
    return TraceStep(
        step=step,
        span_us=span_us,
        comm_us=comm_us,
        compute_us=compute_us,
        overlap_us=overlap_us,
        overlap_pct=100.0 * overlap_us / comm_us if comm_us > 0 else None,
        exposed_comm_us=exposed,
        other_us=busy_us - compute_us - exposed,
        idle_us=span_us - busy_us,
        first_comm_start_us=float(comm[0][0]) + base_us if len(comm[0]) else None,
    )


def analyze_trace(path: str, mode: str = "ddpbench") -> TraceAnalysis:
    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}; got {mode!r}")
    trace = read_trace(path)
    rank, rank_source = rank_in_trace(trace, path)
    info = trace.distributedInfo or {}
    scan = _scan(trace.traceEvents)
    numbers = np.array(sorted(scan.steps), dtype=int)
    step_starts = np.array([scan.steps[n][0] for n in numbers], dtype=float)
    step_ends = np.array([scan.steps[n][1] for n in numbers], dtype=float)
    base_us = (trace.baseTimeNanoseconds or 0) / 1000.0
    gpu = _gpu_events(scan, hta_rounding=mode == "hta")
    kind = "gpu" if len(gpu.starts) else "cpu"
    if kind == "cpu" and (scan.launches or info.get("backend") == "nccl"):
        # Kernels launched (or an NCCL job) but none recorded: CUPTI did not trace the GPU. Read as
        # a CPU trace it would report the launch calls as the step's work.
        evidence = f"{len(scan.launches)} CUDA launch events" if scan.launches else "backend nccl"
        raise TraceError(
            f"{path}: a GPU trace ({evidence}) without kernel events: the profiler did not "
            f"record GPU activity (CUPTI unavailable, or ProfilerActivity.CUDA not requested); "
            f"refusing to analyse it as a CPU trace"
        )
    result = TraceAnalysis(
        path=path,
        rank=rank,
        rank_source=rank_source,
        world_size=info.get("world_size"),
        backend=info.get("backend"),
        kind=kind,
        mode=mode,
    )
    if len(numbers) == 0:
        raise TraceError(f"{path}: no ProfilerStep#N annotations; profile with a schedule and call prof.step()")
    if kind == "cpu":
        if mode == "hta":
            raise TraceError(f"{path}: mode hta applies to GPU traces (HTA analyses CUDA kernels only)")
        found = _cpu_events(trace.traceEvents, scan.step_threads)
        # An event belongs to the step during which it starts, and is cut at the step's end.
        index = np.searchsorted(step_starts, found.anchor, side="right") - 1
        for i, number in enumerate(numbers):
            keep = index == i
            compute, comm, other = (
                iv.clip(s, step_starts[i], step_ends[i]) for s in _sets(found.starts, found.ends, found.role, keep)
            )
            result.steps.append(_step_overlap(int(number), compute, comm, other, step_starts[i], step_ends[i], base_us))
        return result

    if mode == "hta":
        keep = gpu.anchor < step_starts[-1]  # launched before the last step started (NaN: never)
        compute, comm, other = _sets(gpu.starts, gpu.ends, gpu.role, keep)
        everything = iv.union(compute, comm, other)
        span = float(everything[1][-1] - everything[0][0]) if len(everything[0]) else 0.0
        busy = iv.total(everything)
        comm_us = iv.total(comm)
        result.hta = {
            "overlap_pct": 100.0 * iv.intersection(comm, compute) / comm_us if comm_us > 0 else None,
            "compute_us": iv.total(compute),
            "non_compute_us": busy - iv.total(compute),
            "idle_us": span - busy,
            "kernel_span_us": span,
        }
    index = np.searchsorted(step_starts, gpu.anchor, side="right") - 1
    inside = (index >= 0) & (gpu.anchor < step_ends[np.clip(index, 0, None)])
    analysed = inside & (index < len(numbers) - 1)  # the last step's kernels may be cut off
    result.kernels = _kernel_accounting(gpu, analysed)
    for i, number in enumerate(numbers[:-1]):
        keep = analysed & (index == i)
        if not keep.any():
            continue
        compute, comm, other = _sets(gpu.starts, gpu.ends, gpu.role, keep)
        span_start, span_end = float(gpu.starts[keep].min()), float(gpu.ends[keep].max())
        result.steps.append(_step_overlap(int(number), compute, comm, other, span_start, span_end, base_us))
    return result


def _kernel_accounting(gpu: _Events, analysed: np.ndarray) -> dict:
    """Kernels the step analysis could not use, counted rather than dropped silently."""
    kernel = gpu.role != 2
    early = kernel & gpu.early
    unlaunched = kernel & np.isnan(gpu.anchor) & ~early
    outside = kernel & ~analysed & ~unlaunched & ~early
    duration = gpu.ends - gpu.starts
    return {
        "total": int(kernel.sum()),
        "communication": int((gpu.role == 1).sum()),
        "analysed": int((kernel & analysed).sum()),
        "without_launch": int(unlaunched.sum()),
        "without_launch_us": float(duration[unlaunched].sum()),
        "outside_analysed_steps": int(outside.sum()),
        "launched_before_trace": int(early.sum()),
    }


def stragglers(analyses: list[TraceAnalysis]) -> list[dict]:
    """Per step present in every trace: which rank started its first collective last, and by how
    much after the earliest. (Timestamps are comparable across processes of one machine; across
    machines only as far as their clocks agree.)"""
    by_step: dict[int, dict] = {}
    for analysis in analyses:
        for step in analysis.steps:
            if step.first_comm_start_us is not None:
                by_step.setdefault(step.step, {})[analysis.rank] = step.first_comm_start_us
    rows = []
    for step, starts in sorted(by_step.items()):
        if len(starts) < len(analyses) or len(starts) < 2:
            continue
        latest = max(starts, key=starts.get)
        rows.append({"step": step, "latest_rank": latest, "lag_ms": (starts[latest] - min(starts.values())) / 1000.0})
    return rows


def overlap_frame(analyses: list[TraceAnalysis]):
    """One row per rank and step, for notebooks and the report (imports pandas)."""
    import pandas as pd

    rows = [{"rank": a.rank, "kind": a.kind, **msgspec.structs.asdict(step)} for a in analyses for step in a.steps]
    return pd.DataFrame(rows)


TRACE_EXPOSED = (
    "trace exposed = the trace's own exposed communication: time inside the collectives' profiler events that no "
    "computation overlaps, over whole profiler steps; a cross-check (docs/concepts.md), not explain's exposed "
    "communication, which is the slowest rank's waits in the in-process ablation"
)
"""What `trace analyze` calls the exposed communication it reads from a trace, said once under its figures."""


def format_trace_table(analyses: list[TraceAnalysis]) -> str:
    """The per-rank table that `ddpbench trace analyze` prints."""

    def ms(us):
        return f"{us / 1000:9.3f}"

    lines = [
        f"{'rank':>6} {'kind':>4} {'steps':>5} {'comm ms':>9} {'compute ms':>10} {'overlap %':>9} "
        f"{'trace exposed ms':>16} {'other ms':>9} {'idle ms':>9}  file"
    ]
    for analysis in analyses:
        summary = analysis.summary()
        rank = "?" if summary["rank"] is None else str(summary["rank"])
        if summary["rank_source"] == "file name":
            rank += "*"
        overlap = "n/a" if summary["overlap_pct"] is None else f"{summary['overlap_pct']:.2f}"
        lines.append(
            f"{rank:>6} {summary['kind']:>4} {summary['steps_analysed']:>5} {ms(summary['comm_us'])} "
            f"{ms(summary['compute_us']):>10} {overlap:>9} {ms(summary['exposed_comm_us']):>16} "
            f"{ms(summary['other_us'])} {ms(summary['idle_us'])}  {summary['path']}"
        )
        if summary["hta"]:
            hta = summary["hta"]
            overlap = "n/a" if hta["overlap_pct"] is None else f"{hta['overlap_pct']:.2f} %"
            lines.append(
                f"{'':>6} HTA 0.5.0 view: overlap {overlap}, compute {hta['compute_us']:.0f} us, "
                f"non-compute {hta['non_compute_us']:.0f} us, idle {hta['idle_us']:.0f} us, "
                f"kernel span {hta['kernel_span_us']:.0f} us"
            )
    notes = ["totals over whole profiler steps; overlap = (communication and computation both active) / communication"]
    if any(a.rank_source == "file name" for a in analyses):
        notes.append("* rank taken from the file name: the trace has no distributedInfo")
    if any(a.rank is None for a in analyses):
        notes.append("? rank unknown: no distributedInfo and no rank in the file name")
    if any(a.summary()["overlap_pct"] is None for a in analyses):
        notes.append("n/a: no communication in the trace, so overlap does not apply")
    for analysis in analyses:
        kernels = analysis.kernels or {}
        if kernels.get("without_launch"):
            notes.append(
                f"{analysis.path}: {kernels['without_launch']} of {kernels['total']} kernels "
                f"({kernels['without_launch_us'] / 1000:.3f} ms) have no launch event with their "
                f"correlation id, so no step: left out of the figures above"
            )
    return "\n".join(lines + notes)
