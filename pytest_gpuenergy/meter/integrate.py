"""From a GPU's recorded reads to the energy of a region, with a bound that holds the truth.

Pure functions: the recorder hands over its reads (``Read``) and a lattice snapshot; nothing here
touches a thread, a clock or NVML.

**Publications.** A read took its value at some moment between its start and its end, and that
value was published at the latest tick before that moment. A change of value between two reads
brackets its publication; a read that only one lattice tick can explain dates it to that tick,
within the lattice's error. Either way a publication is known to lie in [earliest, latest].

**The counter** is exact at its publications (to 1 mJ): the cumulative energy E(t) is known at
those moments, E never decreases, and it rises no faster than the GPU can draw (``ceiling_w``).
That bounds E at any moment from the publications around it, and so the energy of any region
(:func:`counter_energy`); the estimate inside that bound uses the region's own power to extend the
publications inside it to its edges, or, for a region with fewer than two publications inside,
takes the power of the neighbouring intervals for the time around it.

**Power readings** (sampling, where there is no counter) each average a window before their
publication (25 ms every 100 ms for the instant-power field: 75 % of the time is never seen).
Between windows the power is not known; :func:`sampled_energy` takes it to lie within the range of
the readings around it, which holds for work that changes slower than its readings do and is stated
as that assumption; a region that no whole window lies in gets 0 to the GPU's ceiling.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from .lattice import NOMINAL_PERIOD_S, Lattice

COUNTER_RESOLUTION_MJ = 1.0     # NVML's counter counts whole millijoules
POWER_RESOLUTION_MW = 1.0       # and power in whole milliwatts
CEILING_FACTOR = 1.1            # a GPU may briefly draw above its highest limit: allow 10 %
_STALEST_PERIODS = 1.5          # a value a read sees was published at most this many periods before it
# Set (to anything) where an estimate outside its own bound must stop the run: the project's tests set it.
STRICT_ENV = "GPUENERGY_STRICT_ESTIMATES"


class Read(NamedTuple):
    """One read of a GPU's counter (mJ) or power (mW): when it began and ended, on the meter's clock."""

    started: float
    ended: float
    value: int


@dataclass(frozen=True)
class Publication:
    """A value the GPU published, somewhere in [``earliest``, ``latest``]."""

    earliest: float
    latest: float
    value: int
    tick: int | None = None

    @property
    def when(self) -> float:
        return (self.earliest + self.latest) / 2


@dataclass
class RegionEnergy:
    """The energy of one region on one GPU: the estimate, its bound, and how it came about."""

    ets_j: float
    low_j: float
    high_j: float
    peak_power_w: float
    coarse: bool = False                     # fewer than two publications (or clean windows) inside
    notes: list[str] = field(default_factory=list)


class NotYet(Exception):
    """The publications needed after the region have not arrived yet."""


class EstimateOutsideBound(AssertionError):
    """An estimate fell outside the bound computed from the same publications: a defect of the
    meter, never of the user's code (raised only where ``GPUENERGY_STRICT_ESTIMATES`` is set)."""


def within_bound(estimate_j: float, low_j: float, high_j: float, notes: list[str], what: str) -> float:
    """``estimate_j``, which must lie in [``low_j``, ``high_j``].

    The bound holds every history the publications allow and the estimate is one of those
    histories, so an estimate outside it means the arithmetic is wrong. Under the project's tests
    that stops the run; in a user's run the figure is moved to the bound's nearest edge, where it is
    still a figure the truth can have, and a note says so (and asks for a report), so it is never
    hidden.
    """
    slack_j = 1e-9 * max(1.0, abs(high_j))
    if low_j - slack_j <= estimate_j <= high_j + slack_j:
        return min(max(estimate_j, low_j), high_j)
    message = (f"{what}: the estimate {estimate_j:.6g} J lies outside its own bound [{low_j:.6g}, {high_j:.6g}] J")
    if os.environ.get(STRICT_ENV):
        raise EstimateOutsideBound(message)
    notes.append(f"{message}; it was moved to the bound's nearest edge. This is a defect of pytest-gpuenergy: "
                 f"please report it")
    return min(max(estimate_j, low_j), high_j)


