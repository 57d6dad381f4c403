"""The meter users hold: ``with energy_meter:`` and ``energy_meter.measure(fn)``.

A region is its two timestamps, taken after synchronising the GPU work at both ends. Its energy is
worked out from what the GPUs' recorders saw around it, once the first publication after its end
has arrived: waiting for that is the meter's job (outside the region, not counted in T). Every
figure carries a bound that holds the truth; a region too short for the counter to resolve is
interpolated through the publications around it, flagged coarse, and never reads 0 J for work done.

What deserves less trust than usual (a coarse region, other processes on the GPU) is said in the
result's ``notes``, never with a warning: a team's ``filterwarnings = error`` would turn a warning
into a failed test, and the pytest plugin sums the notes up at the end of the session instead.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import replace
from typing import TYPE_CHECKING, Any, cast

from ..errors import DeviceError, MeasurementError
from ..gpu.device import Backend, Gpu
from ..host.recorder import HostFigure, HostRecorder
from .attribution import OTHER
from .defaults import DEFAULT_MIN_TIME_S
from .domains import per_domain
from .integrate import RegionEnergy
from .lattice import Lattice
from .op_classes import as_classes, check_by_op, merged_note, op_tracer
from .recorder import COUNTER, SAMPLING, Recorder, recorders_of
from .region import CapContext, PendingResult, Region
from .results import COARSE_SHARE, BackendName, EnergyResult, GpuResult, PhaseFigures, PowerSource, Repetition, bound_share

if TYPE_CHECKING:
    from .watch import Watch

_MIN_REGION_S = 0.3              # measure() makes regions at least this long: 3 counter updates
_MAX_RESIZES = 3                 # times measure() may enlarge a region that came out coarse
_ALIGN_MARGIN_S = 0.0005         # measure() starts this long (plus the lattice's error) after a tick
_PLANNED_CALL_SHARE = 0.1        # calls longer than this share of a period are planned to end on a tick
_DURATION_ERROR = 0.005          # how far a planned region's predicted duration may be off
_LEARNING_WAIT_S = 1.0           # how long measure() lets a new recorder learn the lattice before its first region


class EnergyMeter:
    """Measures regions of GPU work on a set of GPUs; the ``energy_meter`` fixture is one of these.

    Usable without pytest::

        backend = open_backend("auto")
        meter = EnergyMeter(backend, backend.select(None))
        with meter:
            work()
        print(meter.result.ets_j, meter.result.ets_low_j, meter.result.ets_high_j)
    """

    def __init__(
        self,
        backend: Backend,
        gpus: Sequence[Gpu],
        *,
        cap_context: Callable[[], CapContext | None] | None = None,
        compute_bound: float | None = None,
        min_time_s: float = DEFAULT_MIN_TIME_S,
        on_result: Callable[[PendingResult], None] | None = None,
        work: Any = None,
        rank_group: Callable[[], Any] | None = None,
        host: HostRecorder | None = None,
    ) -> None:
        if not gpus:
            raise MeasurementError("no GPU to measure")
        for gpu in gpus:
            reason = gpu.unmeasurable_reason()
            if reason is not None:
                raise MeasurementError(f"{gpu.label} {reason}")
        self.backend = backend
        self.gpus = list(gpus)
        self.cap_context = cap_context or (lambda: None)
        self.compute_bound = compute_bound
        self.min_time_s = min_time_s
        self.on_result = on_result
        self.work = work            # simulator: the GPU work of one call (measure) or one block, if declared
        self._results: list[PendingResult] = []
        self._failed_block: str | None = None     # what the last `with` block raised (it has no figure)
        self.last_region: tuple[float, float] | None = None
        self.last_thread_cpu_s: float | None = None   # CPU the recorders used during that region
        self._open_region: Region | None = None
        self._marking: Region | None = None       # the region phase marks go to (a block's, or measure()'s)
        self._warming = False                     # measure()'s warm-up calls: their marks are not kept
        self._open_phase: str | None = None
        self.last_marks: tuple[tuple[str, float, float], ...] = ()   # the last region's phases (name, start_s, end_s)
        self.last_op_marks: tuple[tuple[str, float, float], ...] = ()   # ...its kernels' classes (measure(by_op=True))
        self.one_call_s = math.nan          # measure(): the latest estimate of one call's duration
        # torch.distributed (``distributed.RankGroup``): found when a region starts, since a test may
        # initialise its process group after the fixture made the meter; None measures this process alone.
        self.rank_group = rank_group or (lambda: None)
        self.host = host            # --energy-domains: the host's CPU and DRAM, read at every region's edges
        self._group: Any = None
        registry = recorders_of(backend)
        try:
            self.recorders = [registry.of(gpu, slot) for slot, gpu in enumerate(self.gpus)]   # they start learning now
        except MeasurementError:          # a lost GPU
            raise
        except DeviceError as exc:
            raise MeasurementError(f"reading the energy of {self.gpus[0].label} failed: {exc}") from None
        # On the simulator the process's CPU time stands for GPU work only inside this meter's
        # regions and warm-up calls: a test's setup and the meter's own work are not GPU work.
        backend.count_cpu_work(False)

    # -- public API ------------------------------------------------------------------------
    @property
    def results(self) -> list[EnergyResult]:
        """Every measurement so far, oldest first (waiting for the figures not worked out yet)."""
        return [pending.resolve() for pending in self._results]

    @property
    def result(self) -> EnergyResult:
        """The latest measurement (waiting for its figure if it is not worked out yet)."""
        if self._failed_block is not None:
            earlier = " (the figures of earlier blocks are in energy_meter.results)" if self._results else ""
            raise MeasurementError(f"energy_meter has no figure for the last measured block: it raised "
                                   f"{self._failed_block} before it ended{earlier}")
        if not self._results:
            raise MeasurementError(
                "energy_meter has measured nothing yet: wrap the work in `with energy_meter:` "
                "or call energy_meter.measure(fn)"
            )
        return self._results[-1].resolve()

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Mark a phase of the measured region: ``with energy_meter.phase("forward"):``.

        Inside ``with energy_meter:`` or the function given to ``measure()`` (its warm-up calls'
        marks are not kept). The region's ETS is then split among the phases, the unmarked rest
        being ``other`` (``result.phases``; ``docs/explanation/phases.md``). A mark never waits:
        its moments are when the GPU reaches that point of its queued work (``Backend.mark_moment``):
        on the simulator its queue, exactly; on a real GPU a CUDA event recorded on the current
        stream, dated against the region's anchor once the region has ended (``gpu/moments.py``;
        an event that cannot be read falls back to the host's clock, with a note). Phases neither
        nest nor overlap.
        """
        if not isinstance(name, str) or not name.strip() or name == OTHER:
            raise MeasurementError(f"energy_meter.phase({name!r}): name the phase with a non-empty string other than "
                                   f"{OTHER!r} (the unmarked rest of a region is {OTHER!r})")
        region = self._marking
        if region is None and not self._warming:
            raise MeasurementError(f"energy_meter.phase({name!r}) outside a measured region: put it inside "
                                   f"`with energy_meter:` or in the function given to energy_meter.measure()")
        if self._open_phase is not None:
            raise MeasurementError(f"energy_meter.phase({name!r}) inside phase {self._open_phase!r}: phases cannot "
                                   f"nest or overlap; end {self._open_phase!r} before starting {name!r}")
        self._open_phase = name
        if region is not None:
            region.read_every_tick()
        start = self.backend.mark_moment()
        try:
            yield
        finally:
            self._open_phase = None
        if region is not None:
            region.queued_marks.append((name, start, self.backend.mark_moment()))

    def watch(self, model: Any, optimizer: Any = None) -> Watch:
        """Mark ``forward``, ``backward`` and ``update`` of a PyTorch step by hooks on ``model`` (and
        ``optimizer``): ``with energy_meter.watch(model, opt):`` around or inside the measured region;
        the rest of the step is ``other``. Hooks are removed when the block ends (``meter/watch.py``)."""
        from .watch import Watch

        return Watch(self, model, optimizer)

    def __enter__(self) -> EnergyMeter:
        if self._open_region is not None:
            raise MeasurementError("energy_meter regions cannot be nested")
        self._group = self.rank_group()
        self._open_region = self._marking = self._start_region(align=False)
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        region, self._open_region = self._open_region, None
        self._marking = None
        if region is None:
            return
        if exc_type is not None:
            region.release()
            self._failed_block = exc_type.__name__
            return
        if self.work is not None:
            self.backend.declare_work(self.work)
        if self._group is not None:
            self.backend.synchronize()
            self._group.barrier()      # the region ends when the slowest rank's GPU is done
        region.end()
        self._note_region(region)

        def block_result(wait: bool) -> EnergyResult | None:
            readings = region.resolve(wait=wait)
            if readings is None:
                return None
            notes = [n for r in readings for n in r.notes]
            if any(r.coarse for r in readings):
                notes.append(_coarse_note(region, readings))    # a note, not a warning: see the module docstring
            per_gpu = [[_per_call(r, region.duration, 1, p)] for r, p in zip(readings, _phases_of(region))]
            return self._result_of(region, per_gpu, notes, [(region.host_figures(), 1)])

        pending = PendingResult(block_result, None if self._group is not None else lambda: self._at_most(region))
        if self._group is not None:
            pending.resolve()          # every rank combines its figures with the others' now, together
        self._add(pending)

    def measure(
        self,
        fn: Callable[..., Any],
        *args: Any,
        repeat: int = 1,
        warmup: int = 1,
        min_time_s: float | None = None,
        by_op: bool = False,
        **kwargs: Any,
    ) -> EnergyResult:
        """Measure ``fn(*args, **kwargs)``: ``warmup`` untimed calls, then ``repeat`` repetitions.

        Each repetition is one region that calls ``fn`` often enough to last ``min_time_s``
        (default: the meter's, 0.5 s; never less than 0.3 s, three counter updates); the figures
        are per call. Regions start just after a publication of the counter and, where calls are
        short, end just after one, so that little of a region lies in partly seen intervals. The
        last warm-up call is timed to size the regions; a region that comes out coarse is measured
        again with twice the calls (up to three times).

        ``by_op=True`` also splits the ETS among operator classes (``result.op_classes``: matmul,
        attention, elementwise, reduction, memory, communication, idle), from the PyTorch profiler's
        GPU timeline, or on the simulator from each operation's counted work (``meter.op_classes``).
        """
        _check_count("repeat", repeat, minimum=1)
        _check_count("warmup", warmup, minimum=0)
        target_s = self.min_time_s if min_time_s is None else min_time_s
        if not (isinstance(target_s, (int, float)) and target_s >= 0):
            raise ValueError(f"min_time_s must be a non-negative number of seconds, got {min_time_s!r}")
        target_s = max(target_s, _MIN_REGION_S)
        tracer = op_tracer(self.backend) if check_by_op(by_op) else None
        fn = tracer.traced(fn) if tracer is not None else fn
        self._group = self.rank_group()
        calls = self._agree(self._warm_up(fn, args, kwargs, warmup, target_s))
        finished: list[Region] = []
        resized = 0
        try:
            while len(finished) < repeat:
                op_marks: list[tuple[str, float, float]] = []
                with tracer.recording(op_marks) if tracer is not None else nullcontext():
                    region = self._marking = self._start_region(align=True, calls=calls)
                    if tracer is not None:
                        region.read_every_tick()      # the classes' attribution needs every publication
                    try:
                        done = self._fill(region, fn, args, kwargs, region.planned_calls or 1,
                                          target_s / 2 if calls else target_s)
                    except BaseException:
                        region.release()
                        raise
                    finally:
                        self._marking = None
                    region.end()
                region.op_marks = op_marks
                region.calls = done
                self.one_call_s = region.duration / done
                if calls is None or done > calls:
                    calls = self._agree(max(calls or 1, _calls_for(target_s, region.duration / done)))
                finished.append(region)
                if len(finished) == repeat:
                    dropped = self._drop_coarse(finished, resized)
                    if dropped:
                        resized += 1
                        calls = max(calls, 2 * max(r.calls for r in dropped))
        finally:
            for region in finished:
                region.release()
        per_gpu: list[list[Repetition]] = [[] for _ in self.gpus]
        notes: set[str] = set(tracer.notes if tracer is not None else ())
        for region in finished:
            for slot, reading, phases, classes in zip(per_gpu, region.readings, _phases_of(region),
                                                      _op_classes_of(region)):
                slot.append(_per_call(reading, region.duration, region.calls, phases, classes))
                notes.update(reading.notes)
                notes.update([note] if (note := merged_note(classes)) else [])
        self._note_region(finished[-1])
        result = self._result_of(finished[-1], per_gpu, sorted(notes), [(r.host_figures(), r.calls) for r in finished])
        self._add(PendingResult.of(result))
        return result

    # -- internals ------------------------------------------------------------------------------
    def _warm_up(self, fn: Callable[..., Any], args: tuple, kwargs: dict, warmup: int, target_s: float) -> int | None:
        """Run the untimed calls; the last one, timed, sizes the regions (None without warm-up)."""
        self._warming = True
        try:
            return self._timed_warm_up(fn, args, kwargs, warmup, target_s)
        finally:
            self._warming = False

    def _timed_warm_up(self, fn: Callable[..., Any], args: tuple, kwargs: dict, warmup: int, target_s: float) -> int | None:
        calls = None
        clock = self.backend.clock
        for _ in range(warmup):
            self.backend.synchronize()   # work queued before this call is not this call's
            self.backend.count_cpu_work(True)
            started = clock()
            self._call(fn, args, kwargs)
            self.backend.synchronize()
            self.backend.count_cpu_work(False)
            one_call_s = clock() - started
            # A synchronisation costs time of its own, which would make a short call look slower
            # than it is (and its region too short): take off what an idle one costs.
            synced = clock()
            self.backend.synchronize()
            one_call_s = max(one_call_s - (clock() - synced), 0.5 * one_call_s)
            calls = _calls_for(target_s, one_call_s)
            self.one_call_s = one_call_s
        return calls

    def _drop_coarse(self, finished: list[Region], resized: int) -> list[Region]:
        """Resolve the regions and take out, to be measured again with twice the calls, those that came
        out coarse, as long as that is still allowed: too few publications inside, or a region planned
        to start and end on ticks whose bound is still too wide (``_too_wide``: calls of 25-50 ms at a
        low cap leave one edge tens of milliseconds into a period however the calls are planned)."""
        for region in finished:
            region.resolve()
        if resized >= _MAX_RESIZES:
            return []
        short = [any(reading.coarse for reading in r.readings) for r in finished]
        # (power readings' bounds rest on an assumption about the unseen time, wide at any length: counter only)
        missed = [r.aligned_to is not None and any(_too_wide(reading) for reading in r.readings)
                  and all(recorder.method == COUNTER for recorder in r.recorders) for r in finished]
        if self._group is not None:
            short = self._group.agree_any(short)      # every rank measures the same regions again
            missed = [False] * len(finished)          # (ranks start together: no region is planned to a tick)
        dropped = [r for r, flag, miss in zip(finished, short, missed) if flag or miss]
        for region in dropped:
            finished.remove(region)
        return dropped

    def _fill(self, region: Region, fn: Callable[..., Any], args: tuple, kwargs: dict, calls: int,
              at_least_s: float) -> int:
        """Call ``fn`` ``calls`` times in the open region, more until it lasts ``at_least_s``, and
        then, where calls are short against the counter's period, until just after a publication.

        The number of calls comes from a timed warm-up call, which can be far off for calls of a
        millisecond or less; a region that came out too short is continued (after a
        synchronisation, so that the time counts finished work) instead of being thrown away.
        """
        clock = self.backend.clock
        done = 0
        for _ in range(_MAX_RESIZES + 1):
            for _ in range(calls):
                self._call(fn, args, kwargs)
            done += calls
            self.backend.synchronize()
            elapsed_s = self._agree(clock() - region.t0)
            if elapsed_s >= at_least_s:
                break
            calls = _calls_for(at_least_s - elapsed_s, elapsed_s / done)
        return done + self._finish_on_a_tick(region, fn, args, kwargs, (clock() - region.t0) / done)

    def _finish_on_a_tick(self, region: Region, fn: Callable[..., Any], args: tuple, kwargs: dict,
                          one_call_s: float) -> int:
        """Short calls: go on calling until just after the next publication, in shrinking batches
        (a long batch overshoots when calls slow down), so the region's tail is a call or less."""
        lattice = region.aligned_to
        if lattice is None or self._group is not None or not 0 < one_call_s <= _PLANNED_CALL_SHARE * lattice.period_s:
            return 0            # (0: calls that move no clock, on a simulated GPU with nothing to do, reach no tick)
        clock = self.backend.clock
        after = lattice.latest_next_tick(clock()) + _ALIGN_MARGIN_S
        extra = 0
        while clock() < after and extra < 100_000:
            remaining_s = after - clock()
            batch = max(1, math.ceil(0.8 * remaining_s / max(one_call_s, 1e-6))) if remaining_s > 5 * one_call_s else 1
            for _ in range(batch):
                self._call(fn, args, kwargs)
            extra += batch
            self.backend.synchronize()
        return extra

    def _call(self, fn: Callable[..., Any], args: tuple, kwargs: dict) -> Any:
        result = fn(*args, **kwargs)
        if self.work is not None:
            self.backend.declare_work(self.work)
        return result

    def _start_region(self, *, align: bool, calls: int | None = None) -> Region:
        self.backend.use(self.gpus)
        if self.compute_bound is not None:
            self.backend.set_workload_profile(self.compute_bound)
        if self._group is not None:
            self._group.barrier()      # every rank starts together (no rank's own tick to wait for)
            align = False
        return Region(self.backend, self.recorders, self.cap_context(), planned_calls=calls,
                      align=self._start_on_a_tick if align else None,
                      host=self.host if self._group is None else None)    # ranks share a host: not per rank

    def _start_on_a_tick(self, region: Region) -> None:
        """Sleep (the GPU idle) until just after the first GPU's next publication, where its lattice
        is known: the region then starts with next to nothing of a partly seen interval.

        Calls too long to top a region up to a tick at its end are planned instead: the number of
        calls and a small delay of the start are chosen so that the predicted end falls just after
        a publication, which keeps the partly seen time at both edges short.
        """
        lattice = self._learned_lattice(self.recorders[0])
        now = self.backend.clock()
        if lattice is None:
            return
        start_at = lattice.latest_next_tick(now) + _ALIGN_MARGIN_S
        one_call_s = self.one_call_s
        if region.planned_calls and math.isfinite(one_call_s) and one_call_s > _PLANNED_CALL_SHARE * lattice.period_s:
            region.planned_calls, delay_s = _plan_long_calls(region.planned_calls, one_call_s, lattice, start_at)
            start_at += delay_s
        self.backend.sleep_until(start_at)
        region.aligned_to = lattice

    def _learned_lattice(self, recorder: Recorder) -> Lattice | None:
        """The recorder's lattice once it is good enough to align to; a new recorder (the first
        region of a session) is given up to a second to learn it (the GPU idles meanwhile)."""
        if not recorder.learns_lattice:       # a fast counter (AMD SMI's): every read is fresh, nothing to align to
            return None
        clock = self.backend.clock
        give_up_at = clock() + _LEARNING_WAIT_S
        while True:
            lattice = recorder.learner.lattice
            now = clock()
            if lattice is not None and recorder.learner.confident(now, 0.25 * lattice.period_s):
                return lattice
            if now >= give_up_at or not recorder.is_alive():
                return None
            recorder.wait_until(now + recorder.period_s)

    def _agree(self, value: Any) -> Any:
        """Under torch.distributed the largest value over the ranks, so that every rank decides alike."""
        if self._group is None or value is None:
            return value
        return type(value)(self._group.agree_max(value))

    def _note_region(self, region: Region) -> None:
        self.last_region = (region.t0, region.t1)
        self.last_marks = tuple(region.marks)
        self.last_op_marks = tuple(region.op_marks)
        self.last_thread_cpu_s = region.thread_cpu_s

    def _add(self, pending: PendingResult) -> None:
        self._results.append(pending)
        self._failed_block = None
        if self.on_result is not None:
            self.on_result(pending)

    def _at_most(self, region: Region) -> EnergyResult | None:
        """The block's figures with each GPU's ETS at the upper end of its bound from the reads so far
        (``Region.bounds_so_far``): a budget these pass, the figures worked out later pass too."""
        bounds = region.bounds_so_far()
        if bounds is None:
            return None
        per_gpu = [[_per_call(RegionEnergy(high_j, low_j, high_j, math.nan), region.duration, 1)] for low_j, high_j in bounds]
        return self._result_of(region, per_gpu, [])

    def _result_of(self, region: Region, per_gpu: list[list[Repetition]], notes: list[str],
                   host: Sequence[tuple[list[HostFigure], int]] = ()) -> EnergyResult:
        context = region.cap
        parts = []
        for gpu, recorder, reps in zip(self.gpus, self.recorders, per_gpu):
            parts.append(GpuResult(
                gpu_index=gpu.index,
                gpu_name=gpu.name,
                gpu_uuid=gpu.uuid,
                backend=cast(BackendName, gpu.backend),     # the device interface types it as a str
                simulated=gpu.simulated,
                method=recorder.method,
                power_source=cast(PowerSource, gpu.power_source) if recorder.method == SAMPLING else None,
                cap=context.label,
                limit_requested_w=context.requested_w.get(gpu.uuid),
                limit_enforced_w=context.enforced_w[gpu.uuid],
                default_limit_w=context.default_w[gpu.uuid],
                repetitions=tuple(reps),
                clock_cap=context.clock_label,
                sm_clock_cap_mhz=context.sm_clock_cap_mhz.get(gpu.uuid),
            ))
        if self._group is not None:
            parts = list(self._group.combine(parts))
            notes = sorted({n for rank_notes in self._group.gather(list(notes)) for n in rank_notes})
        result = EnergyResult(per_gpu=tuple(parts), notes=tuple(notes))
        if self.host is None or not host or not host[0][0]:
            return result
        host_notes = sorted({f.note for figures, _ in host for f in figures if f.note})
        return replace(result, notes=(*result.notes, *host_notes),
                       per_domain=per_domain(result, host, self.host.simulated))


