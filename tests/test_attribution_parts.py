"""meter/attribution.py's parts against figures worked out independently: the bound's resolution,
dating and clustered parts, the phase timeline, the grouping of phases the windows cannot tell apart,
the sum to the region's ETS, and every reason and refusal word for word. The synthetic publications
here are exact (a counter that publishes the true cumulative energy), so the tolerances are tight;
tests/test_attribution.py checks the whole fit against the benchmark's noisy synthetic truth.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import t as student_t

from pytest_gpuenergy.errors import MeasurementError
from pytest_gpuenergy.meter.attribution import (
    OTHER,
    Attribution,
    PhaseEnergy,
    PhaseTimeline,
    _adjusted_to,
    _bounded_lstsq,
    _confounded_groups,
    _merge_noise_dominated,
    _real_shares,
    attribute_phases,
)

# -- the fit's parts against figures worked out independently ---------------------------------------

def _overlap_s(spans: list[tuple[float, float]], start: float, end: float) -> float:
    """Time the spans cover in [start, end], summed span by span (the oracle: no searchsorted)."""
    return sum(max(0.0, min(e, end) - max(s, start)) for s, e in spans)


def _coverage(timeline: list[tuple[str, float, float]], names: list[str], times: np.ndarray) -> np.ndarray:
    spans = {n: [(s, e) for m, s, e in timeline if m == n] for n in names}
    return np.array([[_overlap_s(spans[n], times[i], times[i + 1]) for n in names] for i in range(len(times) - 1)])


def _alternating(n: int, period_s: float, rng: np.random.Generator, length_s: tuple[float, float] = (0.007, 0.023),
                 ) -> list[tuple[str, float, float]]:
    """Phases a and b one after the other with random lengths, over n periods: the publications fall
    in either."""
    timeline, now, name = [], 0.0, "a"
    while now < n * period_s:
        length = float(rng.uniform(*length_s))
        timeline.append((name, now, min(now + length, n * period_s)))
        now, name = now + length, "b" if name == "a" else "a"
    return timeline


def _energies(timeline: list[tuple[str, float, float]], times: np.ndarray, powers_w: dict[str, float],
              noise_j: np.ndarray | None = None) -> np.ndarray:
    """The cumulative counter at each time: each phase at its power, plus any noise per window."""
    windows = _coverage(timeline, list(powers_w), times) @ np.array(list(powers_w.values()))
    if noise_j is not None:
        windows = windows + noise_j
    return np.concatenate(([0.0], np.cumsum(windows)))


def _attribute(timeline, times, energies, **kwargs):
    figures = {"t0_s": float(times[0]), "t1_s": float(times[-1]), "ets_j": float(energies[-1] - energies[0]),
               "ets_low_j": 0.0, "ets_high_j": 1e6, "calls": 1, "max_power_w": 1e4, **kwargs}
    return attribute_phases(times, energies, timeline, **figures)


def test_exact_windows_leave_only_the_counters_resolution_in_the_bound():
    rng = np.random.default_rng(11)
    times = np.arange(41) * 0.1
    timeline = _alternating(40, 0.1, rng)
    energies = _energies(timeline, times, {"a": 300.0, "b": 100.0})
    result = _attribute(timeline, times, energies, resolution_j=0.01)
    a = _coverage(timeline, ["a", "b"], times)
    # a window's energy is known to r: pushed through the fit as a worst case, |pinv(A)| summed by row
    resolution_w = np.abs(np.linalg.pinv(a)).sum(axis=1) * 0.01
    for j, (name, power_w) in enumerate((("a", 300.0), ("b", 100.0))):
        phase = result[name]
        assert phase.power_w == pytest.approx(power_w, rel=1e-9) and phase.told_apart
        assert phase.power_low_w == pytest.approx(power_w - resolution_w[j], rel=1e-6)
        assert phase.power_high_w == pytest.approx(power_w + resolution_w[j], rel=1e-6)
        assert phase.time_s == pytest.approx(a[:, j].sum(), rel=1e-12)
        assert phase.ets_j == pytest.approx(power_w * a[:, j].sum(), rel=1e-9)
    assert result.windows == 40 and result.notes == ()


def _hidden_b(n: int, rng: np.random.Generator) -> list[tuple[str, float, float]]:
    """b in the middle of every window, never under a publication (which all fall in a)."""
    timeline = []
    for i in range(n):
        start, b_s = i * 0.1 + float(rng.uniform(0.02, 0.05)), float(rng.uniform(0.01, 0.03))
        timeline += [("a", i * 0.1, start), ("b", start, start + b_s), ("a", start + b_s, (i + 1) * 0.1)]
    return timeline


@pytest.mark.parametrize("layout", ["alternating", "last two publications in different phases", "b under none"])
def test_a_dating_error_adds_the_larger_move_of_the_fit_with_every_publication_moved_and_its_attenuation(layout):
    times, d_s = np.arange(61) * 0.1, 2e-4
    timeline = {"alternating": lambda: _alternating(60, 0.1, np.random.default_rng(12)),
                "last two publications in different phases": lambda: _alternating(60, 0.1, np.random.default_rng(14)),
                "b under none": lambda: _hidden_b(60, np.random.default_rng(5))}[layout]()
    powers = {"a": 300.0, "b": 100.0}
    energies = _energies(timeline, times, powers)
    result = _attribute(timeline, times, energies, resolution_j=1e-12, dating_error_s=d_s)
    a = _coverage(timeline, ["a", "b"], times)
    fitted = np.linalg.lstsq(a, np.diff(energies), rcond=None)[0]
    moved_w = np.maximum(*(np.abs(np.linalg.lstsq(_coverage(timeline, ["a", "b"], times + s), np.diff(energies),
                                                  rcond=None)[0] - fitted) for s in (d_s, -d_s)))
    # each publication's error is uniform in +-d (variance d^2/3), counted once per window it bounds
    under = [next(name for name, s, e in timeline if s <= t < e or (t == times[-1] and e == t)) for t in times]
    edge_s2 = np.array([sum((1 if i in (0, len(times) - 1) else 2) * d_s ** 2 / 3 for i, u in enumerate(under) if u == n)
                        for n in powers])
    attenuation_w = np.abs(np.linalg.inv(a.T @ a) @ (edge_s2 * fitted))
    half_w = moved_w + attenuation_w + np.abs(np.linalg.pinv(a)).sum(axis=1) * 1e-12
    assert np.all(moved_w > 0.01) and np.all(attenuation_w > 1e-4)
    for j, name in enumerate(powers):
        phase = result[name]
        assert phase.power_w == pytest.approx(fitted[j], rel=1e-9)
        half = (phase.power_high_w - phase.power_low_w) / 2
        assert half == pytest.approx(half_w[j], rel=1e-6)
        assert half - moved_w[j] == pytest.approx(attenuation_w[j], rel=1e-6)     # the attenuation on its own


@pytest.mark.parametrize(("windows", "per_cluster"), [(9, 3), (12, 3), (40, 3)])
def test_phases_longer_than_half_a_window_take_windows_together_in_the_bound(windows, per_cluster):
    # Occurrences of 110-140 ms under 100 ms windows: windows that share one share its deviation, so
    # runs of ceil(2 x 140 / 100) = 3 windows count as one. With fewer such runs than two phases and
    # two degrees of freedom (9 windows: 3 runs), the textbook variance is taken that many times over.
    rng = np.random.default_rng(13)
    times = np.arange(windows + 1) * 0.1
    timeline = _alternating(windows, 0.1, rng, (0.11, 0.14))
    longest_s = max(e - s for _, s, e in timeline if e < times[-1])
    assert math.ceil(2 * longest_s / 0.1) == per_cluster
    noise_j = rng.normal(0, 0.5, windows)
    energies = _energies(timeline, times, {"a": 300.0, "b": 100.0}, noise_j)
    result = _attribute(timeline, times, energies, resolution_j=1e-12)
    a = _coverage(timeline, ["a", "b"], times)
    e = np.diff(energies)
    fitted = np.linalg.lstsq(a, e, rcond=None)[0]
    residual = e - a @ fitted
    inverse = np.linalg.inv(a.T @ a)
    n, k = a.shape
    ols = residual @ residual / (n - k) * np.diag(inverse)
    clusters = math.ceil(n / per_cluster)
    if clusters >= k + 2:
        scores = np.array([(a * residual[:, None])[c * per_cluster:(c + 1) * per_cluster].sum(axis=0)
                           for c in range(clusters)])
        meat = scores.T @ scores * clusters / (clusters - 1) * (n - 1) / (n - k)
        variance, dof = np.maximum(ols, np.diag(inverse @ meat @ inverse)), min(n - k, clusters - 1)
    else:
        variance, dof = ols * per_cluster, n - k
    half_w = student_t.ppf(0.995, dof) * np.sqrt(variance)
    for j, name in enumerate("ab"):
        phase = result[name]
        assert phase.power_w == pytest.approx(fitted[j], rel=1e-9)
        assert (phase.power_high_w - phase.power_low_w) / 2 == pytest.approx(half_w[j], rel=1e-6)


# -- the phase timeline ------------------------------------------------------------------------------

def _line() -> PhaseTimeline:
    # given out of order: a phase's place is where it first appears in time
    return PhaseTimeline([("b", 0.3, 0.35), ("a", 0.5, 0.6), ("a", 0.1, 0.2)], 0.0, 1.0)


def test_the_timeline_adds_up_each_phases_time_up_to_any_moment_and_the_rest_is_other():
    line = _line()
    assert line.marked == ["a", "b"] and line.names == ["a", "b", OTHER]
    assert line.other_s == pytest.approx(0.75) and line.longest_s == pytest.approx(0.1)
    moments = np.array([0.0, 0.15, 0.2, 0.32, 0.35, 0.55, 1.0, 2.0, -1.0])
    expected = [[0, 0, 0], [0.05, 0, 0.1], [0.1, 0, 0.1], [0.1, 0.02, 0.2], [0.1, 0.05, 0.2], [0.15, 0.05, 0.35],
                [0.2, 0.05, 0.75], [0.2, 0.05, 0.75], [0, 0, 0]]          # clipped to the region
    np.testing.assert_allclose(line.cumulative(moments), expected, atol=1e-12)
    np.testing.assert_allclose(line.totals_s(), [0.2, 0.05, 0.75], atol=1e-12)
    np.testing.assert_allclose(line.coverage(np.array([0.0, 0.25, 0.5, 1.0])),
                               [[0.1, 0, 0.15], [0, 0.05, 0.2], [0.1, 0, 0.4]], atol=1e-12)


def test_the_phase_under_a_moment_is_its_index_and_outside_the_region_none():
    line = _line()
    under = line.phase_at(np.array([0.0, 0.15, 0.25, 0.33, 0.55, 0.999, 1.5, -0.5]))
    assert under.tolist() == [2, 0, 2, 1, 0, 2, -1, -1]


def test_phases_are_cut_to_the_region_and_one_outside_it_or_of_no_length_is_no_phase():
    line = PhaseTimeline([("early", -0.2, 0.1), ("empty", 0.4, 0.4), ("mid", 0.4, 0.7), ("late", 0.9, 1.3),
                          ("after", 1.3, 1.5), ("before", -1.0, -0.5)], 0.0, 1.0)
    assert line.names == ["early", "mid", "late", OTHER]
    np.testing.assert_allclose(line.totals_s(), [0.1, 0.3, 0.1, 0.5], atol=1e-12)
    assert line.longest_s == pytest.approx(0.3)


@pytest.mark.parametrize(("uncovered_s", "other"), [(0.0, False), (5e-10, False), (2e-9, True), (1e-3, True)])
def test_other_is_a_phase_only_where_the_marked_ones_leave_more_than_a_billionth_of_the_region(uncovered_s, other):
    line = PhaseTimeline([("a", 0.0, 0.5), ("b", 0.5, 1.0 - uncovered_s)], 0.0, 1.0)
    assert (OTHER in line.names) is other
    assert line.cumulative(np.array([1.0])).shape == (1, 3 if other else 2)


def test_an_empty_timeline_is_all_other_and_touching_phases_do_not_overlap():
    line = PhaseTimeline([], 2.0, 3.0)
    assert line.names == [OTHER] and line.longest_s == 0.0 and line.totals_s().tolist() == [pytest.approx(1.0)]
    touching = PhaseTimeline([("a", 0.0, 0.5), ("b", 0.5 - 1e-13, 1.0)], 0.0, 1.0)
    assert touching.names == ["a", "b"]


@pytest.mark.parametrize(("timeline", "message"), [
    ([("a", math.nan, 0.2)], "phase 'a' ends (0.2) before it starts (nan): give each phase as (name, start_s, end_s) "
                             "with end_s >= start_s"),
    ([("a", 0.1, math.inf)], "phase 'a' ends (inf) before it starts (0.1): give each phase as (name, start_s, end_s) "
                             "with end_s >= start_s"),
    ([("a", 0.3, 0.2999)], "phase 'a' ends (0.2999) before it starts (0.3): give each phase as (name, start_s, end_s) "
                           "with end_s >= start_s"),
    ([(OTHER, 0.1, 0.2)], "a phase is named 'other', the name of the time between marked phases: rename it"),
    ([("a", 0.1, 0.3), ("b", 0.3 - 1e-9, 0.4)], "phases 'a' (0.100000-0.300000 s) and 'b' (0.300000-0.400000 s) overlap: "
                                                "end one phase before the next starts"),
])
def test_each_impossible_timeline_is_refused_word_for_word(timeline, message):
    with pytest.raises(MeasurementError) as caught:
        PhaseTimeline(timeline, 0.0, 1.0)
    assert str(caught.value) == message


# -- the sum to the region's ETS -----------------------------------------------------------------------

@pytest.mark.parametrize(("energy", "total", "low", "high", "weight", "expected"), [
    ([10, 20], 36, [0, 0], [100, 100], [1, 3], [11.5, 24.5]),          # the difference shared by weight
    ([10, 20], 26, [0, 0], [100, 100], [1, 3], [9.0, 17.0]),           # and taken away the same way
    ([10, 20], 36, [0, 0], [11, 100], [1, 3], [11.0, 25.0]),           # one at its limit: the other takes the rest
    ([10, 20], 36, [0, 0], [100, 100], [0, 0], [12.0, 24.0]),          # no variance known: in proportion to energy
    ([10, 20], 36, [0, 0], [100, 100], [math.inf, math.nan], [12.0, 24.0]),
    ([10, 20], 36, [0, 0], [100, 100], [-1, 2], [10.0, 26.0]),         # a negative weight counts as none
    ([-5, 20], 15, [0, 0], [100, 100], [1, 1], [0.0, 15.0]),           # first into its limits
    ([10, 10], 30, [0, 0], [10, 10], [1, 1], [10.0, 10.0]),            # both at their limits: the sum cannot be met
    ([10, 10, 10], 45, [0, 0, 0], [12, 12, 100], [1, 1, 1], [12.0, 12.0, 21.0]),
    ([10, 10, 10], 20, [9, 9, 0], [100, 100, 100], [1, 1, 2], [9.0, 9.0, 2.0]),
    ([10, 20], 36, [0, 0], [100, 100], [0.1, 0.3], [11.5, 24.5]),       # weights below 1 in all are still weights
    ([0, 20], 30, [0, 0], [100, 100], [0, 0], [5e-13, 30.0]),          # a phase of no energy takes next to none
    ([30, 10], 20, [0, 0], [20, 100], [1, 1], [15.0, 5.0]),            # into its limits before sharing
    ([-5, 20], 30, [0, 0], [100, 100], [1, 1], [5.0, 25.0]),
    ([10, 10], 30, [0, 0], [12, 100], [2, 0], [12.0, 10.0]),           # the rest has no weight: left short
    ([10, 10, 10], 45, [0, 0, 0], [15, 12, 100], [1, 1, 1], [15.0, 12.0, 18.0]),  # held once, held for good
])
def test_the_phases_are_moved_to_the_total_in_proportion_to_their_variance_within_their_limits(
        energy, total, low, high, weight, expected):
    out = _adjusted_to(np.array(energy, dtype=float), float(total), np.array(low, dtype=float),
                       np.array(high, dtype=float), np.array(weight, dtype=float))
    np.testing.assert_allclose(out, expected, rtol=1e-12, atol=1e-12)


def test_an_attribution_is_read_by_phase_name_and_told_apart_only_where_every_phase_is():
    phase = lambda name, told: PhaseEnergy(name, 1.0, 0.9, 1.1, 0.1, 10.0, 9.0, 11.0, 0.5, 0.5, told)  # noqa: E731
    both = Attribution((phase("a", True), phase("b", True)), windows=9, confidence=0.99)
    assert both["b"].name == "b" and both.told_apart
    assert not Attribution((phase("a", True), phase("b", False)), windows=9, confidence=0.99).told_apart
    with pytest.raises(KeyError, match="'c'"):
        both["c"]


# -- what attribute_phases says where the data do not allow a fit -------------------------------------

def _two_phase_exact(windows: int = 40, seed: int = 11):
    rng = np.random.default_rng(seed)
    times = np.arange(windows + 1) * 0.1
    timeline = _alternating(windows, 0.1, rng)
    return timeline, times, _energies(timeline, times, {"a": 300.0, "b": 100.0})


def test_publications_are_taken_in_time_order_and_those_outside_the_region_are_ignored():
    timeline, times, energies = _two_phase_exact()
    plain = _attribute(timeline, times, energies, resolution_j=0.01, dating_error_s=1e-4)
    order = np.random.default_rng(0).permutation(len(times))
    outside_t = np.concatenate((times[order], [-0.3, -0.1, 4.2, 5.0]))
    outside_e = np.concatenate((energies[order], [-50.0, -20.0, energies[-1] + 30, energies[-1] + 9000]))
    shuffled = attribute_phases(outside_t, outside_e, timeline, t0_s=0.0, t1_s=4.0, ets_j=float(energies[-1]),
                                ets_low_j=0.0, ets_high_j=1e6, calls=1, max_power_w=1e4, resolution_j=0.01,
                                dating_error_s=np.concatenate((np.full(len(times), 1e-4), [1.0] * 4)))
    assert shuffled == plain


def test_a_fitted_power_beyond_what_the_gpu_draws_is_said_and_its_bound_is_the_whole_range():
    timeline, times, energies = _two_phase_exact()
    result = _attribute(timeline, times, energies, max_power_w=200.0, resolution_j=0.01)
    a = result["a"]
    assert result.notes[0] == ("the fit put a at 300 W, further from [0, 200] W than its bound allows: its power is not "
                               "constant over the region, so its bound is the whole range")
    assert not a.told_apart and a.why_not == "its fitted power lies outside what a GPU draws: the phase is not steady"
    assert a.power_low_w == pytest.approx(0.0, abs=1e-9) and a.power_high_w == pytest.approx(200.0)
    assert result["b"].told_apart and result["b"].power_low_w > 0


def test_a_regions_ets_that_no_split_within_the_gpus_range_reaches_is_said_with_what_the_phases_add_up_to():
    timeline, times, energies = _two_phase_exact()
    region_s = float(times[-1])
    result = _attribute(timeline, times, energies, max_power_w=320.0, ets_j=330.0 * region_s, ets_high_j=1e6,
                        resolution_j=0.01)
    assert result.notes == (f"the region's ETS ({330.0 * region_s:.4g} J) cannot be split among its phases' times "
                            f"within [0, 320] W: the phases add up to {320.0 * region_s:.4g} J",)
    assert sum(p.ets_j for p in result.phases) == pytest.approx(320.0 * region_s)
    for phase in result.phases:          # each at the GPU's most, and its bound widened to hold that
        assert phase.power_w == pytest.approx(320.0) and phase.ets_high_j >= phase.ets_j


def test_a_bound_over_half_the_gpus_range_says_the_windows_barely_tell_the_phase_apart():
    timeline, times, energies = _two_phase_exact()
    a = _coverage(timeline, ["a", "b"], times)
    per_joule_w = np.abs(np.linalg.pinv(a)).sum(axis=1)       # the resolution's half-width per J of resolution
    for share, loose in ((0.52, True), (0.48, False)):
        resolution_j = share * 1000.0 / 2 / per_joule_w[0]    # a's bound spans this share of [0, 1000] W
        result = _attribute(timeline, times, energies, max_power_w=1000.0, resolution_j=resolution_j)
        phase = result["a"]
        assert phase.power_high_w - phase.power_low_w == pytest.approx(share * 1000.0, rel=1e-6)
        assert phase.told_apart is not loose
        if loose:
            assert phase.why_not == ("its bound spans most of what the GPU can draw: the counter's windows barely "
                                     "tell it apart (a longer region, or calls spread across the publications)")


def test_one_window_gives_a_phase_no_bound_but_the_gpus_range():
    timeline = [("a", 0.0, 0.04), ("b", 0.04, 0.1)]
    result = attribute_phases([0.0, 0.1], [0.0, 16.0], timeline, t0_s=0.0, t1_s=0.1, ets_j=16.0, ets_low_j=15.0,
                              ets_high_j=17.0, calls=2, max_power_w=500.0)
    assert result.windows == 1 and not result.told_apart
    for phase in result.phases:
        assert phase.why_not == "too few counter windows (1) to tell 2 phases apart: a longer region is needed"
    one = attribute_phases([0.0, 0.1], [0.0, 16.0], [("a", 0.0, 0.1)], t0_s=0.0, t1_s=0.1, ets_j=16.0, ets_low_j=15.0,
                           ets_high_j=17.0, calls=2, max_power_w=500.0)
    assert [p.name for p in one.phases] == ["a"] and one["a"].ets_j == pytest.approx(8.0)
    assert one["a"].ets_low_j == pytest.approx(7.5) and one["a"].ets_high_j == pytest.approx(8.5)  # the region's, per call
    assert one["a"].why_not.startswith("its bound spans most of what the GPU can draw")


def test_each_phases_bound_is_cut_to_what_the_regions_bound_leaves_once_the_others_take_their_extremes():
    # no whole window: each phase between 100 W and 400 W over its time, and the region within [20, 21] J
    result = attribute_phases([0.0, 1.0], [0.0, 400.0], [("a", 0.2, 0.24), ("b", 0.24, 0.3)], t0_s=0.2, t1_s=0.3,
                              ets_j=20.5, ets_low_j=20.0, ets_high_j=21.0, calls=1, max_power_w=400.0,
                              min_power_w=100.0)
    a, b = result["a"], result["b"]
    assert (a.ets_low_j, a.ets_high_j) == (pytest.approx(4.0), pytest.approx(15.0))    # 21 - b's least (6 J)
    assert (b.ets_low_j, b.ets_high_j) == (pytest.approx(6.0), pytest.approx(17.0))    # 21 - a's least (4 J)
    assert a.ets_j == pytest.approx(8.2) and b.ets_j == pytest.approx(12.3)            # the region's mean power
    assert a.power_low_w == pytest.approx(100.0) and b.power_high_w == pytest.approx(17.0 / 0.06)
    assert a.time_share == pytest.approx(0.4) and b.energy_share == pytest.approx(12.3 / 20.5)
    tight = attribute_phases([0.0, 1.0], [0.0, 400.0], [("a", 0.2, 0.24), ("b", 0.24, 0.3)], t0_s=0.2, t1_s=0.3,
                             ets_j=38.0, ets_low_j=37.0, ets_high_j=39.0, calls=1, max_power_w=400.0)
    assert tight["a"].ets_low_j == pytest.approx(37.0 - 24.0) and tight["b"].ets_low_j == pytest.approx(37.0 - 16.0)


def test_a_region_that_drew_nothing_has_no_energy_shares():
    timeline, times, _ = _two_phase_exact()
    result = _attribute(timeline, times, np.zeros(len(times)), ets_j=0.0, ets_low_j=0.0, ets_high_j=0.0)
    assert all(math.isnan(p.energy_share) and p.ets_j == 0.0 for p in result.phases)


@pytest.mark.parametrize(("change", "message"), [
    ({"t1_s": 0.0}, "a region needs t1_s > t0_s and at least one call (got 0.0-0.0 s, 1 calls)"),
    ({"t1_s": -1.0}, "a region needs t1_s > t0_s and at least one call (got 0.0--1.0 s, 1 calls)"),
    ({"calls": 0}, "a region needs t1_s > t0_s and at least one call (got 0.0-1.0 s, 0 calls)"),
    ({"confidence": 1.0}, "attribution needs 0 < confidence < 1 and 0 <= min_power_w < max_power_w "
                          "(got 1.0, 0.0 W, 700.0 W)"),
    ({"confidence": 0.0}, "attribution needs 0 < confidence < 1 and 0 <= min_power_w < max_power_w "
                          "(got 0.0, 0.0 W, 700.0 W)"),
    ({"min_power_w": 700.0}, "attribution needs 0 < confidence < 1 and 0 <= min_power_w < max_power_w "
                             "(got 0.99, 700.0 W, 700.0 W)"),
    ({"min_power_w": -1.0}, "attribution needs 0 < confidence < 1 and 0 <= min_power_w < max_power_w "
                            "(got 0.99, -1.0 W, 700.0 W)"),
    ({"ets_j": 1.8}, "the region's ETS 1.8 J lies outside its bound [1.9, 2.1] J"),
    ({"ets_j": 2.2}, "the region's ETS 2.2 J lies outside its bound [1.9, 2.1] J"),
    ({"energies_j": [0.0, 1.0]}, "3 publication times but 2 energies and 1 dating errors: give one energy (and one "
                                 "dating error, or one for all) per time"),
    ({"energies_j": [0.0, 3.0, 2.0]}, "the energy counter went backwards inside the region: no attribution is possible"),
    ({"times_s": [0.0, 0.5, 0.5]}, "two publications are dated to the same moment: give each publication once"),
])
def test_impossible_figures_are_refused_word_for_word(change, message):
    figures = {"times_s": [0.0, 0.5, 1.0], "energies_j": [0.0, 1.0, 2.0], "timeline": [("a", 0.1, 0.2)],
               "t0_s": 0.0, "t1_s": 1.0, "ets_j": 2.0, "ets_low_j": 1.9, "ets_high_j": 2.1, "calls": 1,
               "max_power_w": 700.0, **change}
    with pytest.raises(MeasurementError) as caught:
        attribute_phases(**figures)
    assert str(caught.value) == message


def test_the_edges_of_what_is_allowed_are_accepted():
    figures = {"times_s": [0.0, 0.5, 1.0], "energies_j": [0.0, 1.0, 1.0], "timeline": [("a", 0.1, 0.2)],
               "t0_s": 0.0, "t1_s": 1.0, "ets_j": 1.0, "ets_low_j": 1.0, "ets_high_j": 1.0, "calls": 1,
               "max_power_w": 700.0}
    assert attribute_phases(**figures).windows == 2                     # a counter that stands still, ETS on its bound
    assert attribute_phases(**figures | {"min_power_w": 0.0, "confidence": 0.5}).confidence == 0.5
    assert attribute_phases(**figures | {"dating_error_s": [0.0, 0.0, 0.0]}).windows == 2


# -- phases the windows cannot tell apart: the grouping -------------------------------------------------

@pytest.mark.parametrize(("errors_s", "real"), [
    ([0.001] * 4, 1 - (1e-6 / 3 / 0.01) * (0.68 + 0.52 + 0.52) / 3 / (0.08 / 3)),
    # each window's two edges with their own errors: (under - share)^2 d^2 / 3 at each
    ([0.001, 0.002, 0.001, 0.003], 1 - ((0.04 * 4 + 0.64) + (0.16 + 0.36 * 4) + (0.16 * 9 + 0.36)) * 1e-6 / 3 / 0.01 / 3
     / (0.08 / 3)),
    ([0.0] * 4, 1.0),
])
def test_the_real_part_of_a_share_is_its_variance_less_the_dating_noise_worked_out_by_hand(errors_s, real):
    # shares of phase 0: 0.2, 0.6, 0.4 (variance 0.08 / 3); the publications alternate between the phases
    coverage = np.array([[0.02, 0.08], [0.06, 0.04], [0.04, 0.06]])
    found = _real_shares(coverage, [[0], [1]], np.array([0, 1, 0, 1]), np.array(errors_s))
    np.testing.assert_allclose(found, [real, real], rtol=1e-12)
    assert _real_shares(coverage, [[0, 1]], np.array([0, 1, 0, 1]), np.array(errors_s)).tolist() == [-math.inf]


def test_a_group_whose_share_varies_mostly_by_dating_noise_joins_the_group_it_moves_with():
    rng = np.random.default_rng(1)
    a, b = rng.uniform(0.02, 0.04, 50), rng.uniform(0.02, 0.04, 50)
    c = 0.01 + 0.001 * (a - a.mean())               # hardly varies, and only with a
    coverage = np.column_stack([a, b, c, 0.1 - a - b - c])
    at_edge = rng.integers(0, 4, 51)
    groups = [[0], [1], [2], [3]]
    assert _merge_noise_dominated(coverage, groups, at_edge, np.full(51, 1e-3)) == [[1], [3], [0, 2]]
    assert _merge_noise_dominated(coverage, groups, at_edge, np.full(51, 1e-7)) == groups   # all real enough
    # with noise as large as the shares themselves every group goes, one pair at a time
    assert _merge_noise_dominated(coverage, groups, at_edge, np.full(51, 0.05)) == [[0, 1, 2, 3]]


def test_windows_of_different_lengths_are_compared_by_their_shares_not_their_times():
    # c hardly varies, and only with d; the windows' lengths vary by a factor of three, which moves
    # every phase's time in step and would hide which phase c moves with
    rng = np.random.default_rng(0)
    lengths = rng.uniform(0.05, 0.15, 60)
    a, d = rng.uniform(0.2, 0.35, 60), rng.uniform(0.2, 0.35, 60)
    c = 0.1 + 0.01 * (d - d.mean())
    coverage = np.column_stack([a, 1 - a - c - d, c, d]) * lengths[:, None]
    at_edge = rng.integers(0, 4, 61)
    assert _merge_noise_dominated(coverage, [[0], [1], [2], [3]], at_edge, np.full(61, 1e-3)) == [[0], [1], [2, 3]]


def test_a_group_that_moves_with_none_joins_the_first_other():
    coverage = np.column_stack([np.full(10, 0.05), np.full(10, 0.05)])    # no share varies at all
    assert _merge_noise_dominated(coverage, [[0], [1]], np.zeros(11, dtype=int), np.full(11, 1e-4)) == [[0, 1]]
    coverage3 = np.column_stack([np.full(10, 0.03), np.full(10, 0.03), np.full(10, 0.04)])
    assert _merge_noise_dominated(coverage3, [[0], [1], [2]], np.zeros(11, dtype=int), np.full(11, 1e-4)) == [[0, 1, 2]]


def test_columns_along_a_flat_direction_are_merged_and_the_rest_left_as_they_were():
    x = np.random.default_rng(1).uniform(0, 1, (20, 3))
    assert _confounded_groups(x, [[0], [1], [2]]) is None
    assert _confounded_groups(np.column_stack([x[:, 0], 2 * x[:, 0], x[:, 1], x[:, 2]]),
                              [[0], [1], [2], [3]]) == [[0, 1], [2], [3]]
    assert _confounded_groups(np.column_stack([x[:, 0], x[:, 1], x[:, 0] + x[:, 1], x[:, 2]]),
                              [[0], [1], [2], [3]]) == [[0, 1, 2], [3]]
    assert _confounded_groups(np.column_stack([x[:, 0], x[:, 1], 2 * x[:, 0]]), [[1], [0], [2]]) == [[1], [0, 2]]
    # groups of several columns are taken as their sum
    assert _confounded_groups(np.column_stack([x[:, 0], x[:, 1], x[:, 0] + x[:, 1], x[:, 2]]),
                              [[0, 1], [2], [3]]) == [[0, 1, 2], [3]]
    # flat to a part in a billion is flat; a part in ten million is information
    assert _confounded_groups(np.column_stack([x[:, 0], x[:, 0] * (1 + 1e-10 * x[:, 1])]), [[0], [1]]) == [[0, 1]]
    assert _confounded_groups(np.column_stack([x[:, 0], x[:, 0] * (1 + 1e-6 * x[:, 1])]), [[0], [1]]) is None
    # the tolerance is relative to the largest singular value (here sqrt(2)): 0.9e-8 of the columns' scale is flat
    assert _confounded_groups(np.column_stack([x[:, 0], x[:, 0] * (1 + 5e-8 * (x[:, 1] - 0.5))]), [[0], [1]]) == [[0, 1]]
    # a column takes part in a flat direction down to 1 % of its largest component (here 1.5 % of it)
    assert _confounded_groups(np.column_stack([x[:, 0], x[:, 1], x[:, 0] + 0.015 * x[:, 1], x[:, 2]]),
                              [[0], [1], [2], [3]]) == [[0, 1, 2], [3]]
    # each column is taken at its own scale: a phase of 0.1 ns a window that varies on its own is not flat
    assert _confounded_groups(np.column_stack([x[:, 0] * 1e-10, x[:, 1], x[:, 2]]), [[0], [1], [2]]) is None


# -- why a phase is not told apart, word for word ----------------------------------------------------

def _windows_of(parts: list[tuple[str, float]], windows: int, period_s: float = 0.1) -> list[tuple[str, float, float]]:
    """The same phases in the same order in every window, starting with it."""
    timeline = []
    for i in range(windows):
        now = i * period_s
        for name, length_s in parts:
            timeline.append((name, now, now + length_s))
            now += length_s
    return timeline


def test_phases_always_in_the_same_proportion_share_one_power_and_a_bound_from_what_the_others_can_draw():
    times = np.arange(11) * 0.1
    timeline = _windows_of([("a", 0.03), ("b", 0.07)], 10)
    energies = _energies(timeline, times, {"a": 300.0, "b": 100.0})
    result = _attribute(timeline, times, energies, resolution_j=0.01, max_power_w=1000.0, min_power_w=50.0)
    a, b = result["a"], result["b"]
    assert a.why_not == "the counter's windows always hold it in the same proportion to b: only their sum is known"
    assert b.why_not == "the counter's windows always hold it in the same proportion to a: only their sum is known"
    # Their mean power, 160 W, known to 10 W per J of resolution (one column of 0.1 s in each window).
    assert a.power_w == pytest.approx(160.0) and b.power_w == pytest.approx(160.0)
    # a: at least its 50 W, at most the pair's most less b's least; b the same way round
    assert (a.ets_low_j, a.ets_high_j) == (pytest.approx(50 * 0.3), pytest.approx(160.1 * 1.0 - 50 * 0.7))
    assert (b.ets_low_j, b.ets_high_j) == (pytest.approx(50 * 0.7), pytest.approx(160.1 * 1.0 - 50 * 0.3))
    # the same pair beside a third phase that the windows do see vary
    rng = np.random.default_rng(3)
    timeline = []
    for i in range(30):
        c_s = float(rng.uniform(0.01, 0.05))
        timeline += [("a", i * 0.1, i * 0.1 + 0.3 * (0.1 - c_s)), ("b", i * 0.1 + 0.3 * (0.1 - c_s), (i + 1) * 0.1 - c_s),
                     ("c", (i + 1) * 0.1 - c_s, (i + 1) * 0.1)]
    times = np.arange(31) * 0.1
    energies = _energies(timeline, times, {"a": 300.0, "b": 100.0, "c": 500.0})
    result = _attribute(timeline, times, energies, resolution_j=0.01)
    assert result["a"].why_not.endswith("same proportion to b: only their sum is known")
    assert result["c"].told_apart and result["c"].power_w == pytest.approx(500.0, rel=1e-9)


def _phases_a_microsecond_apart(lengths_s: list[float], windows: int = 40) -> list[tuple[str, float, float]]:
    """In each of ``windows`` 100 ms windows, phases a, b, ... of ``lengths_s`` (each up to a microsecond
    longer, drawn in order from a seeded generator) and one more to the window's end."""
    rng = np.random.default_rng(4)
    names = "abcdefgh"
    timeline = []
    for i in range(windows):
        start = i * 0.1
        for name, length_s in zip(names, lengths_s):
            end = start + length_s + 1e-6 * float(rng.uniform())
            timeline.append((name, start, end))
            start = end
        timeline.append((names[len(lengths_s)], start, (i + 1) * 0.1))
    return timeline


