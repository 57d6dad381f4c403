"""The simulated GPUs' state on disk: it outlives the process, like a real GPU's.

A real GPU keeps its power limit after the process that set it exits, and its energy counter
keeps counting. The simulator keeps both in ``GPUENERGY_SIM_STATE`` (default: the user state
folder) so that a run that dies with a cap applied leaves the simulated GPU capped, and the next
run or ``gpuenergy restore`` has to repair it, exactly as on real hardware.

Layout::

    machine.json            which simulated models the machine has, in index order
    gpus/<uuid>.json        one GPU: its power limit and the energy committed to its counter
    gpus/<uuid>.lock        serialises read-modify-write of that GPU across processes
    gpus/<uuid>.procs/<pid> a process that uses that GPU; one byte while it runs work there (NVML lists it)

The simulator shares the journal and the locks with NVML, and its own files decide the limits it
shows, so they are state files like the journal's (``fileio``): reached through a checked walk
from ``/``, opened without following a link and never blocking on a FIFO, believed only when they
are ours (or root's), with one link, writable by no one else.
"""

from __future__ import annotations

import contextlib
import json
import os
import uuid as uuid_module
from collections.abc import Callable
from dataclasses import dataclass, fields, replace
from pathlib import Path

from .. import realtime
from ..errors import SimStateError
from ..fileio import STATE_FOLDER_MODE, file_lock, open_state_file, read_state_at, write_state_json
from ..fileio import state_dir as checked_folder
from ..trusted_path import HeldFolder, state_owners
from .models import DEFAULT_SIM_MODELS, GPU_MODELS, MODELS_ENV, GpuSpec, parse_model_list

_UUID_NAMESPACE = uuid_module.UUID("6c0e5a52-8a43-4b8e-9d0b-3f3f1b7c2e11")


def sim_uuid(model_key: str, index: int) -> str:
    """Stable per (model, index): the same simulated GPU keeps its state across runs."""
    return "GPU-" + str(uuid_module.uuid5(_UUID_NAMESPACE, f"{model_key}/{index}"))


@dataclass(frozen=True)
class GpuState:
    uuid: str
    model: str
    index: int
    limit_mw: int
    created_at: float          # epoch seconds the energy counter started from 0
    dynamic_mj: float          # energy above idle, committed by all processes so far
    counter_offset_mj: float = 0.0   # subtracted from the counter (a simulated reset)
    # The commits of the last seconds, (wall time, pid, mJ): another process's work shows on the
    # counter from the moment it was committed on, never earlier, so every reader sees the same
    # value for the same tick whenever it reads it.
    recent_commits: tuple[tuple[float, int, float], ...] = ()
    # The SM clock range locked with nvmlDeviceSetGpuLockedClocks, in MHz; 0, 0: not locked. Like a
    # power limit, a lock outlives the process that set it (until a reset or a reboot).
    locked_sm_min_mhz: int = 0
    locked_sm_max_mhz: int = 0
    # The time tests' virtual worlds kept the GPU occupied beyond the host's wall clock, committed by
    # all processes (``SimulatedMachine._world_idle_excess_s``): a session's total lasts that much longer.
    beyond_wall_s: float = 0.0

    def to_json(self) -> dict[str, object]:
        """The fields as they are (the commits' tuples are JSON lists): ``dataclasses.asdict`` copies
        every commit deeply, which at a hand-over every few ms of a short-test suite was most of its cost."""
        return {field.name: getattr(self, field.name) for field in fields(self)}

    @property
    def sm_clock_locked(self) -> bool:
        return self.locked_sm_max_mhz > 0

    def sm_clock_cap_fraction(self, spec: GpuSpec) -> float:
        """The locked SM clock's upper end as a share of the maximum (1 without a lock)."""
        return self.locked_sm_max_mhz / spec.sm_clock_max_mhz if self.sm_clock_locked else 1.0


