"""The `ddpbench` command line. Bad input fails here, exit code 2, before any process starts."""

from __future__ import annotations

import argparse
import os
import signal
import sys

from ddpbench.commands.arguments import DEPRECATED_DEST, USAGE_ERROR, OneLineErrorParser
from ddpbench.commands.bisect import add_bisect_parser
from ddpbench.commands.bundle import add_bundle_parser
from ddpbench.commands.canary import add_canary_parser
from ddpbench.commands.comm import add_comm_parser
from ddpbench.commands.explain import add_explain_parser
from ddpbench.commands.export import add_export_parser
from ddpbench.commands.gate import add_ab_parser, add_baseline_parser, add_gate_parser
from ddpbench.commands.history import add_history_parser
from ddpbench.commands.project import add_project_parser
from ddpbench.commands.report import add_report_parser
from ddpbench.commands.run import add_run_parser
from ddpbench.commands.sbatch import add_sbatch_parser
from ddpbench.commands.sweep import add_sweep_parser
from ddpbench.commands.table import add_table_parser
from ddpbench.commands.trace import add_trace_parser
from ddpbench.commands.trainjob import add_trainjob_parser
from ddpbench.commands.tune import add_tune_parser
from ddpbench.config.spec import SpecError

GROUPS = (
    ("measure (starts processes, writes records)", ("run", "sweep", "tune")),
    ("read a sweep (from its records; starts nothing)", ("table", "explain", "report")),
    ("compare (the CI gate, and what it compares with)", ("gate", "ab", "bisect", "history")),
    ("cluster (a sweep on many nodes)", ("sbatch", "trainjob")),
    ("tools", ("comm", "project", "trace", "canary", "bundle")),
)
"""`ddpbench --help` lists the commands by what people do with them; every listed command is in
one group (tests/test_cli_surface.py), old names are not listed."""


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineErrorParser(
        prog="ddpbench",
        usage="ddpbench [-h] COMMAND ...",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = parser.add_subparsers(
        dest="command",
        required=True,
        metavar="COMMAND",
        parser_class=OneLineErrorParser,
        prog="ddpbench",  # not the usage line below: each command's help starts `usage: ddpbench COMMAND`
        help=argparse.SUPPRESS,
    )
    add_run_parser(commands)
    add_sweep_parser(commands)
    add_tune_parser(commands)
    add_table_parser(commands)
    add_explain_parser(commands)
    add_report_parser(commands)
    add_gate_parser(commands)
    add_ab_parser(commands)
    add_bisect_parser(commands)
    add_history_parser(commands)
    add_sbatch_parser(commands)
    add_trainjob_parser(commands)
    add_comm_parser(commands)
    add_project_parser(commands)
    add_trace_parser(commands)
    add_canary_parser(commands)
    add_bundle_parser(commands)
    add_export_parser(commands)  # old names, not listed: each says what replaces it
    add_baseline_parser(commands)
    parser.description = "Benchmark PyTorch DDP training and its scaling.\n\n" + command_groups(commands)
    parser.epilog = (
        "ddpbench COMMAND --help gives a command's options and its exit codes; the\n"
        "conventions every command shares are in docs/commands.md.\n"
        "exit codes: 2 bad input, refused before anything starts."
    )
    return parser


def command_groups(commands) -> str:
    """The listed commands under their groups, one line each."""
    helps = {choice.dest: choice.help for choice in commands._choices_actions}
    width = max(map(len, helps)) + 2
    blocks = []
    for title, names in GROUPS:
        blocks.append("\n".join([f"{title}:", *(f"  {name:<{width}}{helps[name]}" for name in names)]))
    return "\n\n".join(blocks)


class Terminated(KeyboardInterrupt):
    """SIGTERM, handled like Ctrl-C: end the running processes, keep what is written, mark the sweep."""


def _raise_terminated(signum, frame):
    raise Terminated()


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    argv = sys.argv[1:] if argv is None else list(argv)
    run_args = []
    if argv[:1] in (["ab"], ["bisect"]) and "--" in argv:  # what follows -- goes to `ddpbench run` untouched
        cut = argv.index("--")
        argv, run_args = argv[:cut], argv[cut + 1 :]
    args = parser.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)
    if args.command in ("ab", "bisect"):
        args.run_args = run_args
    signal.signal(signal.SIGTERM, _raise_terminated)
    # Deprecated options a command used: said after its output, and not after a usage error,
    # which stays one line.
    args.deprecations = list(getattr(args, DEPRECATED_DEST, None) or [])
    try:
        code = args.handler(args)
        for line in args.deprecations:
            print(f"warning: {line}", file=sys.stderr)
        return code
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