def test_shares_that_vary_only_by_the_dating_error_name_the_phases_they_cannot_be_told_from():
    # a's share of each window varies by a microsecond in 30 ms; the publications are dated within 0.1 ms
    times = np.arange(41) * 0.1
    timeline = _phases_a_microsecond_apart([0.03])
    energies = _energies(timeline, times, {"a": 300.0, "b": 100.0})
    result = _attribute(timeline, times, energies, dating_error_s=1e-4)
    assert result["a"].why_not == ("its share of the counter's windows varies hardly more than the publications' dating "
                                   "error: the windows cannot tell it from b")
    assert result["b"].why_not == ("its share of the counter's windows varies hardly more than the publications' dating "
                                   "error: the windows cannot tell it from a")
    assert _attribute(timeline, times, energies)["a"].told_apart      # read as information where no dating error is given


def test_a_phase_in_no_whole_window_says_so_and_takes_the_regions_mean_power_within_the_gpus_range():
    timeline = [("a", 0.2, 0.24), ("b", 0.24, 0.3)]
    over = attribute_phases([0.0, 1.0], [0.0, 400.0], timeline, t0_s=0.2, t1_s=0.3, ets_j=40.0, ets_low_j=35.0,
                            ets_high_j=45.0, calls=1, max_power_w=300.0)
    assert over["a"].why_not == "it lies in no whole counter window (only at the region's edges)"
    assert over["a"].ets_j == pytest.approx(12.0) and over["b"].ets_j == pytest.approx(18.0)    # 300 W, not 400 W
    assert over.notes == ("the region's ETS (40 J) cannot be split among its phases' times within [0, 300] W: the "
                          "phases add up to 30 J",)
    assert (over["a"].ets_low_j, over["a"].ets_high_j) == (pytest.approx(12.0), pytest.approx(12.0))
    under = attribute_phases([0.0, 1.0], [0.0, 400.0], timeline, t0_s=0.2, t1_s=0.3, ets_j=4.0, ets_low_j=3.0,
                             ets_high_j=5.0, calls=1, max_power_w=300.0, min_power_w=100.0)
    assert under["a"].ets_j == pytest.approx(4.0) and under["b"].ets_j == pytest.approx(6.0)     # 100 W, not 40 W
    assert under["b"].power_low_w == pytest.approx(100.0)


