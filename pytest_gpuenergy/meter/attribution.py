"""Where a region's energy went: each phase's mean power, fitted from the counter's windows, with a bound.

A GPU's energy counter publishes every ~100 ms (NVML) or ~1 ms (AMD SMI), so a 10 ms phase is never
seen on its own under NVML. What is seen: the energy of each *window* between two publications,
and, from the phase marks, how much of each window every phase covered. If each phase draws a
constant mean power, every window is a linear equation::

    energy of window i  =  sum over phases p of  power_p * (time phase p covers in window i)

and many windows give an over-determined system in the few phase powers. :func:`attribute_phases`
solves it by least squares with each power kept within [``min_power_w``, ``max_power_w``]. The
phases can only be told apart where their shares of the windows vary; where they always appear in
the same proportions (or there are too few windows, or their shares vary hardly more than the
publications' dating error makes them seem to) no fit can split them, and the result says so with
a bound that spans every split the data allow instead of a confident wrong answer.

**The bound** of each power adds three parts: the fit's statistical error (its covariance, taken
as the larger of the textbook one and one robust to windows that share a phase's occurrence,
times a Student t quantile at ``confidence``), the counter's resolution (each window's energy
is known to ``resolution_j``, pushed through the fit as a worst case), and the lattice's dating
error (the fit done again with every publication moved by its dating error, earlier and later:
the larger change), plus the shrinking that dating errors differing from one publication to the
next cause (errors in the variables). A phase's energy is its power times its time. The phases' energies are then
moved to add up exactly to the region's ETS (the meter's figure, which includes the region's
edges that no whole window covers), each by a share of the difference in proportion to its
variance, so that the least known phases absorb it; and each bound is intersected with what the
region's own bound leaves for that phase once the others take their bounds' extremes (and
widened, where needed, to hold the moved figure).

``phase_design.py`` designs the measurement so that the fit can succeed (the gap after each call,
the region length a wanted bound needs); ``docs/explanation/phases.md`` explains both.

Pure maths (numpy): no threads, no clocks, no GPU.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..errors import MeasurementError
from ..gate.student_t import student_t_ppf
from ..lazy import LazyModule
from .integrate import Publication

if TYPE_CHECKING:
    import numpy as np
else:
    np = LazyModule("numpy")      # only a region with phase marks needs it (see ``lazy.LazyModule``)

OTHER = "other"                 # the time between marked phases
DEFAULT_CONFIDENCE = 0.99
_RANK_TOLERANCE = 1e-8          # a direction of the (column-normalised) coverage matrix this flat is no information
_LOOSE_SHARE = 0.5              # a power bound wider than this share of [min, max] power: the data barely tell it apart
MIN_DOF = 2                    # residual degrees of freedom a fit needs before its covariance means anything
_REAL_SHARE = 0.9               # a group's share of the windows must vary at least this much for real, not by dating noise


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

class PhaseTimeline:
    """Cumulative time of each phase since ``t0``, evaluated at any moments (vectorised); phase_design.py
    lays out its synthetic runs with it too."""

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

    def phase_at(self, moments: np.ndarray) -> np.ndarray:
        """The index (in ``names``) of the phase under each moment (-1: outside the region)."""
        around = np.diff(self.cumulative(np.stack((moments - 1e-7, moments + 1e-7), axis=1).ravel()), axis=0)[::2]
        return np.where(around.sum(axis=1) > 0, around.argmax(axis=1), -1)

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


def _real_shares(coverage: np.ndarray, groups: list[list[int]], at_edge: np.ndarray, errors_s: np.ndarray) -> np.ndarray:
    """Per group: the part of the variation of its share of the windows that is real rather than the
    publications' dating error (1: all real; <= 0: none).

    A publication dated d late moves d of the phase under it into the window before and changes
    that window's length: each share moves by (1[the phase is p] - share) d / length. Where the
    coverage varies no more than that, a fit would read the dating noise as information and
    shrink the phase's power towards the others' (errors in the variables: attenuation).
    """
    lengths = coverage.sum(axis=1)
    out = np.empty(len(groups))
    for j, group in enumerate(groups):
        share = coverage[:, group].sum(axis=1) / lengths
        under = np.isin(at_edge, group).astype(float)
        noise = ((under[1:] - share) ** 2 * errors_s[1:] ** 2 + (under[:-1] - share) ** 2 * errors_s[:-1] ** 2) / 3
        spread = float(np.var(share))
        out[j] = 1 - float(np.mean(noise / lengths ** 2)) / spread if spread > 0 else -math.inf
    return out


def _merge_noise_dominated(coverage: np.ndarray, groups: list[list[int]], at_edge: np.ndarray,
                           errors_s: np.ndarray) -> list[list[int]]:
    """``groups`` with each whose share varies mostly by dating noise merged into the group its share
    moves with most, until every group's variation is at least ``_REAL_SHARE`` real."""
    real = _real_shares(coverage, groups, at_edge, errors_s)
    while len(groups) > 1 and real.min() < _REAL_SHARE:
        weak = int(real.argmin())
        lengths = coverage.sum(axis=1)
        shares = [coverage[:, g].sum(axis=1) / lengths for g in groups]
        moves = [abs(float(np.corrcoef(shares[weak], shares[j])[0, 1])) if j != weak and np.var(shares[j]) > 0
                 and np.var(shares[weak]) > 0 else 0.0 for j in range(len(groups))]
        partner = int(np.argmax(moves)) if max(moves) > 0 else (1 if weak == 0 else 0)
        merged = sorted(groups[weak] + groups[partner])
        groups = [g for j, g in enumerate(groups) if j not in (weak, partner)] + [merged]
        real = _real_shares(coverage, groups, at_edge, errors_s)
    return groups


