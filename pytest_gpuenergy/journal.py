"""The journal of changed power limits: how a killed run's caps get undone.

A power limit survives the process that set it. Before the plugin changes a limit it writes the
GPU's UUID and its previous limit here (atomically, one file per GPU), and it removes the entry
once the previous limit is back and confirmed by reading it. An entry that is still there when
its owner process is gone means a run died with the GPU capped: ``repair`` puts the previous
limit back (``gpuenergy restore`` and the start of every session call it).
"""

from __future__ import annotations

import json
import os
import socket
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Iterable

import pynvml

from .device import Backend, Gpu
from .fileio import atomic_write_json, file_lock
from .processes import is_alive, process_start

_FORMAT = "gpuenergy-limit-journal"


@dataclass(frozen=True)
class JournalEntry:
    gpu_uuid: str
    gpu_index: int
    gpu_name: str
    previous_limit_mw: int
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


@dataclass(frozen=True)
class RepairOutcome:
    entry: JournalEntry
    action: str      # "restored", "already-restored", "changed-since", "owner-alive", "gpu-missing", "failed"
    message: str


class Journal:
    def __init__(self, folder: Path) -> None:
        self.folder = Path(folder)

    def _path(self, gpu_uuid: str) -> Path:
        return self.folder / f"{gpu_uuid}.json"

    def record(self, gpu: Gpu, previous_limit_mw: int, applied_limit_mw: int) -> JournalEntry:
        """Note the change about to be made. An entry left by a dead run keeps its original limit."""
        with file_lock(self.folder / ".lock"):
            existing = self._read(self._path(gpu.uuid))
            if existing is not None and existing.pid != os.getpid():
                previous_limit_mw = existing.previous_limit_mw  # the true original, from before the crash
            entry = JournalEntry(
                gpu_uuid=gpu.uuid, gpu_index=gpu.index, gpu_name=gpu.name,
                previous_limit_mw=previous_limit_mw, applied_limit_mw=applied_limit_mw,
                pid=os.getpid(), process_start=process_start(os.getpid()),
                host=socket.gethostname(), written_at=time.time(),
            )
            atomic_write_json(self._path(gpu.uuid), asdict(entry))
            return entry

    def clear(self, gpu_uuid: str) -> None:
        with file_lock(self.folder / ".lock"):
            try:
                self._path(gpu_uuid).unlink()
            except FileNotFoundError:
                pass

    def entries(self) -> list[JournalEntry]:
        if not self.folder.is_dir():
            return []
        found = []
        for path in sorted(self.folder.glob("GPU-*.json")):
            entry = self._read(path)
            if entry is not None:
                found.append(entry)
        return found

    def _read(self, path: Path) -> JournalEntry | None:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            if data.get("format") != _FORMAT:
                raise ValueError("not a limit journal entry")
            return JournalEntry(**data)
        except FileNotFoundError:
            return None
        except (ValueError, TypeError, AttributeError) as exc:
            raise JournalCorrupt(
                f"the power-limit journal entry {path} is unreadable ({exc}); check the GPU's limit with "
                f"`gpuenergy info`, fix it if needed, then delete the file"
            ) from None

    def repair(self, backend: Backend, *, include_live_owners: bool = False) -> list[RepairOutcome]:
        """Put back every limit a dead run left changed; returns what was found and done."""
        outcomes = []
        by_uuid = {gpu.uuid: gpu for gpu in backend.all_gpus}
        for entry in self.entries():
            here = entry.host == socket.gethostname()
            if here and entry.pid != os.getpid() and is_alive(entry.pid, entry.process_start) and not include_live_owners:
                outcomes.append(RepairOutcome(entry, "owner-alive",
                                              f"{entry.describe()}: left alone, pid {entry.pid} is still running"))
                continue
            gpu = by_uuid.get(entry.gpu_uuid)
            if gpu is None:
                outcomes.append(RepairOutcome(entry, "gpu-missing",
                                              f"{entry.describe()}: this GPU is not present; entry kept"))
                continue
            outcomes.append(self._repair_one(gpu, entry))
        return outcomes

    def _repair_one(self, gpu: Gpu, entry: JournalEntry) -> RepairOutcome:
        try:
            current = gpu.current_limit_mw()
            if current == entry.previous_limit_mw:
                self.clear(entry.gpu_uuid)
                return RepairOutcome(entry, "already-restored",
                                     f"{entry.describe()}: already back at {current / 1000:g} W")
            if current != entry.applied_limit_mw:
                self.clear(entry.gpu_uuid)
                return RepairOutcome(entry, "changed-since",
                                     f"{entry.describe()}: now at {current / 1000:g} W, set by someone else "
                                     f"since; left as it is")
            enforced = gpu.set_limit_mw(entry.previous_limit_mw)
        except pynvml.NVMLError as exc:
            return RepairOutcome(entry, "failed", f"{entry.describe()}: could not restore it (NVML: {exc})")
        if enforced != entry.previous_limit_mw:
            return RepairOutcome(entry, "failed",
                                 f"{entry.describe()}: set back, but it reads {enforced / 1000:g} W")
        self.clear(entry.gpu_uuid)
        return RepairOutcome(entry, "restored",
                             f"{entry.describe()}: restored to {entry.previous_limit_mw / 1000:g} W")


class JournalCorrupt(Exception):
    """A journal file cannot be read; nothing is guessed, the user is told which file."""


def journal_for(backend: Backend) -> Journal:
    return Journal(backend.state_dir / "journal")


def describe_outcomes(outcomes: Iterable[RepairOutcome]) -> list[str]:
    return [o.message for o in outcomes]
