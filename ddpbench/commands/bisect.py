"""`ddpbench bisect --good REF --bad REF -- RUN_OPTIONS`: the first commit of the user's repository
that made a configuration slower (the search: gate/bisect.py). No torch."""

from __future__ import annotations

import argparse
import math
import os
import sys
import time

from ddpbench.commands.arguments import (
    BAD_INPUT,
    COULD_NOT_RUN_LINE,
    INTERRUPTED,
    OneLineErrorParser,
    add_run_arguments,
    exit_codes,
    spec_from_args,
    unattended,
)
from ddpbench.commands.bisect_exits import EXIT_CANNOT_TELL, EXIT_MACHINE, EXIT_NONE
from ddpbench.config.errors import SpecError

DEFAULT_RECORDS_SHOWN = "~/.cache/ddpbench/bisect"


def default_records() -> str:
    """Where rounds are kept unless told: the user's cache, outside every repository (a folder under
    the current one left untracked files in the repository bisected, when run from it)."""
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(cache, "ddpbench", "bisect")


def check_records_folder(records: str, repo: str) -> None:
    """Refuse a records folder inside the repository bisected that its git does not ignore: every
    round would leave untracked files there, there to be committed by mistake."""
    from ddpbench.gate.base_env import git
    from ddpbench.gate.compare import GateError

    folder, top = os.path.realpath(records), os.path.realpath(repo)
    if os.path.commonpath([folder, top]) != top:
        return
    common = git(repo, "rev-parse", "--git-common-dir").stdout.strip()
    if common and os.path.commonpath([folder, os.path.realpath(os.path.join(repo, common))]) == os.path.realpath(
        os.path.join(repo, common)
    ):
        return  # inside the git folder: never part of a commit
    if git(repo, "check-ignore", "--quiet", os.path.join(folder, "key.json")).returncode != 0:
        raise GateError(
            f"--records {records} is inside the repository bisected ({repo}) and its git does not ignore it: the "
            f"rounds' records would be untracked files there; give a folder outside it (the default is "
            f"{DEFAULT_RECORDS_SHOWN}) or one its .gitignore lists"
        )


GUESS_RUN_S = 30.0
"""Seconds a run takes, for the estimate before the first round is timed (start-up, torch's import
and a short run on CPU)."""


def add_bisect_parser(commands) -> None:
    bisect = commands.add_parser(
        "bisect",
        help="the first commit of your repository that made a configuration slower",
        usage="ddpbench bisect --good REF --bad REF [options] -- RUN_OPTIONS (those of ddpbench run, naming "
        "--workload path/file.py:factory or --script path/train.py in your repository)",
        description="Find the first commit between a good and a bad one that made one configuration slower. "
        "Each step is a same-job A/B of a commit against the good one (ddpbench ab's rounds and paired test), "
        "from worktrees of the repository holding the workload file or script, with this ddpbench and this "
        "Python. Records are kept per commit, so an interrupted bisection resumes and a repeated one answers "
        "from them. See docs/bisect.md.",
    )
    bisect.add_argument("--good", required=True, metavar="REF", help="a commit that is not slower")
    bisect.add_argument("--bad", required=True, metavar="REF", help="a later commit that is slower")
    bisect.add_argument(
        "--threshold",
        default="5%",
        help="the margin: a commit is bad when its slowdown against --good is beyond it, good when within it "
        "(5, 5%% or 0.05; default 5%%, the gate's --max-regression)",
    )
    bisect.add_argument(
        "--family-alpha",
        default="1%",
        help="how often a step may answer wrongly, spent over its planned looks (default 1%%, the gate's)",
    )
    bisect.add_argument("--rounds", type=int, default=4, help="rounds of a step's first look (default 4, at least 2)")
    bisect.add_argument(
        "--max-rounds",
        type=int,
        default=12,
        help="rounds after which a step says cannot tell; it looks after --rounds, twice that, ... (default 12)",
    )
    bisect.add_argument(
        "--records",
        default=None,
        metavar="FOLDER",
        help=f"where the rounds' records are kept, per machine class, ddpbench version and code, torch, CUDA, "
        f"driver and run options (default {DEFAULT_RECORDS_SHOWN}, or $XDG_CACHE_HOME/ddpbench/bisect: outside your "
        "repository; a folder inside it must be one its git ignores)",
    )
    bisect.add_argument("--json-file", dest="json", default=None, metavar="FILE", help="also write the answer as JSON")
    exit_codes(
        bisect,
        "0 the first bad commit found",
        f"{EXIT_NONE} no commit slower beyond the margin (the bad commit is not)",
        f"{EXIT_CANNOT_TELL} cannot tell within --max-rounds (it says what it would need)",
        f"{EXIT_MACHINE} the machine: the step that named the commit had runs on a busy machine or at another "
        "speed (as the gate's 4): rerun on a quiet machine",
        BAD_INPUT,
        COULD_NOT_RUN_LINE,
        INTERRUPTED,
    )
    bisect.set_defaults(
        handler=unattended(
            command_bisect, "bisect", lambda args: os.path.join(args.records or default_records(), "logs")
        )
    )


