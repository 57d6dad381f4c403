"""The energy meter: ETS, T and EDP of a region of GPU work, measured the way the hardware allows.

Two methods, chosen per GPU:

* **counter** (preferred; Volta and newer): NVML's cumulative energy counter. It is exact between
  its updates but it is only published about every 100 ms, so naively subtracting two readings
  is off by up to a period's energy at each end (10 % of a 1 s region). The meter therefore
  watches *when* the counter ticks (a background thread that sleeps until just before the next
  expected tick and then polls finely), takes the energy between the first and the last tick
  inside the region exactly, and extends it to the region's edges with the power measured over
  the neighbouring tick interval.
* **sampling** (fallback where the counter is missing): instant power read every few ms and
  integrated over the region. Readings published before the region started are not counted:
  until the first fresh reading arrives, the region's power is taken to be that reading.

GPU work is asynchronous, so the meter synchronises (``torch.cuda.synchronize``, or the
simulator's equivalent) before it starts and before it stops the clock. A region shorter than
two counter periods cannot be measured this way: ``measure(fn)`` repeats ``fn`` until the region
is long enough; a ``with`` block cannot be repeated and gets a warning instead.
"""

from __future__ import annotations

import math
import os
import random
import statistics
import sys
import threading
import time
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, NamedTuple, Sequence

import pynvml

from .device import Backend, Gpu
from .errors import EnergyMeasurementWarning, GpuLostError, MeasurementError
from .results import COUNTER, SAMPLING, EnergyResult, GpuResult, Repetition

DEFAULT_MIN_TIME_S = 0.5
DEFAULT_POLL_S = 0.0005          # counter polling step near an expected tick
DEFAULT_SAMPLE_S = 0.005         # power sampling step in sampling mode
# Wake this long before an expected tick: a thread that wakes needs the GIL back, which a busy
# main thread yields only every switch interval (5 ms by default).
_GUARD_S = sys.getswitchinterval() + 0.003
_MAX_RESIZES = 3                 # times measure() may enlarge a region that came out too short
_MIN_REGION_S = 0.3              # measure() makes regions at least this long: 3 counter updates
_NOMINAL_PERIOD_S = 0.1          # NVML's documented counter update period, until observed
_LATTICE_WINDOW_S = 5.0          # tick brackets older than this are forgotten (clock drift)
_LATTICE_MAX_OBSERVATIONS = 16   # ...and only this many are kept: a fit costs the GIL, ~3 us per bracket
_LEAD_S = 0.0015                 # a confident watcher reads this long (and a random extra) before and after a tick
_CONFIDENT_OBSERVATIONS = 4      # brackets a lattice needs before the watchers trust it
_REFRESH_EVERY = 4               # a confident watcher brackets one tick in this many, and reads the rest once
_CONFIDENT_ERROR_S = 0.004      # how wrong a lattice may be for the watchers to read only around its ticks
_FINE_ERROR_S = 0.001            # ...and to bracket only one tick in _REFRESH_EVERY
_DATING_ERROR_S = 0.003          # ...for power readings to be dated by it
_MAX_MISSES = 2                  # contradicting reads in a row before a lattice is re-learned
_INSTANT_POWER_WINDOW_S = 0.025  # NVML_FI_DEV_POWER_INSTANT on A100/H100 (Yang et al., SC'24)
_AVERAGE_POWER_WINDOW_S = 1.0    # nvmlDeviceGetPowerUsage on Ampere and newer, except GA100


# -- the counter's publication schedule ------------------------------------------------------

@dataclass(frozen=True)
class Observation:
    """A reading changed: the previous value was still there at ``after``, ``value_mj`` by ``before``.

    ``after`` is when the read that saw the previous value began, ``before`` when the read that saw
    the new one ended, and ``read_from`` when that read began: a read can be held up between
    taking its value and returning (the GIL, a descheduled thread), so the value was taken at
    some moment in [``read_from``, ``before``], not necessarily at its end.
    """

    after: float
    before: float
    value_mj: int
    read_from: float

    @property
    def middle(self) -> float:
        return (self.after + self.before) / 2

    @property
    def width(self) -> float:
        return self.before - self.after


class Dating(NamedTuple):
    """When a value was published, whether that can be relied on, and which lattice tick it was."""

    when: float
    reliable: bool
    tick: int | None = None


