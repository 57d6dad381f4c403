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
import random
import statistics
import sys
import threading
import time
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

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
_NOMINAL_PERIOD_S = 0.1          # NVML's documented counter update period, until observed
_LATTICE_WINDOW_S = 5.0          # tick brackets older than this are forgotten (clock drift)


# -- the counter's publication schedule ------------------------------------------------------

@dataclass(frozen=True)
class Observation:
    """The counter showed its previous value at ``after`` and ``value_mj`` at ``before``."""

    after: float
    before: float
    value_mj: int

    @property
    def middle(self) -> float:
        return (self.after + self.before) / 2

    @property
    def width(self) -> float:
        return self.before - self.after


class Cadence:
    """When one GPU's energy counter publishes: a lattice of ticks, phase + k * period.

    A single observation only brackets its tick between two reads, and a polling thread in
    Python can be kept from running for a few milliseconds by the GIL, so single brackets are
    coarse. The counter publishes periodically, though, so every bracket constrains the same
    lattice: the period comes from a least-squares fit over the recent brackets and the phase
    from their intersection, which is far tighter than any one of them.
    """

    def __init__(self) -> None:
        self.observations: list[Observation] = []
        self.period_s: float | None = None
        self.phase_s: float | None = None

    def add(self, observation: Observation) -> None:
        if observation.width > 0.25 * (self.period_s or _NOMINAL_PERIOD_S):
            return  # wide brackets (the poller was held up) say little and may hold two ticks
        self.observations.append(observation)
        newest = observation.before
        self.observations = [o for o in self.observations if o.before >= newest - _LATTICE_WINDOW_S]
        self._fit()

    def _fit(self) -> None:
        obs = self.observations
        if len(obs) < 2:
            return
        middles = [o.middle for o in obs]
        gaps = sorted(b - a for a, b in zip(middles, middles[1:]) if b - a > 0.005)
        if not gaps:
            return
        # Start from NVML's documented ~100 ms: a gap of several periods counts as several.
        period = self.period_s or statistics.median(g / max(1, round(g / _NOMINAL_PERIOD_S)) for g in gaps)
        for _ in range(2):  # assign tick numbers, fit, re-assign with the better period
            ks = [round((m - middles[-1]) / period) for m in middles]
            if len(set(ks)) < 2:
                return
            period = _slope(ks, middles, [1.0 / max(o.width, 1e-4) ** 2 for o in obs])
        ks = [round((m - middles[-1]) / period) for m in middles]
        low = max(o.after - k * period for o, k in zip(obs, ks))
        high = min(o.before - k * period for o, k in zip(obs, ks))
        if low <= high:
            phase = (low + high) / 2
        else:  # not strictly periodic: fall back to the average bracket middle
            phase = statistics.fmean(m - k * period for m, k in zip(middles, ks))
        self.period_s, self.phase_s = period, phase

    def tick_time(self, observation: Observation) -> float:
        """Best estimate of when the tick bracketed by ``observation`` happened."""
        if self.period_s is None or self.phase_s is None:
            return observation.middle
        k = round((observation.middle - self.phase_s) / self.period_s)
        tick = self.phase_s + k * self.period_s
        return min(max(tick, observation.after), observation.before)  # what was seen wins

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


_CADENCES: dict[str, Cadence] = {}


def cadence_of(gpu: Gpu) -> Cadence:
    return _CADENCES.setdefault(gpu.uuid, Cadence())


class _Worker(threading.Thread):
    """A daemon thread whose exception is handed to whoever stops it."""

    def __init__(self, name: str) -> None:
        super().__init__(name=name, daemon=True)
        self.stopping = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self.work()
        except BaseException as exc:  # handed over in finish()
            self.error = exc

    def work(self) -> None:
        raise NotImplementedError

    def finish(self) -> None:
        self.stopping.set()
        self.join()
        if self.error is not None:
            raise self.error


