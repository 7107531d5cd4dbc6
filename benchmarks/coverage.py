"""Do the answers hold from one sweep to the next? Independent sweeps of the default CPU suite (the
sweep `make bench` runs, each with its default repeats), in pairs, written as
docs/measurements/coverage.md.

For each pair and each (configuration, figure) with an interval in both sweeps (E(N), the
in-process efficiency, each cause, the check, the wait for the slowest rank), the two estimates
agree when their difference, over its standard error (each side's, from its interval and degrees of
freedom), is within Student's t at Welch's degrees of freedom, at 95 %. Calibrated intervals agree
about 95 % of the time; below 90 % they understate the spread from one sweep to the next. The test
shows it can fail: the same figures with every standard error halved are judged beside them, and
must fall below 90 % (half-widths in quadrature barely could: with t(2) intervals, calibrated
ones agree about 99 % of the time that way, and halved ones still about 90 %). The same count for single
runs (each run's own rounds, repeat r of one sweep against repeat r of the other) stands beside it
for contrast. Then: whether each configuration's largest cause is the same in both sweeps (tied
causes, and "within noise" on both sides, count as the same answer), the width of the in-process
efficiency at two ranks, and how many runs named a straggler among identical ranks.

The sweeps run one after another under the benchmark lock, each beside the same planted other work
(--load cores of it, benchmarks/background_load.py: a busy shared node); --analyse-only reads them
again.

    python benchmarks/coverage.py --pairs 10 --out /tmp/coverage
    python benchmarks/coverage.py --out /tmp/coverage --analyse-only
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import statistics
import subprocess
import sys
import time

from scipy.stats import beta
from scipy.stats import t as student_t

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, REPO)

from background_load import background  # noqa: E402
from bench_lock import LOCK, bench_lock  # noqa: E402
from measurement_page import add_page_options, analysis_facts, command_line, write_page  # noqa: E402

from ddpbench.analysis.answers import Answer, answer_sweep  # noqa: E402
from ddpbench.analysis.causes import LABELS  # noqa: E402
from ddpbench.analysis.configurations import configuration_key  # noqa: E402
from ddpbench.analysis.estimates import Estimate  # noqa: E402
from ddpbench.host.facts import host_facts  # noqa: E402
from ddpbench.records.store import read_records  # noqa: E402
from ddpbench.worker.ablation import extra_rounds as extra_rounds_of  # noqa: E402

PAGE = os.path.join(REPO, "docs", "measurements", "coverage.md")
MEASUREMENT = "measurement.json"
TARGET = 0.90
EXTRA_LIMIT = 0.25
"""The default sweep's time may grow at most this much for the rounds added to decide a lead."""
FLOOR_NAMED = 28
"""The page before this rule named a largest cause (alone or tied) in 28 of its 30 sweeps'
configurations: a rule that agrees by answering "within noise" more often must not pass."""
WIDTH_TARGET_PP = 10.0


# --- measuring ------------------------------------------------------------------------------------


def sweep(out: str, sweep_id: str, extra: list[str], load_cores: float) -> dict:
    command = [sys.executable, "-m", "ddpbench", "sweep", "--device", "cpu", "--out", out, "--sweep-id", sweep_id]
    env = dict(os.environ, PYTHONPATH=REPO, CUDA_VISIBLE_DEVICES="")
    load = os.getloadavg()[0]
    started = time.time()
    planted = None
    with contextlib.ExitStack() as stack:
        if load_cores > 0:
            other = stack.enter_context(background(load_cores))
        done = subprocess.run([*command, *extra], env=env, cwd=out, capture_output=True, text=True)
        if load_cores > 0:
            planted = other.stop()
    seconds = time.time() - started
    print(f"  [{seconds:5.0f} s] {sweep_id}: exit {done.returncode}", file=sys.stderr)
    return {"sweep": sweep_id, "exit": done.returncode, "seconds": seconds, "load_before": load, "planted": planted}


def measure(out: str, pairs: int, extra: list[str], command: str, load_cores: float) -> dict:
    started = time.time()
    with bench_lock() as locked_by:
        sweeps = [sweep(out, f"sweep-{i + 1}", extra, load_cores) for i in range(2 * pairs)]
    return {
        "command": command,
        "seconds": time.time() - started,
        "locked_by": locked_by,
        "sweeps": sweeps,
        "load_cores": load_cores,
        "machine": host_facts(),
    }


