"""The causes of lost scaling, each defined once, and one DDP run's answer: its efficiency, its
in-process efficiency, what each cause cost and the check between the two efficiencies. No torch.

One pass per record: read it, read its in-process ablation (`ablation`), turn the rounds into
figures with their intervals (`answer_from_ablation`), and the words are `answer_text`'s. A record
without the ablation (a script's run, --no-profile, a compiled or fsdp2 run, an older record) takes
its own, labelled path (`without_ablation`): neither path calls into the other.

What adds up: with the ablation, the causes add up to the in-process loss (1 - the in-process
efficiency) by construction, at every world size: each is the difference of two neighbouring steps
of the ablation in the same round (see `ablation`). What is not forced to add up is E(N), the
textbook efficiency against the sweep's `local` run, against the in-process efficiency: that gap
is the check (`gap`), not a cause. It is split into what it holds: the reference process ran at
another speed than a rank computing alone inside the DDP run (`reference_vs_alone`), and the timed
steps ran unlike the ablation's DDP steps (`timed_vs_ablation`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from ddpbench.analysis.ablation import CAUSE_NAMES, ZERO_AT_ONE_RANK, Ablation
from ddpbench.analysis.configurations import efficiency_against
from ddpbench.analysis.estimates import Estimate, points_lost, ratio_of_means, standard_error
from ddpbench.analysis.registry import record_iteration_times_s
from ddpbench.analysis.straggler import Straggler, from_ablation
from ddpbench.config.workloads import short_workload_name
from ddpbench.records.schema import Record


@dataclass(frozen=True)
class Definition:
    name: str
    label: str
    """In the user's words (report, terminal, Concepts page)."""
    method: str
    """How it is measured (the glossary)."""


CAUSES = (
    Definition(
        "contention",
        "host contention",
        "compute slowed by the other ranks computing on the same host at the same time (memory bandwidth, "
        "caches, cores, PCIe): in each round of the in-process ablation, the rank that stepped alone, stepping "
        "the unwrapped model with every rank computing, against the same rank computing alone",
    ),
    Definition(
        "ddp_overhead",
        "DDP overhead",
        "what wrapping the model in DDP costs a step without a network (its gradient hooks, the copies into "
        "and out of gradient buckets, the wrapper's forward): DDP over a process group of one rank against "
        "the same model unwrapped, on the median rank, per round",
    ),
    Definition(
        "exposed_comm",
        "exposed communication",
        "communication that backward does not hide, the transfer itself: the slowest rank's waits inside "
        "DDP's collectives (before forward, where DDP broadcasts buffers, and from the last gradient to the "
        "optimizer), DDP against DDP on one rank, per round; the slowest rank waits for no one",
    ),
    Definition(
        "overlap_slowdown",
        "backward slowed by communication",
        "backward made slower by the all-reduces that run beside it (on CPU gloo's threads take cores, on "
        "GPUs NCCL's kernels take SMs and memory bandwidth): the median rank's backward, DDP against DDP on "
        "one rank, per round",
    ),
    Definition(
        "straggler_wait",
        "waiting for the slowest rank",
        "the median rank's waits inside DDP's collectives beyond the slowest rank's, the two ranks chosen on "
        "one half of the rounds and the wait read on the other (so identical ranks read zero on average)",
    ),
    Definition(
        "forward_optimizer",
        "forward and optimizer under DDP",
        "the rest of the median rank's step outside backward and DDP's waits (forward, the loss, the optimizer "
        "and what runs between them), DDP against DDP on one rank, per round",
    ),
    Definition(
        "data",
        "data loading",
        "the wait for the next batch in DDP's steps against the alone step's, per round; a cost one device "
        "pays as well is no loss of scaling",
    ),
)
CHECKS = (
    Definition(
        "reference_vs_alone",
        "the reference process",
        "the sweep's local run's step against one rank computing alone inside the DDP run: two processes at "
        "two times, so the machine's speed between them",
    ),
    Definition(
        "timed_vs_ablation",
        "the timed steps",
        "the timed window's step against the ablation's DDP step: back-to-back steps against steps that start "
        "after a barrier, in rounds",
    ),
)
PARTS = (
    Definition(
        "contention_waiting",
        "waiting for a core",
        "the part of host contention the kernel counted as waiting: in each round of the in-process ablation, "
        "the alone rank's training thread runnable but waiting for a core, every rank computing against this "
        "rank alone (/proc's schedstat, per step)",
    ),
    Definition(
        "contention_on_core",
        "slower on a core",
        "the rest of host contention: the same steps taking longer on a core (memory bandwidth and caches "
        "shared, or a thread spinning at a barrier for a partner that waits for a core)",
    ),
)
"""Host contention in two parts, where the kernel's counters were read; they add up to it by
construction (the second is the first's rest, per round)."""
PART_ROUNDS = {"contention_waiting": "contention:waiting", "contention_on_core": "contention:on_core"}
LABELS = {d.name: d.label for d in (*CAUSES, *CHECKS, *PARTS)}
assert tuple(d.name for d in CAUSES) == CAUSE_NAMES

