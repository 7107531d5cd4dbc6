"""gpu-check's NCCL-trace check on traces built from the real H200 trace (NCCL 2.28.9, one rank): made a
2-rank job whose all-reduces launch current NCCL kernels (`ncclDevKernel_*`) through the driver API
(`cuLaunchKernelEx`), as NCCL does from 2.19. The check accepts it, read in this process or through
`ddpbench trace analyze --json` as gpu-check reads it, and refuses a one-rank trace, whose all-reduce
launches no kernel, and a job whose NCCL launches cannot be linked. Also the in-process ablation's
rounds on real CPU records."""

from __future__ import annotations

import copy
import gzip
import json
import os
import sys

import pytest
from conftest import FIXTURES, REPO, ddpbench

sys.path.insert(0, os.path.join(REPO, "benchmarks"))
from gpu_check_nccl import ablation_problems, analyse_traces, judge_nccl_job  # noqa: E402
from gpu_check_processes import CheckFailed  # noqa: E402

H200_TRACE = os.path.join(FIXTURES, "traces", "h200-gpt2-bf16-ddp1-rank0.json.gz")
NCCL_KERNEL = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
NCCL_STREAM = 57
WHOLE_STEPS = 2  # 3 profiled steps, the last dropped


@pytest.fixture(scope="module")
def h200_trace() -> dict:
    with gzip.open(H200_TRACE, "rt") as handle:
        return json.load(handle)


def with_nccl_kernels(trace: dict, rank: int, world_size: int = 2, link: bool = True) -> dict:
    """The trace as rank `rank` of a job of `world_size`: each of DDP's `nccl:all_reduce` calls launches
    an NCCL kernel through the driver API on a stream of its own (no launch event where `link` is off)."""
    job = copy.deepcopy(trace)
    info = job["distributedInfo"]
    info.update(rank=rank, world_size=world_size)
    info["pg_config"][0].update(pg_size=world_size, ranks=list(range(world_size)))
    events = job["traceEvents"]
    correlation = max(e["args"]["correlation"] for e in events if "correlation" in (e.get("args") or {}))
    for call in [e for e in events if e.get("cat") == "user_annotation" and e.get("name") == "nccl:all_reduce"]:
        correlation += 1
        if link:
            events.append(
                {
                    "ph": "X",
                    "cat": "cuda_driver",
                    "name": "cuLaunchKernelEx",
                    "pid": call["pid"],
                    "tid": call["tid"],
                    "ts": call["ts"] + 5,
                    "dur": 4,
                    "args": {"correlation": correlation},
                }
            )
        events.append(
            {
                "ph": "X",
                "cat": "kernel",
                "name": NCCL_KERNEL,
                "pid": 0,
                "tid": NCCL_STREAM,
                "ts": call["ts"] + 40,
                "dur": 180,
                "args": {"stream": NCCL_STREAM, "correlation": correlation, "device": 0},
            }
        )
    return job


def write(folder, trace: dict) -> str:
    path = folder / f"rank-{trace['distributedInfo']['rank']}.pt.trace.json.gz"
    path.write_bytes(gzip.compress(json.dumps(trace).encode(), compresslevel=1))
    return str(path)


@pytest.fixture(scope="module")
def two_ranks(h200_trace, tmp_path_factory) -> list[str]:
    folder = tmp_path_factory.mktemp("job")
    return [write(folder, with_nccl_kernels(h200_trace, rank)) for rank in (0, 1)]


def test_a_two_rank_job_with_current_nccl_kernels_and_driver_launches_is_accepted(two_ranks):
    ranks = analyse_traces(two_ranks)
    said = judge_nccl_job(ranks, WHOLE_STEPS)
    assert said.startswith("2 ranks over NCCL, 2 steps each: ") and "all launches linked" in said
    for rank in ranks:
        kernels = rank["kernels"]
        # One NCCL kernel for each of DDP's 39 all-reduce calls in the trace, each linked to its driver-API
        # launch; the real trace's own cuBLAS and cuDNN driver launches stay linked too.
        assert kernels["communication"] == 39 and kernels["without_launch"] == 0, kernels
        # not chance: intervals built by hand, not timed
        assert rank["comm_us"] > 0 and rank["steps_analysed"] == WHOLE_STEPS


