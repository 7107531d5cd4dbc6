"""Where the scaling went: the per-step time a DDP run at world size N loses against its one-device
reference, split into measured terms that add up to it. No torch.

Under weak scaling E(N) = X(N) / (N X(1)) = t(1) / t(N), with t the time of one step (the timed
window over its steps: a device's batch per step). So the points lost, 1 - E(N), are
(t(N) - t(1)) / t(N), and each term's milliseconds over t(N) are its points; the points of all
terms, `unexplained` included, add up to 100 % - E(N).

The terms (`TERMS` defines each once; the report's glossary and `ddpbench explain` read it):
- ddp_work: DDP's own work without a network: the gradient timeline's steps through DDP over a
  one-rank group against the same module stepped unwrapped in the same run.
- data: data loading per step at N minus at the reference (the host's wait for the next batch
  inside the timed window; on GPUs the device's idle time waiting for it).
- exposed_comm: communication no computation hides, from the trace (HolisticTraceAnalysis's
  definition) of the rank that waits least in its collectives: transfer, not waiting.
- overlap_slowdown: backward slowed by the all-reduces running beside it (CPU: gloo's threads take
  cores; GPU: NCCL's kernels take SMs and memory bandwidth): the timeline's backward span with
  DDP's all-reduce against the one-rank DDP's, which does the same copies without a network.
- slowest_rank: the slowest rank's own step against the median rank's (the no_sync replay, where
  no rank waits for another), or else the excess wait inside collectives (from the traces).
- unexplained: the rest, always shown.

A rank that waits for a slower peer does so inside a collective, so the fast rank's exposed time
holds the wait: only the rank that waits least shows the transfer alone. The median rank with an
even count is the lower middle one, the faster: with two ranks the slowest rank's term is its
whole lead over the other.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field, replace

from ddpbench.analysis.frames import reference_runs
from ddpbench.analysis.registry import (
    exposed_comm_no_sync_s,
    exposed_comm_reducer_s,
    exposed_comm_trace_s,
    iteration_p50_s,
    profiled_step_p50_s,
)
from ddpbench.records.schema import Record, TimelineStep


@dataclass(frozen=True)
class TermDefinition:
    name: str
    label: str
    """The term in the user's words (report and terminal)."""
    method: str
    """How it is measured (the glossary)."""


TERMS = (
    TermDefinition(
        "ddp_work",
        "DDP's own work",
        "what DDP itself costs a step without a network (its hooks, the copies into and out of "
        "gradient buckets, the wrapper): steps through DDP over a process group of one rank against "
        "the same module stepped without DDP, both in the run's gradient timeline phase",
    ),
    TermDefinition(
        "data",
        "data loading",
        "data loading per step at N devices minus at the one-device reference: the time from a timed "
        "step's start until its batch is in hand (on GPUs, the device's idle time waiting for input); a "
        "cost the reference pays too is not lost scaling",
    ),
    TermDefinition(
        "exposed_comm",
        "exposed communication",
        "communication that no computation hides (HolisticTraceAnalysis's definition), per profiled "
        "step, from the rank that waits least in its collectives: the transfer, not waiting for peers",
    ),
    TermDefinition(
        "overlap_slowdown",
        "compute slowed by overlap",
        "backward slowed by the all-reduces that run beside it (on CPU gloo's threads take cores, on "
        "GPUs NCCL's kernels take SMs and memory bandwidth): backward's span with DDP's all-reduce "
        "against the one-rank DDP's, which does the same copies without a network",
    ),
    TermDefinition(
        "slowest_rank",
        "waiting for the slowest rank",
        "the slowest rank's own step against the median rank's, in the no_sync replay where no rank "
        "waits for another; without a replay, the excess wait inside collectives in the traces",
    ),
    TermDefinition(
        "unexplained",
        "not explained",
        "the lost time minus every measured term: where the model of the step is incomplete, shown "
        "as such and never folded into a term",
    ),
)
TERM_NAMES = tuple(term.name for term in TERMS)
LABELS = {term.name: term.label for term in TERMS}

ADVICE_MIN_POINTS = 2.0
"""Advice is given for terms worth at least this many points of efficiency."""


@dataclass
class Term:
    s_per_step: float | None
    """Seconds per step; None where the run could not measure it (`basis` says why)."""
    points: float | None
    """Points of efficiency: s_per_step / t(N) x 100."""
    basis: str
    """How it was measured here, or why it could not be."""


