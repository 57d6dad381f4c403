"""The simulated NVML: a stand-in for the pynvml module over a simulated machine's NVIDIA GPUs.

``SimulatedNvml`` has the pynvml functions the plugin uses, with the same names, arguments, units
(mW, mJ, MHz) and error classes (pynvml's own ``NVMLError_*``), so the device code that drives a
real GPU is exactly the code that runs in CI. It lists the machine's NVIDIA GPUs only; the AMD ones
of a mixed machine are the simulated AMD SMI's (``amdsmi.py``), over the same machine (``machine.py``:
the clock, the declared work, the state, and the ``sim`` extras both libraries answer).

Readings are as coarse as real ones: the counter is published every ``counter_period_s`` (100 ms),
instant power is the average of a 25 ms window published every 100 ms, and ``nvmlDeviceGetPowerUsage``
averages 1 s on Hopper (``models.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import pynvml

from ..gpu.processes import is_alive
from .device import SimDevice
from .library import SimulatedLibrary
from .machine import DEFAULT_NOISE, SimDeviceHandle, SimulatedMachine, main_thread_cpu_clock

__all__ = ["DEFAULT_NOISE", "SimDeviceHandle", "SimulatedNvml", "main_thread_cpu_clock", "supported_sm_clocks"]

_DRIVER_VERSION = "simulated"


def _nvml_error(code: int) -> pynvml.NVMLError:
    return pynvml.NVMLError(code)


class SimulatedNvml(SimulatedLibrary):
    """Drop-in for the ``pynvml`` module: ``SimulatedNvml().nvmlDeviceGetCount()`` and so on."""

    vendor = "nvidia"

    def __init__(
        self,
        state_dir: Path | None = None,
        models: Sequence[str] | None = None,
        faults: str | None = None,
        noise_cv: float | None = None,
        seed: int | None = None,
        clock: str | None = None,
        cpu_clock: Callable[[], float] | None = None,
        *,
        machine: SimulatedMachine | None = None,
    ) -> None:
        super().__init__(machine, state_dir=state_dir, models=models, faults=faults, noise_cv=noise_cv, seed=seed,
                         clock=clock, cpu_clock=cpu_clock)

    def __getattr__(self, name: str) -> Any:
        # NVML_* constants and NVMLError_* classes come from pynvml itself.
        if name.startswith("NVML"):
            return getattr(pynvml, name)
        raise AttributeError(name)

    # -- library lifetime ----------------------------------------------------------------------
    def nvmlInit(self) -> None:
        self._open()

    def nvmlShutdown(self) -> None:
        self._close()

    def _not_initialised(self) -> Exception:
        return _nvml_error(pynvml.NVML_ERROR_UNINITIALIZED)

    def _invalid_argument(self) -> Exception:
        return _nvml_error(pynvml.NVML_ERROR_INVALID_ARGUMENT)

    def _fault_error(self, fault: str) -> Exception:
        return _nvml_error(pynvml.NVML_ERROR_GPU_IS_LOST if fault == "lost" else pynvml.NVML_ERROR_UNKNOWN)

    def _device(self, handle: SimDeviceHandle, fault_kind: str | None = None) -> SimDevice:
        """One of this library's devices, meeting its faults (``_any_device`` for either library's)."""
        self._require_init()
        device = self._own_device(handle)
        if device is None:
            raise self._invalid_argument()
        fault = self.machine.fault(device, fault_kind) if self.machine.faults else None
        if fault is not None:
            raise self._fault_error(fault)
        return device

    # -- system and enumeration ----------------------------------------------------------------
    def nvmlSystemGetDriverVersion(self) -> str:
        self._require_init()
        return _DRIVER_VERSION

    def nvmlDeviceGetCount(self) -> int:
        self._require_init()
        return len(self._devices)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> SimDeviceHandle:
        self._require_init()
        devices = self._devices
        if not isinstance(index, int) or not 0 <= index < len(devices):
            raise _nvml_error(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return self._handle(devices[index])

    def nvmlDeviceGetHandleByUUID(self, uuid: str) -> SimDeviceHandle:
        self._require_init()
        uuid = uuid.decode() if isinstance(uuid, bytes) else uuid
        for device in self._devices:
            if device.uuid == uuid:
                return self._handle(device)
        raise _nvml_error(pynvml.NVML_ERROR_NOT_FOUND)

    def nvmlDeviceGetName(self, handle: SimDeviceHandle) -> str:
        return self._device(handle).spec.name

    def nvmlDeviceGetUUID(self, handle: SimDeviceHandle) -> str:
        return self._device(handle).uuid

    def nvmlDeviceGetIndex(self, handle: SimDeviceHandle) -> int:
        return self._devices.index(self._device(handle))

    def nvmlDeviceGetCudaComputeCapability(self, handle: SimDeviceHandle) -> tuple[int, int]:
        return self._device(handle).spec.compute_capability

    def nvmlDeviceGetMigMode(self, handle: SimDeviceHandle) -> list[int]:
        self._device(handle)
        return [pynvml.NVML_DEVICE_MIG_DISABLE, pynvml.NVML_DEVICE_MIG_DISABLE]

    # -- power limits ------------------------------------------------------------------------
    def nvmlDeviceGetPowerManagementLimit(self, handle: SimDeviceHandle) -> int:
        with self.machine.lock:
            return self._device(handle, "read").state_file.read(fresh=True).limit_mw

    def nvmlDeviceGetEnforcedPowerLimit(self, handle: SimDeviceHandle) -> int:
        with self.machine.lock:
            device = self._device(handle, "read")
            return device.enforced_limit_mw(device.state_file.read(fresh=True))

    def nvmlDeviceGetPowerManagementDefaultLimit(self, handle: SimDeviceHandle) -> int:
        return int(self._device(handle).spec.default_limit_w * 1000)

    def nvmlDeviceGetPowerManagementLimitConstraints(self, handle: SimDeviceHandle) -> list[int]:
        spec = self._device(handle).spec
        return [int(spec.min_limit_w * 1000), int(spec.max_limit_w * 1000)]

    def nvmlDeviceSetPowerManagementLimit(self, handle: SimDeviceHandle, limit: int) -> None:
        with self.machine.lock:
            device = self._device(handle)
            if self.faults.fires("no_permission", device.index):
                raise _nvml_error(pynvml.NVML_ERROR_NO_PERMISSION)
            if self.faults.fires("set_error", device.index):
                raise _nvml_error(pynvml.NVML_ERROR_UNKNOWN)
            low, high = self.nvmlDeviceGetPowerManagementLimitConstraints(handle)
            if not isinstance(limit, int) or not low <= limit <= high:
                raise _nvml_error(pynvml.NVML_ERROR_INVALID_ARGUMENT)
            if self.faults.fires("set_ignored", device.index):
                return
            self.machine.set_limit(device, limit)

    # -- energy, power, clocks ---------------------------------------------------------------
    def nvmlDeviceGetTotalEnergyConsumption(self, handle: SimDeviceHandle) -> int:
        taken_at = self.machine.slow_read_moment()
        with self.machine.lock:
            device = self._device(handle, "read")
            if self.faults.has("no_counter", device.index) or not device.spec.has_energy_counter:
                raise _nvml_error(pynvml.NVML_ERROR_NOT_SUPPORTED)
            return self.machine.counter_reading(device, 1.0, taken_at)[0]     # whole mJ

    def nvmlDeviceGetPowerUsage(self, handle: SimDeviceHandle) -> int:
        with self.machine.lock:
            device = self._device(handle, "read")
            return device.average_power_mw(device.spec.power_usage_average_s)

    def nvmlDeviceGetFieldValues(self, handle: SimDeviceHandle, field_ids: Sequence[int]) -> Any:
        with self.machine.lock:
            device = self._device(handle, "read")
            values = (pynvml.c_nvmlFieldValue_t * len(field_ids))()
            timestamp_us = int(self.clock.now() * 1e6)
            for slot, field_id in zip(values, field_ids):
                slot.fieldId = field_id
                slot.timestamp = timestamp_us
                slot.valueType = pynvml.NVML_VALUE_TYPE_UNSIGNED_INT
                supported = device.spec.has_instant_power and not self.faults.has("no_instant_power", device.index)
                if field_id == pynvml.NVML_FI_DEV_POWER_INSTANT and supported:
                    slot.value.uiVal = device.average_power_mw(device.spec.power_window_s)
                    slot.nvmlReturn = pynvml.NVML_SUCCESS
                elif field_id == pynvml.NVML_FI_DEV_POWER_AVERAGE and supported:
                    slot.value.uiVal = device.average_power_mw(1.0)
                    slot.nvmlReturn = pynvml.NVML_SUCCESS
                else:
                    slot.nvmlReturn = pynvml.NVML_ERROR_NOT_SUPPORTED
            return values

    def nvmlDeviceGetClockInfo(self, handle: SimDeviceHandle, clock_type: int) -> int:
        with self.machine.lock:
            device = self._device(handle)
            state = device.advance()
            point = device.operating_point(state)
            if clock_type == pynvml.NVML_CLOCK_MEM:
                return int(point.mem_clock_mhz(device.spec) if device.is_busy() else device.spec.mem_clock_mhz)
            if clock_type in (pynvml.NVML_CLOCK_SM, pynvml.NVML_CLOCK_GRAPHICS):
                return int(point.sm_clock_mhz(device.spec) if device.is_busy() else device.spec.sm_clock_idle_mhz)
            raise _nvml_error(pynvml.NVML_ERROR_INVALID_ARGUMENT)

    def nvmlDeviceGetMaxClockInfo(self, handle: SimDeviceHandle, clock_type: int) -> int:
        spec = self._device(handle).spec
        if clock_type == pynvml.NVML_CLOCK_MEM:
            return int(spec.mem_clock_mhz)
        return int(spec.sm_clock_max_mhz)

    # -- SM clock locks (see ``clocks.py``; the DVFS model honours them) ----------------------------
    def nvmlDeviceGetSupportedMemoryClocks(self, handle: SimDeviceHandle) -> list[int]:
        return [int(self._device(handle).spec.mem_clock_mhz)]

    def nvmlDeviceGetSupportedGraphicsClocks(self, handle: SimDeviceHandle, memory_clock_mhz: int) -> list[int]:
        """The SM clocks the GPU can run at, highest first (NVML's order), in ``SM_CLOCK_STEP_MHZ`` steps."""
        spec = self._device(handle).spec
        if int(memory_clock_mhz) != int(spec.mem_clock_mhz):
            raise _nvml_error(pynvml.NVML_ERROR_NOT_FOUND)
        return supported_sm_clocks(spec)

    def nvmlDeviceSetGpuLockedClocks(self, handle: SimDeviceHandle, min_mhz: int, max_mhz: int) -> None:
        """Lock the SM clock to [min, max]: like the driver, each end snaps to a supported clock."""
        with self.machine.lock:
            device = self._device(handle)
            if self.faults.fires("no_permission", device.index):
                raise _nvml_error(pynvml.NVML_ERROR_NO_PERMISSION)
            if self.faults.fires("clock_set_error", device.index):
                raise _nvml_error(pynvml.NVML_ERROR_UNKNOWN)
            if not isinstance(min_mhz, int) or not isinstance(max_mhz, int) or not 0 < min_mhz <= max_mhz:
                raise _nvml_error(pynvml.NVML_ERROR_INVALID_ARGUMENT)
            clocks = supported_sm_clocks(device.spec)
            top = max([c for c in clocks if c <= max_mhz] or [clocks[-1]])
            bottom = min([c for c in clocks if c >= min_mhz] or [clocks[0]])
            bottom = min(bottom, top)
            device.advance()   # the energy so far was drawn at the old clocks
            device.state_file.update(lambda s: replace(s, locked_sm_min_mhz=bottom, locked_sm_max_mhz=top))

    def nvmlDeviceResetGpuLockedClocks(self, handle: SimDeviceHandle) -> None:
        with self.machine.lock:
            device = self._device(handle)
            if self.faults.fires("no_permission", device.index):
                raise _nvml_error(pynvml.NVML_ERROR_NO_PERMISSION)
            if self.faults.fires("clock_reset_error", device.index):
                raise _nvml_error(pynvml.NVML_ERROR_UNKNOWN)
            device.advance()
            device.state_file.update(lambda s: replace(s, locked_sm_min_mhz=0, locked_sm_max_mhz=0))

    def nvmlDeviceGetComputeRunningProcesses(self, handle: SimDeviceHandle) -> list:
        device = self._device(handle)
        return [pynvml.c_nvmlProcessInfo_v2_t(pid=pid, usedGpuMemory=0)
                for pid in device.state_file.process_ids() if is_alive(pid)]


SM_CLOCK_STEP_MHZ = 15    # Ampere and Hopper list their SM clocks in 15 MHz steps


def supported_sm_clocks(spec: Any) -> list[int]:
    """A simulated GPU's SM clocks in MHz, highest first: from the maximum down in steps, and the minimum."""
    top, bottom = int(spec.sm_clock_max_mhz), int(spec.sm_clock_min_mhz)
    clocks = list(range(top, bottom, -SM_CLOCK_STEP_MHZ))
    return clocks + [bottom]

