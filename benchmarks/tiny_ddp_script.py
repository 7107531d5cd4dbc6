"""A tiny DDP training script for benchmarks/script_overhead.py: a small MLP, one optimizer step
per batch, and on rank 0 the duration of every step as the script itself measures it (one JSON
list on the last line). Run plainly under torchrun or by `ddpbench run --script`: it is the same
file either way."""

import json
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel


def main(steps: int, batch: int) -> None:
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    model = DistributedDataParallel(nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10)))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    loss_fn = nn.CrossEntropyLoss()
    inputs, targets = torch.randn(batch, 64), torch.randint(0, 10, (batch,))
    durations = []
    for _ in range(steps):
        started = time.perf_counter()
        optimizer.zero_grad()
        loss_fn(model(inputs), targets).backward()
        optimizer.step()
        durations.append(time.perf_counter() - started)
    if dist.get_rank() == 0:
        print(json.dumps(durations), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]))
