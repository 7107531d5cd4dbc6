"""Ids that become files or folders inside a folder the user chose, or words in a batch script or
a manifest: run ids, sweep ids, suite names, baseline folders and TrainJob names. One check for all
of them, made when an id is created, before anything is written. No torch.

A new id is a plain name: letters, digits, `.`, `_` and `-`, each part starting with a letter or a
digit (`-x` reads as an option to every command line, `.x` is a hidden file), at most
MAX_ID_LENGTH characters. A
run id is one file name (`OUT/runs/<run-id>.json`); a sweep id names a folder inside `--out` and
may hold sub-folders (`nightly/2026-12-01`), each part such a name. Nothing else: no whitespace or
control character (a newline in a sweep id once wrote its own `#SBATCH` lines), no shell
metacharacter, never `.` or `..`. The check is not the only guard: every value written into a
batch script or a manifest is quoted as well.

Ids already stored (records and histories written before this rule) keep loading: what they are
checked against is only that they stay inside their folder (`stored_id_problem`)."""

from __future__ import annotations

import hashlib
import posixpath
import re

from ddpbench.config.errors import SpecError

MAX_ID_LENGTH = 128
"""Long enough for any generated id (a workload, strategy, world size, time and repeat), short
enough for a file name on every file system once the record's suffix is added."""
PLAIN_PART = re.compile(r"[A-Za-z0-9._-]+")
"""One part of an id: the characters every shell, file system, YAML and SLURM directive take as they are."""
FORBIDDEN_CHARACTERS = ("\\", "\0")
"""What even a stored id may not hold: a backslash is a separator on Windows, NUL ends a path in the kernel."""
ALLOWED = "letters, digits, '.', '_' and '-'"


def _path_problem(value: object, nested: bool) -> str | None:
    """What keeps `value` from being a file or folder name inside its folder (None: nothing)."""
    if not isinstance(value, str) or not value:
        return "it is empty"
    if posixpath.isabs(value):
        return "it is an absolute path"
    parts = value.split("/")
    if not nested and len(parts) > 1:
        return "it holds a '/'"
    if any(part in ("", ".", "..") for part in parts):
        return "it holds '..', '.' or an empty folder name"
    return None


def id_problem(value: object, nested: bool = False) -> str | None:
    """What is wrong with `value` as a new id (None: nothing). `nested`: sub-folders allowed."""
    if not isinstance(value, str) or not value:
        return "it is empty"
    if len(value) > MAX_ID_LENGTH:
        return f"it is {len(value)} characters long"
    for character in value:
        if not (PLAIN_PART.fullmatch(character) or character == "/"):
            return f"it holds {character!r}"
    problem = _path_problem(value, nested)
    if problem is None and any(not part[0].isascii() or not part[0].isalnum() for part in value.split("/")):
        return "a part starts with '.', '_' or '-'"
    return problem


def stored_id_problem(value: object, nested: bool = False) -> str | None:
    """What is wrong with `value` as an id read back from a record or a store (None: nothing): only
    what would take it outside its folder. Ids written before the plain-name rule keep loading."""
    if isinstance(value, str) and any(character in value for character in FORBIDDEN_CHARACTERS):
        return "it holds a backslash or a NUL"
    return _path_problem(value, nested)


def id_rule(inside: str, nested: bool = False) -> str:
    """What an id may be, in words."""
    parts = ", parts joined by '/' (sub-folders)" if nested else " (one name, no '/')"
    return (
        f"a plain name inside {inside}: {ALLOWED}{parts}, starting with a letter or a digit, at most "
        f"{MAX_ID_LENGTH} characters"
    )


def check_id(what: str, value: str, inside: str, nested: bool = False) -> str:
    """`value` as it is, or SpecError naming `what` (the option, e.g. --sweep-id), the folder it
    must stay `inside`, what is allowed and what is wrong."""
    problem = id_problem(value, nested)
    if problem is None:
        return value
    raise SpecError(f"{what} must be {id_rule(inside, nested)}; got {value!r}: {problem}")


def check_stored_id(what: str, value: str, inside: str, nested: bool = False) -> str:
    """`check_id` for an id read back from a record or a store: only that it stays inside."""
    problem = stored_id_problem(value, nested)
    if problem is None:
        return value
    raise SpecError(f"{what} must stay inside {inside}; got {value!r}: {problem}")


def is_plain_id(value: object) -> bool:
    """True where `value` is one plain file or folder name (what a stored suite name must be)."""
    return id_problem(value) is None


def short_hash(value: str, length: int = 6) -> str:
    """A few hex digits of `value`'s SHA-1: what keeps two names apart once their text is changed."""
    return hashlib.sha1(value.encode("utf-8", "surrogatepass")).hexdigest()[:length]


def plain_name(value: str) -> str:
    """`value` where it is a plain name already, else its runs of other characters as `-` and a
    short hash of `value` itself, so that two names never become one (`my model` -> `my-model-1a2b3c`):
    how a name the user gave for something else (a workload file's) becomes part of an id."""
    if id_problem(value) is None:
        return value
    cleaned = re.sub(r"^[^A-Za-z0-9]+", "", re.sub(r"[^A-Za-z0-9._-]+", "-", value)) or "name"
    return f"{cleaned[: MAX_ID_LENGTH // 2]}-{short_hash(value)}"
