"""meter/lattice.py: the tick lattice of a GPU's publications, learned from brackets.

tests/test_integrate.py checks the lattice through the dates it gives publications; these tests pin
its own arithmetic (found wanting by mutation testing, benchmarks/mutation.py): the period and phase
a fit takes from known brackets, which brackets it numbers, how far a tick may be from the lattice's
(``error_at``) from hand-computed intersections, when a read or a bracket is dated to one tick, and
what the learner keeps, forgets and trusts. Lattices built by hand have exactly known errors; times
are binary fractions where a test needs two moments to meet exactly.
"""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_gpuenergy.meter.lattice import NOMINAL_PERIOD_S, Bracket, Lattice, TickLearner, fit


def around(ticks: list[float], width_s: float) -> list[Bracket]:
    return [Bracket(tick - width_s / 2, tick + width_s / 2) for tick in ticks]


# A lattice with two brackets a period apart: tick 0 in [0.999, 1.001], tick -1 in [0.899, 0.901],
# the period in [0.098, 0.102]. Tick k >= 0 then lies in [0.999 + 0.098 k, 1.001 + 0.102 k] (the
# newer bracket shifted by k periods of either extreme; the older one allows more), so the lattice's
# tick 1.0 + 0.1 k is at most 0.001 + 0.002 k from the true one; tick -k (k >= 1) within
# 0.001 + 0.002 (k - 1), from the older bracket.
def hand_made() -> Lattice:
    return Lattice(period_s=0.1, phase_s=1.0, period_range_s=(0.098, 0.102),
                   numbered=((0.899, 0.901, -1), (0.999, 1.001, 0)), brackets=2)


# -- brackets and fits ---------------------------------------------------------------------------------

def test_a_bracket_has_its_middle_and_width():
    bracket = Bracket(1.0, 1.25)
    assert (bracket.middle, bracket.width) == (1.125, 0.25)


def test_fewer_than_two_ticks_fit_no_lattice():
    assert fit([], NOMINAL_PERIOD_S) is None
    assert fit([Bracket(1.0, 1.002)], NOMINAL_PERIOD_S) is None
    assert fit([Bracket(1.0, 1.002), Bracket(1.001, 1.003)], NOMINAL_PERIOD_S) is None    # the same tick twice


def test_a_fit_takes_the_middle_of_the_periods_the_brackets_allow_and_the_phase_where_they_meet():
    """Tick -1 in [0, 0.002], tick 0 in [0.1, 0.101]: the period lies in [0.098, 0.101], so 0.0995;
    at that period tick 0 lies in [0.1, 0.1015] and in [0.1, 0.101]: the phase is 0.1005."""
    lattice = fit([Bracket(0.1, 0.101), Bracket(0.0, 0.002)], NOMINAL_PERIOD_S)
    assert lattice is not None
    assert lattice.period_s == pytest.approx(0.0995, abs=1e-12)
    assert lattice.period_range_s == pytest.approx((0.098, 0.101), abs=1e-12)
    assert lattice.phase_s == pytest.approx(0.1005, abs=1e-12)
    assert lattice.numbered == ((0.0, 0.002, -1), (0.1, 0.101, 0))
    assert lattice.brackets == 2


def test_brackets_around_exact_ticks_give_the_true_period_and_the_newest_tick_as_phase():
    """Five brackets 2 ms wide around ticks 0.1003 s apart: the period lies within 2 ms / 4 of the
    truth either way, and the phase is the newest bracket's tick."""
    period, first = 0.1003, 5.0371
    ticks = [first + k * period for k in range(5)]
    lattice = fit(around(ticks, 0.002)[::-1], NOMINAL_PERIOD_S)      # any order
    assert lattice is not None
    assert lattice.period_s == pytest.approx(period, abs=1e-9)
    assert lattice.period_range_s == pytest.approx((period - 0.0005, period + 0.0005), abs=1e-9)
    assert lattice.phase_s == pytest.approx(ticks[-1], abs=1e-9)
    assert [k for _, _, k in lattice.numbered] == [-4, -3, -2, -1, 0]
    assert lattice.brackets == 5