class Cadence:
    """When one GPU publishes a reading (its energy counter, or its power): phase + k * period.

    A single observation only brackets its tick between two reads, and a polling thread in
    Python can be kept from running for a few milliseconds by the GIL, so single brackets are
    coarse. The readings are published periodically, though, so every bracket constrains the same
    lattice: the period comes from a least-squares fit over the recent brackets and the phase
    from their intersection, which is far tighter than any one of them.

    The brackets also bound how wrong the lattice can be. Bracket i holds its tick k_i, and the
    true period lies in the interval all pairs of brackets allow, so tick k lies within bracket i
    shifted by (k - k_i) periods of that interval, for every i at once: the intersection of those
    shifted brackets is where the true tick can be, and ``error_at(t)`` is how far the lattice's
    tick may lie from either end of it. Near the brackets that is a fraction of one bracket's
    width (many brackets agree); it grows with the distance from them. While
    that bound is small the watching threads stop polling around every tick and read only just
    before and just after the expected tick (``confident``), a tenth of the wake-ups. A read that
    contradicts the lattice anyway (a tick seen well before it was due, or not seen after it) is a
    *miss*; two in a row make the lattice be learned again from fresh brackets.
    """

    def __init__(self, nominal_period_s: float = _NOMINAL_PERIOD_S) -> None:
        self.nominal_period_s = nominal_period_s
        self.observations: list[Observation] = []
        self.period_s: float | None = None
        self.phase_s: float | None = None           # the lattice tick nearest the newest bracket
        self.inconsistency_s: float | None = None   # how far the brackets miss any one lattice (0: none)
        self._period_range_s = (0.0, math.inf)      # the periods all brackets allow
        self._numbered: list[tuple[float, float, int]] = []   # (after, before, tick number; newest 0)
        self.misses = 0

    def add(self, observation: Observation) -> None:
        if observation.width > 0.25 * (self.period_s or self.nominal_period_s):
            return  # wide brackets (the poller was held up) say little and may hold two ticks
        self.observations.append(observation)
        newest = observation.before
        self.observations = [
            o for o in self.observations[-_LATTICE_MAX_OBSERVATIONS:] if o.before >= newest - _LATTICE_WINDOW_S
        ]
        self._fit()

    def error_at(self, moment: float) -> float:
        """How far the lattice's tick nearest ``moment`` may be from the true one (inf: unknown)."""
        if self.period_s is None or self.phase_s is None or self.inconsistency_s != 0.0 or len(self._numbered) < 2:
            return math.inf
        k = round((moment - self.phase_s) / self.period_s)
        period_low, period_high = self._period_range_s
        low, high = -math.inf, math.inf
        for after, before, k_i in self._numbered:
            steps = k - k_i
            shortest, longest = (period_low, period_high) if steps >= 0 else (period_high, period_low)
            low = max(low, after + steps * shortest)
            high = min(high, before + steps * longest)
        predicted = self.phase_s + k * self.period_s
        return max(predicted - low, high - predicted, 0.0)

    def confident(self, moment: float) -> bool:
        """Whether the lattice is good enough at ``moment`` to read only around its ticks."""
        return (
            len(self.observations) >= _CONFIDENT_OBSERVATIONS
            and self.misses < _MAX_MISSES
            and self.error_at(moment) <= _CONFIDENT_ERROR_S
        )

    def latest_ticks(self, moment: float, error: float) -> tuple[int, int]:
        """The number of the latest lattice tick at or before ``moment``: for sure, and at most.

        They differ when ``moment`` lies within ``error`` of a tick: it may be either side of it.
        """
        assert self.period_s is not None and self.phase_s is not None
        return (math.floor((moment - error - self.phase_s) / self.period_s),
                math.floor((moment + error - self.phase_s) / self.period_s))

    def tick_at(self, index: int) -> float:
        assert self.period_s is not None and self.phase_s is not None
        return self.phase_s + index * self.period_s

    def hit(self) -> None:
        self.misses = 0

    def miss(self) -> None:
        """A read contradicted the lattice; after a second one in a row, re-learn it from scratch."""
        self.misses += 1
        if self.misses >= _MAX_MISSES:
            self.observations.clear()
            self._numbered.clear()
            self.inconsistency_s = None
            self.misses = 0

    def _fit(self) -> None:
        obs = self.observations
        if len(obs) < 2:
            return
        middles = [o.middle for o in obs]
        gaps = sorted(b - a for a, b in zip(middles, middles[1:]) if b - a > 0.005)
        if not gaps:
            return
        # Start from the nominal ~100 ms: a gap of several periods counts as several.
        nominal = self.nominal_period_s
        period = self.period_s or statistics.median(g / max(1, round(g / nominal)) for g in gaps)
        for _ in range(2):  # assign tick numbers, fit, re-assign with the better period
            ks = [round((m - middles[-1]) / period) for m in middles]
            if len(set(ks)) < 2:
                return
            period = _slope(ks, middles, [1.0 / max(o.width, 1e-4) ** 2 for o in obs])
        ks = [round((m - middles[-1]) / period) for m in middles]
        # Every lattice consistent with all brackets is possible. Its periods: for each pair of
        # brackets, (k_j - k_i) * period lies in [a_j - b_i, b_j - a_i]. Take the middle of that
        # range, and the phase interval the brackets leave at that period.
        period_low, period_high = 0.0, math.inf
        for i, (oi, ki) in enumerate(zip(obs, ks)):
            for oj, kj in zip(obs[i + 1:], ks[i + 1:]):
                if kj > ki:
                    period_low = max(period_low, (oj.after - oi.before) / (kj - ki))
                    period_high = min(period_high, (oj.before - oi.after) / (kj - ki))
        if period_low <= period_high:
            period = (period_low + period_high) / 2
        low = max(o.after - k * period for o, k in zip(obs, ks))
        high = min(o.before - k * period for o, k in zip(obs, ks))
        if period_low <= period_high and low <= high:
            phase = (low + high) / 2
            self.inconsistency_s = 0.0
            self._period_range_s = (period_low, period_high)
            self._numbered = [(o.after, o.before, k) for o, k in zip(obs, ks)]
        else:  # not strictly periodic (jitter): the least-squares period, the average phase
            phase = statistics.fmean(m - k * period for m, k in zip(middles, ks))
            self.inconsistency_s = max(low - high, 0.0) + max(period_low - period_high, 0.0) * (ks[-1] - ks[0])
            self._period_range_s, self._numbered = (0.0, math.inf), []
        self.period_s, self.phase_s = period, phase

    def date(self, observation: Observation, newer_than: int | None = None) -> Dating:
        """When the value ``observation`` saw was published, and whether that date can be relied on.

        ``newer_than``: the tick that published an earlier value of the same counter, where that
        is known; a new value comes from a later tick, which can leave a single candidate.

        The value was published at the *latest* tick before the moment the read took it, and
        after the bracket's start (the value changed inside it). The lattice ticks that may lie in
        the bracket, give or take the lattice's error, are the candidates. One candidate is the
        date. Several (a bracket wider than a period: the poller was held up, or the last read of
        a region) date the value by the latest, but only when that tick surely came before the
        read *began*: the read may have taken its value at its very start and then been held up,
        so a tick that may have come after that start would date the value a period or more too
        late, and such a date is unreliable and must not be used. Without a lattice a narrow
        bracket is dated by its middle.
        """
        after, before = observation.after, observation.before
        nominal = self.period_s or self.nominal_period_s
        narrow = observation.width <= 0.25 * nominal
        error = self.error_at(before)
        if self.period_s is None or self.phase_s is None or error > 0.25 * self.period_s:
            return Dating(observation.middle, narrow)
        error = max(error, 0.0005)
        first = math.ceil((after - error - self.phase_s) / self.period_s)
        if newer_than is not None:
            first = max(first, newer_than + 1)
        last = math.floor((before + error - self.phase_s) / self.period_s)
        if last < first:
            return Dating(observation.middle, False)      # the lattice says no tick here: do not trust either
        tick = self.tick_at(last)
        if last > first and tick + error > observation.read_from:
            return Dating(observation.middle, False)      # the latest candidate may have come after the value was taken
        return Dating(min(max(tick, after), before), True, last)

    def next_tick_after(self, now: float) -> float | None:
        if self.period_s is None or self.phase_s is None:
            return None
        return self.phase_s + (math.floor((now - self.phase_s) / self.period_s) + 1) * self.period_s


