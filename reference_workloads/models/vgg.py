"""VGG (Simonyan & Zisserman, ICLR 2015), the ``vgg`` workload of Fathom.

Full size is configuration E, VGG-19: 16 3 x 3 convolutions in five max-pooled stages and three
fully connected layers 4096-4096-1000 with dropout 0.5, 143.7 M parameters (Fathom builds a
12-convolution variant; the paper's network is the better-known reference).  Tiny is
configuration A (VGG-11) at an eighth of the width on 32 x 32 images.  Adam at 1e-4 as in Fathom.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from reference_workloads.models._synthetic import ImageClassifierWorkload
from reference_workloads.registry import WorkloadSpec, register

POOL = 0  # marks a 2 x 2 max-pool in a layer plan
DROPOUT_P = 0.5

# Simonyan & Zisserman table 1: configuration A (11 weight layers) and E (19 weight layers).
VGG11_PLAN = (64, POOL, 128, POOL, 256, 256, POOL, 512, 512, POOL, 512, 512, POOL)
VGG19_PLAN = (64, 64, POOL, 128, 128, POOL, 256, 256, 256, 256, POOL,
              512, 512, 512, 512, POOL, 512, 512, 512, 512, POOL)


@dataclass(frozen=True)
class VGGConfig:
    plan: tuple[int, ...]
    width_divisor: int
    fc_units: int
    classes: int
    image_px: int
    batch: int
    learning_rate: float


FULL = VGGConfig(plan=VGG19_PLAN, width_divisor=1, fc_units=4096, classes=1000,
                 image_px=224, batch=8, learning_rate=1e-4)
# Tiny: with Adam at Fathom's 1e-4 the narrow VGG-11 (no batch norm, dropout on 64-unit FC layers)
# hardly moves: its loss falls 1 % in 40 steps; at 1e-3 it falls 28 % (the only change).
TINY = VGGConfig(plan=VGG11_PLAN, width_divisor=8, fc_units=64, classes=10,
                 image_px=32, batch=4, learning_rate=1e-3)
CONFIGS = {"tiny": TINY, "full": FULL}


def conv_stages(plan: tuple[int, ...], width_divisor: int) -> tuple[nn.Sequential, int]:
    """The convolutional trunk of a plan, and its output channels."""
    layers: list[nn.Module] = []
    channels = 3
    for entry in plan:
        if entry == POOL:
            layers.append(nn.MaxPool2d(kernel_size=2, stride=2))
            continue
        width = entry // width_divisor
        layers += [nn.Conv2d(channels, width, kernel_size=3, padding=1), nn.ReLU(inplace=True)]
        channels = width
    return nn.Sequential(*layers), channels


class VGG(nn.Module):
    def __init__(self, cfg: VGGConfig) -> None:
        super().__init__()
        self.features, channels = conv_stages(cfg.plan, cfg.width_divisor)
        side_px = cfg.image_px // 2 ** cfg.plan.count(POOL)  # 224 px -> 7 px
        self.classifier = nn.Sequential(
            nn.Linear(channels * side_px * side_px, cfg.fc_units), nn.ReLU(inplace=True), nn.Dropout(DROPOUT_P),
            nn.Linear(cfg.fc_units, cfg.fc_units), nn.ReLU(inplace=True), nn.Dropout(DROPOUT_P),
            nn.Linear(cfg.fc_units, cfg.classes),
        )

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.classifier(torch.flatten(self.features(images), 1))


@register
class VGGWorkload(ImageClassifierWorkload):
    # The most convolution-heavy CNN of the suite (about 20 GFLOP per 224 px image): runtime is
    # dominated by dense 3 x 3 convolutions that scale with the SM clock.
    spec = WorkloadSpec(
        name="vgg",
        description="VGG-19, Simonyan & Zisserman ICLR 2015 (Fathom vgg), ImageNet classification",
        compute_bound=0.95,
        fathom_batch=8,
    )
    stochastic_train_step = True  # dropout
    configs = CONFIGS

    @classmethod
    def make_model(cls, size: str) -> nn.Module:
        return VGG(CONFIGS[size])
