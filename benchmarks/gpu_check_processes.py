"""How benchmarks/gpu_check.py starts the processes of its checks: each in a session of its own
with this checkout first on PYTHONPATH, ended as a whole group when its time is up, and the
verdicts a check raises."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from datetime import datetime, timezone

PROJECT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def utc_now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def child_env() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([PROJECT] + [p for p in [env.get("PYTHONPATH")] if p])
    env["PYTHONUNBUFFERED"] = "1"
    return env


def run_command(args: list[str], timeout_s: float, cwd: str) -> tuple[int, str]:
    """Run in a session of its own; on timeout end the whole group (torchrun and its ranks)."""
    process = subprocess.Popen(
        args,
        cwd=cwd,
        env=child_env(),
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
        return 124, (output or "") + f"\n[gpu_check: ended after {timeout_s:.0f} s]"


def python_json(code: str, timeout_s: float, cwd: str) -> dict:
    """Run `code` in a fresh interpreter; its last stdout line is JSON."""
    code_rc, output = run_command([sys.executable, "-c", code], timeout_s, cwd)
    lines = [line for line in output.splitlines() if line.startswith("{")]
    if code_rc != 0 or not lines:
        raise CheckFailed(f"exit code {code_rc}: {tail(output)}")
    return json.loads(lines[-1])


def tail(output: str, lines: int = 8) -> str:
    return " | ".join(line.strip() for line in output.strip().splitlines()[-lines:])


class CheckFailed(Exception):
    """A check's own verdict, with the reason."""


class CheckSkipped(Exception):
    """The check cannot run here (a missing optional package); the reason says what to bring."""
