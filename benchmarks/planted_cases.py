"""The measuring half of benchmarks/planted_causes.py: the planted cases and how each is run.

Every case is one `ddpbench sweep --device cpu --nproc 2 --strategies local,ddp` of a workload in
tests/fixtures/planted_causes.py (gloo over loopback, the only interface inside the shaped case's
network namespace), plus two `ddpbench run --strategy local` of greedy_forward started at once.
`measure` runs them all under one hold of the benchmark lock; planted_causes.py reads and judges them.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

from bench_lock import bench_lock  # the caller puts benchmarks/ and the repository on sys.path

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PLANTED = os.path.join(REPO, "tests", "fixtures", "planted_causes.py")
# The fixture's constants, read from its text (importing it needs torch).
FIXTURE = {}
with open(PLANTED, encoding="utf-8") as source:
    for line in source:
        name, _, value = line.partition(" = ")
        if name in (
            "FORWARD_DELAY_S",
            "BACKWARD_DELAY_S",
            "GETITEM_DELAY_S",
            "WIDTH",
            "HIDDEN_LAYERS",
            "BATCH_SIZE",
            "GETITEM_BATCH_SIZE",
        ):
            FIXTURE[name] = float(value)
        elif name in ("SLEEP_LOG_ENV", "HOG_THREADS"):
            FIXTURE[name] = value.strip().strip('"')
CASES = {
    "baseline": "steady_ranks",
    "slow_rank": "slow_rank_one",
    "slow_getitem": "slow_getitem",
    "shaped": "steady_ranks",
    "greedy": "greedy_forward",
    "slow_backward": "slow_backward_rank_one",
}
REPEATS = {"slow_backward": 3}
"""Runs per configuration where the case is judged run by run (every other case: one run)."""
SLEPT = "slow_rank-slept.txt"
"""In --out: each of the slow rank's sleeps, in seconds (the fixture's SLEEP_LOG_ENV names the variable)."""


# --- measuring ------------------------------------------------------------------------------------


def sweep(out: str, case: str, steps: int, warmup: int, prefix: list[str], extra_env: dict | None = None) -> bool:
    repeats = str(REPEATS.get(case, 1))
    # Every DDP run on loopback, the only interface inside the namespace: the same transport in every case.
    env = dict(os.environ, PYTHONPATH=REPO, CUDA_VISIBLE_DEVICES="", GLOO_SOCKET_IFNAME="lo", **(extra_env or {}))
    command = [
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
        "--repeat",
        repeats,
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


def two_at_once(out: str, steps: int, warmup: int) -> bool:
    """Two one-device runs of greedy_forward started at once (under the measurement's lock)."""
    folder = os.path.join(out, "greedy-together")
    env = dict(os.environ, PYTHONPATH=REPO, CUDA_VISIBLE_DEVICES="")
    command = [sys.executable, "-m", "ddpbench", "run", "--workload", f"{PLANTED}:greedy_forward"]
    command += ["--strategy", "local", "--threads-per-rank", "1", "--steps", str(steps), "--warmup", str(warmup)]
    started = time.time()
    both = [subprocess.Popen([*command, "--out", folder, "--run-id", f"local-{i}"], env=env, cwd=out) for i in range(2)]
    codes = [run.wait() for run in both]
    print(f"  [{time.time() - started:5.0f} s] two at once: exit {codes}", file=sys.stderr)
    return not any(codes)


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


def measure(out: str, steps: int, warmup: int, rate: str, command: str) -> dict:
    """Every case once, under one hold of the lock; what was done, as OUT/measurement.json keeps it."""
    slept = os.path.join(out, SLEPT)
    started = time.time()
    failed = []
    with bench_lock() as locked_by:
        for case in ("baseline", "slow_rank", "slow_getitem", "greedy", "slow_backward"):
            extra = {FIXTURE["SLEEP_LOG_ENV"]: slept} if case == "slow_rank" else None
            if not sweep(out, case, steps, warmup, [], extra):
                failed.append(case)
        if not two_at_once(out, steps, warmup):
            failed.append("two at once")
        skipped = in_shaped_namespace(out, steps, warmup, rate)
    return {
        "command": command,
        "seconds": time.time() - started,
        "locked_by": locked_by,
        "rate": rate,
        "failed": failed,
        "shaped_skipped": skipped,
    }
