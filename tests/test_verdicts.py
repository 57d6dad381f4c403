"""Tests of ``pytest_gpuenergy/gate/verdicts.py``: the verdict on one metric and how a change reads.

They exist for the mutation testing of the gate (benchmarks/mutation.py): the rule is decided on
plain ``Evidence`` here, each edge of it exactly (a change equal to the threshold, a bound at 0,
a half-width equal to the threshold), with the words a user reads in the failure message and the
hint that says what would turn "cannot tell" into a decision.
"""

from __future__ import annotations

import pytest

from pytest_gpuenergy.gate.verdicts import (
    DECREASE,
    IMPROVEMENT,
    INCONCLUSIVE,
    INCREASE,
    REGRESSION,
    UNCHANGED,
    Evidence,
    bound_text,
    classify,
    confidence_text,
    inconclusive_hint,
    interval_text,
    pct_text,
)

UNGATED = " (not gated: no threshold for this metric)"
BOUNDS = "but within the two measurements' own error bounds"


def _tested(change: float, low: float, high: float, *, bounds: bool = False, confidence: float = 0.99) -> Evidence:
    return Evidence(change, low, high, confidence, within_measurement_bounds=bounds)


def _untested(change: float, *, bounds: bool = False) -> Evidence:
    return Evidence(change, None, None, 0.99, within_measurement_bounds=bounds)


# -- a gated metric with a test -------------------------------------------------------------------


def test_a_real_change_above_the_threshold_is_a_regression():
    assert classify(_tested(8.0, 1.0, 15.0), 5.0) == (
        REGRESSION, "above the 5 % threshold and a real increase at 99 % confidence")


def test_a_real_change_below_minus_the_threshold_is_an_improvement():
    assert classify(_tested(-8.0, -15.0, -1.0, confidence=0.95), 5.0) == (
        IMPROVEMENT, "below -5 % and a real decrease at 95 % confidence")


def test_a_change_of_exactly_the_threshold_is_no_regression_nor_improvement():
    assert classify(_tested(5.0, 4.0, 6.0), 5.0)[0] == UNCHANGED
    assert classify(_tested(-5.0, -6.0, -4.0), 5.0)[0] == UNCHANGED


def test_a_bound_of_exactly_zero_is_not_a_real_change():
    assert classify(_tested(8.0, 0.0, 16.0), 5.0)[0] == INCONCLUSIVE     # half-width 8 > 5
    assert classify(_tested(6.0, 0.0, 9.0), 5.0)[0] == UNCHANGED         # half-width 4.5
    assert classify(_tested(-6.0, -9.0, 0.0), 5.0)[0] == UNCHANGED


def test_an_interval_wider_than_the_threshold_cannot_tell_and_shows_the_interval():
    verdict, why = classify(_tested(1.0, -4.5, 6.0), 5.0)      # half-width 5.25
    assert verdict == INCONCLUSIVE
    assert why == ("cannot tell: the interval [-4.5, +6.0] is wider than ±5 % and the change is not real "
                   "at 99 % confidence")


def test_a_half_width_of_exactly_the_threshold_is_precise_enough():
    assert classify(_tested(3.0, -2.0, 8.0), 5.0) == (UNCHANGED, "within the 5 % threshold, at 99 % confidence")


def test_a_large_change_that_is_not_real_cannot_tell():
    assert classify(_tested(24.8, -95.0, 2000.0), 5.0)[0] == INCONCLUSIVE
    assert "[< -90, > +1000]" in classify(_tested(24.8, -95.0, 2000.0), 5.0)[1]


def test_a_zero_threshold_makes_every_real_change_a_verdict():
    assert classify(_tested(0.5, 0.1, 0.9), 0.0)[0] == REGRESSION
    assert classify(_tested(-0.5, -0.9, -0.1), 0.0)[0] == IMPROVEMENT


def test_a_regression_the_meter_bounds_explain_cannot_tell():
    verdict, why = classify(_tested(8.0, 1.0, 15.0, bounds=True), 5.0)
    assert verdict == INCONCLUSIVE
    assert why == f"cannot tell: above the 5 % threshold and a real increase at 99 % confidence, {BOUNDS}"


def test_an_improvement_the_meter_bounds_explain_cannot_tell():
    verdict, why = classify(_tested(-8.0, -15.0, -1.0, bounds=True), 5.0)
    assert verdict == INCONCLUSIVE and why.startswith("cannot tell: below -5 % and a real decrease") and BOUNDS in why


def test_the_meter_bounds_leave_an_unchanged_verdict_alone():
    assert classify(_tested(1.0, -1.0, 3.0, bounds=True), 5.0) == (
        UNCHANGED, "within the 5 % threshold, at 99 % confidence")


def test_a_fractional_threshold_is_written_as_given():
    assert classify(_tested(3.0, 1.0, 5.0), 2.5)[1] == "above the 2.5 % threshold and a real increase at 99 % confidence"


# -- an ungated metric with a test ----------------------------------------------------------------


