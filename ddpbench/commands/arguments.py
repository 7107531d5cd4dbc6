"""What several subcommands share: the one-line usage error, the run options and turning them
into a RunSpec, small argument types, and running an action on a sweep folder. No torch."""

from __future__ import annotations

import argparse
import dataclasses
import os

from ddpbench.config.errors import COULD_NOT_RUN, could_not_run
from ddpbench.config.options import add_arguments, argument_options, comma_list, from_args, node_counts, positive_int
from ddpbench.config.spec import (
    CONFIGURATION_FIELDS,
    MEASUREMENT_FIELDS,
    DDPKnobs,
    RunSpec,
    ScriptSpec,
    SpecError,
    default_pg_timeout_s,
)

__all__ = ["COULD_NOT_RUN", "comma_list", "could_not_run", "node_counts", "positive_int"]  # kept importable from here

USAGE_ERROR = 2


class OneLineErrorParser(argparse.ArgumentParser):
    """argparse, but a usage error is one line (what was wrong and where to look), exit code 2."""

    def error(self, message: str):
        self.exit(USAGE_ERROR, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


BAD_INPUT = "2 bad input, one line on stderr, refused before anything starts or is written"
INTERRUPTED = "130 interrupted (Ctrl-C), 143 terminated: runs in progress ended, finished records kept"
COULD_NOT_RUN_LINE = (
    f"{COULD_NOT_RUN} could not run: an error it did not expect, one line on stderr naming its log (the "
    "traceback); no verdict"
)


def exit_codes(parser: argparse.ArgumentParser, *codes: str) -> argparse.ArgumentParser:
    """End the parser's --help with its exit codes, each as `N what it means`; bad input's 2 is
    every command's and is added here."""
    given = codes if BAD_INPUT in codes else (*codes, BAD_INPUT)
    ordered, key = [], -1
    for text in given:  # in numeric order; a line without a code of its own stays after the one before it
        first = text.split()[0]
        key = int(first) if first.isdigit() else key
        ordered.append((key, text))
    parser.epilog = "exit codes: " + "; ".join(text for _, text in sorted(ordered, key=lambda item: item[0]))
    return parser


def unattended(handler, command: str, log_folder):
    """`handler` as a command that CI runs unattended: bad input stays a usage error (SpecError, exit
    2) and Ctrl-C or SIGTERM stay 130 and 143 (cli.main); every other error is `could_not_run`, its
    log in `log_folder(args)` (None: the temporary folder)."""

    def run(args: argparse.Namespace) -> int:
        try:
            return handler(args)
        except SpecError:
            raise
        except Exception as error:  # noqa: BLE001 - an error we did not expect is "could not run", never a verdict
            run_args = getattr(args, "run_args", None)
            argv = [*getattr(args, "argv", [command])[1:], *(["--", *run_args] if run_args else [])]
            try:
                folder = log_folder(args)
            except Exception:  # noqa: BLE001 - the log then goes to the temporary folder
                folder = None
            return could_not_run(f"ddpbench {command}", argv, error, folder)

    return run


DEPRECATED_DEST = "deprecated_spellings"
"""Where the old spellings a command line used are noted (cli.main prints them after the output)."""


def note_deprecated(namespace: argparse.Namespace, old: str, instead: str) -> None:
    """One line for `cli.main` to print after the command's output; the old spelling still works."""
    line = f"{old} is deprecated and will be removed: use {instead}"
    noted = getattr(namespace, DEPRECATED_DEST, None)
    if noted is None:
        noted = []
        setattr(namespace, DEPRECATED_DEST, noted)
    if line not in noted:
        noted.append(line)


class DeprecatedSpelling(argparse.Action):
    """An old option spelling that keeps its old meaning (its value goes where it always went) and
    notes one deprecation line naming what replaces it. Hidden from --help, which shows the new
    spelling; docs/commands.md lists every old one."""

    def __init__(self, option_strings, dest, instead: str, nargs=None, const=None, **kwargs):
        self.instead = instead
        super().__init__(option_strings, dest, nargs=nargs, const=const, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        setattr(namespace, self.dest, self.const if self.nargs == 0 else values)
        note_deprecated(namespace, option_string, self.instead)


def add_deprecated_option(parser, *old: str, instead: str, **keywords) -> None:
    """`old` spellings that keep their meaning, with a deprecation line naming `instead`. A switch
    is given `nargs=0` and `const` (the value it stores)."""
    parser.add_argument(*old, action=DeprecatedSpelling, instead=instead, help=argparse.SUPPRESS, **keywords)


def deprecated_command(handler, old: str, instead: str):
    """A handler for an old command name that still runs `handler`, then says what replaces it."""

    def run_and_say(args: argparse.Namespace) -> int:
        # cli.main has taken the notes already: this one goes straight to what it prints.
        args.deprecations.append(f"{old} is deprecated and will be removed: use {instead}")
        return handler(args)

    return run_and_say


def add_run_arguments(parser: argparse.ArgumentParser, script: bool = False) -> None:
    """The options of one run: the fields of RunSpec (and its DDP knobs) and how the run is launched.
    With `script`, a user's training script may stand where the workload does."""
    if script:
        what = parser.add_mutually_exclusive_group(required=True)
        # one of the two, so neither is required by itself
        for owner, name in ((RunSpec, "workload"), (ScriptSpec, "path")):
            options, keywords = argument_options(owner, name)
            what.add_argument(*options, **{**keywords, "required": False, "default": None})
    else:
        add_arguments(parser, RunSpec, ("workload",))
    add_arguments(parser, RunSpec, (*CONFIGURATION_FIELDS, "out_dir"))
    # Not given: the default for the run's compile mode (`spec_from_args`), as a sweep's run gets.
    parser.set_defaults(pg_timeout_s=None)
    parser.add_argument(
        "--run-timeout",
        type=float,
        default=None,
        help="seconds before the run is ended and recorded as timeout (default: none)",
    )
    add_arguments(parser, RunSpec, ("run_id", "repeat"))
    add_verbose_argument(parser)
    add_arguments(parser, RunSpec, MEASUREMENT_FIELDS)
    ddp = parser.add_argument_group("DDP options (recorded in the spec)")
    add_arguments(ddp, DDPKnobs, [field.name for field in dataclasses.fields(DDPKnobs)])
    nodes = parser.add_argument_group(
        "multi-node (torchrun c10d rendezvous; run the same command on every node, "
        "or once with --launcher slurm inside an allocation)"
    )
    add_arguments(
        nodes, RunSpec, ("launcher", "rank_start", "nnodes", "node_rank", "rdzv_endpoint", "rdzv_id", "rdzv_port")
    )
    add_reliability_arguments(parser)
    if script:
        add_script_arguments(parser)


def add_script_arguments(parser: argparse.ArgumentParser, with_path: bool = False) -> None:
    """How a user's script runs (`run` puts --script beside --workload itself)."""
    scripts = parser.add_argument_group(
        "a training script (--script), run unmodified under torchrun; its own arguments follow --"
    )
    if with_path:
        options, keywords = argument_options(ScriptSpec, "path")
        scripts.add_argument(*options, **{**keywords, "required": False, "default": None})
    add_arguments(scripts, ScriptSpec, ("run_to_end", "sample_unit", "units_per_sample"))
    scripts.add_argument("script_args", nargs="*", metavar="-- SCRIPT_ARGS", help="the script's own arguments")


def script_from_args(args: argparse.Namespace) -> ScriptSpec | None:
    """The script asked for, or None (then arguments after -- are a mistake)."""
    if getattr(args, "path", None) is None:
        if getattr(args, "script_args", None):
            raise SpecError(f"arguments after -- are a script's ({' '.join(args.script_args)}); they need --script")
        return None
    return from_args(ScriptSpec, args, args=tuple(args.script_args))


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
    add_arguments(group, RunSpec, ("fault", "slowdown"))


def spec_from_args(args: argparse.Namespace) -> RunSpec:
    from ddpbench.config.ids import check_id

    # A new id: a plain name (a stored record's keeps loading); an empty one means "choose one". Not
    # truthiness: argparse reads `--run-id=--` as [], which must be refused, not replaced by a made-up id.
    if getattr(args, "run_id", None) not in (None, ""):
        check_id("--run-id", args.run_id, "--out")
    script = script_from_args(args)
    given = {}
    if getattr(args, "pg_timeout_s", 0) is None:
        given["pg_timeout_s"] = default_pg_timeout_s(getattr(args, "compile", "off"))
    if script is None:
        return from_args(RunSpec, args, **given)
    return from_args(RunSpec, args, workload=script.workload_name, script=script, **given)


def on_sweep_folder(sweep_dir: str, action):
    """Run `action()` on an existing sweep folder; what it finds wrong with the input is a usage error."""
    if not os.path.isdir(sweep_dir):
        raise SpecError(f"{sweep_dir!r} is not a sweep folder")
    try:
        return action()
    except ValueError as exc:
        raise SpecError(str(exc)) from None


def subcommands(parser: argparse.ArgumentParser, dest: str):
    """A command's own subcommands (`ddpbench history add`), with the same one-line usage errors."""
    return parser.add_subparsers(
        dest=dest,
        required=True,
        metavar=dest.upper(),
        parser_class=OneLineErrorParser,
        help="one of these, each with its own --help:",
    )
