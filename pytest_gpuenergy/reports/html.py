"""A self-contained HTML page that leads with what changed, then shows the sweeps.

The page is one file with inline CSS and inline SVG (matplotlib's, see ``plots.py``) and no
script, so it opens from a CI artifact, an e-mail or an air-gapped machine: nothing is fetched.
Its order is a reader's: the gate's outcome and one line of counts; the changed cases, verdict
first and sorted by the size of their change, each linking to its plot; everything else folded
(inconclusive, unchanged, new, missing, skipped caps); then an overview (a heatmap of every
workload and cap, and a Pareto view per workload) and the small multiples of each sweep with
its optimal caps and their caveats. It fits any width from a phone's 420 px up: tables that
cannot fit scroll inside their box, the changes table turns into cards, plots fill their column.
Simulated figures say so in the title, a banner, each plot and each table.
"""

from __future__ import annotations

from collections.abc import Sequence
from html import escape

from ..gate.records import Comparison
from ..runs.records import RunDocument, model_label
from ..runs.store import slug
from .digest import (
    CHANGE_COLUMNS,
    SIM_FOOTNOTE,
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
from .numbers import cap_sort_key, run_energy_text, short_names
from .phase_changes import PHASE_COLUMNS, PHASE_HEADING, compared_phases, phase_rows
from .plots import heatmap_svg, legend_svg, pareto_svg, phase_shares_svg, sweep_svg
from .sweep import OPTIMISED, Sweep, sweeps, workload_key

_CSS = """
*{box-sizing:border-box}
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0 auto;padding:16px 20px;max-width:1600px;
color:#1d1d1f;background:#fff;line-height:1.4;overflow-wrap:anywhere}
h1{font-size:1.45em;margin:0 0 .3em}h2{font-size:1.2em;margin:1.4em 0 .4em;border-bottom:1px solid #ddd}
h3{font-size:1.02em;margin:1em 0 .3em}
.sim{background:#fff4d6;border:1px solid #b7791f;padding:6px 10px;border-radius:6px;font-weight:600}
.outcome{font-size:1.15em;margin:.4em 0}.fail{color:#b3261e;font-weight:700}.pass{color:#1b6e34;font-weight:700}
.counts{margin:.2em 0 .7em}.counts b{color:#b3261e}
.scroll{overflow-x:auto;max-width:100%}
table{border-collapse:collapse;font-size:.86em;margin:.4em 0}th,td{border:1px solid #d0d0d0;padding:3px 7px;vertical-align:top}
th{background:#f4f4f4;text-align:left}td.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
code{font-family:ui-monospace,Menlo,Consolas,monospace;font-size:.95em}
tr.regression td{background:#fde2e1}tr.improvement td{background:#e3f6e5}tr.inconclusive td{background:#fff8e1}
td.verdict{font-weight:700;white-space:nowrap}
details{margin:.35em 0}summary{cursor:pointer;font-weight:600}
.note{color:#4a4a4a;font-size:.9em}
.grid{display:grid;grid-template-columns:repeat(auto-fill,minmax(300px,1fr));gap:12px}
.grid.pareto{grid-template-columns:repeat(auto-fill,minmax(220px,1fr))}
.card{border:1px solid #e3e3e3;border-radius:6px;padding:6px;min-width:0}
.card p{margin:.3em 0;font-size:.85em}
svg.plot,svg.legend-plot{display:block;width:100%;height:auto}
svg.legend-plot{max-width:760px}
svg.plot *,svg.legend-plot *{stroke-linejoin:round;stroke-linecap:butt}
.warn{color:#b3261e;font-weight:600}
@media (max-width:640px){
 body{padding:10px}
 table.changes thead{display:none}table.changes,table.changes tbody,table.changes tr{display:block;width:100%}
 table.changes tr{border:1px solid #d0d0d0;margin:0 0 8px;padding:4px}
 table.changes td{display:inline-block;border:0;padding:1px 6px 1px 0;background:none!important}
 table.changes tr.regression{background:#fde2e1}table.changes tr.improvement{background:#e3f6e5}
 table.changes tr.inconclusive{background:#fff8e1}
 table.changes td[data-label]::before{content:attr(data-label) ": ";color:#4a4a4a;font-weight:400}
}
"""


def html_report(
    docs: Sequence[RunDocument] = (),
    comparison: Comparison | Sequence[Comparison] | None = None,
    *,
    baselines: Sequence[RunDocument] = (),
    title: str = "GPU energy report",
) -> str:
    """The whole page as a string; ``baselines`` are drawn behind the sweeps of the same model."""
    comparisons = [comparison] if isinstance(comparison, Comparison) else list(comparison or [])
    simulated = any(d.simulated for d in docs) or any(c.simulated for c in comparisons)
    page_title = f"{title} (simulated)" if simulated else title
    body = [f"<h1>{escape(page_title)}</h1>"]
    if simulated:
        body.append('<p class="sim">SIMULATED: figures marked simulated come from the pytest-gpuenergy GPU '
                    'simulator, not from a real GPU. They are never compared with real measurements.</p>')
    plot_ids = {(doc.run_id, s.workload, s.gpu_index): _plot_id(doc, s) for doc in docs for s in sweeps(doc)}
    by_run = {doc.run_id: doc for doc in docs}
    digests = [digest(c, skipped_caps(by_run.get(c.new_run_id))) for c in comparisons]
    for report in digests:
        body.append(comparison_section(report, plot_ids))
    if docs:
        body.append(overview_section(docs, digests))
    for doc in docs:
        body.append(run_section(doc, _baseline_for(doc, baselines), _regressed(digests, doc)))
    if not docs and not comparisons:
        body.append('<p class="note">Nothing to show: no run and no comparison.</p>')
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{escape(page_title)}</title><style>{_CSS}</style></head>\n<body>\n"
        + "\n".join(body) + "\n</body></html>\n"
    )


