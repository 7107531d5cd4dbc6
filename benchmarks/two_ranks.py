"""Running a benchmark script as two gloo processes of one thread each, under torchrun: the
script's own arguments are passed on, with --worker, so the same file is both the command a
person runs and the worker torchrun starts."""

import os
import subprocess
import sys

WORKER_FLAG = "--worker"


def run_on_two_ranks(script: str, argv: list[str]) -> int:
    """Start `script` again under torchrun as 2 processes with `argv` and --worker; their exit code."""
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc-per-node=2",
            os.path.abspath(script),
            *argv,
            WORKER_FLAG,
        ],
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    ).returncode
