"""End-to-end memory network (Sukhbaatar et al., NIPS 2015), Fathom's ``memnet`` on bAbI.

Three hops with adjacent weight tying (the input embedding of hop k+1 is the output embedding of
hop k, the question embedding is the first input embedding, the answer projection is the last
output embedding), position encoding of the words in a sentence and learned temporal encoding of
the sentences.  Tiny uses Fathom's bAbI shapes (vocabulary about 20, embedding 20, 10 sentences of
7 words, batch 32); full is a scaled variant (vocabulary 4000, embedding 256, 50 sentences of 16
words, batch 256).  Adam at 1e-2.

The synthetic stories are bAbI-like: one memory sentence starts with the question's first word and
the answer is that sentence's last word, so the attention has something to find.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from reference_workloads.models._synthetic import token_ids
from reference_workloads.registry import Batch, Workload, WorkloadSpec, register

PAD_ID = 0
INIT_STD = 0.1  # section 4.2: weights drawn from N(0, 0.1^2)


@dataclass(frozen=True)
class MemNetConfig:
    vocab: int
    embedding_dim: int
    memory_sentences: int
    sentence_words: int
    hops: int
    batch: int
    learning_rate: float


FULL = MemNetConfig(vocab=4000, embedding_dim=256, memory_sentences=50, sentence_words=16, hops=3,
                    batch=256, learning_rate=1e-2)
TINY = MemNetConfig(vocab=20, embedding_dim=20, memory_sentences=10, sentence_words=7, hops=3,
                    batch=32, learning_rate=1e-2)
CONFIGS = {"tiny": TINY, "full": FULL}


def position_encoding(sentence_words: int, embedding_dim: int) -> torch.Tensor:
    """Sukhbaatar et al. section 4.1: l_kj = (1 - j/J) - (k/d)(1 - 2j/J), j and k counted from 1."""
    j = torch.arange(1, sentence_words + 1, dtype=torch.float32).unsqueeze(1)
    k = torch.arange(1, embedding_dim + 1, dtype=torch.float32).unsqueeze(0)
    words, dims = float(sentence_words), float(embedding_dim)
    return (1 - j / words) - (k / dims) * (1 - 2 * j / words)


class MemN2N(nn.Module):
    def __init__(self, cfg: MemNetConfig) -> None:
        super().__init__()
        # hops + 1 embeddings with adjacent tying: A_k = embeddings[k], C_k = embeddings[k + 1].
        self.embeddings = nn.ModuleList(
            nn.Embedding(cfg.vocab, cfg.embedding_dim, padding_idx=PAD_ID) for _ in range(cfg.hops + 1))
        for embedding in self.embeddings:
            nn.init.normal_(embedding.weight, mean=0.0, std=INIT_STD)
        self.temporal = nn.Parameter(INIT_STD * torch.randn(cfg.hops + 1, cfg.memory_sentences, cfg.embedding_dim))
        self.register_buffer("encoding", position_encoding(cfg.sentence_words, cfg.embedding_dim), persistent=False)
        self.hops = cfg.hops

    def _sentences(self, hop: int, words: torch.Tensor) -> torch.Tensor:
        """Bag of position-weighted word embeddings: (..., words) ids -> (..., dim)."""
        return (self.embeddings[hop](words) * self.encoding).sum(dim=-2)

    def forward(self, stories: torch.Tensor, questions: torch.Tensor) -> torch.Tensor:
        """Answer logits (N, vocab) for stories (N, sentences, words) and questions (N, words)."""
        u = self._sentences(0, questions)
        for hop in range(self.hops):
            memory_in = self._sentences(hop, stories) + self.temporal[hop]
            memory_out = self._sentences(hop + 1, stories) + self.temporal[hop + 1]
            attention = torch.softmax(torch.einsum("nmd,nd->nm", memory_in, u), dim=1)
            u = u + torch.einsum("nm,nmd->nd", attention, memory_out)
        return u @ self.embeddings[self.hops].weight.t()


def synthetic_stories(cfg: MemNetConfig, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Stories, questions and answers: the answer is the last word of the (one) sentence that
    starts with the question's first word."""
    stories = token_ids((cfg.batch, cfg.memory_sentences, cfg.sentence_words), cfg.vocab, generator)
    questions = token_ids((cfg.batch, cfg.sentence_words), cfg.vocab, generator)
    subject = questions[:, 0]
    # Keep the subject out of every other sentence's first word, then plant it in one sentence.
    first_words = stories[:, :, 0]
    clash = first_words == subject.unsqueeze(1)
    stories[:, :, 0] = torch.where(clash, first_words % (cfg.vocab - 1) + 1, first_words)
    rows = torch.arange(cfg.batch)
    slot = torch.randint(cfg.memory_sentences, (cfg.batch,), generator=generator)
    stories[rows, slot, 0] = subject
    answers = stories[rows, slot, -1]
    return stories, questions, answers


@register
class MemNetWorkload(Workload):
    # Embedding gathers, softmaxes over a handful of memories and skinny batched matrix-vector
    # products: little arithmetic per byte moved, so mostly memory-bound.
    spec = WorkloadSpec(
        name="memnet",
        description="end-to-end memory network, 3 hops, Sukhbaatar et al. NIPS 2015 (Fathom memnet), bAbI",
        compute_bound=0.3,
        fathom_batch=32,
    )

    @classmethod
    def make_model(cls, size: str) -> nn.Module:
        return MemN2N(CONFIGS[size])

    def make_batch(self, generator: torch.Generator) -> Batch:
        stories, questions, answers = synthetic_stories(CONFIGS[self.size], generator)
        return (stories, questions), answers

    def make_optimizer(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.model.parameters(), lr=CONFIGS[self.size].learning_rate)

    def compute_loss(self, batch: Batch) -> torch.Tensor:
        (stories, questions), answers = batch
        return F.cross_entropy(self.model(stories, questions), answers)
