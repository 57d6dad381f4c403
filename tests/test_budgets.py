"""Tests of ``pytest_gpuenergy/gate/budgets.py``: a marker's budget, which budget applies, what it says.

In-process and exact (every message word for word), so that mutation testing of the module sees them;
the markers end to end are in tests/test_caps_budgets.py and tests/test_plugin_core.py.
"""

from __future__ import annotations

import pytest

from pytest_gpuenergy.errors import BudgetError
from pytest_gpuenergy.gate.budgets import Budget, budget_from_marker, select_budget
from pytest_gpuenergy.gpu.device import PowerLimits

H100_NAME = "NVIDIA H100 80GB HBM3"
H100 = PowerLimits(current_mw=700_000, enforced_mw=700_000, default_mw=700_000, min_mw=200_000, max_mw=700_000)


def test_a_markers_figures_gpu_and_cap_make_the_budget():
    budget = budget_from_marker((), {"ets": 900, "edp": 2e3, "time": 1.5, "gpu": " H100 ", "cap": "60%"})
    assert (budget.ets_j, budget.edp_js, budget.time_s, budget.gpu) == (900.0, 2000.0, 1.5, "H100")
    assert budget.cap is not None and budget.cap.label == "60%"
    assert budget.describe() == "energy_budget(ets=900, edp=2000, time=1.5, gpu='H100', cap=60%)"
    only_edp = budget_from_marker((), {"edp": 5.0})
    assert (only_edp.ets_j, only_edp.edp_js, only_edp.time_s, only_edp.gpu, only_edp.cap) == (None, 5.0, None, None, None)


@pytest.mark.parametrize(("args", "kwargs", "message"), [
    ((900,), {}, "energy_budget takes keyword arguments only (ets=, edp=, time=, gpu=, cap=, domain=), got positional [900]"),
    ((), {"ets": 1, "watts": 2, "joules": 3},
     "energy_budget got unknown argument(s) joules, watts; allowed: ets=, edp=, time=, gpu=, cap=, domain="),
    ((), {"gpu": "H100"}, "energy_budget needs at least one of ets= (J), edp= (J s), time= (s)"),
    ((), {"ets": None}, "energy_budget needs at least one of ets= (J), edp= (J s), time= (s)"),
    ((), {"ets": -1}, "energy_budget ets= must be a positive number of J, got -1 (at most 1e+15 J)"),
    ((), {"edp": 0}, "energy_budget edp= must be a positive number of J s, got 0 (at most 1e+15 J s)"),
    ((), {"time": 2e15}, "energy_budget time= must be a positive number of s, got 2000000000000000.0 (at most 1e+15 s)"),
    ((), {"ets": 1, "gpu": "  "}, "energy_budget gpu= must be part of a GPU name such as 'H100', got '  '"),
    ((), {"ets": 1, "gpu": 100}, "energy_budget gpu= must be part of a GPU name such as 'H100', got 100"),
    ((), {"ets": 1, "cap": True}, "energy_budget cap= must be watts (200) or a percentage ('60%'), got True"),
    ((), {"ets": 1, "cap": [200]}, "energy_budget cap= must be watts (200) or a percentage ('60%'), got [200]"),
])
def test_a_bad_marker_is_an_error_that_names_the_problem_and_the_fix(args, kwargs, message):
    with pytest.raises(BudgetError) as refused:
        budget_from_marker(args, kwargs)
    assert str(refused.value) == message


def test_a_cap_that_is_no_cap_is_refused_in_the_markers_own_words():
    with pytest.raises(BudgetError) as refused:
        budget_from_marker((), {"ets": 1, "cap": "fast"})
    assert str(refused.value).startswith("energy_budget cap=")
    with pytest.raises(BudgetError) as implausible:                     # refused before it is printed
        budget_from_marker((), {"ets": 1, "cap": 10**12})
    assert str(implausible.value) == ("energy_budget cap=: 1000000000000 is not a plausible GPU power limit; "
                                      "write watts (150), 60%, or min, max, default")


def test_a_budget_for_a_whole_model_name_never_matches_by_part_of_it():
    exact = Budget(ets_j=1.0, gpu="H100", exact_gpu=True)                # a budgets file: "H100" is no model
    assert not exact.matches(H100_NAME, 700_000, H100)


def test_a_budget_matches_a_gpu_by_part_of_its_name_and_a_cap_by_the_limit_it_resolves_to():
    h100 = budget_from_marker((), {"ets": 1, "gpu": "h100"})
    assert h100.matches(H100_NAME, 700_000, H100) and not h100.matches("Tesla V100-SXM2-32GB", 300_000, H100)
    exact = Budget(ets_j=1.0, gpu=H100_NAME, exact_gpu=True)           # a budgets file names the whole model
    assert exact.matches(H100_NAME, 700_000, H100) and not exact.matches(H100_NAME + " (simulated)", 700_000, H100)
    at_60 = budget_from_marker((), {"ets": 1, "cap": "60%"})            # 420 W on an H100
    assert at_60.matches(H100_NAME, 420_000, H100) and at_60.matches(H100_NAME, 420_500, H100)
    assert not at_60.matches(H100_NAME, 420_501, H100) and not at_60.matches(H100_NAME, 700_000, H100)


def test_the_most_specific_matching_budget_applies_and_the_first_among_equals():
    anywhere = Budget(ets_j=1.0)
    by_cap = budget_from_marker((), {"ets": 2, "cap": 420})
    by_gpu = budget_from_marker((), {"ets": 3, "gpu": "H100"})
    both = budget_from_marker((), {"ets": 4, "gpu": "H100", "cap": 420})
    assert select_budget([anywhere, by_cap, by_gpu, both], H100_NAME, 420_000, H100) is both
    assert select_budget([anywhere, by_cap, by_gpu], H100_NAME, 420_000, H100) is by_gpu
    assert select_budget([anywhere, by_cap], H100_NAME, 420_000, H100) is by_cap
    twin = Budget(ets_j=9.0)
    assert select_budget([anywhere, twin], H100_NAME, 700_000, H100) is anywhere
    assert select_budget([by_cap], H100_NAME, 700_000, H100) is None
