"""What benchmarks/gpu_check.py (and gpu_check_one.py) run, within what budget, and what the exit code
says.

No torch and no processes here: the checks are callables handed in, the clock is a parameter, so a
test drives the budget with a fake clock on a fake node of any GPU count.

Every check has a reserve: the seconds its real work takes, on one GPU and on a node of 2 or more,
with where that figure comes from ("measured: ..." on a named device, or "guess: ..." with what the
guess is made of, until a GPU run measures it). A check is not started with less of the budget left
than its reserve; the budget sized to the node is the reserves of the checks that apply, with
headroom. A check that does not fit, or whose processes the budget ends, is not run, and that is
not a pass: the exit code says a check was not made (INCOMPLETE) and the last line names every such
check, so a node never looks checked when the checks that matter (the one-GPU sweep, the CUDA tests:
the last in the plan) were skipped or cut short.
"""

from __future__ import annotations

import json
import math
import os
import shlex
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from gpu_check_processes import ENDED, CheckFailed, CheckSkipped, OutOfBudget, run_command, utc_now

PASSED, FAILED, INCOMPLETE = 0, 1, 3
"""Exit codes: every planned check ran and passed; a check failed; no check failed but a check that
applies to this node did not run (out of budget, or a tool it needs is missing)."""

BUDGET_HEADROOM = 1.25
"""The budget over the sum of the reserves: most are guesses until a GPU run measures them, and a
check that takes longer than its reserve must still leave the last checks theirs."""

SOURCE_KINDS = ("measured", "guess")


@dataclass(frozen=True)
class Reserve:
    """The seconds a check's real work takes, and where that figure comes from."""

    one_gpu_s: float | None
    """On a node of one GPU; None for a check that needs more GPUs (it does not run there)."""
    multi_gpu_s: float
    """On a node of 2 or more GPUs (a check may use two of them)."""
    source: str
    """"measured: <device, date, commit: what was timed>" or "guess: <what it is made of>"; a guess
    stays marked as one until a GPU run measures it."""

    def __post_init__(self):
        kind, _, said = self.source.partition(":")
        if kind not in SOURCE_KINDS or not said.strip():
            raise ValueError(
                f"a reserve needs its source, 'measured: <where and when>' or 'guess: <what it is made of>'; "
                f"got {self.source!r}"
            )
        if not self.multi_gpu_s > 0 or (self.one_gpu_s is not None and not self.one_gpu_s > 0):
            raise ValueError(f"a reserve's seconds must be > 0; got {self.one_gpu_s!r}, {self.multi_gpu_s!r}")

    @property
    def kind(self) -> str:
        return self.source.partition(":")[0]

    def seconds(self, gpu_count: int) -> float:
        if gpu_count >= 2:
            return self.multi_gpu_s
        if self.one_gpu_s is None:
            raise ValueError("this check does not run on one GPU")
        return self.one_gpu_s


def guess(one_gpu_s: float | None, multi_gpu_s: float, what: str) -> Reserve:
    return Reserve(one_gpu_s, multi_gpu_s, f"guess: {what}")


def measured(one_gpu_s: float | None, multi_gpu_s: float, where: str) -> Reserve:
    return Reserve(one_gpu_s, multi_gpu_s, f"measured: {where}")


@dataclass(frozen=True)
class PlannedCheck:
    name: str
    reserve: Reserve
    """Its real work's seconds; it is not started with less of the budget left."""
    check: Callable[[dict], str]
    """Fills its figures, returns its line; raises CheckFailed, CheckSkipped or OutOfBudget."""
    min_gpus: int = 1
    """Fewer GPUs and the check cannot say anything (DDP averaging needs a second rank): it is 'not
    applicable' on that node, which is no gap in the check."""

    def __post_init__(self):
        if self.min_gpus < 2 and self.reserve.one_gpu_s is None:
            raise ValueError(f"{self.name}: it runs on one GPU, so its reserve needs a one-GPU figure")

    def applies(self, gpu_count: int) -> bool:
        return gpu_count >= self.min_gpus


def node_budget_s(plan: Sequence[PlannedCheck], gpu_count: int) -> float:
    """Whole minutes: the reserves of the checks that apply to `gpu_count` GPUs, with headroom."""
    needed = sum(planned.reserve.seconds(gpu_count) for planned in plan if planned.applies(gpu_count))
    return 60.0 * math.ceil(needed * BUDGET_HEADROOM / 60)


