"""One measured region: its two timestamps, and its energy worked out from the recorders afterwards.

A region is started and ended with the GPU's work synchronised, so that it covers exactly that
work. Its energy needs the publications *after* its end, which come up to a period (100 ms) later.
Waiting for them in every test would cost a suite of short tests most of its time, so a region's
figure is a ``PendingResult``: worked out when something needs it (the test reads it, a budget
checks it, the session ends), and meanwhile, whenever the publications have arrived, without any
wait (``try_resolve``). The recorder keeps the reads a region needs until it is resolved (``hold``).
"""

from __future__ import annotations

import math
import os
import weakref
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from .. import realtime
from ..errors import DeviceError, MeasurementError
from ..gpu.device import Backend, Gpu
from ..gpu.moments import Moment, QueuedMoment, date_marks
from ..host.recorder import HostFigure, HostRecorder
from .attribution import attribute_phases, publication_arrays
from .integrate import CEILING_FACTOR, NotYet, RegionEnergy, check_monotonic, counter_bound, counter_energy, publications, sampled_energy, went_backwards
from .lattice import Lattice
from .recorder import COUNTER, Recorder
from .results import EnergyResult, PhaseFigures

WAIT_PERIODS = 6                 # how many publication periods to wait for the ones after a region
# A region's start takes its GPUs' running processes from the previous region's end if that was asked
# this recently (back-to-back short tests: one ends a few ms before the next starts); every end asks.
PROCESS_LIST_REUSE_S = 0.05
CPU_TIME_NOTE = ("simulated GPU work: nothing was declared, so the process's CPU time stood for it and the "
                 "figure varies with the host (declare it: pytest_gpuenergy.sim.declare_work, or energy(work=...))")
NO_TIME_NOTE = ("simulated GPU work: the region took no time: work was declared earlier in this test, and from then on "
                "only declared work runs on the simulated GPU (declare the work of these calls too)")


@dataclass(frozen=True)
class CapContext:
    """What the meter records about the limit each GPU ran under."""

    label: str
    requested_w: dict[str, float | None]      # by GPU UUID
    enforced_w: dict[str, float]
    default_w: dict[str, float]
    clock_label: str | None = None            # the SM clock cap's label (gpu_clock_cap), None without one
    sm_clock_cap_mhz: dict[str, float | None] = field(default_factory=dict)   # the lock's upper end, by UUID


