"""The overlap phases against the installed torch: the replay compares like with like, and the
reducer timers describe the replayed iterations, not DDP's warm-up."""

import os
import time
import traceback

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from ddpbench.worker import phases
from ddpbench.worker.ablation import LEAD_IN_PER_SEGMENT, MARKED_PER_SEGMENT

# The reducer phase is checked against measured backward times, in one process on one thread: a
# test that launches processes beside it would blur them; an in-process test takes the other core.
# Both tests that read `phase_results` are marked `one_core`: either may be the one whose setup makes it.


def _small_then_big(rank, store_path, results):
    dist.init_process_group("gloo", init_method=f"file://{store_path}", rank=rank, world_size=1)
    torch.set_num_threads(1)
    try:
        torch.manual_seed(0)
        # Backward of the big batch is ~1000x the tiny one's work: timing noise cannot blur the two.
        small, big = torch.randn(1, 256), torch.randn(2048, 256)

        def model():
            ddp = torch.nn.parallel.DistributedDataParallel(
                torch.nn.Sequential(torch.nn.Linear(256, 2048), torch.nn.ReLU(), torch.nn.Linear(2048, 1))
            )
            ddp._set_ddp_runtime_logging_sample_rate(phases.DDP_RUNTIME_LOGGING_SAMPLE_RATE)  # as wrap_ddp does
            return ddp

        backward_s = []

        def stepper(ddp):
            def step(batch):
                out = ddp(batch).sum()
                started = time.perf_counter()
                out.backward()
                backward_s.append(time.perf_counter() - started)

            return step

        # A warm-up of 14 tiny steps, then the phase over big batches only.
        warmed = model()
        for _ in range(14):
            stepper(warmed)(small)
        running_before = warmed._get_ddp_logging_data()["avg_backward_compute_time"] / 1e9
        backward_s.clear()
        phase = phases.reducer_phase(warmed, stepper(warmed), [big] * 8)
        # The covered iterations are the priming step and the 8 batches: the first 9 backwards.
        results["measured_backward_s"] = sum(backward_s[:9]) / 9
        results["phase"] = phase
        results["small_only_s"] = running_before
        results["plain_running_mean_s"] = warmed._get_ddp_logging_data()["avg_backward_compute_time"] / 1e9
    finally:
        dist.destroy_process_group()


def _every_phase(rank, folder, results):
    """Each phase below in turn, each in a process group of its own, in one process: starting it
    (and importing torch there) is most of the time. A phase that fails keeps its traceback for
    its own test, and the others still run."""
    for name, run in PHASES.items():
        found = {}
        try:
            run(rank, os.path.join(folder, f"store-{name}"), found)
            results[name] = found
        except Exception:
            results[name] = {"error": traceback.format_exc()}


@pytest.fixture(scope="module")
def phase_results(tmp_path_factory):
    """Phase name -> what its run in a real (one-rank) process group found."""
    folder = str(tmp_path_factory.mktemp("phases"))
    with mp.Manager() as manager:
        results = manager.dict()
        mp.spawn(_every_phase, args=(folder, results), nprocs=1)
        return dict(results)


def results_of(phase_results, name) -> dict:
    results = phase_results[name]
    assert "error" not in results, results["error"]
    return results


@pytest.mark.launches
@pytest.mark.one_core
def test_reducer_phase_describes_the_replayed_iterations_only(phase_results):
    results = results_of(phase_results, "reducer")
    phase = results["phase"]
    assert phase["iterations"] == 9 and "warm-up excluded" in phase["covers"]
    measured, small = results["measured_backward_s"], results["small_only_s"]
    # not chance: a thousand times the work, checked at a factor of five
    assert measured > 5 * small  # the two kinds of step really differ
    # The phase's figure describes the very iterations it covered: DDP's backward compute time is
    # most of each backward's wall time measured around the same calls (one rank: no waiting).
    # DDP's own running average still mixes in the ten tiny warm-up steps, so it is further off.
    # not chance: DDP's timer runs inside the very calls the wall clock brackets
    assert 0.3 * measured < phase["backward_compute_time_s"] <= 1.05 * measured
    # not chance: the running mean holds ten steps of a thousandth of the work
    assert abs(phase["backward_compute_time_s"] - measured) < abs(results["plain_running_mean_s"] - measured)


def test_recorded_iteration_count_follows_torchs_sampling_rule():
    assert phases.recorded_before(6) == 6  # iterations 1-6, all among the first ten
    assert phases.recorded_before(10) == 10
    assert phases.recorded_before(25) == 11  # 1-10, plus iteration 25 logged by the first rate-1 forward


