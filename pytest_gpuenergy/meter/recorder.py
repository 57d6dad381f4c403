"""One thread per GPU that records every publication of its energy counter (or power) all session.

A region is then just two timestamps: its energy is worked out afterwards from the reads around
them (``integrate``). The tick lattice is learned once per GPU and session, not per region, and
the reads before a region give the power just before it.

The thread sleeps until shortly before the next expected publication and reads around it. While
the lattice is being learned it polls finely near each expected tick until the value moves, with a
random lead so that successive brackets fall at different offsets and their intersection keeps
narrowing. Once the lattice is known to a millisecond it reads just after each tick (and, one tick
in four, just before it too, to follow the clock's drift): two reads per 100 ms at most.

Inside a long region on real time it reads one tick in ``SPARSE_EVERY`` (the counter is cumulative:
a region's energy needs the publications at its edges, not every one between them; each read and
each wake-up costs a main thread that runs Python the GIL). It reads every tick for two periods
after a region's start and after its end, throughout a region with phase marks (their attribution
needs every window, each publication bracketed at ``POLL_S``), for power readings (each one averages
its own window) and on a simulator's virtual clock (no real time is lost there, and its figures stay
as they were). A region's end wakes a sleeping recorder to read at once, so the publication just
before the end is known.
"""

from __future__ import annotations

import bisect
import math
import os
import random
import sys
import threading
import time
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass
from typing import Any

from ..errors import DeviceError, GpuLostError, MeasurementError
from ..gpu.device import Backend, Gpu
from .integrate import Read
from .lattice import Bracket, Lattice, TickLearner
from .results import COUNTER, SAMPLING, Method

POLL_S = 0.0005                  # polling step near an expected counter tick while learning
_REFRESH_POLL_S = 0.001          # ...and while refreshing a known lattice (fewer wake-ups; many brackets still narrow it)
SAMPLE_S = 0.005                 # power polling step while no lattice is known
# Wake this long before an expected tick: a thread that wakes needs the GIL back, which a busy
# main thread yields only every switch interval (5 ms by default).
_GUARD_S = sys.getswitchinterval() + 0.003
_LEAD_S = 0.0015                 # a confident recorder reads this long (plus a random extra) around a tick
_CONFIDENT_ERROR_S = 0.004       # how well the lattice must be known to read only around its ticks
_FINE_ERROR_S = 0.001            # ...and to bracket only one tick in _REFRESH_EVERY
_TIGHT_ERROR_S = 0.0005          # ...and only one in _REFRESH_RARELY (the clocks drift by microseconds a second)
_REFRESH_EVERY = 4
_REFRESH_RARELY = 16
_KEEP_S = 30.0                   # reads older than this (and than any held region) are dropped
_GIVE_UP_AFTER_S = 2.0           # failed reads for this long in a row stop the recorder
# On a simulator's virtual clock a new recorder first watches the idle GPU this long (no wall time,
# about 10 ms of CPU, once per GPU: later tests start from a copy, see ``Recorders``), so that every
# test's first region finds the lattice learned, as a session's later regions do on a real GPU,
# whichever test comes first.
VIRTUAL_WARM_UP_S = 0.6
# A counter that publishes this often (AMD SMI's, every millisecond) needs no lattice: any read sees a
# value at most a period old. It is read at a steady pace instead (its reads date the region's edges
# to about that pace, finer than a 100 ms counter's ticks), and no tick is chased every millisecond.
FAST_COUNTER_PERIOD_S = 0.005
FAST_COUNTER_READ_S = 0.01
SPARSE_EVERY = 8                 # inside a long region (see the module docstring): one tick in this many
_DENSE_AFTER_EDGE_PERIODS = 2    # ...but every tick this many periods after a region's start or end


class Skip(float):
    """A wake-up time that may come early: the recorder sleeps through ticks inside a long region,
    and the region's end wakes it (``ThreadDriver.nudge``)."""