def load_machine(state_dir: Path, requested: tuple[str, ...] | None = None) -> tuple[GpuSpec, ...]:
    """The simulated machine's GPUs; ``requested`` (or ``GPUENERGY_SIM_GPUS``) redefines it."""
    machine_file = Path(state_dir) / "machine.json"
    if requested is None and os.environ.get(MODELS_ENV):
        requested = parse_model_list(os.environ[MODELS_ENV])
    with checked_folder(Path(state_dir)) as folder_fd:
        on_disk = _read_machine(folder_fd, machine_file)
        if requested is None:
            requested = on_disk or DEFAULT_SIM_MODELS
        if on_disk != requested:
            write_state_json(folder_fd, machine_file.name,
                             {"format": "gpuenergy-sim-machine", "version": 1, "models": list(requested)}, shown=machine_file)
    return tuple(GPU_MODELS[key] for key in requested)


def _read_machine(folder_fd: int, machine_file: Path) -> tuple[str, ...] | None:
    try:
        data = json.loads(read_state_at(folder_fd, machine_file.name, shown=machine_file))
        models = tuple(data["models"])
        parse_model_list(",".join(models))
        return models
    except FileNotFoundError:
        return None
    except (ValueError, KeyError, TypeError) as exc:
        raise SimStateError(
            f"the simulated machine description {machine_file} is unreadable ({exc}); "
            f"delete it or set {MODELS_ENV}=H100 (or other models) to recreate it"
        ) from None


