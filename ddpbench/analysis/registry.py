"""The metrics a person reads, each defined once: how it is read from a record, its label, unit,
format and which direction is better. The runs frame, the scaling table, the HTML report, the
pytest-benchmark export and the gate all take their metrics from `METRICS`.

Adding a metric is one `Metric(...)` entry here (or `register(Metric(...))` from your own code).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from ddpbench.analysis.metrics import iteration_times_s
from ddpbench.records.schema import Record


@dataclass(frozen=True)
class Metric:
    name: str
    """Column name in the runs frame and the scaling table, key in exports: snake_case, unit-suffixed."""
    label: str
    """What the report and the terminal call it."""
    read: Callable[[Record], float | None]
    """The value of one ok record; None where it does not apply (e.g. no trace)."""
    unit: str
    """Unit of the value as read, e.g. "s", "%", or "unit/s" for the workload's own unit per second."""
    fmt: str = "{:,.2f}"
    """How to show one value (after `scale`)."""
    better: Literal["higher", "lower"] | None = None
    """Which direction is an improvement; None for descriptive metrics."""
    scale: float = 1.0
    """Multiplier for display (1000 shows seconds as milliseconds)."""
    shown_unit: str | None = None
    """Unit after scaling, for labels; defaults to `unit`."""
    in_scaling_table: bool = True
    """Part of the scaling table (median over repeats) and its CSV."""

    def heading(self) -> str:
        unit = self.shown_unit or self.unit
        return f"{self.label} ({unit})" if unit else self.label

    def show(self, value: float | None) -> str:
        return "" if value is None or value != value else self.fmt.format(value * self.scale)


def _trace_ranks(record: Record) -> list:
    trace = record.overlap.trace if record.overlap else None
    return [view for view in (trace.by_rank if trace else []) if view.comm_us is not None]


def overlap_pct(record: Record) -> float | None:
    """Mean over ranks of the trace's overlap %; None when no rank's trace has communication."""
    values = [view.overlap_pct for view in _trace_ranks(record) if view.overlap_pct is not None]
    return sum(values) / len(values) if values else None


def exposed_comm_trace_s(record: Record) -> float | None:
    """The worst rank's exposed communication per profiled step, from its trace."""
    values = [
        view.exposed_comm_us_per_step for view in _trace_ranks(record) if view.exposed_comm_us_per_step is not None
    ]
    return max(values) / 1e6 if values else None


def exposed_comm_no_sync_s(record: Record) -> float | None:
    view = record.overlap.no_sync if record.overlap else None
    return view.exposed_comm_s_max if view else None


def exposed_comm_reducer_s(record: Record) -> float | None:
    view = record.overlap.reducer if record.overlap else None
    values = [rank.exposed_comm_s for rank in (view.by_rank if view else []) if rank.exposed_comm_s is not None]
    return max(values) if values else None


def profiled_step_p50_s(record: Record) -> float | None:
    """The profiled steps' own time: per step the slowest rank's, the median over the profiled
    steps; None without traces. Overlap and the trace's exposed communication come from these
    steps, and the profiler slows them (it records every op, which costs most where a step is many
    small ops), so next to iteration p50 it says how far those figures' steps are from the timed
    ones. Read from the spans the record keeps of each rank's trace
    (`overlap.trace.by_rank[].steps`): on a CPU trace the ProfilerStep itself; on a GPU trace from
    the step's first kernel to its last, which leaves out a step's idle edges. A rank whose trace
    could not be analysed has none."""
    summaries = record.overlap.trace.by_rank if record.overlap and record.overlap.trace else []
    per_rank = [{step.step: step.span_us / 1e6 for step in summary.steps} for summary in summaries]
    common = set.intersection(*(set(steps) for steps in per_rank)) if per_rank else set()
    return statistics.median(max(steps[n] for steps in per_rank) for n in common) if common else None


def _largest_rank(values: list) -> float | None:
    found = [value for value in values if value is not None]
    return float(max(found)) if found else None


def peak_memory_bytes(record: Record) -> float | None:
    """The largest rank's peak in the timed window: device memory allocated on GPUs, the process's
    resident set on CPU (which holds the Python process and torch itself too)."""
    return _largest_rank([rank.peak_memory_bytes for rank in record.ranks])


def phase_peak_memory(phase: str) -> Callable[[Record], float | None]:
    def read(record: Record) -> float | None:
        return _largest_rank(
            [
                (rank.peak_memory_by_phase or {}).get(phase).peak_bytes
                if (rank.peak_memory_by_phase or {}).get(phase)
                else None
                for rank in record.ranks
            ]
        )

    return read


