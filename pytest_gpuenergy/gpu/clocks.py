"""SM clock caps, the second knob: locking one (as typed, ``specs.ClockSpec``) so that it always
comes back.

Both seeds capped frequency as well as power (the Fathom study on the P100; Tang et al.: the best
core frequency saves 8.7-23.1 % of training energy), and Zeus locks SM clocks for the same reason.
A clock cap locks the SM clock range to [the GPU's lowest clock, the cap] with
``nvmlDeviceSetGpuLockedClocks``: the driver still lowers the clock under a power limit, never
raises it above the cap. The lock plugs into the one knob mechanism (``knob.py``: locks, journal
before the change, exact restore with signals held, repair of a dead run's entry); what is its own
is here:

1. read each GPU's supported SM clocks, resolve the cap to the highest supported clock at or below
   it (a cap below the lowest clock skips the case);
2. the setting saved is the previous lock: none (a reset brings the driver's own clock management
   back) or the range an earlier run's entry recorded;
3. lock the clock, and read it back where the library can. NVML can set and reset a lock but cannot
   read one (``UNREADABLE``): on a real GPU the plugin knows a lock only from its own journal, and a
   lock set by someone else (``nvidia-smi -lgc``) is not seen. The simulator reads its locks
   (``simGetGpuLockedClocks``), so there every restore and repair is checked by reading back.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from ..errors import CapOutOfRange, CapPermissionError, DeviceError, DevicePermissionError, GpuLostError, LimitChangeError
from .device import Backend, Gpu, SmClockLocking, retry_transient
from .journal import Journal, JournalEntry, Legacy, journal_for, whole_number
from .knob import UNREADABLE, Setter, Unreadable
from .specs import ClockSpec

ClockLock = tuple[int, int] | None      # (min MHz, max MHz); None: not locked (the driver's own management)
_T = TypeVar("_T")
_MAX_CLOCK_MHZ = 100_000

# -- a GPU's SM clocks -----------------------------------------------------------------------

@dataclass(frozen=True)
class ClockRange:
    """The SM clocks a GPU supports, in MHz, highest first."""

    supported_mhz: tuple[int, ...]

    @property
    def max_mhz(self) -> int:
        return self.supported_mhz[0]

    @property
    def min_mhz(self) -> int:
        return self.supported_mhz[-1]

    def snap(self, mhz: float) -> int | None:
        """The highest supported clock at or below ``mhz`` (None below the lowest)."""
        return next((c for c in self.supported_mhz if c <= mhz + 1e-9), None)

    def text(self) -> str:
        return f"{self.min_mhz}-{self.max_mhz} MHz"


def locking(gpu: Gpu) -> SmClockLocking:
    """``gpu`` as a GPU whose SM clock can be locked; one line naming it where it cannot (AMD's GPUs:
    their clocks are not a knob of this plugin). A ``CapOutOfRange``: the case is skipped, as for a
    cap outside a GPU's range."""
    if not isinstance(gpu, SmClockLocking):
        raise CapOutOfRange(f"SM clock caps are not supported on {gpu.label}: pytest-gpuenergy locks SM clocks "
                            f"of NVIDIA GPUs only; drop --gpu-clocks for it")
    return gpu


def clock_range(gpu: Gpu) -> ClockRange:
    """The GPU's supported SM clocks at its highest memory clock."""
    clocks = locking(gpu).supported_sm_clocks_mhz()
    if not clocks:
        raise LimitChangeError(f"{gpu.label} lists no supported SM clocks: its clocks cannot be locked")
    return ClockRange(tuple(clocks))


def sm_clock_now_mhz(gpu: Gpu) -> int:
    return locking(gpu).sm_clock_mhz()


# -- applying a clock cap ----------------------------------------------------------------------

@dataclass(frozen=True)
class GpuClockCap:
    """One GPU under a clock cap: what was asked, what it runs at most, what it had before."""

    gpu_index: int
    gpu_name: str
    gpu_uuid: str
    requested_mhz: float | None       # None: nothing was asked (no --gpu-clocks)
    enforced_mhz: int | None          # the lock's upper end; None: not locked
    previous_lock_mhz: tuple[int, int] | None
    previous_known: bool              # False on real NVML: a lock set outside the plugin cannot be read
    min_mhz: int | None               # None: the GPU has no SM clock lock (AMD's)
    max_mhz: int | None