class Region:
    """One measured interval on a set of GPUs: two timestamps and what came of them.

    ``align``, if given, runs after the GPU's queued work is synchronised and before the start is
    taken: the meter uses it to start just after a publication (and may set ``planned_calls``).
    """

    def __init__(self, backend: Backend, recorders: Sequence[Recorder], cap: CapContext | None,
                 align: Callable[[Region], None] | None = None, planned_calls: int | None = None,
                 host: HostRecorder | None = None) -> None:
        self.backend = backend
        self.host = host              # --energy-domains: the host's CPU and DRAM, read at the same edges
        self.recorders = list(recorders)
        clock = self.clock = backend.clock
        self.cap = cap or current_limits([r.gpu for r in self.recorders])
        for recorder in self.recorders:
            recorder.raise_error()
        backend.synchronize()
        self.aligned_to: Lattice | None = None
        self.planned_calls = planned_calls
        if align is not None:
            align(self)
        # the start's list, and the end's (``end``): neither is waited for until the figure is worked out
        self._others_before: Callable[[], list[set[int]]] | None = other_processes_later(
            [r.gpu for r in self.recorders], reuse_s=PROCESS_LIST_REUSE_S, background=backend.virtual_clock is None)
        self._others_after: Callable[[], list[set[int]]] | None = None
        self.others: list[set[int]] = []
        self.holds = [r.hold(clock() - 4 * r.period_s - 0.1) for r in self.recorders]
        self._cpu_at_start = sum(r.cpu_s() for r in self.recorders)
        self.host_marks = [host.mark()] if host is not None else []
        backend.count_cpu_work(True)
        self.anchor = backend.cuda_moment()    # on the GPU, idle since the synchronisation: dates the marks
        self.t0 = clock()
        for recorder, token in zip(self.recorders, self.holds):
            recorder.region_started(token, self.t0)
        self.t1 = math.nan
        self.calls = 1
        self.work_source: str | None = None
        self.thread_cpu_s = math.nan
        self.readings: list[RegionEnergy] = []
        # energy_meter.phase(): (name, start, end) as marked (``Backend.mark_moment``: a time, or a CUDA
        # event), as (name, start_s, end_s) once the region has ended (``moments.date_marks``), and
        # per GPU the phases attributed from its publications once the region is resolved
        self.queued_marks: list[tuple[str, Moment, Moment]] = []
        self.marks: list[tuple[str, float, float]] = []
        self.mark_notes: list[str] = []
        self.phases: list[dict[str, PhaseFigures] | None] = []
        # measure(by_op=True): each kernel's class as (class, start_s, end_s), split the same way (``op_classes``)
        self.op_marks: list[tuple[str, float, float]] = []
        self.op_classes: list[dict[str, PhaseFigures] | None] = []
        self.released = False
        self.every_tick_asked = False

    @property
    def duration(self) -> float:
        return self.t1 - self.t0

    def bounds_so_far(self) -> list[tuple[float, float]] | None:
        """Per GPU, the bound (J) on the ended region's energy from the reads taken so far, each
        publication dated by the reads alone, the GPU's ceiling its highest power: later publications
        and the lattice's dating only narrow it, so the figure worked out later lies within it (unless
        the GPU is seen drawing more than that ceiling). None for an open region, or where a GPU's
        power is sampled (its bound rests on averaging windows, not on a counter), or a counter seen
        going backwards (no figure will come: the test waits for that error)."""
        if math.isnan(self.t1) or any(r.method != COUNTER for r in self.recorders):
            return None
        bounds = []
        for recorder in self.recorders:
            reads, _ = recorder.snapshot(self.t0 - 3 * recorder.period_s - 0.05, math.inf)
            found = publications(reads, None, repeats=False, period_s=recorder.period_s)
            if not found or went_backwards(reads) is not None:
                return None
            bounds.append(counter_bound(found, self.t0, self.t1, CEILING_FACTOR * recorder.max_limit_w))
        return bounds

    def end(self) -> None:
        self.backend.synchronize()
        self.t1 = self.clock()
        for recorder, token in zip(self.recorders, self.holds):
            recorder.region_ended(token, self.t1)
        self.backend.count_cpu_work(False)
        self._date_marks()
        if self.host is not None:
            self.host_marks.append(self.host.mark())
        self.work_source = self.backend.sim_work_source()
        self.thread_cpu_s = sum(r.cpu_s() for r in self.recorders) - self._cpu_at_start
        gpus = [r.gpu for r in self.recorders]
        # in real time on a thread of its own (the test goes on); on a virtual clock at once, as all there
        self._others_after = other_processes_later(gpus, background=self.backend.virtual_clock is None)
        for recorder in self.recorders:          # what is already known to have failed fails now
            try:
                recorder.raise_error()
            except BaseException:
                self.release()
                raise

    def read_every_tick(self) -> None:
        """Phase marks are coming: their attribution needs every publication of the region (asked once)."""
        if self.every_tick_asked:
            return
        self.every_tick_asked = True
        for recorder, token in zip(self.recorders, self.holds):
            recorder.every_tick(token)

    def _date_marks(self) -> None:
        """The marks on the meter's clock, now that the GPU has run them: CUDA events dated against the
        region's anchor (or, where CUDA came into use inside the region, one recorded now)."""
        queued = any(isinstance(m, QueuedMoment) for mark in self.queued_marks for m in mark[1:])
        end_anchor = self.backend.cuda_moment() if queued and self.anchor is None else None
        self.marks, note = date_marks(self.queued_marks, self.anchor, end_anchor)
        self.mark_notes = [f"phases: {note}"] if note else []

    def host_figures(self) -> list[HostFigure]:
        """The host's domains over the region (empty without ``host``)."""
        if self.host is None or len(self.host_marks) != 2:
            return []
        return self.host.figures(*self.host_marks)

    def resolve(self, *, wait: bool = True) -> list[RegionEnergy] | None:
        """Each GPU's energy over the region once the publications after it have arrived: waiting for
        them, or (``wait=False``) None while any is still to come."""
        if self.readings:
            return self.readings
        readings, first_error = [], None
        for recorder in self.recorders:
            try:
                limit_w = self.cap.enforced_w.get(recorder.gpu.uuid, recorder.max_limit_w)
                reading = resolve_reading(recorder, self.t0, self.t1, limit_w, wait=wait)
            except (MeasurementError, DeviceError) as exc:
                first_error = first_error or as_measurement_error(recorder.gpu, exc)
                continue
            if reading is None:
                return None
            readings.append(reading)
        if first_error is None:
            readings = [self._noted(reading, recorder, pids)
                        for reading, recorder, pids in zip(readings, self.recorders, self._other_pids())]
            self.phases = [self._phases_of(recorder, reading) for recorder, reading in zip(self.recorders, readings)]
            self.op_classes = [self._phases_of(recorder, reading, self.op_marks, "op classes")
                               for recorder, reading in zip(self.recorders, readings)]
        self.release()
        if first_error is not None:
            raise first_error
        self.readings = readings
        return readings

    def _other_pids(self) -> list[set[int]]:
        """Per GPU, the other processes listed at the region's start or end: both lists are taken
        (waited for, if still being asked) only once the figure is there, never by a try that finds
        the publications still to come."""
        asked = [lists() for lists in (self._others_before, self._others_after) if lists is not None]
        if asked:
            self.others = [set().union(*per_gpu) for per_gpu in zip(*asked)]
            self._others_before = self._others_after = None
        return self.others

    def _phases_of(self, recorder: Recorder, reading: RegionEnergy, marks: list[tuple[str, float, float]] | None = None,
                   what: str = "phases") -> dict[str, PhaseFigures] | None:
        """The region's ETS on one GPU split among its phase marks (``attribution``; or among ``marks``,
        the op classes' ones), per call; None without marks. A split that cannot be made is a note:
        the region's own figure stands."""
        marks = self.marks if marks is None else marks
        one = "phase" if what == "phases" else "op class"
        if not marks:
            return None
        if recorder.method != COUNTER:
            reading.notes.append(f"{what}: {recorder.gpu.label} has no energy counter (its power is sampled), and "
                                 f"{what} are fitted from the counter's windows: no {one} figures")
            return None
        reads, lattice = recorder.snapshot(self.t0 - 3 * recorder.period_s - 0.05, math.inf)
        period_s = lattice.period_s if lattice is not None else recorder.period_s
        times_s, energies_j, errors_s = publication_arrays(publications(reads, lattice, repeats=False, period_s=period_s))
        try:
            found = attribute_phases(times_s, energies_j, marks, t0_s=self.t0, t1_s=self.t1, ets_j=reading.ets_j,
                                     ets_low_j=reading.low_j, ets_high_j=reading.high_j, calls=self.calls,
                                     max_power_w=CEILING_FACTOR * recorder.max_limit_w, dating_error_s=errors_s,
                                     resolution_j=max(recorder.gpu.energy_resolution_mj, 1.0) / 1000.0)   # read in whole mJ
        except MeasurementError as exc:
            reading.notes.append(f"{what}: no {one} figures for {recorder.gpu.label}: {exc}")
            return None
        reading.notes.extend(f"{what}: {note}" for note in found.notes)
        from .phase_design import lined_up_note  # numpy: only a region with marks pays for it

        lined_up = lined_up_note((self.t1 - self.t0) / self.calls, period_s) if self.calls > 1 else None
        if lined_up is not None and not all(p.told_apart for p in found.phases):
            reading.notes.append(f"{what}: {lined_up}")
        return {p.name: PhaseFigures(ets_j=p.ets_j, ets_low_j=p.ets_low_j, ets_high_j=p.ets_high_j, time_s=p.time_s,
                                     power_w=p.power_w, time_share=p.time_share, energy_share=p.energy_share,
                                     distinguishable=p.told_apart, why_not=p.why_not)
                for p in found.phases}

    def _noted(self, reading: RegionEnergy, recorder: Recorder, pids: set[int]) -> RegionEnergy:
        if self.work_source == "cpu-time":
            reading.notes.append(CPU_TIME_NOTE)
        elif self.work_source == "declared" and self.t1 <= self.t0:
            reading.notes.append(NO_TIME_NOTE)
        reading.notes.extend(self.mark_notes)
        if pids:
            reading.notes.append(
                f"{recorder.gpu.label} was also used by {'process' if len(pids) == 1 else 'processes'} "
                f"{', '.join(map(str, sorted(pids)))} during the region: its ETS includes their work"
            )
        return reading

    def release(self) -> None:
        self.backend.count_cpu_work(False)
        if self.released:
            return
        self.released = True
        for recorder, token in zip(self.recorders, self.holds):
            recorder.release(token)


