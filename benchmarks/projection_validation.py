"""Is `ddpbench project` right? Check it against real runs on this machine, and write the page.

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
side with another benchmark on the shared machine. Prints the page and writes it to --page
(docs/measurements/projection-validation.md; --no-page only prints), then prints every bucket's row
of (c), which the page sums up; writes DIR/validation.json (the report's "projection vs
measurement" section reads the same runs). Every figure on the page, the method's counts included,
is computed from the runs in DIR and their records.

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
import textwrap
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, REPO)

from measurement_page import add_page_options, command_line, commit_of, minute, utc_now, write_page  # noqa: E402

from ddpbench.analysis.network import load_profile  # noqa: E402
from ddpbench.analysis.projection_validation import validation_cases  # noqa: E402
from ddpbench.analysis.registry import profiled_step_p50_s  # noqa: E402
from ddpbench.analysis.trace_comm import ALONE_AT_MOST, profile_vs_trace  # noqa: E402
from ddpbench.config.spec import DEFAULT_BUCKET_CAP_MB  # noqa: E402
from ddpbench.records.store import read_records  # noqa: E402

PAGE = os.path.join(REPO, "docs", "measurements", "projection-validation.md")
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
NO_RUNS = "no runs to tell"
WIDTH = 100


def ddpbench(*args: str) -> None:
    env = dict(os.environ, PYTHONPATH=REPO)
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
) -> int:
    """Makes what is not in `out` yet; returns how many commands that took."""
    commands = 0
    if not os.path.exists(os.path.join(out, "comm", "profile.json")):
        commands += 1
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
                commands += 1
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
    return commands


def wrap(text: str, indent: str = "") -> str:
    """Prose at 100 columns, as on the other pages; each line of `text` (a list item) wrapped on its own."""
    return "\n".join(
        textwrap.fill(
            line,
            WIDTH,
            break_long_words=False,
            break_on_hyphens=False,
            subsequent_indent=indent + " " * (len(line) - len(line.lstrip())),
        )
        for line in text.splitlines()
    )


def tenth() -> str:
    return f"{ALONE_AT_MOST:.0%}"


def pct(value: float | None) -> str:
    return "" if value is None else f"{value:+.1%}"


def share(value: float) -> str:
    return f"{value:.1%}"


def ms(seconds: float | None, digits: int = 2) -> str:
    return "" if seconds is None else f"{seconds * 1e3:.{digits}f}"


def mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True).stdout.strip()


def knob_label(record) -> str:
    knobs = record.spec.ddp
    if knobs.comm_hook != "allreduce":
        return knobs.comm_hook
    if knobs.bucket_cap_mb == DEFAULT_BUCKET_CAP_MB:
        return "the default"
    return f"bucket cap {knobs.bucket_cap_mb:g} MB"


def machine_of(env) -> str:
    system = f"{env.system or env.platform or ''} {env.release or ''}".strip()
    return f"{env.cpu_cores} cores ({env.cpu_model or 'model not recorded'}), {system or 'system not recorded'}"


def what_ran(records: list, profile: dict, failed: int = 0) -> dict:
    """What the runs and the profile were, from the records themselves: with --analyse-only the
    arguments of this command need not be the ones the runs were made with."""
    per_case: dict[tuple, int] = {}
    for record in records:
        key = (record.spec.workload, knob_label(record))
        per_case[key] = per_case.get(key, 0) + 1
    fits = [fit for fit in profile.get("fits", []) if fit["collective"] == "all_reduce"]
    env = [record.env for record in records]
    return {
        "count": len(records),
        "failed": failed,
        "workloads": sorted({record.spec.workload for record in records}),
        "world_sizes": sorted({record.spec.world_size for record in records}),
        "runs_per_case": sorted(set(per_case.values())),
        "knobs": sorted({label for _, label in per_case} - {"the default"}),
        "steps": sorted({record.spec.steps for record in records}),
        "warmup": sorted({record.spec.warmup for record in records if record.spec.warmup is not None}),
        "profile_steps": sorted({record.spec.profile_active for record in records}),
        "commits": sorted({commit_of(e.git_sha, e.git_dirty) for e in env}),
        "machines": sorted({machine_of(e) for e in env}),
        "first_started": min((r.started_at for r in records if r.started_at), default=None),
        "last_ended": max((r.ended_at for r in records if r.ended_at), default=None),
        "profile_name": profile["name"],
        "profile_backend": profile.get("backend"),
        "profile_world_sizes": profile.get("world_sizes", []),
        "profile_dtypes": sorted({fit.get("dtype", "float32") for fit in fits}),
        "profile_max_bytes": max((fit["max_bytes"] for fit in fits), default=None),
    }


def summarise(cases: list[dict], trace_rows: list[dict]) -> dict:
    """The page's figures, from the cases of (a) and (b) and the bucket rows of (c) only."""
    replays = [c for c in cases if c["kind"] == "replay"]
    what_ifs = [c for c in cases if c["kind"] == "what-if"]
    with_spread = [c for c in replays if c.get("spread") is not None]
    worst = lambda group: max(group, key=lambda c: abs(c["error"]), default=None)  # noqa: E731
    summary = {
        "replays": len(replays),
        "replay_mae": mean([abs(c["error"]) for c in replays]),
        "replays_short": sum(c["error"] < 0 for c in replays),
        "replays_with_spread": len(with_spread),
        "replays_within_spread": sum(abs(c["error"]) <= c["spread"] for c in with_spread),
        "replay_worst": worst(replays),
        "what_ifs": len(what_ifs),
        "what_if_mae": mean([abs(c["error"]) for c in what_ifs]),
        "what_if_mae_from_parts": mean([abs(c["modelled_s"] / c["measured_s"] - 1) for c in what_ifs]),
        "what_if_worst": worst(what_ifs),
    }
    spreads: dict[str, dict] = {}
    for case in replays:
        spreads.setdefault(case["workload"], {"spread": case["spread"], "runs": 0})["runs"] += 1
    summary["spread_by_workload"] = spreads
    # A replay against the steps its parts come from, and those steps against the timed window.
    summary["replay_vs_timeline_mae"] = mean([abs(c["modelled_s"] / c["timeline_step_s"] - 1) for c in replays])
    timed_over_timeline = [c["measured_s"] / c["timeline_step_s"] for c in replays]
    summary["timed_over_timeline"] = median(timed_over_timeline)
    summary["timed_vs_timeline_mean"] = mean([abs(r - 1) for r in timed_over_timeline])
    summary["timed_vs_timeline_most"] = max((abs(r - 1) for r in timed_over_timeline), default=None)

    def group(name: str, rows: list[dict], key: str) -> None:
        errors = [abs(r[key]) for r in rows if r[key] is not None]
        summary[f"{name}_buckets"], summary[f"{name}_mae"] = len(errors), mean(errors)

    alone = [r for r in trace_rows if r["alone_error"] is not None]
    never = [r for r in trace_rows if r["alone_error"] is None]
    group("trace", trace_rows, "error")
    group("trace_replay", trace_rows, "replay_error")
    group("trace_alone", alone, "alone_error")
    # Split where the bytes dominate the profile's time (alpha is a few per cent of it at 8 MiB on
    # the 2-core machine): small all-reduces inside a step pay a latency that the profile does not see.
    group("trace_alone_large", [r for r in alone if r["wire_bytes"] >= LARGE], "alone_error")
    group("trace_alone_small", [r for r in alone if r["wire_bytes"] < LARGE], "alone_error")
    summary["trace_alone_large_short"] = sum(r["alone_error"] < 0 for r in alone if r["wire_bytes"] >= LARGE)
    group("trace_never_alone", never, "error")
    group("trace_never_alone_large", [r for r in never if r["wire_bytes"] >= LARGE], "error")
    group("trace_never_alone_replay", never, "replay_error")
    # The profiler's cost on the steps (c) reads, once per run (every bucket row repeats it).
    slowdowns: dict[str, dict[str, float]] = {}
    for row in trace_rows:
        if row["profiled_over_timed"] is not None:
            slowdowns.setdefault(row["workload"], {})[row["run"]] = row["profiled_over_timed"]
    summary["profiled_over_timed"] = median([s for runs in slowdowns.values() for s in runs.values()])
    summary["profiled_over_timed_by_workload"] = {
        workload: {
            "median": statistics.median(runs.values()),
            "low": min(runs.values()),
            "high": max(runs.values()),
            "runs": len(runs),
        }
        for workload, runs in sorted(slowdowns.items())
    }
    return summary


