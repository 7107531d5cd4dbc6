"""History rows carry their own run's values, and the gate never counts a run twice: not as its own
baseline (a candidate already added to the history) and not twice in the noise estimate (a
baseline or candidate whose runs are also in the history). On records made from the fixture sweep
with known values; nothing is launched."""

import json
import os

import pytest
from conftest import ddpbench
from test_gate import OK_RUNS, SWEEP, scaled_copy
from test_gate_history import NO_OTAVA, nightly_history

from ddpbench.gate.baselines import save_baseline
from ddpbench.gate.history import add_sweep, read_history


def fixture_record(run_id: str) -> dict:
    with open(os.path.join(SWEEP, "runs", f"{run_id}.json"), encoding="utf-8") as handle:
        return json.load(handle)


def repeat_of(
    run_id: str, repeat: int, started_at: str, ended_at: str, throughput: float, exposed: float | None, git_sha: str
) -> dict:
    """A fixture run as repeat `repeat` of a sweep, with the given throughput, exposed share (None:
    no no_sync replay, so no exposed share) and commit."""
    record = fixture_record(run_id)
    record.update(run_id=f"{run_id}-r{repeat}", started_at=started_at, ended_at=ended_at)
    record["metrics"]["throughput_units_per_s"] = record["metrics"]["throughput_samples_per_s"] = throughput
    record["env"]["git_sha"] = git_sha
    if exposed is None:
        record["overlap"] = None
    else:
        for view in record["overlap"]["no_sync"]["by_rank"]:
            view["exposed_comm_s"] = exposed * view["step_time_median_s"]
    return record


def write_sweep(folder, records: list[dict]) -> str:
    (folder / "runs").mkdir(parents=True)
    for record in records:
        (folder / "runs" / f"{record['run_id']}.json").write_text(json.dumps(record))
    return str(folder)


# Repeats 1, 2 and 10 of a `--repeat 10` sweep: started in that order, but their files sort as
# r1, r10, r2. Per repeat: (local throughput, DDP x2 throughput, DDP exposed share or None).
REPEATS = {1: (100.0, 150.0, 0.20), 2: (200.0, 330.0, None), 10: (400.0, 700.0, 0.40)}


def expected_rows() -> dict[str, dict]:
    rows = {}
    # E(2) of a repeat: its X over 2 times X(1) pooled over the sweep's local runs (the answers
    # model's X(1)), so the rows' mean is the E(2) the table shows.
    pooled_local = sum(local for local, _, _ in REPEATS.values()) / len(REPEATS)
    for repeat, (local, ddp, exposed) in REPEATS.items():
        hour = {1: 1, 2: 2, 10: 3}[repeat]
        rows[f"mlp-local-n1-r{repeat}"] = {
            "throughput": local,
            "efficiency": None,
            "exposed_share": None,
            "git_sha": f"sha-local-{repeat}",
            "ended_at": f"2026-12-01T0{hour}:01:00",
        }
        rows[f"mlp-ddp-n2-r{repeat}"] = {
            "throughput": ddp,
            "efficiency": ddp / (2 * pooled_local),
            "exposed_share": exposed,
            "git_sha": f"sha-ddp-{repeat}",
            "ended_at": f"2026-12-01T0{hour}:31:00",
        }
    return rows


def repeated_sweep(tmp_path) -> str:
    records = []
    for repeat, (local, ddp, exposed) in REPEATS.items():
        hour = {1: 1, 2: 2, 10: 3}[repeat]
        records.append(
            repeat_of(
                "mlp-local-n1",
                repeat,
                f"2026-12-01T0{hour}:00:00",
                f"2026-12-01T0{hour}:01:00",
                local,
                None,
                f"sha-local-{repeat}",
            )
        )
        records.append(
            repeat_of(
                "mlp-ddp-n2",
                repeat,
                f"2026-12-01T0{hour}:30:00",
                f"2026-12-01T0{hour}:31:00",
                ddp,
                exposed,
                f"sha-ddp-{repeat}",
            )
        )
    return write_sweep(tmp_path / "repeats", records)


def test_every_history_row_carries_its_own_runs_values(tmp_path):
    done = ddpbench("history", "add", repeated_sweep(tmp_path), "--history", str(tmp_path / "history"))
    assert done.returncode == 0, done.stderr
    series = read_history(done.stdout.split("history updated: ")[1].strip())
    rows = [row for one in series.values() for row in one.rows]
    expected = expected_rows()
    assert sorted(row["run_id"] for row in rows) == sorted(expected)
    for row in rows:
        own = expected[row["run_id"]]
        assert row["sweep"] == "repeats" and row["git_sha"] == own["git_sha"], row
        assert row["ended_at"] == own["ended_at"], row
        for measure in ("throughput", "efficiency", "exposed_share"):
            if own[measure] is None:
                assert row[measure] is None, (row["run_id"], measure, row[measure])
            else:
                assert row[measure] == pytest.approx(own[measure]), (row["run_id"], measure, row[measure])


