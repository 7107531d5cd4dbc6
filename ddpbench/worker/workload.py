"""The workload interface, and building a workload from its name inside the worker.

A workload factory is a function `factory(size: str, data_dir: str | None) -> Workload`.
Built-ins live in the top-level `workloads` package; a user's own file plugs in with
`--workload path/to/file.py:factory` and goes through exactly the same code. Names are checked
(without importing anything) in `ddpbench.config.workloads`.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ddpbench.config.workloads import BUILTIN_WORKLOADS, check_workload_name, is_user_workload


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
    shard_units: Callable[[Any], Any] | None = None
    """model -> the modules FSDP2 shards one by one (transformer blocks, encoder layers, stages),
    before the root. None: every top-level child that has parameters."""


def _load_factory(name: str) -> Callable[..., Workload]:
    if is_user_workload(name):
        path, _, attr = name.rpartition(":")
        module_name = "ddpbench_user_" + os.path.splitext(os.path.basename(path))[0]
        module_spec = importlib.util.spec_from_file_location(module_name, path)
        module = importlib.util.module_from_spec(module_spec)
        with warnings.catch_warnings():
            # A user's file on an old import path should hear about it, in the run's log.
            warnings.simplefilter("always", DeprecationWarning)
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
