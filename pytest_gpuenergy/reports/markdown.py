"""Markdown for a CI job summary (GitHub's ``$GITHUB_STEP_SUMMARY``, GitLab's MR notes).

The first screen answers "did it pass, what got worse, by how much": the outcome with one line
of counts, then only the changed cases sorted by the size of their change, verdict first (a
GitHub summary is about 900 px wide: the columns that matter must come first). Everything else
is folded in ``<details>``: inconclusive cases with what would tell, unchanged, new, missing,
skipped caps (once per cap), the full test ids, the notes, and each run's results with its
optimal caps. Test names go in code spans with ``|`` escaped, so parameter ids cannot break
the tables.
"""

from __future__ import annotations

from collections.abc import Sequence
from html import escape

from ..gate.records import Comparison, RunInfo
from ..runs.records import RunDocument, commit_text, model_label
from .digest import (
    CHANGE_COLUMNS,
    Digest,
    case_cells,
    digest,
    gate_text,
    grouped_notes,
    method_text,
    results_rows,
    skipped_caps,
    skipped_groups,
    title_text,
)
from .numbers import run_energy_text, short_names
from .phase_changes import PHASE_COLUMNS, PHASE_HEADING, compared_phases, phase_rows
from .sweep import OPTIMISED, sweeps

SIM_WARNING = "> **Simulated**: these figures come from the GPU simulator, not from a real GPU."
_RIGHT = {"old", "new", "change"}


def markdown_report(
    docs: Sequence[RunDocument] = (),
    comparison: Comparison | Sequence[Comparison] | None = None,
    *,
    title: str = "GPU energy",
) -> str:
    """The comparison(s) first, then the runs' results folded, as one Markdown document."""
    comparisons = _as_list(comparison)
    simulated = any(d.simulated for d in docs) or any(c.simulated for c in comparisons)
    lines = [f"## {title}{' (simulated)' if simulated else ''}", ""]
    if simulated:
        lines += [SIM_WARNING, ""]
    by_run = {doc.run_id: doc for doc in docs}
    for item in comparisons:
        lines += comparison_markdown(item, skipped_caps(by_run.get(item.new_run_id)))
    for doc in docs:
        lines += run_markdown(doc, folded=bool(comparisons))
    if not docs and not comparisons:
        lines += ["Nothing was measured in this session.", ""]
    return "\n".join(lines).rstrip() + "\n"


def comparison_markdown(comparison: Comparison, skipped: Sequence = ()) -> list[str]:
    report = digest(comparison, skipped)
    heading = f"### {_outcome(report)}: {_text(title_text(comparison))}"
    if not comparison.comparable:
        return [f"### Not compared: {_text(title_text(comparison))}", ""] + \
            [f"- {_text(note)}" for note in comparison.notes] + [""]
    lines = [heading, "", _counts_line(report), ""]
    if report.changed:
        rows = [row.cells() for row in report.changed]
        lines += table(CHANGE_COLUMNS, [[r[c] for c in CHANGE_COLUMNS] for r in rows], code_columns=(1,),
                       right=[i for i, c in enumerate(CHANGE_COLUMNS) if c in _RIGHT], bold_columns=(0,))
        lines.append("")
    elif comparison.cases:
        lines += ["No case changed beyond its threshold.", ""]
    lines += phases_markdown(report)
    lines += _folded(report)
    lines += [_context(report), ""]
    return lines


def phases_markdown(report: Digest) -> list[str]:
    """The phases that changed (``energy_meter.phase``), a row each; a line when none did."""
    rows = phase_rows(report)
    if not rows:
        compared = compared_phases(report)
        return [f"Phases compared in {compared} case{'s' if compared != 1 else ''}: none changed.", ""] if compared else []
    cells = [row.cells() for row in rows]
    return [f"**{PHASE_HEADING[0].upper()}{PHASE_HEADING[1:]}**", ""] + table(
        PHASE_COLUMNS, [[c[h] for h in PHASE_COLUMNS] for c in cells], code_columns=(1,),
        right=[i for i, c in enumerate(PHASE_COLUMNS) if c in _RIGHT], bold_columns=(0,)) + [""]


def _outcome(report: Digest) -> str:
    return {"FAILED": "❌ Gate FAILED", "passed": "✅ Gate passed"}.get(report.outcome, "Comparison")


def _counts_line(report: Digest) -> str:
    parts = []
    for word, count in report.counts():
        text = f"{count} {word}"
        parts.append(f"**{text}**" if count and word in ("regressed", "inconclusive") else text)
    return " · ".join(parts)


