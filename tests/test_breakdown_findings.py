"""What a run without a replay or a ladder (a script's run) is told about its ranks, its exposed
communication and its terms, on a real two-rank record with its replay and timeline taken away and
its traces' exposed times set by hand: rank 1 is slow, so rank 0 waits 10 ms in its collectives."""

import dataclasses
import os

import pytest
from conftest import FIXTURES
from msgspec.structs import replace

from ddpbench.analysis.breakdown import explain, explain_sweep, slowest_rank
from ddpbench.analysis.breakdown_terms import Breakdown, ExplainError, Term
from ddpbench.analysis.breakdown_text import closing_line
from ddpbench.analysis.ranks import rank_frame, straggler_verdict
from ddpbench.config.spec import ScriptSpec
from ddpbench.records.schema import ScriptRun
from ddpbench.records.store import load_record, read_records
from ddpbench.report.summary import format_summary

SWEEP = os.path.join(FIXTURES, "sweeps", "cpu-mlp-with-failure")
EXPOSED_MS = {0: 11.0, 1: 1.0}
"""Rank 0 waits for rank 1 inside its collectives: 10 ms beyond the 1 ms transfer."""


@pytest.fixture
def script_like():
    record = load_record(os.path.join(SWEEP, "runs", "mlp-ddp-n2.json"))
    trace = record.overlap.trace
    # DDP evens the ranks' steps out: every profiled step spans the same time on both ranks.
    span_us = trace.by_rank[0].steps[0].span_us
    views = [
        replace(
            view,
            exposed_comm_us_per_step=EXPOSED_MS[i] * 1e3,
            steps=[replace(step, span_us=span_us, exposed_comm_us=EXPOSED_MS[i] * 1e3) for step in view.steps],
        )
        for i, view in enumerate(trace.by_rank)
    ]
    # DDP evens the ranks' steps out: both ranks' step times are the same.
    steps = record.ranks[0].step_times_s
    ranks = [replace(rank, step_times_s=list(steps)) for rank in record.ranks]
    spec = dataclasses.replace(record.spec, script=ScriptSpec(path="train.py"))
    return replace(
        record,
        spec=spec,
        ranks=ranks,
        timeline=None,
        script=ScriptRun(steps_seen=10),
        overlap=replace(record.overlap, no_sync=None, reducer=None, trace=replace(trace, by_rank=views)),
    )


def test_without_a_replay_the_wait_beyond_the_least_waiting_rank_is_the_slowest_ranks(script_like):
    waited, _, slowest = slowest_rank(script_like)
    assert waited == pytest.approx(0.010) and slowest == 1


def test_a_scripts_straggler_is_found_from_its_traces_not_its_evened_out_steps(script_like):
    verdict = straggler_verdict(rank_frame(script_like))
    assert verdict.straggler and "rank 1" in verdict.text, verdict.text
    assert "exposed communication" in verdict.basis


def test_a_scripts_summary_gives_the_exposed_time_of_the_rank_that_waits_least(script_like):
    printed = format_summary(script_like, "record.json")
    assert "exposed comm 1.00 ms/step on the rank that waits least" in printed
    assert "waits 10.00 ms more for its peers" in printed


def test_a_scripts_missing_terms_say_it_is_a_script_not_an_old_record(script_like):
    records, _ = read_records(SWEEP)
    breakdown = explain(script_like, records)
    for name in ("ddp_work", "overlap_slowdown", "contention"):
        basis = breakdown.terms[name].basis
        assert "script" in basis and "made before" not in basis, (name, basis)


def _breakdown(points: dict[str, tuple[float, float]], in_run=(0.7, 0.05)) -> Breakdown:
    """Terms by hand as {name: (points, half-width of the interval in points)}, and the in-run
    efficiency as (value, half-width)."""
    step = 0.1
    terms = {
        name: Term(value / 100 * step, value, "by hand", (value - half) / 100 * step, (value + half) / 100 * step)
        for name, (value, half) in points.items()
    }
    lost = sum(value for value, _ in points.values())
    found = Breakdown("r", "mlp", 2, 1 - lost / 100, step, step * (1 - lost / 100), "local", terms)
    value, half = in_run
    found.in_run = {"efficiency": {"value": value, "ci_low": value - half, "ci_high": value + half, "blocks": 8}}
    found.ladder = {"typical_rank": 0}
    return found


def test_the_closing_line_names_the_largest_finding_never_noise_or_the_measurement():
    # The measurement's term is the largest and ddp_work is larger but within noise: data is the finding.
    said = closing_line(_breakdown({"window_vs_ladder": (40.0, 5.0), "ddp_work": (20.0, 25.0), "data": (8.0, 2.0)}))
    assert said == "mlp x2: E(N) 32.0%, in-run 70.0%±5.0; largest loss data loading 8.0 ± 2.0 points"
    # No finding, and the whole in-run loss within its interval: one line saying so.
    quiet = _breakdown({"ddp_work": (3.0, 4.0)}, in_run=(0.98, 0.03))
    assert closing_line(quiet) == "mlp x2: no loss beyond this run's noise, 2.0 ± 3.0 points in-run"
    assert quiet.largest() is None and quiet.as_dict()["largest_loss"] is None


def test_advice_goes_only_to_findings():
    from ddpbench.analysis.breakdown_text import advice

    record = load_record(os.path.join(FIXTURES, "sweeps", "ladder-slow-rank", "runs", "slow2.json"))
    found = _breakdown(
        {"ddp_work": (9.7, 23.7), "contention": (5.9, 11.4), "exposed_comm": (6.0, 1.0), "reference_vs_rung0": (30, 2)}
    )
    said = advice(found, record, 1)
    assert found.advice_terms == ["exposed_comm"] and len(said) == 1
    assert said[0].startswith("exposed communication costs 6.00 ms per step (6.0 ± 1.0 points)")


def test_a_script_that_keeps_its_global_batch_is_told_why_it_has_no_reference():
    """nanoGPT divides its gradient accumulation by the world size: its per-device batch halves
    at two ranks, so its DDP x1 run is no weak-scaling reference. No `local` run can help."""
    sweep = os.path.join(FIXTURES, "sweeps", "ladder-slow-rank")
    script = ScriptSpec(path="train.py")

    def as_script(run_id: str, batch: int):
        found = load_record(os.path.join(sweep, "runs", f"{run_id}.json"))
        spec = dataclasses.replace(found.spec, workload="script:train.py", script=script, batch_size=batch, size=None)
        return replace(found, spec=spec)

    one, two = as_script("ddp1", 16), as_script("slow2", 8)
    with pytest.raises(ExplainError) as raised:
        explain(two, [("a", one), ("b", two)])
    said = str(raised.value)
    assert "stepped 16 samples per device" in said and "strong scaling" in said
    assert "add `local`" not in said


def test_a_sweep_whose_only_run_to_break_down_failed_says_so():
    sweep = os.path.join(FIXTURES, "sweeps", "ladder-slow-rank")
    records, _ = read_records(sweep)
    failed = [(path, replace(r, status="failed") if r.run_id == "slow2" else r) for path, r in records]
    script = ScriptSpec(path="train.py")
    failed = [(p, replace(r, spec=dataclasses.replace(r.spec, script=script))) for p, r in failed if r.run_id != "loc"]
    with pytest.raises(ExplainError, match="slow2 did not finish ok"):
        explain_sweep(failed)
