"""CI can act on every exit code of the gate: `python -m ddpbench.gate.ci` passes it through and
ends with what it means, `make gate` ends with that line, and the job documented in docs/gate.md,
run as written, fails with 1 on a regression and 4 on a busy machine, as `ddpbench gate` does."""

import json
import os
import re
import shutil
import subprocess
import sys

import pytest
import yaml
from conftest import FIXTURES, REPO, cpu_environment

from ddpbench.commands.gate import EXIT_DRIFT, EXIT_FAIL, EXIT_UNDERPOWERED
from ddpbench.gate.baselines import baseline_dir
from ddpbench.gate.ci import EXIT_MEANINGS, VERDICT_FILE_ENV, exit_line, gate_arguments, runs_words

SWEEP = os.path.join(FIXTURES, "sweeps", "cpu-mlp-with-failure")
COULD_NOT_RUN = 70  # what CI reads: pinned here, so that a change of it is meant
OK_RUNS = ["mlp-local-n1", "mlp-ddp-n1", "mlp-ddp-n2"]
BUSY = {
    "hostname": "vm",
    "window_s": 1.0,
    "cores": 2,
    "busy_cores": 2.0,
    "own_cores": 1.0,
    "others_cores": 1.0,
    "steal_cores": 0.0,
    "wanted_cores": 2,
    "busy": True,
    "why": "other processes used 1.00 of 2 cores while the run wanted 2 (vm)",
}


def repeated_sweep(target, factor: float, busy: bool = False) -> str:
    """The fixture sweep's ok mlp runs as 3 rounds (each round a few % apart, so the noise is
    measured), every step `factor` times longer; `busy`: every run measured on a busy machine."""
    shutil.copytree(SWEEP, target, ignore=shutil.ignore_patterns("traces", "*.csv"))
    runs = os.path.join(target, "runs")
    for name in os.listdir(runs):
        os.unlink(os.path.join(runs, name))
    for run_id in OK_RUNS:
        with open(os.path.join(SWEEP, "runs", f"{run_id}.json"), encoding="utf-8") as handle:
            original = json.load(handle)
        for round_, jitter in ((1, 1.0), (2, 1.03), (3, 0.98)):
            record = json.loads(json.dumps(original))
            scale = factor * jitter
            record["run_id"] = record["spec"]["run_id"] = f"{run_id}-r{round_}"
            record["spec"]["repeat"] = round_
            for rank in record["ranks"]:
                rank["step_times_s"] = [t * scale for t in rank["step_times_s"]]
            record["metrics"]["window_s"] *= scale
            for field in ("throughput_units_per_s", "throughput_samples_per_s"):
                record["metrics"][field] /= scale
            if busy:
                record["machine_load"] = BUSY
            with open(os.path.join(runs, f"{run_id}-r{round_}.json"), "w", encoding="utf-8") as handle:
                json.dump(record, handle)
    return str(target)


def gate_through_ci(tmp_path, candidate_factor: float, busy: bool = False, *extra: str):
    baseline = repeated_sweep(tmp_path / "base", 1.0)
    candidate = repeated_sweep(tmp_path / "cand", candidate_factor, busy)
    return subprocess.run(
        [sys.executable, "-m", "ddpbench.gate.ci", "--", sys.executable, "-m", "ddpbench", "gate"]
        + ["--baseline", baseline, "--candidate", candidate, "--metrics", "throughput", *extra],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        env=cpu_environment(DDPBENCH_HISTORY=str(tmp_path / "none.sqlite")),
    )


def test_the_meanings_cover_the_gates_exit_codes():
    assert {0, EXIT_FAIL, 2, EXIT_UNDERPOWERED, EXIT_DRIFT, COULD_NOT_RUN, 130, 143} == set(EXIT_MEANINGS)
    assert exit_line(COULD_NOT_RUN, None).startswith("ddpbench gate exited 70: could not run")


