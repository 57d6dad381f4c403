"""How a power cap changes a simulated GPU's clock, power and speed (the DVFS model).

The model is small on purpose; every constant is here and is checked by the tests against the
seeds' measurements (a V100 at its lowest cap of 150 W: about 30 % less energy, EDP about 14 %
lower; lower caps cut the energy of memory-bound workloads; EDP has an interior optimum).

A workload declares ``compute_bound`` = c in [0, 1], the share of its full-clock runtime that
scales with the SM clock (the rest waits on memory). Default: ``DEFAULT_COMPUTE_BOUND`` = 0.7.
At SM clock fraction x and memory clock fraction y (both 1 at full speed):

* time factor      t(x, y) = c / x + (1 - c) / y          (1 at full speed)
* busy power       P(x, y) = P_idle + P_mem * y + P_core * g(x) * u(x, y) / c
  - the workload's dynamic power at full clock, D = (P_default - P_idle) * min(1.05, 0.6 + 0.45 c):
    compute-bound work draws up to the default limit (and slightly beyond, so the default cap
    binds), memory-bound work about 75 % of it;
  - memory power  P_mem  = D * 0.25 (1 - c), independent of the SM clock;
  - core power    P_core = D - P_mem, scaled by g(x) = x * max(0.5, x)^2 (dynamic power goes with
    f V^2 and the voltage with the clock down to a floor at half the clock);
  - u(x, y) = (c / x) / t(x, y) is the share of time the SMs are busy: slowing them makes a
    memory-bound workload spend more of its time in them.

The governor (what the driver does under a cap): run at full speed if P(1, 1) fits under the
limit; otherwise lower the SM clock until it fits, down to the GPU's lowest clock; if that is
not enough, lower the memory clock too, down to half. If even that exceeds the limit the GPU
runs there anyway (a real GPU cannot go below its floor either).

A locked SM clock (``nvmlDeviceSetGpuLockedClocks``, the ``gpu_clock_cap`` fixture) bounds the
governor from above: it searches the SM clock in [lowest, lock] instead of [lowest, full], so a
locked clock slows the work by t(x, 1) and cuts the power by g(x) even where the power limit
would allow more; a power limit below what the locked clock draws lowers the clock further.
"""

from __future__ import annotations

from dataclasses import dataclass

from .models import GpuSpec

DEFAULT_COMPUTE_BOUND = 0.7
MEMORY_CLOCK_MIN_FRACTION = 0.5
_VOLTAGE_FLOOR_FRACTION = 0.5
_SOLVER_STEPS = 40  # bisection steps: 2^-40 of the clock range, far below anything observable


@dataclass(frozen=True)
class WorkloadProfile:
    """What the simulator needs to know about the running work."""

    compute_bound: float = DEFAULT_COMPUTE_BOUND

    def __post_init__(self) -> None:
        if not isinstance(self.compute_bound, (int, float)) or not 0.0 <= self.compute_bound <= 1.0:
            raise ValueError(
                f"compute_bound must be a number between 0 (memory-bound) and 1 (compute-bound), "
                f"got {self.compute_bound!r}"
            )


@dataclass(frozen=True)
class OperatingPoint:
    """Where the governor puts a GPU for a workload under a limit."""

    sm_clock_fraction: float
    mem_clock_fraction: float
    busy_power_w: float
    time_factor: float          # device seconds per second of full-speed work

    def sm_clock_mhz(self, spec: GpuSpec) -> float:
        return self.sm_clock_fraction * spec.sm_clock_max_mhz

    def mem_clock_mhz(self, spec: GpuSpec) -> float:
        return self.mem_clock_fraction * spec.mem_clock_mhz


def time_factor(profile: WorkloadProfile, x: float, y: float = 1.0) -> float:
    c = profile.compute_bound
    return c / x + (1.0 - c) / y


def busy_power_w(spec: GpuSpec, profile: WorkloadProfile, x: float, y: float = 1.0) -> float:
    c = profile.compute_bound
    dynamic_w = (spec.default_limit_w - spec.idle_w) * min(1.05, 0.6 + 0.45 * c)
    mem_w = dynamic_w * 0.25 * (1.0 - c)
    core_w = dynamic_w - mem_w
    voltage = max(_VOLTAGE_FLOOR_FRACTION, x)
    g = x * voltage * voltage
    sm_busy_share_ratio = 1.0 / time_factor(profile, x, y) / x if c > 0 else 0.0  # u(x,y)/c
    return spec.idle_w + mem_w * y + core_w * g * sm_busy_share_ratio


def operating_point(spec: GpuSpec, profile: WorkloadProfile, limit_w: float,
                    sm_clock_cap_fraction: float = 1.0) -> OperatingPoint:
    """The clocks the governor picks for ``profile`` under a power limit of ``limit_w``, with the
    SM clock locked to at most ``sm_clock_cap_fraction`` of its maximum (1: not locked)."""
    x_min = spec.sm_clock_min_fraction
    x_max = min(max(sm_clock_cap_fraction, x_min), 1.0)

    def point(x: float, y: float) -> OperatingPoint:
        return OperatingPoint(x, y, busy_power_w(spec, profile, x, y), time_factor(profile, x, y))

    if busy_power_w(spec, profile, x_max) <= limit_w:
        return point(x_max, 1.0)
    if busy_power_w(spec, profile, x_min) <= limit_w:
        x = _largest_fitting(lambda v: busy_power_w(spec, profile, v), x_min, x_max, limit_w)
        return point(x, 1.0)
    y_min = MEMORY_CLOCK_MIN_FRACTION
    if busy_power_w(spec, profile, x_min, y_min) <= limit_w:
        y = _largest_fitting(lambda v: busy_power_w(spec, profile, x_min, v), y_min, 1.0, limit_w)
        return point(x_min, y)
    return point(x_min, y_min)


def _largest_fitting(power_at, low: float, high: float, limit_w: float) -> float:
    """Largest v in [low, high] with power_at(v) <= limit_w, for power rising with v."""
    for _ in range(_SOLVER_STEPS):
        mid = (low + high) / 2
        if power_at(mid) <= limit_w:
            low = mid
        else:
            high = mid
    return low
