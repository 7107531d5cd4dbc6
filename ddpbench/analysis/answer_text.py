"""The answers in words: one sentence per configuration, explain's table, the check between the two
efficiencies, and one piece of advice per cause worth acting on. No torch.

Every word here is one the Concepts page (docs/concepts.md) defines. A cause whose interval spans
zero is within noise: never the largest, never advised on.
"""

from __future__ import annotations

from dataclasses import replace

from ddpbench.analysis.answers import Answer
from ddpbench.analysis.causes import CAUSES, LABELS, PARTS
from ddpbench.analysis.estimates import Estimate
from ddpbench.records.schema import Record

ADVICE_MIN_POINTS = 2.0
"""Advice is given for causes beyond noise worth at least this many percentage points."""

SHORT = {
    "contention": "contention",
    "ddp_overhead": "overhead",
    "exposed_comm": "exposed",
    "overlap_slowdown": "bwd-slowed",
    "straggler_wait": "straggler",
    "forward_optimizer": "fwd+opt",
    "data": "data",
}
"""Column heads of explain's table."""


def percent(estimate: Estimate | None, runs: bool = True) -> str:
    """An efficiency as `59.6 % ± 1.1 (3 runs)`; one run says its interval covers that run only."""
    if estimate is None:
        return "n/a"
    half = f" ± {100 * estimate.half:.1f}" if estimate.has_interval else ""
    if not runs:
        return f"{100 * estimate.value:.1f} %{half}"
    return f"{100 * estimate.value:.1f} %{half} ({runs_words(estimate)})"


def runs_words(estimate: Estimate) -> str:
    if estimate.over == "runs":
        return f"{estimate.samples} runs"
    return "1 run: the interval covers that run only"


def points(estimate: Estimate | None, width: bool = False) -> str:
    """Percentage points ± the 95 % half-width; within noise in parentheses."""
    if estimate is None:
        return "n/a"
    if estimate.over == "exact":
        return f"{estimate.value:.1f}"
    if not estimate.has_interval:
        return f"{estimate.value:.1f}"
    cell = f"{estimate.value:.1f}±{estimate.half:.1f}" if estimate.half < 100 else f"{estimate.value:.1f}±?"
    return cell if estimate.significant else f"({cell})"


def cause_value(answer: Answer, name: str) -> str:
    """`19.0 ± 4.7 pp (6.12 ms per step)`."""
    cause = answer.causes[name]
    found = cause.points
    if found is None:
        return "not measured"
    half = f" ± {found.half:.1f}" if found.has_interval else ""
    ms = f" ({cause.seconds.value * 1e3:.2f} ms per step)" if cause.seconds is not None else ""
    return f"{found.value:.1f}{half} pp{ms}"


def cause_figure(answer: Answer, name: str) -> str:
    """`exposed communication 19.0 ± 4.7 pp (6.12 ms per step)`."""
    return f"{LABELS[name]} {cause_value(answer, name)}"


def largest_words(answer: Answer) -> str:
    """The largest cause, the causes tied with it, or why there is none."""
    largest = answer.largest()
    if largest:
        first = cause_figure(answer, largest[0])
        if len(largest) == 1:
            return f"largest cause {first}"
        noisy = set(answer.rivals())
        others = " and ".join(LABELS[name] + (" (within noise)" if name in noisy else "") for name in largest[1:])
        return f"largest cause {first}, tied with {others} (its lead would not hold in another sweep)"
    if not answer.in_place:
        return "its causes were not measured in place (no in-process ablation), so none is beyond noise"
    if answer.loss_within_noise():
        loss = answer.loss_points
        return f"it lost nothing beyond noise ({loss.value:.1f} ± {loss.half:.1f} pp in-process)"
    return "no single cause is beyond noise"


def sentence(answer: Answer) -> str:
    """The configuration in one line: its efficiency, its largest cause, a straggler if any."""
    spec = answer.record.spec
    said = [f"{answer.name}: E({spec.world_size}) {percent(answer.efficiency)}"]
    if answer.in_process is not None:
        said.append(f"in-process {percent(answer.in_process, runs=False)}")
    text = ", ".join(said) + f"; {largest_words(answer)}"
    straggler = answer.straggler
    if straggler is not None and straggler.named:
        text += f"; {straggler.who()} held the others back ({straggler.phase_words})"
    return text + cpu_words(answer)


def cpu_words(answer: Answer) -> str:
    """`; rank 1 waited for a core 12 % ± 3 of its step ...` where a rank waited beyond noise or a
    CPU quota held one back; "" otherwise."""
    words = answer.cpu.words() if answer.cpu is not None else None
    return f"; {words}" if words else ""


