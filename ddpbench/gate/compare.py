"""The regression gate: compare a candidate with a baseline, configuration by configuration and
measure by measure, on per-run values (see `values`), with the statistics of `stats`. No torch.

Runs are matched by what defines them (workload, size, strategy, world size, per-device batch,
precision, device kind, DDP options). Machines that differ (GPU model or count, CPU, torch, CUDA,
NCCL) are refused unless allowed: a comparison across them measures the machines, not the code.

What is not comparable fails the gate unless explicitly allowed: a candidate run that failed a
correctness check (a candidate that stopped all-reducing would look faster), a candidate run whose
status is not ok, and a configuration the baseline has but the candidate lacks.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import statistics
from dataclasses import dataclass

import numpy as np

from ddpbench.analysis.configurations import is_measured, why_not_measured
from ddpbench.config.identity import typed_paths
from ddpbench.gate import stats
from ddpbench.gate.values import (
    MEASURE_LABELS,
    MEASURE_NAMES,
    describe,
    reference_values,
    run_key,
    side_values,
    to_log,
)
from ddpbench.records.schema import Record
from ddpbench.records.store import UnreadableRecord, load_record, read_records

ENV_FIELDS = ("gpu_names", "gpu_count", "cpu_model", "torch", "cuda", "nccl")
VERDICTS = ("pass", "improvement", "inconclusive", "regression", "not comparable", "n/a")
INTERVAL_LEVEL = 0.95
"""The level of the ratio's interval a comparison shows (`ratio_low`, `ratio_high`)."""
Values = dict[tuple, dict[str, list[float]]]


class GateError(ValueError):
    """Bad input to the gate (exit code 2)."""


@dataclass
class Comparison:
    configuration: str
    measure: str
    """throughput, efficiency, exposed_share; "run" for a run that cannot be compared."""
    verdict: str
    """pass, improvement, inconclusive (slower than the threshold, not significantly), regression,
    not comparable, or n/a."""
    baseline: float | None = None
    """The baseline's per-run values, summarised (natural scale: units/s, or a fraction): their mean
    for efficiency (the answers model's E(N)), their median for the other measures."""
    candidate: float | None = None
    ratio: float | None = None
    """exp(mean log change), oriented so that above 1 is better."""
    baseline_runs: int = 0
    candidate_runs: int = 0
    p_value: float | None = None
    """One-sided p-value of 'the candidate is no worse'."""
    alpha: float | None = None
    """Significance level of this test: the family-wise rate / the number of comparisons."""
    noise: float | None = None
    """Run-to-run spread of one run's log value used for the test."""
    noise_source: str = ""
    mde: float | None = None
    """Smallest slowdown (fraction) this comparison catches with the settings' power."""
    runs_needed: int | None = None
    """Runs per side (A/B rounds when paired) with which the gate would catch the target slowdown
    (twice the threshold on the log scale) with the settings' power; None: over 1000."""
    sees_threshold: bool | None = None
    """Whether this comparison catches the target slowdown with the settings' power (a slowdown
    exactly at the threshold is caught at most half the time, however many runs)."""
    threshold_power: float | None = None
    """Probability that this comparison flags a slowdown exactly the size of the threshold."""
    ratio_low: float | None = None
    """Lower end of the ratio's 95 % interval (INTERVAL_LEVEL)."""
    ratio_high: float | None = None
    """Upper end of the ratio's 95 % interval."""
    se: float | None = None
    """Standard error of the log change."""
    df: float | None = None
    """Its degrees of freedom (None: the prior, taken as known)."""
    paired: bool = False
    note: str = ""

    @property
    def label(self) -> str:
        return MEASURE_LABELS.get(self.measure, self.measure)


def load_side(path: str) -> list[Record]:
    """Every record of a sweep folder, or one record file (statuses are judged later)."""
    return [record for _, record in load_pairs(path)]


def load_pairs(path: str) -> list[tuple[str, Record]]:
    """`load_side` with each record's file, which its traces are found from."""
    if os.path.isfile(path):
        try:
            pairs = [(path, load_record(path))]
        except UnreadableRecord as exc:
            raise GateError(f"not a readable record: {exc}") from None
    elif os.path.isdir(path):
        pairs, unreadable = read_records(path)
        for bad, reason in unreadable:
            print(f"ddpbench gate: skipped unreadable record {bad}: {reason}")
    else:
        raise GateError(f"{path!r} is neither a sweep folder nor a record file")
    if not any(r.status == "ok" for _, r in pairs):
        raise GateError(f"{path!r} holds no successful run records")
    return pairs


def usable(record: Record) -> bool:
    """A run the gate compares: one that counts in its configuration's figures in every view
    (`configurations.is_measured`)."""
    return is_measured(record)


def why_unusable(record: Record) -> str:
    return why_not_measured(record)


