"""Markdown for a CI job summary (GitHub's ``$GITHUB_STEP_SUMMARY``, GitLab's MR notes).

The comparison comes first because it is what decides the job; each run's full results and
its optimal caps follow, folded in ``<details>`` so the summary stays short. Test ids go in code
spans with ``|`` escaped, so parameter ids cannot break the tables.
"""

from __future__ import annotations

from typing import Sequence

from ..compare import Comparison, RunInfo
from ..storage import RunDocument, commit_text, model_label
from .comparison_table import (
    COMPARISON_HEADER, RUN_HEADER, comparison_rows, counts_text, gate_text, method_text, run_rows, title_text,
)
from .sweep import OPTIMISED, sweeps

SIM_WARNING = "> **Simulated**: these figures come from the GPU simulator, not from a real GPU."


def markdown_report(
    docs: Sequence[RunDocument] = (),
    comparison: Comparison | Sequence[Comparison] | None = None,
    *,
    title: str = "GPU energy",
) -> str:
    """The runs' results and the comparison(s), as one Markdown document."""
    comparisons = _as_list(comparison)
    lines = [f"## {title}", ""]
    if any(d.simulated for d in docs) or any(c.simulated for c in comparisons):
        lines += [SIM_WARNING, ""]
    for item in comparisons:
        lines += comparison_markdown(item)
    for doc in docs:
        lines += run_markdown(doc)
    return "\n".join(lines).rstrip() + "\n"


def comparison_markdown(comparison: Comparison) -> list[str]:
    lines = [f"### Comparison: {_text(title_text(comparison))}", ""]
    old, new = comparison.old_machine, comparison.new_machine
    lines += [f"Baseline {_run_ref(old) if old else 'none'} → this run {_run_ref(new)}", ""]
    if not comparison.comparable:
        return lines + [f"- **Not compared**: {_text(note)}" for note in comparison.notes] + [""]
    verdict = "**FAILED**" if comparison.failed else "**passed**"
    lines += [f"Gate {verdict}: {_text(counts_text(comparison))}. {_text(gate_text(comparison))}.", ""]
    if comparison.cases:
        lines += table(COMPARISON_HEADER, comparison_rows(comparison), code_columns=(0,))
        lines += ["", f"<sub>{_text(method_text(comparison))}</sub>", ""]
    notes = list(comparison.notes) + [f"{c.case_id} [{c.cap}]: {n}" for c in comparison.cases for n in c.notes]
    lines += [f"- {_text(note)}" for note in notes]
    return lines + ([""] if notes else [])


def run_markdown(doc: RunDocument) -> list[str]:
    lines = [f"### Results: {_text(model_label(doc.gpu_model, doc.backend, doc.simulated))}", ""]
    optima = optima_lines(doc)
    if optima:
        lines += ["Optimal caps (by mean, against the default limit):", ""] + optima + [""]
    lines += [f"<details><summary>All results of run <code>{_text(doc.run_id)}</code> ({len(doc.cases)} cases)</summary>", ""]
    lines += table(RUN_HEADER, run_rows(doc), code_columns=(0,))
    return lines + ["", "</details>", ""]


def optima_lines(doc: RunDocument) -> list[str]:
    """One bullet per workload swept over more than one cap: its energy- and EDP-optimal caps."""
    lines = []
    for sweep in sweeps(doc):
        if len(sweep.points) < 2:
            continue
        found = [sweep.optimum(metric) for metric in OPTIMISED]
        parts = [o.describe() for o in found if o is not None]
        if parts:
            lines.append(f"- {_code(sweep.workload)} (GPU {sweep.gpu_index}): {_text('; '.join(parts))}")
    return lines


def _run_ref(info: RunInfo) -> str:
    return f"{_code(info.run_id)} ({info.created_at:%Y-%m-%d %H:%M} UTC, {_text(commit_text(info.commit))})"


def table(header: Sequence[str], rows: Sequence[Sequence[str]], *, code_columns: Sequence[int] = ()) -> list[str]:
    """A GitHub-flavoured Markdown table; numeric-looking columns are right-aligned."""
    numeric = [i for i in range(len(header)) if rows and all(_numeric(r[i]) for r in rows)]
    align = ["---:" if i in numeric else "---" for i in range(len(header))]
    lines = ["| " + " | ".join(_text(h) for h in header) + " |", "| " + " | ".join(align) + " |"]
    for row in rows:
        cells = [_code(c) if i in code_columns else _text(c) for i, c in enumerate(row)]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def _numeric(cell: str) -> bool:
    return bool(cell) and (cell[0].isdigit() or cell[0] in "+-(") and cell not in ("-",)


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
