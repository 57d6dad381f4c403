"""The energy meter, in layers: the tick lattice (pure maths), the per-GPU recorder threads,
integration of a region's energy with its bound (pure functions), and the meter users hold.

Its names are imported when first used (``..lazy``): a module that needs only the result
records (``results.py``) does not load the recorder threads and the integration.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..lazy import lazy_exports

if TYPE_CHECKING:
    from .defaults import DEFAULT_MIN_TIME_S
    from .energy_meter import EnergyMeter
    from .recorder import COUNTER, SAMPLING
    from .region import CapContext

__all__ = ["COUNTER", "DEFAULT_MIN_TIME_S", "SAMPLING", "CapContext", "EnergyMeter"]
__getattr__, __dir__ = lazy_exports(__name__, {
    "DEFAULT_MIN_TIME_S": ".defaults", "CapContext": ".region", "EnergyMeter": ".energy_meter",
    "COUNTER": ".recorder", "SAMPLING": ".recorder",
})
