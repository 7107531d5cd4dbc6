"""ddpbench: benchmark PyTorch DistributedDataParallel training and how it scales.

The workload interface, the one public path for users' workload files:

    from ddpbench import Workload, SyntheticDataset

For notebooks: `ddpbench.load(sweep_dir)` returns a sweep's records as a pandas DataFrame.
`import ddpbench` itself never imports torch: the names above load it when first used.
"""

__version__ = "0.1.0"

# Public name -> the module that defines it, imported on first use (PEP 562).
_LAZY = {
    "Workload": "ddpbench.worker.workload",
    "default_optimizer": "ddpbench.worker.workload",
    "SyntheticDataset": "ddpbench.worker.data",
    "random_images": "ddpbench.worker.data",
}
__all__ = ["load", *_LAZY]


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'ddpbench' has no attribute {name!r}")


def load(sweep_dir: str):
    """One row per run record in `sweep_dir` (see ddpbench.analysis.frames.load)."""
    from ddpbench.analysis.frames import load as load_records

    return load_records(sweep_dir)
