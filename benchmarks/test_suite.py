"""`make test` as a newcomer meets it, measured: each run is a fresh clone of this repository at a
commit, where `make test` builds its own .venv (the install is inside the wall time) and runs its
tier of the suite. While it runs, /proc is read every quarter second to count the real launches:
torchrun jobs and the worker processes that ran training (started by torchrun or on their own), and
the CPU time of everything it started is summed (the children's rusage). `--target test-all` times
the whole suite (`make test-all`, what CI runs) the same way.
Writes docs/measurements/test-suite.md from every run saved in --out, with what each tier covers (the
tests marked `test_all`, each with why make test leaves it), and the suite's chance budget as
tests/chance_scan.py reads it: the checks' summed stated rate and every `# not chance:` exemption with
its reason.

    python benchmarks/test_suite.py --runs 3                    # three fresh clones of HEAD
    python benchmarks/test_suite.py --runs 1 --target test-all  # the whole suite, once
    python benchmarks/test_suite.py --runs 1 --ref ecc3b3e --label before   # an earlier commit, for comparison
    python benchmarks/test_suite.py --analyse-only              # the page from the runs in --out

Run it with the machine otherwise idle: the suite uses both cores.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import threading
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
sys.path.insert(0, os.path.join(REPO, "benchmarks"))
sys.path.insert(0, os.path.join(REPO, "tests"))

from chance_scan import Budget, read_suite  # noqa: E402
from cpu_suite import load_average, machine  # noqa: E402
from measurement_page import add_page_options, command_line, utc_now, write_page  # noqa: E402

from ddpbench.host.cpu_denied import RANK_NAME  # noqa: E402

PAGE = os.path.join(REPO, "docs", "measurements", "test-suite.md")
SUMMARY = re.compile(r"^=* ?(?P<text>\d+ (passed|failed|skipped|errors?)\b.*\bin (?P<seconds>[\d.]+)s\b.*?) ?=*$")
DURATION = re.compile(r"^(?P<seconds>[\d.]+)s (?P<phase>setup|call|teardown)\s+(?P<test>\S.*)$")
SAMPLE_S = 0.25
TARGET_S = 600


def git(*args: str, cwd: str = REPO) -> str:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=True).stdout.strip()


def kind_of(command: list[str], name: str = "") -> str | None:
    """Which launch a process is: a torchrun job, a training worker, or neither. A forked rank has
    its agent's command line (`ddpbench.worker.agent`) and is told apart by the name it gives its
    training thread (RANK_NAME), which its DataLoader workers inherit."""
    if "ddpbench.worker.agent" in command:
        return "forked_workers" if name.startswith(RANK_NAME.split("{")[0]) else "torchrun_jobs"
    if "torch.distributed.run" in command or (command and os.path.basename(command[0]) == "torchrun"):
        return "torchrun_jobs"
    for index, part in enumerate(command[:-1]):
        if part == "-m" and command[index + 1] in ("ddpbench.worker", "ddpbench.worker.script"):
            return "worker_processes"
    return None


class LaunchCounter(threading.Thread):
    """Counts distinct processes of each kind by reading /proc; a process is (pid, start time), so a
    reused pid counts again. One that lives less than a sample apart can be missed: a worker imports
    torch first, which takes seconds here."""

    def __init__(self):
        super().__init__(daemon=True)
        self.seen: dict[tuple[int, str], str] = {}
        self.stop = threading.Event()

    def run(self):
        while not self.stop.is_set():
            for entry in os.listdir("/proc"):
                if not entry.isdigit():
                    continue
                try:
                    with open(f"/proc/{entry}/cmdline", "rb") as handle:
                        command = [part.decode(errors="replace") for part in handle.read().split(b"\0") if part]
                    with open(f"/proc/{entry}/stat") as handle:
                        started = handle.read().rsplit(")", 1)[1].split()[19]
                    with open(f"/proc/{entry}/comm") as handle:
                        name = handle.read().strip()
                except OSError:
                    continue
                kind = kind_of(command, name)
                if kind:
                    self.seen[(int(entry), started)] = kind
            self.stop.wait(SAMPLE_S)

    def counts(self) -> dict[str, int]:
        kinds = list(self.seen.values())
        return {kind: kinds.count(kind) for kind in ("torchrun_jobs", "worker_processes", "forked_workers")}


def parse_output(output: str) -> dict:
    """The summary line's counts and the --durations list from pytest's output."""
    counts, seconds = {}, None
    for line in output.splitlines():
        found = SUMMARY.match(line.strip())
        if found:  # the last summary line counts
            counts, seconds = {}, float(found["seconds"])
            for number, word in re.findall(r"(\d+) (passed|failed|skipped|errors?|xfailed|xpassed)", found["text"]):
                counts[word.rstrip("s") if word.startswith("error") else word] = int(number)
    slowest = [
        {"seconds": float(found["seconds"]), "phase": found["phase"], "test": found["test"]}
        for found in (DURATION.match(line.strip()) for line in output.splitlines())
        if found
    ]
    return {"counts": counts, "pytest_s": seconds, "slowest": slowest[:15]}


def children_cpu_s() -> float:
    """User and system CPU seconds of every finished process this one waited for, and theirs."""
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def one_run(ref: str, folder: str, target: str = "test") -> dict:
    clone = os.path.join(folder, "clone")
    shutil.rmtree(clone, ignore_errors=True)
    subprocess.run(["git", "clone", "--quiet", "--no-checkout", REPO, clone], check=True)
    git("checkout", "--quiet", ref, cwd=clone)
    commit = git("rev-parse", "HEAD", cwd=clone)
    counter = LaunchCounter()
    load_before, started_at, started, cpu_before = load_average(), utc_now(), time.monotonic(), children_cpu_s()
    counter.start()
    # Each check of tests/chance.py writes its figures and power here (DDPBENCH_CHANCE_LOG).
    checks = os.path.join(folder, "chance.log")
    environment = {**os.environ, "DDPBENCH_CHANCE_LOG": checks}
    done = subprocess.run(["make", target], cwd=clone, capture_output=True, text=True, env=environment)
    wall_s, cpu_s = time.monotonic() - started, children_cpu_s() - cpu_before
    counter.stop.set()
    counter.join()
    output = done.stdout + done.stderr
    with open(os.path.join(folder, "output.txt"), "w", encoding="utf-8") as handle:
        handle.write(output)
    shutil.rmtree(clone, ignore_errors=True)
    return {
        "ref": ref,
        "target": target,
        "commit": commit,
        "cpu_s": cpu_s,
        "started_at": started_at,
        "wall_s": wall_s,
        "exit_code": done.returncode,
        "load_before": load_before,
        "load_after": load_average(),
        **counter.counts(),
        **parse_output(output),
    }


def saved_runs(out: str) -> list[dict]:
    runs = []
    for name in sorted(os.listdir(out)) if os.path.isdir(out) else []:
        path, output = os.path.join(out, name, "run.json"), os.path.join(out, name, "output.txt")
        if os.path.exists(path):
            with open(path) as handle:
                run = json.load(handle)
            if os.path.exists(output):  # read again from what make test printed: the parse may have improved
                with open(output, encoding="utf-8") as handle:
                    run.update(parse_output(handle.read()))
            runs.append(run)
    return runs


POWER = re.compile(r"chance of failing were it [-\d.e+]+: (?P<power>[\d.]+)")
WRONG = re.compile(r"^(?P<what>.*?): goes wrong with chance (?P<chance>[-\d.e+]+) from its samples")


def powers(out: str) -> dict[str, list[float]]:
    """Per check (test and what it checks), the power it stated in each run that logged it."""
    found: dict[str, list[float]] = {}
    for name in sorted(os.listdir(out)):
        path = os.path.join(out, name, "chance.log")
        if not os.path.exists(path):
            continue
        with open(path, encoding="utf-8") as handle:
            for line in handle:
                test, _, text = line.rstrip("\n").partition("\t")
                match = POWER.search(text)
                if match:
                    # What the check is, less the run's own figures some tests put in its name.
                    what = re.sub(r", slept [\d.]+ ms| \[.*\]", "", text.split(":", 1)[0])
                    found.setdefault(f"{test.split('::', 1)[-1]}: {what}", []).append(float(match["power"]))
    return found


def verdict_chances(out: str) -> dict[str, list[float]]:
    """Per verdict (test and what it decides), the chance of going wrong its samples gave in each run
    that logged it (tests/chance.py's verdict)."""
    found: dict[str, list[float]] = {}
    for name in sorted(os.listdir(out)) if os.path.isdir(out) else []:
        path = os.path.join(out, name, "chance.log")
        if not os.path.exists(path):
            continue
        with open(path, encoding="utf-8") as handle:
            for line in handle:
                test, _, text = line.rstrip("\n").partition("\t")
                match = WRONG.match(text)
                if match:
                    found.setdefault(f"{test.split('::', 1)[-1]}: {match['what']}", []).append(float(match["chance"]))
    return found


def chance_section(budget: Budget, head: str, measured: list[str], stated: dict, chances: dict) -> list[str]:
    """The page's account of chance: the checks and their summed stated rate, every exemption with
    its reason, and what the runs' checks and verdicts said of their power and their chance."""
    lines = [
        "## Chance",
        "",
        "Every assert on a measured time, interval or rate, and on a decision reached against noise, goes through "
        f"`tests/chance.py` and states its false-failure rate. At {head[:7]} the tests make {len(budget.rates)} "
        f"such checks (each counted as often as it runs); their stated rates sum to {budget.total:.4f}, against the "
        "suite's budget of 0.01 (`tests/test_chance.py` holds the sum, checks each helper's rate on synthetic draws, "
        "and scans for asserts that go around it: `tests/chance_scan.py`).",
        "",
    ]
    if measured:
        lines += [
            f"The runs above measured {', '.join(measured)}; the checks are counted at {head[:7]}, and the "
            "powers below are what the runs' checks stated.",
            "",
        ]
    if stated:
        lines += [
            "Power: a check that names the value its samples would have without the effect under test "
            "states its chance of failing then, from its own samples' spread. The lowest each stated over the "
            "runs above:",
            "",
            "| check | lowest power | runs |",
            "|---|---|---|",
        ]
        lines += [f"| {name} | {min(values):.4f} | {len(values)} |" for name, values in sorted(stated.items())]
        lines.append("")
    if chances:
        lines += [
            "Verdicts: a decision ddpbench reached (a rank named, the gate's verdict) is checked with the chance "
            "that it goes wrong with the planted effect present, computed from its own samples. The largest each "
            "read over the runs above:",
            "",
            "| verdict | largest chance of going wrong | runs |",
            "|---|---|---|",
        ]
        lines += [f"| {name} | {max(values):.3g} | {len(values)} |" for name, values in sorted(chances.items())]
        lines.append("")
    lines += [
        f"### Exemptions ({len(budget.exemptions)})",
        "",
        "Asserts in tests that start processes or read clocks which say why chance cannot fail them "
        "(`# not chance: <why>`), each with its reason (files in `tests/`):",
        "",
        "| where | reason | assert |",
        "|---|---|---|",
    ]
    lines += [
        f"| {exemption.where} | {cell(exemption.reason)} | `{cell(exemption.assert_line)}` |"
        for exemption in budget.exemptions
    ]
    lines.append("")
    return lines


def cell(text: str) -> str:
    """Text for a table cell: a pipe would end the cell."""
    return text.replace("|", "\\|")


def minutes(seconds: float | None) -> str:
    return "not read" if seconds is None else f"{int(seconds // 60)} min {seconds % 60:04.1f} s"


def tier_marks() -> list[tuple[str, str]]:
    """Each `test_all` mark in tests/ with the reason its comment gives: (where, reason); a mark on a
    file's `pytestmark` has its reason on the comment line above (`# make test-all only: ...`)."""
    found = []
    for name in sorted(os.listdir(os.path.join(REPO, "tests"))):
        if not (name.startswith("test_") and name.endswith(".py")):
            continue
        with open(os.path.join(REPO, "tests", name), encoding="utf-8") as handle:
            lines = handle.read().splitlines()
        for index, line in enumerate(lines):
            if line.startswith("@pytest.mark.test_all"):
                test = next((m[1] for m in (re.match(r"def (\w+)", x) for x in lines[index + 1 :]) if m), "?")
                found.append((f"{name}::{test}", line.partition("#")[2].strip()))
            elif line.startswith("# make test-all only:"):
                more = []  # the reason's continuation lines, up to the mark itself
                for following in lines[index + 1 :]:
                    if not following.startswith("# "):
                        break
                    more.append(following[2:].strip())
                reason = " ".join([line.partition(":")[2].strip(), *more])
                found.append((f"{name} (every test in it)", reason))
    return found


def collected(expression: str) -> int:
    """How many tests pytest collects under a marker expression (parametrizations counted)."""
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", "-m", expression, "tests"],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        raise SystemExit(f"test_suite.py: pytest could not collect the tests: {done.stdout[-500:]}{done.stderr[-500:]}")
    return sum("::" in line for line in done.stdout.splitlines())


def tiers_section(head: str) -> list[str]:
    """What each tier covers at `head` (this checkout): the counts, and every test make test leaves to
    make test-all, with why."""
    grouped: dict[tuple[str, str], list[str]] = {}
    for where, reason in tier_marks():
        file, _, test = where.partition("::")
        grouped.setdefault((file, reason), []).append(test)
    lines = [
        "## The two tiers",
        "",
        f"At {head[:7]}, `make test` runs {collected('not test_all')} tests: every in-process test and at least one "
        f"real launch of each path. `make test-all` (what `.ci/run` runs) adds the {collected('test_all')} marked "
        "`test_all`, each a further launch of a path make test already launches. Each mark says where make test "
        "launches the same path:",
        "",
        "| make test-all only | why make test can leave it |",
        "|---|---|",
    ]
    for (file, reason), tests in grouped.items():
        if not tests[0]:  # a whole file
            shown = f"`{file.removesuffix(' (every test in it)')}`, every test in it"
        else:
            shown = f"`{file}::{tests[0]}`" if len(tests) == 1 else f"`{file}`: {len(tests)} tests"
        lines.append(f"| {shown} | {cell(reason)} |")
    lines.append("")
    return lines


def page(runs: list[dict], head: str, command: str, out: str) -> str:
    before = [run for run in runs if run.get("label") == "before"]
    after = [run for run in runs if run.get("label") != "before"]
    lines = [
        "# The test suite: `make test` on a fresh clone",
        "",
        f"Written by `{command}` on {utc_now()}, at commit {head[:7]}.",
        f"Machine: {machine()}.",
        "",
        "Each run is a fresh `git clone` of the repository at the commit named; `make test` (or `make test-all`)",
        "there builds its own `.venv` from the machine's package cache (inside the wall time) and runs its tier of",
        "the suite on two pytest workers. CPU time is user and system time of the processes the run started that",
        "were waited for (the children's rusage: a lower bound, as a process no parent waited for is left out).",
        "Launches are counted by reading /proc every quarter second: torchrun jobs (torchrun's agent",
        "or ddpbench's, which forks its ranks), processes with the worker's command line (a rank started as a new",
        "Python, or a run started without torchrun, and the DataLoader workers they fork), and forked ranks (each",
        "with its DataLoader workers). The target is 10 minutes for `make test`, including the install.",
        "",
        "| run | target | commit | started | wall time (install included) | pytest's own time | CPU time "
        "| passed | failed | skipped | torchrun jobs | worker processes | forked ranks | load before / after |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for index, run in enumerate(before + after, 1):
        counts, target = run["counts"], run.get("target", "test")
        over = target == "test" and run["wall_s"] > TARGET_S
        cpu = f"{run['cpu_s'] / 60:.1f} CPU-min" if run.get("cpu_s") is not None else "not read"
        lines.append(
            f"| {index}{' (before)' if run in before else ''} | make {target} | {run['commit'][:7]} "
            f"| {run['started_at']} | {minutes(run['wall_s'])}{' (over 10 min)' if over else ''} "
            f"| {minutes(run['pytest_s'])} | {cpu} | {counts.get('passed', 0)} | {counts.get('failed', 0)} "
            f"| {counts.get('skipped', 0)} | {run['torchrun_jobs']} | {run['worker_processes']} "
            f"| {run.get('forked_workers', 0)} | {run['load_before']} / {run['load_after']} |"
        )
    lines.append("")
    green_of = lambda runs: [r for r in runs if r["exit_code"] == 0 and not r["counts"].get("failed")]  # noqa: E731
    tests = [run for run in after if run.get("target", "test") == "test"]
    if tests:
        within = [run for run in green_of(tests) if run["wall_s"] <= TARGET_S]
        lines += [
            f"`make test`: {len(green_of(tests))} of {len(tests)} runs green, {len(within)} of them within 10 "
            "minutes including the install.",
            "",
        ]
    whole = [run for run in after if run.get("target") == "test-all"]
    if whole:
        lines += [
            f"`make test-all`: {len(green_of(whole))} of {len(whole)} runs green, in "
            + ", ".join(minutes(run["wall_s"]) for run in whole)
            + " including the install.",
            "",
        ]
    tests_before = [run for run in before if run.get("target", "test") == "test"]
    if tests_before and tests:
        mean = lambda runs, key: sum(run[key] for run in runs) / len(runs)  # noqa: E731
        lines += [
            "Launches of `make test`, before and after: "
            f"{mean(tests_before, 'torchrun_jobs'):.0f} torchrun jobs and "
            f"{mean(tests_before, 'worker_processes'):.0f} worker processes at {tests_before[0]['commit'][:7]}; "
            f"{mean(tests, 'torchrun_jobs'):.0f} and {mean(tests, 'worker_processes'):.0f} at "
            f"{tests[0]['commit'][:7]} (means over the runs of each commit).",
            "",
        ]
    lines += tiers_section(head)
    measured = sorted({run["commit"][:7] for run in after} - {head[:7]})
    lines += chance_section(read_suite(), head, measured, powers(out), verdict_chances(out))
    for index, run in enumerate(before + after, 1):
        lines += [
            f"## Run {index}: the 15 slowest (make {run.get('target', 'test')}, {run['commit'][:7]})",
            "",
            "| seconds | phase | test |",
            "|---|---|---|",
        ]
        lines += [f"| {item['seconds']:.1f} | {item['phase']} | `{item['test']}` |" for item in run["slowest"]]
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3, help="fresh clones to run `make test` in (default 3)")
    parser.add_argument("--ref", default="HEAD", help="the commit to clone (default HEAD)")
    parser.add_argument(
        "--target", choices=("test", "test-all"), default="test", help="the make target each run runs (default test)"
    )
    parser.add_argument(
        "--label", choices=("before", "after"), default="after", help="what the page calls these runs (default after)"
    )
    parser.add_argument("--out", default="/tmp/ddpbench-test-suite", help="where each run's output and figures go")
    parser.add_argument("--analyse-only", action="store_true", help="write the page from the runs saved in --out")
    add_page_options(parser, PAGE)
    args = parser.parse_args(argv)
    head = git("rev-parse", "HEAD")
    if not args.analyse_only:
        ref = git("rev-parse", args.ref)
        for _ in range(args.runs):
            folder = os.path.join(args.out, time.strftime("%Y%m%dT%H%M%S"))
            os.makedirs(folder)
            run = {"label": args.label, **one_run(ref, folder, args.target)}
            with open(os.path.join(folder, "run.json"), "w") as handle:
                json.dump(run, handle, indent=1)
            print(
                f"{run['commit'][:7]}: make {args.target}: exit {run['exit_code']}, {minutes(run['wall_s'])}, "
                f"{run['cpu_s'] / 60:.1f} CPU-min, {run['counts']}, "
                f"{run['torchrun_jobs']} torchrun jobs, {run['worker_processes']} workers",
                file=sys.stderr,
            )
    text = page(saved_runs(args.out), head, command_line("test_suite.py", argv), args.out)
    print(text)
    write_page(args, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
