"""The device boundary: one abstract ``Gpu`` that the meter, the knobs, the journals and the reports
use, and the ``Backend`` that lists the GPUs every vendor library found.

Two libraries implement ``Gpu``: NVML (``nvidia.py``) and AMD SMI (``amd.py``); the simulator
stands in for each at its own API (``sim/nvml.py``, ``sim/amdsmi.py``), so the code that drives a
real GPU is the code that runs in CI. Nothing outside those two modules and ``sim/`` knows either
library: their errors arrive here already translated into the package's own (``errors.DeviceError``
and its kinds: lost GPU, no permission, not supported, a busy driver after retries).

Units are in the names and are those the libraries are exact in: milliwatts and millijoules (the
package's surface speaks W and J). The simulator's extras (declared work, its clock, waiting for
its work) are on ``SimulatedBackend`` only; a real backend's hooks do what a real GPU needs.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol, TypeVar, runtime_checkable

from .. import realtime
from ..errors import BackendUnavailable, DeviceNotSupported, DeviceTransientError, GpuLostError, GpuSelectionError
from ..fileio import user_state_dir
from .moments import Moment, QueuedMoment, cuda_torch, record_event
from .specs import BACKEND_CHOICES
from .visibility import match_gpu, split_spec, visible_gpus

Vendor = Literal["nvidia", "amd"]
LibraryName = Literal["nvml", "amdsmi"]
LIBRARY_LABELS = {"nvml": "NVML", "amdsmi": "AMD SMI"}      # as messages name them

RETRY_ATTEMPTS = 4
RETRY_BACKOFF_S = 0.2
# The simulator's faults come and go with the number of calls, not with time: there is no busy
# driver to wait for, so its retries pause only briefly (the tests of every fault path stay quick).
SIM_RETRY_BACKOFF_S = 0.01
_T = TypeVar("_T")


@dataclass(frozen=True)
class PowerLimits:
    """A GPU's power-management limits, in milliwatts."""

    current_mw: int
    enforced_mw: int
    default_mw: int
    min_mw: int
    max_mw: int

    def contains(self, limit_mw: int) -> bool:
        return self.min_mw <= limit_mw <= self.max_mw

    def range_text(self) -> str:
        return f"{self.min_mw / 1000:g}-{self.max_mw / 1000:g} W"


@runtime_checkable
class SmClockLocking(Protocol):
    """A GPU whose SM (graphics) clock can be locked (NVIDIA's, through NVML); ``isinstance(gpu,
    SmClockLocking)`` tells the knob whether a GPU has it. Clocks are in MHz."""

    def supported_sm_clocks_mhz(self) -> tuple[int, ...]:
        """The SM clocks the GPU can be locked to (at its highest memory clock), highest first."""
        ...

    def sm_clock_mhz(self) -> int:
        """The SM clock the GPU runs at now."""
        ...

    @property
    def reads_clock_lock(self) -> bool:
        """Whether the library can read a lock back (real NVML cannot; the simulator can)."""
        ...

    def sm_clock_lock_mhz(self) -> tuple[int, int] | None:
        """The lock in place, None where there is none (only where ``reads_clock_lock``)."""
        ...

    def lock_sm_clock_mhz(self, min_mhz: int, max_mhz: int) -> None:
        """Lock the SM clock into ``[min_mhz, max_mhz]``."""
        ...

    def unlock_sm_clock(self) -> None:
        """Hand the SM clock back to the driver's own management."""
        ...


def retry_transient(action: Callable[[], _T], backoff_s: float) -> _T:
    """``action()``, tried again with a growing pause (``Gpu.retry_backoff_s``) after a busy driver
    (``DeviceTransientError``: each vendor module decides which of its errors are that)."""
    for attempt in range(RETRY_ATTEMPTS):
        try:
            return action()
        except DeviceTransientError:
            if attempt == RETRY_ATTEMPTS - 1:
                raise
            realtime.sleep(backoff_s * (attempt + 1))
    raise AssertionError("unreachable")


@dataclass
class OpenedLibrary:
    """A vendor library that found GPUs: them, its driver's version, and how to shut it down."""

    gpus: Sequence[Gpu]
    driver_version: str
    close: Callable[[], None]
    cuda_driver_version: str | None = None


