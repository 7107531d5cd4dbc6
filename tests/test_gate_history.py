"""History of nightly sweeps, change points in it (Apache Otava, or the fallback rule), the gate
against the history, and the report's history section: on copies of the fixture sweep whose
speed is changed by known factors."""

import os

import numpy as np
import pytest
from conftest import ddpbench
from test_gate import OK_RUNS, SWEEP, scaled_copy

from ddpbench.gate import changepoints
from ddpbench.gate.history import add_sweep, read_history

NO_OTAVA = {"DDPBENCH_OTAVA_PYTHON": "/nonexistent/python"}


def nightly_history(tmp_path, levels, seed=0, spread=0.02):
    """One sweep per level (a slowdown factor), each run with its own noise, added to a history."""
    rng = np.random.default_rng(seed)
    root = tmp_path / "history"
    folder = None
    for night, level in enumerate(levels):
        noise = {run: float(np.exp(rng.normal(0, spread))) for run in OK_RUNS}
        sweep = scaled_copy(
            tmp_path,
            f"night-{night:02d}",
            lambda run_id, level=level, noise=noise: level * noise.get(run_id, 1.0),
            keep=OK_RUNS,
            edit=lambda r, n=night: r.update(ended_at=f"2026-11-{n + 1:02d}T02:00:00+00:00"),
        )
        folder, _ = add_sweep(sweep, str(root))
    return folder


def test_history_add_writes_one_plain_file_per_configuration(tmp_path):
    done = ddpbench("history", "add", SWEEP, "--history", str(tmp_path / "history"))
    assert done.returncode == 0, done.stderr
    folder = done.stdout.split("history updated: ")[1].strip()
    assert folder.startswith(str(tmp_path / "history" / "cpu-")) and folder.endswith("custom")
    assert "left out broken-ddp-n2 (failed)" in done.stdout
    series = read_history(folder)
    assert len(series) == 5 and all(len(s.rows) == 1 for s in series.values())
    text = open(sorted(s.path for s in series.values())[0]).read()
    assert text.startswith("# ddpbench history 1: mlp/tiny") and "ended_at,sweep,run_id,git_sha,throughput" in text
    again = ddpbench("history", "add", SWEEP, "--history", str(tmp_path / "history"))
    assert again.returncode == 0 and all(len(s.rows) == 1 for s in read_history(folder).values())  # no duplicates


def test_fallback_rule_finds_a_known_step_and_nothing_in_noise():
    rng = np.random.default_rng(5)
    steady = list(np.exp(rng.normal(0, 0.03, 24)) * 100)
    assert changepoints.fallback_change_points(steady) == []
    stepped = steady[:12] + [v * 0.8 for v in steady[12:]]
    assert changepoints.fallback_change_points(stepped) == [12]


@pytest.mark.skipif(
    changepoints.otava_python() is None and not os.environ.get("DDPBENCH_REQUIRE_OTAVA"),
    reason="Apache Otava is not installed here (make otava-venv creates .venv-otava)",
)
def test_otava_finds_the_same_step():
    # CI builds .venv-otava and sets DDPBENCH_REQUIRE_OTAVA, so there this test runs or fails.
    assert changepoints.otava_python() is not None, "DDPBENCH_REQUIRE_OTAVA is set but Otava is not installed"
    rng = np.random.default_rng(5)
    values = list(np.exp(rng.normal(0, 0.03, 24)) * 100)
    values = values[:12] + [v * 0.8 for v in values[12:]]
    key = ("mlp", "tiny", "ddp", 2)  # series are named by configuration keys, not only strings
    found, method = changepoints.change_points({key: values, "short": values[:3]})
    assert method.startswith("Apache Otava") and found == {key: [12], "short": []}


def test_history_changes_and_the_gate_against_the_history(tmp_path):
    folder = nightly_history(tmp_path, [1.0] * 8 + [1.3] * 8)
    done = ddpbench("history", "changes", folder, env=NO_OTAVA)
    assert done.returncode == 0 and "fallback rule" in done.stdout, done.stderr
    assert done.stdout.count("change points: run 9 (night-08") == 5  # every configuration slowed on night 8
    # Against the history since its change point: the new normal passes, a further slowdown fails.
    same = scaled_copy(tmp_path, "same", 1.3, keep=OK_RUNS)
    done = ddpbench(
        "gate",
        "--baseline",
        "history",
        "--candidate",
        same,
        "--history-folder",
        folder,
        "--json",
        str(tmp_path / "v.json"),
        env=NO_OTAVA,
    )
    assert done.returncode == 0 and "verdict: PASS" in done.stdout, done.stdout + done.stderr
    assert "history since each series' last change point" in done.stdout
    assert "history (8 runs)" in (tmp_path / "v.json").read_text()
    missing = scaled_copy(tmp_path, "missing", 1.3, keep=OK_RUNS[:-1])
    done = ddpbench("gate", "--baseline", "history", "--candidate", missing, "--history-folder", folder, env=NO_OTAVA)
    assert done.returncode == 1 and "in the history's latest sweep (night-15) but missing" in done.stdout
    slower = scaled_copy(tmp_path, "slower", 1.3 * 1.25, keep=OK_RUNS)
    done = ddpbench("gate", "--baseline", "history", "--candidate", slower, "--history-folder", folder, env=NO_OTAVA)
    assert done.returncode == 1 and "verdict: REGRESSION" in done.stdout


