"""GPU access through an NVML-compatible library: pynvml on real GPUs, the simulator elsewhere.

Everything here speaks NVML's units (mW, mJ) so that nothing is lost in conversion; the surface
of the package speaks W and J. The same ``Gpu`` class drives a real GPU and a simulated one: the
backend only decides which library object it is handed.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pynvml

from ..errors import BackendUnavailable, GpuLostError, GpuSelectionError
from ..fileio import user_state_dir
from .specs import BACKEND_CHOICES

RETRY_ATTEMPTS = 4
RETRY_BACKOFF_S = 0.2
# The simulator's faults come and go with the number of calls, not with time: there is no busy
# driver to wait for, so its retries pause only briefly (the tests of every fault path stay quick).
SIM_RETRY_BACKOFF_S = 0.01
# Errors worth another try (a busy driver); others (no permission, bad argument) will not change.
TRANSIENT_ERRORS = (pynvml.NVMLError_Unknown, pynvml.NVMLError_Timeout)
_T = TypeVar("_T")


def retry_transient(action: Callable[[], _T], backoff_s: float) -> _T:
    """``action()``, tried again with a growing pause after a transient NVML error (``Gpu.retry_backoff_s``)."""
    for attempt in range(RETRY_ATTEMPTS):
        try:
            return action()
        except TRANSIENT_ERRORS:
            if attempt == RETRY_ATTEMPTS - 1:
                raise
            time.sleep(backoff_s * (attempt + 1))
    raise AssertionError("unreachable")


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


@dataclass(frozen=True)
class PowerLimits:
    """A GPU's power-management limits, in milliwatts as NVML reports them."""

    current_mw: int
    enforced_mw: int
    default_mw: int
    min_mw: int
    max_mw: int

    def contains(self, limit_mw: int) -> bool:
        return self.min_mw <= limit_mw <= self.max_mw

    def range_text(self) -> str:
        return f"{self.min_mw / 1000:g}-{self.max_mw / 1000:g} W"


