"""The breakdown in words: one piece of advice per term worth acting on (with `ddpbench project`'s
projected gains where a network profile is given), and the terminal table of `ddpbench explain`.
No torch."""

from __future__ import annotations

from dataclasses import replace

from ddpbench.analysis.breakdown_terms import ADVICE_MIN_POINTS, LABELS, MEASUREMENT_TERMS, Breakdown
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
    """One sentence per finding worth at least ADVICE_MIN_POINTS, largest first: a term of DDP's
    (not the measurement's) whose 95 % interval excludes zero. Never advice on noise. Sets
    `breakdown.advice_terms` to the term each sentence is about."""
    said, about = [], []
    worth = sorted(
        (
            (name, term)
            for name, term in breakdown.terms.items()
            if term.significant and term.points >= ADVICE_MIN_POINTS and name not in MEASUREMENT_TERMS
        ),
        key=lambda item: -item[1].points,
    )
    knobs = record.spec.ddp
    for name, term in worth:
        about.append(name)
        half = term.half_width_points(breakdown.step_s)
        lost = f"{LABELS[name]} costs {term.s_per_step * 1e3:.2f} ms per step ({term.points:.1f} ± {half:.1f} points)"
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
        elif name == "slowest_rank" and not breakdown.ladder.get("halves_agree", True):
            said.append(
                f"{lost}: the ranks take turns being the slowest (the two halves of the ladder's blocks name "
                "different ranks): look at what the host does to all of them (load, clocks, the data's source)."
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
    unexplained = _unexplained_advice(breakdown)
    breakdown.advice_terms = about + ["unexplained"] * len(unexplained)
    return said + unexplained


def gap_note(breakdown: Breakdown) -> list[str]:
    """Without a ladder: how far the terms' sum falls short of the loss, and what was measured
    beside it, as a note (a loss less terms from other phases is a left-over, no finding)."""
    if breakdown.ladder:
        return []
    lost = breakdown.step_s - breakdown.reference_step_s
    gap = lost - (breakdown.terms_sum_s() or 0.0)
    if lost <= 0 or abs(gap) <= UNEXPLAINED_SHARE * lost:
        return []
    share = (
        f"the terms, measured elsewhere in the run, sum to {gap * 1e3:.2f} ms per step less than the loss "
        f"({abs(gap) / lost:.0%}); a left-over of other phases, not a term"
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


def _unexplained_advice(breakdown: Breakdown) -> list[str]:
    """Said when `unexplained` is a finding and more than UNEXPLAINED_SHARE of the lost time
    (records with a ladder; without one it is not measured, and `gap_note` speaks)."""
    term, lost = breakdown.terms.get("unexplained"), breakdown.step_s - breakdown.reference_step_s
    if breakdown.ladder:
        if term is None or not term.significant or lost <= 0 or abs(term.s_per_step) <= UNEXPLAINED_SHARE * lost:
            return []
        share = (
            f"{term.s_per_step * 1e3:.2f} ms per step is not explained ({abs(term.s_per_step) / lost:.0%} of "
            "the lost time)"
        )
        return [
            f"{share}: the typical rank's forward, loss and optimizer take that much longer under DDP than "
            "under one-rank DDP, outside backward and DDP's waits (bucket copies DDP makes only with a "
            "network, the all-reduces' launch)."
        ]
    return []


def format_breakdown(breakdown: Breakdown) -> str:
    textbook, in_run = efficiency_cells(breakdown)
    lost = breakdown.step_s - breakdown.reference_step_s
    total = breakdown.terms_sum_s()
    lines = [
        f"{breakdown.run_id}  {run_name(breakdown)}  E(N) {textbook}  in-run {in_run}  "
        f"step {breakdown.step_s * 1e3:.2f} ms against {breakdown.reference_step_s * 1e3:.2f} ms at one device "
        f"({100 * lost / breakdown.step_s:.1f} points lost; the terms sum to "
        f"{'n/a' if total is None else f'{100 * total / breakdown.step_s:.1f}'})"
    ]
    ordered = sorted(
        breakdown.terms.items(),
        key=lambda item: (
            item[0] == "unexplained",
            -(item[1].s_per_step if item[1].s_per_step is not None else float("-inf")),
        ),
    )
    for name, term in ordered:
        if term.s_per_step is None:
            figure = "not measured"
        else:
            half = term.half_width_points(breakdown.step_s)
            spread = "" if term.exact or half is None else f" ± {half:.1f}"
            noise = "" if term.significant or term.exact or half is None else " (noise)"
            figure = f"{term.s_per_step * 1e3:8.2f} ms  {term.points:5.1f}{spread} pts{noise}"
        lines.append(f"  {name:<17} {figure:<34} {term.basis}")
    phases = ", ".join(
        f"{name} {'n/a' if value is None else f'{value * 1e3:.2f} ms'}" for name, value in breakdown.phases.items()
    )
    lines.append(f"  step at N        {phases}")
    lines += [f"  estimate         {line}" for line in breakdown.estimates]
    lines += [f"  advice           {line}" for line in breakdown.advice]
    lines += [f"  note             {line}" for line in breakdown.notes]
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


def points_cell(term, step_s: float) -> str:
    """Points ± the 95 % half-width; within noise (the interval includes zero) in parentheses."""
    if term.s_per_step is None:
        return "n/a"
    half = term.half_width_points(step_s)
    if term.exact or half is None:
        return f"{term.points:.1f}"
    cell = f"{term.points:.1f}±{half:.1f}" if half < 100 else f"{term.points:.1f}±?"
    return cell if term.significant else f"({cell})"


def _percent(estimate: dict | None) -> str:
    """An efficiency {value, ci_low, ci_high} as a percentage ± its half-width."""
    if not estimate:
        return "n/a"
    value, low, high = estimate["value"], estimate["ci_low"], estimate["ci_high"]
    if low is None or high is None:
        return f"{value:.1%}"
    return f"{value:.1%}±{100 * (high - low) / 2:.1f}"


def efficiency_cells(breakdown: Breakdown) -> tuple[str, str]:
    """(E(N) against the reference run, the in-run efficiency from the ladder)."""
    textbook = f"{breakdown.efficiency:.1%}" if breakdown.has_reference_run else "no local"
    return textbook, _percent(breakdown.in_run.get("efficiency"))


def format_sweep_table(breakdowns: list[Breakdown]) -> str:
    """One row per DDP run: E(N), the in-run efficiency, the points lost, each term's points with
    its 95 % interval (in parentheses where it includes zero)."""
    from ddpbench.analysis.breakdown_terms import TERM_NAMES

    head = ["run", "E(N)", "in-run", "lost", *(SHORT_NAMES[name] for name in TERM_NAMES), "sum"]
    rows = []
    for breakdown in breakdowns:
        total = breakdown.terms_sum_s()
        rows.append(
            [
                run_name(breakdown),
                *efficiency_cells(breakdown),
                f"{100 * (breakdown.step_s - breakdown.reference_step_s) / breakdown.step_s:.1f}",
                *(points_cell(breakdown.terms[name], breakdown.step_s) for name in TERM_NAMES),
                "n/a" if total is None else f"{100 * total / breakdown.step_s:.1f}",
            ]
        )
    widths = [max(len(row[i]) for row in [head, *rows]) for i in range(len(head))]
    without = [run_name(b) for b in breakdowns if not b.ladder]
    notes = [
        "E(N): against the local run, another process; in-run: a rank alone and unwrapped against full DDP in "
        "the run's own processes (the ladder), ± its 95 % interval. Terms in points of efficiency ± their 95 % "
        "interval; (in parentheses): within noise, the interval includes 0. 'sum' adds the measured terms, "
        "to compare with 'lost' (nothing is forced to add up). * the measurement's, not DDP's."
    ]
    if without:
        notes.append(
            f"no ladder in {', '.join(without)} (a script's run, a compiled, fsdp2 or replicate run, --no-profile "
            "or an older record): its terms were not measured in place, as measured elsewhere in the run and "
            "without intervals, so none is a finding; n/a: not measured (--detail says why)."
        )
    machine = list(dict.fromkeys(sentence for breakdown in breakdowns for sentence in breakdown.machine))
    notes += [f"!! {sentence}" for sentence in machine]
    line = lambda cells: "  ".join(  # noqa: E731
        cell.ljust(width) if i == 0 else cell.rjust(width) for i, (cell, width) in enumerate(zip(cells, widths))
    ).rstrip()
    return "\n".join([line(head), *map(line, rows), *notes])


def disagreement(breakdown: Breakdown) -> str | None:
    """Why E(N) lies outside the in-run efficiency's interval, where it does: the probe's word on a
    process that ran at another speed, or the reference run's distance from rung 0."""
    efficiency = breakdown.in_run.get("efficiency")
    if not breakdown.has_reference_run or not efficiency or efficiency["ci_low"] is None:
        return None
    if efficiency["ci_low"] <= breakdown.efficiency <= efficiency["ci_high"]:
        return None
    said = (
        f"E(N) {breakdown.efficiency:.1%} lies outside the in-run efficiency's interval "
        f"({efficiency['ci_low']:.1%} to {efficiency['ci_high']:.1%})"
    )
    if breakdown.machine:
        return f"{said}: {breakdown.machine[0]}"
    term = breakdown.terms.get("reference_vs_rung0")
    if term is not None and term.s_per_step is not None:
        return (
            f"{said}: the local run's step and rung 0 of this run differ by {term.s_per_step * 1e3:.2f} ms "
            f"({term.points:.1f} points), two processes at two times; the in-run figure is this run's own"
        )
    return said


def in_run_loss(breakdown: Breakdown) -> tuple[float, float] | None:
    """The in-run loss in points of the ladder's DDP step and its 95 % half-width, or None."""
    efficiency = breakdown.in_run.get("efficiency")
    if not efficiency or efficiency["ci_low"] is None:
        return None
    return 100 * (1 - efficiency["value"]), 100 * (efficiency["ci_high"] - efficiency["ci_low"]) / 2


def verdict(breakdown: Breakdown) -> str:
    """What the run lost, in words, without its name and efficiencies: its largest finding, that
    its loss is within its noise, or that no single term is beyond it."""
    largest = breakdown.largest()
    if largest is not None:
        name, term = largest
        return f"largest loss {LABELS[name]} {term.points:.1f} ± {term.half_width_points(breakdown.step_s):.1f} points"
    loss = in_run_loss(breakdown)
    if loss is not None and abs(loss[0]) <= loss[1]:
        return f"no loss beyond this run's noise, {loss[0]:.1f} ± {loss[1]:.1f} points in-run"
    if not breakdown.ladder:
        return "its terms were not measured in place (no ladder), so none is a finding"
    return "no single term beyond its noise"


def finding(breakdown: Breakdown) -> str | None:
    """The run's one line worth reading, or None where it has nothing beyond its noise: its largest
    significant term, with the in-run efficiency beside E(N)."""
    if breakdown.largest() is None:
        return None
    textbook, in_run = efficiency_cells(breakdown)
    return f"{run_name(breakdown)}: E(N) {textbook}, in-run {in_run}; {verdict(breakdown)}"


def closing_line(breakdown: Breakdown) -> str:
    """The run in one line: its largest finding, or that its loss is within its noise."""
    said = finding(breakdown)
    if said is not None:
        return said
    textbook, in_run = efficiency_cells(breakdown)
    if breakdown.largest() is None and verdict(breakdown).startswith("no loss beyond"):
        return f"{run_name(breakdown)}: {verdict(breakdown)}"
    if not breakdown.ladder:
        return f"{run_name(breakdown)}: E(N) {textbook}; {verdict(breakdown)}"
    return f"{run_name(breakdown)}: E(N) {textbook}, in-run {in_run}; {verdict(breakdown)}"


def top_advice(breakdown: Breakdown) -> str:
    """The run's first piece of advice (its largest actionable finding), or why there is none."""
    if breakdown.advice:
        return breakdown.advice[0]
    if not breakdown.ladder:
        return "no advice: the terms were not measured in place, so none has an interval"
    return (
        f"no term of DDP's is a finding worth {ADVICE_MIN_POINTS:g} points or more (significant: its 95 % interval "
        "excludes 0): nothing to act on"
    )
