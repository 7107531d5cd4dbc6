"""The in-process ablation's causes, read from real records (tests/fixtures/sweeps/slow-rank:
rank 1 sleeps 10 ms in every training forward): each is a mean of per-round differences with its
Student's t interval, every round counts whichever rank stepped alone in it, they add up to the
in-process loss by construction, and a change to one step kind moves only the causes it belongs to."""

# chance: reference computation: the intervals below are recomputed by hand over fixed numbers,
# against ddpbench's own, so nothing here is drawn or measured.

import json
import os

import numpy as np
import pytest
from conftest import FIXTURES
from msgspec.structs import replace

from ddpbench.analysis.ablation import CAUSE_NAMES, NoAblation, read_ablation
from ddpbench.analysis.answer_text import sentence
from ddpbench.analysis.answers import answer_run, answer_sweep, pool_runs
from ddpbench.analysis.estimates import T_975
from ddpbench.records.store import load_record, read_records

SWEEP = os.path.join(FIXTURES, "sweeps", "slow-rank")


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


def _per_round(rank: dict, kind: str, read) -> dict[int, float]:
    return {step["block"]: read(step) for step in rank[kind] or []}  # one marked step per segment here


def _waits(step: dict) -> float:
    return step["forward_start_s"] + step["optimizer_start_s"] - max(step["grad_ready_s"])


def _seconds(records, run_id: str, others=None) -> dict[str, float]:
    found = answer_run(others or record(records, run_id), records)
    return {name: cause.seconds.value for name, cause in found.causes.items()}


def test_the_causes_are_per_round_means_with_students_intervals(records):
    """Recomputed here from the record's JSON with numpy and scipy, sharing no code with the
    analysis: DDP overhead on the median rank (0), the exposed transfer on the rank the other
    waits for (1), and each interval from Student's t over the rounds."""
    stats = pytest.importorskip("scipy.stats")
    by_rank = {rank["rank"]: rank for rank in _raw("slow2")["timeline"]["by_rank"]}
    step = lambda s: s["step_s"]  # noqa: E731
    solo, unwrapped = _per_round(by_rank[0], "solo", step), _per_round(by_rank[0], "unwrapped", step)
    overhead = np.array([solo[b] - unwrapped[b] for b in sorted(solo)])
    ddp, own = _per_round(by_rank[1], "with_ddp", _waits), _per_round(by_rank[1], "solo", _waits)
    exposed = np.array([ddp[b] - own[b] for b in sorted(ddp)])
    causes = answer_run(record(records, "slow2"), records).causes
    for name, values in (("ddp_overhead", overhead), ("exposed_comm", exposed)):
        half = stats.t.ppf(0.975, len(values) - 1) * values.std(ddof=1) / np.sqrt(len(values))
        found = causes[name].seconds
        assert found.value == pytest.approx(values.mean(), abs=1e-12), name
        assert found.half == pytest.approx(half, rel=1e-3), name


def test_every_round_counts_in_the_in_process_efficiency(records):
    """Recomputed from the JSON: in each round, the one-device step is the median rank's (0) step with
    every rank computing, less the host contention measured on that round's alone rank, plus the alone
    step's data wait; the efficiency is the mean of those over the mean of the median rank's DDP
    steps (a ratio of means). Rounds where rank 1 stepped alone count too."""
    raw = _raw("slow2")["timeline"]
    by_rank = {rank["rank"]: rank for rank in raw["by_rank"]}
    alone_of = raw["ladder"]["alone_rank_by_block"]
    assert set(alone_of) == {0, 1}
    bottoms, tops = [], []
    for block, a in enumerate(alone_of):
        alone = next(s for s in by_rank[a]["alone"] if s["block"] == block)
        all_a = next(s for s in by_rank[a]["unwrapped"] if s["block"] == block)["step_s"]
        all_m = next(s for s in by_rank[0]["unwrapped"] if s["block"] == block)["step_s"]
        top = next(s for s in by_rank[0]["with_ddp"] if s["block"] == block)
        bottom = all_m - (all_a - alone["step_s"]) + alone["data_s"]
        bottoms.append(bottom)
        tops.append(top["step_s"] + top["data_s"])
    found = answer_run(record(records, "slow2"), records)
    assert found.in_process.samples == len(alone_of)  # every round, not only the median rank's
    assert found.in_process.value == pytest.approx(np.mean(bottoms) / np.mean(tops), abs=1e-12)
    assert found.in_process.low < found.in_process.value < found.in_process.high


