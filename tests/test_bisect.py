"""Bisection over the user's own repository: the search against a fake runner that writes records
(good, bad, skipped and undecidable commits; resuming; a repeat answered from records), refs
refused in one line, the import check, a script bisected through the real path resolution and
worktrees, and one real step with the user's package installed in editable mode from the checkout.

The fake runner's throughputs are fixed numbers (a seeded drift shared by both runs of a round,
and a per-run jitter), so every assert on the search is deterministic: none can fail by chance."""

import json
import os
import subprocess
import sys

import msgspec
import numpy as np
import pytest
from conftest import REPO, command_environment, ddpbench
from test_gate import SWEEP

from ddpbench.gate.bisect import BAD, CANNOT_TELL, GOOD, SKIP, BadCommit, Bisection, planned_looks
from ddpbench.gate.compare import load_side
from ddpbench.gate.stats import GateSettings
from ddpbench.gate.user_tree import TreeError, Trees, confirm_base, inside_tree, user_file
from ddpbench.host.own_tree import modules_outside
from ddpbench.records.store import write_record

COMMITS = [f"{i:02d}" + "c" * 38 for i in range(9)]  # 0 good, 8 bad


class FakeRunner:
    """Writes each round's record as a run would: throughput = base / drift / the commit's slowdown."""

    def __init__(self, slowdowns: dict[int, float], broken=(), jitter=0.01, stop_after=None, refused=(), timed_out=()):
        self.template = next(r for r in load_side(SWEEP) if r.run_id == "mlp-ddp-n2")
        self.slowdowns, self.broken, self.jitter, self.stop_after = slowdowns, set(broken), jitter, stop_after
        self.refused = set(refused)
        """Commits whose run is refused before it starts: no record, one line on stderr (as ab keeps it)."""
        self.timed_out = set(timed_out)
        """(side, commit, round) whose run timed out (a record with status timeout)."""
        self.runs = 0

    def factor(self, sha: str) -> float:
        index = COMMITS.index(sha)
        return max((s for i, s in self.slowdowns.items() if i <= index), default=1.0)

    def __call__(self, side: str, sha: str, index: int, folder: str) -> None:
        if self.stop_after is not None and self.runs >= self.stop_after:
            raise KeyboardInterrupt
        self.runs += 1
        if side == "b" and COMMITS.index(sha) in self.refused:
            os.makedirs(os.path.join(folder, side), exist_ok=True)
            with open(os.path.join(folder, side, f"b-r{index:02d}.stderr"), "w") as said:
                said.write("ddpbench run: error: workload file 'model.py' is not valid Python\n")
            return
        seed = COMMITS.index(sha) * 1000 + index
        drift = 1.0 + 0.3 * np.random.default_rng(seed).random()  # shared by A and B of the round
        jitter = 1.0 + self.jitter * np.random.default_rng(seed * 2 + (side == "b")).standard_normal()
        factor = drift * jitter * (self.factor(sha) if side == "b" else 1.0)
        metrics = msgspec.structs.replace(
            self.template.metrics, throughput_units_per_s=self.template.metrics.throughput_units_per_s / factor
        )
        record = msgspec.structs.replace(self.template, run_id=f"{side}-r{index:02d}", metrics=metrics)
        if side == "b" and COMMITS.index(sha) in self.broken:
            record = msgspec.structs.replace(record, status="failed")
        if (side, COMMITS.index(sha), index) in self.timed_out:
            record = msgspec.structs.replace(record, status="timeout")
        write_record(record, os.path.join(folder, side))


def bisect(tmp_path, runner, **options) -> Bisection:
    return Bisection(COMMITS, runner, str(tmp_path / "records"), GateSettings(), progress=lambda line: None, **options)


def test_finds_the_first_slower_commit_and_a_repeat_runs_nothing(tmp_path):
    runner = FakeRunner({5: 1.3})
    result = bisect(tmp_path, runner).run()
    assert result.verdict == "found" and result.first_bad == COMMITS[5]
    verdicts = {step.sha: step.verdict for step in result.steps}
    assert verdicts[COMMITS[8]] == BAD and verdicts[COMMITS[4]] == GOOD and verdicts[COMMITS[5]] == BAD
    # not chance: the fake runner's numbers are seeded
    assert result.deciding.low > 0.05 and result.deciding.slowdown == pytest.approx(1 - 1 / 1.3, abs=0.02)
    assert result.new_runs == runner.runs and runner.runs > 0
    again = FakeRunner({5: 1.3})
    repeat = bisect(tmp_path, again).run()
    assert repeat.first_bad == COMMITS[5] and again.runs == 0 and repeat.new_runs == 0
    assert [s.sha for s in repeat.steps] == [s.sha for s in result.steps]


