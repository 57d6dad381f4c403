"""Power caps: what users type (``--gpu-caps=150,60%,min``), and applying one so it always comes back.

A cap is resolved per GPU (60 % of an H100's 700 W default is 420 W, of a V100's 300 W is
180 W). Applying it follows one order, so that a crash at any point can be repaired:

1. check every GPU's allowed range first (an out-of-range cap changes nothing and skips);
2. take the GPUs' cross-process locks (two tests never cap one GPU at the same time);
3. write the journal entry (UUID, previous limit) *before* touching the GPU;
4. set the limit with NVML's v1 call and read back what the GPU enforces;
5. on restore: set the exact previous limit (not the maximum), retrying transient errors, read
   it back, and only then clear the journal entry and release the lock.
"""

from __future__ import annotations

import math
import re
import time
import warnings
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import pynvml

from .device import RETRY_ATTEMPTS, RETRY_BACKOFF_S, Gpu, PowerLimits, retry_transient
from .errors import CapOutOfRange, CapPermissionError, GpuLostError, LimitChangeError, LimitRestoreError, PowerLimitWarning
from .journal import Journal
from .locks import holding, lock_paths

MAX_PLAUSIBLE_W = 5000.0        # no GPU's limit is near this; a larger value is a typo
MAX_PLAUSIBLE_PERCENT = 200.0
_NAMED = ("min", "max", "default")


class CapSyntaxError(ValueError):
    """A cap the user typed cannot be understood; the message names it and says what is valid."""


@dataclass(frozen=True)
class CapSpec:
    """One cap as typed: watts, a percentage of the default limit, or min/max/default."""

    kind: str               # "watts", "percent", "min", "max", "default"
    value: float | None = None

    @property
    def label(self) -> str:
        if self.kind == "watts":
            return f"{self.value:g}W"
        if self.kind == "percent":
            return f"{self.value:g}%"
        return self.kind

    def resolve_mw(self, limits: PowerLimits) -> int:
        if self.kind == "watts":
            return int(round(self.value * 1000))
        if self.kind == "percent":
            return int(round(limits.default_mw * self.value / 100.0))
        return {"min": limits.min_mw, "max": limits.max_mw, "default": limits.default_mw}[self.kind]

    @property
    def _identity(self) -> tuple[str, float | None]:
        return ("default", None) if self.kind == "percent" and self.value == 100 else (self.kind, self.value)


_NUMBER = re.compile(r"^[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?$")


def parse_cap(text: str, *, source: str = "--gpu-caps") -> CapSpec:
    item = str(text).strip()
    hint = "write watts (150), a percentage of the default limit (60%), or min, max, default"
    if not item:
        raise CapSyntaxError(f"{source}: empty cap; {hint}")
    if item.lower() in _NAMED:
        return CapSpec(item.lower())
    percent = item.endswith("%")
    number = item[:-1] if percent else (item[:-1] if item[-1:] in ("W", "w") else item)
    if not _NUMBER.match(number.strip()):
        raise CapSyntaxError(f"{source}: {item!r} is not a cap; {hint}")
    value = float(number)
    if not math.isfinite(value) or value < 1:
        raise CapSyntaxError(f"{source}: {item!r} is not a cap: it must be at least 1 (W or %); {hint}")
    if percent and value > MAX_PLAUSIBLE_PERCENT:
        raise CapSyntaxError(
            f"{source}: {item!r} is more than {MAX_PLAUSIBLE_PERCENT:g}% of the default limit; {hint}"
        )
    if not percent and value > MAX_PLAUSIBLE_W:
        raise CapSyntaxError(
            f"{source}: {item!r} W is not a plausible GPU power limit (above {MAX_PLAUSIBLE_W:g} W); {hint}"
        )
    return CapSpec("percent" if percent else "watts", value)


