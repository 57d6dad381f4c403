"""Deep Q-network (Mnih et al., Nature 2015), Fathom's ``deepq``.

The Nature network: 4 stacked 84 x 84 frames -> conv 32 (8 x 8, stride 4) -> conv 64 (4 x 4,
stride 2) -> conv 64 (3 x 3, stride 1) -> 512 -> one Q-value per action (18, the full Atari
action set).  Training is one minibatch update of the online network on a batch of transitions
(s, a, r, s', done): the TD target r + gamma max_a' Q_target(s', a') comes from a separate target
network, copied from the online one every 10 000 updates, and the loss is Huber (the paper's error
clipping).  RMSprop with the paper's learning rate 2.5e-4, squared-gradient momentum 0.95 and
minimum squared gradient 0.01 (approximated by torch's centred RMSprop, eps 0.01); gamma 0.99.

Inference is what acting costs: Q-values for a batch of states, one forward pass of the online
network; its loss is measured against TD targets computed once at build time (in inference the
target network never changes).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from reference_workloads.registry import Batch, Workload, WorkloadSpec, register

FRAMES_STACKED = 4
ATARI_ACTIONS = 18
PIXEL_MAX = 255.0
TERMINAL_PROBABILITY = 0.05


@dataclass(frozen=True)
class DQNConfig:
    conv_channels: tuple[int, int, int]
    hidden_units: int
    frame_px: int
    actions: int
    batch: int
    learning_rate: float
    gamma: float = 0.99
    rmsprop_alpha: float = 0.95
    rmsprop_eps: float = 0.01
    target_sync_updates: int = 10_000


FULL = DQNConfig(conv_channels=(32, 64, 64), hidden_units=512, frame_px=84, actions=ATARI_ACTIONS,
                 batch=32, learning_rate=2.5e-4)
# Tiny: at the paper's 2.5e-4 the small network's Huber loss falls only 13 % in 40 updates; at
# 1e-3 it falls 86 % (the only change from the paper's settings).
TINY = DQNConfig(conv_channels=(8, 16, 16), hidden_units=64, frame_px=42, actions=ATARI_ACTIONS,
                 batch=8, learning_rate=1e-3)
CONFIGS = {"tiny": TINY, "full": FULL}


class Transitions(NamedTuple):
    """The targets half of a DQN batch (the inputs are the states)."""

    actions: torch.Tensor       # (N,) int64
    rewards: torch.Tensor       # (N,) float32, clipped to [-1, 1] as in the paper
    next_states: torch.Tensor   # (N, 4, H, W) uint8
    terminal: torch.Tensor      # (N,) float32, 1.0 where the episode ended


def conv_out_px(px: int, kernel: int, stride: int) -> int:
    return (px - kernel) // stride + 1


class QNetwork(nn.Module):
    def __init__(self, cfg: DQNConfig) -> None:
        super().__init__()
        c1, c2, c3 = cfg.conv_channels
        self.features = nn.Sequential(
            nn.Conv2d(FRAMES_STACKED, c1, kernel_size=8, stride=4), nn.ReLU(inplace=True),
            nn.Conv2d(c1, c2, kernel_size=4, stride=2), nn.ReLU(inplace=True),
            nn.Conv2d(c2, c3, kernel_size=3, stride=1), nn.ReLU(inplace=True),
        )
        side = conv_out_px(conv_out_px(conv_out_px(cfg.frame_px, 8, 4), 4, 2), 3, 1)  # 84 px -> 7 px
        self.head = nn.Sequential(nn.Linear(c3 * side * side, cfg.hidden_units), nn.ReLU(inplace=True),
                                  nn.Linear(cfg.hidden_units, cfg.actions))

    def forward(self, frames: torch.Tensor) -> torch.Tensor:
        """Q-values (N, actions) of uint8 frame stacks; scaling to [0, 1] is part of the network."""
        x = frames.float() / PIXEL_MAX
        return self.head(torch.flatten(self.features(x), 1))


def synthetic_frames(batch: int, frame_px: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """States and next states: blocky uint8 frames, the next stack being the current one moved on a
    frame (its first three frames are the state's last three), as in a replay memory."""
    coarse_px = max(frame_px // 6, 1)
    frames = torch.rand(batch, FRAMES_STACKED + 1, coarse_px, coarse_px, generator=generator)
    frames = F.interpolate(frames, size=(frame_px, frame_px), mode="nearest")
    frames = (frames * PIXEL_MAX).to(torch.uint8)
    return frames[:, :FRAMES_STACKED].contiguous(), frames[:, 1:].contiguous()


def td_targets(target_network: nn.Module, transitions: Transitions, gamma: float) -> torch.Tensor:
    """r + gamma * max_a' Q_target(s', a'), with no bootstrap past a terminal state."""
    next_q = target_network(transitions.next_states).max(dim=1).values
    return transitions.rewards + gamma * (1.0 - transitions.terminal) * next_q


@register
class DeepQWorkload(Workload):
    # A CNN, but a small one: on 84 x 84 inputs at batch 32 the convolutions are short kernels
    # that do not fill a GPU and its FC layer is weight-bandwidth-bound, so it is less
    # clock-bound than the ImageNet CNNs.
    spec = WorkloadSpec(
        name="deepq",
        description="Nature DQN with target network, Mnih et al. Nature 2015 (Fathom deepq), Atari",
        compute_bound=0.7,
        fathom_batch=32,
    )

    @classmethod
    def make_model(cls, size: str) -> nn.Module:
        return QNetwork(CONFIGS[size])

    def make_batch(self, generator: torch.Generator) -> Batch:
        cfg = CONFIGS[self.size]
        states, next_states = synthetic_frames(cfg.batch, cfg.frame_px, generator)
        transitions = Transitions(
            actions=torch.randint(cfg.actions, (cfg.batch,), generator=generator),
            rewards=torch.randint(-1, 2, (cfg.batch,), generator=generator).float(),
            next_states=next_states,
            terminal=(torch.rand(cfg.batch, generator=generator) < TERMINAL_PROBABILITY).float(),
        )
        return states, transitions

    def make_optimizer(self) -> torch.optim.Optimizer:
        cfg = CONFIGS[self.size]
        return torch.optim.RMSprop(self.model.parameters(), lr=cfg.learning_rate, alpha=cfg.rmsprop_alpha,
                                   eps=cfg.rmsprop_eps, centered=True)

    def setup(self) -> None:
        self.target_network = copy.deepcopy(self.model).eval().requires_grad_(False)
        self._updates = 0
        if self.mode == "infer":
            with torch.no_grad():
                _, transitions = self._batch
                self._fixed_targets = td_targets(self.target_network, transitions, CONFIGS[self.size].gamma)

    def compute_loss(self, batch: Batch) -> torch.Tensor:
        states, transitions = batch
        q_values = self.model(states)
        if self.mode == "infer":
            targets = self._fixed_targets
        else:
            with torch.no_grad():
                targets = td_targets(self.target_network, transitions, CONFIGS[self.size].gamma)
        chosen_q = q_values.gather(1, transitions.actions.unsqueeze(1)).squeeze(1)
        return F.smooth_l1_loss(chosen_q, targets)

    def after_update(self) -> None:
        self._updates += 1
        if self._updates % CONFIGS[self.size].target_sync_updates == 0:
            self.target_network.load_state_dict(self.model.state_dict())
