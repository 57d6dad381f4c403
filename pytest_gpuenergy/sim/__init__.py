"""The simulated GPUs: NVML and AMD SMI stand-ins over models of real GPUs, so the main job runs anywhere.

``declare_work`` lets a step say what GPU work it launched (see ``work``); everything the
simulator produces is labelled simulated wherever it appears. Its names are imported when first
used (``..lazy``): the GPU models' table (``models.py``) comes without the NVML stand-in.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..lazy import lazy_exports

if TYPE_CHECKING:
    from .amdsmi import SimulatedAmdSmi
    from .machine import SimulatedMachine
    from .nvml import SimulatedNvml
    from .roofline import GpuWork
    from .work import declare_work, simulating

__all__ = ["GpuWork", "SimulatedAmdSmi", "SimulatedMachine", "SimulatedNvml", "declare_work", "simulating"]
__getattr__, __dir__ = lazy_exports(__name__, {
    "SimulatedNvml": ".nvml", "SimulatedAmdSmi": ".amdsmi", "SimulatedMachine": ".machine", "GpuWork": ".roofline",
    "declare_work": ".work", "simulating": ".work",
})
