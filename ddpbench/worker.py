"""The process that trains, one per device: `python -m ddpbench.worker --spec-json JSON`.

Under torchrun (strategy ddp) it does DDP the textbook way: init_process_group (nccl on GPUs,
gloo on CPU), device from LOCAL_RANK, DDP(model, device_ids=[local_rank]), a DistributedSampler
with set_epoch every epoch. Started plainly (strategy local) it runs the same loop on one device
with no wrapper. Phases: warm-up (never timed) -> timed window -> checks -> gather to rank 0,
which alone writes the record.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import socket
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist
from torch.distributed.elastic.multiprocessing.errors import record as record_errors_for_torchrun
from torch.utils.data import DistributedSampler
from torch.utils.data.dataloader import default_collate

from ddpbench import checks
from ddpbench.clock import StepClock
from ddpbench.data import endless_batches, make_loader
from ddpbench.environment import host_facts, torch_facts
from ddpbench.metrics import run_metrics
from ddpbench.record import new_record, utc_now, write_record
from ddpbench.spec import RunSpec
from ddpbench.training import (flops_per_sample, make_precision, to_device, train_step,
                               wrap_data_parallel, wrap_ddp)
from ddpbench.workload import build_workload

# Synthetic datasets hold this many steps of data per epoch, so runs cross epoch boundaries
# and set_epoch reshuffling is exercised and checked.
SYNTHETIC_STEPS_PER_EPOCH = 10


class RecordingSampler(DistributedSampler):
    """A DistributedSampler that remembers the indices it actually handed the loader in the
    first two epochs: the shard checks look at what training read, not at a recomputation."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.indices_by_epoch: dict[int, list[int]] = {}

    def __iter__(self):
        indices = list(super().__iter__())
        if len(self.indices_by_epoch) < 2:
            self.indices_by_epoch[self.epoch] = indices
        return iter(indices)


class Rank:
    """Where this process sits in the job, read from torchrun's environment variables."""

    def __init__(self, spec: RunSpec):
        self.distributed = spec.strategy == "ddp"
        self.data_parallel_devices = spec.nproc if spec.strategy == "dp" else 1
        if self.distributed and "RANK" not in os.environ:
            raise RuntimeError("strategy ddp must be launched by torchrun (RANK is not set)")
        self.rank = int(os.environ.get("RANK", 0))
        self.local_rank = int(os.environ.get("LOCAL_RANK", 0))
        self.world_size = int(os.environ.get("WORLD_SIZE", 1))
        if spec.device == "cuda":
            # One process per GPU: the device comes from LOCAL_RANK, set before any CUDA work.
            # (DataParallel's one process uses LOCAL_RANK 0 = its first device, where outputs gather.)
            torch.cuda.set_device(self.local_rank)
            self.device = torch.device("cuda", self.local_rank)
        else:
            self.device = torch.device("cpu")

    @property
    def is_writer(self) -> bool:
        return self.rank == 0


def sync_device(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def window_edge(rank: Rank) -> None:
    """Align all ranks at a window edge. Sync point: drain queued GPU work first so the window's
    wall time covers exactly the timed steps, then a barrier so every rank starts and ends together."""
    sync_device(rank.device)
    if rank.distributed:
        dist.barrier()


def peak_memory(device: torch.device) -> tuple[int, str]:
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device), "cuda_max_memory_allocated"
    # Linux reports ru_maxrss in KiB.
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024, "process_max_rss"


def progress_bar(spec: RunSpec, rank: Rank):
    from tqdm import tqdm

    # Rank 0 only, and only when the launcher saw a terminal: no bar noise in logs and CI.
    show = rank.is_writer and os.environ.get("DDPBENCH_PROGRESS") == "1"
    return tqdm(total=spec.steps, desc=f"{spec.strategy} {spec.workload} x{spec.world_size}",
                unit="step", mininterval=0.5, disable=not show, file=sys.stderr, leave=False)


