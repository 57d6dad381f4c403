"""Seeded synthetic data with the real data sets' shapes, and enough structure to learn from.

Fathom's data sets (ImageNet, MNIST, bAbI, WMT15, TIMIT, Atari) cannot be downloaded here, so each
workload trains on one fixed batch drawn from these generators.  Class-conditional prototypes plus
noise give the loss something to fall towards within a few dozen steps; everything is drawn from an
explicit ``torch.Generator`` on the CPU, once per workload, so data generation never shows up in a
step's time.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import torch
import torch.nn.functional as F

from reference_workloads.registry import Batch, Workload

#: Side of the coarse grid that class prototypes are drawn on before being upsampled: smooth,
#: image-like patterns rather than white noise.
PROTOTYPE_GRID_PX = 4


def prototype_images(batch: int, classes: int, channels: int, image_px: int,
                     generator: torch.Generator, noise_std: float = 0.5) -> tuple[torch.Tensor, torch.Tensor]:
    """Images (NCHW, float32) of ``batch`` labelled examples: a smooth class prototype plus noise."""
    labels = torch.randint(classes, (batch,), generator=generator)
    coarse = torch.randn(classes, channels, PROTOTYPE_GRID_PX, PROTOTYPE_GRID_PX, generator=generator)
    # Upsample only the prototypes in use: 1000 full-resolution ImageNet prototypes would be 600 MB.
    images = F.interpolate(coarse[labels], size=(image_px, image_px), mode="bilinear", align_corners=False)
    images = images + noise_std * torch.randn(batch, channels, image_px, image_px, generator=generator)
    return images, labels


def token_ids(shape: tuple[int, ...], vocab: int, generator: torch.Generator, first_id: int = 1) -> torch.Tensor:
    """Uniform token ids in ``[first_id, vocab)`` (ids below ``first_id`` are reserved: padding etc.)."""
    return torch.randint(first_id, vocab, shape, generator=generator)


def label_sequences(batch: int, length: int, classes: int, generator: torch.Generator) -> torch.Tensor:
    """Label ids in ``[1, classes)`` with no two neighbours equal (0 is CTC's blank)."""
    first = torch.randint(1, classes, (batch, 1), generator=generator)
    # Each label moves on by 1..classes-2 places in the cycle 1..classes-1, so never repeats.
    steps = torch.randint(1, max(classes - 1, 2), (batch, length - 1), generator=generator)
    offsets = torch.cat([torch.zeros(batch, 1, dtype=torch.long), steps.cumsum(dim=1)], dim=1)
    return (first - 1 + offsets) % (classes - 1) + 1


class ImageClassifierWorkload(Workload):
    """The CNNs' shared hooks (alexnet, vgg, residual): class-prototype images, cross-entropy, Adam.

    A subclass sets ``configs`` (size -> config with ``batch``, ``classes``, ``image_px`` and
    ``learning_rate``) and ``make_model``; residual replaces the optimiser (SGD, as its paper).
    """

    configs: ClassVar[Mapping[str, Any]]

    @property
    def config(self) -> Any:
        return self.configs[self.size]

    def make_batch(self, generator: torch.Generator) -> Batch:
        cfg = self.config
        return prototype_images(cfg.batch, cfg.classes, 3, cfg.image_px, generator)

    def make_optimizer(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.model.parameters(), lr=self.config.learning_rate)

    def compute_loss(self, batch: Batch) -> torch.Tensor:
        images, labels = batch
        return F.cross_entropy(self.model(images), labels)
