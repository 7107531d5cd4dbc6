"""Commits of the user's own repository as the two sides of a same-job A/B (`ddpbench ab REF REF`,
`gate --confirm-with REF`, every step of `ddpbench bisect`). No torch.

The repository is the one that holds the workload file (`--workload path/file.py:factory`) or the
training script (`--script path/train.py`) named in the run options. Each commit runs from a git
worktree of its own, made once under the repository's git folder (`<git dir>/ddpbench-worktrees/
<sha>`, so the user's `git status` never shows it), reused while the command runs and pruned when
it ends. Both sides run this ddpbench with this Python: only the user's code differs.

Each side runs in its tree with the workload or script path as it lies inside the repository, so
both sides' records name the same file and pair up as one configuration. The tree comes first on
the import path (and its `src/` folder, where it has one), and the run itself checks that the
user's modules it imported lie in that tree (`ddpbench.host.own_tree`).

Refused in one line before anything runs: a ref that names no commit, run options naming no file
in a git repository, and a worktree folder whose tracked files were changed.
"""

from __future__ import annotations

import os
import shutil

from ddpbench.gate.ab import Side
from ddpbench.gate.base_env import BaseError, add_worktree, check_worktree, git
from ddpbench.gate.compare import GateError

WORKTREES = "ddpbench-worktrees"
PATH_OPTIONS = ("--workload", "--script")


class TreeError(GateError):
    """Bad input to an A/B of commits (exit code 2)."""


def _path_option(run_args: list[str]) -> tuple[int, str, str] | None:
    """(index of the value, option, value) of the workload file or script in `run_args`."""
    for index, arg in enumerate(run_args):
        if arg == "--":
            break  # the script's own arguments follow
        name, equals, value = arg.partition("=")
        if name not in PATH_OPTIONS:
            continue
        if not equals:
            if index + 1 >= len(run_args):
                return None
            value = run_args[index + 1]
        if name == "--script" or value.rpartition(":")[0].endswith(".py"):
            return index, name, value
    return None


def _file_of(option: str, value: str) -> str:
    return value if option == "--script" else value.rpartition(":")[0]


def user_file(run_args: list[str], cwd: str | None = None) -> tuple[str, str] | None:
    """(repository top folder, the file's path inside it) for the workload file or script the
    run options name; None where they name a built-in workload."""
    found = _path_option(run_args)
    if found is None:
        return None
    _, option, value = found
    path = os.path.realpath(os.path.join(cwd or os.getcwd(), _file_of(option, value)))
    if not os.path.isfile(path):
        raise TreeError(f"{option} {value!r}: no such file here (its repository is found from it)")
    done = git(os.path.dirname(path), "rev-parse", "--show-toplevel")
    if done.returncode != 0:
        raise TreeError(f"{option} {value!r} is not in a git repository: commits can only be compared in one")
    top = os.path.realpath(done.stdout.strip())
    return top, os.path.relpath(path, top)


def inside_tree(run_args: list[str], inside: str) -> list[str]:
    """The run options with the workload file or script named by its path inside the repository
    (`inside`), as a run started in a side's tree finds it."""
    found = _path_option(run_args)
    if found is None:
        return list(run_args)
    index, option, value = found
    new_value = inside if option == "--script" else f"{inside}:{value.rpartition(':')[2]}"
    args = list(run_args)
    if args[index].startswith(option + "="):
        args[index] = f"{option}={new_value}"
    else:
        args[index + 1] = new_value
    return args


def resolve_commit(repo: str, ref: str, name: str) -> str:
    if not ref or ref.startswith("-"):
        raise TreeError(f"{name} = {ref!r} is not a git ref")
    done = git(repo, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}")
    if done.returncode != 0:
        raise TreeError(f"{name} = {ref!r} names no commit in {repo}")
    return done.stdout.strip()


def worktrees_root(repo: str) -> str:
    common = git(repo, "rev-parse", "--git-common-dir").stdout.strip()
    return os.path.join(os.path.realpath(os.path.join(repo, common)), WORKTREES)


