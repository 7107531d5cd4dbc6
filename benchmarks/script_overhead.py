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


def in_process(args) -> None:
    """The hooks alone: one process (gloo, world size 1), the same model, blocks of steps with the
    observer installed and without, alternating, so that drift between runs cannot hide them."""
    os.environ.update(MASTER_ADDR="localhost", MASTER_PORT="29577", RANK="0", WORLD_SIZE="1", LOCAL_RANK="0")
    import time

    import torch
    import torch.distributed as dist
    import torch.nn as nn

    sys.path.insert(0, REPO)
    from ddpbench.worker.clock import StepClock
    from ddpbench.worker.script.observer import Observer

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    model = nn.parallel.DistributedDataParallel(nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10)))
    observer = Observer()
    # what saw_ddp keeps, without its hooks: those come and go with each instrumented block
    observer.ddp, observer._ddp_parameters = model, {id(p) for p in model.parameters()}
    observer.clock, observer.timing = StepClock(torch.device("cpu")), True  # as in the timed window
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    loss_fn = nn.CrossEntropyLoss()
    inputs, targets = torch.randn(args.batch, 64), torch.randint(0, 10, (args.batch,))

    def block() -> float:
        durations = []
        for _ in range(200):
            started = time.perf_counter()
            optimizer.zero_grad()
            loss_fn(model(inputs), targets).backward()
            optimizer.step()
            durations.append(time.perf_counter() - started)
        return statistics.median(durations)

    from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

    block()  # warm up
    ratios = []
    for round_index in range(args.rounds * 10):
        found = {}
        for name in ("plain", "hooks") if round_index % 2 == 0 else ("hooks", "plain"):
            removers = []
            if name == "hooks":  # every hook the observer installs on the hot path
                removers = [
                    register_optimizer_step_pre_hook(observer.before_optimizer_step),
                    register_optimizer_step_post_hook(observer.after_optimizer_step),
                    model.register_forward_pre_hook(observer._before_forward, with_kwargs=True),
                    model.register_forward_hook(observer._after_forward),
                ]
            found[name] = block()
            for remove in removers:
                remove.remove()
        ratios.append(found["hooks"] / found["plain"])
    # The hooks' own work per step, timed alone in a tight loop (what the blocks above cannot resolve
    # when the machine's noise is larger than it): one forward and one optimizer step's worth.
    calls = 20000
    started = time.perf_counter()
    for _ in range(calls):
        observer._before_forward(model, (inputs,), {})
        observer._after_forward(model, (inputs,), None)
        observer.before_optimizer_step(optimizer, (), {})
        observer.after_optimizer_step(optimizer, (), {})
    hooks_s = (time.perf_counter() - started) / calls
    plain_s = statistics.median(block() for _ in range(5))
    print(
        f"the hooks' own work: {hooks_s * 1e6:.1f} us per step, {hooks_s / plain_s:.2%} of this "
        f"{plain_s * 1e3:.3f} ms step (torch's dispatch to them not included)"
    )
    print(
        f"in one process, blocks of 200 steps alternating: median step with hooks / without over {len(ratios)} "
        f"pairs: median {statistics.median(ratios):.4f}, min {min(ratios):.4f}, max {max(ratios):.4f}"
    )
    dist.destroy_process_group()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nproc", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--steps", type=int, default=600, help="steps the script takes")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--first", type=int, default=50, help="ddpbench's warm-up: the first step compared")
    parser.add_argument("--window-end", type=int, default=450, help="ddpbench's --steps: the window's end")
    parser.add_argument("--in-process", action="store_true", help="the hooks alone, in one process (see in_process)")
    args = parser.parse_args()
    if args.in_process:
        in_process(args)
        return
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