def model_state_bytes(record: Record) -> float | None:
    """The largest rank's parameters, gradients and optimizer state (its shards under fsdp2)."""
    return _largest_rank([rank.model_state_bytes for rank in record.ranks])


def _mebibytes(name: str, label: str, read: Callable[[Record], float | None]) -> Metric:
    return Metric(name, label, read, "B", "{:,.0f}", "lower", 1 / 2**20, "MiB")


def iteration_p50_s(record: Record) -> float | None:
    return record.metrics.iteration_time_s.p50 if record.metrics else None


def _metric(field: str) -> Callable[[Record], float | None]:
    return lambda record: getattr(record.metrics, field) if record.metrics else None


def _iteration_time(statistic: str) -> Callable[[Record], float | None]:
    return lambda record: getattr(record.metrics.iteration_time_s, statistic) if record.metrics else None


def _milliseconds(
    name: str,
    label: str,
    read: Callable[[Record], float | None],
    better: Literal["higher", "lower"] | None,
    in_scaling_table: bool = True,
) -> Metric:
    """A time read in seconds and shown in milliseconds: every step and communication time."""
    return Metric(name, label, read, "s", "{:,.2f}", better, 1000, "ms", in_scaling_table=in_scaling_table)


METRICS: list[Metric] = [
    Metric("throughput", "throughput", _metric("throughput_units_per_s"), "unit/s", "{:,.1f}", "higher"),
    Metric(
        "throughput_per_device",
        "per device",
        _metric("throughput_units_per_s_per_device"),
        "unit/s",
        "{:,.1f}",
        "higher",
    ),
    _milliseconds("iteration_p50_s", "iteration p50", iteration_p50_s, "lower"),
    _milliseconds("iteration_p90_s", "iteration p90", _iteration_time("p90"), "lower", in_scaling_table=False),
    _milliseconds("iteration_mean_s", "iteration mean", _iteration_time("mean"), "lower", in_scaling_table=False),
    # Beside the timed p50: the steps that overlap and the trace's exposed time come from.
    _milliseconds("profiled_step_p50_s", "profiled step p50", profiled_step_p50_s, None, in_scaling_table=False),
    # Model FLOPs utilisation on GPUs (None on CPUs and on GPUs without a published peak).
    Metric("mfu", "MFU", _metric("mfu"), "", "{:.1f}", "higher", 100, "% of peak"),
    Metric("window_s", "timed window", _metric("window_s"), "s", "{:,.2f}", in_scaling_table=False),
    Metric("overlap_pct", "overlap", overlap_pct, "%", "{:,.1f}", "higher", in_scaling_table=False),
    _milliseconds("exposed_comm_trace_s", "exposed, trace", exposed_comm_trace_s, "lower", in_scaling_table=False),
    _milliseconds(
        "exposed_comm_no_sync_s", "exposed, no_sync", exposed_comm_no_sync_s, "lower", in_scaling_table=False
    ),
    _milliseconds(
        "exposed_comm_reducer_s", "exposed, reducer", exposed_comm_reducer_s, "lower", in_scaling_table=False
    ),
    # Memory per rank, a measure of its own: what fsdp2 or gradient_as_bucket_view buy.
    _mebibytes("peak_memory_bytes", "peak memory/rank", peak_memory_bytes),
    _mebibytes("warmup_peak_memory_bytes", "warm-up peak/rank", phase_peak_memory("warm-up")),
    _mebibytes("compile_peak_memory_bytes", "compile peak/rank", phase_peak_memory("compile")),
    _mebibytes("model_state_bytes", "model state/rank", model_state_bytes),
]


def register(metric: Metric) -> Metric:
    """Add a metric everywhere (runs frame, scaling table, report, export); names are unique."""
    if any(existing.name == metric.name for existing in METRICS):
        raise ValueError(f"a metric named {metric.name!r} is already registered")
    METRICS.append(metric)
    return metric


def unregister(name: str) -> None:
    METRICS[:] = [metric for metric in METRICS if metric.name != name]


def metric(name: str) -> Metric:
    for candidate in METRICS:
        if candidate.name == name:
            return candidate
    raise KeyError(f"no metric named {name!r}; registered: {', '.join(m.name for m in METRICS)}")


def record_iteration_times_s(record: Record) -> list[float]:
    """Per timed step, the slowest rank's step time (see `ddpbench.analysis.metrics`)."""
    return iteration_times_s([rank.step_times_s for rank in record.ranks]) if record.ranks else []
