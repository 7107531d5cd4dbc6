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
        "gradient buckets, the wrapper): the ladder's steps through DDP over a process group of one "
        "rank against the same module unwrapped with every rank stepping, block by block",
    ),
    TermDefinition(
        "contention",
        "ranks sharing the host",
        "compute slowed by the other ranks computing at the same time (memory bandwidth, caches, host "
        "CPU, PCIe): the module unwrapped with every rank stepping against the same rank stepping it "
        "alone while the others wait at a barrier, block by block in the ladder",
    ),
    TermDefinition(
        "data",
        "data loading",
        "the wait for the next batch in the ladder's DDP steps against its steps of one rank alone (on "
        "records without a ladder: the timed window at N against the one-device reference); a cost "
        "the reference pays too is not lost scaling",
    ),
    TermDefinition(
        "exposed_comm",
        "exposed communication",
        "communication that no computation hides, the transfer and not waiting for peers: on the "
        "slowest rank, its waits in DDP's collectives (before the module's forward, where DDP "
        "broadcasts buffers, and from the last gradient to the optimizer) in the ladder's DDP steps "
        "against its one-rank DDP steps (on records without a ladder: the profiled steps' trace)",
    ),
    TermDefinition(
        "overlap_slowdown",
        "compute slowed by overlap",
        "backward slowed by the all-reduces that run beside it (on CPU gloo's threads take cores, on "
        "GPUs NCCL's kernels take SMs and memory bandwidth): backward's span with DDP's all-reduce "
        "against the one-rank DDP's, which does the same copies without a network (in the ladder, "
        "on the typical rank)",
    ),
    TermDefinition(
        "slowest_rank",
        "waiting for the slowest rank",
        "the median rank's waits in DDP's collectives beyond the slowest rank's, which waits for no "
        "one, in the ladder's DDP steps against one-rank DDP steps (on records without a ladder: the "
        "no_sync replay, or the extra wait inside collectives in the traces)",
    ),
    TermDefinition(
        "window_vs_ladder",
        "timed window against the ladder",
        "measurement, not DDP: the timed window's step against the ladder's DDP step with its data "
        "wait (steps after a barrier in blocks, with the ladder's hooks, against back-to-back steps)",
    ),
    TermDefinition(
        "reference_vs_rung0",
        "reference run against rung 0",
        "measurement, not DDP: the ladder's rung 0 (the typical rank stepping the module alone, "
        "unwrapped, with its data wait) against the sweep's local run, two processes at two times (the "
        "machine's drift between them, the wrapper-free process's start); not measured where the folder "
        "has no local run and rung 0 is the reference",
    ),
    TermDefinition(
        "unexplained",
        "not explained",
        "the typical rank's forward (with the loss) and optimizer, each from its own marks, the ladder's "
        "DDP steps against its one-rank DDP steps, per block with its interval: what DDP's communication "
        "costs outside backward and its waits; not measured on records without a ladder, where it would "
        "be a left-over",
    ),
)
MEASUREMENT_TERMS = ("window_vs_ladder", "reference_vs_rung0")
"""Terms that are the measurement's, not DDP's: no advice; named 'measurement, not DDP' where
they are the largest."""
TERM_NAMES = tuple(term.name for term in TERMS)
LABELS = {term.name: term.label for term in TERMS}

ADVICE_MIN_POINTS = 2.0
"""Advice is given for findings (significant terms) worth at least this many points of efficiency."""


