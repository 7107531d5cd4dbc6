"""Large records and traces built from real small ones, for benchmarks/scale.py and the tests.

A 1,024-rank run is the 2-rank fixture run (tests/fixtures/sweeps/cpu-mlp-with-failure) with its
ranks repeated: every rank keeps the real record's structure (checks, reducer timers, no_sync
replay, trace summary), its step times are drawn around the real ones, and ranks are spread over
nodes of 8 like a GPU cluster, with one slow rank so the report has a straggler to name. Traces
are the committed 2-GPU trace with its rank and clock offset changed per file.
"""

from __future__ import annotations

import os
import re
import sys

import msgspec
import numpy as np

try:
    from isal import igzip
except ImportError:
    import gzip as igzip

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from ddpbench.analysis.metrics import run_metrics  # noqa: E402
from ddpbench.records.schema import Metrics, NoSyncRank, NoSyncView, Record  # noqa: E402
from ddpbench.records.store import load_record, write_record  # noqa: E402

FIXTURE_SWEEP = os.path.join(REPO, "tests", "fixtures", "sweeps", "cpu-mlp-with-failure")
FIXTURE_TRACE = os.path.join(REPO, "tests", "fixtures", "traces", "nccl-ddp-2gpu-rank0.json.gz")
RANKS_PER_NODE = 8


def fixture_record(run_id: str) -> Record:
    return load_record(os.path.join(FIXTURE_SWEEP, "runs", f"{run_id}.json"))


