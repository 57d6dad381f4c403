"""meter/region.py's PendingResult on its own: a measurement's figure, worked out when first needed.

The plugin's session keeps one per measured block, tries them between tests (``try_resolve``, never
waiting) and at the end (``resolve``), and its reports hang on them with ``then``."""

from __future__ import annotations

import multiprocessing
import threading
import time
from typing import Any

import pytest

from pytest_gpuenergy.errors import DeviceError
from pytest_gpuenergy.meter.region import PROCESS_LIST_REUSE_S, PendingResult, other_processes_later
from pytest_gpuenergy.plugin.options import SessionOptions
from pytest_gpuenergy.plugin.session import EnergySession


class Build:
    """A result's work: None until ``ready``; records how it was asked (waiting or not)."""

    def __init__(self) -> None:
        self.result: Any = object()
        self.ready = False
        self.asked: list[bool] = []

    def __call__(self, wait: bool) -> Any:
        self.asked.append(wait)
        return self.result if self.ready or wait else None


def test_trying_without_waiting_gives_none_until_the_figure_is_there_then_the_figure():
    build = Build()
    pending = PendingResult(build)
    assert pending.try_resolve() is None and not pending.resolved
    build.ready = True
    assert pending.try_resolve() is build.result and pending.resolved
    assert build.asked == [False, False]            # never asked to wait
    assert pending.try_resolve() is build.result and build.asked == [False, False]   # kept, not worked out again


def test_resolving_asks_to_wait():
    build = Build()
    assert PendingResult(build).resolve() is build.result and build.asked == [True]


def test_a_callback_waits_for_the_figure_and_gets_it_once():
    build = Build()
    pending = PendingResult(build)
    got: list[Any] = []
    pending.then(got.append)
    pending.try_resolve()
    assert got == []                                 # not there yet: not called
    build.ready = True
    pending.try_resolve()
    pending.try_resolve()
    assert got == [build.result]


def test_between_tests_the_first_figure_not_ready_ends_the_round_and_the_later_ones_keep_their_order():
    """The session's pending figures ended in order: once one is not ready, the later ones are not asked
    (a suite of 5 ms tests has dozens pending); waiting works every one of them out, in order."""
    session = EnergySession(SessionOptions())
    builds = [Build() for _ in range(4)]
    for number, build in enumerate(builds):
        session.record(f"test_{number}", PendingResult(build))
    builds[0].ready = builds[2].ready = True
    assert session.resolve(wait=False) == []
    assert [len(b.asked) for b in builds] == [1, 1, 0, 0]       # the second not ready: the rest not asked
    builds[1].ready = True
    assert session.resolve(wait=False) == []
    assert [len(b.asked) for b in builds] == [1, 2, 1, 1]       # the first kept, not asked again
    assert session.resolve(wait=True) == [] and builds[3].asked == [False, True]
    assert all(record.results[0].resolved for record in session.cases.values()) and len(session.cases) == 4


def test_a_callback_on_a_figure_already_worked_out_is_called_at_once():
    result = object()
    pending = PendingResult.of(result)  # type: ignore[arg-type]
    got: list[Any] = []
    pending.then(got.append)
    assert got == [result]


def test_an_error_in_working_it_out_is_raised_again_each_time_it_is_asked_for():
    def build(wait: bool) -> Any:
        raise RuntimeError("the counter is stuck")

    pending = PendingResult(build)
    for _ in range(2):
        with pytest.raises(RuntimeError, match="stuck"):
            pending.try_resolve()
    assert pending.resolved


def test_the_limits_a_region_records_are_read_each_time_the_default_once(sim_state, monkeypatch):
    """Without a cap, each region records the limit the GPU enforces then (another tool may have changed
    it between two regions) and the board's default, which is a constant: one library call a region,
    not ``limits()``'s four."""
    from pytest_gpuenergy.gpu.device import open_backend
    from pytest_gpuenergy.meter.region import current_limits

    backend = open_backend("sim")
    try:
        gpu = backend.all_gpus[0]
        asked = []
        limits = gpu.limits
        monkeypatch.setattr(gpu, "limits", lambda: asked.append(1) or limits())
        first = current_limits([gpu])
        gpu.set_limit_mw(350_000)                   # the simulated GPU; as `nvidia-smi -pl 350` would
        second = current_limits([gpu])
        assert first.enforced_w == {gpu.uuid: 700.0} and second.enforced_w == {gpu.uuid: 350.0}
        assert first.default_w == second.default_w == {gpu.uuid: 700.0}
        assert first.label == "current" and first.requested_w == {gpu.uuid: None}
        assert len(asked) == 1                      # the default, once
    finally:
        backend.close()


