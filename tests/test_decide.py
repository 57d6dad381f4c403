"""gate/decide.py on its own: one metric's verdict, its interval, its words, and the meter's bounds.

The gate's end-to-end tests (test_gate.py, test_compare.py) drive these through whole runs; here
each rule is pinned at its edge with figures worked out by hand, so a flipped comparison, a
dropped term or a wrong field fails a named test.
"""

from __future__ import annotations

import math
import statistics
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from pytest_gpuenergy.gate.decide import both_bounds, decide, metric_bounds
from pytest_gpuenergy.gate.records import THRESHOLD_ONLY, WELCH, SessionNoise
from pytest_gpuenergy.gate.student_t import f_sf, student_t_cdf, student_t_ppf
from pytest_gpuenergy.gate.verdicts import INCONCLUSIVE, REGRESSION, UNCHANGED, UNDEFINED


def entry(*reps: tuple[float | None, float | None, float]) -> Any:
    """A case's repetitions as metric_bounds reads them: (ets_low_j, ets_high_j, time_s)."""
    return SimpleNamespace(repetitions=[SimpleNamespace(ets_low_j=lo, ets_high_j=hi, time_s=t) for lo, hi, t in reps])


# -- input errors ---------------------------------------------------------------------------------

def test_an_unknown_metric_is_named_with_the_ones_that_exist() -> None:
    with pytest.raises(ValueError, match=r"^unknown metric 'power'; use ets, time, edp$"):
        decide("power", [1.0], [1.0], 5.0)


@pytest.mark.parametrize(("old", "new"), [([], [1.0]), ([1.0], []), ([], [])])
def test_a_side_without_repetitions_is_an_error_that_says_so(old: list[float], new: list[float]) -> None:
    with pytest.raises(ValueError, match=r"^ets: both runs need at least one repetition$"):
        decide("ets", old, new, 5.0)


# -- what a result records ---------------------------------------------------------------------------

def test_the_result_carries_both_means_the_confidence_and_the_sample_sizes() -> None:
    change = decide("ets", [10.0, 12.0], [11.0, 13.0, 15.0], 5.0, confidence=0.95)
    assert (change.old_mean, change.new_mean) == (11.0, 13.0)
    assert (change.old_n, change.new_n, change.confidence, change.threshold_pct) == (2, 3, 0.95, 5.0)
    assert change.method == WELCH


@pytest.mark.parametrize(("old", "new"), [([10.0], [0.0]), ([0.0], [10.0]), ([math.inf], [1.0])])
def test_a_mean_at_zero_gives_no_ratio_and_says_why(old: list[float], new: list[float]) -> None:
    change = decide("ets", old, new, 5.0)
    assert change.verdict == UNDEFINED and change.method == THRESHOLD_ONLY
    assert change.change_pct is None and change.ci_low_pct is None and change.ci_high_pct is None
    assert change.reason.startswith("no ratio: the mean is") and change.reason.endswith("both must be above 0")


def test_one_repetition_decides_by_the_threshold_alone_and_keeps_the_change() -> None:
    change = decide("ets", [10.0], [11.0], 5.0)
    assert change.method == THRESHOLD_ONLY and change.verdict == REGRESSION
    assert change.change_pct == pytest.approx(10.0, rel=1e-12)
    assert change.ci_low_pct is None and change.ci_high_pct is None
    assert change.reason.startswith("+10.0 %: above the 5 % threshold; threshold only: n=1/1 repetitions")


# -- the interval: Welch on the log ratio, with and without session noise -------------------------------