OLD_NAMES = {
    "ddp_work": "ddp_overhead",
    "slowest_rank": "straggler_wait",
    "unexplained": "forward_optimizer",
    "reference_vs_rung0": "reference_vs_alone",
    "window_vs_ladder": "timed_vs_ablation",
}
"""Names of causes and checks in records of explain --json before 0.2, and the names they have now."""


class ExplainError(ValueError):
    """A run or sweep that cannot be explained; the message says what is missing and how to get it."""


@dataclass
class Cause:
    seconds: Estimate | None
    """Seconds per step; None where the run could not measure it (`basis` says why)."""
    points: Estimate | None
    """Percentage points of efficiency: the mean seconds over the mean DDP step, x 100."""
    basis: str

    @property
    def significant(self) -> bool:
        return self.points is not None and self.points.significant

    def as_dict(self) -> dict:
        return {
            "seconds": self.seconds.as_dict() if self.seconds else None,
            "points": self.points.as_dict() if self.points else None,
            "significant": self.significant,
            "basis": self.basis,
        }


@dataclass
class RunAnswer:
    """One DDP run: what it scaled to and why."""

    record: Record
    step_s: float
    """t(N): the timed window's step (a device's batch per step)."""
    reference_step_s: float | None
    """t(1): the reference run's step; None without one."""
    reference_run_ids: list[str]
    efficiency: Estimate | None
    """E(N) = t(1) / t(N), against the reference run; None without one."""
    in_process: Estimate | None
    """The in-process efficiency: one rank alone against DDP, inside this run; None without the ablation."""
    causes: dict[str, Cause]
    straggler: Straggler
    in_place: bool
    """Measured in place, by the in-process ablation; False: the labelled path without it."""
    basis: str = ""
    """Without the ablation: why not."""
    checks: dict[str, Cause] = field(default_factory=dict)
    """reference_vs_alone and timed_vs_ablation (with the ablation and a reference run)."""
    parts: dict[str, Cause] = field(default_factory=dict)
    """Host contention's two parts (PARTS), where the kernel's counters were read."""
    gap: Estimate | None = None
    """E(N) - the in-process efficiency, percentage points (with the ablation and a reference run)."""
    ddp_step: Estimate | None = None
    """The ablation's DDP step, seconds: what the causes' points are shares of."""
    bottom_step: Estimate | None = None
    """The ablation's one-device step, seconds: the in-process efficiency is it over `ddp_step`."""
    rounds: int = 0
    round_values: dict[str, dict[int, float]] = field(default_factory=dict)
    """The ablation's figures per round (`Ablation.rounds`): a lead between two causes of one run is
    read over them, paired."""

    @property
    def cause_step_s(self) -> float:
        """The step a cause's points are shares of: the ablation's DDP step, or without the
        ablation the timed window's."""
        return self.ddp_step.value if self.ddp_step is not None else self.step_s

    @property
    def run_id(self) -> str:
        return self.record.run_id

    @property
    def loss_points(self) -> Estimate | None:
        """The in-process loss, percentage points."""
        return None if self.in_process is None else points_lost(self.in_process)


def run_label(record: Record) -> str:
    spec = record.spec
    strategy = "" if spec.strategy_name == "ddp" else f" {spec.strategy_name}"
    return f"{short_workload_name(spec.workload)}{strategy} x{spec.world_size}"


def step_time_s(record: Record) -> float:
    """A device's step: the timed window over its steps."""
    return record.metrics.window_s / record.metrics.timed_steps


def in_process_efficiency(ablation: Ablation) -> Estimate:
    """One run's in-process efficiency: its mean one-device step over its mean DDP step (a ratio of
    means over the rounds, so 1 minus it is the causes' points added up)."""
    bottom, top = ablation.rounds["bottom"], ablation.rounds["top"]
    paired = [r for r in bottom if r in top]
    return ratio_of_means([bottom[r] for r in paired], [top[r] for r in paired], "rounds")