class PendingResult:
    """A measurement's result, worked out when first needed (see the module docstring).

    ``build(wait)`` returns the result, or None while it would have to wait (``wait=False``). It
    is called until it gives one; the result (or the error it raised) is then kept.
    """

    def __init__(self, build: Callable[[bool], EnergyResult | None],
                 upper: Callable[[], EnergyResult | None] | None = None) -> None:
        self._build: Callable[[bool], EnergyResult | None] | None = build
        self._upper = upper
        self._result: EnergyResult | None = None
        self._error: BaseException | None = None
        self._then: list[Callable[[EnergyResult], None]] = []

    def at_most(self) -> EnergyResult | None:
        """What the result is at most, without waiting: the result once worked out (None where that
        failed), before that ``upper``'s figures, each GPU's ETS at the upper end of its bound from the
        reads so far (``Region.bounds_so_far``), or None where that cannot be told."""
        if self._build is None:
            return self._result
        return self._upper() if self._upper is not None else None

    def then(self, callback: Callable[[EnergyResult], None]) -> None:
        """Call ``callback`` with the result once it is worked out (now, if it is already)."""
        if self._result is not None:
            callback(self._result)
        else:
            self._then.append(callback)

    @classmethod
    def of(cls, result: EnergyResult) -> PendingResult:
        done = cls(lambda wait: result)
        done.resolve()
        return done

    @property
    def resolved(self) -> bool:
        return self._build is None

    def resolve(self) -> EnergyResult:
        """The result, waiting for the publications it needs; raises what working it out raised."""
        found = self._attempt(wait=True)
        assert found is not None      # with waiting, a figure or an error
        return found

    def try_resolve(self) -> EnergyResult | None:
        """The result if it can be worked out without waiting, else None (errors are raised)."""
        return self._attempt(wait=False)

    def _attempt(self, *, wait: bool) -> EnergyResult | None:
        if self._build is not None:
            try:
                result = self._build(wait)
            except BaseException as exc:
                self._build, self._error = None, exc
                raise
            if result is None:
                return None
            self._build, self._result = None, result
            callbacks, self._then = self._then, []
            for callback in callbacks:
                callback(result)
        if self._error is not None:
            raise self._error
        return self._result


