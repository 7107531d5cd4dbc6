"""Step timestamps: the only thing the hot loop does besides training.

`mark()` is called at the start of every timed step and once after the last, so step i lasts
from mark i to mark i+1. On GPUs a mark records a CUDA event on the current stream: it costs
microseconds and never waits for the GPU. The events are read only in `step_times_s()`, after the
window, so no synchronize ever happens inside the loop. On CPU a mark is perf_counter().
"""

from __future__ import annotations

import time

import torch


class StepClock:
    def __init__(self, device: torch.device):
        self.on_cuda = device.type == "cuda"
        self.marks: list = []

    def mark(self) -> None:
        if self.on_cuda:
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            self.marks.append(event)
        else:
            self.marks.append(time.perf_counter())

    def step_times_s(self) -> list[float]:
        if self.on_cuda:
            # Sync point: wait for the last event once, after the window, then read all of them.
            self.marks[-1].synchronize()
            return [start.elapsed_time(end) / 1000.0 for start, end in zip(self.marks, self.marks[1:])]
        return [end - start for start, end in zip(self.marks, self.marks[1:])]
