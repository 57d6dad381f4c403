"""meter/results.py: the figures a measurement produces, against values worked out by hand.

The meter's tests (test_meter.py) check results as a whole against the simulator, within noise;
a figure off by a factor, a mean taken over the wrong list or a bound summed wrongly would pass
there. Here each figure (per call, per repetition, summed over GPUs, reduced to a summary) is
built from round numbers whose exact result is known, and every edge (no repetitions, no time, a
missing bound, the 5 % coarse threshold) is checked on its own.
"""

from __future__ import annotations

import math

import pytest

from pytest_gpuenergy.meter.results import COARSE_SHARE, COUNTER, SAMPLING, EnergyResult, GpuResult, Repetition, Summary


def rep(ets_j: float, time_s: float = 1.0, *, peak_w: float = 500.0, low_j: float | None = None,
        high_j: float | None = None, calls: int = 1) -> Repetition:
    return Repetition(ets_j=ets_j, time_s=time_s, mean_power_w=ets_j / time_s if time_s else math.nan,
                      peak_power_w=peak_w, calls=calls, ets_low_j=low_j, ets_high_j=high_j)


def gpu(index: int, *reps: Repetition, method: str = COUNTER, simulated: bool = True, backend: str = "sim") -> GpuResult:
    return GpuResult(gpu_index=index, gpu_name="H100", gpu_uuid=f"GPU-{index}", backend=backend, simulated=simulated,
                     method=method, power_source="instant" if method == SAMPLING else None, cap="current",
                     limit_requested_w=None, limit_enforced_w=700.0, default_limit_w=700.0, repetitions=reps)


# -- one repetition ----------------------------------------------------------------------------------

def test_edp_of_a_repetition_is_its_energy_times_its_time():
    assert Repetition(ets_j=3.0, time_s=2.5, mean_power_w=1.2, peak_power_w=9.0).edp_js == 7.5


def test_a_regions_figures_are_divided_by_its_calls_but_its_power_is_not():
    """A region of 4 calls, 12 J in 0.3 s, bound [10, 16] J: per call 3 J in 75 ms, bound [2.5, 4] J;
    power (40 W) and peak are the region's own, the same per call as for all four."""
    r = Repetition.of_region(12.0, 10.0, 16.0, 400.0, 0.3, 4)
    assert (r.ets_j, r.time_s, r.ets_low_j, r.ets_high_j, r.calls) == (3.0, 0.075, 2.5, 4.0, 4)
    assert r.mean_power_w == pytest.approx(40.0)
    assert r.peak_power_w == 400.0


def test_a_region_that_took_no_time_has_no_mean_power():
    r = Repetition.of_region(0.0, 0.0, 0.5, 80.0, 0.0, 2)
    assert math.isnan(r.mean_power_w)
    assert (r.ets_j, r.time_s, r.ets_high_j) == (0.0, 0.0, 0.25)


# -- a summary of repetitions ------------------------------------------------------------------------

def test_a_summary_averages_energy_time_and_edp_and_keeps_the_spread_of_energy():
    """ETS 10, 12, 14 J in 1, 2, 3 s: mean 12 J in 2 s (6 W), EDP the mean of 10, 24 and 42 J s,
    standard deviation 2 J (sample), CV 1/6, peak the highest of the three."""
    s = Summary.of([rep(10.0, 1.0, peak_w=300.0), rep(12.0, 2.0, peak_w=650.0), rep(14.0, 3.0, peak_w=400.0)])
    assert (s.n, s.ets_j, s.time_s, s.mean_power_w, s.peak_power_w) == (3, 12.0, 2.0, 6.0, 650.0)
    assert s.edp_js == pytest.approx(76.0 / 3)
    assert s.ets_std_j == pytest.approx(2.0)
    assert s.ets_cv == pytest.approx(1 / 6)
    assert (s.ets_min_j, s.ets_max_j) == (10.0, 14.0)


def test_a_summary_of_one_repetition_has_no_spread():
    s = Summary.of([rep(8.0, 2.0)])
    assert (s.n, s.ets_j, s.ets_std_j, s.ets_cv, s.ets_min_j, s.ets_max_j, s.edp_js) == (1, 8.0, 0.0, 0.0, 8.0, 8.0, 16.0)


