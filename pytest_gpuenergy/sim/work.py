"""Declaring the GPU work of a step, so that the simulated GPU runs it the same on any host.

On a real GPU the work is simply done; on the simulated one, a step that says what it launched
(``declare_work``: FLOPs per kind of unit, bytes moved, kernels) is turned into time and power by
the roofline and DVFS models, and the host's speed and load play no part. Where nothing is
declared, the process's CPU time inside measured regions stands for the GPU work instead.

``declare_work`` costs nothing without a simulator (a real GPU, or no GPU code at all): it tells
every simulator this process has open, for the GPUs it uses. ``count_work`` (``counting``) counts a
PyTorch step's work from its shapes.
"""

from __future__ import annotations

import threading
import weakref
from typing import Any

from .roofline import GpuWork

_SIMULATORS: weakref.WeakSet[Any] = weakref.WeakSet()
_LOCK = threading.Lock()


def register(simulator: Any) -> None:
    with _LOCK:
        _SIMULATORS.add(simulator)


def unregister(simulator: Any) -> None:
    with _LOCK:
        _SIMULATORS.discard(simulator)


def simulating() -> bool:
    """Whether a simulated GPU is open in this process (counting work is then worth it)."""
    return bool(_SIMULATORS)


def declare_work(work: GpuWork | None = None, **figures: float) -> None:
    """One step of GPU work was launched: ``declare_work(flops_tf32=1.2e12, bytes=5e10, kernels=900)``.

    Figures: ``flops_fp32``, ``flops_tf32``, ``flops_fp16``, ``bytes``, ``kernels``; or a ready
    :class:`GpuWork`. A no-op unless a simulated GPU is open.
    """
    if not _SIMULATORS:
        return
    step = work if work is not None else GpuWork(**figures)  # type: ignore[arg-type]  # kernels: a count given as a number
    with _LOCK:
        simulators = list(_SIMULATORS)
    for simulator in simulators:
        simulator.simDeclareWork(step)
