"""Run a gate and end with its exit code in words: `python -m ddpbench.gate.ci -- COMMAND ...`.

GNU make turns every failing exit code of a recipe into its own 2, so a CI job that goes through
`make gate` cannot tell a regression (1) from a busy machine (4) or bad input (2). This runs the
gate command given after `--` (`ddpbench gate ...` or `ddpbench ab ...` however ddpbench is
started, or `python -m ddpbench.gate.base_env ...`; any other command line is refused in one line),
lets its output through, then prints as its last line what the code means and how many runs a side
the weakest comparison would need to see the gate's target, and exits with the gate's own code.
`make gate` runs the gate through it; a CI job that calls it (or `ddpbench gate`) directly gets 1,
3 and 4 as themselves.

A code is a verdict only with the verdict behind it: Python exits 1 on an error nobody caught, so a
command that exits 0, 1, 3 or 4 without writing its verdict, or with a code that is none of the
gate's (a signal, say), could not run: this exits 70, never a verdict's code. The gate writes its
verdict to the file this names in its environment (VERDICT_FILE_ENV), beside any `--json-file` the
user gives it: the command runs exactly as given, and the wrapper never reads the gate's command
line (a layer below the commands, it does not know their options). No torch.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shlex
import subprocess
import sys
import tempfile
import textwrap

from ddpbench.config.errors import COULD_NOT_RUN, could_not_run

EXIT_MEANINGS = {
    0: "pass",
    1: "a regression, or a configuration that is not comparable (the lines above say which, and why)",
    2: "bad input or data (the line above says what); nothing was compared",
    3: "inconclusive: a comparison looks slower than the threshold but not significantly (the lines above say how "
    "many runs a side would decide), or one too weak to see the gate's target (--fail-underpowered)",
    4: "a regression the machine may account for (a busy machine, the canary's drift, or a process at another "
    "speed), or a pass a faster machine could explain: confirm it on a quiet machine or with a same-job A/B",
    COULD_NOT_RUN: "could not run: the command ended without a verdict (an error it did not expect, a crash, a "
    "signal; the lines above say what); nothing was decided",
    130: "interrupted (Ctrl-C): runs in progress ended, finished records kept; nothing was decided",
    143: "terminated (SIGTERM): runs in progress ended, finished records kept; nothing was decided",
}
"""The exit codes of `ddpbench gate` and `ddpbench ab` (ddpbench.commands.gate), in words: this
wrapper exits with them, and with 70 for any other ending of the command."""
VERDICT_CODES = (0, 1, 3, 4)
"""The codes that are a verdict: the gate writes its verdict file before it exits with one of them."""
VERDICT_FILE_ENV = "DDPBENCH_VERDICT_FILE"
"""Where `ddpbench gate` and `ddpbench ab` also write their verdict (the `--json-file` document), when
their environment names a file: how this wrapper tells a verdict from a crash."""
PROGRAM = "python -m ddpbench.gate.ci"
USAGE = f"usage: {PROGRAM} [--name NAME] -- COMMAND [ARGS ...]"


ENTRY_MODULES = ("ddpbench", "ddpbench.cli", "ddpbench.__main__")
"""`python -m X` spellings of the ddpbench command line."""
ENTRY_SCRIPTS = ("ddpbench/cli.py", "ddpbench/__main__.py")
GATE_COMMANDS = ("gate", "ab")
BASE_ENV = "ddpbench.gate.base_env"


class UnreadableCommand(ValueError):
    """A command line in which the wrapper finds no gate: refused (exit 2), since it could neither
    keep the user's verdict file nor tell a verdict from a crash."""


def _entry(head: list[str]) -> tuple[str, int] | None:
    """(how the ddpbench command line is started, the index of the word after it): the first of
    `ddpbench` (the console script, any path: `.venv/bin/ddpbench`, after `env X=1` or `uv run`),
    `python -m ddpbench`, `-m ddpbench.cli`, `-m ddpbench.__main__` (`-mX` too), a path to
    ddpbench/cli.py, or `-m ddpbench.gate.base_env`."""
    for index, word in enumerate(head):
        if word == "-m" and index + 1 < len(head):
            module, after = head[index + 1], index + 2
        elif word.startswith("-m") and len(word) > 2:
            module, after = word[2:], index + 1
        elif os.path.basename(word) == "ddpbench" or word.replace(os.sep, "/").endswith(ENTRY_SCRIPTS):
            return "ddpbench", index + 1
        else:
            continue
        if module in ENTRY_MODULES:
            return "ddpbench", after
        if module == BASE_ENV:
            return BASE_ENV, after
        return None  # another module (python -m pytest ...): not a gate
    return None