def env_differences(baseline: list[Record], candidate: list[Record]) -> list[str]:
    def values(records, name):
        return sorted({json.dumps(getattr(r.env, name)) for r in records if r.status == "ok"})

    differences = []
    for name in ENV_FIELDS:
        before, after = values(baseline, name), values(candidate, name)
        if before != after:
            differences.append(f"{name}: baseline {', '.join(before)} / candidate {', '.join(after)}")
    return differences


def comparability(
    baseline: list[Record], candidate: list[Record], allow_failed: bool, allow_missing: bool, check_missing: bool = True
) -> tuple[list[Comparison], list[str]]:
    """Candidate runs that cannot be compared and baseline configurations the candidate lacks:
    failures (verdict "not comparable"), or notes where the user allowed them."""
    failures, notes = [], []
    for record in candidate:
        if not usable(record):
            reason = f"candidate run {record.run_id}: {why_unusable(record)}"
            if allow_failed:
                notes.append(f"left out (allowed): {reason}")
            else:
                failures.append(Comparison(describe(run_key(record)), "run", "not comparable", note=reason))
    for record in baseline:
        if not usable(record):
            notes.append(f"baseline run {record.run_id} left out: {why_unusable(record)}")
    if check_missing:
        present = {run_key(r) for r in candidate}
        # A run that measured nothing has no unit to key by: it stands for its configuration in any unit.
        unmeasured = {_without_unit(run_key(r)) for r in candidate if r.metrics is None}
        missing = {run_key(r) for r in baseline if usable(r)} - present
        for key in sorted((k for k in missing if _without_unit(k) not in unmeasured), key=describe):
            reason = "in the baseline but missing from the candidate"
            if allow_missing:
                notes.append(f"{describe(key)}: {reason} (allowed)")
            else:
                failures.append(Comparison(describe(key), "run", "not comparable", note=reason))
    return failures, notes


def _without_unit(key: tuple) -> tuple:
    rest = json.loads(key[-1])
    rest.pop("sample_unit", None)
    return (*key[:-1], json.dumps(rest, sort_keys=True))


def typed_notes(records: list[Record]) -> list[str]:
    """Where records made before runs kept their files' places, and outside the folder they ran in,
    could only be keyed by a user's path as typed (`config.identity.typed_paths`): a note."""
    typed = {r.run_id: typed_paths(r.spec) for r in records if typed_paths(r.spec)}
    if not typed:
        return []
    paths = sorted({path for found in typed.values() for path in found})
    return [
        f"{len(typed)} record(s) name {', '.join(paths)} without saying which folder they ran in (made before "
        "ddpbench kept it, and no longer inside that folder's results): matched by the path as typed"
    ]


def _noise_groups(
    baseline: list[float], candidate: list[float], history: list[float] | None, baseline_is_history: bool
) -> dict[str, list[np.ndarray]]:
    groups = {
        "history" if baseline_is_history else "baseline repeats": [np.asarray(baseline)],
        "candidate repeats": [np.asarray(candidate)],
    }
    if history and not baseline_is_history:
        groups["history"] = [np.asarray(history)]
    return groups


def _evidence(
    measure: str,
    baseline: list[float],
    candidate: list[float],
    history: list[float] | None,
    baseline_is_history: bool,
    settings: stats.GateSettings,
    device: str,
    references: tuple[list[float], list[float]] | None = None,
):
    logs_b = np.array([to_log(measure, v) for v in baseline])
    logs_c = np.array([to_log(measure, v) for v in candidate])
    history_logs = [to_log(measure, v) for v in history] if history else None
    # Efficiency divides two runs, so without data its prior spread is that of two runs.
    prior = settings.prior(device) * (math.sqrt(2) if measure == "efficiency" else 1)
    noise = stats.estimate_noise(_noise_groups(logs_b, logs_c, history_logs, baseline_is_history), prior)
    if baseline_is_history:  # more candidate runs do not add history runs
        noise = dataclasses.replace(noise, fixed_baseline_runs=len(logs_b))
    evidence = stats.two_sample(logs_b, logs_c, noise)
    if references is not None and all(references):
        # Each side's per-run E(N) shares one pooled X(1) (the answers model's), so their spread
        # misses X(1)'s noise: the change of log X(1) between the sides is added as an independent
        # estimate (no change of its own: the E values already divide by it), Welch's df.
        ref_b, ref_c = (np.log(np.asarray(values, dtype=float)) for values in references)
        ref_noise = stats.estimate_noise({"X(1) runs": [ref_b, ref_c]}, settings.prior(device))
        reference = stats.two_sample(ref_b, ref_c, ref_noise)
        evidence = stats.combined(evidence, dataclasses.replace(reference, change=0.0))
    return evidence, noise


