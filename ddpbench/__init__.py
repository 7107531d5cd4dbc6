"""ddpbench: benchmark PyTorch DistributedDataParallel training and how it scales.

For notebooks: `ddpbench.load(sweep_dir)` returns a sweep's records as a pandas DataFrame.
"""

__version__ = "0.1.0"


def load(sweep_dir: str):
    """One row per run record in `sweep_dir` (see ddpbench.analysis.frames.load)."""
    from ddpbench.analysis.frames import load as load_records

    return load_records(sweep_dir)
