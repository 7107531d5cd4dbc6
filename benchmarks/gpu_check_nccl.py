"""What a GPU trace must show before gpu-check says NCCL's communication was read from it, and what a
DDP run's in-process ablation must hold.

A one-rank NCCL all-reduce launches no kernel: its trace has no communication in it, so analysing
it as "gpu/nccl" proves nothing about reading NCCL. Where the node has 2 or more GPUs, the checks
read a run of 2 or more ranks and require, on every rank: NCCL kernels (ncclKernel_* before NCCL
2.19, ncclDevKernel_* after), every kernel linked to its launch (NCCL launches through the driver API,
cuLaunchKernelEx, not cudaLaunchKernel), communication time above zero, and the whole profiled steps
the run was asked for. No torch at import: the trace reader is imported where it is used.
"""

from __future__ import annotations

from gpu_check_processes import CheckFailed


def judge_nccl_job(ranks: list[dict], expected_steps: int) -> str:
    """`ranks`: one summary per rank's trace, as `ddpbench trace analyze --json` prints them (its
    "ranks"). The check's line, or CheckFailed naming every rank and what it lacks."""
    if len({rank.get("rank") for rank in ranks}) < 2 or any((r.get("world_size") or 0) < 2 for r in ranks):
        worlds = sorted({r.get("world_size") for r in ranks}, key=str)
        raise CheckFailed(
            f"{len(ranks)} trace(s) of a job of world size {worlds}: an all-reduce over one rank launches no "
            "NCCL kernel, so such a trace cannot show NCCL's communication; read the traces of 2 or more ranks"
        )
    problems = []
    for rank in sorted(ranks, key=lambda r: r.get("rank")):
        kernels = rank.get("kernels") or {}
        said = f"rank {rank.get('rank')}"
        if (rank.get("kind"), rank.get("backend")) != ("gpu", "nccl"):
            problems.append(f"{said}: analysed as {rank.get('kind')} / {rank.get('backend')}, not gpu / nccl")
        if not kernels.get("communication"):
            problems.append(f"{said}: no NCCL kernel (ncclKernel_* or ncclDevKernel_*) in the trace")
        if kernels.get("without_launch"):
            problems.append(
                f"{said}: {kernels['without_launch']} of {kernels.get('total')} kernels without a launch event "
                "(a launch API the analysis does not link?)"
            )
        if not (rank.get("comm_us") or 0) > 0:
            problems.append(f"{said}: no communication time in its analysed steps")
        if rank.get("steps_analysed") != expected_steps:
            problems.append(f"{said}: {rank.get('steps_analysed')} whole steps analysed, expected {expected_steps}")
    if problems:
        raise CheckFailed("; ".join(problems))
    comm_ms = [rank["comm_us"] / 1000 for rank in ranks]
    nccl = [rank["kernels"]["communication"] for rank in ranks]
    return (
        f"{len(ranks)} ranks over NCCL, {expected_steps} steps each: {min(nccl)}-{max(nccl)} NCCL kernels a rank, "
        f"all launches linked, communication {min(comm_ms):.1f}-{max(comm_ms):.1f} ms"
    )


def analyse_traces(paths: list[str]) -> list[dict]:
    """Each trace's summary, read in this process (what `trace analyze --json` prints per rank)."""
    from ddpbench.analysis.traces import analyze_trace

    return [analyze_trace(path).summary() for path in paths]


def expected_steps(record: dict) -> int:
    """Whole profiled steps a GPU trace of the run holds: the profiler's active steps, less the last,
    which the GPU analysis drops (its kernels may be cut off)."""
    return record["spec"]["profile_active"] - 1


def ablation_problems(record: dict) -> list[str]:
    """What the run's in-process ablation lacks on any rank: the rounds its timed steps call for
    (`ddpbench.worker.ablation.ablation_rounds`), each step kind's marked steps in every round, and
    with more than one rank the rank that stepped alone in each round."""
    from ddpbench.worker.ablation import MARKED_PER_SEGMENT, ablation_rounds

    spec, timeline = record["spec"], record.get("timeline") or {}
    ladder = timeline.get("ladder") or {}
    rounds = ablation_rounds(spec["steps"] - spec["warmup"])
    kinds = ["unwrapped", "with_ddp", "without_allreduce"]
    if spec["world_size"] > 1:
        kinds += ["alone", "solo"]
    if ladder.get("blocks") != rounds or not ladder.get("wall_s"):
        return [f"the in-process ablation ran {ladder.get('blocks')} rounds, expected {rounds}: {ladder}"]
    problems = []
    alone_by_round = ladder.get("alone_rank_by_block") or []
    if spec["world_size"] > 1 and len(alone_by_round) != rounds:
        problems.append(f"no rank alone in every round: {alone_by_round}")
    for view in timeline.get("by_rank") or []:
        for kind in kinds:
            # A rank steps alone only in the rounds that name it; every other kind runs in every round.
            rounds_of_kind = [b for b in range(rounds) if kind != "alone" or alone_by_round[b] == view.get("rank")]
            steps = view.get(kind) or []
            blocks = sorted(step.get("block") for step in steps if step.get("block") is not None)
            if len(steps) != len(blocks) or blocks != sorted(rounds_of_kind * MARKED_PER_SEGMENT):
                problems.append(
                    f"rank {view.get('rank')} {kind}: {len(steps)} steps in rounds {blocks}, expected "
                    f"{MARKED_PER_SEGMENT} in each of rounds {rounds_of_kind}"
                )
    if len(timeline.get("by_rank") or []) != spec["world_size"]:
        problems.append(f"timelines of {len(timeline.get('by_rank') or [])} ranks, the run had {spec['world_size']}")
    return problems