def compare_values(
    baseline: Values,
    candidate: Values,
    settings: stats.GateSettings,
    measures: tuple[str, ...] = MEASURE_NAMES,
    history: Values | None = None,
    baseline_is_history: bool = False,
    references: tuple[dict[tuple, list[float]], dict[tuple, list[float]]] | None = None,
) -> tuple[list[Comparison], list[str]]:
    """Every configuration both sides have, every measure both sides measured. `history` gives
    more evidence of the noise (values since the last change point) where the baseline is a sweep.
    `references`, per side, the X(1) throughputs each configuration's E(N) values divide by
    (`values.reference_values`): their noise is added to E(N)'s comparison."""
    unknown = [name for name in measures if name not in MEASURE_NAMES]
    if unknown:
        raise GateError(f"unknown measure {unknown[0]!r}; valid: {', '.join(MEASURE_NAMES)}")
    matched = sorted(set(baseline) & set(candidate), key=describe)
    notes = [
        f"only in the candidate (nothing to compare with): {describe(k)}"
        for k in sorted(set(candidate) - set(baseline), key=describe)
    ]
    if not matched:
        raise GateError(
            "no configuration of the candidate matches one of the baseline (the same workload file or name, "
            "size, strategy, world size and nodes, batch, precision, device, threads per rank, scaling, "
            "data-loader workers, data folder, DDP options, sample unit and in-process ablation; "
            "docs/concepts.md, Configuration)"
        )
    pending = []
    for key in matched:
        for measure in measures:
            before, after = baseline[key].get(measure), candidate[key].get(measure)
            if not before or not after:
                if measure == "throughput" or (before or after):
                    pending.append(
                        (Comparison(describe(key), measure, "n/a", note="not measured on both sides"), None, None)
                    )
                continue
            extra = (history or {}).get(key, {}).get(measure)
            shared = None
            if measure == "efficiency" and references is not None:
                shared = (references[0].get(key, []), references[1].get(key, []))
            evidence, noise = _evidence(measure, before, after, extra, baseline_is_history, settings, key[6], shared)
            # E(N) shows the mean of its per-run values: the answers model's E(N), as the table and
            # explain show it (`values.efficiencies`); the other measures their runs' median.
            middle = statistics.fmean if measure == "efficiency" else statistics.median
            comparison = Comparison(
                describe(key),
                measure,
                "pass",
                middle(before),
                middle(after),
                math.exp(evidence.change),
                len(before),
                len(after),
                noise=noise.sigma,
                noise_source=noise.source,
            )
            pending.append((comparison, evidence, noise))
    return finish(pending, settings), notes


def finish(
    pending: list[tuple[Comparison, stats.Evidence | None, stats.Noise | None]],
    settings: stats.GateSettings,
    paired: bool = False,
) -> list[Comparison]:
    """Decide every comparison at the family-wise level and say what each could see."""
    tested = sum(1 for _, evidence, _ in pending if evidence is not None)
    alpha = settings.family_alpha / max(1, tested)
    for comparison, evidence, noise in pending:
        if evidence is None:
            continue
        comparison.verdict, comparison.p_value = stats.decide(evidence, alpha, settings)
        comparison.alpha = alpha
        comparison.paired = paired
        comparison.se = evidence.se
        low, high = stats.interval(evidence, INTERVAL_LEVEL)
        comparison.ratio_low, comparison.ratio_high = math.exp(low), math.exp(high)
        comparison.df = evidence.df if math.isfinite(evidence.df) else None
        # What it can see, by the power of the whole rule (test and threshold), not the test alone.
        sight = stats.sight(evidence, noise, alpha, settings, paired_rounds=paired)
        comparison.mde = stats.as_slowdown(sight.mde_log)
        comparison.runs_needed = sight.runs_needed
        comparison.sees_threshold = sight.sees_target
        comparison.threshold_power = sight.threshold_power
    return [comparison for comparison, _, _ in pending]


def compare(
    baseline: list[Record],
    candidate: list[Record],
    settings: stats.GateSettings,
    measures: tuple[str, ...] = MEASURE_NAMES,
    history: Values | None = None,
    allow_failed: bool = False,
    allow_missing: bool = False,
) -> tuple[list[Comparison], list[str]]:
    """Two sets of records: what cannot be compared, then every matched configuration and measure."""
    failures, notes = comparability(baseline, candidate, allow_failed, allow_missing)
    notes += typed_notes(baseline + candidate)
    kept_b, kept_c = [r for r in baseline if usable(r)], [r for r in candidate if usable(r)]
    comparisons, more = compare_values(
        side_values(kept_b),
        side_values(kept_c),
        settings,
        measures,
        history,
        references=(reference_values(kept_b), reference_values(kept_c)),
    )
    return failures + comparisons, notes + more


def overall_verdict(comparisons: list[Comparison]) -> str:
    verdicts = {c.verdict for c in comparisons}
    if "not comparable" in verdicts:
        return "not comparable"
    if "regression" in verdicts:
        return "regression"
    if "inconclusive" in verdicts:
        return "inconclusive"
    return "pass"


def underpowered(comparisons: list[Comparison]) -> list[Comparison]:
    return [c for c in comparisons if c.sees_threshold is False]
