"""Tests of ``pytest_gpuenergy/gate/budgets.py``: a marker's budget, which budget applies, what it says.

In-process and exact (every message word for word), so that mutation testing of the module sees them;
the markers end to end are in tests/test_caps_budgets.py and tests/test_plugin_core.py.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from pytest_gpuenergy.errors import BudgetError
from pytest_gpuenergy.gate.budgets import Budget, budget_from_marker, domain_failures, phase_failures, select_budget
from pytest_gpuenergy.gpu.device import PowerLimits
from pytest_gpuenergy.meter.results import PhaseFigures

from helpers import gpu_result

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
    ((900,), {}, "energy_budget takes keyword arguments only (ets=, edp=, time=, gpu=, cap=, domain=, phase=), got positional [900]"),
    ((), {"ets": 1, "watts": 2, "joules": 3},
     "energy_budget got unknown argument(s) joules, watts; allowed: ets=, edp=, time=, gpu=, cap=, domain=, phase="),
    ((), {"gpu": "H100"}, "energy_budget needs at least one of ets= (J), edp= (J s), time= (s)"),
    ((), {"ets": None}, "energy_budget needs at least one of ets= (J), edp= (J s), time= (s)"),
    ((), {"ets": -1}, "energy_budget ets= must be a positive number of J, got -1 (at most 1e+15 J)"),
    ((), {"edp": 0}, "energy_budget edp= must be a positive number of J s, got 0 (at most 1e+15 J s)"),
    ((), {"time": 2e15}, "energy_budget time= must be a positive number of s, got 2000000000000000.0 (at most 1e+15 s)"),
    ((), {"ets": 1, "gpu": "  "}, "energy_budget gpu= must be part of a GPU name such as 'H100', got '  '"),
    ((), {"ets": 1, "gpu": 100}, "energy_budget gpu= must be part of a GPU name such as 'H100', got 100"),
    ((), {"ets": 1, "cap": True}, "energy_budget cap= must be watts (200) or a percentage ('60%'), got True"),
    ((), {"ets": 1, "cap": [200]}, "energy_budget cap= must be watts (200) or a percentage ('60%'), got [200]"),
    ((), {"ets": 1, "phase": 3},
     "energy_budget phase= must name a phase marked with energy_meter.phase (or 'other'), got 3"),
    ((), {"ets": 1, "phase": ""},
     "energy_budget phase= must name a phase marked with energy_meter.phase (or 'other'), got ''"),
    ((), {"ets": 1, "phase": "update", "domain": "cpu"},
     "energy_budget phase='update' holds a phase of the GPUs' energy; drop domain='cpu' (phases are attributed from "
     "the GPU's counter only)"),
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


# -- a phase's budget: energy_budget(phase="update", ...) ------------------------------------------

def _phased(told: bool = True, **changes):
    """An H100 result at 300 W whose region has forward and update phases (per call)."""
    update = PhaseFigures(ets_j=0.9, ets_low_j=0.8, ets_high_j=1.0, time_s=0.0055, power_w=0.9 / 0.0055,
                          time_share=0.4, energy_share=0.16, distinguishable=told,
                          why_not="" if told else "always in the same proportions")
    forward = PhaseFigures(4.7, 4.6, 4.8, 0.008, 587.5, 0.6, 0.84, True)
    result = gpu_result(cap="300W", limit_w=300.0, gpu_name=H100_NAME, n=3, noise=0.0, **changes)
    return replace(result, repetitions=tuple(replace(r, phases={"forward": forward, "update": update})
                                             for r in result.repetitions))


def test_a_phase_budget_names_its_phase_and_competes_only_with_its_own():
    update = budget_from_marker((), {"ets": 1.0, "phase": " update ", "gpu": "H100"})
    assert update.phase == "update" and update.domain == "gpu"
    assert update.describe() == "energy_budget(ets=1, gpu='H100', phase='update')"
    region = Budget(ets_j=5.0)
    assert select_budget([update, region], H100_NAME, 700_000, H100) is region
    assert select_budget([region, update], H100_NAME, 700_000, H100, phase="update") is update
    assert select_budget([region], H100_NAME, 700_000, H100, phase="update") is None
    assert budget_from_marker((), {"ets": 1.0}).phase is None


def test_a_phase_that_misses_its_budget_is_one_line_with_the_phase_figure_budget_gpu_and_cap():
    result = _phased()
    assert result.phases is not None
    within = [Budget(ets_j=0.95, time_s=0.006, edp_js=0.006, phase="update"), Budget(ets_j=1.0)]
    assert phase_failures(within, result, H100, "") == []
    over = [Budget(ets_j=0.5, phase="update"), Budget(time_s=0.001, edp_js=1.0, phase="forward", gpu="H100"),
            Budget(ets_j=50.0, phase="forward")]
    assert phase_failures(over, result, H100, " [2. region]") == [
        "energy budget exceeded [2. region]: phase 'update' ETS 0.9 J > budget 0.5 J (+80.0 %) (true update ETS within "
        "0.8-1 J) on GPU 0 NVIDIA H100 80GB HBM3 at cap 300W (enforced 300 W, simulated, n=3)",
        "energy budget exceeded [2. region]: phase 'forward' T 0.008 s > budget 0.001 s (+700.0 %) (true forward ETS "
        "within 4.6-4.8 J) on GPU 0 NVIDIA H100 80GB HBM3 at cap 300W (enforced 300 W, simulated, n=3)",
    ]
    edp = phase_failures([Budget(edp_js=0.001, phase="update")], result, H100, "")
    assert edp[0].startswith("energy budget exceeded: phase 'update' EDP 0.00495 J s > budget 0.001 J s (+395.0 %) (")


def test_a_phase_budget_matches_the_gpu_and_the_limit_the_test_ran_at():
    result = _phased()
    other_gpu = [Budget(ets_j=0.5, phase="update", gpu="V100")]
    other_cap = [budget_from_marker((), {"ets": 0.5, "phase": "update", "cap": 400})]
    at_cap = [budget_from_marker((), {"ets": 0.5, "phase": "update", "cap": 300})]
    assert phase_failures(other_gpu, result, H100, "") == phase_failures(other_cap, result, H100, "") == []
    assert len(phase_failures(at_cap, result, H100, "")) == 1
    requested = replace(result, limit_requested_w=400.0)      # asked 400 W, enforced 300 W
    assert phase_failures(other_cap, requested, H100, "") != [] and phase_failures(at_cap, requested, H100, "") == []


def test_a_phase_the_region_lacks_or_could_not_tell_apart_is_said_in_one_line():
    result = _phased()
    assert phase_failures([Budget(ets_j=1.0, phase="optimizer")], result, H100, " [3. region]") == [
        "energy_budget(ets=1, phase='optimizer') [3. region]: the region on GPU 0 has no phase 'optimizer'; its phases "
        "are forward, update"]
    bare = gpu_result(cap="300W", limit_w=300.0, gpu_name=H100_NAME, n=2, noise=0.0)
    assert phase_failures([Budget(ets_j=1.0, phase="update")], bare, H100, "") == [
        "energy_budget(ets=1, phase='update'): the region on GPU 0 has no phase 'update'; it has no phase marks "
        "(with energy_meter.phase(...): inside the measured region)"]
    [line] = phase_failures([Budget(ets_j=0.5, phase="update")], _phased(told=False), H100, "")
    assert "(true update ETS within 0.8-1 J; the fit could not tell it from the others: always in the same proportions)" in line


def test_each_phase_budget_is_checked_whatever_the_one_before_it_said():
    result = _phased()
    budgets = [Budget(ets_j=0.5, phase="update", gpu="V100"),        # another GPU's: no budget for update here
               Budget(ets_j=50.0, phase="forward"),                   # within
               Budget(ets_j=1.0, phase="optimizer"),                  # not marked
               budget_from_marker((), {"ets": 0.5, "time": 0.001, "phase": "forward", "cap": 300})]
    assert [line.split(":")[0] for line in phase_failures(budgets, result, H100, "")] == [
        "energy budget exceeded", "energy_budget(ets=1, phase='optimizer')"]
    [forward, missing] = phase_failures(budgets, result, H100, "")
    assert forward.startswith("energy budget exceeded: phase 'forward' ETS 4.7 J > budget 0.5 J (+840.0 %); "
                              "T 0.008 s > budget 0.001 s (+700.0 %) (true forward ETS within 4.6-4.8 J)")
    assert phase_failures([Budget(ets_j=0.5, phase="update", gpu="V100"), Budget(ets_j=0.5, phase="forward"),
                           Budget(ets_j=50.0, phase="update")], result, H100, "")[0].startswith(
        "energy budget exceeded: phase 'forward' ETS 4.7 J")
    assert len(phase_failures([Budget(ets_j=50.0, phase="update"), Budget(ets_j=0.5, phase="forward")],
                              result, H100, "")) == 1


def test_a_phase_budget_reads_the_limit_as_the_gpu_ran_at_it_and_says_measured_on_a_real_gpu():
    at_default = replace(_phased(), cap="current", limit_requested_w=None, limit_enforced_w=700.0,
                         backend="nvml", simulated=False)
    [line] = phase_failures([budget_from_marker((), {"ets": 0.5, "phase": "update", "cap": 700})], at_default, H100, "")
    assert line.endswith("on GPU 0 NVIDIA H100 80GB HBM3 at cap current (enforced 700 W, measured, n=3)")
    sixty = budget_from_marker((), {"ets": 0.5, "phase": "update", "cap": "60%"})      # 420 W of this H100
    assert len(phase_failures([sixty], replace(_phased(), limit_requested_w=420.0), H100, "")) == 1
    assert phase_failures([sixty], _phased(), H100, "") == []


# -- a host domain's budget: energy_budget(domain="node", ...) --------------------------------------

def _with_domains(simulated: bool = True):
    from pytest_gpuenergy.meter.results import DomainEnergy, EnergyResult

    gpu = gpu_result(cap="300W", limit_w=300.0, gpu_name=H100_NAME, n=2, noise=0.0)
    return EnergyResult(per_gpu=(gpu,), per_domain={"cpu": DomainEnergy(40.0, 39.0, 41.0, simulated),
                                                     "node": DomainEnergy(600.0, 590.0, 610.0, simulated)})


def test_a_domain_budget_is_one_line_with_the_domain_figure_and_bound():
    result = _with_domains()
    budgets = [budget_from_marker((), {"ets": 30.0, "edp": 1e6, "domain": "cpu"}), Budget(ets_j=1.0),
               budget_from_marker((), {"ets": 1e6, "domain": "node", "gpu": "H100"})]
    assert budgets[0].describe() == "energy_budget(ets=30, edp=1e+06, domain='cpu')" and budgets[0].domain == "cpu"
    time_s = result.time_s
    assert domain_failures(budgets, result, H100, " at cap 300W") == [
        "energy budget exceeded at cap 300W: cpu ETS 40 J > budget 30 J (+33.3 %) (true cpu ETS within 39-41 J; "
        "simulated, n=2)"]
    edp = domain_failures([budget_from_marker((), {"edp": 1.0, "domain": "node"})], _with_domains(False), H100, "")
    assert edp == [f"energy budget exceeded: node EDP {600 * time_s:.4g} J s > budget 1 J s (+{(600 * time_s - 1) * 100:.1f} %) "
                   f"(true node ETS within 590-610 J; measured, n=2)"]
    assert domain_failures([budget_from_marker((), {"ets": 1.0, "domain": "dram"})], result, H100, "") == [
        "energy_budget(ets=1, domain='dram'): the dram energy was not measured; run with --energy-domains=gpu,cpu,dram "
        "(or drop domain='dram')"]
    other_cap = budget_from_marker((), {"ets": 1.0, "domain": "cpu", "cap": "60%"})     # 420 W: not this case's
    assert domain_failures([other_cap], result, H100, "") == []
    requested = replace(result, per_gpu=(replace(result.per_gpu[0], limit_requested_w=420.0),))
    assert len(domain_failures([other_cap], requested, H100, "")) == 1


@pytest.mark.parametrize("domain", [None, "gpu ", 3, "GPU", "host"])
def test_a_domain_that_is_none_of_them_is_refused(domain):
    with pytest.raises(BudgetError) as refused:
        budget_from_marker((), {"ets": 1.0, "domain": domain})
    assert str(refused.value) == (f"energy_budget domain= must be one of 'gpu', 'cpu', 'dram', 'node', got "
                                  f"{domain!r}")


def test_a_missing_phase_or_domain_never_hides_the_next_ones_miss():
    lines = phase_failures([Budget(ets_j=1.0, phase="optimizer"), Budget(ets_j=0.5, phase="update")], _phased(), H100, "")
    assert [line.split(":")[0] for line in lines] == ["energy_budget(ets=1, phase='optimizer')", "energy budget exceeded"]
    result = _with_domains()
    lines = domain_failures([budget_from_marker((), {"ets": 1.0, "domain": "dram"}),
                             budget_from_marker((), {"ets": 1.0, "edp": 1e-3, "domain": "node"})], result, H100, "")
    assert lines[0].startswith("energy_budget(ets=1, domain='dram'): the dram energy was not measured")
    assert lines[1].startswith("energy budget exceeded: node ETS 600 J > budget 1 J (+59900.0 %); EDP ")


def test_a_domain_budget_reads_the_limit_as_the_gpu_ran_at_it():
    result = _with_domains()
    at_default = replace(result, per_gpu=(replace(result.per_gpu[0], cap="current", limit_requested_w=None,
                                                  limit_enforced_w=700.0),))
    at_700 = budget_from_marker((), {"ets": 1.0, "domain": "cpu", "cap": 700})
    assert len(domain_failures([at_700], at_default, H100, "")) == 1


def test_the_wait_for_budgets_is_said_only_where_it_is_a_large_part_of_the_session():
    from pytest_gpuenergy.reports.terminal import budget_wait_line

    assert budget_wait_line(1.9, 10, 2.0, 0.1) is None                 # under 2 s
    assert budget_wait_line(2.0, 10, 10.1, 0.1) is None                # under a fifth of the session
    line = budget_wait_line(2.0, 10, 10.0, 0.1)
    assert line is not None and line.startswith("10 tests with an energy budget waited 2.0 s in all for their figures, 20% "
                                                 "of the session")
    assert "period (100 ms here)" in line and "--energy-compare" in line
    one = budget_wait_line(3.0, 1, 2.0, None)                          # a worker's waits beside a shorter controller
    assert one is not None and one.startswith("1 test with an energy budget waited 3.0 s in all for its figures, 100% ")
    assert "period needs" in one