def describe_plan(
    plan: Sequence[PlannedCheck], title: str, budget_s: float | None = None, one_gpu_only: bool = False
) -> list[str]:
    """The dry run's lines: every check with its reserve on one GPU (and on 2 or more, unless the run
    uses one GPU only), and its source."""

    def budget(gpus: int) -> str:
        return f"{budget_s:.0f} s (fixed)" if budget_s is not None else f"{node_budget_s(plan, gpus):.0f} s"

    guesses = sum(planned.reserve.kind == "guess" for planned in plan)
    on_nodes = f"{budget(1)} on one GPU" + ("" if one_gpu_only else f", {budget(2)} on 2 or more GPUs")
    headroom = f" (the reserves with {BUDGET_HEADROOM - 1:.0%} on top, whole minutes)"
    lines = [
        f"{title}: {len(plan)} checks, nothing started (dry run)",
        f"budget: {on_nodes}" + ("" if budget_s is not None else headroom),
        f"reserves: {len(plan) - guesses} measured, {guesses} guesses until a GPU run measures them",
        f"{'check':<42} {'one GPU':>8}" + ("" if one_gpu_only else f" {'2+ GPUs':>8}") + "  source",
    ]
    for planned in plan:
        one = "N/A" if not planned.applies(1) else f"{planned.reserve.one_gpu_s:.0f} s"
        multi = "" if one_gpu_only else f" {planned.reserve.multi_gpu_s:>6.0f} s"
        lines.append(f"{planned.name:<42} {one:>8}{multi}  {planned.reserve.source}")
    return lines


class Ledger:
    """The budget, every check's outcome, and gpu_check.json / gpu_check.txt rewritten after each."""

    make_target = "gpu-check"
    script = "benchmarks/gpu_check.py"
    """How the closing advice names this run again: through make (it started us) or the script."""

    def __init__(self, out_dir: str, budget_s: float | None, clock: Callable[[], float] = time.monotonic):
        self.out_dir = out_dir
        self.clock = clock
        self.fixed_budget_s = budget_s
        self.started = clock()
        # Until the node is known (the preflight counts its GPUs), the budget of a one-GPU node.
        self.budget_s = budget_s
        self.summary = {
            "started_at": utc_now(),
            "python": sys.executable,
            "device": None,
            "budget_s": budget_s,
            "checks": [],
        }

    @property
    def gpu_count(self) -> int:
        return (self.summary.get("device") or {}).get("gpu_count") or 0

    def size_to_node(self, plan: Sequence[PlannedCheck]) -> None:
        """The budget for this node's GPU count, unless `--budget-s` fixed it."""
        if self.fixed_budget_s is None:
            self.budget_s = node_budget_s(plan, max(1, self.gpu_count))
        self.summary["budget_s"] = self.budget_s

    def left_s(self) -> float:
        return self.started + self.budget_s - self.clock()

    def run_process(
        self, args: list[str], limit_s: float, cwd: str | None = None, extra_env: dict | None = None
    ) -> tuple[int, str]:
        """A check's process, given its own time limit or what is left of the budget, whichever is
        less. Ended by the budget: OutOfBudget (the check was not made); ended by its own limit with
        budget to spare: exit code ENDED, which the check reads as a failure (it hung)."""
        left = self.left_s()
        allowed = max(1.0, min(limit_s, left))
        code, output = run_command(args, allowed, cwd or self.out_dir, extra_env)
        if code == ENDED and left < limit_s:
            raise OutOfBudget(f"ended by the budget after {allowed:.0f} s: {shlex.join(args[1:4])} ...")
        return code, output

    def run(self, planned: PlannedCheck) -> dict:
        started = self.clock()
        gpus = max(1, self.gpu_count)
        reserve = planned.reserve.seconds(gpus) if planned.applies(gpus) else planned.reserve.multi_gpu_s
        entry = {
            "name": planned.name,
            "ok": None,
            "seconds": 0.0,
            "reserve_s": reserve,
            "reserve_source": planned.reserve.source,
            "figures": {},
            "message": "",
            "not_run": None,
        }
        if self.gpu_count and not planned.applies(self.gpu_count):
            entry["not_run"] = "not applicable"
            entry["message"] = (
                f"not applicable: this node has {self.gpu_count} GPU(s) and the check needs {planned.min_gpus}"
            )
        elif self.left_s() < reserve:
            entry["not_run"] = "budget"
            entry["message"] = (
                f"NOT RUN: {self.left_s():.0f} s of the {self.budget_s:.0f} s budget left, its reserve is "
                f"{reserve:.0f} s"
            )
        else:
            try:
                entry["message"] = planned.check(entry["figures"]) or "ok"
                entry["ok"] = True
            except CheckFailed as exc:
                entry["ok"], entry["message"] = False, str(exc)
            except OutOfBudget as exc:
                entry["not_run"], entry["message"] = "budget", f"NOT RUN: {exc}"
            except CheckSkipped as exc:
                entry["not_run"], entry["message"] = "missing", f"NOT RUN: {exc}"
            except Exception as exc:  # a broken check must not stop the others
                entry["ok"], entry["message"] = False, f"{type(exc).__name__}: {exc}"
                entry["traceback"] = traceback.format_exc()
        entry["seconds"] = round(self.clock() - started, 1)
        self.summary["checks"].append(entry)
        self.write()
        print(self.line(entry), flush=True)
        return entry

    @staticmethod
    def line(check: dict) -> str:
        """The check's verdict, its measured seconds beside its reserve (and whether that is a guess)."""
        verdict = {True: "PASS", False: "FAIL"}.get(
            check["ok"], "N/A " if check["not_run"] == "not applicable" else "SKIP"
        )
        kind = check["reserve_source"].partition(":")[0]
        spent = f"{check['seconds']:6.1f} s of {check['reserve_s']:4.0f} s {kind:<8}"
        return f"{verdict}  {check['name']:<38} {spent}  {check['message']}"

    def not_run(self) -> list[str]:
        """The checks that apply to this node and did not run."""
        return [c["name"] for c in self.summary["checks"] if c["not_run"] in ("budget", "missing")]

    def exit_code(self) -> int:
        if any(c["ok"] is False for c in self.summary["checks"]):
            return FAILED
        return INCOMPLETE if self.not_run() else PASSED

    def again(self, options: str) -> str:
        """The command that runs this again with `options`: through make when make started it (make sets
        MAKELEVEL in its recipes' environment), else the script."""
        if os.environ.get("MAKELEVEL"):
            return f"make {self.make_target} USE_PYTHON={sys.executable} GPU_CHECK_ARGS='{options}'"
        return f"{sys.executable} {self.script} {options}"

    def closing_line(self) -> str:
        s = self.summary
        said = f"{s['passed']} passed, {s['failed']} failed, {s['not_run']} not run"
        if self.not_run():
            said += (
                f"; NOT CHECKED: {', '.join(self.not_run())} (give them time: "
                f"{self.again(f'--budget-s {self.budget_s + 300:.0f}')}, or --only with their first words)"
            )
        return said

    def write(self) -> None:
        checks = self.summary["checks"]
        self.summary.update(
            ended_at=utc_now(),
            passed=sum(c["ok"] is True for c in checks),
            failed=sum(c["ok"] is False for c in checks),
            not_run=len(self.not_run()),
            not_applicable=sum(c["not_run"] == "not applicable" for c in checks),
            exit_code=self.exit_code(),
        )
        with open(os.path.join(self.out_dir, "gpu_check.json"), "w", encoding="utf-8") as handle:
            json.dump(self.summary, handle, indent=1, sort_keys=True, default=str)
        lines = [
            f"ddpbench GPU check  {self.summary['started_at']}  python {sys.executable}  budget "
            f"{self.budget_s if self.budget_s is None else round(self.budget_s)} s",
            f"device: {json.dumps(self.summary['device'], default=str)}",
            *(self.line(check) for check in checks),
            self.closing_line(),
        ]
        with open(os.path.join(self.out_dir, "gpu_check.txt"), "w", encoding="utf-8") as handle:
            handle.write("\n".join(lines) + "\n")


