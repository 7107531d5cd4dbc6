"""What several subcommands share: the one-line usage error, the run options and turning them
into a RunSpec, small argument types, and running an action on a sweep folder. No torch."""

from __future__ import annotations

import argparse
import os

from ddpbench.config.faults import USAGE as FAULT_USAGE
from ddpbench.config.faults import parse_fault
from ddpbench.config.spec import (
    COMM_HOOKS,
    DEVICES,
    LAUNCHERS,
    PRECISIONS,
    SIZES,
    STRATEGIES,
    DDPKnobs,
    RunSpec,
    SpecError,
)

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
    add(
        "--warmup",
        type=int,
        default=None,
        help="leading steps never timed (default 5, or 11 for ddp on GPUs; ddp needs >= 1)",
    )
    add("--precision", choices=PRECISIONS, default="fp32", help="fp16 needs a GPU")
    add("--threads-per-rank", type=int, default=None, help="CPU threads per process (default cores // nproc)")
    add("--num-workers", type=int, default=0, help="DataLoader workers per rank (default 0)")
    add("--data-dir", default=None, help="an ImageFolder tree for the image workloads instead of synthetic data")
    add("--seed", type=int, default=0)
    add(
        "--pg-timeout",
        type=float,
        default=300.0,
        dest="pg_timeout_s",
        help="seconds a collective may wait before the run fails (default 300)",
    )
    add("--out", default="results/single", dest="out_dir", help="records go to OUT/runs/ (default results/single)")
    add(
        "--run-timeout",
        type=float,
        default=None,
        help="seconds before the run is ended and recorded as timeout (default: none)",
    )
    add("--run-id", default="", help="name of the run (default: workload-strategy-nN-time-random)")
    add_verbose_argument(parser)
    add(
        "--no-profile",
        dest="profile",
        action="store_false",
        help="skip the profiled phase (by default each rank writes a trace after the timed steps)",
    )
    add(
        "--profile-steps",
        type=int,
        default=3,
        help="profiler steps kept in each trace (default 3; GPU analysis drops the last)",
    )
    add(
        "--no-sync-steps",
        type=int,
        default=None,
        help="timed steps replayed under no_sync() to estimate exposed communication (default min(10, timed); 0 skips)",
    )
    ddp = parser.add_argument_group("DDP options (recorded in the spec)")
    ddp.add_argument("--bucket-cap-mb", type=float, default=25.0)
    ddp.add_argument("--gradient-as-bucket-view", action=argparse.BooleanOptionalAction, default=False)
    ddp.add_argument("--static-graph", action=argparse.BooleanOptionalAction, default=False)
    ddp.add_argument("--find-unused-parameters", action=argparse.BooleanOptionalAction, default=False)
    ddp.add_argument("--broadcast-buffers", action=argparse.BooleanOptionalAction, default=True)
    ddp.add_argument("--comm-hook", choices=COMM_HOOKS, default="allreduce")
    nodes = parser.add_argument_group(
        "multi-node (torchrun c10d rendezvous; run the same command on every node, "
        "or once with --launcher slurm inside an allocation)"
    )
    add_launcher_argument(nodes)
    nodes.add_argument("--nnodes", type=int, default=1)
    nodes.add_argument("--node-rank", type=int, default=0)
    nodes.add_argument("--rdzv-endpoint", default=None, help="host:port reachable from every node")
    nodes.add_argument("--rdzv-id", default=None, help="a job id shared by all nodes")
    nodes.add_argument(
        "--rdzv-port",
        type=int,
        default=None,
        help="single node: rendezvous port on localhost (default: a free one; a taken one is replaced)",
    )
    add_reliability_arguments(parser)


def add_launcher_argument(parser) -> None:
    parser.add_argument(
        "--launcher",
        choices=LAUNCHERS,
        default="local",
        help="local: on this machine; slurm: with srun inside a SLURM allocation "
        "(salloc/sbatch), one torchrun agent per node",
    )


def add_verbose_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        help="stream everything the processes print (torchrun, profiler, workload) as it comes; "
        "by default it goes only to the run's logs folder",
    )


def add_reliability_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("reliability")
    group.add_argument(
        "--oom-backoff", action="store_true", help="rerun a run that ran out of memory at half the batch, down to 1"
    )
    group.add_argument(
        "--inject-fault",
        default=None,
        metavar=FAULT_USAGE,
        help="testing aid: make rank R raise, be killed, hang (before or inside step S), "
        "skip an all-reduce or run out of memory at step S",
    )
    group.add_argument(
        "--slowdown",
        type=float,
        default=0.0,
        metavar="FRACTION",
        help="testing aid for the gate: add real work worth FRACTION of a step (0.1 = 10 %%) to every timed step",
    )


def spec_from_args(args: argparse.Namespace) -> RunSpec:
    knobs = DDPKnobs(
        bucket_cap_mb=args.bucket_cap_mb,
        gradient_as_bucket_view=args.gradient_as_bucket_view,
        static_graph=args.static_graph,
        find_unused_parameters=args.find_unused_parameters,
        broadcast_buffers=args.broadcast_buffers,
        comm_hook=args.comm_hook,
    )
    return RunSpec(
        workload=args.workload,
        strategy=args.strategy,
        nproc=args.nproc,
        nnodes=args.nnodes,
        device=args.device,
        size=args.size,
        batch_size=args.batch_size,
        steps=args.steps,
        warmup=args.warmup,
        precision=args.precision,
        threads_per_rank=args.threads_per_rank,
        num_workers=args.num_workers,
        data_dir=args.data_dir,
        seed=args.seed,
        pg_timeout_s=args.pg_timeout_s,
        ddp=knobs,
        node_rank=args.node_rank,
        profile=args.profile,
        profile_active=args.profile_steps,
        no_sync_steps=args.no_sync_steps,
        rdzv_port=args.rdzv_port,
        fault=parse_fault(args.inject_fault).to_dict() if args.inject_fault else None,
        rdzv_endpoint=args.rdzv_endpoint,
        rdzv_id=args.rdzv_id,
        run_id=args.run_id,
        out_dir=args.out_dir,
        launcher=args.launcher,
        slowdown=args.slowdown,
    )


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


def node_counts(text: str) -> tuple[int, ...]:
    return tuple(positive_int(item) for item in comma_list(text))


def on_sweep_folder(sweep_dir: str, action):
    """Run `action()` on an existing sweep folder; what it finds wrong with the input is a usage error."""
    if not os.path.isdir(sweep_dir):
        raise SpecError(f"{sweep_dir!r} is not a sweep folder")
    try:
        return action()
    except ValueError as exc:
        raise SpecError(str(exc)) from None