# -- per call, the fewest windows, and the sum to the region's ETS ----------------------------------

def test_two_phases_in_one_window_share_its_mean_power_per_call():
    result = attribute_phases([0.0, 0.1], [0.0, 16.0], [("a", 0.0, 0.04), ("b", 0.04, 0.1)], t0_s=0.0, t1_s=0.1,
                              ets_j=16.0, ets_low_j=15.0, ets_high_j=17.0, calls=2, max_power_w=500.0)
    a, b = result["a"], result["b"]
    assert (a.ets_j, b.ets_j) == (pytest.approx(3.2), pytest.approx(4.8))     # 160 W over 20 and 30 ms per call
    assert (a.time_s, b.time_s) == (pytest.approx(0.02), pytest.approx(0.03))
    assert a.power_w == pytest.approx(160.0) and a.power_high_w == pytest.approx(17.0 / 0.04)   # the region's most
    assert (a.ets_low_j, a.ets_high_j) == (0.0, pytest.approx(8.5))
    assert a.time_share == pytest.approx(0.4) and a.energy_share == pytest.approx(0.4)


def test_one_phase_over_two_windows_is_bounded_by_the_counters_resolution_alone():
    # one degree of freedom left: the fit's spread is known (zero here), so no window is too few
    result = attribute_phases([0.0, 0.1, 0.2], [0.0, 20.0, 40.0], [("a", 0.0, 0.2)], t0_s=0.0, t1_s=0.2, ets_j=40.0,
                              ets_low_j=35.0, ets_high_j=45.0, calls=2, max_power_w=500.0, resolution_j=0.001)
    a = result["a"]
    assert a.told_apart and result.windows == 2 and result.notes == ()
    assert a.power_w == pytest.approx(200.0) and a.time_s == pytest.approx(0.1) and a.ets_j == pytest.approx(20.0)
    assert (a.power_low_w, a.power_high_w) == (pytest.approx(199.99), pytest.approx(200.01))   # +-0.001 J / 0.1 s
    assert (a.ets_low_j, a.ets_high_j) == (pytest.approx(19.999), pytest.approx(20.001))


