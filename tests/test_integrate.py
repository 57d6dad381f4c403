"""meter/integrate.py and meter/lattice.py against exact truth.

Synthetic counters publish at exactly known ticks, from power histories whose integral is known in
closed form, so the estimate can be held to 0.1 % (the counter's 1 mJ resolution is the only error
left) and not merely to its bound: an estimate that is merely inside its bound would let a bug that
moves every figure to the bound's edge pass (the counter's mJ read as J did, for a year of runs).
"""

from __future__ import annotations

import math
import random

import pytest

from pytest_gpuenergy.meter.integrate import (
    STRICT_ENV,
    EstimateOutsideBound,
    Publication,
    Read,
    counter_energy,
    publications,
    sampled_energy,
    within_bound,
)
from pytest_gpuenergy.meter.lattice import Bracket, TickLearner

PERIOD_S = 0.1
CEILING_W = 770.0
LIMIT_W = 700.0


class Steps:
    """A power history of constant steps: ``[(from_s, watts), ...]``, 0 W before the first."""

    def __init__(self, *steps: tuple[float, float]) -> None:
        self.steps = list(steps)

    def energy_j(self, t0: float, t1: float) -> float:
        total = 0.0
        ends = [start for start, _ in self.steps[1:]] + [math.inf]
        for (start, watts), end in zip(self.steps, ends):
            total += watts * max(0.0, min(end, t1) - max(start, t0))
        return total

    def counter_mj(self, moment: float) -> int:
        return int(self.energy_j(0.0, moment) * 1000)     # NVML counts whole mJ


def exact_counter(history: Steps, until_s: float = 3.0, period_s: float = PERIOD_S) -> list[Publication]:
    """Publications dated exactly: each at its tick, with the counter's value there."""
    ticks = [k * period_s for k in range(int(until_s / period_s) + 1)]
    return [Publication(tick, tick, history.counter_mj(tick), k) for k, tick in enumerate(ticks)]


def counter_region(history: Steps, t0: float, t1: float):
    return counter_energy(exact_counter(history), t0, t1, ceiling_w=CEILING_W, limit_w=LIMIT_W)


# -- the energy counter: long regions ---------------------------------------------------------------

def test_constant_power_over_a_long_unaligned_region_is_exact():
    history = Steps((0.0, 300.0))
    energy = counter_region(history, 0.537, 1.843)
    assert energy.ets_j == pytest.approx(300.0 * 1.306, rel=1e-3)      # 391.8 J
    assert energy.low_j <= 391.8 <= energy.high_j
    assert not energy.coarse and not energy.notes
    assert energy.peak_power_w == pytest.approx(300.0, rel=1e-3)


def test_a_power_step_inside_the_region_is_exact_from_the_publications_around_each_edge():
    """200 W until 1.0 s, then 600 W: the region [0.52, 1.88] holds 0.48 s at 200 W and 0.88 s at
    600 W, 624 J. Each edge's partly seen interval is split with the power of the interval next to it."""
    energy = counter_region(Steps((0.0, 200.0), (1.0, 600.0)), 0.52, 1.88)
    assert energy.ets_j == pytest.approx(624.0, rel=1e-3)
    assert energy.low_j <= 624.0 <= energy.high_j
    assert energy.peak_power_w == pytest.approx(600.0, rel=1e-3)


def test_a_region_that_starts_just_before_a_publication_takes_its_head_at_its_own_power():
    """The region [0.58, 1.88] runs at 600 W throughout; the GPU drew 200 W until 0.55 s. Its head
    (20 ms before the publication at 0.6 s) is the shorter piece of its interval, so it is priced at
    the region's own power: 780 J exactly. Taking the first publication inside as the second would
    price 120 ms from the interval before, which holds the 200 W step (84 J for 72)."""
    energy = counter_region(Steps((0.0, 200.0), (0.55, 600.0)), 0.58, 1.88)
    assert energy.ets_j == pytest.approx(600.0 * 1.30, rel=1e-3)


