"""Bisect and ab in CI: each command's worktrees its own, locked while it runs and removed after a
kill; each round in a clean folder; a tree that cannot be made is "could not run", never a verdict;
records outside the user's repository unless its git ignores them. Real git repositories and real
commands; the search itself: tests/test_bisect.py."""

import os
import subprocess
import sys

from conftest import REPO, ddpbench
from test_bisect import WORKLOAD, git, small_repo

from ddpbench.gate.user_tree import Trees


def worktrees(repo: str) -> dict[str, str]:
    """git's worktrees of `repo` other than the main one: folder -> its lock reason ("" unlocked)."""
    found, folder = {}, None
    for line in git(repo, "worktree", "list", "--porcelain").splitlines():
        if line.startswith("worktree "):
            folder = line.split(" ", 1)[1]
            if os.path.realpath(folder) != os.path.realpath(repo):
                found[folder] = ""
        elif line.startswith("locked") and folder in found:
            found[folder] = line.partition(" ")[2] or "locked"
    return found


def test_two_commands_over_one_repository_never_share_a_tree(tmp_path):
    """Trees were kept per commit (`<git dir>/ddpbench-worktrees/<sha>`): two ab or bisect over one
    repository shared the tree of a commit both ran, and the first to end removed it under the other.
    Each command now has a folder of its own; its trees are git-locked while it runs."""
    repo = small_repo(tmp_path, [{"w.py": "X = 1\n"}])
    sha = git(repo, "rev-parse", "HEAD").strip()
    first, second = Trees(repo, "w.py"), Trees(repo, "w.py")
    mine, theirs = first.tree(sha), second.tree(sha)
    try:
        assert mine != theirs and os.path.commonpath([mine, theirs]) == first.root
        locks = worktrees(repo)
        assert set(locks) == {mine, theirs} and all(f"(pid {os.getpid()})" in reason for reason in locks.values())
        first.prune()
        assert not os.path.exists(mine) and list(worktrees(repo)) == [theirs]
        assert open(os.path.join(theirs, "w.py")).read() == "X = 1\n"  # the other's tree, whole
        assert git(theirs, "rev-parse", "HEAD").strip() == sha
    finally:
        first.prune()
        second.prune()
    assert worktrees(repo) == {} and not os.path.exists(first.root)


HOLDER = """import sys, time
from ddpbench.gate.user_tree import Trees
trees = Trees(sys.argv[1], "w.py")
print(trees.tree(sys.argv[2]), flush=True)
time.sleep(600)
"""


def test_the_trees_of_a_killed_command_are_removed_at_the_next_start_and_a_running_ones_kept(tmp_path):
    """A command killed (SIGKILL: no `finally` runs) leaves its trees. The next command to make a tree
    removes them: their lock is free once the process is gone. A running command's lock is held, so
    its trees stay; a folder not made this way (an older ddpbench's) is left alone too."""
    import signal

    repo = small_repo(tmp_path, [{"w.py": "X = 1\n"}])
    sha = git(repo, "rev-parse", "HEAD").strip()
    older = os.path.join(repo, ".git", "ddpbench-worktrees", sha)
    git(repo, "worktree", "add", "--detach", older, sha)
    holders = [
        subprocess.Popen([sys.executable, "-c", HOLDER, repo, sha], stdout=subprocess.PIPE, text=True, cwd=REPO)
        for _ in range(2)
    ]
    try:
        killed, running = (holder.stdout.readline().strip() for holder in holders)
        assert os.path.isdir(killed) and os.path.isdir(running), (killed, running)
        holders[0].send_signal(signal.SIGKILL)
        holders[0].wait(timeout=60)
        trees = Trees(repo, "w.py")
        try:
            mine = trees.tree(sha)
            assert not os.path.exists(killed) and not os.path.exists(os.path.dirname(killed) + ".lock")
            assert os.path.isdir(running) and os.path.isdir(mine) and os.path.isdir(older)
            assert set(worktrees(repo)) == {older, running, mine}
        finally:
            trees.prune()
    finally:
        for holder in holders:
            holder.kill()
            holder.wait(timeout=60)


