"""One answer per configuration: its DDP runs answered one by one (`causes`), then pooled over the
runs (`estimates.pool`), which is what every view shows: the table, explain, the report, the
closing screen and the gate. No torch.

A run the speed check flags (`probes`: its processes ran at another speed than the rest of the
sweep) enters no pooled figure, unless every run of its configuration is flagged; the answer names
the runs it left out. A reference run it flags is likewise not divided by.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ddpbench.analysis.ablation import CAUSE_NAMES, NoAblation, read_ablation
from ddpbench.analysis.causes import Cause, ExplainError, RunAnswer, answer_from_ablation, run_label
from ddpbench.analysis.configurations import configuration_key, reference_runs, round_references
from ddpbench.analysis.estimates import Estimate, points_lost, pool
from ddpbench.analysis.probes import probe_flags
from ddpbench.analysis.straggler import Straggler, pooled
from ddpbench.analysis.without_ablation import answer_without_ablation
from ddpbench.config.spec import strategy_order
from ddpbench.config.workloads import short_workload_name
from ddpbench.records.schema import Record


def answer_run(record: Record, records: list[tuple[str, Record]], flagged: set[str] = frozenset(), job=None):
    """One ok DDP run (ddp, fsdp2, replicate) against its round's reference run, or ExplainError."""
    spec = record.spec
    if not spec.launched_by_torchrun or record.status != "ok" or record.metrics is None:
        raise ExplainError(f"{record.run_id}: only ok runs of ddp, fsdp2 or replicate are explained")
    if spec.scaling != "weak":
        raise ExplainError(
            f"{record.run_id}: strong scaling (fixed global batch) is not broken down: the causes are per-device "
            "steps, which weak scaling keeps equal"
        )
    candidates, reason = reference_runs(record, records)
    references = round_references(record, candidates, flagged)
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
    efficiency: Estimate | None = None
    in_process: Estimate | None = None
    gap: Estimate | None = None
    causes: dict[str, Cause] = field(default_factory=dict)
    checks: dict[str, Cause] = field(default_factory=dict)
    straggler: Straggler | None = None
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
        """Causes that lost scaling beyond noise (a positive interval), largest first."""
        found = [(name, cause) for name, cause in self.causes.items() if cause.significant and cause.points.value > 0]
        return [name for name, _ in sorted(found, key=lambda item: -item[1].points.value)]

    def largest(self) -> list[str]:
        """The largest cause, and every other finding whose interval reaches it (tied: the runs
        cannot tell them apart); empty where no cause is beyond noise."""
        found = self.findings()
        if not found:
            return []
        top = self.causes[found[0]].points
        return [name for name in found if name == found[0] or self.causes[name].points.high >= top.low]

    def loss_within_noise(self) -> bool:
        loss = self.loss_points
        return loss is not None and loss.has_interval and loss.low <= 0 <= loss.high


def _pool_causes(runs: list[RunAnswer], attribute: str, names) -> dict[str, Cause]:
    found = {}
    for name in names:
        measured = [getattr(run, attribute)[name] for run in runs if name in getattr(run, attribute)]
        seconds = [c.seconds for c in measured if c.seconds is not None]
        points = [c.points for c in measured if c.points is not None]
        basis = measured[0].basis if measured else ""
        if measured:
            found[name] = Cause(pool(seconds) if seconds else None, pool(points) if points else None, basis)
    return found


def _pooled(values: list[Estimate | None]) -> Estimate | None:
    present = [value for value in values if value is not None]
    return pool(present) if present else None


def pool_runs(members: list[RunAnswer], flags: dict[str, str]) -> Answer:
    kept = [run for run in members if run.run_id not in flags] or members
    left_out = {run.run_id: flags[run.run_id] for run in members if run not in kept}
    answer = Answer(kept, left_out, every_run=list(members))
    answer.efficiency = _pooled([run.efficiency for run in kept])
    answer.in_process = _pooled([run.in_process for run in kept])
    answer.gap = _pooled([run.gap for run in kept])
    answer.causes = _pool_causes(kept, "causes", CAUSE_NAMES)
    answer.checks = _pool_causes(kept, "checks", ("reference_vs_alone", "timed_vs_ablation"))
    answer.straggler = pooled([run.straggler for run in kept])
    references = {ref for run in members for ref in run.reference_run_ids}
    answer.machine = [flags[run_id] for run_id in sorted({*answer.run_ids, *left_out, *references}) if run_id in flags]
    return answer


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
        and record.status == "ok"
        and not (record.spec.script and record.spec.world_size == 1)
    ]
    if not runs:
        torchrun = [record for _, record in records if record.spec.launched_by_torchrun]
        failed = sorted(record.run_id for record in torchrun if record.status != "ok")
        if failed:
            raise ExplainError(
                f"no ok run of ddp, fsdp2 or replicate to explain: {', '.join(failed)} did not finish ok "
                "(ddpbench table says why)"
            )
        if torchrun:
            raise ExplainError("no DDP run to explain: a script's DDP x1 run is its reference; sweep 2 or more ranks")
        raise ExplainError("no ok DDP run in the sweep: add `ddp` to --strategies (ddpbench sweep)")
    flags = {flag.run_id: flag.sentence() for flag in probe_flags([record for _, record in records])}
    grouped: dict[tuple, list[RunAnswer]] = {}
    # Runs refused for one reason are named together: a sweep's repeats usually share it.
    refused: dict[str, list[str]] = {}
    for record in sorted(runs, key=_order):
        try:
            found = answer_run(record, records, set(flags), (jobs or {}).get(record.run_id))
        except ExplainError as exc:
            reason = str(exc).removeprefix(f"{record.run_id}: ")
            refused.setdefault(reason, []).append(record.run_id)
            continue
        grouped.setdefault(configuration_key(record.spec), []).append(found)
    problems = [f"{', '.join(run_ids)}: {reason}" for reason, run_ids in refused.items()]
    return [pool_runs(members, flags) for members in grouped.values()], problems
