"""A communication-heavy MLP: many parameters, little compute per parameter.

With a small batch, backward finishes long before the gradients are all-reduced, so this is the
all-reduce-bound case that shows what the interconnect (or gloo) costs.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ddpbench.worker.data import SyntheticDataset
from ddpbench.worker.workload import Workload

SIZES = {
    # size: (width, hidden layers, default batch)
    "full": (4096, 8, 32),  # about 134M parameters: 537 MB of fp32 gradients per step
    "tiny": (1024, 4, 8),  # about 4.2M parameters
}
NUM_CLASSES = 10


class MLP(nn.Sequential):
    """nn.Sequential with a forward of its own. torch.compile traces user code but not torch's own
    modules when they are entered from DDP's forward (which dynamo skips): with nn.Sequential's
    forward, `torch.compile(DDP(model))` would compile nothing. Parameter names are Sequential's."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self:
            x = layer(x)
        return x


def mlp(size: str, data_dir: str | None = None) -> Workload:
    width, layers, batch_size = SIZES[size]
    blocks = []
    for _ in range(layers):
        blocks += [nn.Linear(width, width), nn.ReLU()]
    model = MLP(*blocks, nn.Linear(width, NUM_CLASSES))

    def make_sample(generator: torch.Generator) -> tuple:
        return torch.randn(width, generator=generator), int(torch.randint(NUM_CLASSES, (1,), generator=generator))

    return Workload(
        model=model,
        make_dataset=lambda length: SyntheticDataset(length, make_sample),
        loss=F.cross_entropy,
        batch_size=batch_size,
        sample_unit="samples",
    )
