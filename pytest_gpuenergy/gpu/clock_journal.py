"""The journal of locked SM clocks: the second knob's entry kind, beside the power limits' journal.

A clock lock (``nvmlDeviceSetGpuLockedClocks``) survives the process that set it, like a power
limit, so it follows the same rules (see ``journal.py``, whose machinery this reuses): before the
plugin locks a GPU's SM clock it writes the GPU's UUID and its *previous* lock (none, or the range
an earlier pytest-gpuenergy run left and whose entry is still here) into ``journal/clocks/``; it
removes the entry only once the previous state is back. A killed run is repaired by the next
session and by ``gpuenergy restore`` (``repair``), holding the GPU's lock.

NVML can set and reset a lock but cannot read one back. On a real GPU the plugin therefore knows a
lock only from its own journal: a lock set by someone else (``nvidia-smi -lgc``) is not seen, and
what comes back after a test is the reset (the driver's own clock management). The simulator can
read its locks (``simGetGpuLockedClocks``), so there every repair is checked by reading back.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pynvml

from ..fileio import file_lock
from .device import Backend, Gpu
from .journal import Journal, RepairOutcome, direct_fix, entry_fields, journal_for, whole_field
from .processes import is_alive, process_start

_FORMAT = "gpuenergy-clock-journal"
_MAX_CLOCK_MHZ = 100_000


@dataclass(frozen=True)
class ClockJournalEntry:
    gpu_uuid: str
    gpu_index: int
    gpu_name: str
    previous_min_mhz: int       # the lock before the first change; 0, 0: none (reset to restore)
    previous_max_mhz: int
    applied_min_mhz: int
    applied_max_mhz: int
    pid: int
    process_start: str
    host: str
    written_at: float
    format: str = _FORMAT

    @property
    def previous(self) -> tuple[int, int] | None:
        return (self.previous_min_mhz, self.previous_max_mhz) if self.previous_max_mhz else None

    @property
    def applied(self) -> tuple[int, int]:
        return (self.applied_min_mhz, self.applied_max_mhz)

    def describe(self) -> str:
        before = lock_text(self.previous)
        return (f"GPU {self.gpu_index} ({self.gpu_name}, {self.gpu_uuid}): SM clock locked at "
                f"{lock_text(self.applied)} by pid {self.pid} on {self.host}, before: {before}")

    def left_text(self) -> str:
        return (f"GPU {self.gpu_index} ({self.gpu_name}, {self.gpu_uuid}) with its SM clock locked at "
                f"{lock_text(self.applied)}, before: {lock_text(self.previous)}")

    def fix_command(self, gpu: Gpu) -> str:
        before = self.previous
        flags = "-rgc" if before is None else f"-lgc {before[0]},{before[1]}"
        return direct_fix(gpu, f"nvidia-smi -i {self.gpu_uuid} {flags}")

    def same_write(self, other: ClockJournalEntry) -> bool:
        return (self.pid, self.process_start, self.written_at) == (other.pid, other.process_start, other.written_at)

    def owner_runs(self) -> bool:
        return (self.host == socket.gethostname() and self.pid != os.getpid()
                and is_alive(self.pid, self.process_start))


def lock_text(lock: tuple[int, int] | None) -> str:
    return "not locked" if lock is None else f"{lock[0]}-{lock[1]} MHz"


# -- reading and setting a lock: NVML's calls, with the simulator's reading where there is one ----

def read_lock(gpu: Gpu) -> tuple[bool, tuple[int, int] | None]:
    """(readable, lock): the simulator reads its lock; NVML cannot, so a real GPU reads (False, None)."""
    reader: Callable[[Any], Any] | None = getattr(gpu.nvml, "simGetGpuLockedClocks", None)
    if reader is None:
        return False, None
    found = reader(gpu.handle)
    return True, (None if found is None else (int(found[0]), int(found[1])))


def put_lock(gpu: Gpu, lock: tuple[int, int] | None) -> None:
    """Lock the SM clock to ``lock``, or reset it (None): the driver's own clock management."""
    if lock is None:
        gpu.nvml.nvmlDeviceResetGpuLockedClocks(gpu.handle)
    else:
        gpu.nvml.nvmlDeviceSetGpuLockedClocks(gpu.handle, int(lock[0]), int(lock[1]))


