"""Calibrate the regression gate on this machine: does unchanged code pass, how often does it cry
wolf, how often does it catch a real slowdown, and is the minimum detectable effect it prints honest?

Collect: one tiny DDP configuration run over and over in interleaved rounds: as is, and with
`--slowdown 0.10` and `0.25` (real extra matrix products in every timed step, never edited
timings). Each run is wrapped in `flock /tmp/ddpbench-bench.lock` so benchmarks never overlap.
Analyse (the gate's own statistics, throughput only, so one comparison per trial):

- 1 run per side: every ordered pair of plain runs (A/A) and every (plain, slowed) pair;
- K runs per side (`--per-side`): random disjoint groups;
- history: a baseline of H plain runs (`--history-runs`) against one candidate run;
- ab: K consecutive rounds paired (A = the round's plain run, B = its slowed run; for A/A, B = the
  next round's plain run), the paired test `ddpbench ab` uses.

For each it prints pass rate, false alarms, detection, the median printed MDE and runs needed, and
the detection the gate predicts from its own noise estimate (its power curve at the measured
effect) next to the detection observed: an honest MDE makes the two agree.

    python benchmarks/gate_calibration.py --rounds 12 --keep DIR     # collect, then analyse
    python benchmarks/gate_calibration.py --from DIR                 # analyse records kept earlier
"""

import argparse
import glob
import itertools
import math
import os
import random
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, REPO)

import numpy as np  # noqa: E402

from ddpbench.gate import stats  # noqa: E402
from ddpbench.gate.compare import Comparison, compare_values, finish  # noqa: E402
from ddpbench.gate.stats import GateSettings, parse_fraction, parse_threshold  # noqa: E402
from ddpbench.records.store import load_record  # noqa: E402

SLOWDOWNS = (0.0, 0.10, 0.25)
KEY = ("calibration",) * 6 + ("cpu", "")


def collect(out: str, rounds: int, args) -> None:
    for index in range(1, rounds + 1):
        for slowdown in SLOWDOWNS:
            command = [
                "flock",
                "/tmp/ddpbench-bench.lock",
                sys.executable,
                "-m",
                "ddpbench",
                "run",
                "--workload",
                args.workload,
                "--nproc",
                "2",
                "--steps",
                str(args.steps),
                "--warmup",
                "5",
                "--no-profile",
                "--slowdown",
                str(slowdown),
                "--out",
                os.path.join(out, f"slowdown-{slowdown}"),
                "--run-id",
                f"r{index:02d}",
            ]
            done = subprocess.run(
                command, cwd=REPO, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": REPO}
            )
            if done.returncode != 0:
                print(f"round {index} slowdown {slowdown} failed (exit {done.returncode}); left out", flush=True)
        print(f"round {index}/{rounds} done", flush=True)


def load(folder: str) -> dict[float, dict[str, float]]:
    """Throughput by slowdown and round id, ok runs with passing checks only."""
    found = {}
    for slowdown in SLOWDOWNS:
        runs = {}
        for path in sorted(glob.glob(os.path.join(folder, f"slowdown-{slowdown}", "runs", "*.json"))):
            record = load_record(path)
            if record.status == "ok" and not record.failed_checks():
                runs[record.run_id] = record.metrics.throughput_units_per_s
        found[slowdown] = runs
    return found


def two_sided_trial(base, cand, settings, history=None, baseline_is_history=False) -> Comparison:
    values = ({KEY: {"throughput": list(base)}}, {KEY: {"throughput": list(cand)}})
    extra = {KEY: {"throughput": list(history)}} if history else None
    return compare_values(*values, settings, ("throughput",), extra, baseline_is_history)[0][0]


def paired_trial(a, b, settings) -> Comparison:
    evidence, noise = stats.paired(np.log(a), np.log(b))
    comparison = Comparison("calibration", "throughput", "pass", ratio=math.exp(evidence.change), noise=noise.sigma)
    return finish([(comparison, evidence, noise)], settings, paired=True)[0]


def disjoint_pairs(indices: list, rounds: int) -> list[tuple[list, list]]:
    """A/A trials of `rounds` pairs each, from runs in the order they ran: every trial pairs runs
    0-1, 2-3, ... of a stretch of 2 x rounds runs, so no run sits in two pairs of one trial.
    (Chaining run i with run i+1 made the differences telescope, which the paired test reads as
    more noise than there is: its false alarms came out fewer than `ab`'s.) Trials step by two
    runs and share runs with each other, never within themselves."""
    trials = []
    for start in range(0, len(indices) - 2 * rounds + 1, 2):
        stretch = indices[start : start + 2 * rounds]
        trials.append((stretch[0::2], stretch[1::2]))
    return trials


def predicted(comparison: Comparison, effect_log: float, settings) -> float:
    df = comparison.df if comparison.df is not None else math.inf
    return stats.catch_probability(effect_log, comparison.se, df, comparison.alpha, settings)