def _plan_long_calls(calls: int, one_call_s: float, lattice: Lattice, start_at: float) -> tuple[int, float]:
    """How many calls (at least ``calls``, at most half again) and how long after ``start_at`` to
    start, so that the predicted end falls just after a publication.

    The end must be surely past the tick: by the lattice's error, the alignment margin and a per
    half a per cent of the predicted duration. What is minimised is the partly seen time at both edges: the
    delay of the start plus that margin.
    """
    period = lattice.period_s
    best = (math.inf, calls, 0.0)
    for n in range(calls, max(calls + 2, int(1.5 * calls) + 3)):
        duration = n * one_call_s
        margin = lattice.error_at(start_at + duration) + _ALIGN_MARGIN_S + _DURATION_ERROR * duration
        end_phase = (start_at + duration - lattice.phase_s) % period
        delay = (margin - end_phase) % period
        if delay + margin < best[0]:
            best = (delay + margin, n, delay)
    return best[1], best[2]


def _per_call(reading: RegionEnergy, duration_s: float, calls: int, phases: dict[str, PhaseFigures] | None = None,
              op_classes: dict[str, PhaseFigures] | None = None) -> Repetition:
    return Repetition.of_region(reading.ets_j, reading.low_j, reading.high_j, reading.peak_power_w, duration_s, calls,
                                phases, op_classes)


