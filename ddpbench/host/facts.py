"""What machine and software a run used, with secrets redacted. No torch at import: the
software facts that need it are in `ddpbench.worker.environment`."""

from __future__ import annotations

import os
import platform
import re
import shutil
import socket
import subprocess
from collections.abc import Mapping

# PET_*: torchrun reads them as its options (Kubeflow Trainer sets them in every pod). NVIDIA_*: the
# NVIDIA libraries' own switches below torch, such as NVIDIA_TF32_OVERRIDE=0, which turns TF32 off in
# cuBLAS and cuDNN whatever torch's settings say (two runs with the same torch settings then compute
# fp32 products differently); NVIDIA's images also name their build there (NVIDIA_PYTORCH_VERSION).
# The whole prefix, not a list of names: a switch missing from a list would go unrecorded.
CAPTURED_PREFIXES = (
    "NCCL_",
    "TORCH_",
    "OMP_",
    "CUDA_",
    "GLOO_",
    "MASTER_",
    "PYTORCH_",
    "KINETO_",
    "PET_",
    "NVIDIA_",
)
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


def nvidia_driver_present() -> bool:
    return os.path.exists("/dev/nvidiactl") or os.path.exists("/proc/driver/nvidia")


_KERNEL_MODULE_VERSION = re.compile(r"Kernel Module\s+(?:for \S+\s+)?(\d+(?:\.\d+)+)")


def driver_version_from_proc(text: str) -> str | None:
    """The driver version from /proc/driver/nvidia/version ("NVRM version: NVIDIA UNIX x86_64
    Kernel Module  550.54.15  ...")."""
    match = _KERNEL_MODULE_VERSION.search(text)
    return match.group(1) if match else None


def _driver_version_from_proc() -> str | None:
    try:
        with open("/proc/driver/nvidia/version", encoding="utf-8") as handle:
            return driver_version_from_proc(handle.read())
    except OSError:
        return None


def driver_version() -> str | None:
    """The NVIDIA driver's version (nvidia-smi, else /proc/driver/nvidia/version), as the record's
    `driver_version`; None without a driver."""
    if not nvidia_driver_present():
        return None
    query = _nvidia_smi("--query-gpu=driver_version", "--format=csv,noheader")
    found = next((line.strip() for line in (query or "").splitlines() if line.strip()), None)
    return found or _driver_version_from_proc()


def parse_gpu_query(text: str) -> tuple[str | None, list[str]]:
    """(driver version, MIG mode per GPU) from `nvidia-smi --query-gpu=driver_version,mig.mode.current
    --format=csv,noheader`: one "550.54.15, Disabled" line per GPU ("[N/A]" where MIG does not exist)."""
    rows = [[cell.strip() for cell in line.split(",")] for line in text.splitlines() if line.strip()]
    rows = [row for row in rows if len(row) == 2]
    return (rows[0][0] if rows else None), [row[1] for row in rows]


def _nvidia_smi(*args: str) -> str | None:
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    try:
        done = subprocess.run([smi, *args], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout if done.returncode == 0 else None


def gpu_host_facts() -> dict:
    """Driver version, MIG mode of every GPU and the topology matrix (NVLink, PCIe, NUMA
    affinity: `nvidia-smi topo -m`), where an NVIDIA driver is present; None where unknown."""
    facts: dict = {
        "driver_version": None,
        "mig_mode": [],
        "gpu_topology": None,
        "mig_devices_visible": "MIG-" in os.environ.get("CUDA_VISIBLE_DEVICES", ""),
    }
    if not nvidia_driver_present():
        return facts
    query = _nvidia_smi("--query-gpu=driver_version,mig.mode.current", "--format=csv,noheader")
    if query:
        facts["driver_version"], facts["mig_mode"] = parse_gpu_query(query)
    if facts["driver_version"] is None:
        facts["driver_version"] = _driver_version_from_proc()
    topology = _nvidia_smi("topo", "-m")
    facts["gpu_topology"] = topology.rstrip() if topology else None
    return facts


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
        **gpu_host_facts(),
        "env_vars": captured_env(os.environ),
        "scheduler": scheduler_facts(os.environ),
    }


def visible_gpu_count() -> int:
    """GPUs this process could use. Imports torch only when an NVIDIA driver is present and the
    GPUs are not hidden, so the CPU-only command line stays fast."""
    if not nvidia_driver_present() or os.environ.get("CUDA_VISIBLE_DEVICES", None) in ("", "-1"):
        return 0
    import torch

    return torch.cuda.device_count()


SCHEDULER_VARIABLES = {
    "job_id": "SLURM_JOB_ID",
    "cluster": "SLURM_CLUSTER_NAME",
    "partition": "SLURM_JOB_PARTITION",
    "job_nodes": "SLURM_JOB_NODELIST",
    "step_id": "SLURM_STEP_ID",
    "step_nodes": "SLURM_STEP_NODELIST",
    "node": "SLURMD_NODENAME",
}


def scheduler_facts(environ: Mapping[str, str] = os.environ) -> dict | None:
    """The SLURM job a process belongs to (None outside one): ids, partition and nodes only, never
    the whole environment (it can hold a user's tokens)."""
    if not environ.get("SLURM_JOB_ID"):
        return None
    facts = {key: environ.get(name) for key, name in SCHEDULER_VARIABLES.items()}
    num_nodes = environ.get("SLURM_JOB_NUM_NODES", "")
    return {"name": "slurm", **facts, "job_num_nodes": int(num_nodes) if num_nodes.isdigit() else None}
