"""Where the scaling went: the per-step time a DDP run at world size N loses against its one-device
reference, split into measured terms that add up to it. No torch.

Under weak scaling E(N) = X(N) / (N X(1)) = t(1) / t(N), with t the time of one step (the timed
window over its steps: a device's batch per step). So the points lost, 1 - E(N), are
(t(N) - t(1)) / t(N), and each term's milliseconds over t(N) are its points; the points of all
terms, `unexplained` included, add up to 100 % - E(N).

The terms (`breakdown_terms.TERMS` defines each once; the report's glossary and `ddpbench explain`
read it) come from the run's ladder where it has one (`ddpbench.analysis.ladder`: block-paired
differences of step kinds measured inside the run, each with its interval). A record without a
ladder (a script's run, --no-profile, an older record) gets the terms as measured before the
ladder, each from its own place in the run, and the rest as `unexplained`:
- ddp_work: the gradient timeline's steps through DDP over a one-rank group against the same
  module stepped unwrapped in the same run.
- data: data loading per step at N minus at the reference (the host's wait for the next batch
  inside the timed window; on GPUs the device's idle time waiting for it).
- exposed_comm: from the trace (HolisticTraceAnalysis's definition) of the rank that waits least
  in its collectives: transfer, not waiting.
- overlap_slowdown: the timeline's backward span with DDP's all-reduce against the one-rank DDP's.
- slowest_rank: the slowest rank's own step against the median rank's (the no_sync replay, where
  no rank waits for another), or else the excess wait inside collectives (from the traces).

A rank that waits for a slower peer does so inside a collective, so the fast rank's exposed time
holds the wait: only the rank that waits least shows the transfer alone. The median rank with an
even count is the lower middle one, the faster: with two ranks the slowest rank's term is its
whole lead over the other.
"""

from __future__ import annotations

import math
import statistics

from ddpbench.analysis.breakdown_terms import LABELS, MEASUREMENT_TERMS, TERM_NAMES, Breakdown, ExplainError, Term
from ddpbench.analysis.breakdown_text import advice, efficiency_cells, gap_note, in_run_loss
from ddpbench.analysis.frames import reference_runs
from ddpbench.analysis.ladder import (
    SCRIPT_LOOP,
    NoLadder,
    after_backward,
    backward_span,
    ladder_terms,
    lower_middle,
    read_ladder,
)
from ddpbench.analysis.probes import probe_flags
from ddpbench.analysis.registry import (
    exposed_comm_no_sync_s,
    exposed_comm_reducer_s,
    exposed_comm_trace_s,
    iteration_p50_s,
    profiled_step_p50_s,
    record_iteration_times_s,
)
from ddpbench.config.spec import strategy_order
from ddpbench.records.schema import Record

