"""Before an fsdp2 run starts: does this torch have FSDP2's `fully_shard`, and can it shard the model
unit by unit? The workload's model is built on torch's meta device (shapes only, nothing allocated,
no data made), its shard units taken as the worker would, and `ddpbench.worker.sharding.unit_problems`
asked.

The launcher asks in a process of its own (`python -m ddpbench.worker.shardable WORKLOAD SIZE`:
exit 0, or the one-line reason on stdout and exit 2): the check imports torch and the workload,
which belong to the worker's side, not the launcher's."""

from __future__ import annotations

import sys

from ddpbench.config.spec import SpecError


def check_fully_shard() -> None:
    """SpecError where this torch has no public `torch.distributed.fsdp.fully_shard`, which the worker
    imports. Asked of torch itself, not of its version: a pre-release labelled 2.6.0a0 may come from
    before fully_shard was made public (it was then only under torch.distributed._composable), and a
    version gate would pass it to fail with an ImportError inside every rank."""
    import torch

    try:
        from torch.distributed import fsdp
    except ImportError:  # a torch built without torch.distributed
        fsdp = None
    if not hasattr(fsdp, "fully_shard"):
        raise SpecError(
            f"--strategy fsdp2 needs torch.distributed.fsdp.fully_shard, which torch {torch.__version__} "
            f"({sys.executable}) does not have: it is public from torch 2.6, and older builds (2.5, pre-releases "
            "of 2.6 from before it) have it only under torch.distributed._composable; use a newer torch, or "
            "leave fsdp2 out (--strategy ddp)"
        )


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
        check_fully_shard()
        check_shardable(workload_name, size)
    except SpecError as exc:
        print(exc)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
