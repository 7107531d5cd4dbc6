"""Calibrate the gate against machine drift: separate sweeps spread over hours, as CI sees them.

The gate's drift rule (ddpbench.gate.drift) calls a regression "drift?" (exit 4) when the machine's
canary moved by as much; whether the canary tracks the suite's own drift has to be measured, on the
machine, over time. This collects it and reports:

- stored baseline: every ordered pair of sessions (earlier as baseline, later as candidate) of
  unchanged code, gated as `ddpbench gate` gates a stored baseline: how often it says REGRESSION
  (false alarms without the canary: exit 1 or 4), and how often a confirmed one (exit 1: false
  alarms with the canary);
- the same pairs with the candidate slowed by `--slowdown` (real extra work in every timed step):
  how often it is caught without the canary, and how often the canary wrongly excuses it as drift;
- A/B: within each session, the rounds paired as `ddpbench ab` pairs them (A/A: a plain round with
  the next plain round; detection: each round's plain run with its slowed run);
- how the canary tracks drift: for each probe, the correlation between its log move and the log
  throughput ratio of the unchanged pairs, and the median ratio of the two.

One session = the canary, `--rounds` rounds of a plain run then a slowed run of one tiny
configuration, the canary again; sessions start `--gap-minutes` apart. Each session's plain and
slowed runs are written as two sweep folders (manifest.json with the canary, runs/) that
`ddpbench gate` reads. Every run is wrapped in `flock /tmp/ddpbench-bench.lock`.

    python benchmarks/gate_drift_calibration.py --sessions 24 --gap-minutes 20 --keep DIR   # a day
    python benchmarks/gate_drift_calibration.py --from DIR                                # analyse again
    python benchmarks/gate_drift_calibration.py --tiny                                    # a smoke run
"""

import argparse
import itertools
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, REPO)

import numpy as np  # noqa: E402
from gate_calibration import disjoint_pairs  # noqa: E402

from ddpbench.gate import stats  # noqa: E402
from ddpbench.gate.compare import Comparison, compare, finish, load_side  # noqa: E402
from ddpbench.gate.drift import compare_canaries, judge_drift, readings, sweep_canary  # noqa: E402
from ddpbench.gate.stats import GateSettings, parse_fraction, parse_threshold  # noqa: E402
from ddpbench.records.store import load_record, read_records, utc_now, write_atomic  # noqa: E402
from ddpbench.running.canary import run_canary  # noqa: E402

KINDS = ("plain", "slowed")


def run_command(args, kind: str, folder: str, run_id: str) -> list[str]:
    return [
        "flock",
        "/tmp/ddpbench-bench.lock",
        sys.executable,
        "-m",
        "ddpbench",
        "run",
        "--workload",
        args.workload,
        "--strategy",
        "ddp",
        "--nproc",
        "2",
        "--steps",
        str(args.steps),
        "--warmup",
        "3",
        "--no-profile",
        "--slowdown",
        str(args.slowdown if kind == "slowed" else 0.0),
        "--out",
        folder,
        "--run-id",
        run_id,
    ]


def collect_session(out: str, index: int, args) -> None:
    session = os.path.join(out, f"session-{index:02d}")
    canaries = [run_canary("start")]
    for round_index in range(1, args.rounds + 1):
        for kind in KINDS:
            folder = os.path.join(session, kind)
            done = subprocess.run(
                run_command(args, kind, folder, f"r{round_index:02d}"),
                cwd=REPO,
                capture_output=True,
                text=True,
                env={**os.environ, "PYTHONPATH": REPO},
            )
            if done.returncode != 0:
                print(f"session {index} round {round_index} {kind} failed (exit {done.returncode}); left out")
    canaries.append(run_canary("end"))
    for kind in KINDS:  # each kind a sweep folder of its own, with the session's canary
        manifest = {"sweep_id": f"session-{index:02d}-{kind}", "options": {"suite": "drift-calibration"}}
        manifest.update(canary=canaries, ended_at=utc_now())
        write_atomic(os.path.join(session, kind, "manifest.json"), json.dumps(manifest, indent=1) + "\n")
    print(f"session {index}/{args.sessions} done at {utc_now()}", flush=True)