def _expected_bounds(old: list[float], new: list[float], confidence: float,
                     session: SessionNoise | None) -> tuple[float, float]:
    """The module docstring's formula, written out once more by hand."""
    cv2_old = statistics.variance(old) / statistics.fmean(old) ** 2
    cv2_new = statistics.variance(new) / statistics.fmean(new) ** 2
    a, b = cv2_old / len(old), cv2_new / len(new)
    c = 2 * session.variance if session is not None else 0.0
    df = (a + b + c) ** 2 / (a * a / (len(old) - 1) + b * b / (len(new) - 1)
                            + (c * c / (session.runs - 1) if session is not None else 0.0))
    half = student_t_ppf(confidence, df) * math.sqrt(a + b + c)
    log_ratio = math.log(statistics.fmean(new) / statistics.fmean(old))
    return 100 * math.expm1(log_ratio - half), 100 * math.expm1(log_ratio + half)


@pytest.mark.parametrize("session", [None, SessionNoise(variance=0.0004, runs=4), SessionNoise(variance=0.01, runs=3)])
def test_the_interval_is_welchs_on_the_log_ratio_with_the_session_term(session: SessionNoise | None) -> None:
    old, new = [100.0, 102.0, 98.0, 101.0], [108.0, 111.0, 106.0, 109.0]
    change = decide("ets", old, new, 5.0, confidence=0.99, session=session)
    low, high = _expected_bounds(old, new, 0.99, session)
    assert change.ci_low_pct == pytest.approx(low, rel=1e-9)
    assert change.ci_high_pct == pytest.approx(high, rel=1e-9)
    assert change.change_pct == pytest.approx(100 * (108.5 / 100.25 - 1), rel=1e-12)


def test_without_any_spread_the_interval_is_the_point() -> None:
    change = decide("ets", [10.0, 10.0], [12.0, 12.0], 5.0)
    assert change.ci_low_pct == pytest.approx(20.0) and change.ci_high_pct == pytest.approx(20.0)
    assert change.verdict == REGRESSION


# -- the words -----------------------------------------------------------------------------------------

def test_the_reason_names_the_session_noise_only_when_it_is_known() -> None:
    old, new = [100.0, 102.0, 98.0], [100.5, 101.0, 99.0]
    without = decide("ets", old, new, 5.0)
    assert "confidence, n=3/3): cannot tell" in without.reason
    with_noise = decide("ets", old, new, 5.0, session=SessionNoise(variance=0.03 ** 2, runs=4))
    assert "n=3/3, session noise 3.0 % from 4 runs): " in with_noise.reason
    wide = decide("ets", old, new, 5.0, session=SessionNoise(variance=0.1 ** 2, runs=6))
    assert "n=3/3, session noise 10.0 % from 6 runs): " in wide.reason          # the CV in per cent, to 0.1


def test_only_an_inconclusive_verdict_carries_a_hint() -> None:
    decided = decide("ets", [100.0, 101.0, 99.0], [100.0, 100.5, 99.5], 5.0)
    assert decided.verdict == UNCHANGED and decided.hint == ""
    unsure = decide("ets", [100.0, 130.0, 80.0], [110.0, 140.0, 85.0], 5.0)
    assert unsure.verdict == INCONCLUSIVE
    assert unsure.hint.startswith("measure more repetitions (--energy-repeat=N; now n=3/3)")


def test_a_hint_blames_the_sessions_only_when_their_noise_outweighs_the_repetitions() -> None:
    # No spread anywhere (session variance 0): the sessions do not dominate, even at equality.
    bounds = ((9.0, 13.0), (11.0, 14.0))
    change = decide("ets", [10.0, 10.0], [12.0, 12.0], 5.0, session=SessionNoise(0.0, 3), bounds=bounds)
    assert change.verdict == INCONCLUSIVE
    assert change.hint.startswith("measure more repetitions")
    noisy = decide("ets", [100.0, 101.0, 99.0], [103.0, 104.0, 102.0], 5.0, session=SessionNoise(0.05 ** 2, 3))
    assert noisy.verdict == INCONCLUSIVE and noisy.hint.startswith("the noise between sessions dominates")


# -- the meter's bounds ------------------------------------------------------------------------------

