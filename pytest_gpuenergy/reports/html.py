"""A self-contained HTML page: per workload and GPU model, ETS, T and EDP against the power cap.

The page is one file with inline CSS and inline SVG and no script, so it opens from a CI
artifact, an e-mail or an air-gapped machine: nothing is fetched. Each workload gets three plots
(x: the enforced limit in W) with the spread of the repetitions as error bars, the default limit
as a dashed line, the energy-optimal cap ringed and the EDP-optimal cap marked with a diamond,
and a line above the plots saying what each optimum saves against the default limit. With a
baseline its sweep is drawn in grey behind. Simulated figures say so in the title, a banner,
each plot and each table.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from html import escape
from typing import Sequence

from ..compare import COMPARED, Comparison
from ..storage import RunDocument, model_label
from .comparison_table import (
    COMPARISON_HEADER, COMPARISON_NUMERIC, RUN_HEADER, RUN_NUMERIC, SIM_FOOTNOTE, comparison_rows, counts_text,
    gate_text, method_text, run_rows, title_text,
)
from .sweep import Optimum, Sweep, sweeps

PLOT_METRICS = (("ets", "ETS", "J"), ("time", "T", "s"), ("edp", "EDP", "J s"))
COLOURS = {"ets": "#1f6fd1", "time": "#1b9e4b", "edp": "#d6452b"}
BASELINE_COLOUR = "#9a9a9a"
ETS_OPT_COLOUR = "#e69f00"
EDP_OPT_COLOUR = "#7b3fb5"

_WIDTH, _HEIGHT = 360, 250
_LEFT, _RIGHT, _TOP, _BOTTOM = 64, 16, 30, 44

_CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:24px;color:#1d1d1f;background:#fff}
h1{font-size:1.5em;margin:0 0 .3em}h2{font-size:1.25em;margin:1.6em 0 .4em;border-bottom:1px solid #ddd}
h3{font-size:1.02em;margin:1.2em 0 .3em;font-family:ui-monospace,Menlo,Consolas,monospace;word-break:break-all}
.sim{background:#fff4d6;border:1px solid #e0b84a;padding:8px 12px;border-radius:6px;font-weight:600}
.plots{display:flex;flex-wrap:wrap;gap:10px}.plots svg{border:1px solid #e3e3e3;border-radius:4px;background:#fff}
.optima{margin:.2em 0 .5em}.legend span{margin-right:1.2em;white-space:nowrap}
table{border-collapse:collapse;font-size:.85em;margin:.5em 0}th,td{border:1px solid #ddd;padding:3px 7px}
th{background:#f4f4f4;text-align:left}td.num{text-align:right;font-variant-numeric:tabular-nums}
td.id{font-family:ui-monospace,Menlo,Consolas,monospace;word-break:break-all}
tr.regression td{background:#fde2e1}tr.improvement td{background:#e3f6e5}tr.new td{background:#eef4ff}
tr.missing td{background:#f1f1f1;color:#666}.fail{color:#b3261e;font-weight:700}.pass{color:#1b7f3b;font-weight:700}
.note{color:#555;font-size:.9em}
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
    for item in comparisons:
        body.append(comparison_section(item))
    for doc in docs:
        body.append(run_section(doc, _baseline_for(doc, baselines)))
    if not docs and not comparisons:
        body.append('<p class="note">Nothing to show: no run and no comparison.</p>')
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{escape(page_title)}</title><style>{_CSS}</style></head>\n<body>\n"
        + "\n".join(body) + "\n</body></html>\n"
    )


def _baseline_for(doc: RunDocument, baselines: Sequence[RunDocument]) -> RunDocument | None:
    same = [b for b in baselines if (b.backend, b.gpu_model, b.simulated) == (doc.backend, doc.gpu_model, doc.simulated)]
    return same[-1] if same else None


# -- sections --------------------------------------------------------------------------------------

def comparison_section(comparison: Comparison) -> str:
    parts = [f"<section class=\"comparison\"><h2>Comparison: {escape(title_text(comparison))}</h2>"]
    if comparison.old_machine is not None:
        parts.append(f"<p>Baseline: {escape(comparison.old_machine.describe())}<br>"
                     f"This run: {escape(comparison.new_machine.describe())}</p>")
    if not comparison.comparable:
        parts += [f"<p class=\"fail\">Not compared: {escape(note)}</p>" for note in comparison.notes]
        return "".join(parts) + "</section>"
    outcome = '<span class="fail">FAILED</span>' if comparison.failed else '<span class="pass">passed</span>'
    parts.append(f"<p>Gate {outcome}: {escape(counts_text(comparison))}. {escape(gate_text(comparison))}.</p>")
    if comparison.cases:
        classes = [c.verdict if c.status == COMPARED else c.status for c in comparison.cases]
        parts.append(html_table(COMPARISON_HEADER, comparison_rows(comparison), COMPARISON_NUMERIC, classes))
        parts.append(f"<p class=\"note\">{escape(method_text(comparison))}</p>")
    if any(c.simulated for c in comparison.cases):
        parts.append(f"<p class=\"note\">{escape(SIM_FOOTNOTE)}</p>")
    notes = list(comparison.notes) + [f"{c.case_id} [{c.cap}]: {n}" for c in comparison.cases for n in c.notes]
    if notes:
        parts.append("<ul class=\"note\">" + "".join(f"<li>{escape(n)}</li>" for n in notes) + "</ul>")
    return "".join(parts) + "</section>"


def run_section(doc: RunDocument, baseline: RunDocument | None = None) -> str:
    parts = [f"<section class=\"run\"><h2>{escape(model_label(doc.gpu_model, doc.backend, doc.simulated))}</h2>",
             f"<p class=\"note\">Run {escape(doc.describe())}</p>", _legend(baseline is not None)]
    old = {(s.workload, s.gpu_index): s for s in sweeps(baseline)} if baseline is not None else {}
    for sweep in sweeps(doc):
        parts.append(sweep_block(sweep, old.get((sweep.workload, sweep.gpu_index))))
    parts.append(f"<details><summary>All results ({len(doc.cases)} cases)</summary>"
                 + html_table(RUN_HEADER, run_rows(doc), RUN_NUMERIC) + "</details>")
    if doc.simulated:
        parts.append(f"<p class=\"note\">{escape(SIM_FOOTNOTE)}</p>")
    return "".join(parts) + "</section>"


def sweep_block(sweep: Sweep, baseline: Sweep | None = None) -> str:
    """One workload on one GPU: the optima in words and the three plots."""
    optima = {metric: sweep.optimum(metric) for metric in ("ets", "edp")}
    sim = " (simulated)" if sweep.simulated else ""
    lines = [f"<div class=\"workload\"><h3>{escape(sweep.workload)} &mdash; GPU {sweep.gpu_index}{sim}</h3>"]
    texts = [o.describe() for o in optima.values() if o is not None]
    if len(sweep.points) < 2:
        texts = [f"one cap measured ({sweep.points[0].cap}): run more caps (--gpu-caps) to find the optimum"]
    lines.append(f"<p class=\"optima\">{escape('; '.join(texts))}</p><div class=\"plots\">")
    for metric, label, unit in PLOT_METRICS:
        lines.append(plot_svg(sweep, metric, label, unit, optima, baseline))
    return "".join(lines) + "</div></div>"


def _legend(with_baseline: bool) -> str:
    items = [
        f'<span><svg width="14" height="14"><circle cx="7" cy="7" r="5" fill="none" stroke="{ETS_OPT_COLOUR}" '
        'stroke-width="2.5"/></svg> energy-optimal cap (least ETS)</span>',
        f'<span><svg width="14" height="14"><path d="M7 1 L13 7 L7 13 L1 7 Z" fill="none" stroke="{EDP_OPT_COLOUR}" '
        'stroke-width="2.5"/></svg> EDP-optimal cap (least ETS x T)</span>',
        '<span><svg width="22" height="14"><line x1="1" y1="7" x2="21" y2="7" stroke="#777" stroke-dasharray="4 3"/>'
        '</svg> default limit</span>',
        '<span>error bars: &plusmn;1 standard deviation of the repetitions</span>',
    ]
    if with_baseline:
        items.insert(3, f'<span><svg width="22" height="14"><line x1="1" y1="7" x2="21" y2="7" stroke="{BASELINE_COLOUR}" '
                        'stroke-width="2" stroke-dasharray="5 3"/></svg> baseline run</span>')
    return f"<p class=\"legend note\">{''.join(items)}</p>"


def html_table(header: Sequence[str], rows: Sequence[Sequence[str]], numeric: Sequence[int],
               row_classes: Sequence[str] | None = None) -> str:
    head = "".join(f"<th>{escape(h)}</th>" for h in header)
    body = []
    for i, row in enumerate(rows):
        cls = f' class="{escape(row_classes[i])}"' if row_classes else ""
        cells = "".join(
            f'<td class="{"num" if j in numeric else ("id" if j == 0 else "")}">{escape(cell)}</td>'
            for j, cell in enumerate(row)
        )
        body.append(f"<tr{cls}>{cells}</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


# -- plots -----------------------------------------------------------------------------------------

@dataclass(frozen=True)
class _Scale:
    """Maps data to SVG pixels on one axis."""

    lo: float
    hi: float
    start_px: float
    end_px: float

    def __call__(self, value: float) -> float:
        return self.start_px + (value - self.lo) / (self.hi - self.lo) * (self.end_px - self.start_px)


def plot_svg(sweep: Sweep, metric: str, label: str, unit: str, optima: dict[str, Optimum | None],
             baseline: Sweep | None = None) -> str:
    """One metric against the enforced limit, as an inline SVG element."""
    points = sweep.points
    xs = [p.limit_enforced_w for p in points] + [sweep.default_limit_w]
    ys = [p.value(metric) + s * p.spread(metric) for p in points for s in (-1, 1)]
    if baseline is not None:
        xs += [p.limit_enforced_w for p in baseline.points]
        ys += [p.value(metric) for p in baseline.points]
    x = _Scale(*_padded(min(xs), max(xs), 0.06), _LEFT, _WIDTH - _RIGHT)
    y_lo, y_hi = _padded(min(ys), max(ys), 0.10)
    y = _Scale(y_lo, y_hi, _HEIGHT - _BOTTOM, _TOP)
    colour = COLOURS[metric]
    sim = " (simulated)" if sweep.simulated else ""
    title = f"{label} ({unit}) against the power limit{sim}"
    out = [f'<svg class="plot plot-{metric}" width="{_WIDTH}" height="{_HEIGHT}" '
           f'viewBox="0 0 {_WIDTH} {_HEIGHT}" role="img" aria-label="{escape(title)}"><title>{escape(title)}</title>']
    out.append(_axes(x, y, label, unit))
    if sweep.simulated:
        out.append(f'<text x="{(_LEFT + _WIDTH - _RIGHT) / 2:.1f}" y="{(_TOP + _HEIGHT - _BOTTOM) / 2 + 10:.1f}" '
                   'text-anchor="middle" font-size="30" font-weight="700" fill="#000" fill-opacity="0.06" '
                   'class="sim-watermark">SIMULATED</text>')
    dx = x(sweep.default_limit_w)
    out.append(f'<line x1="{dx:.1f}" y1="{_TOP}" x2="{dx:.1f}" y2="{_HEIGHT - _BOTTOM}" stroke="#777" '
               f'stroke-dasharray="4 3" class="default-limit"><title>default limit {sweep.default_limit_w:g} W</title></line>')
    if baseline is not None:
        out.append(_series(baseline, metric, x, y, BASELINE_COLOUR, dashed=True))
    out.append(_series(sweep, metric, x, y, colour, dashed=False))
    out += _optimum_markers(metric, optima, x, y)
    out.append(f'<text x="{_WIDTH / 2:.1f}" y="18" text-anchor="middle" font-size="13" font-weight="600" '
               f'fill="#1d1d1f">{escape(label + sim)}</text></svg>')
    return "".join(out)


def _series(sweep: Sweep, metric: str, x: _Scale, y: _Scale, colour: str, *, dashed: bool) -> str:
    pts = [(x(p.limit_enforced_w), y(p.value(metric)), p) for p in sweep.points]
    dash = ' stroke-dasharray="5 3"' if dashed else ""
    kind = "baseline" if dashed else "series"
    out = [f'<g class="{kind}">']
    if len(pts) > 1:
        coords = " ".join(f"{px:.1f},{py:.1f}" for px, py, _ in pts)
        out.append(f'<polyline points="{coords}" fill="none" stroke="{colour}" stroke-width="2.5"{dash}/>')
    for px, py, p in pts:
        spread = p.spread(metric)
        if spread > 0 and not dashed:
            top, bottom = y(p.value(metric) + spread), y(p.value(metric) - spread)
            out.append(f'<line x1="{px:.1f}" y1="{top:.1f}" x2="{px:.1f}" y2="{bottom:.1f}" stroke="{colour}" stroke-width="1.5"/>'
                       f'<line x1="{px - 4:.1f}" y1="{top:.1f}" x2="{px + 4:.1f}" y2="{top:.1f}" stroke="{colour}" stroke-width="1.5"/>'
                       f'<line x1="{px - 4:.1f}" y1="{bottom:.1f}" x2="{px + 4:.1f}" y2="{bottom:.1f}" stroke="{colour}" stroke-width="1.5"/>')
        tip = f"{p.cap}: {p.limit_enforced_w:g} W, {p.value(metric):.4g} (n={p.n})"
        out.append(f'<circle cx="{px:.1f}" cy="{py:.1f}" r="{3 if dashed else 4}" fill="{colour}">'
                   f"<title>{escape(tip)}</title></circle>")
    return "".join(out) + "</g>"


def _optimum_markers(metric: str, optima: dict[str, Optimum | None], x: _Scale, y: _Scale) -> list[str]:
    out = []
    ets_opt, edp_opt = optima.get("ets"), optima.get("edp")
    if ets_opt is not None:
        p = ets_opt.point
        px, py = x(p.limit_enforced_w), y(p.value(metric))
        out.append(f'<circle class="optimal-ets" cx="{px:.1f}" cy="{py:.1f}" r="9" fill="none" stroke="{ETS_OPT_COLOUR}" '
                   f'stroke-width="3"><title>energy-optimal cap {escape(p.cap)}: ETS {ets_opt.saving_pct:.1f} % '
                   f'below the reference</title></circle>')
        if metric == "ets":
            out.append(_marker_label(px, py, f"min ETS {p.limit_enforced_w:g} W, -{ets_opt.saving_pct:.1f}%", ETS_OPT_COLOUR))
    if edp_opt is not None:
        p = edp_opt.point
        px, py = x(p.limit_enforced_w), y(p.value(metric))
        out.append(f'<path class="optimal-edp" d="M{px:.1f} {py - 12:.1f} L{px + 12:.1f} {py:.1f} L{px:.1f} {py + 12:.1f} '
                   f'L{px - 12:.1f} {py:.1f} Z" fill="none" stroke="{EDP_OPT_COLOUR}" stroke-width="2.5">'
                   f'<title>EDP-optimal cap {escape(p.cap)}: EDP {edp_opt.saving_pct:.1f} % below the reference</title></path>')
        if metric == "edp":
            out.append(_marker_label(px, py, f"min EDP {p.limit_enforced_w:g} W, -{edp_opt.saving_pct:.1f}%", EDP_OPT_COLOUR))
    return out


def _marker_label(px: float, py: float, text: str, colour: str) -> str:
    anchor = "start" if px < (_LEFT + _WIDTH - _RIGHT) / 2 else "end"
    shift = 14 if anchor == "start" else -14
    ty = py - 14 if py > _TOP + 24 else py + 24
    return (f'<text x="{px + shift:.1f}" y="{ty:.1f}" text-anchor="{anchor}" font-size="11" font-weight="600" '
            f'fill="{colour}" stroke="#fff" stroke-width="3" paint-order="stroke" class="optimum-label">{escape(text)}</text>')


def _axes(x: _Scale, y: _Scale, label: str, unit: str) -> str:
    bottom, right = _HEIGHT - _BOTTOM, _WIDTH - _RIGHT
    out = [f'<rect x="{_LEFT}" y="{_TOP}" width="{right - _LEFT}" height="{bottom - _TOP}" fill="none" stroke="#bbb"/>']
    for tick in nice_ticks(y.lo, y.hi):
        py = y(tick)
        out.append(f'<line x1="{_LEFT}" y1="{py:.1f}" x2="{right}" y2="{py:.1f}" stroke="#eee"/>'
                   f'<text x="{_LEFT - 6}" y="{py + 4:.1f}" text-anchor="end" font-size="10" fill="#444">{_tick_text(tick)}</text>')
    for tick in nice_ticks(x.lo, x.hi):
        px = x(tick)
        out.append(f'<line x1="{px:.1f}" y1="{bottom}" x2="{px:.1f}" y2="{bottom + 4}" stroke="#888"/>'
                   f'<text x="{px:.1f}" y="{bottom + 16}" text-anchor="middle" font-size="10" fill="#444">{_tick_text(tick)}</text>')
    out.append(f'<text x="{(_LEFT + right) / 2:.1f}" y="{_HEIGHT - 8}" text-anchor="middle" font-size="11" fill="#333">'
               "enforced power limit (W)</text>")
    out.append(f'<text transform="translate(14 {(_TOP + bottom) / 2:.1f}) rotate(-90)" text-anchor="middle" '
               f'font-size="11" fill="#333">{escape(f"{label} ({unit})")}</text>')
    return "".join(out)


def _padded(lo: float, hi: float, fraction: float) -> tuple[float, float]:
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return 0.0, 1.0
    if hi - lo <= 1e-12 * max(abs(hi), 1.0):
        pad = abs(hi) * 0.1 or 1.0
        return lo - pad, hi + pad
    pad = (hi - lo) * fraction
    return lo - pad, hi + pad


def nice_ticks(lo: float, hi: float, count: int = 5) -> list[float]:
    """Round tick values (1, 2, 2.5, 5 x 10^k apart) inside [lo, hi]."""
    raw = (hi - lo) / max(count, 1)
    if not raw > 0 or not math.isfinite(raw):
        return [lo]
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw)
    first = math.ceil(lo / step) * step
    ticks, value = [], first
    while value <= hi + step * 1e-9:
        ticks.append(round(value, 12))
        value += step
    return ticks


def _tick_text(value: float) -> str:
    return f"{value:.4g}"
