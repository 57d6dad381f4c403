"""The journal of changed settings: how a GPU gets its saved setting back, whoever changed it.

A power limit or an SM clock lock survives the process that set it. Before the plugin changes one
(``knob.py``) it writes an entry here: which knob, which device (UUID and vendor), the setting to
bring back and the one applied (atomically, one file per knob and GPU), and it removes the entry
only once the GPU reads back the saved setting. The entry owns the saved setting until then:

* a setter that finds an entry (its writer dead, or alive after a restore that failed) takes it
  over and keeps its saved setting, so a cap left by a killed xdist worker or another session is
  never taken for the GPU's own limit;
* ``repair`` (the start and the end of every session, ``gpuenergy restore``) puts back the saved
  setting of an entry whose writer is gone, holding the GPU's lock and reading the entry again
  under it, so it never acts on an entry that changed hands meanwhile; a GPU whose lock another
  session holds is left to that session, and an entry whose writer still runs is never deleted
  by someone else (unless forced).

One class serves every knob (``Journal[S]``, ``S`` the knob's setting). Each knob has its folder:
``journal/`` for power limits and ``journal/clocks/`` for clock locks, where earlier versions kept
them, so that their entries are found after an upgrade: entries in their formats
(``gpuenergy-limit-journal``, ``gpuenergy-clock-journal``) are still read and repaired (``Legacy``).

Entries are state files (``fileio``), read and written through the descriptor of a folder reached
by a checked walk from ``/`` (``trusted_path``): a folder on the way another user could change
(theirs, one every user can write) is refused before anything is read, so no entry can be deleted,
renamed away or planted; a link, a hard link or a world-writable entry is refused too, and a
damaged one is an error naming the file. While an entry is pending, the signals module knows the
setting it stands for, so that a restore stopped by a second signal says what it leaves and how to
fix it; the fix named while ``gpuenergy restore`` runs is the driver's own command, never itself.
"""

from __future__ import annotations

import contextlib
import math
import os
import socket
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from .. import realtime
from ..errors import DeviceError, JournalCorrupt
from ..fileio import LockWaitTimeout, file_lock, read_state_at, state_dir, write_state_json
from ..runs.validation import parse_json, shown
from .device import Backend, Gpu
from .knob import UNREADABLE, Knob
from .leftovers import JOURNAL_FOLDERS
from .locks import GpuLockBusy, holding, lock_paths
from .processes import is_alive, process_start
from .signals import RestoreAbandoned, gave_up, note_back, note_left, signals_held

if TYPE_CHECKING:
    from .knob import Unreadable

S = TypeVar("S")

FORMAT = "gpuenergy-journal"
VENDORS = ("nvidia", "amd")
_MAX_PID = 2**31 - 1
PROBLEM_ACTIONS = ("failed", "gpu-missing", "owner-alive", "busy", "stopped")


@dataclass(frozen=True)
class JournalEntry(Generic[S]):
    """One changed setting: the knob, the device, the setting to bring back, and who changed it."""

    knob: Knob[S]
    gpu_uuid: str
    gpu_index: int
    gpu_name: str
    vendor: str                 # "nvidia" or "amd": whose command puts it back
    saved: S                    # the setting from before the first change
    applied: S
    pid: int
    process_start: str          # tells a live owner from a reused pid
    host: str
    written_at: float

    def describe(self) -> str:
        return self.knob.describe(self)

    def left_text(self) -> str:
        """The setting this entry stands for, and the saved one (what a stopped restore leaves)."""
        return self.knob.left_text(self)

    def fix_command(self, gpu: Gpu) -> str:
        """The command that puts the saved setting back, without pytest-gpuenergy."""
        return direct_fix(gpu, self.knob.driver_command(self.gpu_uuid, self.vendor, self.saved))

    def same_write(self, other: JournalEntry[S]) -> bool:
        """Whether ``other`` is this very entry (same writer, same moment), not a later one."""
        return (self.pid, self.process_start, self.written_at) == (other.pid, other.process_start, other.written_at)

    def owner_runs(self) -> bool:
        """Whether another process that still runs on this host wrote it (this process's own never counts)."""
        return (self.host == socket.gethostname() and self.pid != os.getpid()
                and is_alive(self.pid, self.process_start))

    def to_json(self) -> dict[str, Any]:
        return {"format": FORMAT, "knob": self.knob.name, "gpu_uuid": self.gpu_uuid, "gpu_index": self.gpu_index,
                "gpu_name": self.gpu_name, "vendor": self.vendor, "saved": self.knob.encode(self.saved),
                "applied": self.knob.encode(self.applied), "pid": self.pid, "process_start": self.process_start,
                "host": self.host, "written_at": self.written_at}