def publications(reads: Sequence[Read], lattice: Lattice | None, *, repeats: bool,
                 period_s: float = NOMINAL_PERIOD_S) -> list[Publication]:
    """The distinct publications ``reads`` saw, oldest first, each dated as tightly as they allow.

    ``repeats``: whether two publications in a row may carry the same value (power may; the energy
    counter always moves). A read the lattice dates to a tick that contradicts the reads around it
    (a changed value at the same tick, or an earlier one) is not dated by it: the bracket stands.
    Publications come every period (the lattice's, else ``period_s``: the device's nominal one), so
    the value a read saw is at most a period old (half a period more is allowed for the driver's jitter).
    """
    found = _publications(reads, lattice, repeats, period_s)
    if lattice is not None and found is None:
        # A read dated by the lattice contradicts what the reads themselves show: the lattice is
        # off here by more than its error bound, so no date it gives can be trusted.
        found = _publications(reads, None, repeats, period_s)
    assert found is not None
    return found


def _publications(reads: Sequence[Read], lattice: Lattice | None, repeats: bool,
                  period_s: float) -> list[Publication] | None:
    """See :func:`publications`; None when the lattice contradicts the reads."""
    found: list[Publication] = []
    previous: Read | None = None
    oldest_s = _STALEST_PERIODS * (lattice.period_s if lattice is not None else period_s)
    for read in reads:
        dated = lattice.tick_of_read(read.started, read.ended) if lattice is not None else None
        last = found[-1] if found else None
        if last is not None and _same_publication(last, read, dated, lattice, repeats, oldest_s):
            if dated is not None and last.tick is None:
                narrowed = _dated(last, lattice, dated)
                if narrowed is None:
                    return None
                found[-1] = narrowed
            previous = read
            continue
        if last is not None and last.tick is not None and dated is not None and dated[0] <= last.tick:
            dated = None
        earliest = max(last.earliest if last is not None else -math.inf, read.started - oldest_s)
        if previous is not None and read.value != previous.value:
            earliest = max(earliest, previous.started)
        candidate = Publication(earliest, read.ended, read.value)
        if dated is None and lattice is not None:
            dated = lattice.only_tick_within(candidate.earliest, candidate.latest)
            if dated is not None and last is not None and last.tick is not None and dated[0] <= last.tick:
                dated = None
        if dated is not None:
            narrowed = _dated(candidate, lattice, dated)
            if narrowed is None:
                return None
            candidate = narrowed
        found.append(candidate)
        previous = read
    return found


def _same_publication(
    last: Publication, read: Read, dated: tuple[int, float] | None, lattice: Lattice | None, repeats: bool,
    oldest_s: float,
) -> bool:
    if read.value != last.value:
        return False
    if not repeats:
        return True
    if dated is None:
        return read.started - last.latest <= oldest_s   # later than that, a new publication repeated the value
    if last.tick is not None:
        return dated[0] == last.tick
    assert lattice is not None
    return lattice.tick_at(dated[0]) - dated[1] <= last.latest   # not surely a later tick


def _dated(publication: Publication, lattice: Lattice | None, dated: tuple[int, float]) -> Publication | None:
    """``publication`` narrowed to its lattice tick, if the tick lies within what the reads allow."""
    assert lattice is not None
    index, error = dated
    tick = lattice.tick_at(index)
    earliest, latest = max(publication.earliest, tick - error), min(publication.latest, tick + error)
    if earliest > latest:
        return None
    return Publication(earliest, latest, publication.value, index)


# -- the energy counter ------------------------------------------------------------------------------

