"""The ladder's terms, read from real records (tests/fixtures/sweeps/ladder-slow-rank: rank 1
sleeps 10 ms in every training forward): they add up to the lost time exactly, each is a mean of
block-paired differences with its interval, and a change to one step kind moves only the terms
that kind belongs to."""

import json
import os

import numpy as np
import pytest
from conftest import FIXTURES
from msgspec.structs import replace

from ddpbench.analysis.breakdown import explain
from ddpbench.analysis.breakdown_terms import MEASUREMENT_TERMS, TERM_NAMES
from ddpbench.analysis.breakdown_text import closing_line
from ddpbench.analysis.ladder import T_975, NoLadder, read_ladder
from ddpbench.records.store import load_record, read_records

SWEEP = os.path.join(FIXTURES, "sweeps", "ladder-slow-rank")


@pytest.fixture(scope="module")
def records():
    found, unreadable = read_records(SWEEP)
    assert not unreadable
    return found


def record(records, run_id: str):
    return next(r for _, r in records if r.run_id == run_id)


def _raw(run_id: str) -> dict:
    with open(os.path.join(SWEEP, "runs", f"{run_id}.json"), encoding="utf-8") as handle:
        return json.load(handle)


def _per_block(rank: dict, kind: str, read) -> dict[int, float]:
    return {step["block"]: read(step) for step in rank[kind]}  # one marked step per segment here


def _waits(step: dict) -> float:
    return step["forward_start_s"] + step["optimizer_start_s"] - max(step["grad_ready_s"])


def test_the_terms_are_the_block_paired_means_with_students_intervals(records):
    """Recomputed here from the record's JSON with numpy and scipy, sharing no code with the
    analysis: DDP's own work on the typical rank (0), the exposed transfer on the rank the other
    waits for (1), and each interval from Student's t over the paired blocks."""
    stats = pytest.importorskip("scipy.stats")
    by_rank = {rank["rank"]: rank for rank in _raw("slow2")["timeline"]["by_rank"]}
    step = lambda s: s["step_s"]  # noqa: E731
    solo, unwrapped = _per_block(by_rank[0], "solo", step), _per_block(by_rank[0], "unwrapped", step)
    ddp_work = np.array([solo[b] - unwrapped[b] for b in sorted(solo)])
    ddp3, ddp2 = _per_block(by_rank[1], "with_ddp", _waits), _per_block(by_rank[1], "solo", _waits)
    exposed = np.array([ddp3[b] - ddp2[b] for b in sorted(ddp3)])
    terms = explain(record(records, "slow2"), records).terms
    for name, values in (("ddp_work", ddp_work), ("exposed_comm", exposed)):
        half = stats.t.ppf(0.975, len(values) - 1) * values.std(ddof=1) / np.sqrt(len(values))
        term = terms[name]
        assert term.s_per_step == pytest.approx(values.mean(), abs=1e-12), name
        assert (term.ci_high_s - term.ci_low_s) / 2 == pytest.approx(half, rel=1e-3), name


def test_rung_0_is_measured_where_it_was_stepped_and_the_sum_stands_beside_the_loss(records):
    """Nothing is what the others leave over: reference_vs_rung0 is rung 0 as the typical rank (0)
    stepped it alone, recomputed here from the JSON, against the reference; the terms' sum is then
    compared with the loss, not equal to it by construction."""
    breakdown = explain(record(records, "slow2"), records)
    raw = _raw("slow2")
    alone = [s["step_s"] + s["data_s"] for s in raw["timeline"]["by_rank"][0]["alone"]]
    measured = breakdown.terms["reference_vs_rung0"].s_per_step + breakdown.reference_step_s
    assert measured == pytest.approx(np.mean(alone), abs=1e-12)
    lost = breakdown.step_s - breakdown.reference_step_s
    assert breakdown.terms_sum_s() != pytest.approx(lost, abs=1e-9)
    assert breakdown.terms_sum_s() == pytest.approx(lost, rel=0.1)  # 94.1 against 92.9 points here
    # Every term has its own interval: the one-rank zeros are exact, the rest from the blocks.
    for name in TERM_NAMES:
        term = breakdown.terms[name]
        assert term.ci_low_s is not None and term.ci_low_s < term.s_per_step < term.ci_high_s, name


