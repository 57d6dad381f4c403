"""Property-based tests: whatever a user types, the answer is a result or an error naming it."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pytest_gpuenergy.errors import BudgetError, CapSyntaxError
from pytest_gpuenergy.gate.budgets import budget_from_marker
from pytest_gpuenergy.gpu.device import PowerLimits
from pytest_gpuenergy.gpu.specs import MAX_PLAUSIBLE_PERCENT, MAX_PLAUSIBLE_W, parse_caps
from pytest_gpuenergy.sim.faults import parse_faults

H100 = PowerLimits(700_000, 700_000, 700_000, 200_000, 700_000)

cap_like = st.one_of(
    st.text(max_size=12),
    st.floats(allow_nan=True, allow_infinity=True).map(str),
    st.floats(allow_nan=False, allow_infinity=False).map(lambda v: f"{v}%"),
    st.integers(-10**12, 10**12).map(str),
    st.sampled_from(["min", "MAX", "default", "50%%", "1e9", "", " ", "150W", "60 %", "--1", "0x10"]),
)


@given(st.lists(cap_like, min_size=1, max_size=4).map(",".join))
def test_caps_parse_or_fail_naming_the_option(text):
    try:
        caps = parse_caps(text)
    except CapSyntaxError as exc:
        assert str(exc).startswith("--gpu-caps: ")
        return
    assert caps, "a successful parse gives at least one cap"
    for cap in caps:
        if cap.kind == "watts":
            assert 0 < cap.value <= MAX_PLAUSIBLE_W
        elif cap.kind == "percent":
            assert 0 < cap.value <= MAX_PLAUSIBLE_PERCENT
        assert cap.resolve_mw(H100) > 0
    assert len({c.label for c in caps}) == len(caps)


@given(st.floats(min_value=1.0, max_value=MAX_PLAUSIBLE_W))
def test_every_plausible_wattage_round_trips(watts):
    (cap,) = parse_caps(repr(watts))
    assert cap.resolve_mw(H100) == round(watts * 1000)


anything = st.one_of(
    st.none(), st.booleans(), st.integers(-10**6, 10**6), st.floats(allow_nan=True, allow_infinity=True),
    st.integers(), st.sampled_from([10**400, -(10**400), 10**5000]),     # too large for a float, or to print
    st.text(max_size=8), st.lists(st.integers(), max_size=2), st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
)


@given(st.dictionaries(st.sampled_from(["ets", "edp", "time", "gpu", "cap", "power", "gpus"]), anything, max_size=5),
       st.lists(anything, max_size=2))
def test_budget_markers_are_valid_or_name_the_problem(kwargs, args):
    try:
        budget = budget_from_marker(tuple(args), kwargs)
    except BudgetError as exc:
        assert str(exc).startswith("energy_budget")
        return
    assert not args and set(kwargs) <= {"ets", "edp", "time", "gpu", "cap"}
    figures = [budget.ets_j, budget.edp_js, budget.time_s]
    assert any(f is not None for f in figures)
    assert all(f is None or (math.isfinite(f) and f > 0) for f in figures)


@given(st.text(alphabet=st.characters(codec="ascii"), max_size=30))
def test_fault_specs_parse_or_name_the_entry(text):
    try:
        parse_faults(text)
    except ValueError as exc:
        assert "fault" in str(exc)


BAD_OPTION_VALUES = [
    ("--gpu-caps", v) for v in ["abc", "-5", "0", "1e9", "50%%", "", "nan", "9999W", "12%%%", "min,abc", "60%,-1"]
] + [
    ("--energy-min-time", v) for v in ["abc", "-5", "nan", "1e9", "inf", ""]
] + [
    ("--energy-repeat", v) for v in ["abc", "0", "-1", "2.5", "1e9"]
] + [
    ("--energy-lock-timeout", v) for v in ["abc", "-1", "nan", "inf"]
] + [("--gpu-devices", v) for v in ["7", "GPU-nope", "x"]]


@pytest.mark.parametrize(("option", "value"), BAD_OPTION_VALUES)
def test_bad_options_are_usage_errors_not_tracebacks(pytester, option, value):
    pytester.makepyfile(test_a="def test_a(gpu_power_cap):\n    pass\n")
    result = pytester.runpytest(f"{option}={value}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR, (option, value, result.stdout.str())
    assert option in result.stderr.str()
    if value.strip():
        assert value.split(",")[-1] in result.stderr.str() or repr(value) in result.stderr.str()
    assert "Traceback" not in result.stderr.str()
