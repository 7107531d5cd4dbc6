"""`ddpbench trainjob`: a sweep written as Kubeflow TrainJob manifests, one per node count. No torch."""

from __future__ import annotations

import argparse
import dataclasses
import functools
import os
import posixpath
import shlex
import time

from ddpbench.commands.arguments import (
    OneLineErrorParser,
    add_deprecated_option,
    add_run_arguments,
    exit_codes,
    positive_int,
)
from ddpbench.config.errors import SpecError
from ddpbench.config.ids import check_id
from ddpbench.config.options import add_arguments, from_args, host_names, node_counts
from ddpbench.config.plan import SUITES, SweepOptions
from ddpbench.config.spec import DDPKnobs, RunSpec, default_pg_timeout_s
from ddpbench.running.trainjob import DEFAULT_RUN_TIMEOUT_S, MEMORY_PER_RANK_GI


def add_trainjob_parser(commands) -> None:
    parser = commands.add_parser(
        "trainjob",
        help="write a sweep as Kubeflow TrainJob manifests, one per node count",
        description="Write a sweep as Kubeflow TrainJob manifests for Kubernetes, one per node count; the pods "
        "run its runs in turn and write the records to a shared volume.",
    )
    add_trainjob_arguments(parser)
    exit_codes(parser, "0 the manifests are written (nothing is submitted)")
    parser.set_defaults(handler=command_trainjob)


def add_trainjob_arguments(parser: argparse.ArgumentParser) -> None:
    shape = parser.add_argument_group("the sweep (as ddpbench sweep plans it, on nodes of this shape)")
    devices = shape.add_mutually_exclusive_group()
    devices.add_argument(
        "--gpus-per-node",
        "--gpus",
        dest="gpus",
        type=positive_int,
        metavar="G",
        help="GPUs per node (a GPU sweep; NCCL): at most G processes per pod",
    )
    devices.add_argument(
        "--max-nproc",
        dest="nproc",
        type=positive_int,
        metavar="N",
        help="CPU processes per node at most (a CPU sweep; gloo): one-node runs take 1, 2, 4, ... N, runs over "
        "several nodes N per pod (default 1)",
    )
    add_deprecated_option(
        devices, "--nproc-per-node", "--nproc", dest="nproc", type=positive_int, instead="--max-nproc N"
    )
    shape.add_argument(
        "--node-counts",
        dest="nodes",
        type=node_counts,
        default=(1,),
        metavar="COUNTS",
        help="node counts to sweep, e.g. 1,2,4: one TrainJob each (default 1)",
    )
    add_deprecated_option(shape, "--nodes", dest="nodes", type=node_counts, instead="--node-counts 1,2,4")
    shape.add_argument(
        "--cpus-per-node",
        type=positive_int,
        default=None,
        help="CPUs each pod asks for; each rank gets an equal share as threads (default: one per rank)",
    )
    shape.add_argument("--suite", default=None, help=f"one of {', '.join(SUITES)} (default: gpu with GPUs, else cpu)")
    add_arguments(
        shape,
        SweepOptions,
        ("workloads", "size", "strategies", "compile", "steps", "warmup", "batch_size", "precision"),
    )
    add_arguments(shape, SweepOptions, ("num_workers",))
    ddp = parser.add_argument_group("DDP options (every ddp and replicate run; recorded in the spec)")
    add_arguments(ddp, DDPKnobs, [field.name for field in dataclasses.fields(DDPKnobs)])
    add_arguments(shape, SweepOptions, ("profile", "profile_active", "repeat"))
    shape.add_argument(
        "--run-timeout",
        type=float,
        default=None,
        metavar="S",
        help=f"seconds before a run is ended as timeout on every pod (default {DEFAULT_RUN_TIMEOUT_S:g}); the pods "
        "wait for each other between runs at most this long and 10 minutes more",
    )
    shape.add_argument(
        "--pg-timeout", type=float, default=None, dest="pg_timeout_s", help="seconds a collective may wait"
    )
    pods = parser.add_argument_group("the pods")
    pods.add_argument(
        "--image",
        default=None,
        help="container image with ddpbench installed (required); container/Dockerfile builds one on a PyTorch image",
    )
    pods.add_argument(
        "--volume-claim",
        default="ddpbench-results",
        help="PersistentVolumeClaim (ReadWriteMany) every pod mounts for the records (default ddpbench-results)",
    )
    pods.add_argument("--mount-path", default="/results", help="where the pods mount it (default /results)")
    pods.add_argument(
        "--out", default=None, help="the sweeps' folder in the pods, on the volume (default: the mount path)"
    )
    pods.add_argument("--sweep-id", default=None, help="folder name of the sweep (default: date-time-k8s)")
    pods.add_argument("--gpu-resource", default="nvidia.com/gpu", help="GPU resource name (default nvidia.com/gpu)")
    pods.add_argument(
        "--memory-per-node",
        default=None,
        metavar="QUANTITY",
        help=f"memory each pod asks for, e.g. 64Gi (default {MEMORY_PER_RANK_GI}Gi per rank)",
    )
    pods.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a variable for the pods, e.g. NCCL_SOCKET_IFNAME=eth0 (repeatable; PET_* are the runtime's)",
    )
    pods.add_argument("--python", default="python", help="the image's Python (default python)")
    pods.add_argument("--queue", default=None, help="Kueue LocalQueue to submit to (the queue-name label)")
    pods.add_argument("--suspend", action="store_true", help="create the jobs suspended (spec.suspend)")
    pods.add_argument("--namespace", default=None, help="namespace of the jobs (default: kubectl's)")
    pods.add_argument(
        "--avoid-hosts",
        type=host_names,
        default=(),
        metavar="HOSTS",
        help="keep the pods off these nodes, e.g. node-1,node-7 (as ddpbench history hosts names them): a required "
        "node affinity, metadata.name NotIn HOSTS",
    )
    pods.add_argument(
        "--manifests",
        default=None,
        help="folder the manifests are written to, here (default trainjobs/<sweep-id>)",
    )