def enlarge(
    base: Record,
    world_size: int,
    steps: int,
    run_id: str,
    seed: int = 0,
    slow_rank: int | None = None,
    slow_factor: float = 1.25,
) -> Record:
    """`base` (an ok record) as a run of `world_size` devices and `steps` timed steps."""
    rng = np.random.default_rng(seed)
    strategy = base.spec.strategy
    nnodes = max(1, world_size // RANKS_PER_NODE) if strategy == "ddp" else 1
    threads = base.spec.threads_per_rank * (world_size if strategy == "dp" else 1)
    spec = base.spec.replace(
        run_id=run_id,
        nproc=world_size // nnodes,
        nnodes=nnodes,
        threads_per_rank=threads,
        rdzv_endpoint="node-000:29500" if nnodes > 1 else None,
        rdzv_id="scale" if nnodes > 1 else None,
    )
    processes = world_size if strategy == "ddp" else 1
    typical = float(np.median(base.ranks[0].step_times_s))
    # Communication grows with the world size: weak scaling loses a little per doubling.
    centre = typical * (1 + 0.03 * np.log2(max(world_size, 1)))
    times = centre * rng.lognormal(0.0, 0.05, size=(processes, steps))
    if slow_rank is not None and slow_rank < processes:
        times[slow_rank] *= slow_factor
    record = msgspec.structs.replace(base, run_id=run_id, spec=spec)
    record.ranks = []
    for rank in range(processes):
        template = base.ranks[rank % len(base.ranks)]
        record.ranks.append(
            msgspec.structs.replace(
                template,
                rank=rank,
                local_rank=rank % spec.nproc,
                hostname=f"node-{rank // spec.nproc:03d}",
                step_times_s=times[rank].tolist(),
            )
        )
    window_s = float(times.max(axis=0).sum())
    metrics = run_metrics(times, window_s, spec.batch_size, world_size, base.metrics.units_per_sample)
    metrics.update(
        sample_unit=base.metrics.sample_unit,
        units_per_sample=base.metrics.units_per_sample,
        flops_per_sample=base.metrics.flops_per_sample,
        final_loss=base.metrics.final_loss,
    )
    record.metrics = msgspec.convert(metrics, Metrics)
    overlap = base.overlap
    if overlap is not None and strategy == "ddp":

        def repeat(items):
            return [items[rank % len(items)] for rank in range(processes)]

        trace = overlap.trace and msgspec.structs.replace(
            overlap.trace,
            paths=repeat(overlap.trace.paths),
            by_rank=[
                msgspec.structs.replace(view, rank=rank) for rank, view in enumerate(repeat(overlap.trace.by_rank))
            ],
        )
        no_sync = overlap.no_sync and replayed(overlap.no_sync, times, rng, slow_rank, slow_factor)
        if no_sync:
            # Each rank's replayed steps around its median: the straggler's source without an ablation.
            for rank, view in zip(record.ranks, no_sync.by_rank):
                noise = rng.lognormal(0.0, 0.02, size=view.steps)
                rank.no_sync_step_times_s = (view.no_sync_step_time_median_s * noise).tolist()
        reducer = overlap.reducer and msgspec.structs.replace(overlap.reducer, by_rank=repeat(overlap.reducer.by_rank))
        record.overlap = msgspec.structs.replace(overlap, trace=trace, no_sync=no_sync, reducer=reducer)
    return record


def replayed(view: NoSyncView, times: np.ndarray, rng, slow_rank: int | None, slow_factor: float) -> NoSyncView:
    """The no_sync replay of every rank: the base run's (without all-reduce), a little noise, and
    the slow rank as slow without communication as with it."""
    by_rank = []
    for rank in range(times.shape[0]):
        template = view.by_rank[0]
        alone = template.no_sync_step_time_median_s * rng.lognormal(0.0, 0.02)
        alone *= slow_factor if rank == slow_rank else 1.0
        with_comm = float(np.median(times[rank, : template.steps]))
        by_rank.append(
            NoSyncRank(
                step_time_median_s=with_comm,
                no_sync_step_time_median_s=alone,
                exposed_comm_s=with_comm - alone,
                steps=template.steps,
            )
        )
    return NoSyncView(by_rank=by_rank, exposed_comm_s_max=max(rank.exposed_comm_s for rank in by_rank))


def sweep_plan(largest: int, runs: int = 20) -> list[tuple[str, int]]:
    """(strategy, world size) of a sweep up to `largest` devices: local, DDP at every power of two,
    DataParallel on one node, then repeats of the largest DDP runs until there are `runs`."""
    ddp_sizes = [2**k for k in range(int(np.log2(largest)) + 1)]
    plan = [("local", 1)] + [("ddp", n) for n in ddp_sizes] + [("dp", n) for n in (1, 2, 4, 8) if n <= largest]
    repeats = sorted(ddp_sizes, reverse=True)
    index = 0
    while len(plan) < runs:
        plan.append(("ddp", repeats[index % len(repeats)]))
        index += 1
    return plan[:runs]


def build_sweep(
    out_dir: str, largest: int, steps: int, runs: int = 20, seed: int = 0, sidecar_min_values: int | None = None
) -> list[str]:
    """Write a synthetic sweep (records only) to `out_dir`; returns the record paths."""
    bases = {
        strategy: fixture_record(f"mlp-{strategy}-n{2 if strategy == 'ddp' else 1}")
        for strategy in ("local", "ddp", "dp")
    }
    paths, seen = [], {}
    for number, (strategy, world_size) in enumerate(sweep_plan(largest, runs)):
        repeat = seen.get((strategy, world_size), 0)
        seen[(strategy, world_size)] = repeat + 1
        run_id = f"mlp-{strategy}-n{world_size}" + (f"-r{repeat}" if repeat else "")
        slow = (world_size * 5) // 8 if strategy == "ddp" and world_size >= 4 else None
        record = enlarge(bases[strategy], world_size, steps, run_id, seed=seed * 1000 + number, slow_rank=slow)
        options = {} if sidecar_min_values is None else {"sidecar_min_values": sidecar_min_values}
        paths.append(write_record(record, out_dir, **options))
    return paths


def build_traces(
    out_dir: str, count: int, lag_rank: int | None = None, lag_ms: float = 5.0, source: str = FIXTURE_TRACE
) -> list[str]:
    """`count` rank files made from one real trace: its distributedInfo says rank r of `count`,
    and each file's clock is offset a little (one rank, `lag_rank`, by `lag_ms` more), so the
    cross-rank straggler view has something to find."""
    with open(source, "rb") as handle:
        text = igzip.decompress(handle.read())
    info = re.compile(rb'"distributedInfo": \{"backend": "nccl", "rank": 0, "world_size": 2')
    base = re.compile(rb'"baseTimeNanoseconds": (\d+)')
    base_ns = int(base.search(text).group(1))
    os.makedirs(out_dir, exist_ok=True)
    paths = []
    for rank in range(count):
        offset_ns = int((rank % 7) * 20_000 + (lag_ms * 1e6 if rank == lag_rank else 0))
        changed = info.sub(
            b'"distributedInfo": {"backend": "nccl", "rank": %d, "world_size": %d' % (rank, count), text, count=1
        )
        changed = base.sub(b'"baseTimeNanoseconds": %d' % (base_ns + offset_ns), changed, count=1)
        path = os.path.join(out_dir, f"rank-{rank}.pt.trace.json.gz")
        with open(path, "wb") as handle:
            handle.write(igzip.compress(changed))
        paths.append(path)
    return paths
