"""Which GPUs a test runs on: one per test by default, the process's own one under xdist or torchrun.

A test measures and caps the GPUs its work runs on, and nothing else: an 8-GPU node running one
test per GPU must not charge each test with seven idle GPUs, nor make the tests wait for each
other's locks. The pool is the GPUs ``--gpu-devices`` selects (default: every visible GPU); each process
has a *slot* in it:

* a single pytest process: slot 0, the pool's first GPU;
* a pytest-xdist worker ``gwN``: slot N (round robin when there are more workers than GPUs, two
  workers then share a GPU and its lock makes them take turns);
* a torchrun rank: slot ``LOCAL_RANK``, the usual ``cuda:LOCAL_RANK`` of a DDP job.

A test asking for several GPUs (``@pytest.mark.energy(gpus=4)``, ``gpus="all"``) takes its slot's
GPU and the next ones in the pool. The GPU's work follows: a pytest-xdist worker's
``CUDA_VISIBLE_DEVICES`` lists the pool starting at its GPU (so ``cuda`` / ``cuda:0`` is its GPU),
and where torch already runs CUDA its current device is set to the test's first GPU. Only on
real GPUs (NVML): the simulator drives no CUDA, and its declared work goes to the test's GPUs
through ``Backend.use``; a simulated machine's UUIDs in ``CUDA_VISIBLE_DEVICES`` would only hide
GPUs from the processes a test starts.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Mapping, MutableMapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..errors import GpuSelectionError
from .moments import cuda_torch

if TYPE_CHECKING:
    from .device import Gpu  # (not at run time: the plugin reads a placement at every pytest start)

ALL = "all"
_WORKER_ID = re.compile(r"gw(\d+)")
_MAX_GPUS_PER_TEST = 4096


@dataclass(frozen=True)
class Placement:
    """This process's place in a parallel run, and so its GPU in the pool."""

    slot: int                      # which GPU of the pool is this process's own
    kind: str                      # "single", "xdist" or "torchrun"
    label: str                     # how the header names it: "pytest-xdist worker gw2", "torchrun rank 1 (local rank 1)"
    rank: int | None = None        # torchrun: the global rank
    local_rank: int | None = None
    world_size: int | None = None
    local_world_size: int | None = None

    @property
    def reports(self) -> bool:
        """Whether this process saves, compares and reports: not an xdist worker, and only global rank 0."""
        return self.kind != "xdist" and (self.rank is None or self.rank == 0)

    @classmethod
    def from_environment(cls, env: Mapping[str, str] | None = None, worker_id: str | None = None) -> Placement:
        """From pytest-xdist's worker id and torchrun's ``RANK``/``LOCAL_RANK``/``WORLD_SIZE``.

        The worker id comes from pytest-xdist's ``workerinput`` only, never from the environment: a
        pytest session started inside a worker's test (pytester) inherits ``PYTEST_XDIST_WORKER``
        but is no worker. Bad values in torchrun's variables are a ``GpuSelectionError`` naming them.
        """
        env = os.environ if env is None else env
        if env.get("LOCAL_RANK", "").strip() or env.get("RANK", "").strip():
            rank = _whole(env, "RANK", default=None)
            local = _whole(env, "LOCAL_RANK", default=rank)
            return cls(
                slot=local or 0, kind="torchrun", label=f"torchrun rank {rank} (local rank {local})",
                rank=rank, local_rank=local, world_size=_whole(env, "WORLD_SIZE", default=None),
                local_world_size=_whole(env, "LOCAL_WORLD_SIZE", default=None),
            )
        match = _WORKER_ID.fullmatch((worker_id or "").strip())
        if match:
            return cls(slot=int(match.group(1)), kind="xdist", label=f"pytest-xdist worker {worker_id}")
        return cls(slot=0, kind="single", label="one process")

    def check(self, pool: Sequence[Gpu]) -> None:
        """Refuse a torchrun job with more ranks on this node than GPUs in the pool: two ranks of one
        job on one GPU would wait for each other's lock inside a collective, for ever."""
        if self.kind == "torchrun" and self.local_world_size and self.local_world_size > len(pool):
            raise GpuSelectionError(
                f"torchrun starts {self.local_world_size} processes per node but only {len(pool)} GPU(s) are selected "
                f"({', '.join(str(g.index) for g in pool)}): give each rank its own GPU (--nproc-per-node={len(pool)}, "
                f"or widen --gpu-devices / CUDA_VISIBLE_DEVICES)"
            )

    def own_gpu(self, pool: Sequence[Gpu]) -> Gpu:
        return pool[self.slot % len(pool)]

    def gpus_for(self, pool: Sequence[Gpu], wanted: int | str = 1) -> list[Gpu]:
        """The GPUs a test asking for ``wanted`` GPUs holds: its own and the next ones in the pool.

        ``wanted`` is a count or ``"all"`` (the whole pool, in pool order). More than the pool holds
        raises ``GpuSelectionError``; under torchrun a rank holds exactly its own GPU.
        """
        if not pool:
            raise GpuSelectionError("no GPU is selected")
        if wanted == ALL:
            count = len(pool)
        else:
            count = int(wanted)
        if count > len(pool):
            raise GpuSelectionError(
                f"the test asks for {count} GPUs but {len(pool)} are selected (--gpu-devices, CUDA_VISIBLE_DEVICES)"
            )
        if self.kind == "torchrun" and count != 1:
            raise GpuSelectionError(
                f"under torchrun each rank measures its own GPU (LOCAL_RANK); energy(gpus={wanted!r}) asks for "
                f"{count}: drop it, and start one rank per GPU"
            )
        if count == len(pool):
            return list(pool)
        start = self.slot % len(pool)
        return [pool[(start + i) % len(pool)] for i in range(count)]


