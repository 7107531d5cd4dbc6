"""The workload interface users' files import: one public path, and the first release's paths
still working with a warning that names it."""

import subprocess
import sys

import pytest
import torch
from conftest import FIXTURES, REPO


def test_import_ddpbench_is_light_and_names_the_interface():
    code = (
        "import sys, ddpbench; assert 'torch' not in sys.modules; "
        "from ddpbench import Workload, SyntheticDataset; "
        "from ddpbench.worker.workload import Workload as W; assert Workload is W; print('ok')"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True)
    assert done.stdout.strip() == "ok", done.stderr


def test_a_first_release_workload_file_still_builds_and_trains_with_a_warning():
    from ddpbench.worker.workload import build_workload

    for old in ("ddpbench.workload", "ddpbench.data"):
        sys.modules.pop(old, None)  # the warning is given once per process, at import
    with pytest.warns(DeprecationWarning, match="from ddpbench import Workload, SyntheticDataset"):
        workload = build_workload(f"{FIXTURES}/first_release_workload.py:regression", "tiny", None)
    inputs, targets = next(iter(torch.utils.data.DataLoader(workload.make_dataset(8), batch_size=4)))
    loss = workload.loss(workload.model(inputs), targets)
    loss.backward()
    assert torch.isfinite(loss) and workload.model.weight.grad is not None