def test_the_in_run_efficiency_is_rung_0_over_rung_3_of_the_same_rank_in_the_same_blocks(records):
    breakdown = explain(record(records, "slow2"), records)
    rank = _raw("slow2")["timeline"]["by_rank"][0]
    top = {s["block"]: s["step_s"] + s["data_s"] for s in rank["with_ddp"]}
    ratios = [(s["step_s"] + s["data_s"]) / top[s["block"]] for s in rank["alone"]]
    efficiency = breakdown.in_run["efficiency"]
    assert efficiency["value"] == pytest.approx(np.mean(ratios), abs=1e-12)
    assert efficiency["ci_low"] < efficiency["value"] < efficiency["ci_high"] and efficiency["blocks"] == len(ratios)


def test_without_a_local_run_the_in_run_rung_0_is_the_reference(records):
    alone = [(path, r) for path, r in records if r.run_id != "loc"]
    breakdown = explain(record(records, "slow2"), alone)
    assert not breakdown.has_reference_run and "rung 0 of the ladder" in breakdown.reference
    # E and the points lost from the same two figures (rung 0 over the step); the in-run
    # efficiency, a mean of the blocks' ratios, stands beside them as what it is.
    assert breakdown.efficiency == pytest.approx(breakdown.reference_step_s / breakdown.step_s)
    assert breakdown.reference_step_s == pytest.approx(read_ladder(record(records, "slow2")).estimate("bottom").s)
    assert breakdown.terms["reference_vs_rung0"].s_per_step is None
    # The terms that need no reference are the same milliseconds as with one.
    with_local = explain(record(records, "slow2"), records)
    for name in TERM_NAMES:
        if name != "reference_vs_rung0":
            assert breakdown.terms[name].s_per_step == with_local.terms[name].s_per_step, name


def _identical_ranks(record, rng, noise_s: float):
    """The record with both ranks' ladder steps copies of rank 0's, each step waiting an independent
    random extra time in its last all-reduce (the same distribution on both ranks)."""
    timeline = record.timeline
    base = next(r for r in timeline.by_rank if r.rank == 0)

    def noisy(steps):
        found = []
        for step in steps or []:
            extra = float(rng.exponential(noise_s))
            found.append(
                replace(
                    step,
                    step_s=step.step_s + extra,
                    optimizer_start_s=step.optimizer_start_s + extra,
                    optimizer_end_s=step.optimizer_end_s + extra,
                )
            )
        return found

    by_rank = [replace(base, rank=rank, with_ddp=noisy(base.with_ddp), solo=noisy(base.solo)) for rank in (0, 1)]
    return replace(record, timeline=replace(timeline, by_rank=by_rank))


def test_identical_ranks_give_a_slowest_rank_term_whose_mean_is_zero(records):
    """Chosen on one half of the blocks and read on the other: over many identical-rank fixtures
    the term averages zero within its interval. The rank picked and read on the same blocks (the
    estimator this replaced, recomputed here) averages well above zero on the same fixtures."""
    rng = np.random.default_rng(7)
    original = record(records, "slow2")
    noise_s = 0.5e-3
    estimates, halves, same_blocks = [], [], []
    for _ in range(300):
        fixture = _identical_ranks(original, rng, noise_s)
        estimate = read_ladder(fixture).estimate("slowest_rank")
        estimates.append(estimate.s)
        halves.append(estimate.ci_high_s - estimate.s)
        per_rank = {}
        for rank in fixture.timeline.by_rank:
            ddp = {s.block: s.forward_start_s + s.optimizer_start_s - max(s.grad_ready_s) for s in rank.with_ddp}
            own = {s.block: s.forward_start_s + s.optimizer_start_s - max(s.grad_ready_s) for s in rank.solo}
            per_rank[rank.rank] = np.array([ddp[b] - own[b] for b in sorted(ddp)])
        slowest = min(per_rank, key=lambda r: per_rank[r].mean())
        same_blocks.append(float((per_rank[1 - slowest] - per_rank[slowest]).mean()))
    mean, error = np.mean(estimates), np.std(estimates, ddof=1) / np.sqrt(len(estimates))
    assert abs(mean) <= 3 * error and abs(mean) < np.mean(halves), (mean, error, np.mean(halves))
    assert np.mean(same_blocks) > 10 * error, (np.mean(same_blocks), error)


def test_at_one_rank_nothing_is_shared_and_nothing_communicated(records):
    breakdown = explain(record(records, "ddp1"), records)
    for name in ("contention", "exposed_comm", "overlap_slowdown", "slowest_rank", "unexplained"):
        term = breakdown.terms[name]
        assert term.s_per_step == 0.0 and term.ci_low_s == term.ci_high_s == 0.0, name
        assert term.basis.startswith("one rank"), term.basis


