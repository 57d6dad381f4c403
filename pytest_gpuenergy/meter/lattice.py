"""When a GPU publishes a reading: the tick lattice ``phase + k * period``, learned from brackets.

NVML publishes the energy counter (and the instant-power reading) about every 100 ms. A reader
only sees that a value changed between two of its reads: a *bracket* around the publication.
A polling thread in Python can be held up for milliseconds (the GIL, the scheduler), so single
brackets are coarse; but every bracket constrains the same lattice. The period comes from a
weighted least-squares fit over recent brackets and the phase from their intersection, which is
far tighter than any one of them.

The brackets also bound how wrong the lattice can be. Bracket i holds its tick k_i, and the true
period lies in the interval all pairs of brackets allow, so tick k lies within bracket i shifted by
(k - k_i) periods of that interval, for every i at once: the intersection of those shifted brackets
is where the true tick can be, and :meth:`Lattice.error_at` is how far the lattice's tick may lie
from either end of it. Near the brackets that is a fraction of one bracket's width; it grows with
the distance from them.

Pure maths: no threads, no clocks. :class:`TickLearner` is fed brackets by the recorder thread and
hands out frozen :class:`Lattice` snapshots that the integration reads without locks.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field

NOMINAL_PERIOD_S = 0.1           # NVML's documented counter update period, until observed
_WINDOW_S = 30.0                 # brackets older than this are forgotten (clocks drift microseconds a second)
_MAX_BRACKETS = 16               # ...and only this many are kept: a fit costs the GIL, ~3 us per bracket
_WIDEST_SHARE = 0.25             # a bracket wider than this share of a period says little and may hold two ticks
_CONFIDENT_BRACKETS = 4          # brackets a lattice needs before the recorder reads only around its ticks
_MAX_MISSES = 2                  # contradicting reads in a row before the lattice is learned again
# The true period lies within these multiples of the nominal one (NVML: "about every 100 ms"; 100.3 ms
# measured on an H100). It bounds how many ticks a gap between two brackets can hold.
_PERIOD_PRIOR = (0.8, 1.25)


@dataclass(frozen=True)
class Bracket:
    """A reading changed between two reads: the old value was still there when the first began
    (``after``), the new one was there when the second ended (``before``)."""

    after: float
    before: float

    @property
    def middle(self) -> float:
        return (self.after + self.before) / 2

    @property
    def width(self) -> float:
        return self.before - self.after


@dataclass(frozen=True)
class Lattice:
    """A fitted lattice and what bounds its error (immutable: safe to read from any thread)."""

    period_s: float
    phase_s: float                                  # the lattice tick nearest the newest bracket
    period_range_s: tuple[float, float]             # the periods every pair of brackets allows
    numbered: tuple[tuple[float, float, int], ...]  # (after, before, tick number) of each bracket; empty: inconsistent
    brackets: int
    # error_at's answer per tick number: the integration asks it for every read, many per tick
    # (filling it from two threads at once writes the same values).
    _errors: dict[int, float] = field(default_factory=dict, init=False, repr=False, compare=False, hash=False)
    # tick_of_read's and only_tick_within's answers: consecutive figures (a test of a few ms each,
    # worked out together once their publications arrive) date the same reads with the same lattice.
    _read_ticks: dict[tuple[float, float], tuple[int, float] | None] = field(
        default_factory=dict, init=False, repr=False, compare=False, hash=False)
    _bracket_ticks: dict[tuple[float, float], tuple[int, float] | None] = field(
        default_factory=dict, init=False, repr=False, compare=False, hash=False)

    def tick_at(self, index: int) -> float:
        return self.phase_s + index * self.period_s

    def index_before(self, moment: float) -> int:
        """The number of the latest lattice tick at or before ``moment``."""
        return math.floor((moment - self.phase_s) / self.period_s)

    def next_tick_after(self, moment: float) -> float:
        return self.tick_at(self.index_before(moment) + 1)

    def latest_next_tick(self, moment: float) -> float:
        """The latest the true tick after ``moment`` can come: the lattice's next tick plus its own
        error (a region started then begins just after a publication)."""
        k = self.index_before(moment) + 1
        return self.tick_at(k) + self.error_of_tick(k)

    def error_at(self, moment: float) -> float:
        """How far the lattice's tick nearest ``moment`` may be from the true one (inf: unknown)."""
        return self.error_of_tick(round((moment - self.phase_s) / self.period_s))

    def error_of_tick(self, k: int) -> float:
        """How far the lattice's tick ``k`` may be from the true one (inf: unknown)."""
        if len(self.numbered) < 2:
            return math.inf
        error = self._errors.get(k)
        if error is None:
            error = self._errors[k] = self._error_of_tick(k)
        return error

    def _error_of_tick(self, k: int) -> float:
        period_low, period_high = self.period_range_s
        low, high = -math.inf, math.inf
        for after, before, k_i in self.numbered:
            steps = k - k_i
            shortest, longest = (period_low, period_high) if steps >= 0 else (period_high, period_low)
            low = max(low, after + steps * shortest)
            high = min(high, before + steps * longest)
        predicted = self.tick_at(k)
        return max(predicted - low, high - predicted, 0.0)

    def _date_error(self, k: int) -> float:
        """Tick ``k``'s error as a date is claimed with it: never under a tenth of a millisecond."""
        return max(self.error_of_tick(k), 1e-4)

    def tick_of_read(self, started: float, ended: float) -> tuple[int, float] | None:
        """Which tick published the value a read saw, and that tick's error, where only one can have.

        The read took its value at some moment in [``started``, ``ended``] (it can be held up
        between taking the value and returning), and the value was published at the latest tick
        before that moment. When tick k surely came before the read started and tick k + 1 surely
        after it ended, each by its own error (which grows with its distance from the brackets, so
        the two differ), that tick k is the date.
        """
        key = (started, ended)
        if key not in self._read_ticks:
            self._read_ticks[key] = self._tick_of_read(started, ended)
        return self._read_ticks[key]

    def _tick_of_read(self, started: float, ended: float) -> tuple[int, float] | None:
        k = self.index_before(started)
        if self.error_of_tick(k) > 0.25 * self.period_s:
            return None
        error = self._date_error(k)
        if started - error < self.tick_at(k) or ended + self._date_error(k + 1) >= self.tick_at(k + 1):
            return None
        return k, error

    def only_tick_within(self, earliest: float, latest: float) -> tuple[int, float] | None:
        """The tick, and its error, of a publication bracketed by [``earliest``, ``latest``], where
        the lattice leaves only one tick there: the tick before it surely came before ``earliest``
        and the tick after it surely after ``latest``, each by its own error (true ticks come in
        order, so no other tick can be in the bracket). A bracket wider than a period never is."""
        key = (earliest, latest)
        if key not in self._bracket_ticks:
            self._bracket_ticks[key] = self._only_tick_within(earliest, latest)
        return self._bracket_ticks[key]

    def _only_tick_within(self, earliest: float, latest: float) -> tuple[int, float] | None:
        if not math.isfinite(earliest):
            return None
        for k in range(self.index_before(earliest), self.index_before(latest) + 2):
            if (self.tick_at(k - 1) + self._date_error(k - 1) < earliest
                    and self.tick_at(k + 1) - self._date_error(k + 1) > latest):
                return (k, self._date_error(k)) if self.error_of_tick(k) <= 0.25 * self.period_s else None
        return None


