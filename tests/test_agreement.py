"""The three estimates of exposed communication: agreement within 20 %, or the reason in words."""

import os

import msgspec
import pytest
from conftest import FIXTURES, REPO

from ddpbench.analysis.agreement import estimates_agreement
from ddpbench.records.store import load_record
from ddpbench.report.html import build_report
from ddpbench.report.summary import format_summary

SWEEP = os.path.join(FIXTURES, "sweeps", "cpu-mlp-with-failure")
BASELINE = os.path.join(REPO, "results", "baselines", "cpu-amd-epyc-2c", "cpu")


def fixture_record():
    return load_record(os.path.join(SWEEP, "runs", "mlp-ddp-n2.json"))


def with_trace_exposed(record, seconds):
    """The same record with every rank's trace estimate set to `seconds` per step."""
    trace = record.overlap.trace
    by_rank = [msgspec.structs.replace(view, exposed_comm_us_per_step=seconds * 1e6) for view in trace.by_rank]
    overlap = msgspec.structs.replace(record.overlap, trace=msgspec.structs.replace(trace, by_rank=by_rank))
    return msgspec.structs.replace(record, overlap=overlap)


def test_the_fixture_runs_estimates_agree():
    found = estimates_agreement(fixture_record())
    assert found.agree is True and "agree within 20%" in found.sentence
    assert set(found.estimates_s) == {"trace", "no_sync", "reducer"}


@pytest.mark.parametrize("factor, words", [(0.5, "trace is 50% below"), (2.0, "trace is 100% above")])
def test_an_estimate_far_from_the_others_is_named_with_a_reason(factor, words):
    record = fixture_record()
    middle = sorted(estimates_agreement(record).estimates_s.values())[1]
    changed = with_trace_exposed(record, middle * factor)
    found = estimates_agreement(changed)
    # Said in measured causes (explain's), not guessed.
    assert found.agree is False and words in found.sentence and "likely" not in found.sentence
    assert "in measured causes, trace" in found.sentence and "profiled steps of" in found.sentence


def test_an_old_no_sync_estimate_is_explained_by_its_method():
    record = load_record(os.path.join(BASELINE, "runs", "resnet50-ddp-n2.json"))
    found = estimates_agreement(record)
    assert found.agree is False and found.sentence.startswith("no_sync is")
    assert "data loading counted as communication" in found.sentence


def test_one_estimate_is_not_compared_with_itself():
    record = fixture_record()
    alone = msgspec.structs.replace(record, overlap=msgspec.structs.replace(record.overlap, trace=None, reducer=None))
    assert estimates_agreement(alone).agree is None


def test_the_summary_shows_one_figure_and_the_reports_appendix_the_cross_checks(tmp_path):
    summary = format_summary(fixture_record(), "r.json")
    [line] = [line for line in summary.splitlines() if "exposed comm" in line]
    assert line.startswith("  exposed comm 24.11 ms per step (trace: ") and "estimates" not in summary
    page = open(build_report(BASELINE, str(tmp_path / "index.html"))).read()
    appendix = page[page.index('<details class="appendix"') :]
    assert "Do the three estimates agree" in appendix and "data loading counted as communication" in appendix
