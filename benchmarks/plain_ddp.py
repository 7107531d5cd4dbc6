"""The textbook DDP training loop, sharing nothing with ddpbench but the model definition: the
reference that `harness_overhead.py` measures the harness against.

Launch: torchrun --standalone --nproc-per-node=N benchmarks/plain_ddp.py STEPS WARMUP THREADS BATCH
Trains the tiny MLP (workloads/mlp.py) on its own TensorDataset of random inputs and labels, one
long epoch, DistributedSampler with set_epoch(0), SGD with momentum, and prints one JSON line on
rank 0: {"throughput_samples_per_s": ...} = global samples in the barrier-aligned window / its
wall time, and "cpu_s_per_step": CPU time all ranks' processes used in the window, per step.
"""

import json
import sys
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

from workloads.mlp import NUM_CLASSES, SIZES, mlp


def main() -> None:
    steps, warmup, threads, batch = (int(value) for value in sys.argv[1:5])
    torch.set_num_threads(threads)
    dist.init_process_group("gloo")
    rank, world_size = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = DistributedDataParallel(mlp("tiny").model)  # the model definition is all that is shared
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    width = SIZES["tiny"][0]
    samples = batch * world_size * steps
    dataset = TensorDataset(torch.randn(samples, width), torch.randint(NUM_CLASSES, (samples,)))
    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank, shuffle=True, seed=0)
    loader = DataLoader(dataset, batch_size=batch, sampler=sampler, drop_last=True)
    sampler.set_epoch(0)
    for step, (inputs, targets) in enumerate(loader):
        if step == warmup:
            dist.barrier()
            start, cpu_start = time.perf_counter(), time.process_time()
        optimizer.zero_grad(set_to_none=True)
        F.cross_entropy(model(inputs), targets).backward()
        optimizer.step()
    dist.barrier()
    window_s, cpu_s = time.perf_counter() - start, time.process_time() - cpu_start
    cpu_by_rank = [None] * world_size
    dist.all_gather_object(cpu_by_rank, cpu_s)
    if rank == 0:
        print(
            json.dumps(
                {
                    "throughput_samples_per_s": batch * world_size * (steps - warmup) / window_s,
                    "cpu_s_per_step": sum(cpu_by_rank) / (steps - warmup),
                }
            )
        )
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