@pytest.mark.parametrize(("windows", "told"), [(3, False), (4, True)])
def test_two_phases_need_four_windows_two_more_than_the_phases(windows, told):
    timeline, times, energies = _two_phase_exact(windows=windows)
    result = _attribute(timeline, times, energies, resolution_j=0.01)
    assert result.told_apart is told
    if told:
        assert result["a"].power_w == pytest.approx(300.0, rel=1e-9) and result["b"].power_w == pytest.approx(100.0, rel=1e-6)
    else:
        assert result["a"].why_not == "too few counter windows (3) to tell 2 phases apart: a longer region is needed"


def test_the_regions_edges_move_each_phase_by_a_share_in_proportion_to_its_bounds_square():
    timeline, times, energies = _two_phase_exact()
    true_j = float(energies[-1])
    exact = _attribute(timeline, times, energies, resolution_j=0.01)
    moved = _attribute(timeline, times, energies, resolution_j=0.01, ets_j=true_j + 2.0)
    # each phase's bound half-width in J is its power half-width times its time
    half_j = np.array([(p.ets_high_j - p.ets_low_j) / 2 for p in exact.phases])
    expected_j = [p.ets_j for p in exact.phases] + 2.0 * half_j ** 2 / (half_j ** 2).sum()
    np.testing.assert_allclose([p.ets_j for p in moved.phases], expected_j, rtol=1e-9)
    assert sum(p.ets_j for p in moved.phases) == pytest.approx(true_j + 2.0, rel=1e-12) and moved.notes == ()