def _slope(xs: Sequence[int], ys: Sequence[float], weights: Sequence[float]) -> float:
    """Weighted least-squares slope (narrow brackets count more)."""
    total = sum(weights)
    mean_x = sum(w * x for w, x in zip(weights, xs)) / total
    mean_y = sum(w * y for w, y in zip(weights, ys)) / total
    sxx = sum(w * (x - mean_x) ** 2 for w, x in zip(weights, xs))
    return sum(w * (x - mean_x) * (y - mean_y) for w, x, y in zip(weights, xs, ys)) / sxx


_CADENCES: dict[tuple[str, str, Callable[[], float]], Cadence] = {}


def cadence_of(gpu: Gpu, reading: str, clock: Callable[[], float]) -> Cadence:
    """The publication lattice of one GPU's ``reading`` ("energy" counter or "power") on ``clock``.

    Kept per process, so that a new region starts from what earlier ones learned; per clock,
    since a lattice's times mean nothing on another clock (``time.time`` and ``perf_counter``
    are 1.7e9 s apart).
    """
    return _CADENCES.setdefault((gpu.uuid, reading, clock), Cadence())


class _Worker(threading.Thread):
    """A daemon thread whose exception is handed to whoever stops it."""

    def __init__(self, name: str) -> None:
        super().__init__(name=name, daemon=True)
        self.stopping = threading.Event()
        self.error: BaseException | None = None
        self.cpu_s = 0.0   # this thread's CPU time: what watching cost the process

    def run(self) -> None:
        try:
            self.work()
        except BaseException as exc:  # handed over in finish()
            self.error = exc
        finally:
            self.cpu_s = time.thread_time()

    def work(self) -> None:
        raise NotImplementedError

    def finish(self) -> None:
        self.stopping.set()
        self.join()
        if self.error is not None:
            raise self.error


class _TickWatcher(_Worker):
    """Reads one of a GPU's periodic readings and brackets the moments it is published.

    While the publication lattice is being learned it sleeps until shortly before the next
    expected tick and then polls finely until the value changes. Once the lattice is confident it
    reads twice per tick, just before and just after it (see ``Cadence``). Every read is kept as
    a sample ``(start, end, value)``; every change of value is an ``Observation`` (a bracket).
    """

    def __init__(self, name: str, gpu: Gpu, clock: Callable[[], float], cadence: Cadence, poll_s: float) -> None:
        super().__init__(name)
        self.gpu = gpu
        self.clock = clock
        self.cadence = cadence
        self.poll_s = poll_s
        self.samples: list[tuple[float, float, int]] = []
        self.observations: list[Observation] = []
        self.first_value: int | None = None
        self._lock = threading.Lock()
        self._jitter = random.Random()
        self._latency_s = 0.0      # how late the latest wake-ups were (GIL, scheduler)
        self._since_refresh = _REFRESH_EVERY   # ticks read only after the tick since the last bracket

    def value(self) -> int:
        raise NotImplementedError

    def read(self) -> bool:
        """One read; True if the value changed since the previous one."""
        with self._lock:
            started = self.clock()
            value = self.value()
            ended = self.clock()
            previous = self.samples[-1] if self.samples else None
            self.samples.append((started, ended, value))
            if previous is None:
                self.first_value = value
                return False
            if value == previous[2]:
                return False
            observation = Observation(previous[0], ended, value, read_from=started)
            self.observations.append(observation)
            self.cadence.add(observation)
            return True

    def _sleep_until(self, moment: float) -> bool:
        """Sleep until ``moment`` on the meter's clock; True if asked to stop meanwhile."""
        delay = moment - self.clock()
        if delay <= 0:
            return self.stopping.is_set()
        if self.stopping.wait(delay):
            return True
        late = self.clock() - moment
        self._latency_s = max(late, 0.8 * self._latency_s)   # remember a late wake-up for a while
        return False

    def work(self) -> None:
        self.read()
        while not self.stopping.is_set():
            now = self.clock()
            expected = self.cadence.next_tick_after(now)
            if expected is not None and self.cadence.confident(expected):
                if self._around(expected):
                    return
            elif self._learn(expected):
                return

    def _around(self, expected: float) -> bool:
        """Read just before and just after an expected tick (once the lattice is very good, only
        after it on most ticks); True if asked to stop."""
        cadence = self.cadence
        period = cadence.period_s or cadence.nominal_period_s
        error = cadence.error_at(expected)
        if error > _FINE_ERROR_S or self._since_refresh + 1 >= _REFRESH_EVERY:
            lead = _LEAD_S + error + min(self._latency_s, 0.2 * period) + self._jitter.uniform(0.0, _LEAD_S)
            if self.clock() > expected - lead:   # too close to brace for it: take the next one
                expected += period
                error = cadence.error_at(expected)
            if self._sleep_until(expected - lead):
                return True
            if self.read():
                # Seen before it was due. The value may have been taken anywhere in the read (which
                # can wait for the GIL), so only a read that *ended* before the tick's earliest
                # possible time says the lattice is wrong; a late wake-up says nothing.
                if self.samples[-1][1] < expected - error:
                    cadence.miss()
                return False
            self._since_refresh = 0
        else:
            self._since_refresh += 1
        if self._sleep_until(expected + _LEAD_S + error + self._jitter.uniform(0.0, _LEAD_S)):
            return True
        return self._settle(expected)

    def _settle(self, expected: float) -> bool:
        """After an expected tick: what to do when the value has not (yet) moved."""
        raise NotImplementedError

    def _learn(self, expected: float | None) -> bool:
        """Poll around the next tick until the value moves; True if asked to stop."""
        if expected is not None:
            # A random extra lead decorrelates the brackets from the tick, so that their
            # intersection (the lattice phase) keeps narrowing instead of repeating itself. Late
            # wake-ups (a main thread that holds the GIL) are allowed for, or every read would
            # come after the tick and no bracket would be narrow enough to learn from.
            period = self.cadence.period_s or self.cadence.nominal_period_s
            lead_s = (_GUARD_S + min(self._latency_s, 0.2 * period)
                      + self._jitter.uniform(0.0, sys.getswitchinterval()))
            if self._sleep_until(expected - lead_s):
                return True
        while not self.read():
            if self.stopping.wait(self.poll_s):
                return True
        return False


