"""Why a configuration got slower: its causes compared between the baseline's and the candidate's
answers (`ddpbench.analysis.answers`, one per configuration; the runs the speed check flags left
out). No torch.

For every DDP configuration both sides answered with at least two runs, each cause per run in ms
per step, then the candidate's mean less the baseline's with a 95 % interval: Student's t over the
runs of both sides with their run-to-run spread pooled (as the gate pools the noise of its
measures), n_b + n_c - 2 degrees of freedom whatever the runs show (`estimates` keeps one pooling
rule). Beside the causes, the model's own compute: the single-device reference's step (the
configuration's X(1), pooled over the `local` runs of every round).

A cause grew, and is named, when both hold:
- a one-sided t-test of "its ms per step did not grow" is significant at CAUSE_FAMILY_ALPHA (5 %)
  split over the tests of that configuration (Bonferroni): a configuration whose code did not change
  names a cause at most 1 time in 20, with every cause tested;
- it grew by at least half the gate's threshold (`--max-regression`) of the baseline's DDP step (2.5
  % of it at 5 %): a cause measured very precisely can grow by a significant sliver no one should
  chase.
The test is on milliseconds; the points shown are that change over the baseline's pooled DDP step
(the answers model's), so they never differ from the milliseconds in sign.
The compute's test is on the log of the one-device step, its growth the ms it added: the step of the
single-device `local` runs (each run's own, as X(1) pools them) where both sides have them, else
the one-device step of each DDP run's in-process ablation (one rank stepping the model alone: what
bisect's and ab's rounds, single DDP runs, measure of it). Named causes
come largest first, by the ms they added per step. Where waiting for the slowest rank grew, the rank
and the phase it was in are the candidate's straggler's (the in-process ablation's own steps, or the
collectives matched across the ranks' traces). Where the single-device run slowed by at least half
as much as the DDP step did (log scale), the answer is the model's own compute, not its scaling.

Where it cannot attribute, it says what it would need: one run a side (one run's interval covers its
rounds, not the next run), a record without the in-process ablation (then only the wait for the
slowest rank, from the traces, is compared), no traces, a history baseline (it keeps no records).
"""

from __future__ import annotations

import math
import os
import statistics
from dataclasses import dataclass, field

from scipy import special

from ddpbench.analysis.ablation import CAUSE_NAMES, NoAblation, check_has_ablation
from ddpbench.analysis.answers import Answer, answer_sweep
from ddpbench.analysis.causes import LABELS, ExplainError
from ddpbench.analysis.estimates import Estimate
from ddpbench.gate.compare import Comparison
from ddpbench.gate.reproduce import Reproduction, reproduction
from ddpbench.gate.stats import GateSettings
from ddpbench.gate.values import describe, run_key
from ddpbench.records.schema import Record

COMPUTE = "compute"
COMPUTE_LABEL = "the model's own compute"
ONE_DEVICE = {
    "local": "the single-device run",
    "ablation": "one rank stepping the model alone in the in-process ablation",
}
"""Where the model's own compute was read, in words: the `local` runs, or the DDP runs' ablation."""
CAUSE_FAMILY_ALPHA = 0.05
"""How often, at most, a configuration whose code did not change names a cause: split over the
causes compared (Bonferroni)."""
MIN_RUNS = 2
"""Runs a side for an interval that holds the run-to-run spread."""
REPEAT_ADVICE = "sweep both sides with --repeat 3 or more (ddpbench sweep)"


@dataclass
class Change:
    """One cause (or the compute), candidate less baseline."""

    name: str
    seconds: Estimate
    """ms added per step, in seconds, with its 95 % interval."""
    points: Estimate
    """Percentage points of the DDP step added (for the compute: its seconds over the baseline's DDP step)."""
    p_value: float
    """One-sided p-value of 'it did not grow' (its ms per step; the compute: its log step)."""
    grew: bool = False
    slowdown: Estimate | None = None
    """The compute only: how much slower the one-device step became, percent."""
    source: str | None = None
    """The compute only: where its one-device step was read (`ONE_DEVICE`: local, ablation)."""

    @property
    def label(self) -> str:
        return COMPUTE_LABEL if self.name == COMPUTE else LABELS[self.name]

    def as_dict(self) -> dict:
        return {
            "name": self.name,
            "label": self.label,
            "seconds": self.seconds.as_dict(),
            "points": self.points.as_dict(),
            "p_value": self.p_value,
            "grew": self.grew,
            **({"slowdown_pct": self.slowdown.as_dict()} if self.slowdown is not None else {}),
            **({"source": self.source} if self.source is not None else {}),
        }