def test_an_interrupted_bisection_resumes_from_its_records(tmp_path):
    whole = FakeRunner({3: 1.3})
    bisect(tmp_path / "whole", whole).run()
    first = FakeRunner({3: 1.3}, stop_after=13)  # stops between A and B of a round
    with pytest.raises(KeyboardInterrupt):
        bisect(tmp_path, first).run()
    rest = FakeRunner({3: 1.3})
    result = bisect(tmp_path, rest).run()
    assert result.first_bad == COMMITS[3]
    # The round cut between its A and B runs again whole, A then B: one run more than uninterrupted.
    assert first.runs + rest.runs == whole.runs + 1


def test_a_round_that_failed_runs_again_on_resume_a_bounded_number_of_times(tmp_path, capsys):
    """A good commit's first round that timed out once made every later start answer "the good
    commit cannot be measured" (exit 2) from its record. A resume now runs a failed round again, the
    earlier try set aside (and kept), until it has run MAX_TRIES times; each step says what it read."""
    first = FakeRunner({5: 1.3}, timed_out={("a", 8, 1)})
    with pytest.raises(BadCommit, match="good commit"):
        bisect(tmp_path, first).run()
    again = FakeRunner({5: 1.3})
    result = bisect(tmp_path, again).run()
    assert result.first_bad == COMMITS[5]
    from ddpbench.commands.bisect import resume_line, step_line
    from ddpbench.gate.bisect import EARLIER_TRIES, MAX_TRIES, kept_rounds

    opening = result.steps[0]
    assert opening.sha == COMMITS[8] and opening.retried == 1 and opening.reused == 0
    folder = opening.folder
    assert os.listdir(os.path.join(folder, EARLIER_TRIES)) == ["r01-try1"]  # the timed-out try is kept
    assert json.load(open(os.path.join(folder, EARLIER_TRIES, "r01-try1", "a", "runs", "a-r01.json")))["status"] == (
        "timeout"
    )
    # A third start reads every round; each step says so.
    third = FakeRunner({5: 1.3})
    repeat = bisect(tmp_path, third).run()
    assert third.runs == 0 and repeat.first_bad == COMMITS[5]
    line = step_line(repeat.steps[0], {})
    assert f"{opening.rounds} round(s) from records" in line and "new runs" not in line, line
    rounds = kept_rounds(str(tmp_path / "records"))
    # not chance: a count of the fake runner's rounds, kept as records
    assert rounds == sum(step.rounds for step in repeat.steps) and rounds > 0
    said = resume_line(
        rounds, "cpu-x-2c", "0.1.0", {"ddpbench_code": "c0de", "torch": "2.14.1", "cuda": None, "driver": None}
    )
    assert f"resuming from {rounds} round(s)" in said and "torch 2.14.1" in said and "code c0de" in said
    # A round that fails every time is tried MAX_TRIES times in all, then read as it is.
    always = tmp_path / "always"
    for start in range(MAX_TRIES + 1):
        runner = FakeRunner({5: 1.3}, timed_out={("a", 8, 1)})
        with pytest.raises(BadCommit, match="good commit"):
            bisect(always, runner).run()
        assert runner.runs == (2 if start < MAX_TRIES else 0), start


def test_the_records_key_holds_torch_cuda_the_driver_and_ddpbenchs_own_code(tmp_path):
    """Records made with another torch, CUDA, driver, or another ddpbench code (an uncommitted edit,
    or an install outside git whose version is just 0.1.0) are kept apart, never reused."""
    from ddpbench.gate.bisect import store_key

    made_with = {"ddpbench_code": "c0de", "torch": "2.14.1", "cuda": "13.0", "driver": "580.65.06"}
    key = store_key("1x-h100", "0.1.0", ["--script", "t.py"], "/src/repo", made_with)
    for part, other in (("torch", "2.13.0"), ("cuda", None), ("driver", "570.1"), ("ddpbench_code", "d1ff")):
        assert store_key("1x-h100", "0.1.0", ["--script", "t.py"], "/src/repo", {**made_with, part: other}) != key
    assert store_key("1x-h100", "0.1.0", ["--script", "t.py"], "/src/repo", dict(made_with)) == key
    # The code's hash is of the files on disk: a copy with no git, edited, hashes differently.
    import shutil

    import ddpbench
    from ddpbench.commands.bisect import code_hash

    copy = tmp_path / "ddpbench"
    shutil.copytree(os.path.dirname(ddpbench.__file__), copy, ignore=shutil.ignore_patterns("__pycache__"))
    assert code_hash(str(copy)) == code_hash()
    with open(copy / "gate" / "bisect.py", "a") as handle:
        handle.write("# an uncommitted edit\n")
    assert code_hash(str(copy)) != code_hash()


