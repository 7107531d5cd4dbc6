"""The collective microbenchmark that `ddpbench comm` launches under torchrun, one process per
device: `python -m ddpbench.worker.comm_bench --out FILE ...`.

It follows nccl-tests' conventions so the numbers compare with theirs:
- a message size S is the whole buffer: the all_reduce/broadcast tensor, the all_gather output,
  the reduce_scatter input (so rs/ag move S/N per rank); sizes double from --min-bytes to
  --max-bytes, rounded to whole elements that split evenly over the ranks;
- float32 by default; --dtypes adds float16/bfloat16, what DDP's compression hooks all-reduce
  (on CPU gloo sums half precision far slower per byte than float32, so half the bytes is not
  half the time there). A hook casts each bucket into a new tensor every step, so an all_reduce
  in half precision gets a fresh tensor every call, cast from float32 before the barrier (not
  timed). With gloo on a CPU a fresh tensor costs more than a reused one (at 8 MiB on the 2-core
  development machine, `benchmarks/fresh_tensor_allreduce.py`: a median 1.14 times for float16,
  1.31 for bfloat16, 1.04 for float32), and DDP's float32 buckets are buffers it reuses, so
  float32 reuses one;
- algorithm bandwidth algbw = S / t; bus bandwidth busbw = algbw * factor, with factor
  2(N-1)/N for all_reduce, (N-1)/N for reduce_scatter and all_gather, 1 for broadcast.

Unlike nccl-tests (which times a batch of back-to-back calls and divides), every call is timed
on its own after a barrier, so the result has a distribution (p50, p90) and not only a mean; a
call's time is the slowest rank's, as for a training step. Warm-up calls are never timed. The
number of timed calls per size is chosen from the warm-up so each size takes about
--seconds-per-size, between --min-iters and --max-iters; all ranks use the same count.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist

from ddpbench.analysis.network import BUS_FACTORS, COLLECTIVES, percentile
from ddpbench.host.facts import host_facts
from ddpbench.records.store import write_atomic
from ddpbench.worker.environment import torch_facts

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


def sizes_to_test(min_bytes: int, max_bytes: int) -> list[int]:
    sizes, size = [], min_bytes
    while size <= max_bytes:
        sizes.append(size)
        size *= 2
    return sizes


def buffers(collective: str, size_bytes: int, world: int, device: torch.device, dtype: torch.dtype):
    """Input and output tensors for one call, and the message size they really hold."""
    element_bytes = torch.empty((), dtype=dtype).element_size()
    elements = max(world, size_bytes // element_bytes // world * world)  # splits evenly over the ranks
    whole = torch.ones(elements, dtype=dtype, device=device)
    part = torch.ones(elements // world, dtype=dtype, device=device)
    return whole, part, elements * element_bytes, element_bytes


def call(collective: str, whole: torch.Tensor, part: torch.Tensor) -> None:
    if collective == "all_reduce":
        dist.all_reduce(whole)
    elif collective == "reduce_scatter":
        dist.reduce_scatter_tensor(part, whole)
    elif collective == "all_gather":
        dist.all_gather_into_tensor(whole, part)
    elif collective == "broadcast":
        dist.broadcast(whole, src=0)
    else:
        raise ValueError(f"unknown collective {collective!r}")


def timed_call(collective: str, whole, part, device: torch.device) -> float:
    """One call, started together on every rank (barrier), timed to its completion on this rank."""
    dist.barrier()
    if device.type == "cuda":
        # Sync points: the barrier's work must be done before the start event, and the call's
        # before the end event is read. Events time the GPU work itself.
        torch.cuda.synchronize(device)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        call(collective, whole, part)
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1000.0
    started = time.perf_counter()
    call(collective, whole, part)  # gloo's calls block until done on this rank
    return time.perf_counter() - started


def slowest_rank(values: list[float], device: torch.device) -> list[float]:
    """Per call, the largest time over ranks: a collective is as slow as its slowest participant."""
    tensor = torch.tensor(values, dtype=torch.float64, device=device)
    dist.all_reduce(tensor, op=dist.ReduceOp.MAX)
    return tensor.tolist()


FRESH_EACH_CALL = ("float16", "bfloat16")
"""Element types an all_reduce gets a new tensor for on every call (as the compression hooks do)."""


def call_inputs(collective: str, dtype: str, whole: torch.Tensor):
    """The tensor for each call, and whether it is a new one every call: for an all_reduce in half
    precision a fresh cast from float32 (made while the previous call's tensor still lives, which
    is then freed, as a hook's is after its step); otherwise `whole` every time."""
    fresh = collective == "all_reduce" and dtype in FRESH_EACH_CALL
    source, held, element_type = (whole.float() if fresh else None), [None if fresh else whole], whole.dtype

    def next_input() -> torch.Tensor:
        if fresh:
            held[0] = source.to(element_type)
        return held[0]

    return next_input, fresh


def measure_size(collective: str, dtype: str, size_bytes: int, world: int, device: torch.device, args) -> dict:
    whole, part, real_bytes, element_bytes = buffers(collective, size_bytes, world, device, DTYPES[dtype])
    tensor, fresh = call_inputs(collective, dtype, whole)
    del whole  # a fresh cast each call needs only its float32 source: one whole-size tensor fewer
    warm = [timed_call(collective, tensor(), part, device) for _ in range(args.warmup)]
    # Every rank must make the same number of calls: agree on the slowest rank's warm-up estimate.
    per_call_s = max(slowest_rank([statistics.median(warm[1:] or warm)], device)[0], 1e-7)
    iterations = int(min(args.max_iters, max(args.min_iters, args.seconds_per_size / per_call_s)))
    times_s = slowest_rank([timed_call(collective, tensor(), part, device) for _ in range(iterations)], device)
    p50 = percentile(times_s, 50)
    algbw = real_bytes / p50
    return {
        "collective": collective,
        "dtype": dtype,
        "bytes": real_bytes,
        "elements": real_bytes // element_bytes,
        "iterations": iterations,
        "fresh_tensor_each_call": fresh,
        "p50_s": p50,
        "p90_s": percentile(times_s, 90),
        "mean_s": statistics.fmean(times_s),
        "min_s": min(times_s),
        "algbw_bytes_per_s": algbw,
        "busbw_bytes_per_s": algbw * BUS_FACTORS[collective](world),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", required=True, help="JSON file rank 0 writes the results to")
    parser.add_argument("--backend", required=True, choices=("gloo", "nccl"))
    parser.add_argument("--collectives", default=",".join(COLLECTIVES))
    parser.add_argument("--dtypes", default="float32")
    parser.add_argument("--min-bytes", type=int, default=8)
    parser.add_argument("--max-bytes", type=int, required=True)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--min-iters", type=int, default=10)
    parser.add_argument("--max-iters", type=int, default=200)
    parser.add_argument("--seconds-per-size", type=float, default=0.5)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    if args.backend == "nccl":
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
    else:
        device = torch.device("cpu")
    dist.init_process_group(backend=args.backend, timeout=timedelta(seconds=300))
    world, rank = dist.get_world_size(), dist.get_rank()
    started = time.time()
    results = []
    try:
        for collective in args.collectives.split(","):
            for dtype in args.dtypes.split(","):
                for size in sizes_to_test(args.min_bytes, args.max_bytes):
                    row = measure_size(collective, dtype, size, world, device, args)
                    results.append(row)
                    if rank == 0:
                        print(
                            f"{collective:>14} {dtype:>8} {row['bytes']:>12} B  p50 {row['p50_s'] * 1e6:12.1f} us  "
                            f"busbw {row['busbw_bytes_per_s'] / 1e9:8.3f} GB/s",
                            file=sys.stderr,
                            flush=True,
                        )
                    if rank == 0:  # written after every size: a run cut short keeps what it measured
                        write_atomic(args.out, json.dumps(_document(args, world, device, started, results), indent=1))
    finally:
        dist.destroy_process_group()
    return 0


def _document(args, world: int, device: torch.device, started: float, results: list[dict]) -> dict:
    return {
        "kind": "ddpbench-comm-results",
        "backend": args.backend,
        "world_size": world,
        "device": device.type,
        "threads_per_rank": args.threads,
        "dtypes": args.dtypes.split(","),
        "started_unix_s": started,
        "wall_s": time.time() - started,
        "env": {**host_facts(), **torch_facts()},
        "results": results,
    }


if __name__ == "__main__":
    sys.exit(main())