def test_a_summary_needs_a_repetition():
    with pytest.raises(ValueError, match="at least one repetition"):
        Summary.of([])


def test_a_summary_without_time_or_energy_has_no_power_and_no_cv():
    """Calls that moved no clock (a simulated GPU with nothing declared): 0 J in 0 s, never a division by zero."""
    s = Summary.of([rep(0.0, 0.0), rep(0.0, 0.0)])
    assert math.isnan(s.mean_power_w) and math.isnan(s.ets_cv)
    assert (s.ets_j, s.time_s, s.ets_std_j) == (0.0, 0.0, 0.0)


def test_the_summarys_bound_is_the_mean_of_the_repetitions_bounds():
    s = Summary.of([rep(10.0, low_j=9.0, high_j=12.0), rep(12.0, low_j=11.0, high_j=13.0)])
    assert (s.ets_low_j, s.ets_high_j) == (10.0, 12.5)


def test_a_bound_missing_from_any_repetition_leaves_the_summary_without_one():
    """Documents saved before bounds existed: a mean over the repetitions that have one would hold no truth."""
    s = Summary.of([rep(10.0, low_j=9.0, high_j=12.0), rep(12.0, low_j=None, high_j=13.0)])
    assert s.ets_low_j is None and s.ets_high_j == 12.5
    s = Summary.of([rep(10.0), rep(12.0)])
    assert s.ets_low_j is None and s.ets_high_j is None


@pytest.mark.parametrize(("ets", "low", "high", "share"), [
    (10.0, 9.0, 10.5, 0.1),        # the low side reaches further
    (10.0, 9.75, 11.0, 0.1),       # the high side does
])
def test_the_bound_share_is_the_larger_side_of_the_bound_over_the_estimate(ets, low, high, share):
    s = Summary.of([rep(ets, low_j=low, high_j=high)])
    assert s.ets_bound_share == pytest.approx(share)


@pytest.mark.parametrize(("ets", "low", "high"), [(10.0, None, 11.0), (10.0, 9.0, None), (0.0, 0.0, 1.0)])
def test_a_bound_share_needs_a_bound_and_a_positive_estimate(ets, low, high):
    assert Summary.of([rep(ets, low_j=low, high_j=high)]).ets_bound_share is None


# -- a GPU's part and the whole measurement ------------------------------------------------------------

def test_a_gpus_part_reads_its_summary_through_the_figures_users_rely_on():
    part = gpu(0, rep(10.0, 1.0, peak_w=300.0, low_j=9.0, high_j=11.0), rep(14.0, 3.0, peak_w=600.0, low_j=13.0, high_j=16.0))
    s = part.summary
    assert s == Summary.of(part.repetitions)
    assert (part.ets_j, part.time_s, part.edp_js, part.mean_power_w, part.peak_power_w, part.n) == (
        12.0, 2.0, 26.0, 6.0, 600.0, 2)
    assert (part.ets_std_j, part.ets_cv, part.ets_low_j, part.ets_high_j) == (s.ets_std_j, s.ets_cv, 11.0, 13.5)
    assert part.ets_std_j == pytest.approx(math.sqrt(8))


@pytest.mark.parametrize(("low", "high", "coarse"), [
    (95.0, 100.0, False),          # exactly 5 %: not yet coarse
    (94.0, 100.0, True),           # 6 % below
    (100.0, 105.5, True),          # 5.5 % above
    (99.0, 101.0, False),
    (None, None, False),           # no bound: nothing says it is coarse
])
def test_a_result_is_coarse_when_its_bound_reaches_further_than_5_percent(low, high, coarse):
    assert COARSE_SHARE == 0.05
    part = gpu(0, rep(100.0, low_j=low, high_j=high))
    assert part.coarse is coarse
    assert EnergyResult(per_gpu=(part,)).coarse is coarse