def test_a_commit_that_cannot_train_is_skipped_and_named(tmp_path):
    result = bisect(tmp_path, FakeRunner({6: 1.3}, broken={4})).run()
    assert result.first_bad == COMMITS[6]
    skipped = [step for step in result.steps if step.verdict == SKIP]
    assert [step.sha for step in skipped] == [COMMITS[4]] and "failed" in skipped[0].reason
    # One that cannot even be imported: its run is refused, and what it said is the reason.
    result = bisect(tmp_path / "3", FakeRunner({6: 1.3}, refused={4})).run()
    reason = next(step.reason for step in result.steps if step.verdict == SKIP)
    assert result.first_bad == COMMITS[6] and "wrote no record" in reason and "not valid Python" in reason
    # Only an untestable commit left before the first bad one: either may be it (as git bisect says).
    result = bisect(tmp_path / "2", FakeRunner({5: 1.3}, broken={5})).run()
    assert result.verdict == CANNOT_TELL and result.candidates == [COMMITS[5], COMMITS[6]]


def test_no_slower_commit_and_a_slowdown_at_the_margin(tmp_path):
    runner = FakeRunner({})
    result = bisect(tmp_path, runner).run()
    # not chance: the fake runner's numbers are seeded
    assert result.verdict == "none" and len(result.steps) == 1 and result.deciding.high < 0.05
    # Unchanged code answers before the last look (at 4 rounds t(3) at 0.33 % is 7.5: the 1 % jitter's
    # interval then just reaches the margin; 8 rounds clear it).
    assert runner.runs < 2 * planned_looks(4, 12)[-1]
    # 5 % slower with a 4 % jitter: the interval straddles the margin at every look.
    runner = FakeRunner({2: 1 / 0.95}, jitter=0.04)
    result = bisect(tmp_path / "2", runner, max_rounds=8).run()
    assert result.verdict == CANNOT_TELL and result.deciding.verdict == CANNOT_TELL
    reason = result.deciding.reason
    assert result.deciding.rounds == 8 and ("rounds would tell" in reason or "no number of rounds" in reason)


def test_the_good_commit_must_train(tmp_path):
    runner = FakeRunner({})
    runner.template = msgspec.structs.replace(runner.template, status="failed")
    with pytest.raises(BadCommit, match="good commit"):
        bisect(tmp_path, runner).run()


def test_looks_are_planned_and_checked():
    assert planned_looks(4, 12) == [4, 8, 12] and planned_looks(3, 8) == [3, 6, 8]
    with pytest.raises(ValueError, match="--rounds must be at least 2"):
        planned_looks(1, 4)


def test_imports_from_the_checkout_are_found(tmp_path):
    checkout, tree = tmp_path / "co", tmp_path / "co" / ".git" / "ddpbench-worktrees" / "abc"
    module = type(sys)("mine")
    module.__file__ = str(checkout / "mypkg" / "__init__.py")
    own = type(sys)("own")
    own.__file__ = str(tree / "mypkg" / "__init__.py")
    elsewhere = type(sys)("numpy")
    elsewhere.__file__ = np.__file__
    venv = type(sys)("torch")  # a virtual environment kept inside the checkout is not the user's code
    venv.__file__ = str(checkout / ".venv" / "lib" / "python3.11" / "site-packages" / "torch" / "__init__.py")
    modules = {"mine": module, "own": own, "numpy": elsewhere, "torch": venv}
    found = modules_outside(str(tree), str(checkout), modules)
    assert [name for name, _ in found] == ["mine"]


def git(repo, *args):
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout


def small_repo(tmp_path, files: list[dict]) -> str:
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q")
    git(repo, "config", "user.email", "t@example.com")
    git(repo, "config", "user.name", "t")
    for number, changes in enumerate(files):
        for name, text in changes.items():
            (repo / name).parent.mkdir(parents=True, exist_ok=True)
            (repo / name).write_text(text)
        git(repo, "add", "-A")
        git(repo, "commit", "-qm", f"commit {number}")
    return str(repo)


