"""What does tracking a step's progress cost? The heartbeat (issue: name the hung rank) asks the
timed loop for plain attribute stores: the step and where in it the rank is (data, forward,
backward, optimizer); its background thread reads the process group's collective count and writes
a file once a second. This measures, on the tiny MLP under DDP (a one-rank gloo group, so the
all-reduce path is real):

1. the stores themselves, timed over a million steps' worth, as a share of a median step;
2. the heartbeat thread's once-a-second work (CPU time), as a share of a second;
3. steps with tracking against steps without, alternating blocks in one process (noisy: a
   machine's step-to-step noise is far above the cost being measured).

    .venv/bin/python benchmarks/progress_overhead.py [--rounds 10] [--steps 50]
"""

import argparse
import os
import statistics
import sys
import tempfile
import time
import timeit

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

from ddpbench.config.spec import DDPKnobs  # noqa: E402
from ddpbench.worker.heartbeat import Heartbeat  # noqa: E402
from ddpbench.worker.training import UNTRACKED, make_precision, train_step, wrap_ddp  # noqa: E402
from ddpbench.worker.workload import build_workload  # noqa: E402


def steps_s(model, optimizer, workload, precision, batch, progress, count: int) -> list[float]:
    inputs, targets = batch
    times = []
    for step in range(count):
        started = time.perf_counter()
        progress.step, progress.where = step, "data"  # what the worker's loop stores each step
        train_step(model, optimizer, workload.loss, precision, inputs, targets, progress)
        times.append(time.perf_counter() - started)
    return times


def store_cost_s(beat) -> float:
    """Seconds per step for the stores the loop and train_step make, minus an empty loop."""
    number = 1_000_000
    stores = timeit.timeit(
        'beat.step, beat.where = 1, "data"; beat.where = "forward"; '
        'beat.where = "backward"; beat.where = "optimizer"',
        globals={"beat": beat},
        number=number,
    )
    empty = timeit.timeit("pass", number=number)
    return max(0.0, stores - empty) / number


def thread_cpu_s(work, number: int = 200) -> float:
    """CPU seconds per call of the heartbeat thread's work (the file's fsync waits on the disk,
    not on a core, and releases the GIL, so wall time would overstate what training loses)."""
    started = time.thread_time()
    for _ in range(number):
        work()
    return (time.thread_time() - started) / number


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--steps", type=int, default=50, help="steps per block")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    torch.manual_seed(0)
    workload = build_workload("mlp", "tiny", None)
    model = wrap_ddp(workload.model, torch.device("cpu"), DDPKnobs())
    optimizer = workload.make_optimizer(model.parameters())
    precision = make_precision("fp32", torch.device("cpu"))
    dataset = workload.make_dataset(workload.batch_size)
    batch = torch.utils.data.default_collate([dataset[i] for i in range(workload.batch_size)])
    steps_s(model, optimizer, workload, precision, batch, UNTRACKED, 20)  # warm-up, buckets rebuilt

    with tempfile.TemporaryDirectory() as folder:
        beat = Heartbeat(os.path.join(folder, "heartbeats"), 0, stall_after_s=3600)
        beat.watch_collectives(dist.distributed_c10d._get_default_group(), "gloo")
        beat.enter("timed")
        ratios, untracked_all = [], []
        for _ in range(args.rounds):
            untracked = statistics.median(steps_s(model, optimizer, workload, precision, batch, UNTRACKED, args.steps))
            tracked = statistics.median(steps_s(model, optimizer, workload, precision, batch, beat, args.steps))
            ratios.append(tracked / untracked)
            untracked_all.append(untracked)
        thread_work = thread_cpu_s(lambda: (beat._check_progress(), beat._write()))
        per_step = store_cost_s(beat)
        beat.stop()
    step = statistics.median(untracked_all)
    print(f"tiny MLP step (DDP, 1-rank gloo, {args.threads} thread): median {step * 1e3:.2f} ms")
    print(f"1. progress stores per step: {per_step * 1e9:.0f} ns = {100 * per_step / step:.4f} % of a step")
    print(
        f"2. heartbeat thread, once a second: {thread_work * 1e6:.0f} us of CPU = {100 * thread_work:.4f} % of a second"
    )
    print(
        f"3. tracked / untracked median step time, {args.rounds} alternating rounds of {args.steps} steps: "
        f"median {statistics.median(ratios):.4f} (rounds {min(ratios):.4f} .. {max(ratios):.4f})"
    )
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
