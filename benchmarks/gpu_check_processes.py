"""How benchmarks/gpu_check.py starts the processes of its checks: each in a session of its own
with this checkout first on PYTHONPATH, ended as a whole group when its time is up, and the
verdicts a check raises."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from datetime import datetime, timezone

PROJECT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENDED = 124
"""run_command's exit code for processes it ended when their time was up (as coreutils' timeout)."""


def utc_now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def child_env(extra: dict | None = None) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([PROJECT] + [p for p in [env.get("PYTHONPATH")] if p])
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra or {})
    return env


def run_command(args: list[str], timeout_s: float, cwd: str, extra_env: dict | None = None) -> tuple[int, str]:
    """Run in a session of its own; on timeout end the whole group (torchrun and its ranks)."""
    process = subprocess.Popen(
        args,
        cwd=cwd,
        env=child_env(extra_env),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        output, _ = process.communicate(timeout=timeout_s)
        return process.returncode, output
    except subprocess.TimeoutExpired:
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(process.pid, sig)
                output, _ = process.communicate(timeout=15)
                break
            except ProcessLookupError:
                output = ""
                break
            except subprocess.TimeoutExpired:
                continue
        return ENDED, (output or "") + f"\n[gpu_check: ended after {timeout_s:.0f} s]"


def last_json(code: int, output: str) -> dict:
    """The last JSON line a process printed (`python -c` with a script that prints one)."""
    lines = [line for line in output.splitlines() if line.startswith("{")]
    if code != 0 or not lines:
        raise CheckFailed(f"exit code {code}: {tail(output)}")
    return json.loads(lines[-1])


def tail(output: str, lines: int = 8) -> str:
    return " | ".join(line.strip() for line in output.strip().splitlines()[-lines:])


class CheckFailed(Exception):
    """A check's own verdict, with the reason."""


class CheckSkipped(Exception):
    """The check cannot run here (a missing optional package); the reason says what to bring."""


class OutOfBudget(CheckSkipped):
    """The budget ended the check's processes before they were done: the check was not made, which is
    no verdict on what it checks (NOT RUN, exit code 3), unlike a process that outlived its own limit
    with budget to spare (a hang: FAIL)."""
