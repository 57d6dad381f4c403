"""Tests of ``pytest_gpuenergy/gate/settings.py``: the gate's settings as a user types them.

They exist for the mutation testing of the gate (benchmarks/mutation.py): each pins one thing the
pytest options, the CLI and the API rely on: which thresholds and confidence levels are accepted
(the edges included), what each mistake says, and where the CI job summary goes.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from pytest_gpuenergy.errors import SettingError
from pytest_gpuenergy.gate.settings import (
    DEFAULT_CONFIDENCE,
    STEP_SUMMARY_ENV,
    GateOptions,
    check_confidence,
    check_thresholds,
    parse_thresholds,
    step_summary_path,
    threshold_label,
)

# -- parse_thresholds -----------------------------------------------------------------------------


def test_thresholds_keep_every_metric_with_its_own_number():
    assert parse_thresholds("edp:10%, time=2.5,ets:0%") == {"edp": 10.0, "time": 2.5, "ets": 0.0}


def test_metric_names_are_case_insensitive():
    assert parse_thresholds("Ets:5%,TIME:1%") == {"ets": 5.0, "time": 1.0}


def test_a_threshold_of_exactly_1000_percent_is_accepted_and_one_just_above_is_not():
    assert parse_thresholds("ets:1000%") == {"ets": 1000.0}
    with pytest.raises(ValueError, match=r"'ets:1000.5%': a threshold is a percentage from 0 to 1000"):
        parse_thresholds("ets:1000.5%")


def test_an_overflowing_threshold_is_refused_as_out_of_range():
    with pytest.raises(ValueError, match="a threshold is a percentage from 0 to 1000"):
        parse_thresholds("ets:1e999%")


@pytest.mark.parametrize("blank", [None, "", "   "])
def test_no_text_at_all_says_no_threshold_was_given(blank):
    with pytest.raises(ValueError, match=r"^--energy-fail: no threshold given; write METRIC:PERCENT items"):
        parse_thresholds(blank)


def test_an_empty_item_names_the_whole_text():
    with pytest.raises(ValueError, match=r"^--energy-fail: empty item in 'ets:5%, ,edp:1%'"):
        parse_thresholds("ets:5%, ,edp:1%")


def test_the_valid_form_lists_every_metric():
    with pytest.raises(ValueError) as info:
        parse_thresholds("watts:5%")
    assert "METRIC one of ets, time, edp" in str(info.value)
    assert "unknown metric 'watts' in 'watts:5%'" in str(info.value)


def test_a_metric_given_twice_is_named_even_in_another_case():
    with pytest.raises(ValueError, match=r"^--energy-fail: ets is given twice in 'ets:5%,ETS:6%'; give each metric once"):
        parse_thresholds("ets:5%,ETS:6%")


# -- check_confidence -----------------------------------------------------------------------------


@pytest.mark.parametrize("given, expected", [
    (0.99, 0.99), (0.5000001, 0.5000001), (0.9999, 0.9999), ("0.95", 0.95), (" 0.9 ", 0.9),
    ("99%", 0.99), ("97.5%", 0.975), (" 80 % ", 0.8),
])
def test_confidence_is_read_as_a_share_or_a_percentage(given, expected):
    value = check_confidence(given)
    assert value == pytest.approx(expected, rel=1e-12)
    assert type(value) is float


def test_a_float_subclass_confidence_comes_back_as_a_plain_float():
    class Share(float):
        pass

    value = check_confidence(Share(0.9))
    assert value == 0.9 and type(value) is float


@pytest.mark.parametrize("bad", ["50%", "100%", "0.5", "1", "150%", 0.5, 1, 1.0, 0.4, 1.5, -0.99, math.inf, math.nan])
def test_confidence_at_or_beyond_the_exclusive_edges_is_refused(bad):
    with pytest.raises(SettingError, match=r"is not a confidence level; give a number between 0.5 and 1 \(exclusive\)"):
        check_confidence(bad)


@pytest.mark.parametrize("bad", [True, False, None, [0.99], "0.99x"])
def test_confidence_that_is_no_number_is_refused_and_named(bad):
    with pytest.raises(SettingError, match=r"^confidence=") as info:
        check_confidence(bad)
    assert repr(bad) in str(info.value)


def test_confidence_text_that_is_no_number_says_so_with_examples():
    with pytest.raises(SettingError, match=r"^--energy-confidence='high' is not a number; give e.g. 0.99 or 99%"):
        check_confidence("high", source="--energy-confidence")


def test_a_bare_percent_sign_is_not_a_number():
    with pytest.raises(SettingError, match="is not a number"):
        check_confidence("%")


def test_the_default_confidence_is_ninety_nine_percent():
    assert DEFAULT_CONFIDENCE == 0.99 == check_confidence(DEFAULT_CONFIDENCE)


# -- check_thresholds -----------------------------------------------------------------------------


def test_no_thresholds_is_an_empty_gate():
    assert check_thresholds(None) == {}
    assert check_thresholds({}) == {}


def test_thresholds_come_back_as_a_new_dict_with_the_same_items():
    given = {"ets": 5, "edp": 0, "time": 7.5}
    result = check_thresholds(given)
    assert result == {"ets": 5, "edp": 0, "time": 7.5}
    assert result is not given


@pytest.mark.parametrize("value", [-0.001, math.inf, math.nan, True, "5", None])
def test_a_threshold_that_is_no_percentage_is_refused_and_named(value):
    with pytest.raises(ValueError, match=rf"^thresholds: edp={value!r} must be a percentage >= 0"):
        check_thresholds({"ets": 5.0, "edp": value})


def test_an_unknown_metric_in_thresholds_lists_the_known_ones():
    with pytest.raises(ValueError, match=r"^thresholds: unknown metric 'power'; use ets, time, edp"):
        check_thresholds({"power": 5.0})


# -- GateOptions and the job summary --------------------------------------------------------------


def test_options_with_nothing_asked_are_inactive(tmp_path):
    options = GateOptions(storage=tmp_path)
    assert not options.active
    assert options.confidence == DEFAULT_CONFIDENCE and options.thresholds == {}


@pytest.mark.parametrize("field", ["save", "compare", "markdown", "html", "json", "step_summary"])
def test_any_one_thing_asked_makes_the_gate_active(tmp_path, field):
    value = {"save": True, "compare": "latest"}.get(field, tmp_path / "report")
    assert GateOptions(storage=tmp_path, **{field: value}).active


def test_the_step_summary_path_is_the_environment_variable(monkeypatch, tmp_path):
    monkeypatch.setenv(STEP_SUMMARY_ENV, str(tmp_path / "summary.md"))
    assert STEP_SUMMARY_ENV == "GITHUB_STEP_SUMMARY"
    assert step_summary_path() == Path(tmp_path / "summary.md")


@pytest.mark.parametrize("value", [None, ""])
def test_no_step_summary_outside_github_actions(monkeypatch, value):
    if value is None:
        monkeypatch.delenv(STEP_SUMMARY_ENV, raising=False)
    else:
        monkeypatch.setenv(STEP_SUMMARY_ENV, value)
    assert step_summary_path() is None


@pytest.mark.parametrize("key, label", [("ets", "ETS"), ("time", "T"), ("edp", "EDP"), ("node.ets", "node ETS"),
                                        ("cpu.ets", "cpu ETS"), ("phase.ets", "phase ETS")])
def test_a_threshold_is_named_by_its_metric_and_for_a_domain_or_phase_by_that_too(key, label):
    assert threshold_label(key) == label
