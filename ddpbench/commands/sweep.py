"""`ddpbench sweep`: a scaling sweep on this machine or a SLURM allocation, its table and report.
No torch here."""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import time

from ddpbench.commands.arguments import (
    BAD_INPUT,
    INTERRUPTED,
    add_deprecated_option,
    add_reliability_arguments,
    add_script_arguments,
    add_verbose_argument,
    exit_codes,
    node_counts,
    positive_int,
    script_from_args,
)
from ddpbench.commands.explain import closing_lines
from ddpbench.commands.table import print_table
from ddpbench.config.ids import check_id
from ddpbench.config.options import add_arguments, from_args
from ddpbench.config.plan import SUITES, SweepOptions
from ddpbench.config.spec import DEVICES, DDPKnobs, SpecError, resolve_device


def add_sweep_parser(commands) -> None:
    sweep = commands.add_parser("sweep", help="a scaling sweep: local, ddp, dp over world sizes 1, 2, 4, ...")
    add_sweep_arguments(sweep)
    sweep.add_argument(
        "--dry-run",
        action="store_true",
        help="print the plan (runs, world sizes, rounds) and its estimated time and trace disk, start nothing; "
        "with --gpus G it plans for a node of G GPUs without asking this machine for them",
    )
    exit_codes(
        sweep,
        "0 every run is ok",
        "1 a run failed, timed out or failed a correctness check (the others still ran; --resume reruns it)",
        BAD_INPUT,
        INTERRUPTED,
    )
    sweep.set_defaults(handler=command_sweep)


def add_sweep_arguments(parser: argparse.ArgumentParser) -> None:
    """The sweep's options: SweepOptions' fields, and what decides the device and world sizes."""
    devices = parser.add_mutually_exclusive_group()
    devices.add_argument(
        "--gpus-per-node",
        "--gpus",
        dest="gpus",
        type=positive_int,
        metavar="G",
        help="GPUs per node: at most G processes on a node (implies --device cuda)",
    )
    devices.add_argument(
        "--max-nproc",
        dest="nproc",
        type=positive_int,
        metavar="N",
        help="processes per node at most: one-node runs take world sizes 1, 2, 4, ... N, runs over several nodes "
        "N per node (default: every GPU, or every CPU core)",
    )
    add_deprecated_option(
        devices, "--nproc", "--nproc-per-node", dest="nproc", type=positive_int, instead="--max-nproc N"
    )
    add_arguments(parser, SweepOptions, ("launcher", "rank_start", "nodes"))
    add_deprecated_option(parser, "--nodes", dest="nodes", type=node_counts, instead="--node-counts 1,2,4")
    parser.add_argument(
        "--device", choices=DEVICES, default="auto", help="auto (default) picks cuda when a GPU is visible"
    )
    parser.add_argument(
        "--suite", default=None, help=f"one of {', '.join(SUITES)} (default: gpu with GPUs, cpu without)"
    )
    add_arguments(
        parser,
        SweepOptions,
        (
            "workloads",
            "size",
            "strategies",
            "compile",
            "steps",
            "warmup",
            "batch_size",
            "scaling",
            "global_batch",
            "precision",
        ),
    )
    add_arguments(parser, SweepOptions, ("num_workers", "data_dir"))
    parser.add_argument(
        "--threads-per-rank",
        type=positive_int,
        default=None,
        metavar="T",
        help="CPU threads of every rank, the reference's too (N x T for dp at world size N); default: usable "
        "cores // the largest world size, so that every device is the same slice of the machine",
    )
    parser.add_argument(
        "--out", default="results", metavar="DIR", help="sweeps go to DIR/<sweep-id>/ (default results)"
    )
    parser.add_argument("--sweep-id", default=None, help="folder name of the sweep (default: date-time-suite)")
    parser.add_argument("--resume", action="store_true", help="carry on with an existing sweep: rerun what is not ok")
    add_arguments(parser, SweepOptions, ("profile", "profile_active"))
    parser.add_argument(
        "--run-timeout",
        type=float,
        default=None,
        help="seconds before a run is ended as timeout (default: derived from the expected step time)",
    )
    add_arguments(parser, SweepOptions, ("repeat",))
    parser.add_argument(
        "--pg-timeout",
        type=float,
        default=None,
        dest="pg_timeout_s",
        help="seconds a collective may wait before a hang is declared (default: 50 expected steps, at least 60)",
    )
    add_verbose_argument(parser)
    add_ddp_arguments(parser)
    add_reliability_arguments(parser)  # --inject-fault fills SweepOptions.fault: the same flag as a run's
    add_script_arguments(parser, with_path=True)


def add_ddp_arguments(parser: argparse.ArgumentParser) -> None:
    """Every DDP option a run takes, for every ddp and replicate run of the sweep: whatever explain or
    tune advises can be tried on the whole sweep again."""
    ddp = parser.add_argument_group("DDP options (every ddp and replicate run; recorded in the spec)")
    add_arguments(ddp, DDPKnobs, [field.name for field in dataclasses.fields(DDPKnobs)])