def resolve_reading(recorder: Recorder, t0: float, t1: float, limit_w: float, *, wait: bool = True) -> RegionEnergy | None:
    """One GPU's energy over [t0, t1], waiting for the publications after ``t1`` (or, without
    ``wait``, None while they are still to come).

    The wait sleeps until the publications it needs are due rather than trying every read, so the
    meter's own work stays off the GPU's timeline (the simulator counts CPU time as GPU work).
    """
    clock = recorder.clock
    period = recorder.period_s
    deadline = t1 + WAIT_PERIODS * period + 0.2
    since = t0 - 3 * period - 0.05
    due = publications_due(recorder, t0, t1, period)
    if wait:
        recorder.wait_until(due)
    elif not recorder.has_read_since(due) and recorder.is_alive():
        return None
    while True:
        recorder.raise_error()
        final = clock() > deadline or not recorder.is_alive()
        reads, lattice = recorder.snapshot(since, math.inf)
        try:
            return _integrate(recorder, reads, lattice, t0, t1, limit_w, final=final)
        except NotYet:
            if final:
                raise MeasurementError(
                    f"the energy counter of {recorder.gpu.label} published nothing around the region"
                    + (f" ({recorder.last_error})" if recorder.last_error else "")
                ) from None
            if not wait:
                return None
            recorder.wait_until(clock() + 0.5 * period)


