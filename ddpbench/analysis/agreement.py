"""Do the three estimates of exposed communication agree, and if not, why not, in words.

The estimates measure different things on purpose (see the README's "Communication overlap"):
- trace: time inside the collectives' own profiler events that no computation overlaps, over a
  few profiled steps;
- no_sync: how much longer a step takes with the all-reduce than without it, over the same
  in-memory batches (older records: the timed steps, data loading included, against a replay);
- reducer: DDP's own timers, from the first bucket's all-reduce start to backward's end.
When they agree within AGREEMENT (relative to their median), any of them can be quoted; when they
do not, the sentence says which one stands out and what it holds in the measured terms of the
causes (`ddpbench.analysis.causes`), with figures; a record without the measurements that
split it says what the estimate contains by definition.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from ddpbench.analysis.ablation import NoAblation, read_ablation
from ddpbench.analysis.causes import answer_from_ablation
from ddpbench.analysis.registry import (
    exposed_comm_no_sync_s,
    exposed_comm_reducer_s,
    exposed_comm_trace_s,
    iteration_p50_s,
    profiled_step_p50_s,
)
from ddpbench.analysis.without_ablation import answer_without_ablation, bucket_copies
from ddpbench.records.schema import Record

AGREEMENT = 0.20
"""Largest distance of any estimate from their median, as a fraction of the median, to agree."""

OLD_NO_SYNC_METHOD = "data loading included"

# What each estimate contains by definition, for records that cannot split it into measured terms.
REASONS = {
    ("trace", "low"): "the trace counts only time inside the collectives' own events, while a step also waits "
    "for its all-reduce to start (queued behind earlier buckets, or for the slower rank), "
    "which the step-time difference and DDP's timers include",
    ("trace", "high"): "the trace covers only a few profiled steps, which the profiler itself slows down, and "
    "counts a collective's whole event even where the other rank was already waiting",
    ("no_sync", "low"): "without the all-reduce a step still does DDP's bucket copies and hooks, so the "
    "difference in step time misses that part of the cost, and alternating steps share "
    "the machine's noise",
    ("no_sync", "high"): "the step-time difference holds everything the all-reduce costs a step, waiting for "
    "the slower rank included, which the trace's events and DDP's timers only partly see",
    ("reducer", "low"): "DDP's timers start at the first bucket's all-reduce and end with backward, so "
    "communication that finishes after backward is partly outside them",
    ("reducer", "high"): "DDP's timers run from the first all-reduce's start to backward's end, so they count "
    "as communication the compute that runs in between and is not a true intersection",
}


@dataclass(frozen=True)
class Agreement:
    estimates_s: dict[str, float]
    """The estimates this record has, per step, in seconds (missing ones left out)."""
    agree: bool | None
    """None when fewer than two estimates exist."""
    sentence: str


def estimates_agreement(record: Record) -> Agreement:
    found = {
        "trace": exposed_comm_trace_s(record),
        "no_sync": exposed_comm_no_sync_s(record),
        "reducer": exposed_comm_reducer_s(record),
    }
    estimates = {name: value for name, value in found.items() if value is not None}
    if len(estimates) < 2:
        return Agreement(estimates, None, "fewer than two estimates: nothing to compare")
    middle = statistics.median(estimates.values())
    scale = max(abs(middle), 1e-9)
    far = {name: (value - middle) / scale for name, value in estimates.items()}
    shown = ", ".join(f"{name} {value * 1000:.2f} ms" for name, value in estimates.items())
    if all(abs(distance) <= AGREEMENT for distance in far.values()):
        return Agreement(estimates, True, f"the estimates agree within {AGREEMENT:.0%} ({shown})")
    name = max(far, key=lambda n: abs(far[n]))
    direction = "high" if far[name] > 0 else "low"
    view = record.overlap.no_sync if record.overlap else None
    measured = _in_terms(record, name)
    if name == "no_sync" and view is not None and OLD_NO_SYNC_METHOD in view.method:
        reason = (
            "this record's no_sync estimate compared timed steps that fetched their batches with a replay "
            "of batches already in memory, so data loading counted as communication"
        )
    elif measured:
        reason = f"in measured causes, {measured}"
    else:
        reason = (
            f"this record cannot split it into measured terms (no gradient timeline); by definition, "
            f"{REASONS[(name, direction)]}"
        )
    return Agreement(
        estimates,
        False,
        f"{name} is {abs(far[name]):.0%} {'above' if direction == 'high' else 'below'} the median "
        f"of the estimates ({shown}): {reason}",
    )


def causes_in_place(record: Record) -> dict[str, float | None]:
    """Seconds per step by cause, from this record alone: its ablation's, or else as the run
    measured them elsewhere (`without_ablation`)."""
    try:
        found = answer_from_ablation(record, read_ablation(record), [], [])
    except NoAblation as exc:
        found = answer_without_ablation(record, [], [], str(exc))
    return {name: cause.seconds.value if cause.seconds else None for name, cause in found.causes.items()}


def reconcile(record: Record, seconds: dict[str, float | None]) -> list[str]:
    """The three exposed-communication estimates, each said in the causes it holds, with figures
    (`seconds`: cause -> seconds per step)."""

    def ms(value: float | None) -> str:
        return "n/a" if value is None else f"{value * 1e3:.2f} ms"

    lines = []
    value = seconds.get
    trace = exposed_comm_trace_s(record)
    if trace is not None and value("exposed_comm") is not None:
        # The profiler slows the steps it records: say how far its steps are from the timed ones.
        profiled, timed = profiled_step_p50_s(record), iteration_p50_s(record)
        steps = f", in profiled steps of {ms(profiled)} against {ms(timed)} timed" if profiled and timed else ""
        wait = f" and the wait for the slowest rank {ms(value('straggler_wait'))}" if value("straggler_wait") else ""
        lines.append(
            f"trace {ms(trace)} (the rank exposing most: the transfer and that rank's wait for its peers){steps}; "
            f"beside it, exposed communication {ms(value('exposed_comm'))} (the transfer){wait}"
        )
    no_sync = exposed_comm_no_sync_s(record)
    if no_sync is not None:
        # no_sync() skips the all-reduce, the bucket copies and the wait for peers: the difference holds them all.
        parts = {
            "exposed communication": value("exposed_comm"),
            "backward slowed": value("overlap_slowdown"),
            "bucket copies": bucket_copies(record),
            "the wait for the slowest rank": value("straggler_wait"),
        }
        known = {name: v for name, v in parts.items() if v is not None}
        rest = no_sync - sum(known.values())
        lines.append(
            f"no_sync difference {ms(no_sync)} = "
            + " + ".join(f"{name} {ms(v)}" for name, v in known.items())
            + f" + {ms(rest)} not accounted for (the replay's steps are not the profiled ones)"
        )
    reducer = exposed_comm_reducer_s(record)
    if reducer is not None:
        lines.append(
            f"reducer {ms(reducer)}: DDP's own timers over its sampled iterations (warm-up among them), from the "
            "first all-reduce's start to backward's end; it counts compute in between as overlap, so it is not one "
            f"of the causes (exposed communication is {ms(value('exposed_comm'))})"
        )
    return lines


def _in_terms(record: Record, estimate: str) -> str | None:
    """The causes' line for one estimate, where the record measured the causes it needs."""
    measured = causes_in_place(record)
    if estimate in ("no_sync", "reducer") and measured.get("overlap_slowdown") is None:
        return None
    lines = reconcile(record, measured)
    prefix = {"trace": "trace ", "no_sync": "no_sync difference ", "reducer": "reducer "}[estimate]
    return next((line for line in lines if line.startswith(prefix)), None)