def collect(out: str, args) -> None:
    for index in range(1, args.sessions + 1):
        started = time.monotonic()
        collect_session(out, index, args)
        if index < args.sessions:
            time.sleep(max(0.0, args.gap_minutes * 60 - (time.monotonic() - started)))


def sessions(folder: str) -> list[str]:
    found = sorted(name for name in os.listdir(folder) if name.startswith("session-"))
    return [
        os.path.join(folder, name)
        for name in found
        if all(read_records(os.path.join(folder, name, kind))[0] for kind in KINDS)
    ]


def gate_pair(baseline: str, candidate: str, settings: GateSettings) -> tuple[str, bool, float]:
    """As `ddpbench gate` gates a stored baseline (throughput): the verdict, whether the drift rule
    calls it drift, and the throughput ratio."""
    comparisons, _ = compare(load_side(baseline), load_side(candidate), settings, ("throughput",))
    view = judge_drift(compare_canaries(sweep_canary(baseline), sweep_canary(candidate), baseline), comparisons)
    verdict = "regression" if any(c.verdict == "regression" for c in comparisons) else "pass"
    ratios = [c.ratio for c in comparisons if c.ratio]
    return verdict, view.drift, statistics.median(ratios) if ratios else math.nan


def throughputs(folder: str) -> dict[str, float]:
    found = {}
    for path in sorted(os.listdir(os.path.join(folder, "runs"))):
        if path.endswith(".json"):
            record = load_record(os.path.join(folder, "runs", path))
            if record.status == "ok" and not record.failed_checks():
                found[record.run_id] = record.metrics.throughput_units_per_s
    return found


def paired_verdict(a: list[float], b: list[float], settings: GateSettings) -> str:
    evidence, noise = stats.paired(np.log(a), np.log(b))
    comparison = Comparison("calibration", "throughput", "pass", ratio=math.exp(evidence.change), noise=noise.sigma)
    return finish([(comparison, evidence, noise)], settings, paired=True)[0].verdict


def rate(hits: int, total: int) -> str:
    return f"{hits / total:.1%} ({hits}/{total})" if total else "n/a (no pairs)"


def canary_tracking(pairs: list[tuple[str, str, float]]) -> list[str]:
    """Per probe: how its log move follows the log throughput ratio of unchanged pairs."""
    moves: dict[str, list[tuple[float, float]]] = {}
    for baseline, candidate, ratio in pairs:
        before, after = readings(sweep_canary(baseline)), readings(sweep_canary(candidate))
        for probe in set(before) & set(after):
            move = statistics.median(after[probe][1]) / statistics.median(before[probe][1])
            moves.setdefault(probe, []).append((math.log(move), math.log(ratio)))
    lines = []
    for probe, points in sorted(moves.items()):
        x, y = np.array(points).T
        correlation = float(np.corrcoef(x, y)[0, 1]) if len(points) > 2 and x.std() and y.std() else math.nan
        share = statistics.median(a / b for a, b in points if b) if any(b for _, b in points) else math.nan
        lines.append(
            f"  {probe:<16} pairs {len(points):>4}  correlation {correlation:+.2f}  "
            f"median log move / log ratio {share:+.2f}"
        )
    return lines


