"""The workload interface and the registry that finds built-in and user workloads.

A workload factory is a function `factory(size: str, data_dir: str | None) -> Workload`.
Built-ins live in the top-level `workloads` package; a user's own file plugs in with
`--workload path/to/file.py:factory` and goes through exactly the same code.

Finding and checking a name needs no torch (the command line validates before launching);
only `build_workload`, called inside the worker, imports the factory and so torch.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import os
from dataclasses import dataclass, field
from typing import Any, Callable

from ddpbench.spec import SpecError

# name -> "module:factory". Kept as strings so listing and checking names imports nothing heavy.
BUILTIN_WORKLOADS: dict[str, str] = {
    "resnet50": "workloads.vision:resnet50",
    "vit_b_16": "workloads.vision:vit_b_16",
    "gpt2": "workloads.gpt:gpt2",
    "mlp": "workloads.mlp:mlp",
}


def default_optimizer(params: Any) -> Any:
    import torch

    return torch.optim.SGD(params, lr=0.01, momentum=0.9)


@dataclass
class Workload:
    """What a run trains: a model, a dataset, a loss, and how to count its samples."""

    model: Any
    """A torch.nn.Module, built on the CPU; the worker moves it to the device."""
    make_dataset: Callable[[int], Any]
    """length -> map-style Dataset of (input, target). A real dataset may ignore the length."""
    loss: Callable[[Any, Any], Any]
    """(model output, target) -> scalar loss tensor."""
    batch_size: int
    """Default samples per device per step for this size."""
    sample_unit: str = "samples"
    """What throughput counts, in the user's words: images, tokens, samples."""
    units_per_sample: int = 1
    """Units in one dataset sample (tokens per sequence; 1 for an image)."""
    make_optimizer: Callable[[Any], Any] = field(default=default_optimizer)
    """parameters -> optimizer. Default: SGD with momentum."""


def is_user_workload(name: str) -> bool:
    path, sep, _ = name.rpartition(":")
    return bool(sep) and path.endswith(".py")


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
        defined = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
        defined |= {t.id for n in tree.body if isinstance(n, ast.Assign) for t in n.targets
                    if isinstance(t, ast.Name)}
        if factory not in defined:
            choices = ", ".join(sorted(defined)) or "nothing at top level"
            raise SpecError(f"workload file {path!r} defines no {factory!r} (it defines: {choices})")
        return
    if name not in BUILTIN_WORKLOADS:
        raise SpecError(
            f"unknown workload {name!r}; valid: {', '.join(sorted(BUILTIN_WORKLOADS))}, "
            "or path/to/file.py:factory"
        )


def _load_factory(name: str) -> Callable[..., Workload]:
    if is_user_workload(name):
        path, _, attr = name.rpartition(":")
        module_name = "ddpbench_user_" + os.path.splitext(os.path.basename(path))[0]
        module_spec = importlib.util.spec_from_file_location(module_name, path)
        module = importlib.util.module_from_spec(module_spec)
        module_spec.loader.exec_module(module)
    else:
        module_path, _, attr = BUILTIN_WORKLOADS[name].partition(":")
        module = importlib.import_module(module_path)
    return getattr(module, attr)


def build_workload(name: str, size: str, data_dir: str | None) -> Workload:
    check_workload_name(name)
    workload = _load_factory(name)(size, data_dir)
    if not isinstance(workload, Workload):
        raise TypeError(f"workload factory {name!r} returned {type(workload).__name__}, not Workload")
    return workload
