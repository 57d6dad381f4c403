"""The noise a suite's cases share: each case's saved sessions say little alone, all of them much.

A case's saved runs estimate its noise between sessions from k run means (k - 1 degrees of
freedom: 9 with 10 saved runs, 1 with 2), and the t quantile that such an estimate forces on the
gate (4.5 at 99 % for 4 runs, 31.8 for 2) costs most of the detection power the best possible test
would have. The other cases of the same suite, measured in the same sessions on the same GPU model,
have estimated the same kind of noise many times over. Where their estimates agree beyond chance,
a case's estimate is moderated towards theirs: the empirical Bayes method of limma (Smyth 2004,
"Linear models and empirical Bayes methods for assessing differential expression in microarray
experiments", Statistical Applications in Genetics and Molecular Biology 3(1), article 3, sections
3 and 6). The cases' sample variances ``s_i**2`` (``d_i`` degrees of freedom) are taken as scaled
chi-square draws around variances that themselves follow a scaled inverse chi-square law with
``d0`` degrees of freedom around ``s0**2``; ``d0`` and ``s0**2`` are fitted from the moments of
``log s_i**2`` (``prior``), and a case's variance becomes ``(d0 * s0**2 + d_i * s_i**2) / (d0 + d_i)``
with ``d0 + d_i`` degrees of freedom. Cases whose noise differs widely give a small ``d0`` and
borrow little; cases alike give a large one.

A case noisier than the others beyond chance (an F test of its own variance against the prior at
``decide.NOISIER_P``) keeps its own estimate: moderation must not hide a noisy case among quiet
ones, which would turn its noise into false alarms. It applies to both parts of the session
noise: the variance of the log of the runs' means (``SessionNoise.between``) and the repetitions'
pooled spread (``SessionNoise.within_cv2``), each across the cases of one comparison and metric.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TypeVar

from .decide import NOISIER_P
from .records import SessionNoise
from .student_t import f_sf

MIN_CASES = 5              # fewer cases than this: each keeps its own estimate
DF_LIMIT = 1e6             # the degrees of freedom of a prior the cases agree on exactly (d0 infinite)

K = TypeVar("K")


@dataclass(frozen=True)
class Prior:
    """What the suite's cases say together: a variance and how many degrees of freedom it is worth."""

    variance: float      # s0**2
    df: float            # d0; DF_LIMIT where the cases' variances differ by no more than chance


def prior(variances: Sequence[float], dfs: Sequence[float]) -> Prior | None:
    """``s0**2`` and ``d0`` from the cases' sample variances and their degrees of freedom (Smyth 2004,
    section 6: the moments of ``log s**2``), or None with under ``MIN_CASES`` usable cases."""
    usable = [(v, d) for v, d in zip(variances, dfs) if v > 0.0 and d > 0 and math.isfinite(v)]
    if len(usable) < MIN_CASES:
        return None
    centred = [math.log(v) - digamma(d / 2) + math.log(d / 2) for v, d in usable]
    mean = statistics.fmean(centred)
    spread = statistics.variance(centred) - statistics.fmean(trigamma(d / 2) for _, d in usable)
    if spread <= 0.0:
        return Prior(math.exp(mean), DF_LIMIT)
    d0 = min(2.0 * trigamma_inverse(spread), DF_LIMIT)
    return Prior(math.exp(mean + digamma(d0 / 2) - math.log(d0 / 2)), d0)


def moderated(variance: float, df: float, with_prior: Prior | None) -> tuple[float, float]:
    """A case's variance and its degrees of freedom, moderated towards ``with_prior`` (unless it is
    noisier than the prior beyond chance, or there is no prior, or it has no degrees of freedom)."""
    if with_prior is None or df <= 0:
        return variance, df
    if variance > with_prior.variance and f_sf(variance / with_prior.variance, df, with_prior.df) < NOISIER_P:
        return variance, df
    total = with_prior.df + df
    return (with_prior.df * with_prior.variance + df * variance) / total, min(total, DF_LIMIT)


def share(noises: Mapping[K, SessionNoise | None]) -> dict[K, SessionNoise | None]:
    """The cases' session noise (one metric, one comparison), each moderated with the others'."""
    known = {key: noise for key, noise in noises.items() if noise is not None}
    between_prior = prior([n.between for n in known.values()], [n.runs - 1 for n in known.values()])
    within_prior = prior([n.within_cv2 for n in known.values()], [n.within_df for n in known.values()])
    if between_prior is None and within_prior is None:
        return dict(noises)
    shared: dict[K, SessionNoise | None] = dict(noises)
    for key, noise in known.items():
        shared[key] = _moderate(noise, between_prior, within_prior)
    return shared


def _moderate(noise: SessionNoise, between_prior: Prior | None, within_prior: Prior | None) -> SessionNoise:
    between, between_df = moderated(noise.between, noise.runs - 1, between_prior)
    within_cv2, within_df = moderated(noise.within_cv2, noise.within_df, within_prior)
    if (between, within_cv2) == (noise.between, noise.within_cv2):
        return noise
    # what the repetitions' spread adds to a run mean's variance scales with the moderated spread
    scale = within_cv2 / noise.within_cv2 if noise.within_cv2 > 0 else 1.0
    within_of_mean = noise.within_of_mean * scale
    # Not floored at 0: moderated, both parts are estimated well, and the difference is unbiased. Floored,
    # it is above 0 whenever chance puts the between-run part above the other, so sessions that move no
    # more than their repetitions explain still widen every interval (at 2 % noise, n = 3, +5 %: 71 %
    # detected instead of 73.5 %, against the best possible 74.6 %). decide floors the total instead.
    return replace(noise, variance=between - within_of_mean, between=between, session_df=between_df,
                   within_cv2=within_cv2, within_df=within_df, within_of_mean=within_of_mean, shared=True)


# -- the polygamma functions the fit needs (no SciPy): recurrence up to 6, then the asymptotic series
def digamma(x: float) -> float:
    """psi(x) for x > 0 (Abramowitz and Stegun 6.3.5 and 6.3.18)."""
    shift = 0.0
    while x < 6.0:
        shift -= 1.0 / x
        x += 1.0
    inv2 = 1.0 / (x * x)
    series = inv2 * (1 / 12 - inv2 * (1 / 120 - inv2 * (1 / 252 - inv2 * (1 / 240 - inv2 / 132))))
    return shift + math.log(x) - 0.5 / x - series


def trigamma(x: float) -> float:
    """psi'(x) for x > 0 (Abramowitz and Stegun 6.4.6 and 6.4.12)."""
    shift = 0.0
    while x < 6.0:
        shift += 1.0 / (x * x)
        x += 1.0
    inv = 1.0 / x
    inv2 = inv * inv
    series = inv + inv2 / 2 + inv * inv2 * (1 / 6 - inv2 * (1 / 30 - inv2 * (1 / 42 - inv2 / 30)))
    return shift + series


def trigamma_inverse(value: float) -> float:
    """The x > 0 with psi'(x) = ``value`` (> 0): psi' falls monotonically from infinity to 0, so
    bisection on the log scale finds it to machine precision in a hundred steps."""
    if not value > 0.0:
        raise ValueError(f"trigamma_inverse needs a value above 0, not {value!r}")
    low, high = 1e-8, 1e8
    for _ in range(200):
        middle = math.sqrt(low * high)
        if trigamma(middle) > value:
            low = middle
        else:
            high = middle
        if high / low < 1.0 + 1e-13:
            break
    return math.sqrt(low * high)
