"""How runs are named wherever they are shown (terminal, tables, report). No torch, no pandas."""

from __future__ import annotations

from ddpbench.config.spec import RunSpec


def strategy_label(spec: RunSpec) -> str:
    """Say exactly what ran. On CPU, nn.DataParallel replicates nothing: it is one process whose
    only parallelism is its intra-op threads, and the label says so."""
    strategy, world_size = spec.strategy, spec.world_size
    compiled = {"off": "", "default": ", compiled", "compiled-autograd": ", compiled with compiled autograd"}[
        getattr(spec, "compile", "off")
    ]
    if strategy == "local":
        return f"local (one device, no wrapper{compiled})"
    if strategy in ("ddp", "fsdp2", "replicate"):
        processes = "1 process" if world_size == 1 else f"{world_size} processes"
        name = {"ddp": "DDP", "fsdp2": "FSDP2", "replicate": "replicate"}[strategy]
        return f"{name} ({processes}, {spec.backend}{compiled})"
    if spec.device == "cpu":
        threads = spec.threads_per_rank
        return f"DataParallel on CPU (one process, {threads} thread{'s' if threads != 1 else ''}, no replication)"
    return f"DataParallel (one process, {world_size} GPU{'s' if world_size > 1 else ''})"
