"""Does `ddpbench explain` put a known cause in the term that should hold it? Real sweeps on this
machine (2 ranks, gloo, CPU) of the planted workloads in tests/fixtures/planted_causes.py:

- baseline: steady_ranks, the model with nothing planted;
- slow rank: slow_rank_one, rank 1's forward sleeps FORWARD_DELAY_S per training call: the
  slowest_rank term should hold it, and no other term should grow against the baseline;
- slow __getitem__: slow_getitem, every sample sleeps GETITEM_DELAY_S on every rank: the step at N
  shows the data time, yet the `data` term stays near zero (the reference pays it too);
- shaped network: steady_ranks again inside a network namespace whose loopback a tbf qdisc
  limits to --rate: the communication terms (exposed_comm, overlap_slowdown, slowest_rank,
  unexplained: the ladder's DDP step against its one-rank DDP step) should grow by as much as the
  step did against the baseline (skipped, with the reason, where `ip netns` does not work);
- greedy forward: greedy_forward, whose forward runs a matrix product on more threads than the
  rank's share: `contention` should hold what two one-device runs started at once lose against
  one alone (two `ddpbench run --strategy local` at once, under the same lock).

Each case is one `ddpbench sweep --strategies local,ddp --nproc 2`, wrapped in
`flock /tmp/ddpbench-bench.lock` so it never runs beside another benchmark. One run is one sample:
the same configuration moves 8-20 % from run to run here, so read a miss of a few tenths of a
millisecond against that. Prints Markdown tables.

    python benchmarks/planted_causes.py --out /tmp/planted-causes
    python benchmarks/planted_causes.py --out /tmp/planted-causes --analyse-only
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, REPO)

from ddpbench.analysis.breakdown import TERM_NAMES, explain_sweep  # noqa: E402
from ddpbench.records.store import read_records  # noqa: E402

LOCK = ["flock", "/tmp/ddpbench-bench.lock"]
PLANTED = os.path.join(REPO, "tests", "fixtures", "planted_causes.py")
# The planted amounts, as the fixture file sets them (read from its text: importing it needs torch).
AMOUNTS = {}
with open(PLANTED, encoding="utf-8") as source:
    for line in source:
        name, _, value = line.partition(" = ")
        if name in ("FORWARD_DELAY_S", "GETITEM_DELAY_S", "GETITEM_BATCH_SIZE"):
            AMOUNTS[name] = float(value)
CASES = {
    "baseline": "steady_ranks",
    "slow_rank": "slow_rank_one",
    "slow_getitem": "slow_getitem",
    "shaped": "steady_ranks",
    "greedy": "greedy_forward",
}
COMMUNICATION = ("exposed_comm", "overlap_slowdown", "slowest_rank", "unexplained")
TOLERANCE = 0.25
SLOW_RANK_TOLERANCE = 0.20
"""As tests/test_breakdown_runs.py judges it: what slowest_rank grew by against the baseline, within
20 % of the sleep."""


def sweep(out: str, case: str, steps: int, warmup: int, prefix: list[str]) -> bool:
    # Every DDP run on loopback, the only interface inside the namespace: the same transport in every case.
    env = dict(os.environ, PYTHONPATH=REPO, CUDA_VISIBLE_DEVICES="", GLOO_SOCKET_IFNAME="lo")
    command = [
        *LOCK,
        *prefix,
        sys.executable,
        "-m",
        "ddpbench",
        "sweep",
        "--device",
        "cpu",
        "--nproc",
        "2",
        "--workloads",
        f"{PLANTED}:{CASES[case]}",
        "--strategies",
        "local,ddp",
        "--steps",
        str(steps),
        "--warmup",
        str(warmup),
        "--out",
        out,
        "--sweep-id",
        case,
    ]
    started = time.time()
    done = subprocess.run(command, env=env, cwd=out, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    print(f"  [{time.time() - started:5.0f} s] {case}: exit {done.returncode}", file=sys.stderr)
    if done.returncode:
        print(done.stdout[-2000:], file=sys.stderr)
    return done.returncode == 0


def two_at_once(out: str, steps: int, warmup: int) -> list[float]:
    """Two one-device runs of greedy_forward started at once; their steps in seconds."""
    import fcntl

    folder = os.path.join(out, "greedy-together")
    env = dict(os.environ, PYTHONPATH=REPO, CUDA_VISIBLE_DEVICES="")
    command = [sys.executable, "-m", "ddpbench", "run", "--workload", f"{PLANTED}:greedy_forward"]
    command += ["--strategy", "local", "--threads-per-rank", "1", "--steps", str(steps), "--warmup", str(warmup)]
    with open(LOCK[1], "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        both = [
            subprocess.Popen([*command, "--out", folder, "--run-id", f"local-{i}"], env=env, cwd=out) for i in range(2)
        ]
        for run in both:
            run.wait()
    return [step_s(os.path.join(folder, "runs", f"local-{i}.json")) for i in range(2)]


def step_s(path: str) -> float:
    import json

    with open(path, encoding="utf-8") as handle:
        metrics = json.load(handle)["metrics"]
    return metrics["window_s"] / metrics["timed_steps"]


def in_shaped_namespace(out: str, steps: int, warmup: int, rate: str) -> str | None:
    """The shaped case's sweep inside its namespace; the reason where it could not run."""
    name = f"ddpbench-bench-planted-{os.getpid()}"
    added = subprocess.run(["ip", "netns", "add", name], capture_output=True, text=True)
    if added.returncode:
        return f"`ip netns add` does not work here: {added.stderr.strip()}"
    try:
        # tbf's burst must exceed the MTU, or no packet ever leaves.
        for command in (
            ["ip", "link", "set", "lo", "up", "mtu", "9000"],
            ["tc", "qdisc", "add", "dev", "lo", "root", "tbf", "rate", rate, "burst", "200kb", "latency", "50ms"],
        ):
            done = subprocess.run(["ip", "netns", "exec", name, *command], capture_output=True, text=True)
            if done.returncode:
                return f"cannot shape the namespace's loopback: {done.stderr.strip()}"
        return None if sweep(out, "shaped", steps, warmup, ["ip", "netns", "exec", name]) else "the sweep failed"
    finally:
        subprocess.run(["ip", "netns", "delete", name], capture_output=True)