class Trees:
    """The worktrees of one command: made when first needed, checked when reused, pruned at the end."""

    def __init__(self, repo: str, inside: str):
        self.repo = repo
        self.inside = inside
        """The workload file or script, as a path inside the repository."""
        self.root = worktrees_root(repo)
        self.used: list[str] = []

    def folder(self, sha: str) -> str:
        return os.path.join(self.root, sha)

    def check(self, sha: str) -> None:
        """Refuse a worktree folder of this commit that is something else or was changed."""
        try:
            check_worktree(self.folder(sha), sha)
        except BaseError as exc:
            raise TreeError(str(exc).replace("the base", f"commit {sha[:12]}")) from None

    def tree(self, sha: str) -> str:
        folder = self.folder(sha)
        try:
            if not check_worktree(folder, sha):
                os.makedirs(self.root, exist_ok=True)
                add_worktree(self.repo, folder, sha)
        except BaseError as exc:
            raise TreeError(str(exc).replace("the base", f"commit {sha[:12]}")) from None
        if folder not in self.used:
            self.used.append(folder)
        return folder

    def side(self, name: str, ref: str, sha: str, python: str, code: str) -> Side:
        return Side(name, ref, python, code, tree=self.tree(sha), checkout=self.repo)

    def prune(self) -> None:
        """Remove the worktrees this command used (and git's notes of any removed by hand)."""
        for folder in self.used:
            if git(self.repo, "worktree", "remove", "--force", folder).returncode != 0:
                shutil.rmtree(folder, ignore_errors=True)
        self.used = []
        git(self.repo, "worktree", "prune")
        if os.path.isdir(self.root) and not os.listdir(self.root):
            os.rmdir(self.root)


def are_refs(a: str, b: str) -> bool:
    """Whether `ab A B` names two commits: neither is a path here (an environment is a folder or a
    Python executable, as before)."""
    return not os.path.exists(a) and not os.path.exists(b)


def commit_sides(refs: list[str], run_args: list[str], python: str, code: str) -> tuple[list[Side], list[str], Trees]:
    """Sides A and B for two refs of the repository holding the run options' workload file or
    script, the run options as each side runs them, and the worktrees to prune when done. Every
    refusal comes before a worktree is made."""
    found = user_file(run_args)
    if found is None:
        raise TreeError(
            "git refs as A and B need the run options to name a workload file (--workload path/file.py:factory) "
            "or a script (--script path/train.py) in that repository"
        )
    repo, inside = found
    shas = [resolve_commit(repo, ref, name) for name, ref in zip("AB", refs)]
    trees = Trees(repo, inside)
    for ref, sha in zip(refs, shas):
        trees.check(sha)
        if git(repo, "cat-file", "-e", f"{sha}:{inside}").returncode != 0:
            raise TreeError(f"{ref} ({sha[:12]}) has no {inside}")
    sides = [trees.side(name, ref, sha, python, code) for name, ref, sha in zip("AB", refs, shas)]
    return sides, inside_tree(run_args, inside), trees


class CommitBase:
    """`gate --confirm-with REF` where REF is a commit of the repository holding the candidate's
    workload file: the base runs from REF's worktree (made when a regression is to be confirmed),
    the candidate from the checkout the sweep ran, both with this ddpbench and this Python."""

    def __init__(self, ref: str, sha: str, trees: Trees, python: str, code: str):
        self.ref, self.sha, self.trees, self.python, self.code = ref, sha, trees, python, code
        self.candidate = Side("B", trees.repo, python, code, tree=trees.repo, checkout=trees.repo)

    def base(self) -> Side:
        return self.trees.side("A", self.ref, self.sha, self.python, self.code)

    def rewrite(self, options: list[str]) -> list[str]:
        """A configuration's run options with its workload file as it lies inside the repository."""
        found = user_file(options)
        if found is None or found[0] != self.trees.repo:
            raise TreeError(f"its workload is not a file of {self.trees.repo}, where --confirm-with {self.ref} is")
        return inside_tree(options, found[1])


def confirm_base(ref: str, candidate: list, python: str, code: str) -> CommitBase:
    """Refused in one line before anything is compared: no workload file among the candidate's
    runs, a ref that names no commit, a changed worktree of it."""
    from ddpbench.config.workloads import is_user_workload

    files = sorted({r.spec.workload for r in candidate if is_user_workload(r.spec.workload)})
    if not files:
        raise TreeError(
            f"--confirm-with {ref!r} is neither a Python executable nor a ddpbench working tree, nor a git ref of a "
            "repository holding a workload file of the candidate's runs (they have none)"
        )
    repo, inside = user_file(["--workload", files[0]])
    try:
        sha = resolve_commit(repo, ref, "--confirm-with")
    except TreeError:
        raise TreeError(
            f"--confirm-with {ref!r} is neither a Python executable nor a ddpbench working tree, nor a commit of "
            f"{repo} (which holds the candidate's workload file {inside})"
        ) from None
    trees = Trees(repo, inside)
    trees.check(sha)
    return CommitBase(ref, sha, trees, python, code)
