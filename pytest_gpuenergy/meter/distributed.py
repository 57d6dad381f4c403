"""torch.distributed: every rank measures its own GPU, and every rank's result is the job's total.

A DDP step's energy is spent on every rank's GPU at once, so a figure from one rank alone is a
fraction of the cost, and a different fraction on every rank. Like Zeus, the meter therefore
aligns the ends of a region across the ranks (a barrier: a rank that finishes early waits, and its
GPU's idle power while it waits is part of the job's energy) and combines the ranks' figures: each
rank gets the same result, whose ``per_gpu`` lists every rank's GPU with its host and rank, and
whose ``ets_j`` is their sum (T is the longest rank's).

``measure(fn)`` decides how many calls a region holds from timings, which differ per rank; a rank
that called ``fn`` once more than another would wait in that call's all-reduce for ever. So every
such decision is agreed (the largest value over the ranks) through the same process group.

torch is never imported here: the group is the one the test (or its fixtures) initialised, found
in ``sys.modules``. Without one the meter measures this process's GPUs only, as everywhere else.
Works with any backend whose collectives carry Python objects (gloo on CPUs, nccl on GPUs).
"""

from __future__ import annotations

import socket
import sys
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from .results import GpuResult


class RankGroup:
    """The default process group of ``torch.distributed``, as the meter uses it."""

    def __init__(self, dist: Any) -> None:
        self.dist = dist
        self.rank: int = int(dist.get_rank())
        self.world_size: int = int(dist.get_world_size())
        self.host = socket.gethostname()

    def barrier(self) -> None:
        """Wait until every rank got here (a region's start and end)."""
        self.dist.barrier()

    def gather(self, value: Any) -> list[Any]:
        """Every rank's ``value``, in rank order, on every rank."""
        found: list[Any] = [None] * self.world_size
        self.dist.all_gather_object(found, value)
        return found

    def agree_max(self, value: float) -> float:
        """The largest ``value`` over the ranks: a decision every rank then makes alike."""
        return max(self.gather(value))

    def agree_any(self, flags: Sequence[bool]) -> list[bool]:
        """Per position, whether any rank raised its flag (all ranks pass lists of one length)."""
        every = self.gather([bool(f) for f in flags])
        return [any(rank_flags[i] for rank_flags in every) for i in range(len(flags))]

    def combine(self, parts: Sequence[GpuResult]) -> tuple[GpuResult, ...]:
        """Every rank's GPUs, each labelled with its host and rank, in rank order."""
        mine = [replace(part, host=self.host, rank=self.rank) for part in parts]
        return tuple(part for rank_parts in self.gather(mine) for part in rank_parts)


def current_group() -> RankGroup | None:
    """The initialised default process group of this process, or None (no torch, no group)."""
    torch = sys.modules.get("torch")
    dist = getattr(torch, "distributed", None) if torch is not None else None
    if dist is None:
        return None
    try:
        if not dist.is_available() or not dist.is_initialized():
            return None
        group = RankGroup(dist)
    except (RuntimeError, ValueError):    # a group being torn down
        return None
    return group if group.world_size > 1 else None
