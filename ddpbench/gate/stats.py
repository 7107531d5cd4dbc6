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

What the gate can see: the power of that whole rule, test and threshold together (`rule_power`),
not of the test alone. A slowdown exactly at the threshold is flagged at most half the time however
many runs there are (its estimate is as likely to land short of the threshold as beyond), so what a
comparison "sees" is judged at twice the threshold on the log scale (`GateSettings.target`), where
the threshold lies halfway between no change and the slowdown to catch. The minimum detectable
effect is the slowdown the rule catches with the settings' power; the runs per side needed are the
fewest with which it catches the target that often.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from scipy import special

# Run-to-run spread (standard deviation of a run's log throughput) assumed when neither repeats
# nor history say anything. CPU: this project's 2-core development machine moves 8-12 % between
# runs of one configuration (single processes up to 17 %), and 16 % under heavy load from others;
# GPU: dedicated nodes typically 1-2 %. A machine that drifts under load moves far more: measured
# out of sample, 15 % gave 20 % A/A false alarms there (docs/measurements/gate-calibration.md).
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

    @property
    def target_log(self) -> float:
        """The slowdown (log units) a comparison must catch with the settings' power to "see" the
        threshold: twice the threshold, a ratio of (1 - t)^2. At the threshold itself the rule
        fires at most half the time, so no number of runs could see that."""
        return 2 * self.threshold_log

    @property
    def target(self) -> float:
        """`target_log` as a fraction of throughput lost (9.75 % for a 5 % threshold)."""
        return 1 - (1 - self.max_regression) ** 2

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
    fixed_baseline_runs: int = 0
    """With the history as baseline: its runs, which more candidate runs do not add to (0: the
    baseline grows with the candidate, run for run)."""


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
    a, b = minuend.se**2, subtrahend.se**2
    parts = [part**2 / df for part, df in ((a, minuend.df), (b, subtrahend.df)) if math.isfinite(df) and df > 0]
    df = (a + b) ** 2 / sum(parts) if parts and a + b > 0 else math.inf
    return Evidence(minuend.change - subtrahend.change, math.sqrt(a + b), df)


def quantile(probability: float, df: float) -> float:
    return float(special.ndtri(probability) if not math.isfinite(df) else special.stdtrit(df, probability))


def interval(evidence: Evidence, level: float = 0.95) -> tuple[float, float]:
    """The change's two-sided `level` interval on the log scale (Student's t at its degrees of freedom)."""
    if not math.isfinite(evidence.se):
        return -math.inf, math.inf
    half = quantile(0.5 + level / 2, evidence.df) * evidence.se
    return evidence.change - half, evidence.change + half


def p_worse(evidence: Evidence) -> float:
    """One-sided p-value of 'the candidate is no worse' (small when the change is clearly negative)."""
    if evidence.se == 0:
        return 0.0 if evidence.change < 0 else 1.0
    if not math.isfinite(evidence.se):
        return math.nan
    z = evidence.change / evidence.se
    return float(special.ndtr(z) if not math.isfinite(evidence.df) else special.stdtr(evidence.df, z))


def decide(evidence: Evidence, alpha: float, settings: GateSettings) -> tuple[str, float]:
    """(verdict, one-sided p-value of 'no worse'): regression only on significant evidence of a
    change beyond the threshold; inconclusive for an estimate beyond the threshold that is not
    significant (noise could explain it, and so could a real slowdown: neither a pass nor a
    regression); everything else passes."""
    p = p_worse(evidence)
    if math.isnan(p):
        return "pass", p
    ratio = math.exp(evidence.change)
    if ratio < 1 - settings.max_regression:
        return ("regression" if p < alpha else "inconclusive"), p
    p_better = 1 - p if evidence.se > 0 else (0.0 if evidence.change > 0 else 1.0)
    if p_better < alpha and ratio > 1 + settings.max_regression:
        return "improvement", p
    return "pass", p


# Gauss-Legendre rule for the one-dimensional integrals of `rule_power`: each integrand is smooth
# on the interval it is integrated over, where 64 points are exact to far below what is printed.
_NODES, _WEIGHTS = np.polynomial.legendre.leggauss(64)
NORMAL_REACH = 9.0  # standard deviations of the estimate either side of its mean: all but 1e-19 of it
SPREAD_TAIL = 1e-13  # probability left out in each tail of the sample spread's distribution


