"""Before an fsdp2 run starts: can FSDP2 shard its model unit by unit? The workload's model is
built on torch's meta device (shapes only, nothing allocated, no data made), its shard units
taken as the worker would, and `ddpbench.worker.sharding.unit_problems` asked.

The launcher asks in a process of its own (`python -m ddpbench.worker.shardable WORKLOAD SIZE`:
exit 0, or the one-line reason on stdout and exit 2): the check imports torch and the workload,
which belong to the worker's side, not the launcher's."""

from __future__ import annotations

import sys

from ddpbench.config.spec import SpecError


def check_shardable(workload_name: str, size: str) -> None:
    import torch

    from ddpbench.worker.sharding import shard_units, unit_problems
    from ddpbench.worker.workload import build_workload

    with torch.device("meta"):
        workload = build_workload(workload_name, size, None)
    try:
        units = shard_units(workload.model, workload.shard_units)
    except Exception as exc:  # a user's shard_units that fails is as unshardable as a bad one
        raise SpecError(
            f"fsdp2 cannot shard {workload_name}: its shard_units raised {type(exc).__name__}: {exc}"
        ) from None
    problem = unit_problems(workload.model, units)
    if problem:
        raise SpecError(
            f"fsdp2 cannot shard {workload_name}: {problem}; run it with ddp, or declare Workload.shard_units"
        )


def main(argv: list[str] | None = None) -> int:
    workload_name, size = sys.argv[1:] if argv is None else argv
    try:
        check_shardable(workload_name, size)
    except SpecError as exc:
        print(exc)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
