"""Deep Speech (Hannun et al., arXiv:1412.5567, 2014), Fathom's ``speech`` on TIMIT.

As in Fathom: 26 MFCC coefficients per frame -> three fully connected layers of 1024 units with
ReLU clipped at 20 -> a bidirectional recurrent layer of 1024 units per direction with ReLU ->
a linear layer to 62 labels (61 TIMIT phones and the CTC blank) -> CTC loss.  Fathom pads
utterances to 1566 frames and 75 labels, batch 32, and trains with plain SGD at 0.01.

One deviation: the recurrence is torch's fused ``nn.RNN`` (ReLU), whose hidden state cannot be
clipped inside the recurrence; the clip is applied to its outputs instead.  A hand-written
per-frame loop would be 2 x 1566 tiny kernel launches per pass and measure Python, not the GPU.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from reference_workloads.models._synthetic import label_sequences
from reference_workloads.registry import Batch, Workload, WorkloadSpec, register

MFCC_COEFFICIENTS = 26
RELU_CLIP = 20.0
BLANK_ID = 0
FEATURE_NOISE_STD = 0.5


@dataclass(frozen=True)
class SpeechConfig:
    hidden_units: int
    frames: int
    labels: int          # output classes, blank included
    max_label_len: int   # longest transcription in the batch
    batch: int
    learning_rate: float


FULL = SpeechConfig(hidden_units=1024, frames=1566, labels=62, max_label_len=75, batch=32, learning_rate=0.01)
# Tiny: "labels 10" read as 10 output classes (9 labels and the blank), transcriptions of up to 8.
TINY = SpeechConfig(hidden_units=32, frames=50, labels=10, max_label_len=8, batch=4, learning_rate=0.01)
CONFIGS = {"tiny": TINY, "full": FULL}


def clipped_relu(x: torch.Tensor) -> torch.Tensor:
    """min(max(x, 0), 20), Deep Speech's activation."""
    return torch.clamp(x, min=0.0, max=RELU_CLIP)


class DeepSpeech(nn.Module):
    def __init__(self, cfg: SpeechConfig) -> None:
        super().__init__()
        hidden = cfg.hidden_units
        self.dense = nn.ModuleList([nn.Linear(MFCC_COEFFICIENTS, hidden), nn.Linear(hidden, hidden),
                                    nn.Linear(hidden, hidden)])
        self.recurrent = nn.RNN(hidden, hidden, nonlinearity="relu", batch_first=True, bidirectional=True)
        self.output = nn.Linear(2 * hidden, cfg.labels)

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        """Log-probabilities (T, N, labels), the layout CTC expects, of features (N, T, 26)."""
        x = features
        for layer in self.dense:
            x = clipped_relu(layer(x))
        x, _ = self.recurrent(x)
        logits = self.output(clipped_relu(x))
        return F.log_softmax(logits, dim=-1).transpose(0, 1)


def synthetic_utterances(cfg: SpeechConfig,
                         generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Features (N, T, 26), padded labels (N, L) and label lengths (N,).

    Each utterance's frames are split evenly among its labels, each label having its own MFCC
    prototype plus noise, so the frame-to-label alignment CTC has to find exists."""
    lengths = torch.randint(cfg.max_label_len * 3 // 4, cfg.max_label_len + 1, (cfg.batch,), generator=generator)
    labels = label_sequences(cfg.batch, cfg.max_label_len, cfg.labels, generator)
    labels = labels.masked_fill(torch.arange(cfg.max_label_len) >= lengths.unsqueeze(1), BLANK_ID)
    prototypes = torch.randn(cfg.labels, MFCC_COEFFICIENTS, generator=generator)
    label_of_frame = labels.gather(1, torch.arange(cfg.frames).unsqueeze(0) * lengths.unsqueeze(1) // cfg.frames)
    features = prototypes[label_of_frame]
    features = features + FEATURE_NOISE_STD * torch.randn(features.shape, generator=generator)
    return features, labels, lengths


@register
class SpeechWorkload(Workload):
    # Mixed: the three dense layers are large GEMMs over every frame (compute-bound), but the
    # bidirectional recurrence is 2 x T dependent small GEMMs that re-read 1024 x 1024 weights
    # (memory- and latency-bound), and CTC is a sequential dynamic programme.
    spec = WorkloadSpec(
        name="speech",
        description="Deep Speech, 3 FC + bidirectional RNN + CTC, Hannun et al. 2014 (Fathom speech), TIMIT",
        compute_bound=0.45,
        fathom_batch=32,
    )

    @classmethod
    def make_model(cls, size: str) -> nn.Module:
        return DeepSpeech(CONFIGS[size])

    def make_batch(self, generator: torch.Generator) -> Batch:
        cfg = CONFIGS[self.size]
        features, labels, label_lengths = synthetic_utterances(cfg, generator)
        frame_counts = torch.full((cfg.batch,), cfg.frames, dtype=torch.long)
        return features, (labels, frame_counts, label_lengths)

    def make_optimizer(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.model.parameters(), lr=CONFIGS[self.size].learning_rate)

    def compute_loss(self, batch: Batch) -> torch.Tensor:
        features, (labels, frame_counts, label_lengths) = batch
        log_probs = self.model(features)
        return F.ctc_loss(log_probs, labels, frame_counts, label_lengths, blank=BLANK_ID, zero_infinity=True)