@dataclass(frozen=True)
class Legacy(Generic[S]):
    """A knob's entry format from before the one journal (0.x): still read, so that a user who
    upgrades with a GPU left changed gets it back. ``decode`` checks the setting's own fields and
    returns (saved, applied); those entries came from NVML only."""

    format: str                 # "gpuenergy-limit-journal"
    what: str                   # "limit": "not a limit journal entry"
    decode: Callable[[dict[str, Any]], tuple[S, S]]


@dataclass(frozen=True)
class RepairOutcome:
    entry: JournalEntry[Any]
    action: str      # "restored", "already-restored", "changed-since", "owner-alive", "busy", "gpu-missing", "failed", "stopped"
    message: str


class Journal(Generic[S]):
    """One knob's entries, one file per GPU."""

    def __init__(self, knob: Knob[S], folder: Path, lock_folder: Path | None = None,
                 legacy: Legacy[S] | None = None) -> None:
        self.knob = knob
        self.folder = Path(folder)
        self.lock_folder = Path(lock_folder) if lock_folder is not None else self.folder.parent / "locks"
        self.legacy = legacy

    @staticmethod
    def _name(gpu_uuid: str) -> str:
        return f"{gpu_uuid}.json"

    def entry(self, gpu_uuid: str) -> JournalEntry[S] | None:
        """The GPU's entry, or None; read it with the GPU's lock held to act on it."""
        try:
            with state_dir(self.folder, create=False) as folder_fd:
                return self._read(folder_fd, self._name(gpu_uuid))
        except FileNotFoundError:
            return None

    def record(self, gpu: Gpu, saved: S, applied: S) -> JournalEntry[S]:
        """Note the change about to be made (with the GPU's lock held).

        An entry already there keeps its saved setting, whoever wrote it: this process takes it
        over, and what comes back is the setting from before the first change.
        """
        with file_lock(self.folder, ".lock") as folder_fd:
            existing = self._read(folder_fd, self._name(gpu.uuid))
            entry = JournalEntry(
                knob=self.knob, gpu_uuid=gpu.uuid, gpu_index=gpu.index, gpu_name=gpu.name,
                vendor=gpu.vendor,
                saved=existing.saved if existing is not None else saved, applied=applied,
                pid=os.getpid(), process_start=process_start(os.getpid()),
                host=socket.gethostname(), written_at=realtime.wall_time(),
            )
            # Until it is cleared, a stopped restore names it with `gpuenergy restore` as the fix.
            note_left(self._key(entry), f"{entry.left_text()}; to put it back: gpuenergy restore")
            # Atomic (a temporary file renamed over it) but not fsynced: the entry must outlive this
            # process, and the page cache does; what it would not outlive, the host crashing, also
            # puts every GPU back at its default limit and clocks (the driver starts afresh), so an
            # entry lost there names nothing to repair. Two fsyncs a capped test cost 0.4 ms here and
            # milliseconds on a slow disk, at every test of --energy-all --gpu-caps.
            write_state_json(folder_fd, self._name(gpu.uuid), entry.to_json(), shown=self.folder / self._name(gpu.uuid),
                             durable=False)
            return entry

    def _key(self, entry: JournalEntry[S]) -> str:
        return f"{self.knob.name}/{entry.gpu_uuid}"

    def clear(self, entry: JournalEntry[S]) -> None:
        """Delete ``entry`` once its saved setting is back; a newer entry of someone else is never deleted."""
        with file_lock(self.folder, ".lock") as folder_fd:
            current = self._read(folder_fd, self._name(entry.gpu_uuid))
            if current is not None and current.same_write(entry):
                os.unlink(self._name(entry.gpu_uuid), dir_fd=folder_fd)
        note_back(self._key(entry))

    def entries(self) -> list[JournalEntry[S]]:
        try:
            with state_dir(self.folder, create=False) as folder_fd:
                names = sorted(name for name in os.listdir(folder_fd) if name.startswith("GPU-") and name.endswith(".json"))
                return [entry for entry in (self._read(folder_fd, name) for name in names) if entry is not None]
        except FileNotFoundError:
            return []

    def _read(self, folder_fd: int, name: str) -> JournalEntry[S] | None:
        path = self.folder / name
        try:
            return self._parse(parse_json(read_state_at(folder_fd, name, shown=path)), name.removesuffix(".json"))
        except FileNotFoundError:
            return None
        except ValueError as exc:      # also JsonInputError, undecodable bytes
            raise JournalCorrupt(f"the {self.knob.what} journal entry {path} is unreadable ({exc}); check the "
                                 f"GPU's {self.knob.what} with `gpuenergy info`, put it back if needed, then "
                                 f"delete the file") from None

    def _parse(self, data: Any, file_uuid: str) -> JournalEntry[S]:
        """Check every field: a damaged entry must be an error, never a setting to put on a GPU."""
        formats = [FORMAT] + ([self.legacy.format] if self.legacy is not None else [])
        if not isinstance(data, dict) or data.get("format") not in formats:
            raise ValueError(f"not a {self.legacy.what if self.legacy else self.knob.name} journal entry")
        if self.legacy is not None and data["format"] == self.legacy.format:
            fields = _common_fields(data, file_uuid)
            saved, applied = self.legacy.decode(data)
            return JournalEntry(self.knob, vendor="nvidia", saved=saved, applied=applied, **fields)
        if data.get("knob") != self.knob.name:
            raise ValueError(f"it is an entry of the knob {shown(data.get('knob'))}, not of {self.knob.name}")
        if data.get("vendor") not in VENDORS:
            raise ValueError(f"vendor must be one of {', '.join(VENDORS)}, got {shown(data.get('vendor'))}")
        return JournalEntry(self.knob, vendor=data["vendor"], saved=self.knob.decode(data.get("saved"), "saved"),
                            applied=self.knob.decode(data.get("applied"), "applied"), **_common_fields(data, file_uuid))

    # -- repairing ---------------------------------------------------------------------------------
    def repair(self, backend: Backend, *, include_live_owners: bool = False,
               in_restore_command: bool = False) -> list[RepairOutcome]:
        """Put back the saved setting of every entry whose writer is gone; returns what was found and done.

        Each GPU is repaired holding its lock, taken without waiting: a GPU another session holds
        is left to it (``busy``). ``include_live_owners`` also restores entries whose writer runs.
        A restore that stops (a lock held past its bound) is ``stopped``, with the command that
        fixes it; a second signal stops the whole repair (``RestoreAbandoned``). Within ``gpuenergy
        restore`` (``in_restore_command``) the advice is never to run it again: it names the driver's
        own command.
        """
        by_uuid = {gpu.uuid: gpu for gpu in backend.all_gpus}
        outcomes = []
        for candidate in self.entries():
            gpu = by_uuid.get(candidate.gpu_uuid)
            if gpu is None:
                outcomes.append(RepairOutcome(candidate, "gpu-missing",
                                              f"{candidate.describe()}: this GPU is not present; entry kept"))
                continue
            if gave_up():
                outcomes.append(RepairOutcome(candidate, "stopped", f"{candidate.describe()}: not restored, this "
                                              f"process stops after a second signal"))
                continue
            outcome = self._repair_holding_lock(gpu, candidate, include_live_owners, in_restore_command)
            if outcome is not None:
                outcomes.append(outcome)
        return outcomes

    def _repair_holding_lock(self, gpu: Gpu, candidate: JournalEntry[S], include_live_owners: bool,
                             in_restore_command: bool) -> RepairOutcome | None:
        with contextlib.ExitStack() as stack:
            try:
                stack.enter_context(holding(lock_paths(self.lock_folder, [gpu.uuid]), timeout_s=0))
            except GpuLockBusy as busy:
                return RepairOutcome(candidate, "busy",
                                     f"{candidate.describe()}: left to the test session that holds this GPU now "
                                     f"({busy.holder}){_after_busy(candidate, gpu, in_restore_command)}")
            entry = self.entry(gpu.uuid)     # again, under the lock: it may have changed hands
            if entry is None:
                return None
            if entry.owner_runs() and not include_live_owners:
                return RepairOutcome(entry, "owner-alive",
                                     f"{entry.describe()}: left alone, pid {entry.pid} is still running")
            try:
                with signals_held(f"restoring the {self.knob.what} of {gpu.label}"):
                    return self._repair_one(gpu, entry)
            except LockWaitTimeout as stuck:
                return RepairOutcome(entry, "stopped", f"{entry.describe()}: {stuck}")
            except RestoreAbandoned:
                if in_restore_command:
                    raise           # the command stops: what is left was said
                return RepairOutcome(entry, "stopped", f"{entry.describe()}: not restored, stopped by a second signal")
        return None

    @contextlib.contextmanager
    def _putting_back(self, gpu: Gpu, entry: JournalEntry[S]) -> Iterator[None]:
        """While a repair puts ``entry``'s setting back, a restore stopped there names it, with the
        driver's own command as the fix (never `gpuenergy restore`, which may be what runs)."""
        key = f"repair/{self._key(entry)}"
        note_left(key, f"{entry.left_text()}; to put it back: {entry.fix_command(gpu)}")
        try:
            yield
        finally:
            note_back(key)

    def _repair_one(self, gpu: Gpu, entry: JournalEntry[S]) -> RepairOutcome:
        knob, saved = self.knob, entry.saved
        now: S | Unreadable
        try:
            now = knob.read(gpu)
            if now == saved:
                self.clear(entry)
                return RepairOutcome(entry, "already-restored", f"{entry.describe()}: already back to {knob.text(saved)}")
            if now is not UNREADABLE and now != entry.applied:
                self.clear(entry)
                return RepairOutcome(entry, "changed-since", f"{entry.describe()}: now {knob.text(now)}, set by "
                                                             f"someone else since; left as it is")
            refusal = knob.refusal(gpu, saved)
            if refusal is not None:
                return RepairOutcome(entry, "failed", f"{entry.describe()}: {refusal}; entry kept, check it")
            with self._putting_back(gpu, entry):
                knob.put(gpu, saved)
            # Back means the setting put is the saved one: what the GPU enforces under a limit may be
            # lower (another power manager's cap), as it may have been before.
            now = knob.read(gpu)
        except DeviceError as exc:
            return RepairOutcome(entry, "failed", f"{entry.describe()}: could not restore it ({exc})")
        if now is not UNREADABLE and now != saved:
            return RepairOutcome(entry, "failed", f"{entry.describe()}: set back, but it reads {knob.text(now)}")
        self.clear(entry)
        return RepairOutcome(entry, "restored", f"{entry.describe()}: restored to {knob.text(saved)}")