def analyse(folder: str, args) -> None:
    settings = GateSettings(
        max_regression=parse_threshold(args.max_regression),
        prior_noise=None if args.prior_noise is None else parse_fraction(args.prior_noise, "--prior-noise"),
    )
    found = sessions(folder)
    if len(found) < 2:
        raise SystemExit(f"{folder}: {len(found)} complete session(s); pairs of sessions need at least 2")
    print(f"{len(found)} sessions in {folder}; slowdown {args.slowdown:.0%}; {settings.max_regression:.0%} threshold")
    results = {}
    unchanged = []
    for kind in KINDS:
        verdicts = []
        for first, second in itertools.combinations(found, 2):
            verdict, drift, ratio = gate_pair(os.path.join(first, "plain"), os.path.join(second, kind), settings)
            verdicts.append((verdict, drift))
            if kind == "plain":
                unchanged.append((os.path.join(first, "plain"), os.path.join(second, "plain"), ratio))
        results[kind] = verdicts
    plain, slowed = results["plain"], results["slowed"]
    regress = sum(v == "regression" for v, _ in plain)
    confirmed = sum(v == "regression" and not d for v, d in plain)
    caught = sum(v == "regression" for v, _ in slowed)
    excused = sum(v == "regression" and d for v, d in slowed)
    print("stored baseline, separate sessions (throughput, the gate's own rule):")
    print(f"  false alarms without the canary (exit 1 or 4): {rate(regress, len(plain))}")
    print(f"  false alarms with the canary (exit 1 only):    {rate(confirmed, len(plain))}")
    print(f"  {args.slowdown:.0%} slowdown caught (exit 1 or 4):          {rate(caught, len(slowed))}")
    print(f"  {args.slowdown:.0%} slowdown excused as drift (exit 4):     {rate(excused, len(slowed))}")
    aa = detected = rounds_total = 0
    for session in found:
        a, b = throughputs(os.path.join(session, "plain")), throughputs(os.path.join(session, "slowed"))
        ids = sorted(set(a) & set(b))
        if len(ids) < 4:
            continue  # A/A pairs rounds 1-2, 3-4, ...: at least two pairs
        rounds_total += 1
        (first, second), *_ = disjoint_pairs(ids, len(ids) // 2)
        aa += paired_verdict([a[i] for i in first], [a[i] for i in second], settings) == "regression"
        detected += paired_verdict([a[i] for i in ids], [b[i] for i in ids], settings) == "regression"
    print(f"A/B within a session (paired, {args.rounds} rounds):")
    print(f"  false alarms: {rate(aa, rounds_total)}")
    print(f"  {args.slowdown:.0%} slowdown caught: {rate(detected, rounds_total)}")
    print("how the canary tracks drift (unchanged pairs):")
    for line in canary_tracking(unchanged) or ["  no canary readings"]:
        print(line)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sessions", type=int, default=24, help="separate sessions (default 24, at least 20)")
    parser.add_argument("--gap-minutes", type=float, default=20.0, help="from one session's start to the next")
    parser.add_argument("--rounds", type=int, default=4, help="plain-then-slowed rounds per session")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--workload", default="mlp")
    parser.add_argument("--slowdown", type=float, default=0.25, help="the real slowdown to detect (default 0.25)")
    parser.add_argument("--max-regression", default="5%")
    parser.add_argument("--prior-noise", default=None, help="the gate's --prior-noise (default: its CPU prior)")
    parser.add_argument("--keep", default=None, help="keep the sessions in this folder")
    parser.add_argument("--from", dest="source", default=None, help="analyse sessions kept earlier; run nothing")
    parser.add_argument(
        "--tiny", action="store_true", help="2 sessions of 3 short rounds, no gap: proves the script runs"
    )
    args = parser.parse_args()
    if args.tiny:
        args.sessions, args.gap_minutes, args.rounds, args.steps = 2, 0.0, 3, 8
    if args.source:
        analyse(args.source, args)
        return
    out = args.keep or tempfile.mkdtemp(prefix="gate-drift-")
    os.makedirs(out, exist_ok=True)
    print(f"collecting {args.sessions} sessions, {args.gap_minutes:g} min apart -> {out}", flush=True)
    collect(out, args)
    analyse(out, args)


if __name__ == "__main__":
    main()