class TickLearner:
    """Collects brackets of one GPU's publications and fits the lattice they share."""

    def __init__(self, nominal_period_s: float = NOMINAL_PERIOD_S) -> None:
        self.nominal_period_s = nominal_period_s
        self.brackets: list[Bracket] = []
        self.lattice: Lattice | None = None
        self.misses = 0
        # The periods every consistent lattice so far allowed: the true one lies in each, so their
        # intersection holds it too, after the brackets that showed it are forgotten or are too
        # far from the newest ones to number them (a long region read sparsely leaves seconds between).
        self.period_range_s: tuple[float, float] | None = None

    @property
    def period_s(self) -> float:
        return self.lattice.period_s if self.lattice is not None else self.nominal_period_s

    def add(self, bracket: Bracket) -> None:
        if bracket.width > _WIDEST_SHARE * self.period_s:
            return
        newest = bracket.before
        self.brackets = [b for b in [*self.brackets, bracket][-_MAX_BRACKETS:] if b.before >= newest - _WINDOW_S]
        fitted = fit(self.brackets, self.nominal_period_s, self.period_range_s)
        if fitted is not None:
            self.lattice = fitted
            if fitted.numbered:
                self.period_range_s = fitted.period_range_s

    def confident(self, moment: float, within_s: float) -> bool:
        """Whether the lattice is known to ``within_s`` at ``moment``: reading only around its ticks is safe."""
        return (
            self.lattice is not None
            and len(self.brackets) >= _CONFIDENT_BRACKETS
            and self.misses < _MAX_MISSES
            and self.lattice.error_at(moment) <= within_s
        )

    def copy(self) -> TickLearner:
        """An independent learner that knows what this one knows (brackets and lattices are frozen)."""
        twin = TickLearner(self.nominal_period_s)
        twin.brackets, twin.lattice, twin.misses = list(self.brackets), self.lattice, self.misses
        twin.period_range_s = self.period_range_s
        return twin

    def hit(self) -> None:
        self.misses = 0

    def miss(self) -> None:
        """A read contradicted the lattice; after a second one in a row, learn it again from scratch."""
        self.misses += 1
        if self.misses >= _MAX_MISSES:
            self.brackets.clear()
            self.lattice = None
            self.period_range_s = None
            self.misses = 0


