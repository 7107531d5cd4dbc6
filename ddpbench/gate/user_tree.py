"""Commits of the user's own repository as the two sides of a same-job A/B (`ddpbench ab REF REF`,
`gate --confirm-with REF`, every step of `ddpbench bisect`). No torch.

The repository is the one that holds the workload file (`--workload path/file.py:factory`) or the
training script (`--script path/train.py`) named in the run options. Each commit runs from a git
worktree of its own, made under the repository's git folder (so the user's `git status` never shows
it) in a folder that belongs to one command (`<git dir>/ddpbench-worktrees/<command's id>/<sha>`):
two commands over one repository at once never share a tree, nor remove one the other uses. That
folder is locked while its command runs (`<id>.lock`, held with flock, which the kernel releases
when the process ends however it ends; each tree is also `git worktree lock`ed), and a command
removes, when it makes its first tree, the folders whose lock nobody holds: the leftovers of a
command that was killed. Before each round its tree is reset to the commit and cleaned of every
untracked file (`git clean -ffdx`), so that no round finds what an earlier one wrote (a checkpoint
a script resumes from, say). Both sides run this ddpbench with this Python: only the user's code
differs.

Each side runs in its tree with the workload or script path as it lies inside the repository, so
both sides' records name the same file and pair up as one configuration. The tree comes first on
the import path (and its `src/` folder, where it has one), and the run itself checks that the
user's modules it imported lie in that tree (`ddpbench.host.own_tree`).

Refused in one line before anything runs: a ref that names no commit, and run options naming no
file in a git repository. A tree that cannot be made (a folder that cannot be written, a full disk)
is `CannotMakeTree`: the command could not run, which is not bad input.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import time
import uuid

from ddpbench.gate.ab import Side
from ddpbench.gate.base_env import git
from ddpbench.gate.compare import GateError

WORKTREES = "ddpbench-worktrees"
LOCK = ".lock"
PATH_OPTIONS = ("--workload", "--script")


class TreeError(GateError):
    """Bad input to an A/B of commits (exit code 2)."""


class CannotMakeTree(RuntimeError):
    """A worktree could not be made or cleaned: the command could not run (not bad input)."""


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


def _remove_tree(repo: str, folder: str) -> None:
    # Twice forced: the tree is locked (`git worktree add --lock`) while its command runs.
    if git(repo, "worktree", "remove", "--force", "--force", folder).returncode != 0:
        shutil.rmtree(folder, ignore_errors=True)


def remove_leftovers(repo: str, root: str) -> list[str]:
    """Remove the folders of commands that ended without removing their trees (killed): those whose
    lock nobody holds. A folder whose command runs, or one not made this way, is left alone. Returns
    the folders removed."""
    removed = []
    for entry in sorted(os.listdir(root)):
        if entry.startswith(".") or not entry.endswith(LOCK):
            continue
        lock, folder = os.path.join(root, entry), os.path.join(root, entry[: -len(LOCK)])
        try:
            handle = os.open(lock, os.O_RDWR)
        except FileNotFoundError:  # another command removed it first
            continue
        try:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                continue  # its command is running
            if os.path.isdir(folder):
                for name in os.listdir(folder):
                    _remove_tree(repo, os.path.join(folder, name))
                shutil.rmtree(folder, ignore_errors=True)
                removed.append(folder)
            with contextlib.suppress(FileNotFoundError):
                os.unlink(lock)
        finally:
            os.close(handle)
    if removed:
        git(repo, "worktree", "prune")
    return removed


class Trees:
    """The worktrees of one command: made when first needed in a folder of its own, locked while it
    runs, reset and cleaned before each round, removed at the end (see the module's docstring)."""

    def __init__(self, repo: str, inside: str, command: str = "ddpbench"):
        self.repo = repo
        self.inside = inside
        """The workload file or script, as a path inside the repository."""
        self.command = command
        self.root = worktrees_root(repo)
        self.own: str | None = None
        """This command's folder under `root`, made with its first tree."""
        self._lock: int | None = None
        self.used: dict[str, str] = {}
        """Commit -> its tree."""

    def _claim(self) -> str:
        """This command's folder, its lock held: made after the leftovers of killed commands are
        removed. The lock is taken on a file of a temporary name that is then renamed, so that no
        other command can see the lock's name before it is held."""
        if self.own is not None:
            return self.own
        name = f"{os.getpid()}-{uuid.uuid4().hex[:8]}"
        try:
            os.makedirs(self.root, exist_ok=True)
            remove_leftovers(self.repo, self.root)
            making = os.path.join(self.root, f".{name}{LOCK}")
            handle = os.open(making, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            since = time.strftime("%Y-%m-%d %H:%M:%S")
            os.write(handle, f"{self.command}, pid {os.getpid()}, since {since}\n".encode())
            os.rename(making, os.path.join(self.root, name + LOCK))
            os.mkdir(os.path.join(self.root, name))
        except OSError as exc:
            raise CannotMakeTree(f"cannot make a folder for worktrees in {self.root}: {exc}") from exc
        self.own, self._lock = os.path.join(self.root, name), handle
        return self.own

    def tree(self, sha: str) -> str:
        if sha in self.used and os.path.isdir(self.used[sha]):
            return self.used[sha]
        folder = os.path.join(self._claim(), sha)
        reason = f"in use by {self.command} (pid {os.getpid()})"
        done = git(self.repo, "worktree", "add", "--detach", "--lock", "--reason", reason, folder, sha)
        if done.returncode != 0:
            last = (done.stderr.strip().splitlines() or ["no output"])[-1]
            raise CannotMakeTree(f"cannot make the worktree {folder} of commit {sha[:12]}: {last}")
        self.used[sha] = folder
        return folder

    def clean(self, sha: str) -> None:
        """The commit's tree as a fresh checkout: tracked files as committed, nothing else (what an
        earlier round wrote, ignored files included)."""
        folder = self.tree(sha)
        for args in (("reset", "--quiet", "--hard"), ("clean", "--quiet", "-ffdx")):
            done = git(folder, *args)
            if done.returncode != 0:
                last = (done.stderr.strip().splitlines() or ["no output"])[-1]
                raise CannotMakeTree(f"cannot clean the worktree {folder} ({' '.join(args[:1])}): {last}")

    def side(self, name: str, ref: str, sha: str, python: str, code: str) -> Side:
        tree = self.tree(sha)
        return Side(name, ref, python, code, tree=tree, checkout=self.repo, before_round=lambda: self.clean(sha))

    def prune(self) -> None:
        """Remove this command's trees and folder, then release its lock."""
        for folder in self.used.values():
            _remove_tree(self.repo, folder)
        self.used = {}
        git(self.repo, "worktree", "prune")
        if self.own is not None:
            shutil.rmtree(self.own, ignore_errors=True)
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.own + LOCK)
            os.close(self._lock)
            self.own, self._lock = None, None
        with contextlib.suppress(OSError):  # others' folders may be there still
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
    for ref, sha in zip(refs, shas):
        if git(repo, "cat-file", "-e", f"{sha}:{inside}").returncode != 0:
            raise TreeError(f"{ref} ({sha[:12]}) has no {inside}")
    trees = Trees(repo, inside, "ddpbench ab")
    try:
        sides = [trees.side(name, ref, sha, python, code) for name, ref, sha in zip("AB", refs, shas)]
    except BaseException:
        trees.prune()
        raise
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
    runs, a ref that names no commit."""
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
    return CommitBase(ref, sha, Trees(repo, inside, "ddpbench gate --confirm-with"), python, code)