def _plot_id(doc: RunDocument, sweep: Sweep) -> str:
    return "plot-" + slug(f"{doc.gpu_model}-{doc.backend}-{sweep.gpu_index}-{sweep.workload}")


def _baseline_for(doc: RunDocument, baselines: Sequence[RunDocument]) -> RunDocument | None:
    same = [b for b in baselines if (b.backend, b.gpu_model, b.simulated) == (doc.backend, doc.gpu_model, doc.simulated)]
    return same[-1] if same else None


def _regressed(digests: Sequence[Digest], doc: RunDocument) -> set[tuple[str, str, int]]:
    """(workload, cap, GPU index) of the regressed cases of ``doc``."""
    return {(workload_key(c.case_id, c.cap), c.cap, c.gpu_index)
            for d in digests if d.comparison.new_run_id == doc.run_id for c in d.comparison.regressions}


# -- the comparison --------------------------------------------------------------------------------

def comparison_section(report: Digest, plot_ids: dict[tuple[str, str, int], str]) -> str:
    comparison = report.comparison
    parts = [f"<section class=\"comparison\"><h2>Comparison: {escape(title_text(comparison))}</h2>"]
    if not comparison.comparable:
        parts += [f"<p class=\"fail\">Not compared: {escape(note)}</p>" for note in comparison.notes]
        return "".join(parts) + "</section>"
    outcome = {"FAILED": '<span class="fail">Gate FAILED</span>', "passed": '<span class="pass">Gate passed</span>'}
    parts.append(f"<p class=\"outcome\">{outcome.get(report.outcome, 'Changes reported (nothing gated)')}</p>")
    counts = " · ".join(f"<b>{n} {w}</b>" if n and w in ("regressed", "inconclusive") else f"{n} {w}"
                        for w, n in report.counts())
    parts.append(f"<p class=\"counts\">{counts}</p>")
    if report.changed:
        parts.append(_changes_table(report, report.changed, plot_ids))
    elif comparison.cases:
        parts.append("<p>No case changed beyond its threshold.</p>")
    parts.append(_phases_table(report))
    parts.append(_folded(report, plot_ids))
    parts.append(_context(report))
    return "".join(parts) + "</section>"