def summarise(name, trials, settings, effects) -> list[str]:
    """One line per case: A/A pass and false alarms, then each slowdown caught (observed / predicted)."""
    cells = [name]
    aa = trials[0.0]
    cells.append(f"{sum(c.verdict == 'pass' or c.verdict == 'improvement' for c in aa) / len(aa):.1%}")
    cells.append(f"{sum(c.verdict == 'regression' for c in aa) / len(aa):.1%}")
    for slowdown in SLOWDOWNS[1:]:
        cases = trials[slowdown]
        caught = sum(c.verdict == "regression" for c in cases) / len(cases)
        expected = statistics.mean(predicted(c, -effects[slowdown], settings) for c in cases)
        cells.append(f"{caught:.0%} / {expected:.0%}")
    cells.append(f"{statistics.median(c.mde for c in aa):.0%}")
    needed = [c.runs_needed for c in aa]
    cells.append(str(round(statistics.median(n for n in needed if n))) if any(needed) else "> 1000")
    cells.append(str(len(aa)))
    return cells


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--workload", default="mlp")
    parser.add_argument("--max-regression", default="5%")
    parser.add_argument("--prior-noise", default=None, help="the gate's --prior-noise (default: its CPU prior)")
    parser.add_argument("--per-side", type=int, default=3, help="K runs per side for the repeats case")
    parser.add_argument("--history-runs", type=int, default=8, help="H plain runs as history baseline")
    parser.add_argument("--ab-rounds", type=int, default=4, help="K rounds for the ab case")
    parser.add_argument("--draws", type=int, default=300, help="random draws for the repeats and history cases")
    parser.add_argument("--keep", default=None, help="keep the records in this folder")
    parser.add_argument("--from", dest="source", default=None, help="use records kept earlier; run nothing")
    args = parser.parse_args()
    settings = GateSettings(
        max_regression=parse_threshold(args.max_regression),
        prior_noise=parse_fraction(args.prior_noise, "--prior-noise") if args.prior_noise else None,
    )
    if args.source:
        folder = args.source
    else:
        folder = args.keep or tempfile.mkdtemp(prefix="gate-calibration-")
        collect(folder, args.rounds, args)
    runs = load(folder)
    rounds = sorted(set.intersection(*(set(r) for r in runs.values())))
    plain = [runs[0.0][r] for r in rounds]
    slowed = {s: [runs[s][r] for r in rounds] for s in SLOWDOWNS[1:]}
    effects = {s: math.log(statistics.mean(slowed[s]) / statistics.mean(plain)) if s else 0.0 for s in SLOWDOWNS}
    logs = np.log(plain)
    print(
        f"{args.workload} tiny, ddp x2 on gloo, {args.steps} steps, {len(rounds)} complete rounds; run-to-run "
        f"spread of plain runs' log throughput: {np.std(logs, ddof=1):.1%}; measured effect of --slowdown "
        + ", ".join(f"{s:.2f}: {1 - math.exp(effects[s]):.1%} less throughput" for s in SLOWDOWNS[1:])
    )
    rng = random.Random(0)
    k, h = args.per_side, args.history_runs
    cases = {}
    cases["1 run per side (prior)"] = {
        0.0: [two_sided_trial([a], [b], settings) for a, b in itertools.permutations(plain, 2)],
        **{
            s: [two_sided_trial([a], [b], settings) for a, b in itertools.product(plain, slowed[s])]
            for s in SLOWDOWNS[1:]
        },
    }

    def groups(first, second, size, disjoint):
        out = []
        for _ in range(args.draws):
            if disjoint:
                chosen = rng.sample(range(len(first)), 2 * size)
                out.append(([first[i] for i in chosen[:size]], [first[i] for i in chosen[size:]]))
            else:
                out.append((rng.sample(first, size), rng.sample(second, size)))
        return out

    if len(plain) >= 2 * k:
        cases[f"{k} runs per side"] = {
            s: [two_sided_trial(b, c, settings) for b, c in groups(plain, slowed.get(s, plain), k, s == 0.0)]
            for s in SLOWDOWNS
        }
    if len(plain) > h:
        history_cases = {}
        for s in SLOWDOWNS:
            trials = []
            for _ in range(args.draws):
                chosen = rng.sample(range(len(plain)), h + 1)
                candidate = [plain[chosen[-1]]] if s == 0.0 else [rng.choice(slowed[s])]
                trials.append(
                    two_sided_trial([plain[i] for i in chosen[:h]], candidate, settings, baseline_is_history=True)
                )
            history_cases[s] = trials
        cases[f"history of {h} runs, 1 candidate run"] = history_cases
    r = args.ab_rounds
    if len(rounds) >= 2 * r:  # an A/A trial needs 2 x r runs, in disjoint pairs
        windows = range(len(rounds) - r)
        cases[f"ab, {r} rounds"] = {
            0.0: [
                paired_trial([plain[i] for i in a], [plain[i] for i in b], settings)
                for a, b in disjoint_pairs(list(range(len(plain))), r)
            ],
            **{
                s: [paired_trial(plain[i : i + r], slowed[s][i : i + r], settings) for i in windows]
                for s in SLOWDOWNS[1:]
            },
        }
    header = [
        "case",
        "A/A pass",
        "false alarms",
        "10 % caught (observed / predicted)",
        "25 % caught (observed / predicted)",
        "median MDE",
        f"runs needed to see {settings.target:.2%}",
        "trials",
    ]
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for name, trials in cases.items():
        print("| " + " | ".join(summarise(name, trials, settings, effects)) + " |")
    print(
        f"threshold {settings.max_regression:.0%} (seen: {settings.target:.2%} caught {settings.power:.0%} of the "
        f"time), family-wise false-alarm rate {settings.family_alpha:.0%} "
        f"(one comparison per trial), power {settings.power:.0%}; 'predicted' = the gate's own power curve at "
        f"the measured effect, averaged over trials"
    )


if __name__ == "__main__":
    main()