def answer_from_ablation(
    record: Record, ablation: Ablation, references: list[Record], reference_ids: list[str]
) -> RunAnswer:
    """One run with its in-process ablation: every cause per round, in seconds and in points of the
    round's DDP step, each with its interval over the rounds."""
    rounds = ablation.rounds
    one = ablation.world_size == 1
    top = rounds["top"]
    causes = {}
    for name in CAUSE_NAMES:
        values = rounds[name]
        if one and name in ZERO_AT_ONE_RANK:
            causes[name] = Cause(Estimate.exact(0.0), Estimate.exact(0.0), "one rank: nothing shared, no network")
            continue
        causes[name] = Cause(Estimate.of_rounds(list(values.values())), round_points(rounds, name), _basis(name))
    parts = {}
    for definition in PARTS:
        values = rounds.get(PART_ROUNDS[definition.name]) or {}
        paired = [r for r in values if r in top]
        if one or not paired:
            continue  # one rank shares nothing; older records did not read the kernel's counters
        points = ratio_of_means([values[r] for r in paired], [top[r] for r in paired], "rounds", 100.0)
        parts[definition.name] = Cause(Estimate.of_rounds([values[r] for r in paired]), points, definition.method)
    step = step_time_s(record)
    reference_step, efficiency = efficiency_against(record, references)
    in_process = in_process_efficiency(ablation)
    paired = [r for r in rounds["bottom"] if r in top]
    ddp_step = Estimate.of_rounds(list(top.values()))
    answer = RunAnswer(
        record,
        step,
        reference_step,
        reference_ids,
        efficiency,
        in_process,
        causes,
        from_ablation(record, ablation),
        in_place=True,
        ddp_step=ddp_step,
        bottom_step=Estimate.of_rounds([rounds["bottom"][r] for r in paired]),
        rounds=ablation.round_count(),
        parts=parts,
        round_values=rounds,
    )
    if efficiency is not None:
        answer.gap = _difference(efficiency.scaled(100), in_process.scaled(100))
        bottom = Estimate.of_rounds(list(rounds["bottom"].values()))
        reference_se = standard_error([t for run in references for t in record_iteration_times_s(run)])
        timed_se = standard_error(record_iteration_times_s(record))
        answer.checks = {
            "reference_vs_alone": _check(bottom.value - reference_step, bottom.se, reference_se, bottom, step),
            "timed_vs_ablation": _check(step - ddp_step.value, timed_se, ddp_step.se, ddp_step, step),
        }
    return answer


def round_points(rounds: dict[str, dict[int, float]], name: str) -> Estimate:
    """One run's cause in points: its mean over the rounds over the mean DDP step (a ratio of means),
    so it reads as its milliseconds over the step beside them, sign and all."""
    values, top = rounds[name], rounds["top"]
    paired = [r for r in values if r in top]
    return ratio_of_means([values[r] for r in paired], [top[r] for r in paired], "rounds", 100.0)


def rounds_lead(rounds: dict[str, dict[int, float]], first: str, second: str) -> Estimate | None:
    """How many points `first` costs beyond `second` in one run, paired round by round."""
    one, two, top = rounds.get(first, {}), rounds.get(second, {}), rounds.get("top", {})
    paired = [r for r in one if r in two and r in top]
    if not paired:
        return None
    return ratio_of_means([one[r] - two[r] for r in paired], [top[r] for r in paired], "rounds", 100.0)


def _basis(name: str) -> str:
    return next(d.method for d in CAUSES if d.name == name)


def _difference(a: Estimate, b: Estimate) -> Estimate:
    errors = [e for e in (a.se, b.se) if e is not None]
    df = min(a.samples, b.samples) - 1
    if len(errors) < 2:
        return Estimate(a.value - b.value, None, None, min(a.samples, b.samples), "rounds", None)
    return Estimate.combined(a.value - b.value, *errors, df=df)


def _check(seconds: float, se_a, se_b, rounds: Estimate, step: float) -> Cause:
    errors = [e for e in (se_a, se_b) if e is not None and math.isfinite(e)]
    if len(errors) < 2:
        found = Estimate(seconds, None, None, rounds.samples, "rounds", None)
    else:
        found = Estimate.combined(seconds, *errors, df=rounds.samples - 1)
    return Cause(found, found.scaled(100 / step), "")
