"""Ids that become files or folders inside a folder the user chose: run ids, sweep ids, suite
names, baseline folders and TrainJob names. One check for all of them, made before anything is
written, so that no value can reach outside its folder. No torch.

A run id is one file name (`OUT/runs/<run-id>.json`): no folders at all. A sweep id names a folder
inside `--out` and may hold sub-folders (`nightly/2026-12-01`): each part is a name. Neither may
be empty, absolute, `.` or `..`, hold a backslash or a NUL, or start or end with a space (a
typo's look-alike of another folder)."""

from __future__ import annotations

import posixpath

from ddpbench.config.errors import SpecError

FORBIDDEN_CHARACTERS = ("\\", "\0")
"""A backslash is a separator on Windows and an escape in shells; NUL ends a path in the kernel."""


def id_problem(value: object, nested: bool = False) -> str | None:
    """What is wrong with `value` as an id (None: nothing). `nested`: sub-folders allowed."""
    if not isinstance(value, str) or not value:
        return "it is empty"
    if value != value.strip():
        return "it starts or ends with a space"
    if any(character in value for character in FORBIDDEN_CHARACTERS):
        return "it holds a backslash or a NUL"
    if posixpath.isabs(value):
        return "it is an absolute path"
    parts = value.split("/")
    if not nested and len(parts) > 1:
        return "it holds a '/'"
    if any(part in ("", ".", "..") for part in parts):
        return "it holds '..', '.' or an empty folder name"
    return None


def check_id(what: str, value: str, inside: str, nested: bool = False) -> str:
    """`value` as it is, or SpecError naming `what` (the option, e.g. --sweep-id), the folder it
    must stay `inside` and what is wrong."""
    problem = id_problem(value, nested)
    if problem is None:
        return value
    if nested:
        rule = f"a name inside {inside}, sub-folders allowed (never '..', never absolute)"
    else:
        rule = f"a plain name, one file inside {inside} (no '/', '\\' or '..')"
    raise SpecError(f"{what} must be {rule}; got {value!r}: {problem}")


def is_plain_id(value: object) -> bool:
    """True where `value` is one file or folder name (what a stored suite name must be)."""
    return id_problem(value) is None
