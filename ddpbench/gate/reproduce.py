"""A command that reproduces a configuration the gate flagged: one `ddpbench sweep` line limited to
that configuration, with the candidate's repeats. Every option that defines a configuration
(ddpbench.config.configuration: the workload, the strategy with the single-device reference, the
world size, batch, precision, steps, threads, loader workers, profiled steps and every DDP option)
is written from that one declaration, in its current spelling. No torch.

A user's workload file is named in the record as the sweep was given it, often relative to the
folder the sweep ran in. So the command names a folder and gives the path as it works from there:
the folder the run started in where the record keeps it and the file is there, else the gate's own
working folder when the file is found from it, else the first folder above the candidate sweep's
that holds it. Where none does, the command keeps the path as recorded and says so.
"""

from __future__ import annotations

import json
import os
import shlex
from dataclasses import dataclass, field

from ddpbench.config.configuration import CONFIGURATION_OPTIONS, ConfigurationOption, flag_default, spec_value
from ddpbench.config.plan import SUITES, world_sizes
from ddpbench.config.secrets import HIDDEN
from ddpbench.config.spec import RunSpec
from ddpbench.config.workloads import is_user_workload
from ddpbench.records.schema import Record


@dataclass
class Reproduction:
    argv: list[str]
    """`ddpbench sweep ...` as a list of arguments (without the folder)."""
    folder: str | None
    """Where to run it: the workload paths in `argv` work from there. None: any folder."""
    notes: list[str] = field(default_factory=list)
    """What the command cannot pin down, and what else it runs."""

    @property
    def command(self) -> str:
        line = shlex.join(["ddpbench", *self.argv])
        return f"cd {shlex.quote(self.folder)} && {line}" if self.folder else line

    def as_dict(self) -> dict:
        return {"command": self.command, "argv": ["ddpbench", *self.argv], "folder": self.folder, "notes": self.notes}


def _folders(candidate_dir: str, cwd: str) -> list[str]:
    """The gate's working folder, then every folder above the candidate sweep's."""
    found = [os.path.abspath(cwd)]
    folder = os.path.abspath(candidate_dir)
    while True:
        parent = os.path.dirname(folder)
        if parent == folder:
            return found
        folder = parent
        if folder not in found:
            found.append(folder)


def locate(path: str, candidate_dir: str, cwd: str, started_in: str | None = None) -> tuple[str | None, str | None]:
    """(the folder to run from, the path as it works from there); (None, None) where the file is
    nowhere to be found. A relative path is tried first from the folder the run started in, where
    the record says it (`spec.started_in`)."""
    if started_in and not os.path.isabs(path) and os.path.exists(os.path.join(started_in, path)):
        return started_in, path
    if os.path.isabs(path):
        if not os.path.exists(path):
            return None, None
        here = os.path.abspath(cwd)
        inside = os.path.commonpath([here, path]) == here
        return here, os.path.relpath(path, here) if inside else path
    for folder in _folders(candidate_dir, cwd):
        if os.path.exists(os.path.join(folder, path)):
            return folder, path
    return None, None


def _sweep_options(candidate_dir: str) -> dict:
    """The candidate sweep's options as its manifest keeps them; empty without one."""
    try:
        with open(os.path.join(candidate_dir, "manifest.json"), encoding="utf-8") as handle:
            return json.load(handle).get("options") or {}
    except (OSError, ValueError, AttributeError):
        return {}


def _generic(option: ConfigurationOption, spec: RunSpec) -> list[str]:
    """`value` and `switch` options: the run's value where it is not the sweep option's default."""
    value = spec_value(spec, option.fields[0])
    default, negatable = flag_default(option)
    if value is None:
        return []
    if option.form == "switch":
        if value == default:
            return []
        if negatable and not value:
            return ["--no-" + option.flag[2:]]
        return [option.flag]
    shown = ",".join(map(str, default)) if isinstance(default, tuple) else default
    return [] if shown is not None and str(value) == str(shown) else [option.flag, str(value)]


@dataclass
class _Context:
    spec: RunSpec
    runs: int
    options: dict
    """The candidate sweep's options, as its manifest keeps them."""
    candidate_dir: str
    cwd: str
    notes: list[str] = field(default_factory=list)
    folder: str | None = None

    @property
    def largest(self) -> int:
        """The sweep's processes per node: a local run keeps its sweep's, so that it gets the threads it had."""
        spec = self.spec
        return spec.nproc if spec.launched_by_torchrun else self.options.get("max_world_size", spec.nproc)


def _workloads(context: _Context) -> list[str]:
    spec = context.spec
    if spec.script is not None:
        return []
    workload = spec.workload
    if not is_user_workload(workload):
        return ["--workloads", workload]
    path, _, factory = workload.rpartition(":")
    folder, found = locate(path, context.candidate_dir, context.cwd, spec.started_in)
    if found is None:
        context.notes.append(
            f"the workload file {path} is not found from here nor above the candidate's folder: run the command "
            "from the folder the sweep ran in"
        )
        return ["--workloads", workload]
    context.folder = folder
    return ["--workloads", f"{found}:{factory}"]