@pytest.mark.parametrize("run_id", ["slow2", "ddp1"])
def test_the_causes_add_up_to_the_in_process_loss_by_construction(records, run_id):
    ablation = read_ablation(record(records, run_id))
    for round_, loss in ablation.rounds["loss"].items():
        total = sum(ablation.rounds[name][round_] for name in CAUSE_NAMES)
        assert total == pytest.approx(loss, abs=1e-12), round_
    found = answer_run(record(records, run_id), records)
    points = sum(cause.points.value for cause in found.causes.values())
    assert points == pytest.approx(found.loss_points.value, abs=1e-9)


def test_the_check_is_efficiency_against_the_in_process_efficiency(records):
    found = answer_run(record(records, "slow2"), records)
    assert found.gap.value == pytest.approx(100 * (found.efficiency.value - found.in_process.value), abs=1e-9)
    # Its two parts are measured, each with its own interval.
    for name in ("reference_vs_alone", "timed_vs_ablation"):
        assert found.checks[name].seconds.has_interval, name


def test_without_a_local_run_the_causes_stand_and_e_n_is_not_given(records):
    alone = [(path, r) for path, r in records if r.run_id != "loc"]
    without = answer_run(record(records, "slow2"), alone)
    assert without.efficiency is None and without.gap is None and not without.checks
    with_local = _seconds(records, "slow2")
    for name, cause in without.causes.items():
        assert cause.seconds.value == with_local[name], name