def test_the_check_reads_the_same_through_trace_analyze_json_as_gpu_check_does(two_ranks):
    done = ddpbench("trace", "analyze", "--json", *two_ranks)
    assert done.returncode == 0, done.stderr
    ranks = json.loads(done.stdout[done.stdout.index("{") :])["ranks"]
    assert judge_nccl_job(ranks, WHOLE_STEPS) == judge_nccl_job(analyse_traces(two_ranks), WHOLE_STEPS)


def test_a_one_rank_trace_is_refused_whatever_it_says_of_itself(h200_trace, tmp_path):
    # The real one-rank trace: gpu/nccl, no NCCL kernel, every launch linked. Not enough.
    one = analyse_traces([H200_TRACE])
    assert one[0]["kind"] == "gpu" and one[0]["backend"] == "nccl" and one[0]["kernels"]["communication"] == 0
    with pytest.raises(CheckFailed, match="an all-reduce over one rank launches no NCCL kernel"):
        judge_nccl_job(one, WHOLE_STEPS)
    # Nor one rank's trace of a 2-rank job, nor two traces that both say they are rank 0.
    both = [write(tmp_path, with_nccl_kernels(h200_trace, 0))]
    with pytest.raises(CheckFailed, match="read the traces of 2 or more ranks"):
        judge_nccl_job(analyse_traces(both), WHOLE_STEPS)
    with pytest.raises(CheckFailed, match="read the traces of 2 or more ranks"):
        judge_nccl_job(analyse_traces(both) * 2, WHOLE_STEPS)


def test_a_job_without_nccl_kernels_or_whose_nccl_launches_cannot_be_linked_is_refused(h200_trace, tmp_path):
    unlinked = [write(tmp_path, with_nccl_kernels(h200_trace, rank, link=False)) for rank in (0, 1)]
    with pytest.raises(CheckFailed, match=r"rank 0: 39 of \d+ kernels without a launch event"):
        judge_nccl_job(analyse_traces(unlinked), WHOLE_STEPS)
    # Two ranks of a 2-rank job, and no NCCL kernel recorded on either (the kernels missing).
    silent = copy.deepcopy(h200_trace)
    for rank, folder in ((0, "a"), (1, "b")):
        (tmp_path / folder).mkdir()
        silent["distributedInfo"].update(rank=rank, world_size=2)
        write(tmp_path / folder, silent)
    paths = [str(tmp_path / folder / f"rank-{rank}.pt.trace.json.gz") for rank, folder in ((0, "a"), (1, "b"))]
    with pytest.raises(CheckFailed) as refused:
        judge_nccl_job(analyse_traces(paths), WHOLE_STEPS)
    assert "rank 0: no NCCL kernel" in str(refused.value) and "rank 1: no communication time" in str(refused.value)


def test_the_expected_steps_are_required(two_ranks):
    with pytest.raises(CheckFailed, match="2 whole steps analysed, expected 3"):
        judge_nccl_job(analyse_traces(two_ranks), 3)


@pytest.mark.parametrize("run", ["gpt2-ddp-n2-r2", "resnet50-ddp-n2-r1", "mlp-ddp-n2-r1"])
def test_a_real_runs_ablation_has_every_round_of_every_step_kind_on_every_rank(run):
    with open(os.path.join(FIXTURES, "sweeps", "cpu-default-suite", "runs", f"{run}.json")) as handle:
        record = json.load(handle)
    assert ablation_problems(record) == []
    record["timeline"]["by_rank"][1]["solo"].pop()  # a round's step of one kind lost on rank 1
    assert ablation_problems(record) == [
        "rank 1 solo: 5 steps in rounds [0, 1, 2, 3, 4], expected 1 in each of rounds [0, 1, 2, 3, 4, 5]"
    ]
    record["timeline"]["ladder"]["blocks"] = 4
    assert ablation_problems(record)[0].startswith("the in-process ablation ran 4 rounds, expected 6")
