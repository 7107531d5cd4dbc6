"""`ddpbench explain` on saved records: the terms add up, each says how it was measured or why it
could not be, and bad input is one line. The planted causes run for real in test_breakdown_runs.py."""

import json
import os
import shutil

import pytest
from conftest import FIXTURES

from ddpbench.analysis.breakdown import TERM_NAMES, ExplainError, explain, explain_sweep
from ddpbench.analysis.breakdown_text import SHORT_NAMES
from ddpbench.cli import main
from ddpbench.records.store import load_record, read_records

DDP = os.path.join(FIXTURES, "projection", "mlp2.json")
LOCAL = os.path.join(FIXTURES, "sweeps", "cpu-mlp-with-failure", "runs", "mlp-local-n1.json")


@pytest.fixture
def sweep(tmp_path):
    runs = tmp_path / "sweep" / "runs"
    runs.mkdir(parents=True)
    shutil.copy(DDP, runs / "mlp2.json")
    shutil.copy(LOCAL, runs / "mlp-local-n1.json")
    return tmp_path / "sweep"


def test_a_record_without_a_ladder_is_not_measured_in_place_and_gets_no_advice(sweep):
    records, _ = read_records(str(sweep))
    found = explain(load_record(DDP), records)
    ddp, local = load_record(DDP), load_record(LOCAL)
    # t(1) / t(N) is the scaling table's efficiency: X(N) / (N X(1)).
    assert found.efficiency == pytest.approx(
        ddp.metrics.throughput_units_per_s / (2 * local.metrics.throughput_units_per_s)
    )
    assert list(found.terms) == list(TERM_NAMES)
    # Measured elsewhere in the run, without intervals: no term is a finding, none gets advice, and
    # nothing is computed as what the others leave over.
    measured = [term for term in found.terms.values() if term.s_per_step is not None]
    assert measured and all(term.basis.startswith("not measured in place") for term in measured)
    assert not any(term.significant for term in found.terms.values())
    assert found.largest() is None and found.advice == found.advice_terms == []
    assert found.terms["unexplained"].s_per_step is None and "left-over" in found.terms["unexplained"].basis
    assert found.terms_sum_s() == pytest.approx(sum(term.s_per_step for term in measured))
    # This record predates the data-loading times: the term says so.
    assert found.terms["data"].s_per_step is None and "no data-loading times" in found.terms["data"].basis
    # exposed_comm is the least-waiting rank's: the trace's worst rank shows more (its wait).
    worst = max(r.exposed_comm_us_per_step for r in ddp.overlap.trace.by_rank) / 1e6
    assert found.terms["exposed_comm"].s_per_step < worst
    assert any(line.startswith("no_sync difference") for line in found.estimates)
    assert not any("likely" in line for line in found.estimates)


def test_a_run_without_its_local_reference_says_how_to_get_one(sweep):
    os.remove(sweep / "runs" / "mlp-local-n1.json")
    records, _ = read_records(str(sweep))
    with pytest.raises(ExplainError, match="add `local` to --strategies"):
        explain(load_record(DDP), records)


