"""The pytest glue of the second knob: the ``gpu_clocks`` marker and the ``gpu_clock_cap`` fixture.

``hooks.py`` imports the fixture (so pytest finds it in the registered plugin) and parametrises it
with ``knobs.parametrize(..., CLOCK_KNOB, ...)``: a test that uses both ``gpu_power_cap`` and
``gpu_clock_cap`` runs over the cross product, with ids like ``[60%-clk50%]`` (power first).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

from ..gpu.specs import parse_clocks
from .fixtures import test_session
from .knobs import Knob, held_setting

if TYPE_CHECKING:
    from ..gpu.clocks import ClockCap

CLOCK_KNOB = Knob("gpu_clock_cap", "gpu_clocks", "--gpu-clocks", parse_clocks, "clock cap", "1200, '50%'",
                  "energy.skipped_clock")


@pytest.fixture
def gpu_clock_cap(request: pytest.FixtureRequest, _gpuenergy_lease: None) -> Iterator[ClockCap]:
    """Locks this case's SM clock cap on the selected GPUs and restores their clocks after the test.

    Without ``--gpu-clocks`` (or a ``gpu_clocks`` marker) nothing is changed and the value
    describes the GPUs' clocks as they are (``label == "current"``).
    """
    session = test_session(request)
    yield from held_setting(request, session, session.clock_capper(), CLOCK_KNOB,
                            lambda clock: setattr(session, "active_clock", clock))
