"""Tests of ``pytest_gpuenergy/gate/student_t.py``: Student's t CDF and quantiles without SciPy.

They exist for the mutation testing of the gate (benchmarks/mutation.py). ``tests/test_compare.py``
checks the quantiles against SciPy to 1e-8; these pin the pieces tighter, against closed forms:
the CDF for 1, 2 and 4 degrees of freedom (exact expressions, e.g. Wikipedia "Student's
t-distribution", "Cumulative distribution function" of special cases), the density, the starting
guess of the quantile (the Cornish-Fisher series of Abramowitz and Stegun 26.7.5, evaluated in exact
fractions by hand), and the edges: 0 degrees of freedom, infinite t, the median.
"""

from __future__ import annotations

import math

import pytest

from pytest_gpuenergy.gate.student_t import _cornish_fisher, _student_t_pdf, f_sf, student_t_cdf, student_t_ppf


def _cdf_df1(t: float) -> float:
    """The Cauchy distribution."""
    return 0.5 + math.atan(t) / math.pi


def _cdf_df2(t: float) -> float:
    return 0.5 + t / (2.0 * math.sqrt(2.0 + t * t))


def _cdf_df4(t: float) -> float:
    u = 1.0 + t * t / 4.0
    return 0.5 + 0.375 * t / math.sqrt(u) * (1.0 - t * t / (12.0 * u))


# t from the median to the far tail: both branches of the incomplete beta (its continued fraction
# directly and the reflection I_x(a, b) = 1 - I_(1-x)(b, a)) are used across this range.
T_VALUES = (0.01, 0.3, 0.9, 1.7, 3.0, 7.5, 40.0, 1e4)


@pytest.mark.parametrize("t", T_VALUES)
@pytest.mark.parametrize("df, exact", [(1, _cdf_df1), (2, _cdf_df2), (4, _cdf_df4)])
def test_cdf_matches_the_closed_forms_for_small_integer_degrees_of_freedom(df, exact, t):
    assert student_t_cdf(t, df) == pytest.approx(exact(t), rel=1e-13, abs=1e-15)
    assert student_t_cdf(-t, df) == pytest.approx(exact(-t), rel=1e-12, abs=1e-15)


@pytest.mark.parametrize("t", T_VALUES)
def test_the_far_tail_keeps_its_relative_precision(t):
    # P(T <= -t) for the Cauchy distribution is atan(1/t) / pi: computed from the tail, not 1 - cdf
    assert student_t_cdf(-t, 1) == pytest.approx(math.atan(1.0 / t) / math.pi, rel=1e-13)


@pytest.mark.parametrize("df", [0.3, 1, 2.5, 30, 1e6])
def test_the_cdf_is_one_half_at_zero_and_symmetric(df):
    assert student_t_cdf(0.0, df) == 0.5
    assert student_t_cdf(-0.0, df) == 0.5
    for t in (0.2, 2.0, 20.0):
        assert student_t_cdf(t, df) + student_t_cdf(-t, df) == pytest.approx(1.0, abs=1e-15)


@pytest.mark.parametrize("df", [0.5, 1, 7, 1e3])
def test_the_cdf_reaches_its_limits_at_infinite_t(df):
    assert student_t_cdf(math.inf, df) == 1.0
    assert student_t_cdf(-math.inf, df) == 0.0


def test_the_cdf_of_many_degrees_of_freedom_is_the_normal_one_to_first_order_in_one_over_df():
    # F(t) = Phi(t) - phi(t) (t**3 + t) / (4 df) + O(1/df**2); Phi(1.959963984540054) = 0.975
    t, df = 1.959963984540054, 1e5
    phi = math.exp(-t * t / 2) / math.sqrt(2 * math.pi)
    assert student_t_cdf(t, df) == pytest.approx(0.975 - phi * (t ** 3 + t) / (4 * df), abs=1e-11)


def test_fractional_degrees_of_freedom_below_one_are_accepted():
    # df = 0.5: the CDF is monotone and between that of the Cauchy distribution and 1/2 for t > 0
    value = student_t_cdf(2.0, 0.5)
    assert 0.5 < value < _cdf_df1(2.0)


@pytest.mark.parametrize("df", [0, 0.0, -1, -1e-9])
def test_degrees_of_freedom_must_be_positive(df):
    with pytest.raises(ValueError, match=rf"^degrees of freedom must be > 0, got {df}$"):
        student_t_cdf(1.0, df)


# -- the density and the quantile's starting guess ------------------------------------------------


@pytest.mark.parametrize("t", [0.0, 0.5, -1.0, 3.0, 100.0])
def test_the_density_matches_its_closed_forms(t):
    assert _student_t_pdf(t, 1) == pytest.approx(1.0 / (math.pi * (1.0 + t * t)), rel=1e-13)
    assert _student_t_pdf(t, 2) == pytest.approx((2.0 + t * t) ** -1.5, rel=1e-13)
    assert _student_t_pdf(t, 4) == pytest.approx(0.375 * (1.0 + t * t / 4.0) ** -2.5, rel=1e-13)


