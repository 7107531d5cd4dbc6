"""The one way a test asserts on measured numbers (times, intervals, rates), so that the whole suite
fails by chance at most once in 100 runs.

Each check is a one-sided test on the mean of independent samples (Student's t, Welch's for two
runs) or on a proportion (Clopper-Pearson), at a false-failure rate the call states: where the claim
holds, the check fails at most `rate` of the time (for normal samples: exactly `rate` at the
boundary). The suite's budget, SUITE_RATE, is shared out over the calls: tests/test_chance.py reads
every call in the tests, multiplies by its parametrizations and checks that the stated rates sum
to at most SUITE_RATE, and that no assert on a measured figure goes around this module.

A check also says its power: given `missing`, the mean (or proportion) the samples would have if the
effect under test were absent, it computes the chance that the same check on samples of the same
size and spread would fail then (noncentral t with the samples' own spread). The outcome and the
failure message show it.

The rates hold for samples that are independent and alike: the steps or rounds of one run. A drift
of the whole machine between two runs is not in their spread, so a test that compares two runs
holds the machine to itself (`alone`, tests/conftest.py). Paired rounds (the gate's confirmation)
are the exception: each round runs both sides back to back, and the test on the rounds' ratios sees
the spread between rounds; they run one process at a time (`one_core`), beside in-process tests only.
"""

from __future__ import annotations

import math
import os
import statistics
from dataclasses import dataclass

import scipy.stats

SUITE_RATE = 0.01
"""The chance that a correct suite goes red on noise, summed over every check it makes."""
RATE = 1e-4
"""A check's default share: SUITE_RATE over 100 checks."""


class NotShown(AssertionError):
    """The measured numbers do not show the claim at the stated rate."""


@dataclass(frozen=True)
class Outcome:
    estimate: float
    bound: float
    limit: float  # the one-sided confidence limit compared with `bound`
    power: float | None  # the chance of failing where the effect is missing, where `missing` was given
    text: str


def _t_check(estimate, standard_error, df, bound, at_least: bool, rate, missing, what) -> Outcome:
    if not 0 < rate < 0.5:
        raise ValueError(f"rate must lie in (0, 0.5), got {rate}")
    critical = scipy.stats.t.ppf(1 - rate, df)
    # The claim "mean >= bound" fails only where even the upper limit is below the bound.
    limit = estimate + critical * standard_error if at_least else estimate - critical * standard_error
    power = None
    if missing is not None and standard_error > 0:
        # Where the true mean is `missing`, the statistic (estimate - bound) / se is noncentral t.
        shift = (missing - bound) / standard_error
        power = (
            float(scipy.stats.nct.cdf(-critical, df, shift))
            if at_least
            else float(scipy.stats.nct.sf(critical, df, shift))
        )
    sign = ">=" if at_least else "<="
    head, _, detail = what.partition("\n")
    text = (
        f"{head}: {estimate:.4g} (one-sided limit at rate {rate:g}: {limit:.4g}, {df:.3g} degrees of freedom) "
        f"against the claim {sign} {bound:.4g}"
        + ("" if power is None else f"; chance of failing were it {missing:.4g}: {power:.4f}")
        + (f"\n{detail}" if detail else "")
    )
    return Outcome(estimate, bound, limit, power, text)


LOG = "DDPBENCH_CHANCE_LOG"
"""Where set, a file each check appends its outcome to (the test, the figures, the power), one line
each: how close the suite's checks come to failing, and how much power they have, run by run."""


def _log(text: str) -> None:
    path = os.environ.get(LOG)
    if path:
        test = os.environ.get("PYTEST_CURRENT_TEST", "?").rsplit(" (", 1)[0]
        with open(path, "a", encoding="utf-8") as handle:
            handle.write(f"{test}\t{text.splitlines()[0]}\n")


def _settle(outcome: Outcome, at_least: bool) -> Outcome:
    _log(outcome.text)
    failed = outcome.limit < outcome.bound if at_least else outcome.limit > outcome.bound
    if failed:
        raise NotShown(outcome.text)
    return outcome