def test_the_rank_that_sleeps_is_the_slowest_and_its_sleep_is_the_wait(records):
    breakdown = explain(record(records, "slow2"), records)
    assert breakdown.ladder["slowest_rank"] == 1 and breakdown.ladder["typical_rank"] == 0
    waited_ms = breakdown.terms["slowest_rank"].s_per_step * 1e3
    assert 8.5 <= waited_ms <= 11.5, waited_ms  # 10 ms planted, within 15 %
    assert "rank 1 " in breakdown.advice[0] and "slowest" in breakdown.advice[0]
    assert closing_line(breakdown).startswith("slow_rank_one x2: E(N) 7.1%, in-run")
    assert "largest loss waiting for the slowest rank" in closing_line(breakdown)


def _shifted(record, kind: str, seconds: float, ranks=None):
    """The record with every `kind` step (of the given ranks) made `seconds` longer."""
    timeline = record.timeline
    by_rank = [
        replace(rank, **{kind: [replace(step, step_s=step.step_s + seconds) for step in getattr(rank, kind)]})
        if ranks is None or rank.rank in ranks
        else rank
        for rank in timeline.by_rank
    ]
    return replace(record, timeline=replace(timeline, by_rank=by_rank))


def _terms(record, records) -> dict[str, float]:
    return {name: term.s_per_step for name, term in explain(record, records).terms.items()}


@pytest.mark.parametrize(
    ("kind", "ranks", "moves"),
    [
        # Every rank's DDP steps 5 ms longer after their last mark: no term holds it (each is
        # measured from its own marks, none is the rung less the others), the window now ran
        # shorter than the ladder's DDP step, and the terms' sum stays as it was.
        ("with_ddp", None, {"window_vs_ladder": -5e-3}),
        # The typical rank's one-rank DDP steps longer, after their marks: DDP's own work grows.
        ("solo", {0}, {"ddp_work": 5e-3}),
        # Every rank's unwrapped steps longer: DDP's own work shrinks, contention grows.
        ("unwrapped", None, {"ddp_work": -5e-3, "contention": 5e-3}),
    ],
)
def test_a_step_kind_made_longer_moves_only_its_own_terms(records, kind, ranks, moves):
    original = record(records, "slow2")
    before, after = _terms(original, records), _terms(_shifted(original, kind, 5e-3, ranks), records)
    for name in TERM_NAMES:
        assert after[name] - before[name] == pytest.approx(moves.get(name, 0.0), abs=1e-9), name


def _waits_longer(record, rank: int, seconds: float):
    """The record with `rank`'s DDP steps waiting `seconds` longer between its last gradient and
    the optimizer (a longer wait in the last all-reduce)."""
    timeline = record.timeline

    def later(step):
        return replace(
            step,
            step_s=step.step_s + seconds,
            optimizer_start_s=step.optimizer_start_s + seconds,
            optimizer_end_s=step.optimizer_end_s + seconds,
        )

    by_rank = [
        replace(r, with_ddp=[later(step) for step in r.with_ddp]) if r.rank == rank else r for r in timeline.by_rank
    ]
    return replace(record, timeline=replace(timeline, by_rank=by_rank))


@pytest.mark.parametrize(
    ("rank", "moves"),
    [
        # The typical rank (0) waits longer after backward: for the slowest rank, which waits for no one.
        (0, {"slowest_rank": 5e-3, "window_vs_ladder": -5e-3}),
        # The slowest rank (1) waits longer: the transfer itself; the typical rank's extra shrinks.
        (1, {"exposed_comm": 5e-3, "slowest_rank": -5e-3}),
    ],
)
def test_a_longer_wait_after_backward_is_transfer_on_the_slowest_rank_and_waiting_on_the_others(records, rank, moves):
    original = record(records, "slow2")
    before, after = _terms(original, records), _terms(_waits_longer(original, rank, 5e-3), records)
    for name in TERM_NAMES:
        assert after[name] - before[name] == pytest.approx(moves.get(name, 0.0), abs=1e-9), name


