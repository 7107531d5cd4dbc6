"""One answer per configuration: its DDP runs answered one by one (`causes`), then pooled over the
runs (`estimates`: means, and ratios of pooled means with a t interval over the runs, K - 1 degrees
of freedom), which is what every view shows: the table (`table_figures`), explain, the report, the
closing screen and the gate. No torch.

X is the mean throughput of the runs pooled; E(N) is that X over N times X(1) pooled alike, so the
two printed side by side reproduce each other; a cause's points are its pooled seconds over the
pooled DDP step, so points and milliseconds never differ in sign.

A run the speed check flags (`probes`: its processes ran at another speed than the rest of the
sweep) enters no pooled figure, unless every run of its configuration is flagged; the answer names
the runs it left out. A reference run it flags is likewise not divided by.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field

from ddpbench.analysis.ablation import CAUSE_NAMES, NoAblation, read_ablation
from ddpbench.analysis.causes import (
    PART_ROUNDS,
    Cause,
    ExplainError,
    RunAnswer,
    answer_from_ablation,
    round_points,
    rounds_lead,
    run_label,
)
from ddpbench.analysis.configurations import (
    SCRIPT_REFERENCE,
    configuration_key,
    efficiency_against,
    is_measured,
    is_reference,
    kept_references,
    reference_batch,
    reference_runs,
    sample_unit,
)
from ddpbench.analysis.cpu_denied import ConfigurationCpu, configuration_cpu
from ddpbench.analysis.estimates import (
    Estimate,
    points_lost,
    pool,
    ratio_of_independent_means,
    ratio_of_means,
    ratio_over_one_run,
    standard_error,
    t_975,
)
from ddpbench.analysis.probes import probe_flags
from ddpbench.analysis.registry import record_iteration_times_s
from ddpbench.analysis.straggler import Straggler, pooled
from ddpbench.analysis.without_ablation import answer_without_ablation
from ddpbench.config.identity import identity_id
from ddpbench.config.spec import strategy_order
from ddpbench.config.workloads import short_workload_name
from ddpbench.records.schema import Record


def answer_run(record: Record, records: list[tuple[str, Record]], flagged: set[str] = frozenset(), job=None):
    """One ok DDP run (ddp, fsdp2, replicate) against its configuration's pooled X(1), or ExplainError."""
    spec = record.spec
    if not spec.launched_by_torchrun or record.status != "ok" or record.metrics is None:
        raise ExplainError(f"{record.run_id}: only ok runs of ddp, fsdp2 or replicate are explained")
    if spec.scaling != "weak":
        raise ExplainError(
            f"{record.run_id}: strong scaling (fixed global batch) is not broken down: the causes are per-device "
            "steps, which weak scaling keeps equal"
        )
    candidates, reason = reference_runs(record, records)
    references = kept_references(candidates, flagged)
    ids = [run.run_id for run in references]
    try:
        ablation = read_ablation(record)
    except NoAblation as exc:
        if not references:
            how = (
                "a script's sweep measures its DDP x1 run as the reference"
                if spec.script
                else "add `local` to --strategies (ddpbench sweep) to measure the one-device reference"
            )
            raise ExplainError(f"{record.run_id}: {reason}; {how}") from None
        return answer_without_ablation(record, references, ids, str(exc), job)
    return answer_from_ablation(record, ablation, references, ids)


