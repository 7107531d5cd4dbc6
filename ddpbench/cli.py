"""The `ddpbench` command line. Bad input fails here, exit code 2, before any process starts."""

from __future__ import annotations

import argparse
import sys

from ddpbench.spec import COMM_HOOKS, DEVICES, PRECISIONS, SIZES, STRATEGIES, DDPKnobs, RunSpec, SpecError

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
    add("--run-id", default="", help="name of the run (default: workload-strategy-nN-time-random)")
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


def spec_from_args(args: argparse.Namespace) -> RunSpec:
    knobs = DDPKnobs(bucket_cap_mb=args.bucket_cap_mb, gradient_as_bucket_view=args.gradient_as_bucket_view,
                     static_graph=args.static_graph, find_unused_parameters=args.find_unused_parameters,
                     broadcast_buffers=args.broadcast_buffers, comm_hook=args.comm_hook)
    return RunSpec(
        workload=args.workload, strategy=args.strategy, nproc=args.nproc, nnodes=args.nnodes,
        device=args.device, size=args.size, batch_size=args.batch_size, steps=args.steps,
        warmup=args.warmup, precision=args.precision, threads_per_rank=args.threads_per_rank,
        num_workers=args.num_workers, data_dir=args.data_dir, seed=args.seed,
        pg_timeout_s=args.pg_timeout_s, ddp=knobs, node_rank=args.node_rank,
        rdzv_endpoint=args.rdzv_endpoint, rdzv_id=args.rdzv_id, run_id=args.run_id, out_dir=args.out_dir,
    )


def command_run(args: argparse.Namespace) -> int:
    from ddpbench.launch import launch, resolve
    from ddpbench.record import load_record
    from ddpbench.summary import failed_checks, format_summary

    spec = resolve(spec_from_args(args))
    result = launch(spec)
    if result.record_path is None:
        print(f"node {spec.node_rank} finished; global rank 0 ran on another node and wrote the record there")
        return 0
    record = load_record(result.record_path)
    print(format_summary(record, result.record_path))
    if record["status"] != "ok" or failed_checks(record):
        return 1
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineErrorParser(prog="ddpbench", description="Benchmark PyTorch DDP training and its scaling.")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND",
                                     parser_class=OneLineErrorParser)
    run = commands.add_parser("run", help="run one benchmark (ddp under torchrun, or local) and write its record")
    add_run_arguments(run)
    run.set_defaults(handler=command_run)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.handler(args)
    except SpecError as exc:
        print(f"ddpbench {args.command}: error: {exc}", file=sys.stderr)
        return USAGE_ERROR
    except KeyboardInterrupt:
        print("ddpbench: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
