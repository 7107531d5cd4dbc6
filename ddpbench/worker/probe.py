"""The process's own probe: a short, fixed piece of work every process of a run (the `local`
reference, each rank) times at its own thread count on its own device, before the warm-up and
after the timed window. On a machine whose speed flips from one process to the next, a workload's
throughput alone cannot tell a slow process from slow code; the same fixed work, timed inside the
same process, can (`ddpbench.analysis.probes` compares the runs of a sweep).

The work does not depend on the workload: float32 matrix products (compute) and a copy of a buffer
larger than the caches together with its copy (memory bandwidth), each the median of a few repetitions after one untimed
call. Sized to take about a tenth of a second on a CPU core; on a GPU the same kinds of work on
the device, synchronized around each repetition.
"""

from __future__ import annotations

import statistics
import time

import torch

PROBE_VERSION = 1
REPEATS = 4
CPU_MATMUL_SIZE, CPU_MATMUL_PRODUCTS = 256, 8
CPU_COPY_BYTES = 24 * 2**20
GPU_MATMUL_SIZE, GPU_MATMUL_PRODUCTS = 4096, 8
GPU_COPY_BYTES = 512 * 2**20


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)  # sync point: a repetition ends when the device's work does


def _median_seconds(work, device: torch.device) -> float:
    work()  # untimed: first touch, caches, lazy kernel setup
    _sync(device)
    seconds = []
    for _ in range(REPEATS):
        started = time.perf_counter()
        work()
        _sync(device)
        seconds.append(time.perf_counter() - started)
    return statistics.median(seconds)


def _rates(device: torch.device) -> tuple[float, float]:
    """(GFLOP/s of the matrix products, GB/s of the copy) on `device`."""
    cuda = device.type == "cuda"
    size, products = (GPU_MATMUL_SIZE, GPU_MATMUL_PRODUCTS) if cuda else (CPU_MATMUL_SIZE, CPU_MATMUL_PRODUCTS)
    a = torch.rand(size, size, device=device)
    b = torch.rand(size, size, device=device)
    out = torch.empty(size, size, device=device)

    def matmuls():
        for _ in range(products):
            torch.mm(a, b, out=out)

    matmul_s = _median_seconds(matmuls, device)
    copy_bytes = GPU_COPY_BYTES if cuda else CPU_COPY_BYTES
    source = torch.ones(copy_bytes // 4, device=device)
    target = torch.empty_like(source)
    copy_s = _median_seconds(lambda: target.copy_(source), device)
    # Bytes read and written, as memory bandwidth is usually counted.
    return 2 * size**3 * products / matmul_s / 1e9, 2 * copy_bytes / copy_s / 1e9


def process_probe(device: torch.device) -> dict:
    """{matmul_gflops, copy_gbps, seconds, threads, device}: the rates of the fixed work on this
    process's device at its current thread count, and the wall time the probe took."""
    started = time.perf_counter()
    matmul_gflops, copy_gbps = _rates(device)
    if device.type == "cuda":
        torch.cuda.empty_cache()  # the probe's buffers are no part of the run's memory
    return {
        "version": PROBE_VERSION,
        "matmul_gflops": matmul_gflops,
        "copy_gbps": copy_gbps,
        "seconds": time.perf_counter() - started,
        "threads": torch.get_num_threads(),
        "device": device.type,
    }
