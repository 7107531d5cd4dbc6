"""Calibrate the regression gate on this machine: how often does it cry wolf, how often does it
catch a real slowdown?

Runs one tiny DDP configuration repeatedly: as is, and with --slowdown 0.10 and 0.05 (real extra
work in every timed step), interleaved so drifts in machine load hit all three alike. Then gates
A/A comparisons of plain runs (false alarms) and plain/slowed comparisons (detections), with K
runs on each side (disjoint groups drawn at random, `--per-side`), with the gate's defaults unless
told otherwise. `--keep DIR` keeps the records; `--from DIR` gates records kept earlier without
running anything, to try other settings on the same measurements.

    .venv/bin/python benchmarks/gate_calibration.py [--runs 12] [--per-side 1] [--keep DIR | --from DIR]
"""
import argparse
import collections
import dataclasses
import glob
import itertools
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, REPO)

from ddpbench.gate.compare import compare, iteration_times  # noqa: E402
from ddpbench.gate.stats import GateSettings, parse_threshold  # noqa: E402


def run(out: str, slowdown: float, args) -> dict:
    done = subprocess.run([sys.executable, "-m", "ddpbench", "run", "--workload", args.workload,
                           "--strategy", args.strategy, "--nproc", "2" if args.strategy == "ddp" else "1",
                           "--steps", str(args.steps), "--warmup", "5", "--no-profile", "--slowdown", str(slowdown),
                           "--out", out], cwd=REPO, capture_output=True, text=True)
    paths = sorted(glob.glob(os.path.join(out, "runs", "*.json")), key=os.path.getmtime)
    record = json.load(open(paths[-1]))
    if done.returncode != 0 or record["status"] != "ok":
        sys.exit(f"run failed:\n{done.stdout}\n{done.stderr[-2000:]}")
    return record


def verdicts(pairs, settings) -> collections.Counter:
    counts = collections.Counter()
    for baseline, candidate in pairs:
        comparisons, _ = compare(list(baseline), list(candidate), settings, ("throughput",))
        counts[comparisons[0].verdict] += 1
    return counts


def groups(rng, first, second, per_side, count, disjoint):
    """`count` random (baseline group, candidate group) pairs of `per_side` runs each."""
    pairs = []
    for _ in range(count):
        if disjoint:
            chosen = rng.sample(range(len(first)), 2 * per_side)
            pairs.append(([first[i] for i in chosen[:per_side]], [first[i] for i in chosen[per_side:]]))
        else:
            pairs.append((rng.sample(first, per_side), rng.sample(second, per_side)))
    return pairs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=8)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--workload", default="mlp")
    parser.add_argument("--strategy", choices=("ddp", "local"), default="ddp")
    parser.add_argument("--max-regression", default="5%")
    parser.add_argument("--block-steps", type=int, default=5)
    parser.add_argument("--run-noise", type=float, default=None, help="run-to-run spread (default: the gate's)")
    parser.add_argument("--per-side", type=int, default=1, help="runs on each side of a comparison")
    parser.add_argument("--comparisons", type=int, default=200, help="random comparisons per case (per-side > 1)")
    parser.add_argument("--keep", default=None, help="keep the records in this folder")
    parser.add_argument("--from", dest="source", default=None, help="use records kept earlier; run nothing")
    args = parser.parse_args()
    settings = GateSettings(max_regression=parse_threshold(args.max_regression), block_steps=args.block_steps)
    if args.run_noise is not None:
        settings = dataclasses.replace(settings, run_noise=args.run_noise)
    records = {0.0: [], 0.10: [], 0.05: []}
    if args.source:
        for slowdown in records:
            for path in sorted(glob.glob(os.path.join(args.source, f"slowdown-{slowdown}", "runs", "*.json"))):
                records[slowdown].append(json.load(open(path)))
    else:
        with tempfile.TemporaryDirectory() as scratch:
            out = args.keep or scratch
            for index in range(args.runs):
                for slowdown in records:
                    records[slowdown].append(run(os.path.join(out, f"slowdown-{slowdown}"), slowdown, args))
                print(f"round {index + 1}/{args.runs} done", flush=True)
    plain = records[0.0]
    rng = random.Random(0)
    per_run = [float(statistics.median(iteration_times(r))) for r in plain]
    print(f"run-to-run spread of plain runs' median iteration time: {statistics.stdev(per_run) / statistics.mean(per_run):.1%} (CV)")
    median_time = {s: statistics.median(float(statistics.median(iteration_times(r))) for r in rs)
                   for s, rs in records.items()}
    ranks = len(plain[0]["ranks"])
    print(f"\n{plain[0]['spec']['workload']} tiny, {plain[0]['spec']['strategy']} x{ranks}, "
          f"{plain[0]['metrics']['timed_steps']} timed steps per run, {len(plain)} runs each; "
          f"threshold {settings.max_regression:.0%}, blocks of {settings.block_steps} steps, "
          f"{settings.resamples} resamples, run-to-run noise {settings.run_noise:.1%}")
    k = args.per_side
    print(f"{k} run(s) per side")
    aa_pairs = ([([a], [b]) for a, b in itertools.permutations(plain, 2)] if k == 1
                else groups(rng, plain, plain, k, args.comparisons, disjoint=True))
    aa = verdicts(aa_pairs, settings)
    total = sum(aa.values())
    print(f"A/A pairs: {total}; false alarms (regression) {aa['regression']} = {aa['regression'] / total:.1%}; "
          f"inconclusive {aa['inconclusive'] / total:.1%}; pass {aa['pass'] / total:.1%}; "
          f"improvement {aa['improvement'] / total:.1%}")
    for slowdown in (0.10, 0.05):
        pairs = ([([a], [b]) for a, b in itertools.product(plain, records[slowdown])] if k == 1
                 else groups(rng, plain, records[slowdown], k, args.comparisons, disjoint=False))
        counts = verdicts(pairs, settings)
        total = sum(counts.values())
        actual = median_time[slowdown] / median_time[0.0] - 1
        print(f"{slowdown:.0%} injected (measured {actual:+.1%} median iteration time): caught "
              f"{counts['regression']}/{total} = {counts['regression'] / total:.1%}; inconclusive "
              f"{counts['inconclusive'] / total:.1%}; pass {counts['pass'] / total:.1%}")


if __name__ == "__main__":
    main()