class CounterWatcher(_TickWatcher):
    """Brackets the moments the energy counter publishes a new value.

    The counter moves at every tick (a GPU always draws power), so a read after an expected tick
    that still shows the old value means the tick is late: it polls finely until it comes.
    """

    def __init__(self, gpu: Gpu, clock: Callable[[], float], poll_s: float) -> None:
        super().__init__(f"gpuenergy-counter-{gpu.index}", gpu, clock, cadence_of(gpu, "energy", clock), poll_s)

    def value(self) -> int:
        return self.gpu.energy_mj()

    def _settle(self, expected: float) -> bool:
        if self.read():
            self.cadence.hit()
            return False
        self.cadence.miss()
        while not self.read():
            if self.stopping.wait(self.poll_s):
                return True
        return False


class PowerSampler(_TickWatcher):
    """Reads power at every publication; the fallback where there is no energy counter.

    Power, unlike the counter, may read the same at two publications in a row (steady work), so
    an unchanged value after an expected tick proves nothing: it is kept and the next tick waited
    for. While no lattice is known it reads every ``interval_s``.
    """

    def __init__(self, gpu: Gpu, clock: Callable[[], float], interval_s: float) -> None:
        super().__init__(f"gpuenergy-sampler-{gpu.index}", gpu, clock, cadence_of(gpu, "power", clock), interval_s)

    def value(self) -> int:
        return self.gpu.power_mw()

    def _settle(self, expected: float) -> bool:
        if self.read():
            self.cadence.hit()
        return False

    def _learn(self, expected: float | None) -> bool:
        self.read()
        return self.stopping.wait(self.poll_s)


# -- one GPU over one region ------------------------------------------------------------------

@dataclass
class RegionReading:
    ets_j: float
    peak_power_w: float
    notes: list[str] = field(default_factory=list)
    resolution_limited: bool = False


class CounterProbe:
    method = COUNTER

    def __init__(self, gpu: Gpu, clock: Callable[[], float], poll_s: float) -> None:
        self.gpu = gpu
        self.clock = clock
        self.poll_s = poll_s
        self.watcher: CounterWatcher | None = None

    def start(self) -> None:
        self.watcher = CounterWatcher(self.gpu, self.clock, self.poll_s)
        self.watcher.start()

    @property
    def worker(self) -> CounterWatcher | None:
        """The thread that reads the counter (None before ``start``)."""
        return self.watcher

    def stop(self, t0: float, t1: float) -> RegionReading:
        watcher = self.watcher
        assert watcher is not None, "stop() without start()"
        watcher.finish()
        watcher.read()  # a tick between the watcher's last read and the end of the region
        values = [watcher.first_value] + [o.value_mj for o in watcher.observations]
        _check_monotonic(self.gpu, [v for v in values if v is not None])
        cadence = watcher.cadence
        points: list[tuple[float, int]] = []
        newer_than = None   # the latest tick known to have published a value seen so far
        first = _dated_first_read(watcher.samples[0], cadence) if watcher.samples else None
        if first is not None:
            points.append((first.when, watcher.samples[0][2]))
            newer_than = first.tick
        for observation in watcher.observations:
            dating = cadence.date(observation, newer_than)
            if dating.reliable:
                points.append((dating.when, observation.value_mj))
                newer_than = dating.tick if dating.tick is not None else newer_than
        start_value = watcher.first_value if watcher.first_value is not None else values[-1]
        return _integrate_ticks(self.gpu, t0, t1, points, cadence, moved=values[-1] != start_value,
                                coarse_j=(values[-1] - start_value) / 1000.0)


def _dated_first_read(sample: tuple[float, float, int], cadence: Cadence) -> Dating | None:
    """The publication date of the value the watcher read first (before the region), if the lattice knows it.

    That value was published at the latest tick before the read; when no lattice tick can fall
    within the read itself, that tick is certain, and it gives the counter's value just before
    the region starts: the region's head is then interpolated, not extrapolated.
    """
    started, ended, _ = sample
    if cadence.period_s is None or cadence.phase_s is None or cadence.error_at(started) > _DATING_ERROR_S:
        return None
    margin = cadence.error_at(started)
    index = math.floor((started - margin - cadence.phase_s) / cadence.period_s)
    if index != math.floor((ended + margin - cadence.phase_s) / cadence.period_s):
        return None
    return Dating(cadence.tick_at(index), True, index)


def _check_monotonic(gpu: Gpu, values: Sequence[int]) -> None:
    for before, after in zip(values, values[1:]):
        if after < before:
            raise MeasurementError(
                f"the energy counter of {gpu.label} went backwards ({before} mJ, then {after} mJ) during "
                f"the region: the driver was reloaded or the counter reset, so no figure is given; run again"
            )