def analyse(out: str) -> dict:
    profile = load_profile(os.path.join(out, "comm", "profile.json"))
    every = [record for _, record in read_records(out)[0]]
    records = [record for record in every if record.status == "ok"]
    cases = validation_cases(records, profile)
    trace_rows = []
    for record in records:
        profiled = profiled_step_p50_s(record)
        slowdown = profiled / record.metrics.iteration_time_s.p50 if profiled and record.metrics else None
        for row in profile_vs_trace(record, profile):
            trace_rows.append(
                {"run": record.run_id, "workload": record.spec.workload, "profiled_over_timed": slowdown, **row}
            )
    return {
        "summary": summarise(cases, trace_rows),
        "cases": cases,
        "trace": trace_rows,
        "profile": profile["name"],
        "ran": what_ran(records, profile, len(every) - len(records)),
    }


def many(count: int, one: str, more: str | None = None) -> str:
    return f"{count} {one if count == 1 else more or one + 's'}"


def counted(values: list, one: str, more: str | None = None) -> str:
    """'45 steps', or '30 or 45 steps' where the runs differ."""
    if not values:
        return f"an unrecorded number of {more or one + 's'}"
    plural = one if values == [1] else more or one + "s"
    return f"{' or '.join(str(v) for v in values)} {plural}"