def code_hash(package: str | None = None) -> str:
    """A hash of ddpbench's own files as they are on disk: changed by an uncommitted edit, and the
    same for a copy installed outside git (whose version alone says nothing of its code)."""
    import hashlib

    import ddpbench

    package = package or os.path.dirname(os.path.abspath(ddpbench.__file__))
    digest = hashlib.sha256()
    for folder, folders, files in sorted(os.walk(package)):
        folders[:] = sorted(name for name in folders if name != "__pycache__")
        for name in sorted(files):
            if name.endswith((".pyc", ".pyo")):
                continue
            path = os.path.join(folder, name)
            digest.update(os.path.relpath(path, package).encode() + b"\0")
            with open(path, "rb") as handle:
                digest.update(handle.read() + b"\0")
    return digest.hexdigest()[:16]


def ddpbench_version() -> str:
    """The version records are kept under: the package's, and the commit of this checkout."""
    from ddpbench import __version__
    from ddpbench.gate.ab import HERE_REPO
    from ddpbench.gate.base_env import git

    sha = git(HERE_REPO, "rev-parse", "--short=12", "HEAD")
    return __version__ + (f"+{sha.stdout.strip()}" if sha.returncode == 0 else "")


def commit_range(repo: str, good: str, bad: str) -> list[tuple[str, str]]:
    """(sha, subject) of the good commit, then each commit after it up to the bad one, oldest first
    (the first-parent line from good to bad: a merged branch is tested at its merge)."""
    from ddpbench.gate.base_env import git
    from ddpbench.gate.user_tree import TreeError

    if good == bad or git(repo, "merge-base", "--is-ancestor", good, bad).returncode != 0:
        raise TreeError(f"--good {good[:12]} is not an ancestor of --bad {bad[:12]}: give the older, good commit")
    listed = git(repo, "log", "--reverse", "--first-parent", "--ancestry-path", "--format=%H %s", f"{good}..{bad}")
    rows = [line.split(" ", 1) for line in listed.stdout.splitlines() if line.strip()]
    subject = git(repo, "log", "-1", "--format=%s", good).stdout.strip()
    return [(good, subject)] + [(row[0], row[1] if len(row) > 1 else "") for row in rows]


def estimate_lines(commits: int, looks: list[int], run_s: float, timed: bool) -> str:
    """Steps: the bad commit, then halving the commits between (one more where they are not a power of two)."""
    between = max(0, commits - 2)
    steps = 1 + (math.ceil(math.log2(between + 1)) if between else 0)
    fewest, most = 2 * looks[0] * steps, 2 * looks[-1] * steps
    source = "from these records' runs" if timed else "a guess until a run is timed"
    return (
        f"estimate: {between} commit(s) between good and bad: about {steps} steps of {looks[0]}-{looks[-1]} rounds, "
        f"{fewest}-{most} runs, {fewest * run_s / 60:.0f}-{most * run_s / 60:.0f} minutes at {run_s:.0f} s a run "
        f"({source}); records already kept are not run again"
    )


def kept_run_seconds(folder: str) -> float | None:
    from ddpbench.records.store import read_records

    walls = []
    if os.path.isdir(folder):
        for step in os.listdir(folder):
            for side in ("a", "b"):
                side_folder = os.path.join(folder, step, side)
                if os.path.isdir(side_folder):
                    walls += [r.launch.wall_s for _, r in read_records(side_folder)[0] if r.launch is not None]
    return sum(walls) / len(walls) if walls else None


