"""One answer per configuration: its runs pooled (mean, t interval over the runs, never narrower than
the runs' own rounds allow), runs the speed check flags left out, the largest cause or the causes
tied with it, and `ddpbench explain`'s table, JSON and bad input. Saved records only: the planted
causes run for real in test_breakdown_runs.py."""

# chance: reference computation: the intervals below are recomputed by hand over fixed numbers,
# against ddpbench's own, so nothing here is drawn or measured.

import dataclasses
import json
import math
import os
import shutil
import statistics

import pytest
from conftest import FIXTURES
from msgspec.structs import replace

from ddpbench.analysis.answer_text import advice, largest_words, sentence
from ddpbench.analysis.answers import Answer, answer_run, answer_sweep, lead_holds, pool_runs
from ddpbench.analysis.causes import CAUSES, Cause, ExplainError
from ddpbench.analysis.estimates import Estimate, pool, t_975
from ddpbench.cli import main
from ddpbench.config.spec import ScriptSpec
from ddpbench.records.store import load_record, read_records

SLOW_RANK = os.path.join(FIXTURES, "sweeps", "slow-rank")
OLD = os.path.join(FIXTURES, "sweeps", "cpu-mlp-with-failure")


def _record(sweep: str, run_id: str):
    return load_record(os.path.join(sweep, "runs", f"{run_id}.json"))


def test_a_figure_pooled_over_runs_is_their_mean_with_a_t_interval_over_them():
    runs = [Estimate.of_rounds([0.5 + 0.01 * i, 0.52, 0.51]) for i in range(3)]
    runs += [Estimate.of_rounds([0.7, 0.71, 0.69])]
    found = pool(runs)
    values = [run.value for run in runs]
    half = t_975(3) * statistics.stdev(values) / math.sqrt(4)
    assert found.value == pytest.approx(statistics.fmean(values)) and found.half == pytest.approx(half)
    assert found.over == "runs" and found.samples == 4


def test_pooled_over_k_runs_the_degrees_of_freedom_are_k_minus_1_whatever_the_runs_show():
    # Three runs that happen to agree closely, each with wide rounds: the interval is still over the
    # runs, t(2), never the rounds' t(21) (the data never chooses the degrees of freedom).
    runs = [Estimate(0.6 + 0.001 * i, 0.5, 0.7, 8, "rounds", 0.04) for i in range(3)]
    found = pool(runs)
    values = [run.value for run in runs]
    assert found.half == pytest.approx(t_975(2) * statistics.stdev(values) / math.sqrt(3))
    assert found.samples == 3 and found.over == "runs"


def test_one_run_keeps_its_own_interval_and_says_so():
    run = Estimate.of_rounds([0.6, 0.62, 0.58, 0.61])
    found = pool([run])
    assert found is run and found.over == "rounds"
    answer = Answer([], efficiency=found)
    assert answer.efficiency.over == "rounds"


def _repeats(count: int, scale=lambda i: 1.0):
    """The fixture's slow2 and loc as `count` rounds of a sweep: each round's runs with their own
    repeat number, the DDP run's timeline steps scaled by scale(i)."""
    loc, slow2 = _record(SLOW_RANK, "loc"), _record(SLOW_RANK, "slow2")
    found = []
    for i in range(count):
        factor = scale(i)
        by_rank = [
            replace(
                rank,
                **{
                    kind: [replace(step, step_s=step.step_s * factor) for step in getattr(rank, kind) or []]
                    for kind in ("alone", "unwrapped", "solo", "with_ddp")
                },
            )
            for rank in slow2.timeline.by_rank
        ]
        ddp = replace(
            slow2,
            run_id=f"slow2-r{i + 1}",
            spec=dataclasses.replace(slow2.spec, run_id=f"slow2-r{i + 1}", repeat=i + 1),
            timeline=replace(slow2.timeline, by_rank=by_rank),
        )
        local = replace(
            loc, run_id=f"loc-r{i + 1}", spec=dataclasses.replace(loc.spec, run_id=f"loc-r{i + 1}", repeat=i + 1)
        )
        found += [(f"{ddp.run_id}.json", ddp), (f"{local.run_id}.json", local)]
    return found