TRAIN = "import sys\nSTEP_SLEEP = {}\n"


def test_a_script_bisects_through_its_own_worktrees(tmp_path):
    repo = small_repo(tmp_path, [{"scripts/train.py": TRAIN.format(i)} for i in range(5)])
    shas = git(repo, "log", "--reverse", "--format=%H").split()
    args = ["--script", os.path.join(repo, "scripts", "train.py"), "--nproc", "2", "--", "--epochs", "1"]
    top, inside = user_file(args)
    # not chance: the repository's top folder as git names it, and the script's path inside it
    assert top == os.path.realpath(repo) and inside == os.path.join("scripts", "train.py")
    assert inside_tree(args, inside) == ["--script", inside, "--nproc", "2", "--", "--epochs", "1"]
    assert inside_tree(["--workload=/x/models/w.py:net"], "models/w.py") == ["--workload=models/w.py:net"]
    assert inside_tree(["--workload", "mlp"], "models/w.py") == ["--workload", "mlp"]  # a built-in: unchanged
    assert user_file(["--workload", "mlp", "--", "--script", "x.py"]) is None  # after --: the script's own
    trees = Trees(top, inside)
    seen = {}
    fake = FakeRunner({1: 1.3})

    def run_round(side, sha, index, folder):
        tree = trees.tree(shas[0] if side == "a" else sha)
        seen[sha] = open(os.path.join(tree, inside)).read()  # the script as that commit has it
        slower = side == "b" and int(seen[sha].split("= ")[1]) >= 3  # commit 3 plants the slowdown
        fake(side, COMMITS[1 if slower else 0], index, folder)

    try:
        result = Bisection(shas, run_round, str(tmp_path / "rec"), GateSettings(), progress=lambda _: None).run()
        assert result.first_bad == shas[3]
        assert seen[shas[3]] == TRAIN.format(3) and seen[shas[2]] == TRAIN.format(2)
        assert os.path.isdir(trees.root) and len(trees.used) >= 3
    finally:
        trees.prune()
    assert not os.path.exists(trees.root) and git(repo, "worktree", "list").count("\n") == 1


WORKLOAD = """import time

import torch
from torch import nn

from ddpbench import SyntheticDataset, Workload
from mypkg import SLEEP_S, UNIT


class Slow(nn.Module):
    def __init__(self):
        super().__init__()
        self.layer = nn.Linear(8, 1)

    def forward(self, x):
        time.sleep(SLEEP_S)
        return self.layer(x)


def net(size, data_dir=None):
    def make_sample(generator):
        x = torch.randn(8, generator=generator)
        return x, x.sum(dim=0, keepdim=True)

    return Workload(
        model=Slow(),
        make_dataset=lambda length: SyntheticDataset(length, make_sample),
        loss=nn.functional.mse_loss,
        batch_size=4,
        sample_unit=UNIT,
    )
"""


PYPROJECT = '[project]\nname = "mypkg"\nversion = "0.1"\n[tool.setuptools]\npackages = ["mypkg"]\n'


SRC_LAYOUT = PYPROJECT.replace("[tool.setuptools]\n", '[tool.setuptools]\npackage-dir = {"" = "src"}\n')


def test_refs_that_are_no_commit_are_refused(tmp_path):
    repo = small_repo(tmp_path, [{"w.py": WORKLOAD, "mypkg/__init__.py": "SLEEP_S = 0\nUNIT = 'a'\n"}])
    run = ["--", "--workload", "w.py:net", "--strategy", "local"]
    done = ddpbench("ab", "no-such-ref", "HEAD", *run, cwd=repo)
    assert done.returncode == 2 and "names no commit" in done.stderr and len(done.stderr.splitlines()) == 1
    done = ddpbench("bisect", "--good", "HEAD", "--bad", "HEAD", *run, cwd=repo)
    assert done.returncode == 2 and "not an ancestor" in done.stderr
    assert not os.path.exists(os.path.join(repo, "results"))  # nothing ran, nothing written
    assert not os.path.exists(os.path.join(repo, ".git", "ddpbench-worktrees"))  # no tree made


