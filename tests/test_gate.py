"""The regression gate: statistics on seeded synthetic samples with known ratios, and the command
on the committed fixture sweep with step times scaled by known factors."""
import copy
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

from conftest import FIXTURES, ddpbench
from ddpbench.gate.compare import compare, env_differences, load_side, markdown_summary, overall_verdict, run_key
from ddpbench.gate.stats import GateSettings, block_resample_medians, interval, parse_threshold, time_ratio, verdict

SWEEP = os.path.join(FIXTURES, "sweeps", "cpu-mlp-with-failure")


def noisy_steps(rng, median_s, steps=200, noise=0.03):
    """Correlated step times: a slow random walk (load drifting) plus independent jitter."""
    drift = np.cumsum(rng.normal(0, noise / 10, steps))
    return median_s * (1 + drift - drift.mean() + rng.normal(0, noise, steps))


@pytest.mark.parametrize("candidate_s, expected", [
    (1.20, "regression"),     # 20 % slower: far beyond a 5 % threshold
    (1.00, "pass"),           # the same speed
    (0.80, "improvement"),    # 20 % faster
    (1.05, "inconclusive"),   # right at the threshold: the interval straddles 0.95
])
def test_verdicts_on_seeded_samples_with_known_ratios(candidate_s, expected):
    rng = np.random.default_rng(42)
    baseline = [noisy_steps(rng, 1.0)]
    candidate = [noisy_steps(rng, candidate_s)]
    # Within-run statistics only: no run-to-run widening here.
    point, samples = time_ratio(baseline, candidate, GateSettings(run_noise=0), np.random.default_rng(0))
    low, high = interval(samples, 0.95)
    assert point == pytest.approx(1 / candidate_s, rel=0.02)
    assert low <= point <= high
    assert verdict(low, high, 0.05) == expected


def test_run_to_run_noise_widens_single_run_comparisons():
    rng = np.random.default_rng(42)
    baseline, candidate = [noisy_steps(rng, 1.0, noise=0.01)], [noisy_steps(rng, 1.12, noise=0.01)]
    quiet = interval(time_ratio(baseline, candidate, GateSettings(run_noise=0), np.random.default_rng(0))[1], 0.95)
    noisy = interval(time_ratio(baseline, candidate, GateSettings(run_noise=0.06), np.random.default_rng(0))[1], 0.95)
    assert verdict(*quiet, 0.05) == "regression"  # steady steps alone would call 12 % a regression...
    assert verdict(*noisy, 0.05) == "inconclusive"  # ...but one run per side cannot rule out a slow run
    assert noisy[1] - noisy[0] > 3 * (quiet[1] - quiet[0])


def test_block_bootstrap_keeps_blocks_of_consecutive_steps():
    series = np.arange(100, dtype=float)
    medians = block_resample_medians(series, block=100, resamples=50, rng=np.random.default_rng(0))
    assert np.all(medians == 49.5)  # one block of everything: every resample is the series itself


def test_repeated_runs_are_resampled_as_runs():
    rng = np.random.default_rng(3)
    baseline = [noisy_steps(rng, 1.0, steps=50) for _ in range(4)]
    candidate = [noisy_steps(rng, 1.3, steps=50) for _ in range(4)]
    point, samples = time_ratio(baseline, candidate, GateSettings(), np.random.default_rng(0))
    assert verdict(*interval(samples, 0.95), 0.05) == "regression" and point < 0.8  # default run noise included


@pytest.mark.parametrize("text, value", [("5", 0.05), ("5%", 0.05), ("0.05", 0.05), ("2.5%", 0.025)])
def test_thresholds_in_three_spellings(text, value):
    assert parse_threshold(text) == pytest.approx(value)


@pytest.mark.parametrize("text", ["five", "5 percent", "0", "150%"])
def test_bad_thresholds_say_which_forms_are_fine(text):
    with pytest.raises(ValueError, match="5, 5% or 0.05|between 0 and 100"):
        parse_threshold(text)


