"""The regression gate: compare a candidate sweep with a baseline, metric by metric. No torch.

Runs are matched by what defines them (workload, size, strategy, world size, per-device batch,
precision, device kind, DDP options). Machines that differ (GPU model or count, CPU, torch, CUDA,
NCCL) are refused unless allowed: a comparison across them measures the machines, not the code.

Metrics, each as a ratio candidate/baseline oriented so that above 1 is better:
- throughput: from the per-step iteration times (median), so one slow step cannot decide;
- scaling efficiency: E(N) = t(1) / t(N) with t the median iteration time (weak scaling keeps the
  per-device batch), from the run at N and the workload's local run;
- exposed communication (DDP runs of 2 or more ranks with a no_sync replay): median step time with
  all-reduce minus without. Judged by what the change costs a step: ratio = 1 - (exposed now -
  exposed before) / baseline step time, so 0.95 means the all-reduce now exposes 5 % of a step more.
  (A plain ratio of exposed times explodes when either is near zero.)
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from typing import Callable

import numpy as np

from ddpbench.analysis.registry import record_iteration_times_s
from ddpbench.gate.stats import GateSettings, bootstrap_medians, interval, rank_test, run_effect, time_ratio, verdict
from ddpbench.records.schema import Record
from ddpbench.records.store import UnreadableRecord, load_record, read_records

ENV_FIELDS = ("gpu_names", "gpu_count", "cpu_model", "torch", "cuda", "nccl")


class GateError(ValueError):
    """Bad input to the gate (exit code 2)."""


@dataclass
class Comparison:
    configuration: str
    metric: str
    baseline: float | None
    candidate: float | None
    ratio: float | None
    low: float | None
    high: float | None
    verdict: str
    """pass, regression, improvement, inconclusive, or n/a."""
    baseline_runs: int
    candidate_runs: int
    p_value: float | None = None
    note: str = ""


def load_side(path: str) -> list[Record]:
    """Records of a sweep folder, or one record file; only ok runs take part."""
    if os.path.isfile(path):
        try:
            records = [load_record(path)]
        except UnreadableRecord as exc:
            raise GateError(f"not a readable record: {exc}") from None
    elif os.path.isdir(path):
        found, unreadable = read_records(path)
        records = [record for _, record in found]
        for bad, reason in unreadable:
            print(f"ddpbench gate: skipped unreadable record {bad}: {reason}")
    else:
        raise GateError(f"{path!r} is neither a sweep folder nor a record file")
    ok = [r for r in records if r.status == "ok"]
    if not ok:
        raise GateError(f"{path!r} holds no successful run records")
    return ok


def run_key(record: Record) -> tuple:
    spec = record.spec
    ddp = json.dumps(asdict(spec.ddp), sort_keys=True) if spec.strategy == "ddp" else ""
    return (spec.workload, spec.size, spec.strategy, spec.world_size, spec.batch_size, spec.precision, spec.device,
            ddp)


def describe(key: tuple) -> str:
    workload, size, strategy, world_size, batch, precision, device, ddp = key
    return f"{workload}/{size} {strategy} x{world_size} b{batch} {precision} {device}"


def env_differences(baseline: list[dict], candidate: list[dict]) -> list[str]:
    def values(records, field):
        return sorted({json.dumps(getattr(r.env, field)) for r in records})

    differences = []
    for field in ENV_FIELDS:
        before, after = values(baseline, field), values(candidate, field)
        if before != after:
            differences.append(f"{field}: baseline {', '.join(before)} / candidate {', '.join(after)}")
    return differences


def iteration_times(record: Record) -> np.ndarray:
    return np.asarray(record_iteration_times_s(record), dtype=float)


def exposed_series(record: Record) -> tuple[np.ndarray, np.ndarray] | None:
    """(step times with all-reduce, the same batches under no_sync) of the rank exposing most."""
    replays = record.overlap.no_sync if record.overlap else None
    if not replays:
        return None
    worst = max(range(len(replays.by_rank)), key=lambda r: replays.by_rank[r].exposed_comm_s)
    rank = record.ranks[worst]
    steps = len(rank.no_sync_step_times_s or [])
    if not steps:
        return None
    # Newer records replay the same batches with all-reduce too; older ones compared the timed steps.
    with_allreduce = rank.replay_step_times_s or rank.step_times_s[:steps]
    return np.asarray(with_allreduce), np.asarray(rank.no_sync_step_times_s)


def group_by_key(records: list[Record]) -> dict[tuple, list[Record]]:
    groups: dict[tuple, list[dict]] = {}
    for record in records:
        groups.setdefault(run_key(record), []).append(record)
    return groups


def _ratio_comparison(configuration, metric, baseline_runs, candidate_runs, point, samples, settings,
                      baseline_value, candidate_value, run_values=None) -> Comparison:
    low, high = interval(samples, settings.confidence)
    p_value = rank_test(*run_values) if run_values else None
    return Comparison(configuration, metric, baseline_value, candidate_value, point, low, high,
                      verdict(low, high, settings.max_regression), len(baseline_runs), len(candidate_runs), p_value)


@dataclass
class Matched:
    """The configurations both sides ran, and what several measures share."""

    before: dict[tuple, list[Record]]
    after: dict[tuple, list[Record]]
    keys: list[tuple]
    settings: GateSettings
    rng: np.random.Generator
    _speed: dict[tuple, np.ndarray] = field(default_factory=dict)

    def speed(self, key: tuple) -> tuple[float, np.ndarray]:
        """Candidate/baseline speed from the iteration times: point estimate and bootstrap samples."""
        if key not in self._speed:
            self._speed[key] = time_ratio([iteration_times(r) for r in self.before[key]],
                                          [iteration_times(r) for r in self.after[key]], self.settings, self.rng)
        return self._speed[key]


def _throughput(matched: Matched) -> list[Comparison]:
    comparisons = []
    for key in matched.keys:
        before, after = matched.before[key], matched.after[key]
        point, samples = matched.speed(key)
        units = before[0].metrics.sample_unit
        base_x = [r.metrics.throughput_units_per_s for r in before]
        cand_x = [r.metrics.throughput_units_per_s for r in after]
        comparisons.append(_ratio_comparison(
            describe(key), f"throughput ({units}/s)", before, after, point, samples, matched.settings,
            float(np.median(base_x)), float(np.median(cand_x)), (base_x, cand_x)))
    return comparisons


def _efficiency(matched: Matched) -> list[Comparison]:
    comparisons = []
    for key in matched.keys:
        if key[2] == "local" or key[3] == 1:
            continue
        before, after = matched.before[key], matched.after[key]
        local = next((k for k in matched.keys if k[0] == key[0] and k[1] == key[1] and k[2] == "local"
                      and k[5] == key[5] and k[6] == key[6]), None)
        if local is None:
            comparisons.append(Comparison(describe(key), "scaling efficiency", None, None, None, None, None, "n/a",
                                          len(before), len(after), note="no local run on both sides"))
            continue
        efficiency = {side: float(np.median(np.concatenate([iteration_times(r) for r in runs[local]])) /
                      np.median(np.concatenate([iteration_times(r) for r in runs[key]])))
                      for side, runs in (("baseline", matched.before), ("candidate", matched.after))}
        samples = matched.speed(key)[1] / matched.speed(local)[1]
        comparisons.append(_ratio_comparison(
            describe(key), "scaling efficiency", before, after, efficiency["candidate"] / efficiency["baseline"],
            samples, matched.settings, efficiency["baseline"], efficiency["candidate"]))
    return comparisons


def _exposed_communication(matched: Matched) -> list[Comparison]:
    # One rank has nobody to communicate with: only DDP runs of 2 or more ranks.
    return [_exposed_comparison(key, matched.before[key], matched.after[key], matched.settings, matched.rng)
            for key in matched.keys if key[2] == "ddp" and key[3] >= 2]


@dataclass(frozen=True)
class Measure:
    """One thing the gate judges; `--metrics` picks measures by name."""

    name: str
    judge: Callable[[Matched], list[Comparison]]


MEASURES = [
    Measure("throughput", _throughput),
    Measure("efficiency", _efficiency),
    Measure("exposed_comm", _exposed_communication),
]
MEASURE_NAMES = tuple(measure.name for measure in MEASURES)


def compare(baseline: list[Record], candidate: list[Record], settings: GateSettings,
            metrics: tuple[str, ...] = MEASURE_NAMES) -> tuple[list[Comparison], list[str]]:
    """Every matched configuration and measure, and the configurations only one side has."""
    unknown = [name for name in metrics if name not in MEASURE_NAMES]
    if unknown:
        raise GateError(f"unknown metric {unknown[0]!r}; valid: {', '.join(MEASURE_NAMES)}")
    before, after = group_by_key(baseline), group_by_key(candidate)
    matched = sorted(set(before) & set(after), key=describe)
    unmatched = [f"only in baseline: {describe(k)}" for k in sorted(set(before) - set(after), key=describe)]
    unmatched += [f"only in candidate: {describe(k)}" for k in sorted(set(after) - set(before), key=describe)]
    if not matched:
        raise GateError("no run of the candidate matches a run of the baseline (same workload, size, strategy, "
                        "world size, batch, precision, device and DDP options)")
    context = Matched(before, after, matched, settings, np.random.default_rng(settings.seed))
    comparisons = []
    for measure in MEASURES:
        if measure.name in metrics:
            comparisons += measure.judge(context)
    return comparisons, unmatched


def _exposed_comparison(key, base_runs, cand_runs, settings, rng) -> Comparison:
    sides = []
    for runs in (base_runs, cand_runs):
        series = [exposed_series(r) for r in runs]
        if any(s is None for s in series):
            return Comparison(describe(key), "exposed communication (s)", None, None, None, None, None, "n/a",
                              len(base_runs), len(cand_runs), note="no no_sync replay on both sides")
        with_allreduce = [s[0] for s in series]
        without = [s[1] for s in series]
        point = float(np.median(np.concatenate(with_allreduce)) - np.median(np.concatenate(without)))
        samples = bootstrap_medians(with_allreduce, settings, rng) - bootstrap_medians(without, settings, rng)
        sides.append((point, samples, with_allreduce))
    (base_point, base_samples, base_steps), (cand_point, cand_samples, _) = sides
    step_samples = bootstrap_medians(base_steps, settings, rng)
    step = float(np.median(np.concatenate(base_steps)))
    samples = (1 - (cand_samples - base_samples) / step_samples) * run_effect(len(base_runs), len(cand_runs), settings, rng)
    return _ratio_comparison(describe(key), "exposed communication (s)", base_runs, cand_runs,
                             1 - (cand_point - base_point) / step, samples, settings, base_point, cand_point)


def overall_verdict(comparisons: list[Comparison]) -> str:
    verdicts = {c.verdict for c in comparisons}
    if "regression" in verdicts:
        return "regression"
    if "inconclusive" in verdicts:
        return "inconclusive"
    return "pass"


def format_table(comparisons: list[Comparison], settings: GateSettings) -> str:
    lines = [f"{'configuration':<44} {'metric':<28} {'baseline':>12} {'candidate':>12} {'ratio':>7} "
             f"{'95% interval':>17}  verdict"]
    for c in comparisons:
        ratio = f"{c.ratio:.3f}" if c.ratio is not None else ""
        span = f"[{c.low:.3f}, {c.high:.3f}]" if c.low is not None else ""
        base = f"{c.baseline:,.4g}" if c.baseline is not None else ""
        cand = f"{c.candidate:,.4g}" if c.candidate is not None else ""
        note = f"  ({c.note})" if c.note else ""
        p = f"  p={c.p_value:.3f}" if c.p_value is not None else ""
        lines.append(f"{c.configuration:<44} {c.metric:<28} {base:>12} {cand:>12} {ratio:>7} {span:>17}  "
                     f"{c.verdict.upper() if c.verdict == 'regression' else c.verdict}{p}{note}")
    lines.append(f"ratio = candidate / baseline, above 1 is better (exposed communication: 1 - its growth / the "
                 f"baseline step time); regression when the whole interval is below "
                 f"{1 - settings.max_regression:.2f} ({settings.max_regression:.0%} allowed)")
    return "\n".join(lines)


def markdown_summary(comparisons: list[Comparison], settings: GateSettings, unmatched: list[str],
                     env_notes: list[str]) -> str:
    result = overall_verdict(comparisons)
    regressed = [c for c in comparisons if c.verdict == "regression"]
    lines = [f"## ddpbench gate: {result.upper()}", ""]
    if regressed:
        lines.append(f"{len(regressed)} of {len(comparisons)} comparisons regressed by more than "
                     f"{settings.max_regression:.0%}:")
        lines.append("")
        for c in regressed:
            lines.append(f"- **{c.configuration}**, {c.metric}: {(1 - c.ratio):.1%} worse "
                         f"(ratio {c.ratio:.3f}, 95 % interval {c.low:.3f} to {c.high:.3f})")
        lines.append("")
    lines += ["| configuration | metric | baseline | candidate | ratio | 95 % interval | verdict |",
              "|---|---|---:|---:|---:|---|---|"]
    for c in comparisons:
        cells = [c.configuration, c.metric,
                 f"{c.baseline:,.4g}" if c.baseline is not None else "",
                 f"{c.candidate:,.4g}" if c.candidate is not None else "",
                 f"{c.ratio:.3f}" if c.ratio is not None else "",
                 f"{c.low:.3f} to {c.high:.3f}" if c.low is not None else c.note,
                 f"**{c.verdict}**" if c.verdict == "regression" else c.verdict]
        lines.append("| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |")
    lines += ["", f"Ratio = candidate / baseline, above 1 is better. Regression: the whole 95 % bootstrap interval "
                  f"is below {1 - settings.max_regression:.2f}; pass: it is all above; inconclusive: it straddles."]
    for note in env_notes + unmatched:
        lines.append(f"- {note}")
    return "\n".join(lines) + "\n"


def as_json(comparisons: list[Comparison], settings: GateSettings, unmatched: list[str], env_notes: list[str]) -> dict:
    return {"verdict": overall_verdict(comparisons), "settings": asdict(settings),
            "comparisons": [asdict(c) for c in comparisons], "unmatched": unmatched,
            "environment_differences": env_notes}
