"""The plugin's clocks run on while a test stops time (freezegun, pytest-freezer, time-machine)."""

from __future__ import annotations

import datetime
import fcntl
import os
import time

import pytest
import time_machine
from freezegun import freeze_time

from pytest_gpuenergy import realtime
from pytest_gpuenergy.fileio import wait_for_lock


def test_the_clocks_run_on_while_freezegun_stops_time():
    with freeze_time("2020-01-01"):
        frozen = time.monotonic(), time.perf_counter(), time.time()
        started = realtime.monotonic(), realtime.perf_counter(), realtime.wall_time()
        realtime.sleep(0.02)
        assert (time.monotonic(), time.perf_counter(), time.time()) == frozen      # what a test sees
        ended = realtime.monotonic(), realtime.perf_counter(), realtime.wall_time()
    for before, after in zip(started, ended):
        assert 0.015 <= after - before <= 1.0
    assert abs(ended[2] - time.time()) < 1.0       # the real epoch, not 2020's


def test_the_wall_time_runs_on_while_time_machine_stops_it():
    with time_machine.travel(datetime.datetime(1985, 10, 26, tzinfo=datetime.timezone.utc), tick=False):
        assert time.time() < 1e9
        started = realtime.wall_time()
        realtime.sleep(0.02)
        ended = realtime.wall_time()
    assert 0.015 <= ended - started <= 1.0 and abs(ended - time.time()) < 1.0


@pytest.mark.timeout(60)      # on a stopped clock the wait would never end
def test_a_lock_wait_ends_at_its_timeout_while_freezegun_stops_time(tmp_path):
    path = tmp_path / "held.lock"
    holder = os.open(path, os.O_RDWR | os.O_CREAT)
    waiter = os.open(path, os.O_RDWR)
    fcntl.flock(holder, fcntl.LOCK_EX)
    try:
        with freeze_time("2020-01-01"):
            started = realtime.monotonic()
            with pytest.raises(TimeoutError):
                wait_for_lock(waiter, 0.2, on_timeout=lambda holder_text: TimeoutError(holder_text))
            assert realtime.monotonic() - started < 5.0
    finally:
        os.close(waiter)
        os.close(holder)