def counter_energy(
    pubs: Sequence[Publication], t0: float, t1: float, *, ceiling_w: float, limit_w: float,
    final: bool = False, period_s: float = NOMINAL_PERIOD_S,
) -> RegionEnergy:
    """ETS of [t0, t1] from dated counter publications (mJ), with a bound that holds the truth.

    Raises :class:`NotYet` until a publication surely after ``t1`` has arrived (two for a region
    with fewer than two publications inside, whose estimate needs the power after it), unless
    ``final``: then it makes do with what there is and says so. ``ceiling_w`` bounds what the GPU
    can draw at any moment (the bound rests on it); ``limit_w``, the limit it ran under, bounds the
    estimate's mean power. ``period_s``: the counter's nominal period (NVML 100 ms, AMD SMI 1 ms).
    """
    duration = t1 - t0
    # The estimate rests on publications dated to within a fifth of NVML's period (20 ms: a counter
    # that publishes every millisecond dates every read to about that); the bound on all of them.
    dated = [p for p in pubs if p.latest - p.earliest <= 0.2 * NOMINAL_PERIOD_S]
    # One dated across an edge counts on the side of its middle: the bound allows for the rest.
    before = [p for p in dated if p.when <= t0]
    inside = [p for p in dated if t0 < p.when < t1]
    after = [p for p in dated if p.when >= t1]
    if not final and (not after or len(after) < 2 and (len(inside) < 2 or _tail_needs_power_after(inside[-1], after, t1))):
        raise NotYet
    powers = _interval_powers_w(dated, period_s)
    ceiling_w = max(ceiling_w, max(powers, default=0.0) * 1.05)
    low_j, high_j = counter_bound(pubs, t0, t1, ceiling_w)
    notes: list[str] = []
    if len(inside) >= 2:
        estimate_j, moved_j = _inside_estimate(inside, before, after, t0, t1, ceiling_w)
        peak_w = max(_interval_powers_w(inside, period_s), default=_power_between(inside[0], inside[-1]))
    elif before and after:
        estimate_j, peak_w, moved_j = _around_estimate(before, inside, after, t0, t1, ceiling_w)
    else:
        estimate_j, peak_w, moved_j = (low_j + high_j) / 2, math.nan, 0.0
        notes.append("the energy counter published too little around the region: its ETS is the middle of its bound")
    if moved_j > 0.01 * max(estimate_j, 1e-3):
        notes.append(f"the power changed faster than the energy counter published around the region's edges: "
                     f"{moved_j:.3g} J of what the power next to them suggests is more than their time can hold, "
                     f"so the estimate is near its bound's edge")
    # The estimate rests on the closely dated publications only, and must lie in what they allow.
    used_low_j, used_high_j = (low_j, high_j) if len(dated) in (0, len(pubs)) else counter_bound(dated, t0, t1, ceiling_w)
    estimate_j = within_bound(estimate_j, used_low_j, used_high_j, notes, "energy counter")
    if not low_j <= estimate_j <= high_j:
        # The loosely dated ones still narrow the bound: the estimate is the nearest figure within it.
        nearest_j = min(max(estimate_j, low_j), high_j)
        if abs(nearest_j - estimate_j) > 0.01 * max(estimate_j, 1e-3):
            notes.append(f"publications of the energy counter dated too loosely to estimate from moved the estimate by "
                         f"{nearest_j - estimate_j:+.3g} J into the bound they allow")
        estimate_j = nearest_j
    # Within the bound, two priors: a GPU doing work draws at least the least it drew over any
    # interval seen around the region, and on average no more than the limit it ran under.
    floor_w = min(powers, default=0.0)
    estimate_j = max(estimate_j, min(floor_w * duration, high_j))
    estimate_j = min(estimate_j, max(max(limit_w, floor_w) * duration, low_j))
    mean_w = estimate_j / duration if duration > 0 else math.nan
    if len(inside) < 2:
        notes.append(f"region of {duration * 1000:.0f} ms spans fewer than 2 publications of the energy counter: "
                     f"its ETS is interpolated through those around it and coarse (the truth lies in its bound)")
    # The peak is at least the region's mean, and never more than the GPU can draw.
    peak_w = max((w for w in (peak_w, mean_w) if math.isfinite(w)), default=math.nan)
    return RegionEnergy(estimate_j, low_j, high_j, min(peak_w, ceiling_w) if math.isfinite(peak_w) else peak_w,
                        coarse=len(inside) < 2, notes=notes)


def counter_bound(pubs: Sequence[Publication], t0: float, t1: float, ceiling_w: float) -> tuple[float, float]:
    """The least and most energy (J) any history consistent with the publications puts in [t0, t1].

    E(t) never falls, rises at most ``ceiling_w``, and equals each published value (to the
    counter's resolution) at a moment within that publication's dating interval. So at any t,
    E(t) >= value - ceiling * (latest - t) for every publication and E(t) <= value + ceiling *
    (t - earliest); the region's energy lies between the differences of those envelopes, and
    between 0 and ceiling * duration.
    """
    rate = ceiling_w  # W = J/s; the values are mJ
    def lowest(moment: float) -> float:
        return max((p.value - COUNTER_RESOLUTION_MJ) / 1000.0 - rate * max(0.0, p.latest - moment) for p in pubs)

    def highest(moment: float) -> float:
        return min((p.value + COUNTER_RESOLUTION_MJ) / 1000.0 + rate * max(0.0, moment - p.earliest) for p in pubs)

    duration = t1 - t0
    low = max(0.0, lowest(t1) - highest(t0))
    high = min(rate * duration, highest(t1) - lowest(t0))
    return low, max(high, low)


