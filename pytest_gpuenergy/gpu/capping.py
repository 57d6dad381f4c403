"""Power caps: applying one (as typed, ``specs.CapSpec``) so that it always comes back.

A cap is resolved per GPU (60 % of an H100's 700 W default is 420 W, of a V100's 300 W is
180 W). Applying it follows one order, so that a crash at any point can be repaired:

1. take the GPUs' cross-process locks (two tests never cap one GPU at the same time), then read
   the limits and check every GPU's allowed range (an out-of-range cap changes nothing and skips);
2. write the journal entry (UUID, original limit) *before* touching the GPU. The original is the
   limit the GPU had before anyone capped it: if the journal already has an entry for the GPU (a
   killed xdist worker or session left its cap, or a restore failed), its original is kept and the
   cap found on the GPU is never taken for the previous limit;
3. set the limit with NVML's v1 call and read back what the GPU enforces;
4. on restore: set the exact original limit (not the maximum), retrying transient errors, with
   SIGINT/SIGTERM/SIGHUP held until it is done (``signals.py``), read it back, and only then clear
   the journal entry and release the lock.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pynvml

from ..errors import (
    CapOutOfRange,
    CapPermissionError,
    LimitChangeError,
    LimitRestoreError,
)
from .device import RETRY_ATTEMPTS, Gpu, PowerLimits, retry_transient
from .journal import Journal, JournalEntry
from .locks import holding, lock_paths
from .signals import signals_held
from .specs import CapSpec

# -- applying a cap --------------------------------------------------------------------------

@dataclass(frozen=True)
class GpuCap:
    """One GPU under a cap: what was asked, what the GPU enforces, what it had before."""

    gpu_index: int
    gpu_name: str
    gpu_uuid: str
    requested_w: float | None       # None: nothing was requested, the GPU runs at its limit
    enforced_w: float
    previous_w: float
    default_w: float
    min_w: float
    max_w: float


@dataclass(frozen=True, repr=False)
class PowerCap:
    """What the ``gpu_power_cap`` fixture gives a test."""

    label: str                       # "150W", "60%", "min", or "current" without --gpu-caps
    spec: CapSpec | None
    gpus: tuple[GpuCap, ...] = field(default=())

    @property
    def changed(self) -> bool:
        return any(g.enforced_w != g.previous_w for g in self.gpus)

    # The single-GPU case is the common one: these read the first selected GPU.
    @property
    def requested_w(self) -> float | None:
        return self.gpus[0].requested_w

    @property
    def enforced_w(self) -> float:
        return self.gpus[0].enforced_w

    @property
    def previous_w(self) -> float:
        return self.gpus[0].previous_w

    @property
    def gpu_name(self) -> str:
        return self.gpus[0].gpu_name

    def __repr__(self) -> str:
        return f"PowerCap({self})"

    def __str__(self) -> str:
        parts = [
            f"GPU {g.gpu_index} {g.gpu_name}: "
            + (f"requested {g.requested_w:g} W, " if g.requested_w is not None else "")
            + f"enforced {g.enforced_w:g} W"
            for g in self.gpus
        ]
        return f"cap {self.label} ({'; '.join(parts)})"


@dataclass
class _Applied:
    gpu: Gpu
    entry: JournalEntry       # holds the original limit that must come back

    @property
    def original_mw(self) -> int:
        return self.entry.previous_limit_mw


class PowerCapper:
    """Applies one cap to a set of GPUs and guarantees their previous limits come back.

    Use as a context manager, or call ``apply`` then ``restore`` (in a ``finally``)::

        with PowerCapper(gpus, journal, lock_folder) as capper:
            cap = capper.apply(parse_cap("60%"))
            ...
    """

    def __init__(self, gpus: Sequence[Gpu], journal: Journal, lock_folder: Path) -> None:
        self.gpus = list(gpus)
        self.journal = journal
        self.lock_folder = lock_folder
        self._applied: list[_Applied] = []
        self._locks = ExitStack()
        # What the user should know but that is no error (a GPU enforcing another limit than asked, a
        # cap taken over from a dead run): said at the end of the session, never as a warning that a
        # suite's ``filterwarnings = error`` would turn into a failure in the middle of a cap.
        self.notices: list[str] = []

    def __enter__(self) -> PowerCapper:
        return self

    def __exit__(self, *exc: object) -> None:
        self.restore()

    @property
    def pending(self) -> list[Gpu]:
        """GPUs still at a changed limit."""
        return [a.gpu for a in self._applied]

    def current(self) -> PowerCap:
        """The GPUs as they are, nothing changed (the case without ``--gpu-caps``)."""
        described = []
        for gpu in self.gpus:
            limits = gpu.limits()
            described.append(self._describe(gpu, limits, limits.current_mw, None))
        return PowerCap("current", None, tuple(described))

    def apply(self, spec: CapSpec) -> PowerCap:
        if self._applied:
            raise LimitChangeError("a cap is already applied: restore it before applying another")
        self._locks.enter_context(holding(lock_paths(self.lock_folder, [g.uuid for g in self.gpus])))
        try:
            limits = {gpu.uuid: _read_limits(gpu) for gpu in self.gpus}   # read under the lock
            targets = {gpu.uuid: _target_mw(spec, gpu, limits[gpu.uuid]) for gpu in self.gpus}
            described = [self._apply_one(gpu, limits[gpu.uuid], targets[gpu.uuid]) for gpu in self.gpus]
        except BaseException as exc:
            restore_after_failure(self, exc)
            raise
        return PowerCap(spec.label, spec, tuple(described))

    def _apply_one(self, gpu: Gpu, limits: PowerLimits, target_mw: int) -> GpuCap:
        left = self.journal.entry(gpu.uuid)     # a cap someone left: its entry knows the original
        original = left.previous_limit_mw if left is not None else limits.current_mw
        if left is not None and left.pid != os.getpid():
            self.notices.append(_taken_over(gpu, left, limits.current_mw))
        if target_mw == limits.current_mw and left is None:
            return self._describe(gpu, limits, original, target_mw)   # nothing to change, nothing to undo
        self._applied.append(_Applied(gpu, self.journal.record(gpu, original, target_mw)))
        enforced = limits.enforced_mw if target_mw == limits.current_mw else self._set(gpu, target_mw)
        return self._describe(gpu, limits, original, target_mw, enforced_mw=enforced)

    def _set(self, gpu: Gpu, target_mw: int) -> int:
        """Set the cap and return what the GPU enforces; every failure is an error naming the GPU."""
        try:
            enforced = retry_transient(lambda: gpu.set_limit_mw(target_mw), gpu.retry_backoff_s)
        except pynvml.NVMLError_NoPermission:
            raise CapPermissionError(
                f"not allowed to set the power limit of {gpu.label}: NVML needs root (CAP_SYS_ADMIN) for "
                f"that. Run pytest with the right privileges (e.g. `sudo -E pytest ...`), or drop "
                f"--gpu-caps to measure at the current limit"
            ) from None
        except pynvml.NVMLError_GpuIsLost:
            raise gpu.lost_error("setting its limit") from None
        except pynvml.NVMLError as exc:
            raise LimitChangeError(f"setting the limit of {gpu.label} to {target_mw / 1000:g} W failed: NVML: {exc}") from None
        set_mw = _read_limits(gpu).current_mw
        if abs(set_mw - target_mw) > 1000:
            raise LimitChangeError(
                f"{gpu.label} still has its limit at {set_mw / 1000:g} W after a request for {target_mw / 1000:g} W: "
                f"the limit did not take effect (another power manager, or a driver that ignores it)"
            )
        if abs(enforced - target_mw) > 1000:
            self.notices.append(f"{gpu.label} enforces {enforced / 1000:g} W after a request for {target_mw / 1000:g} W; "
                                f"results record both")
        return enforced

    @staticmethod
    def _describe(gpu: Gpu, limits: PowerLimits, original_mw: int, target_mw: int | None, *,
                  enforced_mw: int | None = None) -> GpuCap:
        return GpuCap(
            gpu_index=gpu.index, gpu_name=gpu.name, gpu_uuid=gpu.uuid,
            requested_w=None if target_mw is None else target_mw / 1000.0,
            enforced_w=(limits.enforced_mw if enforced_mw is None else enforced_mw) / 1000.0,
            previous_w=original_mw / 1000.0,
            default_w=limits.default_mw / 1000.0, min_w=limits.min_mw / 1000.0, max_w=limits.max_mw / 1000.0,
        )

    def restore(self) -> None:
        """Put every changed GPU back to its exact original limit; raise if any stays changed.

        Transient NVML errors are retried with a short backoff; SIGINT, SIGTERM and SIGHUP wait
        until the restore is done. A GPU that cannot be restored keeps its journal entry (so
        ``gpuenergy restore``, or the end of the session, can finish the job) and is named in the error.
        """
        failures: list[str] = []
        try:
            if self._applied:
                with signals_held(f"restoring the power limit of {', '.join(a.gpu.label for a in self._applied)}"):
                    failures = self._restore_all()
        finally:
            self._locks.close()
        if failures:
            raise LimitRestoreError("; ".join(failures))

    def _restore_all(self) -> list[str]:
        failures = []
        while self._applied:
            applied = self._applied.pop()
            problem = _restore_one(applied.gpu, applied.original_mw)
            if problem is None:
                self.journal.clear(applied.entry)
            else:
                failures.append(problem)
        return failures


def restore_after_failure(capper: PowerCapper | Any, failure: BaseException) -> None:
    """Put back what a failed ``apply`` changed. Should that fail too, the error says both, the cause
    first: "no permission to set" reads as such, not as a failed restore."""
    try:
        capper.restore()
    except LimitRestoreError as also:
        if not isinstance(failure, Exception):
            raise
        raise LimitRestoreError(f"{failure}; putting the GPU back failed too: {also}") from None


def _target_mw(spec: CapSpec, gpu: Gpu, limits: PowerLimits) -> int:
    target = spec.resolve_mw(limits)
    if not limits.contains(target):
        raise CapOutOfRange(
            f"cap {spec.label} = {target / 1000:g} W is outside the allowed range {limits.range_text()} of {gpu.label}"
        )
    return target


def _taken_over(gpu: Gpu, left: JournalEntry, current_mw: int) -> str:
    state = "still running" if left.owner_runs() else "gone"
    return (
        f"{gpu.label} was left at {current_mw / 1000:g} W by pid {left.pid} ({state}, its restore never "
        f"happened); this test took over its journal entry and put back the original "
        f"{left.previous_limit_mw / 1000:g} W afterwards"
    )


def _read_limits(gpu: Gpu) -> PowerLimits:
    try:
        return retry_transient(gpu.limits, gpu.retry_backoff_s)
    except pynvml.NVMLError_GpuIsLost:
        raise gpu.lost_error() from None
    except pynvml.NVMLError as exc:
        raise LimitChangeError(f"reading the power limits of {gpu.label} failed: NVML: {exc}") from None


def _restore_one(gpu: Gpu, previous: int) -> str | None:
    last_problem = ""
    for attempt in range(RETRY_ATTEMPTS):
        if attempt:
            time.sleep(gpu.retry_backoff_s * attempt)
        try:
            # Back means the limit set is the one from before: what the GPU enforces under it may
            # differ (another power manager's cap), as it may have before the tests.
            if gpu.current_limit_mw() == previous:
                return None
            gpu.set_limit_mw(previous)
            if gpu.current_limit_mw() == previous:
                return None
            last_problem = f"it reads {gpu.current_limit_mw() / 1000:g} W after the restore"
        except pynvml.NVMLError_GpuIsLost:
            return f"{gpu.label} is lost (NVML: GPU is lost) and could not be set back to {previous / 1000:g} W"
        except pynvml.NVMLError as exc:
            last_problem = f"NVML: {exc}"
    return (
        f"{gpu.label} could not be set back to {previous / 1000:g} W after {RETRY_ATTEMPTS} attempts "
        f"({last_problem})"
    )