def test_an_old_bracket_across_a_gap_that_more_than_one_tick_count_fits_is_left_out():
    """Brackets 10 ms wide at 2.0, 2.1 and 2.2 s leave the period in [0.095, 0.105]: between a bracket
    at 0 s and the one at 2.2 s, 21, 22 or 23 periods fit, so it is not numbered (and not used)."""
    wide = around([0.0, 2.0, 2.1, 2.2], 0.01)
    lattice = fit(wide, NOMINAL_PERIOD_S)
    assert lattice is not None and lattice.brackets == 3
    assert [k for _, _, k in lattice.numbered] == [-2, -1, 0]


def test_an_old_bracket_across_a_gap_only_one_tick_count_fits_is_numbered():
    """The same, with brackets of 0.2 ms: the period lies in [0.0999, 0.1001], so only 22 periods fit."""
    narrow = around([0.0, 2.0, 2.1, 2.2], 0.0002)
    lattice = fit(narrow, NOMINAL_PERIOD_S)
    assert lattice is not None and lattice.brackets == 4
    assert [k for _, _, k in lattice.numbered] == [-22, -2, -1, 0]
    assert lattice.period_s == pytest.approx(0.1, abs=1e-6)


def test_an_older_bracket_between_the_ticks_of_the_newer_ones_ends_the_numbering():
    """Ticks every 0.1 s known to 0.2 ms; a bracket at 1.75 s lies halfway between two of them."""
    brackets = around([1.75, 2.0, 2.1, 2.2], 0.0002)
    lattice = fit(brackets, NOMINAL_PERIOD_S)
    assert lattice is not None and lattice.brackets == 3


def test_the_period_prior_bounds_the_tick_count_across_a_gap():
    """Two brackets 0.19 s apart: 2 periods of 0.095 s or one of 0.19 s; NVML's period is within
    0.8 to 1.25 of the nominal 0.1 s, so only 2 fit."""
    lattice = fit(around([1.0, 1.19], 0.001), NOMINAL_PERIOD_S)
    assert lattice is not None
    assert [k for _, _, k in lattice.numbered] == [-2, 0]
    assert lattice.period_s == pytest.approx(0.095, abs=1e-9)
    assert lattice.period_range_s == pytest.approx((0.0945, 0.0955), abs=1e-9)


def test_a_gap_the_period_prior_cannot_fill_is_numbered_by_neither_count():
    """0.15 s apart: one period would be 1.5, two 0.75 nominal ones: outside the prior, no lattice."""
    assert fit(around([1.0, 1.15], 0.001), NOMINAL_PERIOD_S) is None


# -- the lattice's ticks and their error ------------------------------------------------------------

def test_ticks_are_numbered_from_the_phase():
    lattice = Lattice(0.125, 1.0, (0.125, 0.125), (), 0)
    assert lattice.tick_at(-2) == 0.75 and lattice.tick_at(3) == 1.375
    assert lattice.index_before(1.25) == 2 and lattice.index_before(1.2499) == 1 and lattice.index_before(0.9) == -1
    assert lattice.next_tick_after(1.25) == 1.375 and lattice.next_tick_after(0.9) == 1.0


def test_the_next_tick_comes_at_the_latest_by_its_own_error():
    """A region planned to start just after the next publication waits for that tick's error, not the
    error of the tick nearest now (tick 0's 0.001 at 1.04 s; tick 1 may come as late as 1.103 s)."""
    lattice = hand_made()
    assert lattice.latest_next_tick(1.04) == pytest.approx(1.103)
    assert lattice.latest_next_tick(1.06) == pytest.approx(1.103)
    assert lattice.latest_next_tick(0.73) == pytest.approx(0.803)      # tick -2, before the brackets


def test_a_lattice_without_two_numbered_brackets_does_not_know_its_error():
    lattice = Lattice(0.1, 1.0, (0.0, math.inf), ((0.999, 1.001, 0),), 1)
    assert lattice.error_at(1.0) == math.inf
    assert Lattice(0.1, 1.0, (0.0, math.inf), (), 3).error_at(1.0) == math.inf


