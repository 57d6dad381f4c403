"""meter/recorder.py's real-time driver on its own: the thread that reads a GPU while a test runs.

The simulator's virtual clock drives recorders without a thread (its PlanDriver), so the end-to-end
tests of test_meter.py rarely meet this one; on a real GPU it is the only driver."""

from __future__ import annotations

import sys
import threading
import time
from types import SimpleNamespace

import pytest

from pytest_gpuenergy.errors import DeviceTransientError, MeasurementError
from pytest_gpuenergy.meter.recorder import Recorder, ThreadDriver
from pytest_gpuenergy.meter.results import COUNTER


def recorder_on(backend) -> Recorder:
    return Recorder(backend.all_gpus[0], backend.clock, COUNTER, seed="slot0")


def test_the_driver_is_a_named_daemon_thread_that_stop_joins(wall_backend):
    recorder = recorder_on(wall_backend)
    driver = ThreadDriver(recorder)
    assert driver.name == "gpuenergy-recorder-0" and driver.daemon is True
    assert driver.cpu_s() == 0.0                                   # not started: no thread, no CPU
    driver.start()
    driver.wait_until(recorder.clock() + 0.15)
    assert recorder.has_read_since(recorder.clock() - 0.15) and recorder.error is None
    driver.stop()
    assert not driver.is_alive()                                   # joined, not merely asked to stop


def test_waiting_for_a_read_returns_once_one_exists_and_not_long_after(wall_backend):
    recorder = recorder_on(wall_backend)
    driver = ThreadDriver(recorder)
    driver.start()
    try:
        started = time.perf_counter()
        moment = recorder.clock() + 0.2
        driver.wait_until(moment)
        waited = time.perf_counter() - started
        assert recorder.has_read_since(moment)
        assert 0.19 <= waited < 1.0
    finally:
        driver.stop()


def test_a_schedule_that_fails_hands_its_error_to_the_meter_and_wakes_the_waiters(wall_backend, monkeypatch):
    recorder = recorder_on(wall_backend)
    boom = RuntimeError("the driver fell over")

    def failing():
        yield recorder.clock() + 0.01
        raise boom

    monkeypatch.setattr(recorder, "schedule", failing)
    driver = ThreadDriver(recorder)
    driver.start()
    driver.wait_until(recorder.clock() + 5.0)                      # returns at once on the error, not in 5 s
    driver.join(1.0)
    assert not driver.is_alive() and recorder.error is boom


def test_a_stopped_driver_stops_even_while_waiting_for_its_next_wake_up(wall_backend, monkeypatch):
    recorder = recorder_on(wall_backend)
    woken = []

    def far():
        yield recorder.clock() + 30.0
        woken.append(True)

    monkeypatch.setattr(recorder, "schedule", far)
    driver = ThreadDriver(recorder)
    driver.start()
    started = time.perf_counter()
    driver.stop()
    assert time.perf_counter() - started < 1.0 and not driver.is_alive() and woken == []


def test_a_driver_stopped_from_its_own_thread_does_not_wait_for_itself(wall_backend, monkeypatch):
    recorder = recorder_on(wall_backend)
    driver = ThreadDriver(recorder)

    def stop_self():
        yield recorder.clock()
        driver.stop()                                              # joining itself would raise RuntimeError
        yield recorder.clock()

    monkeypatch.setattr(recorder, "schedule", stop_self)
    driver.start()
    driver.join(2.0)
    assert not driver.is_alive() and recorder.error is None


def test_a_late_wake_up_is_remembered_and_fades_by_a_fifth_each_time(wall_backend):
    recorder = recorder_on(wall_backend)
    recorder.woke(0.010)
    recorder.woke(0.0)
    recorder.woke(0.0)
    assert recorder._latency_s == pytest.approx(0.010 * 0.8 * 0.8)
    recorder.woke(0.020)
    assert recorder._latency_s == pytest.approx(0.020)
    assert threading.current_thread() is threading.main_thread()


def test_the_driver_tells_the_recorder_how_late_it_woke_not_when(wall_backend):
    # The lateness is a few milliseconds (a second at most on a loaded host); the moment itself is
    # ~1.8e9 s on this clock and would make every read start a fifth of a period early for good.
    recorder = recorder_on(wall_backend)
    told: list[float] = []
    woke = recorder.woke
    recorder.woke = lambda late_s: (told.append(late_s), woke(late_s))[1]
    driver = ThreadDriver(recorder)
    driver.start()
    try:
        driver.wait_until(recorder.clock() + 0.25)
    finally:
        driver.stop()
    assert told and all(-0.01 <= late_s < 1.0 for late_s in told), told
    assert recorder._latency_s < 1.0


def test_a_driver_stopped_does_not_run_its_plan_again_even_for_a_wake_up_already_due(wall_backend, monkeypatch):
    # A wake-up in the past is not waited for (no sleep, so no stop seen there): the stop must still
    # end the plan before it is resumed, or a plan that falls behind would read on after stop().
    recorder = recorder_on(wall_backend)
    driver = ThreadDriver(recorder)
    resumed: list[bool] = []

    def stop_then_behind():
        driver.stop()
        yield recorder.clock() - 1.0                               # already due: no wait
        resumed.append(True)

    monkeypatch.setattr(recorder, "schedule", stop_then_behind)
    driver.start()
    driver.join(2.0)
    assert not driver.is_alive() and resumed == [] and recorder.error is None