def test_a_configurations_runs_are_one_answer_pooled_over_them():
    records = _repeats(3, scale=lambda i: 1.0 + 0.05 * i)
    answers, problems = answer_sweep(records)
    assert problems == [] and len(answers) == 1
    [answer] = answers
    assert answer.run_ids == ["slow2-r1", "slow2-r2", "slow2-r3"]
    runs = [answer_run(r, records) for _, r in records if r.run_id.startswith("slow2")]
    steps = [run.ddp_step.value for run in runs]
    for name in ("exposed_comm", "straggler_wait"):
        # Points are the pooled seconds over the pooled step: a ratio of means, not a mean of ratios.
        seconds = [run.causes[name].seconds.value for run in runs]
        assert answer.causes[name].seconds.value == pytest.approx(statistics.fmean(seconds))
        expected = 100 * statistics.fmean(seconds) / statistics.fmean(steps)
        assert answer.causes[name].points.value == pytest.approx(expected)
        assert answer.causes[name].points.over == "runs" and answer.causes[name].points.samples == 3
    # Each DDP run alone is divided by the local runs of every round, pooled (the X(1) the table
    # prints), so the configuration's E(N), its pooled X over N times the pooled X(1), is also the
    # mean of its runs' E(N).
    assert [run.reference_run_ids for run in answer.runs] == [["loc-r1", "loc-r2", "loc-r3"]] * 3
    assert answer.efficiency.value == pytest.approx(statistics.fmean(run.efficiency.value for run in answer.runs))
    assert answer.efficiency.over == "runs" and answer.efficiency.samples == 3
    x_n = statistics.fmean(r.metrics.throughput_units_per_s for _, r in records if r.run_id.startswith("slow2"))
    x_1 = statistics.fmean(r.metrics.throughput_units_per_s for _, r in records if r.run_id.startswith("loc"))
    assert answer.efficiency.value == x_n / (2 * x_1)
    assert "(3 runs)" in sentence(answer)


def test_a_run_the_speed_check_flags_is_left_out_of_the_pooled_figures():
    records = _repeats(3)
    flags = {"slow2-r2": "slow2 x2's process ran 2.0x slower on the speed check"}
    runs = [answer_run(r, records) for _, r in records if r.run_id.startswith("slow2")]
    answer = pool_runs(runs, flags)
    assert answer.run_ids == ["slow2-r1", "slow2-r3"] and answer.left_out == flags
    assert answer.machine == [flags["slow2-r2"]]
    # Every run flagged: all enter, and the answer still says so.
    everyone = pool_runs(runs, {run.run_id: "flagged" for run in runs})
    assert len(everyone.runs) == 3 and everyone.left_out == {}


def _answer(points: dict[str, tuple[float, float]], in_process=(0.7, 0.05)) -> Answer:
    """Causes by hand as {name: (points, half-width)}, pooled over 3 runs."""
    record = _record(SLOW_RANK, "slow2")
    causes = {
        name: Cause(
            Estimate(value / 1e3, (value - half) / 1e3, (value + half) / 1e3, 3, "runs", half / 4.3 / 1e3),
            Estimate(value, value - half, value + half, 3, "runs", half / 4.3),
            "by hand",
        )
        for name, (value, half) in points.items()
    }
    value, half = in_process
    run = answer_run(record, [("slow2", record)])
    return Answer([run], causes=causes, in_process=Estimate(value, value - half, value + half, 3, "runs", half / 4.3))


def _lead(value: float, se: float, runs: int = 3) -> Estimate:
    half = {3: 4.303, 2: 12.706}[runs] * se
    return Estimate(value, value - half, value + half, runs, "runs", se)