def _identical_ranks(record, rng, noise_s: float):
    """The record with both ranks' steps copies of rank 0's, each DDP step waiting an independent
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


def test_identical_ranks_give_a_wait_for_the_slowest_whose_mean_is_zero(records):
    """Chosen on one half of the rounds and read on the other: over many identical-rank fixtures the
    wait averages zero within its interval. The rank picked and read on the same rounds (recomputed
    here) averages well above zero on the same fixtures."""
    rng = np.random.default_rng(7)
    original = record(records, "slow2")
    estimates, halves, same_rounds = [], [], []
    for _ in range(300):
        fixture = _identical_ranks(original, rng, 0.5e-3)
        found = answer_run(fixture, [("f", fixture)]).causes["straggler_wait"].seconds
        estimates.append(found.value)
        halves.append(found.half)
        per_rank = {}
        for rank in fixture.timeline.by_rank:
            ddp = {s.block: s.forward_start_s + s.optimizer_start_s - max(s.grad_ready_s) for s in rank.with_ddp}
            own = {s.block: s.forward_start_s + s.optimizer_start_s - max(s.grad_ready_s) for s in rank.solo}
            per_rank[rank.rank] = np.array([ddp[b] - own[b] for b in sorted(ddp)])
        slowest = min(per_rank, key=lambda r: per_rank[r].mean())
        same_rounds.append(float((per_rank[1 - slowest] - per_rank[slowest]).mean()))
    mean, error = np.mean(estimates), np.std(estimates, ddof=1) / np.sqrt(len(estimates))
    assert abs(mean) <= 3 * error and abs(mean) < np.mean(halves), (mean, error, np.mean(halves))
    assert np.mean(same_rounds) > 5 * error, (np.mean(same_rounds), error)


def test_identical_ranks_mostly_name_no_straggler(records):
    rng = np.random.default_rng(11)
    named = 0
    for _ in range(20):
        fixture = _identical_ranks(record(records, "slow2"), rng, 0.5e-3)
        found = answer_run(fixture, [("f", fixture)])
        if found.straggler.named:
            named += 1
        else:
            assert found.straggler.sentence().startswith("No rank held the others back beyond noise")
            assert "straggler_wait" not in pool_runs([found], {}).findings()
    assert named <= 2, named


def test_at_one_rank_nothing_is_shared_and_nothing_communicated(records):
    found = answer_run(record(records, "ddp1"), records)
    for name in ("contention", "exposed_comm", "overlap_slowdown", "straggler_wait"):
        cause = found.causes[name]
        assert cause.seconds.over == "exact" and cause.seconds.value == 0.0, name
        assert cause.basis.startswith("one rank"), cause.basis


def test_the_rank_that_sleeps_is_the_slowest_its_sleep_the_wait_and_forward_its_phase(records):
    found = answer_run(record(records, "slow2"), records)
    assert found.straggler.rank == 1 and found.straggler.named and found.straggler.phase == "forward"
    waited_ms = found.causes["straggler_wait"].seconds.value * 1e3
    assert 8.5 <= waited_ms <= 11.5, waited_ms  # 10 ms planted, within 15 %
    said = sentence(pool_runs([found], {}))
    assert said.startswith(
        "planted_causes.slow_rank_one x2: E(2) 7.1 % ± 0.3 (1 run: the interval covers that run only)"
    ), said
    assert (
        "largest cause waiting for the slowest rank" in said
        and "rank 1 on vm held the others back (in its forward)" in said
    )


def _shifted(record, kind: str, seconds: float, ranks=None):
    """The record with every `kind` step (of the given ranks) made `seconds` longer, after its marks."""
    timeline = record.timeline
    by_rank = [
        replace(rank, **{kind: [replace(step, step_s=step.step_s + seconds) for step in getattr(rank, kind)]})
        if ranks is None or rank.rank in ranks
        else rank
        for rank in timeline.by_rank
    ]
    return replace(record, timeline=replace(timeline, by_rank=by_rank))


@pytest.mark.parametrize(
    ("kind", "ranks", "moves"),
    [
        # Every rank's DDP steps 5 ms longer after their last mark: the rest of the step under DDP.
        ("with_ddp", None, {"forward_optimizer": 5e-3}),
        # The median rank's steps on DDP on one rank longer: DDP's overhead grows, and the
        # communication step above it (DDP against DDP on one rank) shrinks by as much.
        ("solo", {0}, {"ddp_overhead": 5e-3, "forward_optimizer": -5e-3}),
        # Every rank's unwrapped steps longer: DDP's overhead shrinks, host contention grows.
        ("unwrapped", None, {"ddp_overhead": -5e-3, "contention": 5e-3}),
    ],
)
def test_a_step_kind_made_longer_moves_only_its_own_causes(records, kind, ranks, moves):
    original = record(records, "slow2")
    before = _seconds(records, "slow2")
    after = _seconds(records, "slow2", _shifted(original, kind, 5e-3, ranks))
    for name in CAUSE_NAMES:
        assert after[name] - before[name] == pytest.approx(moves.get(name, 0.0), abs=1e-9), name


def _waits_longer(record, rank: int, seconds: float):
    """`rank`'s DDP steps waiting `seconds` longer between its last gradient and the optimizer."""
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
        # The median rank (0) waits longer after backward: for the slowest rank, which waits for no one.
        (0, {"straggler_wait": 5e-3}),
        # The slowest rank (1) waits longer: the transfer itself; the median rank's extra shrinks.
        (1, {"exposed_comm": 5e-3, "straggler_wait": -5e-3}),
    ],
)
def test_a_longer_wait_after_backward_is_transfer_on_the_slowest_rank_and_waiting_on_the_others(records, rank, moves):
    original = record(records, "slow2")
    before = _seconds(records, "slow2")
    after = _seconds(records, "slow2", _waits_longer(original, rank, 5e-3))
    for name in CAUSE_NAMES:
        assert after[name] - before[name] == pytest.approx(moves.get(name, 0.0), abs=1e-9), name


