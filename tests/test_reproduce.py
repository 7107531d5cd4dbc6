"""The gate's reproduce command runs the configuration it names. Round trip, for every option of
`ddpbench sweep` that defines a configuration: a sweep with that option at a value other than its
default plans a run; a record of that run gives a reproduce command; that command, parsed by
sweep's own parser, plans the same run again, every configuration field equal. The options come
from the one declaration (ddpbench.config.configuration), and every option sweep has must be
declared there or named as changing nothing a run measures: a new option in neither fails here.
No process starts: records are the fixture's with the planned spec."""

from __future__ import annotations

import json
import os

import pytest
from conftest import FIXTURES
from msgspec.structs import replace

from ddpbench.cli import build_parser
from ddpbench.commands.sweep import sweep_options_from_args
from ddpbench.config.configuration import (
    CONFIGURATION_OPTIONS,
    NOT_CONFIGURATION,
    configuration_fields,
    spec_value,
)
from ddpbench.config.plan import plan_sweep
from ddpbench.gate.reproduce import reproduction
from ddpbench.records.store import load_record

RECORD = os.path.join(FIXTURES, "sweeps", "cpu-mlp-with-failure", "runs", "mlp-ddp-n2.json")
SCRIPT = os.path.join(FIXTURES, "scripts", "ddp_tutorial.py")
BASE = ["--device", "cpu", "--max-nproc", "2", "--workloads", "mlp", "--strategies", "local,ddp"]
ON_SCRIPT = ["--device", "cpu", "--max-nproc", "2", "--script", SCRIPT, "--strategies", "ddp"]

# Per declared option: a sweep with it away from its default (the base's options before it, so the
# last spelling wins as argparse reads it).
CASES = {
    "workloads": [*BASE, "--workloads", "gpt2"],
    "path": ON_SCRIPT,
    "sample_unit": [*ON_SCRIPT, "--sample-unit", "tokens"],
    "units_per_sample": [*ON_SCRIPT, "--units-per-sample", "128"],
    "run_to_end": [*ON_SCRIPT, "--run-to-end"],
    "script_args": [*ON_SCRIPT, "--", "--lr", "0.1", "--epochs=2"],
    "strategies": [*BASE, "--strategies", "local,dp"],
    "compile": [*BASE, "--compile", "default"],
    "device": ["--device", "cuda", "--gpus-per-node", "2", "--workloads", "mlp", "--strategies", "local,ddp"],
    "gpus": ["--gpus-per-node", "4", "--workloads", "mlp", "--strategies", "local,ddp"],
    "nproc": [*BASE, "--max-nproc", "4"],
    "launcher": [*BASE, "--launcher", "slurm", "--node-counts", "2"],
    "rank_start": [*BASE, "--rank-start", "exec"],
    "nodes": [*BASE, "--launcher", "slurm", "--node-counts", "1,2"],
    "size": [*BASE, "--size", "full"],
    "scaling": [*BASE, "--scaling", "strong", "--global-batch", "32"],
    "batch_size": [*BASE, "--batch-size", "16"],
    "global_batch": [*BASE, "--scaling", "strong", "--global-batch", "12"],
    "precision": [*BASE, "--precision", "bf16"],
    "steps": [*BASE, "--steps", "40"],
    "warmup": [*BASE, "--warmup", "7"],
    "num_workers": [*BASE, "--num-workers", "2"],
    "data_dir": [*BASE, "--data-dir", os.path.join(FIXTURES, "sweeps")],
    "threads_per_rank": [*BASE, "--threads-per-rank", "3"],
    "slowdown": [*BASE, "--slowdown", "0.25"],
    "profile": [*BASE, "--no-profile"],
    "profile_active": [*BASE, "--profile-steps", "5"],
    "bucket_cap_mb": [*BASE, "--bucket-cap-mb", "5"],
    "gradient_as_bucket_view": [*BASE, "--gradient-as-bucket-view"],
    "static_graph": [*BASE, "--static-graph"],
    "find_unused_parameters": [*BASE, "--find-unused-parameters"],
    "broadcast_buffers": [*BASE, "--no-broadcast-buffers"],
    "comm_hook": [*BASE, "--comm-hook", "fp16_compress"],
}
MACHINE = {"cpu": 8, "cuda": 4}
"""Cores and GPUs of the machine the plans are made for: room for every case's processes and threads."""


