"""Designing a phase measurement so that the phases can be told apart, and long enough for a bound.

The fit in ``attribution.py`` learns a phase's power only from how its share of the counter's
windows varies, which it does only as the windows' edges fall at different points of the call.
:func:`alignment_gap_s` gives the idle gap after each call that spreads the publications across
the call; :func:`region_time_needed_s` gives the region length at which every phase's bound is
expected within a wanted share of its energy, by laying out a long synthetic run of the planned
calls and computing the fit's covariance for it (:func:`expected_rel_bounds`: the bounds for a
given length). ``docs/explanation/phases.md`` derives the scaling; the benchmark
``benchmarks/phase_attribution.py`` compares the prediction with the fit on a synthetic truth.

Pure maths (numpy), seeded: the same figures on any host.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from ..errors import MeasurementError
from ..gate.student_t import student_t_ppf
from .attribution import DEFAULT_CONFIDENCE, MIN_DOF, PhaseTimeline

_DESIGN_JITTER = 0.01           # the spread of a call's phase lengths in the synthetic run
_LINED_UP_SHARE = 0.01          # lined_up_note: the least gap, as a share of a call, worth naming


def alignment_gap_s(call_s: float, period_s: float, *, offsets: int = 8) -> float:
    """The idle gap (s) to leave after each call so that the counter's publications fall at spread
    points of the call; 0 where they already do.

    The fit learns a phase's power from how much of it each window holds, which varies only as the
    windows' edges fall at different points of the call. Back-to-back calls of ``call_s`` put the
    k-th publication at k * period_s mod call_s: a 20 ms call under a 100 ms counter puts every one
    at the same point (every window holds five whole calls) and no phase can be told from another.
    The gap returned is the shortest (in steps of call_s / 400) after which the publications of
    any ``offsets`` periods' worth of calls leave no empty arc longer than 2 / ``offsets`` of the
    call. A gap is idle time the meter knows exactly: it goes in the timeline as a phase of its own.
    """
    if call_s <= 0 or period_s <= 0 or offsets < 2:
        raise MeasurementError(f"alignment_gap_s needs call_s > 0, period_s > 0 and offsets >= 2 "
                               f"(got {call_s}, {period_s}, {offsets})")
    count = offsets * max(1, math.ceil(call_s / period_s))
    for step in range(401):
        gap = call_s * step / 400
        if _largest_empty_arc(call_s + gap, period_s, count) <= 2 / offsets:
            return gap
    return call_s


def lined_up_note(call_s: float, period_s: float) -> str | None:
    """Why a region's phases may not be told apart, in a user's terms, where its calls repeat in step
    with the counter's publications (None where they do not, or where the gap that would spread them
    is under 1 % of a call, which the calls' own jitter gives).

    Seen on a real H200: a 49.7 ms training step under its 100 ms counter (two calls a period) had no
    phase told apart, a 58.2 ms step of the same model had its forward and backward told apart. On
    the simulator the advice works: a 50 ms step with the 3.2 ms gap marked has every phase told
    apart (``tests/test_phases.py``).
    """
    if call_s <= 0 or period_s <= 0:
        return None
    gap_s = alignment_gap_s(call_s, period_s)
    if gap_s < _LINED_UP_SHARE * call_s:     # a call's own jitter (about 1 %) spreads them
        return None
    ratio = period_s / call_s if call_s < period_s else call_s / period_s
    if f"{ratio:.3g}" == "1":
        per = "one call a period"
    else:
        per = f"{ratio:.3g} calls a period" if call_s < period_s else f"a call every {ratio:.3g} periods"
    return (f"the calls ({call_s * 1e3:.3g} ms each) repeat nearly in step with the energy counter's "
            f"publications (every {period_s * 1e3:.3g} ms: {per}), so every counter window holds nearly the "
            f"same mix of phases, which is likely why some are not told apart; an idle gap of "
            f"{gap_s * 1e3:.2g} ms after each call, marked as a phase of its own (energy_meter.phase(\"gap\") "
            f"around a synchronise and a sleep), or calls of another length, would spread the publications "
            f"across the call")


def _largest_empty_arc(cycle_s: float, period_s: float, count: int) -> float:
    """The largest gap, as a share of the cycle, between the points k * period_s mod cycle_s (k < count)."""
    points = np.sort(np.mod(np.arange(count) * period_s, cycle_s) / cycle_s)
    points = points[np.concatenate(([True], np.diff(points) > 1e-9))]
    return float(np.diff(np.concatenate((points, [points[0] + 1.0]))).max())


@dataclass(frozen=True)
class _Design:
    """A long synthetic run of the planned calls under the counter: what its windows tell the fit."""

    names: tuple[str, ...]
    asked: np.ndarray            # the caller's phases (not the meter's own gap)
    powers_w: np.ndarray
    windows: int
    per_cluster: int             # windows the fit's robust covariance takes together (as attribute_phases does)
    variance_w2: np.ndarray      # each power's variance from ``windows`` windows (it falls as 1/windows)
    dating_w: np.ndarray         # the change a common dating error makes over ``windows`` windows (falls as 1/sqrt)
    fixed_w: np.ndarray          # the counter's resolution and the dating noise's attenuation (do not fall)

    def half_widths_w(self, windows: int, confidence: float) -> np.ndarray:
        """Each power's expected bound half-width from a region of ``windows`` windows (inf: too few)."""
        k = len(self.names)
        clusters = windows // self.per_cluster
        if clusters < k + MIN_DOF:
            return np.full(k, math.inf)
        t = student_t_ppf(0.5 + confidence / 2, float(min(windows - k, clusters - 1)))
        scale = self.windows / windows
        return t * np.sqrt(self.variance_w2 * scale) + self.dating_w * math.sqrt(scale) + self.fixed_w