class Gpu(ABC):
    """One GPU: its identity, its energy counter and power, its power limits, its processes. ``index``
    is the plugin's: NVIDIA GPUs first in NVML's order, then AMD GPUs in AMD SMI's.

    Every method raises only the package's errors (``errors.DeviceError`` and its kinds). A GPU whose
    SM clock can be locked is also an ``SmClockLocking``.
    """

    vendor: Vendor
    library: LibraryName

    def __init__(self, index: int, name: str, uuid: str, *, simulated: bool) -> None:
        self.index = index
        self.name = name
        self.uuid = uuid
        self.simulated = simulated
        self.retry_backoff_s = SIM_RETRY_BACKOFF_S if simulated else RETRY_BACKOFF_S
        self._has_counter: bool | None = None
        self._board_limits: PowerLimits | None = None    # read once: the default and range are the board's

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.index}, {self.name!r})"

    @property
    def label(self) -> str:
        return f"GPU {self.index} ({self.name})"

    @property
    def backend(self) -> str:
        """What results record as the GPU's backend: ``sim`` for a simulated GPU, else its library."""
        return "sim" if self.simulated else self.library

    @property
    def library_index(self) -> int:
        """The GPU's index in its own library (what ``CUDA_VISIBLE_DEVICES`` or ``ROCR_VISIBLE_DEVICES`` count)."""
        return self.index

    # -- energy and power ----------------------------------------------------------------------
    def has_energy_counter(self) -> bool:
        """Whether a cumulative energy counter works here (the meter falls back to power sampling):
        asked once, by reading it (NVIDIA: Volta and newer, not MIG; AMD: not on a VM guest)."""
        if self._has_counter is None:
            try:
                self.energy_mj()
                self._has_counter = True
            except DeviceNotSupported:
                self._has_counter = False
        return self._has_counter

    @abstractmethod
    def energy_mj(self) -> int:
        """The cumulative energy counter, in millijoules (raises ``DeviceNotSupported`` without one)."""

    @property
    @abstractmethod
    def energy_resolution_mj(self) -> float:
        """The smallest step of ``energy_mj`` the hardware counts (the library's own unit or finer)."""

    @property
    @abstractmethod
    def counter_period_s(self) -> float:
        """How often the library publishes a new counter value, nominally (the meter learns the exact lattice)."""

    @abstractmethod
    def power_mw(self) -> int:
        """Power now, in milliwatts, from ``power_source``."""

    @property
    @abstractmethod
    def power_source(self) -> str:
        """Which reading ``power_mw`` uses (results record it): e.g. NVML's "instant" or "usage"."""

    @property
    @abstractmethod
    def power_window_s(self) -> float:
        """How long a window one ``power_mw`` reading averages, in seconds (what the vendor documents)."""

    # -- limits --------------------------------------------------------------------------------
    @abstractmethod
    def limits(self) -> PowerLimits:
        """Current, enforced, default, minimum and maximum power limit."""

    @abstractmethod
    def current_limit_mw(self) -> int:
        """The limit set (what ``set_limit_mw`` changes and a restore puts back)."""

    @abstractmethod
    def enforced_limit_mw(self) -> int:
        """The limit the GPU enforces (another power manager may hold it lower than the one set)."""

    @abstractmethod
    def set_limit_mw(self, limit_mw: int) -> int:
        """Set the power limit; return the limit the GPU then enforces (read back: it may differ)."""

    def default_limit_mw(self) -> int:
        """The board's default power limit: a constant of the board, read once (every measured region
        records it, and ``limits`` is four library calls)."""
        return self._constant_limits().default_mw

    def max_limit_mw(self) -> int:
        """The board's highest power limit: a constant, read once with the default (a recorder bounds
        its figures by it, and on the simulator's virtual clock a recorder starts with every test)."""
        return self._constant_limits().max_mw

    def _constant_limits(self) -> PowerLimits:
        if self._board_limits is None:
            self._board_limits = self.limits()
        return self._board_limits

    # -- processes, partitions ------------------------------------------------------------------
    @abstractmethod
    def processes(self) -> list[int]:
        """PIDs of the processes the library sees on this GPU (empty where it cannot tell)."""

    @abstractmethod
    def unmeasurable_reason(self) -> str | None:
        """Why this GPU's own energy cannot be measured (a MIG slice, an AMD compute partition, the
        second die of an MI250X), in words that follow its label and say what to do; None where it can."""

    @property
    def simulated_state_file(self) -> Path | None:
        """A simulated GPU's state file (deleting it restarts the GPU at its defaults); None on real GPUs."""
        return None

    def lost_error(self, while_doing: str = "") -> GpuLostError:
        """The one message for a GPU that stopped answering, whoever noticed it."""
        doing = f" while {while_doing}" if while_doing else ""
        return GpuLostError(f"{self.label} is lost ({LIBRARY_LABELS[self.library]}: GPU is lost){doing}: it fell "
                            f"off the bus or its driver reset")


