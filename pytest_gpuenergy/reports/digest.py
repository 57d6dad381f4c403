"""What changed, first: the part of a comparison every report leads with.

A reader of a CI report asks "what got worse, by how much, and how sure is that" before
anything else (CodSpeed's pull-request comments answer it in their first lines). So every
report (terminal, Markdown, HTML) is built from one ``Digest``:

1. one line of counts: regressed, improved, inconclusive, unchanged, new, missing, skipped;
2. the changed cases only (regressions, then improvements, then ungated changes), each sorted
   by the size of its change, one row each with the verdict first, then the case, the cap, the
   metric that decided, old, new, the change and its interval;
3. everything else folded: the inconclusive cases with what would tell, the unchanged ones, the
   new and missing ones as counts with their list, skipped caps once per cap with the reason.

Names are short (the workload's parameters, ``alexnet-train``) with the full ids listed once.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ..gate.records import MISSING, NEW, THRESHOLD_ONLY, CaseComparison, Comparison, MetricChange
from ..gate.settings import threshold_label
from ..gate.verdicts import (
    CHANGED,
    DECREASE,
    IMPROVEMENT,
    INCONCLUSIVE,
    INCREASE,
    REGRESSION,
    UNCHANGED,
    UNDEFINED,
    interval_text,
    pct_text,
)
from ..metrics import METRIC_LABELS, METRIC_UNITS
from ..runs.records import RunDocument, model_label
from .numbers import cap_sort_key, column_cells, short_names, si
from .sweep import workload_key

SIM_MARK = " (sim)"
SIM_FOOTNOTE = "(sim): figures from the GPU simulator, not measured on a real GPU"
#: The counts line, in this order; ``changed`` only appears when nothing is gated.
COUNT_ORDER = (("regressed", REGRESSION), ("improved", IMPROVEMENT), ("changed", CHANGED),
               ("inconclusive", INCONCLUSIVE), ("unchanged", UNCHANGED), ("new", NEW), ("missing", MISSING),
               ("skipped", "skipped"))
_LEAD_RANK = {REGRESSION: 0, IMPROVEMENT: 1, CHANGED: 2}
_METRIC_VERDICTS = {REGRESSION: (REGRESSION,), IMPROVEMENT: (IMPROVEMENT,), CHANGED: (INCREASE, DECREASE),
                    INCONCLUSIVE: (INCONCLUSIVE,)}
#: The changes table's columns, shared by every report: verdict first.
CHANGE_COLUMNS = ("verdict", "test", "cap", "metric", "old", "new", "change", "interval")


@dataclass(frozen=True)
class Skipped:
    """A case the session skipped because its cap is outside the GPU's range."""

    test: str
    cap: str
    reason: str


def skipped_caps(doc: RunDocument | None) -> list[Skipped]:
    """The skipped caps a run document records (``options.skipped``; absent in older documents)."""
    if doc is None:
        return []
    found = []
    for item in doc.options.get("skipped") or []:
        if isinstance(item, dict) and all(isinstance(item.get(k), str) for k in ("test", "cap", "reason")):
            found.append(Skipped(item["test"], item["cap"], item["reason"]))
    return found


def skipped_groups(skipped: Sequence[Skipped]) -> list[tuple[str, str, list[str]]]:
    """(cap, reason, tests) once per cap and reason, caps in value order: a gap said once."""
    groups: dict[tuple[str, str], list[str]] = {}
    for item in skipped:
        groups.setdefault((item.cap, _general_reason(item.reason)), []).append(item.test)
    return [(cap, reason, tests) for (cap, reason), tests in sorted(groups.items(), key=lambda kv: cap_sort_key(kv[0][0]))]


def _general_reason(reason: str) -> str:
    """pytest's ``Skipped: `` prefix off, so that every test's identical reason groups."""
    return reason.removeprefix("Skipped: ").strip()


@dataclass(frozen=True)
class Row:
    """One case in a table of changes: the metric that decides its verdict, and the others that agree."""

    case: CaseComparison
    metric: MetricChange
    also: tuple[MetricChange, ...]
    name: str

    @property
    def size(self) -> float:
        change = self.metric.change_pct
        return abs(change) if change is not None and math.isfinite(change) else 0.0

    def cells(self) -> dict[str, str]:
        """The row as text, by ``CHANGE_COLUMNS``."""
        metric, unit = self.metric, METRIC_UNITS[self.metric.metric]
        labels = [metric.label] + [m.label for m in self.also]
        return {
            "verdict": verdict_word(self.case), "test": self.name, "cap": self.case.cap, "metric": ", ".join(labels),
            "old": si(metric.old_mean, unit), "new": si(metric.new_mean, unit),
            "change": "n/a" if metric.change_pct is None else pct_text(metric.change_pct),
            "interval": interval_cell(metric),
        }


