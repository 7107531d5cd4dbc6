"""The machine canary's probes: `python -m ddpbench.worker.canary` prints one JSON object.

Fixed work that does not depend on the code under test, so that a change in its rates between two
sweeps is a change of the machine (load, clocks, memory, the network stack), not of ddpbench or the
workloads. Every probe is a rate, higher is faster, the median of several short repetitions:

- `matmul_fp32`: one-thread float32 matrix products, GFLOP/s;
- `memory_copy`: a copy of a 128 MiB array, one thread, GB/s counting bytes read and written;
- `python_loop`: a pure-Python loop, million iterations/s;
- `gloo_allreduce`: a 4 MiB float32 all-reduce between 2 processes on localhost over gloo (the
  second process is forked before any other probe runs), algorithm bandwidth GB/s;
- `nccl_allreduce`: a 64 MiB float32 all-reduce over NCCL on min(2, visible GPUs) GPUs, one process
  per GPU, algorithm bandwidth GB/s; skipped with the reason where there is no GPU or no NCCL;
- `matmul_PxT` (only with `--shape PxT`, which a sweep passes): float32 matrix products in P
  processes of T threads at once, shaped like the sweep's largest run, GFLOP/s of all of them. The
  one-thread probes hardly notice a process that takes one core of a rank's two, but OpenMP's
  spinning barriers do: this probe loses what the sweep's runs lose.

A probe that fails gives its error instead of a figure; the others still run.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import socket
import statistics
import sys
import time
import traceback
from datetime import timedelta

import torch
import torch.distributed as dist

CANARY_VERSION = 1
REPEATS = 5
MATMUL_SIZE, MATMUL_PRODUCTS = 384, 8
COPY_BYTES, COPIES = 128 * 2**20, 2
LOOP_ITERATIONS = 300_000
GLOO_BYTES, GLOO_CALLS = 4 * 2**20, 10
NCCL_BYTES, NCCL_CALLS = 64 * 2**20, 20
WARMUP_CALLS = 2
PG_TIMEOUT = timedelta(seconds=60)


def figure(unit: str, rates: list[float]) -> dict:
    return {
        "value": float(f"{statistics.median(rates):.4g}"),
        "unit": unit,
        "repeats": [float(f"{r:.4g}") for r in rates],
    }


def timed(work, repeats: int = REPEATS) -> list[float]:
    """Seconds of `work()` per repetition, after one untimed call (first-touch, caches, lazy setup)."""
    work()
    seconds = []
    for _ in range(repeats):
        started = time.perf_counter()
        work()
        seconds.append(time.perf_counter() - started)
    return seconds


def matmul_probe() -> dict:
    a = torch.rand(MATMUL_SIZE, MATMUL_SIZE)
    b = torch.rand(MATMUL_SIZE, MATMUL_SIZE)
    out = torch.empty(MATMUL_SIZE, MATMUL_SIZE)

    def work():
        for _ in range(MATMUL_PRODUCTS):
            torch.mm(a, b, out=out)

    flops = 2 * MATMUL_SIZE**3 * MATMUL_PRODUCTS
    return figure("GFLOP/s", [flops / s / 1e9 for s in timed(work)])


def memory_probe() -> dict:
    source = torch.ones(COPY_BYTES // 4)
    target = torch.empty_like(source)

    def work():
        for _ in range(COPIES):
            target.copy_(source)

    moved = 2 * COPY_BYTES * COPIES  # each copy reads and writes every byte
    return figure("GB/s", [moved / s / 1e9 for s in timed(work)])


def python_probe() -> dict:
    def work():
        total = 0
        for i in range(LOOP_ITERATIONS):
            total += i & 7
        return total

    return figure("M iterations/s", [LOOP_ITERATIONS / s / 1e6 for s in timed(work)])


SHAPED_SIZE, SHAPED_PRODUCTS = 512, 4


def _shaped_worker(threads: int, barrier, results) -> None:
    torch.set_num_threads(threads)
    a, b = torch.rand(SHAPED_SIZE, SHAPED_SIZE), torch.rand(SHAPED_SIZE, SHAPED_SIZE)
    out = torch.empty(SHAPED_SIZE, SHAPED_SIZE)

    def work():
        for _ in range(SHAPED_PRODUCTS):
            torch.mm(a, b, out=out)

    work()
    seconds = []
    for _ in range(REPEATS):
        barrier.wait(timeout=60)  # every process starts each repetition together: they share the cores
        started = time.perf_counter()
        work()
        seconds.append(time.perf_counter() - started)
    results.put(seconds)


def shaped_probe(processes: int, threads: int) -> dict:
    """All the work happens in forked children: this process starts no thread pool that a later
    fork (the gloo probe's) could inherit broken."""
    method = "fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn"
    context = multiprocessing.get_context(method)
    barrier, results = context.Barrier(processes), context.Queue()
    workers = [context.Process(target=_shaped_worker, args=(threads, barrier, results)) for _ in range(processes)]
    for worker in workers:
        worker.start()
    try:
        per_process = [results.get(timeout=CANARY_WORKER_TIMEOUT_S) for _ in workers]
    finally:
        for worker in workers:
            worker.join(timeout=10)
            if worker.is_alive():
                worker.kill()
    flops = 2 * SHAPED_SIZE**3 * SHAPED_PRODUCTS * processes
    # A repetition lasts until its slowest process is done: the pace of a step whose ranks meet.
    rates = [flops / max(times) / 1e9 for times in zip(*per_process)]
    return {**figure("GFLOP/s", rates), "processes": processes, "threads": threads}


CANARY_WORKER_TIMEOUT_S = 120


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def allreduce_rates(backend: str, rank: int, world: int, port: int, size_bytes: int, calls: int) -> list[float]:
    """Algorithm bandwidth (GB/s) of `calls` back-to-back all-reduces per repetition, seen by this rank."""
    device = torch.device("cuda", rank) if backend == "nccl" else torch.device("cpu")
    if backend == "nccl":
        torch.cuda.set_device(device)
    dist.init_process_group(
        backend, init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world, timeout=PG_TIMEOUT
    )
    try:
        tensor = torch.ones(size_bytes // 4, device=device)

        def work():
            for _ in range(calls):
                dist.all_reduce(tensor)
            if backend == "nccl":
                torch.cuda.synchronize(device)

        for _ in range(WARMUP_CALLS):
            work()
        dist.barrier()
        rates = [size_bytes * calls / s / 1e9 for s in timed(work)]
        dist.barrier()
        return rates
    finally:
        dist.destroy_process_group()


def _peer(backend: str, rank: int, world: int, port: int, size_bytes: int, calls: int) -> None:
    torch.set_num_threads(1)
    allreduce_rates(backend, rank, world, port, size_bytes, calls)


def allreduce_probe(backend: str, world: int, size_bytes: int, calls: int, start_method: str) -> dict:
    """Rank 0 here, the other ranks in child processes; the figure is rank 0's view."""
    port = free_port()
    context = multiprocessing.get_context(start_method)
    peers = [
        context.Process(target=_peer, args=(backend, rank, world, port, size_bytes, calls), daemon=True)
        for rank in range(1, world)
    ]
    for peer in peers:
        peer.start()
    try:
        rates = allreduce_rates(backend, 0, world, port, size_bytes, calls)
    finally:
        for peer in peers:
            peer.join(timeout=30)
            if peer.is_alive():
                peer.kill()
    failed = [peer.exitcode for peer in peers if peer.exitcode != 0]
    if failed:
        raise RuntimeError(f"a peer process ended with exit code {failed[0]}")
    return {**figure("GB/s", rates), "processes": world, "bytes": size_bytes}


def gloo_probe() -> dict:
    if not dist.is_available() or not dist.is_gloo_available():
        return {"skipped": "this torch has no gloo backend"}
    # Forked before any other probe ran: no thread pool exists yet that a fork could break.
    method = "fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn"
    return allreduce_probe("gloo", 2, GLOO_BYTES, GLOO_CALLS, method)


def nccl_probe() -> dict:
    if not torch.cuda.is_available():
        return {"skipped": "no CUDA GPU is visible"}
    if not dist.is_nccl_available():
        return {"skipped": "this torch has no NCCL backend"}
    # CUDA cannot be forked: the peer starts afresh. With one GPU the group has one process, whose
    # all-reduce still goes through NCCL's kernels on the GPU.
    return allreduce_probe("nccl", min(2, torch.cuda.device_count()), NCCL_BYTES, NCCL_CALLS, "spawn")


PROBES = {
    "gloo_allreduce": gloo_probe,
    "matmul_fp32": matmul_probe,
    "memory_copy": memory_probe,
    "python_loop": python_probe,
    "nccl_allreduce": nccl_probe,
}


def shape_name(processes: int, threads: int) -> str:
    return f"matmul_{processes}x{threads}"


def run_probes(names: list[str] | None = None, shape: tuple[int, int] | None = None) -> dict:
    torch.set_num_threads(1)
    started = time.perf_counter()
    probes = {}
    chosen = dict(PROBES)
    if shape is not None:  # first: its processes are forked before any probe here starts threads
        chosen = {shape_name(*shape): lambda: shaped_probe(*shape), **chosen}
    for name, probe in chosen.items():
        if names is not None and name not in names:
            continue
        try:
            probes[name] = probe()
        except Exception as exc:  # one broken probe must not hide the others
            last = traceback.format_exception_only(type(exc), exc)[-1].strip()
            probes[name] = {"error": last}
    return {
        "canary_version": CANARY_VERSION,
        "torch": torch.__version__,
        "wall_s": round(time.perf_counter() - started, 3),
        "probes": probes,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ddpbench.worker.canary", description=__doc__.splitlines()[0])
    parser.add_argument("--probes", default=None, help="comma-separated subset of " + ", ".join(PROBES))
    parser.add_argument(
        "--shape", default=None, metavar="PxT", help="add the shaped probe: P processes of T threads (e.g. 2x1)"
    )
    args = parser.parse_args(argv)
    shape = None
    if args.shape:
        try:
            shape = tuple(int(part) for part in args.shape.lower().split("x"))
        except ValueError:
            shape = ()
        if len(shape) != 2 or min(shape) < 1:
            parser.error(f"--shape must be PxT with P processes and T threads, both at least 1; got {args.shape!r}")
    names = args.probes.split(",") if args.probes else None
    if names is not None and shape is not None:
        names.append(shape_name(*shape))
    unknown = [name for name in names or () if name not in PROBES and (shape is None or name != shape_name(*shape))]
    if unknown:
        parser.error(f"unknown probe {unknown[0]!r}; valid: {', '.join(PROBES)}")
    json.dump(run_probes(names, shape), sys.stdout)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
