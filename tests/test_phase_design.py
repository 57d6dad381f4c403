"""meter/phase_design.py on its own: the gap that spreads the publications over a call, the expected
bound of a planned measurement and the region length a wanted bound needs, checked against figures
worked out by hand (tests/test_attribution.py checks the design against the fit on a synthetic truth).

The hand-worked case is a call of one phase: every window is then wholly that phase, so the
coverage matrix is the period in every row and the fit's algebra reduces to sums.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from pytest_gpuenergy.errors import MeasurementError
from pytest_gpuenergy.meter.attribution import MIN_DOF
from pytest_gpuenergy.meter.phase_design import (
    _Design,
    _design,
    _largest_empty_arc,
    alignment_gap_s,
    expected_rel_bounds,
    lined_up_note,
    region_time_needed_s,
)

PERIOD_S = 0.1
ONE_PHASE_S = PERIOD_S / 5.618        # an irrational share of the period: the publications spread by themselves
POWER_W = 250.0


# -- the gap after each call ----------------------------------------------------------------------

@pytest.mark.parametrize(("cycle_s", "period_s", "count", "arc"), [
    (1.0, 0.25, 4, 0.25),            # four evenly spread points
    (1.0, 0.3, 3, 0.4),              # 0, 0.3, 0.6: the largest arc wraps round from 0.6 to 1
    (1.0, 0.5, 8, 0.5),              # repeated points count once
    (2.0, 0.3, 4, 0.55),             # 0, 0.15, 0.3, 0.45 of the cycle
    (1.0, 1.0, 5, 1.0),              # every point at 0: the whole cycle is empty
])
def test_the_largest_empty_arc_is_the_widest_gap_between_the_points_round_the_cycle(cycle_s, period_s, count, arc):
    assert _largest_empty_arc(cycle_s, period_s, count) == pytest.approx(arc, rel=1e-12)


def test_a_call_longer_than_the_period_counts_offsets_per_period_it_spans():
    # 0.35 s under 0.1 s: four periods per call, so 8 x 4 publications must leave no arc over 1/4.
    gap = alignment_gap_s(0.35, PERIOD_S)
    assert _largest_empty_arc(0.35 + gap, PERIOD_S, 32) <= 0.25
    assert gap == 0.0 or _largest_empty_arc(0.35 + gap - 0.35 / 400, PERIOD_S, 32) > 0.25
    gap = alignment_gap_s(0.2, PERIOD_S, offsets=4)     # two periods per call: 8 publications, none apart by 1/2
    assert gap > 0 and _largest_empty_arc(0.2 + gap, PERIOD_S, 8) <= 0.5
    assert _largest_empty_arc(0.2 + gap - 0.2 / 400, PERIOD_S, 8) > 0.5


def test_two_offsets_are_enough_and_each_offset_more_asks_for_a_finer_spread():
    assert alignment_gap_s(0.02, PERIOD_S, offsets=2) == 0.0             # an arc of the whole cycle is allowed
    gap = alignment_gap_s(0.02, PERIOD_S, offsets=3)
    assert gap == pytest.approx(0.02 * 14 / 400)
    assert _largest_empty_arc(0.02 + gap, PERIOD_S, 3) <= 2 / 3 < _largest_empty_arc(0.02 + gap - 0.02 / 400, PERIOD_S, 3)


def test_where_no_gap_up_to_a_whole_call_spreads_them_the_gap_is_a_whole_call():
    # 5000 offsets would need an arc under 0.04 % of the cycle: no step of call_s / 400 gives one.
    assert alignment_gap_s(0.02, PERIOD_S, offsets=5000) == 0.02
    assert _largest_empty_arc(0.04, PERIOD_S, 5000 * 1) > 2 / 5000


def test_the_gap_is_sought_up_to_a_whole_call_and_no_further():
    # A 20 ms call under 100 ms with a gap of s/400 of the call: the k-th publication falls at k x 2000 / (400 + s)
    # of the cycle, on a lattice of at most 400 + s <= 800 points, so some arc is at least 1/800, wider than the
    # 2/1601 that 1601 offsets allow. One step more (a lattice of 801 points, all reached) would spread them.
    assert alignment_gap_s(0.02, PERIOD_S, offsets=1601) == 0.02
    assert _largest_empty_arc(0.02 * 801 / 400, PERIOD_S, 1601) == pytest.approx(1 / 801, rel=1e-9)
    assert 1 / 801 <= 2 / 1601 < 1 / 800


@pytest.mark.parametrize(("call_s", "period_s", "offsets"), [(0.0, 0.1, 8), (0.02, 0.0, 8), (0.02, -0.1, 8),
                                                             (-0.02, 0.1, 8), (0.02, 0.1, 1)])
def test_a_gap_for_an_impossible_call_is_refused_in_one_line(call_s, period_s, offsets):
    with pytest.raises(MeasurementError) as caught:
        alignment_gap_s(call_s, period_s, offsets=offsets)
    assert str(caught.value) == (f"alignment_gap_s needs call_s > 0, period_s > 0 and offsets >= 2 "
                                 f"(got {call_s}, {period_s}, {offsets})")


# -- the expected bound: a design's half-widths -----------------------------------------------------

def _made(per_cluster: int, windows: int = 100) -> _Design:
    return _Design(names=("a", "b"), asked=np.array([True, True]), powers_w=np.array([300.0, 100.0]), windows=windows,
                   per_cluster=per_cluster, variance_w2=np.array([4.0, 9.0]), dating_w=np.array([1.0, 2.0]),
                   fixed_w=np.array([0.5, 0.25]))


@pytest.mark.parametrize(("per_cluster", "windows", "dof"), [(3, 50, 15), (1, 5, 3), (2, 8, 3), (3, 12, 3)])
def test_a_designs_half_width_is_t_times_the_scaled_deviation_plus_the_scaled_dating_part_and_the_fixed_part(
        per_cluster, windows, dof):
    design = _made(per_cluster)
    t = stats.t.ppf(0.995, dof)          # two-sided 99 %, on the fewer of the residual and the cluster dof
    scale = 100 / windows
    expected = t * np.sqrt(np.array([4.0, 9.0]) * scale) + np.array([1.0, 2.0]) * math.sqrt(scale) + [0.5, 0.25]
    np.testing.assert_allclose(design.half_widths_w(windows, 0.99), expected, rtol=1e-6)
    t90 = stats.t.ppf(0.95, dof)
    np.testing.assert_allclose(design.half_widths_w(windows, 0.90)[0], t90 * math.sqrt(4 * scale) + math.sqrt(scale) + 0.5,
                               rtol=1e-6)


@pytest.mark.parametrize(("per_cluster", "windows"), [(3, 11), (1, 3), (2, 7), (5, 0)])
def test_fewer_clusters_than_phases_plus_the_fits_dof_give_no_bound(per_cluster, windows):
    assert windows // per_cluster < 2 + MIN_DOF
    assert np.all(np.isinf(_made(per_cluster).half_widths_w(windows, 0.99)))


# -- the design of a one-phase call, worked out by hand -------------------------------------------------

def _one_phase(noise: float, dating_error_s: float, resolution_j: float) -> _Design:
    return _design({"a": ONE_PHASE_S}, {"a": POWER_W}, PERIOD_S, noise, dating_error_s, resolution_j, None)


def test_a_one_phase_call_that_spreads_by_itself_gets_no_gap_and_a_long_synthetic_run():
    assert alignment_gap_s(ONE_PHASE_S, PERIOD_S) == 0.0
    design = _one_phase(0.0, 0.0, 0.001)
    assert design.names == ("a",) and design.asked.tolist() == [True] and design.powers_w.tolist() == [POWER_W]
    # max(64, 400 periods' worth) calls of ~17.8 ms: 2248 calls, 40 s, 399 whole windows between publications
    # half a period apart from the start
    assert design.windows == 399
    assert design.per_cluster == 1                   # two phase lengths fit in one period


@pytest.mark.parametrize("resolution_j", [0.001, 0.004])
def test_without_noise_or_dating_error_the_variance_is_the_counters_quantisation_over_the_windows(resolution_j):
    design = _one_phase(0.0, 0.0, resolution_j)
    n = design.windows
    # Every window is one period of the phase: A'A = n P^2; a window's energy is off by r^2 / 6.
    assert design.variance_w2[0] == pytest.approx(resolution_j ** 2 / 6 / (n * PERIOD_S ** 2), rel=1e-9)
    assert design.fixed_w[0] == pytest.approx(resolution_j / PERIOD_S, rel=1e-9)    # |pinv A| summed, times r
    assert design.dating_w[0] == pytest.approx(0.0, abs=1e-9)


def test_a_dating_error_adds_its_variance_at_the_phases_power_and_an_attenuation_that_does_not_fall():
    d_s, r_j = 1e-4, 0.001
    design = _one_phase(0.0, d_s, r_j)
    n = design.windows
    window_variance_j2 = r_j ** 2 / 6 + 2 * d_s ** 2 / 3 * POWER_W ** 2      # two edges, each uniform in +-d
    assert design.variance_w2[0] == pytest.approx(window_variance_j2 / (n * PERIOD_S ** 2), rel=1e-9)
    # Each edge's variance d^2/3, twice per window: (A'A)^-1 S P = 2 d^2 P_W / (3 P^2) (give or take the one
    # edge the n windows have more than twice n / 2).
    attenuation_w = 2 * d_s ** 2 * POWER_W / (3 * PERIOD_S ** 2)
    assert design.fixed_w[0] == pytest.approx(r_j / PERIOD_S + attenuation_w, rel=1e-4)
    assert design.fixed_w[0] - r_j / PERIOD_S == pytest.approx(attenuation_w, rel=0.005)
    assert design.dating_w[0] == pytest.approx(0.0, abs=1e-9)       # every shifted window is still one period


@pytest.mark.parametrize("noise", [0.02, 0.05])
def test_each_occurrences_own_power_adds_its_share_of_the_windows_it_spans(noise):
    # One occurrence of length L at (1 + noise) P_W moves the fitted power by noise P_W L / (n P); the
    # occurrences fill the n windows (sum of L = n P), so the variance is (noise P_W)^2 L / (n P).
    design = _one_phase(noise, 0.0, 0.0)
    n = design.windows
    assert design.variance_w2[0] == pytest.approx((noise * POWER_W) ** 2 * ONE_PHASE_S / (n * PERIOD_S), rel=0.002)
    assert design.fixed_w[0] == 0.0 and design.dating_w[0] == pytest.approx(0.0, abs=1e-9)
    # and it adds to the quantisation's
    both = _one_phase(noise, 0.0, 0.001)
    assert both.variance_w2[0] - design.variance_w2[0] == pytest.approx(0.001 ** 2 / 6 / (n * PERIOD_S ** 2), rel=1e-6)


def test_the_variance_grows_as_the_square_of_the_occurrences_spread_for_several_phases():
    lengths, powers = {"a": 0.006, "b": 0.011, "c": 0.004}, {"a": 400.0, "b": 150.0, "c": 300.0}
    once = _design(lengths, powers, PERIOD_S, 0.02, 0.0, 0.0, None)
    twice = _design(lengths, powers, PERIOD_S, 0.04, 0.0, 0.0, None)
    np.testing.assert_allclose(twice.variance_w2, 4 * once.variance_w2, rtol=1e-9)
    np.testing.assert_allclose(twice.fixed_w, once.fixed_w, rtol=1e-12)
    assert np.all(once.variance_w2 > 0)


def test_the_dating_part_grows_with_the_dating_error_for_several_phases():
    lengths, powers = {"a": 0.006, "b": 0.011, "c": 0.004}, {"a": 400.0, "b": 150.0, "c": 300.0}
    designs = [_design(lengths, powers, PERIOD_S, 0.0, d_s, 0.0, None) for d_s in (0.0, 1e-4, 1e-3)]
    assert np.all(designs[0].dating_w < 1e-9) and np.all(designs[0].fixed_w < 1e-12)
    assert np.all(designs[1].dating_w > 0) and np.all(designs[2].dating_w > designs[1].dating_w)
    assert np.all(designs[2].fixed_w > 50 * designs[1].fixed_w)          # the attenuation: d^2
    # the dating noise's variance is weighted by the powers at the edges: a mean of P^2 over the coverage
    assert np.all(designs[1].variance_w2 > 0) and np.all(designs[0].variance_w2 == 0)


# -- a design's figures against their definitions, computed densely ---------------------------------

def _by_definition(lengths: dict[str, float], powers: dict[str, float], noise: float, dating_error_s: float,
                   resolution_j: float) -> dict[str, np.ndarray]:
    """What _design works out, from the definitions, over every occurrence and window at once (the
    oracle: no searchsorted, no loop over the windows each occurrence spans, no PhaseTimeline)."""
    names, lengths_s, powers_w = list(lengths), list(lengths.values()), [powers[n] for n in lengths]
    call_s = sum(lengths_s)
    gap_s = alignment_gap_s(call_s, PERIOD_S)
    if gap_s > 0:
        names, lengths_s, powers_w = [*names, "gap"], [*lengths_s, gap_s], [*powers_w, min(powers_w)]
    k, calls = len(names), max(64, math.ceil(400 * PERIOD_S / (call_s + gap_s)))
    # the same synthetic run: each occurrence lasts its length with a 1 % spread, seeded
    durations = np.array(lengths_s)[None, :] * (1 + 0.01 * np.random.default_rng(0).standard_normal((calls, k)))
    ends = np.cumsum(durations.ravel())
    starts, phase = ends - durations.ravel(), np.tile(np.arange(k), calls)
    edges = np.arange(PERIOD_S / 2, ends[-1], PERIOD_S)
    power = np.array(powers_w)

    def overlap_s(bounds: np.ndarray) -> np.ndarray:         # occurrences x windows
        return np.clip(np.minimum(ends[:, None], bounds[None, 1:]) - np.maximum(starts[:, None], bounds[None, :-1]),
                       0.0, None)

    def coverage(bounds: np.ndarray) -> np.ndarray:
        return np.column_stack([overlap_s(bounds)[phase == j].sum(axis=0) for j in range(k)])
    a = coverage(edges)
    inverse = np.linalg.inv(a.T @ a)
    pinv = inverse @ a.T
    drawn_j = overlap_s(edges) * power[phase][:, None]       # each occurrence's energy in each window
    # an occurrence at (1 + noise) times its power moves the fit by noise x pinv @ its energies
    robust = noise ** 2 * ((drawn_j @ pinv.T) ** 2).sum(axis=0)
    textbook = noise ** 2 * float((drawn_j ** 2).sum(axis=0).mean()) * np.diag(inverse)
    window_j2 = resolution_j ** 2 / 6 + 2 * dating_error_s ** 2 / 3 * float((a @ power ** 2).sum() / a.sum())
    # the phase under each publication: the one occurrence that holds it, well inside (phase_at looks 0.1 us round)
    holds = (starts[:, None] + 1e-7 < edges[None, :]) & (edges[None, :] < ends[:, None] - 1e-7)
    assert np.all(holds.sum(axis=0) == 1)
    edge_s2 = np.bincount(phase[holds.argmax(axis=0)], minlength=k) * 2 * dating_error_s ** 2 / 3
    return {"windows": np.array(len(a)), "robust": robust, "textbook": textbook,
            "variance": np.maximum(robust, textbook) + window_j2 * np.diag(inverse),
            "dating": np.abs(pinv @ (coverage(edges + dating_error_s) @ power) - power),
            "fixed": np.abs(pinv).sum(axis=1) * resolution_j + np.abs(inverse @ (edge_s2 * power)),
            "under": edge_s2 > 0}


@pytest.mark.parametrize(("lengths", "powers", "textbook_larger"), [
    # occurrences of 50, 2 and 20 ms: each phase's textbook variance is the larger (its windows' own noise)
    ({"a": 0.05, "b": 0.002, "c": 0.02}, {"a": 100.0, "b": 400.0, "c": 50.0}, [True, True, True]),
    # two phases and a gap: the occurrences' effect through the fit (the robust variance) is the larger
    ({"fwd": 0.008, "bwd": 0.012}, {"fwd": 400.0, "bwd": 250.0}, [False, False, False]),
])
def test_a_designs_figures_are_their_definitions_over_every_occurrence_and_window(lengths, powers, textbook_larger):
    design = _design(lengths, powers, PERIOD_S, 0.02, 1e-4, 0.001, None)
    expected = _by_definition(lengths, powers, 0.02, 1e-4, 0.001)
    assert design.windows == int(expected["windows"])
    assert (expected["textbook"] > expected["robust"]).tolist() == textbook_larger
    np.testing.assert_allclose(design.variance_w2, expected["variance"], rtol=1e-9)
    np.testing.assert_allclose(design.dating_w, expected["dating"], rtol=1e-7)
    np.testing.assert_allclose(design.fixed_w, expected["fixed"], rtol=1e-9)


def test_a_phase_under_no_publication_adds_no_dating_variance_of_its_own():
    # b lasts 5 us of each 17.8 ms call: none of the publications falls in it
    lengths, powers = {"a": ONE_PHASE_S, "b": 5e-6}, {"a": POWER_W, "b": 100.0}
    design = _design(lengths, powers, PERIOD_S, 0.02, 1e-4, 0.001, None)
    expected = _by_definition(lengths, powers, 0.02, 1e-4, 0.001)
    assert design.names == ("a", "b") and expected["under"].tolist() == [True, False]
    np.testing.assert_allclose(design.fixed_w, expected["fixed"], rtol=1e-6)


# -- the gap a design adds, and the phases it asks about -------------------------------------------

def test_a_call_that_needs_a_gap_gets_it_as_a_phase_at_the_lowest_power_or_the_idle_power_given():
    lengths, powers = {"fwd": 0.008, "bwd": 0.012}, {"fwd": 400.0, "bwd": 250.0}
    design = _design(lengths, powers, PERIOD_S, 0.02, 1e-4, 0.001, None)
    assert design.names == ("fwd", "bwd", "gap")
    assert design.powers_w.tolist() == [400.0, 250.0, 250.0] and design.asked.tolist() == [True, True, False]
    idle = _design(lengths, powers, PERIOD_S, 0.02, 1e-4, 0.001, 60.0)
    assert idle.powers_w.tolist() == [400.0, 250.0, 60.0]
    per_cluster = math.ceil(2 * max(0.008, 0.012, alignment_gap_s(0.02, PERIOD_S)) / PERIOD_S)
    assert design.per_cluster == per_cluster == 1
    assert _design({"long": 0.3}, {"long": 100.0}, PERIOD_S, 0.0, 0.0, 0.001, None).per_cluster == 6


def test_the_expected_bound_is_each_phases_half_width_over_its_power_for_the_windows_the_region_holds():
    design = _one_phase(0.02, 1e-4, 0.001)
    expected = expected_rel_bounds({"a": ONE_PHASE_S}, {"a": POWER_W}, PERIOD_S, 12.34)
    windows = 122                                     # floor(12.34 / 0.1) - 1 whole windows between publications
    assert expected == {"a": pytest.approx(float(design.half_widths_w(windows, 0.99)[0]) / POWER_W, rel=1e-12)}
    loose = expected_rel_bounds({"a": ONE_PHASE_S}, {"a": POWER_W}, PERIOD_S, 12.34, confidence=0.9)
    assert loose["a"] == pytest.approx(float(design.half_widths_w(windows, 0.9)[0]) / POWER_W, rel=1e-12)
    assert loose["a"] < expected["a"]


def test_the_expected_bound_passes_every_setting_to_the_design():
    kwargs = {"power_noise": 0.05, "dating_error_s": 3e-4, "resolution_j": 0.01}
    design = _design({"a": ONE_PHASE_S}, {"a": POWER_W}, PERIOD_S, 0.05, 3e-4, 0.01, None)
    expected = expected_rel_bounds({"a": ONE_PHASE_S}, {"a": POWER_W}, PERIOD_S, 20.0, **kwargs)
    assert expected["a"] == pytest.approx(float(design.half_widths_w(199, 0.99)[0]) / POWER_W, rel=1e-12)


def test_a_gap_drawing_nothing_has_no_relative_bound_and_is_not_what_the_region_length_is_for():
    lengths, powers = {"fwd": 0.008, "bwd": 0.012}, {"fwd": 400.0, "bwd": 250.0}
    expected = expected_rel_bounds(lengths, powers, PERIOD_S, 60.0, idle_power_w=0.0)
    assert expected["gap"] == math.inf and math.isfinite(expected["fwd"]) and math.isfinite(expected["bwd"])
    needed_s = region_time_needed_s(lengths, powers, PERIOD_S, 0.2, idle_power_w=0.0)
    assert math.isfinite(needed_s)
    assert max(expected_rel_bounds(lengths, powers, PERIOD_S, needed_s, idle_power_w=0.0)[n] for n in lengths) <= 0.2


@pytest.mark.parametrize(("wanted", "kwargs"), [(0.1, {}), (0.05, {"power_noise": 0.01}),
                                                (0.2, {"resolution_j": 0.01, "confidence": 0.9}),
                                                (0.1, {"dating_error_s": 3e-4, "idle_power_w": 50.0})])
def test_the_region_needed_is_the_shortest_whole_number_of_periods_that_meets_the_wanted_bound(wanted, kwargs):
    lengths, powers = {"fwd": 0.008, "bwd": 0.012}, {"fwd": 400.0, "bwd": 250.0}
    needed_s = region_time_needed_s(lengths, powers, PERIOD_S, wanted, **kwargs)
    periods = needed_s / PERIOD_S
    assert periods == pytest.approx(round(periods), abs=1e-9)

    def worst(region_s: float) -> float:
        bounds = expected_rel_bounds(lengths, powers, PERIOD_S, region_s, **kwargs)
        return max(bounds[n] for n in lengths)
    assert worst(needed_s + 1e-9) <= wanted < worst(needed_s - PERIOD_S + 1e-9)


def test_a_bound_no_region_up_to_the_longest_reaches_is_infinite_and_a_longer_limit_finds_it():
    lengths, powers = {"fwd": 0.008, "bwd": 0.012}, {"fwd": 400.0, "bwd": 250.0}
    needed_s = region_time_needed_s(lengths, powers, PERIOD_S, 0.1)
    assert region_time_needed_s(lengths, powers, PERIOD_S, 0.1, longest_s=needed_s - PERIOD_S) == math.inf
    assert region_time_needed_s(lengths, powers, PERIOD_S, 0.1, longest_s=needed_s + PERIOD_S) == pytest.approx(needed_s)
    # the shortest region it can answer: two windows (a very loose bound on a phase of the whole call)
    assert region_time_needed_s({"a": ONE_PHASE_S}, {"a": POWER_W}, PERIOD_S, 0.99, power_noise=0.0,
                                dating_error_s=0.0, resolution_j=1e-6) == pytest.approx(0.4)


@pytest.mark.parametrize(("wanted", "period_s"), [(0.0, 0.1), (1.0, 0.1), (-0.1, 0.1), (0.1, 0.0), (0.1, -0.1)])
def test_an_impossible_region_question_is_refused_in_one_line(wanted, period_s):
    with pytest.raises(MeasurementError) as caught:
        region_time_needed_s({"a": 0.01}, {"a": 100.0}, period_s, wanted)
    assert str(caught.value) == (f"region_time_needed_s needs 0 < wanted_rel_bound < 1 and period_s > 0 "
                                 f"(got {wanted}, {period_s})")


@pytest.mark.parametrize(("lengths", "powers"), [({}, {}), ({"a": 0.01}, {"b": 100.0}), ({"a": 0.0}, {"a": 100.0}),
                                                 ({"a": 0.01, "b": -0.01}, {"a": 100.0, "b": 100.0}),
                                                 ({"a": 0.01}, {"a": 100.0, "b": 50.0})])
def test_a_call_without_a_length_and_a_power_for_every_phase_is_refused(lengths, powers):
    with pytest.raises(MeasurementError) as caught:
        expected_rel_bounds(lengths, powers, PERIOD_S, 10.0)
    assert str(caught.value) == "give every phase of a call a length (> 0 s) and a power, under the same names"


def test_a_phase_drawing_nothing_has_an_infinite_relative_bound_even_where_its_bound_is_zero():
    # nothing to learn and nothing drawn: 0 W known to 0 W is still no relative bound (not 0 / 0)
    assert expected_rel_bounds({"a": ONE_PHASE_S}, {"a": 0.0}, PERIOD_S, 10.0, power_noise=0.0, dating_error_s=0.0,
                               resolution_j=0.0) == {"a": math.inf}
    design = _one_phase(0.02, 1e-4, 0.001)
    tiny = expected_rel_bounds({"a": ONE_PHASE_S}, {"a": 0.5}, PERIOD_S, 10.0)      # under a watt is still a power
    assert 0 < tiny["a"] < math.inf
    assert tiny["a"] == pytest.approx(float(_design({"a": ONE_PHASE_S}, {"a": 0.5}, PERIOD_S, 0.02, 1e-4, 0.001, None)
                                            .half_widths_w(99, 0.99)[0]) / 0.5, rel=1e-12)
    assert design.powers_w.tolist() == [POWER_W]


def test_a_bound_met_exactly_is_met():
    design = _design({"a": ONE_PHASE_S}, {"a": 1.0}, PERIOD_S, 0.02, 1e-4, 0.001, None)
    wanted = float(design.half_widths_w(500, 0.99)[0])          # at 1 W, the half-width is the relative bound
    assert region_time_needed_s({"a": ONE_PHASE_S}, {"a": 1.0}, PERIOD_S, wanted) == pytest.approx(501 * PERIOD_S)


def test_the_longest_region_asked_about_is_an_hour_unless_said():
    design = _design({"a": ONE_PHASE_S}, {"a": 1.0}, PERIOD_S, 0.02, 1e-4, 0.001, None)
    # a bound first met at 36005 windows: just over an hour of 100 ms windows
    wanted = (float(design.half_widths_w(36004, 0.99)[0]) + float(design.half_widths_w(36005, 0.99)[0])) / 2
    assert region_time_needed_s({"a": ONE_PHASE_S}, {"a": 1.0}, PERIOD_S, wanted) == math.inf
    assert region_time_needed_s({"a": ONE_PHASE_S}, {"a": 1.0}, PERIOD_S, wanted, longest_s=3601.0) == pytest.approx(
        36006 * PERIOD_S)


def test_a_longest_region_of_three_periods_holds_two_windows_which_answer_nothing():
    loose = {"power_noise": 0.0, "dating_error_s": 0.0, "resolution_j": 1e-6}
    assert region_time_needed_s({"a": ONE_PHASE_S}, {"a": POWER_W}, PERIOD_S, 0.99, longest_s=0.3, **loose) == math.inf
    assert region_time_needed_s({"a": ONE_PHASE_S}, {"a": POWER_W}, PERIOD_S, 0.99, longest_s=0.4, **loose) == \
        pytest.approx(0.4)


def test_the_synthetic_run_lasts_about_four_hundred_periods_or_sixty_four_calls_whichever_is_longer():
    # 20 ms calls and their gap (~0.7 ms): about 40 s of calls, 399 windows half a period from the start
    with_gap = _design({"fwd": 0.008, "bwd": 0.012}, {"fwd": 400.0, "bwd": 250.0}, PERIOD_S, 0.02, 1e-4, 0.001, None)
    assert with_gap.names[-1] == "gap" and with_gap.windows == 399
    # 1 s calls: 64 of them, ~64 s (each call's length is spread by 1 %: 0.08 s over 64 calls)
    long = _design({"long": 1.0}, {"long": 100.0}, PERIOD_S, 0.0, 0.0, 0.001, None)
    assert long.names == ("long",) and 636 <= long.windows <= 642


def test_by_default_eight_offsets_are_asked_for():
    # a 20 ms call under 100 ms: 8 publications, none more than a quarter of the call apart
    gap = alignment_gap_s(0.02, PERIOD_S)
    assert gap > 0 and _largest_empty_arc(0.02 + gap, PERIOD_S, 8) <= 0.25
    assert _largest_empty_arc(0.02 + gap - 0.02 / 400, PERIOD_S, 8) > 0.25
    assert gap == alignment_gap_s(0.02, PERIOD_S, offsets=8) != alignment_gap_s(0.02, PERIOD_S, offsets=9)


def test_a_call_in_step_with_the_counter_is_named_only_where_the_gap_that_spreads_it_matters():
    """The real H200's steps: 49.7 ms and 33.5 ms (named, with the gap), 58.2 ms (not); a 1 ms call's
    gap is under 1 % of it (its own jitter spreads the publications), and a 1 ms counter sweeps any call."""
    note = lined_up_note(0.0497, PERIOD_S)
    assert note is not None and "(49.7 ms each)" in note and "every 100 ms: 2.01 calls a period" in note
    assert f"idle gap of {alignment_gap_s(0.0497, PERIOD_S) * 1e3:.2g} ms" in note
    assert "(33.5 ms each)" in (lined_up_note(0.0335, PERIOD_S) or "")
    assert "a call every 2 periods" in (lined_up_note(0.2, PERIOD_S) or "")
    assert lined_up_note(0.0582, PERIOD_S) is None
    assert alignment_gap_s(0.001, PERIOD_S) > 0 and lined_up_note(0.001, PERIOD_S) is None
    assert lined_up_note(0.02, 0.001) is None and lined_up_note(0.0, PERIOD_S) is None
    assert lined_up_note(0.05, 0.0) is None                      # no period: nothing to say (and no error)
    assert "every 100 ms: one call a period" in (lined_up_note(0.1, PERIOD_S) or "")
    assert "every 100 ms: one call a period" in (lined_up_note(0.10001, PERIOD_S) or "")
    # the least gap named is 1 % of a call (10.5 ms: its gap is exactly that), and the whole text
    assert alignment_gap_s(0.0105, PERIOD_S) == 0.01 * 0.0105 and lined_up_note(0.0105, PERIOD_S) is not None
    assert lined_up_note(0.0652, 0.0999) == (
        "the calls (65.2 ms each) repeat nearly in step with the energy counter's publications (every 99.9 ms: "
        "1.53 calls a period), so every counter window holds nearly the same mix of phases, which is likely why "
        "some are not told apart; an idle gap of 3.7 ms after each call, marked as a phase of its own "
        "(energy_meter.phase(\"gap\") around a synchronise and a sleep), or calls of another length, would spread "
        "the publications across the call")