@functools.cache
def run_parser() -> argparse.ArgumentParser:
    parser = OneLineErrorParser(prog="ddpbench run")
    add_run_arguments(parser)
    return parser


# Set by the pod's script from the runtime's variables, never copied from the plan.
SET_IN_THE_POD = {"nproc", "nnodes", "node_rank", "rdzv_endpoint", "rdzv_id", "rdzv_port", "launcher"}


def run_arguments(spec: RunSpec, run_timeout: float | None) -> list[str]:
    """`ddpbench run`'s arguments for a planned run: every option `run` has whose value differs
    from its default. A field `run` has no option for must be at its default, or the pods would
    run something else than was planned."""
    values = {**dataclasses.asdict(spec.ddp), **{f.name: getattr(spec, f.name) for f in dataclasses.fields(spec)}}
    words: list[str] = []
    seen = set()
    for action in run_parser()._actions:
        name = action.dest
        if name not in values or name in SET_IN_THE_POD or name == "ddp":
            continue
        seen.add(name)
        value = values[name]
        # A run not given --pg-timeout takes its compile mode's default (config.spec).
        default = default_pg_timeout_s(spec.compile) if name == "pg_timeout_s" else action.default
        if value == default:
            continue
        if name == "fault":
            raise SpecError("--inject-fault is a testing aid of local sweeps; a TrainJob does not carry it")
        if isinstance(action, argparse.BooleanOptionalAction):
            words.append(action.option_strings[0] if value else action.option_strings[1])
        elif action.nargs == 0:  # store_true / store_false: the option says what is not the default
            words.append(action.option_strings[0])
        elif value is not None:
            words += [action.option_strings[0], str(value)]
    for field in dataclasses.fields(spec):
        if field.init and field.name not in seen | SET_IN_THE_POD | {"ddp"}:
            default = field.default if field.default is not dataclasses.MISSING else None
            if getattr(spec, field.name) != default:
                raise SpecError(f"ddpbench trainjob cannot pass {field.name}={getattr(spec, field.name)!r} to the pods")
    if run_timeout is not None:
        words += ["--run-timeout", str(run_timeout)]
    return words


