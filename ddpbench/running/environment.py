"""What machine and software a run used, with secrets redacted. No torch at import: the
software facts that need it are in `ddpbench.worker.environment`."""

from __future__ import annotations

import os
import platform
import re
import socket
import subprocess
from typing import Mapping

CAPTURED_PREFIXES = ("NCCL_", "TORCH_", "OMP_", "CUDA_", "GLOO_", "MASTER_", "PYTORCH_", "KINETO_")
SECRET_WORDS = ("TOKEN", "KEY", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL")
REDACTED = "<redacted>"
_URL_PASSWORD = re.compile(r"(?P<scheme>[a-zA-Z][a-zA-Z0-9+.-]*://)(?P<user>[^:/@\s]*):[^@/\s]*@")


def redact_value(value: str) -> str:
    """Hide the password part of any user:password@ URL in a value."""
    return _URL_PASSWORD.sub(lambda m: f"{m['scheme']}{m['user']}:{REDACTED}@", value)


def captured_env(environ: Mapping[str, str]) -> dict[str, str]:
    """The variables that change how PyTorch runs, with anything secret-looking redacted."""
    captured = {}
    for name, value in sorted(environ.items()):
        if not name.startswith(CAPTURED_PREFIXES):
            continue
        if any(word in name.upper() for word in SECRET_WORDS):
            captured[name] = REDACTED
        else:
            captured[name] = redact_value(value)
    return captured


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def usable_cores() -> int:
    """Cores this process may run on (respects taskset / cgroup affinity, unlike os.cpu_count)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def project_git() -> dict:
    """Commit of the ddpbench checkout that ran, and whether it had uncommitted changes."""
    here = os.path.dirname(os.path.abspath(__file__))

    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(["git", "-C", here, *args], capture_output=True, text=True, timeout=5)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return done.stdout.strip() if done.returncode == 0 else None

    sha = git("rev-parse", "HEAD")
    status = git("status", "--porcelain", "--untracked-files=no")
    return {"git_sha": sha, "git_dirty": bool(status) if sha else None}


def host_facts() -> dict:
    return {
        "hostname": socket.gethostname(),
        "platform": platform.platform(),
        "system": platform.system(),
        "release": platform.release(),
        "machine": platform.machine(),
        "python": platform.python_version(),
        "python_implementation": platform.python_implementation(),
        "cpu_model": cpu_model(),
        "cpu_cores": usable_cores(),
        **project_git(),
        "env_vars": captured_env(os.environ),
    }


def visible_gpu_count() -> int:
    """GPUs this process could use. Imports torch only when an NVIDIA driver is present, so the
    CPU-only command line stays fast."""
    driver_present = os.path.exists("/dev/nvidiactl") or os.path.exists("/proc/driver/nvidia")
    if not driver_present:
        return 0
    import torch

    return torch.cuda.device_count()