class Backend:
    """The GPUs the vendor libraries found, as one plain list, and how to wait for GPU work.

    ``name``: ``nvml``, ``amdsmi``, ``nvml+amdsmi`` (a node with both), or ``sim``.
    """

    simulated = False

    def __init__(self, name: str, gpus: Sequence[Gpu], state_dir: Path, *, driver_versions: dict[str, str],
                 closers: Iterable[Callable[[], None]] = (), cuda_driver_version: str | None = None) -> None:
        self.name = name
        self.state_dir = state_dir
        self.driver_versions = dict(driver_versions)
        self.cuda_driver_version = cuda_driver_version
        self.all_gpus = list(gpus)
        self.visible_gpus = visible_gpus(self.all_gpus, simulated=self.simulated)
        self.clock: Callable[[], float] = realtime.perf_counter    # region edges and reads are timed on it
        self.virtual_clock: Any = None      # a simulator's virtual clock (see ``SimulatedBackend``)
        self.recorders: Any = None          # the meter's per-GPU recorders, started on first use
        self._closers: list[Callable[[], None]] = []
        self._library_closers = list(closers)

    @property
    def driver_version(self) -> str:
        """The driver version(s): one library's, or each library's after its name."""
        if len(self.driver_versions) == 1:
            return next(iter(self.driver_versions.values()))
        return ", ".join(f"{library} {version}" for library, version in self.driver_versions.items())

    @property
    def label(self) -> str:
        return ", ".join(f"{LIBRARY_LABELS.get(lib, lib)}, driver {version}" for lib, version in self.driver_versions.items())

    @property
    def lock_folder(self) -> Path:
        """Where the per-GPU locks live (see ``locks.py``)."""
        return self.state_dir / "locks"

    def select(self, spec: str | Sequence[str] | None) -> list[Gpu]:
        """The GPUs ``--gpu-devices`` names (the plugin's indices as ``gpuenergy info`` prints them, or UUIDs)."""
        if not self.visible_gpus:
            raise GpuSelectionError(
                "no GPU is visible: CUDA_VISIBLE_DEVICES (or ROCR_VISIBLE_DEVICES/HIP_VISIBLE_DEVICES) hides all of "
                "them; unset it or name a GPU"
            )
        items = split_spec(spec)
        if not items or items == ["all"]:
            return list(self.visible_gpus)
        chosen: list[Gpu] = []
        for item in items:
            gpu = match_gpu(self.visible_gpus, item, by_library_index=False)
            if gpu is None:
                known = ", ".join(f"{g.index} ({g.uuid})" for g in self.visible_gpus)
                raise GpuSelectionError(f"--gpu-devices: no visible GPU matches {item!r}; visible GPUs: {known}")
            if gpu not in chosen:
                chosen.append(gpu)
        return chosen

    # -- hooks the meter and the session call; a real GPU needs only some ---------------------------
    def use(self, gpus: Iterable[Gpu]) -> None:
        """The GPUs this process's work runs on from now (a real GPU's work goes where CUDA sends it)."""

    def begin_test(self, test_id: str, gpus: Sequence[Gpu]) -> None:
        """A test starts on ``gpus`` (the simulator starts a world of its own for it)."""

    def set_workload_profile(self, compute_bound: float) -> None:
        """How compute-bound the coming work is (only a simulated GPU needs to be told)."""

    def count_cpu_work(self, counting: bool) -> None:
        """Whether the process's CPU time stands for GPU work now (only on a simulated GPU)."""

    def declare_work(self, work: Any) -> None:
        """One step of declared GPU work was launched (a real GPU does the work itself)."""

    def queue_time(self) -> float:
        """The moment (on :attr:`clock`) the GPUs in use will reach this point of their queued work,
        known now: exact on the simulator; on a real GPU only the host's clock (launches run ahead of
        it), so a phase mark takes :meth:`mark_moment` there."""
        return self.clock()

    def cuda_moment(self) -> QueuedMoment | None:
        """A CUDA (or HIP) timing event recorded now on the current stream, without waiting, where
        torch's CUDA is in use; else None (``moments``). The region's anchor is one."""
        return record_event(self.clock)

    def mark_moment(self) -> Moment:
        """What a phase mark records, without waiting for the GPU: a CUDA event, dated once the
        region has ended (``moments.date_marks``), else :meth:`queue_time`."""
        return self.cuda_moment() or self.queue_time()

    def sim_settings(self) -> dict[str, Any] | None:
        """The simulator's clock, seed and noise (what makes its figures repeat); None on real GPUs."""
        return None

    def sim_work_source(self) -> str | None:
        """The simulator's ``declared`` or ``cpu-time`` (what stood for GPU work); None on real GPUs."""
        return None

    def session_reading(self, gpu: Gpu) -> tuple[float | None, float]:
        """What the GPU's energy counter says now, for a total over a whole session (None without a
        counter; read directly, not at a publication: up to one period behind), and the seconds the
        session ran beyond the wall clock (the simulator's tests' virtual worlds; 0 on real GPUs)."""
        return (float(gpu.energy_mj()) if gpu.has_energy_counter() else None), 0.0

    def synchronize(self) -> None:
        """Wait until queued GPU work has finished, so a reading covers exactly that work.

        torch's ``cuda`` module is CUDA on NVIDIA and HIP on ROCm builds: one call waits for either.
        """
        torch = cuda_torch()
        if torch is not None:
            for device in range(torch.cuda.device_count()):
                torch.cuda.synchronize(device)

    def sleep_until(self, moment: float) -> None:
        """Wait until ``moment`` on :attr:`clock` (the meter aligns regions with publications)."""
        delay = moment - self.clock()
        if delay > 0:
            realtime.sleep(delay)

    def on_close(self, closer: Callable[[], None]) -> None:
        """Call ``closer`` when the backend closes (the meter stops its recorder threads)."""
        self._closers.append(closer)

    def close(self) -> None:
        closers, self._closers = self._closers, []
        for closer in reversed(closers):
            closer()
        library_closers, self._library_closers = self._library_closers, []
        for closer in library_closers:
            closer()