def listed(items: list[str]) -> str:
    if len(items) < 2:
        return "".join(items)
    return ", ".join(items[:-1]) + " and " + items[-1]


def method(result: dict) -> str:
    ran = result["ran"]
    largest = f", up to {ran['profile_max_bytes'] / 2**20:g} MiB" if ran["profile_max_bytes"] else ""
    dtypes = listed(ran["profile_dtypes"]) or "no element type"
    failed = f" ({ran['failed']} more failed and are left out)" if ran["failed"] else ""
    made = (
        f"`ddpbench comm` measured a {ran['profile_backend'] or ''} all_reduce profile at "
        f"{counted(ran['profile_world_sizes'], 'process', 'processes')} ({dtypes}{largest}; "
        f"profile `{ran['profile_name']}`). Then {ran['count']} real runs{failed} of "
        f"{listed(ran['workloads'])} at world size {listed([str(size) for size in ran['world_sizes']])}, in "
        f"{counted(ran['runs_per_case'], 'round')}, every round running every case once: the default knobs "
        f"(bucket cap {DEFAULT_BUCKET_CAP_MB:g} MB, plain all-reduce) and {listed(ran['knobs']) or 'no other knobs'}. "
        f"Each run took {counted(ran['steps'], 'step')}, of which {counted(ran['warmup'], 'warm-up', 'warm-up')}, then "
        f"{counted(ran['profile_steps'], 'profiled step')}."
    )
    compared = (
        "(a) Every default run is replayed as itself **from its parts alone** (anchored, a run's projection of "
        "itself would be its own measurement) and compared with its own median iteration time. (b) Each what-if "
        "is projected from each default run of its workload, anchored on that run's measured step; the median of "
        "those projections is compared with the median over the runs that used the knob, and so is the same "
        'projection without the anchor ("from parts"). Both also appear next to the measured runs\' own DDP steps '
        'in their timeline ("timeline ms"; for a replay, the steps its parts come from). (c) Every bucket\'s '
        "all-reduce time in every run's traces (the minimum over ranks, since a rank's interval includes waiting "
        "for its peer; the median over the profiled steps) is compared with the profile alone, over all the steps "
        "and over the steps in which the bucket ran alone (backward and other all-reduces overlapped it, on every "
        f"rank, for at most {tenth()} of the profile's time for it), and with the replay, which adds "
        "the measured contention."
    )
    return f"{wrap(made)}\n\n{wrap(compared)}"


