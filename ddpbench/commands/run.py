"""`ddpbench run`: one benchmark run, under torchrun or in one process, and its record. No torch here."""

from __future__ import annotations

import argparse
import sys

from ddpbench.commands.arguments import BAD_INPUT, INTERRUPTED, add_run_arguments, exit_codes, spec_from_args


def add_run_parser(commands) -> None:
    run = commands.add_parser("run", help="one benchmark run (ddp under torchrun, or local) and its record")
    add_run_arguments(run, script=True)
    exit_codes(
        run,
        "0 the run is ok",
        "1 it failed, timed out or failed a correctness check (on a node other than global rank 0's: this node "
        "failed)",
        f"{NOT_MEASURABLE_EXIT} a script that is not DDP training ddpbench can measure",
        BAD_INPUT,
        INTERRUPTED,
    )
    run.set_defaults(handler=command_run)


# A script that is not DDP training ddpbench can measure: not a failure of the training, and not
# one a rerun fixes; told apart from 1 so that a job can say so.
NOT_MEASURABLE_EXIT = 5


def command_run(args: argparse.Namespace) -> int:
    from ddpbench.host.load import before_start
    from ddpbench.records.store import load_record
    from ddpbench.report.summary import format_summary
    from ddpbench.running.launch import launch_with_oom_backoff
    from ddpbench.running.resolve import oversubscription, oversubscription_warning, resolve, wanted_cores

    spec = resolve(spec_from_args(args))
    figures = oversubscription(spec)
    if figures:
        print(f"ddpbench run: {oversubscription_warning(figures)}", file=sys.stderr)
    busy = before_start(wanted_cores(spec))
    if busy:
        print(f"ddpbench run: {busy}", file=sys.stderr)
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
    if record.error and record.error.kind == "not_measurable":
        return NOT_MEASURABLE_EXIT
    if record.status != "ok" or record.failed_checks() or record.error:
        return 1
    return 0