def _data_dir(context: _Context) -> list[str]:
    """An image folder, found as a workload file is: the run read it instead of synthetic data, so a
    command without it would measure something else."""
    data_dir = context.spec.data_dir
    if not data_dir:
        return []
    folder, found = locate(data_dir, context.candidate_dir, context.cwd, context.spec.started_in)
    if found is None:
        context.notes.append(
            f"the data folder {data_dir} is not found from here nor above the candidate's folder: run the command "
            "from the folder the sweep ran in"
        )
        return ["--data-dir", data_dir]
    if context.folder is not None and folder != context.folder:
        found = os.path.abspath(os.path.join(folder, found))  # the command runs from the workload's folder
    else:
        context.folder = folder
    return ["--data-dir", found]


def _script(context: _Context) -> list[str]:
    script = context.spec.script
    if script is None:
        return []
    folder, path = locate(script.path, context.candidate_dir, context.cwd)
    if path is None:
        context.notes.append(
            f"the script {script.path} is not found from here: run it from the folder the sweep ran in"
        )
        path = script.path
    context.folder = folder
    if any(HIDDEN in arg for arg in script.args):
        context.notes.append("the script's arguments hold secrets the record does not keep: give them again after --")
    return ["--script", path]


def _threads(context: _Context) -> list[str]:
    spec = context.spec
    if spec.threads_per_rank is None:
        return []
    # A dp process drives its N devices with N slices of the cores: the option is one slice.
    per_device = spec.threads_per_rank // (spec.world_size if spec.strategy == "dp" else 1)
    return ["--threads-per-rank", str(max(1, per_device))]


def _batch(context: _Context, scaling: str) -> list[str]:
    spec = context.spec
    if spec.batch_size is None or spec.script is not None or spec.scaling != scaling:
        return []
    if scaling == "strong":
        return ["--global-batch", str(spec.batch_size * spec.world_size)]
    return ["--batch-size", str(spec.batch_size)]


OWN = {
    "workloads": _workloads,
    "path": _script,
    "script_args": lambda c: ["--", *c.spec.script.args] if c.spec.script is not None and c.spec.script.args else [],
    "strategies": lambda c: [
        "--strategies",
        "ddp" if c.spec.script is not None else ",".join(dict.fromkeys(["local", c.spec.strategy])),
    ],
    "device": lambda c: [] if c.spec.device == "cuda" else ["--device", c.spec.device],
    "gpus": lambda c: ["--gpus-per-node", str(c.largest)] if c.spec.device == "cuda" else [],
    "nproc": lambda c: [] if c.spec.device == "cuda" else ["--max-nproc", str(c.largest)],
    "launcher": lambda c: ["--launcher", c.spec.launcher] if c.spec.nnodes > 1 else [],
    "nodes": lambda c: ["--node-counts", str(c.spec.nnodes)] if c.spec.nnodes > 1 else [],
    "scaling": lambda c: ["--scaling", "strong"] if c.spec.scaling == "strong" else [],
    "batch_size": lambda c: _batch(c, "weak"),
    "global_batch": lambda c: _batch(c, "strong"),
    "threads_per_rank": _threads,
    "data_dir": _data_dir,
}
"""How the reproduce command writes the options declared `own` (ddpbench.config.configuration)."""


def reproduction(runs: list[Record], candidate_dir: str, cwd: str) -> Reproduction:
    """The command for a configuration, from its candidate runs (they share a configuration): one
    word group per option that defines a configuration (CONFIGURATION_OPTIONS), then the suite
    whose defaults the sweep starts from and the candidate's repeats."""
    spec = runs[0].spec
    context = _Context(spec, len(runs), _sweep_options(candidate_dir), candidate_dir, cwd)
    argv, script_args = ["sweep"], []
    for option in CONFIGURATION_OPTIONS:
        words = OWN[option.dest](context) if option.form == "own" else _generic(option, spec)
        if option.dest == "script_args":
            script_args = words
        else:
            argv += words
    suite = context.options.get("suite") if context.options.get("suite") in SUITES else None
    if suite:
        argv += ["--suite", suite]
    argv += ["--repeat", str(len(runs)), *script_args]
    if spec.launched_by_torchrun and spec.nnodes == 1:
        smallest = SUITES[suite or ("gpu" if spec.device == "cuda" else "cpu")].smallest_world_size
        others = [n for n in world_sizes(spec.nproc) if min(smallest, spec.nproc) <= n < spec.nproc]
        if others:
            context.notes.append(
                f"a sweep runs every world size up to its largest: this one also runs x{', x'.join(map(str, others))}"
            )
    return Reproduction(argv, context.folder, context.notes)
