"""Stored data of the wrong shape, fed to every command that reads it: a run file where a sweep
folder belongs and the other way round, an empty folder, a truncated record, a profile of the
wrong kind. Each is one line on stderr, `ddpbench <command>: error: ...`, exit code 2, no
traceback. In-process through `ddpbench.cli.main` (fast); two cases as a real subprocess to show
that nothing reaches the terminal but that line."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest
from conftest import FIXTURES, ddpbench_process

from ddpbench.cli import main

SWEEP = os.path.join(FIXTURES, "sweeps", "cpu-mlp-with-failure")
RUN = os.path.join(SWEEP, "runs", "mlp-ddp-n2.json")
DDP_RUN = os.path.join(FIXTURES, "projection", "mlp2.json")
PROFILE = os.path.join(FIXTURES, "projection", "gloo-profile.json")


@pytest.fixture(scope="module")
def bad(tmp_path_factory) -> dict[str, str]:
    """Valid files broken one way each, by name."""
    folder = tmp_path_factory.mktemp("bad-input")
    paths = {
        "empty": str(folder / "empty"),
        "truncated": str(folder / "truncated.json"),
        "truncated sweep": str(folder / "truncated-sweep"),
    }
    os.makedirs(paths["empty"])
    with open(RUN, encoding="utf-8") as handle:
        text = handle.read()
    (folder / "truncated.json").write_text(text[: len(text) // 2])
    os.makedirs(os.path.join(paths["truncated sweep"], "runs"))
    shutil.copy(os.path.join(SWEEP, "manifest.json"), paths["truncated sweep"])
    (folder / "truncated-sweep" / "runs" / "mlp-ddp-n2.json").write_text(text[:300])
    with open(PROFILE, encoding="utf-8") as handle:
        profile = json.load(handle)
    for name, edit in (
        ("no fabric field", lambda p: p["fabric"].pop("intra_busbw")),
        ("fractional world size", lambda p: p["fits"][0].update(world_size=2.5)),
        ("world size as text", lambda p: p["fits"][0].update(world_size="2.5")),
    ):
        broken = json.loads(json.dumps(profile))
        edit(broken)
        paths[name] = str(folder / f"{name.replace(' ', '-')}.json")
        with open(paths[name], "w", encoding="utf-8") as handle:
            json.dump(broken, handle)
    return paths


# (command line with {placeholders} for the broken files, what the one line must say)
CASES = [
    (["table", RUN], "is not a folder"),
    (["table", "{empty}"], "holds no run records"),
    (["table", "{truncated}"], "is not a folder"),
    (["table", "{truncated sweep}"], "holds no readable run record (1 unreadable"),
    (["report", RUN, "-o", "{out}/r.html"], "is not a sweep folder"),
    (["report", "{empty}", "-o", "{out}/r.html"], "holds no run records"),
    (["report", "{truncated}", "-o", "{out}/r.html"], "is not a sweep folder"),
    (["report", SWEEP, "-o", "{out}/r.html", "--network", RUN], "is not a network profile"),
    (["report", SWEEP, "-o", "{out}/r.html", "--network", "{no fabric field}"], "the fabric lacks intra_busbw"),
    (
        ["report", SWEEP, "-o", "{out}/r.html", "--network", "{fractional world size}"],
        "world_size must be a whole number",
    ),
    (["gate", "--baseline", "auto", "--candidate", RUN], "--baseline auto needs a sweep folder as --candidate"),
    (["gate", "--baseline", SWEEP, "--candidate", "{empty}"], "holds no successful run records"),
    (["gate", "--baseline", SWEEP, "--candidate", "{truncated}"], "not a readable record"),
    (["gate", "--baseline", "{truncated sweep}", "--candidate", SWEEP], "holds no successful run records"),
    (["history", "add", RUN, "--history", "{out}/h"], "is not a sweep folder"),
    (["history", "add", "{empty}", "--history", "{out}/h"], "holds no successful run records"),
    (["history", "add", "{truncated sweep}", "--history", "{out}/h"], "holds no successful run records"),
    (["history", "changes", RUN], "not a ddpbench history file"),
    (["history", "changes", SWEEP], "scaling.csv: not a ddpbench history file"),
    (["history", "changes", "{empty}"], "holds no history series"),
    (["history", "changes", "{truncated}"], "not a ddpbench history file"),
    (["history", "baseline", RUN, "--baselines", "{out}/b"], "is not a sweep folder"),
    (["history", "baseline", "{empty}", "--baselines", "{out}/b"], "holds no successful run records"),
    (["history", "baseline", "{truncated sweep}", "--baselines", "{out}/b"], "holds no successful run records"),
    (["report", RUN, "--format", "pytest-benchmark", "-o", "{out}/e.json"], "is not a sweep folder"),
    (["report", "{empty}", "--format", "pytest-benchmark", "-o", "{out}/e.json"], "holds no successful run records"),
    (
        ["report", "{truncated sweep}", "--format", "pytest-benchmark", "-o", "{out}/e.json"],
        "holds no successful run records",
    ),
    (["project", SWEEP, "--world", "4", "--network", "ib-100g"], "holds 10 records; name one record file"),
    (["project", "{empty}", "--world", "4", "--network", "ib-100g"], "holds 0 records"),
    (["project", "{truncated}", "--world", "4", "--network", "ib-100g"], "not JSON"),
    (["project", DDP_RUN, "--world", "4", "--network", RUN], "is not a network profile"),
    (["project", DDP_RUN, "--world", "4", "--network", "{empty}"], "neither a file nor a preset"),
    (["project", DDP_RUN, "--world", "4", "--network", "{truncated}"], "is not readable JSON"),
    (
        ["project", DDP_RUN, "--world", "4", "--network", "{no fabric field}"],
        "the fabric lacks intra_busbw; a fabric needs intra_busbw (bytes/s > 0)",
    ),
    (
        ["project", DDP_RUN, "--world", "4", "--network", "{fractional world size}"],
        "fit 1 (all_reduce): world_size must be a whole number >= 1; got 2.5",
    ),
    (["project", DDP_RUN, "--world", "4", "--network", "{world size as text}"], "world_size must be a whole number"),
    (["trace", "analyze", RUN], "not a torch.profiler chrome trace"),
    (["trace", "analyze", "{empty}"], "no trace files in this folder"),
    (["trace", "analyze", "{truncated}"], "not a JSON chrome trace"),
    (["trace", "analyze", os.path.join(SWEEP, "runs")], "not a torch.profiler chrome trace"),
    (["trace", "collectives", "{empty}"], "no trace files in this folder"),
    (["trace", "collectives", "{truncated}"], "not JSON"),
    (["trace", "collectives", os.path.join(SWEEP, "runs", "broken-ddp-n2.json")], "has no traces (it ended before"),
    (["trace", "merge", os.path.join(SWEEP, "runs"), "-o", "{out}/m.json.gz"], "not a torch.profiler chrome trace"),
]
# Old spellings refuse bad input alike (tests/test_deprecated_spellings.py runs each on good input).
CASES += [
    (["export", "{truncated sweep}", "-o", "{out}/e.json"], "holds no successful run records"),
    (["baseline", "save", "{empty}", "--baselines", "{out}/b"], "holds no successful run records"),
    (["project", DDP_RUN, "--world", "4", "--profile", "{no fabric field}"], "the fabric lacks intra_busbw"),
]
TUNE = ["tune", "--workload", "mlp", "--nproc", "2", "--device", "cpu", "--repeat", "1", "--out", "{out}/t"]
CASES += [
    (TUNE + ["--network", RUN], "is not a network profile"),
    (TUNE + ["--network", "{truncated}"], "is not readable JSON"),
    (TUNE + ["--network", "{no fabric field}"], "the fabric lacks intra_busbw"),
    (TUNE + ["--network", "{fractional world size}"], "world_size must be a whole number"),
]


def command_name(argv: list[str]) -> str:
    return " ".join(argv[:2]) if argv[0] in ("history", "baseline", "trace") else argv[0]


def case_id(case) -> str:
    argv, _ = case
    return "-".join(os.path.basename(a) or a for a in argv[:2] + [a for a in argv[2:] if "{" in a])


@pytest.mark.parametrize("argv, message", CASES, ids=[case_id(c) for c in CASES])
def test_bad_stored_data_is_one_line_and_exit_2(argv, message, bad, tmp_path, monkeypatch, capsys):
    from ddpbench.running import tune

    monkeypatch.chdir(tmp_path)  # `gate --baseline auto` looks under ./results; nothing may land in the tree
    monkeypatch.setattr(tune, "launch", lambda *a, **k: pytest.fail("tune launched a run despite bad input"))
    names = {**bad, "out": str(tmp_path / "out")}
    code = main([arg.format(**names) if "{" in arg else arg for arg in argv])
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert code == 2, err
    assert len(lines) == 1, err
    assert lines[0].startswith(f"ddpbench {command_name(argv)}: error: "), err
    assert message in lines[0]
    assert "Traceback" not in out + err
    assert not os.path.exists(tmp_path / "out"), "bad input wrote something"


@pytest.mark.parametrize(
    "argv, message",
    [
        (["gate", "--baseline", "auto", "--candidate", RUN], "--baseline auto needs a sweep folder"),
        (["project", DDP_RUN, "--world", "4", "--network", "{no fabric field}"], "the fabric lacks intra_busbw"),
    ],
)
def test_no_traceback_reaches_the_terminal(argv, message, bad, tmp_path):
    done = ddpbench_process(*[arg.format(**bad) if "{" in arg else arg for arg in argv], cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith(f"ddpbench {argv[0]}: error: ") and message in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "Traceback" not in done.stdout + done.stderr


def test_a_benchmark_that_ends_before_measuring_is_a_failed_run_in_one_line(tmp_path, monkeypatch, capsys):
    """Not bad input but a run that failed: exit 1, as `ddpbench run` reports a failed launch."""
    from ddpbench.host.facts import usable_cores
    from ddpbench.running import comm

    if usable_cores() < 2:
        pytest.skip("comm needs two usable cores for its two gloo processes")
    real_popen = subprocess.Popen
    # In place of torchrun: a process that exits at once with code 3 and writes no results.
    monkeypatch.setattr(
        comm.subprocess,
        "Popen",
        lambda command, **options: real_popen([sys.executable, "-c", "raise SystemExit(3)"], **options),
    )
    code = main(["comm", "--backend", "gloo", "--nproc", "2", "--out", str(tmp_path / "comm")])
    out, err = capsys.readouterr()
    assert code == 1
    assert err.strip().splitlines() == [
        "ddpbench comm: error: the collective benchmark exited with code 3 before measuring any size, so nothing "
        f"was written to {tmp_path / 'comm'}; its processes' output above says why"
    ]
    assert "Traceback" not in out + err and os.listdir(tmp_path / "comm") == []
