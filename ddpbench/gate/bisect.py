"""`ddpbench bisect`: the first commit of the user's repository that made one configuration
slower, each step a same-job A/B (`ddpbench ab`'s rounds and paired test). No torch.

A step compares a commit (B) with the good commit (A), round by round, A then B. Its answer comes
from the paired test of `ab` (`gate.ab.paired_comparisons`, throughput) as an interval on the
slowdown, B against A, held to the margin (`--threshold`, the gate's `--max-regression`):
- "bad" where the interval's lower end is above the margin;
- "good" where its upper end is below it;
- otherwise more rounds, at the planned looks (`--rounds`, twice that, ... up to `--max-rounds`),
  after which it is "cannot tell", with the rounds it would need.
Looking again after more rounds would raise the chance of a wrong answer with every look, so the
error rate (the gate's `--family-alpha`) is spent over the planned looks by Bonferroni: each look's
interval is one-sided at family_alpha / looks on either end. A step then answers wrongly at most
family_alpha of the time, "bad" or "good", however many looks it takes.

A commit whose code cannot import or train (B's first round fails) is skipped and named, as
`git bisect skip` does; the search goes on with the commit nearest the middle of what is left.

Every round is a record on disk, kept per step under a folder keyed with everything its speed may
depend on besides the user's commit (`store_key`): the machine class, ddpbench's version and a hash
of its code (so uncommitted changes, or an install outside git, count), torch, its CUDA, the NVIDIA
driver and the run options. A step reads the rounds it finds before running any, so an interrupted
bisection resumes where it stopped, and a bisection repeated on the same records takes the same path
to the same commit without running anything. A round that failed at an earlier start (a run that
timed out, a record that was never written) is not taken as the answer for good: it runs again, its
earlier try set aside, until it has been tried MAX_TRIES times in all.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field

from ddpbench.gate import stats
from ddpbench.gate.ab import MIN_ROUNDS, load_round, paired_comparisons, round_said
from ddpbench.gate.compare import Comparison, GateError, usable, why_unusable
from ddpbench.records.schema import Record
from ddpbench.records.store import record_path

GOOD, BAD, SKIP, CANNOT_TELL = "good", "bad", "skip", "cannot tell"
MEASURE = "throughput"
MAX_TRIES = 3
"""Runs of one round in all, over the starts of a bisection: a failure that repeats is the commit's
(or the machine's) answer, and a resume does not run it for ever."""
EARLIER_TRIES = "earlier-tries"
"""Where a failed round's files go, in its step's folder, when it runs again: kept, never read as the
step's rounds."""
KEY_FILE = "key.json"

RunRound = Callable[[str, str, int, str], None]
"""(side "a" or "b", commit, round, the step's folder) -> nothing: the round's record is then at
`round_path(folder, side, round)` (or is missing: the run wrote none)."""


class BadCommit(GateError):
    """The good or the bad commit cannot be measured: bad input (exit 2)."""


@dataclass
class Step:
    """One commit compared with the good one."""

    sha: str
    verdict: str
    rounds: int = 0
    """Usable rounds the answer stands on."""
    new_runs: int = 0
    """Runs started for it in this bisection (0: answered from records)."""
    comparison: Comparison | None = None
    """The paired test at the look that answered (or the last look)."""
    low: float | None = None
    high: float | None = None
    """The slowdown's interval at that look, as fractions of throughput lost (negative: faster)."""
    level: float | None = None
    """The one-sided level of each end of that interval."""
    folder: str = ""
    reason: str = ""
    """Why it was skipped, or what it would need (cannot tell)."""
    reused: int = 0
    """Rounds read from the records of an earlier start."""
    retried: int = 0
    """Rounds that had failed at an earlier start and ran again."""
    done: set[int] = field(default_factory=set)
    """Rounds run or read in this start: each is settled once."""

    @property
    def slowdown(self) -> float | None:
        return None if self.comparison is None else 1 - self.comparison.ratio


@dataclass
class Result:
    verdict: str
    """found, none (no commit slower beyond the margin), cannot tell."""
    steps: list[Step] = field(default_factory=list)
    first_bad: str | None = None
    deciding: Step | None = None
    """The step that named the first bad commit (found), or answered the search (otherwise)."""
    candidates: list[str] = field(default_factory=list)
    """cannot tell: the commits the first bad one is among."""

    @property
    def new_runs(self) -> int:
        return sum(step.new_runs for step in self.steps)


def planned_looks(first: int, most: int) -> list[int]:
    """The rounds after which a step looks: first, 2 x first, ... and `most` last."""
    if first < MIN_ROUNDS:
        raise GateError(f"--rounds must be at least {MIN_ROUNDS} (a paired test needs two); got {first}")
    if most < first:
        raise GateError(f"--max-rounds must be at least --rounds ({first}); got {most}")
    looks = list(range(first, most + 1, first))
    return looks if looks[-1] == most else looks + [most]


def round_path(folder: str, side: str, index: int) -> str:
    return record_path(os.path.join(folder, side), f"{side}-r{index:02d}")


def store_key(machine_class: str, version: str, run_args: list[str], repo: str, software: dict) -> str:
    """The records' folder under the store: what must match for a record to be reused. `software`
    is what the rounds' speed may depend on besides the commit (ddpbench's code hash, torch, CUDA,
    the driver): it is hashed with the run options, and written out in `write_key`."""
    key = json.dumps({"run_args": run_args, **software}, sort_keys=True)
    options = hashlib.sha256(key.encode()).hexdigest()[:12]
    name = re.sub(r"[^A-Za-z0-9_.-]+", "_", os.path.basename(repo.rstrip("/"))) or "repo"
    return os.path.join(machine_class, f"ddpbench-{re.sub(r'[^A-Za-z0-9_.+-]+', '_', version)}", f"{name}-{options}")


def write_key(folder: str, machine_class: str, version: str, run_args: list[str], repo: str, software: dict) -> None:
    """What the folder's records were made with, for people (the folder's name is a hash); a script's
    secret arguments hidden."""
    from ddpbench.config.secrets import redact_args
    from ddpbench.records.store import write_atomic

    shown = {"machine_class": machine_class, "ddpbench": version, **software}
    shown.update(run_args=list(redact_args(run_args)), repository=repo)
    write_atomic(os.path.join(folder, KEY_FILE), json.dumps(shown, indent=1, sort_keys=True) + "\n")


def kept_rounds(folder: str) -> int:
    """Rounds whose B ran, kept under a records folder (every step of it)."""
    if not os.path.isdir(folder):
        return 0
    return sum(
        1
        for step in os.listdir(folder)
        if os.path.isdir(os.path.join(folder, step, "b", "runs"))
        for name in os.listdir(os.path.join(folder, step, "b", "runs"))
        if name.endswith(".json")
    )


def said_path(folder: str, side: str, index: int) -> str:
    """What the run said on stderr (`gate.ab.run_round` keeps it beside the records)."""
    return os.path.join(folder, side, f"{side}-r{index:02d}.stderr")


def tries(folder: str, index: int) -> int:
    """How often round `index` of a step has run: its earlier tries set aside, and the one in place."""
    earlier = os.path.join(folder, EARLIER_TRIES)
    prefix = f"r{index:02d}-try"
    return 1 + (sum(1 for name in os.listdir(earlier) if name.startswith(prefix)) if os.path.isdir(earlier) else 0)


def set_aside(folder: str, index: int) -> None:
    """Move every file of round `index` (both sides' record, what they said, their logs and traces)
    to the step's earlier tries, so that the round runs again and the step never reads the old try."""
    target = os.path.join(folder, EARLIER_TRIES, f"r{index:02d}-try{tries(folder, index)}")
    for side in ("a", "b"):
        run_id = f"{side}-r{index:02d}"
        side_folder = os.path.join(folder, side)
        places = [side_folder] + [
            os.path.join(side_folder, name)
            for name in (os.listdir(side_folder) if os.path.isdir(side_folder) else [])
            if os.path.isdir(os.path.join(side_folder, name))
        ]
        for place in places:
            for name in os.listdir(place):
                if name == run_id or name.startswith(run_id + "."):
                    moved = os.path.join(target, side, os.path.relpath(os.path.join(place, name), side_folder))
                    os.makedirs(os.path.dirname(moved), exist_ok=True)
                    os.replace(os.path.join(place, name), moved)


def rounds_needed(step_comparison: Comparison, margin_log: float, alpha: float) -> int | None:
    """Rounds with which the interval at level `alpha` would clear the margin, were the slowdown and
    the spread of the rounds as measured; None where it sits at the margin (no count would do)."""
    if step_comparison.se is None or not step_comparison.candidate_runs:
        return None
    slowdown_log = -math.log(step_comparison.ratio)
    distance = abs(slowdown_log - margin_log)
    spread = step_comparison.se * math.sqrt(step_comparison.candidate_runs)
    for count in range(MIN_ROUNDS, stats.MAX_RUNS_NEEDED + 1):
        if stats.quantile(1 - alpha, count - 1) * spread / math.sqrt(count) < distance:
            return count
    return None


class Bisection:
    def __init__(
        self,
        commits: list[str],
        run_round: RunRound,
        folder: str,
        settings: stats.GateSettings,
        first_rounds: int = 4,
        max_rounds: int = 12,
        progress=print,
        on_step=None,
    ):
        if len(commits) < 2:
            raise GateError("the good commit must be an ancestor of the bad one, with at least one commit between")
        self.commits = commits
        """The good commit, then every commit after it up to the bad one, oldest first."""
        self.run_round = run_round
        self.folder = folder
        self.settings = settings
        self.looks = planned_looks(first_rounds, max_rounds)
        self.alpha = settings.family_alpha / len(self.looks)
        """Each look's one-sided level, on either end: the step's error rate over its looks (Bonferroni)."""
        self.progress = progress
        self.on_step = on_step
        """Called with each step once it has answered (progress while it runs)."""
        self.steps: dict[str, Step] = {}

    @property
    def good(self) -> str:
        return self.commits[0]

    def step_folder(self, sha: str) -> str:
        return os.path.join(self.folder, f"{self.good[:12]}-{sha[:12]}")

    def _pairs(self, folder: str, count: int) -> list[tuple[Record | None, Record | None]]:
        return [self._pairs_at(folder, i) for i in range(1, count + 1)]

    def _ensure_round(self, step: Step, index: int) -> None:
        """Round `index` on disk, settled once per start. A round whose B never started (never run,
        or interrupted between A and B) runs, A then B, so that its two runs stay a minute apart. A
        round kept from an earlier start is read; where it failed there, it runs again, its try set
        aside, until it has run MAX_TRIES times."""
        if index in step.done:
            return
        step.done.add(index)
        if os.path.exists(round_path(step.folder, "b", index)) or os.path.exists(said_path(step.folder, "b", index)):
            if self._round_usable(step.folder, index) or tries(step.folder, index) >= MAX_TRIES:
                step.reused += 1
                return
            set_aside(step.folder, index)
            step.retried += 1
        for side in ("a", "b"):
            self.run_round(side, step.sha, index, step.folder)
            step.new_runs += 1

    def _round_usable(self, folder: str, index: int) -> bool:
        return all(record is not None and usable(record) for record in self._pairs_at(folder, index))

    def _pairs_at(self, folder: str, index: int) -> tuple[Record | None, Record | None]:
        return tuple(load_round(round_path(folder, side, index)) for side in ("a", "b"))

    def _first_round_ran(self, step: Step) -> bool:
        """Whether both commits trained in round 1; where the step's commit did not, it is skipped
        (False); the good commit must train (bad input)."""
        first_a, first_b = self._pairs(step.folder, 1)[0]
        for side, record in (("a", first_a), ("b", first_b)):
            if record is not None and usable(record):
                continue
            said = round_said(round_path(step.folder, side, 1))
            why = why_unusable(record) if record else f"wrote no record ({said or 'no output'})"
            if side == "a":
                raise BadCommit(f"the good commit {self.good[:12]} cannot be measured: its run {why}")
            step.verdict, step.reason = SKIP, f"its run {why}"
            return False
        return True

    def _interval(self, comparison: Comparison) -> tuple[float, float]:
        """The slowdown's interval, log scale (positive: B slower), at the look's level on each end."""
        slowdown_log = -math.log(comparison.ratio)
        half = stats.quantile(1 - self.alpha, comparison.df or math.inf) * comparison.se
        return slowdown_log - half, slowdown_log + half

    def step(self, sha: str) -> Step:
        if sha in self.steps:
            return self.steps[sha]
        step = self._answer(sha)
        if self.on_step is not None:
            self.on_step(step)
        return step

    def _answer(self, sha: str) -> Step:
        step = Step(sha, CANNOT_TELL, folder=self.step_folder(sha), level=self.alpha)
        self.steps[sha] = step
        margin_log = self.settings.threshold_log
        settings = dataclasses.replace(self.settings, family_alpha=self.alpha)
        for look in self.looks:
            for index in range(1, look + 1):
                self._ensure_round(step, index)
                if index == 1 and not self._first_round_ran(step):
                    return step
            found, _ = paired_comparisons(
                self._pairs(step.folder, look), settings, allow_failed=True, measures=(MEASURE,)
            )
            comparison = next((c for c in found if c.measure == MEASURE and c.se is not None), None)
            if comparison is None:
                continue
            low, high = self._interval(comparison)
            step.comparison, step.rounds = comparison, comparison.candidate_runs
            step.low, step.high = 1 - math.exp(-low), 1 - math.exp(-high)
            if low > margin_log:
                step.verdict = BAD
                return step
            if high < margin_log:
                step.verdict = GOOD
                return step
        step.verdict = CANNOT_TELL
        step.reason = self._needs(step, margin_log)
        return step

    def _needs(self, step: Step, margin_log: float) -> str:
        if step.comparison is None:
            return f"fewer than {MIN_ROUNDS} usable rounds in {self.looks[-1]}: see why its rounds failed"
        needed = rounds_needed(step.comparison, margin_log, self.alpha)
        at = f"its slowdown {100 * step.slowdown:.1f} % is within the noise of the margin"
        if needed is None:
            return f"{at}: no number of rounds would tell; a margin further from it (--threshold), or a quieter machine"
        return f"{at}: about {needed} rounds would tell (--max-rounds {needed}), or a quieter machine"

    def run(self) -> Result:
        result = Result(CANNOT_TELL)
        bad = self.commits[-1]
        self._say(bad, "the bad commit against the good one")
        first = self.step(bad)
        result.steps.append(first)
        if first.verdict == SKIP:
            raise BadCommit(f"the bad commit {bad[:12]} cannot be measured: {first.reason}")
        if first.verdict == GOOD:
            result.verdict, result.deciding = "none", first
            return result
        if first.verdict == CANNOT_TELL:
            result.deciding, result.candidates = first, self.commits[1:]
            return result
        low, high = 0, len(self.commits) - 1
        skipped: set[int] = set()
        while high - low > 1:
            left = [i for i in range(low + 1, high) if i not in skipped]
            if not left:
                break
            middle = min(left, key=lambda i: (abs(i - (low + high) / 2), i))
            self._say(self.commits[middle], f"{high - low - 1} commit(s) left between good and bad")
            step = self.step(self.commits[middle])
            result.steps.append(step)
            if step.verdict == GOOD:
                low = middle
            elif step.verdict == BAD:
                high = middle
            elif step.verdict == SKIP:
                skipped.add(middle)
            else:
                result.deciding = step
                result.candidates = self.commits[low + 1 : high + 1]
                return result
        if any(low < i < high for i in skipped):
            # Only skipped commits are left: the first bad one is any of them or the bad end.
            result.candidates = self.commits[low + 1 : high + 1]
            result.deciding = self.steps[self.commits[high]]
            return result
        result.verdict = "found"
        result.first_bad = self.commits[high]
        result.deciding = self.steps[self.commits[high]]
        return result

    def _say(self, sha: str, why: str) -> None:
        self.progress(f"step {len(self.steps) + 1}: commit {sha[:12]} ({why})")