def _row_cells(cells: dict[str, str], columns: Sequence[str], case_id: str) -> list[str]:
    """A changes table's cells: the test's name carries its whole case id, figures align as numbers."""
    out = []
    for column in columns:
        text = escape(cells[column])
        if column == "test":
            text = f'<code title="{escape(case_id)}">{text}</code>'
        css = "verdict" if column == "verdict" else "num" if column in ("old", "new", "change", "interval") else ""
        out.append(f'<td class="{css}" data-label="{column}">{text}</td>')
    return out


def _changes_table(report: Digest, rows: Sequence, plot_ids: dict[tuple[str, str, int], str]) -> str:
    head = "".join(f"<th>{escape(c)}</th>" for c in CHANGE_COLUMNS) + "<th>plot</th>"
    body = []
    for row in rows:
        case = row.case
        out = _row_cells(row.cells(), CHANGE_COLUMNS, case.case_id)
        target = plot_ids.get((report.comparison.new_run_id, workload_key(case.case_id, case.cap), case.gpu_index))
        link = f'<a href="#{target}">plot</a>' if target else ""
        out.append(f"<td>{link}</td>")
        body.append(f'<tr class="{escape(case.verdict)}">{"".join(out)}</tr>')
    return f'<div class="scroll"><table class="changes"><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table></div>'


def _phases_table(report: Digest) -> str:
    """The phases that changed (``energy_meter.phase``), verdict first; a line when none did."""
    rows = phase_rows(report)
    if not rows:
        compared = compared_phases(report)
        return f"<p>Phases compared in {compared} case{'s' if compared != 1 else ''}: none changed.</p>" if compared else ""
    head = "".join(f"<th>{escape(c)}</th>" for c in PHASE_COLUMNS)
    body = []
    for row in rows:
        out = _row_cells(row.cells(), PHASE_COLUMNS, row.case.case_id)
        body.append(f'<tr class="{escape(row.change.verdict)}">{"".join(out)}</tr>')
    return (f"<h3>{escape(PHASE_HEADING[0].upper() + PHASE_HEADING[1:])}</h3>"
            f'<div class="scroll"><table class="changes"><thead><tr>{head}</tr></thead>'
            f'<tbody>{"".join(body)}</tbody></table></div>')


def _folded(report: Digest, plot_ids: dict[tuple[str, str, int], str]) -> str:
    parts = []
    if report.inconclusive:
        parts.append(_details(f"{len(report.inconclusive)} inconclusive: cannot tell (the interval is wider than the "
                              f"threshold); {report.hint()}", _changes_table(report, report.inconclusive, plot_ids)))
    for word, cases in (("unchanged", report.unchanged), ("new (no baseline)", report.new),
                        ("missing from this run", report.missing)):
        if cases:
            cells = [case_cells(c, report.name(c)) for c in cases]
            header = list(cells[0])
            rows = [[c[h] for h in header] for c in cells]
            parts.append(_details(f"{len(cases)} {word}", html_table(header, rows, numeric=range(4, len(header)))))
    groups = skipped_groups(report.skipped)
    if groups:
        items = "".join(f"<li>cap {escape(cap)}, {len(tests)} test{'s' if len(tests) != 1 else ''}: {escape(reason)}</li>"
                        for cap, reason, tests in groups)
        parts.append(_details(f"{len(report.skipped)} skipped (caps outside the GPU's range)", f"<ul>{items}</ul>"))
    ids = report.full_ids()
    if ids:
        items = "".join(f"<li><code>{escape(short)}</code>: <code>{escape(full)}</code></li>" for short, full in ids)
        parts.append(_details("Test ids", f"<ul class=\"note\">{items}</ul>"))
    return "".join(parts)


