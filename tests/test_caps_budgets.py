"""What users type as caps and budgets, parsed and matched exactly as documented."""

import pytest

from pytest_gpuenergy.errors import BudgetError, CapSyntaxError
from pytest_gpuenergy.gate.budgets import Budget, budget_from_marker, check_budget, select_budget
from pytest_gpuenergy.gpu.device import PowerLimits
from pytest_gpuenergy.gpu.specs import CapSpec, parse_cap, parse_caps
from pytest_gpuenergy.meter.results import Repetition, Summary

H100 = PowerLimits(current_mw=700_000, enforced_mw=700_000, default_mw=700_000, min_mw=200_000, max_mw=700_000)


@pytest.mark.parametrize(("text", "label", "limit_w"), [
    ("150", "150W", 150), ("150W", "150W", 150), (" 152.5 ", "152.5W", 152.5), ("60%", "60%", 420),
    ("min", "min", 200), ("MAX", "max", 700), ("default", "default", 700), ("100%", "100%", 700),
])
def test_caps_resolve_per_gpu(text, label, limit_w):
    cap = parse_cap(text)
    assert cap.label == label
    assert cap.resolve_mw(H100) == limit_w * 1000


def test_duplicates_merge_and_order_is_kept():
    assert [c.label for c in parse_caps("250,min,250W,100%,default,60%")] == ["250W", "min", "100%", "60%"]
    assert [c.label for c in parse_caps([150, "60%"])] == ["150W", "60%"]


@pytest.mark.parametrize("bad", ["abc", "-5", "0", "0%", "1e9", "50%%", "", " ", "nan", "inf", "201%", "12 WW", "--5"])
def test_bad_caps_name_the_value(bad):
    with pytest.raises(CapSyntaxError) as caught:
        parse_caps(bad)
    assert caught.value.args[0].startswith("--gpu-caps: ")
    if bad.strip():
        assert repr(bad.strip()) in str(caught.value)


@pytest.mark.parametrize("bad", [True, None, 1.5j])
def test_caps_of_the_wrong_type(bad):
    with pytest.raises(CapSyntaxError, match="is not a cap"):
        parse_caps([bad], source="gpu_caps")


def test_budget_specificity_and_matching():
    any_gpu = budget_from_marker((), {"ets": 900.0, "edp": 2e3})
    by_cap = budget_from_marker((), {"cap": 200, "ets": 800})
    by_gpu = budget_from_marker((), {"gpu": "h100", "ets": 700})
    by_both = budget_from_marker((), {"gpu": "H100", "cap": "60%", "ets": 610})
    budgets = [any_gpu, by_cap, by_gpu, by_both]
    name = "NVIDIA H100 80GB HBM3"
    assert select_budget(budgets, name, 420_000, H100) is by_both
    assert select_budget(budgets, name, 200_000, H100) is by_gpu
    assert select_budget([any_gpu, by_cap], "Tesla V100", 200_000, H100) is by_cap
    assert select_budget([any_gpu, by_cap], "Tesla V100", 300_000, H100) is any_gpu
    assert select_budget([by_both], "Tesla V100", 420_000, H100) is None
    # Among equally specific budgets the first listed wins (a marker put first overrides a file's).
    tighter = budget_from_marker((), {"gpu": "H100", "cap": "60%", "ets": 1e-6})
    assert select_budget([tighter, *budgets], name, 420_000, H100) is tighter
    assert select_budget([*budgets, tighter], name, 420_000, H100) is by_both


def test_budget_check_reports_every_figure_over():
    summary = Summary.of([Repetition(ets_j=100.0, time_s=2.0, mean_power_w=50.0, peak_power_w=60.0)])
    misses = check_budget(Budget(ets_j=90.0, edp_js=250.0, time_s=1.0), summary)
    assert [m.describe() for m in misses] == [
        "ETS 100 J > budget 90 J (+11.1 %)",
        "T 2 s > budget 1 s (+100.0 %)",
    ]
    assert check_budget(Budget(ets_j=100.0), summary) == []


@pytest.mark.parametrize(("args", "kwargs", "message"), [
    ((), {"ets": True}, "ets= must be a positive number"),
    ((), {"edp": float("nan")}, "edp= must be a positive number"),
    ((), {"time": "1s"}, "time= must be a positive number"),
    ((), {"ets": 1, "gpu": ""}, "gpu= must be part of a GPU name"),
    ((), {"ets": 1, "gpu": 3}, "gpu= must be part of a GPU name"),
    ((), {"ets": 1, "cap": [200]}, "cap= must be watts"),
    ((), {"ets": 1, "cap": "0"}, "'0' is not a cap"),
    ((), {"ets": 1, "gpus": "H100"}, "unknown argument(s) gpus"),
    ((), {}, "needs at least one of"),
])
def test_budget_marker_errors(args, kwargs, message):
    with pytest.raises(BudgetError) as caught:
        budget_from_marker(args, kwargs)
    assert message in str(caught.value)


def test_cap_spec_identity():
    assert CapSpec("percent", 100.0)._identity == CapSpec("default")._identity