def asked_now(gpus: list, **kwargs: float) -> list[set[int]]:
    """The lists asked on this thread (as on the simulator's virtual clock), answered at once."""
    return other_processes_later(gpus, background=False, **kwargs)()


class Listed:
    """A device whose library lists ``pids`` on it; counts how often it was asked."""

    simulated = True

    def __init__(self, *pids: int) -> None:
        self.pids = list(pids)
        self.asked = 0

    def processes(self) -> list[int]:
        self.asked += 1
        return list(self.pids)


def test_a_regions_start_takes_the_running_processes_from_an_end_asked_just_before():
    """Back-to-back short tests: a region's start reuses the list the previous region's end asked for
    at most ``reuse_s`` before; an end always asks, and a start after longer asks again."""
    gpu = Listed(4242)
    assert asked_now([gpu], now=100.0) == [{4242}]                        # an end: asked
    gpu.pids = [4242, 5151]
    assert asked_now([gpu], reuse_s=PROCESS_LIST_REUSE_S, now=100.04) == [{4242}]   # the next start: reused
    assert gpu.asked == 1
    assert asked_now([gpu], now=100.045) == [{4242, 5151}]                # its end asks again
    assert asked_now([gpu], reuse_s=PROCESS_LIST_REUSE_S, now=100.1) == [{4242, 5151}]
    assert gpu.asked == 3                                                        # 55 ms later: asked again
    gpu.pids = []
    assert asked_now([gpu], reuse_s=PROCESS_LIST_REUSE_S, now=100.2) == [set()] and gpu.asked == 4



class Slow(Listed):
    """A device whose library answers only once ``answer`` is set (a slow call), or raises ``fails``."""

    def __init__(self, *pids: int, fails: BaseException | None = None) -> None:
        super().__init__(*pids)
        self.answer = threading.Event()
        self.fails = fails

    def processes(self) -> list[int]:
        assert self.answer.wait(10)
        if self.fails is not None:
            self.asked += 1
            raise self.fails
        return super().processes()


def test_neither_a_regions_start_nor_its_end_waits_for_the_list_and_a_start_takes_the_ends_answer():
    """In real time the lists are asked on a thread of its own and the test goes on; the figure later
    gets each list as the library gave it. A start within ``reuse_s`` of an end takes that end's
    answer (waiting for it only when the figure is worked out) rather than asking again."""
    gpu = Slow(4242)
    later = other_processes_later([gpu], now=200.0)          # returns although the library has not answered
    assert gpu.asked == 0
    gpu.answer.set()
    assert later() == [{4242}] and gpu.asked == 1
    gpu.pids = [4242, 5151]
    assert asked_now([gpu], reuse_s=PROCESS_LIST_REUSE_S, now=200.03) == [{4242}] and gpu.asked == 1
    waiting = Slow(77)
    end = other_processes_later([waiting], now=300.0)
    start = other_processes_later([waiting], reuse_s=PROCESS_LIST_REUSE_S, now=300.01)   # returns at once too
    assert waiting.asked == 0
    waiting.answer.set()
    assert start() == [{77}] and end() == [{77}] and waiting.asked == 1
    fresh = Slow(88)
    start = other_processes_later([fresh], reuse_s=PROCESS_LIST_REUSE_S, now=400.0)     # nothing to reuse: asked,
    assert fresh.asked == 0                                                              # ...in the background
    fresh.answer.set()
    assert start() == [{88}] and fresh.asked == 1


def test_a_background_list_that_fails_is_empty_for_a_library_error_and_raised_otherwise():
    refused = Slow(fails=DeviceError("nvmlDeviceGetComputeRunningProcesses: not supported"))
    refused.answer.set()
    assert other_processes_later([refused], now=450.0)() == [set()]
    broken = Slow(fails=RuntimeError("a bug"))
    broken.answer.set()
    with pytest.raises(RuntimeError, match="a bug"):
        other_processes_later([broken], now=500.0)()



