"""Phase marks on a real GPU are CUDA events, dated by the GPU after the region (``gpu/moments.py``).

No GPU here: a fake ``torch.cuda`` stands in for CUDA (or HIP). Its events carry the GPU's time on a
timer of its own (``GPU_EPOCH_S`` apart from the host's clock), and the GPU's time is where the
simulated GPU's queue will be when it reaches the event (``simQueuedUntil``): declared work runs
ahead of the host, which moves only at a synchronisation (the virtual clock). The simulated backend is
told to take the real backend's path (``Backend.cuda_moment``, ``Backend.synchronize`` besides its own),
so the meter's code that runs here is the code a real GPU runs. ``elapsed_time`` on an event the GPU
has not reached raises, as CUDA's does ("device not ready"): a mark read before the region's end
synchronisation fails the test.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import nn

from pytest_gpuenergy.gpu.device import Backend
from pytest_gpuenergy.gpu.moments import QueuedMoment, date_marks
from pytest_gpuenergy.meter.energy_meter import EnergyMeter
from pytest_gpuenergy.sim.work import declare_work

from helpers import declare

GPU_EPOCH_S = 1000.0          # a CUDA event's timer has nothing to do with the host's clock


class FakeEvent:
    def __init__(self, cuda: FakeCuda) -> None:
        self.cuda = cuda
        self.gpu_s = float("nan")
        self.device = -1

    def record(self, stream: Any = None) -> None:
        assert stream is None                            # the current stream
        self.gpu_s = self.cuda.gpu_now_s()
        self.device = self.cuda.device
        self.cuda.recorded.append(self)

    def synchronize(self) -> None:
        assert self.done(), "the fake's events are reached by the time anyone waits for one"

    def done(self) -> bool:
        return self.gpu_s <= self.cuda.backend.clock() + GPU_EPOCH_S + 1e-9      # (the epoch's rounding)

    def elapsed_time(self, end: FakeEvent) -> float:
        self.cuda.reads += 1
        if self.cuda.fail is not None:
            raise RuntimeError(self.cuda.fail)
        if not (self.done() and end.done()):
            raise RuntimeError("CUDA error: device not ready")
        if self.device != end.device:
            raise RuntimeError("CUDA error: invalid resource handle (events on different devices)")
        return (end.gpu_s - self.gpu_s) * 1000.0


class FakeCuda:
    """``torch.cuda`` as the meter uses it: available and initialised (unless told otherwise)."""

    def __init__(self, backend: Backend) -> None:
        self.backend = backend
        self.initialised = True
        self.syncs = 0
        self.reads = 0
        self.device = 0
        self.recorded: list[FakeEvent] = []
        self.fail: str | None = None

    def gpu_now_s(self) -> float:
        return float(self.backend.nvml.simQueuedUntil()) + GPU_EPOCH_S    # type: ignore[attr-defined]

    def Event(self, enable_timing: bool = False) -> FakeEvent:
        assert enable_timing, "a mark's event must be able to time"
        return FakeEvent(self)

    def synchronize(self, device: int | None = None) -> None:
        self.syncs += 1


@pytest.fixture
def cuda(backend: Backend, monkeypatch: pytest.MonkeyPatch) -> FakeCuda:
    fake = FakeCuda(backend)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: fake.initialised)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "synchronize", fake.synchronize)
    monkeypatch.setattr(torch.cuda, "Event", fake.Event)
    simulated_sync = backend.synchronize

    def synchronize() -> None:                           # a real backend's wait (the fake's), then the simulator's
        Backend.synchronize(backend)
        simulated_sync()

    monkeypatch.setattr(backend, "synchronize", synchronize)
    monkeypatch.setattr(backend, "cuda_moment", Backend.cuda_moment.__get__(backend))
    declare(0.001)              # declared work from the start: the CPU-time proxy stays off, the GPU idles with the host
    return fake


def same_marks(found: Any, expected: list[tuple[str, float, float]]) -> bool:
    """The same names, and times equal but for the rounding of the GPU timer's epoch."""
    return ([m[0] for m in found] == [m[0] for m in expected]
            and all(m[1:] == pytest.approx(e[1:], abs=1e-9) for m, e in zip(found, expected)))


@pytest.fixture
def meter(backend: Backend) -> EnergyMeter:
    return EnergyMeter(backend, backend.select(None))


def test_a_phase_is_dated_by_the_gpus_events_not_the_host_and_no_mark_waits(meter, cuda) -> None:
    """Work is queued ahead of the host: the host's clock does not move at the marks, the GPU's does.
    The marks are the events' times through the anchor, exactly; only the region synchronises."""
    backend = meter.backend
    syncs_before = cuda.syncs
    with meter:
        syncs_at_start = cuda.syncs
        (anchor,) = cuda.recorded
        declare(0.03)                                    # queued before the phase: the GPU is 30 ms behind
        host_s = backend.clock()
        with meter.phase("forward"):
            declare(0.05)
        with meter.phase("update"):
            declare(0.02)
        assert backend.clock() == host_s                 # the host never waited at a mark
        assert cuda.syncs == syncs_at_start and cuda.reads == 0    # no mark synchronised, none was read
        events = cuda.recorded[1:]
    t0, t1 = meter.last_region
    assert syncs_at_start - syncs_before == 1 and cuda.syncs - syncs_at_start == 1    # the region's start and end
    assert anchor.gpu_s - GPU_EPOCH_S == pytest.approx(t0, abs=1e-9)    # on the idle GPU, at the start
    assert len(events) == 4
    expected = [("forward", t0 + events[0].gpu_s - anchor.gpu_s, t0 + events[1].gpu_s - anchor.gpu_s),
                ("update", t0 + events[2].gpu_s - anchor.gpu_s, t0 + events[3].gpu_s - anchor.gpu_s)]
    assert same_marks(meter.last_marks, expected)
    (_, start_s, end_s), (_, update_s, last_s) = meter.last_marks
    assert start_s - host_s == pytest.approx(0.03, rel=0.1)        # the GPU's moment, 30 ms after the host's
    assert end_s - start_s == pytest.approx(0.05, rel=0.1) and last_s - update_s == pytest.approx(0.02, rel=0.1)
    assert last_s == pytest.approx(t1, abs=1e-9)         # the region ends when the GPU has run the update
    assert not any("phases: the GPU's times" in note for note in meter.result.notes)


