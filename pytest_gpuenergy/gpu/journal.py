"""The journal of changed power limits: how a GPU gets its original limit back, whoever capped it.

A power limit survives the process that set it. Before the plugin changes a limit it writes the
GPU's UUID and its *original* limit here (atomically, one file per GPU), and it removes the entry
only once the GPU reads back that original. The entry owns the original until then:

* a capper that finds an entry (its writer dead, or alive after a restore that failed) takes it
  over and keeps its original, so a cap left by a killed xdist worker or another session is never
  taken for the GPU's own limit;
* ``repair`` (the start and the end of every session, ``gpuenergy restore``) puts back the
  original of an entry whose writer is gone, holding the GPU's lock and reading the entry again
  under it, so it never acts on an entry that changed hands meanwhile; a GPU whose lock another
  session holds is left to that session, and an entry whose writer still runs is never deleted
  by someone else (unless forced).

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
import dataclasses
import math
import os
import socket
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import pynvml

from ..errors import JournalCorrupt
from ..fileio import LockWaitTimeout, file_lock, read_state_at, state_dir, write_state_json
from ..runs.validation import parse_json, shown
from .device import Backend, Gpu
from .locks import GpuLockBusy, holding, lock_paths
from .processes import is_alive, process_start
from .signals import RestoreAbandoned, gave_up, note_back, note_left, signals_held

_FORMAT = "gpuenergy-limit-journal"
_MAX_LIMIT_MW = 100_000_000     # 100 kW: no GPU's limit; a larger value is damage
_MAX_PID = 2**31 - 1
PROBLEM_ACTIONS = ("failed", "gpu-missing", "owner-alive", "busy", "stopped")


@dataclass(frozen=True)
class JournalEntry:
    gpu_uuid: str
    gpu_index: int
    gpu_name: str
    previous_limit_mw: int      # the GPU's original limit, from before the first change
    applied_limit_mw: int
    pid: int
    process_start: str          # tells a live owner from a reused pid
    host: str
    written_at: float
    format: str = _FORMAT

    def describe(self) -> str:
        return (
            f"GPU {self.gpu_index} ({self.gpu_name}, {self.gpu_uuid}): capped at "
            f"{self.applied_limit_mw / 1000:g} W by pid {self.pid} on {self.host}, previous limit "
            f"{self.previous_limit_mw / 1000:g} W"
        )

    def left_text(self) -> str:
        """The setting this entry stands for, and the one before it (what a stopped restore leaves)."""
        return (f"GPU {self.gpu_index} ({self.gpu_name}, {self.gpu_uuid}) at {self.applied_limit_mw / 1000:g} W, "
                f"its limit before {self.previous_limit_mw / 1000:g} W")

    def fix_command(self, gpu: Gpu) -> str:
        """The command that puts the limit before back, without pytest-gpuenergy."""
        return direct_fix(gpu, f"nvidia-smi -i {self.gpu_uuid} -pl {self.previous_limit_mw / 1000:g}")

    def same_write(self, other: JournalEntry) -> bool:
        """Whether ``other`` is this very entry (same writer, same moment), not a later one."""
        return (self.pid, self.process_start, self.written_at) == (other.pid, other.process_start, other.written_at)

    def owner_runs(self) -> bool:
        """Whether another process that still runs on this host wrote it (this process's own never counts)."""
        return (self.host == socket.gethostname() and self.pid != os.getpid()
                and is_alive(self.pid, self.process_start))


@dataclass(frozen=True)
class RepairOutcome:
    entry: JournalEntry
    action: str      # "restored", "already-restored", "changed-since", "owner-alive", "busy", "gpu-missing", "failed"
    message: str


class Journal:
    kind = "power-limit"

    def __init__(self, folder: Path, lock_folder: Path | None = None) -> None:
        self.folder = Path(folder)
        self.lock_folder = Path(lock_folder) if lock_folder is not None else self.folder.parent / "locks"

    def _name(self, gpu_uuid: str) -> str:
        return f"{gpu_uuid}.json"

    def entry(self, gpu_uuid: str) -> JournalEntry | None:
        """The GPU's entry, or None; read it with the GPU's lock held to act on it."""
        try:
            with state_dir(self.folder, create=False) as folder_fd:
                return self._read(folder_fd, self._name(gpu_uuid))
        except FileNotFoundError:
            return None

    def record(self, gpu: Gpu, previous_limit_mw: int, applied_limit_mw: int) -> JournalEntry:
        """Note the change about to be made (with the GPU's lock held).

        An entry already there keeps its original limit, whoever wrote it: this process takes it
        over, and the limit that comes back is the one from before the first change.
        """
        with file_lock(self.folder, ".lock") as folder_fd:
            existing = self._read(folder_fd, self._name(gpu.uuid))
            entry = JournalEntry(
                gpu_uuid=gpu.uuid, gpu_index=gpu.index, gpu_name=gpu.name,
                previous_limit_mw=existing.previous_limit_mw if existing is not None else previous_limit_mw,
                applied_limit_mw=applied_limit_mw,
                pid=os.getpid(), process_start=process_start(os.getpid()),
                host=socket.gethostname(), written_at=time.time(),
            )
            self._write(folder_fd, entry)
            return entry

    def _write(self, folder_fd: int, entry: Any) -> None:
        """Write ``entry``; until it is cleared, a stopped restore names it with `gpuenergy restore` as the fix."""
        note_left(self._key(entry), f"{entry.left_text()}; to put it back: gpuenergy restore")
        write_state_json(folder_fd, self._name(entry.gpu_uuid), asdict(entry), shown=self.folder / self._name(entry.gpu_uuid))

    def _key(self, entry: Any) -> str:
        return f"{self.kind}/{entry.gpu_uuid}"

    def clear(self, entry: JournalEntry) -> None:
        """Delete ``entry`` once its original is back; a newer entry of someone else is never deleted."""
        with file_lock(self.folder, ".lock") as folder_fd:
            current = self._read(folder_fd, self._name(entry.gpu_uuid))
            if current is not None and current.same_write(entry):
                os.unlink(self._name(entry.gpu_uuid), dir_fd=folder_fd)
        note_back(self._key(entry))

    def entries(self) -> list[JournalEntry]:
        try:
            with state_dir(self.folder, create=False) as folder_fd:
                names = sorted(name for name in os.listdir(folder_fd) if name.startswith("GPU-") and name.endswith(".json"))
                return [entry for entry in (self._read(folder_fd, name) for name in names) if entry is not None]
        except FileNotFoundError:
            return []

    def _read(self, folder_fd: int, name: str) -> Any:
        path = self.folder / name
        try:
            return self._parse(parse_json(read_state_at(folder_fd, name, shown=path)), name.removesuffix(".json"))
        except FileNotFoundError:
            return None
        except ValueError as exc:      # also JsonInputError, undecodable bytes
            raise JournalCorrupt(self._unreadable(path, exc)) from None

    @staticmethod
    def _parse(data: Any, file_uuid: str) -> Any:
        return _entry_from_json(data, file_uuid)

    @staticmethod
    def _unreadable(path: Path, exc: Exception) -> str:
        return (f"the power-limit journal entry {path} is unreadable ({exc}); check the GPU's limit with "
                f"`gpuenergy info`, fix it if needed, then delete the file")

    # -- repairing ---------------------------------------------------------------------------------
    def repair(self, backend: Backend, *, include_live_owners: bool = False,
               in_restore_command: bool = False) -> list[RepairOutcome]:
        """Put back the original limit of every entry whose writer is gone; returns what was found and done.

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

    def _repair_holding_lock(self, gpu: Gpu, candidate: Any, include_live_owners: bool,
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
                with signals_held(f"restoring the {self.kind.replace('-', ' ')} of {gpu.label}"):
                    return self._repair_one(gpu, entry)
            except LockWaitTimeout as stuck:
                return RepairOutcome(entry, "stopped", f"{entry.describe()}: {stuck}")
            except RestoreAbandoned:
                if in_restore_command:
                    raise           # the command stops: what is left was said
                return RepairOutcome(entry, "stopped", f"{entry.describe()}: not restored, stopped by a second signal")
        return None

    @contextlib.contextmanager
    def _putting_back(self, gpu: Gpu, entry: Any) -> Iterator[None]:
        """While a repair puts ``entry``'s setting back, a restore stopped there names it, with the
        driver's own command as the fix (never `gpuenergy restore`, which may be what runs)."""
        key = f"repair/{self._key(entry)}"
        note_left(key, f"{entry.left_text()}; to put it back: {entry.fix_command(gpu)}")
        try:
            yield
        finally:
            note_back(key)

    def _repair_one(self, gpu: Gpu, entry: JournalEntry) -> RepairOutcome:
        original = entry.previous_limit_mw
        try:
            limits = gpu.limits()
            if limits.current_mw == original:
                self.clear(entry)
                return RepairOutcome(entry, "already-restored",
                                     f"{entry.describe()}: already back at {original / 1000:g} W")
            if limits.current_mw != entry.applied_limit_mw:
                self.clear(entry)
                return RepairOutcome(entry, "changed-since",
                                     f"{entry.describe()}: now at {limits.current_mw / 1000:g} W, set by someone else "
                                     f"since; left as it is")
            if not limits.contains(original):
                return RepairOutcome(entry, "failed",
                                     f"{entry.describe()}: {original / 1000:g} W is outside the GPU's range "
                                     f"{limits.range_text()}; entry kept, check it")
            with self._putting_back(gpu, entry):
                gpu.set_limit_mw(original)
            # Back means the limit set is the original (as ``capping.py`` restores): what the GPU
            # enforces under it may be lower (another power manager's cap), as it may have been before.
            now_mw = gpu.current_limit_mw()
        except pynvml.NVMLError as exc:
            return RepairOutcome(entry, "failed", f"{entry.describe()}: could not restore it (NVML: {exc})")
        if now_mw != original:
            return RepairOutcome(entry, "failed", f"{entry.describe()}: set back, but it reads {now_mw / 1000:g} W")
        self.clear(entry)
        return RepairOutcome(entry, "restored", f"{entry.describe()}: restored to {original / 1000:g} W")


def _entry_from_json(data: Any, file_uuid: str) -> JournalEntry:
    """Check every field: a damaged entry must be an error, never a limit to set."""
    fields = entry_fields(data, file_uuid, _FORMAT, JournalEntry, "limit")
    whole_field(fields, "previous_limit_mw", 1, _MAX_LIMIT_MW)
    whole_field(fields, "applied_limit_mw", 1, _MAX_LIMIT_MW)
    return JournalEntry(**fields)


def entry_fields(data: Any, file_uuid: str, format_name: str, record: type, what: str) -> dict[str, Any]:
    """The fields every journal entry has (its GPU, its owner, when it was written), checked; the
    caller checks the setting's own fields and builds ``record`` from the result."""
    if not isinstance(data, dict) or data.get("format") != format_name:
        raise ValueError(f"not a {what} journal entry")
    fields: dict[str, Any] = {item.name: data.get(item.name) for item in dataclasses.fields(record)}
    for name in ("gpu_uuid", "gpu_name", "process_start", "host"):
        if not isinstance(fields[name], str):
            raise ValueError(f"{name} must be a string, got {shown(fields[name])}")
    if fields["gpu_uuid"] != file_uuid:
        raise ValueError(f"it names GPU {shown(fields['gpu_uuid'])}, not the GPU of its file name")
    whole_field(fields, "gpu_index", 0, 65_535)
    whole_field(fields, "pid", 1, _MAX_PID)
    written = fields["written_at"]
    if isinstance(written, bool) or not isinstance(written, (int, float)) or not math.isfinite(written):
        raise ValueError(f"written_at must be a time, got {shown(written)}")
    return fields


def whole_field(fields: dict[str, Any], name: str, low: int, high: int) -> None:
    value = fields[name]
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ValueError(f"{name} must be a whole number from {low} to {high}, got {shown(value)}")


def _after_busy(entry: Any, gpu: Gpu, in_restore_command: bool) -> str:
    if in_restore_command:
        return (f", which puts it back when it ends; if it does not, end that process or put it back yourself: "
                f"{entry.fix_command(gpu)}")
    return "; if the GPU stays capped after it, run `gpuenergy restore`"


def direct_fix(gpu: Gpu, nvidia_smi: str) -> str:
    """The driver's command that puts a setting back; a simulated GPU's state file to delete (it then
    starts afresh at its defaults, as a real GPU after a reset)."""
    state_dir_path = getattr(gpu.nvml, "state_dir", None)
    if gpu.nvml is pynvml or state_dir_path is None:
        return f"sudo {nvidia_smi}"
    return f"rm {Path(state_dir_path) / 'gpus' / (gpu.uuid + '.json')} (the simulated GPU restarts at its defaults)"


def journal_for(backend: Backend) -> Journal:
    return Journal(backend.state_dir / "journal", backend.lock_folder)


def may_need_repair(backend_kind: str) -> bool:
    """Whether a journal that ``backend_kind`` would open holds an entry: a run may have died with a
    GPU changed. Only looks (no backend is opened, nothing is written), so a session that uses none of
    the plugin can still repair a GPU the last run left capped, and pays one directory listing."""
    from ..fileio import user_state_dir
    from ..sim.state import default_state_dir

    folders = {"nvml": [user_state_dir()], "sim": [default_state_dir()]}.get(backend_kind) or [user_state_dir(), default_state_dir()]
    for folder in folders:
        for journal in (folder / "journal", folder / "journal" / "clocks"):
            try:
                if any(journal.glob("GPU-*.json")):
                    return True
            except OSError:
                continue      # an unreadable folder: the session that uses the GPUs will say so
    return False
