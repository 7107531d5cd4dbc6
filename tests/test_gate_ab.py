"""Same-job A/B: the paired test on saved records with a known drift and a known slowdown, bad
input refused before anything runs, and one real two-round job."""

import json
import os
import sys

import msgspec
import pytest
from chance import Known
from chance import verdict as holds
from conftest import REPO, ddpbench, ddpbench_process
from test_gate import SWEEP

from ddpbench.gate.ab import paired_comparisons
from ddpbench.gate.compare import load_side
from ddpbench.gate.stats import GateSettings

DRIFT = [1.0, 1.3, 0.85, 1.15, 0.95]  # the machine's load, round by round: far more than the effect


def rounds_of(slowdown, broken_round=None):
    record = next(r for r in load_side(SWEEP) if r.run_id == "mlp-ddp-n2")
    pairs = []
    for index, drift in enumerate(DRIFT):
        sides = []
        for factor in (drift, drift * slowdown * (1.002 if index % 2 else 0.998)):
            copy = msgspec.structs.replace(
                record,
                metrics=msgspec.structs.replace(
                    record.metrics, throughput_units_per_s=record.metrics.throughput_units_per_s / factor
                ),
            )
            sides.append(copy)
        if index == broken_round:
            sides[1] = msgspec.structs.replace(sides[1], status="failed")
        pairs.append(tuple(sides))
    return pairs


def test_paired_rounds_see_through_drift():
    comparisons, _ = paired_comparisons(rounds_of(1.0), GateSettings(), allow_failed=False)
    throughput = next(c for c in comparisons if c.measure == "throughput")
    assert throughput.verdict == "pass" and throughput.paired and throughput.noise_source == "5 paired rounds"
    comparisons, _ = paired_comparisons(rounds_of(1.10), GateSettings(), allow_failed=False)
    throughput = next(c for c in comparisons if c.measure == "throughput")
    assert throughput.verdict == "regression" and throughput.ratio == pytest.approx(1 / 1.10, rel=0.01)
    # not chance: synthetic rounds, fixed numbers
    assert throughput.mde < 0.10 and throughput.sees_threshold


def test_a_failed_round_fails_the_job_unless_allowed():
    comparisons, _ = paired_comparisons(rounds_of(1.0, broken_round=2), GateSettings(), allow_failed=False)
    assert any(c.verdict == "not comparable" and "round 3" in c.note for c in comparisons)
    comparisons, notes = paired_comparisons(rounds_of(1.0, broken_round=2), GateSettings(), allow_failed=True)
    assert all(c.verdict == "pass" for c in comparisons) and any("round 3" in n for n in notes)
    assert next(c for c in comparisons if c.measure == "throughput").candidate_runs == 4


@pytest.mark.parametrize(
    "args, message",
    [
        (["--rounds", "1"], "--rounds must be at least 2"),
        (["--max-regression", "0"], "between 0 and 100"),
    ],
)
def test_ab_bad_options_write_nothing(tmp_path, args, message):
    done = ddpbench(
        "ab",
        sys.executable,
        sys.executable,
        "--out",
        str(tmp_path / "ab"),
        *args,
        "--",
        "--workload",
        "mlp",
        "--strategy",
        "local",
    )
    assert done.returncode == 2 and message in done.stderr and len(done.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "ab").exists()


def test_ab_environments_must_both_import_torch(tmp_path):
    not_python = tmp_path / "nothing-here"
    done = ddpbench(
        "ab",
        sys.executable,
        str(not_python),
        "--out",
        str(tmp_path / "ab"),
        "--",
        "--workload",
        "mlp",
        "--strategy",
        "local",
    )
    assert done.returncode == 2 and "neither a Python executable nor a ddpbench working tree" in done.stderr
    bare = tmp_path / "bare-venv"
    os.makedirs(bare / "bin")
    os.symlink(sys.base_prefix + "/bin/python3", bare / "bin" / "python")  # a Python without torch
    done = ddpbench(
        "ab",
        sys.executable,
        str(bare / "bin" / "python"),
        "--out",
        str(tmp_path / "ab"),
        "--",
        "--workload",
        "mlp",
        "--strategy",
        "local",
        env={"PYTHONNOUSERSITE": "1"},
    )
    assert done.returncode == 2 and "cannot import torch and ddpbench" in done.stderr
    assert not (tmp_path / "ab").exists()


def test_ab_bad_run_options_are_refused_before_anything_runs(tmp_path):
    done = ddpbench("ab", sys.executable, sys.executable, "--out", str(tmp_path / "ab"), "--", "--workload", "nosuch")
    assert done.returncode == 2 and "nosuch" in done.stderr and not (tmp_path / "ab").exists()