@dataclass
class Why:
    """One configuration's causes, compared."""

    configuration: str
    verdict: str
    """The configuration's gate verdict (its worst measure's): regression, improvement, pass."""
    changes: list[Change] = field(default_factory=list)
    needs: list[str] = field(default_factory=list)
    """What attribution would need, where it could not be done (in full)."""
    level: float | None = None
    """The one-sided level each test of this configuration was held to."""
    min_seconds: float = 0.0
    """The least growth named: half the gate's threshold of the baseline's DDP step."""
    ddp_slowdown: Estimate | None = None
    """How much slower the DDP step became, percent."""
    straggler: dict | None = None
    """The candidate's slowest rank, where waiting for it grew: rank, phase, host, source, named."""
    single_device: bool = False
    """A local configuration: no scaling causes to compare."""
    reproduce: Reproduction | None = None

    @property
    def named(self) -> list[Change]:
        """Causes (and the compute) that grew, largest first by ms per step."""
        return sorted((c for c in self.changes if c.grew), key=lambda c: -c.seconds.value)

    @property
    def compute(self) -> Change | None:
        return next((change for change in self.changes if change.name == COMPUTE), None)

    @property
    def compute_leads(self) -> bool:
        """The model's own compute is the largest cause named and the single-device run slowed by at
        least half as much as the DDP step did (log scale). Both: a planted 7.6 MiB of gradients slows
        the single-device run too (its optimizer), but communication grew more per step, and the
        headline must not contradict the list under it."""
        named = self.named
        compute = named[0] if named and named[0].name == COMPUTE else None
        if compute is None or self.ddp_slowdown is None or compute.slowdown is None:
            return False
        ddp = math.log1p(self.ddp_slowdown.value / 100)
        return ddp <= 0 or math.log1p(compute.slowdown.value / 100) >= 0.5 * ddp


# --- figures -------------------------------------------------------------------------------------


def _t_975(df: float) -> float:
    return float(special.stdtrit(df, 0.975)) if math.isfinite(df) else 1.959964


def change_over_runs(baseline: list[float], candidate: list[float]) -> tuple[Estimate, float] | None:
    """Mean candidate less mean baseline of per-run values, with a 95 % interval and the one-sided
    p-value of 'no growth': Student's t with the run-to-run spread pooled over both sides (as the
    gate pools the noise of its measures), n_b + n_c - 2 degrees of freedom. None with fewer than
    MIN_RUNS a side; the data never chooses the rule."""
    n_b, n_c = len(baseline), len(candidate)
    if n_b < MIN_RUNS or n_c < MIN_RUNS:
        return None
    df = n_b + n_c - 2
    spread = ((n_b - 1) * statistics.variance(baseline) + (n_c - 1) * statistics.variance(candidate)) / df
    se = math.sqrt(spread * (1 / n_b + 1 / n_c))
    value = statistics.fmean(candidate) - statistics.fmean(baseline)
    if se == 0:
        return Estimate(value, value, value, n_b + n_c, "runs", 0.0), (0.0 if value > 0 else 1.0)
    half = _t_975(df) * se
    p = float(special.stdtr(df, -value / se))
    return Estimate(value, value - half, value + half, n_b + n_c, "runs", se), p


def log_change(baseline: list[float], candidate: list[float]) -> tuple[Estimate, float] | None:
    """`change_over_runs` of the logs of per-run values."""
    if min(baseline + candidate, default=0) <= 0:
        return None
    return change_over_runs([math.log(v) for v in baseline], [math.log(v) for v in candidate])


def as_percent(change: Estimate) -> Estimate:
    """A log change as a percent change, its interval's ends mapped the same way."""

    def pct(x):
        return None if x is None else 100 * math.expm1(x)

    se = None if change.se is None else 100 * change.se * math.exp(change.value)
    return Estimate(pct(change.value), pct(change.low), pct(change.high), change.samples, change.over, se)


# --- one configuration ---------------------------------------------------------------------------