def _integrate_ticks(
    gpu: Gpu, t0: float, t1: float, points: Sequence[tuple[float, int]], cadence: Cadence, *,
    moved: bool, coarse_j: float,
) -> RegionReading:
    """Energy over [t0, t1] from the counter's dated values ``points`` ((publication time, mJ), oldest first).

    The counter is exact at each publication, so the cumulative energy E(t) is known at those
    moments and is interpolated linearly between them (extrapolated with the nearest interval's
    power beyond them): ETS = E(t1) - E(t0). With two or more publications inside the region only
    those are used (exact between them, the region's own power at its edges); with fewer, the
    ones just outside it are interpolated through, and the figure is flagged as coarse. Publications dated less than half a period apart
    come from uncertain dates, and dividing by their tiny interval would amplify that: both are
    dropped. A region with fewer than two publications inside is flagged as coarse.
    """
    duration = t1 - t0
    period = cadence.period_s or _NOMINAL_PERIOD_S
    ordered = sorted(points)
    # Two publications less than half a period apart, or out of order: one of the dates is wrong
    # and nothing says which, so neither is used.
    clash = [
        (b[0] - a[0] < 0.5 * period or b[1] < a[1]) for a, b in zip(ordered, ordered[1:])
    ]
    kept = [
        point for i, point in enumerate(ordered)
        if not (i > 0 and clash[i - 1]) and not (i < len(clash) and clash[i])
    ]
    inside = sum(t0 < when <= t1 for when, _ in kept)
    if inside >= 2:
        # The region's own power extends it to its edges: the publications just outside it
        # average in the idle time before and after, which is not the region's.
        kept = [(when, value) for when, value in kept if t0 < when <= t1]
    if len(kept) < 2:
        if duration >= 3 * period and not moved:
            raise MeasurementError(
                f"the energy counter of {gpu.label} did not move for {duration:.3g} s although it updates "
                f"every {period * 1000:.0f} ms: it is stuck; no figure is given"
            )
        note = (
            f"region of {duration * 1000:.0f} ms: the energy counter (updated every {period * 1000:.0f} ms) "
            f"could not be dated around it, so its ETS is the difference of two readings and is coarse"
        )
        return RegionReading(coarse_j, coarse_j / duration if duration > 0 else math.nan, [note], resolution_limited=True)
    powers = [(vb - va) / 1000.0 / (tb - ta) for (ta, va), (tb, vb) in zip(kept, kept[1:])]
    ets_j = _energy_at(t1, kept, powers) - _energy_at(t0, kept, powers)
    overlapping = [w for (ta, _), (tb, _), w in zip(kept, kept[1:], powers) if tb > t0 and ta < t1] or powers
    notes: list[str] = []
    if inside < 2:
        notes.append(
            f"region of {duration * 1000:.0f} ms spans fewer than 2 updates of the energy counter "
            f"(every {period * 1000:.0f} ms): its ETS is interpolated and coarse"
        )
    return RegionReading(ets_j, max(overlapping), notes, resolution_limited=inside < 2)


def _energy_at(moment: float, points: Sequence[tuple[float, int]], powers: Sequence[float]) -> float:
    """The cumulative energy (J) at ``moment``, piecewise linear through ``points``."""
    segment = 0
    while segment < len(powers) - 1 and points[segment + 1][0] < moment:
        segment += 1
    when, value = points[segment]
    return value / 1000.0 + powers[segment] * (moment - when)


class SamplingProbe:
    method = SAMPLING

    def __init__(self, gpu: Gpu, clock: Callable[[], float], interval_s: float) -> None:
        self.gpu = gpu
        self.clock = clock
        self.interval_s = interval_s
        self.window_s = power_window_s(gpu)
        self.sampler: PowerSampler | None = None

    def start(self) -> None:
        self.sampler = PowerSampler(self.gpu, self.clock, self.interval_s)
        self.sampler.start()

    @property
    def worker(self) -> PowerSampler | None:
        """The thread that reads the power (None before ``start``)."""
        return self.sampler

    def stop(self, t0: float, t1: float) -> RegionReading:
        sampler = self.sampler
        assert sampler is not None, "stop() without start()"
        sampler.finish()
        sampler.read()  # a publication between the sampler's last read and the end of the region
        readings = [(start, end, value / 1000.0) for start, end, value in sampler.samples]
        return integrate_samples(readings, t0, t1, cadence=sampler.cadence, window_s=self.window_s)


def power_window_s(gpu: Gpu) -> float:
    """How long a window one power reading of ``gpu`` averages (what NVIDIA documents).

    The instant-power field averages 25 ms on A100/H100 (Yang et al., SC'24), and so does
    ``nvmlDeviceGetPowerUsage`` up to GA100; on Ampere and newer except GA100 the latter is a 1 s
    average (NVML documentation).
    """
    if gpu.power_source == "instant":
        return _INSTANT_POWER_WINDOW_S
    try:
        capability = tuple(gpu.nvml.nvmlDeviceGetCudaComputeCapability(gpu.handle))
    except Exception:  # an NVML without the call: assume the short window
        return _INSTANT_POWER_WINDOW_S
    return _AVERAGE_POWER_WINDOW_S if capability > (8, 0) else _INSTANT_POWER_WINDOW_S


