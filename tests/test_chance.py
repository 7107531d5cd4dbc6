"""tests/chance.py, the suite's one way to assert on measured numbers: its checks fail at the rate
they state (on synthetic data drawn here), a verdict's rate is the one its samples give, the rates
every test states sum to at most the suite's budget, and no test asserts on noise around it
(tests/chance_scan.py, tried here on small sources of its own)."""

import random
import statistics
import textwrap

import chance_scan
import pytest
import scipy.optimize
import scipy.stats
from chance import (
    RATE,
    SUITE_RATE,
    Beyond,
    Known,
    NotShown,
    difference_at_least,
    mean_at_least,
    mean_at_most,
    proportion_at_least,
    verdict,
)


@pytest.fixture(autouse=True)
def unlogged(monkeypatch):
    """The draws here are not the suite's checks: they stay out of DDPBENCH_CHANCE_LOG."""
    monkeypatch.delenv("DDPBENCH_CHANCE_LOG", raising=False)


TRIALS = 4000
CHECK_RATE = 0.05  # high enough that 4000 trials see it about 200 times


def failures(draw, check) -> int:
    count = 0
    for _ in range(TRIALS):
        try:
            check(*draw())
        except NotShown:
            count += 1
    return count


def agrees(observed: int, expected_rate: float) -> bool:
    """The observed count is what `expected_rate` gives over TRIALS within a two-sided 1e-6 band:
    the draws are seeded, so this never fails by chance; unseeded it would fail once in a million."""
    low, high = scipy.stats.binom.ppf([0.5e-6, 1 - 0.5e-6], TRIALS, expected_rate)
    return low <= observed <= high


def test_a_mean_check_fails_at_its_stated_rate_where_the_claim_just_holds():
    generator = random.Random(57)
    drawn = failures(
        lambda: ([generator.gauss(10.0, 3.0) for _ in range(6)],),
        lambda samples: mean_at_least(samples, 10.0, rate=CHECK_RATE),
    )
    assert agrees(drawn, CHECK_RATE), drawn
    # Well inside the claim it fails less often; on the other side, more.
    inside = failures(
        lambda: ([generator.gauss(9.0, 3.0) for _ in range(6)],),
        lambda samples: mean_at_most(samples, 10.0, rate=CHECK_RATE),
    )
    assert inside < drawn, (inside, drawn)


def test_welchs_difference_check_holds_its_rate_with_unequal_spreads_and_sizes():
    generator = random.Random(58)
    drawn = failures(
        lambda: ([generator.gauss(12.0, 1.0) for _ in range(4)], [generator.gauss(7.0, 4.0) for _ in range(12)]),
        lambda first, second: difference_at_least(first, second, 5.0, rate=CHECK_RATE),
    )
    assert agrees(drawn, CHECK_RATE), drawn


def test_the_stated_power_is_the_rate_at_which_the_check_fails_where_the_effect_is_missing():
    """Samples of a design: 8 rounds, spread 2; the effect (a mean of at least 3) missing means a
    mean of 0. The power the check states from one sample's spread matches how often it fails."""
    generator = random.Random(59)
    design = [generator.gauss(3.0, 2.0) for _ in range(8)]
    stated = mean_at_least(design, 1.0, rate=CHECK_RATE, missing=0.0).power
    # The power at the spread the draws really have (2), which the noncentral t takes as known.
    critical = scipy.stats.t.ppf(1 - CHECK_RATE, 7)
    exact = scipy.stats.nct.cdf(-critical, 7, (0.0 - 1.0) / (2.0 / 8**0.5))
    drawn = failures(
        lambda: ([generator.gauss(0.0, 2.0) for _ in range(8)],),
        lambda samples: mean_at_least(samples, 1.0, rate=CHECK_RATE),
    )
    assert agrees(drawn, exact), (drawn, exact)
    assert 0 < stated < 1 and abs(stated - exact) < 0.5, (stated, exact)


def test_a_proportion_check_fails_at_most_at_its_rate():
    generator = random.Random(60)
    drawn = failures(
        lambda: (sum(generator.random() < 0.9 for _ in range(40)),),
        lambda hits: proportion_at_least(hits, 40, 0.9, rate=CHECK_RATE),
    )
    # Clopper-Pearson is conservative: at most the rate, not exactly it.
    assert drawn <= scipy.stats.binom.ppf(1 - 1e-6, TRIALS, CHECK_RATE), drawn