@dataclass
class Breakdown:
    run_id: str
    workload: str
    world_size: int
    efficiency: float
    step_s: float
    """t(N): the run's time per step (timed window / steps)."""
    reference_step_s: float
    """t(1): the reference's time per step, a device's batch per step."""
    reference: str
    terms: dict[str, Term]
    phases: dict[str, float | None] = field(default_factory=dict)
    """The step at N by phase, seconds: compute, data, exposed communication, waiting."""
    estimates: list[str] = field(default_factory=list)
    """The three exposed-communication estimates, each in the terms it holds."""
    advice: list[str] = field(default_factory=list)
    unexplained_parts: dict[str, float] = field(default_factory=dict)
    """Measured beside `unexplained` (see `unexplained_parts`), seconds: compute_at_n_s,
    timed_beyond_timeline_s."""

    def as_dict(self) -> dict:
        return {
            "run_id": self.run_id,
            "workload": self.workload,
            "world_size": self.world_size,
            "efficiency": self.efficiency,
            "step_s": self.step_s,
            "reference_step_s": self.reference_step_s,
            "reference": self.reference,
            "terms": {
                name: {"s_per_step": term.s_per_step, "points": term.points, "basis": term.basis}
                for name, term in self.terms.items()
            },
            "phases": self.phases,
            "estimates": self.estimates,
            "advice": self.advice,
            "unexplained_parts": self.unexplained_parts,
        }

    def largest(self) -> tuple[str, Term]:
        """The measured term (not `unexplained`) that lost the most."""
        measured = [
            (name, term) for name, term in self.terms.items() if name != "unexplained" and term.s_per_step is not None
        ]
        return max(measured, key=lambda item: item[1].s_per_step, default=("unexplained", self.terms["unexplained"]))


class ExplainError(ValueError):
    """A run or sweep that cannot be explained; the message says what is missing and how to get it."""


# --- what one DDP record measured ----------------------------------------------------------------


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def _typical(values: list[float]) -> float:
    """The median rank; with an even count the lower middle (see the module docstring)."""
    return statistics.median_low(values)


def _backward_span(step: TimelineStep) -> float | None:
    ready = [t for t in step.grad_ready_s if t is not None]
    if step.backward_start_s is None or not ready:
        return None
    return max(ready) - step.backward_start_s


def _after_backward(step: TimelineStep) -> float | None:
    """From the last gradient being ready to the optimizer's start: under DDP, the wait for the
    last all-reduces."""
    ready = [t for t in step.grad_ready_s if t is not None]
    if step.optimizer_start_s is None or not ready:
        return None
    return step.optimizer_start_s - max(ready)


def _per_rank(record: Record, kind_a: str, kind_b: str, read) -> list[float]:
    """Per rank, median of `read` over its `kind_a` steps minus over its `kind_b` steps."""
    found = []
    for rank in record.timeline.by_rank if record.timeline else []:
        a = _median([v for v in map(read, getattr(rank, kind_a) or []) if v is not None])
        b = _median([v for v in map(read, getattr(rank, kind_b) or []) if v is not None])
        if a is not None and b is not None:
            found.append(a - b)
    return found


def _no_timeline(record: Record) -> str:
    if record.spec.profile:
        return "the record has no gradient timeline (made before ddpbench recorded one)"
    return "no gradient timeline (it runs with profiling on: drop --no-profile)"


def ddp_work(record: Record) -> tuple[float | None, str]:
    timeline = record.timeline
    if timeline is None:
        return None, _no_timeline(record)
    steps = lambda step: step.step_s  # noqa: E731
    if all(rank.unwrapped for rank in timeline.by_rank):
        values = _per_rank(record, "solo", "unwrapped", steps)
        if values:
            return _typical(values), (
                "timeline: one-rank DDP steps against the same module unwrapped, median rank " f"of {len(values)}"
            )
    values = _per_rank(record, "solo", "without_allreduce", steps)
    if values:
        return _typical(values), (
            "timeline: one-rank DDP steps against no_sync steps (a record without unwrapped "
            "steps: the wrapper's forward is not in it)"
        )
    return None, "the gradient timeline has no one-rank DDP steps (a record made before they existed)"


def overlap_slowdown(record: Record) -> tuple[float | None, str]:
    if record.timeline is None:
        return None, _no_timeline(record)
    values = _per_rank(record, "with_ddp", "solo", _backward_span)
    if not values:
        return None, "the gradient timeline has no one-rank DDP steps to compare backward with"
    return _typical(values), (
        "timeline: backward's span with DDP's all-reduce against one-rank DDP's, median rank " f"of {len(values)}"
    )


