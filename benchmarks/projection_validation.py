"""Is `ddpbench project` right? Check it against real runs on this machine.

1. `ddpbench comm` fits the gloo all_reduce profile (2 processes; float32, and the float16 and
   bfloat16 that the compression hooks send).
2. For each workload, real 2-rank DDP runs in --rounds rounds (every round runs every case once,
   so a drift of the shared machine hits every case alike): the default (bucket cap 25 MB, plain
   all-reduce), and bucket cap 1, 5 and 100 MB, fp16_compress and bf16_compress.
3. (a) replay: every default run replayed as itself from its parts alone (anchored, a run's
       projection of itself is its own measurement), against its own median iteration time,
       next to the spread of the default runs ((max - min) / median);
   (b) what-ifs: the median over the default runs of the projection with each knob (anchored on
       that default run's measured step), against the median over the runs with that knob; next
       to it, the same without the anchor;
   (c) the profile's all_reduce time for each bucket against the trace's (min over ranks per
       bucket, median over --profile-steps profiled steps), in every run, over all the steps and
       over the steps where the bucket ran alone (backward and other all-reduces beside it for at
       most a tenth of the profile's time for it; those below and from 8 MiB on the wire apart);
       and the replay's, which adds the contention with backward. Next to each run, how much
       slower its profiled steps were than its timed ones: the profiler's own cost on the traces,
       whose all-reduce times (not the timed steps') are what (c) compares.

Every measurement command is wrapped in `flock /tmp/ddpbench-bench.lock` so it never runs side by
side with another benchmark on the shared machine. Prints Markdown tables and writes
DIR/validation.json (the report's "projection vs measurement" section reads the same runs).

    python benchmarks/projection_validation.py --out results/projection-validation
    python benchmarks/projection_validation.py --out results/projection-validation --analyse-only
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from ddpbench.analysis.network import load_profile  # noqa: E402
from ddpbench.analysis.projection_validation import validation_cases  # noqa: E402
from ddpbench.analysis.registry import profiled_step_p50_s  # noqa: E402
from ddpbench.analysis.trace_comm import profile_vs_trace  # noqa: E402
from ddpbench.records.store import read_records  # noqa: E402

LOCK = ["flock", "/tmp/ddpbench-bench.lock"]
LARGE = 8 * 2**20
"""(c) reports buckets that ran alone in two groups, below and from this many bytes on the wire."""
KNOBS = {
    "base": [],
    "cap1": ["--bucket-cap-mb", "1"],
    "cap5": ["--bucket-cap-mb", "5"],
    "cap100": ["--bucket-cap-mb", "100"],
    "fp16": ["--comm-hook", "fp16_compress"],
    "bf16": ["--comm-hook", "bf16_compress"],
}


def ddpbench(*args: str) -> None:
    env = dict(os.environ, PYTHONPATH=os.path.dirname(HERE))
    started = time.time()
    result = subprocess.run(
        [*LOCK, sys.executable, "-m", "ddpbench", *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    print(f"  [{time.time() - started:5.0f} s] ddpbench {' '.join(args)} -> exit {result.returncode}", file=sys.stderr)
    if result.returncode:
        print(result.stdout[-2000:], file=sys.stderr)


def measure(
    out: str, workloads: list[str], steps: int, warmup: int, max_bytes: str, rounds: int, profile_steps: int
) -> None:
    if not os.path.exists(os.path.join(out, "comm", "profile.json")):
        ddpbench(
            "comm",
            "--collectives",
            "all_reduce",
            "--dtypes",
            "float32,float16,bfloat16",
            "--max-bytes",
            max_bytes,
            "--seconds-per-size",
            "0.3",
            "--out",
            os.path.join(out, "comm"),
        )
    for round_number in range(1, rounds + 1):
        for workload in workloads:
            for name, knob in KNOBS.items():
                run_id = f"{workload}-{name}-r{round_number}"
                if os.path.exists(os.path.join(out, "runs", f"{run_id}.json")):
                    continue
                ddpbench(
                    "run",
                    "--workload",
                    workload,
                    "--nproc",
                    "2",
                    "--device",
                    "cpu",
                    "--steps",
                    str(steps),
                    "--warmup",
                    str(warmup),
                    "--profile-steps",
                    str(profile_steps),
                    "--out",
                    out,
                    "--run-id",
                    run_id,
                    *knob,
                )


def pct(value: float | None) -> str:
    return "" if value is None else f"{value:+.1%}"


def times(value: float | None) -> str:
    return "(no runs to tell)" if value is None else f"{value:.3f} times"


def mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def analyse(out: str) -> dict:
    profile = load_profile(os.path.join(out, "comm", "profile.json"))
    records = [record for _, record in read_records(out)[0] if record.status == "ok"]
    cases = validation_cases(records, profile)
    print("\n### (a) replay of the measured run, (b) what-ifs against real runs\n")
    print(
        "Replays are from the run's parts alone; what-ifs are anchored on the default run's measured step "
        '("from parts": the same what-if without the anchor). "timeline ms": the measured runs\' own DDP '
        "steps in their gradient timeline (each after a barrier and an unmarked DDP step, at the end of the run); "
        "for a "
        "replay these are the steps its parts come from, for a what-if those of the runs with the knob "
        "(the parts come from the default runs). Next to it, the replay from parts against them.\n"
    )
    print(
        "| workload | case | runs measured | projected ms | measured ms | error | from parts ms | error "
        "| timeline ms | from parts vs timeline | spread of the default runs |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for case in cases:
        measured_runs = case["targets"][0] if case["kind"] == "replay" else f"{len(case['targets'])}"
        parts = case["modelled_s"] / case["measured_s"] - 1
        print(
            f"| {case['workload']} | {case['case']} | {measured_runs} | {case['projected_s'] * 1e3:.1f} "
            f"| {case['measured_s'] * 1e3:.1f} | {pct(case['error'])} | {case['modelled_s'] * 1e3:.1f} | {pct(parts)} "
            f"| {case['timeline_step_s'] * 1e3:.1f} | {pct(case['modelled_s'] / case['timeline_step_s'] - 1)} "
            f"| {'' if case['spread'] is None else format(case['spread'], '.1%')} |"
        )
    replay = [abs(c["error"]) for c in cases if c["kind"] == "replay"]
    what_ifs = [abs(c["error"]) for c in cases if c["kind"] == "what-if"]
    from_parts = [abs(c["modelled_s"] / c["measured_s"] - 1) for c in cases if c["kind"] == "what-if"]
    within = [
        c for c in cases if c["kind"] == "replay" and c.get("spread") is not None and abs(c["error"]) <= c["spread"]
    ]
    summary = {
        "replay_mae": sum(replay) / len(replay) if replay else None,
        "what_if_mae": sum(what_ifs) / len(what_ifs) if what_ifs else None,
        "what_if_mae_from_parts": sum(from_parts) / len(from_parts) if from_parts else None,
        "replays_within_spread": f"{len(within)} of {len(replay)}",
    }
    # A replay against the steps its parts come from, and those steps against the timed window.
    against_timeline = [abs(c["modelled_s"] / c["timeline_step_s"] - 1) for c in cases if c["kind"] == "replay"]
    timed_over_timeline = [c["measured_s"] / c["timeline_step_s"] for c in cases if c["kind"] == "replay"]
    summary["replay_vs_timeline_mae"] = mean(against_timeline)
    summary["timed_over_timeline"] = statistics.median(timed_over_timeline) if timed_over_timeline else None
    print(
        f"\nreplay: mean absolute error {pct(summary['replay_mae'])}, within the run-to-run spread in "
        f"{summary['replays_within_spread']}; what-ifs: mean absolute error {pct(summary['what_if_mae'])} "
        f"over {len(what_ifs)} cases ({pct(summary['what_if_mae_from_parts'])} from parts alone). "
        f"Replays from parts against the runs' own timeline DDP steps: {pct(summary['replay_vs_timeline_mae'])}; "
        f"the default runs' timed steps took {times(summary['timed_over_timeline'])} their timeline DDP steps "
        "(median)"
    )
    print("\n### (c) gloo profile against the all-reduce times in the traces (min over ranks per bucket)\n")
    print(
        'The profile is an idle network. "alone": the steps in which backward and other all-reduces '
        "overlapped the bucket's all-reduce, on every rank, for at most a tenth of the profile's time for it, "
        "and its median there; the replay adds the contention with backward that the run's probe measured. "
        '"profiled / timed": the run\'s profiled steps against its timed ones.\n'
    )
    print(
        "| run | profiled / timed | bucket | MB on the wire | trace ms | profile ms | error | alone in | "
        "alone ms | error | replay ms | error |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    trace_rows, slowdowns = [], []
    for record in records:
        profiled = profiled_step_p50_s(record)
        slowdown = profiled / record.metrics.iteration_time_s.p50 if profiled and record.metrics else None
        rows = profile_vs_trace(record, profile)
        if rows and slowdown is not None:
            slowdowns.append(slowdown)
        for row in rows:
            trace_rows.append({"run": record.run_id, "profiled_over_timed": slowdown, **row})
            ms = lambda seconds: "" if seconds is None else f"{seconds * 1e3:.2f}"  # noqa: E731
            print(
                f"| {record.run_id} | {'' if slowdown is None else f'{slowdown:.2f}'} | {row['bucket']} "
                f"| {row['wire_bytes'] / 2**20:.2f} | {ms(row['trace_s'])} | {ms(row['predicted_s'])} "
                f"| {pct(row['error'])} | {row['alone_steps']} of {row['steps']} | {ms(row['alone_s'])} "
                f"| {pct(row['alone_error'])} | {ms(row['replayed_s'])} | {pct(row['replay_error'])} |"
            )
    errors = [abs(r["error"]) for r in trace_rows if r["error"] is not None]
    alone_errors = [abs(r["alone_error"]) for r in trace_rows if r["alone_error"] is not None]
    replay_errors = [abs(r["replay_error"]) for r in trace_rows if r["replay_error"] is not None]
    summary["trace_mae"] = mean(errors)
    summary["trace_alone_mae"] = mean(alone_errors)
    # Split where the bytes dominate the profile's time (alpha is a few per cent of it at 8 MiB on
    # this machine): small all-reduces inside a step pay a latency that the profile does not see.
    large = [abs(r["alone_error"]) for r in trace_rows if r["alone_error"] is not None and r["wire_bytes"] >= LARGE]
    small = [abs(r["alone_error"]) for r in trace_rows if r["alone_error"] is not None and r["wire_bytes"] < LARGE]
    summary["trace_alone_large_mae"], summary["trace_alone_small_mae"] = mean(large), mean(small)
    summary["trace_replay_mae"] = mean(replay_errors)
    summary["profiled_over_timed"] = statistics.median(slowdowns) if slowdowns else None
    print(
        f"\nprofile vs trace: mean absolute error {pct(summary['trace_mae'])} over {len(errors)} buckets; "
        f"where the bucket ran alone: {pct(summary['trace_alone_mae'])} over {len(alone_errors)} "
        f"({pct(summary['trace_alone_large_mae'])} over the {len(large)} of at least 8 MiB on the wire, "
        f"{pct(summary['trace_alone_small_mae'])} over the {len(small)} smaller); "
        f"replay (profile and measured contention) vs trace: {pct(summary['trace_replay_mae'])} "
        f"over {len(replay_errors)}. Profiled steps took {times(summary['profiled_over_timed'])} "
        f"the timed steps (median over {len(slowdowns)} runs)"
    )
    return {"summary": summary, "cases": cases, "trace": trace_rows, "profile": profile["name"]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="results/projection-validation")
    parser.add_argument("--workloads", default="mlp,resnet50,vit_b_16")
    parser.add_argument("--steps", type=int, default=45)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--max-bytes", default="64M", help="largest all_reduce size of the profile")
    parser.add_argument("--rounds", type=int, default=3, help="runs of every case, one per round")
    parser.add_argument(
        "--profile-steps",
        type=int,
        default=10,
        help="profiled steps per run: the samples of each bucket's all-reduce in (c)",
    )
    parser.add_argument("--analyse-only", action="store_true", help="use the runs already in --out")
    args = parser.parse_args()
    if not args.analyse_only:
        measure(
            args.out,
            args.workloads.split(","),
            args.steps,
            args.warmup,
            args.max_bytes,
            args.rounds,
            args.profile_steps,
        )
    result = analyse(args.out)
    with open(os.path.join(args.out, "validation.json"), "w", encoding="utf-8") as handle:
        json.dump(result, handle, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
