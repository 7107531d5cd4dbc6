"""The machine canary: fixed probes of the machine itself (a one-thread matrix product, a memory
copy, a Python loop, a gloo all-reduce on localhost, an NCCL all-reduce where GPUs exist), run at
the start and at the end of every sweep and kept in its manifest, so that the gate can tell a slower
machine from slower code. No torch here: the probes run in `python -m ddpbench.worker.canary`.

A canary that cannot run (a broken torch, a timeout) is kept as its error: it never stops a sweep.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys

from ddpbench.records.store import utc_now

PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# A few seconds of probes plus torch's import; far more means the machine is not fit to measure.
CANARY_TIMEOUT_S = 180.0


CANARY_ENV = "DDPBENCH_CANARY"


def canary_wanted() -> bool:
    """Whether sweeps run the canary: yes unless DDPBENCH_CANARY=off (it costs a few seconds each)."""
    return os.environ.get(CANARY_ENV, "on").strip().lower() != "off"


def sweep_shape(plan: list) -> tuple[int, int] | None:
    """Processes and threads per process of the sweep's largest run on a node (most threads in
    all, then most processes): the shape of the canary's shaped probe. None for an empty plan."""
    shapes = [(spec.nproc if spec.launched_by_torchrun else 1, spec.threads_per_rank or 1) for spec in plan]
    if not shapes:
        return None
    return max(shapes, key=lambda shape: (shape[0] * shape[1], shape[0]))


def run_canary(
    at: str, python: str | None = None, timeout_s: float = CANARY_TIMEOUT_S, shape: tuple[int, int] | None = None
) -> dict:
    """One run of every probe, as {"at", "started_at", "ended_at", "probes": {...}} or with "error";
    `shape` (processes, threads) adds the probe shaped like the sweep's runs."""
    path = os.environ.get("PYTHONPATH")
    environ = {**os.environ, "PYTHONPATH": PACKAGE_ROOT + (os.pathsep + path if path else "")}
    started = utc_now()
    result: dict = {"at": at, "started_at": started}
    try:
        # A group of its own: the all-reduce probe's second process goes with it when it is ended.
        process = subprocess.Popen(
            [python or sys.executable, "-m", "ddpbench.worker.canary"]
            + (["--shape", f"{shape[0]}x{shape[1]}"] if shape else []),
            env=environ,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
    except OSError as exc:
        return {**result, "ended_at": utc_now(), "error": f"the canary did not start: {exc}"}
    try:
        stdout, stderr = process.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        _end_group(process)
        return {**result, "ended_at": utc_now(), "error": f"the canary did not finish in {timeout_s:g} s"}
    except BaseException:  # Ctrl-C or SIGTERM of the sweep: leave no probe behind
        _end_group(process)
        raise
    lines = stdout.strip().splitlines()
    try:
        measured = json.loads(lines[-1]) if process.returncode == 0 and lines else None
    except ValueError:
        measured = None
    if not isinstance(measured, dict):
        last = (stderr.strip().splitlines() or ["no output"])[-1]
        return {**result, "ended_at": utc_now(), "error": f"the canary failed (exit {process.returncode}): {last}"}
    return {**result, "ended_at": utc_now(), **measured}


def _end_group(process: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()


def format_canary(canary: dict) -> str:
    """One run of the canary as the lines `ddpbench canary` prints."""
    if canary.get("error"):
        return f"canary: {canary['error']}"
    lines = [f"{'probe':<16} {'median':>10}  {'unit':<15} repeats"]
    for name, probe in canary.get("probes", {}).items():
        if "value" in probe:
            repeats = ", ".join(f"{r:.4g}" for r in probe.get("repeats", []))
            lines.append(f"{name:<16} {probe['value']:>10.4g}  {probe['unit']:<15} {repeats}")
        else:
            lines.append(
                f"{name:<16} {'':>10}  {'':<15} {'skipped' if 'skipped' in probe else 'error'}: "
                f"{probe.get('skipped') or probe.get('error')}"
            )
    lines.append(f"probes took {canary.get('wall_s', 0):.1f} s (torch {canary.get('torch', '?')}); higher is faster")
    return "\n".join(lines)