@pytest.mark.parametrize(("old_b", "new_b"), [
    ((1.0, 2.0), (2.0, 3.0)),       # touching at the top of the old bound
    ((2.0, 3.0), (1.0, 2.0)),       # touching at its bottom
    ((1.0, 5.0), (2.0, 3.0)),       # one inside the other
])
def test_bounds_that_overlap_or_touch_explain_a_change(old_b: tuple[float, float], new_b: tuple[float, float]) -> None:
    change = decide("ets", [10.0, 10.0], [12.0, 12.0], 5.0, bounds=(old_b, new_b))
    assert change.verdict == INCONCLUSIVE
    assert f"baseline {old_b[0]:.4g}-{old_b[1]:.4g} J, now {new_b[0]:.4g}-{new_b[1]:.4g} J" in change.reason


def test_bounds_apart_leave_the_verdict_alone_and_unmentioned() -> None:
    change = decide("ets", [10.0, 10.0], [12.0, 12.0], 5.0, bounds=((9.0, 10.5), (11.5, 12.5)))
    assert change.verdict == REGRESSION and "the meter's bounds" not in change.reason


def test_one_repetition_within_the_bounds_is_inconclusive() -> None:
    change = decide("ets", [10.0], [12.0], 5.0, bounds=((9.0, 13.0), (11.0, 14.0)))
    assert change.verdict == INCONCLUSIVE and change.change_pct == pytest.approx(20.0)


def test_the_meter_bound_of_ets_is_the_mean_of_the_repetitions_bounds() -> None:
    case = entry((9.0, 11.0, 2.0), (10.0, 14.0, 4.0))
    assert metric_bounds(case, "ets") == (9.5, 12.5)


def test_the_meter_bound_of_edp_scales_each_repetition_by_its_time() -> None:
    case = entry((9.0, 11.0, 2.0), (10.0, 14.0, 4.0))
    assert metric_bounds(case, "edp") == ((18.0 + 40.0) / 2, (22.0 + 56.0) / 2)


@pytest.mark.parametrize("case", [
    entry((9.0, 11.0, 2.0)),                               # time is timed exactly: no bound
])
def test_time_has_no_meter_bound(case: Any) -> None:
    assert metric_bounds(case, "time") is None


@pytest.mark.parametrize("case", [entry((None, 11.0, 2.0), (9.0, 12.0, 2.0)), entry((9.0, None, 2.0), (9.0, 12.0, 2.0))])
def test_a_document_without_a_bound_on_any_repetition_gives_none(case: Any) -> None:
    assert metric_bounds(case, "ets") is None


def test_both_bounds_need_both_sides() -> None:
    with_bounds = entry((9.0, 11.0, 2.0))
    without = entry((None, None, 2.0))
    assert both_bounds(with_bounds, entry((10.0, 12.0, 3.0)), "ets") == ((9.0, 11.0), (10.0, 12.0))
    assert both_bounds(with_bounds, entry((10.0, 12.0, 3.0)), "edp") == ((18.0, 22.0), (30.0, 36.0))
    assert both_bounds(with_bounds, without, "ets") is None
    assert both_bounds(without, with_bounds, "ets") is None


# -- the repetitions' spread pooled over saved sessions ------------------------------------------------

def test_saved_sessions_pool_their_repetitions_spread_with_its_degrees_of_freedom() -> None:
    runs = [[9.0, 10.0, 11.0], [19.0, 21.0], [5.0]]                   # the last shows no spread
    noise = SessionNoise.estimate(runs)
    assert noise is not None and noise.runs == 3 and noise.within_df == 2 + 1 + 0
    cv2 = [statistics.variance([v / 10.0 for v in runs[0]]), statistics.variance([v / 20.0 for v in runs[1]])]
    assert noise.within_cv2 == pytest.approx((2 * cv2[0] + 1 * cv2[1]) / 3, rel=1e-12)


