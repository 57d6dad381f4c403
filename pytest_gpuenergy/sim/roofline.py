"""How long a step of declared GPU work takes on a simulated GPU, and how busy it keeps it.

A step declares its work (:class:`GpuWork`): floating-point operations by the units that run them
(FP32 on the vector units; TF32 and FP16 on the tensor cores), bytes moved to and from memory,
and kernel launches. On a GPU model with peak rates ``P`` and memory bandwidth ``B``, at SM clock
fraction x and memory clock fraction y (the DVFS operating point):

* compute time  C = sum over units of flops / (P_unit * efficiency_unit), scaled by 1 / x;
* memory time   M = bytes / (B * efficiency_memory), scaled by 1 / y;
* GPU time      G = C / x + M / y (a step's kernels run one after another: the convolutions
  compute, the element-wise kernels move memory);
* host time     H = kernels * launch cost: the CPU launches kernels asynchronously, so a step
  takes max(G, H), and a step of many tiny kernels keeps the GPU busy only G / H of the time
  (the small reference workloads on a real H100 drew 130-145 W, barely above idle);
* how compute-bound the step is (the DVFS model's c) is C / G at full clocks, so a cap slows a
  convolution-heavy step more than an embedding-heavy one, as on real hardware.

Peak rates and bandwidths are the vendors' data-sheet figures (dense, no sparsity). The
efficiencies, the launch cost and the share of the dynamic power a busy step draws are
calibrated against one real H100 (``benchmarks/sim_calibration.py`` prints the comparison; the
README shows it): they are a model's constants, not measurements of any other GPU.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from functools import lru_cache

from .models import GpuSpec

# Calibrated on the full-size reference workloads measured on a real H100 (2026-11-22): see
# benchmarks/sim_calibration.py. Achieved rates of PyTorch eager kernels are far below the peaks.
EFFICIENCY = {"fp32": 0.55, "tf32": 0.22, "fp16": 0.22, "memory": 0.55}
LAUNCH_S = 25e-6                  # host time per kernel launch (PyTorch eager; 18-42 us seen on the H100)
ACTIVITY = 0.80                   # share of the DVFS model's dynamic power a busy step draws
# While a step runs, the GPU stays at its working clocks between kernels: the real H100 drew 130-145 W
# on steps that kept it busy 1 % of the time, and 136 W idle right after work, against 70 W deep idle.
ACTIVE_IDLE_FACTOR = 1.9


@dataclass(frozen=True)
class GpuWork:
    """The GPU work of one step: FLOPs per kind of unit, bytes moved, kernels launched."""

    flops_fp32: float = 0.0
    flops_tf32: float = 0.0
    flops_fp16: float = 0.0
    bytes: float = 0.0
    kernels: int = 0

    def __post_init__(self) -> None:
        for item in fields(self):
            value = getattr(self, item.name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < 1e21:
                raise ValueError(f"declared GPU work: {item.name} must be a number from 0 to 1e21, got {value!r}")
        if not (self.flops_fp32 or self.flops_tf32 or self.flops_fp16 or self.bytes or self.kernels):
            raise ValueError("declared GPU work is empty: give flops, bytes or kernels")

    def scaled(self, factor: float) -> GpuWork:
        return GpuWork(*(getattr(self, f.name) * factor for f in fields(self)))

    @property
    def key(self) -> tuple[float, ...]:
        """What identifies a kind of step (for its per-session drift): its figures, rounded."""
        return _rounded(self)


@lru_cache(maxsize=4096)
def _rounded(work: GpuWork) -> tuple[float, ...]:
    """A step's figures to 6 significant digits: worked out once per kind of step (a suite declares a
    few kinds, thousands of times)."""
    return tuple(float(f"{getattr(work, f.name):.6g}") for f in fields(work))


GPU_WORK_FIELDS = tuple(f.name for f in fields(GpuWork))


@dataclass(frozen=True)
class StepTimes:
    """One step at full clocks: compute, memory and host time, in seconds."""

    compute_s: float
    memory_s: float
    host_s: float

    @property
    def compute_bound(self) -> float:
        """The share of the GPU time that scales with the SM clock (the DVFS model's c)."""
        gpu = self.compute_s + self.memory_s
        return self.compute_s / gpu if gpu > 0 else 0.0

    def at(self, sm_fraction: float, mem_fraction: float) -> tuple[float, float]:
        """(step seconds, share of it the GPU is busy) at these clock fractions."""
        gpu = self.compute_s / sm_fraction + self.memory_s / mem_fraction
        step = max(gpu, self.host_s)
        return step, (gpu / step if step > 0 else 0.0)


def step_times(spec: GpuSpec, work: GpuWork) -> StepTimes:
    """The declared work's times on ``spec`` at full clocks."""
    fp32_rate = spec.fp32_tflops * 1e12 * EFFICIENCY["fp32"]
    # Without TF32 (FP16) tensor cores that work runs on the FP32 units, as cuDNN and cuBLAS do.
    tf32_rate = spec.tf32_tflops * 1e12 * EFFICIENCY["tf32"] if spec.tf32_tflops else fp32_rate
    fp16_rate = spec.fp16_tflops * 1e12 * EFFICIENCY["fp16"] if spec.fp16_tflops else fp32_rate
    compute = work.flops_fp32 / fp32_rate + work.flops_tf32 / tf32_rate + work.flops_fp16 / fp16_rate
    memory = work.bytes / (spec.memory_gbs * 1e9 * EFFICIENCY["memory"])
    return StepTimes(compute, memory, work.kernels * LAUNCH_S)


@dataclass(frozen=True)
class StepRun:
    """A step of declared work under a power limit: how long it takes and what it draws."""

    step_s: float
    busy_share: float              # of the step, the share the GPU computes (the rest: waiting for launches)
    busy_power_w: float            # while it computes
    idle_w: float                  # deep idle: the GPU with nothing to do
    launch_s: float = 0.0          # the host's time to launch its kernels (the step's H)

    @property
    def gpu_s(self) -> float:
        """The GPU's own time for the step at the operating point (the step's G)."""
        return self.step_s * self.busy_share

    def dynamic_w_at(self, busy_share: float) -> float:
        """Mean power above deep idle over a stretch the GPU is busy ``busy_share`` of (working clocks throughout)."""
        active_idle = min(ACTIVE_IDLE_FACTOR * self.idle_w, self.busy_power_w)
        busy_extra = ACTIVITY * max(self.busy_power_w - active_idle, 0.0)
        return active_idle - self.idle_w + busy_share * busy_extra

    @property
    def dynamic_w(self) -> float:
        """Mean power above deep idle over the step: working clocks throughout, plus the busy share."""
        return self.dynamic_w_at(self.busy_share)

    @property
    def energy_j(self) -> float:
        return self.step_s * (self.idle_w + self.dynamic_w)


@lru_cache(maxsize=4096)
def run_step(spec: GpuSpec, work: GpuWork, limit_w: float, sm_clock_cap_fraction: float = 1.0) -> StepRun:
    """Where the governor puts the GPU for this step under ``limit_w`` (and a locked SM clock of at
    most ``sm_clock_cap_fraction`` of its maximum), and the step there. A pure function of frozen
    values, kept for the kinds of step a session declares again and again (thousands of times in a
    suite, a few kinds at a few limits): the governor's search is most of a declaration's cost."""
    from .dvfs import WorkloadProfile, operating_point

    times = step_times(spec, work)
    point = operating_point(spec, WorkloadProfile(times.compute_bound), limit_w, sm_clock_cap_fraction)
    step_s, busy = times.at(point.sm_clock_fraction, point.mem_clock_fraction)
    return StepRun(step_s, busy, point.busy_power_w, spec.idle_w, times.host_s)