def fit(brackets: Sequence[Bracket], nominal_period_s: float,
        known_period_s: tuple[float, float] | None = None) -> Lattice | None:
    """The lattice the newest ``brackets`` allow (period and phase), or None with fewer than two ticks.

    Ticks are numbered from the newest bracket back, each older bracket only where the newer ones
    (and the prior on the period) leave it a single tick number (``_numbered_from_newest``): across
    a long gap between sparse brackets, 20 or 21 periods can both fit, and a lattice built on the
    wrong count would date every tick confidently and wrongly. Then the period is a weighted
    least-squares fit (narrow brackets count more), and every lattice consistent with all brackets
    is possible: for each pair, (k_j - k_i) * period lies in [a_j - b_i, b_j - a_i]; the period is
    the middle of that range and the phase the middle of the interval the brackets leave at that
    period. Brackets that no strictly periodic lattice fits (jitter) give the least-squares lattice
    with no error bound (``numbered`` empty).

    ``known_period_s``, the periods earlier brackets allowed (``TickLearner.period_range_s``), takes
    the prior's place: it numbers brackets across gaps the prior cannot (a long region read sparsely
    leaves seconds between its brackets, where the prior admits 48 to 76 ticks in 6.1 s and the fit
    fell back to the newest two brackets: a period 2 % off, and a figure with it), and it bounds the
    period. Brackets it contradicts (no two numbered) are fitted again with the prior alone.
    """
    if len(brackets) < 2:
        return None
    prior = known_period_s or (_PERIOD_PRIOR[0] * nominal_period_s, _PERIOD_PRIOR[1] * nominal_period_s)
    numbered_brackets, ks = _numbered_from_newest(brackets, prior)
    if len(set(ks)) < 2:
        return fit(brackets, nominal_period_s) if known_period_s is not None else None
    middles = [b.middle for b in numbered_brackets]
    period = _weighted_slope(ks, middles, [1.0 / max(b.width, 1e-4) ** 2 for b in numbered_brackets])
    period_low, period_high = known_period_s or (0.0, math.inf)
    for i, (bi, ki) in enumerate(zip(numbered_brackets, ks)):
        for bj, kj in zip(numbered_brackets[i + 1:], ks[i + 1:]):
            if kj > ki:
                period_low = max(period_low, (bj.after - bi.before) / (kj - ki))
                period_high = min(period_high, (bj.before - bi.after) / (kj - ki))
    if period_low <= period_high:
        period = (period_low + period_high) / 2
    low = max(b.after - k * period for b, k in zip(numbered_brackets, ks))
    high = min(b.before - k * period for b, k in zip(numbered_brackets, ks))
    if period_low <= period_high and low <= high:
        numbered = tuple((b.after, b.before, k) for b, k in zip(numbered_brackets, ks))
        return Lattice(period, (low + high) / 2, (period_low, period_high), numbered, len(numbered_brackets))
    phase = statistics.fmean(m - k * period for m, k in zip(middles, ks))
    return Lattice(period, phase, (0.0, math.inf), (), len(numbered_brackets))


def _numbered_from_newest(brackets: Sequence[Bracket], prior_s: tuple[float, float]) -> tuple[list[Bracket], list[int]]:
    """The newest brackets, oldest first, with their tick numbers (the newest: 0), as far back as each
    older bracket has only one number that every newer one allows with a period in the range they
    and the prior leave; the first bracket with two possible numbers (or none) ends them."""
    ordered = sorted(brackets, key=lambda b: b.middle)
    period_low, period_high = prior_s
    tied, ks = [ordered[-1]], [0]
    for older in reversed(ordered[:-1]):
        lowest, highest = -math.inf, math.inf
        for newer, k in zip(tied, ks):       # k - k_older ticks lie between them, each a period apart
            fewest = max(0.0, (newer.after - older.before) / period_high)
            most = (newer.before - older.after) / period_low
            lowest, highest = max(lowest, k - math.floor(most)), min(highest, k - math.ceil(fewest))
        if lowest != highest:
            break
        for newer, k in zip(tied, ks):
            if k > lowest:
                period_low = max(period_low, (newer.after - older.before) / (k - lowest))
                period_high = min(period_high, (newer.before - older.after) / (k - lowest))
        if period_low > period_high:
            break
        tied.append(older)
        ks.append(int(lowest))
    return tied[::-1], ks[::-1]


def _weighted_slope(xs: Sequence[int], ys: Sequence[float], weights: Sequence[float]) -> float:
    total = sum(weights)
    mean_x = sum(w * x for w, x in zip(weights, xs)) / total
    mean_y = sum(w * y for w, y in zip(weights, ys)) / total
    sxx = sum(w * (x - mean_x) ** 2 for w, x in zip(weights, xs))
    return sum(w * (x - mean_x) * (y - mean_y) for w, x, y in zip(weights, xs, ys)) / sxx