class SimulatedBackend(Backend):
    """The simulated machine: its NVIDIA GPUs through the simulated NVML, its AMD GPUs through the
    simulated ``amdsmi``, and the simulator's extras (its clock, declared work, waiting for its work),
    which both libraries offer over the same machine (``nvml`` here is the one this class calls)."""

    simulated = True

    def __init__(self, nvml: Any, gpus: Sequence[Gpu], amdsmi: Any = None) -> None:
        self.nvml = nvml
        self.amdsmi = amdsmi
        super().__init__("sim", gpus, nvml.state_dir, driver_versions={"sim": "simulated"}, closers=[self._shutdown])
        clock = nvml.simClock()
        self.clock = clock.now
        self.virtual_clock = clock if clock.virtual else None

    @property
    def label(self) -> str:
        return "simulated GPUs (no real measurement)"

    def _machine_indices(self, gpus: Iterable[Gpu]) -> list[int]:
        return [getattr(gpu, "machine_index", gpu.index) for gpu in gpus]

    def use(self, gpus: Iterable[Gpu]) -> None:
        self.nvml.simUseDevices(self._machine_indices(gpus))

    def begin_test(self, test_id: str, gpus: Sequence[Gpu]) -> None:
        """A test starts in a world of its own (``SimulatedNvml.simBeginTest``): on the virtual clock
        the meter's recorders start afresh with it."""
        self.nvml.simBeginTest(test_id, self._machine_indices(gpus))
        if self.virtual_clock is not None and self.recorders is not None:
            self.recorders.stop()

    def set_workload_profile(self, compute_bound: float) -> None:
        self.nvml.simSetWorkloadProfile(compute_bound)

    def count_cpu_work(self, counting: bool) -> None:
        self.nvml.simCountCpuWork(counting)

    def declare_work(self, work: Any) -> None:
        self.nvml.simDeclareWork(work)

    def queue_time(self) -> float:
        return float(self.nvml.simQueuedUntil())

    def cuda_moment(self) -> QueuedMoment | None:
        return None       # the simulated queue is exact (and a real GPU's events are not its GPUs')

    def sim_settings(self) -> dict[str, Any] | None:
        return dict(self.nvml.simSettings())

    def sim_work_source(self) -> str | None:
        return str(self.nvml.simWorkSource())

    def session_reading(self, gpu: Gpu) -> tuple[float | None, float]:
        """The simulator's wall-clock model of the counter (``simWallEnergyMj``; its tests' own time is
        virtual) and the time their worlds kept the GPU occupied beyond the wall clock (``simBeyondWallS``)."""
        handle = getattr(gpu, "handle", None)
        return float(self.nvml.simWallEnergyMj(handle)), float(self.nvml.simBeyondWallS(handle))

    def synchronize(self) -> None:
        self.nvml.simSynchronize()

    def sleep_until(self, moment: float) -> None:
        self.nvml.simSleepUntil(moment)

    def _shutdown(self) -> None:
        if self.amdsmi is not None:
            self.amdsmi.amdsmi_shut_down()
        self.nvml.nvmlShutdown()