def publications_due(recorder: Recorder, t0: float, t1: float, period_s: float) -> float:
    """When the publications a figure needs after its region (``_publications_after``) are surely out:
    just after the lattice's tick for the last of them plus the lattice's error there, where the
    recorder knows its lattice to a tenth of a period; otherwise that many periods after ``t1`` and a
    twentieth. The lattice's moment comes on average half a period sooner for a figure that needs one
    publication after its region (a test with an energy budget waits for its figure, and a session's
    end for its last tests'); never later than the fallback."""
    needed = _publications_after(recorder, t0, t1, period_s)
    fallback = t1 + (needed + 0.05) * period_s
    lattice = recorder.learner.lattice
    if lattice is None:
        return fallback
    index = lattice.index_before(t1) + needed
    error_s = lattice.error_of_tick(index)
    if not error_s <= 0.1 * lattice.period_s:
        return fallback
    return min(lattice.tick_at(index) + error_s, fallback)


def _publications_after(recorder: Recorder, t0: float, t1: float, period_s: float) -> int:
    """How many of the counter's publications after a region its figure needs at least: a region shorter
    than the counter's period holds at most one, and then its estimate needs the power after it, so two
    (``integrate.counter_energy``). Between tests, every pending figure is tried (``try_resolve``): one
    tried before its publications can be there is worked out for nothing, and a suite of tests of a
    few milliseconds has dozens pending at once."""
    return 2 if recorder.method == COUNTER and t1 - t0 < 0.9 * period_s else 1


def _integrate(recorder: Recorder, reads: list, lattice: Any, t0: float, t1: float, limit_w: float, *,
               final: bool) -> RegionEnergy:
    ceiling_w = CEILING_FACTOR * recorder.max_limit_w
    period = lattice.period_s if lattice is not None else recorder.period_s
    if recorder.method == COUNTER:
        near = [r for r in reads if t0 - period <= r.started <= t1 + 2 * period]
        check_monotonic(near, recorder.gpu.label)
        if final:
            _check_moving(recorder, [r for r in reads if r.started >= t0 - period], period)
        pubs = publications(reads, lattice, repeats=False, period_s=period)
        return counter_energy(pubs, t0, t1, ceiling_w=ceiling_w, limit_w=limit_w, final=final, period_s=period)
    pubs = publications(reads, lattice, repeats=True, period_s=period)
    return sampled_energy(pubs, t0, t1, window_s=recorder.window_s, ceiling_w=ceiling_w, period_s=period, final=final)


def _check_moving(recorder: Recorder, reads: list, period: float) -> None:
    """A counter whose value has not changed for three of its periods, up to the latest read, is stuck.

    The value is known to have stood from the end of the first read that saw it to the start of the
    latest (a counter read seldom against its period, as AMD SMI's 1 ms one is, may have moved just
    before a read that saw the new value)."""
    if len(reads) < 2:
        return
    last = reads[-1].value
    first = len(reads) - 1
    while first > 0 and reads[first - 1].value == last:
        first -= 1
    watched = reads[-1].started - reads[first].ended
    if watched >= 3 * period:
        raise MeasurementError(
            f"the energy counter of {recorder.gpu.label} did not move for {watched:.3g} s although it updates "
            f"every {period * 1000:.0f} ms: it is stuck; no figure is given"
        )


