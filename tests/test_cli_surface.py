"""The command line's surface, pinned: the exact `--help` of `ddpbench` and of every command and
subcommand (found by walking the parser, so a new command is covered the day it is added), and
the exit code and one-line error of bad flags.

Every help text is compared with its snapshot in tests/fixtures/cli_surface/ (rendered 100 columns
wide); a difference fails with a unified diff. When a change to the surface is meant, or a new
command has no snapshot yet, write the snapshots again and review the diff before committing:

    .venv/bin/python tests/test_cli_surface.py --update

argparse lays out help differently from one Python version to the next, so the snapshots hold the
version they were written with, and on another version the help comparisons are skipped (the bad
flag checks still run).
"""

from __future__ import annotations

import argparse
import contextlib
import difflib
import io
import os
import sys

import pytest

from ddpbench.cli import build_parser, main

SNAPSHOTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures", "cli_surface")
VERSION_FILE = os.path.join(SNAPSHOTS, "python-version")
COLUMNS = "100"
UPDATE = "python tests/test_cli_surface.py --update"


def command_paths(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """Every command reachable from `parser`, the top level first, each as the words that name it."""
    paths = [path]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, subparser in action.choices.items():
                paths += command_paths(subparser, (*path, name))
    return paths


def snapshot_path(path: tuple[str, ...]) -> str:
    return os.path.join(SNAPSHOTS, "-".join(("ddpbench", *path)) + ".txt")


@contextlib.contextmanager
def fixed_terminal():
    """argparse wraps help to the terminal's width (shutil reads COLUMNS); colour stays off."""
    saved = {name: os.environ.get(name) for name in ("COLUMNS", "PYTHON_COLORS", "NO_COLOR")}
    os.environ.update(COLUMNS=COLUMNS, PYTHON_COLORS="0", NO_COLOR="1")
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def run_main(argv: list[str]) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of `ddpbench ARGV` run in this process."""
    out, err = io.StringIO(), io.StringIO()
    with fixed_terminal(), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as exc:
            code = exc.code
    return code, out.getvalue(), err.getvalue()


def help_text(path: tuple[str, ...]) -> str:
    code, out, err = run_main([*path, "--help"])
    assert code == 0 and not err, f"ddpbench {' '.join(path)} --help: exit code {code}, stderr {err!r}"
    return out


def python_version() -> str:
    return f"{sys.version_info.major}.{sys.version_info.minor}"


PATHS = command_paths(build_parser())


@pytest.fixture(scope="module")
def same_python():
    with open(VERSION_FILE, encoding="utf-8") as handle:
        written_with = handle.read().strip()
    if written_with != python_version():
        pytest.skip(f"snapshots written with Python {written_with}, this is {python_version()} (argparse differs)")


@pytest.mark.parametrize("path", PATHS, ids=lambda path: " ".join(("ddpbench", *path)))
def test_help_matches_its_snapshot(path, same_python):
    name = " ".join(("ddpbench", *path))
    snapshot = snapshot_path(path)
    if not os.path.exists(snapshot):
        pytest.fail(f"`{name}` has no help snapshot ({snapshot}); add it with: {UPDATE}")
    with open(snapshot, encoding="utf-8") as handle:
        expected = handle.read()
    actual = help_text(path)
    if actual != expected:
        diff = difflib.unified_diff(
            expected.splitlines(keepends=True),
            actual.splitlines(keepends=True),
            fromfile=f"{snapshot} (snapshot)",
            tofile=f"{name} --help (now)",
        )
        pytest.fail(f"`{name} --help` changed (if meant: {UPDATE}):\n{''.join(diff)}", pytrace=False)


def parser_at(path: tuple[str, ...]) -> argparse.ArgumentParser:
    parser = build_parser()
    for name in path:
        (commands,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        parser = commands.choices[name]
    return parser


@pytest.mark.parametrize("path", PATHS, ids=lambda path: " ".join(("ddpbench", *path)))
def test_every_option_says_what_it_is(path):
    """Every argument a --help shows has a help text; what it hides is an old spelling that says
    what replaces it (or the top level's command list, which its description gives by group)."""
    from ddpbench.commands.arguments import DeprecatedSpelling

    missing, hidden = [], []
    for action in parser_at(path)._actions:
        name = "/".join(action.option_strings) or action.metavar or action.dest
        if action.help == argparse.SUPPRESS:
            if not isinstance(action, DeprecatedSpelling) and not (path == () and action.dest == "command"):
                hidden.append(name)
        elif not (action.help or "").strip():
            missing.append(name)
    assert not missing, f"ddpbench {' '.join(path)}: no help text for {', '.join(missing)}"
    assert not hidden, f"ddpbench {' '.join(path)}: hidden without being an old spelling: {', '.join(hidden)}"


@pytest.mark.parametrize("path", PATHS, ids=lambda path: " ".join(("ddpbench", *path)))
def test_every_help_ends_with_its_exit_codes(path):
    text = help_text(path)
    last = " ".join(text.strip().split("\n\n")[-1].split())
    assert "exit codes:" in last and "2 bad input" in last, f"ddpbench {' '.join(path)} --help ends: {last!r}"


def test_the_top_level_help_is_one_screen_of_commands_grouped_by_what_people_do():
    from ddpbench.cli import GROUPS

    text = help_text(())
    assert len(text.splitlines()) <= 45, text
    (commands,) = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    listed = {choice.dest for choice in commands._choices_actions}
    grouped = [name for _, names in GROUPS for name in names]
    assert sorted(grouped) == sorted(listed), "every listed command in exactly one group, and only those"
    for title, names in GROUPS:
        block = text[text.index(f"\n{title}:\n") + 1 :].split("\n\n")[0].splitlines()[1:]
        assert [line.split()[0] for line in block] == list(names), block
    # Old names still parse, and are not listed.
    assert {"export", "baseline"} <= set(commands.choices) - listed
    assert not any(line.split()[:1] in (["export"], ["baseline"]) for line in text.splitlines())


def test_every_snapshot_belongs_to_a_command():
    known = {os.path.basename(snapshot_path(path)) for path in PATHS}
    stale = sorted(set(os.listdir(SNAPSHOTS)) - known - {os.path.basename(VERSION_FILE)})
    assert not stale, f"snapshots of commands that no longer exist: {', '.join(stale)} (delete them)"


@pytest.mark.parametrize(
    "argv, error",
    [
        (
            ["run", "--workload", "mlp", "--bogus"],
            "ddpbench: error: unrecognized arguments: --bogus (see ddpbench --help)",
        ),
        (
            ["run", "--workload", "mlp", "--steps", "many"],
            "ddpbench run: error: argument --steps: invalid int value: 'many' (see ddpbench run --help)",
        ),
        (
            ["run", "--workload", "mlp", "--comm-hook", "zip"],
            "ddpbench run: error: argument --comm-hook: invalid choice: 'zip' "
            "(choose from 'allreduce', 'fp16_compress', 'bf16_compress') (see ddpbench run --help)",
        ),
        (
            ["run"],
            "ddpbench run: error: one of the arguments --workload --script is required (see ddpbench run --help)",
        ),
        (["sweep", "--bogus"], "ddpbench: error: unrecognized arguments: --bogus (see ddpbench --help)"),
        (
            ["sweep", "--max-nproc", "0"],
            "ddpbench sweep: error: argument --max-nproc: must be a whole number >= 1; got '0' "
            "(see ddpbench sweep --help)",
        ),
        (
            ["sweep", "--nproc", "0"],
            "ddpbench sweep: error: argument --nproc/--nproc-per-node: must be a whole number >= 1; got '0' "
            "(see ddpbench sweep --help)",
        ),
        (
            ["sweep", "--scaling", "linear"],
            "ddpbench sweep: error: argument --scaling: invalid choice: 'linear' (choose from 'weak', 'strong') "
            "(see ddpbench sweep --help)",
        ),
        (
            ["sweep", "--gpus", "2", "--max-nproc", "2"],
            "ddpbench sweep: error: argument --max-nproc: not allowed with argument "
            "--gpus-per-node/--gpus (see ddpbench sweep --help)",
        ),
        (
            ["sweep", "--gpus-per-node", "2", "--nproc", "2"],
            "ddpbench sweep: error: argument --nproc/--nproc-per-node: not allowed with argument "
            "--gpus-per-node/--gpus (see ddpbench sweep --help)",
        ),
    ],
    ids=lambda value: " ".join(value) if isinstance(value, list) else "",
)
def test_bad_flag_is_one_line_and_exit_code_2(argv, error):
    code, out, err = run_main(argv)
    assert (code, out) == (2, "")
    assert err == error + "\n"


def update() -> None:
    """Write the snapshot of every command, and the Python version they were written with."""
    os.makedirs(SNAPSHOTS, exist_ok=True)
    for path in PATHS:
        with open(snapshot_path(path), "w", encoding="utf-8") as handle:
            handle.write(help_text(path))
    with open(VERSION_FILE, "w", encoding="utf-8") as handle:
        handle.write(python_version() + "\n")
    print(f"{len(PATHS)} help snapshots written to {SNAPSHOTS} (Python {python_version()})")


if __name__ == "__main__":
    if sys.argv[1:] != ["--update"]:
        sys.exit(f"usage: {sys.argv[0]} --update   (write every command's help snapshot again)")
    update()
