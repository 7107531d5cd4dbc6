"""The breakdown in words: one piece of advice per term worth acting on (with `ddpbench project`'s
projected gains where a network profile is given), and the terminal table of `ddpbench explain`.
No torch."""

from __future__ import annotations

from dataclasses import replace

from ddpbench.analysis.breakdown_terms import ADVICE_MIN_POINTS, LABELS, Breakdown
from ddpbench.records.schema import Record

UNEXPLAINED_SHARE = 0.15
"""Above this share of the lost time, `unexplained` is called out with what was measured beside it."""


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
        if name == "exposed_comm" and record.spec.strategy == "fsdp2":
            said.append(
                f"{lost}: FSDP2's all-gathers and reduce-scatters; fewer, larger shard units "
                "(Workload.shard_units) issue fewer collectives, and ddp, which gathers nothing, trades this "
                "time for memory (see the memory table)."
            )
        elif name == "exposed_comm":
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
        elif name == "contention":
            said.append(
                f"{lost}: the ranks slow each other's compute on the shared host (memory bandwidth, caches, "
                "cores): fewer threads per rank (--threads-per-rank), ranks pinned apart, or fewer ranks per "
                "host."
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
    if breakdown.ladder:
        return [
            f"{share}: the ladder's communication rung holds it beyond exposed transfer, overlap "
            "slowdown and waiting for the slowest rank (bucket copies DDP makes only with a network, "
            "the all-reduces' launch)."
        ]
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


def format_breakdown(breakdown: Breakdown) -> str:
    lines = [
        f"{breakdown.run_id}  {run_name(breakdown)}  E(N) {breakdown.efficiency:.1%}  "
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


SHORT_NAMES = {
    "ddp_work": "ddp_work",
    "contention": "contention",
    "data": "data",
    "exposed_comm": "exposed",
    "overlap_slowdown": "overlap",
    "slowest_rank": "slowest",
    "window_vs_ladder": "window*",
    "reference_vs_rung0": "reference*",
    "unexplained": "unexplained",
}
"""Column heads of the sweep's table; the starred ones are the measurement's, not DDP's."""


def run_name(breakdown: Breakdown) -> str:
    from ddpbench.config.workloads import short_workload_name

    strategy = "" if breakdown.strategy == "ddp" else f" {breakdown.strategy}"  # eager DDP: the plain name
    return f"{short_workload_name(breakdown.workload)}{strategy} x{breakdown.world_size}"


def _points_cell(term, step_s: float) -> str:
    if term.s_per_step is None:
        return "n/a"
    if term.ci_low_s is None or term.ci_high_s is None or term.ci_high_s == term.ci_low_s:
        return f"{term.points:.1f}"
    half = 100 * (term.ci_high_s - term.ci_low_s) / 2 / step_s
    return f"{term.points:.1f}±{half:.1f}" if half < 100 else f"{term.points:.1f}±?"


def format_sweep_table(breakdowns: list[Breakdown]) -> str:
    """One row per DDP run: E(N), the points lost, each term's points with its 95 % interval."""
    from ddpbench.analysis.breakdown_terms import TERM_NAMES

    head = ["run", "E(N)", "lost", *(SHORT_NAMES[name] for name in TERM_NAMES)]
    rows = [
        [
            run_name(breakdown),
            f"{breakdown.efficiency:.1%}",
            f"{100 - 100 * breakdown.efficiency:.1f}",
            *(_points_cell(breakdown.terms[name], breakdown.step_s) for name in TERM_NAMES),
        ]
        for breakdown in breakdowns
    ]
    widths = [max(len(row[i]) for row in [head, *rows]) for i in range(len(head))]
    without = [run_name(b) for b in breakdowns if not b.ladder]
    notes = [
        "points of efficiency per term, ± its 95 % interval from the ladder's paired blocks; they add up to "
        "'lost'. * the measurement's, not DDP's: the timed window against the ladder, the reference run "
        "against the ladder's bottom rung."
    ]
    if without:
        notes.append(
            f"no ladder in {', '.join(without)} (a script's run, a compiled, fsdp2 or replicate run, --no-profile "
            "or an older record): its terms "
            "as measured elsewhere in the run, without intervals; n/a: not measured (--detail says why)."
        )
    line = lambda cells: "  ".join(  # noqa: E731
        cell.ljust(width) if i == 0 else cell.rjust(width) for i, (cell, width) in enumerate(zip(cells, widths))
    ).rstrip()
    return "\n".join([line(head), *map(line, rows), *notes])


def closing_line(breakdown: Breakdown) -> str:
    """The largest term of one run, `unexplained` included; a term larger than the whole loss is
    said with what offsets it."""
    from ddpbench.analysis.breakdown_terms import MEASUREMENT_TERMS

    name, term = breakdown.largest()
    lost = 100 - 100 * breakdown.efficiency
    kind = " (measurement, not DDP)" if name in MEASUREMENT_TERMS else ""
    said = f"{run_name(breakdown)}: {LABELS[name]}{kind} {term.points:.1f} of {lost:.1f} points lost"
    if term.points > lost:
        offsets = ", ".join(f"{LABELS[n]} {t.points:.1f}" for n, t in breakdown.offsets())
        said += f", offset by {offsets}" if offsets else ""
    return said


def top_advice(breakdown: Breakdown) -> str:
    """The run's first piece of advice (its largest actionable term), or why there is none."""
    if breakdown.advice:
        return breakdown.advice[0]
    return f"no DDP term costs {ADVICE_MIN_POINTS:g} points or more: nothing to act on"