class CounterWatcher(_Worker):
    """Brackets the moments the energy counter publishes a new value.

    It sleeps until shortly before the next expected tick and then polls finely until the value
    changes, so it costs a few reads per tick rather than a busy loop.
    """

    def __init__(self, gpu: Gpu, clock: Callable[[], float], poll_s: float) -> None:
        super().__init__(f"gpuenergy-counter-{gpu.index}")
        self.gpu = gpu
        self.clock = clock
        self.poll_s = poll_s
        self.cadence = cadence_of(gpu)
        self.observations: list[Observation] = []
        self.first_value: int | None = None
        self._last_read: tuple[float, int] | None = None
        self._lock = threading.Lock()
        self._jitter = random.Random()

    def read(self) -> bool:
        """One read; True if the counter moved since the previous one."""
        with self._lock:
            before = self.clock()
            value = self.gpu.energy_mj()
            after = self.clock()
            previous = self._last_read
            self._last_read = (before, value)
            if previous is None:
                self.first_value = value
                return False
            if value == previous[1]:
                return False
            observation = Observation(previous[0], after, value)
            self.observations.append(observation)
            self.cadence.add(observation)
            return True

    def work(self) -> None:
        self.read()
        while not self.stopping.is_set():
            expected = self.cadence.next_tick_after(self.clock())
            if expected is not None:
                # A random extra lead decorrelates the brackets from the tick, so that their
                # intersection (the lattice phase) keeps narrowing instead of repeating itself.
                lead_s = _GUARD_S + self._jitter.uniform(0.0, sys.getswitchinterval())
                sleep_s = expected - lead_s - self.clock()
                if sleep_s > 0 and self.stopping.wait(sleep_s):
                    return
            while not self.read():
                if self.stopping.wait(self.poll_s):
                    return


class PowerSampler(_Worker):
    """Reads instant power every ``interval_s``; the fallback where there is no energy counter."""

    def __init__(self, gpu: Gpu, clock: Callable[[], float], interval_s: float) -> None:
        super().__init__(f"gpuenergy-sampler-{gpu.index}")
        self.gpu = gpu
        self.clock = clock
        self.interval_s = interval_s
        self.samples: list[tuple[float, float]] = []   # (time, watts)

    def work(self) -> None:
        while True:
            before = self.clock()
            power_w = self.gpu.power_mw() / 1000.0
            self.samples.append(((before + self.clock()) / 2, power_w))
            if self.stopping.wait(self.interval_s):
                return


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

    def stop(self, t0: float, t1: float) -> RegionReading:
        watcher = self.watcher
        assert watcher is not None, "stop() without start()"
        watcher.finish()
        watcher.read()  # a tick between the watcher's last read and the end of the region
        values = [watcher.first_value] + [o.value_mj for o in watcher.observations]
        _check_monotonic(self.gpu, [v for v in values if v is not None])
        cadence = watcher.cadence
        ticks = [(cadence.tick_time(o), o.value_mj) for o in watcher.observations]
        start_value = watcher.first_value if watcher.first_value is not None else values[-1]
        return _integrate_ticks(self.gpu, t0, t1, start_value, values[-1], ticks, cadence)


def _check_monotonic(gpu: Gpu, values: Sequence[int]) -> None:
    for before, after in zip(values, values[1:]):
        if after < before:
            raise MeasurementError(
                f"the energy counter of {gpu.label} went backwards ({before} mJ, then {after} mJ) during "
                f"the region: the driver was reloaded or the counter reset, so no figure is given; run again"
            )


def _integrate_ticks(
    gpu: Gpu, t0: float, t1: float, start_value: int, end_value: int,
    all_ticks: Sequence[tuple[float, int]], cadence: Cadence,
) -> RegionReading:
    """Energy over [t0, t1]: exact between the first and last tick inside, extended to the edges.

    The edges use the power over the tick interval that contains them, which the counter gives
    exactly: the interval around t0 starts at the last tick before t0 (if the watcher saw it),
    and likewise at t1.
    """
    duration = t1 - t0
    period = cadence.period_s or _NOMINAL_PERIOD_S
    inside = [(t, v) for t, v in all_ticks if t0 < t <= t1]
    if len(inside) >= 2 and inside[-1][0] > inside[0][0]:
        (first_t, first_v), (last_t, last_v) = inside[0], inside[-1]
        inner_j = (last_v - first_v) / 1000.0
        average_w = inner_j / (last_t - first_t)
        # Power of each whole tick interval; an interval much shorter than a period comes from
        # tick times that are uncertain, and dividing by it would amplify that: use the average.
        powers = [
            (vb - va) / 1000.0 / (tb - ta) if tb - ta >= 0.5 * period else average_w
            for (ta, va), (tb, vb) in zip(inside, inside[1:])
        ]
        head_j = powers[0] * (first_t - t0)
        tail_j = powers[-1] * (t1 - last_t)
        return RegionReading(inner_j + head_j + tail_j, max(powers))
    if duration >= 3 * period and not inside:
        raise MeasurementError(
            f"the energy counter of {gpu.label} did not move for {duration:.3g} s although it updates "
            f"every {period * 1000:.0f} ms: it is stuck; no figure is given"
        )
    ets_j = (end_value - start_value) / 1000.0
    note = (
        f"region of {duration * 1000:.0f} ms spans fewer than 2 updates of the energy counter "
        f"(every {period * 1000:.0f} ms): its ETS is coarse"
    )
    return RegionReading(ets_j, ets_j / duration if duration > 0 else math.nan, [note], resolution_limited=True)