def test_a_phase_told_apart_has_no_reason_and_small_regions_have_shares():
    timeline, times, energies = _two_phase_exact()
    scale = 0.5 / float(energies[-1])                  # the same region at half a joule
    result = _attribute(timeline, times, energies * scale, resolution_j=1e-6)
    assert [p.why_not for p in result.phases] == ["", ""] and result.told_apart
    assert sum(p.energy_share for p in result.phases) == pytest.approx(1.0)
    assert result["a"].energy_share == pytest.approx(300.0 * result["a"].time_s * scale / 0.5, rel=1e-6)


def test_three_phases_in_the_same_proportion_name_the_two_others():
    times = np.arange(11) * 0.1
    timeline = _windows_of([("a", 0.03), ("b", 0.05), ("c", 0.02)], 10)
    energies = _energies(timeline, times, {"a": 300.0, "b": 100.0, "c": 200.0})
    result = _attribute(timeline, times, energies, resolution_j=0.01)
    assert result["a"].why_not == "the counter's windows always hold it in the same proportion to b, c: only their sum is known"
    assert result["c"].why_not == "the counter's windows always hold it in the same proportion to a, b: only their sum is known"
    # the group's mean power (180 W) beyond what the GPU is said to draw: the note names the group
    beyond = _attribute(timeline, times, energies, resolution_j=0.01, max_power_w=150.0)
    assert beyond.notes[0].startswith("the fit put a+b+c at 180 W, further from [0, 150] W than its bound allows")


