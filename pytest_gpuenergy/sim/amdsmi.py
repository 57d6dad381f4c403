"""The simulated AMD SMI: a stand-in for the ``amdsmi`` Python module over a machine's AMD GPUs.

``SimulatedAmdSmi`` has the ``amdsmi`` functions the plugin needs, with their names, arguments, return
dictionaries, units and errors as in AMD SMI's Python binding (checked against amdsmi 7.0.2's
``amdsmi_interface.py`` and ROCm's API reference), so the code that drives a real AMD GPU is the code
that runs in CI. It lists the machine's AMD GPUs only, over the machine it shares with the simulated
NVML (``machine.py``); the real ``amdsmi`` need not be installed: its errors and constants are
reproduced here under the same names and codes.

Units and shapes, as AMD SMI gives them:

* ``amdsmi_get_energy_count``: ``{"energy_accumulator": counts, "counter_resolution": 15.3 (uJ per
  count, a float32), "timestamp": ns}``; energy = accumulator x resolution (the key was ``power``
  before amdsmi 6.2.1). Published every 1 ms (``models.py``).
* ``amdsmi_get_power_info``: ``socket_power``, ``current_socket_power``, ``average_socket_power`` in W
  (whole watts) or ``"N/A"`` where the model does not report it; ``power_limit`` in W; voltages "N/A".
* ``amdsmi_get_power_cap_info``: ``power_cap`` (the enforced cap), ``default_power_cap``,
  ``min_power_cap``, ``max_power_cap`` in micro-watts, ``dpm_cap`` in MHz.
  ``amdsmi_set_power_cap(handle, 0, cap_uw)``: the driver takes whole watts (amdgpu divides the
  micro-watts by 10^6), refuses a cap outside the range (``AMDSMI_STATUS_INVAL``) and needs root.
* An MI250X is two devices; the second die reports 0 W, an accumulator of 0 and a cap of 0, and
  refuses caps: the first die's cap holds the whole board (``models.py``).

Faults (``GPUENERGY_SIM_FAULTS``, ``faults.py``) in AMD SMI's words: ``no_permission`` raises
``AMDSMI_STATUS_NO_PERM``; ``no_counter`` ``AMDSMI_STATUS_NOT_SUPPORTED`` from the energy count;
``no_instant_power`` makes every power reading "N/A"; ``set_error`` and ``read_error`` raise
``AMDSMI_STATUS_UNKNOWN_ERROR``; ``lost`` raises ``AMDSMI_STATUS_NOT_FOUND`` (the device is gone);
``counter_stuck`` repeats the accumulator, as reported on MI100s (ROCm/amdsmi#22, #38);
``counter_reset``, ``counter_backwards``, ``set_ignored``, ``limit_rounded`` and ``limit_clamped`` as on
NVML. Clock locks are NVML's only here.
"""

from __future__ import annotations

import ctypes
import enum
from types import SimpleNamespace
from typing import Any

from ..gpu.processes import is_alive
from .device import SimDevice
from .library import SimulatedLibrary
from .machine import SimDeviceHandle

#: AMD SMI's status codes (``amdsmi.amdsmi_wrapper``), the ones the simulator raises or callers test.
STATUS_CODES = {
    "AMDSMI_STATUS_SUCCESS": 0, "AMDSMI_STATUS_INVAL": 1, "AMDSMI_STATUS_NOT_SUPPORTED": 2,
    "AMDSMI_STATUS_API_FAILED": 7, "AMDSMI_STATUS_TIMEOUT": 8, "AMDSMI_STATUS_RETRY": 9, "AMDSMI_STATUS_NO_PERM": 10,
    "AMDSMI_STATUS_INIT_ERROR": 18, "AMDSMI_STATUS_BUSY": 30, "AMDSMI_STATUS_NOT_FOUND": 31,
    "AMDSMI_STATUS_NOT_INIT": 32, "AMDSMI_STATUS_DRIVER_NOT_LOADED": 34, "AMDSMI_STATUS_NO_DATA": 40,
    "AMDSMI_STATUS_UNKNOWN_ERROR": 4294967295,
}
_MESSAGES = {
    1: "Invalid parameters", 2: "Feature not supported", 7: "API call failed", 8: "Timeout in API call",
    9: "Retry operation", 10: "Permission Denied", 18: "Initialization error", 30: "Device busy",
    31: "Device Not found", 32: "Device not initialized", 34: "Driver not loaded",
    40: "No data was found for given input", 4294967295: "An unknown error occurred",
}
_NAMES = {code: name for name, code in STATUS_CODES.items()}
#: ``counter_resolution`` as the binding returns it: the float32 15.3 (uJ per count).
COUNTER_RESOLUTION_UJ = ctypes.c_float(15.3).value
_NOT_AVAILABLE = "N/A"
_DRIVER_VERSION = "simulated"
_AMD_VENDOR_ID = 0x1002


