"""pytest-gpuenergy: GPU energy regression testing for pytest.

The pytest plugin (``plugin.py``) registers itself through the ``pytest11`` entry point. The
pieces it is made of also work without pytest::

    from pytest_gpuenergy import EnergyMeter, open_backend

    backend = open_backend("auto")          # NVML where there is a GPU, else the simulator
    meter = EnergyMeter(backend, backend.select(None))
    result = meter.measure(train_step, repeat=5)
    print(result.ets_j, result.time_s, result.edp_js, "simulated" if result.simulated else "measured")
"""

from importlib.metadata import PackageNotFoundError, version

from .errors import EnergyMeasurementWarning, GpuEnergyError, PowerLimitWarning
from .gate.budgets import Budget
from .gpu.capping import CapSpec, PowerCap, PowerCapper, parse_caps
from .gpu.device import Backend, Gpu, open_backend
from .meter import EnergyMeter
from .meter.results import EnergyResult, GpuResult, Repetition, Summary

try:
    __version__ = version("pytest-gpuenergy")
except PackageNotFoundError:  # running from a source tree that was not installed
    __version__ = "0.0.0"

__all__ = [
    "Backend", "Budget", "CapSpec", "EnergyMeasurementWarning", "EnergyMeter", "EnergyResult",
    "Gpu", "GpuEnergyError", "GpuResult", "PowerCap", "PowerCapper", "PowerLimitWarning",
    "Repetition", "Summary", "open_backend", "parse_caps",
]
