"""A run of one commit of the user's repository (`ddpbench ab REF REF`, `ddpbench bisect`) imports
the user's code from that commit's tree only. No torch.

The side's tree comes first on the import path, but an editable install of the user's package, a
`.pth` file or a PYTHONPATH set by hand can still point at the user's main checkout; then both
sides of an A/B would run the same code and the comparison would say nothing. So, once the
workload is built (or the script has run), every imported module whose file lies in the main
checkout but not in this side's tree fails the run, naming the module and where it came from.
"""

from __future__ import annotations

import os
import sys

OWN_TREE_ENV = "DDPBENCH_OWN_TREE"
"""The tree of the commit this run measures."""
USER_CHECKOUT_ENV = "DDPBENCH_USER_CHECKOUT"
"""The user's main checkout of the same repository (its worktrees of other commits lie in it too)."""


class ImportedOutsideTreeError(RuntimeError):
    """The user's code was imported from outside the tree of the commit being measured."""


def _inside(path: str, folder: str) -> bool:
    return os.path.commonpath([path, folder]) == folder


INSTALLED = ("site-packages", "dist-packages")


def _installed(path: str, prefixes: list[str]) -> bool:
    """Installed packages: torch in a virtual environment kept inside the checkout (`.venv/`) is
    not the user's code. An editable install's code stays where it was checked out, so it is not
    exempt."""
    return any(_inside(path, prefix) for prefix in prefixes) or any(part in INSTALLED for part in path.split(os.sep))


def modules_outside(tree: str, checkout: str, modules=None) -> list[tuple[str, str]]:
    """(module, file) for each imported module whose file is in `checkout` but not in `tree`,
    installed packages left aside."""
    tree, checkout = os.path.realpath(tree), os.path.realpath(checkout)
    prefixes = sorted({os.path.realpath(p) for p in (sys.prefix, sys.exec_prefix, sys.base_prefix)})
    found = []
    for name, module in list((sys.modules if modules is None else modules).items()):
        path = getattr(module, "__file__", None)
        if not path:
            continue
        real = os.path.realpath(path)
        if _inside(real, checkout) and not _inside(real, tree) and not _installed(real, prefixes):
            found.append((name, real))
    return sorted(found)


def check_own_tree(environ=None) -> None:
    """Raise ImportedOutsideTreeError where the user's modules came from elsewhere; nothing to do for
    a run that is not one side of a comparison of commits."""
    environ = os.environ if environ is None else environ
    tree, checkout = environ.get(OWN_TREE_ENV), environ.get(USER_CHECKOUT_ENV)
    if not tree or not checkout:
        return
    outside = modules_outside(tree, checkout)
    if outside:
        name, path = outside[0]
        more = f" and {len(outside) - 1} more" if len(outside) > 1 else ""
        raise ImportedOutsideTreeError(
            f"module {name!r}{more} was imported from {path}, outside the tree of the commit measured ({tree}): "
            "an editable install or PYTHONPATH points at your checkout; the comparison would run the same code "
            "on both sides"
        )