def chosen(plan: Sequence[PlannedCheck], only: set[str] | None) -> list[PlannedCheck]:
    """The checks `only` names, by name or first word; all without it."""
    return [p for p in plan if not only or p.name in only or p.name.split()[0] in only]


def options_problem(plan: Sequence[PlannedCheck], budget_s: float | None, only: set[str] | None) -> str | None:
    """What is wrong with --budget-s or --only, in one line, or None: a name --only does not know would
    leave nothing to run, and an empty run passes."""
    if budget_s is not None and not budget_s > 0:
        return f"--budget-s must be a number of seconds > 0; got {budget_s:g}"
    known = {p.name for p in plan} | {p.name.split()[0] for p in plan}
    unknown = sorted((only or set()) - known)
    if unknown:
        return f"--only: no check named {', '.join(unknown)}; the checks: {', '.join(p.name for p in plan)}"
    return None


def run_plan(ledger: Ledger, plan: Sequence[PlannedCheck], only: set[str] | None = None) -> int:
    """Every check of the plan (or those `only` names) in order; the budget is sized to the node once
    the first check (the preflight) has counted its GPUs. The exit code."""
    ledger.size_to_node(plan)  # one GPU until the preflight says otherwise
    for number, planned in enumerate(chosen(plan, only)):
        ledger.run(planned)
        if number == 0:
            ledger.size_to_node(plan)
    ledger.write()
    return ledger.exit_code()