# --- comparing ------------------------------------------------------------------------------------


def figures(answer: Answer) -> dict[str, Estimate]:
    """Every figure of a configuration that users read, by name."""
    found = {"E(N)": answer.efficiency, "in-process efficiency": answer.in_process, "check": answer.gap}
    found.update({LABELS[name]: cause.points for name, cause in answer.causes.items()})
    if answer.straggler is not None and answer.straggler.wait is not None and answer.world_size > 1:
        found["wait for the slowest rank (ms)"] = answer.straggler.wait.scaled(1e3)
    return {name: value for name, value in found.items() if value is not None and value.over != "exact"}


def agree(a: Estimate, b: Estimate, shrink: float = 1.0) -> bool | None:
    """Whether two independent estimates agree at 95 %: |a - b| within Student's t at Welch's
    degrees of freedom times the standard error of the difference. `shrink` scales both standard
    errors (0.5: the control whose intervals are half as wide). None where either has no interval."""
    if not (a.has_interval and b.has_interval) or a.se is None or b.se is None:
        return None
    se_a, se_b = shrink * a.se, shrink * b.se
    df_a, df_b = a.samples - 1, b.samples - 1
    if df_a < 1 or df_b < 1:
        return None
    se = math.hypot(se_a, se_b)
    if se == 0:
        return a.value == b.value
    welch_df = se**4 / (se_a**4 / df_a + se_b**4 / df_b)
    return abs(a.value - b.value) <= student_t.ppf(0.975, welch_df) * se


def lower_bound(agreeing: int, compared: int) -> float:
    """The one-sided 95 % lower bound (Clopper-Pearson) of a share agreeing, from its counts."""
    if compared == 0:
        return math.nan
    return 0.0 if agreeing == 0 else float(beta.ppf(0.05, agreeing, compared - agreeing + 1))


def same_answer(a: Answer, b: Answer) -> bool:
    """The same largest cause: both within noise, or the two sweeps' largest (with the causes tied
    with it) share a cause."""
    left, right = set(a.largest()), set(b.largest())
    return (not left and not right) or bool(left & right)


def same_top(a: Answer, b: Answer) -> bool:
    """Stricter than `same_answer`: each sweep's largest (its first-named cause) lies among the other
    sweep's largest and its ties, or both within noise. Wider ties cannot make two sweeps agree here
    unless each side's own largest is among them."""
    left, right = a.largest(), b.largest()
    if not left or not right:
        return not left and not right
    return left[0] in right and right[0] in left


def by_key(answers: list[Answer]) -> dict:
    return {configuration_key(answer.record): answer for answer in answers}


def single(answer: Answer, repeat: int) -> Answer | None:
    """One run of the configuration as if it were the only one (its rounds' intervals only)."""
    from ddpbench.analysis.answers import pool_runs

    run = next((r for r in answer.every_run if r.record.spec.repeat == repeat), None)
    return None if run is None else pool_runs([run], {})


def round_ratios(answer: Answer) -> list[float]:
    """Each round's one-device step over its DDP step (the in-process efficiency one round reads),
    over the configuration's runs: where an interval is wide, these say whether a few rounds or
    all of them spread."""
    from ddpbench.analysis.ablation import read_ablation

    ratios = []
    for run in answer.runs:
        rounds = read_ablation(run.record).rounds
        ratios += [rounds["bottom"][r] / rounds["top"][r] for r in rounds["top"] if r in rounds["bottom"]]
    return ratios


