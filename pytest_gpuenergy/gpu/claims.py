"""Which GPUs a session takes on a node other sessions share: free GPUs before busy ones.

Every test holds its GPUs' locks (``locks.py``), so two sessions on one GPU never overlap, but they
take turns: two ``pytest -n 2`` sessions on a 4-GPU node would both run on GPUs 0 and 1 while 2 and
3 idle. So a session also *claims* the GPUs it means to use, for as long as it runs: a shared
``flock`` on a file per GPU beside its lock (``<uuid>.claim``), which the kernel drops when the
session ends or dies, so no claim outlives its session. A starting session takes the GPUs nobody
claims first (in the pool's order), and shares a claimed one only when no free one is left. Two
sessions starting at once choose one after the other (``claims.lock``), so they cannot both take
the same free GPU. The claim decides where a session's processes go, never whether a test may run:
that stays with the locks.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from ..fileio import file_lock, lock_holder, open_lock_file

if TYPE_CHECKING:
    from .device import Gpu

CLAIMS_MUTEX = "claims.lock"
CHOOSE_TIMEOUT_S = 60.0         # choosing takes milliseconds; a minute means a holder that is stuck


@dataclass
class Claim:
    """The pool in the order this session uses it (its own GPUs first), and what it found taken."""

    order: list[Gpu]
    taken: list[Gpu]                                         # the GPUs this session claims
    busy: dict[str, str] = field(default_factory=dict)       # uuid -> the process that claims it
    _fds: list[int] = field(default_factory=list, repr=False)

    def release(self) -> None:
        for fd in self._fds:
            os.close(fd)            # closing drops the flock
        self._fds.clear()

    def describe(self) -> str:
        """The header's line: which GPUs this session took, and why, where others were busy."""
        took = ", ".join(str(g.index) for g in self.taken)
        if not self.busy:
            return f"took GPU(s) {took}"
        by_holder: dict[str, list[str]] = {}       # one session holds its GPUs together: named once
        for gpu in (g for g in self.order if g.uuid in self.busy):
            by_holder.setdefault(self.busy[gpu.uuid], []).append(str(gpu.index))
        held = "; ".join(f"GPU{'s' if len(indices) > 1 else ''} {', '.join(indices)} by {holder}"
                         for holder, indices in by_holder.items())
        if all(g.uuid in self.busy for g in self.taken):
            return (f"took GPU(s) {took}, shared: every selected GPU is claimed by another session ({held}); "
                    f"tests wait for each GPU's lock in turn")
        return f"took GPU(s) {took}, free ones first (claimed by another session: {held})"


def claim_gpus(folder: Path, pool: Sequence[Gpu], count: int) -> Claim:
    """Claim ``count`` GPUs of ``pool`` (at least one, at most all) for this session, free ones first."""
    wanted = max(1, min(count, len(pool)))
    with file_lock(folder, CLAIMS_MUTEX, timeout_s=CHOOSE_TIMEOUT_S) as dir_fd:
        fds = {g.uuid: open_lock_file(dir_fd, f"{g.uuid}.claim", shown=folder / f"{g.uuid}.claim") for g in pool}
        busy = {g.uuid: holder for g in pool if (holder := _claimed_by(fds[g.uuid])) is not None}
        order = [g for g in pool if g.uuid not in busy] + [g for g in pool if g.uuid in busy]
        taken = order[:wanted]
        for gpu in taken:
            fcntl.flock(fds[gpu.uuid], fcntl.LOCK_SH)
        for fd in (fds[g.uuid] for g in order[wanted:]):
            os.close(fd)
    return Claim(order, taken, busy, [fds[g.uuid] for g in taken])


def _claimed_by(fd: int) -> str | None:
    """Who claims the GPU of this claim file (the kernel's word), or None where nobody does."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return lock_holder(fd)
    fcntl.flock(fd, fcntl.LOCK_UN)
    return None


def in_order(pool: Sequence[Gpu], uuids: Sequence[str]) -> list[Gpu]:
    """``pool`` in the order a session's controller chose (``Claim.order``): an xdist worker's view."""
    rank = {uuid: i for i, uuid in enumerate(uuids)}
    return sorted(pool, key=lambda g: rank.get(g.uuid, len(rank) + g.index))
