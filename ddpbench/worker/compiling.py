"""`--compile`: torch.compile of the wrapped model, and what compiling cost, apart from step time.

- `default`: `torch.compile(wrapped)`. Under DDP, DDPOptimizer splits the graph at bucket
  boundaries so each bucket's all-reduce can start while the rest of backward runs.
- `compiled-autograd`: the same, and backward is traced too (torch's compiled autograd); DDP then
  uses its Python reducer (`torch._dynamo.config.optimize_ddp = "python_reducer"`, set before DDP
  is built), whose all-reduces are traced into the backward graph.

Compiling happens in the first steps and again whenever a guard fails (a recompile), so a
compiled run first steps one fixed batch until a step compiles nothing (`warm_until_stable`);
only then do the ordinary warm-up and the timed window run. What compiling took, how many graphs
it made and where the graph broke go in the record's `compile`, never into step times.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

COMPILE_WARMUP_LIMIT = 10
"""Steps on the fixed batch before giving up on a stable graph (the record then says so)."""
BREAK_REASONS_KEPT = 5


def prepare(mode: str) -> None:
    """What must be set before the model is wrapped: DDP reads optimize_ddp when it is built."""
    if mode == "compiled-autograd":
        import torch._dynamo

        torch._dynamo.config.optimize_ddp = "python_reducer"


def compile_model(model: torch.nn.Module, mode: str, units: list[torch.nn.Module] | None = None) -> torch.nn.Module:
    """The model to step. With `units` (fsdp2), each unit is compiled in place and the root stays
    eager, as torch's FSDP2 users do: FSDP2's hooks around the root are not traceable, so compiling
    the root alone compiles nothing of the model."""
    if mode == "off":
        return model
    if units is not None:
        for unit in units:
            unit.compile()
        return model
    return torch.compile(model)


def step_context(mode: str) -> Callable[[], contextlib.AbstractContextManager]:
    """What forward and backward run inside: compiled autograd for its mode, nothing otherwise."""
    if mode != "compiled-autograd":
        return contextlib.nullcontext
    from torch._dynamo.utils import maybe_enable_compiled_autograd

    return lambda: maybe_enable_compiled_autograd(True)


@dataclass
class Counts:
    """torch's own compile counters at one moment (they only grow)."""

    frames: int
    graphs: int
    backward_graphs: int
    graph_breaks: int
    compile_s: float


def counts() -> Counts:
    from torch._dynamo.utils import compilation_time_metrics, counters

    return Counts(
        frames=int(counters["frames"]["total"]),
        graphs=int(counters["stats"]["unique_graphs"]),
        backward_graphs=int(counters["compiled_autograd"]["captures"]),
        graph_breaks=int(sum(counters["graph_break"].values())),
        # dynamo's own account of compiling (tracing, AOT autograd, inductor) in its outer call
        compile_s=float(sum(compilation_time_metrics.get("_compile.compile_inner", []))),
    )


def compiled_between(before: Counts, after: Counts) -> int:
    """Frames compiled and backward graphs captured in between: 0 when nothing was compiled."""
    return (after.frames - before.frames) + (after.backward_graphs - before.backward_graphs)


def break_reasons() -> list[str]:
    """The first line of each distinct graph-break reason, most frequent first."""
    from torch._dynamo.utils import counters

    reasons = sorted(counters["graph_break"].items(), key=lambda item: -item[1])
    return [str(reason).strip().splitlines()[0][:200] for reason, _ in reasons[:BREAK_REASONS_KEPT]]


def warm_until_stable(step: Callable[[], None], sync: Callable[[], None], mode: str) -> dict:
    """Step until a step compiles nothing (at most COMPILE_WARMUP_LIMIT steps); the record's
    `compile` without what the timed window adds (`recompiles_in_window`)."""
    start = counts()
    step_s: list[float] = []
    stable = False
    while len(step_s) < COMPILE_WARMUP_LIMIT:
        before = counts()
        started = time.perf_counter()
        step()
        sync()
        step_s.append(time.perf_counter() - started)
        if compiled_between(before, counts()) == 0:
            stable = True
            break
    end = counts()
    return {
        "mode": mode,
        "warmup_steps": len(step_s),
        "stable": stable,
        "first_step_s": step_s[0],
        "warmup_s": sum(step_s),
        "compile_s": end.compile_s - start.compile_s,
        "graphs": end.graphs - start.graphs,
        "backward_graphs": end.backward_graphs - start.backward_graphs,
        "graph_breaks": end.graph_breaks - start.graph_breaks,
        "graph_break_reasons": break_reasons(),
        "frames": end.frames - start.frames,
    }