def test_a_check_says_what_it_measured_when_it_fails():
    with pytest.raises(NotShown, match=r"step grew: 1 .*against the claim >= 5.*chance of failing were it 0"):
        mean_at_least([0.9, 1.0, 1.1, 1.0, 0.95, 1.05], 5.0, what="step grew", missing=0.0)


def exactly(values: list[float], mean: float, spread: float) -> list[float]:
    """The values moved and scaled to have this mean and standard deviation exactly."""
    centre, scale = statistics.fmean(values), statistics.stdev(values)
    return [mean + spread * (value - centre) / scale for value in values]


def test_a_verdicts_computed_chance_is_how_often_its_rule_misses_the_planted_effect():
    """A straggler's rule: named where the 95 % interval of its 12 steps' waits excludes zero. With
    a planted wait of 1.5 and a spread of 2, the chance computed from samples of that mean and
    spread is how often the rule misses the wait in draws."""
    generator = random.Random(61)
    steps, effect, spread = 12, 1.5, 2.0
    design = exactly([generator.gauss(0.0, 1.0) for _ in range(steps)], effect, spread)
    computed = Beyond(design, effect).chance()
    critical = scipy.stats.t.ppf(0.975, steps - 1)

    def named(waits: list[float]) -> None:
        if statistics.fmean(waits) / (statistics.stdev(waits) / steps**0.5) <= critical:
            raise NotShown("missed")

    drawn = failures(lambda: ([generator.gauss(effect, spread) for _ in range(steps)],), named)
    assert 0.05 < computed < 0.95 and agrees(drawn, computed), (drawn, computed)


def test_a_gate_like_rule_with_a_margin_misses_no_more_often_than_computed():
    """One-sided at 0.05 and beyond a margin of 0.5 (the gate's test and threshold): the chance
    computed adds the two ways to miss, so it is at least what draws show."""
    generator = random.Random(62)
    rounds, effect, spread = 5, 1.2, 1.0
    computed = Beyond(
        exactly([generator.gauss(0.0, 1.0) for _ in range(rounds)], effect, spread), effect, 0.05, 1, 0.5
    ).chance()
    critical = scipy.stats.t.ppf(0.95, rounds - 1)

    def flagged(ratios: list[float]) -> None:
        mean = statistics.fmean(ratios)
        if mean / (statistics.stdev(ratios) / rounds**0.5) <= critical or mean <= 0.5:
            raise NotShown("missed")

    drawn = failures(lambda: ([generator.gauss(effect, spread) for _ in range(rounds)],), flagged)
    assert drawn <= scipy.stats.binom.ppf(1 - 1e-6, TRIALS, computed), (drawn, computed)


def test_a_verdict_fails_where_its_samples_cannot_show_the_planted_effect_at_its_stated_rate():
    spread = [1.0, 3.0, -0.5, 2.5, 0.2, 1.8]
    with pytest.raises(NotShown, match=r"held, but its samples show .* too spread .* chance 0\.\d+ from its samples"):
        verdict(True, rate=1e-4, shown=Beyond(spread, 1.0, what="rank 0's wait"), what="rank 1 named")
    tight = [1.0, 1.1, 0.9, 1.05, 0.95, 1.0]  # the same effect, shown far beyond the rate
    assert verdict(True, rate=1e-4, shown=Beyond(tight, 1.0), what="rank 1 named") < 1e-6
    with pytest.raises(NotShown, match=r"did not hold\. rank 1 named: goes wrong with chance"):
        verdict(False, rate=1e-4, shown=Beyond(tight, 1.0), what="rank 1 named")
    # Several tests of one decision add up; where nothing was planted, the rule's own false alarm.
    assert verdict(True, rate=0.01, shown=[Known(0.002), Known(0.003)], what="a pass") == pytest.approx(0.005)
    with pytest.raises(NotShown, match="held, but"):
        verdict(True, rate=1e-3, shown=Known(0.002), what="a pass")
    # Without its samples a verdict says why they cannot be reached, and fails with it.
    with pytest.raises(NotShown, match="samples unreachable: one reading of /proc"):
        verdict(False, rate=1e-4, unreachable="one reading of /proc", what="busy")
    with pytest.raises(ValueError, match=r"shown=.*unreachable="):
        verdict(True, rate=1e-4, what="no samples and no reason")


