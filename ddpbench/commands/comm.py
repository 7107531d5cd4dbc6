"""`ddpbench comm`: the collective microbenchmark (nccl-tests style) and the network profile it
writes, which `project`, `tune --network`, `explain --network` and the report replay. No torch here."""

from __future__ import annotations

import argparse
import sys

from ddpbench.commands.arguments import BAD_INPUT, INTERRUPTED, comma_list, exit_codes, positive_int
from ddpbench.config.errors import SpecError
from ddpbench.config.spec import DEVICES


def add_comm_parser(commands) -> None:
    comm = commands.add_parser(
        "comm",
        help="collective bandwidth (nccl-tests style) and its network profile",
        description="Measure collectives over message sizes (nccl-tests style) and fit the network profile that "
        "project, tune --network, explain --network and the report replay.",
    )
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
        "--collectives",
        type=comma_list,
        default=("all_reduce", "reduce_scatter", "all_gather", "broadcast"),
        help="comma-separated, any of all_reduce, reduce_scatter, all_gather, broadcast (default: all four)",
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
    comm.add_argument(
        "--out",
        default="results/comm",
        metavar="DIR",
        help="folder for results.json, profile.json, bandwidth.png (default results/comm)",
    )
    comm.add_argument("--name", default="", help="profile name, inside profile.json (default backend-device-nN-host)")
    exit_codes(comm, "0 measured", "1 the benchmark failed (its processes' output says why)", BAD_INPUT, INTERRUPTED)
    comm.set_defaults(handler=command_comm)


def command_comm(args: argparse.Namespace) -> int:
    from ddpbench.host.facts import visible_gpu_count
    from ddpbench.running.comm import DEFAULT_MAX_BYTES, CommFailed, CommOptions, parse_bytes, report_comm, run_comm

    gpus = visible_gpu_count()
    by_device = {"cpu": "gloo", "cuda": "nccl"}.get(args.device)
    if args.backend and by_device and args.backend != by_device:
        raise SpecError(
            f"--backend {args.backend} does not go with --device {args.device}: cpu measures gloo, "
            "cuda measures nccl"
        )
    if args.device == "cuda" and not gpus:
        raise SpecError("--device cuda: this machine has no visible GPU")
    backend = args.backend or by_device or ("nccl" if gpus else "gloo")
    device = "cuda" if backend == "nccl" else "cpu"
    options = CommOptions(
        nproc=args.nproc or (gpus if backend == "nccl" else 2),
        backend=backend,
        collectives=args.collectives,
        dtypes=args.dtypes,
        min_bytes=parse_bytes(args.min_bytes),
        max_bytes=parse_bytes(args.max_bytes) if args.max_bytes else DEFAULT_MAX_BYTES[device],
        warmup=args.warmup,
        min_iters=args.min_iters,
        max_iters=args.max_iters,
        seconds_per_size=args.seconds_per_size,
        out=args.out,
        name=args.name,
    )
    try:
        results, profile, folder = run_comm(options)
    except CommFailed as exc:
        # A run that failed, as `ddpbench run` reports a failed launch: exit 1, not bad input's 2.
        print(f"ddpbench comm: error: {exc}", file=sys.stderr)
        return 1
    print(report_comm(results, profile, folder))
    return 1 if results.get("exit_code") else 0