def test_history_report_section(tmp_path):
    from ddpbench.gate.history import history_frame

    folder = nightly_history(tmp_path, [1.0] * 6 + [1.4] * 6, seed=1)
    os.environ.update(NO_OTAVA)
    try:
        frame, method = history_frame(folder)
    finally:
        del os.environ["DDPBENCH_OTAVA_PYTHON"]
    assert "fallback rule" in method and frame["change"].sum() == 5 and set(frame[frame["change"]]["position"]) == {7}
    # The report of a sweep of that machine class and suite shows it, from the default history root.
    work = tmp_path / "work"
    (work / "results").mkdir(parents=True)
    os.rename(tmp_path / "history", work / "results" / "history")
    done = ddpbench("report", SWEEP, "-o", str(work / "r.html"), cwd=str(work), env=NO_OTAVA)
    assert done.returncode == 0, done.stderr
    page = (work / "r.html").read_text()
    assert "<h2>History</h2>" in page or ">History<" in page
    assert "change points by fallback rule" in page


@pytest.mark.parametrize(
    "content, message",
    [
        ("hello,world\n1,2\n", "not a ddpbench history file"),
        (
            '# ddpbench history 1: x | ["mlp"]\nended_at,sweep,run_id,git_sha,throughput,efficiency,exposed_share\n'
            "t,s,r,g,fast,,\n",
            "not a number",
        ),
    ],
)
def test_a_history_file_that_is_not_one_is_refused(tmp_path, content, message):
    bad = tmp_path / "bad.csv"
    bad.write_text(content)
    done = ddpbench("history", "changes", str(bad))
    errors = [line for line in done.stderr.strip().splitlines() if not line.startswith("warning: ")]
    assert done.returncode == 2 and message in done.stderr and len(errors) == 1  # beside the deprecation


def test_a_series_too_short_for_change_points_is_refused(tmp_path):
    folder = nightly_history(tmp_path, [1.0] * 3)
    done = ddpbench("history", "changes", folder)
    assert done.returncode == 2 and "too short for change points" in done.stderr


def test_history_add_of_nothing_writes_nothing(tmp_path):
    empty = tmp_path / "empty"
    (empty / "runs").mkdir(parents=True)
    done = ddpbench("history", "add", str(empty), "--history", str(tmp_path / "history"))
    assert done.returncode == 2 and "no successful run records" in done.stderr
    assert not (tmp_path / "history").exists()


def test_the_csv_history_options_are_deprecated_and_name_the_store(tmp_path):
    """One history option, --store: the CSV ones still work but say what replaces them."""
    done = ddpbench("history", "add", SWEEP, "--history", str(tmp_path / "history"))
    assert done.returncode == 0, done.stderr
    assert "warning: history add --history is deprecated" in done.stderr and "--store" in done.stderr
    folder = done.stdout.split("history updated: ")[1].strip()
    done = ddpbench("gate", "--baseline", SWEEP, "--candidate", SWEEP, "--history-folder", folder, env=NO_OTAVA)
    assert "warning: gate --history-folder is deprecated" in done.stderr and "history import" in done.stderr
    done = ddpbench("history", "changes", nightly_history(tmp_path / "nights", [1.0] * 6), env=NO_OTAVA)
    assert done.returncode == 0, done.stderr
    assert "warning: history changes PATH" in done.stderr and "--store" in done.stderr
    assert "results/history/<" not in ddpbench("history", "add", "--help").stdout


def test_history_add_writes_to_the_store_by_default(tmp_path):
    done = ddpbench("history", "add", SWEEP, cwd=str(tmp_path), env={"DDPBENCH_HISTORY": ""})
    assert done.returncode == 0, done.stderr
    assert "warning" not in done.stderr
    assert (tmp_path / "results" / "history.sqlite").exists() and not (tmp_path / "results" / "history").exists()