def replay_table(result: dict) -> str:
    lines = [
        wrap(
            "Replays are from the run's parts alone; what-ifs are anchored on the default run's measured step "
            '("from parts": the same what-if without the anchor). "timeline ms": the measured runs\' own DDP '
            "steps in their gradient timeline (each after a barrier and an unmarked DDP step, at the end of the "
            "run); for a replay these are the steps its parts come from, for a what-if those of the runs with the "
            "knob (the parts come from the default runs). Next to it, the replay from parts against them."
        ),
        "",
        "| workload | case | runs measured | projected ms | measured ms | error | from parts ms | error "
        "| timeline ms | from parts vs timeline | spread of the default runs |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for case in result["cases"]:
        measured_runs = case["targets"][0] if case["kind"] == "replay" else f"{len(case['targets'])}"
        parts = case["modelled_s"] / case["measured_s"] - 1
        lines.append(
            f"| {case['workload']} | {case['case']} | {measured_runs} | {ms(case['projected_s'], 1)} "
            f"| {ms(case['measured_s'], 1)} | {pct(case['error'])} | {ms(case['modelled_s'], 1)} | {pct(parts)} "
            f"| {ms(case['timeline_step_s'], 1)} | {pct(case['modelled_s'] / case['timeline_step_s'] - 1)} "
            f"| {'' if case['spread'] is None else share(case['spread'])} |"
        )
    return "\n".join(lines)


def trace_table(result: dict) -> str:
    lines = [
        'The profile is an idle network. "alone": the steps in which backward and other all-reduces '
        f"overlapped the bucket's all-reduce, on every rank, for at most {tenth()} of the "
        "profile's time for it, and its median there; the replay adds the contention with backward that the "
        "run's probe measured. \"profiled / timed\": the run's profiled steps against its timed ones.",
        "",
        "| run | profiled / timed | bucket | MB on the wire | trace ms | profile ms | error | alone in | "
        "alone ms | error | replay ms | error |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in result["trace"]:
        slowdown = row["profiled_over_timed"]
        lines.append(
            f"| {row['run']} | {'' if slowdown is None else f'{slowdown:.2f}'} | {row['bucket']} "
            f"| {row['wire_bytes'] / 2**20:.2f} | {ms(row['trace_s'])} | {ms(row['predicted_s'])} "
            f"| {pct(row['error'])} | {row['alone_steps']} of {row['steps']} | {ms(row['alone_s'])} "
            f"| {pct(row['alone_error'])} | {ms(row['replayed_s'])} | {pct(row['replay_error'])} |"
        )
    return "\n".join(lines)


def error_over(summary: dict, name: str) -> str:
    """'7.5% over 9', or NO_RUNS where the group is empty."""
    value, count = summary[f"{name}_mae"], summary[f"{name}_buckets"]
    return NO_RUNS if value is None else f"{share(value)} over {count}"


def spreads(summary: dict) -> str:
    said = []
    for workload, seen in summary["spread_by_workload"].items():
        if seen["spread"] is None:
            said.append(f"{workload}: one default run, no spread")
        else:
            said.append(f"{share(seen['spread'])} for {workload} ({many(seen['runs'], 'run')})")
    if not said:
        return f"Spread of the default runs: {NO_RUNS} (no default run with a timeline)."
    return wrap(f"Spread of the default runs ((max - min) / median): {listed(said)}.")


def findings(summary: dict) -> list[str]:
    """One sentence per figure group, each from the computed values; NO_RUNS where a group is empty."""
    said = []
    if summary["replays"]:
        worst = summary["replay_worst"]
        within = (
            f"within the spread of the default runs for {summary['replays_within_spread']} of "
            f"{summary['replays_with_spread']}"
            if summary["replays_with_spread"]
            else "no spread to hold them against (one default run per workload)"
        )
        said.append(
            f"**(a) Replays from parts: mean absolute error {share(summary['replay_mae'])} over "
            f"{summary['replays']}, {within}.** Short of the timed step in {summary['replays_short']} of "
            f"{summary['replays']}; the worst is {pct(worst['error'])} ({worst['targets'][0]})."
        )
    else:
        said.append(f"**(a) Replays from parts**: {NO_RUNS} (no default run with a timeline).")
    if summary["what_ifs"]:
        worst = summary["what_if_worst"]
        said.append(
            f"**(b) What-ifs: mean absolute error {share(summary['what_if_mae'])} anchored and "
            f"{share(summary['what_if_mae_from_parts'])} from parts alone, over {many(summary['what_ifs'], 'case')}.** "
            f"The worst single case is {pct(worst['error'])} ({worst['workload']}, {worst['case']})."
        )
    else:
        said.append(f"**(b) What-ifs**: {NO_RUNS} (no run with another knob beside a default run).")
    if summary["trace_buckets"]:
        said.append(
            f"**(c) {summary['trace_buckets']} buckets: the profile alone has a mean absolute error of "
            f"{share(summary['trace_mae'])}, the replay with the measured contention "
            f"{error_over(summary, 'trace_replay')}.** By bucket:\n"
            f"  - **Buckets that ran alone in some steps, of at least {LARGE / 2**20:g} MiB on the wire**: "
            f"{error_over(summary, 'trace_alone_large')}"
            + (
                f"; the profile was shorter than the trace in {summary['trace_alone_large_short']} of them."
                if summary["trace_alone_large_buckets"]
                else "."
            )
            + f"\n  - **Smaller buckets that ran alone in some steps**: {error_over(summary, 'trace_alone_small')}.\n"
            f"  - **Buckets that never ran alone** ({summary['trace_never_alone_buckets']} of "
            f"{summary['trace_buckets']}): the profile alone {error_over(summary, 'trace_never_alone')} "
            f"({error_over(summary, 'trace_never_alone_large')} of at least {LARGE / 2**20:g} MiB), the replay "
            f"with the measured contention {error_over(summary, 'trace_never_alone_replay')}."
        )
    else:
        said.append(f"**(c) Buckets in the traces**: {NO_RUNS} (no run's traces matched its buckets).")
    return said


def why(summary: dict) -> str:
    paragraphs = []
    if summary["timed_over_timeline"] is not None:
        paragraphs.append(
            "The replay's parts come from the timeline's DDP steps, each after a barrier and an unmarked DDP "
            "step, at the end of the run; the timed steps come before them. Here the default runs' timed steps "
            f"took a median of {summary['timed_over_timeline']:.3f} times their timeline DDP steps, and a single "
            f"run's differed from them by {share(summary['timed_vs_timeline_mean'])} on average over "
            f"{many(summary['replays'], 'run')} (up to "
            f"{share(summary['timed_vs_timeline_most'])}). The replays from parts were off those timeline steps by "
            f"{share(summary['replay_vs_timeline_mae'])} on average, and off the timed steps by "
            f"{share(summary['replay_mae'])}."
        )
    else:
        paragraphs.append(f"The timed steps against the timeline's DDP steps: {NO_RUNS}.")
    large = summary["trace_alone_large_buckets"]
    paragraphs.append(
        "`ddpbench comm` times all-reduces that follow one another, as nccl-tests does; in a step, a bucket's "
        "all-reduce starts right after backward work. "
        + (
            f"Of the {large} buckets of at least {LARGE / 2**20:g} MiB that ran alone in some steps, the profile "
            f"was shorter than the trace for {summary['trace_alone_large_short']}."
            if large
            else f"Buckets of at least {LARGE / 2**20:g} MiB that ran alone: {NO_RUNS}."
        )
    )
    never = summary["trace_never_alone_buckets"]
    paragraphs.append(
        "gloo's ProcessGroupGloo runs up to two all-reduces at once (it has two worker threads), so a bucket "
        "that starts while the previous one still runs shares the machine with it; the replay's one queue does "
        "not model that (it is right for NCCL, which uses one stream). "
        + (
            f"{never} of the {summary['trace_buckets']} buckets here never ran alone: the profile alone was off "
            f"by {error_over(summary, 'trace_never_alone')} for them, the replay with the measured contention by "
            f"{error_over(summary, 'trace_never_alone_replay')}."
            if never
            else f"Buckets that never ran alone: {NO_RUNS}."
        )
    )
    by_workload = summary["profiled_over_timed_by_workload"]
    if by_workload:
        each = [
            f"{seen['median']:.2f} times the timed steps for {workload} ({seen['low']:.2f} to {seen['high']:.2f} "
            f"over {many(seen['runs'], 'run')})"
            for workload, seen in by_workload.items()
        ]
        paragraphs.append(
            "The profiler slows the steps the trace figures of (c) come from: the profiled steps took a median "
            f"of {listed(each)}."
        )
    else:
        paragraphs.append(f"The profiler's slowdown of the profiled steps: {NO_RUNS}.")
    return "\n\n".join(wrap(paragraph) for paragraph in paragraphs)


def page(result: dict, header: dict) -> str:
    """The whole measurement page. `header`: commit, command, date and measured (what this command
    measured, or None with --analyse-only) of the command that wrote it; the rest comes from `result`."""
    ran, summary = result["ran"], result["summary"]
    runs_commit = listed(ran["commits"]) if ran["commits"] else "not recorded"
    commit = (
        header["commit"]
        if [header["commit"]] == ran["commits"]
        else (f"{header['commit']} (the analysis); the runs: {runs_commit}")
    )
    span = (
        f"the runs ran from {minute(ran['first_started'])} to {minute(ran['last_ended'])}"
        if ran["first_started"] and ran["last_ended"]
        else "the runs' times were not recorded"
    )
    measured = header["measured"]
    took = (
        f"the measurement took {measured['seconds'] / 60:.1f} minutes for {many(measured['commands'], 'command')}"
        if measured and measured["commands"]
        else "the runs were already in the folder; this command analysed them"
    )
    findings_text = "\n".join(wrap(f"- {sentence}", "  ") for sentence in findings(summary))
    return f"""# `ddpbench project` against real runs

Written by `benchmarks/projection_validation.py`, which measured the runs below and analysed them.
What the projection is and how it replays a step: [Projection](../beyond.md#projection-ddpbench-project).

- **Commit**: {commit}.
- **Machine**: {listed(ran['machines']) if ran['machines'] else 'not recorded'}; every measurement \
command wrapped in `flock /tmp/ddpbench-bench.lock`.
- **Command**: `{header['command']}` ({took}; {span}; page written {header['date']}).

## What the validation does

{method(result)}

## (a) Replay of the measured run, (b) what-ifs against real runs

{replay_table(result)}

{spreads(summary)}

{findings_text}

## Why a replay misses

{why(summary)}
"""


def main(argv: list[str] | None = None) -> int:
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
    add_page_options(parser, PAGE)
    args = parser.parse_args(argv)
    commit = commit_of(git("rev-parse", "HEAD"), bool(git("status", "--porcelain", "--untracked-files=no")))
    measured = None
    if not args.analyse_only:
        started = time.time()
        commands = measure(
            args.out,
            args.workloads.split(","),
            args.steps,
            args.warmup,
            args.max_bytes,
            args.rounds,
            args.profile_steps,
        )
        measured = {"commands": commands, "seconds": time.time() - started}
    result = analyse(args.out)
    with open(os.path.join(args.out, "validation.json"), "w", encoding="utf-8") as handle:
        json.dump(result, handle, indent=1)
    header = {
        "commit": commit,
        "command": command_line("projection_validation.py", argv),
        "date": utc_now(),
        "measured": measured,
    }
    text = page(result, header)
    print(text)
    # Every bucket of every run: too long for the page, the rows behind its (c) figures.
    print(f"\n### (c) every bucket (in {os.path.join(args.out, 'validation.json')}, not on the page)\n")
    print(trace_table(result))
    write_page(args, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