@pytest.mark.parametrize("moment, error", [
    (1.0, 0.001), (1.04, 0.001), (1.1, 0.003), (1.52, 0.011), (0.9, 0.001), (0.8, 0.003), (0.53, 0.009),
])
def test_the_error_of_a_tick_is_how_far_the_brackets_shifted_by_the_possible_periods_let_it_be(moment, error):
    lattice = hand_made()
    assert lattice.error_at(moment) == pytest.approx(error, abs=1e-12)
    assert lattice.error_at(moment) == pytest.approx(error, abs=1e-12)       # the second answer from the cache


def test_the_error_is_measured_from_the_lattices_own_tick_on_either_side():
    """A lattice whose tick 1 (1.1 s) is not the middle of where the brackets let it be ([1.097, 1.103]
    at the periods 0.098 to 0.102 around tick 0 at exactly 1.0): the error is the farther end."""
    lattice = Lattice(0.1, 1.0, (0.098, 0.102), ((0.999, 1.001, 0), (1.0985, 1.1005, 1)), 2)
    assert lattice.error_at(1.1) == pytest.approx(0.0015, abs=1e-12)    # 1.1 - 1.0985; the other side 0.0005
    shifted = Lattice(0.1, 1.0, (0.098, 0.102), ((0.999, 1.001, 0), (1.0995, 1.1015, 1)), 2)
    assert shifted.error_at(1.1) == pytest.approx(0.0015, abs=1e-12)    # 1.1015 - 1.1; the other side 0.0005


# -- dating a read and a bracket -------------------------------------------------------------------

def test_a_read_between_two_ticks_is_dated_to_the_tick_before_it_with_that_ticks_error():
    lattice = hand_made()
    assert lattice.tick_of_read(1.04, 1.06) == (0, pytest.approx(0.001))
    assert lattice.tick_of_read(1.0012, 1.04) == (0, pytest.approx(0.001))     # just outside the error after tick 0
    assert lattice.tick_of_read(1.04, 1.0965) == (0, pytest.approx(0.001))     # and before tick 1 (>= 1.097 s)


def test_a_read_within_the_error_of_a_tick_is_not_dated():
    lattice = hand_made()
    assert lattice.tick_of_read(1.0005, 1.002) is None      # may have taken the value before tick 0
    assert lattice.tick_of_read(1.04, 1.0995) is None       # may have taken it after tick 1
    assert lattice.tick_of_read(1.04, 1.0985) is None       # tick 1 may be as early as 1.097 s (its error, 0.003)
    assert lattice.tick_of_read(1.04, 1.14) is None         # spans tick 1


def test_a_read_is_dated_with_its_own_ticks_error_not_that_of_the_tick_nearest_it():
    """Before the brackets the error grows tick by tick: a read late in a period is nearer the next
    tick, whose error is smaller than that of the tick it is dated to. Tick -3 (0.7 s) may lie in
    [0.695, 0.705] (the bracket of tick -1 shifted back by two of the longest and the shortest
    periods); a date of 0.7 +- 0.003 (tick -2's error, the tick nearest 0.78 s) left out the truth
    (found by the property test of tests/test_meter.py, seed 15643171)."""
    lattice = hand_made()
    assert lattice.error_at(0.78) == pytest.approx(0.003) and lattice.error_of_tick(-3) == pytest.approx(0.005)
    assert lattice.tick_of_read(0.78, 0.79) == (-3, pytest.approx(0.005))
    assert lattice.tick_of_read(0.704, 0.79) is None        # tick -3 may be as late as 0.705 s


def test_a_read_where_the_lattice_is_loose_is_not_dated():
    """Tick 13 (2.3 s) may be 0.027 s from the lattice's: more than a quarter of a period."""
    lattice = hand_made()
    assert lattice.tick_of_read(2.24, 2.25) == (12, pytest.approx(0.025))
    assert lattice.tick_of_read(2.34, 2.35) is None


