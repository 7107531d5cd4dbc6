"""`ddpbench canary`: one run of the machine canary, the fixed probes every sweep runs at its start
and end (ddpbench.running.canary). No torch here."""

from __future__ import annotations

import argparse
import json

from ddpbench.commands.arguments import add_deprecated_option, exit_codes


def add_canary_parser(commands) -> None:
    canary = commands.add_parser(
        "canary",
        help="this machine's own speed, as every sweep records it",
        description="Probe this machine once (matrix product, memory copy, Python loop, gloo and NCCL all-reduce): "
        "what every sweep keeps at its start and end, so that the gate can tell a slower machine from slower code.",
    )
    canary.add_argument("--json-file", dest="json", default=None, metavar="FILE", help="also write the probes as JSON")
    add_deprecated_option(canary, "--json", dest="json", instead="--json-file FILE")
    exit_codes(canary, "0 every probe ran", "1 a probe failed (the others are printed)")
    canary.set_defaults(handler=command_canary)


def command_canary(args: argparse.Namespace) -> int:
    from ddpbench.records.store import write_atomic
    from ddpbench.running.canary import format_canary, run_canary

    canary = run_canary("command")
    print(format_canary(canary))
    if args.json:
        write_atomic(args.json, json.dumps(canary, indent=1) + "\n")
    return 1 if canary.get("error") else 0