def sweep_parser():
    parser = build_parser()
    commands = next(action for action in parser._actions if getattr(action, "choices", None))
    return commands.choices["sweep"]


def plan(argv: list[str]):
    """What `ddpbench sweep ARGV` plans on MACHINE, parsed by sweep's own parser as `main` does."""
    args = build_parser().parse_args(["sweep", *argv])
    gpus = MACHINE["cuda"] if args.gpus or args.device == "cuda" else 0
    return plan_sweep(sweep_options_from_args(args, shape=(gpus, MACHINE["cpu"], args.nodes, "this machine")), "o")


def measured(specs):
    """The configuration a case is about: its largest run that is not the reference."""
    return max((s for s in specs if s.strategy != "local"), key=lambda s: (s.world_size, s.compile != "off"))


def test_every_option_of_sweep_is_declared_as_defining_a_configuration_or_as_not():
    dests = {action.dest for action in sweep_parser()._actions}
    declared = {option.dest for option in CONFIGURATION_OPTIONS}
    assert not declared & set(NOT_CONFIGURATION)
    assert dests - declared - set(NOT_CONFIGURATION) == set(), "declare it in ddpbench/config/configuration.py"
    assert declared | set(NOT_CONFIGURATION) <= dests  # nothing declared that sweep does not have
    assert set(CASES) == declared  # and every declared option has its round trip below


@pytest.mark.parametrize("dest", sorted(CASES))
def test_the_reproduce_command_plans_the_same_configuration_again(dest, tmp_path):
    original = measured(plan(CASES[dest]))
    base = measured(
        plan(ON_SCRIPT if dest in ("sample_unit", "units_per_sample", "run_to_end", "script_args") else BASE)
    )
    option = next(option for option in CONFIGURATION_OPTIONS if option.dest == dest)
    # The case is away from the default: the option's field differs from the base sweep's.
    assert any(spec_value(original, field) != spec_value(base, field) for field in option.fields) or (
        dest in ("nodes", "device")
    ), (dest, original)
    record = load_record(RECORD)
    runs = [replace(record, spec=original.replace(repeat=repeat)) for repeat in (1, 2, 3)]
    manifest = {"options": {"suite": "gpu" if original.device == "cuda" else "cpu", "max_world_size": 2}}
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    made = reproduction(runs, str(tmp_path), os.getcwd())
    argv = made.argv
    assert argv[0] == "sweep" and "--nproc" not in argv and "--nodes" not in argv and "--gpus" not in argv, argv
    assert option.form == "own" or {option.flag, "--no-" + option.flag[2:]} & set(argv), (dest, argv)
    again = [
        spec
        for spec in plan(argv[1:])
        if (spec.strategy, spec.compile, spec.world_size, spec.nnodes)
        == (original.strategy, original.compile, original.world_size, original.nnodes)
    ]
    assert again, (dest, argv)
    assert {spec.repeat for spec in again} == {1, 2, 3}
    for field in configuration_fields():
        value, expected = spec_value(again[0], field), spec_value(original, field)
        if (
            field in ("script.path", "data_dir") and value is not None
        ):  # given from the folder the command runs in (`cd FOLDER && ...`)
            value = os.path.abspath(os.path.join(made.folder or os.getcwd(), value))
        assert value == expected, (dest, field, argv)


def test_the_declared_defaults_are_sweeps_own():
    """The reproduce command reads each option's default from the field that declares its flag
    (`config.configuration.flag_default`), not from sweep's parser: the two are the same."""
    import argparse

    from ddpbench.config.configuration import flag_default

    actions = {}
    for action in sweep_parser()._actions:
        actions.setdefault(action.dest, action)  # the current spelling is declared first
    for option in CONFIGURATION_OPTIONS:
        if option.form == "own":
            continue
        default, negatable = flag_default(option)
        assert default == actions[option.dest].default, option.flag
        assert negatable == isinstance(actions[option.dest], argparse.BooleanOptionalAction), option.flag