def test_a_read_is_given_at_least_a_tenth_of_a_millisecond_of_error():
    """Brackets of 10 us: the lattice's error is 5 us, but a date is never claimed tighter than 0.1 ms."""
    lattice = Lattice(0.1, 1.0, (0.1 - 1e-5, 0.1 + 1e-5), ((0.899995, 0.900005, -1), (0.999995, 1.000005, 0)), 2)
    assert lattice.error_at(1.0) == pytest.approx(5e-6)
    assert lattice.tick_of_read(1.00005, 1.0001) is None
    assert lattice.tick_of_read(1.0002, 1.0003) == (0, 1e-4)


def test_a_bracket_is_dated_where_the_lattice_leaves_one_tick_in_it():
    lattice = hand_made()
    assert lattice.only_tick_within(1.04, 1.16) == (1, pytest.approx(0.003))    # tick 1's own error
    assert lattice.only_tick_within(1.101, 1.16) == (1, pytest.approx(0.003))   # tick 1 may be as late as 1.103 s
    assert lattice.only_tick_within(1.04, 1.197) is None                        # tick 2 may be at 1.195 s
    assert lattice.only_tick_within(1.04, 1.26) is None
    assert lattice.only_tick_within(-math.inf, 1.16) is None


def test_a_bracket_is_not_dated_where_the_tick_before_it_may_be_inside_by_its_own_error():
    """Tick -4 (0.6 s) may be as late as 0.607 s: a bracket from 0.606 s may hold it, though the error
    of the tick nearest the bracket's end (tick -3's, 0.005) would have left it out."""
    lattice = hand_made()
    assert lattice.only_tick_within(0.606, 0.74) is None
    assert lattice.only_tick_within(0.608, 0.74) == (-3, pytest.approx(0.005))


def test_a_bracket_where_the_lattice_is_loose_is_not_dated():
    lattice = hand_made()
    assert lattice.only_tick_within(2.18, 2.25) == (12, pytest.approx(0.025))
    assert lattice.only_tick_within(2.28, 2.35) is None


def test_a_bracket_is_given_at_least_a_tenth_of_a_millisecond_of_error():
    lattice = Lattice(0.1, 1.0, (0.1 - 1e-5, 0.1 + 1e-5), ((0.899995, 0.900005, -1), (0.999995, 1.000005, 0)), 2)
    assert lattice.error_at(1.04) == pytest.approx(5e-6)
    assert lattice.only_tick_within(1.00005, 1.04) == (0, 1e-4)      # tick 0 may be as late as 1.0001 s


def test_a_lattice_dates_each_read_and_bracket_once_and_by_both_its_ends(monkeypatch):
    """Consecutive short tests' figures date the same reads with the same lattice: each answer is
    worked out once, and kept by the read's two ends (reads that start together can end on either
    side of a tick's error)."""
    lattice = hand_made()
    worked_out: list[tuple[str, float, float]] = []
    read_tick, bracket_tick = Lattice._tick_of_read, Lattice._only_tick_within
    monkeypatch.setattr(Lattice, "_tick_of_read", lambda self, a, b: worked_out.append(("read", a, b)) or read_tick(self, a, b))
    monkeypatch.setattr(Lattice, "_only_tick_within",
                        lambda self, a, b: worked_out.append(("bracket", a, b)) or bracket_tick(self, a, b))
    for _ in range(3):
        assert lattice.tick_of_read(1.04, 1.06) == (0, pytest.approx(0.001))
        assert lattice.tick_of_read(1.04, 1.0995) is None              # the same start, past tick 1's error
        assert lattice.tick_of_read(1.0005, 1.06) is None              # the same end, within tick 0's error
        assert lattice.only_tick_within(1.04, 1.16) == (1, pytest.approx(0.003))
        assert lattice.only_tick_within(1.04, 1.197) is None
        assert lattice.only_tick_within(1.101, 1.16) == (1, pytest.approx(0.003))
    assert sorted(worked_out) == sorted([("read", 1.04, 1.06), ("read", 1.04, 1.0995), ("read", 1.0005, 1.06),
                                         ("bracket", 1.04, 1.16), ("bracket", 1.04, 1.197), ("bracket", 1.101, 1.16)])
    assert hand_made().tick_of_read(1.04, 1.0995) is None and hand_made().tick_of_read(1.04, 1.06) is not None