def check_wanted(value: Any) -> int | str:
    """``energy(gpus=)``: a whole number >= 1 or ``"all"``; anything else a ``ValueError`` saying so."""
    if value == ALL:
        return ALL
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= _MAX_GPUS_PER_TEST:
        shown = repr(value) if len(repr(value)) <= 40 else repr(value)[:37] + "..."
        raise ValueError(f"energy(gpus=) must be a whole number of GPUs >= 1 or \"all\", got {shown}")
    return value


def visible_order(pool: Sequence[Gpu], first: Gpu) -> list[Gpu]:
    """The pool starting at ``first`` (then round robin): a worker's ``CUDA_VISIBLE_DEVICES``."""
    start = list(pool).index(first)
    return list(pool[start:]) + list(pool[:start])


def pin_worker(pool: Sequence[Gpu], placement: Placement, env: dict[str, str] | None = None) -> dict[str, str] | None:
    """A pytest-xdist worker's runtime sees the pool starting at its own GPU; returns the variables set.

    Done at the start of the worker, before any test can initialise CUDA or HIP (which read the
    variables once). NVIDIA GPUs: ``CUDA_VISIBLE_DEVICES`` with UUIDs, so CUDA's device order
    (``CUDA_DEVICE_ORDER``) cannot pick another GPU. AMD GPUs: ``ROCR_VISIBLE_DEVICES`` with AMD SMI's
    indices (ROCR takes indices or its own UUIDs, which need not be AMD SMI's), and
    ``HIP_VISIBLE_DEVICES`` keeping all of those, since HIP would otherwise read
    ``CUDA_VISIBLE_DEVICES`` (ROCm's environment variables). Where CUDA already runs in this process
    nothing is changed (``pin_current_device`` then does the job per test). Single processes and
    torchrun ranks keep their variables as they are.
    """
    target: MutableMapping[str, str] = os.environ if env is None else env
    if placement.kind != "xdist" or not pool or _cuda_initialised():
        return None
    order = visible_order(pool, placement.own_gpu(pool))
    nvidia = [g for g in order if g.library == "nvml"]
    amd = [g for g in order if g.library == "amdsmi"]
    pinned: dict[str, str] = {}
    if nvidia:
        pinned["CUDA_VISIBLE_DEVICES"] = ",".join(g.uuid for g in nvidia)
    if amd:
        pinned["ROCR_VISIBLE_DEVICES"] = ",".join(str(g.library_index) for g in amd)
        pinned["HIP_VISIBLE_DEVICES"] = ",".join(str(i) for i in range(len(amd)))
    target.update(pinned)
    return pinned


def pin_current_device(held: Sequence[Gpu], all_gpus: Sequence[Gpu]) -> int | None:
    """Make the test's first GPU torch's current CUDA device, where torch already uses CUDA.

    torch is never imported for this (seconds), and CUDA is never started by it: a test that does
    not use CUDA keeps it off. Returns the CUDA index chosen, or None where nothing was done.
    """
    torch = sys.modules.get("torch")
    if torch is None or not held or not _cuda_initialised():
        return None
    from .visibility import visible_gpus

    order = [g for g in visible_gpus(all_gpus) if g.library == held[0].library]   # torch sees one vendor's
    if held[0] not in order:
        return None
    index = order.index(held[0])
    if index < torch.cuda.device_count():
        torch.cuda.set_device(index)
        return index
    return None


def _cuda_initialised() -> bool:
    try:
        return cuda_torch() is not None
    except Exception:   # a broken CUDA install: leave it to the test to find out
        return False


def _whole(env: Mapping[str, str], name: str, *, default: int | None) -> int | None:
    text = env.get(name, "").strip()
    if not text:
        return default
    if not text.isdigit():
        raise GpuSelectionError(f"{name}={text!r} is not a whole number >= 0; torchrun sets it, check the job script")
    return int(text)