def _inside_estimate(
    inside: Sequence[Publication], before: Sequence[Publication], after: Sequence[Publication], t0: float, t1: float,
    ceiling_w: float,
) -> tuple[float, float]:
    """Exact between the first and last publication inside; each edge from whichever side of its
    partly seen interval is shorter. Returns the estimate and how far its edges had to be moved.

    The interval that holds ``t0`` has a known energy, split between the time before the region
    and the region's head. The head is extrapolated with the region's own power when it is the
    shorter piece; otherwise the piece before the region is, with the power of the interval before
    it, and the head gets the rest. Either way the less time is guessed at. The same for the tail.
    """
    first, last = inside[0], inside[-1]
    power_w = _power_between(first, last)
    head_j, head_moved_j = _edge_energy(before[-2:][::-1], first, first.when - t0, power_w, ceiling_w)
    tail_j, tail_moved_j = _edge_energy(after[:2], last, t1 - last.when, power_w, ceiling_w)
    return (last.value - first.value) / 1000.0 + head_j + tail_j, head_moved_j + tail_moved_j


def _edge_energy(
    outward: Sequence[Publication], edge: Publication, part_s: float, region_power_w: float, ceiling_w: float,
) -> tuple[float, float]:
    """The energy of a region's partly seen edge, ``part_s`` long, between ``edge`` (the outermost
    publication inside) and the region's end; ``outward`` are the publications beyond that end,
    nearest first. Returns it and how far it was moved to stay within what its time can hold."""
    if not outward:
        guess_j = region_power_w * part_s
        return _split(math.inf, guess_j, part_s, math.inf, ceiling_w), 0.0
    neighbour = outward[0]
    interval_j = abs(edge.value - neighbour.value) / 1000.0
    rest_s = abs(edge.when - neighbour.when) - part_s
    if len(outward) >= 2 and rest_s < part_s:
        guess_j = interval_j - _power_between(*sorted((neighbour, outward[1]), key=lambda p: p.when)) * rest_s
    else:
        guess_j = region_power_w * part_s
    part_j = _split(interval_j, guess_j, part_s, rest_s, ceiling_w)
    return part_j, abs(part_j - guess_j)


def _split(interval_j: float, guess_j: float, part_s: float, rest_s: float, ceiling_w: float) -> float:
    """The part of an interval's energy ``interval_j`` drawn in ``part_s`` of it, from a guess.

    A guess rests on the power seen next to the interval; where the power changes faster than the
    publications, it can break what the interval allows: neither piece below nothing, the part no
    more than its time holds at the ceiling, the rest (``rest_s``) no more than its time holds. The
    nearest split that keeps all of them is the estimate.
    """
    least = max(0.0, interval_j - ceiling_w * rest_s) if math.isfinite(interval_j) else 0.0
    most = min(interval_j, ceiling_w * max(part_s, 0.0))
    return min(max(guess_j, least), max(most, least))


def _tail_needs_power_after(last_inside: Publication, after: Sequence[Publication], t1: float) -> bool:
    """Whether the tail is the longer piece of its interval (its estimate then needs the power of
    the interval after the region, so one more publication)."""
    return after[0].when - t1 < t1 - last_inside.when