def train_and_measure(spec: RunSpec, rank: Rank) -> tuple[RunSpec, dict, dict]:
    torch.set_num_threads(spec.threads_per_rank)
    torch.manual_seed(spec.seed)  # same initial weights everywhere; DDP also broadcasts rank 0's
    workload = build_workload(spec.workload, spec.size, spec.data_dir)
    spec = spec.replace(batch_size=spec.batch_size or workload.batch_size)

    # DataParallel takes the global batch in one forward and splits it across its devices.
    loader_batch = spec.batch_size * rank.data_parallel_devices
    dataset = workload.make_dataset(loader_batch * rank.world_size * SYNTHETIC_STEPS_PER_EPOCH)
    loader, sampler = make_loader(dataset, loader_batch, rank.world_size, rank.rank, spec.seed,
                                  spec.num_workers, pin_memory=rank.device.type == "cuda",
                                  sampler_class=RecordingSampler)
    model = workload.model.to(rank.device)
    flops_inputs, flops_targets = to_device(default_collate([dataset[0], dataset[1]]), rank.device)
    flops = flops_per_sample(model, workload.loss, flops_inputs, flops_targets)
    if rank.distributed:
        model = wrap_ddp(model, rank.device, spec.ddp)
    elif spec.strategy == "dp":
        model = wrap_data_parallel(model, rank.device, spec.nproc)
    optimizer = workload.make_optimizer(model.parameters())
    precision = make_precision(spec.precision, rank.device)
    epochs_seen: list[int] = []
    batches = endless_batches(loader, sampler, epochs_seen)
    clock = StepClock(rank.device)

    def step() -> torch.Tensor:
        inputs, targets = to_device(next(batches), rank.device)
        return train_step(model, optimizer, workload.loss, precision, inputs, targets)

    with progress_bar(spec, rank) as bar:
        for _ in range(spec.warmup):
            step()
            bar.update()
        window_edge(rank)
        window_start = time.perf_counter()
        clock.mark()
        for _ in range(spec.timed_steps):
            loss = step()
            clock.mark()
            bar.update()
        window_edge(rank)
        window_s = time.perf_counter() - window_start

    step_times_s = clock.step_times_s()
    result = {
        "rank": rank.rank,
        "local_rank": rank.local_rank,
        "hostname": socket.gethostname(),
        "device": str(rank.device),
        "threads": torch.get_num_threads(),
        "step_times_s": step_times_s,
        "final_loss": float(loss),  # sync point, after the window
        "epochs_started": len(epochs_seen),
    }
    if rank.distributed:
        inputs, targets = to_device(next(batches), rank.device)
        result["gradients_averaged"] = checks.gradients_averaged(
            model, inputs, targets, workload.loss, rank.world_size, spec.ddp.comm_hook)
    result["param_digest"] = checks.parameter_digest(model)
    result["peak_memory_bytes"], result["peak_memory_kind"] = peak_memory(rank.device)
    result["sampler_indices"] = [sampler.indices_by_epoch.get(e) for e in (0, 1)]
    shared = {"window_s": window_s, "dataset_length": len(dataset), "flops_per_sample": flops,
              "sample_unit": workload.sample_unit, "units_per_sample": workload.units_per_sample}
    return spec, result, shared


def gather_to_writer(result: dict, rank: Rank) -> list[dict]:
    if not rank.distributed:
        return [result]
    gathered = [None] * rank.world_size if rank.is_writer else None
    dist.gather_object(result, gathered, dst=0)
    return gathered


def build_record(spec: RunSpec, results: list[dict], shared: dict, started_at: str) -> dict:
    results = sorted(results, key=lambda r: r["rank"])
    step_times = [r["step_times_s"] for r in results]
    metrics = run_metrics(step_times, shared["window_s"], spec.batch_size, spec.world_size,
                          shared["units_per_sample"])
    metrics.update({key: shared[key] for key in ("sample_unit", "units_per_sample", "flops_per_sample")})
    metrics["final_loss"] = results[0]["final_loss"]

    indices_epoch0 = [r["sampler_indices"][0] for r in results]
    run_checks = checks.shard_checks(indices_epoch0, shared["dataset_length"])
    run_checks["reshuffled_each_epoch"] = checks.reshuffled_each_epoch(*results[0]["sampler_indices"])
    if spec.strategy == "ddp":
        run_checks["replicas_in_sync"] = checks.replicas_in_sync([r["param_digest"] for r in results])
        per_rank = [r["gradients_averaged"] for r in results]
        run_checks["gradients_averaged"] = {
            "ok": all(c["ok"] for c in per_rank),
            "max_relative_error": max(c["relative_error"] for c in per_rank),
            "tolerance": per_rank[0]["tolerance"],
        }

    record = new_record(spec.to_dict(), "ok", env={**host_facts(), **torch_facts()})
    record["started_at"] = started_at
    record["metrics"] = metrics
    record["checks"] = run_checks
    record["ranks"] = [{key: value for key, value in r.items()
                        if key not in ("sampler_indices", "gradients_averaged")} for r in results]
    return record


@record_errors_for_torchrun
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--spec-json", required=True, help="the RunSpec as JSON (written by ddpbench run)")
    spec = RunSpec.from_dict(json.loads(parser.parse_args(argv).spec_json))
    started_at = utc_now()
    rank = Rank(spec)
    if rank.distributed:
        dist.init_process_group(backend=spec.backend, timeout=timedelta(seconds=spec.pg_timeout_s))
    try:
        spec, result, shared = train_and_measure(spec, rank)
        results = gather_to_writer(result, rank)
        if rank.is_writer:  # only rank 0 writes files
            write_record(build_record(spec, results, shared, started_at), spec.out_dir)
    finally:
        if rank.distributed:
            dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