def editable_install(repo: str, tmp_path) -> dict:
    """`pip install -e repo` into a prefix of the test's own, made live for every process started
    with the returned environment (a sitecustomize adds its site-packages), as a user's editable
    install is: the processes a bisection starts import the user's package from the checkout."""
    prefix, hook = tmp_path / "prefix", tmp_path / "hook"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--no-index"]
        + ["--prefix", str(prefix), "-e", repo],
        check=True,
        capture_output=True,
    )
    site = next(str(p) for p in prefix.rglob("site-packages"))
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(f"import site\nsite.addsitedir({site!r})\n")
    return {"PYTHONPATH": os.pathsep.join([REPO, str(hook)])}


@pytest.mark.launches
def test_one_real_step_runs_each_commits_own_package_despite_an_editable_install(tmp_path):
    """The user's package is installed in editable mode from the main checkout, which holds the bad
    commit's code; the good commit's runs must still import the good commit's package. It lives in
    src/ (as packaging guides advise): not on the import path of a process started in the tree, so
    without the tree's src/ first, the editable install would hand every side the checkout's."""
    repo = small_repo(
        tmp_path,
        [
            {"w.py": WORKLOAD, "src/mypkg/__init__.py": "SLEEP_S = 0\nUNIT = 'good'\n", "pyproject.toml": SRC_LAYOUT},
            {"src/mypkg/__init__.py": "SLEEP_S = 0.03\nUNIT = 'bad'\n"},
        ],
    )
    env = editable_install(repo, tmp_path)
    check = subprocess.run(
        [sys.executable, "-c", "import mypkg; print(mypkg.__file__)"], cwd=tmp_path, env={**os.environ, **env}
    )
    assert check.returncode == 0  # the editable install is live for the processes the bisection starts
    out = tmp_path / "bisect.json"
    done = ddpbench(
        "bisect", "--good", "HEAD~1", "--bad", "HEAD", "--rounds", "2", "--max-rounds", "2",
        "--family-alpha", "40%", "--records", str(tmp_path / "records"), "--json-file", str(out), "--",
        "--workload", "w.py:net", "--strategy", "local", "--steps", "6", "--warmup", "1", "--no-profile",
        cwd=repo, env=env,
    )  # fmt: skip
    # 4: named, but the machine was busy during a run (other tests, other people): the answer stands.
    assert done.returncode in (0, 4), done.stdout + done.stderr
    answer = json.loads(out.read_text())
    head = git(repo, "rev-parse", "HEAD").strip()
    assert answer["first_bad"] == head and "first bad commit" in done.stdout and "reproduce: " in done.stdout
    records = [
        os.path.join(folder, name)
        for folder, _, names in os.walk(tmp_path / "records")
        for name in names
        if os.path.basename(folder) == "runs" and name.endswith(".json")
    ]
    units = {}
    assert len(records) == 4
    for path in records:
        side = os.path.basename(os.path.dirname(os.path.dirname(path)))
        units.setdefault(side, set()).add(json.load(open(path))["metrics"]["sample_unit"])
    # The checkout (and its editable install) holds the bad commit: the good side ran its own package.
    assert units == {"a": {"good"}, "b": {"bad"}}
    assert git(repo, "worktree", "list").count("\n") == 1  # pruned


SCRIPT = """import sys
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from mypkg import SLEEP_S

dist.init_process_group("gloo")
model = DistributedDataParallel(nn.Linear(8, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
inputs = torch.randn(4, 8)
for _ in range(int(sys.argv[1])):
    optimizer.zero_grad()
    time.sleep(SLEEP_S)
    model(inputs).sum().backward()
    optimizer.step()
dist.destroy_process_group()
"""


def files_holding(folder, text: str) -> list[str]:
    return [
        os.path.join(place, name)
        for place, _, names in os.walk(folder)
        for name in names
        if text.encode() in open(os.path.join(place, name), "rb").read()
    ]