@dataclass
class Answer:
    """A configuration's answer, pooled over its runs."""

    runs: list[RunAnswer]
    """The runs pooled."""
    left_out: dict[str, str] = field(default_factory=dict)
    """Runs of the configuration the speed check flagged and left out: run id -> why."""
    throughput: Estimate | None = None
    """X: the mean throughput of the runs pooled (what the table prints)."""
    reference_throughput: Estimate | None = None
    """X(1): the mean throughput of the kept reference runs."""
    reference_steps_s: list[float] = field(default_factory=list)
    """Each kept reference run's own step (its batch over its throughput): the single-device
    compute, one value per run, for comparisons over runs (every DDP run shares the pooled X(1))."""
    efficiency: Estimate | None = None
    """E(N) = X(N) / (N X(1)) of those two, unrounded."""
    in_process: Estimate | None = None
    step: Estimate | None = None
    """The step the causes' points are shares of (the ablation's DDP step), pooled."""
    gap: Estimate | None = None
    causes: dict[str, Cause] = field(default_factory=dict)
    checks: dict[str, Cause] = field(default_factory=dict)
    parts: dict[str, Cause] = field(default_factory=dict)
    """Host contention's two parts (`causes.PARTS`), pooled alike, where the kernel's counters were read."""
    straggler: Straggler | None = None
    cpu: ConfigurationCpu | None = None
    """CPU denied: how long each rank waited for a core, pooled over the runs; None where the kernel's
    counters were not read."""
    machine: list[str] = field(default_factory=list)
    """What the speed check says of these runs or their references."""
    every_run: list[RunAnswer] = field(default_factory=list)
    """Every run of the configuration, those left out too."""

    @property
    def record(self) -> Record:
        return self.runs[0].record

    @property
    def name(self) -> str:
        return run_label(self.record)

    @property
    def workload(self) -> str:
        return short_workload_name(self.record.spec.workload)

    @property
    def world_size(self) -> int:
        return self.record.spec.world_size

    @property
    def run_ids(self) -> list[str]:
        return [run.run_id for run in self.runs]

    @property
    def in_place(self) -> bool:
        return all(run.in_place for run in self.runs)

    @property
    def why_not_in_place(self) -> str:
        return next((run.basis for run in self.runs if not run.in_place), "")

    @property
    def loss_points(self) -> Estimate | None:
        return None if self.in_process is None else points_lost(self.in_process)

    def failed_checks(self) -> list[str]:
        return sorted({name for run in self.runs for name in run.record.failed_checks()})

    def undecided_checks(self) -> list[str]:
        return sorted({n for run in self.runs for n, check in run.record.checks.items() if check.ok is None})

    def findings(self) -> list[str]:
        """Causes that lost scaling beyond noise (a positive interval), largest first. Without the
        in-process ablation a cause is measured once per run: only an interval over 3 or more runs
        makes it a finding (`_pool_causes`), never one run's own."""
        found = [
            (name, cause)
            for name, cause in self.causes.items()
            if cause.significant
            and cause.points.value > 0
            and (self.in_place or (cause.points.over == "runs" and cause.points.samples >= 3))
        ]
        return [name for name, _ in sorted(found, key=lambda item: -item[1].points.value)]

    def lead(self, first: str, second: str) -> Estimate | None:
        """How many percentage points `first` costs beyond `second`, paired: over the runs, the mean
        of their differences over the mean DDP step (a ratio of means, as every pooled figure); one
        run's over its rounds. None where the two were not measured side by side."""
        if self.in_place and len(self.runs) == 1:
            return rounds_lead(self.runs[0].round_values, first, second)
        measured = [
            (run.causes[first].seconds.value - run.causes[second].seconds.value, run.cause_step_s)
            for run in self.runs
            if first in run.causes
            and second in run.causes
            and run.causes[first].seconds is not None
            and run.causes[second].seconds is not None
        ]
        if len(measured) < 2:
            return None
        return ratio_of_means([d for d, _ in measured], [step for _, step in measured], "runs", 100.0)

    def rivals(self) -> list[str]:
        """Causes within noise that cost something by their estimate (positive, measured): none is
        ever the largest, but one may be as large as the largest finding."""
        found = self.findings()
        return [
            name
            for name, cause in self.causes.items()
            if name not in found
            and cause.points is not None
            and cause.points.over != "exact"
            and cause.points.value > 0
        ]

    def largest(self) -> list[str]:
        """The largest cause (a finding), and every other cause tied with it: one whose lead the
        largest's would not keep in another sweep of the same configuration on the same machine
        (`lead_holds`). A cause within noise is never the largest, but it is tied with it where the
        largest's lead over it would not hold: naming a smaller finding alone beside a larger,
        uncertain estimate would answer by chance. Empty where no cause is beyond noise."""
        return ties(self.findings(), self.lead, self.rivals())

    def loss_within_noise(self) -> bool:
        loss = self.loss_points
        return loss is not None and loss.has_interval and loss.low <= 0 <= loss.high


def ties(findings: list[str], lead, rivals: list[str] = ()) -> list[str]:
    """The first finding (the largest) and every other finding, or cause within noise costing
    something (`rivals`), whose lead it would not keep."""
    if not findings:
        return []
    return [findings[0]] + [name for name in [*findings[1:], *rivals] if not lead_holds(lead(findings[0], name))]


