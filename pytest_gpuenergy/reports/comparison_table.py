"""The tables of a comparison and of a saved run, as rows of text shared by every report.

The terminal prints them with ``format_table``; Markdown and HTML take the same rows, so a
figure reads the same wherever it is shown. Anything simulated is marked ``(sim)`` in the GPU
column and explained under the table.
"""

from __future__ import annotations

from typing import Sequence

from ..compare import (
    CHANGED, COMPARED, IMPROVEMENT, METRIC_LABELS, METRIC_UNITS, METRICS, MISSING, NEW, REGRESSION, THRESHOLD_ONLY, UNDEFINED,
    CaseComparison, Comparison, MetricChange,
)
from ..storage import CaseEntry, RunDocument, model_label, with_origin
from .terminal import format_table

SIM_MARK = " (sim)"
SIM_FOOTNOTE = "(sim): figures from the GPU simulator, not measured on a real GPU"
COMPARISON_HEADER = ["test", "cap", "GPU", "ETS J", "ETS change", "T s", "T change", "EDP J s", "EDP change", "verdict"]
COMPARISON_NUMERIC = (3, 4, 5, 6, 7, 8)
RUN_HEADER = ["test", "cap", "GPU", "limit W", "ETS J", "T s", "EDP J s", "P W", "n", "cv"]
RUN_NUMERIC = (3, 4, 5, 6, 7, 8, 9)


def num(value: float | None) -> str:
    """Four significant digits, as the terminal results table shows figures."""
    return "-" if value is None or value != value else f"{value:.4g}"


def change_cell(change: MetricChange | None) -> str:
    """``+30.0% [+25.1, +35.2]``; ``+30.0% (n=1)`` without a test; ``n/a`` without a ratio."""
    if change is None or change.change_pct is None:
        return "n/a" if change is not None and change.verdict == UNDEFINED else "-"
    text = f"{change.change_pct:+.1f}%"
    if change.method == THRESHOLD_ONLY or change.ci_low_pct is None or change.ci_high_pct is None:
        return f"{text} (n={min(change.old_n, change.new_n)})"
    return f"{text} [{change.ci_low_pct:+.1f}, {change.ci_high_pct:+.1f}]"


def verdict_cell(case: CaseComparison, *, shout: bool = True) -> str:
    """``REGRESSION (ETS, EDP)``, ``improvement (T)``, ``noise``, ``new``, ``missing``."""
    if case.status != COMPARED:
        return case.verdict
    if case.verdict in (REGRESSION, IMPROVEMENT, CHANGED):
        wanted = {REGRESSION: (REGRESSION,), IMPROVEMENT: (IMPROVEMENT,), CHANGED: ("increase", "decrease")}[case.verdict]
        which = ", ".join(m.label for m in case.metrics if m.verdict in wanted)
        word = case.verdict.upper() if shout and case.verdict == REGRESSION else case.verdict
        return f"{word} ({which})"
    return case.verdict


def gpu_cell(entry: CaseEntry) -> str:
    return f"{entry.gpu_index}{SIM_MARK if entry.simulated else ''}"


def comparison_rows(comparison: Comparison) -> list[list[str]]:
    """One row per case: the new means, each metric's change with its bounds, the verdict."""
    rows = []
    for case in comparison.cases:
        entry = case.new or case.old
        assert entry is not None
        summary = entry.summary
        values = [summary.ets_j, summary.time_s, summary.edp_js]
        cells = [case.case_id, case.cap, gpu_cell(entry)]
        for metric, value in zip(METRICS, values):
            shown = num(value) if case.status != MISSING else f"({num(value)})"
            cells += [shown, _status_or_change(case, metric)]
        cells.append(verdict_cell(case))
        rows.append(cells)
    return rows


def _status_or_change(case: CaseComparison, metric: str) -> str:
    if case.status == NEW:
        return "new"
    if case.status == MISSING:
        return "missing"
    return change_cell(case.metric(metric))


