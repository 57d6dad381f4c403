"""pytest-benchmark's ``benchmark`` fixture, measured: its rounds are one energy region, and the energy
per call goes into ``benchmark.extra_info``, so ``--benchmark-json``, ``--benchmark-compare`` and the
dashboards built on them carry energy beside time.

The region covers everything the fixture runs (calibration, warm-up and the timed rounds): each of
those is a call of the benchmarked function, so the energy per call is the region's energy over the
number of calls, counted by wrapping the function. Plain Python: ``MeasuredBenchmark`` stands in
for any object with pytest-benchmark's ``__call__``/``pedantic``/``extra_info``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

EXTRA_KEYS = ("energy_j_per_call", "energy_bound_j", "power_w", "gpu", "cap_w", "simulated")


class MeasuredBenchmark:
    """Delegates to pytest-benchmark's fixture, measuring each use with ``meter`` (an ``EnergyMeter``)."""

    def __init__(self, fixture: Any, meter: Any) -> None:
        self.__dict__["_fixture"] = fixture
        self.__dict__["_meter"] = meter

    def __getattr__(self, name: str) -> Any:
        return getattr(self._fixture, name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._fixture, name, value)

    def __call__(self, function_to_benchmark: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        counted = _Counted(function_to_benchmark)
        with self._meter:
            result = self._fixture(counted, *args, **kwargs)
        self._note(counted.calls)
        return result

    def pedantic(self, target: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        counted = _Counted(target)
        with self._meter:
            result = self._fixture.pedantic(counted, *args, **kwargs)
        self._note(counted.calls)
        return result

    def _note(self, calls: int) -> None:
        self._fixture.extra_info.update(energy_info(self._meter.result, calls))


def energy_info(result: Any, calls: int) -> dict[str, Any]:
    """What ``extra_info`` gets from a region (an ``EnergyResult``) that ran ``calls`` calls."""
    calls = max(calls, 1)
    gpu = result.per_gpu[0]
    low, high = result.ets_low_j, result.ets_high_j
    return {
        "energy_j_per_call": result.ets_j / calls,
        "energy_bound_j": [low / calls, high / calls] if low is not None and high is not None else None,
        "power_w": result.mean_power_w,
        "gpu": gpu.gpu_name,
        "cap_w": gpu.limit_enforced_w,
        "simulated": result.simulated,
        "energy_calls": calls,
    }


class _Counted:
    """The benchmarked function, counting its calls."""

    def __init__(self, function: Callable[..., Any]) -> None:
        self.function = function
        self.calls = 0
        self.__name__ = getattr(function, "__name__", "function")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self.calls += 1
        return self.function(*args, **kwargs)
