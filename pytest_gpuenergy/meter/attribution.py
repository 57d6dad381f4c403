"""Where a region's energy went: each phase's mean power, fitted from the counter's windows, with a bound.

A GPU's energy counter publishes every ~100 ms (NVML) or ~1 ms (AMD SMI), so a 10 ms phase is never
seen on its own under NVML. What is seen: the energy of each *window* between two publications,
and, from the phase marks, how much of each window every phase covered. If each phase draws a
constant mean power, every window is a linear equation::

    energy of window i  =  sum over phases p of  power_p * (time phase p covers in window i)

and many windows give an over-determined system in the few phase powers. :func:`attribute_phases`
solves it by least squares with each power kept within [``min_power_w``, ``max_power_w``]. The
phases can only be told apart where their shares of the windows vary; where they always appear in
the same proportions (or there are too few windows) no fit can split them, and the result says so
with a bound that spans every split the data allow instead of a confident wrong answer.

**The bound** of each power adds three parts: the fit's statistical error (its covariance, taken
as the larger of the textbook one and one robust to windows that share a phase's occurrence,
times a Student t quantile at ``confidence``), the counter's resolution (each window's energy
is known to ``resolution_j``, pushed through the fit as a worst case), and the lattice's dating
error (the fit done again with every publication moved by its dating error, earlier and later:
the larger change). A phase's energy is its power times its time. The phases' energies are then
moved to add up exactly to the region's ETS (the meter's figure, which includes the region's
edges that no whole window covers), each by a share of the difference in proportion to its
variance, so that the least known phases absorb it; and each bound is intersected with what the
region's own bound leaves for that phase once the others take their bounds' extremes (and
widened, where needed, to hold the moved figure).

:func:`alignment_gap_s` and :func:`region_time_needed_s` design the measurement so that the fit
can succeed: how long an idle gap after each call spreads the publications across the call, and
how long a region gives a wanted relative bound. ``docs/explanation/phases.md`` derives both.

Pure maths (numpy): no threads, no clocks, no GPU.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from ..errors import MeasurementError
from ..gate.student_t import student_t_ppf
from .integrate import Publication

OTHER = "other"                 # the time between marked phases
DEFAULT_CONFIDENCE = 0.99
_RANK_TOLERANCE = 1e-8          # a direction of the (column-normalised) coverage matrix this flat is no information
_LOOSE_SHARE = 0.5              # a power bound wider than this share of [min, max] power: the data barely tell it apart
_MIN_DOF = 2                    # residual degrees of freedom a fit needs before its covariance means anything
_DESIGN_JITTER = 0.01           # the spread of a call's phase lengths in region_time_needed_s's synthetic run


@dataclass(frozen=True)
class PhaseEnergy:
    """One phase's figures, per call as the region's are (``ets_j`` per call, ``time_s`` per call)."""

    name: str
    ets_j: float
    ets_low_j: float
    ets_high_j: float
    time_s: float
    power_w: float
    power_low_w: float
    power_high_w: float
    time_share: float           # of the region's time
    energy_share: float         # of the region's ETS
    told_apart: bool            # False: the windows cannot separate it from others; its bound says how little is known
    why_not: str = ""           # the reason, where not told apart


@dataclass(frozen=True)
class Attribution:
    """The phases of one region (in the order they first appear, ``other`` last), and how they were fitted."""

    phases: tuple[PhaseEnergy, ...]
    windows: int                # counter windows wholly inside the region that the fit used
    confidence: float
    notes: tuple[str, ...] = ()

    @property
    def told_apart(self) -> bool:
        return all(p.told_apart for p in self.phases)

    def __getitem__(self, name: str) -> PhaseEnergy:
        for phase in self.phases:
            if phase.name == name:
                return phase
        raise KeyError(name)


# -- the phase timeline ----------------------------------------------------------------------------

class _Timeline:
    """Cumulative time of each phase since ``t0``, evaluated at any moments (vectorised)."""

    def __init__(self, timeline: Sequence[tuple[str, float, float]], t0: float, t1: float) -> None:
        names: list[str] = []
        spans: dict[str, list[tuple[float, float]]] = {}
        previous: tuple[str, float, float] | None = None
        for name, start, end in sorted(timeline, key=lambda x: (x[1], x[2])):
            if not (math.isfinite(start) and math.isfinite(end)) or end < start:
                raise MeasurementError(f"phase {name!r} ends ({end}) before it starts ({start}): "
                                       f"give each phase as (name, start_s, end_s) with end_s >= start_s")
            if name == OTHER:
                raise MeasurementError(f"a phase is named {OTHER!r}, the name of the time between marked phases: "
                                       f"rename it")
            if previous is not None and start < previous[2] - 1e-12:
                raise MeasurementError(f"phases {previous[0]!r} ({previous[1]:.6f}-{previous[2]:.6f} s) and {name!r} "
                                       f"({start:.6f}-{end:.6f} s) overlap: end one phase before the next starts")
            previous = (name, start, end)
            kept = (max(start, t0), min(end, t1))
            if kept[1] > kept[0]:
                if name not in spans:
                    names.append(name)
                    spans[name] = []
                spans[name].append(kept)
        self.t0, self.t1 = t0, t1
        self.marked = names
        self._starts = {n: np.array([s for s, _ in spans[n]]) for n in names}
        self._lengths = {n: np.array([e - s for s, e in spans[n]]) for n in names}
        self._before = {n: np.concatenate(([0.0], np.cumsum(self._lengths[n]))) for n in names}
        self.longest_s = max((float(v.max()) for v in self._lengths.values()), default=0.0)
        self.other_s = (t1 - t0) - sum(float(v.sum()) for v in self._lengths.values())
        self.names = names + ([OTHER] if self.other_s > 1e-9 * max(t1 - t0, 1e-9) else [])

    def cumulative(self, moments: np.ndarray) -> np.ndarray:
        """Time (s) each phase of ``names`` covered in [t0, moment], one column per phase."""
        moments = np.clip(moments, self.t0, self.t1)
        out = np.empty((len(moments), len(self.names)))
        for j, name in enumerate(self.marked):
            starts, lengths = self._starts[name], self._lengths[name]
            i = np.searchsorted(starts, moments, side="right") - 1
            inside = np.clip(moments - starts[np.maximum(i, 0)], 0.0, lengths[np.maximum(i, 0)])
            out[:, j] = np.where(i >= 0, self._before[name][np.maximum(i, 0)] + inside, 0.0)
        if OTHER in self.names:
            out[:, -1] = (moments - self.t0) - out[:, :len(self.marked)].sum(axis=1)
        return out

    def totals_s(self) -> np.ndarray:
        return self.cumulative(np.array([self.t1]))[0]

    def coverage(self, boundaries: np.ndarray) -> np.ndarray:
        """Time each phase covers in each window between consecutive ``boundaries``."""
        return np.diff(self.cumulative(boundaries), axis=0)


# -- the fit ---------------------------------------------------------------------------------------

def _bounded_lstsq(a: np.ndarray, e: np.ndarray, low: float, high: float) -> np.ndarray:
    """min ||a x - e|| with low <= x <= high: projected Newton steps on the free variables.

    Variables at a bound whose gradient pushes them outward are held there; the others take a
    Newton step, projected back into the box and halved until the residual falls. Convex, so
    it ends at the optimum (tests/test_attribution.py checks it against SciPy's lsq_linear).
    """
    h, g = a.T @ a, a.T @ e
    x = np.clip(np.linalg.lstsq(a, e, rcond=None)[0], low, high)

    def cost(v: np.ndarray) -> float:
        r = a @ v - e
        return float(r @ r)

    scale = max(float(np.abs(g).max()), 1e-30)
    for _ in range(200):
        grad = h @ x - g
        held = ((x <= low) & (grad > 0)) | ((x >= high) & (grad < 0))
        free = ~held
        if not free.any() or float(np.abs(grad[free]).max()) <= 1e-12 * scale:
            break
        step = np.zeros_like(x)
        step[free] = np.linalg.lstsq(h[np.ix_(free, free)], -grad[free], rcond=None)[0]
        now, alpha = cost(x), 1.0
        while alpha > 1e-12:
            candidate = np.clip(x + alpha * step, low, high)
            if cost(candidate) < now:
                break
            alpha /= 2
        else:
            break
        if np.allclose(candidate, x, rtol=0, atol=1e-12 * max(1.0, abs(high))):
            x = candidate
            break
        x = candidate
    return x


def _confounded_groups(a: np.ndarray, fitted: list[list[int]]) -> list[list[int]] | None:
    """``fitted`` (groups of phase columns fitted as one) with the groups that lie along a flat
    direction of the coverage matrix merged; None when nothing is flat."""
    merged = np.column_stack([a[:, g].sum(axis=1) for g in fitted])
    norms = np.linalg.norm(merged, axis=0)
    _, singular, vt = np.linalg.svd(merged / norms, full_matrices=False)
    flat = [vt[j] for j in range(len(singular)) if singular[j] <= _RANK_TOLERANCE * singular[0]]
    if not flat:
        return None
    parent = list(range(len(fitted)))

    def root(i: int) -> int:
        while parent[i] != i:
            i = parent[i]
        return i
    for direction in flat:
        involved = np.flatnonzero(np.abs(direction) >= 0.01 * np.abs(direction).max())
        for i in involved[1:]:
            parent[root(int(i))] = root(int(involved[0]))
    roots: dict[int, list[int]] = {}
    for i, group in enumerate(fitted):
        roots.setdefault(root(i), []).extend(group)
    return list(roots.values())


def _fit_powers(a: np.ndarray, e: np.ndarray, low: float, high: float) -> tuple[np.ndarray, np.ndarray]:
    """The unconstrained and the bounded least-squares powers."""
    return np.linalg.lstsq(a, e, rcond=None)[0], _bounded_lstsq(a, e, low, high)


def _half_widths_w(
    a: np.ndarray, e: np.ndarray, unconstrained: np.ndarray, per_cluster: int, confidence: float,
    resolution_j: float, shifted: Sequence[np.ndarray],
) -> np.ndarray:
    """Each power's bound half-width (W): statistical, resolution and dating parts added."""
    n, k = a.shape
    residual = e - a @ unconstrained
    inverse = np.linalg.inv(a.T @ a)
    ols = residual @ residual / (n - k) * np.diag(inverse)
    clusters = math.ceil(n / per_cluster)
    if clusters >= k + _MIN_DOF:
        # Windows that share one occurrence of a phase share its deviation from the mean power:
        # a cluster-robust (CR1) covariance over runs of windows holds where the textbook one is too small.
        scores = np.add.reduceat(a * residual[:, None], np.arange(0, n, per_cluster), axis=0)
        meat = scores.T @ scores * clusters / (clusters - 1) * (n - 1) / (n - k)
        variance = np.maximum(ols, np.diag(inverse @ meat @ inverse))
        dof = min(n - k, clusters - 1)
    else:
        variance, dof = ols * per_cluster, n - k
    t = student_t_ppf(0.5 + confidence / 2, float(dof))
    pseudo = inverse @ a.T
    resolution_w = np.abs(pseudo).sum(axis=1) * resolution_j
    dating_w = np.zeros(k)
    for coverage in shifted:
        moved = np.linalg.lstsq(coverage, e, rcond=None)[0]
        dating_w = np.maximum(dating_w, np.abs(moved - unconstrained))
    return t * np.sqrt(np.maximum(variance, 0.0)) + resolution_w + dating_w


def attribute_phases(
    times_s: Sequence[float], energies_j: Sequence[float], timeline: Sequence[tuple[str, float, float]], *,
    t0_s: float, t1_s: float, ets_j: float, ets_low_j: float, ets_high_j: float, calls: int, max_power_w: float,
    min_power_w: float = 0.0, dating_error_s: float | Sequence[float] = 0.0, resolution_j: float = 0.001,
    confidence: float = DEFAULT_CONFIDENCE,
) -> Attribution:
    """Each phase's energy per call, with its bound, from the counter's publications in [t0_s, t1_s].

    ``times_s``/``energies_j``: the publications (as the lattice dates them, each within
    ``dating_error_s``; the cumulative counter in J, to ``resolution_j``); those outside the
    region are ignored. ``timeline``: (phase name, start_s, end_s), not overlapping; the time no
    phase covers is :data:`OTHER`. ``ets_j`` and its bound: the region's ETS as the meter worked it
    out (all ``calls`` calls together); the phases' energies add up to it exactly.
    """
    if t1_s <= t0_s or calls < 1:
        raise MeasurementError(f"a region needs t1_s > t0_s and at least one call (got {t0_s}-{t1_s} s, "
                               f"{calls} calls)")
    if not 0 < confidence < 1 or max_power_w <= min_power_w or min_power_w < 0:
        raise MeasurementError(f"attribution needs 0 < confidence < 1 and 0 <= min_power_w < max_power_w "
                               f"(got {confidence}, {min_power_w} W, {max_power_w} W)")
    if not ets_low_j <= ets_j <= ets_high_j:
        raise MeasurementError(f"the region's ETS {ets_j} J lies outside its bound [{ets_low_j}, {ets_high_j}] J")
    times, energies = np.asarray(times_s, dtype=float), np.asarray(energies_j, dtype=float)
    errors = np.broadcast_to(np.asarray(dating_error_s, dtype=float), times.shape)
    if times.shape != energies.shape:
        raise MeasurementError(f"{len(times)} publication times but {len(energies)} energies: give one energy per time")
    order = np.argsort(times)
    times, energies, errors = times[order], energies[order], errors[order]
    inside = (times >= t0_s) & (times <= t1_s)
    times, energies, errors = times[inside], energies[inside], errors[inside]
    if np.any(np.diff(energies) < 0):
        raise MeasurementError("the energy counter went backwards inside the region: no attribution is possible")
    line = _Timeline(timeline, t0_s, t1_s)
    totals_s = line.totals_s()
    k = len(line.names)
    notes: list[str] = []
    coverage = line.coverage(times) if len(times) >= 2 else np.zeros((0, k))
    windowed = coverage.sum(axis=0) > 0 if len(coverage) else np.zeros(k, dtype=bool)
    seen = [i for i in range(k) if windowed[i]]
    why: dict[int, str] = {i: "it lies in no whole counter window (only at the region's edges)" for i in range(k)
                           if not windowed[i]}
    groups = [[i] for i in seen]
    windows = len(coverage)
    if seen and windows < len(seen) + _MIN_DOF:
        groups = [seen] if len(seen) > 1 else groups
        if len(seen) > 1:
            for i in seen:
                why[i] = f"too few counter windows ({windows}) to tell {len(seen)} phases apart: a longer region is needed"
    while len(groups) > 1:
        merged = _confounded_groups(coverage, groups)
        if merged is None:
            break
        groups = merged
    for group in groups:
        if len(group) > 1:
            for i in group:
                if i not in why:
                    others = ", ".join(line.names[j] for j in group if j != i)
                    why[i] = f"the counter's windows always hold it in the same proportion to {others}: only their sum is known"
    energy_j = np.zeros(k)
    low_j, high_j = min_power_w * totals_s, max_power_w * totals_s
    if groups:
        a = np.column_stack([coverage[:, g].sum(axis=1) for g in groups])
        e = np.diff(energies)
        free, bounded = _fit_powers(a, e, min_power_w, max_power_w)
        if windows - len(groups) >= 1:
            shifted = [np.column_stack([c[:, g].sum(axis=1) for g in groups])
                       for c in (line.coverage(times + errors), line.coverage(times - errors))]
            per_cluster = max(1, math.ceil(2 * line.longest_s / max(float(np.median(np.diff(times))), 1e-12)))
            half_w = _half_widths_w(a, e, free, per_cluster, confidence, resolution_j, shifted)
        else:
            half_w = np.full(len(groups), math.inf)
        for g, group in enumerate(groups):
            power_low_w = max(min_power_w, float(free[g] - half_w[g]))
            power_high_w = min(max_power_w, float(free[g] + half_w[g]))
            if power_low_w > power_high_w:
                notes.append(f"the fit put {'+'.join(line.names[i] for i in group)} at {free[g]:.4g} W, further from "
                             f"[{min_power_w:.4g}, {max_power_w:.4g}] W than its bound allows: its power is not "
                             f"constant over the region, so its bound is the whole range")
                power_low_w, power_high_w = min_power_w, max_power_w
                for i in group:
                    why.setdefault(i, "its fitted power lies outside what a GPU draws: the phase is not steady")
            power_low_w, power_high_w = min(power_low_w, bounded[g]), max(power_high_w, bounded[g])
            if len(group) == 1 and power_high_w - power_low_w > _LOOSE_SHARE * (max_power_w - min_power_w):
                why.setdefault(group[0], "its bound spans most of what the GPU can draw: the counter's windows barely "
                                         "tell it apart (a longer region, or calls spread across the publications)")
            group_s = float(totals_s[group].sum())
            for i in group:
                energy_j[i] = bounded[g] * totals_s[i]
                rest_high = max_power_w * (group_s - totals_s[i])
                rest_low = min_power_w * (group_s - totals_s[i])
                low_j[i] = max(low_j[i], power_low_w * group_s - rest_high)
                high_j[i] = min(high_j[i], power_high_w * group_s - rest_low)
    mean_w = min(max(ets_j / (t1_s - t0_s), min_power_w), max_power_w)
    for i in range(k):
        if not windowed[i]:
            energy_j[i] = mean_w * totals_s[i]
    adjusted_j = _adjusted_to(energy_j, ets_j, min_power_w * totals_s, max_power_w * totals_s, ((high_j - low_j) / 2) ** 2)
    if abs(adjusted_j.sum() - ets_j) > 1e-9 * max(ets_j, 1.0):
        notes.append(f"the region's ETS ({ets_j:.4g} J) cannot be split among its phases' times within "
                     f"[{min_power_w:.4g}, {max_power_w:.4g}] W: the phases add up to {adjusted_j.sum():.4g} J")
    # What the region's own bound leaves for each phase once the others take their extremes.
    low_j = np.maximum(low_j, ets_low_j - (high_j.sum() - high_j))
    high_j = np.minimum(high_j, ets_high_j - (low_j.sum() - low_j))
    low_j, high_j = np.minimum(low_j, adjusted_j), np.maximum(high_j, adjusted_j)
    region_s = t1_s - t0_s
    phases = []
    for i, name in enumerate(line.names):
        time_s = float(totals_s[i])
        phases.append(PhaseEnergy(
            name=name, ets_j=float(adjusted_j[i]) / calls, ets_low_j=float(low_j[i]) / calls,
            ets_high_j=float(high_j[i]) / calls, time_s=time_s / calls,
            power_w=float(adjusted_j[i]) / time_s, power_low_w=float(low_j[i]) / time_s,
            power_high_w=float(high_j[i]) / time_s, time_share=time_s / region_s,
            energy_share=float(adjusted_j[i]) / ets_j if ets_j > 0 else math.nan,
            told_apart=i not in why, why_not=why.get(i, "")))
    return Attribution(tuple(phases), windows, confidence, tuple(notes))


def _adjusted_to(energy_j: np.ndarray, total_j: float, low_j: np.ndarray, high_j: np.ndarray,
                 weight: np.ndarray) -> np.ndarray:
    """``energy_j`` moved to add up to ``total_j``, each phase by a share of the difference in
    proportion to ``weight`` (its variance: the least known phases absorb it, as a least-squares
    fit under the sum constraint would), each kept within [low_j, high_j] (a phase that reaches a
    limit is held there and the others share the rest)."""
    weight = np.where(np.isfinite(weight) & (weight > 0), weight, 0.0)
    if weight.sum() <= 0:
        weight = np.maximum(energy_j, 1e-12)
    out = np.clip(energy_j, low_j, high_j)
    held = np.zeros(len(out), dtype=bool)
    for _ in range(len(out) + 1):
        share = weight[~held].sum()
        if share <= 0:
            break
        out[~held] += weight[~held] / share * (total_j - out.sum())
        over = ~held & ((out > high_j) | (out < low_j))
        if not over.any():
            break
        out[over] = np.clip(out[over], low_j[over], high_j[over])
        held |= over
    return out


def publication_arrays(publications: Sequence[Publication]) -> tuple[list[float], list[float], list[float]]:
    """The meter's dated publications (``integrate.Publication``: mJ, within [earliest, latest]) as the
    times (s), cumulative energies (J) and dating errors (s) :func:`attribute_phases` takes."""
    return ([p.when for p in publications], [p.value / 1000.0 for p in publications],
            [(p.latest - p.earliest) / 2 for p in publications])


# -- designing the measurement ---------------------------------------------------------------------

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
    resolution_w: np.ndarray     # the counter's resolution, pushed through the fit (does not fall)

    def half_widths_w(self, windows: int, confidence: float) -> np.ndarray:
        """Each power's expected bound half-width from a region of ``windows`` windows (inf: too few)."""
        k = len(self.names)
        clusters = windows // self.per_cluster
        if clusters < k + _MIN_DOF:
            return np.full(k, math.inf)
        t = student_t_ppf(0.5 + confidence / 2, float(min(windows - k, clusters - 1)))
        scale = self.windows / windows
        return t * np.sqrt(self.variance_w2 * scale) + self.dating_w * math.sqrt(scale) + self.resolution_w


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
    line = _Timeline(timeline, 0.0, end_s)
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
    return _Design(tuple(names), np.array([n in phase_lengths_s for n in names]), power, len(a), per_cluster,
                   variance, np.abs(pseudo @ moved - power), np.abs(pseudo).sum(axis=1) * resolution_j)


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
