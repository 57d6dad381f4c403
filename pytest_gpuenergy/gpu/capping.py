"""Power caps, the first knob: applying one (as typed, ``specs.CapSpec``) so that it always comes back.

A cap is resolved per GPU (60 % of an H100's 700 W default is 420 W, of a V100's 300 W is
180 W). The power limit plugs into the one knob mechanism (``knob.py``: locks, journal before the
change, exact restore with signals held, repair of a dead run's entry); what is its own is here:

1. under the GPUs' cross-process locks, read the limits and check every GPU's allowed range (an
   out-of-range cap changes nothing and skips);
2. journal the original limit before touching the GPU: the limit the GPU had before anyone capped
   it (if the journal already has an entry for the GPU, its original is kept and the cap found on
   the GPU is never taken for the previous limit);
3. set the limit and read back what the GPU enforces (a GPU may enforce another limit than asked:
   noted, results record both); on restore the exact original comes back, not the maximum.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import CapOutOfRange, CapPermissionError, DeviceError, DevicePermissionError, GpuLostError, LimitChangeError
from .device import LIBRARY_LABELS, Backend, Gpu, PowerLimits, retry_transient
from .journal import Journal, JournalEntry, Legacy, journal_for, whole_number
from .knob import Setter, restore_after_failure
from .specs import CapSpec

__all__ = ["POWER_LIMIT", "GpuCap", "PowerCap", "PowerCapper", "power_journal_for", "restore_after_failure"]


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


class PowerLimitKnob:
    """The power limit as a knob (``knob.Knob[int]``): a setting in mW, always readable."""

    name = "power-limit"
    what = "power limit"

    def read(self, gpu: Gpu) -> int:
        return gpu.current_limit_mw()

    def put(self, gpu: Gpu, setting: int) -> None:
        gpu.set_limit_mw(setting)

    def refusal(self, gpu: Gpu, setting: int) -> str | None:
        limits = gpu.limits()
        return None if limits.contains(setting) else f"{self.text(setting)} is outside the GPU's range {limits.range_text()}"

    def text(self, setting: int) -> str:
        return f"{setting / 1000:g} W"

    def describe(self, entry: JournalEntry[int]) -> str:
        return (f"GPU {entry.gpu_index} ({entry.gpu_name}, {entry.gpu_uuid}): capped at {self.text(entry.applied)} "
                f"by pid {entry.pid} on {entry.host}, previous limit {self.text(entry.saved)}")

    def left_text(self, entry: JournalEntry[int]) -> str:
        return (f"GPU {entry.gpu_index} ({entry.gpu_name}, {entry.gpu_uuid}) at {self.text(entry.applied)}, "
                f"its limit before {self.text(entry.saved)}")

    def driver_command(self, gpu_uuid: str, vendor: str, setting: int) -> str:
        if vendor == "amd":     # amd-smi takes its own UUID (the plugin prefixes it with "GPU-") and watts
            return f"amd-smi set --gpu {gpu_uuid.removeprefix('GPU-')} --power-cap {setting / 1000:g}"
        return f"nvidia-smi -i {gpu_uuid} -pl {setting / 1000:g}"

    def encode(self, setting: int) -> int:
        return setting

    def decode(self, value: Any, field: str) -> int:
        return whole_number(value, field, 1, _MAX_LIMIT_MW)


POWER_LIMIT = PowerLimitKnob()
# Why a limit needs privileges, per library: NVML's call needs CAP_SYS_ADMIN; AMD SMI writes the
# amdgpu driver's power1_cap in sysfs, which only root may write.
_NEEDS_ROOT = {"nvml": f"{LIBRARY_LABELS['nvml']} needs root (CAP_SYS_ADMIN) for that",
               "amdsmi": f"{LIBRARY_LABELS['amdsmi']} needs root for that (it writes the amdgpu driver's power1_cap)"}
_MAX_LIMIT_MW = 100_000_000     # 100 kW: no GPU's limit; a larger value is damage
LEGACY_POWER = Legacy[int]("gpuenergy-limit-journal", "limit", lambda data: (
    whole_number(data.get("previous_limit_mw"), "previous_limit_mw", 1, _MAX_LIMIT_MW),
    whole_number(data.get("applied_limit_mw"), "applied_limit_mw", 1, _MAX_LIMIT_MW)))


def power_journal_for(backend: Backend) -> Journal[int]:
    """The power limits' journal (``journal/``), reading the entries of earlier versions too."""
    return journal_for(backend, POWER_LIMIT, LEGACY_POWER)


