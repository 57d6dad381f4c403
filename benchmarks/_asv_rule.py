"""asv's rule for "worse", reimplemented for ``detection_power.py`` (no asv code is used or copied).

``asv compare`` (asv 0.6, asv_runner 0.2) calls a candidate worse when its median is above the
factor times the old one AND ``is_different`` says the runs differ: the exact two-sided
Mann-Whitney U test at p < 0.002 where the sample sizes can reach it, else disjoint 99 % intervals
of the median (order statistics; where unbounded, quantiles of the Laplace location posterior).
``detection_power.py``'s docstring says where in asv each piece is read.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from functools import cache


def _binom_cdf_half(n: int) -> list[float]:
    """P(K <= k) for K ~ Binomial(n, 1/2), k = 0..n."""
    total, out = 0, []
    for k in range(n + 1):
        total += math.comb(n, k)
        out.append(total / 2 ** n)
    return out


def laplace_location_quantile(y: Sequence[float], p: float) -> float:
    """The p-quantile of the posterior p(beta | y) ~ (sum_j |y_j - beta|)^-(len(y)).

    Piecewise: between consecutive sorted points the sum is linear in beta, A + C beta with
    C = 2k - m (k points below beta), so its power integrates in closed form; the cumulative
    mass is inverted on the segment that holds p. The data are centred on the median and scaled
    by their total absolute deviation first (the posterior is location-scale equivariant).
    """
    values = sorted(y)
    m = len(values)
    nu = m - 1
    if nu < 1:
        raise ValueError("the posterior needs at least 2 samples")
    centre = statistics.median(values)
    scale = sum(abs(v - centre) for v in values)
    if scale == 0:
        return centre
    z = [(v - centre) / scale for v in values]
    segments = []                      # (A, C, left, right, mass)
    for k in range(m + 1):
        c = 2 * k - m
        a = sum(z[k:]) - sum(z[:k])
        left = -math.inf if k == 0 else z[k - 1]
        right = math.inf if k == m else z[k]
        segments.append((a, c, left, right, _segment_mass(a, c, left, right, nu)))
    total = sum(s[4] for s in segments)
    target = p * total
    for a, c, left, right, mass in segments:
        if target <= mass or right == math.inf:
            beta = _segment_inverse(a, c, left, min(target, mass), nu)
            return centre + scale * min(max(beta, left), right)
        target -= mass
    raise AssertionError("unreachable")


def _segment_mass(a: float, c: int, left: float, right: float, nu: int) -> float:
    """Integral of (a + c x)^-(nu+1) over [left, right] (the sum of distances on one segment)."""
    if c == 0:
        return (right - left) * a ** -(nu + 1)
    def antiderivative_term(x: float) -> float:   # (a + c x)^-nu, which is 0 at an infinite end
        return 0.0 if math.isinf(x) else (a + c * x) ** -nu
    return (antiderivative_term(left) - antiderivative_term(right)) / (nu * c)


def _segment_inverse(a: float, c: int, left: float, mass: float, nu: int) -> float:
    """The x at which the integral from ``left`` reaches ``mass``."""
    if c == 0:
        return left + mass * a ** (nu + 1)
    start = 0.0 if math.isinf(left) else (a + c * left) ** -nu
    value = start - nu * c * mass
    if value <= 0:
        return math.inf if c < 0 else -math.inf
    return (value ** (-1.0 / nu) - a) / c


def asv_median_ci99(y: Sequence[float]) -> tuple[float, float]:
    """asv's 99 % interval of the median: order statistics, else the Laplace-posterior quantiles."""
    values = sorted(y)
    n = len(values)
    cdf = _binom_cdf_half(n)
    low, high = -math.inf, math.inf
    for k, value in enumerate(values):
        if cdf[k] <= 0.005:
            low = value
        if cdf[k] >= 0.995:
            high = value
            break
    if (math.isinf(low) or math.isinf(high)) and n > 1:
        if math.isinf(low):
            low = min(laplace_location_quantile(values, 0.005), values[0])
        if math.isinf(high):
            high = max(laplace_location_quantile(values, 0.995), values[-1])
    return low, high


@cache
def _mwu_null_cdf(m: int, n: int) -> tuple[float, ...]:
    """P(U <= u), u = 0..m*n, for the Mann-Whitney U statistic of samples of sizes m and n (no ties).

    Counts of orderings by dynamic programming: N(i, j, u) = N(i, j-1, u) + N(i-1, j, u-j).
    """
    table: dict[tuple[int, int], list[int]] = {}
    for i in range(m + 1):
        for j in range(n + 1):
            if i == 0 or j == 0:
                table[i, j] = [1]
                continue
            counts = [0] * (i * j + 1)
            for u, count in enumerate(table[i, j - 1]):
                counts[u] += count
            for u, count in enumerate(table[i - 1, j]):
                counts[u + j] += count
            table[i, j] = counts
    total = math.comb(m + n, m)
    cdf, running = [], 0
    for count in table[m, n]:
        running += count
        cdf.append(running / total)
    return tuple(cdf)


def mann_whitney_two_sided_p(x: Sequence[float], y: Sequence[float]) -> float:
    """Exact two-sided p-value of the Mann-Whitney U test (continuous samples)."""
    u = sum(1 for a in x for b in y if a > b)
    m, n = len(x), len(y)
    extreme = min(u, m * n - u)
    return min(1.0, 2.0 * _mwu_null_cdf(m, n)[extreme])


def asv_is_different(old: Sequence[float], new: Sequence[float], p_threshold: float = 0.002) -> bool:
    """asv's ``is_different``: the U test where it can reach the threshold, else disjoint 99 % CIs."""
    if 1.0 / math.comb(len(old) + len(new), min(len(old), len(new))) < p_threshold:
        return mann_whitney_two_sided_p(old, new) < p_threshold
    a_low, a_high = asv_median_ci99(old)
    b_low, b_high = asv_median_ci99(new)
    return not (a_high >= b_low and a_low <= b_high)
