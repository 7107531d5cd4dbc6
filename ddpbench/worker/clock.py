"""Step timestamps: the only thing the hot loop does besides training.

`mark()` is called at the start of every timed step and once after the last, so step i lasts
from mark i to mark i+1. `mark_data()` is called once per step, the moment its batch is in hand,
so step i waited for data from mark i to data mark i. On GPUs a mark records a CUDA event on the
current stream: it costs microseconds and never waits for the GPU. A data mark enqueues no work
of its own, so on the device it lands right after the previous step's last kernel when the host
ran ahead (a wait of zero), and later by as long as the device sat idle for the batch when it did
not. The events are read only in `step_times_s()` and `data_times_s()`, after the window, so no
synchronize ever happens inside the loop. On CPU a mark is perf_counter().

With `counters` (`ddpbench.host.cpu_denied`), each `mark()` also takes the kernel's reading of the
rank's CPU (a few microseconds: open files read again), so every step has its time on a core and
its waiting for one beside its length.
"""

from __future__ import annotations

import time

import torch

from ddpbench.host.cpu_denied import CpuCounters, StepCounters


class StepClock:
    def __init__(self, device: torch.device, counters: CpuCounters | None = None):
        self.on_cuda = device.type == "cuda"
        self.marks: list = []
        self.data_marks: list = []
        self.cpu = StepCounters(counters) if counters is not None else None

    def _now(self):
        if self.on_cuda:
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            return event
        return time.perf_counter()

    def mark(self) -> None:
        self.marks.append(self._now())
        if self.cpu is not None:
            self.cpu.mark()

    def mark_data(self) -> None:
        """The current step's batch is in hand (call once per step, after its `mark()`)."""
        self.data_marks.append(self._now())

    def _seconds(self, start, end) -> float:
        return start.elapsed_time(end) / 1000.0 if self.on_cuda else end - start

    def _read(self, starts: list, ends: list) -> list[float]:
        if self.on_cuda:
            # Sync point: wait for the last event once, after the window, then read all of them.
            self.marks[-1].synchronize()
        return [self._seconds(start, end) for start, end in zip(starts, ends)]

    def step_times_s(self) -> list[float]:
        return self._read(self.marks, self.marks[1:])

    def data_times_s(self) -> list[float]:
        """Per step with a data mark: its start to its batch in hand."""
        return self._read(self.marks, self.data_marks)