# -- the learner -----------------------------------------------------------------------------------

def learner_with(ticks: list[float], width_s: float = 0.001, nominal_s: float = NOMINAL_PERIOD_S) -> TickLearner:
    learner = TickLearner(nominal_s)
    for bracket in around(ticks, width_s):
        learner.add(bracket)
    return learner


def test_a_learner_uses_the_nominal_period_until_it_has_a_lattice():
    learner = TickLearner(0.125)
    assert learner.period_s == 0.125 and learner.lattice is None
    learner.add(Bracket(1.0, 1.001))
    assert learner.period_s == 0.125 and learner.lattice is None
    learner.add(Bracket(1.1, 1.101))
    assert learner.lattice is not None and learner.period_s == pytest.approx(0.1)


def test_a_bracket_wider_than_a_quarter_period_is_ignored():
    learner = TickLearner(0.125)
    learner.add(Bracket(1.0, 1.03125))         # exactly a quarter of 0.125 s: kept
    learner.add(Bracket(2.0, 2.0315))
    assert learner.brackets == [Bracket(1.0, 1.03125)]


def test_a_learner_keeps_the_newest_sixteen_brackets():
    learner = learner_with([1.0 + 0.1 * k for k in range(20)])
    assert len(learner.brackets) == 16
    assert learner.brackets[0].middle == pytest.approx(1.4)
    assert learner.lattice is not None and learner.lattice.brackets == 16


def test_a_learner_forgets_brackets_more_than_thirty_seconds_older_than_the_newest():
    learner = TickLearner(0.125)
    learner.add(Bracket(0.99, 1.0))
    learner.add(Bracket(30.99, 31.0))          # exactly 30 s later: both kept
    assert len(learner.brackets) == 2
    learner.add(Bracket(31.12, 31.125))
    assert learner.brackets == [Bracket(30.99, 31.0), Bracket(31.12, 31.125)]


def test_a_learner_keeps_its_lattice_while_the_brackets_it_keeps_fit_none():
    learner = learner_with([1.0, 1.1, 1.2])
    lattice = learner.lattice
    assert lattice is not None
    learner.add(Bracket(40.0, 40.001))        # the others are forgotten; one bracket fits no lattice
    assert learner.brackets == [Bracket(40.0, 40.001)] and learner.lattice is lattice


def test_a_learner_is_confident_with_four_brackets_a_lattice_tight_enough_and_fewer_than_two_misses():
    learner = learner_with([1.0, 1.1, 1.2])
    lattice = learner.lattice
    assert lattice is not None and not learner.confident(1.3, 0.01)      # three brackets
    learner.add(around([1.3], 0.001)[0])
    lattice = learner.lattice
    assert lattice is not None
    error = lattice.error_at(1.4)
    assert learner.confident(1.4, error) and not learner.confident(1.4, error * 0.99)
    learner.miss()
    assert learner.confident(1.4, error)
    assert not TickLearner().confident(1.4, 1.0)


def test_two_misses_in_a_row_make_the_learner_start_again():
    learner = learner_with([1.0, 1.1, 1.2, 1.3])
    learner.miss()
    learner.hit()
    learner.miss()
    assert learner.lattice is not None and len(learner.brackets) == 4 and learner.misses == 1
    learner.miss()
    assert learner.lattice is None and learner.brackets == [] and learner.misses == 0
    assert learner.period_s == NOMINAL_PERIOD_S


def sparse_after_dense() -> list[Bracket]:
    """Five narrow brackets a period apart, then, 6.1 s later (a long region read sparsely), a wide
    bracket and a narrow one a period after it: alone, those two allow periods from 98.3 to 105.7 ms."""
    return [*around([1.0, 1.1, 1.2, 1.3, 1.4], 0.0006), Bracket(7.4949, 7.5012), Bracket(7.5995, 7.6006)]


