"""SM clock caps, the second knob: locking one (as typed, ``specs.ClockSpec``) so that it always
comes back.

Both seeds capped frequency as well as power (the Fathom study on the P100; Tang et al.: the best
core frequency saves 8.7-23.1 % of training energy), and Zeus locks SM clocks for the same reason.
A clock cap locks the SM clock range to [the GPU's lowest clock, the cap] with
``nvmlDeviceSetGpuLockedClocks``: the driver still lowers the clock under a power limit, never
raises it above the cap. It follows the power cap's order (``capping.py``), so that a crash at
any point can be repaired:

1. hold the GPUs' cross-process locks, read each GPU's supported SM clocks, resolve the cap to
   the highest supported clock at or below it (a cap below the lowest clock skips the case);
2. write the clock journal entry (``clock_journal.py``) with the previous lock before touching the GPU;
3. lock the clock, and read it back where the library can (the simulator; NVML cannot read a lock);
4. on restore: reset the lock (``nvmlDeviceResetGpuLockedClocks``), or put back the previous lock
   where an earlier run's entry recorded one, with signals held, then clear the entry.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path

import pynvml

from ..errors import CapOutOfRange, CapPermissionError, LimitChangeError, LimitRestoreError
from .capping import restore_after_failure
from .clock_journal import ClockJournal, ClockJournalEntry, lock_text, put_lock, read_lock
from .device import RETRY_ATTEMPTS, Gpu, retry_transient
from .locks import holding, lock_paths
from .signals import signals_held
from .specs import ClockSpec

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


def clock_range(gpu: Gpu) -> ClockRange:
    """The GPU's supported SM clocks at its highest memory clock (NVML's lists)."""
    nvml, handle = gpu.nvml, gpu.handle
    memory = max(int(m) for m in nvml.nvmlDeviceGetSupportedMemoryClocks(handle))
    clocks = sorted({int(c) for c in nvml.nvmlDeviceGetSupportedGraphicsClocks(handle, memory)}, reverse=True)
    if not clocks:
        raise LimitChangeError(f"{gpu.label} lists no supported SM clocks: its clocks cannot be locked")
    return ClockRange(tuple(clocks))


def sm_clock_now_mhz(gpu: Gpu) -> int:
    return int(gpu.nvml.nvmlDeviceGetClockInfo(gpu.handle, pynvml.NVML_CLOCK_SM))


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
    min_mhz: int
    max_mhz: int


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


@dataclass
class _Locked:
    gpu: Gpu
    entry: ClockJournalEntry


class ClockCapper:
    """Locks one clock cap on a set of GPUs and guarantees their previous state comes back.

    Use as a context manager, or ``apply`` then ``restore`` in a ``finally`` (as ``PowerCapper``).
    """

    def __init__(self, gpus: Sequence[Gpu], journal: ClockJournal, lock_folder: Path) -> None:
        self.gpus = list(gpus)
        self.journal = journal
        self.lock_folder = lock_folder
        self._locked: list[_Locked] = []
        self._locks = ExitStack()

    def __enter__(self) -> ClockCapper:
        return self

    def __exit__(self, *exc: object) -> None:
        self.restore()

    @property
    def pending(self) -> list[Gpu]:
        return [item.gpu for item in self._locked]

    def current(self) -> ClockCap:
        """The GPUs as they are, nothing changed (the case without ``--gpu-clocks``)."""
        described = []
        for gpu in self.gpus:
            found = _read(gpu, clock_range)
            readable, lock = _read(gpu, read_lock)
            described.append(GpuClockCap(gpu.index, gpu.name, gpu.uuid, None, lock[1] if lock else None, lock,
                                         readable, found.min_mhz, found.max_mhz))
        return ClockCap("current", None, tuple(described))

    def apply(self, spec: ClockSpec) -> ClockCap:
        if self._locked:
            raise LimitChangeError("a clock cap is already applied: restore it before applying another")
        self._locks.enter_context(holding(lock_paths(self.lock_folder, [g.uuid for g in self.gpus])))
        try:
            ranges = {gpu.uuid: _read(gpu, clock_range) for gpu in self.gpus}
            targets = {gpu.uuid: _target_mhz(spec, gpu, ranges[gpu.uuid]) for gpu in self.gpus}
            described = [self._apply_one(gpu, ranges[gpu.uuid], spec, targets[gpu.uuid]) for gpu in self.gpus]
        except BaseException as exc:
            restore_after_failure(self, exc)
            raise
        return ClockCap(spec.label, spec, tuple(described))

    def _apply_one(self, gpu: Gpu, found: ClockRange, spec: ClockSpec, target: int) -> GpuClockCap:
        readable, lock_now = _read(gpu, read_lock)
        left = self.journal.entry(gpu.uuid)       # a lock someone left: its entry knows the previous state
        previous = left.previous if left is not None else lock_now  # type: ignore[attr-defined]  # a ClockJournalEntry
        wanted = (found.min_mhz, target)
        entry = self.journal.record_lock(gpu, previous, wanted)
        self._locked.append(_Locked(gpu, entry))
        _set(gpu, wanted)
        readable, lock_after = _read(gpu, read_lock)
        if readable and lock_after is not None and lock_after[1] != target:
            raise LimitChangeError(f"{gpu.label} locks its SM clock at {lock_text(lock_after)} after a request for "
                                   f"{lock_text(wanted)}: the lock did not take effect as asked")
        if readable and lock_after is None:
            raise LimitChangeError(f"{gpu.label} shows no SM clock lock after a request for {lock_text(wanted)}: "
                                   f"the lock did not take effect (another clock manager, or a driver that ignores it)")
        return GpuClockCap(gpu.index, gpu.name, gpu.uuid, spec.resolve_mhz(found.max_mhz), target, previous,
                           readable or left is not None, found.min_mhz, found.max_mhz)

    def restore(self) -> None:
        """Put every locked GPU back (reset, or the previous lock); raise if any stays changed.

        Transient NVML errors are retried; SIGINT, SIGTERM and SIGHUP wait until it is done. A GPU
        that cannot be restored keeps its journal entry for ``gpuenergy restore`` and is named.
        """
        failures: list[str] = []
        try:
            if self._locked:
                with signals_held(f"restoring the SM clocks of {', '.join(i.gpu.label for i in self._locked)}"):
                    while self._locked:
                        item = self._locked.pop()
                        problem = _restore_one(item.gpu, item.entry.previous)
                        if problem is None:
                            self.journal.clear(item.entry)  # type: ignore[arg-type]  # the power journal clears any entry by its GPU
                        else:
                            failures.append(problem)
        finally:
            self._locks.close()
        if failures:
            raise LimitRestoreError("; ".join(failures))


def _read(gpu: Gpu, reading):
    try:
        return retry_transient(lambda: reading(gpu), gpu.retry_backoff_s)
    except pynvml.NVMLError_GpuIsLost:
        raise gpu.lost_error() from None
    except pynvml.NVMLError as exc:
        raise LimitChangeError(f"reading the SM clocks of {gpu.label} failed: NVML: {exc}") from None


def _target_mhz(spec: ClockSpec, gpu: Gpu, found: ClockRange) -> int:
    wanted = spec.resolve_mhz(found.max_mhz)
    target = found.snap(wanted)
    if target is None:
        raise CapOutOfRange(f"clock cap {spec.label} = {wanted:g} MHz is below the lowest SM clock of "
                            f"{gpu.label}; it supports {found.text()}")
    return target


def _set(gpu: Gpu, lock: tuple[int, int]) -> None:
    try:
        retry_transient(lambda: put_lock(gpu, lock), gpu.retry_backoff_s)
    except pynvml.NVMLError_NoPermission:
        raise CapPermissionError(
            f"not allowed to lock the SM clock of {gpu.label}: NVML needs root (CAP_SYS_ADMIN) for that. Run "
            f"pytest with the right privileges (e.g. `sudo -E pytest ...`), or drop --gpu-clocks to run at the "
            f"GPU's own clocks"
        ) from None
    except pynvml.NVMLError_GpuIsLost:
        raise gpu.lost_error("locking its SM clock") from None
    except pynvml.NVMLError as exc:
        raise LimitChangeError(f"locking the SM clock of {gpu.label} at {lock_text(lock)} failed: NVML: {exc}") from None


def _restore_one(gpu: Gpu, previous: tuple[int, int] | None) -> str | None:
    last_problem = ""
    for attempt in range(RETRY_ATTEMPTS):
        if attempt:
            time.sleep(gpu.retry_backoff_s * attempt)
        try:
            readable, now = read_lock(gpu)
            if readable and now == previous:     # nothing to put back (the lock never took)
                return None
            put_lock(gpu, previous)
            readable, now = read_lock(gpu)
            if not readable or now == previous:
                return None
            last_problem = f"it reads {lock_text(now)}"
        except pynvml.NVMLError_GpuIsLost:
            return f"{gpu.label} is lost (NVML: GPU is lost) and its SM clock could not be set back to {lock_text(previous)}"
        except pynvml.NVMLError as exc:
            last_problem = f"NVML: {exc}"
    return (f"the SM clock of {gpu.label} could not be set back to {lock_text(previous)} after {RETRY_ATTEMPTS} "
            f"attempts ({last_problem})")
