"""Statistics for the regression gate. No torch.

The sample is the run. On shared machines the noise that matters is between runs (placement,
neighbours, memory layout), not between the steps of one run, so every measure is one number per
run, compared on a log scale (a ratio of speeds is a difference of logs, and run-to-run spread is
roughly proportional to speed).

Noise comes from data: the spread of per-run log values around their own group's mean, pooled over
every group that saw the same configuration (the baseline's repeats, the candidate's repeats, the
stored history since its last change point). Only where there is none of that (one run per side,
no history) does the gate fall back to a prior: PRIOR_NOISE, overridable with `--prior-noise`.

Decision, for a change of `change` (mean log candidate - mean log baseline, oriented so that
positive is better) and a threshold t (the allowed slowdown):
- regression when a one-sided t-test of "no worse" is rejected at the family-wise level
  (`family_alpha` / the number of comparisons, Bonferroni) AND exp(change) < 1 - t;
- improvement when the mirror test is significant and exp(change) > 1 + t (informational: passes);
- pass otherwise. Noise therefore passes; only evidence fails.

What the gate can see: with that rule a slowdown d (in log units) is caught when the estimate lands
beyond both the test's critical value and the threshold, so the minimum detectable effect at power
p is max(crit * se, d_t) + q_p * se (exact for known noise, the usual t approximation otherwise).
The runs per side needed are those that make the test alone see a slowdown the size of the
threshold with power p.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import stats as scipy_stats

# Run-to-run spread (standard deviation of a run's log throughput) assumed when neither repeats
# nor history say anything. CPU: this project's 2-core development machine moves 8-12 % between
# runs of one configuration (single processes up to 17 %), and 16 % under heavy load from others
# (benchmarks/gate_calibration.py, where 12 % gave 3 of 90 A/A false alarms and 15 % none); GPU:
# dedicated nodes typically 1-2 %.
# Both are set a little above what was measured: a prior that is too small is a false alarm.
PRIOR_NOISE = {"cpu": 0.15, "cuda": 0.03}
MAX_RUNS_NEEDED = 1000


@dataclass(frozen=True)
class GateSettings:
    max_regression: float = 0.05
    """Allowed slowdown as a fraction (0.05 = 5 %)."""
    family_alpha: float = 0.01
    """False-alarm rate for the whole comparison (all configurations and measures together)."""
    power: float = 0.8
    """Detection probability the minimum detectable effect is quoted at."""
    prior_noise: float | None = None
    """Run-to-run spread to assume without repeats or history; None: PRIOR_NOISE by device."""

    def __post_init__(self):
        if not 0 < self.max_regression < 1:
            raise ValueError(f"max_regression must be between 0 and 1 (exclusive); got {self.max_regression!r}")
        if not 0 < self.family_alpha < 0.5:
            raise ValueError(f"family_alpha must be between 0 and 0.5; got {self.family_alpha!r}")
        if not 0.5 <= self.power < 1:
            raise ValueError(f"power must be between 0.5 and 1; got {self.power!r}")
        if self.prior_noise is not None and not 0 < self.prior_noise < 1:
            raise ValueError(f"prior_noise must be between 0 and 1 (exclusive); got {self.prior_noise!r}")

    @property
    def threshold_log(self) -> float:
        """The allowed slowdown in log units: a ratio below 1 - t is a change below -threshold_log."""
        return -math.log(1 - self.max_regression)

    def prior(self, device: str) -> float:
        return self.prior_noise if self.prior_noise is not None else PRIOR_NOISE.get(device, PRIOR_NOISE["cpu"])


@dataclass(frozen=True)
class Noise:
    """Run-to-run spread of one configuration's per-run log values."""

    sigma: float
    df: float
    """Degrees of freedom of the estimate; inf for the prior (taken as known)."""
    source: str
    """Where it came from, in words: repeats, history, or prior."""
    history_df: float = 0.0
    """The part of `df` that does not depend on how many runs the two sides have."""


def estimate_noise(groups: dict[str, list[np.ndarray]], prior: float) -> Noise:
    """Pooled standard deviation of log values around their own group's mean. `groups` maps a
    source name (baseline repeats, candidate repeats, history) to its groups of log values."""
    squares, df, used, history_df = 0.0, 0, [], 0
    for source, arrays in groups.items():
        source_df, runs = 0, 0
        for values in arrays:
            values = np.asarray(values, dtype=float)
            if len(values) >= 2:
                squares += float(np.sum((values - values.mean()) ** 2))
                source_df += len(values) - 1
                runs += len(values)
        if source_df:
            used.append(f"{source} ({runs} runs)")
            df += source_df
            history_df += source_df if source == "history" else 0
    if df == 0:
        return Noise(prior, math.inf, f"prior {prior:.1%} (no repeats, no history)")
    return Noise(math.sqrt(squares / df), float(df), " + ".join(used), float(history_df))


@dataclass(frozen=True)
class Evidence:
    """A change on the log scale (positive = better) with its standard error."""

    change: float
    se: float
    df: float


def two_sample(baseline: np.ndarray, candidate: np.ndarray, noise: Noise, orient: float = 1.0) -> Evidence:
    """Difference of mean log values, candidate - baseline (times `orient`: -1 where lower is better)."""
    change = orient * (float(np.mean(candidate)) - float(np.mean(baseline)))
    return Evidence(change, noise.sigma * math.sqrt(1 / len(baseline) + 1 / len(candidate)), noise.df)