def parse_caps(text: str | Sequence[object], *, source: str = "--gpu-caps") -> list[CapSpec]:
    """Parse a comma-separated list (or a sequence), merging duplicates and keeping the order."""
    items = str(text).split(",") if isinstance(text, str) else list(text)
    if isinstance(text, str) and not text.strip():
        raise CapSyntaxError(f"{source}: no cap given; write e.g. {source}=150,200,250 or 60%,80%,100%")
    caps: list[CapSpec] = []
    seen: set[tuple[str, float | None]] = set()
    for item in items:
        if isinstance(item, bool) or not isinstance(item, (str, int, float)):
            raise CapSyntaxError(f"{source}: {item!r} is not a cap; write watts (150), 60%, or min, max, default")
        cap = parse_cap(str(item), source=source)
        if cap._identity not in seen:
            seen.add(cap._identity)
            caps.append(cap)
    return caps


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
    previous_mw: int
    target_mw: int


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

    def __enter__(self) -> "PowerCapper":
        return self

    def __exit__(self, *exc: object) -> None:
        self.restore()

    @property
    def pending(self) -> list[Gpu]:
        """GPUs still at a changed limit."""
        return [a.gpu for a in self._applied]

    def current(self) -> PowerCap:
        """The GPUs as they are, nothing changed (the case without ``--gpu-caps``)."""
        return PowerCap("current", None, tuple(self._describe(g, g.limits(), None) for g in self.gpus))

    def apply(self, spec: CapSpec) -> PowerCap:
        if self._applied:
            raise LimitChangeError("a cap is already applied: restore it before applying another")
        limits = {gpu.uuid: _read_limits(gpu) for gpu in self.gpus}
        targets = {}
        for gpu in self.gpus:
            target = spec.resolve_mw(limits[gpu.uuid])
            if not limits[gpu.uuid].contains(target):
                raise CapOutOfRange(
                    f"cap {spec.label} = {target / 1000:g} W is outside the allowed range "
                    f"{limits[gpu.uuid].range_text()} of {gpu.label}"
                )
            targets[gpu.uuid] = target
        self._locks.enter_context(holding(lock_paths(self.lock_folder, [g.uuid for g in self.gpus])))
        described = []
        try:
            for gpu in self.gpus:
                described.append(self._apply_one(gpu, limits[gpu.uuid], targets[gpu.uuid]))
        except BaseException:
            self.restore()
            raise
        return PowerCap(spec.label, spec, tuple(described))

    def _apply_one(self, gpu: Gpu, limits: PowerLimits, target_mw: int) -> GpuCap:
        previous = limits.current_mw
        if target_mw == previous:
            return self._describe(gpu, limits, target_mw)   # nothing to change, nothing to undo
        self.journal.record(gpu, previous, target_mw)
        self._applied.append(_Applied(gpu, previous, target_mw))
        try:
            enforced = retry_transient(lambda: gpu.set_limit_mw(target_mw))
        except pynvml.NVMLError_NoPermission:
            raise CapPermissionError(
                f"not allowed to set the power limit of {gpu.label}: NVML needs root (CAP_SYS_ADMIN) for "
                f"that. Run pytest with the right privileges (e.g. `sudo -E pytest ...`), or drop "
                f"--gpu-caps to measure at the current limit"
            ) from None
        except pynvml.NVMLError_GpuIsLost:
            raise GpuLostError(f"{gpu.label} is lost (NVML: GPU is lost) while setting its limit") from None
        except pynvml.NVMLError as exc:
            raise LimitChangeError(f"setting the limit of {gpu.label} to {target_mw / 1000:g} W failed: NVML: {exc}") from None
        if enforced == previous and enforced != target_mw:
            raise LimitChangeError(
                f"{gpu.label} still enforces {enforced / 1000:g} W after a request for {target_mw / 1000:g} W: "
                f"the limit did not take effect (another power manager, or a driver that ignores it)"
            )
        if abs(enforced - target_mw) > 1000:
            warnings.warn(
                f"{gpu.label} enforces {enforced / 1000:g} W after a request for {target_mw / 1000:g} W; "
                f"results record both",
                PowerLimitWarning,
                stacklevel=3,
            )
        return self._describe(gpu, limits, target_mw, enforced_mw=enforced)

    @staticmethod
    def _describe(gpu: Gpu, limits: PowerLimits, target_mw: int | None, *, enforced_mw: int | None = None) -> GpuCap:
        return GpuCap(
            gpu_index=gpu.index, gpu_name=gpu.name, gpu_uuid=gpu.uuid,
            requested_w=None if target_mw is None else target_mw / 1000.0,
            enforced_w=(limits.enforced_mw if enforced_mw is None else enforced_mw) / 1000.0,
            previous_w=limits.current_mw / 1000.0,
            default_w=limits.default_mw / 1000.0, min_w=limits.min_mw / 1000.0, max_w=limits.max_mw / 1000.0,
        )

    def restore(self) -> None:
        """Put every changed GPU back to its exact previous limit; raise if any stays changed.

        Transient NVML errors are retried with a short backoff. A GPU that cannot be restored
        keeps its journal entry (so ``gpuenergy restore`` can finish the job) and is named in the
        error.
        """
        failures = []
        try:
            while self._applied:
                applied = self._applied.pop()
                problem = _restore_one(applied)
                if problem is None:
                    self.journal.clear(applied.gpu.uuid)
                else:
                    failures.append(problem)
        finally:
            self._locks.close()
        if failures:
            raise LimitRestoreError("; ".join(failures))


def _read_limits(gpu: Gpu) -> PowerLimits:
    try:
        return retry_transient(gpu.limits)
    except pynvml.NVMLError_GpuIsLost:
        raise GpuLostError(f"{gpu.label} is lost (NVML: GPU is lost)") from None
    except pynvml.NVMLError as exc:
        raise LimitChangeError(f"reading the power limits of {gpu.label} failed: NVML: {exc}") from None


def _restore_one(applied: _Applied) -> str | None:
    gpu, previous = applied.gpu, applied.previous_mw
    last_problem = ""
    for attempt in range(RETRY_ATTEMPTS):
        if attempt:
            time.sleep(RETRY_BACKOFF_S * attempt)
        try:
            if gpu.current_limit_mw() == previous or gpu.set_limit_mw(previous) == previous:
                return None
            last_problem = f"it reads {gpu.enforced_limit_mw() / 1000:g} W after the restore"
        except pynvml.NVMLError_GpuIsLost:
            return f"{gpu.label} is lost (NVML: GPU is lost) and could not be set back to {previous / 1000:g} W"
        except pynvml.NVMLError as exc:
            last_problem = f"NVML: {exc}"
    return (
        f"{gpu.label} could not be set back to {previous / 1000:g} W after {RETRY_ATTEMPTS} attempts "
        f"({last_problem})"
    )
