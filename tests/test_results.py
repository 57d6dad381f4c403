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

from pytest_gpuenergy.meter.results import (
    COARSE_SHARE,
    COUNTER,
    SAMPLING,
    DomainEnergy,
    EnergyResult,
    GpuResult,
    PhaseFigures,
    Repetition,
    Summary,
    combine_phases,
)


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


# -- the records as a run document keeps them, and phases combined (each key and figure pinned) -------

def figures(ets: float, low: float, high: float, time_s: float, *, told: bool = True, why: str = "",
            power: float = 0.0, time_share: float = 0.0, energy_share: float = 0.0) -> PhaseFigures:
    return PhaseFigures(ets_j=ets, ets_low_j=low, ets_high_j=high, time_s=time_s, power_w=power,
                        time_share=time_share, energy_share=energy_share, distinguishable=told, why_not=why)


def as_tuple(f: PhaseFigures) -> tuple:
    """A phase's figures in order, NaN written as the string "nan" so that two NaNs compare equal."""
    return tuple("nan" if isinstance(v, float) and math.isnan(v) else v for v in (
        f.ets_j, f.ets_low_j, f.ets_high_j, f.time_s, f.power_w, f.time_share, f.energy_share,
        f.distinguishable, f.why_not))


def test_a_phases_json_holds_every_figure_under_its_name_and_the_reason_only_where_there_is_one():
    told = PhaseFigures(ets_j=2.5, ets_low_j=2.0, ets_high_j=3.25, time_s=0.5, power_w=5.0, time_share=0.25,
                        energy_share=0.125, distinguishable=False, why_not="windows too long")
    assert told.to_json() == {"ets_j": 2.5, "ets_low_j": 2.0, "ets_high_j": 3.25, "time_s": 0.5, "power_w": 5.0,
                              "time_share": 0.25, "energy_share": 0.125, "distinguishable": False,
                              "why_not": "windows too long"}
    undefined = PhaseFigures(ets_j=0.0, ets_low_j=0.0, ets_high_j=0.5, time_s=0.0, power_w=math.nan,
                             time_share=math.nan, energy_share=math.inf, distinguishable=True)
    assert undefined.to_json() == {"ets_j": 0.0, "ets_low_j": 0.0, "ets_high_j": 0.5, "time_s": 0.0, "power_w": None,
                                   "time_share": None, "energy_share": None, "distinguishable": True}


def test_a_repetitions_json_holds_every_figure_its_phases_and_its_operator_classes():
    fwd = figures(1.0, 0.75, 1.5, 0.25, power=4.0, time_share=0.1, energy_share=0.2)
    other = figures(2.0, 1.5, 2.5, 2.25, told=False, why="short", power=0.875, time_share=0.9, energy_share=0.8)
    matmul = figures(2.75, 2.5, 3.0, 2.0, power=1.375, time_share=0.8, energy_share=0.9)
    r = Repetition(ets_j=3.0, time_s=2.5, mean_power_w=1.2, peak_power_w=9.0, calls=4, ets_low_j=2.25,
                   ets_high_j=3.5, phases={"fwd": fwd, "other": other}, op_classes={"matmul": matmul})
    assert r.to_json() == {
        "ets_j": 3.0, "time_s": 2.5, "edp_js": 7.5, "mean_power_w": 1.2, "peak_power_w": 9.0, "calls": 4,
        "ets_low_j": 2.25, "ets_high_j": 3.5,
        "phases": {"fwd": {"ets_j": 1.0, "ets_low_j": 0.75, "ets_high_j": 1.5, "time_s": 0.25, "power_w": 4.0,
                           "time_share": 0.1, "energy_share": 0.2, "distinguishable": True},
                   "other": {"ets_j": 2.0, "ets_low_j": 1.5, "ets_high_j": 2.5, "time_s": 2.25, "power_w": 0.875,
                             "time_share": 0.9, "energy_share": 0.8, "distinguishable": False, "why_not": "short"}},
        "op_classes": {"matmul": {"ets_j": 2.75, "ets_low_j": 2.5, "ets_high_j": 3.0, "time_s": 2.0, "power_w": 1.375,
                                  "time_share": 0.8, "energy_share": 0.9, "distinguishable": True}},
    }
    bare = Repetition(ets_j=0.0, time_s=0.0, mean_power_w=math.nan, peak_power_w=math.inf, calls=2)
    assert bare.to_json() == {"ets_j": 0.0, "time_s": 0.0, "edp_js": 0.0, "mean_power_w": None, "peak_power_w": None,
                              "calls": 2, "ets_low_j": None, "ets_high_j": None}