class Gpu:
    """One GPU, addressed by its NVML index."""

    def __init__(self, nvml: Any, index: int, backend: str) -> None:
        self.nvml = nvml
        self.index = index
        self.backend = backend
        self.simulated = backend == "sim"
        self.retry_backoff_s = SIM_RETRY_BACKOFF_S if self.simulated else RETRY_BACKOFF_S
        self.handle = nvml.nvmlDeviceGetHandleByIndex(index)
        self.name = _text(nvml.nvmlDeviceGetName(self.handle))
        self.uuid = _text(nvml.nvmlDeviceGetUUID(self.handle))
        self._has_counter: bool | None = None
        self._power_source: str | None = None
        self._mig: bool | None = None

    def __repr__(self) -> str:
        return f"Gpu({self.index}, {self.name!r})"

    @property
    def label(self) -> str:
        return f"GPU {self.index} ({self.name})"

    # -- limits --------------------------------------------------------------------------
    def limits(self) -> PowerLimits:
        nvml, handle = self.nvml, self.handle
        low, high = nvml.nvmlDeviceGetPowerManagementLimitConstraints(handle)
        return PowerLimits(
            current_mw=int(nvml.nvmlDeviceGetPowerManagementLimit(handle)),
            enforced_mw=int(nvml.nvmlDeviceGetEnforcedPowerLimit(handle)),
            default_mw=int(nvml.nvmlDeviceGetPowerManagementDefaultLimit(handle)),
            min_mw=int(low),
            max_mw=int(high),
        )

    def current_limit_mw(self) -> int:
        return int(self.nvml.nvmlDeviceGetPowerManagementLimit(self.handle))

    def enforced_limit_mw(self) -> int:
        return int(self.nvml.nvmlDeviceGetEnforcedPowerLimit(self.handle))

    def set_limit_mw(self, limit_mw: int) -> int:
        """Set the limit with the v1 call (the v2 wrapper ignores errors); return what is enforced.

        The caller compares the returned value with what it asked for: a GPU may enforce a
        different limit than the one requested, and only reading back shows it.
        """
        self.nvml.nvmlDeviceSetPowerManagementLimit(self.handle, int(limit_mw))
        return self.enforced_limit_mw()

    # -- energy and power ------------------------------------------------------------------
    def has_energy_counter(self) -> bool:
        """Whether the cumulative energy counter works here (Volta and newer, not MIG)."""
        if self._has_counter is None:
            try:
                self.energy_mj()
                self._has_counter = True
            except pynvml.NVMLError_NotSupported:
                self._has_counter = False
        return self._has_counter

    def energy_mj(self) -> int:
        try:
            return int(self.nvml.nvmlDeviceGetTotalEnergyConsumption(self.handle))
        except pynvml.NVMLError_GpuIsLost:
            raise self.lost_error() from None

    def power_mw(self) -> int:
        """Instant power: ``NVML_FI_DEV_POWER_INSTANT`` where supported, else ``GetPowerUsage``."""
        try:
            if self._power_source in (None, "instant"):
                field = self.nvml.nvmlDeviceGetFieldValues(self.handle, [pynvml.NVML_FI_DEV_POWER_INSTANT])[0]
                if field.nvmlReturn == pynvml.NVML_SUCCESS:
                    self._power_source = "instant"
                    return int(field.value.uiVal)
                self._power_source = "usage"
            return int(self.nvml.nvmlDeviceGetPowerUsage(self.handle))
        except pynvml.NVMLError_GpuIsLost:
            raise self.lost_error() from None

    @property
    def power_source(self) -> str:
        """Which reading ``power_mw`` uses: "instant" (the field value) or "usage"."""
        if self._power_source is None:
            self.power_mw()
        return self._power_source or "usage"

    def processes(self) -> list[int]:
        """PIDs of the processes NVML sees running on this GPU (empty where it cannot tell)."""
        try:
            found = self.nvml.nvmlDeviceGetComputeRunningProcesses(self.handle)
        except (pynvml.NVMLError_NotSupported, pynvml.NVMLError_FunctionNotFound, pynvml.NVMLError_NoPermission):
            return []
        return sorted({int(p.pid) for p in found})

    def mig_enabled(self) -> bool:
        """Whether the GPU is split into MIG slices (asked once: changing it needs a GPU reset)."""
        if self._mig is None:
            try:
                current, _pending = self.nvml.nvmlDeviceGetMigMode(self.handle)
            except (pynvml.NVMLError_NotSupported, pynvml.NVMLError_FunctionNotFound):
                current = None
            self._mig = current == pynvml.NVML_DEVICE_MIG_ENABLE
        return self._mig

    def lost_error(self, while_doing: str = "") -> GpuLostError:
        """The one message for a GPU that stopped answering, whoever noticed it."""
        doing = f" while {while_doing}" if while_doing else ""
        return GpuLostError(f"{self.label} is lost (NVML: GPU is lost){doing}: it fell off the bus or its driver reset")