def integrate_samples(
    readings: Sequence[tuple[float, float, float]], t0: float, t1: float, *,
    cadence: Cadence | None = None, window_s: float = 0.0,
) -> RegionReading:
    """Energy over [t0, t1] from power readings ``(read began, read ended, watts)``, oldest first.

    NVML publishes a power reading periodically, and each reading averages a window that ends at
    its publication (25 ms every 100 ms for the instant-power field). So:

    * a reading belongs to its *publication*, not to the moment it was read: with the
      publication lattice (``cadence``) a new publication is the next lattice tick, without it a
      change of value (dated to the middle of the two reads around it);
    * a reading whose window began before ``t0`` mixes the time before the region in: only
      publications whose whole window (``window_s``) lies in the region are used while there are
      any ("clean" ones); the region's head up to them takes their power;
    * each reading stands for the power around the middle of its window, up to halfway to the
      neighbouring readings' windows; the first and last extend to the region's edges.
    """
    if not readings:
        raise MeasurementError("no power reading was taken during the region")
    samples = [((started + ended) / 2, watts) for started, ended, watts in readings]
    publications = _publications(readings, cadence)
    fresh = [p for p in publications if p[0] >= t0 and p[1] <= t1]
    clean = [p for p in fresh if p[0] - window_s >= t0]
    notes: list[str] = []
    if clean:
        used, limited = clean, False
    elif fresh:
        used, limited = fresh, True
        notes.append(
            f"every power reading of the region averages a window ({window_s * 1000:.0f} ms) that began "
            f"before the region: its ETS is coarse"
        )
    else:
        before_end = [p for p in publications if p[1] <= t1] or publications[:1]
        used = before_end[-1:]
        period = (cadence.period_s if cadence is not None else None) or _NOMINAL_PERIOD_S
        steady = len({watts for _, watts in samples}) == 1 and samples[-1][0] - t0 >= 1.5 * period + window_s
        # The same reading all along a region long enough for a publication whose whole window
        # lies inside it: the power was that steady value (undated publications repeat it).
        limited = not steady
        if limited:
            notes.append("no fresh power reading arrived during the region: its ETS is coarse")
    centres = [when - window_s / 2 for _, when, _ in used]
    bounds = [t0] + [min(max((a + b) / 2, t0), t1) for a, b in zip(centres, centres[1:])] + [t1]
    energy_j = sum(watts * (b - a) for (_, _, watts), a, b in zip(used, bounds, bounds[1:]))
    notes.extend(_gap_notes(samples, t0, t1, cadence))
    return RegionReading(energy_j, max(watts for _, _, watts in used), notes, resolution_limited=limited)


def _gap_notes(samples: Sequence[tuple[float, float]], t0: float, t1: float, cadence: Cadence | None) -> list[str]:
    """A note when power went unread for over two publication periods inside the region.

    The sampler can be held up (a stalled process, an NVML call that blocks); the power over such
    a gap is interpolated from the readings around it, which is fine for steady work and wrong for
    work that changed meanwhile, so the figure says so.
    """
    period = (cadence.period_s if cadence is not None else None) or _NOMINAL_PERIOD_S
    times = [t0] + [when for when, _ in samples if t0 < when < t1] + [t1]
    gap_s = max(b - a for a, b in zip(times, times[1:]))
    if gap_s <= 2 * period:
        return []
    return [f"power was not read for {gap_s * 1000:.0f} ms of the region (the sampler was held up): "
            f"the energy over that gap is interpolated"]


def _publications(readings: Sequence[tuple[float, float, float]], cadence: Cadence | None) -> list[tuple[float, float, float]]:
    """The distinct publications the readings saw: ``(published no earlier than, published at, watts)``.

    A read took its value at some moment between its start and its end (it can be held up in
    between). With a lattice whose error bound is small, the publication it shows is at least
    the latest tick surely before the read began and at most the latest tick possibly before it
    ended. An unchanged value is taken as the publication surely seen (were it a newer one, it
    shows the same power); a changed value is a new publication, dated by its tick where only
    one tick can be it. Without a lattice, or where the tick is ambiguous, a change of value is a
    new publication dated between the reads around it.
    """
    error = math.inf
    if cadence is not None:
        error = max(cadence.error_at(readings[0][0]), cadence.error_at(readings[-1][1]))
    lattice = cadence if error <= _DATING_ERROR_S else None
    first_started, first_ended, first_watts = readings[0]
    previous = (first_started + first_ended) / 2
    index = lattice.latest_ticks(first_started, error)[0] if lattice is not None else 0
    publications = [(-math.inf, previous if lattice is None else lattice.tick_at(index), first_watts)]
    for started, ended, watts in readings[1:]:
        middle = (started + ended) / 2
        changed = watts != publications[-1][2]
        if lattice is not None:
            surely = lattice.latest_ticks(started, error)[0]
            possibly = lattice.latest_ticks(ended, error)[1]
            lowest = max(index + 1, surely) if changed else surely
            if lowest > index and (not changed or possibly == lowest):
                index = lowest
                tick = min(max(lattice.tick_at(index), previous), ended)
                publications.append((tick, tick, watts))
                previous = middle
                continue
            if changed:
                index = max(index, possibly)   # one of these ticks published it; which one is unknown
        if changed:
            publications.append((previous, (previous + middle) / 2, watts))
        previous = middle
    return publications


# -- the meter ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class CapContext:
    """What the meter records about the limit each GPU ran under."""

    label: str
    requested_w: dict[str, float | None]      # by GPU UUID
    enforced_w: dict[str, float]
    default_w: dict[str, float]


def _coarse_warning(probe: Any, duration_s: float) -> str:
    """Why a ``with`` block's ETS is coarse: the block was short, or (longer blocks) the counter's
    updates could not be dated around it, which slow or delayed reads cause."""
    if probe.method == COUNTER and duration_s >= 2 * _NOMINAL_PERIOD_S:
        return (
            f"the energy counter's updates could not be dated around the measured block ({duration_s * 1000:.0f} ms; "
            f"its reads were slow or held up): its ETS is the difference of two readings and is coarse; "
            f"measure again, or use energy_meter.measure(fn), which repeats a region it could not resolve"
        )
    what = (
        "the energy counter (updated about every 100 ms)" if probe.method == COUNTER
        else f"the power readings (each averages {probe.window_s * 1000:.0f} ms)"
    )
    return (
        f"the measured block took {duration_s * 1000:.0f} ms, too short for {what}: its ETS is coarse; "
        f"use energy_meter.measure(fn) to repeat it until it is long enough, or measure more work"
    )


