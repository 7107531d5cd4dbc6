"""One configuration identity: what makes two runs repeats of one configuration, for run grouping
in the table, explain, the gate and the history alike. No torch.

A configuration is every run option that changes what a run measures (`IDENTITY_FIELDS`, each with
why). They are the options of `config.configuration.CONFIGURATION_OPTIONS`, the one declaration the
reproduce command writes too, less those in its `UNKEYED` (how long or how a run is measured, planted
work): runs that differ only in those, or in the seed, output folder, run id or repeat number, are
repeats. tests/test_identity.py holds the two together.

A user's file is one workload however it is written: `./w.py`, `w.py` and its absolute path are
one, `a/train.py` and `b/train.py` are two (`canonical_path`: a path inside the folder the command
runs in is written relative to it, any other stays absolute). A script is its path in that form and
its own arguments: `train.py --lr 1` and `train.py --lr 2` are two configurations.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os

from ddpbench.config.spec import RunSpec
from ddpbench.config.workloads import SCRIPT_PREFIX, is_user_workload

IDENTITY_FIELDS = (
    ("workload", "a built-in workload's name, or a user's file in canonical form with its factory"),
    ("script", "a script: its path in canonical form and its own arguments (None for a workload)"),
    ("size", "the workload's size"),
    ("strategy", "local, ddp, dp, fsdp2, replicate, with the compile mode (`ddp+compile`)"),
    ("world_size", "devices in the job"),
    ("nnodes", "nodes of the job: the same world size over more hosts crosses a network"),
    (
        "rank_start",
        "fork or exec, how torchrun's agent started the ranks (exec in records from before the choice): two "
        "configurations until their step times are shown equivalent",
    ),
    ("batch_size", "samples per device per step"),
    ("precision", "fp32, bf16, fp16"),
    ("device", "cpu or cuda"),
    ("threads_per_rank", "CPU threads per process: a slice of cores is the CPU's device"),
    ("scaling", "weak (fixed per-device batch) or strong (fixed global batch)"),
    ("num_workers", "DataLoader workers per rank: they take cores and change the data wait"),
    ("data_dir", "an ImageFolder tree instead of synthetic data"),
    ("ddp", "DDP's knobs (bucket size, hooks, ...), where the strategy uses them"),
)
"""The fields of a configuration's identity, in order, each with why it defines the configuration."""
FIELD_NAMES = tuple(name for name, _ in IDENTITY_FIELDS)


def canonical_path(path: str, cwd: str | None = None) -> str:
    """One spelling of a file's path: relative to `cwd` (default: the folder the command runs in)
    where the file lies inside it, else absolute; normalised (no `./`, no `a/../`)."""
    cwd = os.path.abspath(cwd or os.getcwd())
    absolute = os.path.normpath(os.path.join(cwd, os.path.expanduser(path)))
    relative = os.path.relpath(absolute, cwd)
    return absolute if relative == os.pardir or relative.startswith(os.pardir + os.sep) else relative


def canonical_workload(workload: str, cwd: str | None = None) -> str:
    """A built-in name as it is; `path.py:factory` with its path in canonical form."""
    if workload.startswith(SCRIPT_PREFIX) or not is_user_workload(workload):
        return workload
    path, _, factory = workload.rpartition(":")
    return f"{canonical_path(path, cwd)}:{factory}"


def identity(spec: RunSpec, cwd: str | None = None) -> dict[str, object]:
    """The configuration of a run spec, field by field (`IDENTITY_FIELDS`), JSON-ready."""
    script = None
    if spec.script is not None:
        script = [canonical_path(spec.script.path, cwd), *spec.script.args]
    found = {
        "workload": canonical_workload(spec.workload, cwd),
        "script": script,
        "size": spec.size,
        "strategy": spec.strategy_name,
        "world_size": spec.world_size,
        "nnodes": spec.nnodes,
        "rank_start": (spec.rank_start or "exec") if spec.launched_by_torchrun else "exec",
        "batch_size": spec.batch_size,
        "precision": spec.precision,
        "device": spec.device,
        "threads_per_rank": spec.threads_per_rank,
        "scaling": spec.scaling,
        "num_workers": spec.num_workers,
        "data_dir": canonical_path(spec.data_dir, cwd) if spec.data_dir else None,
        "ddp": dataclasses.asdict(spec.ddp) if spec.uses_ddp_knobs else None,
    }
    assert tuple(found) == FIELD_NAMES
    return found


def identity_key(spec: RunSpec, cwd: str | None = None) -> tuple:
    """The identity as a hashable key (nested values as sorted JSON)."""
    return tuple(
        json.dumps(value, sort_keys=True) if isinstance(value, dict | list) else value
        for value in identity(spec, cwd).values()
    )


def identity_id(spec: RunSpec, cwd: str | None = None) -> str:
    """A short, stable name for the identity (8 hex digits of its hash)."""
    text = json.dumps(identity(spec, cwd), sort_keys=True)
    return hashlib.sha1(text.encode("utf-8")).hexdigest()[:8]