def test_marks_are_the_times_the_simulator_gives_without_cuda_and_it_records_no_event(meter, cuda,
                                                                                      monkeypatch) -> None:
    """The simulator's own path (queue_time) is untouched: the same marks, and no CUDA event, with CUDA up."""
    backend = meter.backend
    monkeypatch.setattr(backend, "cuda_moment", type(backend).cuda_moment.__get__(backend))    # the simulator's: None
    with meter:
        declare(0.03)
        with meter.phase("forward"):
            queued_s = backend.queue_time()
            declare(0.05)
        done_s = backend.queue_time()
    assert cuda.recorded == []
    assert meter.last_marks == (("forward", queued_s, done_s),)


def test_cuda_first_used_inside_the_region_is_dated_backwards_from_an_event_after_its_end(meter, cuda) -> None:
    """No anchor at the start (CUDA was not initialised yet): one recorded after the end, on the idle GPU."""
    cuda.initialised = False
    with meter:
        declare(0.03)
        cuda.initialised = True
        with meter.phase("forward"):
            declare(0.05)
    t0, t1 = meter.last_region
    start, end, end_anchor = cuda.recorded
    assert end_anchor.gpu_s - GPU_EPOCH_S == pytest.approx(t1, abs=1e-9)
    assert same_marks(meter.last_marks, [("forward", t1 - (end_anchor.gpu_s - start.gpu_s),
                                          t1 - (end_anchor.gpu_s - end.gpu_s))])
    assert meter.last_marks[0][1] - t0 == pytest.approx(0.03, rel=0.1)


@pytest.mark.parametrize("broken", ["read", "device"])
def test_an_event_that_cannot_be_read_falls_back_to_the_hosts_clock_with_a_note(meter, cuda, broken) -> None:
    """A failed read, or a mark on another device than the anchor's: every mark takes the host's clock
    at the mark, and the result says so; the region's own figure stands."""
    backend = meter.backend
    if broken == "read":
        cuda.fail = "CUDA error: an illegal memory access was encountered"
    with meter:
        declare(0.03)
        host_s = backend.clock()
        cuda.device = 1 if broken == "device" else 0     # torch.cuda.set_device(1) inside the region
        with meter.phase("forward"):
            declare(0.05)
    assert meter.last_marks == (("forward", host_s, host_s),)
    reason = ("an illegal memory access was encountered" if broken == "read" else "events on different devices")
    note = next(note for note in meter.result.notes if note.startswith("phases: the GPU's times"))
    assert reason in note and "dated by the host's clock" in note
    assert meter.result.ets_j > 0


def test_date_marks_keeps_times_and_dates_events_against_the_anchor() -> None:
    """Floats (the host's clock, where CUDA was not in use yet) stay; no anchor at all is a fallback."""
    class Event:
        def __init__(self, ms: float) -> None:
            self.ms = ms

        def elapsed_time(self, end: Event) -> float:
            return end.ms - self.ms

        def synchronize(self) -> None:
            pass

    anchor = QueuedMoment(Event(500.0), 10.0)
    mark = QueuedMoment(Event(520.0), 10.001)
    assert date_marks([("a", 9.5, mark)], anchor) == ([("a", 9.5, 10.02)], None)
    assert date_marks([("a", mark, mark)], None, QueuedMoment(Event(600.0), 12.0)) == ([("a", 11.92, 11.92)], None)
    assert date_marks([("a", 9, 10)], None) == ([("a", 9, 10)], None)        # a clock's values, whatever their type
    marks, note = date_marks([("a", 9.5, mark)], None)
    assert marks == [("a", 9.5, 10.001)] and note is not None and "no event on the idle GPU" in note


class Step(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layer = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        declare_work(flops_tf32=2e11, kernels=4)
        return self.layer(x)


def test_watch_marks_are_cuda_events_too(meter, cuda) -> None:
    """watch's hooks mark through energy_meter.phase: forward, backward and update by the GPU's events."""
    model = Step()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    backend = meter.backend
    with meter.watch(model, optimizer), meter:
        host_s = backend.clock()
        model(torch.ones(2, 4)).sum().backward()
        optimizer.step()
        assert backend.clock() == host_s and cuda.reads == 0
    assert [m[0] for m in meter.last_marks] == ["forward", "backward", "update"]
    assert len(cuda.recorded) == 1 + 6
    (_, start_s, end_s) = meter.last_marks[0]
    assert start_s == pytest.approx(host_s, abs=1e-9) and end_s > start_s     # the forward's declared work: GPU time
