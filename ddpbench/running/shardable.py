"""Before an fsdp2 run starts: can FSDP2 shard its model unit by unit? The workload's model is
built on torch's meta device (shapes only, nothing allocated, no data made), its shard units
taken as the worker would, and `ddpbench.worker.sharding.unit_problems` asked. Imports torch,
so only fsdp2 runs of workloads come here."""

from __future__ import annotations

from ddpbench.config.spec import RunSpec, SpecError


def check_shardable(spec: RunSpec) -> None:
    import torch

    from ddpbench.worker.sharding import shard_units, unit_problems
    from ddpbench.worker.workload import build_workload

    with torch.device("meta"):
        workload = build_workload(spec.workload, spec.size or "tiny", None)
    try:
        units = shard_units(workload.model, workload.shard_units)
    except Exception as exc:  # a user's shard_units that fails is as unshardable as a bad one
        raise SpecError(
            f"fsdp2 cannot shard {spec.workload}: its shard_units raised {type(exc).__name__}: {exc}"
        ) from None
    problem = unit_problems(workload.model, units)
    if problem:
        raise SpecError(
            f"fsdp2 cannot shard {spec.workload}: {problem}; run it with ddp, or declare Workload.shard_units"
        )