def test_a_record_without_a_ladder_keeps_the_earlier_terms_and_says_why_the_new_ones_are_missing():
    old_sweep = os.path.join(FIXTURES, "sweeps", "cpu-mlp-with-failure")
    records, _ = read_records(old_sweep)
    ddp = load_record(os.path.join(old_sweep, "runs", "mlp-ddp-n2.json"))
    with pytest.raises(NoLadder):
        read_ladder(ddp)
    breakdown = explain(ddp, records)
    for name in ("contention", *MEASUREMENT_TERMS):
        assert breakdown.terms[name].s_per_step is None and "no ladder" in breakdown.terms[name].basis
    assert breakdown.terms["exposed_comm"].s_per_step is not None


def test_the_t_table_is_students():
    stats = pytest.importorskip("scipy.stats")
    for df, value in T_975.items():
        assert value == pytest.approx(stats.t.ppf(0.975, df), abs=1e-3), df


def test_the_straggler_table_reads_the_ladders_own_steps_and_keeps_the_replay(records):
    from ddpbench.analysis.ranks import LADDER_MEASURE, rank_frame, straggler_verdict

    frame = rank_frame(record(records, "slow2"))
    assert frame["no_sync_p50_s"].notna().all()  # the replay's column stays beside the ladder's measure
    assert set(frame["measure"]) == {LADDER_MEASURE}
    verdict = straggler_verdict(frame)
    assert verdict.straggler and "rank 1" in verdict.text, verdict.text


def test_a_projection_from_one_rank_uses_its_ddp_steps_as_the_one_rank_ddp(records):
    """At one rank the ladder steps no separate one-rank DDP: the run's own DDP is one."""
    from ddpbench.analysis.projection import RunModel

    one = record(records, "ddp1")
    assert one.timeline.by_rank[0].solo is None
    model = RunModel(one)
    # The one-rank DDP the replay starts from is the run's own DDP steps, the same figures.
    assert model.solo == model.with_ddp and model.base == model.with_ddp
    assert model.base != model.alone  # not the no_sync steps it would fall back to


def test_the_reports_straggler_verdict_is_explains_slowest_rank(records, tmp_path):
    """One definition of the slowest rank: the report's Stragglers section names the ladder's, with
    the same milliseconds `explain` gives its wait."""
    import html as markup

    from ddpbench.report.html import build_report

    waited = explain(record(records, "slow2"), records).terms["slowest_rank"].s_per_step * 1e3
    page = markup.unescape(open(build_report(SWEEP, str(tmp_path / "index.html"))).read())
    section = page[page.index("<h2>Stragglers</h2>") :]
    section = section[: section.index("<h2>", 5)]
    assert f"rank 1 on vm is the slowest: the other ranks wait {waited:.2f} ±" in section, section


def test_the_run_summary_gives_explains_milliseconds(records):
    """One engine: every term the run summary shows (its largest loss, the terms its agreement line
    splits an estimate into) is the milliseconds `explain` gives it, against the run's own rung 0."""
    import re

    from ddpbench.report.summary import format_summary

    slow2 = record(records, "slow2")
    terms = explain(slow2, [("slow2", slow2)]).terms
    printed = format_summary(slow2, "slow2.json")
    largest = re.search(r"largest loss waiting for the slowest rank ([0-9.]+) ms", printed)
    assert largest and float(largest.group(1)) == pytest.approx(terms["slowest_rank"].s_per_step * 1e3, abs=5e-3)
    for name in ("exposed_comm", "overlap_slowdown", "slowest_rank"):
        shown = re.search(rf"{name} (-?[0-9.]+) ms", printed)
        assert shown, (name, printed)
        assert float(shown.group(1)) == pytest.approx(terms[name].s_per_step * 1e3, abs=5e-3), name


def test_identical_ranks_get_no_straggler_and_no_named_rank(records):
    """The straggler verdict and the advice follow the term's significance: on identical ranks the
    wait for the slowest rank is within noise far more often than not, and then no rank is named."""
    from ddpbench.analysis.breakdown import ladder_straggler

    rng = np.random.default_rng(11)
    quiet = 0
    for _ in range(20):
        fixture = _identical_ranks(record(records, "slow2"), rng, 0.5e-3)
        term = explain(fixture, [("f", fixture)]).terms["slowest_rank"]
        verdict = ladder_straggler(fixture)
        assert verdict.straggler == (term.significant and term.s_per_step > 0), verdict.text
        if not term.significant:
            quiet += 1
            assert verdict.text.startswith("No straggler beyond the run's noise"), verdict.text
            breakdown = explain(fixture, [("f", fixture)])
            assert "slowest_rank" not in breakdown.advice_terms
    assert quiet >= 15, quiet