def test_a_region_that_ends_just_after_a_publication_takes_its_tail_at_its_own_power():
    energy = counter_region(Steps((0.0, 600.0), (1.85, 200.0)), 0.52, 1.82)
    assert energy.ets_j == pytest.approx(600.0 * 1.30, rel=1e-3)


@pytest.mark.parametrize("t0, t1", [(0.5, 1.8), (0.42, 1.88), (0.41, 1.8), (0.5, 1.89), (0.61, 0.79)])
def test_edges_on_or_near_publications_are_exact_however_the_power_inside_changes(t0, t1):
    """An edge on a publication needs no guess; an edge just after one takes the piece outside the
    region at the power of the interval beyond it, which is exact while that power holds."""
    history = Steps((0.0, 250.0), (0.7, 450.0), (1.2, 350.0))
    assert counter_region(history, t0, t1).ets_j == pytest.approx(history.energy_j(t0, t1), rel=1e-3)


def test_the_counter_must_publish_after_the_region_before_its_figure_is_given():
    from pytest_gpuenergy.meter.integrate import NotYet

    counter = exact_counter(Steps((0.0, 300.0)))
    for published_until in (1.85, 1.95):     # none after the region; one, but its tail needs the power after it
        with pytest.raises(NotYet):
            counter_energy([p for p in counter if p.latest <= published_until], 0.52, 1.88, ceiling_w=CEILING_W,
                           limit_w=LIMIT_W)
    pubs = [p for p in counter if p.latest <= 1.95]
    final = counter_energy(pubs, 0.52, 1.88, ceiling_w=CEILING_W, limit_w=LIMIT_W, final=True)
    assert final.low_j <= 300.0 * 1.36 <= final.high_j


# -- the energy counter: regions shorter than a period -----------------------------------------------

@pytest.mark.parametrize("t0, t1", [(1.03, 1.07), (1.001, 1.099), (0.95, 1.02), (0.91, 1.09)])
def test_a_region_shorter_than_a_period_at_constant_power_is_exact(t0, t1):
    """With fewer than two publications inside, the region's energy is what the publications around
    it saw, less the time around it at the power of the intervals next to it: exact at constant power."""
    energy = counter_region(Steps((0.0, 300.0)), t0, t1)
    assert energy.coarse
    assert energy.ets_j == pytest.approx(300.0 * (t1 - t0), rel=1e-3)
    assert energy.low_j <= 300.0 * (t1 - t0) <= energy.high_j


def test_a_short_region_across_a_power_step_is_exact_when_each_side_holds_its_power():
    """200 W until 1.0 s, then 600 W; the region [0.97, 1.04] drew 6 + 24 = 30 J. The span 0.9-1.1 s
    saw 80 J; 70 ms before the region at 200 W and 60 ms after it at 600 W leave 30 J."""
    energy = counter_region(Steps((0.0, 200.0), (1.0, 600.0)), 0.97, 1.04)
    assert energy.ets_j == pytest.approx(30.0, rel=1e-3)
    assert energy.low_j <= 30.0 <= energy.high_j


def test_a_short_region_whose_surroundings_drew_more_than_their_neighbours_stays_within_what_it_can_hold():
    """The interval before the region at 100 W, the region's own interval at 400 W, the one after at
    100 W: a 40 ms region in the middle of the 400 W interval drew 16 J. The span 1.0-1.1 s saw 40 J;
    the 60 ms around the region at its neighbours' 100 W leave 34 J, more than 40 ms can hold under
    the 700 W limit the GPU ran under: 28 J, and a note says the power changed faster than the counter."""
    history = Steps((0.0, 100.0), (1.0, 400.0), (1.1, 100.0))
    energy = counter_region(history, 1.03, 1.07)
    assert energy.low_j <= 16.0 <= energy.high_j
    assert energy.ets_j == pytest.approx(LIMIT_W * 0.04, rel=1e-3)
    assert any("the power changed faster than the energy counter published" in note for note in energy.notes)