def compare(out: str, names: list[str]) -> dict:
    answers = {}
    for name in names:
        folder = os.path.join(out, name)
        if os.path.isdir(os.path.join(folder, "runs")):
            answers[name] = by_key(answer_sweep(read_records(folder)[0])[0])
    rows, single_rows, same, widths, stragglers = [], [], [], [], []
    for first, second in zip(names[0::2], names[1::2]):
        if first not in answers or second not in answers:
            continue
        for key in sorted(set(answers[first]) & set(answers[second]), key=str):
            a, b = answers[first][key], answers[second][key]
            for figure, value in figures(a).items():
                other = figures(b).get(figure)
                found = None if other is None else agree(value, other)
                if found is not None:
                    rows.append({"pair": f"{first}/{second}", "configuration": a.name, "figure": figure,
                                 "agree": found, "halved": agree(value, other, shrink=0.5)})  # fmt: skip
            same.append({"pair": f"{first}/{second}", "configuration": a.name, "same": same_answer(a, b),
                         "same_top": same_top(a, b), "left": a.largest(), "right": b.largest()})  # fmt: skip
            for repeat in (1, 2, 3):
                one, two = single(a, repeat), single(b, repeat)
                if one is None or two is None:
                    continue
                for figure, value in figures(one).items():
                    other = figures(two).get(figure)
                    found = None if other is None else agree(value, other)
                    if found is not None:
                        single_rows.append({"figure": figure, "agree": found})
    for name, configurations in answers.items():
        for answer in configurations.values():
            if answer.world_size == 2 and answer.in_process is not None and answer.in_process.has_interval:
                widths.append({"sweep": name, "configuration": answer.name, "half_pp": 100 * answer.in_process.half,
                               "runs": len(answer.runs), "rounds": round_ratios(answer)})  # fmt: skip
            for run in answer.every_run:
                if run.record.spec.world_size > 1:
                    stragglers.append({"run": f"{name}/{run.run_id}", "named": run.straggler.named,
                                       "sentence": run.straggler.sentence()})  # fmt: skip
    shas = sorted({(run.record.env.git_sha or "not recorded")[:7] for configurations in answers.values()
                   for answer in configurations.values() for run in answer.every_run})  # fmt: skip
    return {"rows": rows, "single": single_rows, "same": same, "widths": widths, "stragglers": stragglers,
            "run_commits": shas, "extra": extra_rounds(answers)}  # fmt: skip


def extra_rounds(answers: dict) -> dict[str, dict]:
    """Per sweep: the seconds its runs spent in rounds the ablation added because the base rounds left
    the largest cause undecided (each run's rounds took about as long as each other: its ablation's wall
    time times its added rounds over all its rounds), how many runs added any, and how many of those
    stopped before the cap (a look found the lead decided)."""
    found = {}
    for name, configurations in answers.items():
        seconds, added, decided, runs = 0.0, 0, 0, 0
        for answer in configurations.values():
            for run in answer.every_run:
                ladder = run.record.timeline.ladder if run.record.timeline else None
                if ladder is None or not ladder.blocks or run.record.spec.world_size < 2:
                    continue  # one rank adds no rounds
                runs += 1
                if ladder.extra_blocks:
                    added += 1
                    # Stopped before the cap: a look decided the lead (the record's lead_decided is the
                    # last look's; before 2026-12-07 no look was taken at the cap).
                    decided += ladder.extra_blocks < extra_rounds_of(ladder.blocks - ladder.extra_blocks)
                    seconds += ladder.wall_s * ladder.extra_blocks / ladder.blocks
        found[name] = {"seconds": seconds, "added": added, "decided": decided, "runs": runs}
    return found


# --- the page -------------------------------------------------------------------------------------


def share(rows: list[dict], key: str = "agree") -> str:
    if not rows:
        return "n/a (none)"
    count = sum(1 for row in rows if row[key])
    return f"{count} of {len(rows)} ({100 * count / len(rows):.0f} %)"


def by_figure(rows: list[dict]) -> dict[str, list[dict]]:
    found: dict[str, list[dict]] = {}
    for row in rows:
        found.setdefault(row["figure"], []).append(row)
    return found


def durations(sweeps: list[dict]) -> str:
    return ", ".join(f"{entry['sweep']} {entry['seconds'] / 60:.1f} min" for entry in sweeps)


