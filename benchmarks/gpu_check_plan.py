"""What benchmarks/gpu_check.py runs, within what budget, and what its exit code says.

No torch and no processes here: the checks are callables handed in, the clock is a parameter, so a
test drives the budget with a fake clock on a fake node of any GPU count.

The budget is sized to the node unless `--budget-s` fixes it: the seconds each check needs at least,
summed over the checks that apply to this node's GPU count, with headroom. A check that does not
fit what is left is not run, and that is not a pass: the exit code says the check was not made
(INCOMPLETE) and the last line names every such check, so a node never looks checked when the
checks that matter (the one-GPU sweep, the CUDA tests: the last in the plan) were skipped.
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from gpu_check_processes import CheckFailed, CheckSkipped, utc_now

PASSED, FAILED, INCOMPLETE = 0, 1, 3
"""Exit codes: every planned check ran and passed; a check failed; no check failed but a check that
applies to this node did not run (out of budget, or a tool it needs is missing)."""

BUDGET_HEADROOM = 1.25
"""The budget over the sum of the checks' minimum times: a check that takes longer than its minimum
(a slow first CUDA start, a compile) still leaves the last checks their time."""


@dataclass(frozen=True)
class PlannedCheck:
    name: str
    needs_s: float
    """Seconds it needs at least; it is not started with less of the budget left."""
    check: Callable[[dict], str]
    """Fills its figures, returns its line; raises CheckFailed or CheckSkipped."""
    min_gpus: int = 1
    """Fewer GPUs and the check cannot say anything (DDP averaging needs a second rank): it is 'not
    applicable' on that node, which is no gap in the check."""


def node_budget_s(plan: Sequence[PlannedCheck], gpu_count: int) -> float:
    """Whole minutes: the minimum times of the checks that apply to `gpu_count` GPUs, with headroom."""
    needed = sum(planned.needs_s for planned in plan if gpu_count >= planned.min_gpus)
    return 60.0 * math.ceil(needed * BUDGET_HEADROOM / 60)


class Ledger:
    """The budget, every check's outcome, and gpu_check.json / gpu_check.txt rewritten after each."""

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

    def run(self, planned: PlannedCheck) -> dict:
        started = self.clock()
        entry = {"name": planned.name, "ok": None, "seconds": 0.0, "figures": {}, "message": "", "not_run": None}
        if self.gpu_count and self.gpu_count < planned.min_gpus:
            entry["not_run"] = "not applicable"
            entry["message"] = (
                f"not applicable: this node has {self.gpu_count} GPU(s) and the check needs {planned.min_gpus}"
            )
        elif self.left_s() < planned.needs_s:
            entry["not_run"] = "budget"
            entry["message"] = (
                f"NOT RUN: {self.left_s():.0f} s of the {self.budget_s:.0f} s budget left, it needs about "
                f"{planned.needs_s:.0f} s"
            )
        else:
            try:
                entry["message"] = planned.check(entry["figures"]) or "ok"
                entry["ok"] = True
            except CheckFailed as exc:
                entry["ok"], entry["message"] = False, str(exc)
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
        verdict = {True: "PASS", False: "FAIL"}.get(
            check["ok"], "N/A " if check["not_run"] == "not applicable" else "SKIP"
        )
        return f"{verdict}  {check['name']:<38} {check['seconds']:6.1f} s  {check['message']}"

    def not_run(self) -> list[str]:
        """The checks that apply to this node and did not run."""
        return [c["name"] for c in self.summary["checks"] if c["not_run"] in ("budget", "missing")]

    def exit_code(self) -> int:
        if any(c["ok"] is False for c in self.summary["checks"]):
            return FAILED
        return INCOMPLETE if self.not_run() else PASSED

    def closing_line(self) -> str:
        s = self.summary
        said = f"{s['passed']} passed, {s['failed']} failed, {s['not_run']} not run"
        if self.not_run():
            said += (
                f"; NOT CHECKED: {', '.join(self.not_run())} (give them time: --budget-s "
                f"{self.budget_s + 300:.0f}, or --only with their first words)"
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


def run_plan(ledger: Ledger, plan: Sequence[PlannedCheck], only: set[str] | None = None) -> int:
    """Every check of the plan (or those `only` names, by name or first word) in order; the budget
    is sized to the node once the first check (the preflight) has counted its GPUs. The exit code."""
    chosen = [p for p in plan if not only or p.name in only or p.name.split()[0] in only]
    ledger.size_to_node(plan)  # one GPU until the preflight says otherwise
    for number, planned in enumerate(chosen):
        ledger.run(planned)
        if number == 0:
            ledger.size_to_node(plan)
    ledger.write()
    return ledger.exit_code()