class GpuStateFile:
    """One simulated GPU's state file, read cheaply and updated under a cross-process lock."""

    # How long a read trusts its cached copy before it looks at the file again. Looking costs a
    # system call, which releases the GIL: a meter thread polling the simulated counter would
    # then wait up to a switch interval (5 ms) per read behind a busy main thread.
    RECHECK_S = 0.05

    def __init__(self, state_dir: Path, spec: GpuSpec, index: int) -> None:
        self.spec = spec
        self.index = index
        self.uuid = sim_uuid(spec.key, index)
        self.folder = Path(state_dir) / "gpus"
        self.name = f"{self.uuid}.json"
        self.path = self.folder / self.name
        self._lock_name = f"{self.uuid}.lock"
        self._procs = self.folder / f"{self.uuid}.procs"
        # Read every few milliseconds: the folders' descriptors are kept, walked to once (and again
        # only where the path names another folder since).
        self._held = HeldFolder(self.folder, owners=state_owners(), create_mode=STATE_FOLDER_MODE)
        self._held_procs = HeldFolder(self._procs, owners=state_owners(), create_mode=STATE_FOLDER_MODE)
        # pid -> its marker, open (``mark_process``), or None where it is known to be gone; its
        # byte says whether the process runs work on the GPU now
        self._markers: dict[int, int | None] = {}
        self._cached: GpuState | None = None
        self._cached_stamp: tuple[int, int, int] | None = None
        self._checked_at = -1.0

    def read(self, *, fresh: bool = False) -> GpuState:
        """The state, from the copy read up to ``RECHECK_S`` ago unless ``fresh``: a setting read to be
        put back later (a limit, a clock lock) must be the file's, or a process that read the GPU while
        another session's cap was on it would restore that cap (two sessions sharing a GPU left it at
        250 W one run in eight)."""
        now = realtime.monotonic()
        if (not fresh and self._cached is not None and self._cached_stamp is not None
                and now - self._checked_at < self.RECHECK_S):
            return self._cached
        self._checked_at = now
        try:
            folder_fd = self._held.fd()
            found = os.stat(self.name, dir_fd=folder_fd, follow_symlinks=False)
            stamp = (found.st_mtime_ns, found.st_size, found.st_ino)
            if self._cached is None or stamp != self._cached_stamp:
                self._cached = self._parse(read_state_at(folder_fd, self.name, shown=self.path))
                self._cached_stamp = stamp
            return self._cached
        except FileNotFoundError:
            with file_lock(self.folder, self._lock_name) as folder_fd:
                return self._load_or_create(folder_fd)

    def expire(self) -> None:
        """The next read looks at the file (another process may have changed it: a hand-over)."""
        self._checked_at = -1.0

    def update(self, change: Callable[[GpuState], GpuState]) -> GpuState:
        """Change the state under its lock. Not fsynced: the simulated GPU stands in for a real one,
        whose limit and clocks live in its driver and are gone when the host goes down, and every
        process sees the page cache (a capped test wrote it twice, 0.4 ms here)."""
        with file_lock(self.folder, self._lock_name) as folder_fd:
            new = change(self._load_or_create(folder_fd))
            write_state_json(folder_fd, self.name, new.to_json(), shown=self.path, durable=False, compact=True)
            self._cached, self._cached_stamp = None, None
            return new

    def _load_or_create(self, folder_fd: int) -> GpuState:
        """The state as on disk, created at the default limit if missing; the caller holds the lock."""
        try:
            return self._parse(read_state_at(folder_fd, self.name, shown=self.path))
        except FileNotFoundError:
            fresh = GpuState(
                uuid=self.uuid, model=self.spec.key, index=self.index,
                limit_mw=int(self.spec.default_limit_w * 1000), created_at=realtime.wall_time(), dynamic_mj=0.0,
            )
            write_state_json(folder_fd, self.name, fresh.to_json(), shown=self.path, compact=True)
            return fresh

    # -- the processes that run work on this GPU ----------------------------------------------------
    def mark_process(self, pid: int, running: bool) -> None:
        """Say whether ``pid`` runs work on this GPU now: its marker holds one byte while it does,
        none while it does not (``process_ids``). The marker is made once, never through a link, and
        kept open: a hand-over, twice a test under ``--energy-all``, then costs an fstat (and an
        ftruncate where it changes) where making and removing the file cost 50-100 us
        (``forget_process`` removes it). A marker removed with its folder is made again."""
        fd = self._markers.get(pid)
        found = os.fstat(fd) if fd is not None else None
        if fd is not None and found is not None and found.st_nlink == 0:
            os.close(fd)
            fd = found = self._markers[pid] = None
        if fd is None:
            if not running:
                if pid not in self._markers:       # a marker that a dead process with this pid left
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(str(pid), dir_fd=self._held_procs.fd())
                    self._markers[pid] = None
                return
            fd = self._markers[pid] = open_state_file(self._held_procs.fd(create=True), str(pid),
                                                      os.O_WRONLY | os.O_CREAT, shown=self._procs / str(pid))
        if found is None or (found.st_size > 0) is not running:
            os.ftruncate(fd, 1 if running else 0)

    def forget_process(self, pid: int) -> None:
        """Remove ``pid``'s marker (the process is done with the simulated GPUs)."""
        fd = self._markers.pop(pid, None)
        if fd is not None:
            os.close(fd)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(str(pid), dir_fd=self._held_procs.fd())

    def process_ids(self) -> list[int]:
        """The pids whose marker says they run work on this GPU (alive or not: the caller asks)."""
        try:
            folder_fd = self._held_procs.fd()
            names = [name for name in os.listdir(folder_fd) if name.isdigit()]
        except FileNotFoundError:
            return []
        found = []
        for name in names:
            with contextlib.suppress(FileNotFoundError):
                if os.stat(name, dir_fd=folder_fd, follow_symlinks=False).st_size > 0:
                    found.append(int(name))
        return found

    def _parse(self, text: str) -> GpuState:
        try:
            data = json.loads(text)
            state = GpuState(**data)
            if state.uuid != self.uuid:
                raise ValueError(f"it describes {state.uuid}")
            commits = tuple((float(when), int(pid), float(mj)) for when, pid, mj in state.recent_commits)
            return replace(state, limit_mw=int(state.limit_mw), recent_commits=commits,
                           locked_sm_min_mhz=int(state.locked_sm_min_mhz), locked_sm_max_mhz=int(state.locked_sm_max_mhz))
        except (ValueError, TypeError) as exc:
            raise SimStateError(
                f"simulated GPU state {self.path} is corrupt ({exc}); delete it and the simulated "
                f"GPU starts afresh at its default limit"
            ) from None
