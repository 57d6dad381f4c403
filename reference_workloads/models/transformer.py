"""Transformer encoder-decoder (Vaswani et al., NIPS 2017), the suite's one non-Fathom workload.

Full size is the paper's base model: d_model 512, 8 heads, 6 encoder and 6 decoder layers, FFN
2048, dropout 0.1, post-layer-norm, sinusoidal positions, one embedding shared by source, target
and the pre-softmax projection (scaled by sqrt(d_model)); here a 32 000-token vocabulary,
sequences of 64 tokens and batch 64.  Adam with beta2 0.98 and eps 1e-9 and label smoothing 0.1,
as in the paper; the learning rate is held at the peak of the paper's warm-up schedule
(d^-0.5 x 4000^-0.5, about 7e-4), because an energy test measures steady-state steps, not a run
from scratch.  Training and inference are teacher-forced; inference is one forward pass.

The synthetic task is reversal: the target is the source read backwards.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from reference_workloads.models._synthetic import token_ids
from reference_workloads.registry import Batch, Workload, WorkloadSpec, register

PAD_ID, BOS_ID = 0, 1
FIRST_WORD_ID = 2
LABEL_SMOOTHING = 0.1
WARMUP_STEPS = 4000


@dataclass(frozen=True)
class TransformerConfig:
    d_model: int
    heads: int
    encoder_layers: int
    decoder_layers: int
    ffn_dim: int
    vocab: int
    seq_len: int
    batch: int
    learning_rate: float
    dropout: float = 0.1


FULL = TransformerConfig(d_model=512, heads=8, encoder_layers=6, decoder_layers=6, ffn_dim=2048,
                         vocab=32_000, seq_len=64, batch=64,
                         learning_rate=512 ** -0.5 * WARMUP_STEPS ** -0.5)
# Tiny: at 7e-4 the 32-wide model's loss falls 22 % in 40 steps; at 3e-3 it falls 54 % (the only
# change from the paper's settings).
TINY = TransformerConfig(d_model=32, heads=2, encoder_layers=1, decoder_layers=1, ffn_dim=64,
                         vocab=64, seq_len=8, batch=8, learning_rate=3e-3)
CONFIGS = {"tiny": TINY, "full": FULL}


def sinusoidal_positions(length: int, d_model: int) -> torch.Tensor:
    """PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(...) (section 3.5)."""
    position = torch.arange(length, dtype=torch.float32).unsqueeze(1)
    inverse_wavelength = torch.exp(torch.arange(0, d_model, 2, dtype=torch.float32) * (-math.log(10_000.0) / d_model))
    table = torch.zeros(length, d_model)
    table[:, 0::2] = torch.sin(position * inverse_wavelength)
    table[:, 1::2] = torch.cos(position * inverse_wavelength)
    return table


class Seq2SeqTransformer(nn.Module):
    def __init__(self, cfg: TransformerConfig) -> None:
        super().__init__()
        self.embedding = nn.Embedding(cfg.vocab, cfg.d_model, padding_idx=PAD_ID)
        nn.init.normal_(self.embedding.weight, mean=0.0, std=cfg.d_model ** -0.5)
        self.register_buffer("positions", sinusoidal_positions(cfg.seq_len, cfg.d_model), persistent=False)
        self.dropout = nn.Dropout(cfg.dropout)
        self.transformer = nn.Transformer(
            d_model=cfg.d_model, nhead=cfg.heads, num_encoder_layers=cfg.encoder_layers,
            num_decoder_layers=cfg.decoder_layers, dim_feedforward=cfg.ffn_dim, dropout=cfg.dropout,
            batch_first=True)
        self.scale = math.sqrt(cfg.d_model)

    def _embed(self, ids: torch.Tensor) -> torch.Tensor:
        return self.dropout(self.embedding(ids) * self.scale + self.positions[: ids.shape[1]])

    def forward(self, source: torch.Tensor, decoder_input: torch.Tensor) -> torch.Tensor:
        """Logits (N, T, vocab); the output projection is the shared embedding matrix."""
        causal_mask = nn.Transformer.generate_square_subsequent_mask(decoder_input.shape[1], device=source.device)
        hidden = self.transformer(self._embed(source), self._embed(decoder_input), tgt_mask=causal_mask,
                                  tgt_is_causal=True)
        return F.linear(hidden, self.embedding.weight)


def reversal_pairs(cfg: TransformerConfig,
                   generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Source ids, decoder inputs (BOS + target[:-1]) and targets (the source reversed)."""
    source = token_ids((cfg.batch, cfg.seq_len), cfg.vocab, generator, first_id=FIRST_WORD_ID)
    target = source.flip(1)
    decoder_input = torch.cat([torch.full((cfg.batch, 1), BOS_ID, dtype=torch.long), target[:, :-1]], dim=1)
    return source, decoder_input, target


@register
class TransformerWorkload(Workload):
    # Dominated by large GEMMs (projections, FFN, the 32k-vocabulary output), which scale with
    # the clock; softmax, layer norm, dropout and residual additions are memory-bound passes.
    spec = WorkloadSpec(
        name="transformer",
        description="Transformer base encoder-decoder, Vaswani et al. NIPS 2017 (not in Fathom), translation",
        compute_bound=0.75,
        fathom_batch=64,
    )
    stochastic_train_step = True  # dropout

    @classmethod
    def make_model(cls, size: str) -> nn.Module:
        return Seq2SeqTransformer(CONFIGS[size])

    def make_batch(self, generator: torch.Generator) -> Batch:
        source, decoder_input, target = reversal_pairs(CONFIGS[self.size], generator)
        return (source, decoder_input), target

    def make_optimizer(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.model.parameters(), lr=CONFIGS[self.size].learning_rate,
                                betas=(0.9, 0.98), eps=1e-9)

    def compute_loss(self, batch: Batch) -> torch.Tensor:
        (source, decoder_input), target = batch
        logits = self.model(source, decoder_input)
        return F.cross_entropy(logits.flatten(0, 1), target.flatten(), ignore_index=PAD_ID,
                               label_smoothing=LABEL_SMOOTHING)
