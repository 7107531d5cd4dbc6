"""`ddpbench comm`, `project` and `tune`: beyond the machine at hand. No torch here."""

from __future__ import annotations

import argparse
import json
import os
import sys

from ddpbench.commands.arguments import spec_from_args
from ddpbench.config.errors import SpecError


def command_comm(args: argparse.Namespace) -> int:
    from ddpbench.running.comm import DEFAULT_MAX_BYTES, CommFailed, CommOptions, parse_bytes, report_comm, run_comm
    from ddpbench.running.environment import visible_gpu_count

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


def load_run_record(path: str):
    """A record file, or a folder holding exactly one record (a `ddpbench run --out` folder)."""
    from ddpbench.records.store import UnreadableRecord, load_record, record_paths

    if os.path.isdir(path):
        paths = record_paths(path)
        if len(paths) != 1:
            raise SpecError(f"{path!r} holds {len(paths)} records; name one record file (RUN.json)")
        path = paths[0]
    if not os.path.isfile(path):
        raise SpecError(f"{path!r} is not a record file")
    try:
        return load_record(path)
    except UnreadableRecord as exc:
        raise SpecError(str(exc)) from None


def sweep_reference(run: str, record) -> tuple[float | None, str]:
    """X(1) for a run from its own sweep (SWEEP/runs/RUN.json), as the scaling table takes it."""
    from ddpbench.analysis.frames import reference_throughput
    from ddpbench.records.store import read_records

    folder = os.path.abspath(run if os.path.isdir(run) else os.path.dirname(run))
    sweep = os.path.dirname(folder) if os.path.basename(folder) == "runs" else folder
    try:
        records, _ = read_records(sweep)
    except OSError:
        return None, "no sweep folder around the record"
    return reference_throughput(record, records)


def command_project(args: argparse.Namespace) -> int:
    from ddpbench.analysis.network import ProfileError, load_profile
    from ddpbench.analysis.projection import ProjectionError, WhatIf, format_projection, project

    record = load_run_record(args.run)
    try:
        profile = load_profile(args.profile)
        what = WhatIf(
            world_size=args.world,
            bucket_cap_mb=record.spec.ddp.bucket_cap_mb if args.bucket_cap_mb is None else args.bucket_cap_mb,
            comm_hook=args.comm_hook or record.spec.ddp.comm_hook,
            bandwidth_scale=args.bandwidth_scale,
            gradient_as_bucket_view=record.spec.ddp.gradient_as_bucket_view,
        )
        projection = project(record, profile, what, *sweep_reference(args.run, record))
    except (ProfileError, ProjectionError) as exc:
        raise SpecError(str(exc)) from None
    if args.json:
        print(json.dumps(projection.as_dict(), indent=1))
    else:
        print(format_projection(projection, record))
    return 0


def command_tune(args: argparse.Namespace) -> int:
    from ddpbench.running.tune import format_tune, run_tune

    found = run_tune(spec_from_args(args), args.repeat, args.out_dir, args.network_profile)
    print(format_tune(found))
    return 0 if found[0].throughputs else 1