def test_a_measurement_sums_energy_bound_and_peak_over_the_gpus_and_takes_the_longest_time():
    """Two GPUs, two repetitions: per repetition ETS, its bound and the peak add up, T is the longer."""
    first = gpu(0, rep(10.0, 1.0, peak_w=300.0, low_j=9.0, high_j=11.0, calls=3),
                rep(20.0, 2.0, peak_w=350.0, low_j=19.0, high_j=22.0, calls=3))
    second = gpu(1, rep(30.0, 1.5, peak_w=400.0, low_j=29.0, high_j=33.0, calls=3),
                 rep(40.0, 1.0, peak_w=450.0, low_j=38.0, high_j=41.0, calls=3))
    result = EnergyResult(per_gpu=(first, second))
    reps = result.repetitions
    assert [(r.ets_j, r.time_s, r.peak_power_w, r.ets_low_j, r.ets_high_j, r.calls) for r in reps] == [
        (40.0, 1.5, 700.0, 38.0, 44.0, 3), (60.0, 2.0, 800.0, 57.0, 63.0, 3)]
    assert [r.mean_power_w for r in reps] == pytest.approx([40.0 / 1.5, 30.0])
    assert (result.ets_j, result.time_s, result.n, result.peak_power_w) == (50.0, 1.75, 2, 800.0)
    assert result.edp_js == pytest.approx((40.0 * 1.5 + 60.0 * 2.0) / 2)
    assert (result.ets_low_j, result.ets_high_j) == (47.5, 53.5)
    assert result.summary == Summary.of(reps)


def test_a_gpu_without_a_bound_leaves_the_measurement_without_that_side_of_it():
    result = EnergyResult(per_gpu=(gpu(0, rep(10.0, low_j=9.0, high_j=11.0)), gpu(1, rep(5.0, low_j=None, high_j=6.0))))
    (only,) = result.repetitions
    assert (only.ets_j, only.ets_low_j, only.ets_high_j) == (15.0, None, 17.0)
    result = EnergyResult(per_gpu=(gpu(0, rep(10.0, low_j=9.0, high_j=None)), gpu(1, rep(5.0, low_j=4.0, high_j=6.0))))
    assert (result.repetitions[0].ets_low_j, result.repetitions[0].ets_high_j) == (13.0, None)


def test_a_measurement_that_took_no_time_has_no_mean_power():
    (only,) = EnergyResult(per_gpu=(gpu(0, rep(0.0, 0.0)), gpu(1, rep(0.0, 0.0)))).repetitions
    assert math.isnan(only.mean_power_w) and only.ets_j == 0.0


def test_a_measurement_names_every_method_once_and_its_backend():
    mixed = EnergyResult(per_gpu=(gpu(0, rep(1.0), method=SAMPLING), gpu(1, rep(1.0)), gpu(2, rep(1.0), method=SAMPLING)))
    assert mixed.method == "counter+sampling"
    assert EnergyResult(per_gpu=(gpu(0, rep(1.0)), gpu(1, rep(1.0)))).method == "counter"
    assert EnergyResult(per_gpu=(gpu(0, rep(1.0), backend="nvml", simulated=False),)).backend == "nvml"


def test_a_measurement_is_simulated_if_any_of_its_gpus_is():
    real = gpu(0, rep(1.0), backend="nvml", simulated=False)
    assert EnergyResult(per_gpu=(real, gpu(1, rep(1.0)))).simulated
    assert EnergyResult(per_gpu=(gpu(1, rep(1.0)), real)).simulated
    assert not EnergyResult(per_gpu=(real, real)).simulated


def test_the_description_gives_each_figure_with_its_unit_and_where_it_came_from():
    result = EnergyResult(per_gpu=(gpu(0, rep(12.0, 2.0, peak_w=650.0, low_j=11.5, high_j=12.25)),))
    text = result.describe()
    for piece in ("ETS 12 J [11.5, 12.25]", "T 2 s", "EDP 24 J s", "mean 6 W", "peak 650 W", "n=1", "(simulated, counter)"):
        assert piece in text, text
    real = EnergyResult(per_gpu=(gpu(0, rep(1.0), method=SAMPLING, backend="nvml", simulated=False),))
    assert "ETS 1 J, T 1 s" in real.describe() and "(measured, sampling)" in real.describe()
    half = EnergyResult(per_gpu=(gpu(0, rep(1.0, low_j=0.9)),))      # half a bound is no bound: none shown
    assert half.describe().startswith("ETS 1 J, T 1 s")