def test_a_gpus_json_holds_its_identity_limits_repetitions_summary_clock_place_and_mean_phases():
    first = Repetition(ets_j=10.0, time_s=1.0, mean_power_w=10.0, peak_power_w=300.0, calls=2, ets_low_j=9.0,
                       ets_high_j=11.0, phases={"fwd": figures(4.0, 3.0, 5.0, 0.5), "other": figures(6.0, 5.0, 7.0, 0.5)},
                       op_classes={"matmul": figures(8.0, 7.0, 9.0, 0.75), "idle": figures(2.0, 1.0, 3.0, 0.25)})
    second = Repetition(ets_j=16.0, time_s=3.0, mean_power_w=16.0 / 3, peak_power_w=350.0, calls=2, ets_low_j=15.0,
                        ets_high_j=18.0,
                        phases={"fwd": figures(8.0, 7.0, 9.0, 1.5), "other": figures(10.0, 9.0, 11.0, 1.5, why="late")},
                        op_classes={"matmul": figures(12.0, 11.0, 13.0, 2.25), "idle": figures(4.0, 3.0, 5.0, 0.75)})
    part = GpuResult(gpu_index=3, gpu_name="H100 SXM", gpu_uuid="GPU-abc", backend="nvml", simulated=False,
                     method="sampling", power_source="usage", cap="150W", limit_requested_w=150.0,
                     limit_enforced_w=149.5, default_limit_w=700.0, repetitions=(first, second),
                     notes=("throttled", "warm"), clock_cap="1200MHz", sm_clock_cap_mhz=1200.0, host="node7", rank=5)
    assert part.to_json() == {
        "cap": "150W", "gpu_index": 3, "gpu_name": "H100 SXM", "gpu_uuid": "GPU-abc", "backend": "nvml",
        "simulated": False, "method": "sampling", "power_source": "usage", "limit_requested_w": 150.0,
        "limit_enforced_w": 149.5, "default_limit_w": 700.0,
        "repetitions": [first.to_json(), second.to_json()],
        "summary": {"n": 2, "ets_j": 13.0, "time_s": 2.0, "edp_js": 29.0, "mean_power_w": 6.5, "peak_power_w": 350.0,
                    "ets_std_j": math.sqrt(18.0), "ets_cv": math.sqrt(18.0) / 13.0, "ets_min_j": 10.0,
                    "ets_max_j": 16.0, "ets_low_j": 12.0, "ets_high_j": 14.5},
        "notes": ["throttled", "warm"], "clock_cap": "1200MHz", "sm_clock_cap_mhz": 1200.0, "host": "node7", "rank": 5,
        # the mean over the two repetitions: fwd 6 J [5, 7] in 1 s, other 8 J [7, 9] in 1 s; 14 J in 2 s in all
        "phases": {"fwd": {"ets_j": 6.0, "ets_low_j": 5.0, "ets_high_j": 7.0, "time_s": 1.0, "power_w": 6.0,
                           "time_share": 0.5, "energy_share": 6.0 / 14.0, "distinguishable": True},
                   "other": {"ets_j": 8.0, "ets_low_j": 7.0, "ets_high_j": 9.0, "time_s": 1.0, "power_w": 8.0,
                             "time_share": 0.5, "energy_share": 8.0 / 14.0, "distinguishable": True, "why_not": "late"}},
        # matmul 10 J [9, 11] in 1.5 s, idle 3 J [2, 4] in 0.5 s; 13 J in 2 s
        "op_classes": {"matmul": {"ets_j": 10.0, "ets_low_j": 9.0, "ets_high_j": 11.0, "time_s": 1.5,
                                  "power_w": 10.0 / 1.5, "time_share": 0.75, "energy_share": 10.0 / 13.0,
                                  "distinguishable": True},
                       "idle": {"ets_j": 3.0, "ets_low_j": 2.0, "ets_high_j": 4.0, "time_s": 0.5, "power_w": 6.0,
                                "time_share": 0.25, "energy_share": 3.0 / 13.0, "distinguishable": True}},
    }
    assert part.to_json()["repetitions"][0]["calls"] == 2 and part.to_json()["repetitions"][0]["edp_js"] == 10.0


def test_a_gpus_json_without_a_clock_cap_place_or_phases_has_none_of_their_keys():
    part = GpuResult(gpu_index=0, gpu_name="MI300X", gpu_uuid="GPU-0", backend="sim", simulated=True, method="counter",
                     power_source=None, cap="current", limit_requested_w=None, limit_enforced_w=math.nan,
                     default_limit_w=750.0, repetitions=(Repetition(ets_j=4.0, time_s=0.0, mean_power_w=math.nan,
                                                                    peak_power_w=80.0),))
    assert part.to_json() == {
        "cap": "current", "gpu_index": 0, "gpu_name": "MI300X", "gpu_uuid": "GPU-0", "backend": "sim",
        "simulated": True, "method": "counter", "power_source": None, "limit_requested_w": None,
        "limit_enforced_w": None, "default_limit_w": 750.0,
        "repetitions": [{"ets_j": 4.0, "time_s": 0.0, "edp_js": 0.0, "mean_power_w": None, "peak_power_w": 80.0,
                         "calls": 1, "ets_low_j": None, "ets_high_j": None}],
        "summary": {"n": 1, "ets_j": 4.0, "time_s": 0.0, "edp_js": 0.0, "mean_power_w": None, "peak_power_w": 80.0,
                    "ets_std_j": 0.0, "ets_cv": 0.0, "ets_min_j": 4.0, "ets_max_j": 4.0, "ets_low_j": None,
                    "ets_high_j": None},
        "notes": [], "host": None, "rank": None,
    }


