"""Deprecated: the first release's path of the workload interface. Use `from ddpbench import Workload`."""

import warnings

from ddpbench.worker.workload import Workload, default_optimizer  # noqa: F401  (re-exported)

warnings.warn(
    "`ddpbench.workload` is deprecated: import the workload interface as `from ddpbench import "
    "Workload, SyntheticDataset`",
    DeprecationWarning,
    stacklevel=2,
)
