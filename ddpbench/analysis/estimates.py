"""A figure with its 95 % interval, from the rounds of one run or pooled over a configuration's
runs. No torch.

One run is one sample of the machine: the same configuration's figures move from one process to the
next by more than one run's rounds can see (on the 2-core development machine, 23 % apart in one
make bench: docs/measurements/cpu-suite.md). So a configuration's figure is pooled over its runs,
with one rule: a mean is the mean of the runs' figures (`pool`), a ratio is the ratio of the pooled
means (`ratio_of_means`, `ratio_of_independent_means`), its standard error from the delta method,
and its interval is Student's t over the runs with K - 1 degrees of freedom, whatever the runs show.
The interval covers this configuration's long-run mean on this machine. A configuration measured
once keeps its run's interval, which covers that run's rounds only (`over == "rounds"`).

A ratio of means, not a mean of ratios: single steps range from a fifth to one and a half times
each other, and the mean of their ratios is biased (it can print a cause larger than the whole
loss, or of the other sign than its milliseconds).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

# Two-sided 95 % quantiles of Student's t by degrees of freedom (standard tables); beyond 30, the
# normal's 1.96 is within 4 %.
T_975 = {
    1: 12.706,
    2: 4.303,
    3: 3.182,
    4: 2.776,
    5: 2.571,
    6: 2.447,
    7: 2.365,
    8: 2.306,
    9: 2.262,
    10: 2.228,
    11: 2.201,
    12: 2.179,
    13: 2.160,
    14: 2.145,
    15: 2.131,
    16: 2.120,
    17: 2.110,
    18: 2.101,
    19: 2.093,
    20: 2.086,
    21: 2.080,
    22: 2.074,
    23: 2.069,
    24: 2.064,
    25: 2.060,
    26: 2.056,
    27: 2.052,
    28: 2.048,
    29: 2.045,
    30: 2.042,
}


def t_975(df: int) -> float:
    return T_975.get(df, 1.96) if df >= 1 else math.inf


def standard_error(values: list[float]) -> float:
    return statistics.stdev(values) / math.sqrt(len(values)) if len(values) > 1 else math.inf


@dataclass(frozen=True)
class Estimate:
    """A mean with its 95 % interval (low, high; None where there is none)."""

    value: float
    low: float | None
    high: float | None
    samples: int
    """Rounds of one run (`over == "rounds"`), or runs pooled (`over == "runs"`); 0 when exact."""
    over: str
    """rounds: one run's rounds; runs: pooled over runs; exact: zero by construction."""
    se: float | None = None

    @classmethod
    def of_rounds(cls, values: list[float]) -> Estimate:
        """The mean of one run's per-round values, with a t interval over the rounds."""
        mean = statistics.fmean(values)
        se = standard_error(values)
        if not math.isfinite(se):
            return cls(mean, None, None, len(values), "rounds", None)
        half = t_975(len(values) - 1) * se
        return cls(mean, mean - half, mean + half, len(values), "rounds", se)

    @classmethod
    def of_runs(cls, values: list[float]) -> Estimate:
        """The mean of a configuration's per-run values, with a t interval over the runs (K - 1)."""
        mean = statistics.fmean(values)
        return _interval(mean, standard_error(values), len(values), "runs")

    @classmethod
    def exact(cls, value: float) -> Estimate:
        """Zero (or any value) by construction: one rank shares nothing and sends nothing."""
        return cls(value, value, value, 0, "exact", 0.0)

    @classmethod
    def combined(cls, value: float, *errors: float, df: int) -> Estimate:
        """A difference of independent figures, with an interval from their standard errors."""
        se = math.sqrt(sum(error * error for error in errors))
        if not math.isfinite(se) or df < 1:
            return cls(value, None, None, df + 1, "rounds", None)
        half = t_975(df) * se
        return cls(value, value - half, value + half, df + 1, "rounds", se)

    @property
    def has_interval(self) -> bool:
        return self.low is not None and self.high is not None

    @property
    def half(self) -> float | None:
        return (self.high - self.low) / 2 if self.has_interval else None

    @property
    def significant(self) -> bool:
        """Beyond noise: measured, with a 95 % interval that excludes zero. Exact zeros and figures
        without an interval never are."""
        if self.over == "exact" or not self.has_interval:
            return False
        return self.low > 0 or self.high < 0

    def scaled(self, factor: float) -> Estimate:
        """The same estimate in other units (factor > 0)."""
        low = None if self.low is None else self.low * factor
        high = None if self.high is None else self.high * factor
        se = None if self.se is None else self.se * factor
        return Estimate(self.value * factor, low, high, self.samples, self.over, se)

    def as_dict(self) -> dict:
        return {"value": self.value, "low": self.low, "high": self.high, "samples": self.samples, "over": self.over}