def test_explain_prints_every_term_and_writes_json(sweep, tmp_path, capsys):
    out = tmp_path / "b.json"
    assert main(["explain", str(sweep), "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    # One table for the sweep, a column per term; then one line of advice per run.
    head = printed.splitlines()[0].split()
    assert head == ["run", "E(N)", "in-run", "lost", *(SHORT_NAMES[name] for name in TERM_NAMES), "sum"]
    assert sum(line.startswith("run  mlp x2: ") for line in printed.splitlines()) == 1
    assert "not measured in place (no ladder)" in printed  # and so no finding, no advice
    assert not [line for line in printed.splitlines() if line.startswith("advice  ")]
    assert "a left-over of other phases, not a term" in printed  # the gap is a note beside the run
    assert "estimate" not in printed
    assert main(["explain", str(sweep), "--detail"]) == 0
    detail = capsys.readouterr().out
    assert all(f"  {name} " in detail for name in TERM_NAMES) and "estimate" in detail
    written = json.loads(out.read_text())
    assert [entry["run_id"] for entry in written] == ["mlp2"]
    entry = written[0]
    assert set(entry) >= {"run_id", "workload", "world_size", "efficiency", "step_s", "reference_step_s", "terms"}
    assert set(entry["terms"]) == set(TERM_NAMES)
    assert set(entry["terms"]["exposed_comm"]) == {
        "s_per_step",
        "points",
        "basis",
        "ci_low_s",
        "ci_high_s",
        "significant",
    }
    assert entry["largest_loss"] is None and entry["advice"] == entry["advice_terms"] == []
    assert len(entry["notes"]) == 1


def _sweep_of(root, *records):
    (root / "s" / "runs").mkdir(parents=True)
    for path in records:
        shutil.copy(path, root / "s" / "runs")
    return root / "s"


def _truncated(sweep):
    path = sweep / "runs" / "mlp2.json"
    path.write_text(path.read_text()[:500])
    return sweep


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda root: root, "holds no run records"),
        (lambda root: root / "missing", "is not a sweep folder"),
        (
            lambda root: shutil.copytree(
                os.path.dirname(LOCAL), root / "s" / "runs", ignore=lambda d, names: [n for n in names if "ddp" in n]
            )
            and root / "s",
            "no ok DDP runs in the sweep",
        ),
        (lambda root: _sweep_of(root, DDP), "add `local` to --strategies"),
        (lambda root: _truncated(_sweep_of(root, DDP)), "holds no readable run record"),
        (lambda root: _sweep_of(root, DDP) / "runs" / "mlp2.json", "is not a sweep folder"),
    ],
)
def test_bad_input_is_one_line_with_exit_2(tmp_path, capsys, make, message):
    assert main(["explain", str(make(tmp_path))]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("ddpbench explain: error:") and message in err


def test_every_ok_ddp_run_is_explained_and_one_rank_waits_for_nobody():
    records, _ = read_records(os.path.dirname(os.path.dirname(LOCAL)))
    breakdowns, problems = explain_sweep(records)
    assert [b.run_id for b in breakdowns] == ["mlp-ddp-n1", "mlp-ddp-n2"] and problems == []
    one = breakdowns[0].terms["slowest_rank"]
    assert one.s_per_step == 0.0 and "one rank" in one.basis and not one.significant


def test_terms_far_short_of_the_loss_are_called_out_with_what_was_measured_beside_it(sweep):
    records, _ = read_records(str(sweep))
    found = explain(load_record(DDP), records)
    lost = found.step_s - found.reference_step_s
    gap = lost - found.terms_sum_s()
    assert abs(gap) > 0.15 * lost  # this fixture: 8 of 29 ms
    # Its timeline has no unwrapped steps (an older record): only the timed-vs-timeline gap is measured.
    assert list(found.unexplained_parts) == ["timed_beyond_timeline_s"]
    assert found.advice == []  # a loss less terms from other phases is a left-over: a note, never advice
    said = found.notes
    assert (
        len(said) == 1 and f"sum to {gap * 1e3:.2f} ms per step less than the loss ({abs(gap) / lost:.0%})" in said[0]
    )
    assert "than the timeline's DDP steps" in said[0] and "unwrapped" not in said[0]
    assert "unexplained_parts" in found.as_dict()


def test_with_a_profile_the_advice_projects_each_knob_and_says_it_is_a_projection(capsys):
    # The ladder fixture's exposed communication is a finding (4.7 ± 0.9 points): it gets advice.
    sweep = os.path.join(FIXTURES, "sweeps", "ladder-slow-rank")
    profile = os.path.join(FIXTURES, "projection", "gloo-profile.json")
    assert main(["explain", str(sweep), "--profile", profile, "--detail"]) == 0
    [line] = [line for line in capsys.readouterr().out.splitlines() if "exposed communication costs" in line]
    assert "PROJECTION, not measured (profile " in line
    for knob in (
        "--bucket-cap-mb 50",
        "--bucket-cap-mb 12.5",
        "--comm-hook bf16_compress",
        "--gradient-as-bucket-view",
    ):
        assert knob in line
    # Without a profile, nothing is projected.
    assert main(["explain", str(sweep)]) == 0
    assert "PROJECTION" not in capsys.readouterr().out