@dataclass(frozen=True)
class RecorderState:
    """What a recorder knew at ``taken_at``: on a virtual clock every test's world is the same, so a
    recorder that starts from this at that moment reads exactly as one that learned it."""

    taken_at: float
    learner: TickLearner
    reads: tuple[Read, ...]
    jitter: Any
    since_refresh: int


class Recorder:
    """Keeps every read of one GPU's counter (``method`` "counter") or power ("sampling").

    When to read is a plan, :meth:`schedule`: a generator that reads, then yields the moment it
    wants to be woken next. A driver runs it: a thread on real time (:class:`ThreadDriver`), or a
    simulator's virtual clock, which wakes it at exactly those moments (the same plan, the same
    reads, whatever the host is doing).
    """

    def __init__(self, gpu: Gpu, clock: Callable[[], float], method: Method, seed: int | str | None = None) -> None:
        self.gpu = gpu
        self.clock = clock
        self.method = method
        self.learner = TickLearner(gpu.counter_period_s)
        self.window_s = gpu.power_window_s if method == SAMPLING else 0.0
        self.max_limit_w = gpu.max_limit_mw() / 1000.0
        self.error: BaseException | None = None
        self.last_error: BaseException | None = None
        self.driver: Any = None
        self.changed = threading.Condition()     # notified after every read
        self._reads: list[Read] = []
        self._holds: dict[int, float] = {}
        self._next_hold = 0
        self._jitter = random.Random(seed if seed is not None else gpu.uuid)   # the same plan every run
        self._latency_s = 0.0
        self._read_cost_s = 0.0          # how long a read takes (a real H100: 2.4 ms): reads must start that much earlier
        self._since_refresh = _REFRESH_EVERY
        self._failing_since: float | None = None
        self.sparse_allowed = False      # a real-time driver sets it (see the module docstring)
        self._open_regions: set[int] = set()     # hold tokens of the regions started and not yet ended
        self._every_tick: set[int] = set()       # ...of those that asked for every tick (phase marks)
        self._dense_until = -math.inf

    # -- a copy of what it learned (a simulator's virtual clock only) ------------------------------
    def state(self, taken_at: float) -> RecorderState:
        with self.changed:
            return RecorderState(taken_at, self.learner.copy(), tuple(self._reads), self._jitter.getstate(),
                                 self._since_refresh)

    def take(self, state: RecorderState) -> None:
        """Start from ``state`` instead of learning (before the driver starts)."""
        self.learner = state.learner.copy()
        self._reads = list(state.reads)
        self._jitter.setstate(state.jitter)
        self._since_refresh = state.since_refresh

    # -- what the meter uses -----------------------------------------------------------------------
    @property
    def period_s(self) -> float:
        return self.learner.period_s

    def snapshot(self, since: float, until: float) -> tuple[list[Read], Lattice | None]:
        """The reads that began within [since, until], and the lattice as it is now."""
        with self.changed:
            starts = [r.started for r in self._reads]
            first = bisect.bisect_left(starts, since)
            last = bisect.bisect_right(starts, until)
            return self._reads[first:last], self.learner.lattice

    def has_read_since(self, moment: float) -> bool:
        return bool(self._reads) and self._reads[-1].started >= moment

    def wait_until(self, moment: float) -> None:
        """Return once a read that began at ``moment`` or later has been taken (or recording stopped)."""
        self.driver.wait_until(moment)

    def hold(self, since: float) -> int:
        """Keep the reads from ``since`` on until :meth:`release` (a region is being measured)."""
        with self.changed:
            self._next_hold += 1
            self._holds[self._next_hold] = since
            return self._next_hold

    def release(self, token: int) -> None:
        self.region_ended(token)
        with self.changed:
            self._holds.pop(token, None)

    def region_started(self, token: int, t0: float) -> None:
        """A region (its hold ``token``) started at ``t0``: every tick for the next two periods."""
        with self.changed:
            self._open_regions.add(token)
            self._dense_until = max(self._dense_until, t0 + _DENSE_AFTER_EDGE_PERIODS * self.period_s)

    def every_tick(self, token: int) -> None:
        """The region needs every publication (phase marks): no sparse reading while it is open."""
        with self.changed:
            if token in self._open_regions:
                self._every_tick.add(token)

    def region_ended(self, token: int, t1: float | None = None) -> None:
        """The region ended at ``t1``: read at once if asleep, then every tick for two periods."""
        with self.changed:
            if token not in self._open_regions:
                return
            self._open_regions.discard(token)
            self._every_tick.discard(token)
            if t1 is not None:
                self._dense_until = max(self._dense_until, t1 + _DENSE_AFTER_EDGE_PERIODS * self.period_s)
        nudge = getattr(self.driver, "nudge", None)
        if nudge is not None:
            nudge()

    def raise_error(self) -> None:
        """Raise what stopped the recorder, if anything did."""
        if self.error is not None:
            raise self.error

    def is_alive(self) -> bool:
        return self.error is None and self.driver is not None and self.driver.is_alive()

    def cpu_s(self) -> float:
        """CPU time recording has used (its thread's, kernel time included; 0 on a virtual clock)."""
        return self.driver.cpu_s() if self.driver is not None else 0.0

    def user_cpu_s(self) -> float | None:
        """Its thread's CPU time in user space (see :meth:`ThreadDriver.user_cpu_s`)."""
        return self.driver.user_cpu_s() if self.driver is not None else None

    def stop(self) -> None:
        if self.driver is not None:
            self.driver.stop()

    def failed(self, exc: BaseException) -> None:
        """The plan raised: recording is over, and every region that needs it says why."""
        self.error = exc
        with self.changed:
            self.changed.notify_all()

    def woke(self, late_s: float) -> None:
        """The driver woke the plan ``late_s`` after the moment it asked for (the GIL, the scheduler)."""
        self._latency_s = max(late_s, 0.8 * self._latency_s)   # remember a late wake-up for a while

    # -- the plan ----------------------------------------------------------------------------------------
    @property
    def learns_lattice(self) -> bool:
        """Whether this recorder dates publications by a learned lattice (not a fast counter's)."""
        return not (self.method == COUNTER and self.gpu.counter_period_s <= FAST_COUNTER_PERIOD_S)

    def schedule(self) -> Iterator[float]:
        """Read, and yield when to be woken next; forever (the driver stops it)."""
        self._read()
        while not self.learns_lattice:
            yield self._step(FAST_COUNTER_READ_S)
            self._read()
        while True:
            expected = self._expected_tick()
            if expected is not None and self.learner.confident(expected, self._confident_within_s()):
                if self._sparse(expected):
                    expected = yield from self._skip(expected)
                yield from self._around(expected)
            else:
                yield from self._learn(expected)

    def _confident_within_s(self) -> float:
        """How well the lattice must be known to read only around its ticks: no better than its brackets
        can be, which a slow read (2.4 ms on a real H100) and a late wake-up (a main thread that holds
        the GIL: up to its 5 ms switch interval) widen; asking for more sends the recorder back to
        polling, which costs that main thread every wake-up and gains nothing. (The counter's bound
        prices every publication's dating error; power readings are taken as dated, so for them the
        lattice must still be known to a read's cost.)"""
        within_s = max(_CONFIDENT_ERROR_S, 1.5 * self._read_cost_s)
        if self.method != COUNTER:
            return within_s
        return max(within_s, 1.5 * min(self._latency_s, sys.getswitchinterval()))

    def _sparse(self, expected: float) -> bool:
        """Whether to sleep through ticks: inside a long region without phase marks (module docstring)."""
        with self.changed:
            return (self.sparse_allowed and self.method == COUNTER and bool(self._open_regions)
                    and not self._every_tick and expected - self.period_s > self._dense_until)

    def _skip(self, expected: float) -> Generator[float, None, float]:
        """Sleep through ``SPARSE_EVERY - 1`` ticks, read once half a period before the next (so that the
        read around it compares with its predecessor's value), and return that tick. A region's end
        wakes it early: then the read is at once (the publication just before the end) and the tick is
        the next one."""
        target = expected + (SPARSE_EVERY - 1) * self.period_s
        yield Skip(target - 0.5 * self.period_s)
        self._read()
        lattice = self.learner.lattice
        if lattice is None:
            return target
        return lattice.next_tick_after(self.clock())

    def _expected_tick(self) -> float | None:
        lattice = self.learner.lattice
        return lattice.next_tick_after(self.clock()) if lattice is not None else None

    def _value(self) -> int:
        if self.method == COUNTER:
            return self.gpu.energy_mj()
        return self.gpu.power_mw()

    def _read(self) -> bool:
        """One read; True if the value changed since the previous one. A failed read is tried again at
        the next one (for ``_GIVE_UP_AFTER_S``); a lost GPU ends the recorder."""
        started = self.clock()
        try:
            value = self._value()
        except GpuLostError:
            raise
        except DeviceError as exc:
            self._note_failure(started, exc)
            return False
        ended = self.clock()
        self._read_cost_s = max(ended - started, 0.9 * self._read_cost_s)   # remember a slow read for a while
        self._failing_since = None
        with self.changed:
            previous = self._reads[-1] if self._reads else None
            self._reads.append(Read(started, ended, value))
            self._trim(ended)
            changed = previous is not None and value != previous.value
            if changed:
                assert previous is not None
                self.learner.add(Bracket(previous.started, ended))
            self.changed.notify_all()
        return changed

    def _note_failure(self, moment: float, exc: BaseException) -> None:
        self.last_error = exc
        if self._failing_since is None:
            self._failing_since = moment
        elif moment - self._failing_since > _GIVE_UP_AFTER_S:
            raise MeasurementError(f"reading the energy of {self.gpu.label} failed for over "
                                   f"{_GIVE_UP_AFTER_S:g} s: {exc}")

    def _trim(self, now: float) -> None:
        keep_from = min([now - _KEEP_S, *self._holds.values()])
        if self._reads and self._reads[0].started < keep_from - 1.0:
            cut = bisect.bisect_left([r.started for r in self._reads], keep_from)
            del self._reads[:cut]

    def _step(self, step_s: float) -> float:
        """When to read next while polling: ``step_s`` on, ten times that while reads fail."""
        return self.clock() + (10 * step_s if self._failing_since is not None else step_s)

    def _around(self, expected: float) -> Iterator[float]:
        """Read just after an expected tick; on one tick in four (or while the lattice is loose)
        bracket it finely instead, to keep the lattice tight and follow the clock's drift."""
        lattice = self.learner.lattice
        assert lattice is not None
        period = lattice.period_s
        error = lattice.error_at(expected)
        # A bracket cannot be narrower than a read (the value is taken somewhere inside it), so
        # with slow reads (2.4 ms on a real H100) the lattice is as good as it gets at about half
        # a read: refresh by that measure, or every tick would be bracketed.
        every = _REFRESH_RARELY if error <= max(_TIGHT_ERROR_S, 0.6 * self._read_cost_s) else _REFRESH_EVERY
        if (error > max(_FINE_ERROR_S, 0.8 * self._read_cost_s) or self._since_refresh + 1 >= every
                or self._marks_open()):
            lead = (_LEAD_S + error + self._read_cost_s + min(self._latency_s, 0.2 * period)
                    + self._jitter.uniform(0.0, _LEAD_S))
            if self.clock() > expected - lead:   # too close to brace for it: take the next one
                expected += period
            yield expected - lead
            if self._read():
                # Seen before it was due. The read may have taken its value anywhere in its span,
                # so only a read that *ended* before the tick's earliest time contradicts the lattice.
                if self._reads[-1].ended < expected - lattice.error_at(expected):
                    self.learner.miss()
                return
            self._since_refresh = 0
            step_s = POLL_S if self._marks_open() else _REFRESH_POLL_S
            yield from self._poll_until_change(step_s, give_up_at=expected + 0.25 * period)
            return
        self._since_refresh += 1
        yield expected + _LEAD_S + error + self._jitter.uniform(0.0, _LEAD_S)
        if self._read():
            self.learner.hit()
        elif self.method == COUNTER:
            # The counter moves at every tick (a GPU always draws power): the tick is late.
            self.learner.miss()
            yield from self._poll_until_change(POLL_S)

    def _marks_open(self) -> bool:
        """Whether a region with phase marks is open: its attribution dates each publication by the
        bracket around it, so every tick is bracketed finely there (a read just after a tick dates it
        only to the lattice's error, which left phases' bounds two to three times wider)."""
        with self.changed:
            return bool(self._every_tick)

    def _learn(self, expected: float | None) -> Iterator[float]:
        """Poll near the next expected tick until the value moves."""
        if self.method == SAMPLING and expected is None:
            self._read()   # steady power may never move: sample, do not spin
            yield self._step(SAMPLE_S)
            return
        if expected is not None:
            # A random extra lead decorrelates the brackets from the tick; late wake-ups (a main
            # thread that holds the GIL) are allowed for, or every read would come after the tick.
            period = self.learner.period_s
            lead_s = (_GUARD_S + self._read_cost_s + min(self._latency_s, 0.2 * period)
                      + self._jitter.uniform(0.0, sys.getswitchinterval()))
            yield expected - lead_s
            if self.method == SAMPLING:
                yield from self._poll_until_change(POLL_S, give_up_at=expected + _GUARD_S + 0.25 * period)
                return
        yield from self._poll_until_change(POLL_S)

    def _poll_until_change(self, step_s: float, give_up_at: float | None = None) -> Iterator[float]:
        while not self._read():
            if give_up_at is not None and self.clock() > give_up_at:
                return
            yield self._step(step_s)