def interval_cell(change: MetricChange) -> str:
    """``[+20.1, +29.7]``; ``(n=1)`` without a test."""
    if change.method == THRESHOLD_ONLY or change.ci_low_pct is None or change.ci_high_pct is None:
        return f"(n={min(change.old_n, change.new_n)})"
    return interval_text(change.ci_low_pct, change.ci_high_pct)


def verdict_word(case: CaseComparison) -> str:
    """``REGRESSION`` (shouted: it fails the job), ``improved``, ``changed``, ``inconclusive``, ..."""
    return {REGRESSION: "REGRESSION", IMPROVEMENT: "improved"}.get(case.verdict, case.verdict)


@dataclass(frozen=True)
class Digest:
    """A comparison arranged for reading: counts, the changed rows, and what is folded."""

    comparison: Comparison
    changed: tuple[Row, ...]
    inconclusive: tuple[Row, ...]
    unchanged: tuple[CaseComparison, ...]
    new: tuple[CaseComparison, ...]
    missing: tuple[CaseComparison, ...]
    skipped: tuple[Skipped, ...]
    names: dict[str, str] = field(default_factory=dict)    # workload id -> short name

    def counts(self) -> list[tuple[str, int]]:
        """(word, count) in ``COUNT_ORDER``; ``changed`` only when there are such cases."""
        verdicts = self.comparison.counts()
        out = []
        for word, key in COUNT_ORDER:
            count = len(self.skipped) if key == "skipped" else verdicts.get(key, 0)
            if key != CHANGED or count:
                out.append((word, count))
        return out

    def counts_text(self) -> str:
        return ", ".join(f"{count} {word}" for word, count in self.counts())

    @property
    def outcome(self) -> str:
        """``FAILED``, ``passed``, or ``reported`` when nothing is gated."""
        if self.comparison.failed:
            return "FAILED"
        return "passed" if self.comparison.thresholds else "reported"

    def name(self, case: CaseComparison) -> str:
        return self.names.get(workload_key(case.case_id, case.cap), case.case_id)

    def hint(self) -> str:
        """What would turn the inconclusive cases into decisions (the most common advice)."""
        hints = [r.metric.hint for r in self.inconclusive if r.metric.hint]
        return max(set(hints), key=hints.count) if hints else ""

    def full_ids(self) -> list[tuple[str, str]]:
        """(short name, full workload id) for every name that is not the id itself."""
        return sorted(((short, full) for full, short in self.names.items() if short != full), key=lambda p: p[0])


def digest(comparison: Comparison, skipped: Sequence[Skipped] = ()) -> Digest:
    """Arrange ``comparison`` for reading (see the module docstring)."""
    names = short_names(workload_key(c.case_id, c.cap) for c in comparison.cases)
    names.update(short_names_for_skipped(skipped, names))

    def name(case: CaseComparison) -> str:
        return names[workload_key(case.case_id, case.cap)]

    lead = _by_size([_row(c, name(c)) for c in comparison.cases if c.verdict in _LEAD_RANK])
    unsure = _by_size([_row(c, name(c)) for c in comparison.cases if c.verdict == INCONCLUSIVE])
    ordered = sorted(comparison.cases, key=lambda c: (name(c), cap_sort_key(c.cap, _limit(c))))
    return Digest(
        comparison, tuple(lead), tuple(unsure),
        tuple(c for c in ordered if c.verdict in (UNCHANGED, UNDEFINED)),
        tuple(c for c in ordered if c.status == NEW), tuple(c for c in ordered if c.status == MISSING),
        tuple(skipped), names,
    )


def _by_size(rows: list[Row]) -> list[Row]:
    """Regressions, then improvements, then other changes; within each the workloads by their largest
    change, and a workload's caps together in value order (40 % before 100 %)."""
    largest: dict[tuple[str, str], float] = {}
    for row in rows:
        key = (row.case.verdict, row.name)
        largest[key] = max(largest.get(key, 0.0), row.size)
    return sorted(rows, key=lambda r: (_LEAD_RANK.get(r.case.verdict, 9), -largest[(r.case.verdict, r.name)], r.name,
                                       cap_sort_key(r.case.cap, _limit(r.case))))


def short_names_for_skipped(skipped: Sequence[Skipped], known: dict[str, str]) -> dict[str, str]:
    """Short names for skipped tests' workloads not compared (every cap of them skipped)."""
    extra = {workload_key(s.test, s.cap) for s in skipped} - set(known)
    return short_names(extra) if extra else {}


def _limit(case: CaseComparison) -> float | None:
    entry = case.new or case.old
    return entry.limit_enforced_w if entry is not None else None


