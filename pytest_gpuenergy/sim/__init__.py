"""The simulated GPU: a stand-in for the NVML library with a DVFS model and persistent state."""

from .nvml import SimulatedNvml

__all__ = ["SimulatedNvml"]
