"""What defines a configuration: the one declaration of the `ddpbench sweep` options that decide
what a run measures, each with the RunSpec field it sets. No torch.

Everything that has to agree on "the same configuration" reads this tuple: the gate's reproduce
command writes one word group per entry (ddpbench.gate.reproduce), so a command the gate prints
runs what was measured; the key that matches runs across sweeps is the same fields. A new sweep
option is either declared here or named in NOT_CONFIGURATION with why it changes nothing a run
measures (tests/test_reproduce.py fails on an option that is in neither).

    ConfigurationOption("static_graph", "--static-graph", ("ddp.static_graph",), "switch")
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

Form = Literal["value", "switch", "own"]


@dataclass(frozen=True)
class ConfigurationOption:
    """One option of `ddpbench sweep` that defines a configuration."""

    dest: str
    """The option's destination in sweep's parser (`args.<dest>`)."""
    flag: str
    """The option in its current spelling, as a command that reproduces a run writes it."""
    fields: tuple[str, ...]
    """The RunSpec fields it sets, dotted for the DDP options and the script (`ddp.static_graph`)."""
    form: Form = "value"
    """How a run's value is written: `value`, `--flag VALUE` (left out where it is the option's
    default); `switch`, the option or its `--no-` form where the value is not the default; `own`,
    worked out by the reproduce command (the workload's path, world sizes, the batch under strong
    scaling: what the record keeps differently from how the sweep takes it)."""


CONFIGURATION_OPTIONS: tuple[ConfigurationOption, ...] = (
    # What runs, on what.
    ConfigurationOption("workloads", "--workloads", ("workload",), "own"),
    ConfigurationOption("path", "--script", ("script.path",), "own"),
    ConfigurationOption("sample_unit", "--sample-unit", ("script.sample_unit",)),
    ConfigurationOption("units_per_sample", "--units-per-sample", ("script.units_per_sample",)),
    ConfigurationOption("run_to_end", "--run-to-end", ("script.run_to_end",), "switch"),
    ConfigurationOption("strategies", "--strategies", ("strategy",), "own"),
    ConfigurationOption("compile", "--compile", ("compile",)),
    ConfigurationOption("device", "--device", ("device",), "own"),
    ConfigurationOption("gpus", "--gpus-per-node", ("nproc",), "own"),
    ConfigurationOption("nproc", "--max-nproc", ("nproc",), "own"),
    ConfigurationOption("launcher", "--launcher", ("launcher",), "own"),
    ConfigurationOption("rank_start", "--rank-start", ("rank_start",)),
    ConfigurationOption("nodes", "--node-counts", ("nnodes",), "own"),
    ConfigurationOption("size", "--size", ("size",)),
    # The batch: per device (weak scaling), or the global one (strong).
    ConfigurationOption("scaling", "--scaling", ("scaling",), "own"),
    ConfigurationOption("batch_size", "--batch-size", ("batch_size",), "own"),
    ConfigurationOption("global_batch", "--global-batch", ("batch_size",), "own"),
    ConfigurationOption("precision", "--precision", ("precision",)),
    ConfigurationOption("steps", "--steps", ("steps",)),
    ConfigurationOption("warmup", "--warmup", ("warmup",)),
    # The host side of a step.
    ConfigurationOption("num_workers", "--num-workers", ("num_workers",)),
    ConfigurationOption("data_dir", "--data-dir", ("data_dir",), "own"),
    ConfigurationOption("threads_per_rank", "--threads-per-rank", ("threads_per_rank",), "own"),
    ConfigurationOption("slowdown", "--slowdown", ("slowdown",)),
    # The profiled phase runs after the timed steps, but its steps are steps of the run.
    ConfigurationOption("profile", "--no-profile", ("profile",), "switch"),
    ConfigurationOption("profile_active", "--profile-steps", ("profile_active",)),
    # DDP's own options.
    ConfigurationOption("bucket_cap_mb", "--bucket-cap-mb", ("ddp.bucket_cap_mb",)),
    ConfigurationOption(
        "gradient_as_bucket_view", "--gradient-as-bucket-view", ("ddp.gradient_as_bucket_view",), "switch"
    ),
    ConfigurationOption("static_graph", "--static-graph", ("ddp.static_graph",), "switch"),
    ConfigurationOption(
        "find_unused_parameters", "--find-unused-parameters", ("ddp.find_unused_parameters",), "switch"
    ),
    ConfigurationOption("broadcast_buffers", "--broadcast-buffers", ("ddp.broadcast_buffers",), "switch"),
    ConfigurationOption("comm_hook", "--comm-hook", ("ddp.comm_hook",)),
    # The script's own arguments, after --.
    ConfigurationOption("script_args", "--", ("script.args",), "own"),
)

UNKEYED: dict[str, str] = {
    "steps": "how long the run is measured: runs of other lengths are repeats of one configuration",
    "warmup": "steps before the timed window, never counted",
    "profile_active": "how many steps the profiled phase holds",
    "slowdown": "planted work, a test of the gate: a slowed run is compared with its configuration's others",
    "launcher": "how the processes start (torchrun, srun), not what they run",
    "rank_start": "how torchrun's agent starts the ranks (fork or exec): their step times are equivalent within 3 % "
    "(docs/measurements/start-up.md), so runs started either way are repeats",
    "units_per_sample": "how many of the unit a sample holds, which the record keeps beside its throughput",
    "run_to_end": "whether a script's own loop runs on after the measured steps",
}
"""Declared options that a reproduce command carries but that do not set runs apart: runs that differ
only in these are repeats of one configuration (config.identity keys by all the others)."""

NOT_CONFIGURATION: dict[str, str] = {
    "help": "prints the help",
    "suite": "chooses defaults (workloads, size, batch, steps) that the options above then carry",
    "out": "where the records go",
    "sweep_id": "the sweep's folder name",
    "resume": "carries on with a sweep already planned",
    "repeat": "how many samples of each configuration, not what one measures",
    "run_timeout": "when a run is given up, not what it measures",
    "pg_timeout_s": "when a collective is given up, not what it measures",
    "verbose": "what reaches the terminal",
    "oom_backoff": "retries with a smaller batch, which the record then keeps as the batch",
    "fault": "a testing aid: a planted fault fails its run, which is never compared",
    "dry_run": "prints the plan and runs nothing",
}
"""Options of `ddpbench sweep` that change nothing a run measures, each with why."""


def spec_value(spec: Any, field: str) -> Any:
    """A RunSpec field by its dotted name (`ddp.static_graph`); None where a part is None (no script)."""
    value = spec
    for part in field.split("."):
        if value is None:
            return None
        value = getattr(value, part)
    return value


def flag_default(option: ConfigurationOption) -> tuple[Any, bool]:
    """(the option's default, whether it has a `--no-` form), from the dataclass field that declares
    its flag (`config.options.flag`: `SweepOptions`, a script's `ScriptSpec` or `DDPKnobs`), which
    `ddpbench sweep`'s parser is built from too: the reproduce command reads them here, not from the
    command line's modules."""
    import argparse
    import dataclasses

    from ddpbench.config.options import argument_options, flag_of
    from ddpbench.config.plan import SweepOptions
    from ddpbench.config.spec import DDPKnobs, ScriptSpec

    for owner in (SweepOptions, ScriptSpec, DDPKnobs):
        fields = {field.name: field for field in dataclasses.fields(owner)}
        if option.dest in fields and flag_of(fields[option.dest]) is not None:
            _, keywords = argument_options(owner, option.dest)
            return keywords.get("default"), keywords.get("action") is argparse.BooleanOptionalAction
    raise KeyError(f"{option.flag} is declared on no dataclass field")


def configuration_fields() -> tuple[str, ...]:
    """Every RunSpec field the declared options set, in order, once each."""
    return tuple(dict.fromkeys(field for option in CONFIGURATION_OPTIONS for field in option.fields))