@pytest.mark.launches
def test_two_script_bisections_at_once_each_find_their_own_commit_and_keep_no_secret(tmp_path):
    """`bisect -- --script train.py`: real runs of an unmodified training script under torchrun,
    each side from its own worktree. The script imports the user's package, installed in editable
    mode from the checkout, which holds the last commit's (the longest sleep in every step): each
    side must import its own commit's, or both sides would run alike and no commit would be found.

    Two bisections over the repository at once (commit 1 slower than 0; commit 2 slower than 1):
    both run commit 1, each from a tree of its own (one shared tree was removed by the first to end).
    The first gives the script a token after --: nothing it prints or writes keeps it. The second
    keeps its records where they go by default: outside the repository."""
    repo = small_repo(
        tmp_path,
        [
            {"train.py": SCRIPT, "src/mypkg/__init__.py": "SLEEP_S = 0\n", "pyproject.toml": SRC_LAYOUT},
            {"src/mypkg/__init__.py": "SLEEP_S = 0.03\n"},
            {"src/mypkg/__init__.py": "SLEEP_S = 0.06\n"},
        ],
    )
    cache = tmp_path / "cache"  # the second keeps its records where they go by default
    env = command_environment({**editable_install(repo, tmp_path), "XDG_CACHE_HOME": str(cache)}, None, gpus=False)
    shas = git(repo, "log", "--reverse", "--format=%H").split()
    bisections = []
    for good, bad, script_args in (("HEAD~2", "HEAD~1", ["--hf-token", "SECRETXYZ"]), ("HEAD~1", "HEAD", [])):
        records, out = (tmp_path / "records" if script_args else cache), tmp_path / f"{good}.json"
        command = [
            sys.executable, "-m", "ddpbench", "bisect", "--good", good, "--bad", bad, "--rounds", "2",
            "--max-rounds", "2", "--family-alpha", "40%", *(["--records", str(records)] if script_args else []),
            "--json-file", str(out), "--",
            "--script", "train.py", "--nproc", "1", "--device", "cpu", "--steps", "8", "--warmup", "2",
            "--no-profile", "--", "8", *script_args,
        ]  # fmt: skip
        said = [tmp_path / f"{good}.{stream}" for stream in ("out", "err")]  # files: neither waits on a pipe
        with open(said[0], "w") as stdout, open(said[1], "w") as stderr:
            process = subprocess.Popen(command, cwd=repo, env=env, stdout=stdout, stderr=stderr)
        bisections.append((process, records, out, said))
    for (process, records, out, said), first_bad in zip(bisections, shas[1:]):
        process.wait(timeout=900)
        stdout, stderr = (path.read_text() for path in said)
        # 4: named, but the machine was busy during a run (the other bisection, other tests): the answer stands.
        assert process.returncode in (0, 4), stdout + stderr
        assert json.loads(out.read_text())["first_bad"] == first_bad and "first bad commit" in stdout, stdout
        specs = [
            json.load(open(os.path.join(folder, name)))["spec"]
            for folder, _, names in os.walk(records)
            for name in names
            if os.path.basename(folder) == "runs" and name.endswith(".json")
        ]
        assert len(specs) == 4 and all(spec["script"]["path"].endswith("train.py") for spec in specs), specs
        if process is bisections[0][0]:
            assert "SECRETXYZ" not in stdout + stderr + out.read_text() and files_holding(records, "SECRETXYZ") == []
            assert all(spec["script"]["args"] == ["8", "--hf-token", "<redacted>"] for spec in specs), specs
            assert "--hf-token '<redacted>'" in json.loads(out.read_text())["reproduce"]
    assert git(repo, "worktree", "list").count("\n") == 1  # pruned, both
    assert not os.path.exists(os.path.join(repo, ".git", "ddpbench-worktrees"))
    assert git(repo, "status", "--porcelain") == ""  # no records, and nothing a round wrote, in the repository


def test_confirm_with_a_ref_of_the_workloads_repository(tmp_path):
    repo = small_repo(tmp_path, [{"w.py": WORKLOAD, "mypkg/__init__.py": "SLEEP_S = 0\nUNIT = 'a'\n"}])
    template = next(r for r in load_side(SWEEP) if r.run_id == "mlp-ddp-n2")
    workload = os.path.join(repo, "w.py") + ":net"
    record = msgspec.structs.replace(template, spec=template.spec.replace(workload=workload))
    with pytest.raises(TreeError, match="nor a commit of"):
        confirm_base("no-such-ref", [record], sys.executable, REPO)
    with pytest.raises(TreeError, match="they have none"):
        confirm_base("HEAD", [template], sys.executable, REPO)
    commit = confirm_base("HEAD", [record], sys.executable, REPO)
    assert commit.rewrite(["--workload", workload, "--nproc", "2"]) == ["--workload", "w.py:net", "--nproc", "2"]
    assert not commit.trees.used and commit.candidate.tree == os.path.realpath(repo)  # no worktree made yet