class Backend:
    """The NVML-compatible library in use, the GPUs it shows, and how to wait for GPU work."""

    def __init__(self, name: str, nvml: Any, state_dir: Path) -> None:
        self.name = name
        self.nvml = nvml
        self.simulated = name == "sim"
        self.state_dir = state_dir
        self.driver_version = _text(nvml.nvmlSystemGetDriverVersion())
        self.all_gpus = [Gpu(nvml, i, name) for i in range(nvml.nvmlDeviceGetCount())]
        cuda_visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        if self.simulated and cuda_visible is not None and not _split(cuda_visible):
            cuda_visible = None      # "" hides the host's GPUs from CUDA; simulated ones are none of them
        self.visible_gpus = visible_gpus(self.all_gpus, cuda_visible)
        # Region edges and NVML reads are timed on this clock: the simulator's own (virtual by
        # default: its time moves with its work only), a monotonic one on real GPUs.
        sim_clock = nvml.simClock() if self.simulated else None
        self.clock: Callable[[], float] = sim_clock.now if sim_clock is not None else time.perf_counter
        self.virtual_clock: Any = sim_clock if sim_clock is not None and sim_clock.virtual else None
        self.recorders: Any = None       # the meter's per-GPU recorders, started on first use
        self._closers: list[Callable[[], None]] = []

    @property
    def label(self) -> str:
        return "simulated GPUs (no real measurement)" if self.simulated else f"NVML, driver {self.driver_version}"

    @property
    def lock_folder(self) -> Path:
        """Where the per-GPU locks live (see ``locks.py``)."""
        return self.state_dir / "locks"

    def select(self, spec: str | Sequence[str] | None) -> list[Gpu]:
        """The GPUs ``--gpu-devices`` names (NVML indices as ``gpuenergy info`` prints them, or UUIDs)."""
        if not self.visible_gpus:
            raise GpuSelectionError(
                "no GPU is visible: CUDA_VISIBLE_DEVICES hides all of them; unset it or name a GPU"
            )
        items = _split(spec)
        if not items or items == ["all"]:
            return list(self.visible_gpus)
        chosen: list[Gpu] = []
        for item in items:
            gpu = _match_gpu(self.visible_gpus, item)
            if gpu is None:
                known = ", ".join(f"{g.index} ({g.uuid})" for g in self.visible_gpus)
                raise GpuSelectionError(f"--gpu-devices: no visible GPU matches {item!r}; visible GPUs: {known}")
            if gpu not in chosen:
                chosen.append(gpu)
        return chosen

    def use(self, gpus: Iterable[Gpu]) -> None:
        """Tell a simulated machine which GPUs this process's work runs on (no-op on NVML)."""
        if self.simulated:
            self.nvml.simUseDevices([gpu.index for gpu in gpus])

    def session_energy_mj(self, gpu: Gpu) -> float | None:
        """What the GPU's energy counter says now, for a total over a whole session (None without a
        counter). Read directly, not at a publication: up to one period behind. The simulator
        answers with its wall-clock model (``simWallEnergyMj``): its tests' own time is virtual."""
        if self.simulated:
            return float(self.nvml.simWallEnergyMj(gpu.handle))
        if not gpu.has_energy_counter():
            return None
        return float(gpu.energy_mj())

    def begin_test(self, test_id: str, gpus: Sequence[Gpu]) -> None:
        """Simulator only: a test starts on ``gpus``, in a world of its own (``SimulatedNvml.simBeginTest``):
        on the virtual clock the meter's recorders start afresh with it."""
        if not self.simulated:
            return
        self.nvml.simBeginTest(test_id, [gpu.index for gpu in gpus])
        if self.virtual_clock is not None and self.recorders is not None:
            self.recorders.stop()

    def set_workload_profile(self, compute_bound: float) -> None:
        """Declare how compute-bound the coming work is; only the simulator needs to know."""
        if self.simulated:
            self.nvml.simSetWorkloadProfile(compute_bound)

    def synchronize(self) -> None:
        """Wait until queued GPU work has finished, so a reading covers exactly that work."""
        if self.simulated:
            self.nvml.simSynchronize()
            return
        torch = sys.modules.get("torch")  # never import torch (1.8 s) just to wait for nothing
        if torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized():
            for device in range(torch.cuda.device_count()):
                torch.cuda.synchronize(device)

    def sleep_until(self, moment: float) -> None:
        """Wait until ``moment`` on :attr:`clock` (the meter aligns regions with publications)."""
        if self.simulated:
            self.nvml.simSleepUntil(moment)
            return
        delay = moment - self.clock()
        if delay > 0:
            time.sleep(delay)

    def count_cpu_work(self, counting: bool) -> None:
        """Simulator only: whether the process's CPU time stands for GPU work (inside regions)."""
        if self.simulated:
            self.nvml.simCountCpuWork(counting)

    def sim_settings(self) -> dict[str, Any] | None:
        """Simulator: its clock, seed and noise (what makes its figures repeat); None on real GPUs."""
        return self.nvml.simSettings() if self.simulated else None

    def sim_work_source(self) -> str | None:
        """Simulator: ``declared`` or ``cpu-time`` (what stood for GPU work); None on real GPUs."""
        return self.nvml.simWorkSource() if self.simulated else None

    def declare_work(self, work: Any) -> None:
        """Simulator only: one step of declared GPU work was launched (no-op on real GPUs)."""
        if self.simulated:
            self.nvml.simDeclareWork(work)

    def on_close(self, closer: Callable[[], None]) -> None:
        """Call ``closer`` when the backend closes (the meter stops its recorder threads)."""
        self._closers.append(closer)

    def close(self) -> None:
        closers, self._closers = self._closers, []
        for closer in reversed(closers):
            closer()
        try:
            self.nvml.nvmlShutdown()
        except pynvml.NVMLError:
            pass


