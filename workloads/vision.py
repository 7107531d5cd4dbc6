"""Image classification: torchvision's ResNet-50 and ViT-B/16.

`full` is the real architecture at 224x224 with 1000 classes. `tiny` keeps each model's family
(bottleneck ResNet, patch-embedding transformer) but shrinks depth, width and image size so a
step takes well under a second on one CPU core.
"""

from __future__ import annotations

import torch.nn.functional as F
from torchvision.models import ResNet, VisionTransformer
from torchvision.models import resnet50 as tv_resnet50
from torchvision.models.resnet import Bottleneck

from ddpbench.worker.data import image_folder, random_images
from ddpbench.worker.workload import Workload


def _image_workload(
    model, size: str, data_dir: str | None, image_size: int, num_classes: int, batch_size: int, shard_units
) -> Workload:
    def make_dataset(length: int):
        if data_dir:
            return image_folder(data_dir, image_size)
        return random_images(length, image_size, num_classes)

    return Workload(
        model=model,
        make_dataset=make_dataset,
        loss=F.cross_entropy,
        batch_size=batch_size,
        sample_unit="images",
        shard_units=shard_units,
    )


def resnet_stages(model) -> list:
    """FSDP2 units of a ResNet: its four stages (the stem and the classifier stay with the root)."""
    return [model.layer1, model.layer2, model.layer3, model.layer4]


def vit_encoder_layers(model) -> list:
    """FSDP2 units of a ViT: its encoder layers (patch embedding and head stay with the root)."""
    return list(model.encoder.layers)


def resnet50(size: str, data_dir: str | None = None) -> Workload:
    if size == "full":
        return _image_workload(tv_resnet50(weights=None), size, data_dir, 224, 1000, 64, resnet_stages)
    # One bottleneck block per stage instead of (3, 4, 6, 3), on 32x32 images.
    model = ResNet(Bottleneck, [1, 1, 1, 1], num_classes=10)
    return _image_workload(model, size, data_dir, 32, 10, 8, resnet_stages)


def vit_b_16(size: str, data_dir: str | None = None) -> Workload:
    if size == "full":
        model = VisionTransformer(
            image_size=224, patch_size=16, num_layers=12, num_heads=12, hidden_dim=768, mlp_dim=3072, num_classes=1000
        )
        return _image_workload(model, size, data_dir, 224, 1000, 64, vit_encoder_layers)
    model = VisionTransformer(
        image_size=32, patch_size=8, num_layers=2, num_heads=4, hidden_dim=128, mlp_dim=256, num_classes=10
    )
    return _image_workload(model, size, data_dir, 32, 10, 8, vit_encoder_layers)
