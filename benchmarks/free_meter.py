"""For ``energy_all_overhead.py``'s floor run: the plugin's pytest glue with its GPU work made free.

Loaded as a pytest plugin (``-p free_meter``, ``benchmarks/`` on ``PYTHONPATH``) beside
``--energy-all``, it replaces the three calls a test's measurement makes with ones that do nothing:
holding the test's GPUs (``EnergySession.lease``: the lock, the hand-over, the simulator's world
started over), the test's meter (its region's start and end) and working figures out
(``EnergySession.resolve``). What is left is what ``--energy-all`` costs a test before any GPU is
touched: the autouse fixture, the hook wrappers around the call and its report, the options and the
session's bookkeeping. No figure comes out of such a run (the tests pass, unmeasured): it is a
floor for the design, not a mode of the plugin.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any, Literal

import pytest


class _FreeRegion:
    def __enter__(self) -> _FreeRegion:
        return self

    def __exit__(self, *exc: Any) -> Literal[False]:
        return False


@contextlib.contextmanager
def _free_lease(self: Any, wanted: int | str = 1, test_id: str | None = None) -> Iterator[list[Any]]:
    yield []


def pytest_configure(config: pytest.Config) -> None:
    from pytest_gpuenergy.plugin.options import setting

    if not setting(config, "energy_all"):
        return          # the run it is compared with imports nothing more than a plain one
    from pytest_gpuenergy.plugin import session

    session.EnergySession.lease = _free_lease                                  # type: ignore[method-assign]
    session.EnergySession.meter = lambda self, *args, **kwargs: _FreeRegion()  # type: ignore[method-assign,assignment]
    session.EnergySession.resolve = lambda self, *, wait: []                   # type: ignore[method-assign]