def world_size_2(out: str, case: str):
    folder = os.path.join(out, case)
    if not os.path.isdir(folder):
        return None
    records, _ = read_records(folder)
    breakdowns, _ = explain_sweep(records)
    return next((b for b in breakdowns if b.world_size == 2), None)


def ms(value: float | None) -> str:
    return "n/a" if value is None else f"{value * 1e3:.2f}"


def term_ms(breakdown, name: str) -> float | None:
    return breakdown.terms[name].s_per_step


def attribution_table(found: dict) -> list[str]:
    lines = [
        "| case | step ms | reference ms | lost ms (points) | " + " | ".join(TERM_NAMES) + " |",
        "|---" * (4 + len(TERM_NAMES)) + "|",
    ]
    for case, breakdown in found.items():
        lost = breakdown.step_s - breakdown.reference_step_s
        cells = [
            f"{ms(t.s_per_step)} ({t.points:.1f})" if t.s_per_step is not None else "n/a"
            for t in (breakdown.terms[name] for name in TERM_NAMES)
        ]
        lines.append(
            f"| {case} | {ms(breakdown.step_s)} | {ms(breakdown.reference_step_s)} | "
            f"{ms(lost)} ({100 - 100 * breakdown.efficiency:.1f}) | " + " | ".join(cells) + " |"
        )
    return lines


def growth(breakdown, baseline, names) -> dict[str, float]:
    return {
        name: term_ms(breakdown, name) - term_ms(baseline, name)
        for name in names
        if term_ms(breakdown, name) is not None and term_ms(baseline, name) is not None
    }


def largest_other(breakdown, baseline, planted_in) -> tuple[str, float]:
    """The term, of those that should not hold the cause, that grew most against the baseline."""
    others = growth(breakdown, baseline, [n for n in TERM_NAMES if n not in planted_in])
    return max(others.items(), key=lambda item: item[1])


def verdict(measured: float, planted: float, tolerance: float = TOLERANCE) -> str:
    return "yes" if abs(measured - planted) <= tolerance * abs(planted) else "no"


