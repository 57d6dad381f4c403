"""Phase attribution (meter/attribution.py) against a synthetic truth: the fit, its bounds, the sum,
the phases it cannot tell apart; and meter/phase_design.py, which says how long a region must be.

The truth comes from ``benchmarks/phase_attribution.py``'s ``synthetic_region`` (a counter that
publishes a known cumulative energy, floored to its resolution and dated within 0.1 ms): the
same generator the benchmark's figures come from.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from pytest_gpuenergy.errors import MeasurementError
from pytest_gpuenergy.meter.attribution import (
    OTHER,
    _bounded_lstsq,
    attribute_phases,
    publication_arrays,
)
from pytest_gpuenergy.meter.integrate import Publication
from pytest_gpuenergy.meter.phase_design import (
    _largest_empty_arc,
    alignment_gap_s,
    expected_rel_bounds,
    region_time_needed_s,
)

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(BENCH))

import phase_attribution as bench  # noqa: E402

NVML_S, AMD_S = 0.1, 0.001
RESOLUTION_J = {NVML_S: 0.001, AMD_S: 15.3e-6}


def _design(length_s: float) -> tuple[dict[str, float], dict[str, float]]:
    steps = bench.step(length_s)
    return {n: s for n, s, _ in steps}, {n: w for n, _, w in steps}


def _check_honest(region: bench.SyntheticRegion, result, *, within: float | None) -> None:
    """Every bound holds the truth, nothing is negative or above the GPU's maximum, the phases add up
    to the region's ETS, and (``within``) each phase the caller asked about is within that share."""
    assert sum(p.ets_j for p in result.phases) * region.calls == pytest.approx(region.ets_j, rel=1e-9)
    for phase in result.phases:
        truth = region.truth_j[phase.name]
        assert phase.ets_low_j <= truth <= phase.ets_high_j, (phase, truth)
        assert 0 <= phase.ets_low_j <= phase.ets_j <= phase.ets_high_j
        assert phase.power_high_w <= bench.MAX_POWER_W * (1 + 1e-9)
        if within is not None and phase.name != "gap":
            assert phase.told_apart, phase
            assert abs(phase.ets_j / truth - 1) <= within, (phase.name, phase.ets_j / truth - 1)


# -- the fit against the truth ------------------------------------------------------------------------

def test_a_steady_step_without_noise_is_fitted_to_a_percent_with_every_figure_per_call():
    region = bench.synthetic_region(bench.step(0.01), region_s=8.0, period_s=NVML_S, seed=3, dating_error_s=0.0,
                                    length_jitter=0.02)
    result = region.attribute()
    _check_honest(region, result, within=0.01)
    names = [p.name for p in result.phases]
    assert names[:3] == ["forward", "backward", "update"] and names[-1] == OTHER
    forward = result["forward"]
    assert forward.time_s == pytest.approx(0.01, rel=0.05)           # per call, as the region's figures are
    assert forward.power_w == pytest.approx(450, rel=0.01)
    assert sum(p.time_share for p in result.phases) == pytest.approx(1.0)
    assert sum(p.energy_share for p in result.phases) == pytest.approx(1.0)
    assert result["backward"].energy_share > result["forward"].energy_share > result[OTHER].energy_share
    assert all(p.told_apart for p in result.phases if p.name != "gap") and result.windows >= 70


@pytest.mark.parametrize(("length_s", "period_s"), [
    pytest.param(0.002, NVML_S, marks=pytest.mark.slow),       # a 313 s region: 3 to 4 s of arithmetic
    *[(length_s, NVML_S) for length_s in (0.005, 0.01, 0.05)],
    *[(length_s, AMD_S) for length_s in (0.002, 0.005, 0.01, 0.05)],
])
def test_each_phase_length_is_within_ten_percent_for_the_region_the_design_asks(length_s, period_s):
    phases, powers = _design(length_s)
    needed_s = region_time_needed_s(phases, powers, period_s, 0.10, power_noise=0.0,
                                    resolution_j=RESOLUTION_J[period_s])
    assert math.isfinite(needed_s)
    for seed in range(2):
        region = bench.synthetic_region(bench.step(length_s), region_s=needed_s, period_s=period_s, seed=seed,
                                        resolution_j=RESOLUTION_J[period_s])
        result = region.attribute()
        _check_honest(region, result, within=0.10)
        for phase in result.phases:
            if phase.name != "gap":    # the bound the design promised, give or take its approximation
                assert (phase.ets_high_j - phase.ets_low_j) / 2 / phase.ets_j <= 0.15, phase


