"""Fault injection, a testing aid:
`--inject-fault rank=R,kind=raise|kill|hang|oom|skip|unsynced,step=S[,where=PLACE]`.

The fault happens inside a real worker process of a real run, in step S (counting warm-up steps
from 0) on global rank R, so the harness's handling of crashes, kills, hangs and out-of-memory
errors is exercised for real:

- raise: a RuntimeError at the start of the step, as a bug in a workload would;
- kill:  SIGKILL to itself, as the kernel's OOM killer or a failing node would;
- hang:  sleeps forever. Without `where`, before the step starts; with `where`, inside the step,
         through a hook registered only for this fault: `data` (fetching the batch), `forward`
         (a forward pre-hook), `backward` (a gradient hook on the output, before any all-reduce),
         `optimizer` (a step pre-hook), `collective` (DDP's communication hook, before it issues
         the bucket's all-reduce);
- skip:  the rank skips one all-reduce (its DDP communication hook returns the local gradient),
         so its collectives fall out of step with the other ranks';
- oom:   raises torch.OutOfMemoryError, as CUDA (or a test workload on CPU) would;
- unsynced: from step S on, no rank synchronises its gradients any more: each keeps its local
         gradient, as when a wrapper silently skips its collective (pytorch#152735, under
         compiled autograd). Every rank must skip it, or the others would wait for it, so the
         fault names rank 0 for the whole job. Works for every strategy launched by torchrun
         and every compile mode: the gradient check is what must catch it.

Parsing needs no torch; the injection itself lives in `ddpbench.worker.faults`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from ddpbench.config.errors import SpecError

FAULT_KINDS = ("raise", "kill", "hang", "oom", "skip", "unsynced")
TORCHRUN_STRATEGIES = ("ddp", "fsdp2", "replicate")  # as in ddpbench.config.spec (which imports this module)
HANG_PLACES = ("data", "forward", "backward", "optimizer", "collective")
USAGE = f"rank=R,kind={'|'.join(FAULT_KINDS)},step=S[,where={'|'.join(HANG_PLACES)}]"
_FIELDS = ("rank", "kind", "step", "where")


@dataclass(frozen=True)
class Fault:
    rank: int
    kind: str
    step: int
    where: str | None = None
    """Where inside the step a hang happens (kind hang only); None: before the step starts."""

    def __post_init__(self) -> None:
        if self.kind not in FAULT_KINDS:
            raise SpecError(f"fault kind must be one of {', '.join(FAULT_KINDS)}; got {self.kind!r}")
        if self.rank < 0 or self.step < 0:
            raise SpecError(f"fault rank and step must be >= 0; got rank={self.rank}, step={self.step}")
        if self.where is not None and self.kind != "hang":
            raise SpecError(f"fault where= applies to kind=hang only; got kind={self.kind}")
        if self.where is not None and self.where not in HANG_PLACES:
            raise SpecError(f"fault where must be one of {', '.join(HANG_PLACES)}; got {self.where!r}")

    @property
    def uses_comm_hook(self) -> bool:
        """Injected through DDP's communication hook: needs strategy ddp and the default all-reduce."""
        return self.kind == "skip" or self.where == "collective"

    def to_dict(self) -> dict:
        return {key: value for key, value in asdict(self).items() if value is not None}


def parse_fault(text: str) -> Fault:
    fields = {}
    for part in text.split(","):
        key, sep, value = part.partition("=")
        if not sep or key.strip() not in _FIELDS:
            raise SpecError(f"--inject-fault must look like {USAGE}; got {text!r}")
        fields[key.strip()] = value.strip()
    if not {"rank", "kind", "step"} <= set(fields):
        raise SpecError(f"--inject-fault needs rank, kind and step ({USAGE}); got {text!r}")
    try:
        rank, step = int(fields["rank"]), int(fields["step"])
    except ValueError:
        raise SpecError(f"--inject-fault rank and step must be whole numbers ({USAGE}); got {text!r}") from None
    return Fault(rank=rank, kind=fields["kind"], step=step, where=fields.get("where"))


def check_fault_fits(
    fault: Fault,
    world_size: int,
    steps: int,
    strategy: str = "ddp",
    comm_hook: str = "allreduce",
    compile_mode: str = "off",
) -> None:
    if fault.rank >= world_size:
        raise SpecError(f"--inject-fault rank {fault.rank} does not exist: world size is {world_size}")
    if fault.step >= steps:
        raise SpecError(
            f"--inject-fault step {fault.step} is never reached: the run has {steps} steps (0..{steps - 1})"
        )
    if fault.uses_comm_hook and (strategy != "ddp" or comm_hook != "allreduce" or compile_mode == "compiled-autograd"):
        raise SpecError(
            f"--inject-fault {fault.kind}{',where=' + fault.where if fault.where else ''} goes through "
            f"DDP's communication hook: it needs strategy ddp and --comm-hook allreduce, without compiled autograd; "
            f"got strategy {strategy}, comm hook {comm_hook}, compile {compile_mode}"
        )
    if fault.kind == "unsynced":
        if strategy not in TORCHRUN_STRATEGIES:
            raise SpecError(
                f"--inject-fault kind=unsynced stops gradient synchronisation: it needs a strategy launched by "
                f"torchrun ({', '.join(TORCHRUN_STRATEGIES)}); got {strategy}"
            )
        if fault.rank != 0:
            raise SpecError(
                "--inject-fault kind=unsynced happens on every rank at once (a collective skipped on one rank "
                f"leaves the others waiting): give rank=0; got rank={fault.rank}"
            )


def fault_applies(fault: dict, processes: int, steps: int, strategy: str, compile_mode: str = "off") -> bool:
    """Whether a sweep's fault can happen in one of its runs (it goes to every run it fits)."""
    parsed = Fault(**fault)
    if parsed.kind == "unsynced" and strategy not in TORCHRUN_STRATEGIES:
        return False
    hook_fits = strategy == "ddp" and compile_mode != "compiled-autograd"
    return parsed.rank < processes and parsed.step < steps and (hook_fits or not parsed.uses_comm_hook)