@pytest.mark.parametrize("z, df, series", [
    # z + sum_k g_k(z) / df**k with A&S 26.7.5's g_1..g_4, in fractions: e.g. z = 2, df = 1:
    # 2 + 5/2 + 49/16 + 183/64 + 56650/30720 = 12.265950520833...
    (2.0, 1.0, 12.265950520833334),
    (2.0, 2.0, 4.488301595052083),
    (1.0, 3.0, 1.1966885288065843),
    (3.0, 10.0, 3.95654765625),
    (0.5, 100.0, 0.5015662961320019),
])
def test_the_starting_guess_is_the_cornish_fisher_series(z, df, series):
    assert _cornish_fisher(z, df) == pytest.approx(series, rel=1e-14)


def test_a_negative_or_overflowing_series_falls_back_to_the_normal_quantile_or_one():
    assert _cornish_fisher(0.5, 0.1) == 1.0        # the series is -78.1 there
    assert _cornish_fisher(10.0, 1e-80) == 10.0    # the series overflows to infinity


@pytest.mark.parametrize("p, df", [(0.9, 5), (0.95, 5), (0.99, 10), (0.999, 20), (0.999, 200)])
def test_the_starting_guess_is_within_1e_4_of_the_quantile_the_gate_asks_for(p, df):
    # (at 0.99 and 5 degrees of freedom it is 1.2e-3 off, at 0.999 and 5 1.9e-2: Newton takes a few more steps)
    from statistics import NormalDist

    guess = _cornish_fisher(NormalDist().inv_cdf(p), df)
    assert guess == pytest.approx(student_t_ppf(p, df), abs=1e-4)


# -- quantiles ------------------------------------------------------------------------------------


@pytest.mark.parametrize("p, df, exact", [
    (0.75, 1, 1.0),                                  # tan(pi / 4)
    (0.975, 1, math.tan(0.475 * math.pi)),           # 12.7062...
    (0.99, 2, 0.98 / math.sqrt(2 * 0.01 * 0.99)),    # (2p - 1) / sqrt(2 p (1 - p)) = 6.9646
    (0.9, 2, 0.8 / math.sqrt(2 * 0.1 * 0.9)),
])
def test_quantiles_invert_the_closed_forms(p, df, exact):
    assert student_t_ppf(p, df) == pytest.approx(exact, rel=1e-12)


def test_the_median_is_exactly_zero():
    assert student_t_ppf(0.5, 3.7) == 0.0


@pytest.mark.parametrize("p", [0.4999, 1.0, 1.5, -0.2])
def test_quantiles_outside_the_upper_half_are_refused(p):
    with pytest.raises(ValueError, match=r"student_t_ppf needs 0.5 <= p < 1"):
        student_t_ppf(p, 4)


# -- the F distribution's survival function (the gate's test of a noisier new run) ---------------------

@pytest.mark.parametrize("x, df1, df2, expected", [
    (0.5, 2, 2, 1 / 1.5),              # F(2, 2): 1 / (1 + x)
    (3.0, 2, 4, 2.5 ** -2),            # F(2, d2): (1 + 2x / d2) ** (-d2 / 2)
    (1.0, 4, 2, 5 / 9),                # F(d1, 2): 1 - (d1 x / (d1 x + 2)) ** (d1 / 2)
    (1.0, 1, 1, 0.5),                  # F(1, 1) is symmetric about 1 on the log scale
])
def test_f_survival_matches_its_closed_forms(x, df1, df2, expected):
    assert f_sf(x, df1, df2) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("df2", [3, 7.5])
def test_f_with_one_degree_of_freedom_is_a_squared_t(df2):
    assert f_sf(2.0, 1, df2) == pytest.approx(2 * (1 - student_t_cdf(math.sqrt(2.0), df2)), rel=1e-10)


@pytest.mark.parametrize("x", [7.0, 0.3])
def test_f_survival_and_the_swapped_distribution_at_the_inverse_add_up_to_one(x):
    assert f_sf(x, 5, 9) + f_sf(1 / x, 9, 5) == pytest.approx(1.0, abs=1e-12)


@pytest.mark.parametrize("x", [0.0, -1.0])
def test_f_survival_is_one_at_and_below_zero(x):
    assert f_sf(x, 3, 4) == 1.0


@pytest.mark.parametrize("df1, df2", [(0, 3), (3, 0), (-1, 5)])
def test_f_needs_positive_degrees_of_freedom(df1, df2):
    with pytest.raises(ValueError) as raised:
        f_sf(2.0, df1, df2)
    assert str(raised.value) == f"degrees of freedom must be > 0, got {df1} and {df2}"
