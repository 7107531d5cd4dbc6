"""How ddpbench's readers scale with the size of the job: load, table, gate, report and trace
analysis time and peak memory for sweeps up to 64, 256 and 1,024 ranks.

Records and traces are synthetic but built from real ones (benchmarks/synthetic.py): a sweep is
20 runs (local, DDP at every power of two up to the largest world size, DataParallel at 1-8,
then repeats of the largest DDP runs) with 1,000 timed steps per rank. Each command runs in a
fresh process, as a user runs it; its wall time, CPU time (user + system, its worker processes
included) and peak resident memory come from the operating system (wait4). On a shared machine
the wall time includes waiting for a core: CPU time is the steadier figure, and both are printed.

    flock /tmp/ddpbench-bench.lock python benchmarks/scale.py [--ranks 64,256,1024] [--trace-ranks 32,64,128]

With --before CHECKOUT (another checkout of ddpbench, e.g. `git worktree add /tmp/before c29fe4f`),
the table and the gate at the largest world size are also timed side by side with that code, on
the same sweeps, alternating A B A B (--repeats times each), so that the machine's drift falls on
both alike; the medians are compared with TARGETS_SIDE_BY_SIDE.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import synthetic  # noqa: E402
from measurement_page import commit_of, utc_now  # noqa: E402

from ddpbench.host.facts import cpu_model, project_git  # noqa: E402

SIDE_BY_SIDE_PAGE = os.path.join(synthetic.REPO, "docs", "measurements", "scale-side-by-side.md")

TARGETS = {"table": 3.0, "gate": 3.0, "report": 30.0, "trace analyze": 10.0}
VERDICT_EXITS = (0, 1, 3, 4)
"""Exit codes of an answer: table exits 1 on failed runs, the gate 1, 3 or 4 by its verdict."""
TARGETS_SIDE_BY_SIDE = {"table": 1.0, "gate": 1.5}
"""Wall seconds at 1,024 ranks x 1,000 steps for the figures of one pass (the one-figure rework)."""
REPORT_MEMORY_TARGET_MB = 1536


def measure(command: list[str], cwd: str, repo: str = synthetic.REPO) -> dict:
    """Run a command with `repo`'s ddpbench; its wall time, CPU time and peak RSS (the largest of it
    and its children)."""
    env = {**os.environ, "PYTHONPATH": repo + os.pathsep + os.environ.get("PYTHONPATH", "")}
    started = time.perf_counter()
    process = subprocess.Popen(command, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(process.pid, 0)
    wall_s = time.perf_counter() - started
    process.returncode = os.waitstatus_to_exitcode(status)
    error = process.stderr.read().decode()[-500:]
    process.stderr.close()
    return {
        "wall_s": wall_s,
        "cpu_s": usage.ru_utime + usage.ru_stime,
        "peak_mb": usage.ru_maxrss / 1024,
        "exit": process.returncode,
        "error": error,
    }


def ddpbench(*args: str) -> list[str]:
    return [sys.executable, "-m", "ddpbench", *args]


def load_command(sweep: str) -> list[str]:
    code = (
        "import sys; from ddpbench.records.store import read_records; "
        "records, bad = read_records(sys.argv[1]); assert records and not bad"
    )
    return [sys.executable, "-c", code, sweep]


def run(ranks: list[int], trace_ranks: list[int], steps: int, work: str) -> list[dict]:
    rows = []
    for largest in ranks:
        baseline, candidate = os.path.join(work, f"base-{largest}"), os.path.join(work, f"cand-{largest}")
        started = time.perf_counter()
        synthetic.build_sweep(baseline, largest, steps, seed=0)
        synthetic.build_sweep(candidate, largest, steps, seed=1)
        total_ranks = sum(n for strategy, n in synthetic.sweep_plan(largest) if strategy == "ddp")
        size_mb = (
            sum(os.path.getsize(os.path.join(baseline, "runs", f)) for f in os.listdir(os.path.join(baseline, "runs")))
            / 1e6
        )
        print(
            f"built two sweeps up to {largest} ranks ({total_ranks} DDP ranks, {size_mb:.0f} MB each) in "
            f"{time.perf_counter() - started:.0f} s",
            file=sys.stderr,
        )
        commands = {
            "load": load_command(baseline),
            "table": ddpbench("table", baseline),
            "gate": ddpbench("gate", "--baseline", baseline, "--candidate", candidate),
            "report": ddpbench("report", baseline, "-o", os.path.join(work, f"report-{largest}.html")),
        }
        for name, command in commands.items():
            found = measure(command, work)
            if found["exit"] not in VERDICT_EXITS:
                raise SystemExit(f"{name} at {largest} ranks failed ({found['exit']}): {found['error']}")
            rows.append({"what": name, "ranks": largest, "sweep_ranks": total_ranks, **found})
            print(
                f"  {name:<14} {largest:>5} ranks: {found['wall_s']:6.2f} s wall, {found['cpu_s']:6.2f} s CPU, "
                f"{found['peak_mb']:6.0f} MB",
                file=sys.stderr,
            )
    for count in trace_ranks:
        folder = os.path.join(work, f"traces-{count}")
        synthetic.build_traces(folder, count, lag_rank=count // 3)
        found = measure(ddpbench("trace", "analyze", folder), work)
        if found["exit"] != 0:
            raise SystemExit(f"trace analyze of {count} files failed: {found['error']}")
        rows.append({"what": "trace analyze", "ranks": count, "sweep_ranks": count, **found})
        print(
            f"  trace analyze  {count:>5} files: {found['wall_s']:6.2f} s wall, {found['cpu_s']:6.2f} s CPU, "
            f"{found['peak_mb']:6.0f} MB (largest process)",
            file=sys.stderr,
        )
    return rows


def side_by_side(largest: int, work: str, before: str, repeats: int) -> list[str]:
    """The table and the gate at `largest` ranks with this checkout's code and `before`'s, A B A B."""
    import statistics

    baseline, candidate = os.path.join(work, f"base-{largest}"), os.path.join(work, f"cand-{largest}")
    commands = {
        "table": ddpbench("table", baseline),
        "gate": ddpbench("gate", "--baseline", baseline, "--candidate", candidate),
    }
    times: dict[tuple[str, str], list[float]] = {}
    for _ in range(repeats):
        for name, command in commands.items():
            for side, repo in (("now", synthetic.REPO), ("before", before)):
                found = measure(command, work, repo)
                if found["exit"] not in VERDICT_EXITS:
                    raise SystemExit(f"{name} ({side}) failed ({found['exit']}): {found['error']}")
                times.setdefault((name, side), []).append(found["wall_s"])
    lines = [f"side by side at {largest} ranks, {repeats} alternating runs each (median wall s; every run):"]
    for name in commands:
        now, then = statistics.median(times[(name, "now")]), statistics.median(times[(name, "before")])
        target = TARGETS_SIDE_BY_SIDE[name]
        lines.append(
            f"  {name:<6} now {now:5.2f} s, before {then:5.2f} s ({now / then:.2f}x); target < {target:.1f} s: "
            f"{'met' if now < target else 'NOT met'}; now {', '.join(f'{t:.2f}' for t in times[(name, 'now')])}, "
            f"before {', '.join(f'{t:.2f}' for t in times[(name, 'before')])}"
        )
    return lines


def report(rows: list[dict]) -> str:
    lines = [f"{'what':<14} {'ranks':>6} {'wall s':>8} {'CPU s':>8} {'peak MB':>8} {'CPU ms/rank':>11}  target"]
    for row in rows:
        target = TARGETS.get(row["what"])
        verdict = ""
        if target is not None and row["ranks"] in (1024, 128):
            met = row["wall_s"] < target and (row["what"] != "report" or row["peak_mb"] < REPORT_MEMORY_TARGET_MB)
            verdict = (
                f"< {target:.0f} s{' and 1.5 GB' if row['what'] == 'report' else ''}: {'met' if met else 'NOT met'}"
            )
        lines.append(
            f"{row['what']:<14} {row['ranks']:>6} {row['wall_s']:>8.2f} {row['cpu_s']:>8.2f} "
            f"{row['peak_mb']:>8.0f} {1000 * row['cpu_s'] / row['sweep_ranks']:>11.2f}  {verdict}"
        )
    lines.append(
        "ranks: the largest world size of a 20-run sweep (trace analyze: rank files); CPU ms/rank: CPU time "
        "over all DDP ranks of the sweep (or files): flat or falling means time grows no faster than ranks."
    )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ranks", default="64,256,1024", help="largest world sizes of the sweeps")
    parser.add_argument("--trace-ranks", default="32,64,128", help="rank files for trace analysis")
    parser.add_argument("--steps", type=int, default=1000, help="timed steps per rank")
    parser.add_argument("--keep", default=None, help="build in this folder and keep it (default: a temporary one)")
    parser.add_argument("--before", default=None, help="another checkout: time table and gate side by side with it")
    parser.add_argument("--repeats", type=int, default=5, help="alternating runs of each side (--before)")
    parser.add_argument(
        "--page", action="store_true", help=f"with --before, write {os.path.relpath(SIDE_BY_SIDE_PAGE, synthetic.REPO)}"
    )
    args = parser.parse_args()
    facts = project_git()
    before_sha = (
        subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=args.before, capture_output=True, text=True).stdout
        if args.before
        else ""
    ).strip()
    ranks = [int(n) for n in args.ranks.split(",") if n]
    trace_ranks = [int(n) for n in args.trace_ranks.split(",") if n]
    print(f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} at the start", file=sys.stderr)
    compared: list[str] = []
    with contextlib.ExitStack() as stack:
        work = args.keep or stack.enter_context(tempfile.TemporaryDirectory(prefix="ddpbench-scale-"))
        os.makedirs(work, exist_ok=True)
        rows = run(ranks, trace_ranks, args.steps, work)
        if args.before:
            compared = side_by_side(max(ranks), work, os.path.abspath(args.before), args.repeats)
    print(report(rows))
    for line in compared:
        print(line)
    if compared and args.page:
        text = "\n".join(
            [
                "# The table and the gate at 1,024 ranks, side by side with older code",
                "",
                "Written by `benchmarks/scale.py --before`, which built two synthetic sweeps (20 runs up to",
                f"{max(ranks):,} ranks, {args.steps:,} timed steps per rank) and ran `ddpbench table` and",
                "`ddpbench gate` on them with this checkout's code and the older checkout's, alternating, each in a",
                "fresh process (wall time, Python's start included). Other figures at scale:",
                "[Readers at 1,024 ranks](scale.md).",
                "",
                f"- **Commit**: {commit_of(facts['git_sha'], facts['git_dirty'])}; before: {before_sha or '?'}.",
                f"- **Machine**: {os.cpu_count()} cores ({cpu_model()}); page written {utc_now()}.",
                f"- **Command**: `python benchmarks/scale.py {' '.join(sys.argv[1:])}`.",
                "",
                "```text",
                *compared,
                "```",
                "",
            ]
        )
        with open(SIDE_BY_SIDE_PAGE, "w", encoding="utf-8") as handle:
            handle.write(text)
        print(f"wrote {SIDE_BY_SIDE_PAGE}", file=sys.stderr)
    print(f"load average {os.getloadavg()[0]:.1f} at the end")


if __name__ == "__main__":
    main()