def run_rows(doc: RunDocument) -> list[list[str]]:
    """One row per case of a saved run: limit, ETS, T, EDP, mean power, repetitions, spread."""
    rows = []
    for entry in doc.cases:
        summary = entry.summary
        rows.append([
            entry.case_id, entry.cap, gpu_cell(entry), num(entry.limit_enforced_w),
            num(summary.ets_j), num(summary.time_s), num(summary.edp_js), num(summary.mean_power_w),
            str(summary.n), f"{summary.ets_cv * 100:.1f}%" if summary.n > 1 else "-",
        ])
    return rows


def gate_text(comparison: Comparison) -> str:
    """What fails the gate, in words."""
    if not comparison.thresholds:
        return "no thresholds (--energy-fail): changes are reported, nothing fails"
    items = ", ".join(f"{METRIC_LABELS[m]} > {t:g} %" for m, t in comparison.thresholds.items())
    return f"regression when {items} and the increase is real at {100 * comparison.confidence:g} % confidence"


def method_text(comparison: Comparison) -> str:
    conf = f"{100 * comparison.confidence:g} %"
    return (f"change: new/old - 1 of the means; [low, high]: one-sided {conf} confidence bounds of the change "
            f"(Welch's t on the log ratio of means); (n=1): too few repetitions for a test, threshold only")


def counts_text(comparison: Comparison) -> str:
    counts = comparison.counts()
    order = (REGRESSION, IMPROVEMENT, CHANGED, "noise", NEW, MISSING)
    parts = [f"{counts[v]} {_plural(v, counts[v])}" for v in order if counts.get(v)]
    return ", ".join(parts) if parts else "no cases"


def _plural(verdict: str, count: int) -> str:
    if count == 1 or verdict in ("noise", NEW, MISSING, CHANGED):
        return verdict
    return verdict + "s"


def title_text(comparison: Comparison) -> str:
    info = comparison.new_machine
    return model_label(info.gpu_model, info.backend, info.simulated)


def comparison_lines(comparison: Comparison) -> list[str]:
    """The comparison for the terminal: which runs, the gate, the table, notes and the outcome."""
    lines = [f"energy comparison: {title_text(comparison)}"]
    if comparison.old_machine is not None:
        lines.append(f"  baseline: {comparison.old_machine.describe()}")
    lines.append(f"  this run: {comparison.new_machine.describe()}")
    if not comparison.comparable:
        return lines + [f"  note: {note}" for note in comparison.notes]
    lines.append(f"  gate: {gate_text(comparison)}")
    if comparison.cases:
        lines += format_table(COMPARISON_HEADER, comparison_rows(comparison), right=COMPARISON_NUMERIC)
        lines.append(method_text(comparison))
    if any(case.simulated for case in comparison.cases):
        lines.append(SIM_FOOTNOTE)
    lines += [f"note: {note}" for note in comparison.notes]
    for case in comparison.cases:
        lines += [f"note: {case.case_id} [{case.cap}]: {note}" for note in case.notes]
    lines.append(f"result: {counts_text(comparison)}")
    lines += regression_lines(comparison)
    return lines


def regression_lines(comparison: Comparison) -> list[str]:
    """One line per regressed metric: the case, the GPU, the change with its bounds and why."""
    lines = []
    for case in comparison.regressions:
        gpu = with_origin(case.gpu_name, case.simulated)
        for change in case.regressed_metrics:
            lines.append(
                f"ENERGY REGRESSION {case.case_id} at cap {case.cap} on GPU {case.gpu_index} {gpu}: {change.label} {num(change.old_mean)} -> {num(change.new_mean)} "
                f"{METRIC_UNITS[change.metric]}, {change.reason}"
            )
    return lines


def run_lines(doc: RunDocument) -> list[str]:
    """A saved run as a terminal table (as ``gpuenergy runs`` shows its cases)."""
    lines = [f"run {doc.describe()}"] + format_table(RUN_HEADER, run_rows(doc), right=RUN_NUMERIC)
    if doc.simulated:
        lines.append(SIM_FOOTNOTE)
    return lines


def tables_for(comparisons: Sequence[Comparison]) -> list[str]:
    """Several comparisons (one per GPU model) one after the other, a blank line between."""
    lines: list[str] = []
    for comparison in comparisons:
        if lines:
            lines.append("")
        lines += comparison_lines(comparison)
    return lines