def test_a_real_change_of_an_ungated_metric_is_an_increase_not_a_regression():
    assert classify(_tested(30.0, 20.0, 40.0), None) == (
        INCREASE, f"above 2 % and a real increase at 99 % confidence{UNGATED}")
    assert classify(_tested(-30.0, -40.0, -20.0), None) == (
        DECREASE, f"below -2 % and a real decrease at 99 % confidence{UNGATED}")


def test_an_ungated_metric_is_inconclusive_by_the_size_of_the_change_not_the_interval():
    # a wide interval around a small change: unchanged, although the interval is far wider than 2 %
    assert classify(_tested(1.0, -30.0, 40.0), None) == (UNCHANGED, f"within 2 %, at 99 % confidence{UNGATED}")
    # a change above 2 % that is not real: cannot tell
    verdict, why = classify(_tested(3.0, -0.5, 6.5), None)
    assert verdict == INCONCLUSIVE and why.endswith(f"is not real at 99 % confidence{UNGATED}")
    assert classify(_tested(-3.0, -6.5, 0.5), None)[0] == INCONCLUSIVE
    assert classify(_tested(2.0, -0.5, 4.5), None)[0] == UNCHANGED      # exactly 2 %: not above it


def test_an_ungated_change_the_meter_bounds_explain_cannot_tell_and_says_it_is_ungated():
    assert classify(_tested(30.0, 20.0, 40.0, bounds=True), None) == (
        INCONCLUSIVE, f"cannot tell: above 2 % and a real increase at 99 % confidence, {BOUNDS}{UNGATED}")


# -- no test: one repetition on a side ------------------------------------------------------------


@pytest.mark.parametrize("change, threshold, expected", [
    (5.1, 5.0, (REGRESSION, "above the 5 % threshold")),
    (5.0, 5.0, (UNCHANGED, "within the 5 % threshold")),
    (-5.0, 5.0, (UNCHANGED, "within the 5 % threshold")),
    (-5.1, 5.0, (IMPROVEMENT, "below -5 %")),
    (2.5, None, (INCREASE, f"above 2 %{UNGATED}")),
    (-2.5, None, (DECREASE, f"below -2 %{UNGATED}")),
    (2.0, None, (UNCHANGED, f"within 2 %{UNGATED}")),
])
def test_without_a_test_the_size_of_the_change_alone_decides(change, threshold, expected):
    assert classify(_untested(change), threshold) == expected


def test_evidence_with_one_bound_missing_is_untested():
    assert not Evidence(10.0, 1.0, None, 0.99).tested and not Evidence(10.0, None, 20.0, 0.99).tested
    assert classify(Evidence(10.0, None, 20.0, 0.99), 5.0) == (REGRESSION, "above the 5 % threshold")


def test_without_a_test_a_change_the_meter_bounds_explain_cannot_tell():
    assert classify(_untested(10.0, bounds=True), 5.0) == (INCONCLUSIVE, f"cannot tell: above the 5 % threshold, {BOUNDS}")
    assert classify(_untested(-10.0, bounds=True), None)[0] == INCONCLUSIVE
    assert classify(_untested(1.0, bounds=True), 5.0) == (UNCHANGED, "within the 5 % threshold")


# -- the hint -------------------------------------------------------------------------------------


def test_the_hint_asks_for_more_sessions_when_their_noise_dominates():
    assert inconclusive_hint(5, 5, 4, True) == (
        "the noise between sessions dominates: save more sessions of the baseline (--energy-save; 4 saved runs so far)")


def test_the_hint_asks_for_repetitions_and_sessions_while_fewer_than_three_are_saved():
    assert inconclusive_hint(3, 4, 2, False) == (
        "measure more repetitions (--energy-repeat=N; now n=3/4) and save 3 or more sessions (--energy-save) "
        "so the gate learns the noise between them")


def test_the_hint_asks_only_for_repetitions_from_three_saved_sessions_on():
    assert inconclusive_hint(3, 4, 3, False) == "measure more repetitions (--energy-repeat=N; now n=3/4)"


# -- how a change reads ---------------------------------------------------------------------------


@pytest.mark.parametrize("value, text", [
    (24.84, "+24.8"), (-3.05, "-3.0"), (0.0, "+0.0"), (1000.0, "+1000.0"), (1000.01, "> +1000"),
    (-90.0, "-90.0"), (-90.01, "< -90"), (1e9, "> +1000"), (-100.0, "< -90"),
])
def test_bounds_beyond_the_absurd_limits_read_as_limits(value, text):
    assert bound_text(value) == text
    assert pct_text(value) == f"{text} %"


def test_an_interval_reads_low_then_high():
    assert interval_text(-95.0, 20.14) == "[< -90, +20.1]"


@pytest.mark.parametrize("confidence, text", [(0.99, "99 % confidence"), (0.975, "97.5 % confidence")])
def test_confidence_reads_in_per_cent(confidence, text):
    assert confidence_text(confidence) == text