class EnergyMeter:
    """Measures regions of GPU work on a set of GPUs; the ``energy_meter`` fixture is one of these.

    Usable without pytest::

        backend = open_backend("auto")
        meter = EnergyMeter(backend, backend.select(None))
        with meter:
            work()
        print(meter.result.ets_j)
    """

    def __init__(
        self,
        backend: Backend,
        gpus: Sequence[Gpu],
        *,
        cap_context: Callable[[], CapContext | None] | None = None,
        compute_bound: float | None = None,
        min_time_s: float = DEFAULT_MIN_TIME_S,
        poll_s: float = DEFAULT_POLL_S,
        sample_interval_s: float = DEFAULT_SAMPLE_S,
        clock: Callable[[], float] = time.perf_counter,
        on_result: Callable[[EnergyResult], None] | None = None,
    ) -> None:
        if not gpus:
            raise MeasurementError("no GPU to measure")
        for gpu in gpus:
            if gpu.mig_enabled():
                raise MeasurementError(
                    f"{gpu.label} is in MIG mode: NVML cannot measure the energy of a MIG slice; "
                    f"measure a whole GPU (disable MIG) or select another GPU with --gpus"
                )
        self.backend = backend
        self.gpus = list(gpus)
        self.cap_context = cap_context or (lambda: None)
        self.compute_bound = compute_bound
        self.min_time_s = min_time_s
        self.poll_s = poll_s
        self.sample_interval_s = sample_interval_s
        self.clock = clock
        self.on_result = on_result
        self.results: list[EnergyResult] = []
        self.last_region: tuple[float, float] | None = None
        self.last_thread_cpu_s: float | None = None   # CPU time the meter's threads used in that region
        self._open_region: _Region | None = None

    # -- public API ------------------------------------------------------------------------
    @property
    def result(self) -> EnergyResult:
        """The latest measurement."""
        if not self.results:
            raise MeasurementError(
                "energy_meter has measured nothing yet: wrap the work in `with energy_meter:` "
                "or call energy_meter.measure(fn)"
            )
        return self.results[-1]

    @property
    def region_start(self) -> float | None:
        """When the open ``with`` region started, on the meter's clock (None outside one).

        With ``last_region`` (the ``(start, end)`` of the latest finished region) it lets a caller
        line the region up with other timelines, e.g. a profiler trace or, in the benchmarks,
        the simulator's exact energy integral (pass ``clock=time.time`` for that).
        """
        return self._open_region.t0 if self._open_region is not None else None

    def __enter__(self) -> "EnergyMeter":
        if self._open_region is not None:
            raise MeasurementError("energy_meter regions cannot be nested")
        self._open_region = self._start_region()
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        region, self._open_region = self._open_region, None
        if region is None:
            return
        if exc_type is not None:
            region.abandon()
            return
        readings, duration = region.finish()
        self.last_region, self.last_thread_cpu_s = (region.t0, region.t1), region.thread_cpu_s
        notes = [n for r in readings for n in r.notes]
        limited = [probe for probe, r in zip(region.probes, readings) if r.resolution_limited]
        if limited:
            warnings.warn(_coarse_warning(limited[0], duration), EnergyMeasurementWarning, stacklevel=2)
        self._record(region, [[self._repetition(r, duration, 1)] for r in readings], notes)

    def measure(
        self,
        fn: Callable[..., Any],
        *args: Any,
        repeat: int = 1,
        warmup: int = 1,
        min_time_s: float | None = None,
        **kwargs: Any,
    ) -> EnergyResult:
        """Measure ``fn(*args, **kwargs)``: ``warmup`` untimed calls, then ``repeat`` repetitions.

        Each repetition is one region that calls ``fn`` often enough to last ``min_time_s``
        (default: the meter's, 0.5 s; never less than 0.3 s, three counter updates); the figures
        are per call. The last warm-up call is timed to size the regions; a region that comes
        out shorter than half of that (or than 0.3 s) is continued with more calls, and one the
        meter could not resolve is measured again with twice the calls (up to three times).
        With ``warmup=0`` the first region sizes itself the same way.
        """
        _check_count("repeat", repeat, minimum=1)
        _check_count("warmup", warmup, minimum=0)
        target_s = self.min_time_s if min_time_s is None else min_time_s
        if not (isinstance(target_s, (int, float)) and target_s >= 0):
            raise ValueError(f"min_time_s must be a non-negative number of seconds, got {min_time_s!r}")
        target_s = max(target_s, _MIN_REGION_S)
        calls: int | None = None
        for _ in range(warmup):
            self.backend.synchronize()  # work queued before this call is not this call's
            started = self.clock()
            fn(*args, **kwargs)
            self.backend.synchronize()
            one_call_s = self.clock() - started
            # A synchronisation costs time of its own, which would make a short call look
            # slower than it is (and its region too short): take off what an idle one costs.
            synced = self.clock()
            self.backend.synchronize()
            one_call_s = max(one_call_s - (self.clock() - synced), 0.5 * one_call_s)
            calls = _calls_for(target_s, one_call_s)
        per_gpu: list[list[Repetition]] = [[] for _ in self.gpus]
        notes: list[str] = []
        region: _Region | None = None
        resized = 0
        while len(per_gpu[0]) < repeat:
            region = self._start_region()
            try:
                done = self._fill(region, fn, args, kwargs, calls or 1, max(target_s / 2, _MIN_REGION_S) if calls else target_s)
            except BaseException:
                region.abandon()
                raise
            readings, duration = region.finish()
            self.last_region, self.last_thread_cpu_s = (region.t0, region.t1), region.thread_cpu_s
            if calls is None or done > calls:
                calls = max(calls or 1, _calls_for(target_s, duration / done))   # the next regions' size
            if any(r.resolution_limited for r in readings) and resized < _MAX_RESIZES:
                # A region the meter could not resolve: measure it again with twice the calls.
                calls = max(calls, 2 * done)
                resized += 1
                continue
            for slot, reading in zip(per_gpu, readings):
                slot.append(self._repetition(reading, duration, done))
            notes.extend(n for r in readings for n in r.notes)
        assert region is not None
        return self._record(region, per_gpu, sorted(set(notes)))

    def _fill(self, region: "_Region", fn: Callable[..., Any], args: tuple, kwargs: dict, calls: int,
              at_least_s: float) -> int:
        """Call ``fn`` ``calls`` times in the open region, then more until it lasts ``at_least_s``.

        The number of calls comes from a timed warm-up call, which can be far off for calls of a
        millisecond or less; a region that came out too short is continued (after a
        synchronisation, so that the time counts finished work) instead of being thrown away.
        """
        done = 0
        for _ in range(_MAX_RESIZES + 1):
            for _ in range(calls):
                fn(*args, **kwargs)
            done += calls
            self.backend.synchronize()
            elapsed_s = self.clock() - region.t0
            if elapsed_s >= at_least_s:
                break
            calls = _calls_for(at_least_s - elapsed_s, elapsed_s / done)
        return done

    # -- internals ------------------------------------------------------------------------------
    def _start_region(self) -> "_Region":
        self.backend.use(self.gpus)
        if self.compute_bound is not None:
            self.backend.set_workload_profile(self.compute_bound)
        probes = [self._probe(gpu) for gpu in self.gpus]
        return _Region(self.backend, probes, self.clock, self.cap_context())

    def _probe(self, gpu: Gpu) -> CounterProbe | SamplingProbe:
        try:
            has_counter = gpu.has_energy_counter()
        except pynvml.NVMLError_GpuIsLost:
            raise GpuLostError(f"{gpu.label} is lost (NVML: GPU is lost)") from None
        if has_counter:
            return CounterProbe(gpu, self.clock, self.poll_s)
        return SamplingProbe(gpu, self.clock, self.sample_interval_s)

    @staticmethod
    def _repetition(reading: RegionReading, duration_s: float, calls: int) -> Repetition:
        return Repetition(
            ets_j=reading.ets_j / calls,
            time_s=duration_s / calls,
            mean_power_w=reading.ets_j / duration_s if duration_s > 0 else math.nan,
            peak_power_w=reading.peak_power_w,
            calls=calls,
        )

    def _record(self, region: "_Region", per_gpu: list[list[Repetition]], notes: list[str]) -> EnergyResult:
        context = region.cap
        parts = []
        for gpu, probe, reps in zip(self.gpus, region.probes, per_gpu):
            parts.append(GpuResult(
                gpu_index=gpu.index,
                gpu_name=gpu.name,
                gpu_uuid=gpu.uuid,
                backend=self.backend.name,
                simulated=self.backend.simulated,
                method=probe.method,
                power_source=gpu.power_source if probe.method == SAMPLING else None,
                cap_label=context.label,
                limit_requested_w=context.requested_w.get(gpu.uuid),
                limit_enforced_w=context.enforced_w[gpu.uuid],
                default_limit_w=context.default_w[gpu.uuid],
                repetitions=tuple(reps),
            ))
        result = EnergyResult(per_gpu=tuple(parts), notes=tuple(notes))
        self.results.append(result)
        if self.on_result is not None:
            self.on_result(result)
        return result