def test_over_half_the_range_is_of_the_range_between_the_least_and_the_most_a_phase_can_draw():
    timeline, times, energies = _two_phase_exact()
    a = _coverage(timeline, ["a", "b"], times)
    per_joule_w = np.abs(np.linalg.pinv(a)).sum(axis=1)[0]
    # [100, 1000] W: half is 450 W; a bound 500 W wide is loose (it would not be of 1100 W)
    result = _attribute(timeline, times, energies, max_power_w=1000.0, min_power_w=50.0,
                        resolution_j=250.0 / per_joule_w)
    assert result["a"].power_high_w - result["a"].power_low_w == pytest.approx(500.0, rel=1e-6)
    assert result["a"].why_not.startswith("its bound spans most of what the GPU can draw")


def test_phases_are_checked_in_the_order_they_start_and_other_is_measured_against_the_regions_length():
    with pytest.raises(MeasurementError) as caught:
        PhaseTimeline([("a", 0.1, 0.3), ("b", 0.2, 0.25)], 0.0, 1.0)
    assert str(caught.value).startswith("phases 'a' (0.100000-0.300000 s) and 'b' (0.200000-0.250000 s) overlap")
    # a billionth of a 10 s region starting at 5 s is 1e-8 s; of a 0.1 s region, 1e-10 s
    assert OTHER in PhaseTimeline([("a", 5.0, 15.0 - 1.5e-8)], 5.0, 15.0).names
    assert OTHER not in PhaseTimeline([("a", 5.0, 15.0 - 5e-9)], 5.0, 15.0).names
    assert OTHER in PhaseTimeline([("a", 0.0, 0.1 - 5e-10)], 0.0, 0.1).names