def _around_estimate(
    before: Sequence[Publication], inside: Sequence[Publication], after: Sequence[Publication], t0: float, t1: float,
    ceiling_w: float,
) -> tuple[float, float, float]:
    """A region with fewer than two publications inside: the energy between the publications just
    before and just after it, less what the time around the region drew at the power of the
    intervals next to it (the meter keeps the GPU idle after a block until they are published).
    A publication inside splits that span in two, and each half is held to what its time can hold
    (see :func:`_split`). Returns the estimate, the span's power and how far the estimate was moved."""
    start, end = before[-1], after[0]
    span_power_w = (end.value - start.value) / 1000.0 / max(end.when - start.when, 1e-9)
    power_before_w = _power_between(before[-2], start) if len(before) >= 2 else span_power_w
    power_after_w = _power_between(end, after[1]) if len(after) >= 2 else span_power_w
    around_before_s, around_after_s = max(t0 - start.when, 0.0), max(end.when - t1, 0.0)
    if not inside:
        span_j = (end.value - start.value) / 1000.0
        guess_j = span_j - power_before_w * around_before_s - power_after_w * around_after_s
        estimate_j = _split(span_j, guess_j, t1 - t0, around_before_s + around_after_s, ceiling_w)
        return estimate_j, span_power_w, abs(estimate_j - guess_j)
    middle = inside[0]
    head_interval_j, tail_interval_j = (middle.value - start.value) / 1000.0, (end.value - middle.value) / 1000.0
    head_guess_j = head_interval_j - power_before_w * around_before_s
    tail_guess_j = tail_interval_j - power_after_w * around_after_s
    head_j = _split(head_interval_j, head_guess_j, middle.when - t0, around_before_s, ceiling_w)
    tail_j = _split(tail_interval_j, tail_guess_j, t1 - middle.when, around_after_s, ceiling_w)
    return head_j + tail_j, span_power_w, abs(head_j - head_guess_j) + abs(tail_j - tail_guess_j)


def _power_between(a: Publication, b: Publication) -> float:
    return (b.value - a.value) / 1000.0 / max(b.when - a.when, 1e-9)


def _interval_powers_w(pubs: Sequence[Publication], period_s: float) -> list[float]:
    """The mean power between consecutive publications dated to within a tenth of their interval."""
    powers = []
    for a, b in zip(pubs, pubs[1:]):
        span = b.when - a.when
        if span > 0.5 * period_s and max(a.latest - a.earliest, b.latest - b.earliest) < 0.2 * span:
            powers.append(_power_between(a, b))
    return powers


def went_backwards(reads: Sequence[Read]) -> tuple[Read, Read] | None:
    """The first two consecutive reads whose counter value fell, or None."""
    return next(((a, b) for a, b in zip(reads, reads[1:]) if b.value < a.value), None)


def check_monotonic(reads: Sequence[Read], label: str) -> None:
    from ..errors import MeasurementError

    fell = went_backwards(reads)
    if fell is not None:
        raise MeasurementError(
            f"the energy counter of {label} went backwards ({fell[0].value} mJ, then {fell[1].value} mJ) during "
            f"the region: the driver was reloaded or the counter reset, so no figure is given; run again"
        )


# -- power readings --------------------------------------------------------------------------------

def sampled_energy(
    pubs: Sequence[Publication], t0: float, t1: float, *, window_s: float, ceiling_w: float,
    period_s: float = NOMINAL_PERIOD_S, final: bool = False,
) -> RegionEnergy:
    """ETS of [t0, t1] from dated power publications (mW), each the average of the ``window_s``
    before it.

    The estimate: each window whose whole span lies in the region ("clean") stands for the power
    around it, halfway to the next; the region's head and tail take the nearest clean window's
    power. With no clean window the windows overlapping the region, else the ones around it, are
    used, and the figure is coarse. The bound: see :func:`_sampled_bound` (it rests on the
    assumption that the power between readings stays within the range the readings of the region
    show, which holds for work that does not change faster than its readings do).
    """
    if not pubs:
        raise NotYet
    if not any(p.latest - window_s >= t1 for p in pubs) and not final:
        raise NotYet
    windows = [(p.when - window_s, p.when, p.value / 1000.0) for p in pubs]
    # A reading above the ceiling shows the GPU drew that much: the bound allows it (as the counter's does).
    ceiling_w = max(ceiling_w, max(w[2] for w in windows) * 1.05)
    clean = _apart([w for w in windows if w[0] >= t0 and w[1] <= t1])
    overlapping = [w for w in windows if w[1] > t0 and w[0] < t1]
    notes: list[str] = []
    if clean:
        used, coarse = clean, False
    elif overlapping:
        used, coarse = overlapping, True
        notes.append(f"every power reading of the region averages a window ({window_s * 1000:.0f} ms) reaching "
                     f"outside it: its ETS is coarse")
    else:
        used = _nearest_windows(windows, t0, t1)
        coarse = True
        notes.append("no power reading was published inside the region: its ETS is interpolated and coarse")
    estimate_j = _piecewise_energy(used, t0, t1)
    if clean:
        low_j, high_j = _sampled_bound(windows, clean, t0, t1, ceiling_w, period_s)
    else:   # no reading saw the region alone: nothing bounds its power but the GPU itself
        low_j, high_j = 0.0, ceiling_w * (t1 - t0)
    notes.extend(_gap_notes([p.when for p in pubs], t0, t1, period_s))
    estimate_j = within_bound(estimate_j, low_j, high_j, notes, "power readings")
    return RegionEnergy(estimate_j, low_j, high_j,
                        max(w[2] for w in used), coarse=coarse, notes=notes)


