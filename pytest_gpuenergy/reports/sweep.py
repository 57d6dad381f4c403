"""A cap sweep: one workload's figures across the power caps it ran at, and its optimal caps.

The question the plots answer is "which cap should this workload run at on this GPU model":
the energy-optimal cap (least ETS) and the EDP-optimal cap (least ETS x T), each with its
saving against the GPU's default limit. The cases of one workload differ only in the cap, so
the workload is the case id with the cap's id taken out of its parameter brackets.

An optimum is a claim, so it comes with what backs it (across three unchanged runs of the
suite only one of 18 workloads kept its EDP-optimal cap):

- whether it is distinguishable from its neighbouring caps: a neighbour's figure is higher
  beyond the repetitions' noise (the comparison's Welch test on the log ratio, at the gate's
  confidence); the neighbours it cannot be told from are named;
- whether it lies at the edge of the caps tried, with the GPU's allowed range: the true
  optimum may lie beyond what was measured;
- a figure no power cap can produce, work finishing faster than at the default limit beyond
  the noise (by more than ``IMPOSSIBLE_SPEEDUP_PCT``), marks its point as suspect: it is named
  and never chosen as an optimum (another process, a warm-up or a clock change skewed it).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ..gate.decide import decide
from ..gate.records import THRESHOLD_ONLY, MetricChange
from ..gate.settings import DEFAULT_CONFIDENCE
from ..gate.verdicts import IMPROVEMENT, REGRESSION, interval_text, pct_text
from ..metrics import METRIC_FIELDS
from ..runs.ids import split_region
from ..runs.records import CaseEntry, RunDocument
from .numbers import cap_sort_key

OPTIMISED = ("ets", "edp")           # the metrics a cap is chosen for
IMPOSSIBLE_SPEEDUP_PCT = 5.0         # a capped case this much faster than at the default limit is suspect
_DEFAULT_MATCH_W = 0.5               # a limit within this of the default counts as the default


def workload_key(case_id: str, cap_label: str) -> str:
    """The case id without the cap: ``t.py::f[alexnet-train-60%]`` at ``60%`` -> ``t.py::f[alexnet-train]``.

    The cap's id is removed where pytest puts parameter ids, joined by ``-``: alone in the
    brackets (which then go), or first, last or in the middle of them. A ``#n`` region suffix
    is kept. A case id without the cap in its brackets is its own workload.
    """
    base, region = _split_region(case_id)
    if not base.endswith("]") or "[" not in base:
        return case_id
    start = base.index("[", base.rfind("::") + 2 if "::" in base else 0)
    name, params = base[:start], base[start + 1:-1]
    if params == cap_label:
        return name + region
    if params.endswith(f"-{cap_label}"):
        return f"{name}[{params[:-len(cap_label) - 1]}]{region}"
    if params.startswith(f"{cap_label}-"):
        return f"{name}[{params[len(cap_label) + 1:]}]{region}"
    middle = f"-{cap_label}-"
    if middle in params:
        at = params.rindex(middle)
        return f"{name}[{params[:at]}-{params[at + len(middle):]}]{region}"
    return case_id


def _split_region(case_id: str) -> tuple[str, str]:
    head, region = split_region(case_id)
    return (head, f"#{region}") if region is not None else (case_id, "")


@dataclass(frozen=True)
class SweepPoint:
    """One cap of a sweep: the enforced limit and the figures' means, spreads and samples."""

    cap: str
    case_id: str
    limit_enforced_w: float
    default_limit_w: float
    n: int
    ets_j: float
    time_s: float
    edp_js: float
    ets_std_j: float
    time_std_s: float
    edp_std_js: float
    samples: dict[str, tuple[float, ...]] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def of(cls, entry: CaseEntry) -> SweepPoint:
        samples = {metric: tuple(entry.samples(name)) for metric, name in METRIC_FIELDS.items()}

        def mean_std(metric: str) -> tuple[float, float]:
            values = samples[metric]
            return statistics.fmean(values), (statistics.stdev(values) if len(values) > 1 else 0.0)

        (ets, ets_sd), (time_s, time_sd), (edp, edp_sd) = (mean_std(m) for m in ("ets", "time", "edp"))
        return cls(entry.cap, entry.case_id, entry.limit_enforced_w, entry.default_limit_w, len(entry.repetitions),
                   ets, time_s, edp, ets_sd, time_sd, edp_sd, samples)

    def value(self, metric: str) -> float:
        return float(getattr(self, METRIC_FIELDS[metric]))

    def spread(self, metric: str) -> float:
        return {"ets": self.ets_std_j, "time": self.time_std_s, "edp": self.edp_std_js}[metric]

    @property
    def at_default(self) -> bool:
        return abs(self.limit_enforced_w - self.default_limit_w) <= _DEFAULT_MATCH_W