def _gauss_legendre(lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    half = (hi - lo)[..., None] / 2
    return half * _NODES + (hi + lo)[..., None] / 2, half * _WEIGHTS


def rule_power(slowdown_log, se, df, alpha, threshold_log) -> np.ndarray:
    """Probability that `decide` flags a true slowdown of `slowdown_log` (log units): that the
    estimate lands beyond the threshold AND its t statistic beyond the critical value. Arrays
    broadcast; df may be inf (the noise taken as known).

    With lambda = slowdown / se, b = threshold / se, c the one-sided critical value, Z ~ N(0, 1)
    the estimate's error and W = sample sd / true sd (nu W^2 ~ chi-square with nu = df, independent
    of Z for normal per-run values), the rule fires when Z < lambda - max(c W, b). So
        power = E_W[Phi(lambda - max(c W, b))]  (= Phi(lambda - max(c, b)) for known noise).
    The expectation is a one-dimensional integral, taken over whichever variable is the narrower:
    - over y = lambda - Z when the critical value spreads more than the estimate (c / sqrt(2 nu) >= 1,
      few degrees of freedom): power = int_b^inf phi(lambda - y) P(c W <= y) dy;
    - over W otherwise: power = Phi(lambda - b) P(W < b / c) + int_{b / c}^inf Phi(lambda - c w) f_W(w) dw.
    """
    arrays = np.broadcast_arrays(*(np.asarray(x, dtype=float) for x in (slowdown_log, se, df, alpha, threshold_log)))
    d, se, df, alpha, tau = (a.ravel() for a in arrays)
    found = np.full(d.shape, np.nan)
    usable = np.isfinite(se) & (se > 0)
    exact = se == 0  # no noise: the estimate is the slowdown itself
    found[exact] = (d[exact] > tau[exact]).astype(float)
    known = usable & ~np.isfinite(df)
    if known.any():
        found[known] = special.ndtr(
            (d[known] - np.maximum(special.ndtri(1 - alpha[known]) * se[known], tau[known])) / se[known]
        )
    estimated = usable & np.isfinite(df)
    if estimated.any():
        nu, shift, bar = df[estimated], d[estimated] / se[estimated], tau[estimated] / se[estimated]
        crit = special.stdtrit(nu, 1 - alpha[estimated])
        wide = crit / np.sqrt(2 * nu) >= 1
        power = np.empty(nu.shape)
        if wide.any():
            power[wide] = _over_estimate(shift[wide], bar[wide], crit[wide], nu[wide])
        if not wide.all():
            power[~wide] = _over_spread(shift[~wide], bar[~wide], crit[~wide], nu[~wide])
        found[estimated] = power
    return np.clip(found, 0.0, 1.0).reshape(arrays[0].shape)


def _over_estimate(shift, bar, crit, nu):
    """int_b^inf phi(lambda - y) P(c W <= y) dy over the estimate's normal density."""
    lo = np.maximum(bar, shift - NORMAL_REACH)
    y, weights = _gauss_legendre(lo, np.maximum(lo, shift + NORMAL_REACH))
    significant = special.gammainc(nu[:, None] / 2, nu[:, None] * (y / crit[:, None]) ** 2 / 2)
    density = np.exp(-((shift[:, None] - y) ** 2) / 2) / math.sqrt(2 * math.pi)
    return np.sum(weights * density * significant, axis=1)


def _over_spread(shift, bar, crit, nu):
    """Phi(lambda - b) P(W < b / c) + int_{b / c}^inf Phi(lambda - c w) f_W(w) dw over the spread's density."""
    half = nu / 2
    w_lo = np.sqrt(special.gammaincinv(half, SPREAD_TAIL) / half)
    w_hi = np.sqrt(special.gammainccinv(half, SPREAD_TAIL) / half)
    w_bar = bar / crit
    below = special.ndtr(shift - bar) * special.gammainc(half, half * w_bar**2)
    w, weights = _gauss_legendre(np.clip(w_bar, w_lo, w_hi), w_hi)
    half = half[:, None]
    density = np.exp(
        math.log(2) + half * np.log(half) - special.gammaln(half) + (2 * half - 1) * np.log(w) - half * w**2
    )
    return below + np.sum(weights * special.ndtr(shift[:, None] - crit[:, None] * w) * density, axis=1)


def catch_probability(slowdown_log: float, se: float, df: float, alpha: float, settings: GateSettings) -> float:
    """Probability that `decide` flags a true slowdown of `slowdown_log` (the power curve behind
    `detectable_log`; used by the calibration to check the printed figures)."""
    return float(rule_power(slowdown_log, se, df, alpha, settings.threshold_log))


def _first_reaching(power_of, lo: float, hi: float, power: float, integers: bool) -> float | None:
    """Where an increasing vectorised `power_of`, short of `power` at lo, first reaches it in
    (lo, hi]: grids that narrow the bracket (a few array calls in all), then, between reals,
    linear interpolation. None if not by hi."""
    low_power, high_power = power_of(np.array([lo, hi], dtype=float))
    if high_power < power:
        return None
    while True:
        if integers and hi - lo <= 1:
            return hi
        if not integers and hi - lo <= 1e-4 * hi:
            share = (power - low_power) / (high_power - low_power) if high_power > low_power else 1.0
            return lo + (hi - lo) * min(max(share, 0.0), 1.0)
        grid = (
            np.unique(np.round(np.geomspace(lo + 1, hi - 1, min(31, int(hi - lo) - 1))))
            if integers
            else np.linspace(lo, hi, 34)[1:-1]
        )
        powers = power_of(grid)
        reached = powers >= power
        first = int(np.argmax(reached)) if reached.any() else len(grid)
        if first < len(grid):
            hi, high_power = float(grid[first]), powers[first]
        if first > 0:
            lo, low_power = float(grid[first - 1]), powers[first - 1]


def detectable_log(se: float, df: float, alpha: float, settings: GateSettings) -> float:
    """Smallest slowdown (log units) `decide` catches with the settings' power: closed form for
    known noise, else where `rule_power` reaches it."""
    if not math.isfinite(se):
        return math.inf
    threshold = settings.threshold_log
    if se == 0:
        return threshold
    if not math.isfinite(df):
        return max(quantile(1 - alpha, df) * se, threshold) + quantile(settings.power, df) * se
    # Clearing the threshold alone needs this much (the test can only take power away); the
    # usual t approximation is a first guess for the other end of the bracket.
    lo = threshold + quantile(settings.power, math.inf) * se
    hi = max(max(quantile(1 - alpha, df) * se, threshold) + quantile(settings.power, df) * se, lo + se)

    def power_of(slowdowns):
        return rule_power(slowdowns, se, df, alpha, threshold)

    while hi - lo < 1e6 * se:
        found = _first_reaching(power_of, lo, hi, settings.power, integers=False)
        if found is not None:
            return found
        lo, hi = hi, lo + 4 * (hi - lo)
    return math.inf


def as_slowdown(log_change: float) -> float:
    """A log-unit slowdown as a fraction of throughput lost (0.1 = 10 % slower)."""
    return 1 - math.exp(-log_change) if math.isfinite(log_change) else 1.0


def runs_needed(
    sigma: float,
    alpha: float,
    settings: GateSettings,
    fixed_df: float = 0.0,
    paired_rounds: bool = False,
    efficiency_terms: int = 1,
    fixed_baseline_runs: int = 0,
) -> int | None:
    """Runs per side (or A/B rounds) with which `decide` catches the settings' target slowdown
    (twice the threshold) with their power; None when more than MAX_RUNS_NEEDED. `fixed_df`:
    degrees of freedom that do not grow with the runs (history); `efficiency_terms` = 2 where two
    configurations' noise adds up (scaling efficiency compares a run at N with a local run);
    `fixed_baseline_runs` > 0: the baseline is that many history runs and only the candidate's
    runs grow, so the count is of candidate runs."""
    if not math.isfinite(sigma) or sigma <= 0:
        return None if not math.isfinite(sigma) else 1
    return _runs_needed(
        float(sigma),
        float(alpha),
        settings,
        float(fixed_df),
        bool(paired_rounds),
        int(efficiency_terms),
        int(fixed_baseline_runs),
    )


@lru_cache(maxsize=4096)  # the prior noise is the same for every comparison without repeats
def _runs_needed(
    sigma: float,
    alpha: float,
    settings: GateSettings,
    fixed_df: float,
    paired_rounds: bool,
    efficiency_terms: int,
    fixed_baseline_runs: int = 0,
) -> int | None:
    def power_of(runs: np.ndarray) -> np.ndarray:
        if paired_rounds:
            se, df = sigma / np.sqrt(runs), runs - 1.0
        elif fixed_baseline_runs:
            se = sigma * np.sqrt(efficiency_terms * (1 / fixed_baseline_runs + 1 / runs))
            df = np.where(fixed_df + runs - 1 == 0, math.inf, fixed_df + runs - 1)
        else:
            se, df = sigma * np.sqrt(efficiency_terms * 2 / runs), fixed_df + 2 * (runs - 1)
            df = np.where(df == 0, math.inf, df)
        return rule_power(settings.target_log, se, df, alpha, settings.threshold_log)

    # More runs shrink the standard error and the critical value together, so the power grows
    # with the runs and the fewest that are enough are where it first reaches the settings' power.
    fewest = 2 if paired_rounds else 1
    if power_of(np.array([fewest], dtype=float))[0] >= settings.power:
        return fewest
    found = _first_reaching(power_of, fewest, MAX_RUNS_NEEDED, settings.power, integers=True)
    return None if found is None else int(found)


@dataclass(frozen=True)
class Sight:
    """What one comparison can see, by the power of the whole rule (test and threshold)."""

    mde_log: float
    """Slowdown (log units) caught with the settings' power."""
    threshold_power: float
    """Probability a slowdown exactly the size of the threshold is caught (at most 1/2)."""
    sees_target: bool
    """Whether the target slowdown (twice the threshold) is caught with the settings' power."""
    runs_needed: int | None
    """Runs per side (rounds, paired) that would catch the target with that power; None: over 1000."""


def sight(evidence: Evidence, noise: Noise, alpha: float, settings: GateSettings, paired_rounds: bool = False) -> Sight:
    at_threshold, at_target = rule_power(
        [settings.threshold_log, settings.target_log], evidence.se, evidence.df, alpha, settings.threshold_log
    )
    return Sight(
        detectable_log(evidence.se, evidence.df, alpha, settings),
        float(at_threshold),
        bool(at_target >= settings.power),
        runs_needed(
            noise.sigma,
            alpha,
            settings,
            fixed_df=noise.history_df,
            paired_rounds=paired_rounds,
            fixed_baseline_runs=noise.fixed_baseline_runs,
        ),
    )


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
