"""StepClock's data marks on CPU: each step's wait for its batch runs from the step's start mark
to its data mark, on the same clock as the step times (a logic check: the sleeps are far longer
than the clock's resolution, and the bounds leave room for a loaded machine)."""

import time

import pytest
import torch

from ddpbench.worker.clock import StepClock
from ddpbench.worker.main import data_wait

WAIT_S, WORK_S = 0.02, 0.01


def test_the_data_wait_is_the_steps_start_to_its_batch_in_hand():
    clock = StepClock(torch.device("cpu"))
    clock.mark()
    for _ in range(2):
        time.sleep(WAIT_S)  # stands in for a loader that keeps the step waiting
        clock.mark_data()
        time.sleep(WORK_S)  # the step's own work
        clock.mark()
    data_s, step_s = clock.data_times_s(), clock.step_times_s()
    assert len(data_s) == len(step_s) == 2
    for waited, step in zip(data_s, step_s):
        assert WAIT_S <= waited < step
        assert step - waited >= WORK_S  # the work after the batch arrived is not counted as waiting


def test_the_record_keeps_a_mean_and_a_median_of_the_waits_only():
    summary = data_wait([0.001, 0.002, 0.009])
    assert summary == {"data_wait_mean_s": pytest.approx(0.004), "data_wait_p50_s": 0.002}
    assert data_wait([]) == {"data_wait_mean_s": None, "data_wait_p50_s": None}