def test_a_round_in_a_commits_tree_finds_nothing_an_earlier_round_wrote(tmp_path):
    """A script that writes where it runs (pytorch/examples' DDP tutorial keeps snapshot.pt and resumes
    from it) made round 2 of a side resume from round 1. Before each round the tree is reset to the
    commit and cleaned: untracked and ignored files gone, tracked files as committed."""
    from ddpbench.gate import ab

    repo = small_repo(tmp_path, [{"w.py": "X = 1\n", ".gitignore": "*.pt\n"}])
    sha = git(repo, "rev-parse", "HEAD").strip()
    seen = tmp_path / "seen"
    runs = tmp_path / "python"  # a round that says what it found, then writes as a training script does
    runs.write_text(
        f"#!/bin/sh\nls -A | grep -v '^.git$' | tr '\\n' ' ' >> {seen}\ncat w.py >> {seen}\n"
        "echo 1 > snapshot.pt\nmkdir -p out && echo 1 > out/log.txt\necho 'X = 2' > w.py\n"
    )
    runs.chmod(0o755)
    trees = Trees(repo, "w.py")
    try:
        side = trees.side("A", "HEAD", sha, str(runs), REPO)
        for index in (1, 2):
            ab.run_round(side, ["--workload", "w.py:net"], str(tmp_path / "out"), index)
        assert seen.read_text().splitlines() == [".gitignore w.py X = 1", ".gitignore w.py X = 1"]
    finally:
        trees.prune()


def test_a_worktree_that_cannot_be_made_is_could_not_run_not_a_verdict(tmp_path):
    """bisect's 1 means "no commit slower" and ab's 1 "B regressed": an error neither expected (here
    the worktrees' folder cannot be made: a file stands where it goes) exits 70 with one line on
    stderr naming its log, which holds the traceback; it once exited 1 with the traceback."""
    package = "SLEEP_S = {}\nUNIT = 'a'\n"
    repo = small_repo(tmp_path, [{"w.py": WORKLOAD, "mypkg/__init__.py": package.format(s)} for s in (0, 1)])
    with open(os.path.join(repo, ".git", "ddpbench-worktrees"), "w") as handle:
        handle.write("not a folder\n")
    run = ["--", "--workload", "w.py:net", "--strategy", "local", "--steps", "6"]
    records, out = tmp_path / "records", tmp_path / "ab"
    bisected = ddpbench("bisect", "--good", "HEAD~1", "--bad", "HEAD", "--records", str(records), *run, cwd=repo)
    compared = ddpbench("ab", "HEAD~1", "HEAD", "--out", str(out), *run, cwd=repo)
    for done, command, logs in ((bisected, "bisect", records / "logs"), (compared, "ab", out)):
        assert done.returncode == 70, done.stderr
        last = done.stderr.strip().splitlines()[-1]
        assert last.startswith(f"ddpbench {command}: could not run: ") and "Traceback" not in done.stderr, done.stderr
        log = next(logs.glob(f"{command}-could-not-run-*.log"))
        assert str(log) in last and "Traceback" in log.read_text() and "ddpbench-worktrees" in log.read_text()
        assert done.stdout == ""  # no answer, no verdict


def test_records_go_outside_the_repository_unless_its_git_ignores_the_folder(tmp_path):
    """The default --records was results/bisect under the current folder: run from the repository
    bisected, it left untracked files there. It is now the user's cache ($XDG_CACHE_HOME here); a
    folder inside the repository that its git does not ignore is refused in one line, one that it
    ignores is taken. Each bisect ends early, at its first tree (a file stands where trees go)."""
    package = "SLEEP_S = {}\nUNIT = 'a'\n"
    repo = small_repo(tmp_path, [{"w.py": WORKLOAD, "mypkg/__init__.py": package.format(s)} for s in (0, 1)])
    with open(os.path.join(repo, ".git", "ddpbench-worktrees"), "w") as handle:
        handle.write("not a folder\n")
    run = ["--good", "HEAD~1", "--bad", "HEAD", "--", "--workload", "w.py:net", "--strategy", "local"]
    cache = tmp_path / "cache"
    done = ddpbench("bisect", *run, cwd=repo, env={"XDG_CACHE_HOME": str(cache)})
    assert done.returncode == 70, done.stderr  # got as far as its first tree
    assert git(repo, "status", "--porcelain") == ""  # nothing left in the repository
    assert list((cache / "ddpbench" / "bisect").rglob("key.json")) and str(cache / "ddpbench" / "bisect") in done.stderr
    done = ddpbench("bisect", "--records", "results/bisect", *run, cwd=repo)
    assert done.returncode == 2 and len(done.stderr.splitlines()) == 1, done.stderr
    assert "is inside the repository bisected" in done.stderr and "its git does not ignore it" in done.stderr
    assert git(repo, "status", "--porcelain") == ""
    with open(os.path.join(repo, ".git", "info", "exclude"), "a") as handle:
        handle.write("results/\n")
    done = ddpbench("bisect", "--records", "results/bisect", *run, cwd=repo)
    assert done.returncode == 70 and list((tmp_path / "repo" / "results" / "bisect").rglob("key.json")), done.stderr
    assert git(repo, "status", "--porcelain") == ""