class ThreadDriver(threading.Thread):
    """Runs a recorder's plan on real time, in a daemon thread."""

    def __init__(self, recorder: Recorder) -> None:
        super().__init__(name=f"gpuenergy-recorder-{recorder.gpu.index}", daemon=True)
        self.recorder = recorder
        recorder.sparse_allowed = True
        self._stopping = threading.Event()
        self._nudged = threading.Event()      # a region ended: a Skip's sleep ends early

    def run(self) -> None:
        recorder, clock = self.recorder, self.recorder.clock
        try:
            for wake in recorder.schedule():
                delay = wake - clock()
                if isinstance(wake, Skip):
                    if delay > 0:
                        self._nudged.wait(delay)
                elif (delay > 0 and self._stopping.wait(delay)) or self._stopping.is_set():
                    return
                else:
                    recorder.woke(clock() - wake)
                if self._stopping.is_set():
                    return
                self._nudged.clear()      # before the plan decides again: a later end still wakes it
        except BaseException as exc:  # handed to the meter through recorder.error
            recorder.failed(exc)
        finally:
            with recorder.changed:
                recorder.changed.notify_all()

    def wait_until(self, moment: float) -> None:
        recorder = self.recorder
        with recorder.changed:
            while recorder.error is None and self.is_alive() and not recorder.has_read_since(moment):
                recorder.changed.wait(max(moment - recorder.clock(), 0.0) + 0.01)

    def nudge(self) -> None:
        """Wake a recorder sleeping through ticks (``Skip``): a region has ended."""
        self._nudged.set()

    def stop(self) -> None:
        self._stopping.set()
        self._nudged.set()
        if self.is_alive() and threading.current_thread() is not self:
            self.join()

    def cpu_s(self) -> float:
        """CPU time this thread has used, kernel time included."""
        ident = self.ident
        if ident is None:
            return 0.0
        try:
            return time.clock_gettime(time.pthread_getcpuclockid(ident))
        except (OSError, AttributeError):
            return 0.0

    def user_cpu_s(self) -> float | None:
        """This thread's CPU time in user space (Linux; None elsewhere), in 10 ms ticks.

        A Python thread holds the GIL while it runs Python code, not while the kernel wakes it up
        (which costs 60-100 us a wake on a small VM), so this, not :meth:`cpu_s`, is what the
        recorder takes from a main thread that runs Python.
        """
        try:
            with open(f"/proc/self/task/{self.native_id}/stat", "rb") as stat:
                fields = stat.read().rsplit(b")", 1)[1].split()
            return int(fields[11]) / os.sysconf("SC_CLK_TCK")
        except (OSError, ValueError, IndexError, TypeError):
            return None


