"""A command that reproduces a configuration the gate flagged: one `ddpbench sweep` line limited to
that configuration (its workload, its strategy with the single-device reference, its world size,
batch, precision, steps and DDP options) with the candidate's repeats. No torch.

A user's workload file is named in the record as the sweep was given it, often relative to the
folder the sweep ran in, which the record does not keep. So the command names a folder and gives
the path as it works from there: the gate's own working folder when the file is found from it,
else the first folder above the candidate sweep's that holds it. Where neither does, the command
keeps the path as recorded and says so.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shlex
from dataclasses import dataclass, field

from ddpbench.config.plan import SUITES, world_sizes
from ddpbench.config.secrets import HIDDEN
from ddpbench.config.spec import DDPKnobs, RunSpec
from ddpbench.config.workloads import is_user_workload
from ddpbench.records.schema import Record

SWEEP_KNOBS = ("comm_hook", "bucket_cap_mb")
"""The DDP options `ddpbench sweep` takes (the others only `ddpbench run`)."""


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


def locate(path: str, candidate_dir: str, cwd: str) -> tuple[str | None, str | None]:
    """(the folder to run from, the path as it works from there); (None, None) where the file is
    nowhere to be found."""
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


def _workload_options(spec: RunSpec, candidate_dir: str, cwd: str, notes: list[str]) -> tuple[list[str], str | None]:
    if spec.script is not None:
        script = spec.script
        folder, path = locate(script.path, candidate_dir, cwd)
        if path is None:
            notes.append(f"the script {script.path} is not found from here: run it from the folder the sweep ran in")
            path = script.path
        options = ["--script", path, "--sample-unit", script.sample_unit]
        if script.units_per_sample is not None:
            options += ["--units-per-sample", str(script.units_per_sample)]
        if script.run_to_end:
            options.append("--run-to-end")
        if any(HIDDEN in arg for arg in script.args):
            notes.append("the script's arguments hold secrets the record does not keep: give them again after --")
        return options + (["--", *script.args] if script.args else []), folder
    workload = spec.workload
    if not is_user_workload(workload):
        return ["--workloads", workload], None
    path, _, factory = workload.rpartition(":")
    folder, found = locate(path, candidate_dir, cwd)
    if found is None:
        notes.append(
            f"the workload file {path} is not found from here nor above the candidate's folder: run the command "
            "from the folder the sweep ran in"
        )
        return ["--workloads", workload], None
    return ["--workloads", f"{found}:{factory}"], folder


def reproduction(runs: list[Record], candidate_dir: str, cwd: str) -> Reproduction:
    """The command for a configuration, from its candidate runs (they share a configuration)."""
    spec = runs[0].spec
    notes: list[str] = []
    workload, folder = _workload_options(spec, candidate_dir, cwd, notes)
    script_args = []
    if "--" in workload:
        cut = workload.index("--")
        workload, script_args = workload[:cut], workload[cut:]
    strategies = "ddp" if spec.script is not None else ",".join(dict.fromkeys(["local", spec.strategy]))
    argv = ["sweep", *workload, "--strategies", strategies]
    if spec.compile != "off":
        argv += ["--compile", spec.compile]
    options = _sweep_options(candidate_dir)
    # A device is a slice of cores set by the sweep's largest world size: a local run keeps its
    # sweep's, so that it gets the threads it had.
    nproc = spec.nproc if spec.launched_by_torchrun else options.get("max_world_size", spec.nproc)
    if spec.device == "cuda":
        argv += ["--gpus", str(nproc)]
    else:
        argv += ["--device", spec.device, "--nproc", str(nproc)]
    if spec.nnodes > 1:
        argv += ["--launcher", spec.launcher, "--nodes", str(spec.nnodes)]
    suite = options.get("suite") if options.get("suite") in SUITES else None
    if suite:
        argv += ["--suite", suite]
    if spec.size is not None:
        argv += ["--size", spec.size]
    if spec.batch_size is not None and spec.script is None:
        if spec.scaling == "strong":
            argv += ["--scaling", "strong", "--global-batch", str(spec.batch_size * spec.world_size)]
        else:
            argv += ["--batch-size", str(spec.batch_size)]
    argv += ["--precision", spec.precision, "--steps", str(spec.steps), "--warmup", str(spec.warmup)]
    argv += ["--repeat", str(len(runs))]
    if spec.uses_ddp_knobs:
        default = DDPKnobs()
        for name in SWEEP_KNOBS:
            value = getattr(spec.ddp, name)
            if value != getattr(default, name) and value is not None:
                argv += ["--" + name.replace("_", "-"), str(value)]
        unset = [
            knob.name
            for knob in dataclasses.fields(DDPKnobs)
            if knob.name not in SWEEP_KNOBS and getattr(spec.ddp, knob.name) != getattr(default, knob.name)
        ]
        if unset:
            notes.append(f"DDP options ddpbench sweep does not take, set on the run: {', '.join(sorted(unset))}")
    if not spec.profile:
        argv.append("--no-profile")
    elif spec.profile_active != RunSpec.profile_active:
        argv += ["--profile-steps", str(spec.profile_active)]
    argv += script_args
    if spec.launched_by_torchrun and spec.nnodes == 1:
        smallest = SUITES[suite or ("gpu" if spec.device == "cuda" else "cpu")].smallest_world_size
        others = [n for n in world_sizes(spec.nproc) if min(smallest, spec.nproc) <= n < spec.nproc]
        if others:
            notes.append(
                f"a sweep runs every world size up to its largest: this one also runs x{', x'.join(map(str, others))}"
            )
    return Reproduction(argv, folder, notes)
