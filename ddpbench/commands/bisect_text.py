"""What `ddpbench bisect` says at the end, and its exit code: the first bad commit with its
slowdown and interval, why it slowed (the gate's answers, `gate.why`, on the deciding step's
rounds), and a command that reproduces that step. No torch."""

from __future__ import annotations

import json
import os
import shlex
import sys

from ddpbench.commands.bisect_exits import EXIT_CANNOT_TELL, EXIT_FOUND, EXIT_MACHINE, EXIT_NONE
from ddpbench.config.secrets import HIDDEN, has_hidden, redact_args
from ddpbench.gate.ab import AB_MEASURES
from ddpbench.gate.bisect import Bisection, Result, Step
from ddpbench.gate.stats import GateSettings
from ddpbench.records.store import read_records, write_atomic


def _pct(value: float) -> str:
    return f"{100 * value:.1f} %"


def slowdown_words(step: Step, settings: GateSettings) -> str:
    if step.comparison is None:
        return "no usable rounds"
    return (
        f"slowdown {_pct(step.slowdown)} (interval {_pct(step.low)} to {_pct(step.high)}, each end one-sided at "
        f"{100 * step.level:.2g} %) over {step.rounds} rounds; margin {_pct(settings.max_regression)}"
    )


def reproduce(good: str, step: Step, settings: GateSettings, given_args: list[str]) -> str:
    """`ddpbench ab` of the good commit and the step's, as many rounds as it took, from here; a
    script's secret arguments hidden, as every command hides them (`config.secrets`)."""
    line = shlex.join(
        [
            "ddpbench",
            "ab",
            good[:12],
            step.sha[:12],
            "--rounds",
            str(max(step.rounds, 2)),
            "--max-regression",
            f"{100 * settings.max_regression:g}%",
            "--",
            *redact_args(given_args),
        ]
    )
    return f"cd {shlex.quote(os.getcwd())} && {line}"


def step_pairs(step: Step) -> tuple[list, list]:
    return tuple(read_records(os.path.join(step.folder, side))[0] for side in ("a", "b"))


def why_lines(step: Step, settings: GateSettings) -> tuple[list[str], list]:
    """The gate's answer to why the step's commit is slower than the good one (its causes that
    grew, the rank and phase that held the others back); a line saying so where it cannot."""
    from ddpbench.gate.why import explain_changes
    from ddpbench.gate.why_text import why_lines as gate_why_lines

    if step.comparison is None:
        return [], []
    baseline, candidate = step_pairs(step)
    try:
        found = explain_changes(baseline, candidate, [step.comparison], settings, step.folder)
    except Exception as exc:  # noqa: BLE001 - the answer stands without the causes
        return [f"why it slowed could not be worked out ({type(exc).__name__}: {exc})"], []
    for why in found:
        why.reproduce = None  # the reproducing command is the step's A/B, below
    return gate_why_lines(found), found


def machine_lines(step: Step) -> list[str]:
    """The gate's busy-machine and speed-check lines for the deciding step's runs."""
    from ddpbench.gate.busy import busy_runs, probe_flagged

    baseline, candidate = ([record for _, record in pairs] for pairs in step_pairs(step))
    lines = [line for found in busy_runs(candidate).values() for line in found]
    for side, records in (("baseline", baseline), ("candidate", candidate)):
        lines += [line for found in probe_flagged(side, records).values() for line in found]
    return lines


def answer(
    result: Result,
    args,
    settings: GateSettings,
    subjects: dict,
    given_args: list[str],
    bisection: Bisection,
    seconds: float,
) -> int:
    good = bisection.good
    skipped = [step for step in result.steps if step.verdict == "skip"]
    document = {
        "good": good,
        "verdict": result.verdict,
        "first_bad": result.first_bad,
        "threshold": settings.max_regression,
        "looks": bisection.looks,
        "level_per_look": bisection.alpha,
        "steps": [step_json(step, subjects) for step in result.steps],
        "skipped": [step.sha for step in skipped],
        "new_runs": result.new_runs,
        "minutes": seconds / 60,
    }
    deciding = result.deciding
    code = EXIT_CANNOT_TELL
    if result.verdict == "found":
        print(f"first bad commit: {result.first_bad[:12]} {subjects.get(result.first_bad, '')}")
        print(f"  against the good commit {good[:12]}: {slowdown_words(deciding, settings)}")
        lines, found = why_lines(deciding, settings)
        for line in lines:
            print(f"  {line}")
        document["why"] = [why.configuration for why in found]
        if found:
            from ddpbench.gate.why_text import why_json

            document["why"] = why_json(found)
        machine = machine_lines(deciding)
        for line in machine:
            print(f"  the machine: {line}")
        document["machine"] = machine
        code = EXIT_MACHINE if machine else EXIT_FOUND
    elif result.verdict == "none":
        print(
            f"no commit slower beyond noise and the margin: the bad commit {deciding.sha[:12]} against the good one: "
            f"{slowdown_words(deciding, settings)}"
        )
        code = EXIT_NONE
    else:
        among = ", ".join(sha[:12] for sha in result.candidates)
        print(f"cannot tell: the first bad commit is one of {among}")
        if deciding is not None and deciding.verdict == "cannot tell":
            print(f"  {deciding.sha[:12]} against the good commit: {slowdown_words(deciding, settings)}")
            print(f"  would need: {deciding.reason}")
        elif skipped:
            print("  only skipped commits are left between the last good and the first bad one")
    if deciding is not None and deciding.comparison is not None:
        command = reproduce(good, deciding, settings, given_args)
        print(f"  reproduce: {command}")
        document["reproduce"] = command
        if has_hidden(redact_args(given_args)):
            print(f"    ({HIDDEN} stands for a secret of the script's arguments: give it again after --)")
    for step in skipped:
        print(f"skipped: {step.sha[:12]} {subjects.get(step.sha, '')}: {step.reason}")
    from_records = sum(1 for step in result.steps if step.new_runs == 0)
    print(
        f"bisect: {len(result.steps)} steps ({from_records} answered from records), {result.new_runs} new runs, "
        f"{seconds / 60:.1f} minutes; each step's interval is one-sided at {100 * bisection.alpha:.2g} % per end "
        f"({100 * settings.family_alpha:.2g} % spent over {len(bisection.looks)} planned looks, Bonferroni)"
    )
    if args.json:
        document["exit_code"] = code
        write_atomic(args.json, json.dumps(document, indent=1) + "\n")
    sys.stdout.flush()
    return code


def step_json(step: Step, subjects: dict) -> dict:
    return {
        "sha": step.sha,
        "subject": subjects.get(step.sha, ""),
        "verdict": step.verdict,
        "rounds": step.rounds,
        "slowdown": step.slowdown,
        "low": step.low,
        "high": step.high,
        "new_runs": step.new_runs,
        "reused_rounds": step.reused,
        "retried_rounds": step.retried,
        "reason": step.reason,
        "measure": AB_MEASURES[0],
    }