def test_one_named_thread_asks_for_every_region_one_list_at_a_time():
    """However many regions end meanwhile, one thread (named, for a user's ``py-spy dump``) asks the
    library, in turn: two lists asked while the library is slow leave the second waiting for the first."""
    first, second = Slow(1), Slow(2)
    first_later = other_processes_later([first], now=600.0)
    second_later = other_processes_later([second], now=600.001)
    askers = [t for t in threading.enumerate() if t.name.startswith("gpuenergy-processes")]
    assert len(askers) == 1, askers
    second.answer.set()
    time.sleep(0.05)
    assert second.asked == 0                                        # still queued behind the first
    first.answer.set()
    assert first_later() == [{1}] and second_later() == [{2}]
    assert len([t for t in threading.enumerate() if t.name.startswith("gpuenergy-processes")]) == 1



def test_a_figure_tried_before_its_publications_does_not_wait_for_the_ends_process_list(wall_backend, monkeypatch):
    """Between tests every pending figure is tried at no cost: a try that finds the publications still
    to come returns at once, even while the library is still answering the end's question; the
    figure, once its publications are there, names what that answer listed."""
    from pytest_gpuenergy.meter import EnergyMeter

    gpu = wall_backend.select(None)[0]
    answer = threading.Event()
    listed = gpu.processes

    def slow_processes() -> list[int]:
        if threading.current_thread().name.startswith("gpuenergy-processes"):
            assert answer.wait(10)
            return [*listed(), 4242]
        return listed()

    monkeypatch.setattr(gpu, "processes", slow_processes)
    pending = []
    meter = EnergyMeter(wall_backend, [gpu], on_result=pending.append)
    with meter:
        time.sleep(0.01)
    started = time.monotonic()
    assert pending[0].try_resolve() is None               # the publications after it are still to come
    assert time.monotonic() - started < 1.0
    answer.set()
    notes = meter.result.notes
    assert any("also used by process 4242 " in note for note in notes), notes


def test_a_regions_start_does_not_wait_for_the_library_and_its_list_is_named_in_the_figure(wall_backend, monkeypatch):
    """On a real GPU the library's list waits behind the recorder's energy read (2.4 ms on an H200):
    a region's start asks in the background, the test goes on, and a process listed at the start
    alone (gone by the end) is still named in the figure."""
    from pytest_gpuenergy.meter import EnergyMeter

    gpu = wall_backend.select(None)[0]
    answer = threading.Event()
    listed = gpu.processes
    calls: list[str] = []

    def slow_processes() -> list[int]:
        calls.append(threading.current_thread().name)
        assert answer.wait(10)
        return [*listed(), 4242] if len(calls) == 1 else listed()     # 4242 at the start only

    monkeypatch.setattr(gpu, "processes", slow_processes)
    pending = []
    meter = EnergyMeter(wall_backend, [gpu], on_result=pending.append)
    started = time.monotonic()
    with meter:
        entered_s = time.monotonic() - started
        time.sleep(0.01)
    assert entered_s < 1.0 and time.monotonic() - started < 2.0     # neither edge waited for the 10 s answer
    assert all(name.startswith("gpuenergy-processes") for name in calls) and calls
    answer.set()
    notes = meter.result.notes
    assert any("also used by process 4242 " in note for note in notes), notes


def _list_in_child(queue: Any) -> None:
    gpu = Listed(31337)
    queue.put(other_processes_later([gpu])())


def test_a_forked_child_asks_on_a_thread_of_its_own():
    """The thread that asks belongs to the process that started it: a child forked after a region
    (a test's own multiprocessing) asks on its own, rather than waiting for a thread it lacks."""
    other_processes_later([Listed(1)])()                      # this process's thread is running
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    child = context.Process(target=_list_in_child, args=(queue,))
    child.start()
    try:
        assert queue.get(timeout=10) == [{31337}]
    finally:
        child.join(10)
        if child.is_alive():        # waiting for a thread it lacks: never leave it behind
            child.kill()
            child.join()
    assert child.exitcode == 0


