"""`ddpbench explain` on the default suite, written as docs/measurements/explain-default-suite.md.

Runs the sweep `make bench` runs (the default suite of this machine), then breaks every DDP run
down and writes the page: each run's terms in points with their 95 % intervals, whether
|unexplained| is within 10 % of the lost time (or the loss itself is within noise), and what the
ladder cost the run. The sweep runs under `flock /tmp/ddpbench-bench.lock`, never beside another
benchmark.

    python benchmarks/explain_default_suite.py                       # sweep, then write the page
    python benchmarks/explain_default_suite.py --sweep results/ID    # an existing sweep's page
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import subprocess
import sys
import time
from datetime import datetime, timezone

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, REPO)

from ddpbench.analysis.breakdown import explain_sweep  # noqa: E402
from ddpbench.analysis.breakdown_terms import TERM_NAMES  # noqa: E402
from ddpbench.analysis.breakdown_text import in_run_loss  # noqa: E402
from ddpbench.analysis.frames import reference_runs  # noqa: E402
from ddpbench.analysis.ladder import standard_error  # noqa: E402
from ddpbench.analysis.registry import record_iteration_times_s  # noqa: E402
from ddpbench.records.store import read_records  # noqa: E402

PAGE = os.path.join(REPO, "docs", "measurements", "explain-default-suite.md")
LOCK = ["flock", "/tmp/ddpbench-bench.lock"]
UNEXPLAINED_SHARE = 0.10
LADDER_SHARE = 0.25


def git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True).stdout.strip()


def commit() -> str:
    dirty = git("status", "--porcelain", "--untracked-files=no")
    return git("rev-parse", "--short", "HEAD") + (" with uncommitted changes" if dirty else "")


def machine() -> str:
    model = "unknown CPU"
    if os.path.exists("/proc/cpuinfo"):
        with open("/proc/cpuinfo", encoding="utf-8") as info:
            model = next((line.split(":", 1)[1].strip() for line in info if line.startswith("model name")), model)
    return f"{os.cpu_count()} cores ({model}), {platform.system()} {platform.release()}, no GPU used"


def run_sweep(out: str, sweep_id: str) -> str:
    command = [*LOCK, sys.executable, "-m", "ddpbench", "sweep", "--out", out, "--sweep-id", sweep_id]
    started = time.time()
    done = subprocess.run(command, cwd=REPO, env=dict(os.environ, PYTHONPATH=REPO), capture_output=True, text=True)
    print(done.stdout + done.stderr[-3000:], file=sys.stderr)
    print(f"sweep: exit {done.returncode} after {time.time() - started:.0f} s", file=sys.stderr)
    return os.path.join(out, sweep_id)


def seconds_between(start: str | None, end: str | None) -> float | None:
    if not start or not end:
        return None
    return (datetime.fromisoformat(end) - datetime.fromisoformat(start)).total_seconds()


def loss_half_width(record, records) -> float:
    """The 95 % half-width of t(N) - t(1) from the step-to-step noise of both windows (normal)."""
    found, _ = reference_runs(record, records)
    reference = [value for run in found for value in record_iteration_times_s(run)]
    return 1.96 * math.hypot(standard_error(record_iteration_times_s(record)), standard_error(reference))


def cell(term, step_s: float) -> str:
    if term.s_per_step is None:
        return "n/a"
    if term.ci_low_s is None or term.ci_high_s == term.ci_low_s:
        return f"{term.points:.1f}"
    return f"{term.points:.1f} ± {100 * (term.ci_high_s - term.ci_low_s) / 2 / step_s:.1f}"


MEASUREMENT_POINTS = 10.0
"""The most a measurement term (window_vs_ladder, reference_vs_rung0) may read, in points."""


def page(sweep_dir: str, command: str) -> str:
    records, _ = read_records(sweep_dir)
    by_id = {record.run_id: record for _, record in records}
    breakdowns, problems = explain_sweep(records)
    head = [
        "run",
        "E(N)",
        "in-run E",
        "lost (points)",
        *TERM_NAMES,
        "sum (points)",
        "unexplained / in-run loss",
        "unexplained within target",
        "measurement terms within 10 points",
        "ladder share",
    ]
    rows, met, counted, measured_ok, shares = [], 0, 0, 0, []
    for breakdown in breakdowns:
        record = by_id[breakdown.run_id]
        lost_s = breakdown.step_s - breakdown.reference_step_s
        in_run = breakdown.in_run.get("lost_s") or {}
        in_run_lost = in_run.get("value")
        unexplained = breakdown.terms["unexplained"].s_per_step or 0.0
        share = abs(unexplained) / abs(in_run_lost) if in_run_lost else math.inf
        # The in-run loss within its own interval (explain's own rule): nothing for unexplained to be a share of.
        loss = in_run_loss(breakdown)
        quiet = loss is not None and abs(loss[0]) <= loss[1]
        ok = share <= UNEXPLAINED_SHARE or quiet
        counted += breakdown.world_size > 1
        met += ok and breakdown.world_size > 1
        verdict = "yes" if share <= UNEXPLAINED_SHARE else ("in-run loss within noise" if quiet else "no")
        largest = max(
            (abs(breakdown.terms[name].points or 0.0) for name in ("window_vs_ladder", "reference_vs_rung0")),
            default=0.0,
        )
        measured_ok += largest <= MEASUREMENT_POINTS
        wall = record.launch.wall_s if record.launch else seconds_between(record.started_at, record.ended_at)
        ladder = (breakdown.ladder or {}).get("wall_s")
        ladder_share = ladder / wall if ladder and wall else None
        if ladder_share is not None:
            shares.append(ladder_share)
        total = breakdown.terms_sum_s()
        efficiency = breakdown.in_run.get("efficiency") or {}
        rows.append(
            [
                f"{record.spec.workload} x{breakdown.world_size}",
                f"{breakdown.efficiency:.1%}",
                "n/a"
                if not efficiency
                else f"{efficiency['value']:.1%}"
                + (
                    f" ± {100 * (efficiency['ci_high'] - efficiency['ci_low']) / 2:.1f}"
                    if efficiency["ci_low"] is not None
                    else ""
                ),
                f"{100 * lost_s / breakdown.step_s:.1f}",
                *(cell(breakdown.terms[name], breakdown.step_s) for name in TERM_NAMES),
                "n/a" if total is None else f"{100 * total / breakdown.step_s:.1f}",
                "n/a" if not in_run_lost else f"{share:.0%}",
                verdict,
                "yes" if largest <= MEASUREMENT_POINTS else f"no ({largest:.1f})",
                "n/a" if ladder_share is None else f"{ladder_share:.0%}",
            ]
        )
    table = [
        "| " + " | ".join(head) + " |",
        "|" + "---|" * len(head),
        *("| " + " | ".join(row) + " |" for row in rows),
    ]
    now = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    shas = {
        (r.env.git_sha or "?")[:7] + (" with uncommitted changes" if r.env.git_dirty else "")
        for _, r in records
        if r.env
    }
    made_with = ", ".join(sorted(shas)) or "unknown"
    most = f"{max(shares):.0%}" if shares else "n/a"
    lines = [
        "# `ddpbench explain` on the default suite",
        "",
        "Written by `benchmarks/explain_default_suite.py`; rerun it to measure again.",
        "",
        f"- **Commit**: runs made with {made_with}, analysed with {commit()}",
        f"- **Machine**: {machine()}, {now}",
        f"- **Command**: {command}",
        "",
        "Points of efficiency per term, ± the 95 % interval from the ladder's paired blocks (see",
        "[explain](../explain.md)); each term is a measured difference, and 'sum' adds them beside",
        "'lost' (nothing forces the two equal). `window_vs_ladder` and `reference_vs_rung0` are the",
        "measurement's, not DDP's. 'in-run E' is rung 0 over rung 3 in the run's own processes;",
        "'unexplained / in-run loss' is |unexplained| over rung 3 - rung 0. 'ladder share' is the wall",
        "time of the ladder's blocks over the run's, launch and imports included (`launch.wall_s`).",
        "",
        *table,
        "",
        f"- **|unexplained| at most {UNEXPLAINED_SHARE:.0%} of the in-run loss, or that loss within noise**: "
        f"{met} of the {counted} DDP runs of 2 or more ranks (at one rank it is 0 by construction).",
        f"- **No measurement term above {MEASUREMENT_POINTS:.0f} points**: {measured_ok} of {len(breakdowns)} runs.",
        f"- **The ladder's cost**: at most {most} of a run's wall time (target: {LADDER_SHARE:.0%}).",
    ]
    if problems:
        lines.append(f"- **Not broken down**: {'; '.join(problems)}")
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sweep", help="an existing sweep folder: write its page, run nothing")
    parser.add_argument("--out", default=os.path.join(REPO, "results"), help="where a new sweep goes")
    parser.add_argument("--page", default=PAGE, help="where the page is written")
    args = parser.parse_args()
    if args.sweep:
        sweep_dir, command = args.sweep, f"`python benchmarks/explain_default_suite.py --sweep {args.sweep}`"
    else:
        sweep_id = "explain-default-" + datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
        sweep_dir = run_sweep(args.out, sweep_id)
        command = "`python benchmarks/explain_default_suite.py` (the sweep `make bench` runs, then explain)"
    text = page(sweep_dir, command)
    with open(args.page, "w", encoding="utf-8") as handle:
        handle.write(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