def test_a_zero_length_region_has_no_energy():
    energy = counter_region(Steps((0.0, 200.0), (1.0, 600.0)), 1.05, 1.05)
    assert (energy.ets_j, energy.low_j, energy.high_j) == (0.0, 0.0, 0.0)


# -- the bound ---------------------------------------------------------------------------------------

def test_the_bound_is_tight_where_the_publications_are_exact():
    """Exactly dated publications bound every interval between them to the counter's resolution (1 mJ
    at each of four values); a partly seen edge holds between its interval's energy less what the
    unseen rest can draw at the ceiling, and the interval's energy or its own time at the ceiling."""
    history = Steps((0.0, 300.0))
    aligned = counter_region(history, 0.5, 1.8)
    assert aligned.low_j == pytest.approx(390.0 - 0.002, abs=1e-9)
    assert aligned.high_j == pytest.approx(390.0 + 0.002, abs=1e-9)
    unaligned = counter_region(history, 0.52, 1.88)       # edges 20 ms before / after publications
    assert unaligned.low_j == pytest.approx(360.0 + 2 * (30.0 - CEILING_W * 0.02) - 0.002, abs=1e-9)
    assert unaligned.high_j == pytest.approx(360.0 + 2 * 30.0 + 0.002, abs=1e-9)


def test_a_bound_never_exceeds_what_the_gpu_can_draw():
    energy = counter_region(Steps((0.0, 300.0)), 1.03, 1.07)
    assert energy.high_j <= CEILING_W * 0.04 + 1e-9
    assert energy.low_j >= 0.0


# -- power readings ----------------------------------------------------------------------------------

def sampled(history: Steps, t0: float, t1: float, window_s: float = 0.025):
    """Each publication the mean power of the window before it (as NVML's instant-power field)."""
    pubs = [Publication(k * PERIOD_S, k * PERIOD_S, int(history.energy_j(k * PERIOD_S - window_s, k * PERIOD_S)
                                                        / window_s * 1000), k) for k in range(1, 31)]
    return sampled_energy(pubs, t0, t1, window_s=window_s, ceiling_w=CEILING_W)


def test_sampled_power_at_constant_power_is_exact_and_bounded():
    energy = sampled(Steps((0.0, 300.0)), 0.537, 1.843)
    assert energy.ets_j == pytest.approx(300.0 * 1.306, rel=1e-3)
    assert energy.low_j <= 391.8 <= energy.high_j and not energy.coarse


def test_sampled_power_gives_each_window_the_time_halfway_to_the_next():
    """A step from 200 to 600 W exactly between two windows (at 1.05 s): each window stands for the
    time halfway to its neighbours, so the step is placed where it happened and the figure is exact."""
    history = Steps((0.0, 200.0), (1.05 - 0.0125, 600.0))
    energy = sampled(history, 0.5, 1.8)
    assert energy.ets_j == pytest.approx(history.energy_j(0.5, 1.8), rel=2e-3)


def test_a_region_no_power_window_lies_in_is_coarse_with_the_gpus_whole_range_as_its_bound():
    energy = sampled(Steps((0.0, 300.0)), 1.03, 1.06)
    assert energy.coarse and (energy.low_j, energy.high_j) == (0.0, pytest.approx(CEILING_W * 0.03))
    assert energy.ets_j == pytest.approx(9.0, rel=1e-3)


# -- dating publications -----------------------------------------------------------------------------

def learned_lattice(period_s: float, phase_s: float, brackets: int = 12, width_s: float = 0.002, seed: int = 3):
    rng = random.Random(seed)
    learner = TickLearner()
    for k in range(brackets):
        tick = phase_s + k * period_s
        before = rng.uniform(0.0002, width_s)
        learner.add(Bracket(tick - before, tick + rng.uniform(0.0002, width_s)))
    lattice = learner.lattice
    assert lattice is not None
    return lattice


