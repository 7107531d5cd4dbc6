"""The test-suite page's account of chance (benchmarks/test_suite.py writes
docs/measurements/test-suite.md): every `# not chance:` exemption with its reason and the summed
stated rate, from the one reading of the suite that tests/test_chance.py holds it to
(tests/chance_scan.py), and each verdict's chance of going wrong as tests/chance.py logs it. On
hand-made budgets and logs, and on the suite as it is; nothing is run."""

import os
import sys

import chance_scan
from chance import LOG, Beyond, verdict
from conftest import REPO

sys.path.insert(0, os.path.join(REPO, "benchmarks"))

from test_suite import chance_section, verdict_chances  # noqa: E402


def test_the_page_lists_every_exemption_with_its_reason_and_the_summed_rate():
    budget = chance_scan.Budget(
        rates=[("test_a.py:10", 1e-4), ("test_b.py:20", 3e-4)],
        exemptions=[
            chance_scan.Exemption("test_a.py:12", "a count of steps", "assert len(steps) == 40"),
            chance_scan.Exemption("test_b.py:30", "records written here | by hand", 'assert x["rank"] == 1'),
        ],
        problems=[],
    )
    text = "\n".join(chance_section(budget, "abcdef0123", [], {}, {}))
    assert "the tests make 2 such checks (each counted as often as it runs); their stated rates sum to 0.0004" in text
    assert "### Exemptions (2)" in text
    assert "| test_a.py:12 | a count of steps | `assert len(steps) == 40` |" in text
    # A pipe in a reason would end its cell.
    assert '| test_b.py:30 | records written here \\| by hand | `assert x["rank"] == 1` |' in text


def test_the_page_shows_each_verdicts_largest_chance_as_the_runs_logged_it(tmp_path, monkeypatch):
    for run, spread in (("run-1", 0.1), ("run-2", 0.4)):
        os.makedirs(tmp_path / run)
        monkeypatch.setenv(LOG, str(tmp_path / run / "chance.log"))
        monkeypatch.setenv("PYTEST_CURRENT_TEST", "tests/test_x.py::test_named (call)")
        waits = [1.0 + spread, 1.0 - spread, 1.0 + spread / 2, 1.0 - spread / 2, 1.0]
        verdict(True, rate=0.01, shown=Beyond(waits, 1.0), what="rank 1 named")
    chances = verdict_chances(str(tmp_path))
    assert list(chances) == ["test_named: rank 1 named"] and len(chances["test_named: rank 1 named"]) == 2
    wider = Beyond([1.4, 0.6, 1.2, 0.8, 1.0], 1.0).chance()
    text = "\n".join(chance_section(empty_budget(), "abcdef0", [], {}, chances))
    assert f"| test_named: rank 1 named | {wider:.3g} | 2 |" in text


def empty_budget() -> chance_scan.Budget:
    return chance_scan.Budget(rates=[], exemptions=[], problems=[])


def test_the_suites_own_exemptions_are_all_on_the_page():
    budget = chance_scan.read_suite()
    text = "\n".join(chance_section(budget, "abcdef0", [], {}, {}))
    assert budget.exemptions and f"### Exemptions ({len(budget.exemptions)})" in text
    assert all(f"| {exemption.where} | " in text for exemption in budget.exemptions)
    assert f"their stated rates sum to {budget.total:.4f}" in text
