"""`ddpbench table`: a sweep's scaling table, printed from its records (the sweep prints it too). No torch."""

from __future__ import annotations

import argparse
import os
import warnings

from ddpbench.commands.arguments import exit_codes
from ddpbench.config.errors import SpecError


def add_table_parser(commands) -> None:
    table = commands.add_parser(
        "table",
        help="print a sweep's scaling table again: throughput and efficiency",
        description="Print a sweep's scaling table again, from its records, as the sweep printed it: throughput "
        "and efficiency of every strategy at every world size. explain says where the lost scaling went; report "
        "writes it all as one file.",
    )
    table.add_argument("sweep_dir", metavar="SWEEP_DIR", help="a sweep's folder (results/<sweep-id>)")
    exit_codes(table, "0 printed, every run ok", "1 printed, and a run failed or failed a correctness check")
    table.set_defaults(handler=command_table)


def print_table(sweep_dir: str, save: bool = False) -> int:
    from ddpbench.analysis.frames import changes_memory, format_memory, format_side_by_side, load, scaling_table
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
    for sentence in runs.loc[runs["probe_flag"] != "", "probe_flag"]:
        print(f"!! {sentence}")
    # The terminal shows what the sweep can answer: memory only where a strategy of the sweep is
    # one that changes it (local, ddp and dp hold the same model state); the communication table,
    # three estimates per run, is the report's detail (`ddpbench explain` gives the one figure).
    if changes_memory(runs):
        kinds = runs["peak_memory_kind"].dropna()
        memory = format_memory(table, kinds.iloc[0] if not kinds.empty else None)
        if memory:
            print("\n" + memory)
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