def _common_fields(data: dict[str, Any], file_uuid: str) -> dict[str, Any]:
    """The fields every entry has, in every format (its GPU, its owner, when it was written), checked."""
    fields: dict[str, Any] = {name: data.get(name) for name in
                              ("gpu_uuid", "gpu_index", "gpu_name", "pid", "process_start", "host", "written_at")}
    for name in ("gpu_uuid", "gpu_name", "process_start", "host"):
        if not isinstance(fields[name], str):
            raise ValueError(f"{name} must be a string, got {shown(fields[name])}")
    if fields["gpu_uuid"] != file_uuid:
        raise ValueError(f"it names GPU {shown(fields['gpu_uuid'])}, not the GPU of its file name")
    whole_number(fields["gpu_index"], "gpu_index", 0, 65_535)
    whole_number(fields["pid"], "pid", 1, _MAX_PID)
    written = fields["written_at"]
    if isinstance(written, bool) or not isinstance(written, (int, float)) or not math.isfinite(written):
        raise ValueError(f"written_at must be a time, got {shown(written)}")
    return fields


def whole_number(value: Any, name: str, low: int, high: int) -> int:
    """``value`` if it is a whole number from ``low`` to ``high``; else ``ValueError`` naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ValueError(f"{name} must be a whole number from {low} to {high}, got {shown(value)}")
    return value


def _after_busy(entry: JournalEntry[Any], gpu: Gpu, in_restore_command: bool) -> str:
    if in_restore_command:
        return (f", which puts it back when it ends; if it does not, end that process or put it back yourself: "
                f"{entry.fix_command(gpu)}")
    return "; if the GPU stays changed after it, run `gpuenergy restore`"


def direct_fix(gpu: Gpu, driver_command: str) -> str:
    """The driver's command that puts a setting back; a simulated GPU's state file to delete (it then
    starts afresh at its defaults, as a real GPU after a reset)."""
    state_file = gpu.simulated_state_file
    if state_file is None:
        return f"sudo {driver_command}"
    return f"rm {state_file} (the simulated GPU restarts at its defaults)"


def journal_for(backend: Backend, knob: Knob[S], legacy: Legacy[S] | None = None) -> Journal[S]:
    """``knob``'s journal in ``backend``'s state folder."""
    folder = backend.state_dir / "journal" / JOURNAL_FOLDERS.get(knob.name, knob.name)
    return Journal(knob, folder, backend.lock_folder, legacy)


def journals_for(backend: Backend) -> list[Journal[Any]]:
    """Every knob's journal: power limits, then clock locks (repairs go through both)."""
    from .capping import power_journal_for
    from .clocks import clock_journal_for

    return [power_journal_for(backend), clock_journal_for(backend)]