def open_backend(kind: str = "auto", *, sim_state_dir: Path | None = None, sim_seed: int | None = None) -> Backend:
    """Open ``nvml``, ``amdsmi``, ``sim``, or (``auto``) every library that finds a GPU the compute
    runtime may use, and the simulator where none does.

    ``CUDA_VISIBLE_DEVICES=""`` (CPU-only CI jobs set it; ``ROCR_VISIBLE_DEVICES=""`` for AMD) hides
    that library's GPUs: ``auto`` then counts them as none found.
    ``sim_seed``: the simulator's seed (default: ``GPUENERGY_SIM_SEED``, else a random one).
    """
    if kind not in BACKEND_CHOICES:
        raise BackendUnavailable(f"unknown GPU backend {kind!r}: choose from {', '.join(BACKEND_CHOICES)}")
    if kind == "sim":
        return open_simulator(sim_state_dir, sim_seed)
    from . import amd, nvidia

    openers = {"nvml": nvidia.open_nvml, "amdsmi": amd.open_amdsmi}
    found: dict[str, OpenedLibrary] = {}
    reasons: dict[str, str] = {}
    for library in (("nvml", "amdsmi") if kind == "auto" else (kind,)):
        opened = openers[library](hidden_counts=kind == "auto", first_index=sum(len(o.gpus) for o in found.values()))
        if isinstance(opened, str):
            reasons[library] = opened
        else:
            found[library] = opened
    if found:
        gpus = [gpu for opened in found.values() for gpu in opened.gpus]
        try:
            return Backend("+".join(found), gpus, user_state_dir(),
                           driver_versions={library: opened.driver_version for library, opened in found.items()},
                           closers=[opened.close for opened in found.values()],
                           cuda_driver_version=found["nvml"].cuda_driver_version if "nvml" in found else None)
        except GpuSelectionError:      # a visibility variable the plugin cannot follow: let go of the libraries
            for opened in found.values():
                opened.close()
            raise
    if kind != "auto":
        install = {"nvml": "install the NVIDIA driver",
                   "amdsmi": "install ROCm and its Python package (pip install 'pytest-gpuenergy[amd]')"}[kind]
        raise BackendUnavailable(f"--gpu-backend={kind}: {reasons[kind]}; {install}, or use --gpu-backend=sim "
                                 f"to run on simulated GPUs")
    return open_simulator(sim_state_dir, sim_seed)


def open_simulator(sim_state_dir: Path | None = None, sim_seed: int | None = None) -> SimulatedBackend:
    """The simulated machine of ``GPUENERGY_SIM_GPUS`` (in ``GPUENERGY_SIM_STATE``): NVIDIA models
    through the simulated NVML, AMD models through the simulated ``amdsmi``, NVIDIA's first."""
    from .. import fileio
    from ..errors import SimStateError
    from ..sim.nvml import SimulatedNvml
    from .amd import simulated_amd_gpus
    from .nvidia import nvml_gpus

    state_dir = sim_state_dir if sim_state_dir is not None else fileio.sim_state_dir()
    try:
        sim = SimulatedNvml(state_dir=state_dir, seed=sim_seed)
        sim.nvmlInit()
        gpus: list[Gpu] = list(nvml_gpus(sim, simulated=True))
        amdsmi, amd_gpus = simulated_amd_gpus(sim, first_index=len(gpus))
    except (SimStateError, ValueError) as exc:
        raise BackendUnavailable(f"the GPU simulator cannot start: {exc}") from None
    except OSError as exc:
        raise BackendUnavailable(
            f"the GPU simulator cannot use its state folder {state_dir}: {exc.strerror or exc}"
            f"{f' ({exc.filename})' if exc.filename else ''}; set GPUENERGY_SIM_STATE to a folder you can write"
        ) from None
    sim.simCountCpuWork(False)    # the CPU-time proxy counts inside a meter's regions only
    try:
        return SimulatedBackend(sim, gpus + amd_gpus, amdsmi)
    except GpuSelectionError:
        if amdsmi is not None:
            amdsmi.amdsmi_shut_down()
        sim.nvmlShutdown()
        raise
