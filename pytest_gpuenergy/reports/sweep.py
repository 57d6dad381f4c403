"""A cap sweep: one workload's figures across the power caps it ran at, and its optimal caps.

The question the plots answer is "which cap should this workload run at on this GPU model":
the energy-optimal cap (least ETS) and the EDP-optimal cap (least ETS x T), each with its
saving against the GPU's default limit. The cases of one workload differ only in the cap, so
the workload is the case id with the cap's id taken out of its parameter brackets.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Sequence

from ..storage import CaseEntry, RunDocument

OPTIMISED = ("ets", "edp")           # the metrics a cap is chosen for
_FIELDS = {"ets": "ets_j", "time": "time_s", "edp": "edp_js"}
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
    head, sep, number = case_id.rpartition("#")
    if sep and number.isdigit() and head and not head.endswith("::"):
        return head, f"#{number}"
    return case_id, ""


@dataclass(frozen=True)
class SweepPoint:
    """One cap of a sweep: the enforced limit and the figures' means and spreads."""

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

    @classmethod
    def of(cls, entry: CaseEntry) -> "SweepPoint":
        def mean_std(field: str) -> tuple[float, float]:
            values = entry.samples(field)
            return statistics.fmean(values), (statistics.stdev(values) if len(values) > 1 else 0.0)

        (ets, ets_sd), (time_s, time_sd), (edp, edp_sd) = (mean_std(f) for f in ("ets_j", "time_s", "edp_js"))
        return cls(entry.cap, entry.case_id, entry.limit_enforced_w, entry.default_limit_w, len(entry.repetitions),
                   ets, time_s, edp, ets_sd, time_sd, edp_sd)

    def value(self, metric: str) -> float:
        return float(getattr(self, _FIELDS[metric]))

    def spread(self, metric: str) -> float:
        return {"ets": self.ets_std_j, "time": self.time_std_s, "edp": self.edp_std_js}[metric]


def cap_text(point: SweepPoint) -> str:
    """``200 W``, or ``60% (420 W)`` when the label is not the wattage itself."""
    watts = f"{point.limit_enforced_w:g} W"
    return watts if point.cap.replace(" ", "") == watts.replace(" ", "") else f"{point.cap} ({watts})"


@dataclass(frozen=True)
class Optimum:
    """The cap with the least ETS (or EDP), and what it saves against the reference cap.

    The reference is the point at the GPU's default limit; when no case ran there, the point at
    the highest limit measured, and ``reference_is_default`` says so.
    """

    metric: str
    point: SweepPoint
    reference: SweepPoint
    reference_is_default: bool
    saving_pct: float                # 100 x (1 - optimum / reference): positive means less
    time_change_pct: float           # what the optimum costs in time, for the same comparison

    def describe(self) -> str:
        what = "energy-optimal" if self.metric == "ets" else "EDP-optimal"
        ref = (f"the default limit {self.reference.limit_enforced_w:g} W" if self.reference_is_default
               else f"the highest cap measured, {self.reference.limit_enforced_w:g} W (the default "
                    f"{self.point.default_limit_w:g} W was not measured)")
        cap = cap_text(self.point)
        if self.point is self.reference:
            return f"{what} cap: {cap}, which is {ref}"
        return (f"{what} cap: {cap}, {self.metric.upper()} "
                f"{self.saving_pct:.1f} % lower than at {ref}, T {self.time_change_pct:+.1f} %")


@dataclass(frozen=True)
class Sweep:
    """One workload on one GPU (of one model and backend) across its caps, by enforced limit."""

    workload: str
    gpu_model: str
    gpu_index: int
    backend: str
    simulated: bool
    points: tuple[SweepPoint, ...]

    @property
    def default_limit_w(self) -> float:
        return self.points[0].default_limit_w

    def optimum(self, metric: str) -> Optimum | None:
        """The point with the least mean of ``metric``; ties go to the higher limit (less capping)."""
        usable = [p for p in self.points if math.isfinite(p.value(metric)) and p.value(metric) > 0]
        if not usable:
            return None
        best = min(usable, key=lambda p: (p.value(metric), -p.limit_enforced_w))
        reference, is_default = self._reference(usable)
        saving = 100.0 * (1.0 - best.value(metric) / reference.value(metric))
        time_change = 100.0 * (best.time_s / reference.time_s - 1.0) if reference.time_s > 0 else math.nan
        return Optimum(metric, best, reference, is_default, saving, time_change)

    def _reference(self, points: Sequence[SweepPoint]) -> tuple[SweepPoint, bool]:
        at_default = [p for p in points if abs(p.limit_enforced_w - p.default_limit_w) <= _DEFAULT_MATCH_W]
        if at_default:
            named = [p for p in at_default if p.cap in ("default", "100%")]
            return (named or at_default)[0], True
        return max(points, key=lambda p: p.limit_enforced_w), False


def sweeps(doc: RunDocument) -> list[Sweep]:
    """The document's cases grouped into sweeps, in the order the workloads first appear."""
    groups: dict[tuple[str, int], list[CaseEntry]] = {}
    for entry in doc.cases:
        groups.setdefault((workload_key(entry.case_id, entry.cap), entry.gpu_index), []).append(entry)
    result = []
    for (workload, gpu_index), entries in groups.items():
        points = tuple(sorted((SweepPoint.of(e) for e in entries), key=lambda p: (p.limit_enforced_w, p.cap)))
        result.append(Sweep(workload, doc.gpu_model, gpu_index, doc.backend, doc.simulated, points))
    return result
