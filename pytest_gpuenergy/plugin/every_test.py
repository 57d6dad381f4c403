"""``--energy-all``: every test's call phase is one measured region, with no test rewritten.

Registered as a plugin of its own only when the option is on, so that a session without it pays
nothing: its autouse fixture holds the test's GPUs (as the plugin's fixtures do), applies the
case's power cap where the test does not take ``gpu_power_cap`` itself (with ``--gpu-caps`` every
test runs once per cap), and gives the test a meter whose region ``hooks.pytest_runtest_call``
opens and closes around the call. A test that takes ``energy_meter`` keeps its own regions.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

from ..gpu.specs import parse_caps
from .fixtures import held_gpus, test_session
from .knobs import Knob, held_setting, knob_marker, uses_plugin_fixture
from .markers import settings_of

if TYPE_CHECKING:
    from ..meter import EnergyMeter
    from .session import EnergySession

FIXTURE = "_gpuenergy_every_test"
# The power cap of a test that does not take gpu_power_cap: the same marker and option, another fixture.
EVERY_TEST_KNOB = Knob(FIXTURE, "gpu_caps", "--gpu-caps", parse_caps, "cap", "150, '60%'", "energy.skipped_cap",
                       spares_named_results=True)
METER_KEY = pytest.StashKey["EnergyMeter"]()
LEASE_FIXTURE = "_gpuenergy_lease"      # the fixtures.py fixture that holds a test's GPUs


class EveryTest:
    """The plugin object ``--energy-all`` registers (its fixture is found on it)."""

    @pytest.fixture(autouse=True)
    def _gpuenergy_every_test(self, request: pytest.FixtureRequest) -> Iterator[None]:
        session = test_session(request)
        lease = None
        if LEASE_FIXTURE in request.fixturenames:      # a fixture of the plugin that the test takes holds them
            request.getfixturevalue(LEASE_FIXTURE)
        else:
            lease = held_gpus(request, session)
            next(lease)                         # the test's GPUs held (or the test skipped or failed)
        try:
            yield from self._measured(request, session)
        finally:
            if lease is not None:
                lease.close()                   # the GPUs let go (a figure that could not be worked out fails the test)

    @staticmethod
    def _measured(request: pytest.FixtureRequest, session: EnergySession) -> Iterator[None]:
        setting = None
        caps_apply = hasattr(request, "param") or session.options.caps or knob_marker(request.node, EVERY_TEST_KNOB)
        if caps_apply and not uses_plugin_fixture(request.node, "gpu_power_cap"):
            setting = held_setting(request, session, session.capper(), EVERY_TEST_KNOB,
                                   lambda cap: setattr(session, "active_cap", cap))
            next(setting)                       # the cap applied (or the GPUs described as they are)
        try:
            if not uses_plugin_fixture(request.node, "energy_meter"):
                settings = settings_of(request.node)
                request.node.stash[METER_KEY] = session.meter(
                    request.node.nodeid, compute_bound=settings.get("compute_bound"),
                    min_time_s=settings.get("min_time"), work=settings.get("work"))
            yield
        finally:
            if METER_KEY in request.node.stash:
                del request.node.stash[METER_KEY]
            if setting is not None:
                setting.close()                 # the limit back (a failure to restore fails the test)


def meter_of(item: pytest.Item) -> EnergyMeter | None:
    """The meter ``--energy-all`` gave this test, if it measures the test's call phase."""
    return item.stash.get(METER_KEY, None)
