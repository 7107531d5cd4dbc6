"""The terms the lost scaling of a DDP run is split into, each defined once (its name, its label
in the user's words, how it is measured: the report's glossary, `ddpbench explain` and the advice
read them), and the breakdown of one run as data. How each term is measured is
`ddpbench.analysis.breakdown`'s. No torch."""

from __future__ import annotations

from dataclasses import dataclass, field


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
