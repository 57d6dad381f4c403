"""The energy meter, in layers: the tick lattice (pure maths), the per-GPU recorder threads,
integration of a region's energy with its bound (pure functions), and the meter users hold."""

from .energy_meter import DEFAULT_MIN_TIME_S, CapContext, EnergyMeter
from .recorder import COUNTER, SAMPLING

__all__ = ["COUNTER", "DEFAULT_MIN_TIME_S", "SAMPLING", "CapContext", "EnergyMeter"]