def _phases_of(region: Region) -> list[dict[str, PhaseFigures] | None]:
    """Per GPU, the region's phases (None where it had no marks), once the region is resolved."""
    return region.phases or [None] * len(region.readings)


def _op_classes_of(region: Region) -> list[dict[str, PhaseFigures] | None]:
    """Per GPU, the region's operator classes (None without ``by_op``), once the region is resolved."""
    return [as_classes(c) for c in region.op_classes] or [None] * len(region.readings)


def _coarse_note(region: Region, readings: Sequence[RegionEnergy]) -> str:
    reading = next(r for r in readings if r.coarse)
    recorder = region.recorders[readings.index(reading)]
    what = (f"the energy counter (published every {recorder.period_s * 1000:.0f} ms)" if recorder.method == COUNTER
            else f"the power readings (each averages {recorder.window_s * 1000:.0f} ms)")
    return (
        f"the measured block took {region.duration * 1000:.0f} ms, too short for {what} to resolve: its ETS "
        f"{reading.ets_j:.4g} J is interpolated through the publications around it, and the truth lies in "
        f"[{reading.low_j:.4g}, {reading.high_j:.4g}] J; use energy_meter.measure(fn) to repeat it until it is "
        f"long enough, or measure more work"
    )


def _too_wide(reading: RegionEnergy) -> bool:
    """A bound reaching further from the estimate than a result may before it is called coarse
    (``COARSE_SHARE``). Calls longer than a tenth of a period are planned to end just after a
    publication from the warm-up call's time, and a per cent off over 40 calls leaves most of a
    period partly seen at the end; the next region is planned from this one's measured time per call."""
    share = bound_share(reading.ets_j, reading.low_j, reading.high_j)
    return share is not None and share > COARSE_SHARE


def _calls_for(target_s: float, one_call_s: float) -> int:
    if one_call_s <= 0:      # a call that moves no clock (a simulated GPU with nothing to do): more calls cannot help
        return 1
    return max(1, math.ceil(target_s * 1.05 / one_call_s))


def _check_count(name: str, value: Any, *, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name} must be a whole number >= {minimum}, got {value!r}")