def _trace_exposed(record: Record) -> list[float]:
    trace = record.overlap.trace if record.overlap else None
    return [
        view.exposed_comm_us_per_step / 1e6
        for view in (trace.by_rank if trace else [])
        if view.exposed_comm_us_per_step is not None
    ]


def exposed_comm(record: Record) -> tuple[float | None, str]:
    exposed = _trace_exposed(record)
    if exposed:
        ranks = f"of {len(exposed)} ranks' traces" if len(exposed) > 1 else "one rank's trace"
        # Beside it, the trace-free figure: where the two differ, the profiled steps did not run as
        # the others (a launch that stalls on a busy CPU counts as computation in the trace).
        waits = _timeline_waits(record)
        check = f"; the timeline's wait after backward: {min(waits) * 1e3:.2f} ms" if waits else ""
        return min(exposed), f"trace: the profiled steps of the rank that waits least ({ranks}){check}"
    waits = _timeline_waits(record)
    if waits:
        return min(waits), "timeline: the wait for the last all-reduce after backward, the rank that waits least"
    return None, "no trace and no gradient timeline (both need profiling on: drop --no-profile)"


def _timeline_waits(record: Record) -> list[float]:
    found = []
    for rank in record.timeline.by_rank if record.timeline else []:
        value = _median([v for v in map(_after_backward, rank.with_ddp) if v is not None])
        if value is not None:
            found.append(value)
    return found


def slowest_rank(record: Record) -> tuple[float | None, str, int | None]:
    """(seconds, basis, the slowest rank)."""
    if record.spec.world_size == 1:
        return 0.0, "one rank: there is no other rank to wait for", None
    view = record.overlap.no_sync if record.overlap else None
    if view and len(view.by_rank) > 1:
        own = [rank.no_sync_step_time_median_s for rank in view.by_rank]
        slowest = max(range(len(own)), key=own.__getitem__)
        return (
            max(own) - _typical(own),
            "no_sync replay: the slowest rank's own step against the median rank's",
            slowest,
        )
    exposed = _trace_exposed(record)
    if len(exposed) > 1:
        # The slowest rank waits least: the others' extra exposed time is their wait for it.
        slowest = min(range(len(exposed)), key=exposed.__getitem__)
        return (
            _typical(exposed) - min(exposed),
            "traces: the median rank's wait inside collectives beyond the " "least-waiting rank's",
            slowest,
        )
    return None, "no no_sync replay and fewer than two ranks' traces", None


def data_wait(record: Record) -> float | None:
    """The slowest rank's mean wait for its batch in the timed window (it sets the pace)."""
    values = [rank.data_wait_mean_s for rank in record.ranks if rank.data_wait_mean_s is not None]
    return max(values) if values else None


# --- the breakdown --------------------------------------------------------------------------------


def step_time_s(record: Record) -> float:
    """A device's step: the timed window over its steps."""
    return record.metrics.window_s / record.metrics.timed_steps