def test_a_quick_read_is_dated_to_the_latest_tick_before_it():
    period_s, phase_s = 0.1003, 0.0371
    lattice = learned_lattice(period_s, phase_s)
    for k in range(2, 14):
        tick = phase_s + k * period_s
        index, error = lattice.tick_of_read(tick + 0.03, tick + 0.0302)
        assert lattice.tick_at(index) == pytest.approx(tick, abs=error)
        assert error < 0.002
        before_tick = lattice.tick_of_read(tick - 0.03, tick - 0.0298)
        assert before_tick is not None and lattice.tick_at(before_tick[0]) == pytest.approx(tick - period_s, abs=error)


def test_a_read_within_the_lattices_error_of_a_tick_is_not_dated():
    """The tick may lie on either side of such a read: dating it either way could be a period off."""
    period_s, phase_s = 0.1003, 0.0371
    lattice = learned_lattice(period_s, phase_s)
    tick = phase_s + 8 * period_s
    error = lattice.error_at(tick)
    assert lattice.tick_of_read(tick - error / 2, tick - error / 4) is None
    assert lattice.tick_of_read(tick + error / 4, tick + error / 2) is None
    assert lattice.tick_of_read(tick - 0.02, tick + 0.02) is None


def test_publications_are_dated_to_an_interval_that_holds_the_true_tick_and_no_wider_than_twice_the_error():
    """Reads every ~7 ms of a counter published at exact ticks; the lattice learned from brackets.
    Each publication's [earliest, latest] must hold its true tick; a dated one is narrowed to the
    lattice's tick plus or minus its error, on both sides (not shifted to one side of it)."""
    period_s, phase_s = 0.1003, 0.0371
    lattice = learned_lattice(period_s, phase_s, brackets=30)
    history = Steps((0.0, 300.0), (1.5, 500.0))
    rng = random.Random(11)
    ticks = [phase_s + k * period_s for k in range(40)]
    reads, moment = [], 0.2
    while moment < 2.8:
        taken = moment + rng.uniform(0, 0.0002)
        tick = max(t for t in ticks if t <= taken)
        reads.append(Read(moment, taken + 0.0001, history.counter_mj(tick)))
        moment = taken + rng.uniform(0.005, 0.009)
    pubs = publications(reads, lattice, repeats=False)
    dated = [p for p in pubs if p.tick is not None]
    assert len(dated) >= 0.8 * len(pubs) and len(pubs) >= 24
    for pub in pubs:
        true_tick = max(t for t in ticks if history.counter_mj(t) == pub.value)
        assert pub.earliest <= true_tick <= pub.latest, pub
    for pub in dated:
        error = max(lattice.error_at(pub.latest), 1e-4)
        assert pub.latest - pub.earliest <= 2 * error + 1e-12
        assert pub.when == pytest.approx(lattice.tick_at(pub.tick), abs=1e-3)
    steady = counter_energy(pubs, 1.6, 2.5, ceiling_w=CEILING_W, limit_w=LIMIT_W)      # at 500 W throughout
    assert steady.ets_j == pytest.approx(history.energy_j(1.6, 2.5), rel=1e-3)
    across = counter_energy(pubs, 0.9, 2.1, ceiling_w=CEILING_W, limit_w=LIMIT_W)      # the step inside
    assert across.low_j <= history.energy_j(0.9, 2.1) <= across.high_j


def test_without_a_lattice_a_publication_is_bracketed_by_the_reads_around_its_change():
    history = Steps((0.0, 300.0))
    reads = [Read(0.095, 0.0951, history.counter_mj(0.0)), Read(0.1049, 0.105, history.counter_mj(0.1))]
    first, second = publications(reads, None, repeats=False)
    assert (second.earliest, second.latest) == (0.095, 0.105)
    assert first.latest == 0.0951


# -- the internal check ------------------------------------------------------------------------------

