"""Phase marks dated by the GPU: a CUDA event recorded at each mark, read once the region has ended.

Launches are asynchronous: when the host reaches ``energy_meter.phase(...)`` the GPU may still be
running work queued long before, so the host's clock at a mark is not when the GPU reaches it. A
mark therefore records a ``torch.cuda.Event(enable_timing=True)`` on the current stream of the
current device (never a synchronisation: the host goes on at once), and the region, which
synchronises at both ends anyway, dates the events afterwards against an *anchor*: an event it
recorded on the idle GPU just after its start synchronisation, with the host's clock (the meter's
``Backend.clock``) read at that moment. A mark's moment is then
``anchor.host_s + anchor.event.elapsed_time(mark.event) / 1000``.

torch's ``cuda`` module is CUDA on NVIDIA and HIP on ROCm builds: the same events serve both. Marks
follow the current stream; a mark made on another device than the anchor's (``torch.cuda.set_device``
inside the region) cannot be dated against it, and then every mark falls back to the host's clock
with a note (``date_marks``). Nothing here runs on the simulator, whose queue is exact
(``SimulatedBackend.queue_time``).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeAlias


@dataclass(frozen=True)
class QueuedMoment:
    """A point of the GPU's queued work, known once the GPU has run it: a CUDA event, and the host's
    clock when it was recorded (ahead of the GPU's; what a mark falls back to)."""

    event: Any
    host_s: float


#: A mark's moment: a float on the meter's clock, or a CUDA event to date after the region.
Moment: TypeAlias = float | QueuedMoment


def cuda_torch() -> Any:
    """torch, where its CUDA (or HIP) is available and initialised in this process; else None.
    Never imports torch (1.8 s): a process that has not imported it has no GPU work to wait for."""
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized():
        return torch
    return None


def record_event(clock: Callable[[], float]) -> QueuedMoment | None:
    """A timing event recorded now on the current stream (no wait), where CUDA is in use; else None."""
    torch = cuda_torch()
    if torch is None:
        return None
    event = torch.cuda.Event(enable_timing=True)
    event.record()
    return QueuedMoment(event, clock())


def date_marks(marks: Sequence[tuple[str, Moment, Moment]], anchor: QueuedMoment | None,
               end_anchor: QueuedMoment | None = None) -> tuple[list[tuple[str, float, float]], str | None]:
    """The marks on the meter's clock, once the GPU has run them (after the region's end
    synchronisation), and a note where their events could not be dated.

    ``anchor``: the event recorded on the idle GPU at the region's start. Without one (CUDA came into
    use inside the region), ``end_anchor``, recorded on the idle GPU after the region's end, dates
    them backwards. An event that cannot be dated (no anchor, another device, a failed read) sends
    every mark back to the host's clock, with the note saying so: the region's figure stands, its
    phases are dated by the launches."""
    def seconds(moment: Moment) -> float:
        if not isinstance(moment, QueuedMoment):
            return moment
        if anchor is not None:
            return anchor.host_s + float(anchor.event.elapsed_time(moment.event)) / 1000.0
        if end_anchor is not None:
            return end_anchor.host_s - float(moment.event.elapsed_time(end_anchor.event)) / 1000.0
        raise RuntimeError("no event on the idle GPU to date them against")

    try:
        if end_anchor is not None:
            end_anchor.event.synchronize()      # the region has ended: this waits for nothing of its work
        return [(name, seconds(start), seconds(end)) for name, start, end in marks], None
    except Exception as exc:       # torch raises RuntimeError; a driver may say anything
        host = [(name, _host_s(start), _host_s(end)) for name, start, end in marks]
        return host, (f"the GPU's times of the marks could not be read (CUDA events: {exc}), so the "
                      f"phases are dated by the host's clock, which runs ahead of the GPU's queued work: "
                      f"their figures may be shifted between phases")


def _host_s(moment: Moment) -> float:
    return moment.host_s if isinstance(moment, QueuedMoment) else moment