def _timeline_calls(rank, store_path, world_size, results):
    from ddpbench.worker import grad_timeline

    barrier, mark = dist.barrier, grad_timeline.GradTimeline.step
    dist.init_process_group("gloo", init_method=f"file://{store_path}", rank=rank, world_size=1)
    torch.set_num_threads(1)
    try:
        torch.manual_seed(0)
        module = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
        ddp = torch.nn.parallel.DistributedDataParallel(module)
        optimizer = torch.optim.SGD(ddp.parameters(), lr=0.01)
        calls = []

        def step_through(model, name):
            def step_on(batch):
                calls.append(name)
                optimizer.zero_grad()
                model(batch).sum().backward()
                optimizer.step()

            return step_on

        def job_step(batch):
            # DDP's own flag: False inside no_sync(), where no all-reduce runs.
            step_through(ddp, "ddp" if ddp.require_backward_grad_sync else "no_sync")(batch)

        # Log the barriers and which steps the timeline marks, in the order they happen.
        grad_timeline.dist.barrier = lambda *args, **kwargs: (calls.append("barrier"), barrier(*args, **kwargs))[1]
        grad_timeline.GradTimeline.step = lambda self, *args: (calls.append("marked:"), mark(self, *args))[1]
        batches = iter(lambda: torch.randn(4, 8), None)
        found = grad_timeline.timeline_phase(
            ddp,
            optimizer,
            job_step,
            batches,
            torch.device("cpu"),
            blocks=2,
            rank=0,
            world_size=world_size,
            solo_step_on=step_through(module, "solo"),
            unwrapped_step_on=step_through(module, "unwrapped"),
        )
        results["calls"] = calls
        results["ladder_blocks"] = found["ladder"]["blocks"]
        results["lead_decided"] = found["ladder"]["lead_decided"]
        results["marked"] = {kind: len(found.get(kind, [])) for kind in LADDER_KINDS}
        results["blocks"] = {kind: [step["block"] for step in found.get(kind, [])] for kind in LADDER_KINDS}
        record = grad_timeline.timeline_record([{"rank": 0, "timeline": found}])
        results["lead_in_recorded"] = record.ddp_lead_in
        # The timeline's hooks sit on the module, so they mark the bare module's steps too.
        results["unwrapped_fully_marked"] = [
            None not in (step.forward_start_s, step.forward_end_s, step.optimizer_end_s, *step.grad_ready_s)
            for step in record.by_rank[0].unwrapped
        ]
    finally:
        dist.barrier, grad_timeline.GradTimeline.step = barrier, mark
        dist.destroy_process_group()


# Run by _every_phase: the reducer phase, and the timeline told world sizes 1 and 2.
PHASES = {
    "reducer": _small_then_big,
    "timeline-1": lambda rank, store_path, results: _timeline_calls(rank, store_path, 1, results),
    "timeline-2": lambda rank, store_path, results: _timeline_calls(rank, store_path, 2, results),
}


LADDER_KINDS = ("alone", "unwrapped", "solo", "with_ddp", "without_allreduce")
STEP_NAMES = {
    "alone": "unwrapped",
    "unwrapped": "unwrapped",
    "solo": "solo",
    "with_ddp": "ddp",
    "without_allreduce": "no_sync",
}


@pytest.mark.launches
@pytest.mark.one_core
@pytest.mark.parametrize("world_size", [1, 2])
def test_the_ladder_runs_blocks_of_segments_each_after_a_barrier_with_a_lead_in(phase_results, world_size):
    """Each block runs one segment of every kind, bottom rung first in even blocks and top first
    in odd ones: with more than one rank a barrier gathers the ranks, one unmarked lead-in step of
    the kind follows, then its marked steps, each after a barrier of its own (but the alone
    rank's, which the others do not join). Rung 0 (`alone`) is stepped by one rank per
    block (`ablation.alone_rank`: at 2 ranks each rank two blocks in a row, so rank 0 here steps
    alone in both); with one rank neither `alone` nor `solo` runs. The process group has one rank;
    world_size is what the phase is told. The record says the steps had the lead-in and holds the
    unwrapped steps, fully marked. Told of 2 ranks, the ladder adds rounds while its two leave the
    largest cause undecided: here the group has one rank, so a look gathers one rank's steps of two,
    never decides, and the ladder runs to its cap (tests/test_extra_rounds.py: a decided look stops it)."""
    from ddpbench.worker.ablation import alone_rank, extra_rounds

    results = results_of(phase_results, f"timeline-{world_size}")
    blocks = results["ladder_blocks"]
    assert blocks == (2 if world_size == 1 else 2 + extra_rounds(2)), blocks
    assert results["lead_decided"] is (None if world_size == 1 else False)
    gather = ["barrier"] if world_size > 1 else []
    kinds = LADDER_KINDS if world_size > 1 else ("unwrapped", "with_ddp", "without_allreduce")
    expected = []
    for block in range(blocks):
        for kind in kinds if block % 2 == 0 else kinds[::-1]:
            expected += gather
            if kind == "alone" and alone_rank(block, world_size) != 0:
                continue  # another rank's turn to step alone: rank 0 waits at the next barrier
            name = STEP_NAMES[kind]
            together = gather if kind != "alone" else []  # every rank starts a marked step at once
            expected += [name] * LEAD_IN_PER_SEGMENT + [*together, "marked:", name] * MARKED_PER_SEGMENT
    expected += gather  # the last segment ends before the contention probe
    # The contention probe needs a second rank in the group: here it adds nothing.
    assert results["calls"] == expected
    per_block = MARKED_PER_SEGMENT
    alone_blocks = sum(alone_rank(block, world_size) == 0 for block in range(blocks))
    marked = {
        kind: (alone_blocks * per_block if kind == "alone" else blocks * per_block) if kind in kinds else 0
        for kind in LADDER_KINDS
    }
    assert results["marked"] == marked
    assert results["blocks"]["with_ddp"] == [block for block in range(blocks) for _ in range(per_block)]
    assert results["lead_in_recorded"] is True
    assert results["unwrapped_fully_marked"] == [True] * blocks * per_block
