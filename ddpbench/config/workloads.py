"""Workload names: the built-in registry and `path/to/file.py:factory` for a user's own file.

Finding and checking a name imports nothing heavy (the command line validates before launching);
only `ddpbench.worker.workload.build_workload`, called inside the worker, imports the factory
and so torch. Adding a built-in workload is its module under `workloads/` plus one line here.
"""

from __future__ import annotations

import ast
import os

from ddpbench.config.errors import SpecError

# name -> "module:factory". Kept as strings so listing and checking names imports nothing heavy.
BUILTIN_WORKLOADS: dict[str, str] = {
    "resnet50": "workloads.vision:resnet50",
    "vit_b_16": "workloads.vision:vit_b_16",
    "gpt2": "workloads.gpt:gpt2",
    "mlp": "workloads.mlp:mlp",
}


def is_user_workload(name: str) -> bool:
    path, sep, _ = name.rpartition(":")
    return bool(sep) and path.endswith(".py")


SCRIPT_PREFIX = "script:"


def short_workload_name(workload: str) -> str:
    """How a workload is named in run ids and tables: a user's file by its file's stem and its
    factory (`models.factory`: two files whose factories share a name stay apart), a script by its
    file's stem."""
    if workload.startswith(SCRIPT_PREFIX):
        return os.path.splitext(workload[len(SCRIPT_PREFIX) :])[0]
    if is_user_workload(workload):
        path, _, factory = workload.rpartition(":")
        return f"{os.path.splitext(os.path.basename(path))[0]}.{factory}"
    return workload


def check_names_apart(workloads) -> None:
    """Every workload of a sweep needs a name of its own: its run ids and table rows are named by it."""
    seen: dict[str, str] = {}
    for workload in workloads:
        name = short_workload_name(workload)
        if name in seen and seen[name] != workload:
            raise SpecError(
                f"workloads {seen[name]!r} and {workload!r} would both be named {name!r} in run ids and tables: "
                "rename one of the files or factories"
            )
        seen[name] = workload


def check_script(path: str) -> None:
    """A script must exist and parse as Python; running it is for the ranks. Imports nothing."""
    if not os.path.isfile(path):
        raise SpecError(f"script {path!r} does not exist")
    try:
        ast.parse(open(path, encoding="utf-8").read(), filename=path)
    except (SyntaxError, UnicodeDecodeError) as exc:
        raise SpecError(f"script {path!r} is not valid Python: {exc}") from None


def check_workload_name(name: str) -> None:
    """Fail with a helpful message unless `name` can be built; imports nothing."""
    if is_user_workload(name):
        path, _, factory = name.rpartition(":")
        if not os.path.isfile(path):
            raise SpecError(f"workload file {path!r} does not exist")
        try:
            tree = ast.parse(open(path, encoding="utf-8").read(), filename=path)
        except SyntaxError as exc:
            raise SpecError(f"workload file {path!r} is not valid Python: {exc}") from None
        defined = {n.name for n in tree.body if isinstance(n, ast.FunctionDef | ast.ClassDef)}
        defined |= {t.id for n in tree.body if isinstance(n, ast.Assign) for t in n.targets if isinstance(t, ast.Name)}
        if factory not in defined:
            choices = ", ".join(sorted(defined)) or "nothing at top level"
            raise SpecError(f"workload file {path!r} defines no {factory!r} (it defines: {choices})")
        return
    if name not in BUILTIN_WORKLOADS:
        raise SpecError(
            f"unknown workload {name!r}; valid: {', '.join(sorted(BUILTIN_WORKLOADS))}, " "or path/to/file.py:factory"
        )
