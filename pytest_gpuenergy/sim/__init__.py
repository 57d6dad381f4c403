"""The simulated GPU: an NVML stand-in with models of real GPUs, so the main job runs anywhere.

``declare_work`` lets a step say what GPU work it launched (see ``work``); everything the
simulator produces is labelled simulated wherever it appears.
"""

from .nvml import SimulatedNvml
from .roofline import GpuWork
from .work import declare_work, simulating

__all__ = ["GpuWork", "SimulatedNvml", "declare_work", "simulating"]