@dataclass(frozen=True, repr=False)
class ClockCap:
    """What the ``gpu_clock_cap`` fixture gives a test."""

    label: str                         # "1200MHz", "clk50%", "clkmax", or "current" without --gpu-clocks
    spec: ClockSpec | None
    gpus: tuple[GpuClockCap, ...] = field(default=())

    @property
    def requested_mhz(self) -> float | None:
        return self.gpus[0].requested_mhz

    @property
    def enforced_mhz(self) -> int | None:
        return self.gpus[0].enforced_mhz

    @property
    def previous_lock_mhz(self) -> tuple[int, int] | None:
        return self.gpus[0].previous_lock_mhz

    @property
    def gpu_name(self) -> str:
        return self.gpus[0].gpu_name

    def __repr__(self) -> str:
        return f"ClockCap({self})"

    def __str__(self) -> str:
        parts = [f"GPU {g.gpu_index} {g.gpu_name}: "
                 + (f"requested {g.requested_mhz:g} MHz, " if g.requested_mhz is not None else "")
                 + (f"SM clock at most {g.enforced_mhz} MHz" if g.enforced_mhz is not None else "SM clock not locked")
                 for g in self.gpus]
        return f"clock cap {self.label} ({'; '.join(parts)})"


def lock_text(lock: ClockLock | Unreadable) -> str:
    if lock is UNREADABLE:
        return "unknown (not readable)"
    return "not locked" if lock is None else f"{lock[0]}-{lock[1]} MHz"


class SmClockKnob:
    """The SM clock lock as a knob (``knob.Knob[ClockLock]``): readable on the simulator only."""

    name = "sm-clock"
    what = "SM clock"

    def read(self, gpu: Gpu) -> ClockLock | Unreadable:
        if not isinstance(gpu, SmClockLocking) or not gpu.reads_clock_lock:
            return UNREADABLE
        return gpu.sm_clock_lock_mhz()

    def put(self, gpu: Gpu, setting: ClockLock) -> None:
        """Lock the SM clock to ``setting``, or reset it (None): the driver's own clock management."""
        if setting is None:
            locking(gpu).unlock_sm_clock()
        else:
            locking(gpu).lock_sm_clock_mhz(int(setting[0]), int(setting[1]))

    def refusal(self, gpu: Gpu, setting: ClockLock) -> str | None:
        return None

    def text(self, setting: ClockLock) -> str:
        return lock_text(setting)

    def describe(self, entry: JournalEntry[ClockLock]) -> str:
        return (f"GPU {entry.gpu_index} ({entry.gpu_name}, {entry.gpu_uuid}): SM clock locked at "
                f"{lock_text(entry.applied)} by pid {entry.pid} on {entry.host}, before: {lock_text(entry.saved)}")

    def left_text(self, entry: JournalEntry[ClockLock]) -> str:
        return (f"GPU {entry.gpu_index} ({entry.gpu_name}, {entry.gpu_uuid}) with its SM clock locked at "
                f"{lock_text(entry.applied)}, before: {lock_text(entry.saved)}")

    def driver_command(self, gpu_uuid: str, vendor: str, setting: ClockLock) -> str:
        return f"nvidia-smi -i {gpu_uuid} {'-rgc' if setting is None else f'-lgc {setting[0]},{setting[1]}'}"

    def encode(self, setting: ClockLock) -> list[int] | None:
        return None if setting is None else list(setting)

    def decode(self, value: Any, field: str) -> ClockLock:
        if value is None and field == "saved":
            return None
        if not isinstance(value, list) or len(value) != 2:
            raise ValueError(f"{field} must be a lock [min MHz, max MHz]{' or null' * (field == 'saved')}, got {value!r}")
        return _lock(whole_number(value[0], f"{field}'s min", 1, _MAX_CLOCK_MHZ),
                     whole_number(value[1], f"{field}'s max", 1, _MAX_CLOCK_MHZ))


def _lock(min_mhz: int, max_mhz: int) -> tuple[int, int]:
    if min_mhz > max_mhz:
        raise ValueError("a lock's lower end lies above its upper end")
    return (min_mhz, max_mhz)


def _legacy_clock(data: dict[str, Any]) -> tuple[ClockLock, ClockLock]:
    """An entry of ``gpuenergy-clock-journal`` (0, 0 before: none)."""
    before = [whole_number(data.get(name), name, 0, _MAX_CLOCK_MHZ) for name in ("previous_min_mhz", "previous_max_mhz")]
    applied = [whole_number(data.get(name), name, 1, _MAX_CLOCK_MHZ) for name in ("applied_min_mhz", "applied_max_mhz")]
    saved = _lock(*before)
    return (saved if before[1] else None), _lock(*applied)


SM_CLOCK = SmClockKnob()
LEGACY_CLOCK = Legacy[ClockLock]("gpuenergy-clock-journal", "clock-lock", _legacy_clock)


def clock_journal_for(backend: Backend) -> Journal[ClockLock]:
    """The clock locks' journal (``journal/clocks/``), reading the entries of earlier versions too."""
    return journal_for(backend, SM_CLOCK, LEGACY_CLOCK)