def test_a_run_without_a_throughput_is_left_out_with_a_note(tmp_path):
    records = [
        repeat_of("mlp-local-n1", 1, "2026-12-01T01:00:00", "2026-12-01T01:01:00", 100.0, None, "a"),
        repeat_of("mlp-local-n1", 2, "2026-12-01T02:00:00", "2026-12-01T02:01:00", 0.0, None, "b"),
    ]
    folder, notes = add_sweep(write_sweep(tmp_path / "sweep", records), str(tmp_path / "history"))
    assert any("mlp-local-n1-r2" in note and "throughput" in note for note in notes), notes
    rows = [row for one in read_history(folder).values() for row in one.rows]
    assert [(row["run_id"], row["throughput"]) for row in rows] == [("mlp-local-n1-r1", 100.0)]


def tonight(tmp_path, name: str, factor: float, day: int) -> str:
    return scaled_copy(
        tmp_path,
        name,
        factor,
        keep=OK_RUNS,
        edit=lambda record: record.update(ended_at=f"2026-12-{day:02d}T02:00:00+00:00"),
    )


def test_a_candidate_already_in_the_history_is_not_its_own_baseline(tmp_path):
    folder = nightly_history(tmp_path, [1.0] * 8)
    candidate = tonight(tmp_path, "tonight", 1.5, 1)
    add_sweep(candidate, str(tmp_path / "history"))  # added before gating: its rows are in the history now
    verdict_file = tmp_path / "v.json"
    done = ddpbench(
        "gate",
        "--baseline",
        "history",
        "--candidate",
        candidate,
        "--history-folder",
        folder,
        "--metrics",
        "throughput",
        "--json",
        str(verdict_file),
        env=NO_OTAVA,
    )
    verdict = json.loads(verdict_file.read_text())
    throughput = [c for c in verdict["comparisons"] if c["measure"] == "throughput"]
    assert len(throughput) == 5, done.stdout + done.stderr
    # The eight nights before it, not nine: the candidate is not compared with itself.
    assert all(c["baseline_runs"] == 8 and c["noise_source"].startswith("history (8 runs)") for c in throughput)
    assert any("5 history row(s)" in note and "candidate's own runs" in note for note in verdict["notes"])
    # What was left out is the candidate's: the latest sweep the candidate must cover is the night before.
    assert "missing from the candidate" not in done.stdout
    assert done.returncode == 1 and verdict["verdict"] == "regression"  # 1.5 times slower than those nights


def test_a_history_that_holds_only_the_candidate_is_refused(tmp_path):
    candidate = tonight(tmp_path, "tonight", 1.0, 1)
    folder, _ = add_sweep(candidate, str(tmp_path / "history"))
    done = ddpbench("gate", "--baseline", "history", "--candidate", candidate, "--history-folder", folder)
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stdout + done.stderr
    assert "ddpbench gate: error:" in done.stderr and "candidate's own runs" in done.stderr


@pytest.mark.parametrize("saved", [False, True], ids=["baseline sweep", "stored baseline (a copy)"])
def test_runs_in_both_a_side_and_the_history_count_once_in_the_noise(tmp_path, saved):
    """Baseline: 3 repeats of one configuration; history: 8 nights of it plus the baseline's and the
    candidate's runs. Degrees of freedom: 2 (baseline repeats) + 0 (one candidate run) + 7 (the
    eight nights), not 2 + 10 with the baseline's and the candidate's runs counted again. A stored
    baseline is a copy under another folder name: its runs are still recognised (by end time)."""
    nights = nightly_history(tmp_path, [1.0] * 8)
    root = str(tmp_path / "history")
    baseline = write_sweep(
        tmp_path / "baseline",
        [
            repeat_of(
                "mlp-ddp-n2",
                repeat,
                f"2026-12-01T0{repeat}:00:00",
                f"2026-12-01T0{repeat}:01:00",
                fixture_record("mlp-ddp-n2")["metrics"]["throughput_units_per_s"] * (1 + 0.01 * repeat),
                0.3,
                "b",
            )
            for repeat in (1, 2, 3)
        ],
    )
    candidate = tonight(tmp_path, "tonight", 1.0, 2)
    for sweep in (baseline, candidate):
        add_sweep(sweep, root)
    if saved:
        baseline = save_baseline(baseline, str(tmp_path / "baselines"))
    verdict_file = tmp_path / "v.json"
    done = ddpbench(
        "gate",
        "--baseline",
        baseline,
        "--candidate",
        candidate,
        "--history-folder",
        nights,
        "--metrics",
        "throughput",
        "--json",
        str(verdict_file),
        env=NO_OTAVA,
    )
    assert done.returncode in (0, 3), done.stdout + done.stderr
    verdict = json.loads(verdict_file.read_text())
    [compared] = [c for c in verdict["comparisons"] if c["measure"] == "throughput"]
    assert compared["configuration"].startswith("mlp/") and " ddp x2 " in compared["configuration"]
    assert compared["baseline_runs"] == 3 and compared["candidate_runs"] == 1
    assert compared["noise_source"] == "baseline repeats (3 runs) + history (8 runs)"
    assert compared["df"] == 9
