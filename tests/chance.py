"""The one way a test asserts on measured numbers (times, intervals, rates), so that the whole suite
fails by chance at most once in 100 runs.

Each check is a one-sided test on the mean of independent samples (Student's t, Welch's for two
runs) or on a proportion (Clopper-Pearson), at a false-failure rate the call states: where the claim
holds, the check fails at most `rate` of the time (for normal samples: exactly `rate` at the
boundary). The suite's budget, SUITE_RATE, is shared out over the calls: tests/test_chance.py reads
every call in the tests (tests/chance_scan.py), multiplies by how often it runs and checks that the
stated rates sum to at most SUITE_RATE, and that no assert on noise goes around this module.

A check also says its power: given `missing`, the mean (or proportion) the samples would have if the
effect under test were absent, it computes the chance that the same check on samples of the same
size and spread would fail then (noncentral t with the samples' own spread). The outcome and the
failure message show it.

A decision ddpbench reached from measured numbers (a rank or phase named, the gate's verdict) is
asserted by `verdict`, with the tests that decision makes on its own samples (`Beyond`: the rounds
or steps behind a wait or a lead, the gate's paired rounds; `Known`: a rule's false alarm) and the
planted effect: the chance that it goes wrong with the effect present is computed from them, and the
check fails where the samples show it above the stated rate. Where the samples cannot be reached,
the call says why (`unreachable=`).

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

import scipy.special
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


@dataclass(frozen=True)
class Beyond:
    """One test a decision of ddpbench makes on its samples (the rounds or steps behind a wait, a
    phase's lead, the gate's paired rounds): their mean shown beyond zero, at the rule's `level`
    (two-sided, `sides=2`: a 95 % interval that excludes zero is level 0.05; one-sided, `sides=1`: the
    gate's test at its alpha), and beyond `margin` where the rule asks for that too (the gate's
    threshold, on the same scale). `level=1.0` with `sides=2` is a rule that reads the sign of the
    mean alone (the larger of two is named). `effect`: the mean the samples have with the planted
    effect present, in the direction the decision names (positive)."""

    samples: list[float]
    effect: float
    level: float = 0.05
    sides: int = 2
    margin: float = 0.0
    what: str = "samples"

    def chance(self, spread: float | None = None) -> float:
        """The chance that the rule does not find the effect, on samples of this size whose mean is
        `effect` and whose standard deviation is `spread` (by default the samples' own): noncentral
        t, as `missing=` computes a check's power."""
        if not 0 < self.level <= 1 or self.sides not in (1, 2):
            raise ValueError(f"{self.what}: level in (0, 1] and sides 1 or 2, got {self.level}, {self.sides}")
        _, se, df = _mean(self.samples, self.what)
        if spread is not None:
            se = spread / math.sqrt(df + 1)
        # scipy.special's functions, not scipy.stats': the same figures, a hundred times quicker
        # (tests/test_chance.py draws thousands of verdicts).
        critical = scipy.special.stdtrit(df, 1 - self.level / self.sides)
        if se == 0:
            return 0.0 if self.effect > max(self.margin, 0.0) else 1.0
        missed = float(scipy.special.nctdtr(df, self.effect / se, critical))
        if self.margin > 0:  # or the estimate short of the margin: the two ways to miss, added
            missed += float(scipy.special.stdtr(df, (self.margin - self.effect) / se))
        return min(1.0, missed)

    def least_spread(self, rate: float) -> float:
        """The smallest standard deviation the samples allow, at one-sided confidence 1 - rate
        (chi-squared): true spreads are below it at most `rate` of the time."""
        _, se, df = _mean(self.samples, self.what)
        return se * math.sqrt(df + 1) * math.sqrt(df / scipy.special.chdtri(df, rate))

    def text(self) -> str:
        estimate, se, df = _mean(self.samples, self.what)
        margin = f", beyond {self.margin:.4g}" if self.margin else ""
        rule = (
            "the sign of the mean"
            if self.level == 1
            else f"level {self.level:g} {('one', 'two')[self.sides - 1]}-sided"
        )
        return (
            f"{self.what}: mean {estimate:.4g} (standard error {se:.3g}, {df} degrees of freedom), planted effect "
            f"{self.effect:.4g}, rule {rule}{margin}: misses it with chance {self.chance():.3g}"
        )


@dataclass(frozen=True)
class Known:
    """A test of a decision whose chance of going wrong does not depend on its samples' spread: a
    rule that must find nothing where nothing was planted (a pass on unchanged code) goes wrong at
    its own false-alarm rate, its level (both directions counted where either fails the test); an
    interval from the range of n signs misses where all n come out alike, 2 * 0.5 ** n for coins."""

    level: float
    what: str = "no effect planted: the rule's false alarm"

    def chance(self, spread: float | None = None) -> float:
        return self.level

    def text(self) -> str:
        return f"{self.what}: {self.level:.3g}"


def verdict(
    holds: bool,
    *,
    rate: float,
    what: str,
    shown: Beyond | Known | list[Beyond | Known] | None = None,
    unreachable: str | None = None,
) -> float:
    """A decision ddpbench reached from measured numbers (a rank or phase named, the gate's verdict),
    asserted at the false-failure rate `rate`. Returns the chance it goes wrong, from its samples.

    `shown`: the tests the decision makes on its own samples, each with the planted effect and the
    rule's level. The chance that the decision goes wrong with the effect present is their sum (a
    union bound), computed from the samples; the check fails where the decision does not hold, and,
    saying so, where the samples show that chance above what the stated rate allows: too few or too
    spread for the planted effect, the stated rate would be a promise the check does not keep.

    "Show" matters: one run's spread is itself noisy (at 5 rounds it comes out twice the true one
    3 times in 1,000 runs), and a check that failed whenever the chance read from it crossed the rate
    would fail by chance far more often than it states. So the chance is also read at the smallest
    spread the samples allow (each test's at confidence 1 - rate / 2 over their number, chi-squared),
    and the check fails where even that exceeds half the stated rate. Where the true chance is within
    half the rate, the check then fails at most `rate` of the time: half for the decision, half for
    the spread (tests/test_chance.py draws it). Known tests carry no spread: their chance is held
    against the whole rate where no other test has one.

    `unreachable`: where the test cannot reach the samples behind the decision, why, and what the
    stated rate rests on instead."""
    if not 0 < rate < 0.5:
        raise ValueError(f"rate must lie in (0, 0.5), got {rate}")
    if (shown is None) == (unreachable is None):
        raise ValueError("a verdict gives its samples (shown=) or says why they cannot be reached (unreachable=)")
    head, _, detail = what.partition("\n")
    if shown is None:
        _log(f"{head}: stated {rate:g}, samples unreachable ({unreachable})")
        if not holds:
            raise NotShown(f"{what} (its stated false-failure rate {rate:g}, samples unreachable: {unreachable})")
        return rate
    tests = shown if isinstance(shown, list) else [shown]
    spread = sum(isinstance(test, Beyond) for test in tests)
    # Sums over the tests (a union bound), which can pass 1 where a decision is far from shown.
    chance = min(1.0, sum(test.chance() for test in tests))
    least = min(
        1.0,
        sum(
            test.chance(test.least_spread(rate / 2 / spread)) if isinstance(test, Beyond) else test.chance()
            for test in tests
        ),
    )
    allowed = rate / 2 if spread else rate
    summary = (
        f"{head}: goes wrong with chance {chance:.3g} from its samples (at the least spread they allow, {least:.3g}; "
        f"allowed {allowed:g} of the stated rate {rate:g})"
    )
    _log(summary)
    if holds and least <= allowed:
        return chance
    text = summary + "".join(f"\n  {test.text()}" for test in tests) + (f"\n{detail}" if detail else "")
    if not holds:
        raise NotShown(f"the decision did not hold. {text}")
    raise NotShown(
        f"the decision held, but its samples show it goes wrong more often than the stated rate allows "
        f"(too few or too spread for the planted effect): {text}"
    )