def paired(baseline: np.ndarray, candidate: np.ndarray, orient: float = 1.0) -> tuple[Evidence, Noise]:
    """Per-round log ratios of an A/B job: mean, its standard error, K - 1 degrees of freedom."""
    ratios = orient * (np.asarray(candidate, dtype=float) - np.asarray(baseline, dtype=float))
    spread = float(np.std(ratios, ddof=1)) if len(ratios) >= 2 else math.nan
    noise = Noise(spread, float(len(ratios) - 1), f"{len(ratios)} paired rounds")
    return Evidence(float(np.mean(ratios)), spread / math.sqrt(len(ratios)), noise.df), noise


def combined(minuend: Evidence, subtrahend: Evidence) -> Evidence:
    """minuend - subtrahend for independent estimates; Welch-Satterthwaite degrees of freedom."""
    a, b = minuend.se ** 2, subtrahend.se ** 2
    parts = [part ** 2 / df for part, df in ((a, minuend.df), (b, subtrahend.df)) if math.isfinite(df) and df > 0]
    df = (a + b) ** 2 / sum(parts) if parts and a + b > 0 else math.inf
    return Evidence(minuend.change - subtrahend.change, math.sqrt(a + b), df)


def quantile(probability: float, df: float) -> float:
    return float(scipy_stats.norm.ppf(probability) if not math.isfinite(df) else scipy_stats.t.ppf(probability, df))


def p_worse(evidence: Evidence) -> float:
    """One-sided p-value of 'the candidate is no worse' (small when the change is clearly negative)."""
    if evidence.se == 0:
        return 0.0 if evidence.change < 0 else 1.0
    if not math.isfinite(evidence.se):
        return math.nan
    z = evidence.change / evidence.se
    return float(scipy_stats.norm.cdf(z) if not math.isfinite(evidence.df) else scipy_stats.t.cdf(z, evidence.df))


def decide(evidence: Evidence, alpha: float, settings: GateSettings) -> tuple[str, float]:
    """(verdict, one-sided p-value of 'no worse'): regression only on significant evidence of a
    change beyond the threshold; everything else passes."""
    p = p_worse(evidence)
    if math.isnan(p):
        return "pass", p
    ratio = math.exp(evidence.change)
    if p < alpha and ratio < 1 - settings.max_regression:
        return "regression", p
    p_better = 1 - p if evidence.se > 0 else (0.0 if evidence.change > 0 else 1.0)
    if p_better < alpha and ratio > 1 + settings.max_regression:
        return "improvement", p
    return "pass", p


def detectable_log(se: float, df: float, alpha: float, settings: GateSettings) -> float:
    """Smallest slowdown (log units) caught with probability `power` by `decide`."""
    if not math.isfinite(se):
        return math.inf
    return max(quantile(1 - alpha, df) * se, settings.threshold_log) + quantile(settings.power, df) * se


def as_slowdown(log_change: float) -> float:
    """A log-unit slowdown as a fraction of throughput lost (0.1 = 10 % slower)."""
    return 1 - math.exp(-log_change) if math.isfinite(log_change) else 1.0


def runs_needed(sigma: float, alpha: float, settings: GateSettings, fixed_df: float = 0.0, paired_rounds: bool = False,
                efficiency_terms: int = 1) -> int | None:
    """Runs per side (or A/B rounds) for the test to see a slowdown the size of the threshold with
    the settings' power; None when more than MAX_RUNS_NEEDED. `fixed_df`: degrees of freedom that
    do not grow with the runs (history); `efficiency_terms` = 2 where two configurations' noise adds
    up (scaling efficiency compares a run at N with a local run)."""
    if not math.isfinite(sigma) or sigma <= 0:
        return None if not math.isfinite(sigma) else 1
    for runs in range(1 if not paired_rounds else 2, MAX_RUNS_NEEDED + 1):
        if paired_rounds:
            se, df = sigma / math.sqrt(runs), runs - 1
        else:
            se = sigma * math.sqrt(efficiency_terms * 2 / runs)
            df = fixed_df + 2 * (runs - 1)
            df = math.inf if df == 0 else df
        if (quantile(1 - alpha, df) + quantile(settings.power, df)) * se <= settings.threshold_log:
            return runs
    return None


def catch_probability(slowdown_log: float, se: float, df: float, alpha: float, settings: GateSettings) -> float:
    """Probability that `decide` flags a true slowdown of `slowdown_log` (the power curve behind
    `detectable_log`; used by the calibration to check the printed figures)."""
    if not math.isfinite(se) or se <= 0:
        return math.nan
    bar = max(quantile(1 - alpha, df) * se, settings.threshold_log)
    shift = (slowdown_log - bar) / se
    return float(scipy_stats.norm.cdf(shift) if not math.isfinite(df) else scipy_stats.t.cdf(shift, df))


def parse_fraction(text: str, what: str) -> float:
    """'5', '5%' and '0.05' all mean 5 %; the value must lie strictly between 0 and 100 %."""
    cleaned = str(text).strip()
    try:
        if cleaned.endswith("%"):
            value = float(cleaned[:-1]) / 100
        else:
            value = float(cleaned)
            if value >= 1:
                value /= 100
    except ValueError:
        raise ValueError(f"{what} must be a percentage such as 5, 5% or 0.05; got {text!r}") from None
    if not 0 < value < 1 or not math.isfinite(value):
        raise ValueError(f"{what} must be between 0 and 100 % (exclusive); got {text!r}")
    return value


def parse_threshold(text: str) -> float:
    return parse_fraction(text, "--max-regression")
