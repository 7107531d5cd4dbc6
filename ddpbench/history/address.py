"""Which history store a command uses, and how its address is shown: a PostgreSQL password never
leaves this module in a message (`StoreAddress.shown`, `StoreAddress.scrub`). No torch.

An address is `sqlite:///PATH` (PATH as written after the third slash, as SQLAlchemy reads it:
`sqlite:///results/h.sqlite` is relative, `sqlite:////tmp/h.sqlite` absolute), a plain file path,
or `postgresql://[USER[:PASSWORD]@]HOST[:PORT]/DB[?...]` (also `postgres://`). A password is best
left out of the URL: libpq reads PGPASSWORD and ~/.pgpass (or $PGPASSFILE) itself.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from urllib.parse import parse_qsl, unquote

DEFAULT_STORE = os.path.join("results", "history.sqlite")
STORE_VARIABLE = "DDPBENCH_HISTORY"
HIDDEN = "***"
_SCHEME = re.compile(r"^(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*)://")
_POSTGRES = ("postgresql", "postgres")
_PASSWORD_PARAMETER = re.compile(r"(?i)((?:^|[?&])password=)[^&]*")


class StoreError(ValueError):
    """A history store that cannot be used as asked; the message names it, password hidden (exit 2)."""


class NoHistoryYet(StoreError):
    """A store to read that does not exist yet, or holds no ddpbench tables yet."""


@dataclass(frozen=True)
class StoreAddress:
    kind: str
    """'sqlite' or 'postgresql'"""
    target: str
    """what the backend opens: a file path, or the URL as given (password included)"""
    shown: str
    """the address for messages, records and reports: any password replaced by ***"""
    secrets: tuple[str, ...] = field(default=(), repr=False)

    def __repr__(self) -> str:
        return f"StoreAddress({self.kind!r}, {self.shown!r})"

    def scrub(self, text: str) -> str:
        """`text` with every form of this address's password replaced (a server's or driver's
        message may echo the connection string)."""
        for secret in sorted(self.secrets, key=len, reverse=True):
            text = text.replace(secret, HIDDEN)
        return redact(text)

    def error(self, problem: str, kind: type[StoreError] = StoreError) -> StoreError:
        return kind(self.scrub(f"history store {self.shown}: {problem}"))


def redact(text: str) -> str:
    """Any user:password@ in URLs within `text`, and any password= parameter, hidden."""
    text = re.sub(r"([A-Za-z][A-Za-z0-9+.-]*://[^:/@\s]*):[^\s]*?@", rf"\1:{HIDDEN}@", text)
    return _PASSWORD_PARAMETER.sub(rf"\1{HIDDEN}", text)


def _postgres_address(url: str) -> StoreAddress:
    scheme_end = url.index("://") + 3
    rest, mark, query = url[scheme_end:].partition("?")
    secrets = []
    userinfo, at, host_part = rest.rpartition("@")
    shown_rest = rest
    if at and ":" in userinfo:
        user, _, password = userinfo.partition(":")
        secrets += [password, unquote(password)]
        shown_rest = f"{user}:{HIDDEN}@{host_part}"
    shown_query = query
    if query:
        for name, value in parse_qsl(query, keep_blank_values=True):
            if name.lower() == "password":
                secrets += [value]
        for raw in re.findall(r"(?i)(?:^|&)password=([^&]*)", query):
            secrets += [raw]
        shown_query = _PASSWORD_PARAMETER.sub(rf"\1{HIDDEN}", query)
    shown = url[:scheme_end] + shown_rest + mark + shown_query
    return StoreAddress("postgresql", url, shown, tuple(s for s in secrets if s))


def parse_address(url: str) -> StoreAddress:
    """The store an address names; an unknown scheme is refused (its URL shown redacted)."""
    url = url.strip()
    if not url:
        raise StoreError("history store '': empty address (use sqlite:///PATH, a file path or postgresql://...)")
    match = _SCHEME.match(url)
    if not match:
        return StoreAddress("sqlite", url, url)
    scheme = match["scheme"].lower()
    if scheme in _POSTGRES:
        return _postgres_address(url)
    if scheme == "sqlite":
        path = url[match.end() :]
        if not path.startswith("/") or len(path) < 2:
            raise StoreError(
                f"history store {redact(url)}: an SQLite address is sqlite:///PATH (relative) or "
                "sqlite:////PATH (absolute)"
            )
        return StoreAddress("sqlite", path[1:], url)
    raise StoreError(
        f"history store {redact(url)}: unknown kind of store {match['scheme']!r} (use sqlite:///PATH, "
        "a file path or postgresql://USER@HOST/DB)"
    )


def chosen_address(given: str | None, csv_named: bool = False) -> str | None:
    """The store a command uses: --store, else (when no CSV history folder is named on the command
    line) $DDPBENCH_HISTORY, else the default file where it exists; None: the CSV folder path."""
    if given is not None:
        return given
    if csv_named:
        return None
    if os.environ.get(STORE_VARIABLE):
        return os.environ[STORE_VARIABLE]
    return DEFAULT_STORE if os.path.exists(DEFAULT_STORE) else None
