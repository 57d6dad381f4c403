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

AMD Instinct models (``vendor="amd"``), read through the simulated ``amdsmi`` (``amdsmi.py``), from
AMD's data sheets (dense peaks): MI300X (OAM): 750 W total board power, 163.4 TFLOPS FP32 (vector and
matrix), 653.7 TF32 matrix, 1,307.4 FP16 matrix, 5.3 TB/s HBM3, 2,100 MHz peak engine clock, 304
compute units, gfx942. MI250X (OAM): 560 W peak board power, 47.9 TFLOPS FP32 vector, 95.7 FP32
matrix, 383 FP16 matrix, 3.2 TB/s HBM2e, 1,700 MHz, 220 compute units in two graphics compute dies
(GCDs), gfx90a. MI210 (PCIe): 300 W, 22.6 FP32 vector, 45.3 FP32 matrix, 181 FP16 matrix, 1.6 TB/s,
1,700 MHz, 104 compute units, gfx90a. CDNA2 has no TF32: work declared as TF32 runs on its FP32
matrix cores (as rocBLAS runs FP32 products). The roofline's efficiencies are the H100's calibration
(``roofline.py``): nothing here was calibrated on an AMD GPU.

An MI250X is two devices to AMD SMI, one per GCD (``dies=2``; a spec holds one GCD's share: half the
board's power, throughput and bandwidth). Only the primary die reports power: the amdgpu driver
(``aldebaran_ppt.c``: "Valid power data is available only from primary die") gives the primary the
whole package's energy accumulator, socket power and power cap, the secondary 0 for all three, and
sets a cap "only through primary die"; ROCm's own tools show the secondary's power as "N/A (Secondary
die)" (ROCm/rocm_smi_lib#160) and Zeus measured 0 W there (ml-energy/zeus#203).

AMD measurement behaviour: the energy accumulator counts in units of 15.3 uJ (``counter_resolution``
of ``amdsmi_get_energy_count``; rocm-smi shows counter 65628 as 1004108.41 uJ in ROCm/amdsmi#38) and
the driver refreshes its metrics at most every 1 ms, returning the cached value in between (a ROCm
maintainer in ROCm/legacy-rocm-build#1649, once ROCm/ROCm): the simulated counter and power are
published every 1 ms. MI300X reports ``current_socket_power`` but ``average_socket_power`` as "N/A",
the MI210 the average but not the current one (zeus#203), and the MI250X is assumed to report as the
MI210 (the same CDNA2 driver); the average's window is about 100 ms (a ROCm maintainer in
ROCm/ROC-smi#89: "could be around 100ms or so").

Not published, so assumed here: the power-cap minimums (MI300X 200 W; MI250X 200 W per package;
MI210 150 W: low enough for the main job's 60 % caps; a real node may refuse lower caps:
ROCm/legacy-rocm-build#5231 reports an MI300X whose driver would not go from 750 W to 500 W), the
idle powers (MI300X 150 W: rocm-smi showed 191 W at 0 % activity with its memory allocated in #5231;
MI250X 90 W per package, as zeus#203 read 88-93 W on idle primaries; MI210 40 W), the lowest engine
clock (500 MHz) and the memory clocks (MI300X 1,300 MHz, MI250X/MI210 1,600 MHz: the HBM data rates
halved).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

MODELS_ENV = "GPUENERGY_SIM_GPUS"      # the simulated machine's GPU models, e.g. H100,MI300X


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
    power_usage_average_s: float = 0.025     # nvmlDeviceGetPowerUsage's window (1 s on Ampere+); AMD: the average's
    vendor: str = "nvidia"                   # "amd": read through the simulated amdsmi, not NVML
    dies: int = 1                            # devices per board as the library lists them (MI250X: 2 GCDs)
    has_average_power: bool = True           # AMD: average_socket_power reported (not "N/A")
    gfx_target: str = ""                     # AMD: the ISA (gfx942, gfx90a)
    pci_device_id: int = 0                   # AMD: the PCI device id amdsmi_get_gpu_asic_info reports
    compute_units: int = 0                   # AMD: per device (per GCD on an MI250X)

    @property
    def sm_clock_min_fraction(self) -> float:
        return self.sm_clock_min_mhz / self.sm_clock_max_mhz

    @property
    def is_amd(self) -> bool:
        return self.vendor == "amd"


SIMULATED_SUFFIX = " (simulated)"
#: How AMD SMI publishes its readings (see the module's docstring): every 1 ms, the average over 100 ms.
_AMD_READINGS: dict[str, Any] = {"counter_period_s": 0.001, "power_window_s": 0.001, "power_publish_s": 0.001,
                       "power_usage_average_s": 0.1}

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
        GpuSpec(
            key="MI300X", name="AMD Instinct MI300X" + SIMULATED_SUFFIX, architecture="CDNA3",
            default_limit_w=750, min_limit_w=200, max_limit_w=750, idle_w=150,
            sm_clock_max_mhz=2100, sm_clock_min_mhz=500, sm_clock_idle_mhz=500, mem_clock_mhz=1300,
            compute_capability=(0, 0), fp32_tflops=163.4, tf32_tflops=653.7, fp16_tflops=1307.4, memory_gbs=5300.0,
            **_AMD_READINGS, has_average_power=False, vendor="amd", gfx_target="gfx942", pci_device_id=0x74A1,
            compute_units=304,
        ),
        GpuSpec(
            # One of the two GCDs: half of the board's 560 W (cap range 200-560 W), 90 W idle and figures.
            key="MI250X", name="AMD Instinct MI250X" + SIMULATED_SUFFIX, architecture="CDNA2",
            default_limit_w=280, min_limit_w=100, max_limit_w=280, idle_w=45,
            sm_clock_max_mhz=1700, sm_clock_min_mhz=500, sm_clock_idle_mhz=500, mem_clock_mhz=1600,
            compute_capability=(0, 0), fp32_tflops=23.95, tf32_tflops=47.85, fp16_tflops=191.5, memory_gbs=1638.4,
            **_AMD_READINGS, has_instant_power=False, vendor="amd", dies=2, gfx_target="gfx90a",
            pci_device_id=0x740C, compute_units=110,
        ),
        GpuSpec(
            key="MI210", name="AMD Instinct MI210" + SIMULATED_SUFFIX, architecture="CDNA2",
            default_limit_w=300, min_limit_w=150, max_limit_w=300, idle_w=40,
            sm_clock_max_mhz=1700, sm_clock_min_mhz=500, sm_clock_idle_mhz=500, mem_clock_mhz=1600,
            compute_capability=(0, 0), fp32_tflops=22.6, tf32_tflops=45.3, fp16_tflops=181.0, memory_gbs=1638.4,
            **_AMD_READINGS, has_instant_power=False, vendor="amd", gfx_target="gfx90a", pci_device_id=0x740F,
            compute_units=104,
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
