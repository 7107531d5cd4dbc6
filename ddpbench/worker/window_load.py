"""The machine's share of a timed window, for a workload's ranks and a script's alike.

- `WindowLoad`: the machine's load over the window, seen by local rank 0 of each node (the others do
  nothing): a sample before the window's opening barrier and one after its closing barrier, so the
  readings themselves (a walk over /proc, an NVML call) never land inside a timed step.
- `window_cpu`: what the kernel counted of a rank's CPU per timed step (`ddpbench.host.cpu_denied`).
- `start_up`: what the run cost before its window opened.
- `add_ranks`: the ranks' results into the record, with the busy mark from their own counters.
"""

from __future__ import annotations

import os
import time

import msgspec
import torch

from ddpbench.analysis.cpu_denied import judge_busy
from ddpbench.config.channels import LAUNCHED_AT_ENV
from ddpbench.host import load as machine_load
from ddpbench.host.cpu_denied import CpuCounters
from ddpbench.records.schema import MachineLoad, RankResult, Record, StartUp
from ddpbench.worker.clock import StepClock

RANK_FIELDS = set(RankResult.__struct_fields__)


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


def start_up(rank_start: str | None, local_rank: int, distributed: bool) -> dict | None:
    """What the run cost before its timed window (local rank 0 reads it, before the opening barrier):
    the wall time since the launcher started its processes, and the CPU-seconds of the run's
    processes on this node (under torchrun, its agent and every rank under it)."""
    if local_rank != 0:
        return None
    launched = os.environ.get(LAUNCHED_AT_ENV)
    root = os.getppid() if distributed else os.getpid()
    return {
        "rank_start": rank_start,
        "to_first_step_s": time.time() - float(launched) if launched else None,
        "cpu_s": machine_load.tree_cpu_s(root),
    }


def window_cpu(clock: StepClock, counters: CpuCounters | None) -> dict | None:
    """The record's `cpu` of a rank: the kernel's counters per timed step; None where not read."""
    steps = clock.cpu.per_step() if clock.cpu is not None and counters is not None else None
    if steps is None:
        return None
    return {
        **steps,
        "threads": counters.counts["threads"],
        "comm_threads": counters.counts["comm"],
        "loader_processes": counters.counts["loader_processes"],
        "quota_cores": counters.quota,
        "cgroup": counters.cgroup,
    }


def add_ranks(record: Record, results: list[dict]) -> None:
    """The ranks' results into the record, each node's load judged busy from its ranks' own counters
    where they were read (other processes took a part of some rank's waiting for a core beyond noise:
    one rule, `ddpbench.analysis.cpu_denied`), the busiest node's as the run's, and local rank 0's
    start-up."""

    def ranks() -> list[RankResult]:
        return [msgspec.convert({k: v for k, v in r.items() if k in RANK_FIELDS}, RankResult) for r in results]

    record.ranks = ranks()
    counted = judge_busy(record)
    if counted is not None:
        for result in results:
            load = result.get("machine_load")
            if load is not None:
                result["machine_load"] = machine_load.judge(load, counted.get(load["hostname"]), counted=True)
        record.ranks = ranks()
    record.machine_load = msgspec.convert(
        machine_load.busiest([r.get("machine_load") for r in results]), MachineLoad | None
    )
    record.start_up = msgspec.convert(results[0].get("start_up"), StartUp | None)