def explain(record: Record, records: list[tuple[str, Record]], profile: dict | None = None) -> Breakdown:
    """The breakdown of one ok DDP run against its sweep's local reference. With a network
    `profile`, the advice on exposed communication carries `ddpbench project`'s projected gains."""
    spec = record.spec
    if spec.strategy != "ddp" or record.status != "ok" or record.metrics is None:
        raise ExplainError(f"{record.run_id}: only ok DDP runs are explained")
    if spec.scaling != "weak":
        raise ExplainError(
            f"{record.run_id}: strong scaling (fixed global batch) is not broken down; the terms are "
            "per-device steps, which weak scaling keeps equal"
        )
    found, reference = reference_runs(record, records)
    found = [run for run in found if run.metrics]
    if not found:
        raise ExplainError(
            f"{record.run_id}: {reference}; add `local` to --strategies (ddpbench sweep) to measure "
            "the one-device reference"
        )
    x1 = statistics.median(run.metrics.throughput_units_per_s for run in found)
    units = record.metrics.units_per_sample
    reference_step = spec.batch_size * units / x1
    step = spec.batch_size * spec.world_size * units / record.metrics.throughput_units_per_s
    lost = step - reference_step

    measured, slowest = run_terms(record)
    data_n = data_wait(record)
    data_1 = _median([value for value in map(data_wait, found) if value is not None])
    if data_n is None or data_1 is None:
        measured["data"] = (
            None,
            "the run or its reference has no data-loading times (records made before " "ddpbench measured them)",
        )
    else:
        measured["data"] = (
            data_n - data_1,
            f"timed window: {data_n * 1e3:.2f} ms per step waiting for data at N, "
            f"{data_1 * 1e3:.2f} ms at the reference",
        )
    missing = [name for name, (value, _) in measured.items() if value is None]
    rest = lost - sum(value for value, _ in measured.values() if value is not None)
    holds = f"; it also holds {', '.join(missing)}, not measured in this run" if missing else ""
    parts = unexplained_parts(record, step, reference_step - (data_1 or 0.0), data_n or 0.0)
    within = "; ".join(f"{PART_WORDS[name]} {value * 1e3:.2f} ms" for name, value in parts.items())
    measured["unexplained"] = (
        rest,
        f"the lost {lost * 1e3:.2f} ms per step minus the measured terms{holds}"
        + (f"; measured beside it: {within}" if within else ""),
    )
    terms = {
        name: Term(value, None if value is None else 100 * value / step, basis)
        for name, (value, basis) in ((n, measured[n]) for n in TERM_NAMES)
    }

    efficiency = reference_step / step
    breakdown = Breakdown(
        record.run_id,
        spec.workload,
        spec.world_size,
        efficiency,
        step,
        reference_step,
        f"{reference}, {reference_step * 1e3:.2f} ms per step",
        terms,
    )
    transfer, wait = terms["exposed_comm"].s_per_step, terms["slowest_rank"].s_per_step
    breakdown.phases = {
        "data": data_n,
        "exposed_comm": transfer,
        "waiting": wait,
        "compute": step - sum(v for v in (data_n, transfer, wait) if v is not None),
    }
    breakdown.unexplained_parts = parts
    breakdown.estimates = reconcile(record, {name: term.s_per_step for name, term in terms.items()})
    breakdown.advice = advice(breakdown, record, slowest, profile)
    return breakdown


UNEXPLAINED_SHARE = 0.15
"""Above this share of the lost time, `unexplained` is called out with what was measured beside it."""


PART_WORDS = {
    "compute_at_n_s": "the module's own step at N (unwrapped) beyond the reference's compute",
    "timed_beyond_timeline_s": "the timed steps beyond the timeline's DDP steps",
}


def unexplained_parts(record: Record, step: float, reference_compute: float, data_n: float) -> dict[str, float]:
    """What the terms do not cover, measured where the record allows, in seconds (PART_WORDS):
    - the same module's own step at N (unwrapped, in the timeline) against the reference's step
      without its data wait: compute slowed by running N ranks at once (on CPU: shared memory
      bandwidth and caches), which no term holds, since every term is a difference taken at N;
    - the timed step against the timeline's own DDP steps (and the data wait): how far the steps
      the terms come from ran from the timed ones."""
    found = {}
    if record.timeline is None:
        return found
    unwrapped = [_median([s.step_s for s in rank.unwrapped or []]) for rank in record.timeline.by_rank]
    if unwrapped and all(value is not None for value in unwrapped):
        found["compute_at_n_s"] = _typical(unwrapped) - reference_compute
    with_ddp = [_median([s.step_s for s in rank.with_ddp]) for rank in record.timeline.by_rank]
    if with_ddp and all(value is not None for value in with_ddp):
        found["timed_beyond_timeline_s"] = step - data_n - _typical(with_ddp)
    return found


def run_terms(record: Record) -> tuple[dict[str, tuple[float | None, str]], int | None]:
    """The terms one DDP record measures by itself, as (seconds or None, basis), and the slowest
    rank; `data` and `unexplained` need the reference."""
    measured = {
        "ddp_work": ddp_work(record),
        "exposed_comm": exposed_comm(record),
        "overlap_slowdown": overlap_slowdown(record),
    }
    waited, basis, slowest = slowest_rank(record)
    measured["slowest_rank"] = (waited, basis)
    return measured, slowest


