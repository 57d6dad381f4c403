"""The history as a self-contained HTML page: one plot per series that changed, GPU models and caps apart.

Each plot is the metric (ETS per call by default) over the commits in the history's order: the
points with the meter's bound as a blue band, each level found as a black line with the sessions'
noise (plus or minus two standard deviations) as a grey band, change points as red dashed lines
labelled with their size, a trend as an orange dashed line, and a newest run that is off but not
confirmed as an open red circle. Drawn with matplotlib as the run reports are (``reports/svg.py``:
inline SVG, no script, nothing fetched), so the page opens from a CI artifact.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from html import escape

from ..reports.html import html_table
from ..reports.numbers import si
from ..reports.svg import figure_svg, figure_title, new_figure, place_axes, rc_context
from ..runs.records import model_label, model_text
from ..runs.store import slug
from .report import HistoryReport, SeriesResult, cost_lines, cost_table, counts, evidence, headline, pct

POINT_COLOUR = "#0072B2"        # Okabe-Ito blue, as the run reports' ETS
BOUND_COLOUR = "#56B4E9"
LEVEL_COLOUR = "#1d1d1f"
NOISE_COLOUR = "#8c8c8c"
CHANGE_COLOUR = "#b3261e"
TREND_COLOUR = "#D55E00"
_MAX_TICKS = 12
MAX_PLOTS = 60      # a plot costs 40-70 ms to draw (2026-11-28); beyond these (the largest changes) the tables say it

_CSS = """
*{box-sizing:border-box}
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0 auto;padding:16px 20px;max-width:1600px;
color:#1d1d1f;background:#fff;line-height:1.4;font-size:16px;overflow-wrap:anywhere}
h1{font-size:1.5em;margin:0 0 .3em}h2{font-size:1.25em;margin:1.4em 0 .4em;border-bottom:1px solid #ddd}
.sim{background:#fff4d6;border:1px solid #b7791f;padding:6px 10px;border-radius:6px;font-weight:600}
.scroll{overflow-x:auto;max-width:100%}
table{border-collapse:collapse;font-size:.875em;margin:.4em 0}th,td{border:1px solid #d0d0d0;padding:3px 7px;vertical-align:top}
th,td{white-space:nowrap;overflow-wrap:normal}th{background:#f4f4f4;text-align:left}td.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
.grid{display:grid;grid-template-columns:repeat(auto-fill,minmax(340px,1fr));gap:12px}
.card{border:1px solid #e3e3e3;border-radius:6px;padding:6px;min-width:0}.card p{margin:.3em 0;font-size:.875em}
svg.plot{display:block;width:100%;height:auto}
.note{color:#4a4a4a;font-size:.875em}details{margin:.35em 0}summary{cursor:pointer;font-weight:600}
@media (max-width:640px){body{padding:10px}.grid{grid-template-columns:1fr}}
"""


def html_report(report: HistoryReport) -> str:
    """The whole page as a string."""
    history = report.history
    title = "GPU energy history" + (" (simulated)" if history.simulated else "")
    body = [f"<h1>{escape(title)}</h1>"]
    if history.simulated:
        body.append('<p class="sim">SIMULATED: these figures come from the pytest-gpuenergy GPU simulator, not from '
                    'a real GPU.</p>')
    body.append(f"<p>{escape(headline(report))}.</p><p><b>{escape(counts(report))}</b></p>")
    body.append(_change_table(report))
    body.append(_plots(report))
    header, rows = cost_table(report)
    body.append("<h2>What it cost</h2>" + "".join(f'<p class="note">{escape(line)}</p>' for line in cost_lines(report))
                + f"<h3>The {len(rows)} heaviest cases over the history</h3>"
                + html_table(header, rows, numeric=range(3, len(header))))
    quiet = report.quiet
    if quiet:
        unit = history.metric.unit
        rows = [[r.series.key.case_id, r.series.key.cap, model_text(r.series.key.gpu_model), str(len(r.series.points)),
                 si(r.series.points[-1].mean, unit)] for r in quiet]
        body.append(f"<details><summary>{len(quiet)} series without change</summary>"
                    + html_table(["test", "cap", "GPU model", "commits", f"newest {history.metric.label}"], rows,
                                 numeric=(3, 4)) + "</details>")
    notes = [f"skipped a damaged file: {s}" for s in history.skipped] + list(history.notes)
    if notes:
        body.append('<h2>Notes</h2><ul class="note">' + "".join(f"<li>{escape(n)}</li>" for n in notes) + "</ul>")
    return ('<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
            '<meta name="viewport" content="width=device-width, initial-scale=1">'
            f"<title>{escape(title)}</title><style>{_CSS}</style></head>\n<body>\n" + "\n".join(body) + "\n</body></html>\n")


def _change_table(report: HistoryReport) -> str:
    changes = report.changes
    if not changes:
        return '<p class="note">No change point.</p>'
    unit, names = report.history.metric.unit, report.names()
    rows = [[pct(c.change_pct), names[r.series.key.case_id], r.series.key.cap, model_text(r.series.key.gpu_model),
             report.station_label(r, c.index), si(c.before.mean, unit), si(c.after.mean, unit)]
            for r, c in changes]
    return ("<h2>Change points</h2>" + html_table(["change", "test", "cap", "GPU model", "commit", "before", "after"], rows,
                                                  numeric=(0, 5, 6))
            + '<p class="note">Each change point\'s plot and evidence (its t against the t needed, the sessions\' noise, '
              'the runs on each side, the interval of the change) follow, per GPU model.</p>')


def _plots(report: HistoryReport) -> str:
    shown = [r for r in report.results if r.findings.found or r.findings.pending is not None]
    if not shown:
        return ""
    names = report.names()
    parts = []
    if len(shown) > MAX_PLOTS:
        parts.append(f'<p class="note">{len(shown)} series changed: the {MAX_PLOTS} with the largest changes are drawn; '
                     f"every change is in the tables, the Markdown and the JSON report.</p>")
        shown = sorted(shown, key=_largest, reverse=True)[:MAX_PLOTS]
    parts.append('<p class="note">In each plot: the runs\' figures (blue points) with the meter\'s bound (blue band); each '
                 'level found (black line) with the sessions\' noise, two standard deviations either side (grey band); '
                 'change points (red dashed lines, with their size); a trend (orange dashed line); a newest run that is '
                 'off but not confirmed (red circle).</p>')
    models = sorted({(r.series.key.gpu_model, r.series.key.backend, r.series.simulated) for r in shown})
    for model, backend, simulated in models:
        parts.append(f"<h2>{escape(model_label(model, backend, simulated))}</h2>")
        cards = []
        for result in shown:
            key = result.series.key
            if (key.gpu_model, key.backend, result.series.simulated) != (model, backend, simulated):
                continue
            name = f"{names[key.case_id]} at {key.cap}"
            words = "".join(f"<p>{escape(pct(c.change_pct))} at {escape(report.station_label(result, c.index))}: "
                            f"{escape(evidence(report, c))}</p>" for c in result.findings.changes)
            cards.append(f'<div class="card">{series_svg(report, result, name)}<p class="note"><code>'
                         f"{escape(key.case_id)}</code></p>{words}</div>")
        parts.append('<div class="grid">' + "".join(cards) + "</div>")
    return "".join(parts)


def _largest(result: SeriesResult) -> float:
    findings = result.findings
    sizes = ([abs(c.change_pct) for c in findings.changes] + [abs(t.total_pct) for t in findings.trends]
             + ([abs(findings.pending.change_pct)] if findings.pending is not None else []))
    return max(sizes, default=0.0)


def series_svg(report: HistoryReport, result: SeriesResult, name: str) -> str:
    """One series over the commits: bounds and noise as bands, levels, change points, trends."""
    from matplotlib.ticker import EngFormatter

    history, series, findings = report.history, result.series, result.findings
    xs = [p.station for p in series.points]
    ys = [p.mean for p in series.points]
    with rc_context():
        fig = new_figure(4.6, 2.9, placed=True)
        ax = fig.add_subplot()
        if all(p.low is not None and p.high is not None for p in series.points):
            ax.fill_between(xs, [p.low for p in series.points], [p.high for p in series.points],
                            color=BOUND_COLOUR, alpha=0.35, linewidth=0, step="mid", zorder=1)
        for level in findings.levels:
            left, right = xs[level.start] - 0.4, xs[level.end - 1] + 0.4
            band = 2.0 * level.noise_sd
            ax.fill_between([left, right], [level.mean * math.exp(-band)] * 2, [level.mean * math.exp(band)] * 2,
                            color=NOISE_COLOUR, alpha=0.18, linewidth=0, zorder=0)
            ax.plot([left, right], [level.mean] * 2, color=LEVEL_COLOUR, linewidth=1.4, zorder=2)
        ax.plot(xs, ys, color=POINT_COLOUR, marker="o", markersize=3.5, linewidth=1.0, zorder=3)
        for change in findings.changes:
            x = 0.5 * (xs[change.index - 1] + xs[change.index])
            ax.axvline(x, color=CHANGE_COLOUR, linestyle=(0, (4, 3)), linewidth=1.3, zorder=4)
            ax.annotate(pct(change.change_pct), (x, 1.0), xycoords=("data", "axes fraction"), xytext=(3, -12),
                        textcoords="offset points", color=CHANGE_COLOUR, fontsize=8, fontweight="bold",
                        bbox={"boxstyle": "round,pad=0.15", "facecolor": "#ffffff", "edgecolor": "none", "alpha": 0.85})
        for trend in findings.trends:
            ends = (trend.start, trend.end - 1)
            ax.plot([xs[i] for i in ends], [math.exp(trend.intercept + trend.slope * (i - trend.start)) for i in ends],
                    color=TREND_COLOUR, linestyle=(0, (5, 2)), linewidth=1.6, zorder=4)
        if findings.pending is not None:
            i = findings.pending.index
            ax.plot([xs[i]], [ys[i]], marker="o", markersize=10, markerfacecolor="none", markeredgecolor=CHANGE_COLOUR,
                    markeredgewidth=1.6, zorder=5)
        _ticks(ax, xs, [history.stations[x].label[:8] for x in xs])
        ax.yaxis.set_major_formatter(EngFormatter(unit=history.metric.unit, places=None, sep=" "))
        ax.set_ylabel(f"{history.metric.label} per call")
        ax.set_xlabel("commit (history order)")
        ax.grid(True, color="#e6e6e6", linewidth=0.6)
        # Over the figure, not the axes: as wide as the figure, a long test name elided, "(simulated)" whole
        place_axes(fig, [ax], top_pt=figure_title(fig, name, " (simulated)" if series.simulated else "", 9.5))
    key = series.key
    label = (f"{name} on {key.gpu_model}: {history.metric.label} per call at {len(xs)} commits; "
             + "; ".join([f"change {pct(c.change_pct)} at {report.station_label(result, c.index)}" for c in findings.changes]
                         + [f"trend {pct(t.total_pct)} over {t.end - t.start} commits" for t in findings.trends]))
    return figure_svg(fig, label, element_id="history-" + slug(f"{key.gpu_model}-{key.backend}-{key.case_id}-{key.cap}"))


def _ticks(ax, xs: Sequence[int], labels: Sequence[str]) -> None:
    step = max(1, math.ceil(len(xs) / _MAX_TICKS))
    chosen = list(range(0, len(xs), step))
    ax.set_xticks([xs[i] for i in chosen], labels=[labels[i] for i in chosen], rotation=45, ha="right", fontsize=7)