def visible_gpus(gpus: Sequence[Gpu], cuda_visible: str | None) -> list[Gpu]:
    """The GPUs ``CUDA_VISIBLE_DEVICES`` lets CUDA see, in its order.

    NVML itself ignores the variable, so the plugin applies it: entries are NVML indices or
    (prefixes of) UUIDs; like CUDA, parsing stops at the first entry that matches nothing.
    Indices are NVML's PCI order: set ``CUDA_DEVICE_ORDER=PCI_BUS_ID`` so CUDA agrees.
    """
    if cuda_visible is None:
        return list(gpus)
    chosen: list[Gpu] = []
    for item in _split(cuda_visible):
        gpu = _match_gpu(gpus, item)
        if gpu is None:
            break
        if gpu not in chosen:
            chosen.append(gpu)
    return chosen


def _split(spec: str | Sequence[str] | None) -> list[str]:
    if spec is None:
        return []
    parts = spec.split(",") if isinstance(spec, str) else list(spec)
    return [p.strip() for p in parts if p.strip()]


def _match_gpu(gpus: Sequence[Gpu], item: str) -> Gpu | None:
    if item.isdigit():
        return next((g for g in gpus if g.index == int(item)), None)
    if item.startswith("GPU-") and len(item) > 4:
        matches = [g for g in gpus if g.uuid.startswith(item)]
        return matches[0] if len(matches) == 1 else None
    return None


def open_backend(kind: str = "auto", *, sim_state_dir: Path | None = None, sim_seed: int | None = None) -> Backend:
    """Open ``nvml``, ``sim``, or (``auto``) NVML where it finds a GPU that CUDA may use, and the
    simulator otherwise.

    ``CUDA_VISIBLE_DEVICES=""`` (CPU-only CI jobs set it) hides every GPU from CUDA: ``auto`` then
    takes the simulator, whose GPUs stand in for none of the host's and are not hidden by it.
    ``sim_seed``: the simulator's seed (default: ``GPUENERGY_SIM_SEED``, else a random one).
    """
    if kind not in BACKEND_CHOICES:
        raise BackendUnavailable(f"unknown GPU backend {kind!r}: choose from {', '.join(BACKEND_CHOICES)}")
    if kind in ("auto", "nvml"):
        reason = _try_nvml(hidden_counts=kind == "auto")
        if reason is None:
            return Backend("nvml", pynvml, user_state_dir())
        if kind == "nvml":
            raise BackendUnavailable(
                f"--gpu-backend=nvml: {reason}; install the NVIDIA driver, or use --gpu-backend=sim "
                f"to run on simulated GPUs"
            )
    from ..errors import SimStateError
    from ..sim.nvml import SimulatedNvml
    from ..sim.state import default_state_dir

    state_dir = sim_state_dir if sim_state_dir is not None else default_state_dir()
    try:
        sim = SimulatedNvml(state_dir=state_dir, seed=sim_seed)
        sim.nvmlInit()
    except (SimStateError, ValueError) as exc:
        raise BackendUnavailable(f"the GPU simulator cannot start: {exc}") from None
    except OSError as exc:
        raise BackendUnavailable(
            f"the GPU simulator cannot use its state folder {state_dir}: {exc.strerror or exc}"
            f"{f' ({exc.filename})' if exc.filename else ''}; set GPUENERGY_SIM_STATE to a folder you can write"
        ) from None
    sim.simCountCpuWork(False)    # the CPU-time proxy counts inside a meter's regions only
    return Backend("sim", sim, sim.state_dir)


def _try_nvml(*, hidden_counts: bool = False) -> str | None:
    """None if NVML works and shows a GPU, else why not. With ``hidden_counts``, GPUs that
    ``CUDA_VISIBLE_DEVICES`` hides all of count as none found."""
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        return f"NVML is not available ({exc})"
    try:
        count = pynvml.nvmlDeviceGetCount()
    except pynvml.NVMLError as exc:
        pynvml.nvmlShutdown()
        return f"NVML cannot count GPUs ({exc})"
    cuda_visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if count == 0 or (hidden_counts and cuda_visible is not None and not _split(cuda_visible)):
        pynvml.nvmlShutdown()
        return "NVML finds no GPU" if count == 0 else "CUDA_VISIBLE_DEVICES hides every GPU"
    return None