def run_seconds(answer: Answer, name: str) -> list[float] | None:
    """Per run of the answer, the cause's seconds per step; None where a run did not measure it or
    it is zero by construction."""
    seconds = []
    for run in answer.runs:
        cause = run.causes.get(name)
        if cause is None or cause.seconds is None or cause.seconds.over == "exact":
            return None
        seconds.append(cause.seconds.value)
    return seconds


def _cause_changes(before: Answer, after: Answer) -> tuple[list[Change], list[str]]:
    changes, needs = [], []
    in_place = before.in_place and after.in_place
    names = CAUSE_NAMES if in_place else ("straggler_wait",)
    if not in_place:
        why = after.why_not_in_place if not after.in_place else before.why_not_in_place
        side = "candidate" if not after.in_place else "baseline"
        needs.append(
            f"only waiting for the slowest rank was compared: the other causes need the in-process ablation on both "
            f"sides (the {side}'s runs: {why})"
        )
    for name in names:
        b, c = run_seconds(before, name), run_seconds(after, name)
        if b is None or c is None:
            measured = after.causes.get(name) or before.causes.get(name)
            if name == "straggler_wait" and (measured is None or measured.seconds is None):
                needs.append(
                    f"waiting for the slowest rank was not measured on both sides ({measured.basis if measured else ''}"
                    "): it needs the in-process ablation, or traces of every rank (profiling on: drop --no-profile)"
                )
            continue
        seconds = change_over_runs(b, c)
        if seconds is None:
            continue
        # Its points: the change in seconds over the baseline's pooled DDP step (the answers
        # model's), so points and milliseconds never differ in sign.
        changes.append(Change(name, seconds[0], seconds[0].scaled(100 / before.step.value), seconds[1]))
    return changes, needs


def one_device_steps(before: Answer, after: Answer) -> tuple[list[float], list[float], str] | None:
    """Each side's one-device steps, one per run, and where they were read: the kept `local` runs'
    own steps where both sides have them (every DDP run divides by the same pooled X(1), so per-DDP-run
    copies of it would have no spread and make any change look certain); else the one-device step of
    each DDP run's in-process ablation, where every run of both sides has one. None without either."""
    if before.reference_steps_s and after.reference_steps_s:
        return before.reference_steps_s, after.reference_steps_s, "local"
    sides = [[run.bottom_step.value for run in side.runs if run.bottom_step is not None] for side in (before, after)]
    if all(len(steps) == len(side.runs) and steps for steps, side in zip(sides, (before, after))):
        return sides[0], sides[1], "ablation"
    return None


def _compute_change(before: Answer, after: Answer) -> tuple[Change | None, Estimate | None]:
    """The one-device step (`one_device_steps`), candidate against baseline, and the DDP step's."""
    ddp = log_change([r.step_s for r in before.runs], [r.step_s for r in after.runs])
    ddp_pct = as_percent(ddp[0]) if ddp else None
    found = one_device_steps(before, after)
    slowdown = log_change(found[0], found[1]) if found else None
    if slowdown is None:
        return None, ddp_pct
    seconds, _ = change_over_runs(found[0], found[1])
    # Its points: what it added over the baseline's DDP step, the share a cause would hold.
    points = seconds.scaled(100 / before.step.value)
    return Change(COMPUTE, seconds, points, slowdown[1], slowdown=as_percent(slowdown[0]), source=found[2]), ddp_pct


