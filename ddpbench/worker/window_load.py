"""The machine's load over a timed window, seen by local rank 0 of each node (the others do
nothing): a sample before the window's opening barrier and one after its closing barrier, so the
readings themselves (a walk over /proc, an NVML call) never land inside a timed step."""

from __future__ import annotations

import os

import torch

from ddpbench.host import load as machine_load


class WindowLoad:
    def __init__(self, local_rank: int, device: torch.device, devices: list[torch.device], threads: int, workers: int):
        self.watching = local_rank == 0
        if not self.watching:
            return
        local = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
        # What the run asks of the node's CPUs: each process's threads on CPU, one host thread per
        # process on GPUs; each data loader worker is a process of its own.
        self.wanted = local * ((threads if device.type == "cpu" else 1) + workers)
        # torchrun's agent started this process: the node's ranks and their loader workers are under it.
        self.root = os.getppid()
        self.uuids = {}
        if device.type == "cuda":
            indices = sorted({d.index for d in devices} | set(range(min(local, torch.cuda.device_count()))))
            self.uuids = {i: str(torch.cuda.get_device_properties(i).uuid) for i in indices}
        self.first = self.first_gpus = None

    def start(self) -> None:
        if self.watching:
            self.first = machine_load.sample(self.root)
            self.first_gpus = self._gpus(self.first)

    def _gpus(self, cpu: machine_load.CpuSample | None) -> tuple[list[dict], str | None]:
        """The GPUs' readings; the run's own processes come from the CPU sample's walk over /proc."""
        return machine_load.gpu_readings(self.uuids, cpu.own_pids if cpu else set())

    def finish(self) -> dict | None:
        """This node's `machine_load` (with `busy` and `why`), or None on other ranks and off Linux."""
        if not self.watching or self.first is None:
            return None
        last = machine_load.sample(self.root)
        if last is None:
            return None
        load = machine_load.cores_over(self.first, last, self.wanted)
        if self.uuids:
            (first, first_note), (second, second_note) = self.first_gpus, self._gpus(last)
            load["gpus"] = machine_load.merge_gpu(first, second)
            load["gpu_note"] = first_note or second_note
        return machine_load.judge(load)