def test_the_largest_cause_is_never_noise_and_ties_are_those_whose_lead_would_not_hold():
    # contention's estimate is larger but within noise: data is the largest finding. Its lead over
    # exposed communication, 1.5 pp with a standard error of 0.5 over 3 runs, would not hold in
    # another sweep (1.5 - 4.30 x sqrt(2) x 0.5 < 0); its lead over DDP overhead, 6.0 pp with 0.4,
    # would (6.0 - 4.30 x sqrt(2) x 0.4 = 3.6 > 0); contention's larger estimate makes data's lead
    # over it negative: tied with it, said to be within noise.
    found = _answer(
        {"contention": (20.0, 25.0), "data": (8.0, 2.0), "exposed_comm": (6.5, 1.0), "ddp_overhead": (2.0, 0.5)}
    )
    leads = {
        ("data", "exposed_comm"): _lead(1.5, 0.5),
        ("data", "ddp_overhead"): _lead(6.0, 0.4),
        ("data", "contention"): _lead(-12.0, 6.0),
    }
    found.lead = lambda first, second: leads[(first, second)]
    assert found.findings() == ["data", "exposed_comm", "ddp_overhead"]
    assert found.rivals() == ["contention"]
    assert found.largest() == ["data", "exposed_comm", "contention"]
    assert largest_words(found) == (
        "largest cause data loading 8.0 ± 2.0 pp (8.00 ms per step), tied with exposed communication and "
        "host contention (within noise) (its lead would not hold in another sweep)"
    )
    # A lead beyond its confidence interval is not enough: 2.5 pp with 0.5 clears 4.30 x 0.5 = 2.15
    # but not the next sweep's noise too, 4.30 x sqrt(2) x 0.5 = 3.04.
    assert _lead(2.5, 0.5).significant and not lead_holds(_lead(2.5, 0.5))
    assert lead_holds(_lead(3.1, 0.5)) and not lead_holds(None)
    # Over real runs the lead is paired: each run's difference of the two causes, pooled as every
    # figure is (their mean over the mean DDP step).
    records = _repeats(3)
    runs = [answer_run(r, records) for _, r in records if r.run_id.startswith("slow2")]
    answer = pool_runs(runs, {})
    lead = answer.lead("straggler_wait", "exposed_comm")
    differences = [
        run.causes["straggler_wait"].seconds.value - run.causes["exposed_comm"].seconds.value for run in runs
    ]
    steps = [run.cause_step_s for run in runs]
    assert lead.value == pytest.approx(100 * statistics.fmean(differences) / statistics.fmean(steps))
    assert lead.over == "runs" and lead.samples == 3
    # Advice only for causes beyond noise worth 2 pp or more, largest first.
    assert [name for name, _ in advice(found)] == ["data", "exposed_comm", "ddp_overhead"]
    quiet = _answer({"ddp_overhead": (3.0, 4.0)}, in_process=(0.98, 0.03))
    assert quiet.largest() == [] and advice(quiet) == []
    assert largest_words(quiet) == "it lost nothing beyond noise (2.0 ± 3.0 pp in-process)"


@pytest.fixture
def sweep(tmp_path):
    target = tmp_path / "sweep"
    shutil.copytree(SLOW_RANK, target)
    return target


def test_explain_prints_one_row_per_configuration_and_writes_both_jsons(sweep, tmp_path, capsys):
    new, old = tmp_path / "answers.json", tmp_path / "legacy.json"
    assert main(["explain", str(sweep), "--json-file", str(new), "--json", str(old)]) == 0
    captured = capsys.readouterr()
    printed = captured.out.splitlines()
    head = printed[0].split()
    assert head[:5] == ["configuration", "runs", "E(N)", "in-process", "lost"]
    assert [line.split()[0] for line in printed[1:3]] == [
        "planted_causes.slow_rank_one",
        "planted_causes.slow_rank_one",
    ]
    assert any(line.startswith("planted_causes.slow_rank_one x2: E(2) 7.1 %") for line in printed)
    assert any(
        line.startswith("try  planted_causes.slow_rank_one x2: waiting for the slowest rank") for line in printed
    )
    # The JSON of before keeps its shape and its names, with a deprecation notice.
    legacy = json.loads(old.read_text())
    assert [entry["run_id"] for entry in legacy] == ["ddp1", "slow2"]
    assert set(legacy[1]["terms"]) >= {"ddp_work", "slowest_rank", "unexplained", "window_vs_ladder"}
    assert legacy[1]["largest_loss"] == "slowest_rank"
    assert "--json still writes the per-run JSON of before 0.2" in captured.err
    written = json.loads(new.read_text())
    assert written["version"] == 2
    two = written["configurations"][1]
    assert two["configuration"] == "planted_causes.slow_rank_one x2" and two["runs"] == ["slow2"]
    assert set(two["causes"]) == {d.name for d in CAUSES} and two["largest"] == ["straggler_wait"]
    assert two["straggler"]["rank"] == 1 and two["straggler"]["phase"] == "forward" and two["straggler"]["named"]
    assert two["by_run"][0]["run_id"] == "slow2" and two["by_run"][0]["rounds"] == 4


