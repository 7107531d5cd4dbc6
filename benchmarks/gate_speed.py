"""How long `ddpbench gate` takes on a large sweep, and how much of it is the power figures.

Two synthetic sweeps (benchmarks/synthetic.py, the sweep of benchmarks/scale.py: local, DDP at
every power of two up to --ranks, DataParallel at 1-8, repeats of the largest DDP runs) are
compared in this process, timed in parts: decoding the records, the whole comparison, and within
it what each comparison can see (minimum detectable effect, power at the threshold and the
target, runs needed). Then the CLI on the same folders, timed from outside.

For the runs-needed search the script also times a reference kept only here: the scalar search
the gate used before, one `scipy.stats.t.ppf` per candidate run count and quantile, on the same
comparisons' noise and levels. It answers a different question (the test alone seeing the
threshold), so its counts are not compared, only its time.

    flock /tmp/ddpbench-bench.lock .venv/bin/python benchmarks/gate_speed.py [--ranks 1024] [--steps 1000]
        [--before /path/to/old/checkout] [--keep DIR]
"""

from __future__ import annotations

import argparse
import math
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import synthetic  # noqa: E402
from scipy import stats as scipy_stats  # noqa: E402

from ddpbench.gate import stats  # noqa: E402
from ddpbench.gate.compare import compare, load_side  # noqa: E402
from ddpbench.gate.output import as_json, format_table, sight_lines  # noqa: E402


def scalar_runs_needed_reference(
    sigma: float, alpha: float, threshold_log: float, power: float, fixed_df: float, paired_rounds: bool
) -> int | None:
    """The search the gate used before: every run count in turn, two scalar quantiles each."""

    def quantile(probability, df):
        return scipy_stats.norm.ppf(probability) if not math.isfinite(df) else scipy_stats.t.ppf(probability, df)

    for runs in range(2 if paired_rounds else 1, 1001):
        if paired_rounds:
            se, df = sigma / math.sqrt(runs), runs - 1
        else:
            se, df = sigma * math.sqrt(2 / runs), fixed_df + 2 * (runs - 1)
            df = math.inf if df == 0 else df
        if (quantile(1 - alpha, df) + quantile(power, df)) * se <= threshold_log:
            return runs
    return None


def gate_cli(checkout: str, baseline: str, candidate: str, work: str) -> float:
    """Wall time of `ddpbench gate` run from a checkout (exit 0 or 1: pass or regression)."""
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "ddpbench", "gate", "--baseline", baseline, "--candidate", candidate],
        cwd=work,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": checkout},
    )
    seconds = time.perf_counter() - started
    if done.returncode not in (0, 1):
        raise SystemExit(f"ddpbench gate of {checkout} failed ({done.returncode}): {done.stderr[-500:]}")
    return seconds


def timed(action):
    started = time.perf_counter()
    result = action()
    return result, time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ranks", type=int, default=1024, help="largest world size of the sweeps")
    parser.add_argument("--steps", type=int, default=1000, help="timed steps per rank")
    parser.add_argument(
        "--before",
        action="append",
        default=[],
        help="also time the CLI of this ddpbench checkout (the code before a change), side by side",
    )
    parser.add_argument("--keep", default=None, help="build the sweeps in this folder and keep them (reused if there)")
    args = parser.parse_args()
    work = args.keep or tempfile.mkdtemp(prefix="ddpbench-gate-speed-")
    baseline, candidate = os.path.join(work, f"base-{args.ranks}"), os.path.join(work, f"cand-{args.ranks}")
    for folder, seed in ((baseline, 0), (candidate, 1)):
        if not os.path.isdir(os.path.join(folder, "runs")):
            synthetic.build_sweep(folder, args.ranks, args.steps, seed=seed)
    print(
        f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}; sweeps up to {args.ranks} ranks, "
        f"{args.steps} steps, in {work}"
    )

    settings = stats.GateSettings()
    (base_records, cand_records), decode_s = timed(lambda: (load_side(baseline), load_side(candidate)))
    (comparisons, notes), compare_s = timed(lambda: compare(base_records, cand_records, settings))
    _, output_s = timed(
        lambda: (
            format_table(comparisons, settings),
            sight_lines(comparisons, settings),
            as_json(comparisons, settings, notes, []),
        )
    )
    tested = [c for c in comparisons if c.se is not None]
    evidence = [
        (
            stats.Evidence(0.0, c.se, c.df if c.df is not None else math.inf),
            stats.Noise(c.noise, c.df if c.df is not None else math.inf, c.noise_source),
            c,
        )
        for c in tested
    ]
    stats._runs_needed.cache_clear()  # time the search itself, not the cache the comparison just filled
    _, sight_s = timed(lambda: [stats.sight(e, n, c.alpha, settings, c.paired) for e, n, c in evidence])
    _, reference_s = timed(
        lambda: [
            scalar_runs_needed_reference(c.noise, c.alpha, settings.threshold_log, settings.power, 0.0, c.paired)
            for c in tested
        ]
    )
    cli_s = {checkout: gate_cli(checkout, baseline, candidate, work) for checkout in [synthetic.REPO, *args.before]}

    print(
        f"{len(comparisons)} comparisons ({len(tested)} tested) over {len(base_records)} + {len(cand_records)} "
        f"records"
    )
    print(
        f"in process: decode {decode_s:.2f} s, compare {compare_s:.2f} s, output {output_s:.3f} s, "
        f"gate in all {decode_s + compare_s + output_s:.2f} s"
    )
    print(
        f"what each comparison can see (MDE, power, runs needed), all {len(tested)}: {sight_s:.3f} s; "
        f"reference scalar runs-needed search (the old path) on the same noise: {reference_s:.2f} s"
    )
    for checkout, seconds in cli_s.items():
        print(f"CLI `ddpbench gate` of {checkout} (a fresh process, imports included): {seconds:.2f} s wall")


if __name__ == "__main__":
    main()
