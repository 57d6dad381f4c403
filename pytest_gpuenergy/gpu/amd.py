"""AMD GPUs through AMD SMI: everything that knows the ``amdsmi`` Python package (calls, units, errors).

``amdsmi`` is an optional extra (``pip install 'pytest-gpuenergy[amd]'``; ROCm installs the package
itself as ``/opt/rocm/share/amd_smi``) and is imported only when an AMD backend is asked for. The
simulator stands in for it at the same API (``sim/amdsmi.py``). What the calls return, from AMD SMI's
documentation (rocm.docs.amd.com/projects/amdsmi, "Power Queries", "Power Control",
``amdsmi_power_cap_info_t``) and its Python interface (ROCm/amdsmi ``py-interface/amdsmi_interface.py``):

* ``amdsmi_get_energy_count(h)``: ``energy_accumulator`` (named ``power`` before amdsmi 6.2.1; both are
  read) counts units of ``counter_resolution`` micro-joules (about 15.3 uJ): energy = accumulator x
  resolution. The driver reads its metrics at most every millisecond and returns the cached value in
  between (an AMD SMI maintainer in ROCm/ROCm#1649, now ROCm/legacy-rocm-build#1649), so
  ``counter_period_s`` is 1 ms, not NVML's 100 ms. Reported to repeat the same value however busy the
  GPU (ROCm/amdsmi#22, MI100 on ROCm 6.0.2, fixed in 6.1; AMDResearch/hpcfund#21; ROCm/amdsmi#38) and to
  go backwards under concurrent readers (ROCm/amdsmi#115): the meter treats both as it treats NVML's
  (``meter/region.py``, ``meter/integrate.py``): no figure, and a message that says why.
* ``amdsmi_get_power_cap_info(h)``: ``power_cap``, ``default_power_cap``, ``min_power_cap``,
  ``max_power_cap`` in MICRO-watts on bare-metal Linux; ``amdsmi_set_power_cap(h, 0, cap_uw)`` takes
  micro-watts (an ``int``). AMD has no separate "enforced" limit: the cap read back is the one enforced.
* ``amdsmi_get_power_info(h)``: ``current_socket_power`` (instantaneous, MI300), ``average_socket_power``
  (MI200 and older; ROCm/pytorch#1457 shows both sides' "N/A") and, from ROCm 7.0, ``socket_power``, in WATTS, or the string ``"N/A"`` where a
  GPU lacks one (the binding turns 0xFFFF into "N/A"): the first that answers, in that order, is used
  and results record which (``power_source``).
* Errors: ``AmdSmiLibraryException`` (``get_error_code()``; ``AmdSmiRetryException`` and
  ``AmdSmiTimeoutException`` derive from it) with AMD SMI's status codes, translated in ``translate``.
  A handle that was found and then reads ``NOT_FOUND`` is a lost GPU.
* An MI250X shows as two devices (its two dies): the secondary one reads zero energy and power and
  has no cap of its own (amdgpu: "Power limit can be set only through primary die"); its figures are
  the primary's.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ..errors import (
    DeviceError,
    DeviceNotSupported,
    DevicePermissionError,
    DeviceTransientError,
)
from .device import Gpu, OpenedLibrary, PowerLimits
from .visibility import hiding_variable

COUNTER_PERIOD_S = 0.001        # the accumulator's refresh (metrics cached 1 ms; ROCm/ROCm#1649)
CURRENT_POWER_WINDOW_S = 0.001  # current_socket_power: the last metrics sample
# average_socket_power: "the average power consumed by the GPU in the last sample window. This could
# be around 100ms or so" (an AMD maintainer, ROCm/ROC-smi#89); AMD SMI documents no window.
AVERAGE_POWER_WINDOW_S = 0.1
# Which reading: the instantaneous one (MI300), else the average (MI200 and older), else ROCm 7's
# ``socket_power`` (whichever of the two the GPU has).
_POWER_FIELDS = ("current_socket_power", "average_socket_power", "socket_power")
_POWER_SOURCES = {"current_socket_power": "current", "socket_power": "socket", "average_socket_power": "average"}

# AMD SMI's status codes (amdsmi_wrapper.AMDSMI_STATUS_*; the same numbers in every release since 6.0).
STATUS_NOT_SUPPORTED = 2
STATUS_NOT_YET_IMPLEMENTED = 3
STATUS_TIMEOUT = 8
STATUS_RETRY = 9
STATUS_NO_PERM = 10
STATUS_INTERRUPT = 11
STATUS_BUSY = 30
STATUS_NOT_FOUND = 31
STATUS_UNKNOWN_ERROR = 0xFFFFFFFF
# A busy or interrupted driver, and (as NVML's "Unknown Error" is here) an unknown error: worth another try.
_TRANSIENT = (STATUS_TIMEOUT, STATUS_RETRY, STATUS_INTERRUPT, STATUS_BUSY, STATUS_UNKNOWN_ERROR)


def translate(exc: Exception, gpu: Gpu | None = None) -> DeviceError:
    """The package's error for an AMD SMI error: the one place where AMD SMI's error kinds are told apart."""
    code = _code_of(exc)
    text = f"AMD SMI: {_message_of(exc)}"
    if code == STATUS_NOT_FOUND and gpu is not None:
        return gpu.lost_error()
    if code == STATUS_NO_PERM:
        return DevicePermissionError(text)
    if code in (STATUS_NOT_SUPPORTED, STATUS_NOT_YET_IMPLEMENTED):
        return DeviceNotSupported(text)
    if code in _TRANSIENT:
        return DeviceTransientError(text)
    return DeviceError(text)


def _code_of(exc: Exception) -> int | None:
    getter = getattr(exc, "get_error_code", None)
    code = getter() if callable(getter) else getattr(exc, "err_code", None)
    try:
        return int(code) if code is not None else None
    except (TypeError, ValueError):
        return None


def _message_of(exc: Exception) -> str:
    info = getattr(exc, "err_info", None)
    return str(info) if info else str(exc) or type(exc).__name__


class AmdGpu(Gpu):
    """One AMD GPU (or one die of an MI250X), addressed by its AMD SMI handle in ``amdsmi``.

    ``amd_index``: its place among AMD SMI's GPUs (what ``ROCR_VISIBLE_DEVICES`` counts); ``index``: the plugin's.
    """

    vendor = "amd"
    library = "amdsmi"

    def __init__(self, amdsmi: Any, handle: Any, amd_index: int, *, index: int, simulated: bool) -> None:
        self.amdsmi = amdsmi
        self.handle = handle
        self.amd_index = amd_index
        with self._translated(None):
            name = str(amdsmi.amdsmi_get_gpu_asic_info(handle).get("market_name") or "AMD GPU")
            uuid = str(amdsmi.amdsmi_get_gpu_device_uuid(handle))
        # The journals and locks name a GPU by a "GPU-" uuid, as rocminfo and ROCR_VISIBLE_DEVICES write
        # AMD's; AMD SMI returns its uuid without the prefix.
        super().__init__(index, name, uuid if uuid.startswith("GPU-") else f"GPU-{uuid}", simulated=simulated)
        machine_index = getattr(amdsmi, "simMachineIndex", None) if simulated else None
        self.machine_index = int(machine_index(handle)) if machine_index is not None else amd_index
        self._power_field: str | None = None

    @contextlib.contextmanager
    def _translated(self, gpu: Gpu | None) -> Iterator[None]:
        try:
            yield
        except _library_exception(self.amdsmi) as exc:
            raise translate(exc, gpu) from None

    @property
    def library_index(self) -> int:
        return self.amd_index

    # -- limits (AMD SMI: micro-watts) -----------------------------------------------------------
    def _cap_info(self) -> dict[str, Any]:
        with self._translated(self):
            return dict(self.amdsmi.amdsmi_get_power_cap_info(self.handle))

    def limits(self) -> PowerLimits:
        info = self._cap_info()
        current_mw = _uw_to_mw(info["power_cap"])
        return PowerLimits(current_mw=current_mw, enforced_mw=current_mw, default_mw=_uw_to_mw(info["default_power_cap"]),
                           min_mw=_uw_to_mw(info["min_power_cap"]), max_mw=_uw_to_mw(info["max_power_cap"]))

    def current_limit_mw(self) -> int:
        return _uw_to_mw(self._cap_info()["power_cap"])

    def enforced_limit_mw(self) -> int:
        return self.current_limit_mw()

    def set_limit_mw(self, limit_mw: int) -> int:
        """Set the cap (sensor 0, micro-watts); return the cap read back."""
        with self._translated(self):
            self.amdsmi.amdsmi_set_power_cap(self.handle, 0, int(limit_mw) * 1000)
        return self.enforced_limit_mw()

    # -- energy and power ------------------------------------------------------------------------
    def _energy_count(self) -> tuple[int, float]:
        with self._translated(self):
            found = self.amdsmi.amdsmi_get_energy_count(self.handle)
        accumulator = found.get("energy_accumulator", found.get("power"))
        if accumulator is None:
            raise DeviceNotSupported(f"AMD SMI: amdsmi_get_energy_count returned no accumulator ({sorted(found)})")
        return int(accumulator), float(found["counter_resolution"])

    def energy_mj(self) -> int:
        """accumulator x counter_resolution (uJ), in whole millijoules."""
        accumulator, resolution_uj = self._energy_count()
        return int(accumulator * resolution_uj // 1000)

    @property
    def energy_resolution_mj(self) -> float:
        _, resolution_uj = self._energy_count()
        return max(resolution_uj / 1000.0, 1.0)     # energy_mj counts whole millijoules

    @property
    def counter_period_s(self) -> float:
        return COUNTER_PERIOD_S

    def power_mw(self) -> int:
        """The first power field that answers (``_POWER_FIELDS``), watts in AMD SMI, in milliwatts."""
        with self._translated(self):
            info = self.amdsmi.amdsmi_get_power_info(self.handle)
        fields = (self._power_field,) if self._power_field is not None else _POWER_FIELDS
        for name in fields:
            value = info.get(name)
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                self._power_field = name
                return int(round(float(value) * 1000))
        raise DeviceNotSupported(f"AMD SMI: amdsmi_get_power_info gives no power reading ({info})")

    @property
    def power_source(self) -> str:
        """Which field ``power_mw`` reads: "current", "socket" or "average" (AMD SMI's ``*_socket_power``)."""
        if self._power_field is None:
            with contextlib.suppress(DeviceError):
                self.power_mw()
        return _POWER_SOURCES.get(self._power_field or "", "average")

    @property
    def power_window_s(self) -> float:
        return AVERAGE_POWER_WINDOW_S if self.power_source == "average" else CURRENT_POWER_WINDOW_S

    # -- processes, partitions ---------------------------------------------------------------------
    def processes(self) -> list[int]:
        """PIDs from ``amdsmi_get_gpu_process_list`` (dicts with ``pid`` since ROCm 6.1); empty where it cannot tell."""
        try:
            with self._translated(self):
                found = self.amdsmi.amdsmi_get_gpu_process_list(self.handle)
        except (DeviceNotSupported, DevicePermissionError):
            return []
        pids = {int(p["pid"]) if isinstance(p, dict) else int(getattr(p, "pid", p)) for p in found}
        return sorted(pids)

    def unmeasurable_reason(self) -> str | None:
        """The second die of an MI250X (a default cap of 0: its package's energy, power and cap are the
        first die's), or a GPU split into compute partitions (CPX and the like; SPX is the whole GPU)."""
        if self._cap_info()["default_power_cap"] == 0:
            return ("is the second die of an MI250X: AMD SMI reports the package's energy and power on its first "
                    "die (the GPU listed just before it), whose figures cover both dies; select that one with "
                    "--gpu-devices")
        getter = getattr(self.amdsmi, "amdsmi_get_gpu_compute_partition", None)
        if getter is None:
            return None
        try:
            with self._translated(self):
                mode = str(getter(self.handle)).strip()
        except DeviceNotSupported:
            return None
        if mode.upper() in ("", "SPX", "N/A"):
            return None
        return (f"is split into compute partitions ({mode}): AMD SMI's energy counter covers the whole GPU; measure "
                f"it unpartitioned (SPX) or select another GPU with --gpu-devices")

    @property
    def simulated_state_file(self) -> Path | None:
        state_dir = getattr(self.amdsmi, "state_dir", None) if self.simulated else None
        return None if state_dir is None else Path(state_dir) / "gpus" / f"{self.uuid}.json"


def _uw_to_mw(value: Any) -> int:
    return int(value) // 1000


def _library_exception(amdsmi: Any) -> type[Exception]:
    found = getattr(amdsmi, "AmdSmiLibraryException", None)
    return found if isinstance(found, type) and issubclass(found, Exception) else _NeverRaised


class _NeverRaised(Exception):
    """Stands for the library's exception class where a library object lacks one (never raised)."""


def amd_gpus(amdsmi: Any, *, simulated: bool, first_index: int = 0) -> list[AmdGpu]:
    """Every GPU ``amdsmi`` (initialised) shows, with the plugin's indices from ``first_index``."""
    try:
        handles = list(amdsmi.amdsmi_get_processor_handles())
    except _library_exception(amdsmi) as exc:
        raise translate(exc) from None
    return [AmdGpu(amdsmi, handle, i, index=first_index + i, simulated=simulated) for i, handle in enumerate(handles)]


def open_amdsmi(*, hidden_counts: bool = False, first_index: int = 0) -> OpenedLibrary | str:
    """AMD SMI's GPUs, or why there are none. With ``hidden_counts``, GPUs that ``ROCR_VISIBLE_DEVICES=""``
    (or ``HIP_VISIBLE_DEVICES=""``, or ``CUDA_VISIBLE_DEVICES=""`` without HIP's) hides all of count as none found."""
    try:
        import amdsmi
    except ImportError:
        return "the amdsmi package is not installed"
    try:
        amdsmi.amdsmi_init()      # its default: AMD GPUs only
    except Exception as exc:    # the library's own or a missing libamd_smi.so (OSError, KeyError in some releases)
        return f"AMD SMI is not available ({exc})"
    hiding = hiding_variable("amdsmi") if hidden_counts else None
    try:
        gpus = amd_gpus(amdsmi, simulated=False, first_index=first_index)
        driver = str(amdsmi.amdsmi_get_gpu_driver_info(gpus[0].handle).get("driver_version")) if gpus else ""
    except (DeviceError, amdsmi.AmdSmiLibraryException) as exc:
        _shutdown(amdsmi)
        return f"AMD SMI cannot list its GPUs ({exc})"
    if not gpus or hiding is not None:
        _shutdown(amdsmi)
        return "AMD SMI finds no GPU" if not gpus else f"{hiding} hides every GPU"
    return OpenedLibrary(list(gpus), driver, lambda: _shutdown(amdsmi))


def _shutdown(amdsmi: Any) -> None:
    with contextlib.suppress(Exception):      # shutting down a library that failed is best effort
        amdsmi.amdsmi_shut_down()


def simulated_amd_gpus(nvml_sim: Any, *, first_index: int) -> tuple[Any, list[Gpu]]:
    """The simulated machine's AMD GPUs through the simulated ``amdsmi`` over the same machine as
    ``nvml_sim`` (None and no GPUs where the machine has no AMD model)."""
    from ..sim.amdsmi import SimulatedAmdSmi

    amdsmi = SimulatedAmdSmi(nvml_sim.machine)
    amdsmi.amdsmi_init()
    gpus: list[Gpu] = list(amd_gpus(amdsmi, simulated=True, first_index=first_index))
    if not gpus:
        amdsmi.amdsmi_shut_down()
        return None, []
    return amdsmi, gpus
