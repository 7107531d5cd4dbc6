"""Do the three estimates of exposed communication agree, and if not, why not, in words.

The estimates measure different things on purpose (see the README's "Communication overlap"):
- trace: time inside the collectives' own profiler events that no computation overlaps, over a
  few profiled steps;
- no_sync: how much longer a step takes with the all-reduce than without it, over the same
  in-memory batches (older records: the timed steps, data loading included, against a replay);
- reducer: DDP's own timers, from the first bucket's all-reduce start to backward's end.
When they agree within AGREEMENT (relative to their median), any of them can be quoted; when they
do not, the sentence says which one stands out and what it holds in the measured terms of the
breakdown (`ddpbench.analysis.breakdown`), with figures; a record without the measurements that
split it says what the estimate contains by definition.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from ddpbench.analysis.breakdown import reconcile, terms_in_place
from ddpbench.analysis.registry import exposed_comm_no_sync_s, exposed_comm_reducer_s, exposed_comm_trace_s
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
        reason = f"in measured terms, {measured}"
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


def _in_terms(record: Record, estimate: str) -> str | None:
    """The breakdown's line for one estimate, where the record measured the terms it needs."""
    measured = terms_in_place(record)
    if estimate in ("no_sync", "reducer") and measured.get("overlap_slowdown") is None:
        return None
    lines = reconcile(record, measured)
    prefix = {"trace": "trace ", "no_sync": "no_sync difference ", "reducer": "reducer "}[estimate]
    return next((line for line in lines if line.startswith(prefix)), None)