def test_the_answer_names_the_commit_its_interval_and_why(tmp_path, capsys):
    import argparse

    from ddpbench.commands.bisect_text import answer

    bisection = bisect(tmp_path, FakeRunner({5: 1.3}))
    result = bisection.run()
    subjects = {sha: f"subject {i}" for i, sha in enumerate(COMMITS)}
    out = tmp_path / "answer.json"
    given = ["--workload", "w.py:net", "--nproc", "2"]
    code = answer(result, argparse.Namespace(json=str(out)), GateSettings(), subjects, given, bisection, 60.0)
    printed = capsys.readouterr().out
    document = json.loads(out.read_text())
    # The fake runner's records carry no machine load and no speed check to flag: the machine is
    # not the answer, and the first bad commit found exits 0.
    assert document["machine"] == [] and code == 0 and document["exit_code"] == 0
    assert f"first bad commit: {COMMITS[5][:12]} subject 5" in printed and "interval" in printed
    assert (
        f"ddpbench ab {COMMITS[0][:12]} {COMMITS[5][:12]} --rounds" in printed and "-- --workload w.py:net" in printed
    )
    assert document["first_bad"] == COMMITS[5] and document["why"] and isinstance(document["why"][0], dict)
    assert "Bonferroni" in printed and document["level_per_look"] == pytest.approx(0.01 / 3)


def test_a_scripts_secret_arguments_are_hidden_in_the_answer_and_in_what_a_round_said(tmp_path, capsys):
    """The reproduce line (printed and in --json-file) once carried the script's arguments as given,
    a token included; what a round printed on stderr is kept beside its records and its last line
    becomes a skipped commit's reason. Both hide secrets by the rule every command uses."""
    import argparse

    from ddpbench.commands.bisect_text import answer
    from ddpbench.gate import ab

    bisection = bisect(tmp_path, FakeRunner({5: 1.3}))
    result = bisection.run()
    out = tmp_path / "answer.json"
    given = ["--script", "train.py", "--nproc", "2", "--", "--hf-token", "SECRETXYZ", "--key=hf_" + "a" * 20]
    answer(result, argparse.Namespace(json=str(out)), GateSettings(), {}, given, bisection, 60.0)
    printed = capsys.readouterr().out
    assert "SECRETXYZ" not in printed and "hf_aaaa" not in printed and "SECRETXYZ" not in out.read_text()
    assert "-- --hf-token '<redacted>' '--key=<redacted>'" in printed and "give it again after --" in printed
    # A round whose run says its arguments on stderr, as a refused command line does.
    says = tmp_path / "python"
    says.write_text('#!/bin/sh\necho "error: arguments after -- are a script\'s ($*)" >&2\nexit 2\n')
    says.chmod(0o755)
    side = ab.Side("B", "says", str(says), REPO)
    path, code = ab.run_round(side, ["--script", "t.py", "--", "--hf-token", "SECRETXYZ"], str(tmp_path / "ab"), 1)
    kept = (tmp_path / "ab" / "b" / "b-r01.stderr").read_text()
    assert code == 2 and "--hf-token <redacted>" in kept and "SECRETXYZ" not in kept
    assert "SECRETXYZ" not in ab.round_said(path) and "<redacted>" in ab.round_said(path)


def test_each_rounds_own_options_go_before_a_scripts_own_arguments():
    """A round adds --out and --run-id where `ddpbench run` reads them: after a `--` they would be
    the script's (the round then wrote its record elsewhere and the commit was called unmeasurable);
    a script's own --out is its own business, not a clash with the round's."""
    from ddpbench.gate.ab import ROUND_TIMEOUT_S, before_script_arguments, round_timeout, sets_out_or_run_id

    own = ["--out", "o", "--run-id", "a-r01"]
    assert before_script_arguments(["--workload", "mlp"], own) == ["--workload", "mlp", *own]
    script = ["--script", "train.py", "--", "--out", "ckpt", "8"]
    assert before_script_arguments(script, own) == ["--script", "train.py", *own, "--", "--out", "ckpt", "8"]
    assert not sets_out_or_run_id(script) and sets_out_or_run_id(["--out=x", "--", "y"])
    # A script's own --run-timeout is not the round's.
    assert round_timeout(["--script", "t.py", "--", "--run-timeout", "5"]) == ROUND_TIMEOUT_S
    assert round_timeout(["--run-timeout", "5", "--", "x"]) == 605.0


