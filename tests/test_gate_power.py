"""The gate's power is that of its whole rule (one-sided test AND ratio beyond the threshold),
checked against Monte-Carlo runs of the gate's own decision function on simulated per-run log
values; and what the gate says it sees (the target, the printed slowdown, the runs needed) is
caught that often when simulated."""

import math
import re

import numpy as np
import pytest

from ddpbench.gate import stats
from ddpbench.gate.compare import Comparison, compare_values, finish
from ddpbench.gate.output import sight
from ddpbench.gate.stats import GateSettings

SETTINGS = GateSettings()  # 5 % threshold, 80 % power
KEY = ("mlp", "small", "ddp", 2, 32, "fp32", "cpu", "{}")


def hit_rate(rng, trials, slowdown_log, sigma, alpha, settings, runs=1, history=0, paired=False):
    """Share of simulated comparisons `stats.decide` flags as regressions. Per-run log values ~
    N(0, sigma), the candidate's shifted by -slowdown_log; the noise comes from the repeats and the
    history as the gate estimates it, or is the true sigma where there is none (the gate's prior)."""
    flagged = 0
    for _ in range(trials):
        if paired:
            drift = rng.normal(0, 0.3, runs)  # load that moves between rounds, shared within one
            base = drift + rng.normal(0, sigma / math.sqrt(2), runs)
            cand = drift - slowdown_log + rng.normal(0, sigma / math.sqrt(2), runs)
            evidence, _ = stats.paired(base, cand)
        else:
            base, cand = rng.normal(0, sigma, runs), rng.normal(-slowdown_log, sigma, runs)
            groups = {"baseline repeats": [base], "candidate repeats": [cand]}
            if history:
                groups["history"] = [rng.normal(0.3, sigma, history)]
            evidence = stats.two_sample(base, cand, stats.estimate_noise(groups, prior=sigma))
        flagged += stats.decide(evidence, alpha, settings)[0] == "regression"
    return flagged / trials


CASES = [  # runs per side (rounds), history runs, sigma, alpha, paired: known noise, few and many degrees of freedom
    (1, 0, 0.05, 0.01, False),
    (2, 0, 0.03, 0.01, False),
    (3, 0, 0.04, 0.002, False),
    (1, 12, 0.05, 0.01, False),
    (8, 0, 0.03, 0.002, False),
    (3, 0, 0.02, 0.01, True),
    (8, 0, 0.03, 0.002, True),
]


@pytest.mark.parametrize("runs, history, sigma, alpha, paired", CASES)
def test_the_computed_power_is_how_often_the_gates_rule_fires(runs, history, sigma, alpha, paired):
    rng = np.random.default_rng(runs * 100 + history)
    se = sigma / math.sqrt(runs) if paired else sigma * math.sqrt(2 / runs)
    df = runs - 1 if paired else (2 * (runs - 1) + max(history - 1, 0)) or math.inf
    threshold = SETTINGS.threshold_log
    mde = stats.detectable_log(se, df, alpha, SETTINGS)
    trials = 3000
    for slowdown in (0.0, threshold / 2, threshold, 1.5 * threshold, 2 * threshold, mde):
        expected = stats.catch_probability(slowdown, se, df, alpha, SETTINGS)
        observed = hit_rate(rng, trials, slowdown, sigma, alpha, SETTINGS, runs, history, paired)
        allowed = 4.5 * math.sqrt(max(expected * (1 - expected), 1e-4) / trials) + 0.003
        assert abs(observed - expected) <= allowed, (slowdown, observed, expected)
    # A slowdown exactly at the threshold is measured short of it half the time: never caught more often.
    assert stats.catch_probability(threshold, se, df, alpha, SETTINGS) <= 0.5
    assert stats.catch_probability(mde, se, df, alpha, SETTINGS) == pytest.approx(SETTINGS.power, abs=1e-3)


def claims(comparison: Comparison) -> dict:
    """What the sentence says: the slowdown it sees or cannot see, the slowdown it catches with the
    settings' power, and the runs needed to see it (fractions and counts, as printed)."""
    text = sight(comparison, SETTINGS)
    seen = re.match(r"(sees|CANNOT SEE) ([\d.]+)%", text)
    caught = re.search(r"catches an? ([\d.]+)% slowdown", text)
    needed = re.search(r"(\d+) (?:runs per side|rounds) would be needed to see ([\d.]+)%", text)
    assert seen and caught, text
    return {
        "sees": seen.group(1) == "sees",
        "target": float(seen.group(2)) / 100,
        "catches": float(caught.group(1)) / 100,
        "needed": int(needed.group(1)) if needed else None,
    }


def two_sample_comparison(runs, sigma, prior=None):
    rng = np.random.default_rng(7)
    values = [{KEY: {"throughput": list(np.exp(rng.normal(0, sigma, runs)))}} for _ in range(2)]
    settings = GateSettings(prior_noise=prior)
    return compare_values(*values, settings, ("throughput",))[0][0]


def paired_comparison(rounds, sigma):
    ratios = np.random.default_rng(5).normal(0, 1, rounds)
    ratios = (ratios - ratios.mean()) / np.std(ratios, ddof=1) * sigma  # no change, a spread of exactly sigma
    evidence, noise = stats.paired(np.zeros(rounds), ratios)
    comparison = Comparison(
        "simulated", "throughput", "pass", candidate_runs=rounds, baseline_runs=rounds, noise=noise.sigma
    )
    return finish([(comparison, evidence, noise)], SETTINGS, paired=True)[0]


def at_least(rate, power, trials):
    return rate >= power - 4 * math.sqrt(power * (1 - power) / trials)