class ClockJournal(Journal):
    """Clock-lock entries, one file per GPU; ``repair`` and ``clear`` are the power journal's."""

    kind = "SM-clock"

    def record_lock(self, gpu: Gpu, previous: tuple[int, int] | None, applied: tuple[int, int]) -> ClockJournalEntry:
        """Note the lock about to be set (with the GPU's lock held); an entry already there keeps its previous state."""
        with file_lock(self.folder, ".lock") as folder_fd:
            existing = self._read(folder_fd, self._name(gpu.uuid))
            before = existing.previous if existing is not None else previous
            entry = ClockJournalEntry(
                gpu_uuid=gpu.uuid, gpu_index=gpu.index, gpu_name=gpu.name,
                previous_min_mhz=before[0] if before else 0, previous_max_mhz=before[1] if before else 0,
                applied_min_mhz=applied[0], applied_max_mhz=applied[1],
                pid=os.getpid(), process_start=process_start(os.getpid()),
                host=socket.gethostname(), written_at=time.time(),
            )
            self._write(folder_fd, entry)
            return entry

    @staticmethod
    def _parse(data: Any, file_uuid: str) -> Any:
        return _entry_from_json(data, file_uuid)

    @staticmethod
    def _unreadable(path: Path, exc: Exception) -> str:
        return (f"the clock-lock journal entry {path} is unreadable ({exc}); check the GPU's clocks with "
                f"`gpuenergy info`, reset them if needed (nvidia-smi -rgc), then delete the file")

    def _repair_one(self, gpu: Gpu, entry: Any) -> RepairOutcome:
        try:
            readable, now = read_lock(gpu)
            if readable and now == entry.previous:
                self.clear(entry)
                return RepairOutcome(entry, "already-restored", f"{entry.describe()}: already {lock_text(now)}")
            if readable and now != entry.applied:
                self.clear(entry)
                return RepairOutcome(entry, "changed-since",
                                     f"{entry.describe()}: now {lock_text(now)}, set by someone else since; left as it is")
            with self._putting_back(gpu, entry):
                put_lock(gpu, entry.previous)
            readable, now = read_lock(gpu)
        except pynvml.NVMLError as exc:
            return RepairOutcome(entry, "failed", f"{entry.describe()}: could not restore it (NVML: {exc})")
        if readable and now != entry.previous:
            return RepairOutcome(entry, "failed", f"{entry.describe()}: set back, but it reads {lock_text(now)}")
        self.clear(entry)
        return RepairOutcome(entry, "restored", f"{entry.describe()}: restored to {lock_text(entry.previous)}")


def _entry_from_json(data: Any, file_uuid: str) -> ClockJournalEntry:
    """Check every field: a damaged entry must be an error, never a clock to set."""
    fields = entry_fields(data, file_uuid, _FORMAT, ClockJournalEntry, "clock-lock")
    for name in ("previous_min_mhz", "previous_max_mhz"):
        whole_field(fields, name, 0, _MAX_CLOCK_MHZ)
    for name in ("applied_min_mhz", "applied_max_mhz"):
        whole_field(fields, name, 1, _MAX_CLOCK_MHZ)
    if fields["previous_min_mhz"] > fields["previous_max_mhz"] or fields["applied_min_mhz"] > fields["applied_max_mhz"]:
        raise ValueError("a lock's lower end lies above its upper end")
    return ClockJournalEntry(**fields)


def clock_journal_for(backend: Backend) -> ClockJournal:
    return ClockJournal(backend.state_dir / "journal" / "clocks", backend.lock_folder)


def journals_for(backend: Backend) -> list[Journal]:
    """Every knob's journal: power limits, then clock locks (repairs go through both)."""
    return [journal_for(backend), clock_journal_for(backend)]
