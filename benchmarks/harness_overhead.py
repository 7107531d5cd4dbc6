"""How much throughput does the harness cost? Runs the plain textbook DDP loop
(`plain_ddp.py`) and `ddpbench run` on the same tiny workload, alternating, several rounds,
and prints the throughput ratio harness / plain per round and its median.

    .venv/bin/python benchmarks/harness_overhead.py [--workload mlp] [--nproc 2] [--rounds 5] [--steps 200]
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
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                           f"--nproc-per-node={args.nproc}", os.path.join(HERE, "plain_ddp.py"), args.workload,
                           str(args.steps), str(args.warmup), str(args.threads)],
                          cwd=REPO, capture_output=True, text=True, check=True,
                          env={**os.environ, "OMP_NUM_THREADS": str(args.threads)})
    return json.loads(done.stdout.strip().splitlines()[-1])["throughput_samples_per_s"]


def harness(args) -> float:
    with tempfile.TemporaryDirectory() as out:
        done = subprocess.run([sys.executable, "-m", "ddpbench", "run", "--workload", args.workload,
                               "--nproc", str(args.nproc), "--steps", str(args.steps), "--warmup", str(args.warmup),
                               "--threads-per-rank", str(args.threads), "--out", out],
                              cwd=REPO, capture_output=True, text=True)
        if done.returncode != 0:
            sys.exit(f"ddpbench run failed (exit {done.returncode}):\n{done.stdout}\n{done.stderr[-3000:]}")
        record = json.load(open(glob.glob(os.path.join(out, "runs", "*.json"))[0]))
    return record["metrics"]["throughput_samples_per_s"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workload", default="mlp")
    parser.add_argument("--nproc", type=int, default=2)
    parser.add_argument("--threads", type=int, default=max(1, (os.cpu_count() or 1) // 2))
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=10)
    args = parser.parse_args()
    ratios = []
    for round_index in range(args.rounds):
        # Alternate which goes first, so a drift in machine load does not favour one side.
        order = [("plain", plain), ("harness", harness)]
        if round_index % 2:
            order.reverse()
        measured = {name: run(args) for name, run in order}
        ratios.append(measured["harness"] / measured["plain"])
        print(f"round {round_index + 1}: plain {measured['plain']:.1f} samples/s, "
              f"harness {measured['harness']:.1f} samples/s, ratio {ratios[-1]:.3f}", flush=True)
    print(f"median throughput ratio harness/plain over {args.rounds} rounds: {statistics.median(ratios):.3f} "
          f"(min {min(ratios):.3f}, max {max(ratios):.3f}); {args.workload} tiny, {args.nproc} ranks, "
          f"{args.steps - args.warmup} timed steps")


if __name__ == "__main__":
    main()