def _mean(samples: list[float], what: str) -> tuple[float, float, int]:
    values = [float(value) for value in samples]
    if len(values) < 2:
        raise ValueError(f"{what}: a check needs two samples or more, got {len(values)}")
    return statistics.fmean(values), statistics.stdev(values) / math.sqrt(len(values)), len(values) - 1


def mean_at_least(samples, bound: float, *, rate: float = RATE, missing: float | None = None, what: str = "mean"):
    """Fails where the samples' mean is shown below `bound` (rate: the chance of that when it is not)."""
    estimate, se, df = _mean(samples, what)
    return _settle(_t_check(estimate, se, df, bound, True, rate, missing, what), True)


def mean_at_most(samples, bound: float, *, rate: float = RATE, missing: float | None = None, what: str = "mean"):
    """Fails where the samples' mean is shown above `bound`."""
    estimate, se, df = _mean(samples, what)
    return _settle(_t_check(estimate, se, df, bound, False, rate, missing, what), False)


def _welch(first, second, what: str) -> tuple[float, float, float]:
    (mean_1, se_1, df_1), (mean_2, se_2, df_2) = _mean(first, what), _mean(second, what)
    se = math.hypot(se_1, se_2)
    if se == 0:
        return mean_1 - mean_2, 0.0, float(df_1 + df_2)
    df = se**4 / (se_1**4 / df_1 + se_2**4 / df_2)  # Welch-Satterthwaite
    return mean_1 - mean_2, se, df


def difference_at_least(
    first, second, bound: float, *, rate: float = RATE, missing: float | None = None, what: str = "difference"
):
    """Fails where mean(first) - mean(second) is shown below `bound` (two independent runs)."""
    estimate, se, df = _welch(first, second, what)
    return _settle(_t_check(estimate, se, df, bound, True, rate, missing, what), True)


def difference_at_most(
    first, second, bound: float, *, rate: float = RATE, missing: float | None = None, what: str = "difference"
):
    """Fails where mean(first) - mean(second) is shown above `bound`."""
    estimate, se, df = _welch(first, second, what)
    return _settle(_t_check(estimate, se, df, bound, False, rate, missing, what), False)


def _upper(hits: int, trials: int, rate: float) -> float:
    return 1.0 if hits == trials else float(scipy.stats.beta.ppf(1 - rate, hits + 1, trials - hits))


def proportion_at_least(
    hits: int, trials: int, bound: float, *, rate: float = RATE, missing: float | None = None, what: str = "proportion"
):
    """Fails where the proportion hits/trials is shown below `bound` (Clopper-Pearson upper limit).
    `missing`: the proportion were the effect absent; the power is exact (binomial)."""
    upper = _upper(hits, trials, rate)
    power = None
    if missing is not None:
        failing = [k for k in range(trials + 1) if _upper(k, trials, rate) < bound]
        power = float(sum(scipy.stats.binom.pmf(k, trials, missing) for k in failing))
    head, _, detail = what.partition("\n")
    text = (
        f"{head}: {hits}/{trials} (upper limit at rate {rate:g}: {upper:.4g}) against the claim >= {bound:.4g}"
        + ("" if power is None else f"; chance of failing were it {missing:.4g}: {power:.4f}")
        + (f"\n{detail}" if detail else "")
    )
    return _settle(Outcome(hits / trials, bound, upper, power, text), True)


def verdict(holds: bool, *, rate: float, basis: str, what: str) -> None:
    """A decision ddpbench reached from measured numbers (the gate's verdict, a rank named), where
    the test cannot reach the samples behind it: asserted with the rate its design gives it (`basis`
    says which: the gate's --family-alpha on the test's command line, or the planted effect against
    the decision's own interval)."""
    if not 0 < rate < 0.5:
        raise ValueError(f"rate must lie in (0, 0.5), got {rate}")
    if not holds:
        raise NotShown(f"{what} (its stated false-failure rate {rate:g}: {basis})")