def cap_text(point: SweepPoint) -> str:
    """``200 W``, or ``60% (420 W)`` when the label is not the wattage itself."""
    watts = f"{point.limit_enforced_w:g} W"
    return watts if point.cap.replace(" ", "") == watts.replace(" ", "") else f"{point.cap} ({watts})"


@dataclass(frozen=True)
class Suspect:
    """A capped point whose work finished faster than at the default limit, beyond the noise."""

    point: SweepPoint
    change: MetricChange             # its T against the default limit's

    def describe(self) -> str:
        change = self.change
        bounds = "" if change.ci_low_pct is None or change.ci_high_pct is None else f" {interval_text(change.ci_low_pct, change.ci_high_pct)}"
        return (f"suspect figure at {cap_text(self.point)}: T {pct_text(change.change_pct or 0.0)}{bounds} against the "
                f"default limit, faster than the uncapped GPU, which a power cap cannot make it; not used as an "
                f"optimum (check for another process, a missing warm-up or changed clocks)")


@dataclass(frozen=True)
class Optimum:
    """The cap with the least ETS (or EDP), what it saves against the reference cap, and what backs it.

    The reference is the point at the GPU's default limit; when no case ran there, the point at
    the highest limit measured, and ``reference_is_default`` says so.
    """

    metric: str
    point: SweepPoint
    reference: SweepPoint
    reference_is_default: bool
    saving_pct: float                # 100 x (1 - optimum / reference): positive means less
    time_change_pct: float           # what the optimum costs in time, for the same comparison
    ties: tuple[tuple[SweepPoint, MetricChange], ...] = ()   # neighbours it cannot be told from
    tested: bool = True              # False: too few repetitions to tell it from its neighbours
    edge: str | None = None          # "lowest" or "highest" cap tried, when there
    gpu_range_w: tuple[float, float] | None = None

    @property
    def distinguishable(self) -> bool | None:
        """Whether every neighbouring cap is worse beyond the noise; None without a test."""
        return None if not self.tested else not self.ties

    def describe(self) -> str:
        what = "energy-optimal" if self.metric == "ets" else "EDP-optimal"
        ref = (f"the default limit {self.reference.limit_enforced_w:g} W" if self.reference_is_default
               else f"the highest cap measured, {self.reference.limit_enforced_w:g} W (the default "
                    f"{self.point.default_limit_w:g} W was not measured)")
        cap = cap_text(self.point)
        if self.point is self.reference:
            text = f"{what} cap: {cap}, which is {ref}"
        else:
            text = (f"{what} cap: {cap}, {self.metric.upper()} "
                    f"{self.saving_pct:.1f} % lower than at {ref}, T {self.time_change_pct:+.1f} %")
        return "; ".join([text] + self.caveats())

    def caveats(self) -> list[str]:
        """What a reader must know before acting on the optimum, in words."""
        out = []
        if not self.tested:
            out.append("not tested against its neighbours (fewer than 2 repetitions; use --energy-repeat)")
        elif self.ties:
            near = ", ".join(f"{cap_text(p)} ({pct_text(c.change_pct or 0.0)} "
                             f"{interval_text(c.ci_low_pct or 0.0, c.ci_high_pct or 0.0)})" for p, c in self.ties)
            out.append(f"not distinguishable from {near}")
        else:
            out.append("distinguishable from its neighbouring caps")
        if self.edge is not None:
            out.append(self._edge_text())
        return out

    def _edge_text(self) -> str:
        side = "lowest" if self.edge == "lowest" else "highest"
        text = f"at the {side} cap tried"
        if self.gpu_range_w is None:
            return text
        low, high = self.gpu_range_w
        beyond = (low < self.point.limit_enforced_w - _DEFAULT_MATCH_W) if side == "lowest" else \
            (high > self.point.limit_enforced_w + _DEFAULT_MATCH_W)
        allowed = f"the GPU allows {low:g}-{high:g} W"
        return f"{text}: {allowed}, so the optimum may lie {'below' if side == 'lowest' else 'above'}" if beyond \
            else f"{text}, the GPU's {'minimum' if side == 'lowest' else 'maximum'} ({allowed})"