def largest_in_rounds(rounds: dict[str, dict[int, float]]) -> list[str]:
    """One run's largest cause and its ties from its ablation's rounds so far, by the rule
    `Answer.largest` applies to a configuration measured once (the worker asks it whether more
    rounds could decide the lead)."""
    points = {name: round_points(rounds, name) for name in CAUSE_NAMES if rounds.get(name)}
    found = sorted(
        (name for name, value in points.items() if value.significant and value.value > 0),
        key=lambda name: -points[name].value,
    )
    rivals = [name for name, value in points.items() if name not in found and value.value > 0]
    return ties(found, lambda first, second: rounds_lead(rounds, first, second), rivals)


def lead_holds(lead: Estimate | None) -> bool:
    """Whether a lead would hold in another sweep: its 95 % prediction interval for the next sweep's
    lead, whose estimate has a standard error of its own as large, stays above zero: the lead minus
    Student's t at its degrees of freedom times sqrt(2) standard errors. A confidence interval that
    excludes zero is not enough: it holds the true lead, not the next sweep's estimate of it."""
    if lead is None or lead.se is None or lead.samples < 2:
        return False
    return lead.value - t_975(lead.samples - 1) * math.sqrt(2) * lead.se > 0


def kept_runs(runs: list[Record], flags) -> list[Record]:
    """The runs that enter a pooled figure: those the speed check did not flag, or all of them
    where it flagged every one (the answer then says so)."""
    return [run for run in runs if run.run_id not in flags] or list(runs)


def pooled_throughput(runs: list[Record], flags) -> Estimate | None:
    """X: the mean throughput of a configuration's kept runs, with a t interval over them."""
    values = [run.metrics.throughput_units_per_s for run in kept_runs(runs, flags) if run.metrics]
    return Estimate.of_runs(values) if values else None


def reference_throughput(record: Record, records: list[tuple[str, Record]]) -> tuple[float | None, str]:
    """X(1) for one run, as the table prints it: its reference runs' pooled throughput (the speed
    check's flagged runs left out while others remain); None, with the reason, without one."""
    found, basis = reference_runs(record, records)
    flags = {flag.run_id for flag in probe_flags([other for _, other in records])}
    pooled = pooled_throughput(found, flags) if found else None
    return (pooled.value if pooled else None), basis


def pooled_efficiency(runs: list[Record], references: list[Record], flags) -> Estimate | None:
    """E(N) = X(N) / (N X(1)) of the pooled X of the same kept runs the table shows, with the delta
    method's interval over the runs; over one reference run, the interval the DDP runs allow (their
    run-to-run spread, and the reference run's own steps': X(1)'s spread from one run to the next
    one run cannot give); measured once on both sides, the one run's steps' interval
    (`configurations.efficiency_against`), which covers that run only."""
    kept = [run for run in kept_runs(runs, flags) if run.metrics]
    refs = [run for run in kept_runs(references, flags) if run.metrics]
    if not kept or not refs:
        return None
    x_n = [run.metrics.throughput_units_per_s for run in kept]
    x_1 = [run.metrics.throughput_units_per_s for run in refs]
    if len(refs) == 1 and len(kept) > 1:
        steps = record_iteration_times_s(refs[0])
        relative = standard_error(steps) / statistics.fmean(steps) if steps else math.inf
        return ratio_over_one_run(x_n, x_1[0], relative, kept[0].spec.world_size)
    estimate = ratio_of_independent_means(x_n, x_1, kept[0].spec.world_size)
    if estimate.has_interval or len(kept) > 1:
        return estimate
    _, one = efficiency_against(kept[0], refs)
    if one is None or not one.has_interval or not one.value > 0:
        return estimate
    return one.scaled(estimate.value / one.value)


def _pooled_ratio(measured: list[tuple[Estimate, float]], scale: float, min_runs: int = 2) -> Estimate:
    """A figure's runs (value, the step it is a share of) as the ratio of their means."""
    if len(measured) == 1:
        return measured[0][0].scaled(scale / measured[0][1])
    found = ratio_of_means([e.value for e, _ in measured], [step for _, step in measured], "runs", scale)
    if len(measured) < min_runs:
        return Estimate(found.value, None, None, found.samples, "runs", None)
    return found