def scaled_copy(tmp_path, name, factor, env_change=None):
    """The fixture sweep with every step time (and no_sync replay) multiplied by `factor`."""
    target = tmp_path / name
    shutil.copytree(SWEEP, target)
    for path in (target / "runs").iterdir():
        record = json.loads(path.read_text())
        if record["status"] == "ok":
            for rank in record["ranks"]:
                rank["step_times_s"] = [t * factor for t in rank["step_times_s"]]
                rank["no_sync_step_times_s"] = [t * factor for t in rank.get("no_sync_step_times_s", [])]
            for view in ((record.get("overlap") or {}).get("no_sync") or {}).get("by_rank", []):
                view["exposed_comm_s"] *= factor
            record["metrics"]["throughput_units_per_s"] /= factor
        if env_change:
            record["env"].update(env_change)
        path.write_text(json.dumps(record))
    return str(target)


def test_spec_matching_and_a_regression_on_real_records(tmp_path):
    baseline = load_side(SWEEP)
    candidate = load_side(scaled_copy(tmp_path, "slow", 1.6))
    comparisons, unmatched = compare(baseline, candidate, GateSettings())
    assert unmatched == []
    throughput = [c for c in comparisons if c.metric.startswith("throughput")]
    assert len(throughput) == 5 and all(c.verdict == "regression" for c in throughput)
    assert all(c.ratio == pytest.approx(0.625) for c in throughput)
    # Everything slowed alike: efficiency is unchanged, so it must not be called a regression.
    efficiency = [c for c in comparisons if c.metric == "scaling efficiency"]
    assert efficiency and all(c.ratio == pytest.approx(1.0) and c.verdict != "regression" for c in efficiency)
    # Exposed communication: only where there is communication (2 ranks), judged per step.
    exposed = [c for c in comparisons if c.metric.startswith("exposed")]
    assert [c.configuration for c in exposed] == ["mlp/tiny ddp x2 b8 fp32 cpu"]
    record = next(r for r in baseline if r.run_id == "mlp-ddp-n2")
    worst = max(record.overlap.no_sync.by_rank, key=lambda v: v.exposed_comm_s)
    step = worst.step_time_median_s
    assert exposed[0].candidate == pytest.approx(1.6 * exposed[0].baseline)
    assert exposed[0].ratio == pytest.approx(1 - 0.6 * exposed[0].baseline / step)
    assert overall_verdict(comparisons) == "regression"
    summary = markdown_summary(comparisons, GateSettings(), unmatched, [])
    assert summary.startswith("## ddpbench gate: REGRESSION") and "37.5% worse" in summary


def test_runs_are_matched_by_what_defines_them():
    records = load_side(SWEEP)
    keys = {run_key(r) for r in records}
    assert len(keys) == len(records)  # local, ddp x1, ddp x2, dp x1, dp x2 are all different runs
    other_batch = copy.deepcopy(records[0])
    other_batch.spec = other_batch.spec.replace(batch_size=16)
    assert run_key(other_batch) != run_key(records[0])


def test_different_machines_are_refused_with_the_differences(tmp_path):
    other = scaled_copy(tmp_path, "other", 1.0, env_change={"torch": "9.9.9", "cpu_model": "Other CPU"})
    differences = env_differences(load_side(SWEEP), load_side(other))
    assert any(d.startswith("torch:") for d in differences) and any(d.startswith("cpu_model:") for d in differences)
    done = ddpbench("gate", "--baseline", SWEEP, "--candidate", other)
    assert done.returncode == 2 and "different machines or software" in done.stderr and "9.9.9" in done.stderr
    done = ddpbench("gate", "--baseline", SWEEP, "--candidate", other, "--allow-env-mismatch")
    assert done.returncode in (0, 3) and "verdict:" in done.stdout and "note: torch:" in done.stdout


