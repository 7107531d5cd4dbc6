"""How much throughput does the harness cost? Runs an independent textbook DDP loop
(`plain_ddp.py`: its own dataset and loader, one long epoch; only the model definition is shared)
and `ddpbench run --workload mlp` with the same batch, threads and steps, alternating which goes
first, for several rounds, and prints the throughput ratio harness / plain per round, its median,
min and max. One run is one sample: the machine's speed drifts between runs, so read the spread.

    .venv/bin/python benchmarks/harness_overhead.py [--nproc 2] [--rounds 6] [--steps 210] [--warmup 10]
"""

import argparse
import glob
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)


def plain(args) -> float:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            f"--nproc-per-node={args.nproc}",
            os.path.join(HERE, "plain_ddp.py"),
            str(args.steps),
            str(args.warmup),
            str(args.threads),
            str(args.batch),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        env={**os.environ, "OMP_NUM_THREADS": str(args.threads)},
    )
    if done.returncode != 0:
        sys.exit(f"the plain loop failed (exit {done.returncode}):\n{done.stdout}\n{done.stderr[-3000:]}")
    found = json.loads(done.stdout.strip().splitlines()[-1])
    return found["throughput_samples_per_s"], found["cpu_s_per_step"]


def harness(args) -> float:
    with tempfile.TemporaryDirectory() as out:
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "ddpbench",
                "run",
                "--workload",
                "mlp",
                "--device",
                "cpu",
                "--nproc",
                str(args.nproc),
                "--steps",
                str(args.steps),
                "--warmup",
                str(args.warmup),
                "--batch-size",
                str(args.batch),
                "--threads-per-rank",
                str(args.threads),
                "--out",
                out,
            ],
            cwd=REPO,
            capture_output=True,
            text=True,
        )
        if done.returncode != 0:
            sys.exit(f"ddpbench run failed (exit {done.returncode}):\n{done.stdout}\n{done.stderr[-3000:]}")
        record = json.load(open(glob.glob(os.path.join(out, "runs", "*.json"))[0]))
    cpu_s = sum(rank["window_cpu_s"] for rank in record["ranks"]) / record["metrics"]["timed_steps"]
    return record["metrics"]["throughput_samples_per_s"], cpu_s


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nproc", type=int, default=2)
    parser.add_argument("--threads", type=int, default=max(1, (os.cpu_count() or 1) // 2))
    parser.add_argument("--batch", type=int, default=8, help="per-device batch of the tiny MLP")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--steps", type=int, default=210)
    parser.add_argument("--warmup", type=int, default=10)
    args = parser.parse_args()
    ratios, cpu_ratios = [], []
    for round_index in range(args.rounds):
        # Alternate which goes first, so a drift in machine load does not favour one side.
        order = [("plain", plain), ("harness", harness)]
        if round_index % 2:
            order.reverse()
        measured = {name: run(args) for name, run in order}
        (plain_x, plain_cpu), (harness_x, harness_cpu) = measured["plain"], measured["harness"]
        ratios.append(harness_x / plain_x)
        cpu_ratios.append(plain_cpu / harness_cpu)  # above 1: the harness uses less CPU per step
        print(
            f"round {round_index + 1}: plain {plain_x:.1f} samples/s, harness {harness_x:.1f} samples/s, "
            f"ratio {ratios[-1]:.3f}; CPU per step plain {plain_cpu * 1e3:.2f} ms, harness "
            f"{harness_cpu * 1e3:.2f} ms, ratio {cpu_ratios[-1]:.3f}",
            flush=True,
        )
    what = (
        f"mlp tiny, batch {args.batch}, {args.nproc} ranks x {args.threads} thread(s), "
        f"{args.steps - args.warmup} timed steps"
    )
    print(
        f"throughput ratio harness/plain over {args.rounds} rounds: median {statistics.median(ratios):.3f} "
        f"(min {min(ratios):.3f}, max {max(ratios):.3f}); {what}"
    )
    print(
        f"CPU-time ratio plain/harness per step: median {statistics.median(cpu_ratios):.3f} "
        f"(min {min(cpu_ratios):.3f}, max {max(cpu_ratios):.3f})"
    )


if __name__ == "__main__":
    main()