@pytest.mark.parametrize(("length_s", "period_s"), [(0.002, AMD_S), (0.05, AMD_S), (0.01, NVML_S)])
def test_with_noisy_phases_the_fit_stays_within_ten_percent_and_its_bounds_hold(length_s, period_s):
    phases, powers = _design(length_s)
    needed_s = region_time_needed_s(phases, powers, period_s, 0.10, power_noise=0.02,
                                    resolution_j=RESOLUTION_J[period_s])
    region_s = min(needed_s, 40.0)       # 10 ms under NVML needs 266 s: 40 s is checked for honesty, not 10 %
    for seed in range(3):
        region = bench.synthetic_region(bench.step(length_s), region_s=region_s, period_s=period_s, seed=seed,
                                        power_noise=0.02, resolution_j=RESOLUTION_J[period_s])
        _check_honest(region, region.attribute(), within=0.10 if region_s == needed_s else None)


def test_a_missed_publication_only_makes_one_window_longer():
    region = bench.synthetic_region(bench.step(0.01), region_s=8.0, period_s=NVML_S, seed=6)
    kept = np.ones(len(region.times_s), dtype=bool)
    kept[::7] = False                                    # the reader missed one publication in seven
    result = attribute_phases(region.times_s[kept], region.energies_j[kept], region.timeline, t0_s=region.t0_s,
                              t1_s=region.t1_s, ets_j=region.ets_j, ets_low_j=region.ets_low_j,
                              ets_high_j=region.ets_high_j, calls=region.calls, max_power_w=bench.MAX_POWER_W,
                              dating_error_s=region.dating_error_s)
    _check_honest(region, result, within=0.05)


def test_dating_jitter_under_a_1ms_counter_shrinks_the_powers_and_the_bound_allows_for_it():
    # 1 ms windows dated within 0.1 ms: each window's length is off by up to a fifth, which a plain
    # fit reads as real coverage and so draws every power ~0.2 % towards zero (errors in the
    # variables). A 30 s region makes the statistical part far smaller than that.
    for seed in range(2):
        region = bench.synthetic_region(bench.step(0.05), region_s=30.0, period_s=AMD_S, seed=seed,
                                        resolution_j=RESOLUTION_J[AMD_S])
        _check_honest(region, region.attribute(), within=0.01)


def test_a_phase_at_the_gpus_maximum_and_one_at_zero_never_leave_the_range():
    steps = [("burst", 0.004, bench.MAX_POWER_W), ("quiet", 0.006, 0.0), (OTHER, 0.003, 80.0)]
    for seed in range(4):
        region = bench.synthetic_region(steps, region_s=6.0, period_s=NVML_S, seed=seed, power_noise=0.02,
                                        idle_power_w=80.0)
        result = region.attribute()
        _check_honest(region, result, within=None)
        assert result["burst"].power_w <= bench.MAX_POWER_W and result["quiet"].ets_low_j >= 0
        assert result["burst"].power_w == pytest.approx(bench.MAX_POWER_W, rel=0.1)


# -- phases it cannot tell apart ----------------------------------------------------------------------

def test_calls_that_always_line_up_with_the_publications_are_flagged_with_a_bound_that_holds():
    # A 20 ms call under a 100 ms counter, no gap, no jitter: every window holds five whole calls.
    region = bench.synthetic_region(bench.step(0.004), region_s=6.0, period_s=NVML_S, seed=1, gap=False,
                                    length_jitter=0.0, dating_error_s=0.0)
    result = region.attribute()
    _check_honest(region, result, within=None)
    assert not result.told_apart
    for phase in result.phases:
        assert not phase.told_apart and "same proportion" in phase.why_not
        # The whole split is unknown: each bound reaches from what the others leave to what they allow.
        assert phase.ets_high_j - phase.ets_low_j > 0.5 * phase.ets_j
    # The group's mean power for each (the sum to ETS moves them by a hair): no guess at a split.
    assert result["forward"].power_w == pytest.approx(result["backward"].power_w, rel=1e-3)


