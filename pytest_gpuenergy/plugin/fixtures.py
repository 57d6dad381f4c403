"""The plugin's fixtures: ``gpu_power_cap`` and ``energy_meter`` (``gpu_clock_cap`` is with its knob in
``clocks.py``), and the lease of the test's GPUs they share. ``hooks.py`` imports them, so that pytest
finds them in the registered plugin.

A fixture is the first thing in a session that may need the GPUs: it opens them (``PluginState.start``)
if nothing did before, and every problem is one line that fails the test, never a traceback.
"""

from __future__ import annotations

from collections.abc import Generator, Iterator
from typing import TYPE_CHECKING

import pytest

from ..errors import GpuEnergyError
from ..gpu.specs import parse_caps
from .knobs import Knob, held_setting
from .markers import settings_of
from .state import state_of

if TYPE_CHECKING:
    from ..gpu.capping import PowerCap
    from ..meter import EnergyMeter
    from .session import EnergySession

HELD_KEY = pytest.StashKey[bool]()         # the test's GPUs are held now (``held_gpus``)
POWER_KNOB = Knob("gpu_power_cap", "gpu_caps", "--gpu-caps", parse_caps, "cap", "150, '60%'", "energy.skipped_cap")


def test_session(request: pytest.FixtureRequest) -> EnergySession:
    """The session, the GPUs open; fails the test in one line where they cannot be."""
    state = state_of(request.config)
    session = state.start(usage_errors=False) if state is not None else None
    if session is None:
        pytest.fail(state.unavailable if state is not None and state.unavailable else "pytest-gpuenergy is not configured",
                    pytrace=False)
    return session


@pytest.fixture
def _gpuenergy_lease(request: pytest.FixtureRequest) -> Iterator[None]:
    """Holds the test's GPUs for the whole test: one, or ``energy(gpus=N)`` (see ``EnergySession.lease``)."""
    if request.node.stash.get(HELD_KEY, False):
        yield       # --energy-all's fixture holds them (the test asked for a fixture late: request.getfixturevalue)
        return
    yield from held_gpus(request, test_session(request))


def held_gpus(request: pytest.FixtureRequest, session: EnergySession) -> Generator[None, None, None]:
    """The lease's steps: hold the test's GPUs, yield, let them go. ``_gpuenergy_lease`` is these steps
    as a fixture; ``--energy-all`` takes them in its own fixture where the test takes none of the
    plugin's (a fixture less per test: pytest's work for one costs about what the lease does)."""
    wanted = settings_of(request.node).get("gpus", 1)
    if wanted != "all" and wanted > len(session.gpus):
        pytest.skip(f"needs {wanted} GPUs; {len(session.gpus)} selected (--gpu-devices, CUDA_VISIBLE_DEVICES)")
    lease = session.lease(wanted, request.node.nodeid)
    problem = None
    try:
        lease.__enter__()
    except GpuEnergyError as exc:
        problem = str(exc)
    if problem is not None:      # failed outside the handler: one line, not a chained traceback
        pytest.fail(problem, pytrace=False)
    request.node.stash[HELD_KEY] = True
    try:
        yield
    finally:
        del request.node.stash[HELD_KEY]
        lease.__exit__(None, None, None)


@pytest.fixture
def gpu_power_cap(request: pytest.FixtureRequest, _gpuenergy_lease: None) -> Iterator[PowerCap]:
    """Applies this case's power cap to the selected GPUs and restores the previous limit after.

    Without ``--gpu-caps`` (or a ``gpu_caps`` marker) nothing is changed and the value describes
    the current limit.
    """
    session = test_session(request)
    yield from held_setting(request, session, session.capper(), POWER_KNOB,
                            lambda cap: setattr(session, "active_cap", cap))


@pytest.fixture
def energy_meter(request: pytest.FixtureRequest, _gpuenergy_lease: None) -> EnergyMeter:
    """Measures ETS, T and EDP of a block (``with energy_meter:``) or of ``measure(fn)``."""
    session = test_session(request)
    settings = settings_of(request.node)
    try:
        return session.meter(
            request.node.nodeid,
            compute_bound=settings.get("compute_bound"),
            min_time_s=settings.get("min_time"),
            work=settings.get("work"),
        )
    except GpuEnergyError as exc:
        problem = str(exc)
    pytest.fail(problem, pytrace=False)
