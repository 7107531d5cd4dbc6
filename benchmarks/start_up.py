"""What forked ranks save, and whether they step as fast: docs/measurements/start-up.md.

Two parts, each run side by side in one measurement, the two ways taking turns run by run:
- start-up: the default CPU suite's smallest run (mlp, tiny) at 2 and at 8 ranks, started as plain
  torchrun does (`--rank-start exec`: a new Python per rank) and by ddpbench's agent, which imports
  torch and the worker once and forks its ranks (`--rank-start fork`). From each record's `start_up`
  (read by local rank 0 when its timed window opens): the CPU-seconds the run's processes had used and
  the wall time since the launcher started them; and the run's step time.
- equivalence: the default CPU suite's three workloads at 2 ranks, exec and fork in pairs, each pair's
  ratio of mean iteration times. Equivalent within EQUIVALENCE when the 90 % interval of the ratio's
  mean (two one-sided tests at 5 % each, Student's t over the pairs) lies inside 1 -/+ EQUIVALENCE.

Everything runs under the benchmark lock; --analyse-only reads the runs in --out again.

    python benchmarks/start_up.py --out /tmp/start-up
    python benchmarks/start_up.py --out /tmp/start-up --analyse-only
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time

from scipy.stats import t as student_t

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, REPO)

from bench_lock import bench_lock  # noqa: E402
from measurement_page import add_page_options, analysis_facts, command_line, commit_of, write_page  # noqa: E402

from ddpbench.host.facts import host_facts  # noqa: E402
from ddpbench.records.store import read_records  # noqa: E402

PAGE = os.path.join(REPO, "docs", "measurements", "start-up.md")
MEASUREMENT = "measurement.json"
EQUIVALENCE = 0.03
WAYS = ("exec", "fork")
SUITE = ("mlp", "gpt2", "resnet50")


def run(out: str, folder: str, run_id: str, workload: str, nproc: int, way: str, steps: int) -> bool:
    command = [sys.executable, "-m", "ddpbench", "run", "--device", "cpu", "--workload", workload]
    command += ["--nproc", str(nproc), "--threads-per-rank", "1", "--rank-start", way, "--steps", str(steps)]
    command += ["--no-profile", "--out", os.path.join(out, folder), "--run-id", run_id]
    env = dict(os.environ, PYTHONPATH=REPO, CUDA_VISIBLE_DEVICES="", DDPBENCH_BUSY_WARNING="off")
    started = time.time()
    done = subprocess.run(command, env=env, cwd=out, capture_output=True, text=True)
    print(f"  [{time.time() - started:5.1f} s] {folder}/{run_id}: exit {done.returncode}", file=sys.stderr)
    return done.returncode == 0


def measure(out: str, repeats: int, pairs: int, steps: int, command: str) -> dict:
    started, failed = time.time(), []
    with bench_lock() as locked_by:
        for i in range(1, repeats + 1):
            for nproc in (2, 8):
                # Which way goes first alternates, so that a drift of the machine hits both alike.
                for way in WAYS if i % 2 else WAYS[::-1]:
                    if not run(out, "start-up", f"mlp-n{nproc}-{way}-{i}", "mlp", nproc, way, steps):
                        failed.append(f"mlp-n{nproc}-{way}-{i}")
        for i in range(1, pairs + 1):
            for workload in SUITE:
                for way in WAYS if i % 2 else WAYS[::-1]:
                    if not run(out, "equivalence", f"{workload}-{way}-{i}", workload, 2, way, steps):
                        failed.append(f"{workload}-{way}-{i}")
    return {"command": command, "seconds": time.time() - started, "locked_by": locked_by, "failed": failed,
            "repeats": repeats, "pairs": pairs, "steps": steps, "machine": host_facts()}  # fmt: skip


def _runs(out: str, folder: str) -> dict[str, object]:
    path = os.path.join(out, folder)
    if not os.path.isdir(os.path.join(path, "runs")):
        return {}
    return {record.run_id: record for _, record in read_records(path)[0] if record.status == "ok"}


def mean_half(values: list[float]) -> tuple[float, float]:
    mean = statistics.fmean(values)
    if len(values) < 2:
        return mean, math.nan
    return mean, float(student_t.ppf(0.975, len(values) - 1)) * statistics.stdev(values) / math.sqrt(len(values))


def start_up_rows(runs: dict) -> list[dict]:
    rows = []
    for nproc in (2, 8):
        for way in WAYS:
            chosen = [r for run_id, r in runs.items() if run_id.startswith(f"mlp-n{nproc}-{way}-") and r.start_up]
            if not chosen:
                continue
            rows.append({
                "ranks": nproc, "way": way, "runs": len(chosen),
                "cpu": mean_half([r.start_up.cpu_s for r in chosen if r.start_up.cpu_s is not None]),
                "wall": mean_half([r.start_up.to_first_step_s for r in chosen if r.start_up.to_first_step_s]),
                "step_ms": mean_half([1e3 * r.metrics.iteration_time_s.mean for r in chosen]),
            })  # fmt: skip
    return rows


def equivalence(runs: dict) -> dict:
    """Per workload and pooled: fork's mean iteration time over exec's, pair by pair."""
    found: dict = {}
    ratios_all = []
    for workload in SUITE:
        ratios = []
        for run_id, record in runs.items():
            if run_id.startswith(f"{workload}-fork-"):
                other = runs.get(run_id.replace("-fork-", "-exec-"))
                if other is not None:
                    ratios.append(record.metrics.iteration_time_s.mean / other.metrics.iteration_time_s.mean)
        if ratios:
            found[workload] = ratios
            ratios_all += [math.log(r) for r in ratios]
    if len(ratios_all) >= 2:
        mean = statistics.fmean(ratios_all)
        se = statistics.stdev(ratios_all) / math.sqrt(len(ratios_all))
        t = float(student_t.ppf(0.95, len(ratios_all) - 1))
        found["pooled"] = {"ratio": math.exp(mean), "low": math.exp(mean - t * se), "high": math.exp(mean + t * se),
                           "pairs": len(ratios_all)}  # fmt: skip
    return found


def page(out: str, measured: dict | None, analysed: dict) -> str:
    start, equal = _runs(out, "start-up"), _runs(out, "equivalence")
    records = [*start.values(), *equal.values()]
    shas = sorted({commit_of(r.env.git_sha, r.env.git_dirty) for r in records})
    machine = (measured or {}).get("machine") or {}
    rows = start_up_rows(start)
    lines = [
        "# Start-up: forked ranks against a new Python per rank",
        "",
        "Written by `benchmarks/start_up.py`, which ran the runs below and compared them; rerun it to measure",
        "again. What the two ways are: [One run](../run.md#how-ranks-start).",
        "",
        f"- **Commit**: the runs: {', '.join(shas) or 'none'}; the analysis: "
        f"{commit_of(analysed.get('git_sha'), analysed.get('git_dirty'))}.",
        f"- **Machine**: {machine.get('cpu_cores', '?')} cores ({machine.get('cpu_model', '?')}); page written "
        f"{analysed['date']}.",
        f"- **Command**: `{(measured or {}).get('command', analysed['command'])}`"
        + (f", {measured['seconds'] / 60:.0f} minutes under the benchmark lock" if measured else "")
        + ".",
        "- **Runs**: `ddpbench run --device cpu --threads-per-rank 1 --no-profile`, exec and fork taking turns run",
        "  by run (which goes first alternates).",
        "",
        "## Before the first timed step",
        "",
        "From each record's `start_up`, read by local rank 0 when its timed window opens: the CPU-seconds of the",
        "run's processes (torchrun's agent, or ddpbench's, and every rank), and the wall time since the launcher",
        "started them. mlp, tiny: the default CPU suite's smallest run. ± the 95 % interval over the runs.",
        "",
        "| ranks | started by | runs | CPU-seconds to the first timed step | wall seconds to it | step (ms) |",
        "|---|---|---|---|---|---|",
    ]
    for row in rows:
        lines.append(
            f"| {row['ranks']} | {row['way']} | {row['runs']} | {row['cpu'][0]:.2f} ± {row['cpu'][1]:.2f} | "
            f"{row['wall'][0]:.2f} ± {row['wall'][1]:.2f} | {row['step_ms'][0]:.2f} ± {row['step_ms'][1]:.2f} |"
        )
    found = equivalence(equal)
    lines += ["", "## Step times, fork against exec", "",
              f"Each pair: the same workload at 2 ranks, once each way, back to back; fork's mean iteration time "
              f"over exec's. Equivalent within ± {EQUIVALENCE:.0%} when the 90 % interval of the mean ratio (two "
              "one-sided tests at 5 %, Student's t over the pairs, on the log of the ratio) lies inside "
              f"{1 - EQUIVALENCE:.2f}-{1 + EQUIVALENCE:.2f}.", "",
              "| workload | pairs | fork / exec, mean (lowest, highest) |", "|---|---|---|"]  # fmt: skip
    for workload in SUITE:
        ratios = found.get(workload)
        if ratios:
            lines.append(f"| {workload} | {len(ratios)} | {statistics.fmean(ratios):.3f} ({min(ratios):.3f}, "
                         f"{max(ratios):.3f}) |")  # fmt: skip
    pooled = found.get("pooled")
    verdict = None
    if pooled:
        verdict = 1 - EQUIVALENCE <= pooled["low"] and pooled["high"] <= 1 + EQUIVALENCE
        lines += [
            "",
            f"Pooled over {pooled['pairs']} pairs: {pooled['ratio']:.3f}, 90 % interval {pooled['low']:.3f}-"
            f"{pooled['high']:.3f}: " + ("equivalent within the bound." if verdict else "not shown equivalent."),
        ]
    lines += ["", "## What was chosen, and why", ""]
    saved = {row["ranks"]: row for row in rows}
    fork2 = next((r for r in rows if r["ranks"] == 2 and r["way"] == "fork"), None)
    exec2 = next((r for r in rows if r["ranks"] == 2 and r["way"] == "exec"), None)
    if fork2 and exec2 and saved:
        lines.append(
            f"At 2 ranks forked ranks cost {fork2['cpu'][0]:.2f} CPU-seconds before the first timed step against "
            f"{exec2['cpu'][0]:.2f}. "
            + (
                "Their step times are equivalent, so fork is ddpbench's default launch for its own workloads and runs "
                "started the two ways are repeats of one configuration; `--rank-start exec` keeps plain torchrun."
                if verdict
                else "Their step times were not shown equivalent: runs started the two ways stay two configurations."
            )
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="results/start-up")
    parser.add_argument("--repeats", type=int, default=5, help="runs of each way at 2 and at 8 ranks")
    parser.add_argument("--pairs", type=int, default=15, help="pairs per workload for the equivalence")
    parser.add_argument("--steps", type=int, default=60, help="steps per run, warm-up included (the suite's)")
    parser.add_argument("--analyse-only", action="store_true", help="use the runs already in --out")
    add_page_options(parser, PAGE)
    args = parser.parse_args(argv)
    command = command_line("start_up.py", argv)
    out = os.path.abspath(args.out)
    kept = os.path.join(out, MEASUREMENT)
    if args.analyse_only:
        measured = json.load(open(kept, encoding="utf-8")) if os.path.exists(kept) else None
    else:
        if os.path.exists(kept):
            parser.error(f"{out} already holds runs: use --analyse-only, or a new --out")
        os.makedirs(out, exist_ok=True)
        measured = measure(out, args.repeats, args.pairs, args.steps, command)
        with open(kept, "w", encoding="utf-8") as handle:
            json.dump(measured, handle, indent=1)
    text = page(out, measured, analysis_facts(command, args.analyse_only))
    print(text)
    write_page(args, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
