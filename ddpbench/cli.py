"""The `ddpbench` command line. Bad input fails here, exit code 2, before any process starts."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import signal
import sys
import time

from ddpbench.config.faults import USAGE as FAULT_USAGE, parse_fault
from ddpbench.config.spec import (COMM_HOOKS, DEVICES, PRECISIONS, SIZES, STRATEGIES, DDPKnobs, RunSpec, SpecError,
                                  resolve_device)

USAGE_ERROR = 2


class OneLineErrorParser(argparse.ArgumentParser):
    """argparse, but a usage error is one line (what was wrong and where to look), exit code 2."""

    def error(self, message: str):
        self.exit(USAGE_ERROR, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def add_run_arguments(parser: argparse.ArgumentParser) -> None:
    add = parser.add_argument
    add("--workload", required=True, help="built-in name (resnet50, vit_b_16, gpt2, mlp) or path/to/file.py:factory")
    add("--strategy", choices=STRATEGIES, default="ddp", help="ddp under torchrun, or local: one process, no wrapper")
    add("--nproc", type=int, default=1, help="processes per node, one per device (default 1)")
    add("--device", choices=DEVICES, default="auto", help="auto picks cuda when a GPU is visible")
    add("--size", choices=SIZES, default=None, help="workload size (default: full on GPUs, tiny on CPU)")
    add("--batch-size", type=int, default=None, help="samples per device per step (default: the workload's)")
    add("--steps", type=int, default=30, help="total steps per rank, warm-up included (default 30)")
    add("--warmup", type=int, default=5, help="leading steps never timed (default 5; ddp needs >= 1)")
    add("--precision", choices=PRECISIONS, default="fp32", help="fp16 needs a GPU")
    add("--threads-per-rank", type=int, default=None, help="CPU threads per process (default cores // nproc)")
    add("--num-workers", type=int, default=0, help="DataLoader workers per rank (default 0)")
    add("--data-dir", default=None, help="an ImageFolder tree for the image workloads instead of synthetic data")
    add("--seed", type=int, default=0)
    add("--pg-timeout", type=float, default=300.0, dest="pg_timeout_s",
        help="seconds a collective may wait before the run fails (default 300)")
    add("--out", default="results/single", dest="out_dir", help="records go to OUT/runs/ (default results/single)")
    add("--run-timeout", type=float, default=None,
        help="seconds before the run is ended and recorded as timeout (default: none)")
    add("--run-id", default="", help="name of the run (default: workload-strategy-nN-time-random)")
    add("--no-profile", dest="profile", action="store_false",
        help="skip the profiled phase (by default each rank writes a trace after the timed steps)")
    add("--profile-steps", type=int, default=3, help="profiler steps kept in each trace (default 3; GPU analysis drops the last)")
    add("--no-sync-steps", type=int, default=None,
        help="timed steps replayed under no_sync() to estimate exposed communication (default min(10, timed); 0 skips)")
    ddp = parser.add_argument_group("DDP options (recorded in the spec)")
    ddp.add_argument("--bucket-cap-mb", type=float, default=25.0)
    ddp.add_argument("--gradient-as-bucket-view", action=argparse.BooleanOptionalAction, default=False)
    ddp.add_argument("--static-graph", action=argparse.BooleanOptionalAction, default=False)
    ddp.add_argument("--find-unused-parameters", action=argparse.BooleanOptionalAction, default=False)
    ddp.add_argument("--broadcast-buffers", action=argparse.BooleanOptionalAction, default=True)
    ddp.add_argument("--comm-hook", choices=COMM_HOOKS, default="allreduce")
    nodes = parser.add_argument_group("multi-node (torchrun c10d rendezvous; run the same command on every node)")
    nodes.add_argument("--nnodes", type=int, default=1)
    nodes.add_argument("--node-rank", type=int, default=0)
    nodes.add_argument("--rdzv-endpoint", default=None, help="host:port reachable from every node")
    nodes.add_argument("--rdzv-id", default=None, help="a job id shared by all nodes")
    nodes.add_argument("--rdzv-port", type=int, default=None,
                       help="single node: rendezvous port on localhost (default: a free one; a taken one is replaced)")
    add_reliability_arguments(parser)


def add_reliability_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("reliability")
    group.add_argument("--oom-backoff", action="store_true",
                       help="rerun a run that ran out of memory at half the batch, down to 1")
    group.add_argument("--inject-fault", default=None, metavar=FAULT_USAGE,
                       help="testing aid: make rank R raise, be killed, hang (before or inside step S), "
                            "skip an all-reduce or run out of memory at step S")
    group.add_argument("--slowdown", type=float, default=0.0, metavar="FRACTION",
                       help="testing aid for the gate: add real work worth FRACTION of a step (0.1 = 10 %%) to every timed step")


def spec_from_args(args: argparse.Namespace) -> RunSpec:
    knobs = DDPKnobs(bucket_cap_mb=args.bucket_cap_mb, gradient_as_bucket_view=args.gradient_as_bucket_view,
                     static_graph=args.static_graph, find_unused_parameters=args.find_unused_parameters,
                     broadcast_buffers=args.broadcast_buffers, comm_hook=args.comm_hook)
    return RunSpec(
        workload=args.workload, strategy=args.strategy, nproc=args.nproc, nnodes=args.nnodes,
        device=args.device, size=args.size, batch_size=args.batch_size, steps=args.steps,
        warmup=args.warmup, precision=args.precision, threads_per_rank=args.threads_per_rank,
        num_workers=args.num_workers, data_dir=args.data_dir, seed=args.seed,
        pg_timeout_s=args.pg_timeout_s, ddp=knobs, node_rank=args.node_rank, profile=args.profile,
        profile_active=args.profile_steps, no_sync_steps=args.no_sync_steps, rdzv_port=args.rdzv_port,
        fault=parse_fault(args.inject_fault).to_dict() if args.inject_fault else None,
        rdzv_endpoint=args.rdzv_endpoint, rdzv_id=args.rdzv_id, run_id=args.run_id, out_dir=args.out_dir,
        slowdown=args.slowdown,
    )


def command_run(args: argparse.Namespace) -> int:
    from ddpbench.running.launch import launch_with_oom_backoff, resolve
    from ddpbench.records.store import load_record
    from ddpbench.report.summary import format_summary

    spec = resolve(spec_from_args(args))
    result = launch_with_oom_backoff(spec, timeout_s=args.run_timeout, oom_backoff=args.oom_backoff)
    if result.record_path is None:
        print(f"node {spec.node_rank} finished; global rank 0 ran on another node and wrote the record there")
        return 0
    record = load_record(result.record_path)
    print(format_summary(record, result.record_path))
    if record.status != "ok" or record.failed_checks() or record.error:
        return 1
    return 0


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number >= 1; got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number >= 1; got {text!r}")
    return value


def comma_list(text: str) -> tuple[str, ...]:
    return tuple(item.strip() for item in text.split(",") if item.strip())


def add_sweep_arguments(parser: argparse.ArgumentParser) -> None:
    from ddpbench.config.plan import SCALING_MODES, SUITES

    add = parser.add_argument
    devices = parser.add_mutually_exclusive_group()
    devices.add_argument("--gpus", type=positive_int, help="largest world size in GPUs (implies --device cuda)")
    devices.add_argument("--nproc", type=positive_int,
                         help="largest world size in processes (default: every GPU, or every CPU core)")
    add("--device", choices=DEVICES, default="auto")
    add("--suite", default=None, help=f"one of {', '.join(SUITES)} (default: gpu with GPUs, cpu without)")
    add("--workloads", type=comma_list, default=(), help="comma-separated workloads instead of the suite's")
    add("--size", choices=SIZES, default=None)
    add("--strategies", type=comma_list, default=STRATEGIES, help=f"subset of {','.join(STRATEGIES)}")
    add("--steps", type=int, default=None, help="steps per run, warm-up included (default: the suite's)")
    add("--warmup", type=int, default=None)
    add("--batch-size", type=int, default=None, help="per-device batch for every workload (weak scaling)")
    add("--scaling", choices=SCALING_MODES, default="weak",
        help="weak: fixed per-device batch (default); strong: fixed global batch")
    add("--global-batch", type=int, default=None, help="strong scaling's global batch")
    add("--precision", choices=PRECISIONS, default=None)
    add("--comm-hook", choices=COMM_HOOKS, default="allreduce")
    add("--bucket-cap-mb", type=float, default=25.0)
    add("--out", default="results", help="sweeps go to OUT/<sweep-id>/ (default results)")
    add("--sweep-id", default=None, help="folder name of the sweep (default: date-time-suite)")
    add("--resume", action="store_true", help="carry on with an existing sweep: rerun what is not ok")
    add("--no-profile", dest="profile", action="store_false", help="skip the profiled phase of every run")
    add("--run-timeout", type=float, default=None,
        help="seconds before a run is ended as timeout (default: derived from the expected step time)")
    add("--repeat", type=positive_int, default=1,
        help="run every configuration K times (the gate then resamples whole runs too)")
    add("--pg-timeout", type=float, default=None, dest="pg_timeout_s",
        help="seconds a collective may wait before a hang is declared (default: 50 expected steps, at least 60)")
    add_reliability_arguments(parser)


def sweep_options_from_args(args: argparse.Namespace):
    from ddpbench.running.environment import usable_cores, visible_gpu_count
    from ddpbench.config.plan import SweepOptions

    gpu_count = visible_gpu_count()
    device = resolve_device("cuda" if args.gpus else args.device, gpu_count)
    cores = usable_cores()
    if device == "cuda":
        largest = args.gpus or args.nproc or gpu_count
        if largest > gpu_count:
            raise SpecError(f"asked for {largest} GPUs; this machine has {gpu_count}")
        if largest < 1:
            raise SpecError("no GPU is visible; use --device cpu (or leave --device auto)")
    else:
        largest = args.nproc or cores
        if largest > cores:
            raise SpecError(f"asked for {largest} CPU processes; this machine has {cores} usable cores "
                            "(a CPU device is a slice of cores, so at most one process per core)")
    return SweepOptions(
        device=device, max_world_size=largest, cores=cores,
        suite=args.suite or ("gpu" if device == "cuda" else "cpu"), workloads=args.workloads,
        strategies=args.strategies, size=args.size, steps=args.steps, warmup=args.warmup,
        batch_size=args.batch_size, scaling=args.scaling, global_batch=args.global_batch,
        precision=args.precision, ddp=DDPKnobs(bucket_cap_mb=args.bucket_cap_mb, comm_hook=args.comm_hook),
        profile=args.profile, repeat=args.repeat,
        fault=parse_fault(args.inject_fault).to_dict() if args.inject_fault else None,
    )


def command_sweep(args: argparse.Namespace) -> int:
    from ddpbench.running.launch import resolve
    from ddpbench.config.plan import plan_sweep
    from ddpbench.report.html import build_report
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
    run_sweep(sweep_dir, manifest, plan, fixed_timeout_s=args.run_timeout, oom_backoff=args.oom_backoff,
              fixed_pg_timeout_s=args.pg_timeout_s)
    status = print_table(sweep_dir, save=True)
    print(f"report: {build_report(sweep_dir)}")
    return status


def print_table(sweep_dir: str, save: bool = False) -> int:
    from ddpbench.records.store import write_atomic
    from ddpbench.analysis.frames import format_overlap, format_side_by_side, load, scaling_table

    if not os.path.isdir(sweep_dir):
        raise SpecError(f"{sweep_dir!r} is not a folder")
    runs = load(sweep_dir)
    if runs.empty and not runs.attrs["unreadable"]:
        raise SpecError(f"{sweep_dir!r} holds no run records (expected {sweep_dir}/runs/*.json)")
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
    from ddpbench.analysis.traces import TraceError, analyze_trace, format_trace_table, stragglers

    analyses = []
    for path in args.paths:
        try:
            analyses.append(analyze_trace(path, mode=args.mode))
        except TraceError as exc:
            raise SpecError(str(exc)) from None
    lagging = stragglers(analyses)
    if args.json:
        print(json.dumps({"ranks": [a.summary() for a in analyses], "stragglers": lagging}, indent=1))
        return 0
    print(format_trace_table(analyses))
    for row in lagging:
        print(f"step {row['step']}: rank {row['latest_rank']} starts its collectives last, "
              f"{row['lag_ms']:.3f} ms after the first rank")
    return 0


def command_report(args: argparse.Namespace) -> int:
    from ddpbench.report.html import build_report

    print(f"report: {on_sweep_folder(args.sweep_dir, lambda: build_report(args.sweep_dir, args.output))}")
    return 0


EXIT_REGRESSION, EXIT_INCONCLUSIVE = 1, 3


def command_gate(args: argparse.Namespace) -> int:
    from ddpbench.gate.baselines import baseline_dir
    from ddpbench.gate.compare import (MEASURE_NAMES, GateError, as_json, compare, env_differences, format_table,
                                       load_side, markdown_summary, overall_verdict)
    from ddpbench.gate.stats import RUN_NOISE_DEFAULT, GateSettings, parse_noise, parse_threshold
    from ddpbench.records.store import write_atomic

    try:
        settings = GateSettings(max_regression=parse_threshold(args.max_regression), resamples=args.resamples,
                                block_steps=args.block_steps, seed=args.seed,
                                run_noise=RUN_NOISE_DEFAULT if args.run_noise is None else parse_noise(args.run_noise))
        metrics = tuple(args.metrics or MEASURE_NAMES)
        unknown = [m for m in metrics if m not in MEASURE_NAMES]
        if unknown:
            raise GateError(f"unknown metric {unknown[0]!r}; valid: {', '.join(MEASURE_NAMES)}")
        baseline_path = args.baseline
        if baseline_path == "auto":
            baseline_path = baseline_dir(args.candidate)
            if not os.path.isdir(baseline_path):
                raise GateError(f"no stored baseline for this machine class and suite at {baseline_path}; "
                                f"save one with: ddpbench baseline save SWEEP_DIR")
        baseline, candidate = load_side(baseline_path), load_side(args.candidate)
        env_notes = env_differences(baseline, candidate)
        if env_notes and not args.allow_env_mismatch:
            raise GateError("baseline and candidate ran on different machines or software ("
                            + "; ".join(env_notes) + "); compare like with like, or pass --allow-env-mismatch")
        comparisons, unmatched = compare(baseline, candidate, settings, metrics)
    except (GateError, ValueError) as exc:
        raise SpecError(str(exc)) from None
    print(format_table(comparisons, settings))
    for note in (env_notes if args.allow_env_mismatch else []) + unmatched:
        print(f"note: {note}")
    result = overall_verdict(comparisons)
    print(f"verdict: {result.upper()} (baseline {baseline_path}, candidate {args.candidate})")
    if args.summary_md:
        write_atomic(args.summary_md, markdown_summary(comparisons, settings, unmatched, env_notes))
    if args.json:
        write_atomic(args.json, json.dumps(as_json(comparisons, settings, unmatched, env_notes), indent=1) + "\n")
    if result == "regression":
        return EXIT_REGRESSION
    if result == "inconclusive":
        return {"pass": 0, "fail": EXIT_REGRESSION, "exit": EXIT_INCONCLUSIVE}[args.inconclusive]
    return 0


def on_sweep_folder(sweep_dir: str, action):
    """Run `action()` on an existing sweep folder; what it finds wrong with the input is a usage error."""
    if not os.path.isdir(sweep_dir):
        raise SpecError(f"{sweep_dir!r} is not a sweep folder")
    try:
        return action()
    except ValueError as exc:
        raise SpecError(str(exc)) from None


def command_baseline_save(args: argparse.Namespace) -> int:
    from ddpbench.gate.baselines import save_baseline

    saved = on_sweep_folder(args.sweep_dir, lambda: save_baseline(args.sweep_dir, args.baselines))
    print(f"baseline saved: {saved}")
    return 0


def command_export(args: argparse.Namespace) -> int:
    from ddpbench.report.export import export

    written = on_sweep_folder(args.sweep_dir, lambda: export(args.sweep_dir, args.output, args.format))
    print(f"exported: {written}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineErrorParser(prog="ddpbench", description="Benchmark PyTorch DDP training and its scaling.")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND",
                                     parser_class=OneLineErrorParser)
    run = commands.add_parser("run", help="run one benchmark (ddp under torchrun, or local) and write its record")
    add_run_arguments(run)
    run.set_defaults(handler=command_run)
    sweep = commands.add_parser("sweep", help="run a scaling sweep: local, ddp and dp over world sizes 1, 2, 4, ...")
    add_sweep_arguments(sweep)
    sweep.set_defaults(handler=command_sweep)
    table = commands.add_parser("table", help="print a sweep's scaling table again from its records")
    table.add_argument("sweep_dir")
    table.set_defaults(handler=command_table)
    report = commands.add_parser("report", help="write the HTML scaling report of a sweep, from its records")
    report.add_argument("sweep_dir")
    report.add_argument("-o", "--output", default=None, help="HTML file (default reports/<sweep-id>/index.html)")
    report.set_defaults(handler=command_report)
    gate = commands.add_parser("gate", help="compare a candidate sweep with a baseline; exit 1 on a regression")
    gate.add_argument("--baseline", required=True, help="sweep folder, record file, or 'auto' (the stored baseline "
                                                         "for the candidate's machine class and suite)")
    gate.add_argument("--candidate", required=True, help="sweep folder or record file")
    gate.add_argument("--max-regression", default="5%", help="allowed slowdown: 5, 5%% or 0.05 (default 5%%)")
    gate.add_argument("--metrics", type=comma_list, default=None,
                      help="comma-separated subset of the gate's measures (default: all; an unknown name lists them)")
    gate.add_argument("--allow-env-mismatch", action="store_true",
                      help="compare even when GPU, CPU, torch, CUDA or NCCL differ")
    gate.add_argument("--inconclusive", choices=("exit", "pass", "fail"), default="exit",
                      help="exit code for an inconclusive verdict: exit (3, default), pass (0) or fail (1)")
    gate.add_argument("--summary-md", default=None, help="write a Markdown summary (for a CI job summary)")
    gate.add_argument("--json", default=None, help="write the verdicts as JSON")
    gate.add_argument("--resamples", type=positive_int, default=2000, help="bootstrap resamples (default 2000)")
    gate.add_argument("--block-steps", type=positive_int, default=5,
                      help="consecutive steps per bootstrap block (default 5)")
    gate.add_argument("--seed", type=int, default=0, help="bootstrap seed (default 0: verdicts are repeatable)")
    gate.add_argument("--run-noise", default=None,
                      help="run-to-run spread of a run's median step time on your machines, as 3, 3%% or 0.03; "
                           "0 turns it off (default: the spread measured on ddpbench's CPU machine; "
                           "benchmarks/gate_calibration.py measures yours)")
    gate.set_defaults(handler=command_gate)
    baseline = commands.add_parser("baseline", help="store a sweep as the baseline of its machine class")
    baseline_commands = baseline.add_subparsers(dest="baseline_command", required=True, metavar="BASELINE_COMMAND",
                                                parser_class=OneLineErrorParser)
    save = baseline_commands.add_parser("save", help="copy a sweep's records to results/baselines/<class>/<suite>/")
    save.add_argument("sweep_dir")
    save.add_argument("--baselines", default="results/baselines", help="where baselines live")
    save.set_defaults(handler=command_baseline_save)
    export = commands.add_parser("export", help="write a sweep in another tool's format")
    export.add_argument("sweep_dir")
    export.add_argument("--format", choices=("pytest-benchmark",), default="pytest-benchmark")
    export.add_argument("-o", "--output", required=True)
    export.set_defaults(handler=command_export)
    trace = commands.add_parser("trace", help="analyse torch.profiler traces")
    trace_commands = trace.add_subparsers(dest="trace_command", required=True, metavar="TRACE_COMMAND",
                                          parser_class=OneLineErrorParser)
    analyze = trace_commands.add_parser("analyze", help="communication/computation overlap per rank, any torch.profiler trace")
    analyze.add_argument("paths", nargs="+", metavar="PATH", help="chrome trace files (.json or .json.gz), one per rank")
    analyze.add_argument("--json", action="store_true", help="machine-readable output")
    analyze.add_argument("--mode", choices=("ddpbench", "hta"), default="ddpbench",
                         help="hta: reproduce HolisticTraceAnalysis 0.5.0's selection and rounding (GPU traces)")
    analyze.set_defaults(handler=command_trace_analyze)
    return parser


class Terminated(KeyboardInterrupt):
    """SIGTERM, handled like Ctrl-C: end the running processes, keep what is written, mark the sweep."""


def _raise_terminated(signum, frame):
    raise Terminated()


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        return args.handler(args)
    except SpecError as exc:
        print(f"ddpbench {args.command}: error: {exc}", file=sys.stderr)
        return USAGE_ERROR
    except KeyboardInterrupt as exc:
        terminated = isinstance(exc, Terminated)
        print(f"ddpbench: {'terminated' if terminated else 'interrupted'}; runs in progress were ended, "
              "finished records are kept", file=sys.stderr)
        return 143 if terminated else 130


if __name__ == "__main__":
    sys.exit(main())