def test_a_record_without_the_ablation_takes_the_labelled_path_and_says_why():
    old_sweep = os.path.join(FIXTURES, "sweeps", "cpu-mlp-with-failure")
    records, _ = read_records(old_sweep)
    ddp = load_record(os.path.join(old_sweep, "runs", "mlp-ddp-n2.json"))
    with pytest.raises(NoAblation):
        read_ablation(ddp)
    found = answer_run(ddp, records)
    assert not found.in_place and found.in_process is None
    for name in ("contention", "forward_optimizer"):
        assert found.causes[name].seconds is None and "in-process ablation" in found.causes[name].basis
    exposed = found.causes["exposed_comm"]
    assert exposed.seconds is not None and not exposed.significant and exposed.basis.startswith("not measured in place")
    answers, _ = answer_sweep(records)
    assert all(not answer.findings() for answer in answers if not answer.in_place)


def test_the_t_table_is_students():
    stats = pytest.importorskip("scipy.stats")
    for df, value in T_975.items():
        assert value == pytest.approx(stats.t.ppf(0.975, df), abs=1e-3), df


def test_the_rank_table_reads_each_ranks_own_step_on_ddp_on_one_rank(records):
    from ddpbench.analysis.ranks import LADDER_MEASURE, rank_frame

    frame = rank_frame(record(records, "slow2"))
    assert frame["no_sync_p50_s"].notna().all()  # the replay's column stays beside the ablation's measure
    assert set(frame["measure"]) == {LADDER_MEASURE}
    assert frame.loc[frame["measure_s"].idxmax(), "rank"] == 1


def test_a_projection_from_one_rank_uses_its_ddp_steps_as_ddp_on_one_rank(records):
    """At one rank the ablation steps no separate DDP on one rank: the run's own DDP is one."""
    from ddpbench.analysis.projection import RunModel

    one = record(records, "ddp1")
    assert one.timeline.by_rank[0].solo is None
    model = RunModel(one)
    assert model.solo == model.with_ddp and model.base == model.with_ddp
    assert model.base != model.alone  # not the no_sync steps it would fall back to


def test_the_report_names_the_rank_explain_names_with_the_same_milliseconds(records, tmp_path):
    """One definition of the wait for the slowest rank: the report's Ranks section gives explain's."""
    import html as markup

    from ddpbench.report.html import build_report

    waited = answer_run(record(records, "slow2"), records).causes["straggler_wait"].seconds
    page = markup.unescape(open(build_report(SWEEP, str(tmp_path / "index.html"))).read())
    section = page[page.index("<h2>Ranks</h2>") :]
    section = section[: section.index("<h2>", 5)] if "<h2>" in section[5:] else section
    wait = f"{waited.value * 1e3:.2f} ± {waited.half * 1e3:.2f}"
    said = f"Rank 1 on vm held the others back (in its forward): they wait {wait}"
    assert said in section, section


def test_the_run_summary_gives_explains_figures(records):
    """One engine: the run summary's in-process efficiency, largest cause and exposed communication
    are explain's, against the run's own ablation."""
    from ddpbench.report.summary import format_summary

    slow2 = record(records, "slow2")
    found = answer_run(slow2, [("slow2", slow2)])
    printed = format_summary(slow2, "slow2.json")
    efficiency = found.in_process
    assert f"efficiency {100 * efficiency.value:.1f} % ± {100 * efficiency.half:.1f}" in printed, printed
    wait = found.causes["straggler_wait"]
    assert f"largest cause waiting for the slowest rank {wait.points.value:.1f}" in printed, printed
    exposed = found.causes["exposed_comm"].seconds
    assert f"({exposed.value * 1e3:.2f} ms per step)" in printed.split("exposed comm")[1], printed