class PlanDriver:
    """Runs a recorder's plan on a simulator's virtual clock: woken at exactly the moments it asks for."""

    def __init__(self, recorder: Recorder, clock: Any, sleep_until: Callable[[float], None]) -> None:
        self.recorder = recorder
        self.clock = clock
        self._sleep_until = sleep_until
        self.plan: Any = None

    def start(self) -> None:
        self.plan = self.clock.start(self.recorder.schedule(), self.recorder.failed)

    def wait_until(self, moment: float) -> None:
        """Move the clock to ``moment``, then on to the plan's next read if none was taken since."""
        self._sleep_until(moment)
        if not self.recorder.has_read_since(moment) and self.plan.alive:
            self._sleep_until(self.plan.wake_at)

    def is_alive(self) -> bool:
        return self.plan is not None and self.plan.alive

    def stop(self) -> None:
        if self.plan is not None:
            self.plan.stop()

    def cpu_s(self) -> float:
        return 0.0

    def user_cpu_s(self) -> float | None:
        return None


class Recorders:
    """The recorders of one backend's GPUs: started on first use, stopped when the backend closes.

    On a simulator's virtual clock each test starts the GPUs' time over (``Backend.begin_test``)
    and the recorders with it. There a new recorder first learns for ``VIRTUAL_WARM_UP_S`` on the
    idle GPU; since every test's world is the same, the first one's state is kept and every later
    recorder of that GPU (and place in its test) starts from a copy of it, at the same moment: the
    same reads as learning again, without the CPU it costs (about 10 ms a test). The first one
    starts from its copy too, so that all of them read alike.
    """

    def __init__(self, backend: Backend) -> None:
        self.backend = backend
        self._by_uuid: dict[str, Recorder] = {}
        self._learned: dict[tuple[str, int], RecorderState] = {}
        self._lock = threading.Lock()
        backend.on_close(self.stop)

    def of(self, gpu: Gpu, slot: int = 0) -> Recorder:
        """``gpu``'s recorder, started now if it is not running; ``slot``, the GPU's place among the
        meter's, seeds the timing of its reads (the same plan for a test's k-th GPU, whichever it is)."""
        with self._lock:
            recorder = self._by_uuid.get(gpu.uuid)
            if recorder is None:
                virtual = self.backend.virtual_clock
                recorder = self._learned_on_virtual(gpu, slot) if virtual is not None else self._started(gpu, slot)
                self._by_uuid[gpu.uuid] = recorder
            return recorder

    def _started(self, gpu: Gpu, slot: int, state: RecorderState | None = None) -> Recorder:
        recorder = Recorder(gpu, self.backend.clock, _method_for(gpu), seed=f"slot{slot}")
        virtual = self.backend.virtual_clock
        if state is not None:
            recorder.take(state)
        recorder.driver = (PlanDriver(recorder, virtual, self.backend.sleep_until) if virtual is not None
                           else ThreadDriver(recorder))
        recorder.driver.start()
        return recorder

    def _learned_on_virtual(self, gpu: Gpu, slot: int) -> Recorder:
        key = (gpu.uuid, slot)
        state = self._learned.get(key)
        if state is None:
            learning = self._started(gpu, slot)
            self.backend.sleep_until(self.backend.clock() + VIRTUAL_WARM_UP_S)
            state = self._learned[key] = learning.state(self.backend.clock())
            learning.stop()
        self.backend.sleep_until(state.taken_at)
        return self._started(gpu, slot, state)

    def stop(self) -> None:
        with self._lock:
            recorders, self._by_uuid = list(self._by_uuid.values()), {}
        for recorder in recorders:
            recorder.stop()


def recorders_of(backend: Backend) -> Recorders:
    """The backend's recorders (one set per backend: a new backend starts afresh)."""
    existing: Any = getattr(backend, "recorders", None)
    if existing is None:
        existing = backend.recorders = Recorders(backend)
    return existing


def _method_for(gpu: Gpu) -> Method:
    return COUNTER if gpu.has_energy_counter() else SAMPLING