def node_shape(args: argparse.Namespace) -> tuple[int, int, tuple[int, ...], str]:
    """(GPUs, usable cores) of a node, the node counts to sweep, and what to call the node."""
    from ddpbench.config.plan import world_sizes
    from ddpbench.host.facts import usable_cores, visible_gpu_count

    if args.launcher != "slurm":
        return visible_gpu_count(), usable_cores(), args.nodes, "this machine"
    from ddpbench.running import slurm

    allocation = slurm.current_allocation()
    nodes = args.nodes or tuple(world_sizes(len(allocation.nodes)))
    slurm.check_nodes(allocation, max(nodes))
    gpus = visible_gpu_count() if allocation.gpus_per_node is None else allocation.gpus_per_node
    return gpus, allocation.cpus_per_node, nodes, f"each node of SLURM job {allocation.job_id}"


def sweep_options_from_args(args: argparse.Namespace, shape: tuple | None = None) -> SweepOptions:
    from ddpbench.host.gpu_needs import check_not_rocm
    from ddpbench.host.torch_env import check_gpu_build, check_installed, gpu_build

    # The runs use this interpreter's torch, here or in the batch job: missing or too old is said
    # before torch is asked how many GPUs there are.
    check_installed()
    gpu_count, cores, nodes, machine = shape or node_shape(args)
    device = resolve_device("cuda" if args.gpus else args.device, gpu_count)
    if device == "cuda" and shape is None:  # CUDA on this machine's torch; NCCL per run, by resolve()
        check_not_rocm(gpu_build())
        check_gpu_build(1)
    if device == "cuda":
        largest = args.gpus or args.nproc or gpu_count
        if largest > gpu_count:
            raise SpecError(f"asked for {largest} GPUs; {machine} has {gpu_count}")
        if largest < 1:
            raise SpecError("no GPU is visible; use --device cpu (or leave --device auto)")
    else:
        largest = args.nproc or cores
        if largest > cores:
            raise SpecError(
                f"asked for {largest} CPU processes; {machine} has {cores} usable cores "
                "(a CPU device is a slice of cores, so at most one process per core)"
            )
    threads = getattr(args, "threads_per_rank", None)
    if threads is not None:
        # Every device the same slice still, only a smaller one: the sweep uses that many cores.
        if threads * largest > cores:
            raise SpecError(
                f"--threads-per-rank {threads} for {largest} processes needs {threads * largest} cores; {machine} "
                f"has {cores} usable"
            )
        cores = threads * largest
    return from_args(
        SweepOptions,
        args,
        nodes=nodes,
        device=device,
        max_world_size=largest,
        cores=cores,
        suite=args.suite or ("gpu" if device == "cuda" else "cpu"),
        script=script_from_args(args),
    )


def dry_run(args: argparse.Namespace) -> int:
    """The plan and its estimated cost; nothing started, nothing written. With --gpus G the node is
    one of G GPUs: a plan for a GPU node can be read on a laptop."""
    from ddpbench.config.plan import plan_sweep
    from ddpbench.config.plan_cost import plan_cost, plan_lines
    from ddpbench.host.facts import usable_cores

    if args.resume:
        raise SpecError("--dry-run plans a new sweep; leave out --resume")
    shape = None
    if args.gpus and args.launcher != "slurm":
        shape = (args.gpus, usable_cores(), args.nodes, f"a node of {args.gpus} GPUs")
    options = sweep_options_from_args(args, shape)
    plan = plan_sweep(options, os.path.join(args.out, args.sweep_id or "dry-run"))
    node = shape[3] if shape else f"this machine ({options.device})"
    print(f"sweep plan: {len(plan)} runs on {node}, suite {options.suite} (--dry-run: nothing started)")
    for line in [*plan_lines(plan), *plan_cost(plan).lines()]:
        print(line)
    return 0


def command_sweep(args: argparse.Namespace) -> int:
    from ddpbench.config.plan import plan_sweep
    from ddpbench.report.html import report_words
    from ddpbench.running.resolve import resolve
    from ddpbench.running.sweep import prepare, run_sweep

    if args.resume and not args.sweep_id:
        raise SpecError("--resume needs --sweep-id: the sweep to carry on with")
    if args.dry_run:
        return dry_run(args)
    options = None if args.resume else sweep_options_from_args(args)
    if args.sweep_id is not None:
        check_id("--sweep-id", args.sweep_id, f"--out ({args.out!r})", nested=True)
    sweep_id = args.sweep_id or f"{time.strftime('%Y%m%d-%H%M%S')}-{options.suite}"
    sweep_dir = os.path.join(args.out, sweep_id)
    plan = None if args.resume else plan_sweep(options, sweep_dir)
    stored_options = None if args.resume else dataclasses.asdict(options)
    for spec in plan or []:  # every planned run is valid on this machine before the first starts
        resolve(spec)
    manifest, plan = prepare(
        sweep_dir, plan, stored_options, args.resume, tuple(getattr(args, "script_args", None) or ()), sweep_id
    )
    print(f"sweep {sweep_id}: {len(plan)} runs -> {sweep_dir}", file=sys.stderr)
    run_sweep(
        sweep_dir,
        manifest,
        plan,
        fixed_timeout_s=args.run_timeout,
        oom_backoff=args.oom_backoff,
        fixed_pg_timeout_s=args.pg_timeout_s,
        verbose=args.verbose,
    )
    # The answer in sentences first, then the table it rests on, then where everything else is.
    for line in closing_lines(sweep_dir):
        print(line)
    status = print_table(sweep_dir, save=True)
    print(f"{report_words(sweep_dir)}  (ddpbench explain {sweep_dir}: every cause, and what to try)")
    return status