def test_a_verdict_fails_at_most_at_its_rate_where_its_design_holds_and_often_where_it_does_not():
    """A wait over 5 rounds, named where its 95 % interval excludes zero. Planted so that the rule
    misses it a quarter of the rate's time, the whole check (the decision, and the chance its
    samples show) fails at most at its rate; failing wherever the chance read at the samples' own
    spread crossed the rate would fail far more often. Planted so that the rule misses 30 % of the
    time, the check fails more often than that: it also fails runs whose decision held."""
    generator = random.Random(63)
    rounds, spread, rate = 5, 1.0, 0.05
    critical = scipy.stats.t.ppf(0.975, rounds - 1)

    def planted(missing: float) -> float:
        return scipy.optimize.brentq(
            lambda effect: scipy.stats.nct.cdf(critical, rounds - 1, effect / (spread / rounds**0.5)) - missing,
            0.01,
            50,
        )

    def draw(effect: float):
        samples = [generator.gauss(effect, spread) for _ in range(rounds)]
        return statistics.fmean(samples) / (statistics.stdev(samples) / rounds**0.5) > critical, samples

    sound = planted(rate / 4)
    drawn = [draw(sound) for _ in range(TRIALS)]
    failed = failures(
        iter(drawn).__next__,
        lambda holds, samples: verdict(holds, rate=rate, shown=Beyond(samples, sound), what="named"),
    )
    assert failed <= scipy.stats.binom.ppf(1 - 1e-6, TRIALS, rate), failed
    plug_in = sum(Beyond(samples, sound).chance() > rate for _, samples in drawn)
    assert plug_in > scipy.stats.binom.ppf(1 - 1e-6, TRIALS, 4 * rate), plug_in
    weak = planted(0.3)
    failed = failures(
        lambda: draw(weak), lambda holds, samples: verdict(holds, rate=rate, shown=Beyond(samples, weak), what="named")
    )
    assert failed > scipy.stats.binom.ppf(1 - 1e-6, TRIALS, 0.3), failed


# The scan (tests/chance_scan.py) on small suites of its own, one way around the helper each.


def suite(tmp_path, **modules: str) -> chance_scan.Budget:
    for name, source in modules.items():
        (tmp_path / f"{name}.py").write_text(textwrap.dedent(source))
    return chance_scan.read_suite(str(tmp_path))


def flagged(budget: chance_scan.Budget) -> dict[str, str]:
    """file:line -> what the scan said of it."""
    return {problem.split(": ", 1)[0]: problem.split(": ", 1)[1] for problem in budget.problems}


def test_the_scan_reads_every_test_that_starts_a_process_or_reads_a_clock(tmp_path):
    budget = suite(
        tmp_path,
        conftest="""
            import subprocess

            def ddpbench_process(*args):
                return subprocess.run(["ddpbench", *args])
        """,
        test_ways="""
            import json
            import time

            import pytest
            from conftest import ddpbench_process

            @pytest.fixture(scope="module")
            def slow_rank():
                ddpbench_process("run")
                return {"phase": "forward", "rank": 1, "named": True}

            def same_rank(found):
                assert found["rank"] == 1

            def test_a_phase_through_the_modules_fixture(slow_rank):
                straggler = slow_rank
                assert straggler["phase"] == "forward"
                same_rank(slow_rank)
                assert slow_rank["named"]

            def test_a_clock_read_without_the_launches_mark():
                started = time.monotonic()
                assert time.monotonic() - started < 30

            def test_a_fixed_record_is_not_noise():
                straggler = json.loads('{"phase": "forward"}')
                assert straggler["phase"] == "forward"
        """,
        test_marked="""
            import pytest

            pytestmark = pytest.mark.launches

            def test_the_gate(gate):
                verdict = gate()
                assert verdict == "regression"
                assert gate.step_s > 0.5
        """,
    )
    said = flagged(budget)
    assert said.keys() == {
        "test_ways.py:14",  # in a helper a noisy test calls
        "test_ways.py:18",  # straggler["phase"] == "forward"
        "test_ways.py:20",  # a straggler named
        "test_ways.py:24",  # time.monotonic() - started < 30
        "test_marked.py:8",  # verdict == "regression"
        "test_marked.py:9",
    }, budget.problems
    assert said["test_ways.py:24"].startswith("an ordering assert on a clock read")
    assert said["test_marked.py:8"].startswith("an equality on a decision reached against noise")
    assert said["test_marked.py:9"].startswith("an ordering assert on a measured figure")