def test_coverage_that_varies_only_by_the_publications_dating_error_is_not_read_as_information():
    # The same lined-up calls, now with publications dated within 0.1 ms: the phase under each
    # publication seems to vary from window to window, but only by the dating noise. A plain
    # least-squares fit reads that as "backward draws nothing" with a bound of a few percent.
    region = bench.synthetic_region(bench.step(0.004), region_s=6.0, period_s=NVML_S, seed=1, gap=False,
                                    length_jitter=0.0, dating_error_s=1e-4)
    result = region.attribute()
    _check_honest(region, result, within=None)
    assert all(not p.told_apart and "dating error" in p.why_not for p in result.phases)


def test_too_few_windows_say_so_for_every_phase():
    region = bench.synthetic_region(bench.step(0.01), region_s=0.45, period_s=NVML_S, seed=2)
    result = region.attribute()
    _check_honest(region, result, within=None)
    assert result.windows < 6
    assert all(not p.told_apart and "too few counter windows" in p.why_not for p in result.phases)


def test_a_phase_only_at_the_regions_edges_is_named_and_bounded_by_what_the_gpu_can_draw():
    region = bench.synthetic_region(bench.step(0.01), region_s=2.0, period_s=NVML_S, seed=4)
    first = region.timeline[0]
    timeline = [("warm-up", first[1], first[1] + 0.004), *[(n, max(s, first[1] + 0.004), e)
                                                            for n, s, e in region.timeline]]
    times = region.times_s[region.times_s > first[1] + 0.01]
    result = attribute_phases(times, region.energies_j[-len(times):], timeline, t0_s=region.t0_s,
                              t1_s=region.t1_s, ets_j=region.ets_j, ets_low_j=region.ets_low_j,
                              ets_high_j=region.ets_high_j, calls=region.calls, max_power_w=bench.MAX_POWER_W,
                              dating_error_s=region.dating_error_s)
    warm = result["warm-up"]
    assert not warm.told_apart and "no whole counter window" in warm.why_not
    assert warm.ets_low_j == 0 and warm.ets_high_j == pytest.approx(bench.MAX_POWER_W * 0.004 / region.calls)
    assert result["backward"].told_apart


def test_no_publication_inside_the_region_gives_every_phase_the_region_mean_and_a_wide_bound():
    result = attribute_phases([0.0, 1.0], [0.0, 400.0], [("a", 0.2, 0.25), ("b", 0.25, 0.3)], t0_s=0.2, t1_s=0.3,
                              ets_j=40.0, ets_low_j=30.0, ets_high_j=50.0, calls=1, max_power_w=700.0)
    assert result.windows == 0 and not result.told_apart
    assert [p.name for p in result.phases] == ["a", "b"]         # they cover the region: no "other"
    assert result["a"].ets_j == pytest.approx(20.0) and "no whole counter window" in result["a"].why_not
    assert result["a"].ets_low_j == 0 and result["a"].ets_high_j == pytest.approx(35.0)   # 700 W x 50 ms
    assert sum(p.ets_j for p in result.phases) == pytest.approx(40.0)


# -- its parts ------------------------------------------------------------------------------------------

def test_the_bounded_least_squares_matches_scipy_on_problems_with_active_limits():
    lsq_linear = pytest.importorskip("scipy.optimize").lsq_linear
    rng = np.random.default_rng(0)
    for _ in range(40):
        n, k = rng.integers(6, 40), rng.integers(2, 7)
        a = rng.uniform(0, 0.05, (n, k))
        truth = rng.uniform(-300, 1000, k)            # some outside [0, 700]: their limits are active
        e = a @ truth + rng.normal(0, 0.5, n)
        ours = _bounded_lstsq(a, e, 0.0, 700.0)
        theirs = lsq_linear(a, e, bounds=(0.0, 700.0), method="bvls").x
        cost = lambda x: float(np.sum((a @ x - e) ** 2))   # noqa: E731
        assert cost(ours) <= cost(theirs) * (1 + 1e-7) + 1e-12
        assert np.all(ours >= 0) and np.all(ours <= 700)
        np.testing.assert_allclose(ours, theirs, rtol=0, atol=1e-6)       # a full-rank problem has one optimum