def test_another_devices_list_is_never_reused():
    """Two simulated machines in one process have GPUs of the same UUID: each device keeps its own list."""
    first, second = Listed(4242), Listed()
    assert asked_now([first], now=50.0) == [{4242}]
    assert asked_now([second], reuse_s=PROCESS_LIST_REUSE_S, now=50.01) == [set()]
    assert (first.asked, second.asked) == (1, 1)


@pytest.mark.parametrize("work_s, tried_after_one", [
    (0.005, False), (0.05, False), (0.35, True),
    pytest.param(0.0001, True, marks=pytest.mark.sim_gpus("K80"), id="sampled-power"),  # 5 ms on a K80
])
def test_a_figure_is_not_worked_out_before_the_publications_it_needs_can_be_there(
        backend, monkeypatch, work_s, tried_after_one):
    """Between tests every pending figure is tried without waiting (``try_resolve``). A region shorter
    than the energy counter's period (100 ms) needs two publications after it, a longer one (or any
    region of a GPU whose power is sampled, a K80: no counter) one. It is not worked out (in vain,
    again at every test) until a read began once the last of them is surely out: with the lattice
    known, just after its tick (``publications_due``: within the period before it, sooner than a
    fixed number of periods after the region's end); then the figure is there."""
    from pytest_gpuenergy.meter import EnergyMeter, region

    from helpers import declare

    worked: list[int] = []
    integrate = region._integrate
    monkeypatch.setattr(region, "_integrate", lambda *args, **kwargs: worked.append(1) or integrate(*args, **kwargs))
    pending: list[PendingResult] = []
    meter = EnergyMeter(backend, backend.all_gpus[:1], on_result=pending.append)
    with meter:
        declare(work_s)
    recorder, (t0, t1) = meter.recorders[0], meter.last_region
    period, needed = recorder.period_s, 1 if tried_after_one else 2
    due = region.publications_due(recorder, t0, t1, period)
    assert recorder.learner.lattice is not None                     # learned: the due moment is its tick's
    assert t1 + (needed - 1) * period < due < t1 + (needed + 0.05) * period

    while backend.clock() + 0.002 < due:            # the virtual clock on to just before it
        backend.sleep_until(backend.clock() + 0.002)
    if not recorder.has_read_since(due):
        assert pending[0].try_resolve() is None and not worked
    while not recorder.has_read_since(due):         # ...and on until a read began after it
        backend.sleep_until(backend.clock() + 0.002)
    found = pending[0].try_resolve()
    assert worked                                   # tried once its publications can be there
    if found is None and needed == 1:               # a long region's tail may need the power after it
        while not recorder.has_read_since(due + period):
            backend.sleep_until(backend.clock() + 0.002)
        found = pending[0].try_resolve()
    assert found is not None and 0 <= found.ets_low_j <= found.ets_j <= found.ets_high_j and found.ets_j > 0


def test_the_bound_so_far_holds_the_figure_worked_out_later(wall_backend):
    """What a budget's verdict may use at once (``PendingResult.at_most``: each GPU's ETS at the upper
    end of its bound from the reads so far, dated by the reads alone) holds the figure worked out
    later, estimate and bound, for regions of 2-300 ms in real time."""
    import random

    from pytest_gpuenergy.meter import EnergyMeter

    from helpers import spin

    rng = random.Random(5)
    pending: list[PendingResult] = []
    meter = EnergyMeter(wall_backend, wall_backend.all_gpus[:1], on_result=pending.append)
    so_far = []
    for _ in range(8):
        with meter:
            spin(rng.choice([0.002, 0.005, 0.02, 0.08, 0.15, 0.3]))
        early = pending[-1].at_most()
        assert early is not None and not pending[-1].resolved
        so_far.append(early.per_gpu[0].repetitions[0])
    for early_rep, result in zip(so_far, pending):
        final = result.resolve().per_gpu[0].repetitions[0]
        assert early_rep.ets_j == early_rep.ets_high_j and early_rep.time_s == final.time_s
        assert early_rep.ets_low_j - 1e-9 <= final.ets_low_j <= final.ets_j <= final.ets_high_j <= early_rep.ets_high_j + 1e-9

