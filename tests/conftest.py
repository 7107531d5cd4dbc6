import os
import re
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURES = os.path.join(REPO, "tests", "fixtures")


# Tests meant for CPU run with the GPUs hidden: on a GPU machine `--device auto` would otherwise
# pick CUDA (and every `--nproc 2` run would be refused on a one-GPU box).
HIDE_GPUS = {"CUDA_VISIBLE_DEVICES": ""}


def cpu_environment(**changes: str) -> dict:
    """os.environ with the GPUs hidden, for subprocesses started by CPU tests."""
    return {**os.environ, **HIDE_GPUS, **changes}


def ddpbench(
    *args: str, timeout: float = 240, env: dict | None = None, cwd=REPO, gpus: bool = False
) -> subprocess.CompletedProcess:
    """Run the real command line in a fresh process, as a user would. Commands that write to the
    working folder (a sweep's report goes to ./reports/) get a temporary `cwd` from their test.
    GPUs stay hidden unless `gpus` (the CUDA tests)."""
    base = dict(os.environ) if gpus else cpu_environment()
    return subprocess.run(
        [sys.executable, "-m", "ddpbench", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**base, **(env or {})},
    )


def cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


requires_cuda = pytest.mark.skipif(
    "not __import__('torch').cuda.is_available()", reason="needs a CUDA GPU; this machine has none"
)


@pytest.fixture
def fixture_path():
    return lambda name: os.path.join(FIXTURES, name)


# Lines that come from torchrun, the profiler (Kineto) or c10's logging, not from ddpbench.
_FOREIGN = re.compile(
    r"^\[(default|rank)\d+\]:|USDT:|^(ERROR|WARNING|INFO):|^[EWI]\d{4} \d\d:\d\d|"
    r"torch\.distributed|gpuGetDeviceCount|ChildFailedError"
)


def foreign_lines(text: str) -> list[str]:
    """The lines of a terminal transcript that ddpbench did not write itself."""
    return [line for line in text.splitlines() if _FOREIGN.search(line)]