# --- what one DDP record measured ----------------------------------------------------------------


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def _typical(values: list[float]) -> float:
    """The typical rank's value (`ladder.lower_middle` of the values in order)."""
    return lower_middle(sorted(values))


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
    if record.spec.script:
        return SCRIPT_LOOP
    spec = record.spec
    if spec.strategy == "fsdp2":
        return "does not apply to fsdp2: it has no DDP reducer and buckets (its all-gathers are in the trace)"
    if spec.strategy != "ddp" or getattr(spec, "compile", "off") != "off":
        return (
            f"not measured for {spec.strategy_name}: the gradient timeline steps eager DDP beside the run's own "
            "steps, which this run does not have"
        )
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
    values = _per_rank(record, "with_ddp", "solo", backward_span)
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
        value = _median([v for v in map(after_backward, rank.with_ddp) if v is not None])
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
        # The slowest rank waits least: the others' extra exposed time is their wait for it. The
        # median rank by speed waits more than the slowest: with an even count, the faster of
        # the two middle ranks is the one that waits more (median_high of the waits).
        slowest = min(range(len(exposed)), key=exposed.__getitem__)
        return (
            statistics.median_high(exposed) - min(exposed),
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
    """The breakdown of one ok DDP run against its sweep's local reference, or, where the folder
    has none and the run has a ladder, against the ladder's rung 0 (the in-run reference). With a
    network `profile`, the advice on exposed communication carries `ddpbench project`'s projected
    gains."""
    spec = record.spec
    if not spec.launched_by_torchrun or record.status != "ok" or record.metrics is None:
        raise ExplainError(f"{record.run_id}: only ok runs of ddp, fsdp2 or replicate are explained")
    if spec.scaling != "weak":
        raise ExplainError(
            f"{record.run_id}: strong scaling (fixed global batch) is not broken down; the terms are "
            "per-device steps, which weak scaling keeps equal"
        )
    try:
        ladder = read_ladder(record)
    except NoLadder as exc:
        ladder, no_ladder = None, str(exc)
    found, reference = reference_runs(record, records)
    found = [run for run in found if run.metrics]
    if not found and ladder is None:
        how = (
            "a script's sweep measures its DDP x1 run as the reference"
            if spec.script
            else "add `local` to --strategies (ddpbench sweep) to measure the one-device reference"
        )
        raise ExplainError(f"{record.run_id}: {reference}; {how}")
    units = record.metrics.units_per_sample
    step = spec.batch_size * spec.world_size * units / record.metrics.throughput_units_per_s
    in_run = None
    if ladder is not None:
        in_run = {
            "efficiency": _as_dict(ladder.estimate("in_run_efficiency")),
            "lost_s": _as_dict(ladder.estimate("in_run_loss")),
        }
    if found:
        x1 = statistics.median(run.metrics.throughput_units_per_s for run in found)
        reference_step = spec.batch_size * units / x1
        reference_text = f"{reference}, {reference_step * 1e3:.2f} ms per step"
        efficiency = reference_step / step
    else:
        reference_step = ladder.estimate("bottom").s
        reference_text = (
            f"rung 0 of the ladder (a rank alone, unwrapped, in this run's processes), {reference_step * 1e3:.2f} "
            f"ms per step: {reference}"
        )
        # E and the points lost from the same two figures; the in-run efficiency (a mean of the
        # blocks' ratios) is shown as what it is.
        efficiency = reference_step / step

    data_n = data_wait(record)
    if ladder is not None:
        reference_steps = [value for run in found for value in record_iteration_times_s(run)]
        estimates = ladder_terms(record, ladder, step, reference_step if found else None, reference_steps)
        terms = {
            name: Term(None, None, basis)
            if est is None
            else Term(est.s, 100 * est.s / step, basis, *_interval(est), exact=est.blocks == 0)
            for name, (est, basis) in ((n, estimates[n]) for n in TERM_NAMES)
        }
        slowest = ladder.slowest_rank if ladder.world_size > 1 else None
        parts: dict[str, float] = {}
    else:
        terms, slowest, parts = _terms_without_ladder(record, found, step, reference_step, data_n, no_ladder)

    breakdown = Breakdown(
        record.run_id,
        spec.workload,
        spec.world_size,
        efficiency,
        step,
        reference_step,
        reference_text,
        terms,
        strategy=spec.strategy_name,
    )
    breakdown.in_run = in_run or {}
    breakdown.has_reference_run = bool(found)
    breakdown.reference_run_ids = [run.run_id for run in found]
    transfer, wait = terms["exposed_comm"].s_per_step, terms["slowest_rank"].s_per_step
    breakdown.phases = {
        "data": data_n,
        "exposed_comm": transfer,
        "waiting": wait,
        "compute": step - sum(v for v in (data_n, transfer, wait) if v is not None),
    }
    breakdown.unexplained_parts = parts
    if ladder is not None:
        breakdown.ladder = {
            "typical_rank": ladder.typical_rank,
            "slowest_rank": ladder.slowest_rank,
            "blocks": len(ladder.blocks["top"]),
            "wall_s": ladder.wall_s,
            "halves_agree": ladder.halves_agree,
        }
    breakdown.estimates = reconcile(record, {name: term.s_per_step for name, term in terms.items()})
    breakdown.advice = advice(breakdown, record, slowest, profile)
    breakdown.notes = gap_note(breakdown)
    return breakdown


def _as_dict(estimate) -> dict:
    low, high = _interval(estimate)
    return {"value": estimate.s, "ci_low": low, "ci_high": high, "blocks": estimate.blocks}


NOT_IN_PLACE = "not measured in place (no ladder: {why}); "


def _terms_without_ladder(
    record: Record, found: list[Record], step: float, reference_step: float, data_n: float | None, why: str
) -> tuple[dict[str, Term], int | None, dict[str, float]]:
    """The terms of a record without a ladder (older records, script runs, --no-profile): each
    from where it was measured (timeline, traces, replay, timed window), without an interval, so
    none is a finding; nothing is what the others leave over (`unexplained` is not measured)."""
    measured, slowest = run_terms(record)
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
    for name in ("contention", *MEASUREMENT_TERMS):
        measured[name] = (None, why)
    measured["unexplained"] = (
        None,
        "not measured: without a ladder the terms come from different phases of the run, and the loss "
        "less their sum would be a left-over, not a measurement",
    )
    parts = unexplained_parts(record, step, reference_step - (data_1 or 0.0), data_n or 0.0)
    prefix = NOT_IN_PLACE.format(why=why)
    terms = {
        name: Term(value, None if value is None else 100 * value / step, basis if value is None else prefix + basis)
        for name, (value, basis) in ((n, measured[n]) for n in TERM_NAMES)
    }
    return terms, slowest, parts


def _interval(estimate) -> tuple[float | None, float | None]:
    """The estimate's interval, or (None, None) where it has none (a single block): JSON has no
    infinity."""
    if math.isfinite(estimate.ci_low_s) and math.isfinite(estimate.ci_high_s):
        return estimate.ci_low_s, estimate.ci_high_s
    return None, None


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


def terms_in_place(record: Record) -> dict[str, float | None]:
    """Seconds per step by term, from this record alone: the ladder's terms where it has one (the
    same engine, the same values as `explain`, against the in-run rung 0), else the terms measured
    elsewhere in the run (`run_terms`)."""
    try:
        read_ladder(record)
        found = explain(record, [(record.run_id, record)])
    except (NoLadder, ExplainError):  # no ladder, or one explain does not break down (strong scaling)
        measured, _ = run_terms(record)
        return {name: value for name, (value, _) in measured.items()}
    return {name: term.s_per_step for name, term in found.terms.items()}


def run_terms(record: Record) -> tuple[dict[str, tuple[float | None, str]], int | None]:
    """The terms a DDP record without a ladder measured elsewhere in the run, as (seconds or None,
    basis), and the slowest rank; `data` needs the reference."""
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
        # Side by side, not subtracted: the trace's steps and the terms' are different steps.
        wait = f" and slowest_rank {ms(value('slowest_rank'))} (the wait)" if value("slowest_rank") is not None else ""
        lines.append(
            f"trace {ms(trace)} (the rank exposing most: the transfer and that rank's wait for its peers){steps}; "
            f"beside it, exposed_comm {ms(value('exposed_comm'))} (the transfer){wait}"
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


def _explain_order(record: Record) -> tuple:
    spec = record.spec
    return spec.workload, strategy_order(spec.strategy_name), spec.world_size, record.run_id


def explain_sweep(records: list[tuple[str, Record]], profile: dict | None = None) -> tuple[list[Breakdown], list[str]]:
    """Every ok DDP run, and a line for each that could not be explained. At world size 1 only
    DDP's own work and data loading can be lost (no communication, no other rank), and the terms
    say so."""
    # A script's DDP x1 run is its reference (it has no local run): nothing to break down there.
    runs = [
        record
        for _, record in records
        if record.spec.launched_by_torchrun
        and record.status == "ok"
        and not (record.spec.script and record.spec.world_size == 1)
    ]
    if not runs:
        ddp = [record for _, record in records if record.spec.launched_by_torchrun]
        failed = sorted(record.run_id for record in ddp if record.status != "ok")
        if failed:
            raise ExplainError(
                f"no ok run of ddp, fsdp2 or replicate to break down: {', '.join(failed)} did not finish ok "
                "(ddpbench table says why)"
            )
        if ddp:
            raise ExplainError(
                "no DDP run to break down: a script's DDP x1 run is its reference; sweep 2 or more ranks " "(--nproc)"
            )
        raise ExplainError("no ok DDP runs in the sweep: add `ddp` to --strategies (ddpbench sweep)")
    breakdowns, problems = [], []
    flags = {flag.run_id: flag.sentence() for flag in probe_flags([record for _, record in records])}
    for record in sorted(runs, key=_explain_order):
        try:
            found = explain(record, records, profile)
        except ExplainError as exc:
            problems.append(str(exc))
            continue
        found.machine = [flags[run_id] for run_id in (found.run_id, *found.reference_run_ids) if run_id in flags]
        breakdowns.append(found)
    return breakdowns, problems


def in_run_summary(record: Record) -> str | None:
    """A DDP run's breakdown against its own rung 0, in one line, for `ddpbench run`'s summary
    (the same engine and figures as `explain`); None where the record has no ladder."""
    try:
        found = explain(record, [(record.run_id, record)])
    except ExplainError:
        return None
    if not found.ladder:
        return None
    said = f"efficiency {efficiency_cells(found)[1]} (a rank alone and unwrapped against DDP, in these processes)"
    largest = found.largest()
    if largest is not None:
        name, term = largest
        half = term.half_width_points(found.step_s)
        figure = f"{term.s_per_step * 1e3:.2f} ms ({term.points:.1f} ± {half:.1f} points)"
        return f"{said}; largest loss {LABELS[name]} {figure}"
    loss = in_run_loss(found)
    if loss is not None and abs(loss[0]) <= loss[1]:
        return f"{said}; no loss beyond this run's noise"
    return f"{said}; no single term beyond its noise (ddpbench explain --detail lists them)"


def ladder_straggler(record: Record):
    """The straggler verdict from the same engine as `explain`, for a run with a ladder (None
    without one): the slowest rank is a straggler when the others' wait for it is a finding, its
    95 % interval excluding zero; otherwise no rank is slower than the run's noise can show."""
    from ddpbench.analysis.ranks import Verdict

    try:
        found = explain(record, [(record.run_id, record)])
    except ExplainError:
        return None
    if not found.ladder or record.spec.world_size < 2:
        return None
    term, slowest = found.terms["slowest_rank"], found.ladder["slowest_rank"]
    host = record.ranks[slowest].hostname if slowest < len(record.ranks) else None
    who = f"rank {slowest}" + (f" on {host}" if host else "")
    half = (term.ci_high_s - term.ci_low_s) / 2 if term.ci_low_s is not None else float("nan")
    basis = (
        "From the ladder, as ddpbench explain reads it: the slowest rank is the one the others wait for in DDP's "
        "collectives, chosen on half the blocks and its wait read on the other half; a straggler when that wait's "
        "95 % interval excludes zero."
    )
    figure = f"{term.s_per_step * 1e3:.2f} ± {half * 1e3:.2f} ms per step ({term.points:.1f} points)"
    if term.significant and term.s_per_step > 0 and not found.ladder.get("halves_agree", True):
        return Verdict(
            True,
            f"The ranks take turns: the other ranks wait {figure} for a slower rank, but the two halves of the "
            "blocks name different ranks as the slowest.",
            basis,
        )
    if term.significant and term.s_per_step > 0:
        return Verdict(True, f"{who} is the slowest: the other ranks wait {figure} for it.", basis)
    return Verdict(
        False, f"No straggler beyond the run's noise: the wait for the slowest rank ({who}) is {figure}.", basis
    )