def reconcile(record: Record, seconds: dict[str, float | None]) -> list[str]:
    """The three exposed-communication estimates, each said in the terms it contains, with figures
    (`seconds`: term name -> seconds per step, from `run_terms` or a breakdown)."""

    def ms(value: float | None) -> str:
        return "n/a" if value is None else f"{value * 1e3:.2f} ms"

    lines = []
    value = seconds.get
    trace = exposed_comm_trace_s(record)
    if trace is not None and value("exposed_comm") is not None:
        # The profiler slows the steps it records: say how far its steps are from the timed ones.
        profiled, timed = profiled_step_p50_s(record), iteration_p50_s(record)
        steps = f", in profiled steps of {ms(profiled)} against {ms(timed)} timed" if profiled and timed else ""
        lines.append(
            f"trace {ms(trace)} (the rank exposing most) = exposed_comm {ms(value('exposed_comm'))} (the "
            f"rank exposing least) + {ms(trace - value('exposed_comm'))} that rank waits for its peers"
            f"{steps}"
        )
    no_sync = exposed_comm_no_sync_s(record)
    if no_sync is not None:
        # no_sync() skips the all-reduce, the bucket copies and the wait for peers: the difference holds them all.
        bucket, _ = _bucket_work(record)
        parts = {
            "exposed_comm": value("exposed_comm"),
            "overlap_slowdown": value("overlap_slowdown"),
            "bucket work": bucket,
            "slowest_rank": value("slowest_rank"),
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
            f"reducer {ms(reducer)}: DDP's own timers over its sampled iterations (warm-up among them), from "
            "the first all-reduce's start to backward's end; it counts compute in between as overlap, so it "
            f"is not one of the terms (exposed_comm is {ms(value('exposed_comm'))})"
        )
    return lines


def _bucket_work(record: Record) -> tuple[float | None, str]:
    """One-rank DDP's step against the no_sync step: the copies no_sync skips."""
    values = _per_rank(record, "solo", "without_allreduce", lambda step: step.step_s)
    return (_typical(values), "timeline") if values else (None, "no one-rank DDP steps")


def projected_gain(record: Record, profile: dict | None) -> str:
    """The best of a few what-ifs for exposed communication, projected from the run's own record
    (`ddpbench project`), in words and marked as a projection; "" where none can be made."""
    from ddpbench.analysis.network import ProfileError
    from ddpbench.analysis.projection import ProjectionError, WhatIf, project

    if profile is None or record.timeline is None:
        return ""
    knobs = record.spec.ddp
    own = WhatIf(
        world_size=record.spec.world_size,
        bucket_cap_mb=knobs.bucket_cap_mb,
        comm_hook=knobs.comm_hook,
        gradient_as_bucket_view=knobs.gradient_as_bucket_view,
    )
    options = {
        f"--bucket-cap-mb {2 * knobs.bucket_cap_mb:g}": replace(own, bucket_cap_mb=2 * knobs.bucket_cap_mb),
        f"--bucket-cap-mb {knobs.bucket_cap_mb / 2:g}": replace(own, bucket_cap_mb=knobs.bucket_cap_mb / 2),
        "--comm-hook bf16_compress": replace(own, comm_hook="bf16_compress"),
        "--gradient-as-bucket-view": replace(own, gradient_as_bucket_view=True),
    }
    try:
        base = project(record, profile, own).throughput
        gains = {
            flag: project(record, profile, what).throughput / base - 1 for flag, what in options.items() if what != own
        }
    except (ProfileError, ProjectionError):
        return ""
    flag = max(gains, key=gains.get)
    return (
        f" PROJECTION, not measured (profile {profile.get('name')}): {flag} gives {gains[flag]:+.1%} "
        "throughput, the best of " + ", ".join(f"{name} {gain:+.1%}" for name, gain in gains.items()) + "."
    )


def advice(breakdown: Breakdown, record: Record, slowest: int | None, profile: dict | None = None) -> list[str]:
    """One sentence per term worth at least ADVICE_MIN_POINTS, largest first."""
    said = []
    worth = sorted(
        (
            (name, term)
            for name, term in breakdown.terms.items()
            if term.points is not None and term.points >= ADVICE_MIN_POINTS
        ),
        key=lambda item: -item[1].points,
    )
    knobs = record.spec.ddp
    for name, term in worth:
        lost = f"{LABELS[name]} costs {term.s_per_step * 1e3:.2f} ms per step ({term.points:.1f} points)"
        if name == "exposed_comm":
            said.append(
                f"{lost}: try another bucket cap (now {knobs.bucket_cap_mb:g} MB, --bucket-cap-mb), gradient "
                "compression (--comm-hook bf16_compress) and --gradient-as-bucket-view; `ddpbench project` "
                "projects each from this record." + projected_gain(record, profile)
            )
        elif name == "data":
            said.append(
                f"{lost} more than at one device: give the DataLoader more workers (--num-workers, now "
                f"{record.spec.num_workers}) and pin memory."
            )
        elif name == "slowest_rank":
            host = record.ranks[slowest].hostname if slowest is not None and slowest < len(record.ranks) else None
            who = f"rank {slowest}" + (f" on {host}" if host else "") if slowest is not None else "one rank"
            said.append(f"{lost}: {who} is the slowest; look at that device and host (load, clocks, its data).")
        elif name == "ddp_work":
            said.append(
                f"{lost}: try --static-graph and --gradient-as-bucket-view, which save DDP's per-step "
                "bookkeeping and bucket copies."
            )
        elif name == "overlap_slowdown":
            said.append(
                f"{lost}: fewer, larger buckets (--bucket-cap-mb above {knobs.bucket_cap_mb:g}) or compression "
                "(--comm-hook bf16_compress) shorten the time all-reduces compete with backward."
            )
    return said + _unexplained_advice(breakdown)


