"""tests/chance.py, the suite's one way to assert on measured numbers: its checks fail at the rate
they state (on synthetic data drawn here), the rates every test states sum to at most the suite's
budget, and no test asserts on a measured figure around it."""

import ast
import os
import random
import re
import statistics

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

TESTS = os.path.dirname(os.path.abspath(__file__))
CHECKS = (
    "mean_at_least",
    "mean_at_most",
    "difference_at_least",
    "difference_at_most",
    "proportion_at_least",
    "verdict",
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


# The scan. A measured figure is named like one; an ordering assert on such a name in a test that
# starts real processes is a check on noise unless it goes through chance.py, or says why chance
# cannot fail it (`# not chance: ...` on its line or the line above: a count of steps, a bound no
# run can cross).
MEASURED = re.compile(
    r"(_s|_ms|_us|seconds|step|width|low|high|ratio|efficiency|throughput|speed|slower|faster|grew|"
    r"wait|delay|slept|share|gap|overhead|elapsed|duration|rate|slowdown|cores|value|flop|memory|bytes)",
    re.IGNORECASE,
)
ORDERING = (ast.Lt, ast.LtE, ast.Gt, ast.GtE)


def suite_modules():
    return sorted(name for name in os.listdir(TESTS) if name.startswith("test_") and name.endswith(".py"))


def launches(tree: ast.Module, source: str) -> bool:
    return "mark.launches" in source


def names_in(node: ast.AST) -> list[str]:
    found = []
    for part in ast.walk(node):
        if isinstance(part, ast.Name):
            found.append(part.id)
        elif isinstance(part, ast.Attribute):
            found.append(part.attr)
        elif isinstance(part, ast.Constant) and isinstance(part.value, str):
            found.append(part.value)
    return found


def bypasses(name: str) -> list[str]:
    with open(os.path.join(TESTS, name), encoding="utf-8") as handle:
        source = handle.read()
    tree, lines = ast.parse(source), source.splitlines()
    found = []
    reference = "# chance: reference computation" in source  # intervals recomputed over saved records
    if not reference and re.search(r"scipy\.stats|statistics\.stdev|\.ppf\(", source):
        found.append(f"{name}: computes an interval itself (scipy.stats, stdev or ppf); use tests/chance.py")
    if not launches(tree, source):
        return found
    for node in ast.walk(tree):
        if not isinstance(node, ast.Assert):
            continue
        above = lines[node.lineno - 2].strip() if node.lineno > 1 else ""
        if "# not chance:" in lines[node.lineno - 1] or above.startswith("# not chance:"):
            continue  # on the assert's first line, or a comment line of its own just above it
        for compare in (part for part in ast.walk(node.test) if isinstance(part, ast.Compare)):
            if any(isinstance(op, ORDERING) for op in compare.ops) and any(
                MEASURED.search(n) for n in names_in(compare)
            ):
                found.append(f"{name}:{node.lineno}: {lines[node.lineno - 1].strip()}")
                break
    return found


def test_no_test_asserts_on_a_measured_figure_around_the_helper():
    found = [line for name in suite_modules() if name != "test_chance.py" for line in bypasses(name)]
    assert not found, "\n".join(found)


def parametrizations(function: ast.FunctionDef) -> int | None:
    count = 1
    for decorator in function.decorator_list:
        if isinstance(decorator, ast.Call) and getattr(decorator.func, "attr", "") == "parametrize":
            values = decorator.args[1] if len(decorator.args) > 1 else None
            if not isinstance(values, ast.List | ast.Tuple):
                return None  # a list this scan cannot count
            count *= len(values.elts)
    return count


def stated_rates() -> list[tuple[str, float]]:
    """Every check a test makes through chance.py, with its stated rate times how often it runs."""
    rates = []
    for name in suite_modules():
        if name == "test_chance.py":
            continue
        with open(os.path.join(TESTS, name), encoding="utf-8") as handle:
            tree = ast.parse(handle.read())
        imported = {
            alias.asname or alias.name: alias.name
            for node in tree.body
            if isinstance(node, ast.ImportFrom) and node.module == "chance"
            for alias in node.names
        }
        for function in (node for node in ast.walk(tree) if isinstance(node, ast.FunctionDef)):
            runs = parametrizations(function) if function.name.startswith("test_") else 1
            loops = [node for node in ast.walk(function) if isinstance(node, ast.For | ast.While | ast.comprehension)]
            looped = {id(inner) for loop in loops for inner in ast.walk(loop)}
            for call in (node for node in ast.walk(function) if isinstance(node, ast.Call)):
                if isinstance(call.func, ast.Name) and call.func.id in imported:
                    called = imported[call.func.id]
                elif isinstance(call.func, ast.Attribute) and getattr(call.func.value, "id", None) == "chance":
                    called = call.func.attr
                else:
                    continue
                if called not in CHECKS:
                    continue
                if runs is None:
                    raise AssertionError(f"{name}:{call.lineno}: parametrized over a list this scan cannot count")
                if id(call) in looped:
                    raise AssertionError(f"{name}:{call.lineno}: a check in a loop runs an uncounted number of times")
                rate = next((k.value for k in call.keywords if k.arg == "rate"), None)
                if called == "verdict" and rate is None:
                    raise AssertionError(f"{name}:{call.lineno}: a verdict states its rate")
                if rate is not None and not isinstance(rate, ast.Constant):
                    raise AssertionError(f"{name}:{call.lineno}: a check's rate must be written as a number")
                rates.append((f"{name}:{call.lineno}", (RATE if rate is None else rate.value) * runs))
    return rates


def test_the_stated_rates_sum_to_the_suites_budget():
    rates = stated_rates()
    assert rates, "no test uses tests/chance.py"
    total = sum(rate for _, rate in rates)
    assert total <= SUITE_RATE, f"{total:.4f} stated over {len(rates)} checks: " + ", ".join(
        f"{where} {rate:g}" for where, rate in rates
    )