def command_trainjob(args: argparse.Namespace) -> int:
    from ddpbench.config.plan import plan_sweep
    from ddpbench.records.store import write_atomic
    from ddpbench.running import trainjob

    if args.image is None:
        raise SpecError("--image is needed: the container image the pods run, with ddpbench installed")
    per_node = args.gpus or args.nproc or 1
    run_timeout = DEFAULT_RUN_TIMEOUT_S if args.run_timeout is None else args.run_timeout
    if not run_timeout > 0:
        raise SpecError(f"--run-timeout must be a number of seconds > 0; got {args.run_timeout:g}")
    # Requests by default: the scheduler then puts a pod where its ranks fit, not beside another.
    cluster = trainjob.ClusterOptions(
        image=args.image,
        volume_claim=args.volume_claim,
        mount_path=args.mount_path,
        gpus_per_node=args.gpus,
        gpu_resource=args.gpu_resource,
        cpus_per_node=args.cpus_per_node or per_node,
        memory_per_node=args.memory_per_node or f"{MEMORY_PER_RANK_GI * per_node}Gi",
        queue=args.queue,
        suspend=args.suspend,
        namespace=args.namespace,
        env=tuple(trainjob.parse_env(text) for text in args.env),
        python=args.python,
        avoid_hosts=args.avoid_hosts,
    )
    out = args.out or args.mount_path
    trainjob.check_out_on_volume(out, args.mount_path)
    sweep_id = args.sweep_id if args.sweep_id is not None else f"{time.strftime('%Y%m%d-%H%M%S')}-k8s"
    check_id("--sweep-id", sweep_id, "--out on the volume", nested=True)
    sweep_dir = posixpath.join(out, sweep_id)
    device = "cuda" if args.gpus else "cpu"
    if args.cpus_per_node is not None and args.cpus_per_node < per_node:
        raise SpecError(
            f"--cpus-per-node {args.cpus_per_node} is fewer than the {per_node} ranks of a node: one CPU each at least"
        )
    # The plan as a SLURM sweep over these nodes would run it: the same runs, ids and threads.
    options = from_args(
        SweepOptions,
        args,
        device=device,
        max_world_size=per_node,
        cores=args.cpus_per_node or per_node,
        suite=args.suite or ("gpu" if device == "cuda" else "cpu"),
        launcher="slurm",
        nodes=tuple(args.nodes),
    )
    plan = plan_sweep(options, sweep_dir)
    if args.pg_timeout_s is not None:
        plan = [spec.replace(pg_timeout_s=args.pg_timeout_s) for spec in plan]
    folder = args.manifests or os.path.join("trainjobs", sweep_id)
    # The pods write no sweep manifest: the report is told the id, sub-folders included.
    report_command = shlex.join([cluster.python, "-m", "ddpbench", "report", sweep_dir, "--sweep-id", sweep_id])
    # Every node count of the plan: with --node-counts 2,4 the local reference and DataParallel still run on one
    # node. Every job's name is checked before the first manifest is written.
    counts = sorted({spec.nnodes for spec in plan})
    names = {nodes: trainjob.job_name(sweep_id, nodes) for nodes in counts}
    manifests = []
    for nodes in counts:
        runs = [spec for spec in plan if spec.nnodes == nodes]
        name = names[nodes]
        lines = [
            (
                run_arguments(spec, run_timeout) + ([] if nodes > 1 else ["--nproc", str(spec.nproc)]),
                f"{name}-{spec.run_id}" if nodes > 1 else None,
            )
            for spec in runs
        ]
        script = trainjob.node_script(
            lines, nodes, per_node, cluster.python, name, run_timeout + trainjob.BARRIER_SLACK_S
        )
        manifest = trainjob.trainjob_manifest(name, sweep_id, nodes, per_node, script, cluster, report_command)
        manifests.append((trainjob.manifest_file(folder, name), nodes, len(runs), manifest))
    written = []
    for path, nodes, count, manifest in manifests:
        write_atomic(path, trainjob.manifest_yaml(manifest))
        written.append((path, nodes, count))
    for path, nodes, count in written:
        print(f"{path}: {nodes} node(s) x {per_node}, {count} run(s)")
    print(
        f"submit: kubectl apply -f {shlex.quote(folder)}  (needs Kubeflow Trainer {trainjob.MINIMUM_TRAINER} or "
        "later: spec.runtimePatches; kubectl get crd trainjobs.trainer.kubeflow.org -o yaml | grep runtimePatches)"
    )
    print(
        f"when every job has ended (kubectl get trainjobs), write the report where {args.volume_claim} is mounted: "
        f"{report_command}"
    )
    return 0