def _design(phase_lengths_s: Mapping[str, float], phase_powers_w: Mapping[str, float], period_s: float,
            power_noise: float, dating_error_s: float, resolution_j: float, idle_power_w: float | None) -> _Design:
    names = list(phase_lengths_s)
    if not names or set(names) != set(phase_powers_w) or any(v <= 0 for v in phase_lengths_s.values()):
        raise MeasurementError("give every phase of a call a length (> 0 s) and a power, under the same names")
    lengths = [float(phase_lengths_s[n]) for n in names]
    powers = [float(phase_powers_w[n]) for n in names]
    call_s = sum(lengths)
    gap_s = alignment_gap_s(call_s, period_s)
    if gap_s > 0:
        names.append("gap")
        lengths.append(gap_s)
        powers.append(min(powers) if idle_power_w is None else idle_power_w)
    cycle_s = call_s + gap_s
    calls = max(64, math.ceil(400 * period_s / cycle_s))
    # Calls never repeat to the microsecond: each occurrence lasts its length with a 1 % spread
    # (seeded: the same design on every host), so the offsets wander as they do in a real run.
    durations = np.array(lengths)[None, :] * (1 + _DESIGN_JITTER * np.random.default_rng(0).standard_normal(
        (calls, len(lengths))))
    ends = np.cumsum(durations.ravel())
    occurrence_start, occurrence_end = ends - durations.ravel(), ends
    label = [f"p{j}" for j in range(len(names))]            # design names never clash with OTHER
    timeline = [(label[j % len(names)], float(s), float(e))
                for j, (s, e) in enumerate(zip(occurrence_start, occurrence_end))]
    end_s = float(ends[-1])
    line = PhaseTimeline(timeline, 0.0, end_s)
    boundaries = np.arange(period_s / 2, end_s, period_s)
    a = line.coverage(boundaries)
    power = np.array(powers)
    inverse = np.linalg.inv(a.T @ a)
    # Each occurrence of a phase draws its own mean power (relative spread power_noise): the windows
    # it overlaps share that deviation. Its effect on the fit, summed over the occurrences.
    occurrence_power = np.tile(power, calls)
    first = np.searchsorted(boundaries, occurrence_start, side="right") - 1
    last = np.searchsorted(boundaries, occurrence_end, side="left") - 1
    effect = np.zeros((len(occurrence_start), len(names)))
    own_j2 = np.zeros(len(a))            # each window's own variance from the occurrences in it (per unit noise^2)
    for m in range(int((last - first).max()) + 1):
        window = first + m
        valid = (window >= 0) & (window < len(a)) & (window <= last)
        w = np.clip(window, 0, len(a) - 1)
        overlap = np.clip(np.minimum(occurrence_end, boundaries[np.minimum(w + 1, len(boundaries) - 1)])
                          - np.maximum(occurrence_start, boundaries[w]), 0.0, None)
        drawn = np.where(valid, overlap * occurrence_power, 0.0)
        effect += drawn[:, None] * a[w]
        np.add.at(own_j2, w, drawn ** 2)
    spread = (effect @ inverse) * power_noise
    # Each window's energy is also off by its quantisation (two floors: r^2/6) and by each edge's own
    # dating error (uniform within +-dating_error_s, at the power of the phase there).
    at_edge_w2 = float((a @ power ** 2).sum() / a.sum())
    window_variance = resolution_j ** 2 / 6 + 2 * dating_error_s ** 2 / 3 * at_edge_w2
    # As attribute_phases does: the larger of the robust variance and the textbook one.
    robust = (spread ** 2).sum(axis=0) + window_variance * np.diag(inverse)
    textbook = (power_noise ** 2 * float(own_j2.mean()) + window_variance) * np.diag(inverse)
    variance = np.maximum(robust, textbook)
    pseudo = inverse @ a.T
    moved = line.coverage(boundaries + dating_error_s) @ power
    per_cluster = max(1, math.ceil(2 * max(lengths) / period_s))
    # As attribute_phases bounds it: each window's two edges, dated within +-dating_error_s.
    under = line.phase_at(boundaries)
    edge_s2 = np.bincount(under[under >= 0], minlength=len(names)) * 2 * dating_error_s ** 2 / 3
    attenuation_w = np.abs(inverse @ (edge_s2 * power))
    return _Design(tuple(names), np.array([n in phase_lengths_s for n in names]), power, len(a), per_cluster,
                   variance, np.abs(pseudo @ moved - power), np.abs(pseudo).sum(axis=1) * resolution_j + attenuation_w)