def test_exit_codes_and_outputs(tmp_path):
    slow = scaled_copy(tmp_path, "slow", 1.6)
    done = ddpbench("gate", "--baseline", SWEEP, "--candidate", slow, "--summary-md", str(tmp_path / "s.md"),
                    "--json", str(tmp_path / "v.json"))
    assert done.returncode == 1 and "verdict: REGRESSION" in done.stdout
    assert json.loads((tmp_path / "v.json").read_text())["verdict"] == "regression"
    assert "## ddpbench gate: REGRESSION" in (tmp_path / "s.md").read_text()
    # Identical runs of only 14 timed steps: not a regression, but too short to be sure of 5 %.
    same = ddpbench("gate", "--baseline", SWEEP, "--candidate", SWEEP, "--metrics", "throughput")
    assert same.returncode == 3 and "verdict: INCONCLUSIVE" in same.stdout and "REGRESSION" not in same.stdout
    faster = ddpbench("gate", "--baseline", SWEEP, "--candidate", scaled_copy(tmp_path, "fast", 0.6),
                      "--metrics", "throughput")
    assert faster.returncode == 0 and "improvement" in faster.stdout
    edge = scaled_copy(tmp_path, "edge", 1.05)
    inconclusive = ddpbench("gate", "--baseline", SWEEP, "--candidate", edge, "--metrics", "throughput",
                            "--run-noise", "0")
    assert inconclusive.returncode == 3 and "verdict: INCONCLUSIVE" in inconclusive.stdout
    mapped = ddpbench("gate", "--baseline", SWEEP, "--candidate", edge, "--metrics", "throughput", "--inconclusive", "pass")
    assert mapped.returncode == 0


@pytest.mark.parametrize("args, message", [
    (["--max-regression", "five"], "5, 5% or 0.05"),
    (["--metrics", "latency"], "unknown metric 'latency'"),
])
def test_gate_usage_errors(args, message):
    done = ddpbench("gate", "--baseline", SWEEP, "--candidate", SWEEP, *args)
    assert done.returncode == 2 and message in done.stderr


def test_gate_input_errors(tmp_path):
    empty = tmp_path / "empty"
    (empty / "runs").mkdir(parents=True)
    done = ddpbench("gate", "--baseline", str(empty), "--candidate", SWEEP)
    assert done.returncode == 2 and "no successful run records" in done.stderr
    other = tmp_path / "other"
    shutil.copytree(SWEEP, other)
    for path in (other / "runs").iterdir():
        record = json.loads(path.read_text())
        record["spec"]["batch_size"] = 999
        path.write_text(json.dumps(record))
    done = ddpbench("gate", "--baseline", SWEEP, "--candidate", str(other))
    assert done.returncode == 2 and "no run of the candidate matches" in done.stderr
    corrupt = tmp_path / "corrupt"
    shutil.copytree(SWEEP, corrupt)
    (corrupt / "runs" / "broken-ddp-n1.json").write_text("{")
    done = ddpbench("gate", "--baseline", SWEEP, "--candidate", str(corrupt), "--metrics", "throughput")
    assert done.returncode in (0, 3) and "skipped unreadable record" in done.stdout


def test_baseline_save_and_auto(tmp_path):
    done = ddpbench("baseline", "save", SWEEP, "--baselines", str(tmp_path / "baselines"))
    assert done.returncode == 0
    saved = done.stdout.split("baseline saved: ")[1].strip()
    assert saved.startswith(str(tmp_path / "baselines" / "cpu-")) and saved.endswith("/custom")
    assert sorted(os.listdir(os.path.join(saved, "runs"))) == sorted(os.listdir(os.path.join(SWEEP, "runs")))


def test_pytest_benchmark_export_round_trip(tmp_path):
    output = tmp_path / "0001_ddpbench.json"
    done = ddpbench("export", "--format", "pytest-benchmark", SWEEP, "-o", str(output))
    assert done.returncode == 0
    saved = json.loads(output.read_text())
    assert {"machine_info", "commit_info", "benchmarks", "datetime", "version"} <= set(saved)
    bench = {b["name"]: b for b in saved["benchmarks"]}["mlp[ddp-n2]"]
    record = json.load(open(os.path.join(SWEEP, "runs", "mlp-ddp-n2.json")))
    iterations = np.max([r["step_times_s"] for r in record["ranks"]], axis=0)
    assert bench["stats"]["data"] == pytest.approx(list(iterations))
    assert bench["stats"]["median"] == pytest.approx(float(np.median(iterations)))
    assert bench["extra_info"]["world_size"] == 2 and bench["extra_info"]["strategy"] == "ddp"
    # pytest-benchmark's own compare reads it and tabulates every run.
    compared = subprocess.run([sys.executable, "-m", "pytest_benchmark", "compare", str(output), "--group-by", "group"],
                              capture_output=True, text=True)
    assert compared.returncode == 0, compared.stderr
    for name in ("mlp[local-n1]", "mlp[ddp-n2]", "mlp[dp-n2]"):
        assert name in compared.stdout