def command_bisect(args: argparse.Namespace) -> int:
    from ddpbench.gate.ab import HERE_REPO, Side, check_imports, sets_out_or_run_id
    from ddpbench.gate.base_env import git
    from ddpbench.gate.baselines import machine_class_here
    from ddpbench.gate.bisect import BadCommit, Bisection, kept_rounds, planned_looks, store_key, write_key
    from ddpbench.gate.compare import GateError
    from ddpbench.gate.stats import GateSettings, parse_fraction
    from ddpbench.gate.user_tree import Trees, inside_tree, resolve_commit, user_file
    from ddpbench.host.facts import driver_version
    from ddpbench.running.resolve import resolve

    given_args = list(args.run_args)
    try:
        settings = GateSettings(
            max_regression=parse_fraction(args.threshold, "--threshold"),
            family_alpha=parse_fraction(args.family_alpha, "--family-alpha"),
        )
        looks = planned_looks(args.rounds, args.max_rounds)
        if not given_args:
            raise GateError("give the run options after --, those of ddpbench run (e.g. --workload models.py:net)")
        if sets_out_or_run_id(given_args):
            raise GateError("bisect sets --out and --run-id itself; records go to --records")
        run_parser = OneLineErrorParser(prog="ddpbench bisect -- (run options)")
        add_run_arguments(run_parser, script=True)
        spec = resolve(spec_from_args(run_parser.parse_args(given_args)))
        if spec.nnodes > 1 or spec.launcher != "local":
            raise GateError("bisect runs on one node, in this job (--nnodes 1, the local launcher): see docs/bisect.md")
        found = user_file(given_args)
        if found is None:
            raise GateError(
                "bisect needs the run options to name a workload file (--workload path/file.py:factory) or a "
                "script (--script path/train.py) in the git repository to bisect"
            )
        repo, inside = found
        args.records = args.records or default_records()
        check_records_folder(args.records, repo)
        good, bad = resolve_commit(repo, args.good, "--good"), resolve_commit(repo, args.bad, "--bad")
        commits = commit_range(repo, good, bad)
        for ref, sha in ((args.good, good), (args.bad, bad)):
            if git(repo, "cat-file", "-e", f"{sha}:{inside}").returncode != 0:
                raise GateError(f"{ref} ({sha[:12]}) has no {inside}")
        run_args = inside_tree(given_args, inside)
        # This Python and this ddpbench run every side: checked once.
        software = check_imports(Side("A", repo, sys.executable, HERE_REPO))
    except (GateError, ValueError) as exc:
        raise SpecError(str(exc)) from None

    def say(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    machine, version = machine_class_here(), ddpbench_version()
    made_with = {"ddpbench_code": code_hash(), "torch": software.torch, "cuda": software.cuda}
    made_with["driver"] = driver_version()
    folder = os.path.join(args.records, store_key(machine, version, run_args, repo, made_with))
    subjects = dict(commits)
    say(f"bisect {inside} in {repo}: good {good[:12]}, bad {bad[:12]}; torch {software.torch}; records -> {folder}")
    say(resume_line(kept_rounds(folder), machine, version, made_with))
    write_key(folder, machine, version, run_args, repo, made_with)
    kept = kept_run_seconds(folder)
    say(estimate_lines(len(commits), looks, kept or GUESS_RUN_S, kept is not None))
    started = time.monotonic()
    trees = Trees(repo, inside, "ddpbench bisect")

    def run_round(side_name: str, sha: str, index: int, step_folder: str) -> None:
        from ddpbench.gate.ab import load_round
        from ddpbench.gate.ab import run_round as ab_round

        name = side_name.upper()
        ref = good if name == "A" else sha
        side = trees.side(name, ref, ref, sys.executable, HERE_REPO)
        path, code = ab_round(side, run_args, step_folder, index)
        record = load_round(path)
        status = record.status if record else f"no record (exit {code})"
        speed = f", {record.metrics.throughput_units_per_s:,.1f}/s" if record and record.metrics else ""
        say(f"  {sha[:12]} round {index} {name}: {status}{speed} ({(time.monotonic() - started) / 60:.1f} min in all)")

    bisection = Bisection(
        [sha for sha, _ in commits],
        run_round,
        folder,
        settings,
        args.rounds,
        args.max_rounds,
        progress=say,
        on_step=lambda step: say(step_line(step, subjects)),
    )
    try:
        result = bisection.run()
    except BadCommit as exc:
        raise SpecError(str(exc)) from None
    finally:
        trees.prune()
    from ddpbench.commands.bisect_text import answer

    return answer(result, args, settings, subjects, given_args, bisection, time.monotonic() - started)


def resume_line(rounds: int, machine: str, version: str, made_with: dict) -> str:
    """What a start reuses: the rounds kept by earlier starts under the same key, and what the key holds."""
    from ddpbench.gate.bisect import MAX_TRIES

    key = (
        f"machine class {machine}, ddpbench {version} (code {made_with['ddpbench_code']}), torch {made_with['torch']}, "
        f"CUDA {made_with['cuda'] or 'none'}, driver {made_with['driver'] or 'none'} and these run options"
    )
    if not rounds:
        return f"records: none kept yet for {key}"
    return (
        f"records: resuming from {rounds} round(s) kept by an earlier start with {key}; each is reused, except a "
        f"failed one, which runs again (up to {MAX_TRIES} tries in all)"
    )


def step_line(step, subjects: dict) -> str:
    subject = subjects.get(step.sha, "")
    source = ", ".join(
        part
        for count, part in (
            (step.reused, f"{step.reused} round(s) from records"),
            (step.new_runs, f"{step.new_runs} new runs"),
            (step.retried, f"{step.retried} failed round(s) run again"),
        )
        if count
    )
    if step.verdict == "skip":
        return f"  {step.sha[:12]} {subject}: skipped, {step.reason}"
    figure = ""
    if step.comparison is not None:
        figure = (
            f": slowdown {100 * step.slowdown:.1f} % [{100 * step.low:.1f}, {100 * step.high:.1f}] over "
            f"{step.rounds} rounds"
        )
    return f"  {step.sha[:12]} {subject}: {step.verdict}{figure} ({source})"