class AmdSmiException(Exception):
    """Base of AMD SMI's errors (``amdsmi.AmdSmiException``)."""


class AmdSmiLibraryException(AmdSmiException):
    """A status other than success from the library (``amdsmi.AmdSmiLibraryException``)."""

    def __init__(self, err_code: int) -> None:
        err_code = abs(err_code)
        super().__init__(err_code)
        self.err_code = err_code
        name = _NAMES.get(err_code, "AMDSMI_STATUS_UNKNOWN_ERROR")
        self.err_info = f"{name} - {_MESSAGES.get(err_code, _MESSAGES[4294967295])}"

    def __str__(self) -> str:
        return f"Error code:\n\t{self.err_code} | {self.err_info}"

    def get_error_code(self) -> int:
        return self.err_code

    def get_error_info(self, detailed: bool = True) -> str:
        return self.err_info if detailed else self.err_info.split(" - ")[0]


class AmdSmiParameterException(AmdSmiException):
    """An argument of the wrong type, refused by the binding before the library sees it."""

    def __init__(self, received: Any, expected: Any) -> None:
        super().__init__(f"Invalid parameter:\nActual type: {type(received)}\nExpected type: {expected}")
        self.err_code = None


class AmdSmiInitFlags(enum.IntEnum):
    INIT_ALL_PROCESSORS = 4294967295
    INIT_AMD_CPUS = 1
    INIT_AMD_GPUS = 2
    INIT_AMD_APUS = 3
    INIT_NON_AMD_CPUS = 4
    INIT_NON_AMD_GPUS = 8


class AmdSmiClkType(enum.IntEnum):
    SYS = 0
    GFX = 0
    DF = 1
    DCEF = 2
    SOC = 3
    MEM = 4
    PCIE = 5


_MODULE_NAMES: dict[str, Any] = {
    "AmdSmiException": AmdSmiException, "AmdSmiLibraryException": AmdSmiLibraryException,
    "AmdSmiParameterException": AmdSmiParameterException, "AmdSmiInitFlags": AmdSmiInitFlags,
    "AmdSmiClkType": AmdSmiClkType, "amdsmi_wrapper": SimpleNamespace(**STATUS_CODES), **STATUS_CODES,
}


def _error(name: str) -> AmdSmiLibraryException:
    return AmdSmiLibraryException(STATUS_CODES[name])