@dataclass
class Term:
    s_per_step: float | None
    """Seconds per step; None where the run could not measure it (`basis` says why)."""
    points: float | None
    """Points of efficiency: s_per_step / t(N) x 100."""
    basis: str
    """How it was measured here, or why it could not be."""
    ci_low_s: float | None = None
    """The 95 % interval of s_per_step from the ladder's paired blocks; None without one."""
    ci_high_s: float | None = None
    exact: bool = False
    """Zero by construction (one rank: nothing shared, no network), not measured."""

    @property
    def significant(self) -> bool:
        """A finding: measured, with a 95 % interval that excludes zero. A term without an interval
        (not measured in place) or zero by construction is never one."""
        if self.s_per_step is None or self.exact or self.ci_low_s is None or self.ci_high_s is None:
            return False
        return self.ci_low_s > 0 or self.ci_high_s < 0

    def half_width_points(self, step_s: float) -> float | None:
        if self.ci_low_s is None or self.ci_high_s is None:
            return None
        return 100 * (self.ci_high_s - self.ci_low_s) / 2 / step_s


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
    strategy: str = "ddp"
    """The run's strategy as tables name it (`ddp`, `fsdp2`, `ddp+compile`)."""
    in_run: dict = field(default_factory=dict)
    """From the ladder, in this run's own processes (empty without one): `efficiency` (rung 0, a
    rank alone and unwrapped, over rung 3, full DDP) and `lost_s` (rung 3 - rung 0), each
    {value, ci_low, ci_high, blocks}."""
    has_reference_run: bool = True
    """False where no `local` run was found and rung 0 stands in as the reference."""
    advice_terms: list[str] = field(default_factory=list)
    """The term each piece of `advice` is about, in the same order."""
    reference_run_ids: list[str] = field(default_factory=list)
    """The `local` runs that are its X(1); empty where rung 0 is the reference."""
    notes: list[str] = field(default_factory=list)
    """What the record says beside its terms that is no finding (without a ladder: how far their
    sum falls short of the loss)."""
    machine: list[str] = field(default_factory=list)
    """What the probes say of this run's processes or its reference's: ran at another speed than
    the sweep's other runs (`ddpbench.analysis.probes`)."""

    def as_dict(self) -> dict:
        return {
            "run_id": self.run_id,
            "workload": self.workload,
            "world_size": self.world_size,
            "strategy": self.strategy,
            "efficiency": self.efficiency,
            "step_s": self.step_s,
            "reference_step_s": self.reference_step_s,
            "reference": self.reference,
            "terms": {
                name: {
                    "s_per_step": term.s_per_step,
                    "points": term.points,
                    "basis": term.basis,
                    "ci_low_s": term.ci_low_s,
                    "ci_high_s": term.ci_high_s,
                    "significant": term.significant,
                }
                for name, term in self.terms.items()
            },
            "in_run": self.in_run,
            "has_reference_run": self.has_reference_run,
            "terms_sum_s": self.terms_sum_s(),
            "lost_s": self.step_s - self.reference_step_s,
            "largest_loss": self.largest_name(),
            "phases": self.phases,
            "estimates": self.estimates,
            "advice": self.advice,
            "advice_terms": self.advice_terms,
            "reference_run_ids": self.reference_run_ids,
            "machine": self.machine,
            "notes": self.notes,
            "unexplained_parts": self.unexplained_parts,
            "ladder": self.ladder,
        }

    ladder: dict = field(default_factory=dict)
    """How the ladder was read: typical_rank, slowest_rank, blocks, wall_s; empty without one."""

    def largest(self) -> tuple[str, Term] | None:
        """The term that lost the most among the findings (significant, positive, DDP's and not
        the measurement's); None when no term is one."""
        findings = [
            (name, term)
            for name, term in self.terms.items()
            if term.significant and term.s_per_step > 0 and name not in MEASUREMENT_TERMS
        ]
        return max(findings, key=lambda item: item[1].s_per_step) if findings else None

    def largest_name(self) -> str | None:
        found = self.largest()
        return found[0] if found else None

    def terms_sum_s(self) -> float | None:
        """The measured terms added up (the measurement's included), to set beside the loss."""
        values = [term.s_per_step for term in self.terms.values() if term.s_per_step is not None]
        return sum(values) if values else None


class ExplainError(ValueError):
    """A run or sweep that cannot be explained; the message says what is missing and how to get it."""
