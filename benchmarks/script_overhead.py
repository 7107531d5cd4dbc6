"""What does `ddpbench run --script` cost a training loop? The same tiny DDP script
(`tiny_ddp_script.py`) runs plainly under torchrun and under ddpbench (--run-to-end, no profiling),
alternating which goes first, for several rounds. The script times its own steps either way; the
figure is the ratio of the median step, ddpbench / plain, over steps that ddpbench instruments
(after its warm-up, before its window ends; the steps holding the window's barriers are outside
the median's reach). One round is one pair of runs: read the spread, the machine drifts.

    .venv/bin/python benchmarks/script_overhead.py [--nproc 2] [--rounds 6] [--steps 600] [--batch 32]
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
SCRIPT = os.path.join(HERE, "tiny_ddp_script.py")


def step_times(output: str) -> list[float]:
    lines = [line for line in output.splitlines() if line.startswith("[")]
    return json.loads(lines[-1])


def plain(args) -> list[float]:
    done = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={args.nproc}",
         SCRIPT, str(args.steps), str(args.batch)],
        cwd=REPO, capture_output=True, text=True, check=True, env={**os.environ, "OMP_NUM_THREADS": "1"},
    )  # fmt: skip
    return step_times(done.stdout)


def under_ddpbench(args) -> list[float]:
    with tempfile.TemporaryDirectory() as out:
        subprocess.run(
            [sys.executable, "-m", "ddpbench", "run", "--script", SCRIPT, "--device", "cpu", "--nproc",
             str(args.nproc), "--threads-per-rank", "1", "--steps", str(args.window_end), "--warmup", str(args.first),
             "--no-profile", "--run-to-end", "--run-id", "overhead", "--out", out, "--", str(args.steps),
             str(args.batch)],
            cwd=REPO, capture_output=True, text=True, check=True,
        )  # fmt: skip
        logs = os.path.join(out, "logs", "overhead", "ranks")
        printed = "".join(
            open(os.path.join(folder, name)).read()
            for folder, _, names in os.walk(logs)
            for name in names
            if name == "stdout.log"
        )
    return step_times(printed)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nproc", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--steps", type=int, default=600, help="steps the script takes")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--first", type=int, default=50, help="ddpbench's warm-up: the first step compared")
    parser.add_argument("--window-end", type=int, default=450, help="ddpbench's --steps: the window's end")
    args = parser.parse_args()
    ratios = []
    for round_index in range(args.rounds):
        order = [("plain", plain), ("ddpbench", under_ddpbench)]
        if round_index % 2:
            order.reverse()
        found = {}
        for name, measure in order:
            # steps strictly inside ddpbench's window: not the ones holding its barriers and checks
            found[name] = statistics.median(measure(args)[args.first + 1 : args.window_end - 1])
        ratios.append(found["ddpbench"] / found["plain"])
        print(
            f"round {round_index + 1}: plain {found['plain'] * 1e3:.3f} ms  ddpbench {found['ddpbench'] * 1e3:.3f} ms"
            f"  ddpbench / plain {ratios[-1]:.4f}",
            flush=True,
        )
    print(
        f"median step ddpbench / plain over {args.rounds} rounds: median {statistics.median(ratios):.4f}, "
        f"min {min(ratios):.4f}, max {max(ratios):.4f}"
    )


if __name__ == "__main__":
    main()