@pytest.mark.launches
def test_a_real_ab_job_alternates_and_gates(tmp_path):
    out = tmp_path / "ab"
    done = ddpbench_process(
        "ab",
        sys.executable,
        REPO,
        "--rounds",
        "2",
        "--out",
        str(out),
        "--json",
        str(tmp_path / "v.json"),
        "--family-alpha",
        "0.0001",
        "--",
        "--workload",
        "mlp",
        "--strategy",
        "local",
        "--steps",
        "12",
        "--warmup",
        "2",
        "--no-profile",
        timeout=600,
    )
    # Unchanged code: a pass, or, where two rounds' noise makes B look slower than the threshold
    # without significance, inconclusive (exit 3, with its sentence); never a regression (exit 1 is
    # the family's false alarm, --family-alpha).
    holds(
        done.returncode in (0, 3),
        rate=1e-4,
        shown=Known(1e-4, "--family-alpha 0.0001: the gate's false alarm on unchanged code, its comparisons together"),
        what=done.stdout + done.stderr,
    )
    if done.returncode == 3:
        # not chance: exit 3 is the inconclusive verdict, which always prints its sentence
        assert "inconclusive: " in done.stdout and "rounds would decide it" in done.stdout, done.stdout
    lines = [line for line in done.stderr.splitlines() if line.startswith("round ")]
    assert [line.split(":")[0] for line in lines] == ["round 1/2 A", "round 1/2 B", "round 2/2 A", "round 2/2 B"]
    assert sorted(os.listdir(out / "a" / "runs")) == ["a-r01.json", "a-r02.json"]
    verdict = json.loads((tmp_path / "v.json").read_text())
    throughput = next(c for c in verdict["comparisons"] if c["measure"] == "throughput")
    # not chance: a detectable effect is positive by its formula
    assert throughput["paired"] and throughput["candidate_runs"] == 2 and throughput["mde"] > 0
    # Two rounds on a loaded machine may need more than 1000 rounds to see 5 %: then it says so.
    # not chance: the rule never asks for fewer rounds than it had
    assert throughput["runs_needed"] is None or throughput["runs_needed"] >= 2
    # not chance: the sight names the rounds needed wherever the comparison does not see the target
    assert "rounds would be needed" in throughput["sight"] or throughput["sees_threshold"]


def test_a_confirmation_splits_alpha_over_the_measures_it_confirms_only(monkeypatch, tmp_path):
    """One configuration flagged on throughput alone: its confirmation is one test, at the whole
    family alpha (it was split over both A/B measures, half as likely to confirm)."""
    from ddpbench.gate import confirm as confirming
    from ddpbench.gate.ab import Side
    from ddpbench.gate.compare import Comparison

    pairs = rounds_of(1.10)
    record = pairs[0][0]
    configuration = confirming.describe(confirming.run_key(record))
    flagged = [
        Comparison(configuration, "throughput", "regression"),
        Comparison(configuration, "exposed_share", "pass"),
    ]
    monkeypatch.setattr(confirming, "run_ab", lambda *args, **kwargs: pairs)
    side = Side("A", "base", sys.executable, REPO)
    settings = GateSettings()
    result = confirming.confirm(flagged, [record], side, side, 5, str(tmp_path), settings, progress=lambda _: None)
    tested = [c for c in result.comparisons if c.alpha is not None]
    assert [c.measure for c in tested] == ["throughput"]
    assert tested[0].alpha == settings.family_alpha and tested[0].verdict == "regression"


def test_a_round_that_never_ends_is_ended_at_the_round_timeout(monkeypatch, tmp_path):
    """A side whose ddpbench never reaches its own run timeout (it hangs before): the round is sent
    SIGTERM (which `ddpbench run` answers by ending torchrun and its ranks), and has no record."""
    from ddpbench.gate import ab

    hanging = tmp_path / "python"
    hanging.write_text(f"#!/bin/sh\ntrap 'echo ended > {tmp_path}/ended; exit 143' TERM\nwhile :; do sleep 0.1; done\n")
    hanging.chmod(0o755)
    monkeypatch.setattr(ab, "ROUND_TIMEOUT_S", 1.0)
    side = ab.Side("A", "hangs", str(hanging), REPO)
    path, code = ab.run_round(side, ["--workload", "mlp"], str(tmp_path / "out"), 1)
    assert code == ab.ROUND_TIMED_OUT and not os.path.exists(path)
    assert (tmp_path / "ended").read_text().strip() == "ended"  # it was asked to end, not just killed
    assert ab.round_timeout(["--run-timeout", "300"]) == 900.0 and ab.round_timeout(["--run-timeout=60"]) == 660.0


def test_each_round_of_an_environments_script_runs_in_an_empty_folder_of_its_own(tmp_path):
    """An environment's rounds all started in its ddpbench tree (both sides in this checkout, for two
    Pythons): a script writing where it runs left its checkpoint there, for the next round and the
    other side. A script's round now starts in an empty folder, removed after it, the script found
    from the environment's tree as before. A workload file's round still starts in the tree: its
    relative path is kept as given in the record, which names the configuration."""
    from ddpbench.gate import ab

    seen = tmp_path / "seen"
    runs = tmp_path / "python"
    runs.write_text(f"#!/bin/sh\n(pwd; ls -A | tr '\\n' ' '; echo; echo \"$@\") >> {seen}\necho 1 > snapshot.pt\n")
    runs.chmod(0o755)
    code = tmp_path / "checkout"  # an environment's ddpbench tree
    code.mkdir()
    sides = [ab.Side(name, "env", str(runs), str(code)) for name in "AB"]
    run_args = ["--script", "train.py", "--nproc", "1", "--", "--script", "x.py", "--out", "ckpt"]
    for index in (1, 2):
        for side in sides:
            ab.run_round(side, run_args, str(tmp_path / "out"), index)
    said = seen.read_text().splitlines()
    folders, found, argv = said[0::3], said[1::3], said[2::3]
    assert len(folders) == 4 and len(set(folders)) == 4 and str(code) not in folders, folders
    assert found == [""] * 4 and not any(os.path.exists(folder) for folder in folders)
    assert not (code / "snapshot.pt").exists()
    assert all(line.startswith(f"-m ddpbench run --script {code}/train.py --nproc 1 --out ") for line in argv), argv
    assert all(line.endswith("-- --script x.py --out ckpt") for line in argv), argv  # the script's own words
    ab.run_round(sides[0], ["--workload", "w.py:net"], str(tmp_path / "out"), 3)
    assert seen.read_text().splitlines()[-3] == str(code) and (code / "snapshot.pt").exists()  # a workload: as it was
    assert ab.script_from("/env", ["--script=/abs/t.py", "--", "x"]) == ["--script=/abs/t.py", "--", "x"]