def contention_parts(answer: Answer) -> str:
    """`waiting for a core 3.10 ms, slower on a core 1.02 ms`: host contention's two parts, where the
    kernel's counters were read; "" otherwise."""
    found = []
    for definition in PARTS:
        part = answer.parts.get(definition.name)
        if part is not None and part.seconds is not None:
            half = f" ± {1e3 * part.seconds.half:.2f}" if part.seconds.has_interval else ""
            found.append(f"{definition.label} {1e3 * part.seconds.value:.2f}{half} ms")
    return ", ".join(found)


def closing_sentence(answer: Answer) -> str:
    """One workload's answer at the end of a sweep: how DDP scales there, why not better, and a
    rank that held the others back."""
    spec = answer.record.spec
    devices = "GPUs" if spec.device == "cuda" else "processes"
    if answer.efficiency is not None:
        kept = percent(answer.efficiency)
        said = f"{answer.workload}: DDP at {spec.world_size} {devices} keeps {kept} of linear scaling"
    else:
        said = f"{answer.workload}: DDP at {spec.world_size} {devices}, in-process {percent(answer.in_process)}"
    said += f"; {largest_words(answer)}"
    straggler = answer.straggler
    if straggler is not None and straggler.named:
        said += f"; {straggler.who()} held the others back ({straggler.phase_words})"
    return said + cpu_words(answer) + "."


def check_line(answer: Answer) -> str | None:
    """Where E(N) and the in-process efficiency differ beyond noise: by how much, and which of the
    two measurements' differences holds it."""
    gap = answer.gap
    if gap is None or not gap.significant:
        return None
    direction = "below" if gap.value < 0 else "above"
    said = f"E(N) lies {abs(gap.value):.1f} ± {gap.half:.1f} pp {direction} the in-process efficiency"
    parts = []
    reference = answer.checks.get("reference_vs_alone")
    if reference is not None and reference.seconds is not None and reference.seconds.significant:
        slower = "faster" if reference.seconds.value > 0 else "slower"
        parts.append(
            f"the reference process ran {slower} than one rank computing alone inside the DDP run "
            f"({abs(reference.seconds.value) * 1e3:.2f} ms per step): two processes at two times"
        )
    timed = answer.checks.get("timed_vs_ablation")
    if timed is not None and timed.seconds is not None and timed.seconds.significant:
        longer = "longer" if timed.seconds.value > 0 else "shorter"
        parts.append(
            f"the timed steps ran {abs(timed.seconds.value) * 1e3:.2f} ms {longer} than the ablation's DDP steps"
        )
    if answer.machine:
        parts.append(answer.machine[0])
    return said + (": " + "; ".join(parts) if parts else " (neither measurement's difference is beyond noise alone)")


def projected_gain(record: Record, profile: dict | None) -> str:
    """The best of a few what-ifs for exposed communication, projected from the run's record
    (`ddpbench project`), marked as a projection; "" where none can be made."""
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


def _advice_for(name: str, answer: Answer, profile: dict | None) -> str:
    record = answer.record
    knobs, spec = record.spec.ddp, record.spec
    lost = cause_figure(answer, name)
    if name == "exposed_comm" and spec.strategy == "fsdp2":
        return (
            f"{lost}: FSDP2's all-gathers and reduce-scatters; fewer, larger shard units (Workload.shard_units) "
            "issue fewer collectives, and ddp, which gathers nothing, trades this time for memory."
        )
    if name == "exposed_comm":
        return (
            f"{lost}: try another bucket size (now {knobs.bucket_cap_mb:g} MB: --bucket-cap-mb), gradient "
            "compression (--comm-hook bf16_compress) and --gradient-as-bucket-view; `ddpbench project` projects "
            "each from this record." + projected_gain(record, profile)
        )
    if name == "data":
        return (
            f"{lost} beyond one device's: give the DataLoader more workers (--num-workers, now {spec.num_workers}) "
            "and pin memory."
        )
    if name == "straggler_wait":
        straggler = answer.straggler
        if straggler is None or not straggler.named:
            return (
                f"{lost}: the ranks take turns being the slowest: look at what the host does to all of them "
                "(load, clocks, the data's source)."
            )
        return (
            f"{lost}: {straggler.who()} is the slowest ({straggler.phase_words}); look at that device and host "
            "(load, clocks, its data)."
        )
    if name == "ddp_overhead":
        return (
            f"{lost}: try --static-graph and --gradient-as-bucket-view (ddpbench run and sweep take both), which "
            "save DDP's per-step bookkeeping and bucket copies."
        )
    if name == "contention":
        return (
            f"{lost}: the ranks slow each other's compute on the shared host (memory bandwidth, caches, cores). "
            f"A sweep gives each rank the host's cores over its largest world size ({spec.threads_per_rank} "
            "thread(s) here); try fewer with --threads-per-rank T (run and sweep take it), ranks pinned apart, or "
            "fewer ranks per host."
        )
    if name == "overlap_slowdown":
        return (
            f"{lost}: fewer, larger buckets (--bucket-cap-mb above {knobs.bucket_cap_mb:g}) or compression "
            "(--comm-hook bf16_compress) shorten the time all-reduces compete with backward."
        )
    return (
        f"{lost}: forward, the loss and the optimizer take longer under DDP than under DDP on one rank (copies "
        "DDP makes only with a network, the all-reduces' launch); --gradient-as-bucket-view saves the copies."
    )