class PowerCapper(Setter[int]):
    """Applies one cap to a set of GPUs and guarantees their previous limits come back.

    Use as a context manager, or call ``apply`` then ``restore`` (in a ``finally``)::

        with PowerCapper(gpus, journal, lock_folder) as capper:
            cap = capper.apply(parse_cap("60%"))
            ...
    """

    def __init__(self, gpus: Sequence[Gpu], journal: Journal[int], lock_folder: Path) -> None:
        super().__init__(POWER_LIMIT, gpus, journal, lock_folder)

    def __enter__(self) -> PowerCapper:
        return self

    def current(self) -> PowerCap:
        """The GPUs as they are, nothing changed (the case without ``--gpu-caps``)."""
        described = []
        for gpu in self.gpus:
            limits = gpu.limits()
            described.append(self._describe(gpu, limits, limits.current_mw, None))
        return PowerCap("current", None, tuple(described))

    def apply(self, spec: CapSpec) -> PowerCap:
        with self.changing("a cap is already applied: restore it before applying another"):
            limits = {gpu.uuid: _read_limits(gpu) for gpu in self.gpus}   # read under the lock
            targets = {gpu.uuid: _target_mw(spec, gpu, limits[gpu.uuid]) for gpu in self.gpus}
            described = [self._apply_one(gpu, limits[gpu.uuid], targets[gpu.uuid]) for gpu in self.gpus]
        return PowerCap(spec.label, spec, tuple(described))

    def _apply_one(self, gpu: Gpu, limits: PowerLimits, target_mw: int) -> GpuCap:
        left = self.journal.entry(gpu.uuid)     # a cap someone left: its entry knows the original
        original = left.saved if left is not None else limits.current_mw
        if left is not None and left.pid != os.getpid():
            self.notices.append(_taken_over(gpu, left, limits.current_mw))
        if target_mw == limits.current_mw and left is None:
            return self._describe(gpu, limits, original, target_mw)   # nothing to change, nothing to undo
        self.journaled(gpu, original, target_mw)
        enforced = limits.enforced_mw if target_mw == limits.current_mw else self._set(gpu, target_mw)
        return self._describe(gpu, limits, original, target_mw, enforced_mw=enforced)

    def _set(self, gpu: Gpu, target_mw: int) -> int:
        """Set the cap and return what the GPU enforces; every failure is an error naming the GPU."""
        try:
            enforced = retry_transient(lambda: gpu.set_limit_mw(target_mw), gpu.retry_backoff_s)
        except DevicePermissionError:
            raise CapPermissionError(
                f"not allowed to set the power limit of {gpu.label}: {_NEEDS_ROOT[gpu.library]}. Run pytest with the "
                f"right privileges (e.g. `sudo -E pytest ...`), or drop --gpu-caps to measure at the current limit"
            ) from None
        except GpuLostError:
            raise gpu.lost_error("setting its limit") from None
        except DeviceError as exc:
            raise LimitChangeError(f"setting the limit of {gpu.label} to {target_mw / 1000:g} W failed: {exc}") from None
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


def _target_mw(spec: CapSpec, gpu: Gpu, limits: PowerLimits) -> int:
    target = spec.resolve_mw(limits)
    if not limits.contains(target):
        raise CapOutOfRange(
            f"cap {spec.label} = {target / 1000:g} W is outside the allowed range {limits.range_text()} of {gpu.label}"
        )
    return target


def _taken_over(gpu: Gpu, left: JournalEntry[int], current_mw: int) -> str:
    state = "still running" if left.owner_runs() else "gone"
    return (
        f"{gpu.label} was left at {current_mw / 1000:g} W by pid {left.pid} ({state}, its restore never "
        f"happened); this test took over its journal entry and put back the original "
        f"{left.saved / 1000:g} W afterwards"
    )


def _read_limits(gpu: Gpu) -> PowerLimits:
    try:
        return retry_transient(gpu.limits, gpu.retry_backoff_s)
    except GpuLostError:
        raise gpu.lost_error() from None
    except DeviceError as exc:
        raise LimitChangeError(f"reading the power limits of {gpu.label} failed: {exc}") from None