def test_ab_takes_a_training_script_as_bisect_does(tmp_path):
    """`ab REF REF -- --script train.py -- ARGS` reaches the refs' check; its run options were read
    without --script, so a script's A/B was refused for a missing --workload."""
    repo = small_repo(tmp_path, [{"train.py": SCRIPT}])
    done = ddpbench("ab", "no-such-ref", "HEAD", "--", "--script", "train.py", "--nproc", "1", "--", "8", cwd=repo)
    assert done.returncode == 2 and "names no commit" in done.stderr, done.stderr
    assert "--workload" not in done.stderr


FORWARD = """import time

import torch
from torch import nn

from ddpbench import SyntheticDataset, Workload

FORWARD_S = {forward_s}


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.layer = nn.Linear(8, 1)

    def forward(self, x):
        time.sleep(FORWARD_S)  # the forward's own work, the same on every rank
        return self.layer(x)


def net(size, data_dir=None):
    def make_sample(generator):
        x = torch.randn(8, generator=generator)
        return x, x.sum(dim=0, keepdim=True)

    return Workload(
        model=Model(),
        make_dataset=lambda length: SyntheticDataset(length, make_sample),
        loss=nn.functional.mse_loss,
        batch_size=4,
    )
"""


@pytest.mark.launches
@pytest.mark.alone  # two commits' runs compared: a neighbour would slow one side's rounds, not the other's
@pytest.mark.test_all  # about 2.3 minutes holding the machine; make test bisects a workload file and scripts above
def test_a_commit_that_doubles_the_forward_on_every_rank_is_named_with_its_compute_from_the_ablation(tmp_path):
    """The commonest regression, a model slower on every rank: bisect named the commit and no cause
    ("would need: the single-device run's slowdown was not compared: it needs each side's local
    runs"), though every round is a DDP run whose in-process ablation steps the model alone on one
    rank. Real rounds of two ranks, no local run: the commit that doubles the forward (30 ms of a
    step of about 32 ms to 60 ms) is found, and the model's own compute is named from the ablation.
    The forward is a sleep, long beside the delays of a busy moment of this shared machine (a round
    of 5 ms steps read 30 ms once), and three rounds: a round of the ablation on a busy moment reads
    twice the one-device step, and the compute's test at 0.6 % over two runs a side needs t(2) of 9."""
    from chance import verdict

    repo = small_repo(
        tmp_path, [{"model.py": FORWARD.format(forward_s=0.03)}, {"model.py": FORWARD.format(forward_s=0.06)}]
    )
    out = tmp_path / "bisect.json"
    done = ddpbench(
        "bisect", "--good", "HEAD~1", "--bad", "HEAD", "--rounds", "3", "--max-rounds", "3",
        "--family-alpha", "40%", "--records", str(tmp_path / "records"), "--json-file", str(out), "--",
        "--workload", "model.py:net", "--nproc", "2", "--device", "cpu", "--steps", "8", "--warmup", "2",
        "--profile-steps", "1", cwd=repo,
    )  # fmt: skip
    # 4: named, but the machine was busy during a run (other tests, other people): the answer stands.
    assert done.returncode in (0, 4), done.stdout + done.stderr
    answer = json.loads(out.read_text())
    specs = [
        json.load(open(os.path.join(folder, name)))["spec"]
        for folder, _, names in os.walk(tmp_path / "records")
        for name in names
        if os.path.basename(folder) == "runs" and name.endswith(".json")
    ]
    assert len(specs) == 6 and {spec["strategy"] for spec in specs} == {"ddp"}, specs  # no local run
    head = git(repo, "rev-parse", "HEAD").strip()
    [why] = answer["why"]
    compute = next((cause for cause in why["causes"] if cause["name"] == "compute"), None)
    verdict(
        answer["first_bad"] == head
        and compute is not None
        and compute["source"] == "ablation"
        and why["named"][:1] == ["compute"]
        and "one rank stepping the model alone in the in-process ablation slowed by" in done.stdout,
        rate=1e-4,
        unreachable="the bisection's answer is read, not its rounds' one-device steps; the one-device step "
        "about doubles (a log change of about 0.65) against a run-to-run spread of at most "
        "about 13 % (three runs of a 20 ms forward read 22.3 to 28.2 ms on a machine busy with other work): t(4) "
        "about 6 against the compute's one-sided test at 0.6 % (4.9); a longer forward makes that spread smaller; "
        "the step about 45 % slower against bisect's 5 % margin",
        what=done.stdout + json.dumps(why, indent=1),
    )
