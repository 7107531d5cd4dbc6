"""Stored baselines, one per machine class and suite: `results/baselines/<machine-class>/<suite>/`.

The machine class names what makes numbers comparable: GPU model and count (or CPU model and
cores), not the OS. No torch.
"""

from __future__ import annotations

import json
import os
import re
import shutil

from ddpbench.config.ids import is_plain_id
from ddpbench.records.schema import Record
from ddpbench.records.store import read_records

DEFAULT_BASELINES = os.path.join("results", "baselines")


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", str(text).lower()).strip("-") or "unknown"


def machine_class(record: Record) -> str:
    env = record.env
    if env.gpu_count:
        return f"{env.gpu_count}x-{slug((env.gpu_names or ['gpu'])[0])}"
    return f"cpu-{slug(env.cpu_model)}-{env.cpu_cores}c"


def machine_class_here() -> str:
    """This machine's class as `machine_class` names it from a record, without starting torch: the
    GPUs nvidia-smi lists (those CUDA_VISIBLE_DEVICES leaves visible, where it names indices), else
    the CPU model and the cores this process may use."""
    from ddpbench.host.facts import _nvidia_smi, cpu_model, nvidia_driver_present, usable_cores

    hidden = os.environ.get("CUDA_VISIBLE_DEVICES", None) in ("", "-1")
    listed = _nvidia_smi("--query-gpu=name", "--format=csv,noheader") if nvidia_driver_present() else None
    names = [line.strip() for line in (listed or "").splitlines() if line.strip()] if not hidden else []
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if names and visible and all(part.strip().isdigit() for part in visible.split(",")):
        names = [names[int(part)] for part in visible.split(",") if int(part) < len(names)]
    if names:
        return f"{len(names)}x-{slug(names[0])}"
    return f"cpu-{slug(cpu_model())}-{usable_cores()}c"


def suite_of(sweep_dir: str) -> str:
    try:
        with open(os.path.join(sweep_dir, "manifest.json"), encoding="utf-8") as handle:
            options = json.load(handle).get("options") or {}
    except (OSError, ValueError):
        return "custom"
    suite = options.get("suite", "custom") if not options.get("workloads") else "custom"
    # The name becomes a folder under the baselines: only a plain name, never a path.
    return suite if is_plain_id(suite) else "custom"


def baseline_dir(sweep_dir: str, root: str = DEFAULT_BASELINES) -> str:
    records = [record for _, record in read_records(sweep_dir)[0] if record.status == "ok"]
    if not records:
        raise ValueError(f"{sweep_dir!r} holds no successful run records")
    return os.path.join(root, machine_class(records[0]), suite_of(sweep_dir))


def save_baseline(sweep_dir: str, root: str = DEFAULT_BASELINES) -> str:
    """Copy the sweep's manifest and records (not its logs and traces) as the baseline of its class."""
    target = baseline_dir(sweep_dir, root)
    if os.path.commonpath([os.path.abspath(target), os.path.abspath(root)]) != os.path.abspath(root):
        raise ValueError(f"baseline folder {target!r} is outside {root!r}")  # never removed below
    staging = target + ".new"
    shutil.rmtree(staging, ignore_errors=True)
    os.makedirs(os.path.join(staging, "runs"))
    for name in os.listdir(os.path.join(sweep_dir, "runs")):
        # Records, and the step-time sidecars (.npy) that large runs' records point to.
        if name.endswith((".json", ".npy")):
            shutil.copy2(os.path.join(sweep_dir, "runs", name), os.path.join(staging, "runs", name))
    if os.path.exists(os.path.join(sweep_dir, "manifest.json")):
        shutil.copy2(os.path.join(sweep_dir, "manifest.json"), staging)
    # Replace the old baseline only once the new one is complete.
    shutil.rmtree(target, ignore_errors=True)
    os.replace(staging, target)
    return target