def _pool_causes(runs: list[RunAnswer], attribute: str, names) -> dict[str, Cause]:
    """Each cause's seconds pooled over the runs, and its points the pooled seconds over the pooled
    step (a ratio of means): the two never differ in sign. Figures measured once per run (a run
    without the ablation) get an interval over the runs only from 3 runs on."""
    found = {}
    for name in names:
        measured = [(run, getattr(run, attribute)[name]) for run in runs if name in getattr(run, attribute)]
        if not measured:
            continue
        basis = measured[0][1].basis
        if all(c.seconds is not None and c.seconds.over == "exact" for _, c in measured):
            found[name] = Cause(Estimate.exact(0.0), Estimate.exact(0.0), basis)
            continue
        timed = [(run, c) for run, c in measured if c.seconds is not None]
        if not timed:
            found[name] = Cause(None, None, basis)
            continue
        once = any(c.seconds.over == "once" for _, c in timed) or not all(run.in_place for run, _ in timed)
        # A check's points are over the timed step; a cause's over the ablation's DDP step.
        step = (lambda run: run.step_s) if attribute == "checks" else (lambda run: run.cause_step_s)
        if len(timed) == 1:
            seconds, points = timed[0][1].seconds, timed[0][1].points
        else:
            seconds = pool([c.seconds for _, c in timed])
            points = _pooled_ratio([(c.seconds, step(run)) for run, c in timed], 100.0, 3 if once else 2)
            if once and len(timed) < 3:
                seconds = Estimate(seconds.value, None, None, seconds.samples, "runs", None)
        found[name] = Cause(seconds, points, basis)
    return found


def pool_runs(members: list[RunAnswer], flags: dict[str, str], references: list[Record] | None = None) -> Answer:
    """A configuration's answer from its runs' (`references`: its X(1) runs, every round's)."""
    kept = [run for run in members if run.run_id not in flags] or members
    left_out = {run.run_id: flags[run.run_id] for run in members if run not in kept}
    answer = Answer(kept, left_out, every_run=list(members))
    records = [run.record for run in kept]
    answer.throughput = pooled_throughput(records, flags)
    if references is None:  # one run read alone (the closing screen): its own E(N)
        references = []
        answer.efficiency = kept[0].efficiency if len(kept) == 1 else None
    else:
        answer.reference_throughput = pooled_throughput(references, flags) if references else None
        answer.efficiency = pooled_efficiency(records, references, flags) if references else None
        batch = reference_batch(records[0].spec) or 1
        answer.reference_steps_s = [
            batch * run.metrics.units_per_sample / run.metrics.throughput_units_per_s
            for run in kept_runs(references, flags)
            if run.metrics and run.metrics.throughput_units_per_s
        ]
    placed = [run for run in kept if run.in_process is not None and run.bottom_step is not None]
    if len(placed) == 1:
        answer.in_process = placed[0].in_process
    elif placed:
        answer.in_process = ratio_of_means(
            [run.bottom_step.value for run in placed], [run.ddp_step.value for run in placed], "runs"
        )
    steps = [run.cause_step_s for run in kept]
    answer.step = Estimate.of_runs(steps) if len(steps) > 1 else kept[0].ddp_step or Estimate.of_runs(steps)
    if answer.efficiency is not None and answer.in_process is not None:
        answer.gap = _gap(answer.efficiency, answer.in_process)
    answer.causes = _pool_causes(kept, "causes", CAUSE_NAMES)
    answer.checks = _pool_causes(kept, "checks", ("reference_vs_alone", "timed_vs_ablation"))
    if all(run.parts for run in kept):
        answer.parts = _pool_causes(kept, "parts", tuple(PART_ROUNDS))
    answer.straggler = pooled([run.straggler for run in kept])
    answer.cpu = configuration_cpu(records)
    reference_ids = {ref for run in members for ref in run.reference_run_ids} | {ref.run_id for ref in references}
    answer.machine = [
        flags[run_id] for run_id in sorted({*answer.run_ids, *left_out, *reference_ids}) if run_id in flags
    ]
    return answer


def _gap(efficiency: Estimate, in_process: Estimate) -> Estimate:
    """E(N) - the in-process efficiency, percentage points: the check between two processes' speed
    and the in-process figure, not a cause."""
    value = 100 * (efficiency.value - in_process.value)
    if efficiency.se is None or in_process.se is None:
        return Estimate(value, None, None, min(efficiency.samples, in_process.samples), "runs", None)
    se = 100 * math.hypot(efficiency.se, in_process.se)
    samples = min(efficiency.samples, in_process.samples)
    half = t_975(samples - 1) * se
    over = "runs" if "runs" in (efficiency.over, in_process.over) else "rounds"
    return Estimate(value, value - half, value + half, samples, over, se)


def _order(record: Record) -> tuple:
    spec = record.spec
    return short_workload_name(spec.workload), strategy_order(spec.strategy_name), spec.world_size, record.run_id


