"""Residual networks with bottleneck blocks (He et al., CVPR 2016), Fathom's ``residual``.

Full size is the standard ResNet-50: a 7 x 7 stem, stages of 3, 4, 6, 3 bottleneck blocks
(1 x 1 reduce, 3 x 3, 1 x 1 expand by 4) of widths 64-512, batch normalisation, 25.6 M
parameters.  Fathom's own network is a 34-layer bottleneck variant; ResNet-50 is the reference a
reader can check.  Tiny keeps the same block on 32 x 32 images: a 3 x 3 stem and two stages of one
block each, widths 16 and 32.  SGD with momentum 0.9, learning rate 0.1 and weight decay 1e-4, as
in the paper.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from reference_workloads.models._synthetic import ImageClassifierWorkload
from reference_workloads.registry import WorkloadSpec, register

EXPANSION = 4  # a bottleneck's output has 4 x its inner width


@dataclass(frozen=True)
class ResNetConfig:
    stem_channels: int
    stem_kernel: int
    stem_stride: int
    stem_pool: bool
    widths: tuple[int, ...]
    blocks: tuple[int, ...]
    classes: int
    image_px: int
    batch: int
    learning_rate: float
    momentum: float = 0.9
    weight_decay: float = 1e-4


FULL = ResNetConfig(stem_channels=64, stem_kernel=7, stem_stride=2, stem_pool=True,
                    widths=(64, 128, 256, 512), blocks=(3, 4, 6, 3), classes=1000,
                    image_px=224, batch=64, learning_rate=0.1)
TINY = ResNetConfig(stem_channels=16, stem_kernel=3, stem_stride=1, stem_pool=False,
                    widths=(16, 32), blocks=(1, 1), classes=10,
                    image_px=32, batch=8, learning_rate=0.1)
CONFIGS = {"tiny": TINY, "full": FULL}


def conv_bn(in_channels: int, out_channels: int, kernel: int, stride: int = 1) -> nn.Sequential:
    """Convolution (no bias: batch norm's shift replaces it) followed by batch norm."""
    return nn.Sequential(
        nn.Conv2d(in_channels, out_channels, kernel, stride=stride, padding=kernel // 2, bias=False),
        nn.BatchNorm2d(out_channels),
    )


class Bottleneck(nn.Module):
    """1 x 1 reduce, 3 x 3 (carrying the stride), 1 x 1 expand, plus a projection shortcut when the
    shape changes (He et al. option B)."""

    def __init__(self, in_channels: int, width: int, stride: int) -> None:
        super().__init__()
        out_channels = width * EXPANSION
        self.reduce = conv_bn(in_channels, width, 1)
        self.spatial = conv_bn(width, width, 3, stride)
        self.expand = conv_bn(width, out_channels, 1)
        needs_projection = stride != 1 or in_channels != out_channels
        self.shortcut = conv_bn(in_channels, out_channels, 1, stride) if needs_projection else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.reduce(x), inplace=True)
        out = F.relu(self.spatial(out), inplace=True)
        return F.relu(self.expand(out) + self.shortcut(x), inplace=True)


def stages(cfg: ResNetConfig) -> tuple[nn.Sequential, int]:
    """All bottleneck stages; every stage after the first halves the resolution."""
    blocks: list[nn.Module] = []
    channels = cfg.stem_channels
    for stage, (width, count) in enumerate(zip(cfg.widths, cfg.blocks)):
        for index in range(count):
            stride = 2 if stage > 0 and index == 0 else 1
            blocks.append(Bottleneck(channels, width, stride))
            channels = width * EXPANSION
    return nn.Sequential(*blocks), channels


class ResNet(nn.Module):
    def __init__(self, cfg: ResNetConfig) -> None:
        super().__init__()
        stem: list[nn.Module] = [conv_bn(3, cfg.stem_channels, cfg.stem_kernel, cfg.stem_stride), nn.ReLU(inplace=True)]
        if cfg.stem_pool:
            stem.append(nn.MaxPool2d(kernel_size=3, stride=2, padding=1))
        self.stem = nn.Sequential(*stem)
        self.stages, channels = stages(cfg)
        self.fc = nn.Linear(channels, cfg.classes)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        features = self.stages(self.stem(images))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(features, 1), 1))


@register
class ResidualWorkload(ImageClassifierWorkload):
    # A CNN, convolution-dominated, but batch norm, the residual additions and ReLUs are
    # bandwidth-bound element-wise passes over large activations: a little less compute-bound
    # than AlexNet or VGG.
    spec = WorkloadSpec(
        name="residual",
        description="ResNet-50 with bottlenecks, He et al. CVPR 2016 (Fathom residual), ImageNet classification",
        compute_bound=0.85,
        fathom_batch=16,
    )
    configs = CONFIGS

    @classmethod
    def make_model(cls, size: str) -> nn.Module:
        return ResNet(CONFIGS[size])

    def make_optimizer(self) -> torch.optim.Optimizer:
        cfg = self.config
        return torch.optim.SGD(self.model.parameters(), lr=cfg.learning_rate, momentum=cfg.momentum,
                               weight_decay=cfg.weight_decay)