def help_codes(text: str) -> set[int]:
    """The codes a --help's `exit codes:` paragraph lists: `N what it means`, separated by `; ` (143
    after 130's comma)."""
    said = " ".join(text.split("exit codes:", 1)[1].split())
    return {int(code) for code in re.findall(r"(?:^|: |; |, )(\d+) (?=\S)", said)}


def docs_codes(page: str, heading: str) -> set[int]:
    """The codes in the first column of the table that follows `heading` on a page of docs/."""
    with open(os.path.join(REPO, "docs", page), encoding="utf-8") as handle:
        text = handle.read()
    rows = text.split(heading + "\n", 1)[1].split("\n|---|---|\n", 1)[1].split("\n\n", 1)[0]
    return {int(code) for row in rows.splitlines() for code in row.split("|")[1].split(",")}


def test_the_exit_codes_of_bisect_ab_and_the_wrapper_are_in_their_help_and_their_docs():
    """A CI job reads them from either place: each lists every code, 70 (could not run) included."""
    from ddpbench.cli import build_parser

    def command_help(name: str) -> str:
        parser = build_parser()
        commands = next(action for action in parser._actions if getattr(action, "choices", None))
        return commands.choices[name].format_help()

    wrapper = subprocess.run([sys.executable, "-m", "ddpbench.gate.ci", "--help"], capture_output=True, text=True)
    assert wrapper.returncode == 0, wrapper.stderr
    wrapper_docs = docs_codes("gate.md", "### Exit codes of `python -m ddpbench.gate.ci`")
    found = {
        "bisect": (help_codes(command_help("bisect")), docs_codes("bisect.md", "## Exit codes")),
        "ab": (help_codes(command_help("ab")), docs_codes("gate.md", "### Exit codes of `ddpbench ab`")),
        "gate.ci": (help_codes(wrapper.stdout), wrapper_docs),
    }
    assert found["bisect"][0] == {0, 1, 2, 3, 4, COULD_NOT_RUN, 130, 143}, found
    assert found["ab"][0] == {0, 1, 2, 3, COULD_NOT_RUN, 130, 143}, found
    assert found["gate.ci"][0] == set(EXIT_MEANINGS), found
    for name, (in_help, in_docs) in found.items():
        assert in_help == in_docs, (name, in_help, in_docs)


