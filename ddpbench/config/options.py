"""Command-line flags declared on the dataclass fields they fill: a field says its flag, help and
type once, and the commands build their parsers from it and turn parsed arguments back into the
dataclass. No torch, no argparse subclassing.

    steps: int = flag("total steps per rank, warm-up included (default 30)", default=30)

A field's default is the flag's default; a `Literal[...]` annotation gives the flag's choices;
`int`, `float` and `bool` give the type (or the store_true/store_false action); a field without a
default is a required flag. The flag's destination is the field's name, so `from_args` needs no
table of names. Which fields a command offers, in which order and group, the command says
(`add_arguments(parser, RunSpec, ("workload", "strategy"))`): the help lists them in that order.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import re
import types
import typing
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Literal

METADATA_KEY = "ddpbench.flag"


@dataclass(frozen=True)
class Flag:
    """How a field appears on the command line. None means argparse's own default."""

    help: str | None = None
    flags: tuple[str, ...] = ()
    """Option strings; default: `--` and the field's name with dashes."""
    type: Callable[[str], Any] | None = None
    """Parses the text; default: from the annotation (int, float; str and choices need none)."""
    metavar: str | None = None
    negatable: bool = False
    """A bool field as `--name` / `--no-name` (argparse's BooleanOptionalAction)."""
    parse: Callable[[Any], Any] | None = None
    """Turns the parsed value into the field's value in `from_args` (not applied to None)."""


def flag(
    help: str | None = None,
    *,
    flags: tuple[str, ...] = (),
    type: Callable[[str], Any] | None = None,
    metavar: str | None = None,
    negatable: bool = False,
    parse: Callable[[Any], Any] | None = None,
    default: Any = dataclasses.MISSING,
    default_factory: Callable[[], Any] | Any = dataclasses.MISSING,
) -> Any:
    """A dataclass field with its command-line flag; `default`/`default_factory` as for `field`."""
    metadata = {METADATA_KEY: Flag(help, flags, type, metavar, negatable, parse)}
    return dataclasses.field(default=default, default_factory=default_factory, metadata=metadata)


def same_flag(owner: type, name: str) -> Any:
    """A field with the flag and default of `owner.name`: one option that fills two dataclasses."""
    source = _fields(owner)[name]
    return dataclasses.field(default=source.default, default_factory=source.default_factory, metadata=source.metadata)


def flag_of(field: dataclasses.Field) -> Flag | None:
    return field.metadata.get(METADATA_KEY)


def _fields(owner: type) -> dict[str, dataclasses.Field]:
    return {field.name: field for field in dataclasses.fields(owner)}


@functools.cache
def _hints(owner: type) -> dict[str, Any]:
    """`owner`'s resolved annotations, once per class: resolving them for every flag cost each
    parser built 0.06 s here (the test suite builds hundreds); the dict is read, never changed."""
    return typing.get_type_hints(owner)


def _default(field: dataclasses.Field) -> Any:
    if field.default is not dataclasses.MISSING:
        return field.default
    if field.default_factory is not dataclasses.MISSING:
        return field.default_factory()
    return dataclasses.MISSING


def _without_none(annotation: Any) -> Any:
    """`X | None` -> X (the flag's default says None; the type parses what is given)."""
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        rest = [arg for arg in typing.get_args(annotation) if arg is not type(None)]
        if len(rest) == 1:
            return rest[0]
    return annotation


def choices_of(annotation: Any) -> tuple | None:
    """The values of a `Literal[...]` annotation (or of `Literal[...] | None`), else None."""
    annotation = _without_none(annotation)
    return typing.get_args(annotation) if typing.get_origin(annotation) is Literal else None


def argument_options(owner: type, name: str) -> tuple[tuple[str, ...], dict[str, Any]]:
    """(option strings, add_argument keywords) of one field's flag."""
    field = _fields(owner)[name]
    spec = flag_of(field)
    if spec is None:
        raise TypeError(f"{owner.__name__}.{name} has no command-line flag")
    annotation = _without_none(_hints(owner)[name])
    default = _default(field)
    keywords: dict[str, Any] = {"dest": name}
    if default is dataclasses.MISSING:
        keywords["required"] = True
    else:
        keywords["default"] = default
    if spec.negatable:
        keywords["action"] = argparse.BooleanOptionalAction
    elif annotation is bool:  # the flag says what is not the default
        keywords["action"] = "store_false" if default is True else "store_true"
    else:
        choices = choices_of(annotation)
        parse_text = spec.type or (annotation if annotation in (int, float) else None)
        keywords.update(
            (key, value) for key, value in (("choices", choices), ("type", parse_text)) if value is not None
        )
    keywords.update(
        (key, value) for key, value in (("metavar", spec.metavar), ("help", spec.help)) if value is not None
    )
    return spec.flags or ("--" + name.replace("_", "-"),), keywords


def add_arguments(parser, owner: type, only: Iterable[str]) -> None:
    """Add the flags of `owner`'s fields named in `only`, in that order, to a parser or group."""
    for name in only:
        option_strings, keywords = argument_options(owner, name)
        parser.add_argument(*option_strings, **keywords)


def from_args(owner: type, parsed: argparse.Namespace, /, **given: Any):
    """An `owner` from parsed arguments: each field whose flag the parser had takes its value (a
    dataclass-typed field is built the same way from its own fields' flags); `given` fills the
    fields a command works out itself; every other field keeps its default."""
    values: dict[str, Any] = {}
    hints = _hints(owner)
    for field in dataclasses.fields(owner):
        if not field.init:
            continue
        if field.name in given:
            values[field.name] = given[field.name]
            continue
        nested = hints[field.name]
        if dataclasses.is_dataclass(nested) and any(
            flag_of(inner) and hasattr(parsed, inner.name) for inner in dataclasses.fields(nested)
        ):
            values[field.name] = from_args(nested, parsed)
            continue
        spec = flag_of(field)
        if spec is None or not hasattr(parsed, field.name):
            continue
        value = getattr(parsed, field.name)
        values[field.name] = spec.parse(value) if spec.parse and value is not None else value
    return owner(**values)


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number >= 1; got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number >= 1; got {text!r}")
    return value


def comma_list(text: str) -> tuple[str, ...]:
    return tuple(item.strip() for item in text.split(",") if item.strip())


def node_counts(text: str) -> tuple[int, ...]:
    return tuple(positive_int(item) for item in comma_list(text))


HOST_NAME = re.compile(r"[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?")
"""A machine's name as `ddpbench history hosts` prints it and a scheduler takes it as it is: at most
63 letters, digits, '.', '-' and '_', a letter or digit at each end (a Kubernetes label value; never a
SLURM hostlist range such as node[1-3], nor a path, which SLURM's --exclude would read as a file)."""


def host_names(text: str) -> tuple[str, ...]:
    """Host names separated by commas (`--avoid-hosts node-1,node-7`)."""
    names = comma_list(text)
    bad = [name for name in names if not HOST_NAME.fullmatch(name)]
    if not names or bad:
        raise argparse.ArgumentTypeError(
            f"takes host names separated by commas (node-1,node-7: letters, digits, '.', '-' and '_', at most 63, "
            f"as ddpbench history hosts prints them); got {(bad[0] if bad else text)!r}"
        )
    return tuple(dict.fromkeys(names))
