"""The textbook DDP loop with no harness around it, for `harness_overhead.py` to compare against.

Launch: torchrun --standalone --nproc-per-node=N benchmarks/plain_ddp.py WORKLOAD STEPS WARMUP THREADS
Prints one JSON line on rank 0: {"throughput_samples_per_s": ...}, measured as ddpbench does
(global samples in a barrier-aligned window / its wall time).
"""
import json
import sys
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler

from ddpbench.worker.workload import build_workload


def main() -> None:
    workload_name, steps, warmup, threads = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    torch.set_num_threads(threads)
    dist.init_process_group("gloo")
    rank, world_size = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    workload = build_workload(workload_name, "tiny", None)
    dataset = workload.make_dataset(workload.batch_size * world_size * 10)
    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank, shuffle=True, seed=0)
    loader = DataLoader(dataset, batch_size=workload.batch_size, sampler=sampler, drop_last=True)
    model = DDP(workload.model)
    optimizer = workload.make_optimizer(model.parameters())

    def batches():
        epoch = 0
        while True:
            sampler.set_epoch(epoch)
            yield from loader
            epoch += 1

    data = batches()
    for step in range(steps):
        if step == warmup:
            dist.barrier()
            start = time.perf_counter()
        inputs, targets = next(data)
        optimizer.zero_grad(set_to_none=True)
        workload.loss(model(inputs), targets).backward()
        optimizer.step()
    dist.barrier()
    window_s = time.perf_counter() - start
    if rank == 0:
        samples = workload.batch_size * world_size * (steps - warmup)
        print(json.dumps({"throughput_samples_per_s": samples / window_s}))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