def page(found: dict, measured: dict | None, analysed: dict, names: list[str]) -> str:
    rows, single_rows = found["rows"], found["single"]
    machine = (measured or {}).get("machine") or {}
    sweeps = (measured or {}).get("sweeps") or []
    took = (
        f"`{measured['command']}`, {measured['seconds'] / 60:.0f} minutes under `flock {LOCK}`"
        if measured
        else f"`{analysed['command']}` (the sweeps' command was not kept)"
    )
    loads = ", ".join(f"{s['load_before']:.2f}" for s in sweeps) or "not recorded"
    planted = [s["planted"] for s in sweeps if s.get("planted")]
    used = [p["used_cores"] for p in planted]
    load_words = (
        f"{planted[0]['what']}, asking for {planted[0]['asked_cores']:.2f} cores, planted for every sweep by the "
        f"script; they used {min(used):.2f}-{max(used):.2f} cores per sweep"
        if planted
        else "none planted"
    )
    lines = [
        "# Do the answers hold from one sweep to the next?",
        "",
        "Written by `benchmarks/coverage.py`, which ran the default CPU suite's sweep (`make bench`'s, with its",
        "default repeats) as independent sweeps, in pairs, and compared each pair. What the figures are:",
        "[Concepts](../concepts.md).",
        "",
        f"- **Commit**: the runs: {', '.join(found['run_commits']) or 'none'}; the analysis: "
        f"{analysed.get('git_sha', 'not recorded')[:7]}"
        + (" with uncommitted changes" if analysed.get("git_dirty") else "")
        + (" (`--analyse-only`)" if analysed.get("analyse_only") else "")
        + ".",
        f"- **Machine**: {machine.get('cpu_cores', '?')} cores ({machine.get('cpu_model', 'not recorded')}); "
        f"1-minute load average before each sweep: {loads}; page written {analysed['date']}.",
        f"- **Command**: {took}.",
        f"- **Sweeps**: {', '.join(names)}" + (f" ({durations(sweeps)})" if sweeps else "") + ".",
        f"- **Other work on the machine**: {load_words}.",
        "",
        "## Agreement between sweeps",
        "",
        "Two estimates agree when their difference, over its standard error (each side's, from its interval and",
        "degrees of freedom), is within Student's t at Welch's degrees of freedom, at 95 %. Calibrated intervals",
        f"agree about 95 % of the time. Target: at least {100 * TARGET:.0f} %. The control beside it judges the",
        "same figures with every standard error halved: intervals half as wide as they should be. It must fall",
        f"below {100 * TARGET:.0f} %, or the test could not tell calibrated intervals from too narrow ones.",
        "Lower bound: the share's one-sided 95 % lower bound (Clopper-Pearson), over the figures compared.",
        "Figures of one configuration share their runs, so the comparisons are not all independent: the bound",
        "is a guide.",
        "",
        "| figure | pooled over the runs | halved (control) | single runs (for contrast) |",
        "|---|---|---|---|",
    ]
    singles = by_figure(single_rows)
    for figure, figure_rows in sorted(by_figure(rows).items()):
        lines.append(
            f"| {figure} | {share(figure_rows)} | {share(figure_rows, 'halved')} | {share(singles.get(figure, []))} |"
        )
    agreeing = sum(1 for row in rows if row["agree"])
    halved = sum(1 for row in rows if row["halved"])
    lines.append(
        f"| **all** | **{share(rows)}**, lower bound {100 * lower_bound(agreeing, len(rows)):.1f} % | "
        f"**{share(rows, 'halved')}** | **{share(single_rows)}** |"
    )
    same_count = sum(1 for row in found["same"] if row["same"])
    naming = sum(1 for row in found["same"] for side in ("left", "right") if row[side])
    named_sets = [row[side] for row in found["same"] for side in ("left", "right") if row[side]]
    alone = sum(1 for causes in named_sets if len(causes) == 1)
    tie_size = statistics.fmean(len(causes) for causes in named_sets) if named_sets else math.nan
    lines += [
        "",
        "## The same answer twice",
        "",
        "Each configuration's largest cause in both sweeps of a pair: the same cause, a cause tied with it, or",
        f"within noise on both sides. {share(found['same'], 'same')}, lower bound "
        f"{100 * lower_bound(same_count, len(found['same'])):.1f} %. A cause is tied with the largest where the",
        "largest's lead over it would not hold in another sweep ([Concepts](../concepts.md)); the floor against",
        f"answering by silence: {naming} of {2 * len(found['same'])} sweeps' configurations name a largest cause.",
        "",
        "Ties can make two sweeps agree by naming more causes, so how wide they were stands beside it: of the",
        f"{naming} sides that name a largest cause, {alone} name it alone; a side names {tie_size:.2f} causes on",
        "average. Counted the stricter way, where each sweep's own largest must lie among the other's causes",
        f"(or both within noise): {share(found['same'], 'same_top')}.",
        "",
        "| pair | configuration | same | first sweep | second sweep |",
        "|---|---|---|---|---|",
    ]
    for row in found["same"]:
        names_of = lambda causes: ", ".join(LABELS[c] for c in causes) or "within noise"  # noqa: E731
        lines.append(
            f"| {row['pair']} | {row['configuration']} | {'yes' if row['same'] else 'no'} | "
            f"{names_of(row['left'])} | {names_of(row['right'])} |"
        )
    widest = max((row["half_pp"] for row in found["widths"]), default=None)
    within = sum(1 for row in found["widths"] if row["half_pp"] <= WIDTH_TARGET_PP)
    took = {entry["sweep"]: entry["seconds"] for entry in sweeps}
    extra = found.get("extra") or {}
    # Growth: the added rounds' time over the rest of the sweep's, the time it would have taken without them.
    shares = [extra[n]["seconds"] / (took[n] - extra[n]["seconds"]) for n in extra if took.get(n)]
    if extra:
        runs = sum(e["runs"] for e in extra.values())
        added = sum(e["added"] for e in extra.values())
        decided = sum(e["decided"] for e in extra.values())
        lines += [
            "",
            f"Rounds added where a run's base rounds left its largest cause undecided: {added} of {runs} DDP runs "
            f"added some, {decided} of them stopped before the cap, decided"
            + (
                f"; they made each sweep {100 * min(shares):.0f}-{100 * max(shares):.0f} % longer than it would have "
                f"been without them (mean {100 * statistics.fmean(shares):.0f} %, the limit {100 * EXTRA_LIMIT:.0f} %)."
                if shares
                else "."
            ),
        ]
    lines += [
        "",
        "## The in-process efficiency at two ranks",
        "",
        f"Its 95 % half-width, pooled over each configuration's runs: within ± {WIDTH_TARGET_PP:.0f} pp in "
        f"{within} of {len(found['widths'])} (the widest ± {widest:.1f} pp)."
        if widest is not None
        else "No configuration at two ranks had an in-process efficiency.",
        *wide_words(found["widths"]),
        "",
        "Beside it, each round's one-device step over its DDP step, over the configuration's runs: where a",
        "few rounds stray far from the middle, single steps, not the runs, make the interval wide.",
        "",
        "| sweep | configuration | runs | ± pp | rounds | per round, % (lowest, median, highest) |",
        "|---|---|---|---|---|---|",
        *(
            f"| {row['sweep']} | {row['configuration']} | {row['runs']} | {row['half_pp']:.1f} | "
            f"{len(row['rounds'])} | {spread(row['rounds'])} |"
            for row in found["widths"]
        ),
        "",
        "## Identical ranks",
        "",
        "The default suite's ranks are the same model on the same host: a run that names a rank as holding the",
        "others back is a false alarm. Runs that named none: "
        f"{sum(1 for r in found['stragglers'] if not r['named'])} of {len(found['stragglers'])}.",
    ]
    named = [row for row in found["stragglers"] if row["named"]]
    lines += [f"- {row['run']}: {row['sentence']}" for row in named]
    quiet = sum(1 for r in found["stragglers"] if not r["named"])
    figures_of = by_figure(rows)

    def holds(figure: str) -> bool:
        compared = figures_of.get(figure, [])
        agree = sum(1 for row in compared if row["agree"])
        control = sum(1 for row in compared if row["halved"])
        return bool(compared) and agree >= TARGET * len(compared) and control < TARGET * len(compared)

    judged = [
        (f"agreement, pooled, at least {100 * TARGET:.0f} %", bool(rows) and agreeing >= TARGET * len(rows)),
        (f"the halved control below {100 * TARGET:.0f} %", bool(rows) and halved < TARGET * len(rows)),
        (
            f"the same answer in at least {100 * TARGET:.0f} % of configurations",
            bool(found["same"]) and same_count >= TARGET * len(found["same"]),
        ),
        (
            f"in-process efficiency: agreement at least {100 * TARGET:.0f} %, its halved control below",
            holds("in-process efficiency"),
        ),
        (
            f"host contention: agreement at least {100 * TARGET:.0f} %, its halved control below",
            holds(LABELS["contention"]),
        ),
        (
            f"the rounds added make a sweep at most {100 * EXTRA_LIMIT:.0f} % longer, on average",
            bool(shares) and statistics.fmean(shares) <= EXTRA_LIMIT,
        ),
        (
            f"a largest cause named in at least {FLOOR_NAMED} in 30 of the sweeps' configurations (the page before: "
            f"28 of 30; here {naming} of {2 * len(found['same'])})",
            bool(found["same"]) and naming * 30 >= FLOOR_NAMED * 2 * len(found["same"]),
        ),
        (
            f"in-process efficiency within ± {WIDTH_TARGET_PP:.0f} pp at two ranks, at least 15 in 18",
            bool(found["widths"]) and within * 18 >= 15 * len(found["widths"]),
        ),
        (
            "identical ranks: no straggler in at least 90 % of the runs",
            bool(found["stragglers"]) and quiet >= 0.9 * len(found["stragglers"]),
        ),
    ]
    lines += ["", "## Against the criteria", "", "| criterion | met |", "|---|---|"]
    lines += [f"| {criterion} | {'yes' if met else 'no'} |" for criterion, met in judged]
    return "\n".join(lines) + "\n"


