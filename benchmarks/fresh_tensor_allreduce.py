"""Does an all_reduce cost more on a fresh tensor than on a reused one? DDP's float32 buckets are
buffers it reuses every step; the compression hooks (fp16_compress, bf16_compress) cast each
bucket into a new tensor every step. `ddpbench comm` measures half precision the hooks' way, and
this is the measurement behind that choice.

In one torchrun job of 2 gloo processes (one thread each), per element type and in --rounds
rounds (alternating which goes first), --calls all_reduces of --mib MiB on one reused tensor and
--calls on a fresh cast from float32 each call (made before the barrier, not timed). Prints each
round's median times and the ratio fresh / reused, side by side from the same minutes.

    .venv/bin/python benchmarks/fresh_tensor_allreduce.py [--mib 8] [--rounds 8] [--calls 30]
"""

import argparse
import statistics
import sys
import time

from two_ranks import WORKER_FLAG, run_on_two_ranks


def worker(mib: int, rounds: int, calls: int) -> None:
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    source = torch.full((mib * 2**20 // 2,), 1e-6)  # gradient-sized values, 2-byte elements

    def median_ms(next_tensor) -> float:
        times = []
        for _ in range(calls + 2):
            tensor = next_tensor()
            dist.barrier()
            started = time.perf_counter()
            dist.all_reduce(tensor)
            times.append(time.perf_counter() - started)
        return statistics.median(times[2:]) * 1e3  # the first calls pay for warming up

    for dtype in (torch.float16, torch.bfloat16, torch.float32):
        reused = source.to(dtype)
        kinds = [("reused", lambda reused=reused: reused), ("fresh", lambda dtype=dtype: source.to(dtype))]
        name, ratios = str(dtype).removeprefix("torch."), []
        for round_index in range(rounds):
            found = {kind: median_ms(make) for kind, make in (kinds if round_index % 2 == 0 else kinds[::-1])}
            ratios.append(found["fresh"] / found["reused"])
            if dist.get_rank() == 0:
                print(
                    f"{name:>9} round {round_index + 1}: reused {found['reused']:7.2f} ms  "
                    f"fresh {found['fresh']:7.2f} ms"
                    f"  fresh / reused {ratios[-1]:.2f}",
                    flush=True,
                )
        if dist.get_rank() == 0:
            print(
                f"{name:>9} fresh / reused: median {statistics.median(ratios):.2f}, min {min(ratios):.2f}, "
                f"max {max(ratios):.2f} over {rounds} rounds",
                flush=True,
            )
    dist.destroy_process_group()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mib", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--calls", type=int, default=30)
    parser.add_argument(WORKER_FLAG, action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.mib, args.rounds, args.calls)
        return 0
    return run_on_two_ranks(__file__, sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
