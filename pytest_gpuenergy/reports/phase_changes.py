"""Which phase changed: the part of a comparison that names it ("update: +30.2 % ETS").

A case whose phases (``energy_meter.phase``) are in both runs has one change per phase
(``gate.compare._phase_changes``). A phase that changed is news even where the case as a whole
did not move beyond its threshold (a 30 % heavier update is 2 % of a training step's ETS), so
every report lists them apart from the changed cases: regressions and improvements of
``phase.ets`` first, then the ungated increases and decreases, each sorted by size. Phases that
did not change (unchanged, or inconclusive because their bounds overlap) are not named.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..gate.records import CaseComparison, MetricChange
from ..gate.verdicts import DECREASE, IMPROVEMENT, INCREASE, REGRESSION, pct_text
from ..metrics import METRIC_LABELS, METRIC_UNITS
from .digest import Digest, interval_cell
from .numbers import si

#: The verdicts that name a phase as changed, in the order the reports list them.
CHANGED_PHASE = (REGRESSION, IMPROVEMENT, INCREASE, DECREASE)
#: The phase table's columns, shared by the Markdown and HTML reports.
PHASE_COLUMNS = ("verdict", "test", "cap", "phase", "old", "new", "change", "interval")
PHASE_HEADING = "phases that changed (each phase's ETS per call; decided with the fit's bounds)"


@dataclass(frozen=True)
class PhaseRow:
    """One phase of one case that changed."""

    case: CaseComparison
    change: MetricChange
    name: str                      # the case's short name

    def cells(self) -> dict[str, str]:
        """The row as text, by ``PHASE_COLUMNS``."""
        change, unit = self.change, METRIC_UNITS[self.change.metric]
        verdict = "REGRESSION" if change.verdict == REGRESSION else change.verdict
        return {"verdict": verdict, "test": self.name, "cap": self.case.cap, "phase": change.phase,
                "old": si(change.old_mean, unit), "new": si(change.new_mean, unit),
                "change": phase_change_text(change).split(": ", 1)[1], "interval": interval_cell(change)}


def phase_change_text(change: MetricChange) -> str:
    """``update: +30.2 % ETS``: the phase, its change, the figure."""
    size = "n/a" if change.change_pct is None else pct_text(change.change_pct)
    return f"{change.phase}: {size} {METRIC_LABELS[change.metric]}"


def phase_rows(report: Digest) -> list[PhaseRow]:
    """Every changed phase of the compared cases: by verdict (``CHANGED_PHASE``), then the largest first."""
    rows = [PhaseRow(case, change, report.name(case)) for case in report.comparison.cases
            for change in case.phases if change.verdict in CHANGED_PHASE]
    return sorted(rows, key=lambda r: (CHANGED_PHASE.index(r.change.verdict), -_size(r.change), r.name, r.change.phase))


def compared_phases(report: Digest) -> int:
    """How many cases had their phases compared (both runs marked phases)."""
    return sum(1 for case in report.comparison.cases if case.phases)


def phase_lines(report: Digest) -> list[str]:
    """A heading and one indented line per case whose phases changed: ``  name [cap]: update: +30.2 % ETS
    [+28.1, +32.4] (increase)``; without any, one line saying the phases were compared (nothing where no
    case has phases)."""
    rows = phase_rows(report)
    compared = compared_phases(report)
    if not rows:
        return [f"phases compared in {compared} case{'s' if compared != 1 else ''}: none changed"] if compared else []
    by_case: dict[int, list[PhaseRow]] = {}
    for row in rows:
        by_case.setdefault(id(row.case), []).append(row)
    lines = [PHASE_HEADING + ":"]
    for group in by_case.values():
        first = group[0]
        changes = "; ".join(f"{phase_change_text(r.change)} {interval_cell(r.change)} ({r.change.verdict})" for r in group)
        lines.append(f"  {first.name} [{first.case.cap}]: {changes}")
    return lines


def _size(change: MetricChange) -> float:
    value = change.change_pct
    return abs(value) if value is not None and math.isfinite(value) else 0.0
