"""Declaring the GPU work of a step, so that the simulated GPU runs it the same on any host.

On a real GPU the work is simply done; on the simulated one, a step that says what it launched
(``declare_work``: FLOPs per kind of unit, bytes moved, kernels) is turned into time and power by
the roofline and DVFS models, and the host's speed and load play no part. Where nothing is
declared, the process's CPU time inside measured regions stands for the GPU work instead.

``declare_work`` costs nothing without a simulator (a real GPU, or no GPU code at all): it tells
every simulator this process has open, for the GPUs it uses. ``count_work`` (``counting``) counts a
PyTorch step's work from its shapes, and ``count_step`` splits it into the step's phases (forward,
backward, update, other: a :class:`StepWork`), so that a step can declare each phase's work where it
runs and phase marks fall between them.

Host-only time (the next batch, the loss's ``.item()``, Python) is not GPU work, and on the virtual
clock the host's own time never moves anything: a step that wants it seen says how long it is
(``declare_host_time``), and the GPU sits idle that long in its queue, the same on any host.
"""

from __future__ import annotations

import math
import threading
import weakref
from dataclasses import asdict, dataclass, fields
from typing import Any

from .roofline import GpuWork

#: The phases of a training step, in the order they run; ``other`` is everything outside the rest.
STEP_PHASES: tuple[str, ...] = ("forward", "backward", "update", "other")

_SIMULATORS: weakref.WeakSet[Any] = weakref.WeakSet()
_LOCK = threading.Lock()


def register(simulator: Any) -> None:
    with _LOCK:
        _SIMULATORS.add(simulator)


def unregister(simulator: Any) -> None:
    with _LOCK:
        _SIMULATORS.discard(simulator)


def simulating() -> bool:
    """Whether a simulated GPU is open in this process (counting work is then worth it)."""
    return bool(_SIMULATORS)


def declare_work(work: GpuWork | None = None, **figures: float) -> None:
    """One step of GPU work was launched: ``declare_work(flops_tf32=1.2e12, bytes=5e10, kernels=900)``.

    Figures: ``flops_fp32``, ``flops_tf32``, ``flops_fp16``, ``bytes``, ``kernels``; or a ready
    :class:`GpuWork`. A no-op unless a simulated GPU is open.
    """
    if not _SIMULATORS:
        return
    step = work if work is not None else GpuWork(**figures)  # type: ignore[arg-type]  # kernels: a count given as a number
    with _LOCK:
        simulators = list(_SIMULATORS)
    for simulator in simulators:
        simulator.simDeclareWork(step)


def declare_host_time(host_s: float) -> None:
    """The host works ``host_s`` seconds with nothing queued on the GPU (a step that ended in a
    synchronisation, such as ``loss.item()``, then prepares the next batch): the simulated GPU idles
    that long at its working clocks, in its queue, so a phase mark after it comes ``host_s`` later.
    A no-op unless a simulated GPU is open."""
    if not (isinstance(host_s, (int, float)) and not isinstance(host_s, bool) and math.isfinite(host_s)
            and 0 <= host_s < 3600):
        raise ValueError(f"declared host time must be a number of seconds from 0 to 3600, got {host_s!r}")
    if not _SIMULATORS or host_s == 0:
        return
    with _LOCK:
        simulators = list(_SIMULATORS)
    for simulator in simulators:
        simulator.simHostTime(float(host_s))


@dataclass(frozen=True)
class StepWork:
    """One step's GPU work split by phase (None: the phase launched nothing), and its host-only time.

    ``count_step`` counts the split; a step declares each part where that phase runs
    (``reference_workloads/registry.py``). ``total`` is the whole step's work, as ``count_work`` counts it.
    """

    forward: GpuWork | None = None
    backward: GpuWork | None = None
    update: GpuWork | None = None
    other: GpuWork | None = None
    host_s: float = 0.0

    def __post_init__(self) -> None:
        if not any(self.phases().values()):
            raise ValueError("a step's declared work is empty: give at least one phase's work")
        if not (isinstance(self.host_s, (int, float)) and math.isfinite(self.host_s) and self.host_s >= 0):
            raise ValueError(f"a step's host time must be a non-negative number of seconds, got {self.host_s!r}")

    def phases(self) -> dict[str, GpuWork | None]:
        return {name: getattr(self, name) for name in STEP_PHASES}

    @property
    def total(self) -> GpuWork:
        """The phases' work added up (the figures ``count_work`` gives for the whole step)."""
        parts = [work for work in self.phases().values() if work is not None]
        return GpuWork(*(sum(getattr(w, f.name) for w in parts) for f in fields(GpuWork)))

    def scaled(self, factor: float) -> StepWork:
        """Every phase's GPU work times ``factor``; the host's time is not GPU work and stays."""
        return StepWork(**{name: work.scaled(factor) if work is not None else None
                           for name, work in self.phases().items()}, host_s=self.host_s)

    def with_total(self, total: GpuWork) -> StepWork:
        """The same split of a step whose whole work is ``total``: each phase's figure moves in
        proportion to the step's (itself where ``total`` is this step's total)."""
        mine = self.total
        ratio = {f.name: getattr(total, f.name) / getattr(mine, f.name) if getattr(mine, f.name) else 1.0
                 for f in fields(GpuWork)}
        if all(r == 1.0 for r in ratio.values()):
            return self
        return StepWork(**{name: None if work is None else GpuWork(**{k: getattr(work, k) * r for k, r in ratio.items()})
                           for name, work in self.phases().items()}, host_s=self.host_s)

    def to_json(self) -> dict[str, Any]:
        return {**{name: asdict(work) for name, work in self.phases().items() if work is not None},
                "host_s": self.host_s}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> StepWork:
        unknown = set(data) - {*STEP_PHASES, "host_s"}
        if unknown:
            raise ValueError(f"a step's declared work has unknown parts {sorted(unknown)}: "
                             f"expected {', '.join(STEP_PHASES)} and host_s")
        return cls(**{name: GpuWork(**data[name]) for name in STEP_PHASES if name in data},
                   host_s=float(data.get("host_s", 0.0)))
