"""One configuration identity: what makes two runs repeats of one configuration, for run grouping
in the table, explain, the gate and the history alike. No torch.

A configuration is every run option that changes what a run measures (`IDENTITY_FIELDS`, each with
why). They are the options of `config.configuration.CONFIGURATION_OPTIONS`, the one declaration the
reproduce command writes too, less those in its `UNKEYED` (how long or how a run is measured, planted
work): runs that differ only in those, or in the seed, output folder, run id or repeat number, are
repeats. tests/test_identity.py holds the two together.

A user's file is one file however and wherever it was given, fixed when the run starts
(`locate_files`, kept in the spec's `files`): inside a git repository, its path inside the
repository and the repository's identity (`host.repository`: its root commit), so that `./w.py`,
`w.py` and its absolute path are one, and so are the two worktrees of an `ab` over two commits or
two CI checkouts at other paths; outside one, its real absolute path, so that `a/train.py` and
`b/train.py` are two. A data folder likewise. A record made before the files were kept is located
from the folder it ran in where that is known (`started_in`, inferred by the records' loader from
the record's own folder), else by its path as typed (`typed_paths` names those records). A script
is its file and its own arguments: `train.py --lr 1` and `train.py --lr 2` are two configurations.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os

from ddpbench.config.spec import RunSpec
from ddpbench.config.workloads import SCRIPT_PREFIX, is_user_workload
from ddpbench.host.repository import located, shown

IDENTITY_FIELDS = (
    ("workload", "a built-in workload's name, or a user's file (where it is, see above) with its factory"),
    ("script", "a script: its file (where it is, see above) and its own arguments (None for a workload)"),
    ("size", "the workload's size"),
    ("strategy", "local, ddp, dp, fsdp2, replicate, with the compile mode (`ddp+compile`)"),
    ("world_size", "devices in the job"),
    ("nnodes", "nodes of the job: the same world size over more hosts crosses a network"),
    ("batch_size", "samples per device per step"),
    ("precision", "fp32, bf16, fp16"),
    ("device", "cpu or cuda"),
    ("threads_per_rank", "CPU threads per process: a slice of cores is the CPU's device"),
    ("scaling", "weak (fixed per-device batch) or strong (fixed global batch)"),
    ("num_workers", "DataLoader workers per rank: they take cores and change the data wait"),
    ("data_dir", "an ImageFolder tree instead of synthetic data (where it is, as a file is)"),
    ("ddp", "DDP's knobs (bucket size, hooks, ...), where the strategy uses them"),
    ("sample_unit", "what throughput counts (samples, tokens, images): throughputs in two units never pool"),
    (
        "ablation",
        "whether the run steps the in-process ablation (eager DDP of a workload, profiling on; not --no-profile): "
        "a pooled answer never mixes runs with it and runs without",
    ),
)
"""The fields of a configuration's identity, in order, each with why it defines the configuration."""
FIELD_NAMES = tuple(name for name, _ in IDENTITY_FIELDS)


def canonical_path(path: str, cwd: str | None = None) -> str:
    """A path as identities of before `files` spelt it: relative to `cwd` (default: the folder the
    command runs in) where the file lies inside it, else absolute; normalised (no `./`, no `a/../`).
    Kept to match history series stored under those keys (`gate.values.previous_key`)."""
    cwd = os.path.abspath(cwd or os.getcwd())
    absolute = os.path.normpath(os.path.join(cwd, os.path.expanduser(path)))
    relative = os.path.relpath(absolute, cwd)
    return absolute if relative == os.pardir or relative.startswith(os.pardir + os.sep) else relative


def canonical_workload(workload: str, cwd: str | None = None) -> str:
    """A built-in name as it is; `path.py:factory` with its path as `canonical_path` spells it."""
    if workload.startswith(SCRIPT_PREFIX) or not is_user_workload(workload):
        return workload
    path, _, factory = workload.rpartition(":")
    return f"{canonical_path(path, cwd)}:{factory}"