def test_an_estimate_outside_its_bound_stops_the_projects_tests(monkeypatch):
    monkeypatch.setenv(STRICT_ENV, "1")
    with pytest.raises(EstimateOutsideBound, match=r"the estimate 12 J lies outside its own bound \[1, 10\] J"):
        within_bound(12.0, 1.0, 10.0, [], "energy counter")
    assert within_bound(10.0 + 1e-12, 1.0, 10.0, [], "energy counter") == 10.0


def test_in_a_users_run_an_estimate_outside_its_bound_is_moved_to_its_edge_and_said(monkeypatch):
    monkeypatch.delenv(STRICT_ENV, raising=False)
    notes: list[str] = []
    assert within_bound(-3.0, 1.0, 10.0, notes, "power readings") == 1.0
    assert len(notes) == 1 and "outside its own bound" in notes[0] and "please report it" in notes[0]
    quiet: list[str] = []
    assert within_bound(5.0, 1.0, 10.0, quiet, "power readings") == 5.0 and not quiet


# -- the energy counter: which neighbours an edge is priced from (mutation testing) --------------------

def test_a_head_longer_than_its_rest_is_priced_from_the_interval_before_even_with_only_two_publications_before():
    """100 W until 0.12 s, 500 W until 0.2 s, then 300 W; the region [0.12, 1.0] drew 40 + 240 J. Its head
    (80 ms of the interval 0.1-0.2 s) is the longer piece, so the 20 ms before the region are priced at
    the 100 W of the interval before (0.0-0.1 s, the only one there): exact. The region's own 300 W
    would give the head 24 J."""
    history = Steps((0.0, 100.0), (0.12, 500.0), (0.2, 300.0))
    energy = counter_region(history, 0.12, 1.0)
    assert energy.ets_j == pytest.approx(280.0, rel=1e-3)


def test_a_tail_the_counter_cannot_hold_is_noted_as_power_changing_faster_than_the_counter():
    """300 W until 1.8 s, then idle: the tail (20 ms after the publication at 1.8 s) at the region's
    300 W would be 6 J, but its interval drew nothing, so the tail gets 0 J (exact: 384 J) and the
    note says the estimate had to be moved that far."""
    energy = counter_region(Steps((0.0, 300.0), (1.8, 0.0)), 0.52, 1.82)
    assert energy.ets_j == pytest.approx(300.0 * 1.28, rel=1e-3)
    assert any("the power changed faster than the energy counter published" in note for note in energy.notes)


def test_a_final_region_with_no_publication_after_it_prices_its_tail_at_its_own_power_without_a_note():
    """100 W throughout, publications until 1.8 s, the region [1.52, 1.83] (final: none will come):
    the 30 ms tail takes the region's 100 W (3 J), and nothing was moved, so no note: 31 J."""
    pubs = [p for p in exact_counter(Steps((0.0, 100.0))) if p.latest <= 1.8 + 1e-9]
    energy = counter_energy(pubs, 1.52, 1.83, ceiling_w=CEILING_W, limit_w=LIMIT_W, final=True)
    assert energy.ets_j == pytest.approx(31.0, rel=1e-3)
    assert not any("the power changed faster" in note for note in energy.notes)


def test_a_short_tail_needs_only_one_publication_after_the_region():
    """The tail of [0.52, 1.82] is 20 ms of the interval 1.8-1.9 s, the shorter piece: it is priced at
    the region's own power, so the publication at 1.9 s is all the figure waits for."""
    pubs = [p for p in exact_counter(Steps((0.0, 300.0))) if p.latest <= 1.9 + 1e-9]
    energy = counter_energy(pubs, 0.52, 1.82, ceiling_w=CEILING_W, limit_w=LIMIT_W)
    assert energy.ets_j == pytest.approx(300.0 * 1.30, rel=1e-3)