def advice(answer: Answer, profile: dict | None = None) -> list[tuple[str, str]]:
    """(cause, sentence) for every cause beyond noise worth ADVICE_MIN_POINTS, largest first."""
    return [
        (name, _advice_for(name, answer, profile))
        for name in answer.findings()
        if answer.causes[name].points.value >= ADVICE_MIN_POINTS
    ]


def top_advice(answer: Answer, profile: dict | None = None) -> str:
    """The one change to try, or that nothing is worth changing beyond noise."""
    found = advice(answer, profile)
    if found:
        return found[0][1]
    if not answer.in_place:
        return "nothing to try: its causes were not measured in place, so none is beyond noise"
    return f"nothing worth changing: no cause is beyond noise and worth {ADVICE_MIN_POINTS:g} pp or more"


def table(answers: list[Answer]) -> str:
    """explain's table: one row per configuration, pooled over its runs."""
    head = ["configuration", "runs", "E(N)", "in-process", "lost", *(SHORT[d.name] for d in CAUSES)]
    rows = []
    for answer in answers:
        loss = answer.loss_points
        rows.append(
            [
                answer.name,
                str(len(answer.runs)),
                percent(answer.efficiency, runs=False),
                percent(answer.in_process, runs=False),
                "n/a" if loss is None else f"{loss.value:.1f}",
                *(points(answer.causes[d.name].points) if d.name in answer.causes else "n/a" for d in CAUSES),
            ]
        )
    widths = [max(len(row[i]) for row in [head, *rows]) for i in range(len(head))]

    def line(cells):
        return "  ".join(
            cell.ljust(width) if i == 0 else cell.rjust(width) for i, (cell, width) in enumerate(zip(cells, widths))
        ).rstrip()

    notes = [
        "E(N): against the local run, another process; in-process: one rank alone against DDP inside the run's own "
        "processes. Each ± its 95 % interval over the runs. Causes in percentage points (pp) of the DDP step: "
        "they add up to 'lost' by construction; (in parentheses): within noise."
    ]
    without = [answer.name for answer in answers if not answer.in_place]
    if without:
        notes.append(
            f"no in-process ablation in {', '.join(without)}: causes as measured elsewhere in the run, once, without "
            "intervals, so none is beyond noise; n/a: not measured (--detail says why)."
        )
    notes += [f"!! {s}" for s in dict.fromkeys(s for answer in answers for s in answer.machine)]
    return "\n".join([line(head), *map(line, rows), *notes])


def detail(answer: Answer, profile: dict | None = None) -> str:
    """Everything about one configuration: each cause with how it was measured, its runs, the check."""
    loss = answer.loss_points
    lines = [
        f"{answer.name}  runs {', '.join(answer.run_ids)}"
        + (f" (left out: {', '.join(answer.left_out)})" if answer.left_out else ""),
        f"  E(N)              {percent(answer.efficiency)}",
        f"  in-process        {percent(answer.in_process)}"
        + ("" if loss is None else f"; lost {points(loss)} pp, which the causes add up to"),
    ]
    for definition in CAUSES:
        cause = answer.causes.get(definition.name)
        if cause is None:
            continue
        figure = (
            "not measured"
            if cause.points is None
            else f"{points(cause.points):>12} pp  {cause.seconds.value * 1e3:8.2f} ms"
            if cause.seconds is not None
            else f"{points(cause.points):>12} pp"
        )
        lines.append(f"  {definition.label:<33} {figure:<28} {cause.basis}")
        if definition.name == "contention" and contention_parts(answer):
            lines.append(f"    of which: {contention_parts(answer)}")
    if answer.gap is not None:
        lines.append(f"  check             E(N) - in-process {points(answer.gap)} pp")
        for name, cause in answer.checks.items():
            if cause.seconds is not None:
                lines.append(f"    {LABELS[name]:<31} {points(cause.seconds.scaled(1e3))} ms")
    if answer.straggler is not None:
        lines.append(f"  straggler         {answer.straggler.sentence()}")
    if answer.cpu is not None:
        lines.append(f"  CPU denied        {answer.cpu.words() or 'no rank waited for a core beyond noise'}")
    for _, said in advice(answer, profile):
        lines.append(f"  advice            {said}")
    return "\n".join(lines)