def _pooled_bounds(old: list[float], new: list[float], session: SessionNoise, confidence: float = 0.99) -> tuple[float, float]:
    """The pooled form by hand: one spread for both means, the pool's and the new run's degrees of freedom."""
    cv2_new = statistics.variance(new) / statistics.fmean(new) ** 2
    dof = session.within_df + len(new) - 1
    pooled = (session.within_df * session.within_cv2 + (len(new) - 1) * cv2_new) / dof
    a, c = pooled * (1 / len(old) + 1 / len(new)), 2 * session.variance
    df = (a + c) ** 2 / (a * a / dof + c * c / (session.runs - 1))
    half = student_t_ppf(confidence, df) * math.sqrt(a + c)
    log_ratio = math.log(statistics.fmean(new) / statistics.fmean(old))
    return 100 * math.expm1(log_ratio - half), 100 * math.expm1(log_ratio + half)


@pytest.mark.parametrize("variance", [0.0, 0.0001])
def test_with_saved_sessions_both_means_use_the_pooled_spread(variance: float) -> None:
    old, new = [100.0, 102.0, 98.0, 101.0, 99.0], [105.0, 107.0, 104.0, 106.0, 103.0]
    same_spread = (statistics.variance(old) / 100.0 ** 2 + statistics.variance(new) / 105.0 ** 2) / 2
    session = SessionNoise(variance=variance, runs=10, within_cv2=same_spread, within_df=40)
    change = decide("ets", old, new, 2.0, session=session)
    low, high = _pooled_bounds(old, new, session)
    assert (change.ci_low_pct, change.ci_high_pct) == (pytest.approx(low, rel=1e-9), pytest.approx(high, rel=1e-9))
    welch = decide("ets", old, new, 2.0, session=SessionNoise(variance=variance, runs=10))
    assert change.ci_low_pct > welch.ci_low_pct          # the same spread, 44 degrees of freedom instead of about 8


def test_a_new_run_noisier_than_its_history_keeps_its_own_spread() -> None:
    old, new = [100.0, 100.5, 99.5, 100.2, 99.8], [100.0, 120.0, 90.0, 115.0, 95.0]
    session = SessionNoise(variance=0.0, runs=10, within_cv2=0.005 ** 2, within_df=40)
    change = decide("ets", old, new, 2.0, session=session)
    cv2_new = statistics.variance(new) / statistics.fmean(new) ** 2
    a, b = session.within_cv2 / 5, cv2_new / 5
    df = (a + b) ** 2 / (a * a / 40 + b * b / 4)
    half = student_t_ppf(0.99, df) * math.sqrt(a + b)
    log_ratio = math.log(statistics.fmean(new) / statistics.fmean(old))
    assert change.ci_low_pct == pytest.approx(100 * math.expm1(log_ratio - half), rel=1e-9)
    assert change.ci_high_pct == pytest.approx(100 * math.expm1(log_ratio + half), rel=1e-9)


def test_pooling_detects_more_at_the_same_false_alarms() -> None:
    """2 % noise, n = 5, 9 saved runs before the baseline, no session effect (SIMULATED samples): a +5 %
    change is caught far more often than with the two runs alone, and an unchanged one rarely."""
    rng = np.random.default_rng(5)
    trials, sigma = 400, math.sqrt(math.log(1 + 0.02 ** 2))
    caught_pooled = caught_alone = false_alarms = 0
    for _ in range(trials):
        runs = [list(np.exp(rng.normal(0.0, sigma, 5))) for _ in range(10)]
        noise = SessionNoise.estimate(runs)
        slower = list(1.05 * np.exp(rng.normal(0.0, sigma, 5)))
        same = list(np.exp(rng.normal(0.0, sigma, 5)))
        caught_pooled += decide("ets", runs[-1], slower, 2.0, session=noise).verdict == REGRESSION
        caught_alone += decide("ets", runs[-1], slower, 2.0).verdict == REGRESSION
        false_alarms += decide("ets", runs[-1], same, 2.0, session=noise).verdict == REGRESSION
    assert caught_pooled / trials > 0.8 and caught_alone / trials < 0.8
    assert caught_pooled > caught_alone + 0.08 * trials
    assert false_alarms / trials < 0.025


