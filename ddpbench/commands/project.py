"""`ddpbench project`: a measured DDP step replayed for another world size, network, bucket size or
compression (a projection, not a measurement). No torch here."""

from __future__ import annotations

import argparse
import json
import os

from ddpbench.commands.arguments import add_deprecated_option, exit_codes
from ddpbench.config.errors import SpecError
from ddpbench.config.spec import COMM_HOOKS


def add_project_parser(commands) -> None:
    project = commands.add_parser(
        "project",
        help="replay a measured DDP step at another world size or network",
        description="Replay a measured DDP step for another world size, network, bucket size or compression: a "
        "projection, not a measurement.",
    )
    project.add_argument("run", metavar="RUN", help="a DDP run's record (RUN.json), or a folder with one record")
    project.add_argument("--world", type=int, required=True, help="world size to project to (>= 1)")
    project.add_argument(
        "--network",
        dest="profile",
        default=None,
        metavar="FILE|PRESET",
        help="network profile (ddpbench comm's profile.json), or a preset: "
        "h100-nvswitch, h200-nvswitch, pcie4-8gpu, ib-100g, ib-400g (required)",
    )
    add_deprecated_option(project, "--profile", dest="profile", instead="--network FILE|PRESET")
    project.add_argument("--bucket-cap-mb", type=float, default=None, help="what-if bucket cap (default: the run's)")
    project.add_argument(
        "--comm-hook",
        choices=COMM_HOOKS,
        default=None,
        help="what-if gradient compression (default: the run's)",
    )
    project.add_argument(
        "--bandwidth-scale", type=float, default=1.0, help="what-if: k times the bandwidth (default 1)"
    )
    project.add_argument("--json", action="store_true", help="print JSON instead of the text")
    exit_codes(project, "0 projected")
    project.set_defaults(handler=command_project)


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
    from ddpbench.analysis.answers import reference_throughput
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
    from ddpbench.analysis.projection import ProjectionError, WhatIf, project
    from ddpbench.analysis.projection_text import format_projection

    if args.profile is None:
        raise SpecError("the following arguments are required: --network FILE|PRESET")
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
