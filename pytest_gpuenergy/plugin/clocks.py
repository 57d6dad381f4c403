"""The pytest glue of the second knob: the ``gpu_clocks`` marker and the ``gpu_clock_cap`` fixture.

``plugin.py`` imports the fixture (so pytest finds it in the registered plugin) and calls
``clock_params`` from its ``pytest_generate_tests``: a test that uses both ``gpu_power_cap`` and
``gpu_clock_cap`` runs over the cross product, with ids like ``[60%-clk50%]`` (power first).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from ..errors import CapSyntaxError
from ..gpu.clocks import ClockCap, ClockSpec, parse_clocks
from .knobs import held_setting, marker_settings

SKIPPED_CLOCK = "energy.skipped_clock"     # user property on a case skipped for its clock cap

MARKER = ("gpu_clocks(*clocks): run this test at these SM clock caps (MHz, '50%' of the maximum SM clock, "
          "'max') instead of --gpu-clocks")


def marker_clocks(node: Any) -> list[ClockSpec] | None:
    """The ``gpu_clocks`` marker's caps, or None without one; a bad value raises CapSyntaxError."""
    return marker_settings(node, "gpu_clocks", parse_clocks, "clock cap", "1200, '50%'")


def clock_params(metafunc: pytest.Metafunc, session_clocks: tuple[ClockSpec, ...]) -> str | None:
    """Parametrize ``gpu_clock_cap``; returns a marker problem to report instead (None when fine)."""
    if "gpu_clock_cap" not in metafunc.fixturenames:
        return None
    try:
        clocks = marker_clocks(metafunc.definition)
    except CapSyntaxError as exc:
        return f"{metafunc.definition.nodeid}: {exc}"
    if clocks is None:
        clocks = list(session_clocks)
    if clocks:
        metafunc.parametrize("gpu_clock_cap", clocks, indirect=True, ids=[c.label for c in clocks])
    return None


@pytest.fixture
def gpu_clock_cap(request: pytest.FixtureRequest, _gpuenergy_lease: None) -> Iterator[ClockCap]:
    """Locks this case's SM clock cap on the selected GPUs and restores their clocks after the test.

    Without ``--gpu-clocks`` (or a ``gpu_clocks`` marker) nothing is changed and the value
    describes the GPUs' clocks as they are (``label == "current"``).
    """
    from .hooks import SESSION_KEY  # the plugin imports this module: import it back lazily

    session = request.config.stash[SESSION_KEY]
    spec: ClockSpec | None = getattr(request, "param", None)
    yield from held_setting(request, session, session.clock_capper(), spec, SKIPPED_CLOCK,
                            lambda clock: setattr(session, "active_clock", clock))
