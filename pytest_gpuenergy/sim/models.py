"""The simulated GPU models and the public figures they are built from.

Peak throughputs and memory bandwidths are the vendors' data-sheet figures (dense, no sparsity:
H100 SXM5 66.9 TFLOPS FP32, 494.7 TF32, 989.4 FP16 tensor, 3.35 TB/s; A100 SXM4 40GB 19.5, 156,
312, 1.555 TB/s; V100 SXM2 15.7 FP32, 125 FP16 tensor, 900 GB/s; T4 8.1, 65, 320 GB/s; K80 per GPU
4.37 FP32, 240 GB/s). Limits are the published power-management ranges (vendor data sheets and ``nvidia-smi -q``
output): V100 SXM2 150-300 W, T4 60-70 W, A100 SXM4
100-400 W, H100 SXM5 200-700 W, K80 100-150 W per GPU). Clocks are the data-sheet boost clocks
and the lowest supported SM clocks. Idle power is approximate (what an idle GPU at P0 shows in
public ``nvidia-smi`` logs); it is a modelling input, not a measurement of ours.

Two GeForce boards, whose maximum limit lies above their default (as on many GeForce and workstation
cards; every data-center model above has the default at its maximum), so that percentages of the
default and the maximum disagree: RTX 4090 (Founders Edition): 450 W total board power by default,
up to 600 W (NVIDIA's board power and the limit the Founders Edition accepts, as Tom's Hardware's
power-limit tests run it), 150 W at least (``nvidia-smi -q`` as users report it, not a data sheet);
82.6 TFLOPS FP32 and TF32, 165.2 FP16 tensor (dense), 1,008 GB/s, 2,520 MHz boost. RTX 3090
(Founders Edition): 350 W by default (NVIDIA's total graphics power), 100-400 W (``nvidia-smi -q`` as
users report it); 35.6 TFLOPS FP32 and TF32, 71 FP16 tensor (dense), 936 GB/s, 1,695 MHz boost.

Measurement behaviour follows the hardware generations: the cumulative energy counter exists from
Volta on; ``NVML_FI_DEV_POWER_INSTANT`` averages a 25 ms window published every 100 ms on
A100/H100 (Yang, Adamek, Armour, SC'24); ``nvmlDeviceGetPowerUsage`` is a 1 s average on Ampere
and newer except GA100; the counter itself advances about every 100 ms.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class GpuSpec:
    key: str                      # what users type: GPUENERGY_SIM_GPUS=H100,V100
    name: str                     # what NVML reports (always says "simulated")
    architecture: str
    default_limit_w: float
    min_limit_w: float
    max_limit_w: float
    idle_w: float
    sm_clock_max_mhz: float
    sm_clock_min_mhz: float
    sm_clock_idle_mhz: float
    mem_clock_mhz: float
    compute_capability: tuple[int, int]
    fp32_tflops: float = 10.0                # data-sheet peaks (dense): the roofline model's ceilings
    tf32_tflops: float = 0.0                 # 0: no TF32 tensor cores (TF32 work runs at the FP32 rate)
    fp16_tflops: float = 0.0                 # 0: no FP16 tensor cores
    memory_gbs: float = 900.0
    has_energy_counter: bool = True          # Volta and newer
    has_instant_power: bool = True           # NVML_FI_DEV_POWER_INSTANT
    counter_period_s: float = 0.100          # how often the energy counter is published
    power_window_s: float = 0.025            # the window an instant-power reading averages
    power_publish_s: float = 0.100           # how often that reading is published
    power_usage_average_s: float = 0.025     # window of nvmlDeviceGetPowerUsage (1 s on Ampere+)

    @property
    def sm_clock_min_fraction(self) -> float:
        return self.sm_clock_min_mhz / self.sm_clock_max_mhz


SIMULATED_SUFFIX = " (simulated)"

GPU_MODELS: dict[str, GpuSpec] = {
    spec.key: spec
    for spec in (
        GpuSpec(
            key="V100", name="Tesla V100-SXM2-32GB" + SIMULATED_SUFFIX, architecture="Volta",
            default_limit_w=300, min_limit_w=150, max_limit_w=300, idle_w=40,
            sm_clock_max_mhz=1530, sm_clock_min_mhz=135, sm_clock_idle_mhz=135, mem_clock_mhz=877,
            compute_capability=(7, 0), fp32_tflops=15.7, fp16_tflops=125.0, memory_gbs=900.0,
        ),
        GpuSpec(
            key="T4", name="Tesla T4" + SIMULATED_SUFFIX, architecture="Turing",
            default_limit_w=70, min_limit_w=60, max_limit_w=70, idle_w=10,
            sm_clock_max_mhz=1590, sm_clock_min_mhz=300, sm_clock_idle_mhz=300, mem_clock_mhz=5001,
            compute_capability=(7, 5), fp32_tflops=8.1, fp16_tflops=65.0, memory_gbs=320.0,
        ),
        GpuSpec(
            key="A100", name="NVIDIA A100-SXM4-40GB" + SIMULATED_SUFFIX, architecture="Ampere",
            default_limit_w=400, min_limit_w=100, max_limit_w=400, idle_w=55,
            sm_clock_max_mhz=1410, sm_clock_min_mhz=210, sm_clock_idle_mhz=210, mem_clock_mhz=1215,
            compute_capability=(8, 0), fp32_tflops=19.5, tf32_tflops=156.0, fp16_tflops=312.0, memory_gbs=1555.0,
            power_usage_average_s=0.025,     # GA100 is the Ampere exception: no 1 s average
        ),
        GpuSpec(
            key="H100", name="NVIDIA H100 80GB HBM3" + SIMULATED_SUFFIX, architecture="Hopper",
            default_limit_w=700, min_limit_w=200, max_limit_w=700, idle_w=70,
            sm_clock_max_mhz=1980, sm_clock_min_mhz=210, sm_clock_idle_mhz=345, mem_clock_mhz=2619,
            compute_capability=(9, 0), fp32_tflops=66.9, tf32_tflops=494.7, fp16_tflops=989.4, memory_gbs=3350.0,
            power_usage_average_s=1.0,
        ),
        GpuSpec(
            key="RTX4090", name="NVIDIA GeForce RTX 4090" + SIMULATED_SUFFIX, architecture="Ada Lovelace",
            default_limit_w=450, min_limit_w=150, max_limit_w=600, idle_w=20,
            sm_clock_max_mhz=2520, sm_clock_min_mhz=210, sm_clock_idle_mhz=210, mem_clock_mhz=10501,
            compute_capability=(8, 9), fp32_tflops=82.6, tf32_tflops=82.6, fp16_tflops=165.2, memory_gbs=1008.0,
            power_usage_average_s=1.0,
        ),
        GpuSpec(
            key="RTX3090", name="NVIDIA GeForce RTX 3090" + SIMULATED_SUFFIX, architecture="Ampere",
            default_limit_w=350, min_limit_w=100, max_limit_w=400, idle_w=20,
            sm_clock_max_mhz=1695, sm_clock_min_mhz=210, sm_clock_idle_mhz=210, mem_clock_mhz=9751,
            compute_capability=(8, 6), fp32_tflops=35.6, tf32_tflops=35.6, fp16_tflops=71.0, memory_gbs=936.0,
            power_usage_average_s=1.0,
        ),
        GpuSpec(
            key="K80", name="Tesla K80" + SIMULATED_SUFFIX, architecture="Kepler",
            default_limit_w=150, min_limit_w=100, max_limit_w=150, idle_w=25,
            sm_clock_max_mhz=875, sm_clock_min_mhz=324, sm_clock_idle_mhz=324, mem_clock_mhz=2505,
            compute_capability=(3, 7), fp32_tflops=4.37, memory_gbs=240.0,
            has_energy_counter=False, has_instant_power=False,
        ),
    )
}

DEFAULT_SIM_MODELS: tuple[str, ...] = ("H100",)


def parse_model_list(text: str) -> tuple[str, ...]:
    """Parse ``H100,V100`` (case-insensitive) into model keys; an unknown name is a ValueError."""
    keys: list[str] = []
    for raw in text.split(","):
        item = raw.strip()
        if not item:
            raise ValueError(f"empty entry in simulated GPU list {text!r}: use e.g. H100,V100")
        match = {k.lower(): k for k in GPU_MODELS}.get(item.lower())
        if match is None:
            known = ", ".join(GPU_MODELS)
            raise ValueError(f"unknown simulated GPU model {item!r}: choose from {known}")
        keys.append(match)
    return tuple(keys)