def planted_table(found: dict, together: list[float]) -> list[str]:
    """Per case, the planted amount next to the term that should hold it."""
    lines = [
        "| case | planted | ms per step | should be held by | it holds ms | within the tolerance | "
        "other terms, largest growth against baseline |",
        "|---" * 7 + "|",
    ]
    baseline = found.get("baseline")
    if baseline is None:
        return lines + ["| (no baseline run) |"]
    slow = found.get("slow_rank")
    if slow is not None:
        delay = AMOUNTS["FORWARD_DELAY_S"]
        name, most = largest_other(slow, baseline, ("slowest_rank",))
        grew = term_ms(slow, "slowest_rank") - term_ms(baseline, "slowest_rank")
        lines.append(
            f"| slow_rank | rank 1's forward sleeps | {ms(delay)} | slowest_rank, grown against the baseline | "
            f"{ms(grew)} | {verdict(grew, delay, SLOW_RANK_TOLERANCE)} (20 %) | "
            f"{name} {ms(most)} ({'within' if most <= TOLERANCE * delay else 'over'} the limit "
            f"{ms(TOLERANCE * delay)}) |"
        )
    data = found.get("slow_getitem")
    if data is not None:
        planted = AMOUNTS["GETITEM_DELAY_S"] * AMOUNTS["GETITEM_BATCH_SIZE"]
        seen = data.phases["data"]
        held = term_ms(data, "data")
        lines.append(
            f"| slow_getitem | every sample sleeps, every rank | {ms(planted)} (data time at N "
            f"{ms(seen)}) | data stays near 0 | {ms(held)} | "
            f"{'yes' if abs(held) < TOLERANCE * seen else 'no'} (limit {ms(TOLERANCE * seen)}) | |"
        )
    shaped = found.get("shaped")
    if shaped is not None:
        slower = shaped.step_s - baseline.step_s
        held = sum(growth(shaped, baseline, COMMUNICATION).values())
        name, most = largest_other(shaped, baseline, COMMUNICATION)
        lines.append(
            f"| shaped | tbf on loopback (step increase over baseline) | {ms(slower)} | "
            f"{' + '.join(COMMUNICATION)}, growth | {ms(held)} | {verdict(held, slower)} | "
            f"{name} {ms(most)} |"
        )
    greedy = found.get("greedy")
    if greedy is not None and together:
        slower = statistics.fmean(together) - greedy.reference_step_s
        held = term_ms(greedy, "contention") - term_ms(baseline, "contention")
        name, most = largest_other(greedy, baseline, ("contention",))
        lines.append(
            f"| greedy | a 2-thread matrix product in forward (two local runs at once, {ms(together[0])} and "
            f"{ms(together[1])} ms, against one alone) | {ms(slower)} | contention, growth | {ms(held)} | "
            f"{verdict(held, slower)} | {name} {ms(most)} |"
        )
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="results/planted-causes")
    parser.add_argument("--steps", type=int, default=40, help="steps per run, warm-up included")
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--rate", default="200mbit", help="the shaped loopback's rate (tc tbf)")
    parser.add_argument("--analyse-only", action="store_true", help="use the sweeps already in --out")
    args = parser.parse_args()
    out = os.path.abspath(args.out)
    os.makedirs(out, exist_ok=True)
    skipped = None
    together = []
    if not args.analyse_only:
        for case in ("baseline", "slow_rank", "slow_getitem", "greedy"):
            sweep(out, case, args.steps, args.warmup, [])
        together = two_at_once(out, args.steps, args.warmup)
        skipped = in_shaped_namespace(out, args.steps, args.warmup, args.rate)
    elif os.path.isdir(os.path.join(out, "greedy-together", "runs")):
        folder = os.path.join(out, "greedy-together", "runs")
        together = [step_s(os.path.join(folder, name)) for name in sorted(os.listdir(folder))]
    found = {case: b for case in CASES if (b := world_size_2(out, case)) is not None}
    print(f"## Attribution at world size 2 (ms per step, points in brackets; shaped: {args.rate})\n")
    print("\n".join(attribution_table(found)))
    print("\n## Planted amount against the term that should hold it\n")
    print("\n".join(planted_table(found, together)))
    if skipped:
        print(f"\nshaped network: not run ({skipped})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