def test_an_edge_exactly_halfway_between_publications_takes_the_regions_own_power_and_waits_for_no_more():
    """Publications every 1/8 s (exact in binary, so the halves are exactly equal). 100 W until 0.5 s,
    then 500 W; the region [0.5625, 1.8125] has both edges halfway between publications. At a tie
    the edge is priced at the region's own power (500 W: exact here; the 100 W of the interval before
    would give the head 48 J for 31.25), and the tail needs no publication after 1.875 s."""
    period = 0.125
    counter = exact_counter(Steps((0.0, 100.0), (0.5, 500.0)), period_s=period)
    pubs = [p for p in counter if p.latest <= 1.875]
    energy = counter_energy(pubs, 0.5625, 1.8125, ceiling_w=CEILING_W, limit_w=LIMIT_W)
    assert energy.ets_j == pytest.approx(500.0 * 1.25, rel=1e-3)


# -- power readings: when a figure can be given -----------------------------------------------------

U = 1 / 64           # s: binary-exact times for the power-reading tests, so edges that meet do so exactly
EIGHTH = 0.125       # s: their publication period


def readings(watts_by_end: dict[float, float]) -> list[Publication]:
    """Power publications at exactly known moments: {moment: mean watts of the window before it}."""
    return [Publication(end, end, round(watts * 1000), k) for k, (end, watts) in enumerate(sorted(watts_by_end.items()))]


def steady(watts: float, until_s: float = 2.0) -> list[Publication]:
    return readings({k * EIGHTH: watts for k in range(1, int(until_s / EIGHTH) + 1)})


def test_sampled_power_waits_for_a_reading_whose_whole_window_lies_after_the_region():
    """The last window [63/64, 1] s ends after the region [0.25, 0.99] but starts inside it."""
    from pytest_gpuenergy.meter.integrate import NotYet

    with pytest.raises(NotYet):
        sampled_energy(steady(300.0, until_s=1.0), 0.25, 0.99, window_s=U, ceiling_w=CEILING_W)


def test_a_reading_whose_window_begins_exactly_at_the_regions_end_is_enough():
    energy = sampled_energy(steady(300.0, until_s=1.0), 0.25, 1.0 - U, window_s=U, ceiling_w=CEILING_W)
    assert energy.ets_j == pytest.approx(300.0 * (0.75 - U))


def test_a_final_figure_is_given_without_readings_after_the_region():
    energy = sampled_energy(steady(300.0, until_s=1.0), 0.25, 1.2, window_s=U, ceiling_w=CEILING_W, final=True)
    assert energy.ets_j == pytest.approx(300.0 * 0.95)


# -- power readings: which readings stand for the region --------------------------------------------

def test_a_region_exactly_one_window_long_is_known_exactly():
    pubs = steady(300.0)
    energy = sampled_energy(pubs, 1.0 - U, 1.0, window_s=U, ceiling_w=CEILING_W)
    assert not energy.coarse
    assert energy.ets_j == energy.low_j == energy.high_j == pytest.approx(300.0 * U)


def test_a_reading_whose_window_starts_before_the_region_is_not_clean_and_makes_the_figure_coarse():
    """The region [1 - 1/128, 1 + 1/16] s holds the end of the window [63/64, 1] s and no whole window."""
    energy = sampled_energy(steady(300.0), 1.0 - U / 2, 1.0 + 4 * U, window_s=U, ceiling_w=CEILING_W)
    assert energy.coarse
    assert energy.ets_j == pytest.approx(300.0 * 4.5 * U)
    assert (energy.low_j, energy.high_j) == (0.0, pytest.approx(CEILING_W * 4.5 * U))
    assert any("every power reading of the region averages a window (16 ms) reaching outside it" in note
               and "coarse" in note for note in energy.notes)


