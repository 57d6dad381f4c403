"""NVIDIA GPUs through NVML: everything that knows pynvml (its calls, field values and errors).

The library object is ``pynvml`` on a real machine and ``sim.nvml.SimulatedNvml`` on the simulated
one: the same calls, units (mW, mJ, MHz) and error classes, so this module is the code that runs
in CI and on an H100 alike. NVML's errors are translated here, in ``_translated``, into the
package's own (``errors.DeviceError`` and its kinds), whose text keeps NVML's words ("NVML: Unknown
Error") for the callers' messages. Which errors are transient (``NVMLError_Unknown``,
``NVMLError_Timeout``: a busy driver) is decided here too; ``device.retry_transient`` retries them.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pynvml

from ..errors import (
    DeviceError,
    DeviceNotSupported,
    DevicePermissionError,
    DeviceTransientError,
    GpuLostError,
)
from .device import Gpu, OpenedLibrary, PowerLimits
from .visibility import hiding_variable

COUNTER_PERIOD_S = 0.1           # NVML's energy counter is published every 100 ms (its documentation)
INSTANT_POWER_WINDOW_S = 0.025   # NVML_FI_DEV_POWER_INSTANT on A100/H100 (Yang et al., SC'24)
AVERAGE_POWER_WINDOW_S = 1.0     # nvmlDeviceGetPowerUsage on Ampere and newer, except GA100 (NVML docs)

_TRANSIENT = (pynvml.NVMLError_Unknown, pynvml.NVMLError_Timeout)
_NOT_SUPPORTED = (pynvml.NVMLError_NotSupported, pynvml.NVMLError_FunctionNotFound)


def translate(exc: pynvml.NVMLError, gpu: Gpu | None = None) -> DeviceError:
    """The package's error for an NVML error: the one place where NVML's error kinds are told apart."""
    text = f"NVML: {exc}"
    if isinstance(exc, pynvml.NVMLError_GpuIsLost):
        return gpu.lost_error() if gpu is not None else GpuLostError(text)
    if isinstance(exc, pynvml.NVMLError_NoPermission):
        return DevicePermissionError(text)
    if isinstance(exc, _NOT_SUPPORTED):
        return DeviceNotSupported(text)
    if isinstance(exc, _TRANSIENT):
        return DeviceTransientError(text)
    return DeviceError(text)


@contextlib.contextmanager
def _translated(gpu: Gpu | None = None) -> Iterator[None]:
    try:
        yield
    except pynvml.NVMLError as exc:
        raise translate(exc, gpu) from None


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class NvmlGpu(Gpu):
    """One NVIDIA GPU, addressed by its NVML index (``nvml_index``) in ``nvml`` (pynvml or the simulator).

    ``backend``: ``nvml``, or ``sim`` where ``nvml`` is the simulator. ``index``: the plugin's (default: NVML's).
    """

    vendor = "nvidia"
    library = "nvml"

    def __init__(self, nvml: Any, nvml_index: int, backend: str = "nvml", *, index: int | None = None) -> None:
        self.nvml = nvml
        self.nvml_index = nvml_index
        with _translated():
            self.handle = nvml.nvmlDeviceGetHandleByIndex(nvml_index)
            name = _text(nvml.nvmlDeviceGetName(self.handle))
            uuid = _text(nvml.nvmlDeviceGetUUID(self.handle))
        super().__init__(nvml_index if index is None else index, name, uuid, simulated=backend == "sim")
        machine_index = getattr(nvml, "simMachineIndex", None) if self.simulated else None
        self.machine_index = int(machine_index(self.handle)) if machine_index is not None else nvml_index
        self._power_source: str | None = None
        self._mig: bool | None = None

    @property
    def library_index(self) -> int:
        return self.nvml_index

    # -- limits --------------------------------------------------------------------------------
    def limits(self) -> PowerLimits:
        nvml, handle = self.nvml, self.handle
        with _translated(self):
            low, high = nvml.nvmlDeviceGetPowerManagementLimitConstraints(handle)
            return PowerLimits(
                current_mw=int(nvml.nvmlDeviceGetPowerManagementLimit(handle)),
                enforced_mw=int(nvml.nvmlDeviceGetEnforcedPowerLimit(handle)),
                default_mw=int(nvml.nvmlDeviceGetPowerManagementDefaultLimit(handle)),
                min_mw=int(low),
                max_mw=int(high),
            )

    def current_limit_mw(self) -> int:
        with _translated(self):
            return int(self.nvml.nvmlDeviceGetPowerManagementLimit(self.handle))

    def enforced_limit_mw(self) -> int:
        with _translated(self):
            return int(self.nvml.nvmlDeviceGetEnforcedPowerLimit(self.handle))

    def set_limit_mw(self, limit_mw: int) -> int:
        """Set the limit with the v1 call (the v2 wrapper ignores errors); return what is enforced."""
        with _translated(self):
            self.nvml.nvmlDeviceSetPowerManagementLimit(self.handle, int(limit_mw))
        return self.enforced_limit_mw()

    # -- energy and power ----------------------------------------------------------------------
    def energy_mj(self) -> int:
        with _translated(self):
            return int(self.nvml.nvmlDeviceGetTotalEnergyConsumption(self.handle))

    @property
    def energy_resolution_mj(self) -> float:
        return 1.0       # nvmlDeviceGetTotalEnergyConsumption counts whole millijoules

    @property
    def counter_period_s(self) -> float:
        return COUNTER_PERIOD_S

    def power_mw(self) -> int:
        """Instant power: ``NVML_FI_DEV_POWER_INSTANT`` where supported, else ``GetPowerUsage``."""
        with _translated(self):
            if self._power_source in (None, "instant"):
                found = self.nvml.nvmlDeviceGetFieldValues(self.handle, [pynvml.NVML_FI_DEV_POWER_INSTANT])[0]
                if found.nvmlReturn == pynvml.NVML_SUCCESS:
                    self._power_source = "instant"
                    return int(found.value.uiVal)
                self._power_source = "usage"
            return int(self.nvml.nvmlDeviceGetPowerUsage(self.handle))

    @property
    def power_source(self) -> str:
        """Which reading ``power_mw`` uses: "instant" (the field value) or "usage"."""
        if self._power_source is None:
            self.power_mw()
        return self._power_source or "usage"

    @property
    def power_window_s(self) -> float:
        """25 ms for the instant field (A100/H100, Yang et al., SC'24) and for ``GetPowerUsage`` up to
        GA100; ``GetPowerUsage`` is a 1 s average on Ampere and newer except GA100 (NVML's documentation)."""
        if self.power_source == "instant":
            return INSTANT_POWER_WINDOW_S
        try:
            capability = tuple(self.nvml.nvmlDeviceGetCudaComputeCapability(self.handle))
        except Exception:  # an NVML without the call: assume the short window
            return INSTANT_POWER_WINDOW_S
        return AVERAGE_POWER_WINDOW_S if capability > (8, 0) else INSTANT_POWER_WINDOW_S

    # -- SM clocks (``device.SmClockLocking``) -------------------------------------------------------
    def supported_sm_clocks_mhz(self) -> tuple[int, ...]:
        """The SM clocks NVML lists at the highest memory clock, highest first."""
        with _translated(self):
            memory = max(int(m) for m in self.nvml.nvmlDeviceGetSupportedMemoryClocks(self.handle))
            found = self.nvml.nvmlDeviceGetSupportedGraphicsClocks(self.handle, memory)
        return tuple(sorted({int(c) for c in found}, reverse=True))

    def sm_clock_mhz(self) -> int:
        with _translated(self):
            return int(self.nvml.nvmlDeviceGetClockInfo(self.handle, pynvml.NVML_CLOCK_SM))

    @property
    def reads_clock_lock(self) -> bool:
        """Real NVML cannot read a clock lock back; the simulator can (``simGetGpuLockedClocks``)."""
        return getattr(self.nvml, "simGetGpuLockedClocks", None) is not None

    def sm_clock_lock_mhz(self) -> tuple[int, int] | None:
        """The lock in place (None: none); only where ``reads_clock_lock``."""
        with _translated(self):
            found = self.nvml.simGetGpuLockedClocks(self.handle)
        return None if found is None else (int(found[0]), int(found[1]))

    def lock_sm_clock_mhz(self, min_mhz: int, max_mhz: int) -> None:
        with _translated(self):
            self.nvml.nvmlDeviceSetGpuLockedClocks(self.handle, int(min_mhz), int(max_mhz))

    def unlock_sm_clock(self) -> None:
        with _translated(self):
            self.nvml.nvmlDeviceResetGpuLockedClocks(self.handle)

    # -- processes, MIG, state -------------------------------------------------------------------
    def processes(self) -> list[int]:
        """PIDs of the processes NVML sees running on this GPU (empty where it cannot tell)."""
        try:
            with _translated(self):
                found = self.nvml.nvmlDeviceGetComputeRunningProcesses(self.handle)
        except (DeviceNotSupported, DevicePermissionError):
            return []
        return sorted({int(p.pid) for p in found})

    def unmeasurable_reason(self) -> str | None:
        """A GPU in MIG mode (asked once: changing it needs a GPU reset): NVML has no energy per slice."""
        if self._mig is None:
            try:
                with _translated(self):
                    current, _pending = self.nvml.nvmlDeviceGetMigMode(self.handle)
            except DeviceNotSupported:
                current = None
            self._mig = current == pynvml.NVML_DEVICE_MIG_ENABLE
        if not self._mig:
            return None
        return ("is in MIG mode: NVML cannot measure the energy of a MIG slice; measure a whole GPU (disable MIG) "
                "or select another GPU with --gpu-devices")

    @property
    def simulated_state_file(self) -> Path | None:
        state_dir = getattr(self.nvml, "state_dir", None) if self.simulated else None
        return None if state_dir is None else Path(state_dir) / "gpus" / f"{self.uuid}.json"


def nvml_gpus(nvml: Any, *, simulated: bool, first_index: int = 0) -> list[NvmlGpu]:
    """Every GPU ``nvml`` (initialised) shows, with the plugin's indices from ``first_index``."""
    with _translated():
        count = int(nvml.nvmlDeviceGetCount())
    return [NvmlGpu(nvml, i, "sim" if simulated else "nvml", index=first_index + i) for i in range(count)]


def open_nvml(*, hidden_counts: bool = False, first_index: int = 0) -> OpenedLibrary | str:
    """NVML's GPUs, or why there are none. With ``hidden_counts``, GPUs that ``CUDA_VISIBLE_DEVICES=""``
    hides all of count as none found."""
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        return f"NVML is not available ({exc})"
    try:
        count = pynvml.nvmlDeviceGetCount()
        hiding = hiding_variable("nvml") if hidden_counts else None
        if count == 0 or hiding is not None:
            pynvml.nvmlShutdown()
            return "NVML finds no GPU" if count == 0 else f"{hiding} hides every GPU"
        gpus = nvml_gpus(pynvml, simulated=False, first_index=first_index)
        driver = _text(pynvml.nvmlSystemGetDriverVersion())
    except (pynvml.NVMLError, DeviceError) as exc:
        with contextlib.suppress(pynvml.NVMLError):
            pynvml.nvmlShutdown()
        return f"NVML cannot list its GPUs ({exc})"
    return OpenedLibrary(gpus, driver, _shutdown, cuda_driver_version=cuda_driver_version(pynvml))


def _shutdown() -> None:
    with contextlib.suppress(pynvml.NVMLError):
        pynvml.nvmlShutdown()


def cuda_driver_version(nvml: Any) -> str | None:
    """The CUDA version the driver supports, as ``12.4`` (NVML says 12040), where NVML tells it."""
    getter = getattr(nvml, "nvmlSystemGetCudaDriverVersion", None)
    if getter is None:
        return None
    try:
        version = int(getter())
    except Exception:       # an NVML without the call, or an answer that is no number: not known
        return None
    return f"{version // 1000}.{version % 1000 // 10}"