def _fit_powers(a: np.ndarray, e: np.ndarray, low: float, high: float) -> tuple[np.ndarray, np.ndarray]:
    """The unconstrained and the bounded least-squares powers."""
    return np.linalg.lstsq(a, e, rcond=None)[0], _bounded_lstsq(a, e, low, high)


def _half_widths_w(
    a: np.ndarray, e: np.ndarray, unconstrained: np.ndarray, per_cluster: int, confidence: float,
    resolution_j: float, shifted: Sequence[np.ndarray], edge_variance_s2: np.ndarray, powers_w: np.ndarray,
) -> np.ndarray:
    """Each power's bound half-width (W): statistical, resolution and dating parts added.

    Dating errors that differ from publication to publication put noise in the coverage itself,
    which shrinks every fitted power towards zero by (A'A)^-1 S P, S holding for each phase the
    summed variance of the publications under it (errors in the variables): that is added too.
    """
    n, k = a.shape
    residual = e - a @ unconstrained
    inverse = np.linalg.inv(a.T @ a)
    ols = residual @ residual / (n - k) * np.diag(inverse)
    clusters = math.ceil(n / per_cluster)
    if clusters >= k + MIN_DOF:
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
    attenuation_w = np.abs(inverse @ (edge_variance_s2 * powers_w))
    return t * np.sqrt(np.maximum(variance, 0.0)) + resolution_w + dating_w + attenuation_w


def _edge_variance_s2(group_at: np.ndarray, errors_s: np.ndarray, groups: int) -> np.ndarray:
    """Per group, the summed variance of the dating errors of the publications under it, each
    counted once per window it bounds, taking each error as uniform within its dating interval."""
    bounds = np.full(len(group_at), 2.0)
    bounds[[0, -1]] = 1.0
    inside = group_at >= 0
    return np.bincount(group_at[inside], weights=(bounds * errors_s ** 2 / 3)[inside], minlength=groups)


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
    out (all ``calls`` calls together); the phases' energies add up to it exactly. ``max_power_w``:
    the most the GPU can draw (pass the meter's ceiling, ``integrate.CEILING_FACTOR`` times its
    highest limit: a GPU briefly draws above it); ``min_power_w``: the least a phase can draw.
    ``confidence``: of each bound's statistical part (two-sided).
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
    errors = np.asarray(dating_error_s, dtype=float)
    if times.shape != energies.shape or errors.size not in (1, times.size):
        raise MeasurementError(f"{times.size} publication times but {energies.size} energies and {errors.size} dating "
                               f"errors: give one energy (and one dating error, or one for all) per time")
    errors = np.broadcast_to(errors, times.shape)
    order = np.argsort(times)
    times, energies, errors = times[order], energies[order], errors[order]
    inside = (times >= t0_s) & (times <= t1_s)
    times, energies, errors = times[inside], energies[inside], errors[inside]
    if np.any(np.diff(energies) < 0):
        raise MeasurementError("the energy counter went backwards inside the region: no attribution is possible")
    if np.any(np.diff(times) <= 0):
        raise MeasurementError("two publications are dated to the same moment: give each publication once")
    line = PhaseTimeline(timeline, t0_s, t1_s)
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
    if seen and windows < len(seen) + MIN_DOF:
        groups = [seen] if len(seen) > 1 else groups
        if len(seen) > 1:
            for i in seen:
                why[i] = f"too few counter windows ({windows}) to tell {len(seen)} phases apart: a longer region is needed"
    while len(groups) > 1:
        merged = _confounded_groups(coverage, groups)
        if merged is None:
            break
        groups = merged
    if len(groups) > 1 and np.any(errors > 0):
        flat = groups
        groups = _merge_noise_dominated(coverage, groups, line.phase_at(times), errors)
        for group in groups:
            if group not in flat:
                for i in group:
                    why.setdefault(i, "its share of the counter's windows varies hardly more than the publications' "
                                      "dating error: the windows cannot tell it from "
                                      + ", ".join(line.names[j] for j in group if j != i))
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
            group_of = np.full(k + 1, -1)
            for g, group in enumerate(groups):
                group_of[group] = g
            edge_s2 = _edge_variance_s2(group_of[line.phase_at(times)], errors, len(groups))
            half_w = _half_widths_w(a, e, free, per_cluster, confidence, resolution_j, shifted, edge_s2, bounded)
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