def _context(report: Digest) -> str:
    comparison = report.comparison
    lines = []
    if comparison.old_machine is not None:
        lines.append(f"Baseline: {escape(comparison.old_machine.describe())}")
    lines.append(f"This run: {escape(comparison.new_machine.describe())}")
    lines.append(f"Gate: {escape(gate_text(comparison))}")
    lines.append(escape(method_text(comparison)))
    if comparison.simulated:
        lines.append(escape(SIM_FOOTNOTE))
    notes = "".join(f"<li>{escape(n)}</li>" for n in grouped_notes(comparison, report.names))
    return f"<p class=\"note\">{'<br>'.join(lines)}</p>" + (f"<ul class=\"note\">{notes}</ul>" if notes else "")


def _details(summary: str, body: str) -> str:
    return f"<details><summary>{escape(summary)}</summary>{body}</details>"


# -- the overview ------------------------------------------------------------------------------------

def overview_section(docs: Sequence[RunDocument], digests: Sequence[Digest]) -> str:
    """A heatmap per run (workloads x caps) and a Pareto view per workload across GPU models."""
    parts = ["<section class=\"overview\"><h2>Overview</h2>"]
    names = short_names(s.workload for doc in docs for s in sweeps(doc))
    by_workload: dict[str, list[tuple[str, Sweep]]] = {}
    for doc in docs:
        found = sweeps(doc)
        caps = _caps(found)
        rows = [(names[s.workload] + (f" (GPU {s.gpu_index})" if s.gpu_index else ""), s.points) for s in found]
        outlined = {(names[w] + (f" (GPU {g})" if g else ""), cap) for w, cap, g in _regressed(digests, doc)}
        hatched = {(names[s.workload] + (f" (GPU {s.gpu_index})" if s.gpu_index else ""), x.point.cap)
                   for s in found for x in s.suspects()}
        label = model_label(doc.gpu_model, doc.backend, doc.simulated)
        if len(caps) > 1:
            parts.append(f"<h3>{escape(label)}: ETS against the default limit</h3>")
            parts.append('<div class="scroll">' + heatmap_svg(rows, caps, title=label, outlined=outlined, hatched=hatched)
                         + "</div>")
            parts.append('<p class="note">Each cell: ETS at that cap against the same workload at the default limit, '
                         'in per cent (negative: less energy). Black outline: a regressed case; red hatching: a suspect '
                         'figure (faster than at the default limit).</p>')
        for sweep in found:
            by_workload.setdefault(sweep.workload, []).append((label, sweep))
    pareto = [pareto_svg(names[w], series, element_id="pareto-" + slug(w)) for w, series in by_workload.items()
              if any(len(s.points) > 1 for _, s in series)]
    if pareto:
        parts.append("<h3>ETS against T per workload (Pareto view)</h3>")
        parts.append('<p class="note">Each point is a cap; filled points are caps no other cap beats in both energy '
                     'and time; the star is the default limit.</p>')
        parts.append('<div class="grid pareto">' + "".join(f'<div class="card">{svg}</div>' for svg in pareto) + "</div>")
    return "".join(parts) + "</section>"


def _caps(found: Sequence[Sweep]) -> list[str]:
    pairs = {(p.cap, p.limit_enforced_w) for s in found for p in s.points}
    return list(dict.fromkeys(cap for cap, _ in sorted(pairs, key=lambda c: cap_sort_key(*c))))


# -- the sweeps ------------------------------------------------------------------------------------