def test_combined_phases_over_repetitions_are_means_with_their_power_and_shares():
    """Two repetitions (figures per call, mean=True): load 0.25 then 0.125 J, compute 0.5 then 0.25 J:
    means 0.1875 and 0.375 J (0.5625 J in all, under 1 J), each in 0.5 s (under 1 s)."""
    first = {"load": figures(0.25, 0.125, 0.375, 0.25),
             "compute": figures(0.5, 0.25, 0.75, 0.5, told=False, why="overlaps")}
    second = {"compute": figures(0.25, 0.125, 0.5, 0.5), "load": figures(0.125, 0.0625, 0.25, 0.75)}
    combined = combine_phases([first, second], mean=True)
    assert combined is not None and list(combined) == ["load", "compute"]
    assert as_tuple(combined["load"]) == pytest.approx(
        (0.1875, 0.09375, 0.3125, 0.5, 0.375, 0.5, 1 / 3, True, ""), abs=1e-12)
    assert as_tuple(combined["compute"]) == pytest.approx(
        (0.375, 0.1875, 0.625, 0.5, 0.75, 0.5, 2 / 3, False, "overlaps"), abs=1e-12)
    assert combined["load"].why_not == "" and combined["load"].distinguishable is True
    assert combined["compute"].distinguishable is False


def test_combined_phases_over_gpus_add_energy_keep_the_mean_time_and_need_every_gpu_to_tell_a_phase():
    """Three GPUs measured together (mean=False): fwd 1 + 2 + 3 J in 1, 2, 3 s (6 J in 2 s, 3 W);
    an idle phase of no time and no energy on each has no power; the first reason given is kept."""
    parts = [{"fwd": figures(1.0, 0.5, 1.5, 1.0), "idle": figures(0.0, 0.0, 0.5, 0.0)},
             {"fwd": figures(2.0, 1.5, 2.5, 2.0), "idle": figures(0.0, 0.0, 0.25, 0.0, why="short")},
             {"fwd": figures(3.0, 2.5, 4.0, 3.0), "idle": figures(0.0, 0.0, 0.25, 0.0, told=False, why="merged")}]
    combined = combine_phases(parts, mean=False)
    assert combined is not None and list(combined) == ["fwd", "idle"]
    assert as_tuple(combined["fwd"]) == pytest.approx((6.0, 4.5, 8.0, 2.0, 3.0, 1.0, 1.0, True, ""), abs=1e-12)
    assert as_tuple(combined["idle"]) == (0.0, 0.0, 1.0, 0.0, "nan", 0.0, 0.0, False, "short")


def test_combined_phases_of_no_time_and_no_energy_have_no_power_and_no_shares():
    parts = [{"a": figures(0.0, 0.0, 0.5, 0.0), "b": figures(0.0, 0.0, 0.25, 0.0)},
             {"a": figures(0.0, 0.0, 0.5, 0.0), "b": figures(0.0, 0.0, 0.75, 0.0)}]
    for mean, high_a, high_b in ((True, 0.5, 0.5), (False, 1.0, 1.0)):
        combined = combine_phases(parts, mean=mean)
        assert combined is not None
        assert as_tuple(combined["a"]) == (0.0, 0.0, high_a, 0.0, "nan", "nan", "nan", True, "")
        assert as_tuple(combined["b"]) == (0.0, 0.0, high_b, 0.0, "nan", "nan", "nan", True, "")


def test_the_description_ends_with_each_host_domain_but_not_the_gpus_again():
    per_domain = {"gpu": DomainEnergy(12.0, 11.5, 12.25, True), "cpu": DomainEnergy(30.5, 30.0, 31.0, True),
                  "dram": DomainEnergy(4.25, 4.0, 4.5, True), "node": DomainEnergy(46.75, 45.5, 47.75, True)}
    result = EnergyResult(per_gpu=(gpu(0, rep(12.0, 2.0, peak_w=650.0, low_j=11.5, high_j=12.25)),),
                          per_domain=per_domain)
    assert result.describe() == ("ETS 12 J [11.5, 12.25], T 2 s, EDP 24 J s, mean 6 W, peak 650 W, n=1 "
                                 "(simulated, counter); cpu 30.5 J; dram 4.25 J; node 46.75 J")
    only_gpu = EnergyResult(per_gpu=result.per_gpu, per_domain={"gpu": per_domain["gpu"]})
    assert only_gpu.describe() == ("ETS 12 J [11.5, 12.25], T 2 s, EDP 24 J s, mean 6 W, peak 650 W, n=1 "
                                   "(simulated, counter)")


def test_a_gpus_samples_are_its_repetitions_values_of_the_field_asked_for_as_floats():
    part = gpu(0, rep(10.0, 1.0), rep(14.0, 4), rep(12.5, 0.5))
    assert part.samples("ets_j") == [10.0, 14.0, 12.5]
    assert part.samples("time_s") == [1.0, 4.0, 0.5] and all(type(v) is float for v in part.samples("time_s"))
    assert part.samples("edp_js") == [10.0, 56.0, 6.25]