def _row(case: CaseComparison, name: str) -> Row:
    """The deciding metric is the first (ETS, T, EDP) with the case's verdict; gated ones first."""
    wanted = _METRIC_VERDICTS.get(case.verdict, ())
    agreeing = [m for m in case.metrics if m.verdict in wanted and (m.gated or case.verdict == CHANGED)]
    agreeing = agreeing or [m for m in case.metrics if m.verdict in wanted] or list(case.metrics)
    return Row(case, agreeing[0], tuple(agreeing[1:]), name)    # metrics come in METRICS order: ETS first


# -- words shared by every report ------------------------------------------------------------------

def title_text(comparison: Comparison) -> str:
    info = comparison.new_machine
    return model_label(info.gpu_model, info.backend, info.simulated)


def gate_text(comparison: Comparison) -> str:
    """What fails the gate, in words."""
    if not comparison.thresholds:
        return "no thresholds (--energy-fail): changes are reported, nothing fails"
    items = ", ".join(f"{threshold_label(m)} > {t:g} %" for m, t in comparison.thresholds.items())
    return f"regression when {items} and the increase is real at {100 * comparison.confidence:g} % confidence"


def method_text(comparison: Comparison) -> str:
    conf = f"{100 * comparison.confidence:g} %"
    return (f"change: new/old - 1 of the means; interval: one-sided {conf} confidence bounds of the change "
            f"(Welch's t on the log ratio of means); inconclusive: the interval is wider than the threshold, "
            f"the samples cannot tell; (n=1): too few repetitions for a test, threshold only")


def grouped_notes(comparison: Comparison, names: dict[str, str] | None = None) -> list[str]:
    """The comparison's notes, then each distinct case note once, with the cases it concerns."""
    groups: dict[str, list[str]] = {}
    for case in comparison.cases:
        label = f"{(names or {}).get(workload_key(case.case_id, case.cap), case.case_id)} {case.cap}"
        for note in case.notes:
            groups.setdefault(note, []).append(label)
    out = list(comparison.notes)
    for note, cases in groups.items():
        where = cases[0] if len(cases) == 1 else f"{len(cases)} cases" if len(cases) > 3 else ", ".join(cases)
        out.append(f"{note} ({where})")
    return out


def regression_details(comparison: Comparison) -> list[str]:
    """One line per regressed case: its full id (to rerun it) and each regressed metric's change."""
    lines = []
    ordered = sorted(comparison.regressions, key=lambda c: (workload_key(c.case_id, c.cap), cap_sort_key(c.cap, _limit(c))))
    for case in ordered:
        changes = ", ".join(f"{m.label} {pct_text(m.change_pct or 0.0)} {interval_cell(m)}" for m in case.regressed_metrics)
        lines.append(f"ENERGY REGRESSION {case.case_id} on GPU {case.gpu_index}: {changes}")
    return lines


def case_cells(case: CaseComparison, name: str) -> dict[str, str]:
    """A folded case as text: its name, cap, and each metric's new figure and change."""
    entry = case.new or case.old
    assert entry is not None
    summary = entry.summary
    cells: dict[str, Any] = {"verdict": case.verdict, "test": name, "cap": case.cap,
                             "GPU": f"{entry.gpu_index}{SIM_MARK if entry.simulated else ''}"}
    for metric, value in (("ets", summary.ets_j), ("time", summary.time_s), ("edp", summary.edp_js)):
        change = case.metric(metric)
        label = METRIC_LABELS[metric]
        cells[label] = si(value, METRIC_UNITS[metric])
        cells[f"{label} change"] = (case.status if change is None else
                                    "n/a" if change.change_pct is None else
                                    f"{pct_text(change.change_pct)} {interval_cell(change)}")
    return cells


def results_rows(doc: RunDocument) -> tuple[list[str], list[list[str]]]:
    """(header, rows) of a run's results: one row per case, caps in value order, one SI prefix per column."""
    names = short_names(workload_key(e.case_id, e.cap) for e in doc.cases)
    entries = sorted(doc.cases, key=lambda e: (names[workload_key(e.case_id, e.cap)],
                                               cap_sort_key(e.cap, e.limit_enforced_w)))
    header, columns = ["test", "cap", "GPU", "limit"], []
    for title, unit, values in (("ETS", "J", [e.summary.ets_j for e in entries]),
                                ("T", "s", [e.summary.time_s for e in entries]),
                                ("EDP", "J s", [e.summary.edp_js for e in entries]),
                                ("P", "W", [e.summary.mean_power_w for e in entries])):
        unit_text, cells = column_cells(values, unit)
        header.append(f"{title} {unit_text}".strip())
        columns.append(cells)
    header += ["n", "cv"]
    rows = []
    for i, e in enumerate(entries):
        s = e.summary
        rows.append([names[workload_key(e.case_id, e.cap)], e.cap, f"{e.gpu_index}{SIM_MARK if e.simulated else ''}",
                     f"{e.limit_enforced_w:g} W"] + [c[i] for c in columns]
                    + [str(s.n), f"{s.ets_cv * 100:.1f}%" if s.n > 1 else "-"])
    return header, rows
