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