class SilentChanged:
    """A recorder's ``changed`` that nobody notifies: each wait lasts its whole timeout, on a fake clock."""

    def __init__(self, now: list[float]) -> None:
        self.now = now
        self.timeouts: list[float | None] = []

    def __enter__(self) -> SilentChanged:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def wait(self, timeout: float | None = None) -> bool:
        self.timeouts.append(timeout)
        assert timeout is not None, "waits for a notification that may never come"
        assert len(self.timeouts) <= 20, f"spins: {self.timeouts[:5]}..."
        self.now[0] += max(timeout, 0.0)
        return False


@pytest.mark.parametrize("moment, read_at", [(100.5, 100.504),    # the moment ahead: sleep until just past it
                                             (99.0, 100.03)],     # already past, no read yet: look again every 10 ms
                         ids=["moment-ahead", "moment-past"])
def test_a_waiter_looks_again_on_its_own_soon_after_the_moment_even_if_never_notified(monkeypatch, moment, read_at):
    # A read it was not told of (or a thread that died just after its last notification) must not
    # leave wait_until asleep: it wakes within 10 ms of the moment, then every 10 ms. Fake clock, no real waiting.
    now = [100.0]
    changed = SilentChanged(now)
    recorder = SimpleNamespace(gpu=SimpleNamespace(index=0), clock=lambda: now[0], changed=changed, error=None,
                               has_read_since=lambda since: now[0] >= read_at >= since)
    driver = ThreadDriver(recorder)
    monkeypatch.setattr(driver, "is_alive", lambda: True)
    driver.wait_until(moment)
    assert read_at <= now[0] <= read_at + 0.011, (now[0], changed.timeouts)
    assert all(timeout is not None and timeout > 0.0 for timeout in changed.timeouts), changed.timeouts


def test_cpu_time_is_zero_where_the_host_cannot_tell_a_threads_cpu_time(wall_backend, monkeypatch):
    recorder = recorder_on(wall_backend)

    def nothing():
        return
        yield

    monkeypatch.setattr(recorder, "schedule", nothing)
    driver = ThreadDriver(recorder)
    driver.start()
    driver.join(2.0)
    assert driver.ident is not None

    def refused(ident: int) -> int:
        raise OSError("no CPU clock for that thread")

    monkeypatch.setattr(time, "pthread_getcpuclockid", refused)
    assert driver.cpu_s() == 0.0
    monkeypatch.delattr(time, "pthread_getcpuclockid")                # a platform without it
    assert driver.cpu_s() == 0.0


class FailingGpu:
    """A GPU whose counter reads fail with a transient error until told otherwise."""

    uuid, label, index, counter_period_s, power_window_s = "GPU-failing", "GPU 0 (failing)", 0, 0.1, 0.0

    def __init__(self) -> None:
        self.error = DeviceTransientError("NVML_ERROR_TIMEOUT")
        self.fails = True

    def max_limit_mw(self) -> int:
        return 700_000

    def energy_mj(self) -> int:
        if self.fails:
            raise self.error
        return 1_000


def test_reads_that_fail_are_tried_again_for_two_seconds_then_stop_the_recorder_naming_the_error():
    now = [10.0]
    gpu = FailingGpu()
    recorder = Recorder(gpu, lambda: now[0], COUNTER, seed="slot0")  # type: ignore[arg-type]
    for moment in (10.0, 11.0, 12.0):                 # 2.0 s of failures in a row: not over two seconds yet
        now[0] = moment
        assert recorder._read() is False and recorder.last_error is gpu.error
    now[0] = 12.001
    with pytest.raises(MeasurementError) as raised:
        recorder._read()
    assert str(raised.value) == ("reading the energy of GPU 0 (failing) failed for over 2 s: NVML_ERROR_TIMEOUT")


def test_a_read_that_succeeds_starts_the_two_seconds_of_failures_over():
    now = [10.0]
    gpu = FailingGpu()
    recorder = Recorder(gpu, lambda: now[0], COUNTER, seed="slot0")  # type: ignore[arg-type]
    recorder._read()                                   # fails at 10.0
    gpu.fails, now[0] = False, 11.5
    recorder._read()                                   # succeeds
    gpu.fails = True
    for moment in (12.0, 13.5, 14.0):                  # failing since 12.0: 2.0 s at 14.0, still tried
        now[0] = moment
        assert recorder._read() is False
    now[0] = 14.5
    with pytest.raises(MeasurementError, match="failed for over 2 s"):
        recorder._read()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="a thread's user time is read from /proc (Linux)")
def test_a_recorders_user_cpu_time_is_its_threads_and_none_without_one(wall_backend, monkeypatch):
    recorder = recorder_on(wall_backend)
    assert recorder.user_cpu_s() is None                            # no driver yet
    burnt = threading.Event()

    def burn_then_sleep():
        end = time.thread_time() + 0.3                              # 0.3 s of this thread's CPU, in user space
        while time.thread_time() < end:
            sum(range(1000))
        burnt.set()
        yield recorder.clock() + 60.0

    monkeypatch.setattr(recorder, "schedule", burn_then_sleep)
    driver = recorder.driver = ThreadDriver(recorder)
    assert driver.user_cpu_s() is None                              # not started: no thread to ask
    driver.start()
    try:
        assert burnt.wait(30.0)
        user_s = recorder.user_cpu_s()
        assert user_s is not None and 0.2 <= user_s <= 0.5, user_s  # clock ticks of 10 ms; kernel time not in it
        assert user_s == driver.user_cpu_s()
        # The thread's name sits in parentheses in /proc's stat and may itself hold them (a process
        # named so, or a thread renamed): the figures come after the last one.
        with open(f"/proc/self/task/{driver.native_id}/comm", "wb") as comm:
            comm.write(b"x) 1 2 3 (y)")
        assert recorder.user_cpu_s() == user_s
    finally:
        driver.stop()
