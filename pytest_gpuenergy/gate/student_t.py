"""Student's t distribution without SciPy: its CDF and quantiles, for the comparison's bounds
(and the F distribution's upper tail, for asking whether a run is noisier than its history).

The plugin must not depend on SciPy (a large install on GPU boxes), and it needs only the
quantile of t at a real, fractional number of degrees of freedom (Welch-Satterthwaite's). The
CDF is the regularised incomplete beta function, by its continued fraction (DLMF 8.17.22), and
the quantile Newton's method kept inside a bracket. ``tests/test_compare.py`` checks both
against SciPy to 1e-8.
"""

from __future__ import annotations

import math
import statistics
from functools import lru_cache

# A Halley step this small (relative) leaves an error of about its cube: the quantile is within
# rounding. A bisection step never ends the search (it may be small while the bracket is not).
_STEP_DONE = 1e-6


def student_t_cdf(t: float, df: float) -> float:
    """P(T <= t) for Student's t with ``df`` (real, > 0) degrees of freedom."""
    if df <= 0:
        raise ValueError(f"degrees of freedom must be > 0, got {df}")
    tail = 0.5 * _betainc(df / 2.0, 0.5, df / (df + t * t), t * t / (df + t * t))
    return 1.0 - tail if t >= 0 else tail


@lru_cache(maxsize=1024)
def student_t_ppf(p: float, df: float) -> float:
    """The ``p`` quantile of Student's t (0.5 < p < 1): Halley's method kept inside a bracket.

    It starts from the Cornish-Fisher expansion in 1/df (Abramowitz and Stegun 26.7.5), within
    1e-4 of the quantile from 5 degrees of freedom on. Halley's step (cubic: the t density's own
    slope is known in closed form) takes that to about 1e-12, so a second CDF evaluation, whose
    step is below ``_STEP_DONE``, ends it: two CDFs a quantile where Newton needed three or four.
    The gate asks for one quantile per case at that case's own (Welch) degrees of freedom, so a
    comparison of 10,000 cases asks 10,000 times.
    """
    if not 0.5 <= p < 1:
        raise ValueError(f"student_t_ppf needs 0.5 <= p < 1, got {p}")
    if p == 0.5:
        return 0.0
    t = _cornish_fisher(statistics.NormalDist().inv_cdf(p), df)
    low, high = 0.0, math.inf            # cdf(low) < p < cdf(high), narrowed as Halley goes
    for _ in range(200):
        error = student_t_cdf(t, df) - p
        if error == 0.0:     # exact: a bisection from here would wander off and take ~40 more steps back
            return t
        if error > 0:
            high = t
        else:
            low = t
        newton = error / _student_t_pdf(t, df)
        # f''/f' = -(df + 1) t / (df + t^2) for the t density: Halley's correction of Newton's step
        candidate = t - newton / (1.0 + 0.5 * newton * (df + 1.0) * t / (df + t * t))
        if not low < candidate < high:
            candidate = 0.5 * (low + high) if high < math.inf else 2.0 * max(t, 1.0)
        elif abs(candidate - t) <= _STEP_DONE * max(1.0, abs(t)):
            return candidate       # the step was Halley's and tiny: its result is within rounding
        t = candidate
    return t


def _cornish_fisher(z: float, df: float) -> float:
    """Student's t quantile from the normal one ``z``, to the fourth order in 1/df (A&S 26.7.5)."""
    z2 = z * z
    terms = (
        z * (z2 + 1) / 4,
        z * ((5 * z2 + 16) * z2 + 3) / 96,
        z * (((3 * z2 + 19) * z2 + 17) * z2 - 15) / 384,
        z * ((((79 * z2 + 776) * z2 + 1482) * z2 - 1920) * z2 - 945) / 92160,
    )
    guess = z + sum(term / df ** (k + 1) for k, term in enumerate(terms))
    return guess if guess > 0 and math.isfinite(guess) else max(z, 1.0)


def f_sf(x: float, df1: float, df2: float) -> float:
    """P(F > x) for Fisher's F with (``df1``, ``df2``) degrees of freedom: 1 - I_z(df1/2, df2/2),
    z = df1 x / (df1 x + df2) (DLMF 8.17.1, Abramowitz and Stegun 26.6.2)."""
    if df1 <= 0 or df2 <= 0:
        raise ValueError(f"degrees of freedom must be > 0, got {df1} and {df2}")
    if x <= 0:
        return 1.0
    scaled = df1 * x
    return 1.0 - _betainc(df1 / 2, df2 / 2, scaled / (scaled + df2), df2 / (scaled + df2))


def _student_t_pdf(t: float, df: float) -> float:
    log_pdf = (math.lgamma((df + 1) / 2) - math.lgamma(df / 2) - 0.5 * math.log(df * math.pi)
               - (df + 1) / 2 * math.log1p(t * t / df))
    return math.exp(log_pdf)


def _betainc(a: float, b: float, x: float, y: float) -> float:
    """The regularised incomplete beta function I_x(a, b), by its continued fraction (DLMF 8.17.22).

    ``y`` is 1 - x, passed in so that it keeps its precision when x is close to 1.
    """
    if x <= 0.0:
        return 0.0
    if y <= 0.0:
        return 1.0
    if x > (a + 1.0) / (a + b + 2.0):   # the fraction converges fast only below this point
        return 1.0 - _betainc(b, a, y, x)
    log_front = a * math.log(x) + b * math.log(y) - math.log(a) - (math.lgamma(a) + math.lgamma(b) - math.lgamma(a + b))
    return math.exp(log_front) * _beta_fraction(a, b, x)


def _beta_fraction(a: float, b: float, x: float) -> float:
    """1 / (1 + d1 / (1 + d2 / (1 + ...))) by the modified Lentz method, two coefficients a turn:
    d(2k+1) = -(a+k)(a+b+k)x / ((a+2k)(a+2k+1)) and d(2k) = k(b-k)x / ((a+2k-1)(a+2k))."""
    tiny = 1e-300
    value, c, d = 1.0, 1.0 / tiny, 1.0        # after the leading 1 / (1 + ...)
    for k in range(500):
        if k:
            numerator = k * (b - k) * x / ((a + 2 * k - 1) * (a + 2 * k))
            d = 1.0 + numerator * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + numerator / c
            c = c if abs(c) > tiny else tiny
            value *= c * d
        numerator = -(a + k) * (a + b + k) * x / ((a + 2 * k) * (a + 2 * k + 1))
        d = 1.0 + numerator * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + numerator / c
        c = c if abs(c) > tiny else tiny
        delta = c * d
        value *= delta
        # checked once a pair of coefficients: at most one step more than needed
        if abs(delta - 1.0) < 1e-15:
            break
    return value