def compare_answers(before: Answer, after: Answer, why: Why, settings: GateSettings) -> None:
    """Fill `why` from one configuration's two answers."""
    runs = (len(before.runs), len(after.runs))
    if min(runs) < MIN_RUNS:
        left = (len(before.left_out), len(after.left_out))
        said = f" ({left[0]} baseline and {left[1]} candidate run(s) left out by the speed check)" if any(left) else ""
        why.needs.append(
            f"{runs[0]} baseline and {runs[1]} candidate run(s){said}: one run's interval covers its own rounds, "
            f"not the next run; attributing needs at least {MIN_RUNS} runs a side: {REPEAT_ADVICE}"
        )
        return
    changes, needs = _cause_changes(before, after)
    compute, why.ddp_slowdown = _compute_change(before, after)
    if compute is not None:
        changes.append(compute)
    else:
        needs.append(
            "the model's own compute was not compared: it needs each side's local runs, or the in-process ablation "
            "in every DDP run of both sides"
        )
    why.needs += needs
    why.level = CAUSE_FAMILY_ALPHA / max(1, len(changes))
    why.min_seconds = settings.max_regression / 2 * before.step.value
    for change in changes:
        change.grew = change.p_value < why.level and change.seconds.value >= why.min_seconds
    why.changes = changes
    if any(c.grew and c.name == "straggler_wait" for c in changes):
        s = after.straggler
        host = s.host if after.record.spec.nnodes > 1 else None
        # The growth is this comparison's finding; the rank is the straggler's where every run's
        # halves chose it (the candidate's own interval may be too wide to name one by itself).
        named = s.rank is not None and s.halves_agree
        why.straggler = {"rank": s.rank, "phase": s.phase, "host": host, "source": s.source, "named": named}


# --- both sides ----------------------------------------------------------------------------------


def side_answers(pairs: list[tuple[str, Record]]) -> tuple[dict[tuple, Answer], list[str]]:
    """Gate configuration key -> its answer; and what could not be answered. Traces are read only
    for runs without the in-process ablation (the source of their wait for the slowest rank)."""
    from ddpbench.analysis.critical_path_text import read_jobs

    without = []
    for path, record in pairs:
        try:
            check_has_ablation(record)
        except NoAblation:
            without.append((path, record))
    jobs, not_read = read_jobs(without) if without else ({}, {})
    try:
        answers, problems = answer_sweep(pairs, jobs)
    except ExplainError as exc:
        return {}, [str(exc)]
    found = {}
    for answer in answers:
        found.setdefault(run_key(answer.record), answer)
    return found, problems + [f"{run_id}: {why}" for run_id, why in not_read.items()]


def _verdict(comparisons: list[Comparison]) -> str:
    verdicts = {c.verdict for c in comparisons}
    return next((v for v in ("regression", "inconclusive", "improvement", "pass") if v in verdicts), "n/a")


def explain_changes(
    baseline: list[tuple[str, Record]],
    candidate: list[tuple[str, Record]],
    comparisons: list[Comparison],
    settings: GateSettings,
    candidate_dir: str,
    cwd: str | None = None,
) -> list[Why]:
    """Every configuration the gate compared: its causes compared (DDP), or what it would need; a
    reproducing command for each that regressed."""
    by_configuration: dict[str, list[Comparison]] = {}
    for comparison in comparisons:
        if comparison.measure != "run":
            by_configuration.setdefault(comparison.configuration, []).append(comparison)
    before, problems_b = side_answers(baseline)
    after, problems_c = side_answers(candidate)
    records = {}
    for _, record in candidate:
        if record.status == "ok":
            records.setdefault(describe(run_key(record)), []).append(record)
    found = []
    for configuration, compared in sorted(by_configuration.items()):
        why = Why(configuration, _verdict(compared))
        runs = records.get(configuration, [])
        key = run_key(runs[0]) if runs else None
        spec = runs[0].spec if runs else None
        if spec is not None and (spec.strategy == "local" or (spec.script and spec.world_size == 1)):
            why.single_device = True  # the reference: one device, nothing to scale
        elif spec is not None and not spec.launched_by_torchrun:
            why.needs.append("nn.DataParallel's runs are one process: the causes are measured for DDP's runs only")
        elif key in before and key in after:
            compare_answers(before[key], after[key], why, settings)
        else:
            side = "baseline" if key not in before else "candidate"
            said = [p for p in (problems_b if side == "baseline" else problems_c) if _mentions(p, runs)]
            why.needs.append(
                f"the {side} has no answer for it"
                + (f" ({'; '.join(said)})" if said else " (no ok DDP run with its single-device reference)")
            )
        if why.verdict == "regression" and runs:
            why.reproduce = reproduction(runs, candidate_dir, cwd or os.getcwd())
        found.append(why)
    return found


def _mentions(problem: str, runs: list[Record]) -> bool:
    return any(problem.startswith(run.run_id) for run in runs)


def from_history() -> str:
    return (
        "why it slowed is not compared against the history: it keeps one value per run, not the records; gate "
        "against a baseline sweep (--baseline SWEEP_DIR, or auto) to compare the causes"
    )
