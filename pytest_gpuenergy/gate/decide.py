"""Deciding one metric of one case: is the change a regression beyond noise?

The decision rule (the CI gate)
-------------------------------
For each case and metric (ETS, T, EDP) the repetitions of the baseline and of the new run are
two samples. The **change** is the ratio of their means, new / old - 1, in per cent (the means
are the figures the result tables show), with one-sided confidence bounds (below). From these
``verdicts.classify`` decides: a **regression** is a change above the metric's threshold
(``--energy-fail=ets:5%``) whose increase is real (lower bound above 0 %); an **improvement**
the mirror image; **unchanged** when the whole interval lies within the threshold; otherwise
**inconclusive**: the data cannot tell (see ``verdicts.py``, with the hint that would tell). A
metric without a threshold is reported (``increase``/``decrease``/``unchanged``) but never
gates; it only labels the whole case (``changed``) when no metric is gated at all. With fewer
than 2 repetitions on either side there is no spread to test against, so the threshold alone
decides, and the result says so. Whatever the statistics say, a change of ETS or EDP that the
meter's own bounds can explain (the bound of the old mean and that of the new one overlap: short
regions are coarse) is never a regression nor an improvement: it is inconclusive.

The statistical test: Welch's t on the log of the ratio of means
----------------------------------------------------------------
``log(mean_new / mean_old)`` has, by the delta method, the standard error
``sqrt(cv_old**2 / n_old + cv_new**2 / n_new)`` (``cv`` = sample standard deviation / mean),
with the Welch-Satterthwaite degrees of freedom of those two terms. The bounds are
``exp(log ratio -/+ t(confidence, df) * se) - 1``; each bound is one-sided at the stated
confidence, so together they form a (2 x confidence - 1) two-sided interval (98 % for 99 %).

Why this test:

- Energy noise is multiplicative (a few per cent of the figure, whatever its size), so the
  log scale makes the noise additive and the interval is one on the *ratio*, which is what a
  "5 %" threshold talks about; it is always positive and centred on the reported change.
- Welch's form does not assume equal spread: a new driver or a different cap changes it.
- It works at the small sample sizes of GPU benchmarks (3 to 10 repetitions), where a
  bootstrap interval is too narrow (it cannot see more spread than the few samples show) and
  the Mann-Whitney U test cannot reach 99 % at all with 4 against 4 samples (its smallest
  one-sided p-value is 1/70) and gives no interval on the ratio.
- To first order in the CV it equals Welch's t-test on log-values (Welch 1947, Biometrika 34;
  the delta method for a ratio of means, e.g. Casella & Berger, Statistical Inference, 5.5.4).
  ``tests/test_compare.py`` checks by simulation that unchanged workloads with 2-5 % noise are
  called real increases in about 1 % of comparisons at 99 %.

Noise between sessions
----------------------
Repetitions inside one session share its machine state (clocks, temperature, the host's load,
the allocator's layout), so their spread understates how much a whole session's mean moves from
one session to the next. On a real H100 an unchanged full-size suite run twice gave step times
up to 40 % apart at 1 to 3 % CV within each run, and the within-run test called three of 18
cases real EDP regressions. So when the store holds earlier runs of the same GPU model and
backend, the gate also estimates, per case and metric, the variance of a session's mean around
the true one: ``s_b**2 = var(log run means) - mean(within-run variance of a run's log mean)`` over
the baseline and up to ``HISTORY_RUNS - 1`` runs before it (floored at 0 for a case alone;
moderated with the suite's other cases, below, the unbiased estimate, which may be below 0, with
the total floored at half of the repetitions' part). Each side's mean
carries one session effect, so ``se**2`` gains ``2 * s_b**2``, with ``k - 1`` degrees of freedom
(k runs) in the Welch-Satterthwaite sum. With a single saved run this term is unknown: the test
then sees within-run noise only, and the comparison says so. Save several baselines (k >= 3;
the t quantile at 99 % is 31.8 for k = 2, 4.5 for k = 4 and 3.4 for k = 6).

The repetitions' spread, pooled over the saved sessions
-------------------------------------------------------
With 3 to 5 repetitions a run's own spread is a poor estimate of the noise (4 degrees of freedom
each side put t at 3.4 for 99 %), and most of the gap to the best possible test (the noise known:
z = 2.33) is that uncertainty. The saved sessions of the case have measured the same spread many
times over, so where they exist the gate pools the repetitions' squared CV over them (their
degrees of freedom add up: 9 runs of 5 give 36) and uses it for both means. The new run joins the
pool only when its own spread is not larger beyond chance (a one-sided F test at 1 %): a change
that also makes the figures noisier keeps Welch's form on its side. On simulated samples at 2 %
noise, n = 5 and +5 %, this raises detection from 73 % to about 88 % with 10 saved runs, at the
same false-alarm rate (``benchmarks/detection_power.py``); moderated with the suite's other cases'
estimates (``shared_noise.py``, applied by ``compare.py``) about 92 % (the bound: 93.7 %).

The Student t quantile is computed in ``student_t.py`` (regularised incomplete beta, DLMF 8.17.22), so the
plugin does not depend on SciPy.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..metrics import METRIC_UNITS, METRICS
from ..runs.records import CaseEntry
from .records import THRESHOLD_ONLY, MetricChange, SessionNoise, sample_variance
from .settings import DEFAULT_CONFIDENCE
from .student_t import f_sf, student_t_ppf
from .verdicts import INCONCLUSIVE, UNDEFINED, Evidence, classify, confidence_text, inconclusive_hint, interval_text, pct_text

# The new run's repetitions are pooled with the saved sessions' unless an F test says they are
# noisier at this level (see _within_terms).
NOISIER_P = 0.01


def decide(
    metric: str,
    old: Sequence[float],
    new: Sequence[float],
    threshold_pct: float | None,
    confidence: float = DEFAULT_CONFIDENCE,
    session: SessionNoise | None = None,
    bounds: tuple[tuple[float, float], tuple[float, float]] | None = None,
) -> MetricChange:
    """The verdict for one metric from the two runs' repetitions (see the module docstring).

    ``session``: the noise between sessions, estimated from saved runs; None when unknown.
    ``bounds``: the meter's bounds on the old and the new mean, where known. A change that the
    bounds can explain (they overlap) is never a regression nor an improvement, whatever the
    statistics say: the figures themselves are not that certain.
    """
    if metric not in METRICS:
        raise ValueError(f"unknown metric {metric!r}; use {', '.join(METRICS)}")
    if not old or not new:
        raise ValueError(f"{metric}: both runs need at least one repetition")
    old_mean, new_mean = statistics.fmean(old), statistics.fmean(new)
    base: dict[str, Any] = dict(metric=metric, old_mean=old_mean, new_mean=new_mean, confidence=confidence,
                threshold_pct=threshold_pct, old_n=len(old), new_n=len(new))
    if not (old_mean > 0 and new_mean > 0 and math.isfinite(old_mean) and math.isfinite(new_mean)):
        return MetricChange(
            **base, change_pct=None, ci_low_pct=None, ci_high_pct=None, verdict=UNDEFINED, method=THRESHOLD_ONLY,
            reason=f"no ratio: the mean is {old_mean:.4g} in the baseline and {new_mean:.4g} now; both must be above 0",
        )
    change = 100.0 * (new_mean / old_mean - 1.0)
    explained = bounds is not None and _overlap(*bounds)
    if min(len(old), len(new)) < 2:
        return _threshold_only(base, change, explained)
    spread = _log_ratio_spread(old, new, old_mean, new_mean, confidence, session)
    verdict, why = classify(Evidence(change, spread.low_pct, spread.high_pct, confidence, explained), threshold_pct)
    if explained and bounds is not None:
        why += f" ({_bounds_text(bounds, metric)})"
    noise = "" if session is None else (f", session noise {100 * session.cv:.1f} % from {session.runs} runs"
                                        + (" and the suite's other cases" if session.shared else ""))
    text = (f"{pct_text(change)} {interval_text(spread.low_pct, spread.high_pct)} (bounds one-sided at "
            f"{confidence_text(confidence)}, n={len(old)}/{len(new)}{noise}): {why}")
    hint = "" if verdict != INCONCLUSIVE else inconclusive_hint(
        len(old), len(new), session.runs if session is not None else 1, spread.session_dominates)
    return MetricChange(**base, change_pct=change, ci_low_pct=spread.low_pct, ci_high_pct=spread.high_pct,
                        verdict=verdict, reason=text, hint=hint)


def _overlap(old: tuple[float, float], new: tuple[float, float]) -> bool:
    return old[0] <= new[1] and new[0] <= old[1]


def _bounds_text(bounds: tuple[tuple[float, float], tuple[float, float]], metric: str) -> str:
    (old_low, old_high), (new_low, new_high) = bounds
    unit = METRIC_UNITS[metric]
    return f"the meter's bounds: baseline {old_low:.4g}-{old_high:.4g} {unit}, now {new_low:.4g}-{new_high:.4g} {unit}"


def metric_bounds(entry: CaseEntry, metric: str) -> tuple[float, float] | None:
    """The meter's bound on a case's mean ETS or EDP (None for T, which is timed exactly, or where
    the document predates bounds)."""
    reps = entry.repetitions
    lows = [r.ets_low_j for r in reps]
    highs = [r.ets_high_j for r in reps]
    if metric == "time" or None in lows or None in highs:
        return None
    scales = [1.0 if metric == "ets" else r.time_s for r in reps]
    return (statistics.fmean(low * k for low, k in zip(lows, scales) if low is not None),
            statistics.fmean(high * k for high, k in zip(highs, scales) if high is not None))


def both_bounds(old: CaseEntry, new: CaseEntry, metric: str) -> tuple[tuple[float, float], tuple[float, float]] | None:
    old_bounds, new_bounds = metric_bounds(old, metric), metric_bounds(new, metric)
    return (old_bounds, new_bounds) if old_bounds is not None and new_bounds is not None else None


def _threshold_only(base: dict[str, Any], change: float, explained: bool = False) -> MetricChange:
    n_text = f"n={base['old_n']}/{base['new_n']}"
    note = (f"threshold only: {n_text} repetitions, a statistical test needs at least 2 on each side "
            f"(measure more: --energy-repeat or energy_meter.measure(repeat=))")
    verdict, why = classify(Evidence(change, None, None, base["confidence"], explained), base["threshold_pct"])
    return MetricChange(**base, change_pct=change, ci_low_pct=None, ci_high_pct=None, verdict=verdict,
                        method=THRESHOLD_ONLY, reason=f"{pct_text(change)}: {why}; {note}")


@dataclass(frozen=True)
class _Spread:
    """The bounds of new/old - 1 in per cent, and which noise makes them wide."""

    low_pct: float
    high_pct: float
    session_dominates: bool      # the noise between sessions outweighs the repetitions' own


def _log_ratio_spread(old: Sequence[float], new: Sequence[float], old_mean: float, new_mean: float,
                      confidence: float, session: SessionNoise | None = None) -> _Spread:
    """One-sided lower and upper bounds of new/old - 1 in per cent (Welch, delta method, session noise)."""
    cv2_old = sample_variance([v / old_mean for v in old])      # scaled first: no overflow
    cv2_new = sample_variance([v / new_mean for v in new])
    terms = _within_terms(cv2_old, len(old), cv2_new, len(new), session)
    var_sessions = 0.0
    if session is not None:
        # A shared estimate of the session variance may be below 0 (see shared_noise._moderate): it
        # takes off at most half of what the repetitions give, so that a chance low estimate cannot
        # make the interval arbitrarily narrow.
        var_sessions = max(2.0 * session.variance, -0.5 * sum(variance for variance, _ in terms))
        terms.append((var_sessions, session.df))
    total = sum(variance for variance, _ in terms)
    log_ratio = math.log(new_mean / old_mean)
    dominates = var_sessions > total - var_sessions
    if total == 0.0:   # no spread at all (a deterministic simulation): the bounds are the point
        point = 100.0 * math.expm1(log_ratio)
        return _Spread(point, point, dominates)
    df = total ** 2 / sum(variance ** 2 / dof for variance, dof in terms)      # Welch-Satterthwaite
    half = student_t_ppf(confidence, df) * math.sqrt(total)
    return _Spread(100.0 * math.expm1(log_ratio - half), 100.0 * math.expm1(log_ratio + half), dominates)


def _within_terms(cv2_old: float, old_n: int, cv2_new: float, new_n: int,
                  session: SessionNoise | None) -> list[tuple[float, float]]:
    """The repetitions' part of the log ratio's variance, as (variance, degrees of freedom) terms.

    Without saved sessions each run's mean carries its own sample's spread (Welch). With them, the
    spread pooled over the saved runs stands for the baseline's (the baseline is one of them), and
    the new run's repetitions join the pool unless they are noisier than it beyond chance (the F
    test at ``NOISIER_P``): then the new side keeps its own spread, so a noisier change cannot hide.
    """
    if session is None or session.within_df == 0 or session.within_cv2 <= 0.0:
        return [(cv2_old / old_n, old_n - 1), (cv2_new / new_n, new_n - 1)]
    if f_sf(cv2_new / session.within_cv2, new_n - 1, session.within_df) < NOISIER_P:
        return [(session.within_cv2 / old_n, session.within_df), (cv2_new / new_n, new_n - 1)]
    dof = session.within_df + new_n - 1
    pooled = (session.within_df * session.within_cv2 + (new_n - 1) * cv2_new) / dof
    return [(pooled * (1.0 / old_n + 1.0 / new_n), dof)]