def test_a_region_inside_one_long_window_takes_that_readings_power_and_names_its_window():
    """Readings that average the second before them (nvmlDeviceGetPowerUsage on Ampere and newer)."""
    pubs = readings({1.0: 400.0, 2.0: 200.0})
    energy = sampled_energy(pubs, 0.25, 0.5, window_s=1.0, ceiling_w=CEILING_W)
    assert energy.coarse and energy.ets_j == pytest.approx(100.0)
    assert any("averages a window (1000 ms) reaching outside it" in note for note in energy.notes)


def test_a_region_between_readings_is_interpolated_from_the_nearest_reading_on_each_side():
    """Windows of 1/64 s every 1/8 s; the region starts where the window ending at 7/8 s ends and
    ends where the next one begins, so no window overlaps it. It takes 200 W (the reading before)
    up to halfway between the two windows' centres and 400 W (the one after) from there: 600 W *
    7/128 s. The peak is the higher of those two readings, not the spikes further out."""
    pubs = readings({0.625: 300.0, 0.75: 600.0, 0.875: 200.0, 1.0: 400.0, 1.125: 700.0, 1.25: 300.0})
    energy = sampled_energy(pubs, 0.875, 1.0 - U, window_s=U, ceiling_w=CEILING_W)
    assert energy.coarse
    assert energy.ets_j == pytest.approx(600.0 * 7 / 128)
    assert energy.peak_power_w == 400.0
    assert (energy.low_j, energy.high_j) == (0.0, pytest.approx(CEILING_W * 7 * U))
    import re

    assert any(re.fullmatch(r"no power reading was published inside the region: .*ETS is interpolated and coarse", note)
               for note in energy.notes)


def test_a_zero_length_region_at_the_end_of_a_window_takes_the_readings_on_both_sides():
    pubs = readings({0.75: 600.0, 0.875: 200.0, 1.0: 400.0, 1.125: 700.0})
    energy = sampled_energy(pubs, 0.875, 0.875, window_s=U, ceiling_w=CEILING_W)
    assert energy.ets_j == 0.0 and energy.peak_power_w == 400.0


# -- power readings: the bound -----------------------------------------------------------------------

def test_each_gap_inside_the_region_is_bounded_by_the_readings_of_the_region_within_two_periods():
    """Region [0, 96/64] s; whole windows A [0, 1] (200 W), B [40, 41] (300 W), D [56, 57] (400 W),
    C [95, 96] (500 W), in 1/64 s; a period is 8/64 s. The gaps: G1 (1, 40) sees A and B (D starts
    exactly two periods after it: not within), G2 (41, 56) sees B and D, G3 (57, 95) sees D and C (B
    ends exactly two periods before it). Each gap draws between the least and the most reading it
    sees, widened by half their spread and by the 1 mW resolution."""
    pubs = readings({1 * U: 200.0, 41 * U: 300.0, 57 * U: 400.0, 96 * U: 500.0, 104 * U: 500.0})
    energy = sampled_energy(pubs, 0.0, 96 * U, window_s=U, ceiling_w=CEILING_W, period_s=EIGHTH)
    covered_j = (200.0 + 300.0 + 400.0 + 500.0) * U
    gaps = [(39 * U, 200.0, 300.0), (15 * U, 300.0, 400.0), (38 * U, 400.0, 500.0)]
    low_j = covered_j + sum(s * (lo - (hi - lo) / 2 - 0.001) for s, lo, hi in gaps)
    high_j = covered_j + sum(s * (hi + (hi - lo) / 2 + 0.001) for s, lo, hi in gaps)
    assert energy.low_j == pytest.approx(low_j, rel=1e-12)
    assert energy.high_j == pytest.approx(high_j, rel=1e-12)
    # each window stands for the time halfway to its neighbours' centres
    assert energy.ets_j == pytest.approx((200.0 * 20.5 + 300.0 * 28 + 400.0 * 27.5 + 500.0 * 20) * U)
    assert not energy.coarse and energy.peak_power_w == 500.0


