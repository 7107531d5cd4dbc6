"""Fault injection, a testing aid: `--inject-fault rank=R,kind=raise|kill|hang|oom,step=S`.

The fault happens inside a real worker process of a real run, at the start of step S (counting
warm-up steps from 0) on global rank R, so the harness's handling of crashes, kills, hangs and
out-of-memory errors is exercised for real:

- raise: a RuntimeError, as a bug in a workload would;
- kill:  SIGKILL to itself, as the kernel's OOM killer or a failing node would;
- hang:  sleeps forever before the step, so the other ranks wait in that step's all-reduce;
- oom:   raises torch.OutOfMemoryError, as CUDA (or a test workload on CPU) would.

Parsing needs no torch; the injection itself lives in `ddpbench.worker.faults`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from ddpbench.config.errors import SpecError

FAULT_KINDS = ("raise", "kill", "hang", "oom")
USAGE = "rank=R,kind=raise|kill|hang|oom,step=S"


@dataclass(frozen=True)
class Fault:
    rank: int
    kind: str
    step: int

    def __post_init__(self) -> None:
        if self.kind not in FAULT_KINDS:
            raise SpecError(f"fault kind must be one of {', '.join(FAULT_KINDS)}; got {self.kind!r}")
        if self.rank < 0 or self.step < 0:
            raise SpecError(f"fault rank and step must be >= 0; got rank={self.rank}, step={self.step}")

    def to_dict(self) -> dict:
        return asdict(self)


def parse_fault(text: str) -> Fault:
    fields = {}
    for part in text.split(","):
        key, sep, value = part.partition("=")
        if not sep or key.strip() not in ("rank", "kind", "step"):
            raise SpecError(f"--inject-fault must look like {USAGE}; got {text!r}")
        fields[key.strip()] = value.strip()
    if set(fields) != {"rank", "kind", "step"}:
        raise SpecError(f"--inject-fault needs rank, kind and step ({USAGE}); got {text!r}")
    try:
        rank, step = int(fields["rank"]), int(fields["step"])
    except ValueError:
        raise SpecError(f"--inject-fault rank and step must be whole numbers ({USAGE}); got {text!r}") from None
    return Fault(rank=rank, kind=fields["kind"], step=step)


def check_fault_fits(fault: Fault, world_size: int, steps: int) -> None:
    if fault.rank >= world_size:
        raise SpecError(f"--inject-fault rank {fault.rank} does not exist: world size is {world_size}")
    if fault.step >= steps:
        raise SpecError(f"--inject-fault step {fault.step} is never reached: the run has {steps} steps (0..{steps - 1})")
