"""The simulated GPU: an NVML stand-in with models of real GPUs, so the main job runs anywhere.

``declare_work`` lets a step say what GPU work it launched (see ``work``); everything the
simulator produces is labelled simulated wherever it appears. Its names are imported when first
used (``..lazy``): the GPU models' table (``models.py``) comes without the NVML stand-in.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..lazy import lazy_exports

if TYPE_CHECKING:
    from .nvml import SimulatedNvml
    from .roofline import GpuWork
    from .work import declare_work, simulating

__all__ = ["GpuWork", "SimulatedNvml", "declare_work", "simulating"]
__getattr__, __dir__ = lazy_exports(__name__, {
    "SimulatedNvml": ".nvml", "GpuWork": ".roofline", "declare_work": ".work", "simulating": ".work",
})