# By the device object (a backend's own: two simulated machines in one process share UUIDs): when its
# list was asked (time.monotonic), and the list (a future: a region's end asks in the background).
_process_lists: weakref.WeakKeyDictionary[Gpu, tuple[float, Future[frozenset[int]]]] = weakref.WeakKeyDictionary()
# The thread that asks for a region's end's list, by process (a forked child starts its own).
_listers: dict[int, ThreadPoolExecutor] = {}


def other_processes_later(gpus: Sequence[Gpu], *, reuse_s: float = 0.0, background: bool = True,
                          now: float | None = None) -> Callable[[], list[set[int]]]:
    """Per GPU, the PIDs of other processes its library (NVML, AMD SMI) lists on it: what the returned
    function gives, waiting for the answer if need be.

    Asked on a thread of its own where ``background``, so that neither a region's start nor its end
    waits for the library: its call is one of the slower ones (47-576 us on an H200, the most when
    the recorder's 2.4 ms energy read is in flight beside it), and the region's figure, worked out
    later, takes the answer. ``reuse_s``: a list asked at most that long ago (``now``, on
    ``time.monotonic``) stands for a new one (back-to-back short tests: a start takes the previous
    end's list). Under a PID namespace (a container) the library reports host PIDs, so this
    process's own PID may not be in the list; then one listed process is taken to be this one and
    only a second is "other".
    """
    asked = _asked(gpus, reuse_s, now, background=background)
    return lambda: _others(gpus, asked)


def _asked(gpus: Sequence[Gpu], reuse_s: float, now: float | None, *, background: bool) -> list[Future[frozenset[int]]]:
    now = realtime.monotonic() if now is None else now
    found = []
    for gpu in gpus:
        kept = _process_lists.get(gpu)
        if reuse_s > 0 and kept is not None and 0.0 <= now - kept[0] <= reuse_s:
            found.append(kept[1])
            continue
        if background:
            future = _lister().submit(_listed, gpu)
        else:
            future = Future()
            future.set_result(_listed(gpu))
        _process_lists[gpu] = (now, future)
        found.append(future)
    return found


def _listed(gpu: Gpu) -> frozenset[int]:
    try:
        return frozenset(gpu.processes())
    except DeviceError:
        return frozenset()


def _lister() -> ThreadPoolExecutor:
    pid = os.getpid()
    lister = _listers.get(pid)
    if lister is None:
        lister = _listers[pid] = ThreadPoolExecutor(max_workers=1, thread_name_prefix="gpuenergy-processes")
    return lister


def _others(gpus: Sequence[Gpu], asked: Sequence[Future[frozenset[int]]]) -> list[set[int]]:
    me = os.getpid()
    found = []
    for gpu, future in zip(gpus, asked):
        pids = set(future.result())
        if me in pids:
            pids.discard(me)
        elif len(pids) == 1 and not gpu.simulated:
            pids = set()
        found.append(pids)
    return found


def as_measurement_error(gpu: Gpu, exc: BaseException) -> MeasurementError:
    if isinstance(exc, MeasurementError):      # a lost GPU's error among them
        return exc
    return MeasurementError(f"reading the energy of {gpu.label} failed: {exc}")


def current_limits(gpus: Sequence[Gpu]) -> CapContext:
    """The limits a region runs at where no cap was asked for: read at every region (another tool may
    have changed them), the enforced one only (the default is the board's, read once)."""
    enforced = {gpu.uuid: gpu.enforced_limit_mw() / 1000.0 for gpu in gpus}
    default = {gpu.uuid: gpu.default_limit_mw() / 1000.0 for gpu in gpus}
    return CapContext("current", {g.uuid: None for g in gpus}, enforced, default)