def run_section(doc: RunDocument, baseline: RunDocument | None = None,
                regressed: set[tuple[str, str, int]] | None = None) -> str:
    label = model_label(doc.gpu_model, doc.backend, doc.simulated)
    parts = [f"<section class=\"run\"><h2>Sweeps: {escape(label)}</h2>",
             f"<p class=\"note\">Run {escape(doc.describe())}</p>", legend_svg(baseline is not None)]
    old = {(s.workload, s.gpu_index): s for s in sweeps(baseline)} if baseline is not None else {}
    found = sweeps(doc)
    names = short_names(s.workload for s in found)
    cards = [sweep_card(doc, s, old.get((s.workload, s.gpu_index)), names[s.workload], regressed or set())
             for s in found]
    parts.append('<div class="grid">' + "".join(cards) + "</div>")
    parts.append(phases_part(doc))
    parts.append(_details(f"All results ({len(doc.cases)} cases)", _results_table(doc)))
    parts.append(f'<p class="note">{escape(run_energy_text(doc))}.</p>')
    if doc.simulated:
        parts.append(f"<p class=\"note\">{escape(SIM_FOOTNOTE)}</p>")
    return "".join(parts) + "</section>"


def phases_part(doc: RunDocument) -> str:
    """Each case with phase marks: its phases' shares of energy beside their shares of time (none: "")."""
    phased = [entry for entry in doc.cases if entry.phases]
    if not phased:
        return ""
    names = short_names(workload_key(e.case_id, e.cap) for e in phased)
    cards = []
    for entry in phased:
        assert entry.phases is not None
        name = f"{names[workload_key(entry.case_id, entry.cap)]} [{entry.cap}]" + (f" GPU {entry.gpu_index}" if entry.gpu_index else "")
        element_id = "phases-" + slug(f"{doc.gpu_model}-{doc.backend}-{entry.gpu_index}-{entry.case_id}-{entry.cap}")
        svg = phase_shares_svg(name, entry.phases, simulated=entry.simulated, element_id=element_id)
        cards.append(f'<div class="card">{svg}<p class="note"><code>{escape(entry.case_id)}</code></p></div>')
    return ("<h3>Phases: where each region's energy goes</h3>"
            '<p class="note">Per test with phase marks (energy_meter.phase; other: the unmarked rest), each phase\'s '
            "share of the region's energy (blue, with the fit's bound) beside its share of the time (grey): a blue bar "
            "longer than its grey one is a phase that draws more than the region's mean power. Hatched: phases the fit "
            "could not tell apart.</p>"
            '<div class="grid">' + "".join(cards) + "</div>")


def sweep_card(doc: RunDocument, sweep: Sweep, baseline: Sweep | None, name: str,
               regressed: set[tuple[str, str, int]]) -> str:
    """One workload on one GPU: the plots, then the optima and their caveats in words."""
    optima = {metric: sweep.optimum(metric) for metric in OPTIMISED}
    caps = [cap for workload, cap, gpu in regressed if workload == sweep.workload and gpu == sweep.gpu_index]
    svg = sweep_svg(sweep, optima, baseline, name=name, element_id=_plot_id(doc, sweep), regressed_caps=caps)
    texts = []
    if len(sweep.points) < 2:
        texts.append(f"one cap measured ({escape(sweep.points[0].cap)}): run with several --gpu-caps to find the "
                     f"optimal cap")
    else:
        texts += [escape(o.describe()) for o in optima.values() if o is not None]
    texts += [f'<span class="warn">{escape(s.describe())}</span>' for s in sweep.suspects()]
    words = "".join(f"<p>{t}</p>" for t in texts)
    return f'<div class="card">{svg}<p class="note"><code>{escape(sweep.workload)}</code></p>{words}</div>'


def _results_table(doc: RunDocument) -> str:
    header, rows = results_rows(doc)
    return html_table(header, rows, numeric=range(3, len(header)))


def html_table(header: Sequence[str], rows: Sequence[Sequence[str]], numeric: Sequence[int] | range = ()) -> str:
    numeric_columns = set(numeric)
    head = "".join(f"<th>{escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f'<td class="{"num" if j in numeric_columns else ""}">{escape(cell)}</td>'
                                    for j, cell in enumerate(row)) + "</tr>" for row in rows)
    return f'<div class="scroll"><table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>'