def test_a_learner_numbers_brackets_across_a_long_gap_with_the_periods_it_has_learned():
    """Found on 2026-11-28 (benchmarks/lattice_under_load.py): across 6.1 s the prior admits 48 to 76
    ticks, so the fit fell back to the newest two brackets and took 102 ms as the period; the periods
    the first five allow (100 ms within 0.15 ms) leave 61 ticks only."""
    learner = TickLearner()
    for bracket in sparse_after_dense():
        learner.add(bracket)
    lattice = learner.lattice
    assert lattice is not None and lattice.brackets == 7
    assert [k for _, _, k in lattice.numbered] == [-66, -65, -64, -63, -62, -1, 0]
    assert lattice.period_s == pytest.approx(0.1, abs=1e-5)
    low, high = lattice.period_range_s
    assert low <= 0.1 <= high and high - low < 3e-5
    assert learner.period_range_s == lattice.period_range_s
    alone = fit(sparse_after_dense()[-2:], NOMINAL_PERIOD_S)
    assert alone is not None and alone.period_s > 0.101       # what the fit took without them


def test_the_periods_learned_number_brackets_after_the_ones_that_showed_them_are_forgotten():
    learner = TickLearner()
    for bracket in around([1.0, 1.1, 1.2, 1.3], 0.0006):
        learner.add(bracket)
    learned = learner.period_range_s
    assert learned is not None and learned[1] - learned[0] < 1e-3
    learner.add(Bracket(40.0949, 40.1012))     # the four are forgotten (30 s); then one period on
    learner.add(Bracket(40.1995, 40.2006))
    lattice = learner.lattice
    assert lattice is not None and lattice.brackets == 2
    assert lattice.period_range_s[0] >= learned[0] and lattice.period_range_s[1] <= learned[1]
    assert lattice.period_s == pytest.approx(0.1, abs=5e-4)


def test_brackets_the_learned_periods_contradict_are_fitted_with_the_prior_alone():
    """A learned range is only as good as the brackets behind it: brackets no period in it fits (a
    counter now publishing every 90 ms) are fitted afresh, and what they allow is learned instead."""
    learner = TickLearner()
    for bracket in around([1.0, 1.1, 1.2, 1.3], 0.0006):
        learner.add(bracket)
    for bracket in around([40.0, 40.09, 40.18], 0.0006):
        learner.add(bracket)
    lattice = learner.lattice
    assert lattice is not None and lattice.numbered
    assert lattice.period_s == pytest.approx(0.09, abs=1e-4)
    assert learner.period_range_s == lattice.period_range_s


def test_starting_again_forgets_the_learned_periods_and_a_copy_keeps_them():
    learner = learner_with([1.0, 1.1, 1.2, 1.3])
    assert learner.copy().period_range_s == learner.period_range_s is not None
    learner.miss()
    learner.miss()
    assert learner.period_range_s is None


def test_a_copy_of_a_learner_knows_what_it_knows_and_goes_its_own_way():
    learner = learner_with([1.0, 1.1, 1.2, 1.3], nominal_s=0.11)
    learner.miss()
    twin = learner.copy()
    assert (twin.nominal_period_s, twin.brackets, twin.lattice, twin.misses) == (0.11, learner.brackets,
                                                                                learner.lattice, 1)
    twin.add(around([1.4], 0.001)[0])
    assert len(learner.brackets) == 4 and len(twin.brackets) == 5
    twin.miss()
    assert twin.lattice is None and learner.lattice is not None


# -- soundness, whatever the brackets ----------------------------------------------------------------

def _true_tick_before(moment: float, phase_s: float, period_s: float) -> int:
    return math.floor((moment - phase_s) / period_s)