def _folded(report: Digest) -> list[str]:
    """Everything after the changes, each part in its own ``<details>``."""
    out: list[str] = []
    if report.inconclusive:
        rows = [[r.cells()[c] for c in CHANGE_COLUMNS] for r in report.inconclusive]
        out += _details(f"{len(report.inconclusive)} inconclusive: cannot tell (the interval is wider than the "
                        f"threshold); {report.hint()}",
                        table(CHANGE_COLUMNS, rows, code_columns=(1,),
                              right=[i for i, c in enumerate(CHANGE_COLUMNS) if c in _RIGHT]))
    for word, cases in (("unchanged", report.unchanged), ("new (no baseline)", report.new),
                        ("missing from this run", report.missing)):
        if cases:
            cells = [case_cells(c, report.name(c)) for c in cases]
            header = list(cells[0])
            out += _details(f"{len(cases)} {word}", table(header, [[c[h] for h in header] for c in cells],
                                                          code_columns=(1,)))
    groups = skipped_groups(report.skipped)
    if groups:
        body = [f"- cap {_text(cap)}, {len(tests)} test{'s' if len(tests) != 1 else ''}: {_text(reason)}"
                for cap, reason, tests in groups]
        out += _details(f"{len(report.skipped)} skipped (caps outside the GPU's range)", body)
    ids = report.full_ids()
    if ids:
        out += _details("Test ids", [f"- {_code(short)}: {_code(full)}" for short, full in ids])
    return out


def _context(report: Digest) -> str:
    comparison = report.comparison
    old, new = comparison.old_machine, comparison.new_machine
    notes = "".join(f"<br>{_text(n)}" for n in grouped_notes(comparison, report.names))
    return (f"<sub>Baseline {_run_ref(old) if old else 'none'} → this run {_run_ref(new)}. "
            f"Gate: {_text(gate_text(comparison))}. {_text(method_text(comparison))}.{notes}</sub>")


def run_markdown(doc: RunDocument, *, folded: bool = False) -> list[str]:
    """A run's optimal caps and every result; folded whole when a comparison leads the report."""
    label = _text(model_label(doc.gpu_model, doc.backend, doc.simulated))
    body = []
    optima = optima_lines(doc)
    if optima:
        body += ["Optimal caps (by mean, against the default limit):", ""] + optima + [""]
    body += ["Results (ETS, T and EDP per call):", ""] + results_table(doc) + ["", f"{_text(run_energy_text(doc))}."]
    if folded:
        return _details(f"Results of run {_text(doc.run_id)}: {label}, {len(doc.cases)} cases", body)
    return [f"### Results: {label}", ""] + body + [""]


def results_table(doc: RunDocument) -> list[str]:
    """One row per case, caps in value order, each figure column with one SI prefix."""
    header, rows = results_rows(doc)
    return table(header, rows, code_columns=(0,), right=list(range(3, len(header))))


def optima_lines(doc: RunDocument) -> list[str]:
    """One bullet per workload swept over more than one cap: its optimal caps and their caveats."""
    names = short_names(s.workload for s in sweeps(doc))
    lines = []
    for sweep in sweeps(doc):
        if len(sweep.points) < 2:
            continue
        found = [sweep.optimum(metric) for metric in OPTIMISED]
        parts = [o.describe() for o in found if o is not None] + [s.describe() for s in sweep.suspects()]
        if parts:
            lines.append(f"- {_code(names[sweep.workload])} (GPU {sweep.gpu_index}): {_text('; '.join(parts))}")
    return lines


def _details(summary: str, body: Sequence[str]) -> list[str]:
    return [f"<details><summary>{escape(summary)}</summary>", ""] + list(body) + ["", "</details>", ""]


def _run_ref(info: RunInfo) -> str:
    return f"{_code(info.run_id)} ({info.created_at:%Y-%m-%d %H:%M} UTC, {_text(commit_text(info.commit))})"


def table(header: Sequence[str], rows: Sequence[Sequence[str]], *, code_columns: Sequence[int] = (),
          right: Sequence[int] = (), bold_columns: Sequence[int] = ()) -> list[str]:
    """A GitHub-flavoured Markdown table."""
    align = ["---:" if i in right else "---" for i in range(len(header))]
    lines = ["| " + " | ".join(_text(h) for h in header) + " |", "| " + " | ".join(align) + " |"]
    for row in rows:
        cells = []
        for i, cell in enumerate(row):
            text = _code(cell) if i in code_columns else _text(cell)
            cells.append(f"**{text}**" if i in bold_columns and cell.isupper() else text)
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def _text(text: str) -> str:
    """Plain text safe in a table cell: no pipe, no HTML, no emphasis by accident."""
    out = str(text).replace("\\", "\\\\").replace("|", "\\|").replace("<", "&lt;").replace(">", "&gt;")
    for char in "*_`[]":
        out = out.replace(char, "\\" + char)
    return out.replace("\n", " ")


def _code(text: str) -> str:
    """A code span that holds any test id (backticks inside get a longer fence, pipes escaped)."""
    text = str(text).replace("|", "\\|").replace("\n", " ")
    fence = "``" if "`" in text else "`"
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def _as_list(comparison: Comparison | Sequence[Comparison] | None) -> list[Comparison]:
    if comparison is None:
        return []
    if isinstance(comparison, Comparison):
        return [comparison]
    return list(comparison)
