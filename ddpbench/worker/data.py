"""Deterministic synthetic datasets, a real image folder, and the sharded loader.

Synthetic samples are made on the fly from a seed, never downloaded. A small pool of distinct
samples is generated once and indexed modulo its size, so making data never dominates a step of
a tiny model; the sampler still sees (and shards) the full index range.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import torch
from torch.utils.data import DataLoader, Dataset, DistributedSampler, IterableDataset

POOL_SIZE = 64


class SyntheticDataset(Dataset):
    """`length` samples cycling through POOL_SIZE distinct ones made by `make_sample(generator)`."""

    def __init__(self, length: int, make_sample: Callable[[torch.Generator], tuple], seed: int = 0):
        self.length = length
        generator = torch.Generator().manual_seed(seed)
        self.pool = [make_sample(generator) for _ in range(min(POOL_SIZE, length))]

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> tuple:
        return self.pool[index % len(self.pool)]


def random_images(length: int, image_size: int, num_classes: int, seed: int = 0) -> SyntheticDataset:
    def make(generator: torch.Generator) -> tuple:
        image = torch.randn(3, image_size, image_size, generator=generator)
        label = int(torch.randint(num_classes, (1,), generator=generator))
        return image, label

    return SyntheticDataset(length, make, seed)


def image_folder(root: str, image_size: int):
    """A torchvision ImageFolder with the usual resize / crop / normalise."""
    from torchvision import datasets, transforms

    transform = transforms.Compose(
        [
            transforms.Resize(image_size),
            transforms.CenterCrop(image_size),
            transforms.ToTensor(),
            transforms.Normalize(mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225]),
        ]
    )
    return datasets.ImageFolder(root, transform=transform)


class RecordingSampler(DistributedSampler):
    """A DistributedSampler that remembers, for the first two passes the loader makes over it,
    the epoch it was set to and the indices it actually handed out: the shard and reshuffle checks
    look at what training read, not at a recomputation. Passes are kept in order rather than by
    epoch, so a loop that never calls set_epoch shows up as two passes with the same epoch."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.passes: list[tuple[int, list[int]]] = []

    def __iter__(self):
        indices = list(super().__iter__())
        if len(self.passes) < 2:
            self.passes.append((self.epoch, indices))
        return iter(indices)


class NotShardable(TypeError):
    """A dataset DistributedSampler cannot split between ranks."""


def make_loader(
    dataset: Dataset,
    batch_size: int,
    world_size: int,
    rank: int,
    seed: int,
    num_workers: int,
    pin_memory: bool,
    sampler_class: type = DistributedSampler,
) -> tuple[DataLoader, DistributedSampler]:
    """Each rank reads a disjoint shard through DistributedSampler, shuffled per epoch."""
    if isinstance(dataset, IterableDataset):
        # A DataLoader over an IterableDataset ignores samplers: every rank would read all of it,
        # and the shard checks could not see that.
        raise NotShardable(
            f"the workload's dataset is an IterableDataset ({type(dataset).__name__}): DistributedSampler "
            "cannot shard it, so every rank would train on all of it; return a map-style Dataset "
            "(__len__ and __getitem__) from make_dataset"
        )
    sampler = sampler_class(dataset, num_replicas=world_size, rank=rank, shuffle=True, seed=seed, drop_last=False)
    loader = DataLoader(
        dataset,
        batch_size=batch_size,
        sampler=sampler,
        num_workers=num_workers,
        pin_memory=pin_memory,
        drop_last=True,
        persistent_workers=num_workers > 0,
    )
    return loader, sampler


def endless_batches(loader: DataLoader, sampler: DistributedSampler, epochs_seen: list[int]) -> Iterator:
    """Batches forever, calling set_epoch at the start of every epoch so shuffles differ."""
    epoch = 0
    while True:
        sampler.set_epoch(epoch)
        epochs_seen.append(epoch)
        yield from loader
        epoch += 1
