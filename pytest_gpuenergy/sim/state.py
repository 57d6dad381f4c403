"""The simulated GPUs' state on disk: it outlives the process, like a real GPU's.

A real GPU keeps its power limit after the process that set it exits, and its energy counter
keeps counting. The simulator keeps both in ``GPUENERGY_SIM_STATE`` (default: the user state
folder) so that a run that dies with a cap applied leaves the simulated GPU capped, and the next
run or ``gpuenergy restore`` has to repair it, exactly as on real hardware.

Layout::

    machine.json            which simulated models the machine has, in index order
    gpus/<uuid>.json        one GPU: its power limit and the energy committed to its counter
    gpus/<uuid>.lock        serialises read-modify-write of that GPU across processes
"""

from __future__ import annotations

import json
import os
import time
import uuid as uuid_module
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from ..errors import SimStateError
from ..fileio import atomic_write_json, file_lock, user_state_dir
from .models import DEFAULT_SIM_MODELS, GPU_MODELS, GpuSpec, parse_model_list

STATE_ENV = "GPUENERGY_SIM_STATE"
MODELS_ENV = "GPUENERGY_SIM_GPUS"
_UUID_NAMESPACE = uuid_module.UUID("6c0e5a52-8a43-4b8e-9d0b-3f3f1b7c2e11")


def default_state_dir() -> Path:
    configured = os.environ.get(STATE_ENV)
    return Path(configured).expanduser() if configured else user_state_dir() / "sim"


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

    @property
    def sm_clock_locked(self) -> bool:
        return self.locked_sm_max_mhz > 0

    def sm_clock_cap_fraction(self, spec: GpuSpec) -> float:
        """The locked SM clock's upper end as a share of the maximum (1 without a lock)."""
        return self.locked_sm_max_mhz / spec.sm_clock_max_mhz if self.sm_clock_locked else 1.0


def load_machine(state_dir: Path, requested: tuple[str, ...] | None = None) -> tuple[GpuSpec, ...]:
    """The simulated machine's GPUs; ``requested`` (or ``GPUENERGY_SIM_GPUS``) redefines it."""
    machine_file = state_dir / "machine.json"
    if requested is None and os.environ.get(MODELS_ENV):
        requested = parse_model_list(os.environ[MODELS_ENV])
    if requested is None:
        requested = _read_machine(machine_file) or DEFAULT_SIM_MODELS
    if _read_machine(machine_file) != requested:
        atomic_write_json(machine_file, {"format": "gpuenergy-sim-machine", "version": 1, "models": list(requested)})
    return tuple(GPU_MODELS[key] for key in requested)


def _read_machine(machine_file: Path) -> tuple[str, ...] | None:
    try:
        data = json.loads(machine_file.read_text(encoding="utf-8"))
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
        self.path = state_dir / "gpus" / f"{self.uuid}.json"
        self._lock_path = self.path.with_suffix(".lock")
        self._cached: GpuState | None = None
        self._cached_stamp: tuple[int, int, int] | None = None
        self._checked_at = -1.0

    def read(self) -> GpuState:
        now = time.monotonic()
        if self._cached is not None and self._cached_stamp is not None and now - self._checked_at < self.RECHECK_S:
            return self._cached
        self._checked_at = now
        try:
            stat = self.path.stat()
        except FileNotFoundError:
            with file_lock(self._lock_path):
                return self._load_or_create()
        stamp = (stat.st_mtime_ns, stat.st_size, stat.st_ino)
        if self._cached is None or stamp != self._cached_stamp:
            self._cached = self._parse(self.path.read_text(encoding="utf-8"))
            self._cached_stamp = stamp
        return self._cached

    def update(self, change: Callable[[GpuState], GpuState], *, durable: bool = True) -> GpuState:
        with file_lock(self._lock_path):
            new = change(self._load_or_create())
            atomic_write_json(self.path, asdict(new), durable=durable)
            self._cached, self._cached_stamp = None, None
            return new

    def _load_or_create(self) -> GpuState:
        """The state as on disk, created at the default limit if missing; the caller holds the lock."""
        try:
            return self._parse(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            fresh = GpuState(
                uuid=self.uuid, model=self.spec.key, index=self.index,
                limit_mw=int(self.spec.default_limit_w * 1000), created_at=time.time(), dynamic_mj=0.0,
            )
            atomic_write_json(self.path, asdict(fresh))
            return fresh

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
