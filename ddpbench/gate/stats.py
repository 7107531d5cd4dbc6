"""Statistics for the regression gate. No torch.

Each metric is compared as a ratio candidate/baseline of medians (oriented so that higher is
better), with a bootstrap confidence interval:

- step times within a run are correlated (warm caches, thermal state, a noisy neighbour that
  comes and goes), so a run's steps are resampled in blocks of consecutive steps (moving-block
  bootstrap), not one by one;
- when a configuration was run several times, whole runs are resampled too, then blocks within
  each chosen run;
- runs also differ from one another as wholes (process placement, memory layout, the machine's
  other load), which no resampling of one run can see: each side's ratio is widened by a
  run-to-run spread `run_noise` / sqrt(runs), a log-normal run effect. Its default is the spread
  measured on the CPU machine ddpbench is developed on (benchmarks/gate_calibration.py measures
  yours; GPU nodes are usually much steadier).

Verdict for a ratio interval [low, high] and a threshold t: regression when high < 1 - t (the
whole interval is worse than allowed), improvement when low > 1 + t, pass when low >= 1 - t,
inconclusive otherwise. The interval says "we are sure", so noise gives inconclusive, not a
false alarm, and a real slowdown bigger than the noise gives a regression.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

VERDICTS = ("pass", "regression", "improvement", "inconclusive")
RUN_NOISE_DEFAULT = 0.06  # benchmarks/gate_calibration.py on the 2-core development machine: A/A false alarms 1.5 %


@dataclass(frozen=True)
class GateSettings:
    max_regression: float = 0.05
    """Allowed slowdown as a fraction (0.05 = 5 %)."""
    confidence: float = 0.95
    resamples: int = 2000
    block_steps: int = 5
    """Consecutive steps per bootstrap block."""
    seed: int = 0
    """Bootstrap seed: the same inputs always give the same verdict."""
    run_noise: float = RUN_NOISE_DEFAULT
    """Run-to-run spread (coefficient of variation) of a configuration's median step time."""


def block_resample_medians(series: np.ndarray, block: int, resamples: int, rng: np.random.Generator) -> np.ndarray:
    """Medians of `resamples` moving-block bootstrap resamples of one run's step series."""
    n = len(series)
    block = max(1, min(block, n))
    blocks = math.ceil(n / block)
    starts = rng.integers(0, n - block + 1, size=(resamples, blocks))
    index = (starts[:, :, None] + np.arange(block)[None, None, :]).reshape(resamples, -1)[:, :n]
    return np.median(series[index], axis=1)


def bootstrap_medians(runs: list[np.ndarray], settings: GateSettings, rng: np.random.Generator) -> np.ndarray:
    """Bootstrap distribution of the pooled median of one configuration's runs (each run a
    series of step times): runs resampled with replacement, blocks within each chosen run."""
    length = min(len(run) for run in runs)
    runs = [np.asarray(run[:length], dtype=float) for run in runs]
    if len(runs) == 1:
        return block_resample_medians(runs[0], settings.block_steps, settings.resamples, rng)
    block = max(1, min(settings.block_steps, length))
    blocks = math.ceil(length / block)
    stacked = np.stack(runs)  # (runs, steps)
    chosen = rng.integers(0, len(runs), size=(settings.resamples, len(runs)))
    starts = rng.integers(0, length - block + 1, size=(settings.resamples, len(runs), blocks))
    steps = (starts[..., None] + np.arange(block)).reshape(settings.resamples, len(runs), -1)[..., :length]
    pooled = stacked[chosen[..., None], steps].reshape(settings.resamples, -1)
    return np.median(pooled, axis=1)


def interval(samples: np.ndarray, confidence: float) -> tuple[float, float]:
    tail = (1 - confidence) / 2
    low, high = np.quantile(samples, [tail, 1 - tail])
    return float(low), float(high)


def verdict(low: float, high: float, max_regression: float) -> str:
    if high < 1 - max_regression:
        return "regression"
    if low > 1 + max_regression:
        return "improvement"
    if low >= 1 - max_regression:
        return "pass"
    return "inconclusive"


def time_ratio(baseline: list[np.ndarray], candidate: list[np.ndarray], settings: GateSettings,
               rng: np.random.Generator) -> tuple[float, np.ndarray]:
    """Speed ratio candidate/baseline from step times (time is lower-better, so baseline/candidate):
    the point estimate and its bootstrap samples."""
    point = float(np.median(np.concatenate(baseline)) / np.median(np.concatenate(candidate)))
    samples = bootstrap_medians(baseline, settings, rng) / bootstrap_medians(candidate, settings, rng)
    return point, samples * run_effect(len(baseline), len(candidate), settings, rng)


def run_effect(baseline_runs: int, candidate_runs: int, settings: GateSettings, rng: np.random.Generator) -> np.ndarray:
    """Multiplicative noise for the ratio from whole-run differences on both sides."""
    if settings.run_noise <= 0:
        return np.ones(settings.resamples)
    sigma = settings.run_noise * math.sqrt(1 / baseline_runs + 1 / candidate_runs)
    return np.exp(rng.normal(0.0, sigma, settings.resamples))


def rank_test(baseline_values: list[float], candidate_values: list[float]) -> float | None:
    """Two-sided Mann-Whitney U p-value on run-level values, when both sides were repeated."""
    if len(baseline_values) < 2 or len(candidate_values) < 2:
        return None
    from scipy.stats import mannwhitneyu

    return float(mannwhitneyu(candidate_values, baseline_values, alternative="two-sided").pvalue)


def parse_threshold(text: str) -> float:
    """'5', '5%' and '0.05' all mean 5 %."""
    cleaned = text.strip()
    try:
        if cleaned.endswith("%"):
            value = float(cleaned[:-1]) / 100
        else:
            value = float(cleaned)
            if value >= 1:
                value /= 100
    except ValueError:
        raise ValueError(f"--max-regression must be a percentage such as 5, 5% or 0.05; got {text!r}") from None
    if not 0 < value < 1:
        raise ValueError(f"--max-regression must be between 0 and 100 %; got {text!r}")
    return value


def parse_noise(text: str) -> float:
    """Like parse_threshold, but 0 is allowed (no run-to-run widening)."""
    return 0.0 if text.strip().rstrip("%") in ("0", "0.0") else parse_threshold(text)