@pytest.mark.parametrize("runs, prior", [(1, 0.01), (1, 0.15)])
def test_what_a_comparison_says_it_sees_it_catches(runs, prior):
    """One run per side: the noise is the prior, known, so the simulation can use it as the truth."""
    comparison = two_sample_comparison(runs, 0.0, prior)
    said = claims(comparison)
    rng, trials = np.random.default_rng(11), 3000
    caught = hit_rate(rng, trials, -math.log(1 - said["catches"]), prior, comparison.alpha, SETTINGS, runs)
    assert at_least(caught, SETTINGS.power, trials), (said, caught)
    at_target = hit_rate(rng, trials, -math.log(1 - said["target"]), prior, comparison.alpha, SETTINGS, runs)
    if said["sees"]:
        assert at_least(at_target, SETTINGS.power, trials), (said, at_target)
    else:
        assert at_target < SETTINGS.power, (said, at_target)
        # With the runs it says are needed (then the noise comes from their repeats), it sees the target.
        enough = hit_rate(rng, 1000, -math.log(1 - said["target"]), prior, comparison.alpha, SETTINGS, said["needed"])
        assert at_least(enough, SETTINGS.power, 1000), (said, enough)


@pytest.mark.parametrize("rounds, sigma", [(8, 0.01), (3, 0.05)])
def test_what_an_ab_comparison_says_it_sees_it_catches(rounds, sigma):
    comparison = paired_comparison(rounds, sigma)
    assert comparison.noise == pytest.approx(sigma)
    said = claims(comparison)
    rng, trials = np.random.default_rng(13), 3000
    caught = hit_rate(
        rng, trials, -math.log(1 - said["catches"]), sigma, comparison.alpha, SETTINGS, rounds, paired=True
    )
    assert at_least(caught, SETTINGS.power, trials), (said, caught)
    target = -math.log(1 - said["target"])
    if said["sees"]:
        assert at_least(
            hit_rate(rng, trials, target, sigma, comparison.alpha, SETTINGS, rounds, paired=True),
            SETTINGS.power,
            trials,
        )
    else:
        enough = hit_rate(rng, trials, target, sigma, comparison.alpha, SETTINGS, said["needed"], paired=True)
        assert at_least(enough, SETTINGS.power, trials), (said, enough)


def test_sight_figures_for_many_comparisons_agree_with_one_at_a_time():
    """The runs-needed search evaluates many run counts per array call: its answer is the fewest
    runs whose power, evaluated alone, reaches the settings' power."""
    for sigma, history_df, paired in ((0.02, 0, False), (0.08, 0, False), (0.05, 30, False), (0.03, 0, True)):
        needed = stats.runs_needed(sigma, 0.002, SETTINGS, fixed_df=history_df, paired_rounds=paired)

        def power(n, sigma=sigma, paired=paired, history_df=history_df):
            se = sigma / math.sqrt(n) if paired else sigma * math.sqrt(2 / n)
            df = n - 1 if paired else (history_df + 2 * (n - 1)) or math.inf
            return stats.catch_probability(SETTINGS.target_log, se, df, 0.002, SETTINGS)

        assert power(needed) >= SETTINGS.power > power(needed - 1), (sigma, history_df, paired, needed)


def test_runs_needed_against_a_history_counts_candidate_runs_only():
    """With the history as baseline its runs stay as they are: simulated with the history's M
    runs and the candidate runs it says are needed, the gate's own rule catches the target."""
    sigma, history_runs, alpha = 0.05, 3, 0.01
    needed = stats.runs_needed(sigma, alpha, SETTINGS, fixed_df=history_runs - 1, fixed_baseline_runs=history_runs)
    both_sides = stats.runs_needed(sigma, alpha, SETTINGS, fixed_df=history_runs - 1)
    assert needed is not None and needed > both_sides  # a baseline that does not grow needs more candidate runs
    rng, trials, flagged = np.random.default_rng(17), 2000, 0
    for _ in range(trials):
        history = rng.normal(0, sigma, history_runs)
        candidate = rng.normal(-SETTINGS.target_log, sigma, needed)
        noise = stats.estimate_noise({"history": [history], "candidate repeats": [candidate]}, prior=sigma)
        flagged += stats.decide(stats.two_sample(history, candidate, noise), alpha, SETTINGS)[0] == "regression"
    assert at_least(flagged / trials, SETTINGS.power, trials), (needed, flagged / trials)


def test_efficiency_comparisons_carry_the_noise_of_the_shared_x1():
    """Every run's E(N) of one side divides by the same pooled X(1) (the answers model's E), so the
    E values' spread holds none of X(1)'s noise. Simulated sweeps of unchanged code, 3 runs a side,
    X(N) and X(1) each with a 10 % run-to-run spread: with the X(1) runs given as references the
    false alarms stay within the level; left out, the same data alarms more than twice as often.
    Seeded: the counts are fixed, nothing here fails by chance."""
    rng = np.random.default_rng(11)
    settings = GateSettings(family_alpha=0.05)
    trials, sigma, runs = 2000, 0.10, 3
    alarms = {"with X(1)": 0, "without": 0}
    for _ in range(trials):
        sides, references = [], []
        for _side in range(2):
            x1 = np.exp(rng.normal(0, sigma, runs)) * 100
            xn = np.exp(rng.normal(0, sigma, runs)) * 160
            sides.append({KEY: {"efficiency": list(xn / (2 * x1.mean()))}})
            references.append({KEY: list(x1)})
        for name, given in (("with X(1)", tuple(references)), ("without", None)):
            (comparison,), _ = compare_values(*sides, settings, ("efficiency",), references=given)
            alarms[name] += comparison.verdict == "regression"
    assert alarms["with X(1)"] <= 0.05 * trials, alarms
    assert alarms["without"] >= 2 * alarms["with X(1)"], alarms