def pool(estimates: list[Estimate]) -> Estimate:
    """A configuration's figure from its runs' (see the module's docstring): their mean, with a t
    interval over the runs, K - 1 degrees of freedom. Exact figures stay exact; one run keeps its
    own interval."""
    if not estimates:
        raise ValueError("nothing to pool")
    if all(estimate.over == "exact" for estimate in estimates):
        return Estimate.exact(statistics.fmean(e.value for e in estimates))
    if len(estimates) == 1:
        return estimates[0]
    return Estimate.of_runs([e.value for e in estimates])


def _interval(value: float, se: float, samples: int, over: str) -> Estimate:
    if not math.isfinite(se) or samples < 2:
        return Estimate(value, None, None, samples, over, None)
    half = t_975(samples - 1) * se
    return Estimate(value, value - half, value + half, samples, over, se)


def ratio_of_means(numerators: list[float], denominators: list[float], over: str, scale: float = 1.0) -> Estimate:
    """mean(numerators) / mean(denominators) x scale, paired samples (the rounds of one run, or the
    runs of one configuration), with the delta method's standard error (the residuals
    a - R b over the mean of b) and Student's t at n - 1 degrees of freedom."""
    if len(numerators) != len(denominators) or not numerators:
        raise ValueError("a ratio of means needs paired, non-empty samples")
    mean_b = statistics.fmean(denominators)
    ratio = statistics.fmean(numerators) / mean_b
    samples = len(numerators)
    if samples < 2:
        return Estimate(ratio * scale, None, None, samples, over, None)
    residuals = [(a - ratio * b) / mean_b for a, b in zip(numerators, denominators)]
    return _interval(ratio * scale, abs(scale) * standard_error(residuals), samples, over)


def ratio_of_independent_means(numerators: list[float], denominators: list[float], divisor: float = 1.0) -> Estimate:
    """mean(numerators) / (divisor x mean(denominators)) over two independent sets of runs (a
    configuration's and its reference's), with the delta method's standard error and Student's t at
    min(K) - 1 degrees of freedom; no interval where either side ran once."""
    mean_a, mean_b = statistics.fmean(numerators), statistics.fmean(denominators)
    value = mean_a / (divisor * mean_b)
    samples = min(len(numerators), len(denominators))
    if samples < 2:
        return Estimate(value, None, None, samples, "runs", None)
    relative = math.hypot(standard_error(numerators) / mean_a, standard_error(denominators) / mean_b)
    return _interval(value, abs(value) * relative, samples, "runs")


def ratio_over_one_run(
    numerators: list[float], denominator: float, denominator_relative_se: float, divisor: float = 1.0
) -> Estimate:
    """mean(numerators) / (divisor x denominator), where the denominator was measured by one run: the
    numerators' run-to-run spread and the one run's own standard error (relative, from its steps),
    by the delta method, Student's t at K - 1 degrees of freedom. The spread of the denominator from
    one run to the next is not in it: one run cannot show it."""
    mean = statistics.fmean(numerators)
    value = mean / (divisor * denominator)
    relative = math.hypot(standard_error(numerators) / mean, denominator_relative_se)
    return _interval(value, abs(value) * relative, len(numerators), "runs")


def points_lost(efficiency: Estimate) -> Estimate:
    """An efficiency (a fraction) as the percentage points it lost, 100 x (1 - efficiency)."""
    low = None if efficiency.high is None else 100 * (1 - efficiency.high)
    high = None if efficiency.low is None else 100 * (1 - efficiency.low)
    se = None if efficiency.se is None else 100 * efficiency.se
    return Estimate(100 * (1 - efficiency.value), low, high, efficiency.samples, efficiency.over, se)