def test_the_bound_is_the_two_sided_t_interval_of_the_larger_of_the_textbook_and_robust_variances():
    stats = pytest.importorskip("scipy.stats")
    rng = np.random.default_rng(5)
    n, window_s = 40, 0.1
    share_s = rng.uniform(0.005, 0.045, n)                  # phase a at the start of each window, b the rest
    noise_j = rng.normal(0, 1, n) * ((share_s - 0.025) / 0.01) ** 2   # larger at the extremes: the robust one is larger
    energy_j = 300 * share_s + 100 * (window_s - share_s) + noise_j
    times = np.arange(n + 1) * window_s
    timeline = [t for i in range(n) for t in (("a", times[i], times[i] + share_s[i]),
                                              ("b", times[i] + share_s[i], times[i] + 0.05),
                                              ("b", times[i] + 0.05, times[i] + 0.075),
                                              ("b", times[i] + 0.075, times[i + 1]))]   # none over half a window
    result = attribute_phases(times, np.concatenate(([0.0], np.cumsum(energy_j))), timeline, t0_s=0.0,
                              t1_s=times[-1], ets_j=float(energy_j.sum()), ets_low_j=0.0, ets_high_j=1e6, calls=1,
                              max_power_w=1e4, resolution_j=1e-12)
    a = np.column_stack([share_s, window_s - share_s])
    fitted = np.linalg.lstsq(a, energy_j, rcond=None)[0]
    residual = energy_j - a @ fitted
    inverse = np.linalg.inv(a.T @ a)
    textbook = residual @ residual / (n - 2) * np.diag(inverse)
    meat = (a * residual[:, None]).T @ (a * residual[:, None]) * n / (n - 1) * (n - 1) / (n - 2)
    robust = np.diag(inverse @ meat @ inverse)
    assert robust[0] > textbook[0]
    half_w = stats.t.ppf(0.995, n - 2) * np.sqrt(np.maximum(textbook, robust))
    for j, name in enumerate("ab"):
        phase = result[name]
        assert phase.power_w == pytest.approx(fitted[j], rel=1e-9)
        assert (phase.power_high_w - phase.power_low_w) / 2 == pytest.approx(half_w[j], rel=1e-6)


def test_the_meters_publications_are_read_as_times_energies_and_dating_errors():
    pubs = [Publication(0.0995, 0.1005, 1500), Publication(0.199, 0.201, 2750)]
    assert publication_arrays(pubs) == ([0.1, 0.2], [1.5, 2.75], [pytest.approx(0.0005), pytest.approx(0.001)])


@pytest.mark.parametrize(("timeline", "words"), [
    ([("a", 0.1, 0.3), ("b", 0.2, 0.4)], "overlap: end one phase before the next starts"),
    ([("other", 0.1, 0.2)], "rename it"),
    ([("a", 0.3, 0.2)], "ends (0.2) before it starts (0.3)"),
])
def test_a_timeline_that_cannot_be_a_phase_timeline_is_refused_in_one_line(timeline, words):
    with pytest.raises(MeasurementError, match=r"^[^\n]*$") as caught:
        attribute_phases([0.0, 0.5, 1.0], [0.0, 1.0, 2.0], timeline, t0_s=0.0, t1_s=1.0, ets_j=2.0, ets_low_j=1.9,
                         ets_high_j=2.1, calls=1, max_power_w=700.0)
    assert words in str(caught.value)


@pytest.mark.parametrize(("change", "words"), [
    ({"energies_j": [0.0, 3.0, 2.0]}, "went backwards"),
    ({"times_s": [0.0, 0.5, 0.5]}, "same moment"),
    ({"ets_j": 5.0}, "lies outside its bound"),
    ({"energies_j": [0.0, 1.0]}, "3 publication times but 2 energies"),
    ({"dating_error_s": [0.001, 0.001]}, "and 2 dating errors"),
    ({"max_power_w": 0.0}, "0 <= min_power_w < max_power_w"),
    ({"calls": 0}, "at least one call"),
])
def test_impossible_figures_are_refused_naming_the_problem(change, words):
    figures = {"times_s": [0.0, 0.5, 1.0], "energies_j": [0.0, 1.0, 2.0], "timeline": [("a", 0.1, 0.2)],
               "t0_s": 0.0, "t1_s": 1.0, "ets_j": 2.0, "ets_low_j": 1.9, "ets_high_j": 2.1, "calls": 1,
               "max_power_w": 700.0, **change}
    with pytest.raises(MeasurementError, match=words):
        attribute_phases(**figures)


# -- designing the measurement ----------------------------------------------------------------------

