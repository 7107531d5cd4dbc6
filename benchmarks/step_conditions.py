"""Do DDP steps cost the same back to back as each after a barrier? And does an all_reduce cost
the same right after backward as right after another all_reduce?

The timed window runs its steps back to back; the gradient timeline, whose parts `ddpbench
project` replays, ran each of its DDP steps after a barrier only, until each got an unmarked DDP
step before it (this is the measurement behind that); `ddpbench comm` times all_reduces that
follow one another. This measures both differences on a textbook DDP loop that shares no code with
ddpbench: the tiny MLP of `workloads/mlp.py` (4 x Linear(1024, 1024), batch 8, SGD with
momentum), 2 gloo processes of one thread each, plain `DDP(model, bucket_cap_mb=25)` as ddpbench
wraps it.

Per round (alternating which kind goes first, so a drift of the machine hits both alike):
1. --steps DDP steps back to back (after one lead-in step), and --steps each after a barrier.
   Per step the slowest rank's step time and, per rank, the gap from the last gradient to
   backward's return (the bucket's all-reduce and DDP's finalizing), and how far apart the ranks
   started the step.
2. --calls all_reduces of the model's gradient bytes, each after a barrier: right after a backward
   (no_sync, so the caches hold what backward touched) and right after another all_reduce of the
   same tensor (as `ddpbench comm` times them). The all_reduce's time from the later rank's start
   to the earlier rank's end. (Inside a DDP step there is no barrier: this isolates what ran
   just before.)
Prints each round, then the medians over rounds of back to back / after a barrier and of after
backward / after an all_reduce.

    .venv/bin/python benchmarks/step_conditions.py [--rounds 6] [--steps 10] [--calls 10]
"""

import argparse
import statistics
import sys
import time

from two_ranks import WORKER_FLAG, run_on_two_ranks

WIDTH, LAYERS, BATCH, CLASSES = 1024, 4, 8, 10


def worker(rounds: int, steps: int, calls: int) -> None:
    import torch
    import torch.distributed as dist
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    blocks = []
    for _ in range(LAYERS):
        blocks += [nn.Linear(WIDTH, WIDTH), nn.ReLU()]
    model = nn.Sequential(*blocks, nn.Linear(WIDTH, CLASSES))
    ddp = DistributedDataParallel(model, bucket_cap_mb=25)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
    # Backward reaches the first layer last: its weight's gradient is the last one ready.
    ready = {}
    model[0].weight.register_post_accumulate_grad_hook(lambda _: ready.__setitem__("last", time.perf_counter()))
    gradients = torch.ones(sum(p.numel() for p in model.parameters()))

    def step() -> dict:
        started = time.perf_counter()
        inputs, targets = torch.randn(BATCH, WIDTH), torch.randint(0, CLASSES, (BATCH,))
        optimizer.zero_grad(set_to_none=True)
        nn.functional.cross_entropy(ddp(inputs), targets).backward()
        returned = time.perf_counter()
        optimizer.step()
        return {"start": started, "tail": returned - ready["last"], "end": time.perf_counter()}

    def steps_of(kind: str) -> list[dict]:
        dist.barrier()
        step()  # lead-in: the first measured back-to-back step follows a step, as in a timed window
        found = []
        for _ in range(steps):
            if kind == "after a barrier":
                dist.barrier()
            found.append(step())
        return found

    def all_reduce_after(kind: str) -> list[tuple[float, float]]:
        found = []
        for _ in range(calls):
            if kind == "after backward":
                with ddp.no_sync():
                    nn.functional.cross_entropy(
                        ddp(torch.randn(BATCH, WIDTH)), torch.randint(0, CLASSES, (BATCH,))
                    ).backward()
            else:
                dist.all_reduce(gradients)
            dist.barrier()
            started = time.perf_counter()
            dist.all_reduce(gradients)
            found.append((started, time.perf_counter()))
        return found

    for _ in range(3):
        step()
    ratios = {"steps": [], "all_reduce": []}
    for round_index in range(rounds):
        flip = round_index % 2 == 1
        kinds = ["back to back", "after a barrier"]
        mine = {kind: steps_of(kind) for kind in (kinds[::-1] if flip else kinds)}
        reduces = ["after backward", "after an all_reduce"]
        mine.update({kind: all_reduce_after(kind) for kind in (reduces[::-1] if flip else reduces)})
        both = [None, None]
        dist.all_gather_object(both, mine)
        if rank != 0:
            continue
        ms = lambda values: statistics.median(values) * 1e3  # noqa: E731
        line = [f"round {round_index + 1}:"]
        step_ms = {}
        for kind in kinds:
            pairs = list(zip(both[0][kind], both[1][kind]))
            step_ms[kind] = ms([max(a["end"] - a["start"], b["end"] - b["start"]) for a, b in pairs])
            line.append(
                f"{kind}: step {step_ms[kind]:6.2f} ms, last gradient to backward's return "
                f"{ms([a['tail'] for a, _ in pairs]):5.2f} / {ms([b['tail'] for _, b in pairs]):5.2f} ms, "
                f"start skew {ms([abs(a['start'] - b['start']) for a, b in pairs]):4.2f} ms;"
            )
        reduce_ms = {
            kind: ms([min(a[1], b[1]) - max(a[0], b[0]) for a, b in zip(both[0][kind], both[1][kind])])
            for kind in reduces
        }
        line.append("all_reduce " + ", ".join(f"{kind} {reduce_ms[kind]:6.2f} ms" for kind in reduces))
        ratios["steps"].append(step_ms["back to back"] / step_ms["after a barrier"])
        ratios["all_reduce"].append(reduce_ms["after backward"] / reduce_ms["after an all_reduce"])
        print(" ".join(line), flush=True)
    if rank == 0:
        for name, label in (
            ("steps", "steps back to back / after a barrier"),
            ("all_reduce", "all_reduce after backward / after an all_reduce"),
        ):
            values = ratios[name]
            print(
                f"{label}: median {statistics.median(values):.3f}, min {min(values):.3f}, max {max(values):.3f} "
                f"over {rounds} rounds",
                flush=True,
            )
    dist.destroy_process_group()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--calls", type=int, default=10)
    parser.add_argument(WORKER_FLAG, action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.rounds, args.steps, args.calls)
        return 0
    return run_on_two_ranks(__file__, sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