# -- the bounded fit's stops, a sliver under a publication, three phases noise cannot tell apart ----

# Three powers whose unconstrained fit, (800.002, -1/3000, -0.002) W, puts two just below 0 W: held
# there, the first takes what they leave (a step of 1.5 mW in 800 W), then the second comes back
# above 0 W. With the third at 0 W the normal equations are [[14, 3], [3, 9]] x = [11200.007, 2400.003]
# (determinant 117), and the third's gradient there, 2 x 0.000923 - 2 x 0.000615 > 0, keeps it at 0 W.
_A3 = np.array([[2.0, 0.0, 2.0], [1.0, 3.0, 0.0], [3.0, 0.0, 2.0]])
_E3 = np.array([1600.0, 800.001, 2400.002])
_OPTIMUM3 = np.array([93600.054 / 117, 0.021 / 117, 0.0])


@pytest.mark.parametrize(("a_scale", "e_scale", "high"), [
    (1.0, 1.0, 1000.0),
    (1e-6, 1e-6, 1000.0),      # windows and energies a million times smaller: the same powers, gradients of 1e-12
    (1.0, 1e-6, 1.0),          # microwatts: the first step moves 1.5 nW
    (1.0, 1e-9, 1.0),          # nanowatts: the first step moves 1.5e-12 W, the last under the stop of 1e-12 W
])
def test_the_bounded_fit_ends_at_the_optimum_at_any_scale(a_scale, e_scale, high):
    found = _bounded_lstsq(_A3 * a_scale, _E3 * e_scale, 0.0, high)
    np.testing.assert_allclose(found, _OPTIMUM3 * e_scale / a_scale, rtol=1e-9, atol=0)


