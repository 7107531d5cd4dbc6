"""The package layout is the architecture: these tests keep it honest.

Layers, from the bottom: records, config -> analysis -> gate, report, running -> worker -> cli.
Torch is imported by the worker (and the workloads) only: analysis, gate and report must run on a
laptop without it, and config and running must start fast.
"""

from __future__ import annotations

import ast
import functools
import os

import pytest
from conftest import REPO

PACKAGE = os.path.join(REPO, "ddpbench")

# Packages whose modules may never import torch, not even inside a function.
NO_TORCH_ANYWHERE = (
    "ddpbench.analysis",
    "ddpbench.gate",
    "ddpbench.report",
    "ddpbench.records",
    "ddpbench.config",
    "ddpbench.history",
)
# Packages that must not import torch when they are imported (a lazy import in a function that only
# runs on a GPU machine is allowed: `visible_gpu_count` asks torch only when a driver is present).
NO_TORCH_AT_IMPORT = ("ddpbench.running", "ddpbench.cli", "ddpbench.commands")


def module_name(path: str) -> str:
    relative = os.path.relpath(path, REPO)[:-3].replace(os.sep, ".")
    return relative[: -len(".__init__")] if relative.endswith(".__init__") else relative


def package_modules() -> dict[str, str]:
    found = {}
    for folder, _, files in os.walk(PACKAGE):
        for name in files:
            if name.endswith(".py"):
                path = os.path.join(folder, name)
                found[module_name(path)] = path
    return found


def imports_of(path: str, top_level_only: bool) -> set[str]:
    """Modules a file imports: `import a.b` -> a.b; `from a.b import c` -> a.b and a.b.c."""
    tree = ast.parse(open(path, encoding="utf-8").read(), filename=path)
    nodes = tree.body if top_level_only else list(ast.walk(tree))
    names = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


@functools.cache
def internal_graph(top_level_only: bool) -> dict[str, set[str]]:
    modules = package_modules()
    return {
        name: {dep for dep in imports_of(path, top_level_only) if dep in modules and dep != name}
        for name, path in modules.items()
    }


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}  # 1 = on the current path, 2 = done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for dep in sorted(graph.get(node, ())):
            if state.get(dep) == 1:
                return path[path.index(dep) :] + [dep]
            if dep not in state and (cycle := visit(dep)):
                return cycle
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def test_no_import_cycles_between_modules():
    # Lazy imports inside functions count too: a cycle there is still a tangle.
    assert find_cycle(internal_graph(top_level_only=False)) is None


def torch_imports(path: str, top_level_only: bool) -> set[str]:
    return {
        name
        for name in imports_of(path, top_level_only)
        if name == "torch" or name.startswith(("torch.", "torchvision"))
    }


@pytest.mark.parametrize("package", NO_TORCH_ANYWHERE)
def test_analysis_gate_report_records_and_config_never_import_torch(package):
    offenders = {
        name: sorted(torch_imports(path, top_level_only=False))
        for name, path in package_modules().items()
        if (name == package or name.startswith(package + ".")) and torch_imports(path, False)
    }
    assert offenders == {}


@pytest.mark.parametrize("package", NO_TORCH_AT_IMPORT)
def test_running_and_cli_do_not_import_torch_at_import_time(package):
    offenders = {
        name: sorted(torch_imports(path, top_level_only=True))
        for name, path in package_modules().items()
        if (name == package or name.startswith(package + ".")) and torch_imports(path, True)
    }
    assert offenders == {}


def test_only_the_worker_reaches_torch_through_its_imports():
    """Transitively: importing any module outside ddpbench.worker never pulls torch in, because
    nothing outside the worker imports the worker at module level."""
    graph = internal_graph(top_level_only=True)
    # The first release's import paths of the workload interface: only workload files, which train
    # with torch anyway, import them.
    shims = {"ddpbench.workload", "ddpbench.data"}
    outside = [name for name in graph if not name.startswith("ddpbench.worker") and name not in shims]
    for name in outside:
        assert not any(dep.startswith("ddpbench.worker") for dep in graph[name]), name


def test_the_cycle_finder_finds_a_cycle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_the_launcher_and_the_worker_never_import_each_other():
    """`running` starts processes and `worker` is the process: what both need (host facts, machine
    load, the names they talk through) lives below both, in `host` and `config`. Lazy imports count:
    the launcher asks the worker's side in a process of its own."""
    graph = internal_graph(top_level_only=False)
    crossings = sorted(
        f"{module} -> {dep}"
        for module, deps in graph.items()
        for dep in deps
        if (module.startswith("ddpbench.worker") and dep.startswith("ddpbench.running"))
        or (module.startswith("ddpbench.running") and dep.startswith("ddpbench.worker"))
    )
    assert crossings == []


def test_the_command_line_starts_without_scipy_or_the_ab_runner():
    """Every command's parser is built at start-up: what one command needs late (scipy, the A/B
    runner) must not be imported by all of them (it cost `ddpbench table` 0.6 s)."""
    import subprocess
    import sys

    code = "import sys, ddpbench.cli; print(sorted(m for m in ('scipy', 'ddpbench.gate.ab') if m in sys.modules))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]", done.stdout


BELOW_THE_COMMANDS = ("ddpbench.records", "ddpbench.config", "ddpbench.host", "ddpbench.analysis", "ddpbench.gate")


@pytest.mark.parametrize(
    "module",
    sorted(name for name in package_modules() if name.startswith(BELOW_THE_COMMANDS)),
)
def test_no_layer_below_the_commands_reaches_up_into_them(module):
    """The gate learnt what a configuration is from the command line: the reproduce command read
    sweep's parser (`commands.sweep`), the CI wrapper the whole command line's (`cli`). What defines
    a configuration is declared in `config`, where the commands, the reproduce command and the CI
    wrapper read it. Lazy imports count."""
    graph = internal_graph(top_level_only=False)
    upward = sorted(dep for dep in graph[module] if dep.startswith(("ddpbench.commands", "ddpbench.cli")))
    assert upward == []