def _sweep_of(root, *records):
    (root / "s" / "runs").mkdir(parents=True)
    for path in records:
        shutil.copy(path, root / "s" / "runs")
    return root / "s"


OLD_DDP = os.path.join(OLD, "runs", "mlp-ddp-n2.json")


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda root: root, "holds no run records"),
        (lambda root: root / "missing", "is not a sweep folder"),
        (
            lambda root: shutil.copytree(
                os.path.join(OLD, "runs"), root / "s" / "runs", ignore=lambda d, names: [n for n in names if "ddp" in n]
            )
            and root / "s",
            "no ok DDP run in the sweep",
        ),
        (lambda root: _sweep_of(root, OLD_DDP), "add `local` to --strategies"),
        (lambda root: _sweep_of(root, OLD_DDP) / "runs" / "mlp-ddp-n2.json", "is not a sweep folder"),
    ],
)
def test_bad_input_is_one_line_with_exit_2(tmp_path, capsys, make, message):
    assert main(["explain", str(make(tmp_path))]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("ddpbench explain: error:") and message in err


def test_with_a_profile_the_advice_projects_each_knob_and_says_it_is_a_projection(capsys):
    profile = os.path.join(FIXTURES, "projection", "gloo-profile.json")
    assert main(["explain", SLOW_RANK, "--network", profile, "--detail"]) == 0
    [line] = [
        line for line in capsys.readouterr().out.splitlines() if "advice" in line and "exposed communication" in line
    ]
    assert "PROJECTION, not measured (profile " in line
    for knob in (
        "--bucket-cap-mb 50",
        "--bucket-cap-mb 12.5",
        "--comm-hook bf16_compress",
        "--gradient-as-bucket-view",
    ):
        assert knob in line
    assert main(["explain", SLOW_RANK]) == 0
    assert "PROJECTION" not in capsys.readouterr().out


def test_a_script_that_keeps_its_global_batch_is_told_why_it_has_no_reference():
    """nanoGPT divides its gradient accumulation by the world size: its per-device batch halves at
    two ranks, so its DDP x1 run is no weak-scaling reference. No `local` run can help."""
    script = ScriptSpec(path="train.py")

    def as_script(run_id: str, batch: int):
        found = _record(SLOW_RANK, run_id)
        spec = dataclasses.replace(found.spec, workload="script:train.py", script=script, batch_size=batch, size=None)
        return replace(found, spec=spec)

    one, two = as_script("ddp1", 16), as_script("slow2", 8)
    with pytest.raises(ExplainError) as raised:
        answer_run(two, [("a", one), ("b", two)])
    said = str(raised.value)
    assert "stepped 16 samples per device" in said and "strong scaling" in said and "add `local`" not in said


def test_a_sweep_whose_only_run_to_explain_failed_says_so():
    records, _ = read_records(SLOW_RANK)
    failed = [(path, replace(r, status="failed") if r.run_id == "slow2" else r) for path, r in records]
    script = ScriptSpec(path="train.py")
    failed = [(p, replace(r, spec=dataclasses.replace(r.spec, script=script))) for p, r in failed if r.run_id != "loc"]
    with pytest.raises(ExplainError, match="slow2 did not finish ok"):
        answer_sweep(failed)


def test_a_run_without_the_ablation_gets_no_finding_and_no_advice():
    records, _ = read_records(OLD)
    answers, problems = answer_sweep(records)
    assert problems == [] and [answer.name for answer in answers] == ["mlp x1", "mlp x2"]
    for answer in answers:
        assert not answer.in_place and answer.findings() == [] and advice(answer) == []
        assert "not measured in place" in largest_words(answer)
    # Its straggler still comes from the one definition, here its no_sync replay, with an interval.
    two = answers[1]
    assert two.straggler.source == "replay" and two.straggler.wait.has_interval


def test_the_scaling_table_pools_as_explain_does():
    """One figure, one interval: the table's E(N) and in-process efficiency are explain's."""
    from ddpbench.analysis.frames import runs_frame, scaling_table

    records = _repeats(3, scale=lambda i: 1.0 + 0.05 * i)
    [answer] = answer_sweep(records)[0]
    row = scaling_table(runs_frame(records)).query("strategy == 'ddp'").iloc[0]
    for name, estimate in (("efficiency", answer.efficiency), ("in_process_efficiency", answer.in_process)):
        assert row[name] == pytest.approx(estimate.value), name
        assert row[f"{name}_low"] == pytest.approx(estimate.low) and row[f"{name}_high"] == pytest.approx(estimate.high)


def test_figures_measured_once_get_no_largest_cause_until_three_runs_give_an_interval():
    """A run without the ablation measures each cause once: no interval, never the largest cause.
    Pooled over 2 runs still none; over 3, an interval over the runs (t(2)), which may then name one."""
    records = [
        (path, replace(r, timeline=replace(r.timeline, ladder=None)) if r.timeline else r)
        for path, r in _repeats(3, scale=lambda i: 1.0 + 0.05 * i)
    ]
    runs = [answer_run(r, records) for _, r in records if r.run_id.startswith("slow2")]
    assert not any(run.in_place for run in runs)
    one = pool_runs(runs[:1], {})
    # (The wait for the slowest rank keeps its own interval, from the replay's steps: it may name a
    # straggler, but one run's figure is never the largest cause.)
    assert one.largest() == [] and advice(one) == []
    assert not any(c.points.has_interval for name, c in one.causes.items() if c.points and name != "straggler_wait")
    two = pool_runs(runs[:2], {})
    assert (
        two.largest() == []
        and advice(two) == []
        and all(not c.points.has_interval for c in two.causes.values() if c.points)
    )
    three = pool_runs(runs, {})
    measured = [c for c in three.causes.values() if c.points is not None and c.seconds.over != "exact"]
    assert measured and all(c.points.has_interval and c.points.over == "runs" for c in measured)
    assert all(c.points.samples == 3 for c in measured)


def test_a_rank_is_named_with_a_phase_only_where_that_phases_lead_is_beyond_noise():
    from ddpbench.analysis.straggler import Straggler, lead_phase, pooled

    wait = Estimate.of_rounds([0.010, 0.011, 0.009, 0.010, 0.012])
    clear = {
        "forward": Estimate.of_rounds([0.009, 0.010, 0.011, 0.010, 0.010]),
        "backward": Estimate.of_rounds([0.0] * 5),
    }
    noisy = {"forward": Estimate.of_rounds([0.004, -0.003, 0.005, -0.002, 0.001])}
    assert lead_phase(clear) == "forward" and lead_phase(noisy) is None
    named = Straggler(wait, 1, "ablation", True, lead_phase(noisy), leads=noisy)
    assert named.named and "(phase unclear)" in named.sentence() and "forward" not in named.sentence()
    # Pooled over runs, the phase's lead is pooled too (t over the runs), and judged the same way.
    runs = [Straggler(wait, 1, "ablation", True, "forward", leads=clear) for _ in range(3)]
    runs[1] = Straggler(wait, 1, "ablation", True, None, leads=noisy | {"backward": clear["backward"]})
    # Leads of 10, 1 and 10 ms over 3 runs: t(2) reaches zero, so the rank is named, its phase unclear.
    assert pooled(runs).named and pooled(runs).phase is None and not pooled(runs).leads["forward"].significant
    assert pooled([Straggler(wait, 1, "ablation", True, "forward", leads=clear)] * 3).phase == "forward"
