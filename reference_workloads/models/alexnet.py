"""AlexNet (Krizhevsky, Sutskever, Hinton, NIPS 2012), as Fathom's ``alexnet`` runs it.

Single-tower layout with 64, 192, 384, 256, 256 filters (the one-GPU variant of the paper's
two-tower net, about 61.1 M parameters), local response normalisation after the first two
convolutions, dropout 0.5 before the fully connected layers, and Adam at 1e-3 as in Fathom.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from reference_workloads.models._synthetic import ImageClassifierWorkload
from reference_workloads.registry import WorkloadSpec, register

# Krizhevsky et al. section 3.3: k = 2, n = 5, alpha = 1e-4, beta = 0.75.
LRN_SIZE, LRN_ALPHA, LRN_BETA, LRN_K = 5, 1e-4, 0.75, 2.0
DROPOUT_P = 0.5


@dataclass(frozen=True)
class AlexNetConfig:
    conv_channels: tuple[int, int, int, int, int]
    fc_units: int
    classes: int
    image_px: int
    batch: int
    learning_rate: float


FULL = AlexNetConfig(conv_channels=(64, 192, 384, 256, 256), fc_units=4096, classes=1000,
                     image_px=224, batch=64, learning_rate=1e-3)
# The tiny size: widths / 4, FC 256, 10 classes, 64 x 64 px, batch 8.
TINY = AlexNetConfig(conv_channels=(16, 48, 96, 64, 64), fc_units=256, classes=10,
                     image_px=64, batch=8, learning_rate=1e-3)
CONFIGS = {"tiny": TINY, "full": FULL}


def _pooled_px(px: int) -> int:
    """Side after a 3 x 3, stride 2 max-pool without padding (the paper's overlapping pooling)."""
    return (px - 3) // 2 + 1


def feature_px(image_px: int) -> int:
    """Side of the last feature map: conv1 11/4 pad 2, three pools (224 px -> 6 px)."""
    px = (image_px + 2 * 2 - 11) // 4 + 1
    for _ in range(3):
        px = _pooled_px(px)
    return px


class AlexNet(nn.Module):
    def __init__(self, cfg: AlexNetConfig) -> None:
        super().__init__()
        c1, c2, c3, c4, c5 = cfg.conv_channels
        self.features = nn.Sequential(
            nn.Conv2d(3, c1, kernel_size=11, stride=4, padding=2), nn.ReLU(inplace=True),
            nn.LocalResponseNorm(LRN_SIZE, LRN_ALPHA, LRN_BETA, LRN_K),
            nn.MaxPool2d(kernel_size=3, stride=2),
            nn.Conv2d(c1, c2, kernel_size=5, padding=2), nn.ReLU(inplace=True),
            nn.LocalResponseNorm(LRN_SIZE, LRN_ALPHA, LRN_BETA, LRN_K),
            nn.MaxPool2d(kernel_size=3, stride=2),
            nn.Conv2d(c2, c3, kernel_size=3, padding=1), nn.ReLU(inplace=True),
            nn.Conv2d(c3, c4, kernel_size=3, padding=1), nn.ReLU(inplace=True),
            nn.Conv2d(c4, c5, kernel_size=3, padding=1), nn.ReLU(inplace=True),
            nn.MaxPool2d(kernel_size=3, stride=2),
        )
        side = feature_px(cfg.image_px)
        self.classifier = nn.Sequential(
            nn.Dropout(DROPOUT_P), nn.Linear(c5 * side * side, cfg.fc_units), nn.ReLU(inplace=True),
            nn.Dropout(DROPOUT_P), nn.Linear(cfg.fc_units, cfg.fc_units), nn.ReLU(inplace=True),
            nn.Linear(cfg.fc_units, cfg.classes),
        )

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.classifier(torch.flatten(self.features(images), 1))


@register
class AlexNetWorkload(ImageClassifierWorkload):
    # A CNN: almost all of its time is large convolutions and GEMMs that scale with the SM clock;
    # LRN, pooling and the FC layers' weight traffic are the small memory-bound rest.
    spec = WorkloadSpec(
        name="alexnet",
        description="AlexNet, Krizhevsky et al. NIPS 2012 (Fathom alexnet), ImageNet classification",
        compute_bound=0.9,
        fathom_batch=64,
    )
    stochastic_train_step = True  # dropout
    configs = CONFIGS

    @classmethod
    def make_model(cls, size: str) -> nn.Module:
        return AlexNet(CONFIGS[size])
