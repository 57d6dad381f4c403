"""gate/budget_file.py on its own: how a written budget is rounded (four figures, never below its value)."""

from __future__ import annotations

import pytest

from pytest_gpuenergy.gate.budget_file import _round_up


@pytest.mark.parametrize(("value", "written"), [
    (15.28, 15.28),                      # a round figure stays
    (15.2801, 15.29),                    # anything above goes up, never down
    (15.280000000000001, 15.29),         # float noise above a round figure: still never below the value
    (12345.6, 12350.0),
    (0.0012344, 0.001235),
    (1234567.0, 1235000.0),
])
def test_a_budget_is_rounded_up_to_four_figures_and_never_below_its_value(value: float, written: float) -> None:
    assert _round_up(value) == written and _round_up(value) >= value


@pytest.mark.parametrize("value", [0.0, -1.0, float("inf")])
def test_values_without_four_figures_are_left_alone(value: float) -> None:
    assert _round_up(value) == value