def wide_words(widths: list[dict]) -> list[str]:
    """Where the half-width is beyond the target, by workload: how many, with how many runs, and
    how far their rounds spread (the highest round over the lowest)."""
    wide = [row for row in widths if row["half_pp"] > WIDTH_TARGET_PP]
    if not wide:
        return []
    lines = ["", "Beyond it, by workload:"]
    for name in sorted({row["configuration"] for row in wide}):
        rows = [row for row in wide if row["configuration"] == name]
        every = [row for row in widths if row["configuration"] == name]
        most = max(row["runs"] for row in every)
        few_runs = sum(1 for row in rows if row["runs"] < most)
        spreads = [max(row["rounds"]) / min(row["rounds"]) for row in rows if row["rounds"] and min(row["rounds"]) > 0]
        lines.append(
            f"- {name}: {len(rows)} of {len(every)} sweeps, ± {min(r['half_pp'] for r in rows):.1f} to "
            f"{max(r['half_pp'] for r in rows):.1f} pp"
            + (f"; {few_runs} of them pooled fewer runs than the others' {most} (a run left out)" if few_runs else "")
            + (
                f"; its rounds' highest over lowest, per sweep: {min(spreads):.1f}x to {max(spreads):.1f}x"
                if spreads
                else ""
            )
            + "."
        )
    return lines


