"""Which git repository a file lies in, and what that repository is wherever it is checked out: what
keys a user's workload file, script or data folder as one file in a clone, a worktree made for
`ab` or `bisect`, or a CI checkout at another path. No torch.

A repository is named by its root commit: the commit its first-parent history starts from, the same
in every full clone and worktree, and unchanged by a merge that brings in another history. A
shallow clone (CI's default checkout, depth 1) does not reach its root: it is named by its `origin`
remote instead, written without scheme, user or password (`github.com/owner/repo`). Outside a
repository, or in one without a commit, a file has no repository: it is keyed by its real path.
"""

from __future__ import annotations

import functools
import os
import re
import subprocess
from dataclasses import dataclass

GIT_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class Repository:
    top: str
    """Its working tree's real path."""
    identity: str
    """Its root commit (40 hex digits), or in a shallow clone its origin remote (`host/owner/repo`)."""


def _git(folder: str, *args: str) -> str | None:
    try:
        done = subprocess.run(
            ["git", "-C", folder, *args], capture_output=True, text=True, timeout=GIT_TIMEOUT_S, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def remote_name(url: str) -> str:
    """A remote's address without its scheme, user, password, port or `.git`: `git@github.com:o/r.git`,
    `https://user:token@github.com/o/r` and `ssh://git@github.com/o/r.git` are all `github.com/o/r`."""
    found = re.sub(r"^[a-z][a-z0-9+.-]*://", "", url.strip(), flags=re.IGNORECASE)
    found = found.rsplit("@", 1)[-1]  # user and password
    host, sep, rest = found.partition("/")
    if ":" in host and not sep:  # scp-like: host:owner/repo
        host, _, rest = host.partition(":")
        sep = "/"
    host = host.split(":", 1)[0]  # a port
    rest = rest.removesuffix("/").removesuffix(".git")
    return f"{host.lower()}{sep}{rest}"


@functools.lru_cache(maxsize=256)
def repository_of(folder: str) -> Repository | None:
    """The repository whose working tree holds `folder` (an existing folder), or None."""
    if not os.path.isdir(folder):
        return None
    found = _git(folder, "rev-parse", "--show-toplevel", "--is-shallow-repository")
    if not found or len(found.splitlines()) != 2:
        return None
    top, shallow = found.splitlines()
    top = os.path.realpath(top)
    if shallow.strip() == "false":
        root = _git(top, "rev-list", "--max-parents=0", "--first-parent", "HEAD")
        return Repository(top, root.splitlines()[0]) if root else None
    url = _git(top, "config", "--get", "remote.origin.url")
    return Repository(top, remote_name(url)) if url else None


def located(path: str, folder: str) -> str:
    """One file's (or folder's) identity, from the folder the path was given in: `git:<repository>:
    <its path inside the repository>` inside a git repository, else its real absolute path."""
    absolute = os.path.realpath(os.path.join(folder, os.path.expanduser(path)))
    parent = absolute if os.path.isdir(absolute) else os.path.dirname(absolute)
    repository = repository_of(parent)
    if repository is not None:
        inside = os.path.relpath(absolute, repository.top)
        if inside != os.pardir and not inside.startswith(os.pardir + os.sep):
            return f"git:{repository.identity}:{inside}"
    return absolute


def shown(key: str) -> str:
    """How an identity is shown: the path inside its repository, or the real path."""
    if key.startswith("git:"):
        return key.split(":", 2)[2] if key.count(":") >= 2 else key
    return key