def expected_rel_bounds(
    phase_lengths_s: Mapping[str, float], phase_powers_w: Mapping[str, float], period_s: float, region_s: float, *,
    power_noise: float = 0.02, dating_error_s: float = 1e-4, resolution_j: float = 0.001,
    confidence: float = DEFAULT_CONFIDENCE, idle_power_w: float | None = None,
) -> dict[str, float]:
    """Each phase's expected bound half-width, as a share of its energy, for a region of ``region_s``
    of back-to-back calls (with :func:`alignment_gap_s`'s gap, phase "gap", where one is needed)."""
    design = _design(phase_lengths_s, phase_powers_w, period_s, power_noise, dating_error_s, resolution_j,
                     idle_power_w)
    half = design.half_widths_w(math.floor(region_s / period_s) - 1, confidence)
    return {n: float(h / p) if p > 0 else math.inf for n, h, p in zip(design.names, half, design.powers_w)}


def region_time_needed_s(
    phase_lengths_s: Mapping[str, float], phase_powers_w: Mapping[str, float], period_s: float,
    wanted_rel_bound: float, *, power_noise: float = 0.02, dating_error_s: float = 1e-4, resolution_j: float = 0.001,
    confidence: float = DEFAULT_CONFIDENCE, idle_power_w: float | None = None, longest_s: float = 3600.0,
) -> float:
    """How long a region of back-to-back calls must be for every phase's bound to be within
    ``wanted_rel_bound`` of its energy (inf: not within ``longest_s``).

    ``phase_lengths_s``/``phase_powers_w``: one call's phases in order (include the call's
    unmarked time, e.g. "other"), their lengths and expected mean powers; ``power_noise``: the
    relative spread of one occurrence's mean power; ``dating_error_s``: the lattice's dating error.
    The statistical and dating parts of the bound fall as 1/sqrt(windows); the resolution's does not.
    """
    if not 0 < wanted_rel_bound < 1 or period_s <= 0:
        raise MeasurementError(f"region_time_needed_s needs 0 < wanted_rel_bound < 1 and period_s > 0 "
                               f"(got {wanted_rel_bound}, {period_s})")
    design = _design(phase_lengths_s, phase_powers_w, period_s, power_noise, dating_error_s, resolution_j,
                     idle_power_w)

    def good(windows: int) -> bool:
        half = design.half_widths_w(windows, confidence)[design.asked]
        return bool(np.all(half <= wanted_rel_bound * design.powers_w[design.asked]))
    low, high = 1, max(2, math.floor(longest_s / period_s) - 1)
    if not good(high):
        return math.inf
    while high - low > 1:        # the half-widths only shrink with more windows: bisect
        middle = (low + high) // 2
        low, high = (low, middle) if good(middle) else (middle, high)
    return (high + 1) * period_s