class ClockCapper(Setter[ClockLock]):
    """Locks one clock cap on a set of GPUs and guarantees their previous state comes back.

    Use as a context manager, or ``apply`` then ``restore`` in a ``finally`` (as ``PowerCapper``).
    """

    def __init__(self, gpus: Sequence[Gpu], journal: Journal[ClockLock], lock_folder: Path) -> None:
        super().__init__(SM_CLOCK, gpus, journal, lock_folder)

    def __enter__(self) -> ClockCapper:
        return self

    def current(self) -> ClockCap:
        """The GPUs as they are, nothing changed (the case without ``--gpu-clocks``)."""
        described = []
        for gpu in self.gpus:
            found = _read(gpu, clock_range) if isinstance(gpu, SmClockLocking) else None    # AMD: no clock knob
            lock = _read(gpu, SM_CLOCK.read)
            known = None if lock is UNREADABLE else lock
            described.append(GpuClockCap(gpu.index, gpu.name, gpu.uuid, None, known[1] if known else None, known,
                                         lock is not UNREADABLE, found.min_mhz if found else None,
                                         found.max_mhz if found else None))
        return ClockCap("current", None, tuple(described))

    def apply(self, spec: ClockSpec) -> ClockCap:
        with self.changing("a clock cap is already applied: restore it before applying another"):
            ranges = {gpu.uuid: _read(gpu, clock_range) for gpu in self.gpus}
            targets = {gpu.uuid: _target_mhz(spec, gpu, ranges[gpu.uuid]) for gpu in self.gpus}
            described = [self._apply_one(gpu, ranges[gpu.uuid], spec, targets[gpu.uuid]) for gpu in self.gpus]
        return ClockCap(spec.label, spec, tuple(described))

    def _apply_one(self, gpu: Gpu, found: ClockRange, spec: ClockSpec, target: int) -> GpuClockCap:
        lock_now = _read(gpu, SM_CLOCK.read)
        left = self.journal.entry(gpu.uuid)       # a lock someone left: its entry knows the previous state
        previous = left.saved if left is not None else (None if lock_now is UNREADABLE else lock_now)
        wanted = (found.min_mhz, target)
        self.journaled(gpu, previous, wanted)
        _set(gpu, wanted)
        lock_after = _read(gpu, SM_CLOCK.read)
        if lock_after is not UNREADABLE and lock_after is not None and lock_after[1] != target:
            raise LimitChangeError(f"{gpu.label} locks its SM clock at {lock_text(lock_after)} after a request for "
                                   f"{lock_text(wanted)}: the lock did not take effect as asked")
        if lock_after is None:
            raise LimitChangeError(f"{gpu.label} shows no SM clock lock after a request for {lock_text(wanted)}: "
                                   f"the lock did not take effect (another clock manager, or a driver that ignores it)")
        return GpuClockCap(gpu.index, gpu.name, gpu.uuid, spec.resolve_mhz(found.max_mhz), target, previous,
                           lock_after is not UNREADABLE or left is not None, found.min_mhz, found.max_mhz)


def _read(gpu: Gpu, reading: Callable[[Gpu], _T]) -> _T:
    try:
        return retry_transient(lambda: reading(gpu), gpu.retry_backoff_s)
    except GpuLostError:
        raise gpu.lost_error() from None
    except DeviceError as exc:
        raise LimitChangeError(f"reading the SM clocks of {gpu.label} failed: {exc}") from None


def _target_mhz(spec: ClockSpec, gpu: Gpu, found: ClockRange) -> int:
    wanted = spec.resolve_mhz(found.max_mhz)
    target = found.snap(wanted)
    if target is None:
        raise CapOutOfRange(f"clock cap {spec.label} = {wanted:g} MHz is below the lowest SM clock of "
                            f"{gpu.label}; it supports {found.text()}")
    return target


def _set(gpu: Gpu, lock: tuple[int, int]) -> None:
    try:
        retry_transient(lambda: SM_CLOCK.put(gpu, lock), gpu.retry_backoff_s)
    except DevicePermissionError:
        raise CapPermissionError(
            f"not allowed to lock the SM clock of {gpu.label}: NVML needs root (CAP_SYS_ADMIN) for that. Run "
            f"pytest with the right privileges (e.g. `sudo -E pytest ...`), or drop --gpu-clocks to run at the "
            f"GPU's own clocks"
        ) from None
    except GpuLostError:
        raise gpu.lost_error("locking its SM clock") from None
    except DeviceError as exc:
        raise LimitChangeError(f"locking the SM clock of {gpu.label} at {lock_text(lock)} failed: {exc}") from None
