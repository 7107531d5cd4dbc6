"""The `ddpbench` command line. Bad input fails here, exit code 2, before any process starts."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import signal
import sys
import time
import warnings

from ddpbench.commands.arguments import (
    USAGE_ERROR,
    OneLineErrorParser,
    add_launcher_argument,
    add_reliability_arguments,
    add_run_arguments,
    add_verbose_argument,
    comma_list,
    node_counts,
    on_sweep_folder,
    positive_int,
    spec_from_args,
)
from ddpbench.commands.beyond import command_comm, command_project, command_tune
from ddpbench.commands.explain import add_explain_parser, closing_lines
from ddpbench.commands.gate import (
    add_verdict_arguments,
    command_ab,
    command_baseline_save,
    command_gate,
    command_history_add,
    command_history_changes,
)
from ddpbench.config.faults import parse_fault
from ddpbench.config.spec import COMM_HOOKS, DEVICES, PRECISIONS, SIZES, STRATEGIES, DDPKnobs, SpecError, resolve_device


def command_run(args: argparse.Namespace) -> int:
    from ddpbench.records.store import load_record
    from ddpbench.report.summary import format_summary
    from ddpbench.running.launch import launch_with_oom_backoff, oversubscription, oversubscription_warning, resolve

    spec = resolve(spec_from_args(args))
    figures = oversubscription(spec)
    if figures:
        print(f"ddpbench run: {oversubscription_warning(figures)}", file=sys.stderr)
    result = launch_with_oom_backoff(
        spec, timeout_s=args.run_timeout, oom_backoff=args.oom_backoff, verbose=args.verbose
    )
    if result.record_path is None:
        if result.exit_code != 0:
            print(
                f"node {spec.node_rank} FAILED ({result.message or f'exit code {result.exit_code}'}); "
                f"the node of global rank 0 writes the record"
            )
            return 1
        print(f"node {spec.node_rank} finished; global rank 0 ran on another node and wrote the record there")
        return 0
    record = load_record(result.record_path)
    print(format_summary(record, result.record_path))
    if record.status != "ok" or record.failed_checks() or record.error:
        return 1
    return 0


def add_sweep_arguments(parser: argparse.ArgumentParser) -> None:
    from ddpbench.config.plan import SCALING_MODES, SUITES

    add = parser.add_argument
    devices = parser.add_mutually_exclusive_group()
    devices.add_argument(
        "--gpus",
        "--gpus-per-node",
        dest="gpus",
        type=positive_int,
        help="GPUs per node: the largest world size on one node (implies --device cuda)",
    )
    devices.add_argument(
        "--nproc",
        "--nproc-per-node",
        dest="nproc",
        type=positive_int,
        help="processes per node: the largest world size on one node " "(default: every GPU, or every CPU core)",
    )
    add_launcher_argument(parser)
    add(
        "--nodes",
        type=node_counts,
        default=(),
        help="with --launcher slurm: node counts to sweep, e.g. 1,2,4 (whole nodes above 1; "
        "default 1, 2, 4, ... up to the allocation's nodes)",
    )
    add("--device", choices=DEVICES, default="auto")
    add("--suite", default=None, help=f"one of {', '.join(SUITES)} (default: gpu with GPUs, cpu without)")
    add("--workloads", type=comma_list, default=(), help="comma-separated workloads instead of the suite's")
    add("--size", choices=SIZES, default=None)
    add("--strategies", type=comma_list, default=STRATEGIES, help=f"subset of {','.join(STRATEGIES)}")
    add("--steps", type=int, default=None, help="steps per run, warm-up included (default: the suite's)")
    add("--warmup", type=int, default=None)
    add("--batch-size", type=int, default=None, help="per-device batch for every workload (weak scaling)")
    add(
        "--scaling",
        choices=SCALING_MODES,
        default="weak",
        help="weak: fixed per-device batch (default); strong: fixed global batch",
    )
    add("--global-batch", type=int, default=None, help="strong scaling's global batch")
    add("--precision", choices=PRECISIONS, default=None)
    add("--comm-hook", choices=COMM_HOOKS, default="allreduce")
    add("--bucket-cap-mb", type=float, default=25.0)
    add("--out", default="results", help="sweeps go to OUT/<sweep-id>/ (default results)")
    add("--sweep-id", default=None, help="folder name of the sweep (default: date-time-suite)")
    add("--resume", action="store_true", help="carry on with an existing sweep: rerun what is not ok")
    add("--no-profile", dest="profile", action="store_false", help="skip the profiled phase of every run")
    add(
        "--run-timeout",
        type=float,
        default=None,
        help="seconds before a run is ended as timeout (default: derived from the expected step time)",
    )
    add(
        "--repeat",
        type=positive_int,
        default=1,
        help="run every configuration K times (the gate then measures the run-to-run noise from them)",
    )
    add(
        "--pg-timeout",
        type=float,
        default=None,
        dest="pg_timeout_s",
        help="seconds a collective may wait before a hang is declared (default: 50 expected steps, at least 60)",
    )
    add_verbose_argument(parser)
    add_reliability_arguments(parser)


def node_shape(args: argparse.Namespace) -> tuple[int, int, tuple[int, ...], str]:
    """(GPUs, usable cores) of a node, the node counts to sweep, and what to call the node."""
    from ddpbench.config.plan import world_sizes
    from ddpbench.running.environment import usable_cores, visible_gpu_count

    if args.launcher != "slurm":
        return visible_gpu_count(), usable_cores(), args.nodes, "this machine"
    from ddpbench.running import slurm

    allocation = slurm.current_allocation()
    nodes = args.nodes or tuple(world_sizes(len(allocation.nodes)))
    slurm.check_nodes(allocation, max(nodes))
    gpus = visible_gpu_count() if allocation.gpus_per_node is None else allocation.gpus_per_node
    return gpus, allocation.cpus_per_node, nodes, f"each node of SLURM job {allocation.job_id}"


def sweep_options_from_args(args: argparse.Namespace, shape: tuple | None = None):
    from ddpbench.config.plan import SweepOptions

    gpu_count, cores, nodes, machine = shape or node_shape(args)
    device = resolve_device("cuda" if args.gpus else args.device, gpu_count)
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
    return SweepOptions(
        launcher=args.launcher,
        nodes=nodes,
        device=device,
        max_world_size=largest,
        cores=cores,
        suite=args.suite or ("gpu" if device == "cuda" else "cpu"),
        workloads=args.workloads,
        strategies=args.strategies,
        size=args.size,
        steps=args.steps,
        warmup=args.warmup,
        batch_size=args.batch_size,
        scaling=args.scaling,
        global_batch=args.global_batch,
        precision=args.precision,
        ddp=DDPKnobs(bucket_cap_mb=args.bucket_cap_mb, comm_hook=args.comm_hook),
        profile=args.profile,
        repeat=args.repeat,
        fault=parse_fault(args.inject_fault).to_dict() if args.inject_fault else None,
    )


def command_sweep(args: argparse.Namespace) -> int:
    from ddpbench.config.plan import plan_sweep
    from ddpbench.report.html import build_report
    from ddpbench.running.launch import resolve
    from ddpbench.running.sweep import prepare, run_sweep

    if args.resume and not args.sweep_id:
        raise SpecError("--resume needs --sweep-id: the sweep to carry on with")
    options = None if args.resume else sweep_options_from_args(args)
    sweep_id = args.sweep_id or f"{time.strftime('%Y%m%d-%H%M%S')}-{options.suite}"
    sweep_dir = os.path.join(args.out, sweep_id)
    plan = None if args.resume else plan_sweep(options, sweep_dir)
    stored_options = None if args.resume else dataclasses.asdict(options)
    for spec in plan or []:  # every planned run is valid on this machine before the first starts
        resolve(spec)
    manifest, plan = prepare(sweep_dir, plan, stored_options, args.resume)
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
    status = print_table(sweep_dir, save=True)
    for line in closing_lines(sweep_dir):
        print(line)
    print(f"report: {build_report(sweep_dir)}")
    return status


# Options of `ddpbench sbatch` that are not the sweep's (how many values each takes): the rest of
# the command line goes to the sweep in the batch script as typed.
SBATCH_ONLY_OPTIONS = {
    "--launcher": 1,
    "--partition": 1,
    "--time": 1,
    "--account": 1,
    "--sbatch-option": 1,
    "--wait": 0,
    "--print": 0,
}


def add_sbatch_arguments(parser: argparse.ArgumentParser) -> None:
    add_sweep_arguments(parser)
    group = parser.add_argument_group("the SLURM job (the other options go to the sweep it runs)")
    group.add_argument("--partition", default=None, help="partition to run in (default: the cluster's default)")
    group.add_argument("--time", default=None, help="time limit, as sbatch takes it (e.g. 2:00:00)")
    group.add_argument("--account", default=None, help="account to charge")
    group.add_argument(
        "--sbatch-option",
        action="append",
        default=[],
        metavar="OPTION",
        help="one more #SBATCH line, e.g. --sbatch-option=--qos=high (repeatable)",
    )
    group.add_argument("--wait", action="store_true", help="wait for the job to end; exit with its exit code")
    group.add_argument("--print", action="store_true", help="write and print the batch script, submit nothing")


def command_sbatch(args: argparse.Namespace) -> int:
    """Submit a whole sweep as one job: whole nodes, one srun step per run, the report at the end."""
    from ddpbench.config.plan import plan_sweep
    from ddpbench.records.store import write_atomic
    from ddpbench.running import slurm

    sweep_argv, skip = [], 0
    for arg in args.argv[1:]:  # the sweep's own options, as typed
        name = arg.split("=", 1)[0]
        if skip or name in SBATCH_ONLY_OPTIONS:
            skip = 0 if skip else SBATCH_ONLY_OPTIONS.get(name, 0) * ("=" not in arg)
            continue
        sweep_argv.append(arg)
    args.launcher = "slurm"
    sweep_id = args.sweep_id or f"{time.strftime('%Y%m%d-%H%M%S')}-slurm"
    sweep_argv += [] if args.sweep_id else ["--sweep-id", sweep_id]
    sweep_dir = os.path.abspath(os.path.join(args.out, sweep_id))
    nodes = max(args.nodes or (1,))
    if not args.resume:  # what the job would refuse inside its allocation, refused here already
        if args.device == "cuda" and not args.gpus:
            raise SpecError("a GPU sweep needs --gpus-per-node G: the job must ask SLURM for its GPUs")
        plan_sweep(sweep_options_from_args(args, (args.gpus or 0, args.nproc or 1, args.nodes, "a node")), sweep_dir)
    if args.partition and nodes > (total := slurm.check_partition(args.partition)):
        raise SpecError(f"asked for {nodes} nodes; partition {args.partition!r} has {total}")
    options = [
        f"--{name}={value}"
        for name, value in (("partition", args.partition), ("time", args.time), ("account", args.account))
        if value
    ]
    script = slurm.sbatch_script(
        sweep_argv, sweep_dir, nodes, args.gpus, options + args.sbatch_option, sys.executable, os.getcwd()
    )
    script_path = os.path.join(sweep_dir, "sbatch.sh")
    write_atomic(script_path, script)
    if args.print:
        print(script, end="")
        print(f"batch script: {script_path} (submit it with: sbatch {script_path})", file=sys.stderr)
        return 0
    slurm.check_submission(script_path)
    exit_code, answer = slurm.submit(script_path, args.wait)
    job_id = answer.splitlines()[0].split(";")[0] if answer else "?"
    if exit_code != 0 and not args.wait:
        raise SpecError(f"sbatch refused the job: {answer}")
    print(
        f"job {job_id}: sweep {sweep_dir} (log {os.path.join(sweep_dir, f'slurm-{job_id}.out')}); "
        f"the report is written when the sweep ends"
    )
    return exit_code


def print_table(sweep_dir: str, save: bool = False) -> int:
    from ddpbench.analysis.frames import format_overlap, format_side_by_side, load, scaling_table
    from ddpbench.records.store import write_atomic

    if not os.path.isdir(sweep_dir):
        raise SpecError(f"{sweep_dir!r} is not a folder")
    with warnings.catch_warnings():  # the table lists unreadable records itself, below
        warnings.simplefilter("ignore", UserWarning)
        runs = load(sweep_dir)
    unreadable = runs.attrs["unreadable"]
    if runs.empty and not unreadable:
        raise SpecError(f"{sweep_dir!r} holds no run records (expected {sweep_dir}/runs/*.json)")
    if runs.empty:
        path, reason = unreadable[0]
        raise SpecError(
            f"{sweep_dir!r} holds no readable run record ({len(unreadable)} unreadable; " f"{path}: {reason})"
        )
    table = scaling_table(runs)
    print(format_side_by_side(table))
    overlap = format_overlap(runs)
    if overlap:
        print("\n" + overlap)
    problems = runs[runs["status"] != "ok"]
    for _, run in problems.iterrows():
        print(f"{run['status'].upper()}: {run['run_id']}: {run['error']}")
    for path, reason in runs.attrs["unreadable"]:
        print(f"UNREADABLE: {path}: {reason}")
    if save:
        csv_path = os.path.join(sweep_dir, "scaling.csv")
        write_atomic(csv_path, table.to_csv(index=False))
        print(f"scaling table: {csv_path}")
    return 1 if len(problems) or (runs["checks_failed"] != "").any() else 0


def command_table(args: argparse.Namespace) -> int:
    return print_table(args.sweep_dir)


def command_trace_analyze(args: argparse.Namespace) -> int:
    from ddpbench.analysis.trace_job import analyze_job, format_job_summary, straggler_ranking, trace_files
    from ddpbench.analysis.traces import TraceError, stragglers

    try:
        paths = trace_files(args.paths)
    except TraceError as exc:
        raise SpecError(str(exc)) from None
    analyses, errors = analyze_job(paths, mode=args.mode, jobs=args.jobs)
    if not analyses:  # nothing to show: the input was wrong
        raise SpecError("; ".join(errors))
    if args.json:
        print(
            json.dumps(
                {
                    "ranks": [a.summary() for a in analyses],
                    "stragglers": stragglers(analyses),
                    "straggler_ranking": straggler_ranking(analyses),
                    "unreadable": errors,
                },
                indent=1,
            )
        )
    else:
        print(format_job_summary(analyses, errors, per_rank=args.per_rank))
    return 1 if errors else 0


def command_report(args: argparse.Namespace) -> int:
    from ddpbench.report.html import build_report

    print(f"report: {on_sweep_folder(args.sweep_dir, lambda: build_report(args.sweep_dir, args.output, args.profile))}")
    return 0


def command_export(args: argparse.Namespace) -> int:
    from ddpbench.report.export import export

    written = on_sweep_folder(args.sweep_dir, lambda: export(args.sweep_dir, args.output, args.format))
    print(f"exported: {written}")
    return 0


def subcommands(parser: argparse.ArgumentParser, dest: str):
    return parser.add_subparsers(dest=dest, required=True, metavar=dest.upper(), parser_class=OneLineErrorParser)


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineErrorParser(prog="ddpbench", description="Benchmark PyTorch DDP training and its scaling.")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=OneLineErrorParser)
    run = commands.add_parser("run", help="run one benchmark (ddp under torchrun, or local) and write its record")
    add_run_arguments(run)
    run.set_defaults(handler=command_run)
    sweep = commands.add_parser("sweep", help="run a scaling sweep: local, ddp and dp over world sizes 1, 2, 4, ...")
    add_sweep_arguments(sweep)
    sweep.set_defaults(handler=command_sweep)
    sbatch = commands.add_parser(
        "sbatch",
        allow_abbrev=False,  # its options are told apart from the sweep's by name
        help="submit a whole sweep as one SLURM job (--launcher slurm inside), report at the end",
    )
    add_sbatch_arguments(sbatch)
    sbatch.set_defaults(handler=command_sbatch)
    table = commands.add_parser("table", help="print a sweep's scaling table again from its records")
    table.add_argument("sweep_dir")
    table.set_defaults(handler=command_table)
    add_explain_parser(commands)
    report = commands.add_parser("report", help="write the HTML scaling report of a sweep, from its records")
    report.add_argument("sweep_dir")
    report.add_argument("-o", "--output", default=None, help="HTML file (default reports/<sweep-id>/index.html)")
    report.add_argument(
        "--profile",
        default=None,
        help="network profile or preset for the projection sections "
        "(default: the sweep's comm/profile.json, if any)",
    )
    report.set_defaults(handler=command_report)
    gate = commands.add_parser("gate", help="compare a candidate sweep with a baseline; exit 1 on a regression")
    gate.add_argument(
        "--baseline",
        required=True,
        help="sweep folder, record file, 'auto' (the stored baseline for the candidate's machine class "
        "and suite) or 'history' (the stored history since its last change point)",
    )
    gate.add_argument("--candidate", required=True, help="sweep folder or record file")
    gate.add_argument(
        "--metrics",
        type=comma_list,
        default=None,
        help="comma-separated subset of throughput,efficiency,exposed_share (default: all)",
    )
    gate.add_argument(
        "--allow-env-mismatch", action="store_true", help="compare even when GPU, CPU, torch, CUDA or NCCL differ"
    )
    gate.add_argument(
        "--allow-missing",
        action="store_true",
        help="a configuration of the baseline missing from the candidate is a note, not a failure",
    )
    gate.add_argument(
        "--history",
        default="results/history",
        help="root of the stored history (default results/history); its series for the candidate's "
        "machine class and suite add evidence of the noise, or are the baseline",
    )
    gate.add_argument(
        "--history-folder",
        default=None,
        help="one machine class and suite's history folder, instead of finding it under --history",
    )
    add_verdict_arguments(gate)
    gate.set_defaults(handler=command_gate)
    history = commands.add_parser("history", help="nightly results over time: add sweeps, find change points")
    history_commands = subcommands(history, "history_command")
    add = history_commands.add_parser("add", help="append a sweep's ok runs to results/history/<class>/<suite>/")
    add.add_argument("sweep_dir")
    add.add_argument("--history", default="results/history", help="root of the history (default results/history)")
    add.set_defaults(handler=command_history_add)
    changes = history_commands.add_parser("changes", help="change points of history series (Apache Otava)")
    changes.add_argument("paths", nargs="+", metavar="PATH", help="history folders or series files (*.csv)")
    changes.set_defaults(handler=command_history_changes)
    ab = commands.add_parser(
        "ab",
        help="run one configuration in two environments, A B A B ..., and gate B " "against A with a paired test",
        usage="ddpbench ab A B [options] -- RUN_OPTIONS (those of ddpbench run, e.g. --workload mlp " "--nproc 2)",
    )
    ab.add_argument("a", help="environment A: a Python executable (runs this ddpbench) or a ddpbench working tree")
    ab.add_argument("b", help="environment B, the candidate")
    ab.add_argument("--rounds", type=int, default=5, help="rounds of A then B (default 5, at least 2)")
    ab.add_argument("--python", default=None, help="Python for working trees (default: this one)")
    ab.add_argument("--out", default=None, help="records go to OUT/a and OUT/b (default results/ab-<time>)")
    add_verdict_arguments(ab)
    ab.set_defaults(handler=command_ab)
    baseline = commands.add_parser("baseline", help="store a sweep as the baseline of its machine class")
    baseline_commands = subcommands(baseline, "baseline_command")
    save = baseline_commands.add_parser("save", help="copy a sweep's records to results/baselines/<class>/<suite>/")
    save.add_argument("sweep_dir")
    save.add_argument("--baselines", default="results/baselines", help="where baselines live")
    save.set_defaults(handler=command_baseline_save)
    export = commands.add_parser("export", help="write a sweep in another tool's format")
    export.add_argument("sweep_dir")
    export.add_argument("--format", choices=("pytest-benchmark",), default="pytest-benchmark")
    export.add_argument("-o", "--output", required=True)
    export.set_defaults(handler=command_export)
    comm = commands.add_parser("comm", help="collective microbenchmark (nccl-tests style) and its network profile")
    comm.add_argument("--backend", choices=("gloo", "nccl"), default=None, help="default: nccl with GPUs, else gloo")
    comm.add_argument(
        "--device",
        choices=DEVICES,
        default="auto",
        help="as for run and sweep: cpu measures gloo, cuda NCCL (default auto: GPUs where there are)",
    )
    comm.add_argument(
        "--nproc", type=positive_int, default=None, help="processes, one per device (default: every GPU, or 2)"
    )
    comm.add_argument(
        "--collectives", type=comma_list, default=("all_reduce", "reduce_scatter", "all_gather", "broadcast")
    )
    comm.add_argument(
        "--dtypes",
        type=comma_list,
        default=("float32",),
        help="element types, comma-separated: float32 (default), float16, bfloat16 (what "
        "fp16_compress/bf16_compress all-reduce; project uses them when the profile has them)",
    )
    comm.add_argument("--min-bytes", default="8", help="smallest message (8, 64K, 1M; default 8)")
    comm.add_argument(
        "--max-bytes",
        default=None,
        help="largest message, doubling from the smallest " "(default 256M on GPUs, 64M on CPU)",
    )
    comm.add_argument("--warmup", type=int, default=5, help="untimed calls per size (default 5)")
    comm.add_argument("--min-iters", type=int, default=10, help="timed calls per size, at least (default 10)")
    comm.add_argument("--max-iters", type=int, default=200, help="timed calls per size, at most (default 200)")
    comm.add_argument("--seconds-per-size", type=float, default=0.5, help="time budget per size (default 0.5)")
    comm.add_argument("--out", default="results/comm", help="folder for results.json, profile.json, bandwidth.png")
    comm.add_argument("--name", default="", help="profile name (default backend-device-nN-host)")
    comm.set_defaults(handler=command_comm)
    project = commands.add_parser(
        "project",
        help="replay a measured DDP step for another world size, network, "
        "bucket size or compression (a projection, not a measurement)",
    )
    project.add_argument("run", metavar="RUN", help="a DDP run's record (RUN.json), or a folder with one record")
    project.add_argument("--world", type=int, required=True, help="world size to project to (>= 1)")
    project.add_argument(
        "--profile",
        required=True,
        help="network profile JSON from ddpbench comm, or a preset: "
        "h100-nvswitch, h200-nvswitch, pcie4-8gpu, ib-100g, ib-400g",
    )
    project.add_argument("--bucket-cap-mb", type=float, default=None, help="what-if bucket cap (default: the run's)")
    project.add_argument(
        "--comm-hook",
        choices=("allreduce", "fp16_compress", "bf16_compress"),
        default=None,
        help="what-if gradient compression (default: the run's)",
    )
    project.add_argument("--bandwidth-scale", type=float, default=1.0, help="what-if: k times the bandwidth")
    project.add_argument("--json", action="store_true", help="machine-readable output")
    project.set_defaults(handler=command_project)
    tune = commands.add_parser(
        "tune",
        help="measure the DDP knobs around a run (bucket cap, bucket view, static "
        "graph, compression), rank them and say what to change",
    )
    add_run_arguments(tune)
    tune.add_argument(
        "--repeat",
        type=positive_int,
        default=3,
        help="rounds; each runs every variant once (default 3; with 2 only a large, steady "
        "difference can be called real, 5 or more tell small ones)",
    )
    # Its own destination: `profile` is the run option that --no-profile turns off (traces).
    tune.add_argument(
        "--profile",
        dest="network_profile",
        default=None,
        help="network profile file or preset: also project each variant (needs the runs' traces)",
    )
    tune.set_defaults(handler=command_tune, out_dir="results/tune")
    trace = commands.add_parser("trace", help="analyse torch.profiler traces")
    trace_commands = subcommands(trace, "trace_command")
    analyze = trace_commands.add_parser(
        "analyze", help="communication/computation overlap per rank, any torch.profiler trace"
    )
    analyze.add_argument(
        "paths",
        nargs="+",
        metavar="PATH",
        help="chrome trace files (.json or .json.gz), one per rank, or folders holding them",
    )
    analyze.add_argument("--json", action="store_true", help="machine-readable output")
    analyze.add_argument(
        "--jobs",
        type=positive_int,
        default=None,
        help="traces analysed at a time, one process each (default: 4, at most the usable cores)",
    )
    analyze.add_argument(
        "--per-rank",
        action="store_true",
        help="print the per-rank table even beyond 16 ranks (by default a one-screen summary)",
    )
    analyze.add_argument(
        "--mode",
        choices=("ddpbench", "hta"),
        default="ddpbench",
        help="hta: reproduce HolisticTraceAnalysis 0.5.0's selection and rounding (GPU traces)",
    )
    analyze.set_defaults(handler=command_trace_analyze)
    return parser


class Terminated(KeyboardInterrupt):
    """SIGTERM, handled like Ctrl-C: end the running processes, keep what is written, mark the sweep."""


def _raise_terminated(signum, frame):
    raise Terminated()


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    argv = sys.argv[1:] if argv is None else list(argv)
    run_args = []
    if argv[:1] == ["ab"] and "--" in argv:  # what follows -- goes to `ddpbench run` untouched
        cut = argv.index("--")
        argv, run_args = argv[:cut], argv[cut + 1 :]
    args = parser.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)
    if args.command == "ab":
        args.run_args = run_args
    signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        return args.handler(args)
    except SpecError as exc:
        # Named as argparse names it (`ddpbench history add`), so every usage error reads alike.
        command = " ".join(filter(None, (args.command, getattr(args, f"{args.command}_command", None))))
        print(f"ddpbench {command}: error: {exc}", file=sys.stderr)
        return USAGE_ERROR
    except KeyboardInterrupt as exc:
        terminated = isinstance(exc, Terminated)
        print(
            f"ddpbench: {'terminated' if terminated else 'interrupted'}; runs in progress were ended, "
            "finished records are kept",
            file=sys.stderr,
        )
        return 143 if terminated else 130
    except BrokenPipeError:
        # The reader went away (`ddpbench explain ... | head`): not an error of ours. Point stdout at
        # /dev/null so the interpreter's own flush at exit does not fail again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    sys.exit(main())