def test_a_call_that_divides_the_counters_period_gets_the_shortest_gap_that_spreads_the_publications():
    gap = alignment_gap_s(0.02, NVML_S)                    # five whole calls per window without it
    assert 0 < gap < 0.01
    assert _largest_empty_arc(0.02, NVML_S, 8) == pytest.approx(1.0)
    assert _largest_empty_arc(0.02 + gap, NVML_S, 8) <= 0.25
    assert _largest_empty_arc(0.02 + gap - 0.02 / 400, NVML_S, 8) > 0.25     # and no shorter step does
    assert alignment_gap_s(0.02, AMD_S) == 0.0             # 1 ms windows sweep a 20 ms call by themselves
    assert alignment_gap_s(NVML_S / (5 + 0.618), NVML_S) == 0.0
    with pytest.raises(MeasurementError, match="call_s > 0"):
        alignment_gap_s(0.0, NVML_S)


def test_the_region_needed_grows_with_noise_shorter_phases_and_a_tighter_bound():
    phases, powers = _design(0.01)
    base = region_time_needed_s(phases, powers, NVML_S, 0.10, power_noise=0.02)
    assert region_time_needed_s(phases, powers, NVML_S, 0.05, power_noise=0.02) > 3 * base     # ~1/bound^2
    assert region_time_needed_s(phases, powers, NVML_S, 0.10, power_noise=0.04) > 3 * base     # ~noise^2
    assert region_time_needed_s(*_design(0.05), NVML_S, 0.10, power_noise=0.02) < base / 5
    assert region_time_needed_s(phases, powers, AMD_S, 0.10, power_noise=0.02) < base / 50
    # A dating error as long as the phase: no region is long enough.
    assert region_time_needed_s(phases, powers, NVML_S, 0.10, dating_error_s=0.01) == math.inf
    expected = expected_rel_bounds(phases, powers, NVML_S, base, power_noise=0.02)
    assert max(v for k, v in expected.items() if k != "gap") == pytest.approx(0.10, rel=0.05)
    with pytest.raises(MeasurementError, match="same names"):
        region_time_needed_s({"a": 0.01}, {"b": 100.0}, NVML_S, 0.1)
    with pytest.raises(MeasurementError, match="0 < wanted_rel_bound < 1"):
        region_time_needed_s(phases, powers, NVML_S, 1.5)


def test_the_expected_bound_matches_what_the_fit_reaches_where_occurrences_span_many_windows():
    # 50 ms phases under a 1 ms counter: fifty windows share each occurrence's deviation, so the
    # bound rests on the occurrences, not on the windows (the robust part of the design).
    phases, powers = _design(0.05)
    expected = expected_rel_bounds(phases, powers, AMD_S, 1.5, power_noise=0.02, resolution_j=RESOLUTION_J[AMD_S])
    steady = expected_rel_bounds(phases, powers, AMD_S, 1.5, power_noise=0.0, resolution_j=RESOLUTION_J[AMD_S])
    assert expected["forward"] > 1.5 * steady["forward"]
    reached = {name: [] for name in phases}
    for seed in range(3):
        region = bench.synthetic_region(bench.step(0.05), region_s=1.5, period_s=AMD_S, seed=seed, power_noise=0.02,
                                        resolution_j=RESOLUTION_J[AMD_S])
        for phase in region.attribute().phases:
            reached[phase.name].append((phase.ets_high_j - phase.ets_low_j) / 2 / phase.ets_j)
    for name, widths in reached.items():
        assert 0.4 < expected[name] / float(np.median(widths)) < 2.5, (name, expected[name], widths)


@pytest.mark.slow
def test_the_benchmark_writes_its_figures_labelled_simulated(tmp_path):
    done = subprocess.run([sys.executable, str(BENCH / "phase_attribution.py"), "--quick", "--seeds", "2",
                           "--cap-s", "6", "--out", str(tmp_path)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    assert "SIMULATED" in done.stdout and "region for 10 %" in done.stdout
    result = json.loads((tmp_path / "phase_attribution-quick.json").read_text())
    assert result["simulated"] is True and result["machine"]["gpu"].startswith("simulated GPU: synthetic")
    assert len(result["region_needed"]) == 16
    assert all(f["bound_holds_share"] == 1.0 for r in result["rows"] for f in r["phases"].values())

