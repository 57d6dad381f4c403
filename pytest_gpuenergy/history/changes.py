"""Change points and trends in one series: where a test's energy stepped, and where it drifted.

The data: one point per commit, the log of the session's mean (energy noise is multiplicative, so
on the log scale it is additive and a step is a ratio, as in the gate's ``decide.py``). Sessions
differ by more than their repetitions show (clocks, temperature, the host; ``decide.py``'s "Noise
between sessions"), so the noise a step must stand out from is estimated from the series itself:
the spread of the points around their levels, never less than the repetitions' own.

The rule
--------
Binary segmentation (Scott and Knott 1974; Killick and Eckley's review in J. Stat. Softw. 58(3),
2014): in a stretch of the history, the split that best separates two levels (the most reduction in
the sum of squares, which is the largest two-sample t) is a **change point** when all of these hold:

1. it stands out from the noise: the pooled two-sample t exceeds Student's t quantile at the
   confidence (0.99) made stricter for looking at every place in the stretch (Bonferroni over the
   candidate places), with ``n - 2`` degrees of freedom: few points make it harder, not easier;
2. it is large enough to matter: at least ``min_change_pct`` (5 %, asv's default regression
   threshold, ``regressions_thresholds`` in asv's configuration reference);
3. sessions agree on it: at least ``min_runs`` (2) points on each side, and the ``min_runs`` nearest
   to it on each side are each nearer their own level than the other. One noisy session is never a
   change point: it cannot form a side of its own, and its neighbour disagrees with it;
4. it is a step, not a slope: two levels fit the stretch better than a straight line does
   (a slow drift is reported as a trend instead, below);
5. the meter's own bounds cannot explain it (the gate's rule): the bound of the level before and that
   of the level after do not overlap.

Where the whole stretch shows no such split, the intervals of seeded binary segmentation are
searched the same way, Bonferroni over all their places (a regression and its later fix blur each
other's sides in the whole stretch). The stretch is then split there and each side searched again. Between change points, a stretch of
at least ``min_trend_points`` commits whose least-squares slope (on the commit's place, not its date:
code changes at commits) is significant at the confidence and adds up to ``min_change_pct`` over the
stretch is a **trend**. A newest point off its level by a significant ``min_change_pct`` is
**pending**: one session cannot be told from noise until the next run agrees.

Why not a change-point library: ruptures (Truong et al. 2020) finds breakpoints for a given penalty
or number of them, which here would have to be derived from the noise level anyway, and gives no
size with an interval nor a test; the rule above gives both, in the gate's terms and with the gate's
Student t (``gate/student_t.py``), and adds no dependency. Its false alarms on histories with no
change are measured by ``benchmarks/history_false_alarms.py``.

Known limit: evenly spaced steps of one size (a staircase) fit a line about as well as a step, and
are then reported as a trend over their commits.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..gate.settings import DEFAULT_CONFIDENCE
from ..gate.student_t import student_t_ppf

DEFAULT_MIN_CHANGE_PCT = 5.0
DEFAULT_MIN_RUNS = 2
DEFAULT_MIN_TREND_POINTS = 6


@dataclass(frozen=True)
class Settings:
    """How sure and how large a change must be (``gpuenergy history`` options)."""

    confidence: float = DEFAULT_CONFIDENCE
    min_change_pct: float = DEFAULT_MIN_CHANGE_PCT
    min_runs: int = DEFAULT_MIN_RUNS
    min_trend_points: int = DEFAULT_MIN_TREND_POINTS


@dataclass(frozen=True)
class Level:
    """A stretch of the series at one level: points ``start`` to ``end - 1``."""

    start: int
    end: int
    log_mean: float
    noise_sd: float            # the session-to-session spread of a point, log scale (about the relative spread)

    @property
    def mean(self) -> float:
        return math.exp(self.log_mean)

    @property
    def size(self) -> int:
        return self.end - self.start


@dataclass(frozen=True)
class ChangePoint:
    """A step between two levels; ``index`` is the first point at the new level."""

    index: int
    change_pct: float          # after / before - 1, in per cent
    low_pct: float             # its interval at the confidence (two-sided)
    high_pct: float
    before: Level
    after: Level
    t: float                   # the two-sample t of the step
    t_needed: float            # what it had to exceed (Bonferroni over ``candidates`` places)
    candidates: int
    noise_pct: float           # the sessions' spread the step stood out from, in per cent


@dataclass(frozen=True)
class Trend:
    """A significant slope over points ``start`` to ``end - 1``."""

    start: int
    end: int
    total_pct: float           # the fitted line's last point against its first, in per cent
    per_point_pct: float       # per commit
    low_pct: float             # the interval of ``total_pct``
    high_pct: float
    t: float
    t_needed: float
    intercept: float           # the fitted line, log scale, at ``start``
    slope: float               # log scale per point


@dataclass(frozen=True)
class Pending:
    """The newest point off its level: a step, or one noisy session; the next run tells."""

    index: int
    change_pct: float
    level: Level


@dataclass(frozen=True)
class Findings:
    levels: tuple[Level, ...]
    changes: tuple[ChangePoint, ...]
    trends: tuple[Trend, ...]
    pending: Pending | None

    @property
    def found(self) -> bool:
        return bool(self.changes or self.trends)


class _Sums:
    """Prefix sums: any stretch's mean and sum of squares in O(1), and every split of a stretch at once
    (numpy: a history of 500 commits has about 260 seeded intervals to search per stretch)."""

    def __init__(self, values: Sequence[float], floor: Sequence[float]) -> None:
        centred = np.asarray(values, dtype=float)
        self.offset = float(centred.mean()) if len(centred) else 0.0
        centred = centred - self.offset           # sums of squares of small numbers: no cancellation
        self.s1 = np.concatenate(([0.0], np.cumsum(centred)))
        self.s2 = np.concatenate(([0.0], np.cumsum(centred * centred)))
        self.f1 = np.concatenate(([0.0], np.cumsum(np.asarray(floor, dtype=float))))

    def mean(self, a: int, b: int) -> float:
        return float(self.s1[b] - self.s1[a]) / (b - a) + self.offset

    def ss(self, a: int, b: int) -> float:
        total = float(self.s1[b] - self.s1[a])
        return max(0.0, float(self.s2[b] - self.s2[a]) - total * total / (b - a))

    def floor(self, a: int, b: int) -> float:
        """The mean within-run variance of the points a..b-1: the least noise a point can have."""
        return float(self.f1[b] - self.f1[a]) / (b - a) if b > a else 0.0

    def splits(self, a: int, b: int, m: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """For every split k of a..b-1 with ``m`` points on each side: (k, the step of the means, its
        pooled two-sample t, floored by the repetitions' noise)."""
        n = b - a
        ks = np.arange(a + m, b - m + 1)
        n1, n2 = (ks - a).astype(float), (b - ks).astype(float)
        left, right = self.s1[ks] - self.s1[a], self.s1[b] - self.s1[ks]
        ss = (np.maximum(0.0, self.s2[ks] - self.s2[a] - left * left / n1)
              + np.maximum(0.0, self.s2[b] - self.s2[ks] - right * right / n2))
        delta = right / n2 - left / n1
        se = np.sqrt(np.maximum(ss / (n - 2), self.floor(a, b)) * (1.0 / n1 + 1.0 / n2))
        with np.errstate(divide="ignore", invalid="ignore"):
            t = np.where(se > 0, np.abs(delta) / se, np.where(delta != 0, np.inf, 0.0))
        return ks, delta, t


def find_changes(log_means: Sequence[float], within_var: Sequence[float] = (), settings: Settings = Settings(),
                 bounds: Sequence[tuple[float, float] | None] = ()) -> Findings:
    """Change points, trends and a pending newest point of one series (see the module docstring).

    ``within_var``: per point, the variance of its log mean from its repetitions alone (a floor on
    the noise); ``bounds``: per point, the meter's bound on its mean (low, high), or None.
    """
    y = [float(v) for v in log_means]
    floor = [float(v) for v in within_var] if within_var else [0.0] * len(y)
    if len(floor) != len(y) or (bounds and len(bounds) != len(y)):
        raise ValueError("find_changes: log_means, within_var and bounds need one entry per point")
    sums = _Sums(y, floor)
    splits: dict[int, _Split] = {}
    stack = [(0, len(y))]
    while stack:
        a, b = stack.pop()
        split = _best_split(y, sums, a, b, settings, bounds)
        if split is not None:
            splits[split.index] = split
            stack += [(a, split.index), (split.index, b)]
    edges = [0, *sorted(splits), len(y)]
    levels = tuple(_level(sums, a, b) for a, b in zip(edges, edges[1:]) if b > a)
    changes = tuple(_change(sums, before, after, settings, splits[after.start])
                    for before, after in zip(levels, levels[1:]))
    trends = tuple(t for level in levels if (t := _trend(y, sums, level, settings, len(levels))) is not None)
    return Findings(levels, changes, trends, _pending(y, sums, levels, settings))


def _t_needed(confidence: float, places: int, df: float) -> float:
    """Student's t two-sided at ``confidence``, Bonferroni over ``places`` looks."""
    alpha = (1.0 - confidence) / max(1, places)
    return student_t_ppf(1.0 - alpha / 2.0, df)


def _best_split(y: Sequence[float], sums: _Sums, a: int, b: int, settings: Settings,
                bounds: Sequence[tuple[float, float] | None]) -> _Split | None:
    """The change point in ``a..b-1``: the whole stretch's best split, else the best of seeded intervals'."""
    whole = _interval_split(y, sums, a, b, settings, bounds, _places(a, b, settings.min_runs))
    if whole is not None:
        return whole
    intervals = _seeded_intervals(a, b, 2 * settings.min_runs)
    looks = sum(_places(lo, hi, settings.min_runs) for lo, hi in intervals)
    found = [hit for lo, hi in intervals if (hit := _interval_split(y, sums, lo, hi, settings, bounds, looks))]
    return max(found, key=lambda hit: hit.t) if found else None


@dataclass(frozen=True)
class _Split:
    index: int
    t: float
    t_needed: float
    looks: int


def _places(a: int, b: int, m: int) -> int:
    return max(0, b - a - 2 * m + 1)


def _seeded_intervals(a: int, b: int, shortest: int) -> list[tuple[int, int]]:
    """Seeded binary segmentation's intervals (Kovacs, Li, Buehlmann and Munk, Biometrika 110(1), 2023):
    at each length from half the stretch down to ``shortest``, halving, intervals overlapping by half.
    A step between two others (a regression, then its fix) is alone in one of them, where the levels
    beyond do not blur its two sides."""
    found = []
    length = (b - a) // 2
    while length >= shortest:
        shift = max(1, length // 2)
        start = a
        while start + length <= b:
            found.append((start, start + length))
            start += shift
        if found[-1][1] < b:
            found.append((b - length, b))
        length //= 2
    return found


def _interval_split(y: Sequence[float], sums: _Sums, a: int, b: int, settings: Settings,
                    bounds: Sequence[tuple[float, float] | None], looks: int) -> _Split | None:
    """The best split of ``a..b-1`` that passes rules 1 to 5, with its t; ``looks``: the Bonferroni count."""
    n, m = b - a, settings.min_runs
    if b - a - 2 * m + 1 <= 0 or n < 3:
        return None
    needed = _t_needed(settings.confidence, looks, n - 2)
    ks, delta, t = sums.splits(a, b, m)
    strong = np.flatnonzero((t >= needed) & (np.abs(delta) >= math.log1p(settings.min_change_pct / 100.0)))
    for i in strong[np.argsort(-t[strong], kind="stable")]:      # the largest t that passes rules 3 and 5
        k = int(ks[i])
        if _sessions_agree(y, a, k, b, m, sums) and not _bounds_explain(bounds, a, k, b):
            step_rss = sums.ss(a, k) + sums.ss(k, b)
            return _Split(k, float(t[i]), needed, looks) if step_rss < _line_rss(y, a, b) else None
    return None


def _sessions_agree(y: Sequence[float], a: int, k: int, b: int, m: int, sums: _Sums) -> bool:
    """The ``m`` points nearest the split on each side are each nearer their own level than the other."""
    before, after = sums.mean(a, k), sums.mean(k, b)
    middle = 0.5 * (before + after)
    up = after > before
    near_before = y[k - m:k]
    near_after = y[k:k + m]
    return all((v < middle) == up for v in near_before) and all((v > middle) == up for v in near_after)


def _bounds_explain(bounds: Sequence[tuple[float, float] | None], a: int, k: int, b: int) -> bool:
    """The meter's bounds of the two levels' means overlap: the step may be the meter's, not the work's."""
    if not bounds:
        return False
    sides = []
    for lo, hi in ((a, k), (k, b)):
        known = [x for x in bounds[lo:hi] if x is not None]
        if len(known) != hi - lo:
            return False
        sides.append((math.fsum(x[0] for x in known) / len(known), math.fsum(x[1] for x in known) / len(known)))
    (low1, high1), (low2, high2) = sides
    return low1 <= high2 and low2 <= high1


def _line_fit(y: Sequence[float], a: int, b: int) -> tuple[float, float, float, float]:
    """(intercept at ``a``, slope per point, residual sum of squares, Sxx) of least squares over a..b-1."""
    n = b - a
    xs = range(n)
    x_mean = (n - 1) / 2.0
    y_mean = math.fsum(y[a:b]) / n
    sxx = n * (n * n - 1) / 12.0
    sxy = math.fsum((x - x_mean) * (y[a + x] - y_mean) for x in xs)
    slope = sxy / sxx if sxx > 0 else 0.0
    intercept = y_mean - slope * x_mean
    rss = math.fsum((y[a + x] - intercept - slope * x) ** 2 for x in xs)
    return intercept, slope, rss, sxx


def _line_rss(y: Sequence[float], a: int, b: int) -> float:
    return _line_fit(y, a, b)[2] if b - a > 2 else 0.0


def _level(sums: _Sums, a: int, b: int) -> Level:
    n = b - a
    var = sums.ss(a, b) / (n - 1) if n > 1 else 0.0
    return Level(a, b, sums.mean(a, b), math.sqrt(max(var, sums.floor(a, b))))


def _change(sums: _Sums, before: Level, after: Level, settings: Settings,
            found: _Split) -> ChangePoint:
    """The step between two adjacent levels, with its interval; ``found``: the evidence it was found by."""
    a, k, b = before.start, after.start, after.end
    n = b - a
    df = max(1, n - 2)
    var = max((sums.ss(a, k) + sums.ss(k, b)) / df, sums.floor(a, b))
    se = math.sqrt(var * (1.0 / before.size + 1.0 / after.size))
    delta = after.log_mean - before.log_mean
    half = student_t_ppf(0.5 + settings.confidence / 2.0, df) * se
    return ChangePoint(
        index=k, change_pct=100.0 * math.expm1(delta), low_pct=100.0 * math.expm1(delta - half),
        high_pct=100.0 * math.expm1(delta + half), before=before, after=after,
        t=found.t, t_needed=found.t_needed, candidates=found.looks, noise_pct=100.0 * math.sqrt(var),
    )


def _trend(y: Sequence[float], sums: _Sums, level: Level, settings: Settings, stretches: int) -> Trend | None:
    a, b = level.start, level.end
    n = b - a
    if n < max(settings.min_trend_points, 3):
        return None
    intercept, slope, rss, sxx = _line_fit(y, a, b)
    var = max(rss / (n - 2), sums.floor(a, b))
    se = math.sqrt(var / sxx)
    t = abs(slope) / se if se > 0 else (math.inf if slope else 0.0)
    needed = _t_needed(settings.confidence, stretches, n - 2)
    total = slope * (n - 1)
    if t < needed or abs(total) < math.log1p(settings.min_change_pct / 100.0):
        return None
    half = student_t_ppf(0.5 + settings.confidence / 2.0, n - 2) * se * (n - 1)
    return Trend(start=a, end=b, total_pct=100.0 * math.expm1(total), per_point_pct=100.0 * math.expm1(slope),
                 low_pct=100.0 * math.expm1(total - half), high_pct=100.0 * math.expm1(total + half), t=t,
                 t_needed=needed, intercept=intercept, slope=slope)


def _pending(y: Sequence[float], sums: _Sums, levels: Sequence[Level],
             settings: Settings) -> Pending | None:
    """The newest point against the level before it, when that level has at least ``min_runs`` points."""
    last = levels[-1] if levels else None
    if last is None or last.size < settings.min_runs + 1:
        return None
    a, k = last.start, last.end - 1
    n = k - a
    mean = sums.mean(a, k)
    var = max(sums.ss(a, k) / (n - 1) if n > 1 else 0.0, sums.floor(a, k + 1))
    delta = y[k] - mean
    se = math.sqrt(var * (1.0 + 1.0 / n))
    t = abs(delta) / se if se > 0 else (math.inf if delta else 0.0)
    if abs(delta) < math.log1p(settings.min_change_pct / 100.0) or n < 2 or t < _t_needed(settings.confidence, 1, n - 1):
        return None
    return Pending(k, 100.0 * math.expm1(delta), Level(a, k, mean, math.sqrt(var)))
