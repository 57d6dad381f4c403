"""The recorder inside a long region on real time: one tick in SPARSE_EVERY, every tick at the edges and
wherever phases are marked, and a region's end waking it to read at once (meter/recorder.py)."""

from __future__ import annotations

import time

import pytest

from pytest_gpuenergy.meter import EnergyMeter
from pytest_gpuenergy.meter.lattice import Lattice
from pytest_gpuenergy.meter.recorder import POLL_S, SPARSE_EVERY, Recorder, Skip, ThreadDriver
from pytest_gpuenergy.meter.results import COUNTER, SAMPLING

from helpers import declare, exact_j, spin


def reads_inside(meter: EnergyMeter) -> list:
    t0, t1 = meter.last_region
    return [r for r in meter.recorders[0].snapshot(t0, t1)[0] if t0 <= r.started <= t1]


def busy_s(seconds: float) -> None:
    """Python work on the test's thread for ``seconds`` of wall time (after declared work, not GPU work)."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        pass


def learned_meter(backend) -> EnergyMeter:
    meter = EnergyMeter(backend, backend.select(None))
    meter.measure(spin, 0.01, min_time_s=0.3)          # the lattice learned, as a session's later regions find it
    return meter


@pytest.mark.slow
def test_a_long_region_is_read_sparsely_and_its_bound_still_holds_the_truth(wall_backend):
    meter = learned_meter(wall_backend)
    lattice = meter.recorders[0].learner.lattice      # as learned: a loaded host can make it learn again
    with meter:
        declare(2.0)                                  # the GPU's work, steady in real time...
        busy_s(1.8)                                   # ...while the test's thread holds the GIL, as Python does
    t0, t1 = meter.last_region
    # Every tick for two periods after the start, then one in SPARSE_EVERY: two ticks a cycle (a read
    # half a period before it, to compare with, is dated to the tick before), a few more where a
    # loaded host makes it bracket a tick or learn again. Dense reading reads every tick of the
    # region after its first two periods (17 on an idle host). The GPU's work is declared: spun on the
    # CPU, it made the simulated GPU's power follow a loaded host's scheduler, and an edge's estimate
    # 3 % off (CI-like load, 2026-11-28; the bound held), which no meter can see between publications.
    middle = {lattice.index_before(r.started) for r in reads_inside(meter) if r.started > t0 + 0.3}
    ticks = (t1 - t0 - 0.3) / lattice.period_s
    assert SPARSE_EVERY == 8 and len(middle) <= 0.5 * ticks, (round(ticks), sorted(middle))
    truth = exact_j(wall_backend, meter.gpus[0], t0, t1)
    assert meter.result.ets_low_j <= truth <= meter.result.ets_high_j, (truth, meter.result.describe())
    assert abs(meter.result.ets_j / truth - 1) < 0.02


@pytest.mark.slow
@pytest.mark.parametrize(("length_s", "end_at"), [(1.17, 0.3), (1.22, 0.5), (1.27, 0.65)])
def test_the_publication_just_before_the_end_of_a_sparsely_read_region_is_read(wall_backend, length_s, end_at):
    """Asleep through up to eight ticks when the region ends, the recorder is woken to read at once (or
    was about to read around a tick anyway): the value published just before the end is known, so the
    region's tail interval is one period, not eight (three lengths: the end at different points of
    the recorder's sleep). The end is put ``end_at`` of a period after a tick: an end within a read's
    lateness of the next tick leaves no moment to read the last one cleanly, awake or not (CI once
    ended 6 ms before it). The test's thread sleeps: a thread that spins Python makes the simulated
    library's reads slow (it releases the GIL at every file operation, and waits up to 5 ms for it
    each time), and a read that straddles a tick sees no publication cleanly, awake or not."""
    meter = learned_meter(wall_backend)
    recorder = meter.recorders[0]
    lattice = recorder.learner.lattice
    with meter:
        time.sleep(length_s)
        end = lattice.next_tick_after(recorder.clock()) + end_at * lattice.period_s
        time.sleep(max(end - recorder.clock(), 0.0))
    _, t1 = meter.last_region
    assert meter.result.ets_j > 0                         # resolved: the publications after the end are read
    lattice = recorder.learner.lattice or lattice         # None while a loaded host makes it learn again
    tick = lattice.tick_at(lattice.index_before(t1))      # the last publication before the end
    error = lattice.error_at(t1)
    reads = recorder.snapshot(t1 - 1.0, t1 + 1.0)[0]
    assert any(tick + error < r.started and r.ended < tick + lattice.period_s - error for r in reads), (
        round(t1 - tick, 3), [(round(r.started - tick, 3), round(r.ended - tick, 3)) for r in reads])


@pytest.mark.slow
def test_a_region_with_phase_marks_is_read_at_every_tick(wall_backend):
    meter = learned_meter(wall_backend)
    with meter:
        for _ in range(20):
            with meter.phase("work"):
                spin(0.06)
            spin(0.04)
    inside = reads_inside(meter)
    t0, t1 = meter.last_region
    assert len(inside) >= 0.9 * (t1 - t0) / meter.recorders[0].period_s, len(inside)


def tick_brackets_s(meter: EnergyMeter) -> list[float]:
    """The width of each bracket around a publication inside the region: from the read before the value
    moved to the read that saw it move."""
    inside = reads_inside(meter)
    return [b.ended - a.started for a, b in zip(inside, inside[1:]) if b.value != a.value]


def test_a_region_with_phase_marks_brackets_every_tick_finely_and_one_without_does_not(backend):
    """Phase attribution dates each publication by the bracket around it: inside a marked region every
    tick is polled at POLL_S. Found on 2026-11-28: once the learner kept its lattice up to date (it had
    stopped numbering the brackets a confident recorder takes every fourth tick), a marked region was
    read only just after most ticks, and the watched training steps' phase bounds came out two to
    three times wider. An unmarked region reads just after most ticks, as designed."""
    meter = learned_meter(backend)
    with meter, meter.phase("work"):
        backend.sleep_until(backend.clock() + 2.0)
    marked = tick_brackets_s(meter)
    assert len(marked) >= 19 and max(marked[1:]) <= POLL_S + 1e-9, marked   # (the first: polled before the mark)
    with meter:
        backend.sleep_until(backend.clock() + 2.0)
    plain = tick_brackets_s(meter)
    assert len(plain) >= 19 and sum(width > 0.05 for width in plain) >= len(plain) // 2, plain


def test_on_a_virtual_clock_every_tick_is_read_as_before(backend):
    meter = learned_meter(backend)
    with meter:
        backend.sleep_until(backend.clock() + 2.0)
    inside = reads_inside(meter)
    assert len(inside) >= 19, len(inside)                  # a tick every 100 ms: no sleeping through any
    assert meter.recorders[0].sparse_allowed is False      # its plan never sleeps through a tick


def test_a_sleep_through_ticks_ends_when_a_region_ends_and_not_otherwise(wall_backend):
    """The driver's side: a Skip wake-up comes early on a nudge (a region's end), an ordinary one does not."""
    recorder = Recorder(wall_backend.all_gpus[0], wall_backend.clock, COUNTER, seed="slot0")
    woken = []

    def plan():
        yield Skip(recorder.clock() + 5.0)
        woken.append(("skip", recorder.clock()))
        yield recorder.clock() + 0.3
        woken.append(("plain", recorder.clock()))
        yield recorder.clock() + 60.0

    recorder.schedule = plan
    driver = ThreadDriver(recorder)
    assert recorder.sparse_allowed                        # a real-time driver lets it sleep through ticks
    driver.start()
    try:
        time.sleep(0.1)
        nudged_at = recorder.clock()
        driver.nudge()
        time.sleep(0.05)
        assert woken and woken[0][0] == "skip" and woken[0][1] - nudged_at < 0.04, woken
        driver.nudge()                                    # an ordinary wait is not cut short
        time.sleep(0.1)
        assert len(woken) == 1, woken
        time.sleep(0.3)
        assert [w[0] for w in woken] == ["skip", "plain"]
    finally:
        driver.stop()
    assert not driver.is_alive()


def test_sparse_reading_needs_an_open_region_past_its_first_two_periods_and_no_marks(wall_backend):
    recorder = Recorder(wall_backend.all_gpus[0], wall_backend.clock, COUNTER, seed="slot0")
    recorder.sparse_allowed = True
    period = recorder.period_s
    assert not recorder._sparse(10.0)                     # no region open
    recorder.region_started(1, 10.0)
    assert not recorder._sparse(10.0 + 2.5 * period)      # the tick after next is still within two periods
    assert recorder._sparse(10.0 + 3.5 * period)
    recorder.every_tick(1)
    assert not recorder._sparse(10.0 + 3.5 * period)      # phase marks: every publication
    recorder.region_started(2, 10.0)
    recorder.region_ended(1, 10.2)
    assert not recorder._sparse(10.2 + 2.5 * period)      # every tick for two periods after an end
    assert recorder._sparse(10.2 + 3.5 * period)          # the marked region ended; the other is open
    recorder.release(2)                                   # released without an end (an error): closed too
    assert not recorder._sparse(100.0)
    recorder.sparse_allowed = False
    assert not recorder._sparse(200.0)                    # a virtual clock's recorder never sleeps through


def test_a_late_waking_thread_is_not_sent_back_to_polling_for_a_lattice_its_reads_cannot_better(wall_backend):
    recorder = Recorder(wall_backend.all_gpus[0], wall_backend.clock, COUNTER, seed="slot0")
    assert recorder._confident_within_s() == pytest.approx(0.004)
    recorder.woke(0.004)                                  # the GIL held it 4 ms past its moment
    assert recorder._confident_within_s() == pytest.approx(0.006)
    recorder.woke(0.5)                                    # no more than the switch interval counts
    assert recorder._confident_within_s() == pytest.approx(1.5 * 0.005)
    sampler = Recorder(wall_backend.all_gpus[0], wall_backend.clock, SAMPLING, seed="slot0")
    sampler.woke(0.004)
    assert sampler._confident_within_s() == pytest.approx(0.004)   # power readings are taken as dated


def test_a_sleep_through_ticks_reads_half_a_period_before_the_last_tick_slept_to_and_returns_the_tick_to_read(
        wall_backend, monkeypatch):
    """``_skip``'s own arithmetic, on a frozen clock: asleep through SPARSE_EVERY - 1 ticks, it reads half a
    period before the last (to compare with the read around it), then goes on from that tick, or, with a
    lattice, from the lattice's next tick after now (a region's end woke it early)."""
    now = [50.0]
    recorder = Recorder(wall_backend.all_gpus[0], lambda: now[0], COUNTER, seed="slot0")
    period = recorder.period_s
    reads = []
    monkeypatch.setattr(recorder, "_read", lambda: reads.append(now[0]) or False)
    recorder.learner.lattice = None                        # learning again: only the tick slept to is known
    plan = recorder._skip(10.0)
    wake = next(plan)
    assert isinstance(wake, Skip) and wake == pytest.approx(10.0 + (SPARSE_EVERY - 1.5) * period, abs=1e-12)
    with pytest.raises(StopIteration) as done:
        next(plan)
    assert reads == [50.0] and done.value.value == pytest.approx(10.0 + (SPARSE_EVERY - 1) * period, abs=1e-12)
    recorder.learner.lattice = Lattice(period, 10.0, (period, period), (), 0)
    now[0] = 10.0 + 2.3 * period                           # woken early, 2.3 periods on
    plan = recorder._skip(10.0)
    next(plan)
    with pytest.raises(StopIteration) as done:
        next(plan)
    assert done.value.value == pytest.approx(10.0 + 3 * period, abs=1e-12)


def test_a_sleep_through_ticks_that_no_region_end_cuts_short_wakes_at_its_moment(wall_backend):
    recorder = Recorder(wall_backend.all_gpus[0], wall_backend.clock, COUNTER, seed="slot0")
    woken = []

    def plan():
        yield Skip(recorder.clock() + 0.2)
        woken.append(recorder.clock())
        yield recorder.clock() + 60.0

    recorder.schedule = plan
    driver = ThreadDriver(recorder)
    started = recorder.clock()
    driver.start()
    try:
        deadline = time.perf_counter() + 3.0
        while not woken and time.perf_counter() < deadline:
            time.sleep(0.02)
        assert woken and 0.19 <= woken[0] - started < 2.0, woken
    finally:
        driver.stop()