class SamplingProbe:
    method = SAMPLING

    def __init__(self, gpu: Gpu, clock: Callable[[], float], interval_s: float) -> None:
        self.gpu = gpu
        self.clock = clock
        self.interval_s = interval_s
        self.sampler: PowerSampler | None = None

    def start(self) -> None:
        self.sampler = PowerSampler(self.gpu, self.clock, self.interval_s)
        self.sampler.start()

    def stop(self, t0: float, t1: float) -> RegionReading:
        sampler = self.sampler
        assert sampler is not None, "stop() without start()"
        sampler.finish()
        return integrate_samples(sampler.samples, t0, t1)


def integrate_samples(samples: Sequence[tuple[float, float]], t0: float, t1: float) -> RegionReading:
    """Hold each reading until the next one; readings published before ``t0`` are not used.

    NVML publishes power readings periodically, so the first readings of a region still show the
    time before it. Until the first fresh (changed) reading the region's power is taken to be
    that fresh reading.
    """
    inside = [(t, p) for t, p in samples if t0 <= t <= t1]
    if not inside:
        raise MeasurementError("no power sample fell inside the region: it is shorter than the sampling interval")
    fresh = next((i for i in range(1, len(inside)) if inside[i][1] != inside[0][1]), None)
    notes: list[str] = []
    if fresh is None:
        notes.append("no fresh power reading arrived during the region: its ETS is coarse")
        fresh = 0
    readings = inside[fresh:]
    times = [t0] + [t for t, _ in readings[1:]] + [t1]
    energy_j = sum(p * (b - a) for (_, p), a, b in zip(readings, times, times[1:]))
    return RegionReading(energy_j, max(p for _, p in readings), notes, resolution_limited=fresh == 0)


# -- the meter ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class CapContext:
    """What the meter records about the limit each GPU ran under."""

    label: str
    requested_w: dict[str, float | None]      # by GPU UUID
    enforced_w: dict[str, float]
    default_w: dict[str, float]


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
        notes = [n for r in readings for n in r.notes]
        if any(r.resolution_limited for r in readings):
            warnings.warn(
                f"the measured block took {duration * 1000:.0f} ms, too short for the energy counter "
                f"(updated about every 100 ms): use energy_meter.measure(fn) to repeat it until it is long "
                f"enough, or measure more work",
                EnergyMeasurementWarning,
                stacklevel=2,
            )
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
        (default: the meter's, 0.5 s); the figures are per call. The last warm-up call is timed
        to size the region; with ``warmup=0`` the first repetition sizes it and, if it was too
        short, it is measured again with more calls.
        """
        _check_count("repeat", repeat, minimum=1)
        _check_count("warmup", warmup, minimum=0)
        target_s = self.min_time_s if min_time_s is None else min_time_s
        if not (isinstance(target_s, (int, float)) and target_s >= 0):
            raise ValueError(f"min_time_s must be a non-negative number of seconds, got {min_time_s!r}")
        calls: int | None = None
        for _ in range(warmup):
            started = self.clock()
            fn(*args, **kwargs)
            self.backend.synchronize()
            calls = _calls_for(target_s, self.clock() - started)
        per_gpu: list[list[Repetition]] = [[] for _ in self.gpus]
        notes: list[str] = []
        region: _Region | None = None
        while len(per_gpu[0]) < repeat:
            region = self._start_region()
            try:
                for _ in range(calls or 1):
                    fn(*args, **kwargs)
            except BaseException:
                region.abandon()
                raise
            readings, duration = region.finish()
            if calls is None and duration < target_s:
                calls = _calls_for(target_s, duration)   # sizing run: measured again, longer
                continue
            used = calls or 1
            calls = used
            for slot, reading in zip(per_gpu, readings):
                slot.append(self._repetition(reading, duration, used))
            notes.extend(n for r in readings for n in r.notes)
        assert region is not None
        return self._record(region, per_gpu, sorted(set(notes)))

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
        self.t0 = clock()

    def finish(self) -> tuple[list[RegionReading], float]:
        self.backend.synchronize()
        t1 = self.clock()
        readings, first_error = [], None
        for probe in self.probes:
            try:
                readings.append(probe.stop(self.t0, t1))
            except pynvml.NVMLError_GpuIsLost:
                first_error = first_error or GpuLostError(f"{probe.gpu.label} is lost (NVML: GPU is lost)")
            except (MeasurementError, pynvml.NVMLError) as exc:
                first_error = first_error or _as_measurement_error(probe.gpu, exc)
        if first_error is not None:
            raise first_error
        return readings, t1 - self.t0

    def abandon(self) -> None:
        for probe in self.probes:
            _quietly_stop(probe)


def _quietly_stop(probe: Any) -> None:
    worker = getattr(probe, "watcher", None) or getattr(probe, "sampler", None)
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