@dataclass(frozen=True)
class Sweep:
    """One workload on one GPU (of one model and backend) across its caps, by enforced limit."""

    workload: str
    gpu_model: str
    gpu_index: int
    backend: str
    simulated: bool
    points: tuple[SweepPoint, ...]
    gpu_range_w: tuple[float, float] | None = None
    confidence: float = DEFAULT_CONFIDENCE

    @property
    def default_limit_w(self) -> float:
        return self.points[0].default_limit_w

    def suspects(self) -> list[Suspect]:
        """Capped points faster than at the default limit beyond the noise (see the module docstring)."""
        reference = next((p for p in self.points if p.at_default), None)
        if reference is None:
            return []
        found = []
        for point in self.points:
            if point.limit_enforced_w >= reference.limit_enforced_w - _DEFAULT_MATCH_W:
                continue
            change = decide("time", reference.samples["time"], point.samples["time"], IMPOSSIBLE_SPEEDUP_PCT,
                            self.confidence)
            if change.verdict == IMPROVEMENT:
                found.append(Suspect(point, change))
        return found

    def optimum(self, metric: str) -> Optimum | None:
        """The point with the least mean of ``metric``; ties go to the higher limit (less capping).

        Suspect points are never chosen; the answer says whether the neighbours differ.
        """
        suspect = {id(s.point) for s in self.suspects()}
        usable = [p for p in self.points if math.isfinite(p.value(metric)) and p.value(metric) > 0]
        candidates = [p for p in usable if id(p) not in suspect]
        if not candidates:
            return None
        best = min(candidates, key=lambda p: (p.value(metric), -p.limit_enforced_w))
        reference, is_default = self._reference(usable)
        saving = 100.0 * (1.0 - best.value(metric) / reference.value(metric))
        time_change = 100.0 * (best.time_s / reference.time_s - 1.0) if reference.time_s > 0 else math.nan
        ties, tested = self._ties(best, candidates, metric)
        edge = None
        if len(usable) > 1 and best is usable[0]:
            edge = "lowest"
        elif len(usable) > 1 and best is usable[-1]:
            edge = "highest"
        return Optimum(metric, best, reference, is_default, saving, time_change, ties, tested, edge, self.gpu_range_w)

    def _ties(self, best: SweepPoint, points: Sequence[SweepPoint],
              metric: str) -> tuple[tuple[tuple[SweepPoint, MetricChange], ...], bool]:
        """The neighbouring caps whose figure is not higher than the best's beyond the noise."""
        at = points.index(best)
        neighbours = [points[i] for i in (at - 1, at + 1) if 0 <= i < len(points)]
        ties = []
        for other in neighbours:
            change = decide(metric, best.samples[metric], other.samples[metric], 0.0, self.confidence)
            if change.method == THRESHOLD_ONLY:
                return (), False
            if change.verdict != REGRESSION:
                ties.append((other, change))
        return tuple(ties), True

    def _reference(self, points: Sequence[SweepPoint]) -> tuple[SweepPoint, bool]:
        at_default = [p for p in points if p.at_default]
        if at_default:
            named = [p for p in at_default if p.cap in ("default", "100%")]
            return (named or at_default)[0], True
        return max(points, key=lambda p: p.limit_enforced_w), False


def gpu_range(doc: RunDocument, gpu_index: int) -> tuple[float, float] | None:
    """(min, max) power limit of the document's GPU ``gpu_index`` in W, when the machine says."""
    for gpu in doc.machine.get("gpus") or []:
        if isinstance(gpu, dict) and gpu.get("index") == gpu_index:
            low, high = gpu.get("min_limit_w"), gpu.get("max_limit_w")
            if isinstance(low, (int, float)) and isinstance(high, (int, float)):
                return float(low), float(high)
    return None


def sweeps(doc: RunDocument, confidence: float = DEFAULT_CONFIDENCE) -> list[Sweep]:
    """The document's cases grouped into sweeps, in the order the workloads first appear."""
    groups: dict[tuple[str, int], list[CaseEntry]] = {}
    for entry in doc.cases:
        groups.setdefault((workload_key(entry.case_id, entry.cap), entry.gpu_index), []).append(entry)
    result = []
    for (workload, gpu_index), entries in groups.items():
        points = tuple(sorted((SweepPoint.of(e) for e in entries),
                              key=lambda p: cap_sort_key(p.cap, p.limit_enforced_w)))
        result.append(Sweep(workload, doc.gpu_model, gpu_index, doc.backend, doc.simulated, points,
                            gpu_range(doc, gpu_index), confidence))
    return result


def optimum_data(found: Optimum | None) -> dict[str, Any] | None:
    """An optimum as plain data (the JSON report's form)."""
    if found is None:
        return None
    return {
        "cap": found.point.cap, "limit_enforced_w": found.point.limit_enforced_w,
        "value": found.point.value(found.metric), "reference_cap": found.reference.cap,
        "reference_limit_w": found.reference.limit_enforced_w, "reference_is_default": found.reference_is_default,
        "saving_pct": found.saving_pct, "time_change_pct": found.time_change_pct,
        "distinguishable": found.distinguishable,
        "indistinguishable_from": [p.cap for p, _ in found.ties],
        "edge": found.edge, "gpu_range_w": list(found.gpu_range_w) if found.gpu_range_w else None,
    }