def gate_arguments(command: list[str]) -> tuple[str, list[str]]:
    """(the ddpbench command, its arguments before any `--`) of the gate command this wraps:
    `ddpbench gate ...` or `ddpbench ab ...` however ddpbench is started (see `_entry`), or
    `python -m ddpbench.gate.base_env REF ...`, whose options other than its own go to `ddpbench ab`
    (as `ab`, with its two sides). UnreadableCommand for any other command line: a shell line, a
    script, another command."""
    head = command[: command.index("--")] if "--" in command else command
    found = _entry(head)
    if found is None:
        raise UnreadableCommand(
            "finds no gate in the command after --: give `ddpbench gate|ab ...` (or `python -m ddpbench gate|ab "
            f"...`, `python -m ddpbench.cli gate|ab ...`) or `python -m {BASE_ENV} ...` itself, not a shell line or "
            "a script that runs it"
        )
    entry, after = found
    if entry == BASE_ENV:
        from ddpbench.gate.base_env import parse

        with contextlib.redirect_stderr(io.StringIO()):
            try:
                _, verdict_args, _ = parse(head[after:])
            except SystemExit:
                verdict_args = head[after:]  # base_env will say what is wrong (exit 2)
        return "ab", ["A", "B", *verdict_args]
    subcommand = head[after] if after < len(head) else None
    if subcommand not in GATE_COMMANDS:
        raise UnreadableCommand(
            f"wraps ddpbench gate and ddpbench ab, whose exit codes it explains; got ddpbench {subcommand or '(none)'}"
        )
    return subcommand, head[after + 1 :]


def runs_words(verdict: dict) -> str:
    """How many runs a side (rounds, for a paired A/B) the comparisons would need to see the target."""
    target = verdict.get("target_slowdown")
    compared = [c for c in verdict.get("comparisons", []) if c.get("mde") is not None]
    if target is None or not compared:
        return ""
    shown = f"{100 * target:.3g}%"
    blind = [c for c in compared if c.get("sees_threshold") is False]
    unit = "rounds" if any(c.get("paired") for c in compared) else "runs per side"
    if not blind:
        return f"every comparison sees {shown} with the runs it had"
    needed = [c.get("runs_needed") for c in blind]
    most = "over 1000" if None in needed else str(max(needed))
    had = sorted({c.get("candidate_runs", 0) for c in blind})
    return (
        f"{len(blind)} of {len(compared)} comparisons cannot see {shown}: the weakest would need {most} {unit} "
        f"(it had {', '.join(map(str, had))})"
    )


def exit_line(code: int, verdict: dict | None, name: str = "ddpbench gate") -> str:
    meaning = EXIT_MEANINGS[code]
    runs = runs_words(verdict) if verdict else ""
    return f"{name} exited {code}: {meaning}" + (f"; {runs}" if runs else "")


def help_text() -> str:
    codes = "; ".join(f"{code} {meaning}" for code, meaning in EXIT_MEANINGS.items())
    paragraphs = [
        __doc__.splitlines()[0],
        "COMMAND is `ddpbench gate ...` or `ddpbench ab ...`, with ddpbench started any way it starts (`ddpbench`, "
        "`.venv/bin/ddpbench`, `python -m ddpbench`, `python -m ddpbench.cli`), or `python -m ddpbench.gate.base_env "
        "...`; any other command line (a shell line, a script) is refused (exit 2): the wrapper must find the "
        "gate's verdict file to tell a verdict from a crash. --name NAME: what the last line calls the command "
        "(default ddpbench gate).",
        f"exit codes: those of the gate: {codes}",
    ]
    return "\n\n".join([USAGE, *(textwrap.fill(text, 100) for text in paragraphs)]) + "\n"


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] in (["-h"], ["--help"]):
        print(help_text(), end="")
        return 0
    try:
        return wrap(argv)
    except KeyboardInterrupt:
        print(f"{PROGRAM}: interrupted", file=sys.stderr)
        return 130
    except Exception as error:  # noqa: BLE001 - an error of this wrapper is "could not run", never a verdict
        return could_not_run(PROGRAM, argv, error, None)


def wrap(argv: list[str]) -> int:
    name = "ddpbench gate"
    if argv[:1] == ["--name"] and len(argv) > 1:
        name, argv = argv[1], argv[2:]
    if argv[:1] == ["--"]:
        argv = argv[1:]
    if not argv:
        print(USAGE, file=sys.stderr)
        return 2
    try:
        gate_arguments(argv)
    except UnreadableCommand as exc:
        from ddpbench.config.secrets import redact_text

        print(redact_text(f"{PROGRAM}: error: {exc} (got: {shlex.join(argv)[:200]})"), file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="ddpbench-gate-") as scratch:
        verdict_path = os.path.join(scratch, "verdict.json")
        try:
            code = subprocess.run(argv, env={**os.environ, VERDICT_FILE_ENV: verdict_path}).returncode
        except OSError as exc:
            print(f"{name}: cannot run {argv[0]}: {exc}", file=sys.stderr)
            code = 2
        verdict = None
        try:  # bad input writes none
            with open(verdict_path, encoding="utf-8") as handle:
                verdict = json.load(handle)
        except (OSError, ValueError):
            pass
    sys.stdout.flush()
    if code in VERDICT_CODES and not isinstance(verdict, dict):
        # Python exits 1 on an error nobody caught: a code of a verdict, with no verdict behind it.
        print(f"{name} exited {code} without writing its verdict: {EXIT_MEANINGS[COULD_NOT_RUN]}", flush=True)
        return COULD_NOT_RUN
    if code not in EXIT_MEANINGS:
        ended = f"was ended by signal {-code}" if code < 0 else f"exited {code}, none of the gate's codes"
        print(f"{name} {ended}: {EXIT_MEANINGS[COULD_NOT_RUN]}", flush=True)
        return COULD_NOT_RUN
    print(exit_line(code, verdict, name), flush=True)
    return code


if __name__ == "__main__":
    sys.exit(main())
