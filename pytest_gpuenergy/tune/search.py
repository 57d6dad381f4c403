"""Finding the best setting of one knob in few measured settings: the search and its honest answer.

The settings form a grid over the GPU's whole allowed range (power limits in 25 W steps, SM
clocks in about 20 steps). Energy and EDP against a cap are close to unimodal (they fall while
the cap removes wasted power, then rise once the work slows more than the power drops), so the
search is a bracket on the grid that shrinks towards the minimum:

1. both ends (the GPU's lowest setting, and the highest, which is the default limit);
2. two settings inside, at 20 % and 35 % of the range (``INNER_SHARES``: where the optima lie);
3. then one setting per step: where the best measured setting is an end, halfway to its measured
   neighbour (the optimum lies between them or at the end); where it is inside, halfway to the
   neighbour on the side where the falling and the rising side of the V through the measured
   settings meet (``_v_vertices``), or into the larger side when they do not meet inside the
   bracket. The V says on which side the optimum lies, not how far: near the lowest caps energy
   jumps up (the clocks fall off a knee), so a line through the lowest setting points too far
   from it (on the H100 it aimed at 275 W where the optimum was 225 W, 7-10 % more energy); halving
   the side instead keeps every one of 408 curves of the simulator within 5 % in 5 settings
   (tests/test_tune.py).

The answer is always a *measured* setting, never an extrapolation, with what backs it: its
saving against the default setting, and whether its measured neighbours are worse beyond the
repetitions' noise (the comparison's Welch test on the log ratio, at the gate's confidence).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ..gate.decide import decide
from ..gate.records import THRESHOLD_ONLY
from ..gate.settings import DEFAULT_CONFIDENCE
from ..gate.verdicts import REGRESSION

# Where the two inner settings of the second round lie, as shares of the range from its lowest
# setting: the lower part, where the energy- and EDP-optimal caps of the seeds' workloads and of
# the simulator's lie (on 192 of the simulator's curves: mean error 0.35 % at 5 settings, against
# 3.2 % with the golden-section points 0.382 and 0.618; see tests/test_tune.py).
INNER_SHARES = (0.2, 0.35)


def first_settings(count: int) -> list[list[int]]:
    """The rounds every test starts with: the two ends, then two settings in the lower part."""
    last = count - 1
    if last <= 0:
        return [[0]]
    inner = sorted({round(share * last) for share in INNER_SHARES} - {0, last})
    return [[0, last]] + ([inner] if inner else [])


def next_setting(values: Mapping[int, float], count: int) -> int | None:
    """The grid index to measure next, given the objective's mean at each measured index (None: done)."""
    order = sorted(values)
    if len(order) < 2:
        return None
    best = min(order, key=lambda i: (values[i], -i))       # ties go to the higher setting (less capping)
    at = order.index(best)
    candidate: int | None
    if at == 0:
        candidate = (best + order[1]) // 2
    elif at == len(order) - 1:
        candidate = (order[-2] + best + 1) // 2
    else:
        low, high = order[at - 1], order[at + 1]
        vertex = next((c for c in _v_vertices(order, at, values) if low < c < high and c not in values), None)
        below = best - low >= high - best if vertex is None else vertex < best
        candidate = (low + best) // 2 if below else (best + high + 1) // 2
    if candidate in values or not 0 <= candidate < count:
        return _halfway_into_larger_gap(order, best, values)
    return candidate


def _v_vertices(order: Sequence[int], at: int, values: Mapping[int, float]) -> list[int]:
    """Where a falling and a rising line through measured settings meet, around the best one.

    Energy against a cap is close to a V: it falls while the cap removes wasted power and rises
    once the clocks (then the memory clock) drop; its sides are nearly straight. One line runs
    through the best setting and a neighbour, the other through the two settings beyond the
    other neighbour; both pairings are tried.
    """
    def line(p: int, q: int) -> tuple[float, float]:
        slope = (values[q] - values[p]) / (q - p)
        return slope, values[p] - slope * p

    pairs = []
    if at + 2 < len(order):
        pairs.append((line(order[at - 1], order[at]), line(order[at + 1], order[at + 2])))
    if at - 2 >= 0:
        pairs.append((line(order[at - 2], order[at - 1]), line(order[at], order[at + 1])))
    pairs.append((line(order[at - 1], order[at]), line(order[at], order[at + 1])))
    found = []
    for (falling, c1), (rising, c2) in pairs:
        if falling < 0 < rising:
            vertex = (c2 - c1) / (falling - rising)
            if math.isfinite(vertex):
                found.append(round(vertex))
    return found


def _halfway_into_larger_gap(order: Sequence[int], best: int, values: Mapping[int, float]) -> int | None:
    at = order.index(best)
    gaps = []
    if at > 0:
        gaps.append((best - order[at - 1], (order[at - 1] + best) // 2))
    if at < len(order) - 1:
        gaps.append((order[at + 1] - best, (best + order[at + 1] + 1) // 2))
    for _, candidate in sorted(gaps, reverse=True):
        if candidate not in values:
            return candidate
    return None       # both neighbours are adjacent on the grid: the bracket cannot shrink further


@dataclass(frozen=True)
class Neighbour:
    """A measured setting next to the optimum and how its figure compares (change in %, bounds)."""

    index: int
    change_pct: float
    low_pct: float | None
    high_pct: float | None
    worse: bool | None            # higher beyond the noise; None: too few repetitions to tell


@dataclass(frozen=True)
class Found:
    """The best measured setting for one objective, against the default, with its neighbours."""

    index: int
    default_index: int
    saving_pct: float             # 100 x (1 - best / default): positive means less
    time_change_pct: float
    neighbours: tuple[Neighbour, ...]

    @property
    def distinguishable(self) -> bool | None:
        """Every measured neighbour is worse beyond the noise (None: not tested)."""
        if any(n.worse is None for n in self.neighbours):
            return None
        return all(n.worse for n in self.neighbours)


def best_setting(samples: Mapping[int, Mapping[str, Sequence[float]]], metric: str, default_index: int,
                 confidence: float = DEFAULT_CONFIDENCE) -> Found:
    """The measured index with the least mean ``metric`` (``ets`` or ``edp``), and what backs it.

    ``samples[index][metric]`` are the repetitions' values there (also ``time``).
    """
    means = {i: _mean(s[metric]) for i, s in samples.items()}
    best = min(means, key=lambda i: (means[i], -i))
    order = sorted(means)
    at = order.index(best)
    neighbours = []
    for other in (order[at - 1] if at > 0 else None, order[at + 1] if at < len(order) - 1 else None):
        if other is None:
            continue
        change = decide(metric, samples[best][metric], samples[other][metric], 0.0, confidence)
        worse = None if change.method == THRESHOLD_ONLY else change.verdict == REGRESSION
        neighbours.append(Neighbour(other, change.change_pct or 0.0, change.ci_low_pct, change.ci_high_pct, worse))
    reference = samples.get(default_index)
    saving = time_change = math.nan
    if reference is not None:
        saving = 100.0 * (1.0 - means[best] / _mean(reference[metric]))
        time_change = 100.0 * (_mean(samples[best]["time"]) / _mean(reference["time"]) - 1.0)
    return Found(best, default_index, saving, time_change, tuple(neighbours))


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values)