class SimulatedAmdSmi(SimulatedLibrary):
    """Drop-in for the ``amdsmi`` module: ``SimulatedAmdSmi(machine).amdsmi_get_processor_handles()``."""

    vendor = "amd"     # constructed as its base: SimulatedAmdSmi(machine) or SimulatedAmdSmi(state_dir=..., ...)

    def __getattr__(self, name: str) -> Any:
        # What the module has besides its functions: its error classes, enumerations and status codes
        # (``amdsmi.AmdSmiLibraryException``, ``amdsmi.AmdSmiClkType.GFX``, ``amdsmi.amdsmi_wrapper.AMDSMI_STATUS_NO_PERM``).
        if name in _MODULE_NAMES:
            return _MODULE_NAMES[name]
        raise AttributeError(name)

    # -- library lifetime ----------------------------------------------------------------------------
    def amdsmi_init(self, flag: AmdSmiInitFlags = AmdSmiInitFlags.INIT_AMD_GPUS) -> None:
        if not isinstance(flag, AmdSmiInitFlags):
            raise AmdSmiParameterException(flag, AmdSmiInitFlags)
        self._open()

    def amdsmi_shut_down(self) -> None:
        self._close()

    def _not_initialised(self) -> Exception:
        return _error("AMDSMI_STATUS_NOT_INIT")

    def _invalid_argument(self) -> Exception:
        return _error("AMDSMI_STATUS_INVAL")

    def _fault_error(self, fault: str) -> Exception:
        return _error("AMDSMI_STATUS_NOT_FOUND" if fault == "lost" else "AMDSMI_STATUS_UNKNOWN_ERROR")

    def _uuid(self, device: SimDevice) -> str:
        return device.uuid.removeprefix("GPU-")       # AMD SMI's UUIDs carry no prefix

    def _device(self, handle: Any, fault_kind: str | None = None) -> SimDevice:
        if not isinstance(handle, SimDeviceHandle):
            raise AmdSmiParameterException(handle, SimDeviceHandle)
        self._require_init()
        if self._own_device(handle) is None:
            raise self._invalid_argument()
        return self._any_device(handle, fault_kind)

    # -- enumeration and identity --------------------------------------------------------------------
    def amdsmi_get_processor_handles(self) -> list[SimDeviceHandle]:
        self._require_init()
        return [self._handle(device) for device in self._devices]

    def amdsmi_get_gpu_device_uuid(self, handle: SimDeviceHandle) -> str:
        return self._uuid(self._device(handle))

    def amdsmi_get_gpu_device_bdf(self, handle: SimDeviceHandle) -> str:
        device = self._device(handle)
        return f"0000:{0x0C + 0x10 * device.index:02x}:00.0"

    def amdsmi_get_gpu_asic_info(self, handle: SimDeviceHandle) -> dict[str, Any]:
        device = self._device(handle)
        spec = device.spec
        return {
            "market_name": spec.name, "vendor_id": hex(_AMD_VENDOR_ID),
            "vendor_name": "Advanced Micro Devices Inc. [AMD/ATI]", "subvendor_id": hex(_AMD_VENDOR_ID),
            "device_id": hex(spec.pci_device_id), "rev_id": "0x00",
            "asic_serial": f"0x{int(self._uuid(device).replace('-', '')[:16], 16):016X}",
            "oam_id": device.primary_index, "num_compute_units": spec.compute_units,
            "target_graphics_version": spec.gfx_target, "subsystem_id": "0x0000",
        }

    def amdsmi_get_gpu_driver_info(self, handle: SimDeviceHandle) -> dict[str, str]:
        self._device(handle)
        return {"driver_name": "amdgpu", "driver_version": _DRIVER_VERSION, "driver_date": _NOT_AVAILABLE}

    def amdsmi_get_gpu_compute_partition(self, handle: SimDeviceHandle) -> str:
        """The compute partition: "SPX" (the GPU whole) on an MI300X; the MI200s have none."""
        device = self._device(handle)
        if device.spec.architecture != "CDNA3":
            raise _error("AMDSMI_STATUS_NOT_SUPPORTED")
        return "SPX"

    # -- energy and power ------------------------------------------------------------------------------
    def amdsmi_get_energy_count(self, handle: SimDeviceHandle) -> dict[str, Any]:
        """The accumulator as last published, in counts of ``counter_resolution`` uJ; ns timestamp."""
        taken_at = self.machine.slow_read_moment()
        with self.machine.lock:
            device = self._device(handle, "read")
            if self.faults.has("no_counter", device.index) or not device.spec.has_energy_counter:
                raise _error("AMDSMI_STATUS_NOT_SUPPORTED")
            counts, published = self.machine.counter_reading(device, COUNTER_RESOLUTION_UJ / 1000.0, taken_at)
            return {"energy_accumulator": counts, "counter_resolution": COUNTER_RESOLUTION_UJ,
                    "timestamp": max(int(round(published * 1e9)), 0)}

    def amdsmi_get_power_info(self, handle: SimDeviceHandle) -> dict[str, Any]:
        """Socket power in whole watts: the current one (MI300X) or the average (MI200), else "N/A"."""
        with self.machine.lock:
            device = self._device(handle, "read")
            spec = device.spec
            reported = not self.faults.has("no_instant_power", device.index)
            current: int | str = _NOT_AVAILABLE
            average: int | str = _NOT_AVAILABLE
            if reported and spec.has_instant_power:
                current = self._watts(device, spec.power_window_s)
            if reported and spec.has_average_power:
                average = self._watts(device, spec.power_usage_average_s)
            socket = current if current != _NOT_AVAILABLE else average
            limit_w = self._cap_uw(device) // 1_000_000
            return {"socket_power": socket, "current_socket_power": current, "average_socket_power": average,
                    "gfx_voltage": _NOT_AVAILABLE, "soc_voltage": _NOT_AVAILABLE, "mem_voltage": _NOT_AVAILABLE,
                    "power_limit": limit_w}

    @staticmethod
    def _watts(device: SimDevice, window_s: float) -> int:
        if device.die:          # the second die of an MI250X: its power shows on the first
            return 0
        return int(round(device.average_power_mw(window_s) / 1000.0))

    # -- the power cap -----------------------------------------------------------------------------------
    def _cap_uw(self, device: SimDevice) -> int:
        """The board's enforced cap in uW (0 on an MI250X's second die, as the driver shows it)."""
        if device.die:
            return 0
        return device.enforced_limit_mw(device.state_file.read(fresh=True)) * device.spec.dies * 1000

    def amdsmi_get_power_cap_info(self, handle: SimDeviceHandle) -> dict[str, int]:
        with self.machine.lock:
            device = self._device(handle, "read")
            spec = device.spec
            board = spec.dies * 1_000_000
            return {
                "power_cap": self._cap_uw(device),
                "default_power_cap": 0 if device.die else int(spec.default_limit_w * board),
                "dpm_cap": int(spec.sm_clock_max_mhz),
                "min_power_cap": int(spec.min_limit_w * board),
                "max_power_cap": int(spec.max_limit_w * board),
            }

    def amdsmi_set_power_cap(self, handle: SimDeviceHandle, sensor_ind: int, cap: int) -> None:
        """Cap the board at ``cap`` uW (whole watts: the driver drops the rest), through sensor 0."""
        if not isinstance(sensor_ind, int):
            raise AmdSmiParameterException(sensor_ind, int)
        if not isinstance(cap, int) or isinstance(cap, bool):
            raise AmdSmiParameterException(cap, int)
        with self.machine.lock:
            device = self._device(handle)
            if self.faults.fires("no_permission", device.index):
                raise _error("AMDSMI_STATUS_NO_PERM")
            if self.faults.fires("set_error", device.index):
                raise _error("AMDSMI_STATUS_UNKNOWN_ERROR")
            spec = device.spec
            cap_w = cap // 1_000_000
            low_w, high_w = spec.min_limit_w * spec.dies, spec.max_limit_w * spec.dies
            if sensor_ind != 0 or device.die or not low_w <= cap_w <= high_w:
                raise _error("AMDSMI_STATUS_INVAL")     # a second die takes no cap: "only through primary die"
            if self.faults.fires("set_ignored", device.index):
                return
            self.machine.set_limit(device, cap_w * 1000 // spec.dies)

    # -- clocks and processes ---------------------------------------------------------------------------
    def amdsmi_get_clock_info(self, handle: SimDeviceHandle, clock_type: AmdSmiClkType) -> dict[str, Any]:
        """The graphics (``GFX``) or memory (``MEM``) clock in MHz, with its range."""
        if not isinstance(clock_type, AmdSmiClkType):
            raise AmdSmiParameterException(clock_type, AmdSmiClkType)
        with self.machine.lock:
            device = self._device(handle)
            spec = device.spec
            point = device.operating_point(device.advance())
            busy = device.is_busy()
            if clock_type == AmdSmiClkType.GFX:
                now = point.sm_clock_mhz(spec) if busy else spec.sm_clock_idle_mhz
                low, high = spec.sm_clock_min_mhz, spec.sm_clock_max_mhz
            elif clock_type == AmdSmiClkType.MEM:
                now = point.mem_clock_mhz(spec) if busy else spec.mem_clock_mhz
                low = high = spec.mem_clock_mhz
            else:
                raise _error("AMDSMI_STATUS_NOT_SUPPORTED")
            return {"clk": int(now), "min_clk": int(low), "max_clk": int(high), "clk_locked": False,
                    "clk_deep_sleep": _NOT_AVAILABLE}

    def amdsmi_get_gpu_process_list(self, handle: SimDeviceHandle) -> list[dict[str, Any]]:
        """The processes that run work on the GPU (those that said so: ``simUseDevices``)."""
        device = self._device(handle)
        return [{"name": "python", "pid": pid, "mem": 0, "engine_usage": {"gfx": 0, "enc": 0},
                 "memory_usage": {"gtt_mem": 0, "cpu_mem": 0, "vram_mem": 0}, "cu_occupancy": _NOT_AVAILABLE}
                for pid in device.state_file.process_ids() if is_alive(pid)]