def answer_sweep(records: list[tuple[str, Record]], jobs: dict | None = None) -> tuple[list[Answer], list[str]]:
    """Every configuration of ok DDP runs, pooled; and a line for each run that could not be
    answered. `jobs`: run id -> its matched traces, where the caller read them (for runs without
    the ablation, whose straggler then comes from the traces)."""
    runs = [
        record
        for _, record in records
        if record.spec.launched_by_torchrun
        and is_measured(record)
        and not (record.spec.script and record.spec.world_size == 1)
    ]
    if not runs:
        torchrun = [record for _, record in records if record.spec.launched_by_torchrun]
        failed = sorted(record.run_id for record in torchrun if not is_measured(record))
        if failed:
            raise ExplainError(
                f"no ok run of ddp, fsdp2 or replicate to explain: {', '.join(failed)} did not finish ok or failed a "
                "correctness check (ddpbench table says why)"
            )
        if torchrun:
            raise ExplainError("no DDP run to explain: a script's DDP x1 run is its reference; sweep 2 or more ranks")
        raise ExplainError("no ok DDP run in the sweep: add `ddp` to --strategies (ddpbench sweep)")
    flags = {flag.run_id: flag.sentence() for flag in probe_flags([record for _, record in records])}
    grouped: dict[tuple, list[RunAnswer]] = {}
    references: dict[tuple, dict[str, Record]] = {}
    # Runs refused for one reason are named together: a sweep's repeats usually share it.
    refused: dict[str, list[str]] = {}
    for record in sorted(runs, key=_order):
        try:
            found = answer_run(record, records, set(flags), (jobs or {}).get(record.run_id))
        except ExplainError as exc:
            reason = str(exc).removeprefix(f"{record.run_id}: ")
            refused.setdefault(reason, []).append(record.run_id)
            continue
        key = configuration_key(record)
        grouped.setdefault(key, []).append(found)
        references.setdefault(key, {}).update({run.run_id: run for run in reference_runs(record, records)[0]})
    problems = [f"{', '.join(run_ids)}: {reason}" for reason, run_ids in refused.items()]
    answers = [pool_runs(members, flags, list(references[key].values())) for key, members in grouped.items()]
    return answers, problems


@dataclass(frozen=True)
class Figures:
    """What the scaling table shows of one configuration, from the same estimates as its answer."""

    throughput: Estimate | None
    efficiency: Estimate | None
    in_process: Estimate | None
    runs: int
    left_out: int
    reference: str
    """Where E(N) is blank, why (no X(1) run in the sweep); else what X(1) is, where it needs saying."""
    reference_runs: int
    """The X(1) runs E(N) divides by (the speed check's flagged left out while others remain)."""
    configuration: str
    """The configuration's identity, as a short id (`config.identity.identity_id`)."""


def table_figures(records: list[tuple[str, Record]]) -> dict[str, Figures]:
    """Run id -> its configuration's figures, for every ok run: X pooled over the kept runs, E(N)
    of that X against X(1) pooled alike (1 exactly for a reference run), and the in-process
    efficiency; a configuration explain answers takes its answer's figures, so the table and
    explain print one estimate."""
    flags = {flag.run_id: flag.sentence() for flag in probe_flags([record for _, record in records])}
    try:
        answers = answer_sweep(records)[0]
    except ExplainError:
        answers = []
    by_key = {configuration_key(answer.record): answer for answer in answers}
    groups: dict[tuple, list[Record]] = {}
    for _, record in records:
        if is_measured(record):
            groups.setdefault(configuration_key(record), []).append(record)
    found = {}
    for key, runs in groups.items():
        kept = kept_runs(runs, flags)
        answer = by_key.get(key)
        throughput = pooled_throughput(runs, flags)
        references, reason = reference_runs(runs[0], records)
        script = runs[0].spec.script is not None
        reference = ("" if not script else SCRIPT_REFERENCE) if references or is_reference(runs[0].spec) else reason
        if answer is not None:
            throughput, efficiency, in_process = answer.throughput, answer.efficiency, answer.in_process
        elif is_reference(runs[0].spec):
            efficiency, in_process = Estimate.exact(1.0), None  # X(1) against itself, by definition
        else:
            efficiency, in_process = pooled_efficiency(runs, references, flags) if references else None, None
        used = len(kept_references(references, set(flags))) if references and not is_reference(runs[0].spec) else 0
        figures = Figures(
            throughput,
            efficiency,
            in_process,
            len(kept),
            len(runs) - len(kept),
            reference,
            used,
            identity_id(runs[0].spec, sample_unit(runs[0])),
        )
        found.update({run.run_id: figures for run in runs})
    return found
