"""`make gate BASE=<git ref>`: this working tree against the code of a git ref, in one job, as a
same-job A/B (`ddpbench ab`): the answer that machine drift between two sweeps cannot fake.

    python -m ddpbench.gate.base_env REF [--rounds K] [verdict options of ddpbench ab] -- RUN_OPTIONS
    python -m ddpbench.gate.base_env REF --prepare     (build it, print its folder: gate --confirm-with)

The base is checked out as a git worktree in .gate-base/<sha>/ with its own virtual environment
(.gate-base/<sha>/.venv, installed as `make install` does: `pip install -c constraints.txt -e .`
with the base's own pins, and kept for the next time). A is the base (its code, its environment),
B this working tree with this Python, both running RUN_OPTIONS alternately, round by round.

Bad input says one line and exits 2: before anything is built, a ref that is no commit, a base
whose tree has no ddpbench, or a worktree folder whose tracked files were changed; once its
environment is built and before anything runs, a base whose ddpbench cannot run `ddpbench run`
(too old for the suite). No torch.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

from ddpbench.gate.ab import HERE_REPO

USAGE_ERROR = 2
BASE_ROOT = ".gate-base"
INSTALLED_STAMP = ".installed-stamp"


class BaseError(ValueError):
    """Bad input to `make gate BASE=` (exit code 2)."""


class OneLineParser(argparse.ArgumentParser):
    def error(self, message):
        self.exit(USAGE_ERROR, f"{self.prog}: error: {message}\n")


def git(repo: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "-C", repo, *args], capture_output=True, text=True)


def resolve_ref(repo: str, ref: str) -> str:
    """The commit a ref names, or BaseError."""
    if not ref or ref.startswith("-"):
        raise BaseError(f"BASE={ref!r} is not a git ref")
    done = git(repo, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}")
    if done.returncode != 0:
        raise BaseError(f"BASE={ref!r} names no commit in {repo}")
    return done.stdout.strip()


def check_tree_has_ddpbench(repo: str, ref: str, sha: str) -> None:
    if git(repo, "cat-file", "-e", f"{sha}:ddpbench/__main__.py").returncode != 0:
        raise BaseError(f"base {ref}'s ddpbench is too old to run the suite (it has no ddpbench/__main__.py)")


def worktree_folder(repo: str, sha: str, root: str = BASE_ROOT) -> str:
    return os.path.join(repo, root, sha)


def check_worktree(folder: str, sha: str) -> bool:
    """Whether the base's worktree is there already (True) or is to be made (False); BaseError
    when the folder is something else or its tracked files were changed: it is not the base then."""
    if not os.path.exists(folder):
        return False
    # A plain folder inside the repository would answer with the repository's own HEAD.
    top = git(folder, "rev-parse", "--show-toplevel")
    head = git(folder, "rev-parse", "HEAD")
    own = top.returncode == 0 and os.path.realpath(top.stdout.strip()) == os.path.realpath(folder)
    if not own or head.returncode != 0 or head.stdout.strip() != sha:
        raise BaseError(f"{folder} is not a git worktree of {sha[:12]}: remove it (git worktree remove --force)")
    if git(folder, "status", "--porcelain", "--untracked-files=no").stdout.strip():
        raise BaseError(f"{folder} has changes to tracked files: it is not the base any more; remove or clean it")
    return True


def add_worktree(repo: str, folder: str, sha: str) -> None:
    done = git(repo, "worktree", "add", "--detach", folder, sha)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise BaseError(f"cannot make the worktree {folder}: {last}")


def base_python(folder: str) -> str:
    return os.path.join(folder, ".venv", "bin", "python")


def build_venv(folder: str, python: str = sys.executable, progress=print) -> str:
    """The base's virtual environment, installed as `make install` does; reused once complete."""
    venv = os.path.join(folder, ".venv")
    stamp = os.path.join(venv, INSTALLED_STAMP)
    if os.path.exists(stamp):
        return base_python(folder)
    progress(f"installing the base's environment in {venv} (once; reused next time)")
    pip = [base_python(folder), "-m", "pip", "install", "--quiet"]
    constraints = ["-c", "constraints.txt"] if os.path.exists(os.path.join(folder, "constraints.txt")) else []
    for command in ([python, "-m", "venv", venv], pip + ["--upgrade", "pip"], pip + constraints + ["-e", "."]):
        done = subprocess.run(command, cwd=folder, capture_output=True, text=True)
        if done.returncode != 0:
            last = (done.stderr.strip().splitlines() or ["no output"])[-1]
            raise BaseError(f"installing the base's environment failed ({' '.join(command[:4])} ...): {last}")
    with open(stamp, "w", encoding="utf-8"):
        pass
    return base_python(folder)