def _unexplained_advice(breakdown: Breakdown) -> list[str]:
    """Said when `unexplained` is more than UNEXPLAINED_SHARE of the lost time: how much, and what
    was measured beside it."""
    term, lost = breakdown.terms["unexplained"], breakdown.step_s - breakdown.reference_step_s
    if term.s_per_step is None or lost <= 0 or abs(term.s_per_step) <= UNEXPLAINED_SHARE * lost:
        return []
    share = (
        f"{term.s_per_step * 1e3:.2f} ms per step is not explained ({abs(term.s_per_step) / lost:.0%} of the lost time)"
    )
    parts = breakdown.unexplained_parts
    if not parts:
        return [f"{share}; this record has no gradient timeline to say what lies beside it."]
    beside = []
    if "compute_at_n_s" in parts:
        value = parts["compute_at_n_s"]
        beside.append(
            f"the same module, unwrapped, steps {abs(value) * 1e3:.2f} ms {'slower' if value > 0 else 'faster'}"
            " at N than one device computes (N ranks at once share memory bandwidth and caches)"
        )
    if "timed_beyond_timeline_s" in parts:
        value = parts["timed_beyond_timeline_s"]
        beside.append(
            f"the timed steps ran {abs(value) * 1e3:.2f} ms {'longer' if value > 0 else 'shorter'} than "
            "the timeline's DDP steps the terms come from"
        )
    return [f"{share}: measured beside it, {' and '.join(beside)}."]


def explain_sweep(records: list[tuple[str, Record]], profile: dict | None = None) -> tuple[list[Breakdown], list[str]]:
    """Every ok DDP run, and a line for each that could not be explained. At world size 1 only
    DDP's own work and data loading can be lost (no communication, no other rank), and the terms
    say so."""
    runs = [record for _, record in records if record.spec.strategy == "ddp" and record.status == "ok"]
    if not runs:
        raise ExplainError("no ok DDP runs in the sweep: add `ddp` to --strategies (ddpbench sweep)")
    breakdowns, problems = [], []
    for record in sorted(runs, key=lambda r: (r.spec.workload, r.spec.world_size, r.run_id)):
        try:
            breakdowns.append(explain(record, records, profile))
        except ExplainError as exc:
            problems.append(str(exc))
    return breakdowns, problems


def format_breakdown(breakdown: Breakdown) -> str:
    lines = [
        f"{breakdown.run_id}  {breakdown.workload} x{breakdown.world_size}  E(N) {breakdown.efficiency:.1%}  "
        f"step {breakdown.step_s * 1e3:.2f} ms against {breakdown.reference_step_s * 1e3:.2f} ms at one device "
        f"({100 - 100 * breakdown.efficiency:.1f} points lost)"
    ]
    ordered = sorted(
        breakdown.terms.items(),
        key=lambda item: (
            item[0] == "unexplained",
            -(item[1].s_per_step if item[1].s_per_step is not None else float("-inf")),
        ),
    )
    for name, term in ordered:
        figure = (
            "not measured" if term.s_per_step is None else f"{term.s_per_step * 1e3:8.2f} ms  {term.points:5.1f} pts"
        )
        lines.append(f"  {name:<17} {figure:<24} {term.basis}")
    phases = ", ".join(
        f"{name} {'n/a' if value is None else f'{value * 1e3:.2f} ms'}" for name, value in breakdown.phases.items()
    )
    lines.append(f"  step at N        {phases}")
    lines += [f"  estimate         {line}" for line in breakdown.estimates]
    lines += [f"  advice           {line}" for line in breakdown.advice]
    return "\n".join(lines)