def test_an_exemption_needs_a_reason_of_its_own_and_is_listed_with_it(tmp_path):
    budget = suite(
        tmp_path,
        test_exempt="""
            import subprocess

            def test_exemptions():
                run = subprocess.run(["true"])
                # not chance:
                assert run.rank == 1
                assert run.named  # not chance: deterministic
                assert run.phase == "forward"  # not chance: not noise
                # not chance: the record's phase is written by the fixture's hand, never measured
                assert run.phase == "forward"
                count = 3  # not chance: three steps were asked for
                # not chance: a reason may run on
                # over the comment lines below it
                assert run.rank == 1
        """,
    )
    said = flagged(budget)
    assert said.keys() == {"test_exempt.py:7", "test_exempt.py:8", "test_exempt.py:9", "test_exempt.py:12"}, said
    assert "an empty reason" in said["test_exempt.py:7"]
    assert "says nothing of this assert ('deterministic')" in said["test_exempt.py:8"]
    assert "says nothing of this assert ('not noise')" in said["test_exempt.py:9"]
    assert "on no assert" in said["test_exempt.py:12"]
    assert budget.exemptions == [
        chance_scan.Exemption(
            "test_exempt.py:11",
            "the record's phase is written by the fixture's hand, never measured",
            'assert run.phase == "forward"',
        ),
        chance_scan.Exemption(
            "test_exempt.py:15", "a reason may run on over the comment lines below it", "assert run.rank == 1"
        ),
    ]


def test_a_check_inside_a_helper_counts_once_per_call_times_its_callers_parametrizations(tmp_path):
    budget = suite(
        tmp_path,
        test_helpers="""
            import pytest
            from chance import mean_at_least

            def wait_shown(samples):
                mean_at_least(samples, 1.0, rate=1e-4)

            def both_shown(samples):
                wait_shown(samples)
                wait_shown(samples)

            @pytest.fixture
            def checked():
                mean_at_least([1.0, 2.0], 0.0, rate=2e-4)

            def test_one():
                wait_shown([1.0, 2.0])

            @pytest.mark.parametrize("n", [1, 2])
            def test_two(n, checked):
                both_shown([1.0, 2.0])
                mean_at_least([1.0, 2.0], 0.0, rate=3e-4)
        """,
        test_elsewhere="""
            from test_helpers import wait_shown

            def test_imported():
                wait_shown([1.0, 2.0])
        """,
    )
    rates = dict(budget.rates)
    # wait_shown: test_one, test_two's two calls through both_shown at 2 parametrizations, test_imported.
    assert rates["test_helpers.py:6"] == pytest.approx(6e-4)
    assert rates["test_helpers.py:14"] == pytest.approx(4e-4)  # the fixture, for each of test_two's runs
    assert rates["test_helpers.py:22"] == pytest.approx(6e-4)
    assert budget.total == pytest.approx(1.6e-3)


def test_a_helper_with_a_check_called_in_a_loop_and_a_verdict_without_samples_are_refused(tmp_path):
    looped = """
        from chance import mean_at_least

        def wait_shown(samples):
            mean_at_least(samples, 1.0)

        def test_each():
            for samples in ([1.0, 2.0], [2.0, 3.0]):
                wait_shown(samples)
    """
    with pytest.raises(
        AssertionError, match=r"test_loop.py:9: wait_shown makes a chance check and is called in a loop"
    ):
        suite(tmp_path, test_loop=looped)
    (tmp_path / "test_loop.py").unlink()
    bare = """
        from chance import verdict

        def test_named():
            verdict(True, rate=1e-4, basis="a 10 ms sleep", what="rank 1 named")
    """
    with pytest.raises(AssertionError, match=r"test_bare.py:5: a verdict gives the decision's samples"):
        suite(tmp_path, test_bare=bare)


def test_the_scan_keeps_the_default_rate_of_the_checks():
    assert chance_scan.RATE == RATE


def test_no_test_asserts_on_noise_around_the_helper():
    problems = chance_scan.read_suite().problems
    assert not problems, "\n".join(problems)


def test_the_stated_rates_sum_to_the_suites_budget():
    budget = chance_scan.read_suite()
    assert budget.rates, "no test uses tests/chance.py"
    assert budget.total <= SUITE_RATE, f"{budget.total:.4f} stated over {len(budget.rates)} checks: " + ", ".join(
        f"{where} {rate:g}" for where, rate in budget.rates
    )