def user_paths(spec: RunSpec) -> list[str]:
    """The paths of the user's files a run names, as given: its workload file, script, data folder."""
    found = []
    if spec.script is not None:
        found.append(spec.script.path)
    elif is_user_workload(spec.workload):
        found.append(spec.workload.rpartition(":")[0])
    if spec.data_dir:
        found.append(spec.data_dir)
    return found


def locate_files(spec: RunSpec, folder: str | None = None) -> RunSpec:
    """The spec with the folder it starts in and what each of its user's files is (`host.repository.
    located`), fixed now, when the run starts, so that whoever reads its record, from any folder, on
    any machine, finds the same configuration."""
    folder = os.path.abspath(folder or os.getcwd())
    files = {path: located(path, folder) for path in user_paths(spec)}
    return spec.replace(started_in=folder, files=files or None)


def where(spec: RunSpec, path: str) -> str:
    """What a user's file of this run is: as fixed when it started; for an older record, located from
    the folder it ran in where known; else its path as typed (normalised)."""
    if spec.files and path in spec.files:
        return spec.files[path]
    if spec.started_in:
        return located(path, spec.started_in)
    return os.path.normpath(os.path.expanduser(path))


def typed_paths(spec: RunSpec) -> list[str]:
    """The relative paths of a user's files that a record could only key as typed: it was made before
    the files were kept, and does not say which folder it ran in."""
    if spec.files or spec.started_in:
        return []
    return [path for path in user_paths(spec) if not os.path.isabs(os.path.expanduser(path))]


def has_ablation(spec: RunSpec) -> bool:
    """Whether the run steps the in-process ablation: eager DDP of a workload with profiling on."""
    return spec.strategy == "ddp" and spec.compile == "off" and spec.script is None and spec.profile


def identity(spec: RunSpec, sample_unit: str | None = None) -> dict[str, object]:
    """The configuration of a run, field by field (`IDENTITY_FIELDS`), JSON-ready. `sample_unit`:
    what its throughput counts, as its record says (a script's declared unit where not given)."""
    script = None
    workload = spec.workload
    if spec.script is not None:
        script = [where(spec, spec.script.path), *spec.script.args]
    elif is_user_workload(workload):
        path, _, factory = workload.rpartition(":")
        workload = f"{where(spec, path)}:{factory}"
    if sample_unit is None and spec.script is not None:
        sample_unit = spec.script.sample_unit
    found = {
        "workload": workload,
        "script": script,
        "size": spec.size,
        "strategy": spec.strategy_name,
        "world_size": spec.world_size,
        "nnodes": spec.nnodes,
        "batch_size": spec.batch_size,
        "precision": spec.precision,
        "device": spec.device,
        "threads_per_rank": spec.threads_per_rank,
        "scaling": spec.scaling,
        "num_workers": spec.num_workers,
        "data_dir": where(spec, spec.data_dir) if spec.data_dir else None,
        "ddp": dataclasses.asdict(spec.ddp) if spec.uses_ddp_knobs else None,
        "sample_unit": sample_unit,
        "ablation": has_ablation(spec),
    }
    assert tuple(found) == FIELD_NAMES
    return found


def shown_workload(key: str) -> str:
    """A workload's identity as people read it: a user's file by its path inside its repository (or
    its real path), with its factory."""
    if not is_user_workload(key) or key.startswith(SCRIPT_PREFIX):
        return key
    path, _, factory = key.rpartition(":")
    return f"{shown(path)}:{factory}"


def identity_key(spec: RunSpec, sample_unit: str | None = None) -> tuple:
    """The identity as a hashable key (nested values as sorted JSON)."""
    return tuple(
        json.dumps(value, sort_keys=True) if isinstance(value, dict | list) else value
        for value in identity(spec, sample_unit).values()
    )


def identity_id(spec: RunSpec, sample_unit: str | None = None) -> str:
    """A short, stable name for the identity (8 hex digits of its hash)."""
    text = json.dumps(identity(spec, sample_unit), sort_keys=True)
    return hashlib.sha1(text.encode("utf-8")).hexdigest()[:8]
