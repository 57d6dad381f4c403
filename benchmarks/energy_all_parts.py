"""Where ``--energy-all``'s time goes inside a session: a pytest plugin that times the parts of a test.

    GPUENERGY_PARTS_OUT=parts.json python -m pytest -p energy_all_parts --energy-all ...   (benchmarks/ on PYTHONPATH)

``energy_all_overhead.py --parts`` runs it once with ``--energy-all`` and once without. It times
pytest's setup, call and teardown of every test (as the outermost hook wrappers), and the plugin's
own calls a test makes: the GPU lock, the hand-over of the GPUs and (simulator) the world started
over, the meter and its recorders, a region's start and end, the running processes and the limit
read at its edges, working a figure out. Each wrapper costs about a microsecond, so a part's figure
is its own time give or take that; parts nest (a region's end includes the processes it lists),
so they do not add up. The session's end (every plugin's sessionfinish and terminal summary) is
timed as one part: paid once, but it works on every case, so it grows with the suite. Working
figures out is timed apart for the tries between tests (every test pays them) and the figures
waited for (at the end of a session, for the last tests' publications: the session pays that
once, though the table divides it by the tests too). In real time a region's
edges ask for the running processes on a thread of their own (since 2026-11-28): that part then
counts the thread's time, not the test's (it waits for the GIL there while a test runs Python).
Nothing is changed: every wrapped call runs as it would. The figures say where a real GPU's
milliseconds go, which the whole-process timing cannot.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import json
import os
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from typing import Any

import pytest

_total_s: dict[str, float] = defaultdict(float)
_calls: dict[str, int] = defaultdict(int)
_tests = [0]


def _timed(owner: Any, name: str, label: str, *, by_wait: bool = False) -> None:
    """Replace ``owner.name`` (a function or method) by one that adds its time to ``label``; with
    ``by_wait``, to ``label`` plus whether the call waited (its ``wait`` argument): figures tried
    between tests cost every test, the ones waited for at the end of a session cost the session once."""
    original: Callable[..., Any] | None = owner.__dict__.get(name) if isinstance(owner, type) else getattr(owner, name, None)
    if original is None or getattr(original, "_timed_part", False):
        return

    @functools.wraps(original)
    def timed(*args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            key = label
            if by_wait:
                key += ": waited for" if kwargs.get("wait", True) else ": tried between tests"
            _total_s[key] += time.perf_counter() - started
            _calls[key] += 1

    timed._timed_part = True  # type: ignore[attr-defined]
    setattr(owner, name, timed)


def _wrap_parts() -> None:
    from pytest_gpuenergy.gpu import amd, device, locks, nvidia
    from pytest_gpuenergy.meter import energy_meter, recorder, region
    from pytest_gpuenergy.plugin import session

    _timed(locks, "_acquire", "GPU lock: take")
    _timed(locks, "_release", "GPU lock: let go")
    for cls in [device.Backend, *device.Backend.__subclasses__()]:
        _timed(cls, "use", "backend: hand the GPUs over")
        _timed(cls, "begin_test", "backend: a test's world (simulator)")
        _timed(cls, "synchronize", "backend: synchronise")
    for cls in (nvidia.NvmlGpu, amd.AmdGpu):
        _timed(cls, "processes", "library: running processes")
        _timed(cls, "enforced_limit_mw", "library: enforced limit")
        _timed(cls, "energy_mj", "library: energy counter")
    _timed(session.EnergySession, "meter", "session: a test's meter")
    _timed(session.EnergySession, "resolve", "session: figures worked out", by_wait=True)
    _timed(recorder.Recorders, "of", "meter: recorder (started)")
    _timed(energy_meter.EnergyMeter, "__enter__", "meter: region start")
    _timed(energy_meter.EnergyMeter, "__exit__", "meter: region end")
    _timed(region, "_others", "region: other processes (answers taken)")
    _timed(region, "resolve_reading", "region: its figure", by_wait=True)


def pytest_configure(config: pytest.Config) -> None:
    _wrap_parts()


def _phase(label: str) -> Callable[..., Any]:
    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def hook(item: pytest.Item, *args: Any) -> Iterator[None]:
        started = time.perf_counter()
        try:
            return (yield)
        finally:
            _total_s[label] += time.perf_counter() - started
            _calls[label] += 1
            if label == "pytest: call":
                _tests[0] += 1
    return hook


pytest_runtest_setup = _phase("pytest: setup")
pytest_runtest_call = _phase("pytest: call")
pytest_runtest_teardown = _phase("pytest: teardown")

_SESSION_END = "pytest: the session's end (once; grows with the cases)"


@contextlib.contextmanager
def _timed_once(label: str) -> Iterator[None]:
    started = time.perf_counter()
    try:
        yield
    finally:
        _total_s[label] += time.perf_counter() - started
        _calls[label] += 1


# The end of a session (every plugin's sessionfinish and terminal summary: the figures waited for, the
# saved run, the gate, the tables) is paid once, but it works on every case, so it grows with the suite:
# a one-test suite's "once a session" misses it, and the figure a test then holds it.
@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> Iterator[None]:
    with _timed_once(_SESSION_END):
        return (yield)


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> Iterator[None]:
    with _timed_once(_SESSION_END):
        return (yield)


@atexit.register
def _write() -> None:
    out = os.environ.get("GPUENERGY_PARTS_OUT")
    if not out:
        return
    parts = {label: {"calls": _calls[label], "total_s": _total_s[label]} for label in sorted(_total_s)}
    with open(out, "w", encoding="utf-8") as file:
        json.dump({"tests": _tests[0], "parts": parts}, file, indent=1)