class _Region:
    """One measured interval on all of the meter's GPUs."""

    def __init__(self, backend: Backend, probes: list, clock: Callable[[], float], cap: CapContext | None) -> None:
        self.backend = backend
        self.probes = probes
        self.clock = clock
        self.cap = cap or _current_limits(backend, [p.gpu for p in probes])
        backend.synchronize()
        started: list = []
        try:
            for probe in probes:
                probe.start()
                started.append(probe)
        except BaseException:
            for probe in started:
                _quietly_stop(probe)
            raise
        self.others = _other_processes([p.gpu for p in probes])
        self.t0 = clock()
        self.t1 = math.nan
        self.thread_cpu_s = math.nan

    def finish(self) -> tuple[list[RegionReading], float]:
        self.backend.synchronize()
        t1 = self.t1 = self.clock()
        others = _other_processes([p.gpu for p in self.probes])
        readings, first_error = [], None
        for probe in self.probes:
            try:
                readings.append(probe.stop(self.t0, t1))
            except pynvml.NVMLError_GpuIsLost:
                first_error = first_error or GpuLostError(f"{probe.gpu.label} is lost (NVML: GPU is lost)")
            except (MeasurementError, pynvml.NVMLError) as exc:
                first_error = first_error or _as_measurement_error(probe.gpu, exc)
        self.thread_cpu_s = sum(probe.worker.cpu_s for probe in self.probes if probe.worker is not None)
        if first_error is not None:
            raise first_error
        for gpu_pids_before, gpu_pids_after, reading, probe in zip(self.others, others, readings, self.probes):
            pids = sorted(gpu_pids_before | gpu_pids_after)
            if pids:
                reading.notes.append(
                    f"{probe.gpu.label} was also used by {'process' if len(pids) == 1 else 'processes'} "
                    f"{', '.join(map(str, pids))} during the region: its ETS includes their work"
                )
        return readings, t1 - self.t0

    def abandon(self) -> None:
        for probe in self.probes:
            _quietly_stop(probe)


def _other_processes(gpus: Sequence[Gpu]) -> list[set[int]]:
    """Per GPU, the PIDs of other processes NVML lists on it.

    Under a PID namespace (a container) NVML reports host PIDs, so this process's own PID may not
    be in the list; then one listed process is taken to be this one and only a second is "other".
    """
    me = os.getpid()
    found = []
    for gpu in gpus:
        try:
            pids = set(gpu.processes())
        except pynvml.NVMLError:
            pids = set()
        if me in pids:
            pids.discard(me)
        elif len(pids) == 1 and not gpu.simulated:
            pids = set()
        found.append(pids)
    return found


def _quietly_stop(probe: CounterProbe | SamplingProbe) -> None:
    worker = probe.worker
    if worker is not None:
        worker.stopping.set()
        worker.join()


def _as_measurement_error(gpu: Gpu, exc: BaseException) -> MeasurementError:
    if isinstance(exc, MeasurementError):
        return exc
    return MeasurementError(f"reading the energy of {gpu.label} failed: NVML: {exc}")


def _current_limits(backend: Backend, gpus: Sequence[Gpu]) -> CapContext:
    enforced, default = {}, {}
    for gpu in gpus:
        limits = gpu.limits()
        enforced[gpu.uuid] = limits.enforced_mw / 1000.0
        default[gpu.uuid] = limits.default_mw / 1000.0
    return CapContext("current", {g.uuid: None for g in gpus}, enforced, default)


def _calls_for(target_s: float, one_call_s: float) -> int:
    if one_call_s <= 0:
        return 1000
    return max(1, math.ceil(target_s * 1.05 / one_call_s))


def _check_count(name: str, value: Any, *, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name} must be a whole number >= {minimum}, got {value!r}")