def check_base_runs(folder: str, python: str, ref: str) -> None:
    """The base's own ddpbench, in its own environment, knows `ddpbench run` (what ab starts)."""
    done = subprocess.run(
        [python, "-m", "ddpbench", "run", "--help"],
        cwd=folder,
        env={**os.environ, "PYTHONPATH": folder},
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        raise BaseError(f"base {ref}'s ddpbench is too old to run the suite")


def ab_command(
    folder: str, python: str, rounds: int, out: str, verdict_args: list[str], run_args: list[str]
) -> list[str]:
    """A = the base's working tree run by the base's Python; B = this checkout run by this Python.
    Each side runs in its own tree, so the records' folder is given as an absolute path."""
    return [
        sys.executable,
        "-m",
        "ddpbench",
        "ab",
        folder,
        sys.executable,
        "--python",
        python,
        "--rounds",
        str(rounds),
        "--out",
        os.path.abspath(out),
        *verdict_args,
        "--",
        *run_args,
    ]


def parse(argv: list[str]) -> tuple[argparse.Namespace, list[str], list[str]]:
    run_args: list[str] = []
    if "--" in argv:
        cut = argv.index("--")
        argv, run_args = argv[:cut], argv[cut + 1 :]
    parser = OneLineParser(prog="make gate BASE=<ref>", description=__doc__.splitlines()[0])
    parser.add_argument("ref", help="the base: a branch, tag or commit")
    parser.add_argument("--rounds", default="5", help="rounds of base then candidate (default 5)")
    parser.add_argument("--root", default=BASE_ROOT, help="where base worktrees live (default .gate-base)")
    parser.add_argument("--out", default=None, help="records go to OUT/a and OUT/b (default results/gate-base-<time>)")
    parser.add_argument(
        "--prepare",
        action="store_true",
        help="only build the base (worktree and environment) and print its folder: for gate --confirm-with",
    )
    args, verdict_args = parser.parse_known_args(argv)
    return args, verdict_args, run_args


def main(argv: list[str] | None = None, repo: str = HERE_REPO) -> int:
    args, verdict_args, run_args = parse(list(sys.argv[1:] if argv is None else argv))
    try:
        if not args.rounds.isdigit() or int(args.rounds) < 2:
            raise BaseError(f"rounds must be a whole number, at least 2 (a paired test needs two); got {args.rounds!r}")
        if not run_args and not args.prepare:
            raise BaseError("give the run options after --, those of ddpbench run (e.g. --workload mlp --nproc 2)")
        sha = resolve_ref(repo, args.ref)
        check_tree_has_ddpbench(repo, args.ref, sha)
        folder = worktree_folder(repo, sha, args.root)
        if not check_worktree(folder, sha):
            add_worktree(repo, folder, sha)
        python = build_venv(folder, progress=lambda line: print(line, file=sys.stderr))
        check_base_runs(folder, python, args.ref)
    except BaseError as exc:
        # --prepare is what `make gate CONFIRM=<ref>` runs: the message names the variable it was given.
        name = "CONFIRM" if args.prepare else "BASE"
        print(f"make gate {name}={args.ref}: error: {str(exc).replace('BASE=', name + '=')}", file=sys.stderr)
        return USAGE_ERROR
    print(f"base {args.ref} = {sha[:12]} in {folder}", file=sys.stderr)
    if args.prepare:
        print(folder)
        return 0
    out = args.out or os.path.join(repo, "results", f"gate-base-{time.strftime('%Y%m%d-%H%M%S')}")
    command = ab_command(folder, python, int(args.rounds), out, verdict_args, run_args)
    return subprocess.run(command, cwd=repo).returncode


if __name__ == "__main__":
    sys.exit(main())
