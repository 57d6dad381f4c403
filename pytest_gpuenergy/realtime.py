"""The host's clocks as they really run, whatever a test does to ``time``.

freezegun (and pytest-freezer's ``freezer`` fixture, ``@pytest.mark.freeze_time``) replaces
``time.monotonic``, ``time.perf_counter`` and ``time.time`` while a test runs: the ``time`` module's
attributes, and every module's own name bound to them (``from time import monotonic``), in every
thread. time-machine moves ``time.time`` itself (the C function, wherever it is held), not the
monotonic clocks. The plugin times regions, waits for locks and for the counter's publications during
a test's setup, call and teardown; on a frozen clock such a wait never ended (a suite with one
``freezer`` or ``time_machine`` test hung under ``--energy-all``, 2026-11-28).

So the clocks here are the monotonic ones as they were when the plugin was imported, before any
test ran, kept where freezegun does not look (it replaces module attributes only), and the wall
time is the epoch at that import plus the monotonic clock since.
"""

from __future__ import annotations

import time
from types import SimpleNamespace

_REAL = SimpleNamespace(monotonic=time.monotonic, perf_counter=time.perf_counter, sleep=time.sleep)
_EPOCH_AT_MONOTONIC_ZERO = time.time() - time.monotonic()


def monotonic() -> float:
    return float(_REAL.monotonic())


def perf_counter() -> float:
    return float(_REAL.perf_counter())


def wall_time() -> float:
    """Seconds since the epoch (as ``time.time``): dates written to files, the simulator's wall clock.
    Processes agree on it to within microseconds: the monotonic clock is the system's."""
    return _EPOCH_AT_MONOTONIC_ZERO + float(_REAL.monotonic())


def sleep(seconds: float) -> None:
    _REAL.sleep(seconds)