def test_where_no_step_lowers_the_computed_cost_the_bounded_fit_keeps_the_clipped_least_squares_powers():
    # A megajoule per window that no power explains (orthogonal to both columns): the optimum,
    # (1499.99 / 3, 0) W, costs 3.3e-5 J^2 less than the clipped (500, 0) W, below the resolution of a
    # cost of 4e12 J^2, so no step is seen to lower it; the fit keeps the clipped powers.
    a = np.array([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0], [0.0, 1.0], [1.0, 1.0]])
    e = a @ np.array([500.0, -0.01]) + 1e6 * np.array([1.0, -1.0, 1.0, -1.0, 0.0])
    found = _bounded_lstsq(a, e, 0.0, 1000.0)
    np.testing.assert_array_equal(found, np.clip(np.linalg.lstsq(a, e, rcond=None)[0], 0.0, 1000.0))
    np.testing.assert_allclose(found, [500.0, 0.0], rtol=1e-12, atol=0)

    def cost(x: np.ndarray) -> float:
        r = a @ x - e
        return float(r @ r)
    assert cost(found) == cost(np.array([1499.99 / 3, 0.0]))


def test_a_publication_in_a_sliver_too_short_to_be_other_lies_under_no_phase():
    # a from 0 to 1000 s but for 2^-20 s (under a billionth of the region) round the publication at 500 s
    half_s, d_s = 2.0 ** -21, 2.0 ** -23
    timeline = [("a", 0.0, 500.0 - half_s), ("a", 500.0 + half_s, 1000.0)]
    assert PhaseTimeline(timeline, 0.0, 1000.0).names == ["a"]
    times = np.arange(251) * 4.0
    energies = _energies(timeline, times, {"a": 250.0})
    result = _attribute(timeline, times, energies, resolution_j=0.001, dating_error_s=d_s, max_power_w=1000.0)
    a = _coverage(timeline, ["a"], times)
    fitted = float(np.linalg.lstsq(a, np.diff(energies), rcond=None)[0][0])
    moved_w = max(abs(float(np.linalg.lstsq(_coverage(timeline, ["a"], times + s), np.diff(energies),
                                            rcond=None)[0][0]) - fitted) for s in (d_s, -d_s))
    # every publication but the one at 500 s lies under a: each counted once per window it bounds
    edge_s2 = (1 + 2 * 248 + 1) * d_s ** 2 / 3
    half_w = moved_w + edge_s2 * fitted / float(a[:, 0] @ a[:, 0]) + float(a[:, 0].sum() / (a[:, 0] @ a[:, 0])) * 0.001
    phase = result["a"]
    assert phase.told_apart and phase.power_w == pytest.approx(250.0, rel=1e-12) and result.notes == ()
    assert (phase.power_high_w - phase.power_low_w) / 2 == pytest.approx(half_w, rel=1e-6)


def test_three_phases_whose_shares_vary_only_by_the_dating_error_each_name_the_two_others():
    # a's and b's shares of each window vary by a microsecond in 30 and 20 ms, and c's with them
    times = np.arange(41) * 0.1
    timeline = _phases_a_microsecond_apart([0.03, 0.02])
    energies = _energies(timeline, times, {"a": 300.0, "b": 100.0, "c": 200.0})
    result = _attribute(timeline, times, energies, dating_error_s=1e-4)
    reason = "its share of the counter's windows varies hardly more than the publications' dating error: the windows " \
             "cannot tell it from "
    assert [p.why_not for p in result.phases] == [reason + "b, c", reason + "a, c", reason + "a, b"]


@pytest.mark.parametrize(("seed", "period_s", "extra_j"), [(13, 1.0, 0.0), (12, 1.0, 7.3), (11, 10.0, 7.3)])
def test_a_region_of_kilojoules_split_to_its_ets_up_to_rounding_has_no_note(seed, period_s, extra_j):
    # 8 and 80 kJ: the phases add up to the ETS within a billionth of it (the last bits of the sum aside)
    rng = np.random.default_rng(seed)
    times = np.arange(41) * period_s
    timeline = _alternating(40, period_s, rng, (0.07 * period_s, 0.23 * period_s))
    energies = _energies(timeline, times, {"a": 300.0, "b": 100.0})
    ets_j = float(energies[-1]) + extra_j
    result = _attribute(timeline, times, energies, resolution_j=0.01, ets_j=ets_j)
    assert result.notes == ()
    assert sum(p.ets_j for p in result.phases) == pytest.approx(ets_j, rel=1e-12)
