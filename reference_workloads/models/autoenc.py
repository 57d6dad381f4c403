"""Variational autoencoder (Kingma & Welling, ICLR 2014), Fathom's ``autoenc``.

As in Fathom: MNIST-sized 784-vectors, linear maps to the 200-dimensional latent mean and log
variance, a sampled latent by the reparameterisation trick, a linear decoder back to 784, and the
loss 0.5 x squared reconstruction error plus the KL divergence to N(0, I), both summed over the
vector and averaged over the batch.  Adam at 1e-3.  In inference the latent is its mean (no noise).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from reference_workloads.models._synthetic import prototype_images
from reference_workloads.registry import Batch, Workload, WorkloadSpec, register

MNIST_SIDE_PX = 28
DIGIT_CLASSES = 10


@dataclass(frozen=True)
class VAEConfig:
    input_dim: int
    latent_dim: int
    batch: int
    learning_rate: float


FULL = VAEConfig(input_dim=MNIST_SIDE_PX ** 2, latent_dim=200, batch=128, learning_rate=1e-3)
TINY = VAEConfig(input_dim=MNIST_SIDE_PX ** 2, latent_dim=200, batch=32, learning_rate=1e-3)
CONFIGS = {"tiny": TINY, "full": FULL}


class VAE(nn.Module):
    def __init__(self, cfg: VAEConfig) -> None:
        super().__init__()
        self.to_mean = nn.Linear(cfg.input_dim, cfg.latent_dim)
        self.to_log_var = nn.Linear(cfg.input_dim, cfg.latent_dim)
        self.decoder = nn.Linear(cfg.latent_dim, cfg.input_dim)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Reconstruction, latent mean and latent log variance."""
        mean, log_var = self.to_mean(x), self.to_log_var(x)
        if self.training:
            z = mean + torch.exp(0.5 * log_var) * torch.randn_like(mean)
        else:
            z = mean
        return self.decoder(z), mean, log_var


def vae_loss(x: torch.Tensor, reconstruction: torch.Tensor, mean: torch.Tensor, log_var: torch.Tensor) -> torch.Tensor:
    """Gaussian reconstruction term plus KL(q(z|x) || N(0, I)), per example, averaged."""
    reconstruction_error = 0.5 * (reconstruction - x).pow(2).sum(dim=1)
    kl = -0.5 * (1 + log_var - mean.pow(2) - log_var.exp()).sum(dim=1)
    return (reconstruction_error + kl).mean()


def synthetic_digits(batch: int, generator: torch.Generator) -> torch.Tensor:
    """Flattened 28 x 28 digit-like images, standardised per pixel as Fathom scales MNIST."""
    images, _ = prototype_images(batch, DIGIT_CLASSES, 1, MNIST_SIDE_PX, generator, noise_std=0.3)
    flat = images.flatten(1)
    return (flat - flat.mean(dim=0)) / (flat.std(dim=0) + 1e-6)


@register
class AutoencWorkload(Workload):
    # Three small GEMMs (784 x 200) per step: too little work per kernel to fill the SMs, so
    # launch overhead and reading weights and activations dominate, not arithmetic.
    spec = WorkloadSpec(
        name="autoenc",
        description="variational autoencoder 784-200-784, Kingma & Welling ICLR 2014 (Fathom autoenc), MNIST",
        compute_bound=0.5,
        fathom_batch=128,
    )
    stochastic_train_step = True  # the reparameterisation noise

    @classmethod
    def make_model(cls, size: str) -> nn.Module:
        return VAE(CONFIGS[size])

    def make_batch(self, generator: torch.Generator) -> Batch:
        x = synthetic_digits(CONFIGS[self.size].batch, generator)
        return x, x  # an autoencoder's target is its input

    def make_optimizer(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.model.parameters(), lr=CONFIGS[self.size].learning_rate)

    def compute_loss(self, batch: Batch) -> torch.Tensor:
        x, target = batch
        reconstruction, mean, log_var = self.model(x)
        return vae_loss(target, reconstruction, mean, log_var)