def test_an_unseen_head_and_tail_are_bounded_by_the_readings_within_a_period_outside_the_region_too():
    """Idle (50 W) outside the region [4, 88] (in 1/64 s), 450 W inside. Its head (4, 8) sees the idle
    reading ending at 2 and the one of A [8, 9]: 50 to 450 W, widened by half the spread, 0 to 650 W;
    its tail (81, 88) sees C [80, 81] and the idle one starting at 92: the same. The gaps between
    whole windows see only the region's readings."""
    pubs = readings({2 * U: 50.0, 9 * U: 450.0, 41 * U: 450.0, 81 * U: 450.0, 93 * U: 50.0})
    energy = sampled_energy(pubs, 4 * U, 88 * U, window_s=U, ceiling_w=CEILING_W, period_s=EIGHTH)
    covered_j = 3 * 450.0 * U
    assert energy.low_j == pytest.approx(covered_j + (31 + 39) * U * 449.999, rel=1e-12)
    assert energy.high_j == pytest.approx(covered_j + (31 + 39) * U * 450.001 + 11 * U * 650.001, rel=1e-12)
    assert energy.low_j <= 450.0 * 84 * U <= energy.high_j


def test_readings_that_average_longer_than_they_are_published_apart_count_each_moment_once():
    """Each reading averages the second before it and comes every 1/8 s, so clean windows overlap.
    300 W until 2 s, then 500 W: the windows [0, 1], [1, 2], ... tile the region [0, 5] exactly, so
    its energy (2100 J) is known exactly, and the estimate is that; counting overlapping windows
    each in full would put eight times the energy in the bound."""
    history = Steps((0.0, 300.0), (2.0, 500.0))
    pubs = readings({k * EIGHTH: history.energy_j(k * EIGHTH - 1.0, k * EIGHTH) for k in range(1, 49)})
    energy = sampled_energy(pubs, 0.0, 5.0, window_s=1.0, ceiling_w=CEILING_W, period_s=EIGHTH)
    assert energy.low_j == energy.high_j == pytest.approx(2100.0)
    assert energy.ets_j == pytest.approx(2100.0)


def test_a_reading_above_the_assumed_ceiling_widens_the_bound_instead_of_falling_outside_it():
    """A GPU read at 800 W where the meter assumed at most 770 W: the readings show it can, so the
    unseen time between windows may draw that much too (strict mode would raise otherwise)."""
    energy = sampled(Steps((0.0, 800.0)), 0.537, 1.843)
    assert energy.ets_j == pytest.approx(800.0 * 1.306, rel=1e-3)
    assert energy.low_j <= 800.0 * 1.306 <= energy.high_j


# -- power readings: held-up samplers -----------------------------------------------------------------

def gap_notes_of(pubs: list[Publication], t0: float, t1: float, period_s: float) -> list[str]:
    energy = sampled_energy(pubs, t0, t1, window_s=U, ceiling_w=CEILING_W, period_s=period_s)
    return [note for note in energy.notes if "power was not read for" in note]


def test_a_reading_gap_of_exactly_two_periods_is_not_noted():
    pubs = readings({k * EIGHTH: 300.0 for k in (1, 2, 3, 5, 6, 7, 8)})      # none at 4/8 s: 2/8 s apart
    assert gap_notes_of(pubs, 0.0, 0.9, EIGHTH) == []


@pytest.mark.parametrize("moments, noted_ms", [
    ([0.1, 0.2, 0.3, 0.55, 0.6, 0.7, 0.8, 0.9, 1.0, 1.1, 1.2, 1.3, 1.4], "250"),     # 2.5 periods
    ([0.1, 0.2, 0.8, 0.9, 1.0, 1.1, 1.2, 1.3, 1.4], "600"),
])
def test_a_reading_gap_of_more_than_two_periods_is_noted_with_its_length(moments, noted_ms):
    pubs = readings(dict.fromkeys(moments, 300.0))
    [note] = gap_notes_of(pubs, 0.05, 1.25, 0.1)
    assert f"power was not read for {noted_ms} ms of the region (the sampler was held up)" in note