def test_a_gate_that_crashes_could_not_run_and_is_never_read_as_a_regression(tmp_path):
    """Python exits 1 on an error nobody caught, which is the gate's "regression": the wrapper sees
    that no verdict was written and exits 70 (here the gate crashes writing --summary-md into a
    folder). A command ended by a signal, or exiting with a code that is none of the gate's, is 70
    too; the wrapper's own errors are, in one line."""
    (tmp_path / "summary.md").mkdir()
    done = gate_through_ci(tmp_path, 1.0, False, "--summary-md", str(tmp_path / "summary.md"))
    assert "Traceback" in done.stderr  # the gate's own crash, let through
    assert done.returncode == COULD_NOT_RUN, done.stdout + done.stderr
    last = done.stdout.strip().splitlines()[-1]
    assert last == f"ddpbench gate exited 1 without writing its verdict: {EXIT_MEANINGS[COULD_NOT_RUN]}"
    gate = tmp_path / "bin" / "ddpbench"  # a gate that ends otherwise than with a code of its own
    gate.parent.mkdir()
    for body, said in (("kill -9 $$", "ddpbench gate was ended by signal 9"), ("exit 5", "exited 5, none of the")):
        gate.write_text(f"#!/bin/sh\n{body}\n")
        gate.chmod(0o755)
        done = subprocess.run(
            [sys.executable, "-m", "ddpbench.gate.ci", "--", str(gate), "ab", "a", "b"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == COULD_NOT_RUN and said in done.stdout, done.stdout + done.stderr


@pytest.mark.parametrize(
    "spelling",
    [
        ["--json-file", "v.json"],
        ["--json-file=v.json"],
        ["--json-f", "v.json"],
        ["--json-fi=v.json"],
        ["--json", "v.json"],
    ],
)
@pytest.mark.parametrize(
    "program",
    [
        ["ddpbench", "gate", "--baseline", "b", "--candidate", "c"],
        [".venv/bin/ddpbench", "gate", "--baseline", "b", "--candidate", "c"],
        ["python", "-m", "ddpbench", "ab", "a", "b"],
        # however ddpbench is started: the gate is found, and the user's verdict file kept
        ["python", "-m", "ddpbench.cli", "gate", "--baseline", "b", "--candidate", "c"],
        ["python3", "-I", "-m", "ddpbench.__main__", "ab", "a", "b"],
        ["python", "-mddpbench", "ab", "a", "b"],
        ["env", "DDPBENCH_CANARY=off", "/opt/venv/bin/ddpbench", "gate", "--baseline", "b", "--candidate", "c"],
        ["uv", "run", "ddpbench", "ab", "a", "b"],
        # make gate BASE=<ref> GATE_ARGS="..." (the Makefile's own command): its options go to ddpbench ab
        ["python", "-m", "ddpbench.gate.base_env", "main", "--rounds", "5"],
    ],
)
def test_the_gate_is_found_however_ddpbench_is_started_whatever_verdict_file_it_names(program, spelling):
    """The wrapper finds the gate in the command (or refuses it); it never reads the gate's options."""
    command = [*program, *spelling, "--", "--workload", "mlp"]
    assert gate_arguments(command)[0] in ("gate", "ab")


def test_python_m_ddpbench_cli_gate_writes_the_verdict_file_the_user_names(tmp_path):
    """`-m ddpbench.cli` was not read as the gate: the wrapper appended a --json-file of its own after
    the user's, argparse kept the last, and mine.json was never written."""
    baseline, candidate = repeated_sweep(tmp_path / "base", 1.0), repeated_sweep(tmp_path / "cand", 1.0)
    done = subprocess.run(
        [sys.executable, "-m", "ddpbench.gate.ci", "--", sys.executable, "-m", "ddpbench.cli", "gate"]
        + ["--baseline", baseline, "--candidate", candidate, "--metrics", "throughput", "--json-file", "mine.json"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        env=cpu_environment(DDPBENCH_HISTORY=str(tmp_path / "none.sqlite")),
    )
    assert done.returncode == 0, done.stdout + done.stderr
    # not chance: two sweeps of records written here alike: the gate's arithmetic on them is fixed
    assert json.loads((tmp_path / "mine.json").read_text())["verdict"] == "pass"
    assert done.stdout.strip().splitlines()[-1].startswith(f"ddpbench gate exited 0: {EXIT_MEANINGS[0]}; ")


@pytest.mark.parametrize(
    "command",
    [
        ["bash", "-c", "touch ran; ddpbench gate --baseline b --candidate c"],
        ["sh", "gate.sh", "ddpbench"],  # a script that runs the gate: its verdict file cannot be found
        ["ddpbench", "bisect", "--good", "a", "--bad", "b"],
        ["python", "-m", "pytest", "ddpbench", "gate"],
        ["make", "gate"],
    ],
)
def test_a_command_line_without_a_gate_it_can_read_is_refused_in_one_line(tmp_path, command):
    """Run as it is, such a command's exit code could not be told from a crash: refused before it runs."""
    done = subprocess.run(
        [sys.executable, "-m", "ddpbench.gate.ci", "--", *command],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2 and done.stdout == "", done.stdout + done.stderr
    assert len(done.stderr.splitlines()) == 1 and done.stderr.startswith("python -m ddpbench.gate.ci: error: ")
    assert not (tmp_path / "ran").exists()  # nothing ran


def test_the_command_runs_as_given_and_its_verdict_comes_through_the_environment(tmp_path):
    """The wrapper added a --json-file of its own, read from the gate's parser, which it imported from
    the command line's modules. Now the command runs as given, and the gate writes its verdict where
    the wrapper's environment says (`VERDICT_FILE_ENV`)."""
    gate = tmp_path / "bin" / "ddpbench"
    gate.parent.mkdir()
    said = 'printf \'%s\\n\' "$@" > "$(dirname "$0")/argv"'
    verdict = f'echo \'{{"verdict": "regression", "comparisons": []}}\' > "${VERDICT_FILE_ENV}"'
    gate.write_text(f"#!/bin/sh\n{said}\n{verdict}\nexit 1\n")
    gate.chmod(0o755)
    command = [str(gate), "ab", "a", "b", "--rounds", "3", "--", "--workload", "mlp"]
    done = subprocess.run(
        [sys.executable, "-m", "ddpbench.gate.ci", "--", *command], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert (tmp_path / "bin" / "argv").read_text().split("\n")[:-1] == command[1:]
    # not chance: the stand-in gate above writes a fixed verdict and exits 1; nothing is measured
    assert done.stdout.strip().splitlines()[-1].startswith("ddpbench gate exited 1: a regression")


def workflow_gate_command() -> str:
    """The nightly workflow's gate line, as written (its continuation lines joined)."""
    with open(os.path.join(REPO, ".github", "workflows", "nightly-gpu.yml"), encoding="utf-8") as handle:
        job = yaml.safe_load(handle)
    script = next(s["run"] for s in job["jobs"]["gate"]["steps"] if "ddpbench.gate.ci" in s.get("run", ""))
    joined = script.replace("\\\n", " ")
    return next(line.strip() for line in joined.splitlines() if "-m ddpbench.gate.ci" in line)


def test_the_nightly_workflows_gate_line_writes_the_verdict_to_its_json_file(tmp_path):
    """The workflow's own line, run as written in a checkout-like folder: its --json-file is where the
    verdict lands (it once got a scratch file's --json appended after it, and was never written)."""
    work = tmp_path / "checkout"
    work.mkdir()
    os.symlink(os.path.dirname(os.path.dirname(sys.executable)), work / ".venv")
    candidate = repeated_sweep(work / "results" / "gate-123", 1.0)
    shutil.copytree(repeated_sweep(tmp_path / "base", 1.0), work / baseline_dir(candidate))
    line = workflow_gate_command().replace("${{ github.run_id }}", "123").replace("$baseline", "auto")
    # not chance: the workflow file's own text, as written
    assert "--json-file gate-verdict.json" in line, line
    done = subprocess.run(
        ["bash", "--noprofile", "--norc", "-c", line],
        cwd=work,
        capture_output=True,
        text=True,
        timeout=180,
        env=cpu_environment(DDPBENCH_HISTORY=str(tmp_path / "none.sqlite")),
    )
    assert done.returncode == 0, done.stdout + done.stderr
    verdict = json.loads((work / "gate-verdict.json").read_text())
    # not chance: two sweeps of records written here alike: the gate's arithmetic on them is fixed
    assert verdict["verdict"] == "pass" and verdict["comparisons"]
    last = done.stdout.strip().splitlines()[-1]
    assert last.startswith(f"ddpbench gate exited 0: {EXIT_MEANINGS[0]}; "), last
    # not chance: either wording holds, for any runs: the line says what each comparison sees
    assert re.search(r"comparisons? (cannot see|sees) 9\.75%", last), last


def test_the_runs_a_side_needed_are_said_from_the_verdict():
    verdict = {
        "target_slowdown": 0.0975,
        "comparisons": [
            {"mde": 0.5, "sees_threshold": False, "runs_needed": 12, "candidate_runs": 3},
            {"mde": 0.3, "sees_threshold": False, "runs_needed": 40, "candidate_runs": 3},
            {"mde": 0.05, "sees_threshold": True, "runs_needed": 2, "candidate_runs": 3},
        ],
    }
    assert (
        runs_words(verdict) == "2 of 3 comparisons cannot see 9.75%: the weakest would need 40 runs per side (it had 3)"
    )
    for comparison in verdict["comparisons"]:
        comparison["sees_threshold"] = True
    assert runs_words(verdict) == "every comparison sees 9.75% with the runs it had"


def test_a_pass_comes_through_as_0_with_its_meaning_as_the_last_line(tmp_path):
    """1 and 4 come through the documented job below, which runs the gate through this too."""
    done = gate_through_ci(tmp_path, 1.0)
    assert done.returncode == 0, done.stdout + done.stderr
    last = done.stdout.strip().splitlines()[-1]
    assert last.startswith(f"ddpbench gate exited 0: {EXIT_MEANINGS[0]}; "), last
    # not chance: either wording holds, for any runs: the line says what each comparison sees
    assert re.search(r"comparisons? (cannot see|sees) 9\.75%", last), last


def test_bad_input_comes_through_as_2_and_says_so(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "ddpbench.gate.ci", "--", sys.executable, "-m", "ddpbench", "gate"]
        + ["--baseline", str(tmp_path / "nothing"), "--candidate", str(tmp_path / "nothing")],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert done.stdout.strip().splitlines()[-1] == f"ddpbench gate exited 2: {EXIT_MEANINGS[2]}"


def test_make_gate_ends_with_the_gates_exit_code_in_words():
    done = subprocess.run(
        ["make", "--no-print-directory", "-s", "-o", "install", "gate", "BASE=no-such-ref-xyz"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2  # make's own, whatever the gate said
    assert done.stdout.strip().splitlines()[-1] == (
        f"ddpbench ab (make gate BASE=no-such-ref-xyz) exited 2: {EXIT_MEANINGS[2]}"
    )


def documented_gate_step() -> str:
    """The `run:` of the documented job's gate step, from docs/gate.md."""
    with open(os.path.join(REPO, "docs", "gate.md"), encoding="utf-8") as handle:
        text = handle.read()
    job = yaml.safe_load(re.search(r"```yaml\n(name: gate\n.*?)```", text, re.S).group(1))
    steps = job["jobs"]["gate"]["steps"]
    return next(step["run"] for step in steps if step.get("id") == "gate")


@pytest.mark.parametrize("busy, code", [(False, 1), (True, 4)])
def test_the_documented_ci_job_fails_with_the_gates_own_code(tmp_path, busy, code):
    """The step as written, in a checkout-like folder: .venv, the stored baseline found by --baseline
    auto, the candidate sweep the job's sweep step made; GitHub's shell and files."""
    work = tmp_path / "checkout"
    work.mkdir()
    os.symlink(os.path.join(REPO, ".venv"), work / ".venv")
    candidate = repeated_sweep(work / "results" / "pr-123", 1.6, busy)
    shutil.copytree(repeated_sweep(tmp_path / "base", 1.0), work / baseline_dir(candidate))  # results/baselines/...
    script = documented_gate_step().replace("${{ github.run_id }}", "123")
    outputs, summary = tmp_path / "output", tmp_path / "summary"
    done = subprocess.run(
        ["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", script],
        cwd=work,
        capture_output=True,
        text=True,
        timeout=180,
        env=cpu_environment(GITHUB_OUTPUT=str(outputs), GITHUB_STEP_SUMMARY=str(summary)),
    )
    assert done.returncode == code, done.stdout + done.stderr
    assert outputs.read_text() == f"code={code}\n"
    # not chance: the candidate's records are written here 1.6 times slower: the gate's arithmetic on them is fixed
    assert summary.read_text().startswith("## ddpbench gate: REGRESSION")
    last = done.stdout.strip().splitlines()[-1]
    assert last.startswith(f"ddpbench gate exited {code}: {EXIT_MEANINGS[code]}; "), last
    # not chance: either wording holds, for any runs: the line says what each comparison sees
    assert "runs per side" in last or "sees 9.75%" in last