def _apart(windows: Sequence[tuple[float, float, float]]) -> list[tuple[float, float, float]]:
    """``windows`` (oldest first) less each that overlaps one kept before it: readings that average
    longer than they are published apart (1 s every 100 ms) overlap, and what a window saw is known
    only for the window as a whole, so each moment is counted once."""
    kept: list[tuple[float, float, float]] = []
    for window in windows:
        if not kept or window[0] >= kept[-1][1]:
            kept.append(window)
    return kept


def _nearest_windows(windows: Sequence[tuple[float, float, float]], t0: float, t1: float) -> list[tuple[float, float, float]]:
    before = [w for w in windows if w[1] <= t0][-1:]
    after = [w for w in windows if w[0] >= t1][:1]
    return before + after or list(windows[-1:])


def _piecewise_energy(used: Sequence[tuple[float, float, float]], t0: float, t1: float) -> float:
    centres = [(start + end) / 2 for start, end, _ in used]
    edges = [t0] + [min(max((a + b) / 2, t0), t1) for a, b in zip(centres, centres[1:])] + [t1]
    return sum(watts * (b - a) for (_, _, watts), a, b in zip(used, edges, edges[1:]))


def _sampled_bound(
    windows: Sequence[tuple[float, float, float]], clean: Sequence[tuple[float, float, float]],
    t0: float, t1: float, ceiling_w: float, period_s: float,
) -> tuple[float, float]:
    """What the clean windows cover is known; every other moment of the region is taken to draw
    between the least and the most power the readings around it saw, widened by half their spread.

    "Around": for a gap inside the region, the readings of the region within two periods of it; for
    its head and tail, those within a period of it, outside the region too (the work may start or
    stop anywhere in an unseen head or tail). A gap no reading comes near was not seen at all: 0
    to the GPU's ceiling.
    """
    covered = sorted((max(s, t0), min(e, t1), w) for s, e, w in clean)
    low = high = sum(w * (e - s) for s, e, w in covered)
    cursor = t0
    gaps: list[tuple[float, float]] = []
    for start, end, _ in covered:
        if start > cursor:
            gaps.append((cursor, start))
        cursor = max(cursor, end)
    if cursor < t1:
        gaps.append((cursor, t1))
    for start, end in gaps:
        if start <= t0 or end >= t1:
            reach_from, reach_to = start - period_s, end + period_s
        else:
            reach_from, reach_to = max(t0, start - 2 * period_s), min(t1, end + 2 * period_s)
        least, most = _power_range([w for s, e, w in windows if e > reach_from and s < reach_to], ceiling_w)
        low += least * (end - start)
        high += most * (end - start)
    return low, high


def _power_range(seen: Sequence[float], ceiling_w: float) -> tuple[float, float]:
    if not seen:
        return 0.0, ceiling_w
    spread = max(seen) - min(seen)
    resolution_w = POWER_RESOLUTION_MW / 1000.0
    least = max(0.0, min(seen) - spread / 2 - resolution_w)
    return least, max(least, min(ceiling_w, max(seen) + spread / 2 + resolution_w))


def _gap_notes(times: Sequence[float], t0: float, t1: float, period_s: float) -> list[str]:
    """A note when power went unread for over two publication periods inside the region: a held-up
    sampler interpolates over the gap, which is fine for steady work and wrong for changing work."""
    points = [t0] + [t for t in times if t0 < t < t1] + [t1]
    gap_s = max(b - a for a, b in zip(points, points[1:]))
    if gap_s <= 2 * period_s:
        return []
    return [f"power was not read for {gap_s * 1000:.0f} ms of the region (the sampler was held up): "
            f"the energy over that gap is interpolated"]
