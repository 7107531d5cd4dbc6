"""The process's own probe: a short, fixed piece of work every process of a run (the `local`
reference, each rank) times at its own thread count on its own device, before the warm-up and
after the timed window. On a machine whose speed flips from one process to the next, a workload's
throughput alone cannot tell a slow process from slow code; the same fixed work, timed inside the
same process, can (`ddpbench.analysis.probes` compares the runs of a sweep).

The work does not depend on the workload: float32 matrix products (compute) and a copy of a buffer
that, with its copy, is larger than the caches (memory bandwidth), taken in turns after one untimed
call of each; on a GPU the same kinds of work on the device, synchronized around each
repetition. One reading takes 50-70 ms of a CPU core here, so that two cost about 1-3 % of a
short run. That is less than one period of Linux's default CPU quota (100 ms): a process held
to a quota in such periods pauses at most once in a reading, inside one kind of work or in
neither, and its probe reads the quota only in part. A process slowed evenly (a slower core, a
quota in short periods, a flip of this VM's speed) reads it in full.
"""

from __future__ import annotations

import time

import torch

from ddpbench.host.cpu_denied import difference

PROBE_VERSION = 1
REPEATS = 5
CPU_MATMUL_SIZE, CPU_MATMUL_PRODUCTS = 256, 8
CPU_COPY_BYTES = 24 * 2**20
GPU_MATMUL_SIZE, GPU_MATMUL_PRODUCTS = 4096, 8
GPU_COPY_BYTES = 512 * 2**20


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)  # sync point: a repetition ends when the device's work does


def _timed(work, device: torch.device) -> float:
    started = time.perf_counter()
    work()
    _sync(device)
    return time.perf_counter() - started


def _rates(device: torch.device) -> tuple[float, float]:
    """(GFLOP/s of the matrix products, GB/s of the copy) on `device`: all repetitions' work over
    all their time, the two kinds taken in turns. Summed, not a median of short repetitions: a
    process held back in slices (a CPU quota, a shared core) loses its pauses inside some
    repetitions, and only the sum keeps them."""
    cuda = device.type == "cuda"
    size, products = (GPU_MATMUL_SIZE, GPU_MATMUL_PRODUCTS) if cuda else (CPU_MATMUL_SIZE, CPU_MATMUL_PRODUCTS)
    a = torch.rand(size, size, device=device)
    b = torch.rand(size, size, device=device)
    out = torch.empty(size, size, device=device)
    copy_bytes = GPU_COPY_BYTES if cuda else CPU_COPY_BYTES
    source = torch.ones(copy_bytes // 4, device=device)
    target = torch.empty_like(source)

    def matmuls():
        for _ in range(products):
            torch.mm(a, b, out=out)

    def copy():
        target.copy_(source)

    matmuls(), copy()  # untimed: first touch, caches, lazy kernel setup
    _sync(device)
    matmul_s = copy_s = 0.0
    for _ in range(REPEATS):
        matmul_s += _timed(matmuls, device)
        copy_s += _timed(copy, device)
    # Bytes read and written, as memory bandwidth is usually counted.
    return 2 * size**3 * products * REPEATS / matmul_s / 1e9, 2 * copy_bytes * REPEATS / copy_s / 1e9


def process_probe(device: torch.device, counters=None) -> dict:
    """{matmul_gflops, copy_gbps, seconds, threads, device, waited_s}: the rates of the fixed work on
    this process's device at its current thread count, the wall time the probe took, and (with
    `counters`, `ddpbench.host.cpu_denied`) how much of it the probing thread waited for a core."""
    first = counters.read() if counters is not None else None
    started = time.perf_counter()
    # Its random operands come from a forked generator: the run's (a script's own) random numbers
    # are what they would be without the probe.
    devices = []
    if device.type == "cuda":
        devices = [device.index if device.index is not None else torch.cuda.current_device()]
    with torch.random.fork_rng(devices=devices):
        matmul_gflops, copy_gbps = _rates(device)
    if device.type == "cuda":
        torch.cuda.empty_cache()  # the probe's buffers are no part of the run's memory
    seconds = time.perf_counter() - started
    counted = difference(first, counters.read() if counters is not None else None)
    return {
        "version": PROBE_VERSION,
        "matmul_gflops": matmul_gflops,
        "copy_gbps": copy_gbps,
        "seconds": seconds,
        "threads": torch.get_num_threads(),
        "device": device.type,
        "waited_s": None if counted is None else counted["waited_s"],
    }