@pytest.mark.parametrize(("x", "df2"), [(0.5, 4.0), (3.0, 10.0), (9.0, 40.0)])
def test_the_f_tail_matches_its_closed_forms(x: float, df2: float) -> None:
    assert f_sf(x, 2.0, df2) == pytest.approx((1 + 2 * x / df2) ** (-df2 / 2), rel=1e-10)      # df1 = 2
    t = math.sqrt(x)                                                                            # F(1, d) = t(d)**2
    assert f_sf(x, 1.0, df2) == pytest.approx(2 * (1 - student_t_cdf(t, df2)), rel=1e-9)
    assert f_sf(0.0, 3.0, df2) == 1.0
    with pytest.raises(ValueError, match="degrees of freedom must be > 0"):
        f_sf(x, 0.0, df2)


# -- _within_terms at its edges (decide.py's survivors of its 2026-11-27 rerun) ------------------------------

def _welch(cv2_old: float, old_n: int, cv2_new: float, new_n: int) -> list[tuple[float, int]]:
    return [(cv2_old / old_n, old_n - 1), (cv2_new / new_n, new_n - 1)]


@pytest.mark.parametrize(("within_cv2", "within_df"), [(0.01 ** 2, 0), (0.0, 8)], ids=["no-df", "no-spread"])
def test_saved_sessions_without_a_pooled_spread_leave_each_run_its_own_welch_term(within_cv2, within_df) -> None:
    from pytest_gpuenergy.gate.decide import _within_terms
    session = SessionNoise(variance=1e-4, runs=5, within_cv2=within_cv2, within_df=within_df)
    assert _within_terms(0.02 ** 2, 5, 0.03 ** 2, 4, session) == _welch(0.02 ** 2, 5, 0.03 ** 2, 4)


def test_one_degree_of_freedom_of_pooled_spread_is_pooled_with_the_new_run() -> None:
    from pytest_gpuenergy.gate.decide import _within_terms
    session = SessionNoise(variance=1e-4, runs=2, within_cv2=0.01 ** 2, within_df=1)
    pooled = (1 * 0.01 ** 2 + 4 * 0.01 ** 2) / 5
    assert _within_terms(0.02 ** 2, 5, 0.01 ** 2, 5, session) == [(pytest.approx(pooled * (1 / 5 + 1 / 5), rel=1e-12), 5)]


def _ratio_at(p: float, dfn: int, dfd: int) -> float:
    """The variance ratio whose F upper tail is p (bisection on f_sf, which falls as the ratio grows)."""
    low, high = 1.0, 1e6
    for _ in range(200):
        mid = math.sqrt(low * high)
        low, high = (mid, high) if f_sf(mid, dfn, dfd) > p else (low, mid)
    return math.sqrt(low * high)


@pytest.mark.parametrize("side", [0.8, 1.25], ids=["just-noisier", "just-not-noisier"])
def test_the_f_test_takes_the_new_runs_own_degrees_of_freedom_at_its_edge(side) -> None:
    """new_n - 1 numerator degrees of freedom: a ratio just past (or just short of) the 1 % tail with them
    falls on the other side with one more or one fewer."""
    from pytest_gpuenergy.gate.decide import NOISIER_P, _within_terms
    new_n, within_df, within_cv2 = 5, 40, 0.01 ** 2
    cv2_new = within_cv2 * _ratio_at(NOISIER_P * side, new_n - 1, within_df)
    session = SessionNoise(variance=1e-4, runs=10, within_cv2=within_cv2, within_df=within_df)
    terms = _within_terms(within_cv2, 5, cv2_new, new_n, session)
    if side < 1:     # noisier beyond chance: the new side keeps its own spread
        assert terms == [(within_cv2 / 5, within_df), (cv2_new / new_n, new_n - 1)]
    else:            # not: it joins the pool
        assert len(terms) == 1 and terms[0][1] == within_df + new_n - 1
