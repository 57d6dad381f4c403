"""pytest-gpuenergy: GPU energy regression testing for pytest.

The pytest plugin (``plugin/hooks.py``) registers itself through the ``pytest11`` entry point.
The pieces it is made of also work without pytest::

    from pytest_gpuenergy import EnergyMeter, open_backend

    backend = open_backend("auto")          # NVML where there is a GPU, else the simulator
    meter = EnergyMeter(backend, backend.select(None))
    result = meter.measure(train_step, repeat=5)
    print(result.ets_j, result.time_s, result.edp_js, "simulated" if result.simulated else "measured")

The names are imported when first used (``lazy.py``): ``gpuenergy info`` loads only what it needs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .lazy import lazy_exports

if TYPE_CHECKING:
    from .errors import EnergyMeasurementWarning, GpuEnergyError, PowerLimitWarning
    from .gate.budgets import Budget
    from .gpu.capping import PowerCap, PowerCapper
    from .gpu.device import Backend, Gpu, open_backend
    from .gpu.specs import CapSpec, parse_caps
    from .meter import EnergyMeter
    from .meter.results import EnergyResult, GpuResult, Repetition, Summary

_EXPORTS = {
    "EnergyMeasurementWarning": ".errors", "GpuEnergyError": ".errors", "PowerLimitWarning": ".errors",
    "Budget": ".gate.budgets",
    "CapSpec": ".gpu.specs", "PowerCap": ".gpu.capping", "PowerCapper": ".gpu.capping", "parse_caps": ".gpu.specs",
    "Backend": ".gpu.device", "Gpu": ".gpu.device", "open_backend": ".gpu.device",
    "EnergyMeter": ".meter",
    "EnergyResult": ".meter.results", "GpuResult": ".meter.results", "Repetition": ".meter.results",
    "Summary": ".meter.results",
}
__all__ = [
    "Backend", "Budget", "CapSpec", "EnergyMeasurementWarning", "EnergyMeter", "EnergyResult",
    "Gpu", "GpuEnergyError", "GpuResult", "PowerCap", "PowerCapper", "PowerLimitWarning",
    "Repetition", "Summary", "open_backend", "parse_caps",
]
_export, __dir__ = lazy_exports(__name__, _EXPORTS)


def __getattr__(name: str) -> object:
    if name == "__version__":
        from importlib.metadata import PackageNotFoundError, version

        try:
            return version("pytest-gpuenergy")
        except PackageNotFoundError:  # running from a source tree that was not installed
            return "0.0.0"
    return _export(name)
