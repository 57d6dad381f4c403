"""The DVFS model behaves the way the seeds measured (it is a model, so these are its contract)."""

import pytest

from pytest_gpuenergy.sim.dvfs import WorkloadProfile, busy_power_w, operating_point, time_factor
from pytest_gpuenergy.sim.models import GPU_MODELS, parse_model_list


def relative(spec, profile, limit_w):
    """ETS, T and EDP at ``limit_w`` relative to the default limit, per unit of work."""
    full = operating_point(spec, profile, spec.default_limit_w)
    point = operating_point(spec, profile, limit_w)
    t = point.time_factor / full.time_factor
    e = point.busy_power_w * point.time_factor / (full.busy_power_w * full.time_factor)
    return e, t, e * t


def test_v100_lowest_cap_matches_the_seeds():
    # Seeds: V100 at its lowest cap of 150 W: about 30 % less energy, EDP about 14 % lower.
    energy, _, edp = relative(GPU_MODELS["V100"], WorkloadProfile(0.7), 150)
    assert energy == pytest.approx(0.70, abs=0.04)
    assert edp == pytest.approx(0.86, abs=0.04)


@pytest.mark.parametrize("model", ["H100", "V100", "K80"])
def test_memory_bound_work_costs_less_energy_at_the_lowest_cap(model):
    spec = GPU_MODELS[model]
    energy, slowdown, _ = relative(spec, WorkloadProfile(0.3), spec.min_limit_w)
    assert energy < 0.95
    assert slowdown >= 1.0


def test_a_cap_above_what_the_work_draws_changes_nothing():
    # A T4's lowest cap (60 W) is above what memory-bound work draws at full clock.
    spec = GPU_MODELS["T4"]
    assert relative(spec, WorkloadProfile(0.3), spec.min_limit_w) == pytest.approx((1.0, 1.0, 1.0))


def test_edp_has_an_interior_optimum_for_a_memory_bound_h100_workload():
    spec = GPU_MODELS["H100"]
    limits = [spec.min_limit_w + i * (spec.max_limit_w - spec.min_limit_w) / 50 for i in range(51)]
    edps = [relative(spec, WorkloadProfile(0.3), w)[2] for w in limits]
    best = min(range(len(edps)), key=edps.__getitem__)
    assert 0 < best < len(edps) - 1, "the EDP optimum should lie strictly inside the cap range"


@pytest.mark.parametrize("compute_bound", [0.0, 0.3, 0.7, 1.0])
def test_the_governor_respects_the_cap_where_the_hardware_can(compute_bound):
    spec = GPU_MODELS["A100"]
    profile = WorkloadProfile(compute_bound)
    for limit in (400, 300, 250, 200, 150):
        point = operating_point(spec, profile, limit)
        assert point.busy_power_w <= limit + 1e-6
        assert point.time_factor >= 1.0 - 1e-9


def test_compute_bound_work_slows_more_than_memory_bound_work_under_a_cap():
    spec = GPU_MODELS["H100"]
    slow_compute = operating_point(spec, WorkloadProfile(0.95), 350).time_factor
    slow_memory = operating_point(spec, WorkloadProfile(0.3), 350).time_factor
    assert slow_compute > slow_memory > 1.0


def test_power_rises_with_clock():
    spec = GPU_MODELS["H100"]
    profile = WorkloadProfile(0.7)
    powers = [busy_power_w(spec, profile, x / 10) for x in range(2, 11)]
    assert powers == sorted(powers)
    assert time_factor(profile, 1.0) == pytest.approx(1.0)


@pytest.mark.parametrize("bad", [-0.1, 1.5, "high", None])
def test_profile_rejects_nonsense(bad):
    with pytest.raises(ValueError, match="compute_bound"):
        WorkloadProfile(bad)


def test_model_list_parsing():
    assert parse_model_list("h100, V100") == ("H100", "V100")
    with pytest.raises(ValueError, match="unknown simulated GPU model 'B300'"):
        parse_model_list("H100,B300")