@settings(max_examples=400, deadline=None)
@given(period_s=st.floats(0.085, 0.12), phase_share=st.floats(0.0, 1.0),
       ticks=st.lists(st.integers(0, 40), min_size=2, max_size=8, unique=True),
       widths=st.lists(st.tuples(st.floats(1e-6, 0.013), st.floats(1e-6, 0.013)), min_size=8, max_size=8),
       reads=st.lists(st.tuples(st.floats(-1.0, 6.0), st.floats(0.0, 0.06)), min_size=1, max_size=12),
       spans=st.lists(st.tuples(st.floats(-1.0, 6.0), st.floats(0.0, 0.15)), min_size=1, max_size=12))
def test_a_date_the_lattice_gives_always_holds_the_true_tick(period_s, phase_share, ticks, widths, reads, spans):
    """Any strictly periodic counter (a period within the prior), any few brackets around its ticks
    (each up to 26 ms wide, the learner's limit at these periods), the lattice they leave: a read
    (``tick_of_read``) or a span (``only_tick_within``) it dates is dated to the one true tick that
    can be there, within the error it gives. Found wanting on 2026-11-28: a date took the error of
    the tick nearest the read, which before the brackets is smaller than its own tick's."""
    phase_s = phase_share * period_s
    learner = TickLearner()
    for k, (before, after) in zip(sorted(ticks), widths):
        tick = phase_s + k * period_s
        learner.add(Bracket(tick - before, tick + after))
    lattice = learner.lattice
    if lattice is None:
        return
    def near_a_tick(moment: float) -> bool:        # (where rounding, 1e-15 s, decides the side)
        return abs((moment - phase_s) / period_s - round((moment - phase_s) / period_s)) * period_s < 1e-9

    for started, held_s in reads:
        dated = lattice.tick_of_read(started, started + held_s)
        if dated is not None and not near_a_tick(started) and not near_a_tick(started + held_s):
            true_k = _true_tick_before(started, phase_s, period_s)
            assert true_k == _true_tick_before(started + held_s, phase_s, period_s), (started, held_s, dated)
            assert abs(phase_s + true_k * period_s - lattice.tick_at(dated[0])) <= dated[1] + 1e-9
    for earliest, width_s in spans:
        dated = lattice.only_tick_within(earliest, earliest + width_s)
        first, last = _true_tick_before(earliest, phase_s, period_s) + 1, _true_tick_before(earliest + width_s, phase_s, period_s)
        for true_k in range(first, last + 1):          # every true tick inside the span is the one dated
            assert dated is None or abs(phase_s + true_k * period_s - lattice.tick_at(dated[0])) <= dated[1] + 1e-9


@settings(max_examples=300, deadline=None)
@given(period_s=st.floats(0.085, 0.12), phase_share=st.floats(0.0, 1.0),
       ticks=st.lists(st.integers(0, 250), min_size=2, max_size=24, unique=True),
       widths=st.lists(st.tuples(st.floats(1e-6, 0.013), st.floats(1e-6, 0.013)), min_size=24, max_size=24))
def test_the_periods_a_learner_keeps_always_hold_the_true_one(period_s, phase_share, ticks, widths):
    """Brackets around any ticks of a strictly periodic counter, dense and sparse (gaps up to 25 s, as
    a long region read sparsely leaves): the periods the learner keeps and its lattice's range hold the
    true period after every bracket, and every bracket its lattice numbers holds its tick."""
    phase_s = phase_share * period_s
    learner = TickLearner()
    for k, (before, after) in zip(sorted(ticks), widths):
        tick = phase_s + k * period_s
        learner.add(Bracket(tick - before, tick + after))
        if learner.period_range_s is not None:
            low, high = learner.period_range_s
            assert low - 1e-12 <= period_s <= high + 1e-12, (learner.period_range_s, period_s)
        lattice = learner.lattice
        if lattice is not None and lattice.numbered:
            newest_k = _true_tick_before(lattice.numbered[-1][1], phase_s, period_s)
            for after_s, before_s, k_i in lattice.numbered:
                true_tick = phase_s + (newest_k + k_i) * period_s
                assert after_s - 1e-9 <= true_tick <= before_s + 1e-9, (k_i, after_s, before_s, true_tick)