def spread(ratios: list[float]) -> str:
    if not ratios:
        return "n/a"
    return f"{100 * min(ratios):.0f}, {100 * statistics.median(ratios):.0f}, {100 * max(ratios):.0f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="results/coverage")
    parser.add_argument("--pairs", type=int, default=5, help="pairs of sweeps (default 5)")
    parser.add_argument("--analyse-only", action="store_true", help="use the sweeps already in --out")
    parser.add_argument(
        "--load", type=float, default=1.5, help="cores of other work planted during every sweep (default 1.5; 0: none)"
    )
    parser.add_argument("sweep_args", nargs="*", help="more options for every `ddpbench sweep` (after --)")
    add_page_options(parser, PAGE)
    args = parser.parse_args(argv)
    command = command_line("coverage.py", argv)
    out = os.path.abspath(args.out)
    kept = os.path.join(out, MEASUREMENT)
    if args.analyse_only:
        measured = json.load(open(kept, encoding="utf-8")) if os.path.exists(kept) else None
    else:
        if os.path.exists(kept):
            parser.error(f"{out} already holds sweeps: use --analyse-only, or a new --out")
        os.makedirs(out, exist_ok=True)
        measured = measure(out, args.pairs, args.sweep_args, command, args.load)
        with open(kept, "w", encoding="utf-8") as handle:
            json.dump(measured, handle, indent=1)
    names = sorted((name for name in os.listdir(out) if name.startswith("sweep-")), key=lambda n: int(n.split("-")[1]))
    text = page(compare(out, names), measured, analysis_facts(command, args.analyse_only), names)
    print(text)
    write_page(args, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
