"""The `ddpbench` command line. Bad input fails here, exit code 2, before any process starts."""

from __future__ import annotations

import argparse
import os
import signal
import sys

from ddpbench.commands.arguments import USAGE_ERROR, OneLineErrorParser, comma_list, subcommands
from ddpbench.commands.comm import add_comm_parser
from ddpbench.commands.explain import add_explain_parser
from ddpbench.commands.export import add_export_parser
from ddpbench.commands.gate import (
    add_verdict_arguments,
    command_ab,
    command_baseline_save,
    command_gate,
)
from ddpbench.commands.project import add_project_parser
from ddpbench.commands.report import add_report_parser
from ddpbench.commands.run import add_run_parser
from ddpbench.commands.sbatch import add_sbatch_parser
from ddpbench.commands.sweep import add_sweep_parser
from ddpbench.commands.table import add_table_parser
from ddpbench.commands.trace import add_trace_parser
from ddpbench.commands.tune import add_tune_parser
from ddpbench.config.spec import SpecError


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineErrorParser(prog="ddpbench", description="Benchmark PyTorch DDP training and its scaling.")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=OneLineErrorParser)
    add_run_parser(commands)
    add_sweep_parser(commands)
    add_sbatch_parser(commands)
    add_table_parser(commands)
    add_explain_parser(commands)
    add_report_parser(commands)
    gate = commands.add_parser("gate", help="compare a candidate sweep with a baseline; exit 1 on a regression")
    gate.add_argument(
        "--baseline",
        required=True,
        help="sweep folder, record file, 'auto' (the stored baseline for the candidate's machine class "
        "and suite) or 'history' (the stored history since its last change point)",
    )
    gate.add_argument("--candidate", required=True, help="sweep folder or record file")
    gate.add_argument(
        "--metrics",
        type=comma_list,
        default=None,
        help="comma-separated subset of throughput,efficiency,exposed_share (default: all)",
    )
    gate.add_argument(
        "--allow-env-mismatch", action="store_true", help="compare even when GPU, CPU, torch, CUDA or NCCL differ"
    )
    gate.add_argument(
        "--allow-missing",
        action="store_true",
        help="a configuration of the baseline missing from the candidate is a note, not a failure",
    )
    gate.add_argument(
        "--history",
        default="results/history",
        help="root of the stored history (default results/history); its series for the candidate's "
        "machine class and suite add evidence of the noise, or are the baseline",
    )
    gate.add_argument(
        "--history-folder",
        default=None,
        help="one machine class and suite's history folder, instead of finding it under --history",
    )
    add_verdict_arguments(gate)
    gate.set_defaults(handler=command_gate)
    from ddpbench.commands.history import add_history_parser, add_store_argument

    add_store_argument(gate)
    add_history_parser(commands)
    ab = commands.add_parser(
        "ab",
        help="run one configuration in two environments, A B A B ..., and gate B " "against A with a paired test",
        usage="ddpbench ab A B [options] -- RUN_OPTIONS (those of ddpbench run, e.g. --workload mlp " "--nproc 2)",
    )
    ab.add_argument("a", help="environment A: a Python executable (runs this ddpbench) or a ddpbench working tree")
    ab.add_argument("b", help="environment B, the candidate")
    ab.add_argument("--rounds", type=int, default=5, help="rounds of A then B (default 5, at least 2)")
    ab.add_argument("--python", default=None, help="Python for working trees (default: this one)")
    ab.add_argument("--out", default=None, help="records go to OUT/a and OUT/b (default results/ab-<time>)")
    add_verdict_arguments(ab)
    ab.set_defaults(handler=command_ab)
    baseline = commands.add_parser("baseline", help="store a sweep as the baseline of its machine class")
    baseline_commands = subcommands(baseline, "baseline_command")
    save = baseline_commands.add_parser("save", help="copy a sweep's records to results/baselines/<class>/<suite>/")
    save.add_argument("sweep_dir")
    save.add_argument("--baselines", default="results/baselines", help="where baselines live")
    save.set_defaults(handler=command_baseline_save)
    add_export_parser(commands)
    add_comm_parser(commands)
    add_project_parser(commands)
    add_tune_parser(commands)
    add_trace_parser(commands)
    return parser


class Terminated(KeyboardInterrupt):
    """SIGTERM, handled like Ctrl-C: end the running processes, keep what is written, mark the sweep."""


def _raise_terminated(signum, frame):
    raise Terminated()


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    argv = sys.argv[1:] if argv is None else list(argv)
    run_args = []
    if argv[:1] == ["ab"] and "--" in argv:  # what follows -- goes to `ddpbench run` untouched
        cut = argv.index("--")
        argv, run_args = argv[:cut], argv[cut + 1 :]
    args = parser.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)
    if args.command == "ab":
        args.run_args = run_args
    signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        return args.handler(args)
    except SpecError as exc:
        # Named as argparse names it (`ddpbench history add`), so every usage error reads alike.
        command = " ".join(filter(None, (args.command, getattr(args, f"{args.command}_command", None))))
        print(f"ddpbench {command}: error: {exc}", file=sys.stderr)
        return USAGE_ERROR
    except KeyboardInterrupt as exc:
        terminated = isinstance(exc, Terminated)
        print(
            f"ddpbench: {'terminated' if terminated else 'interrupted'}; runs in progress were ended, "
            "finished records are kept",
            file=sys.stderr,
        )
        return 143 if terminated else 130
    except BrokenPipeError:
        # The reader went away (`ddpbench explain ... | head`): not an error of ours. Point stdout at
        # /dev/null so the interpreter's own flush at exit does not fail again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    sys.exit(main())
