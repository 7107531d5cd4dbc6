"""Deprecated: the first release's path of the synthetic datasets. Use `from ddpbench import SyntheticDataset`."""

import warnings

from ddpbench.worker.data import SyntheticDataset, random_images  # noqa: F401  (re-exported)

warnings.warn(
    "`ddpbench.data` is deprecated: import the workload interface as `from ddpbench import "
    "Workload, SyntheticDataset`",
    DeprecationWarning,
    stacklevel=2,
)
