"""The history's findings for a person and a machine: the terminal (80 columns), Markdown, JSON.

Every output leads with the change points (test, cap, GPU model, the commit, the size), then the
trends, then a newest run that is off but not confirmed, then what the history cost; the series
with nothing to say are counted, and listed only where there is room (Markdown folds them, JSON
has them all). The HTML page with its plots is ``plots.py``'s.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from html import escape
from typing import Any

from ..reports.digest import SIM_FOOTNOTE, SIM_MARK
from ..reports.markdown import SIM_WARNING, table
from ..reports.numbers import elide, short_names, si
from ..reports.sweep import workload_key
from ..reports.terminal import Column, fit_table, terminal_width, wrap
from ..runs.records import model_text
from .changes import ChangePoint, Findings, Pending, Settings, Trend, find_changes
from .cost import Tariff, carbon_text, kwh
from .series import RUN_TIME, History, Series

HISTORY_FORMAT = "pytest-gpuenergy-history"
HISTORY_VERSION = 1
_LISTED = 20      # change points and trends listed one by one on the terminal; the rest are counted
_PROSE_NAME = 40  # a name in a sentence is cut to this (in the middle): a line cannot break inside it


@dataclass(frozen=True)
class SeriesResult:
    series: Series
    findings: Findings


@dataclass(frozen=True)
class HistoryReport:
    """A history with what was found in each of its series."""

    history: History
    settings: Settings
    tariff: Tariff
    results: tuple[SeriesResult, ...]

    @property
    def changes(self) -> list[tuple[SeriesResult, ChangePoint]]:
        """Every change point, the largest first."""
        found = [(r, c) for r in self.results for c in r.findings.changes]
        return sorted(found, key=lambda rc: (-abs(rc[1].change_pct), rc[0].series.key.case_id))

    @property
    def trends(self) -> list[tuple[SeriesResult, Trend]]:
        found = [(r, t) for r in self.results for t in r.findings.trends]
        return sorted(found, key=lambda rt: (-abs(rt[1].total_pct), rt[0].series.key.case_id))

    @property
    def pending(self) -> list[tuple[SeriesResult, Pending]]:
        found = [(r, r.findings.pending) for r in self.results if r.findings.pending is not None]
        return sorted(((r, p) for r, p in found if p is not None), key=lambda rp: -abs(rp[1].change_pct))

    @property
    def quiet(self) -> list[SeriesResult]:
        return [r for r in self.results if not r.findings.found and r.findings.pending is None]

    def names(self) -> dict[str, str]:
        """Each case id's short name: its test's parameters without the cap (the cap has a column of its own)."""
        keys = {r.series.key.case_id: workload_key(r.series.key.case_id, r.series.key.cap) for r in self.results}
        short = short_names(keys.values())
        return {case_id: short[key] for case_id, key in keys.items()}

    def station_label(self, result: SeriesResult, index: int) -> str:
        return self.history.stations[result.series.points[index].station].label

    @property
    def energy_j(self) -> float:
        return sum(run.energy_j for run in self.history.runs)


def analyse(history: History, settings: Settings | None = None, tariff: Tariff | None = None) -> HistoryReport:
    """Find the change points, trends and pending points of every series of ``history`` (``settings``:
    the defaults when None; ``tariff``: kWh only when None)."""
    settings = settings or Settings()
    results = []
    for series in history.series:
        points = series.points
        bounds = [(p.low, p.high) if p.low is not None and p.high is not None else None for p in points]
        findings = find_changes([p.log_mean for p in points], [p.within_var for p in points], settings, bounds)
        results.append(SeriesResult(series, findings))
    return HistoryReport(history, settings, tariff or Tariff(), tuple(results))


# -- shared wording ---------------------------------------------------------------------------------

def pct(value: float) -> str:
    return f"{value:+.1f} %"


def headline(report: HistoryReport) -> str:
    history = report.history
    stations = history.stations
    span = f", {stations[0].at:%Y-%m-%d} to {stations[-1].at:%Y-%m-%d}" if stations else ""
    runs = len(history.runs)
    sim = SIM_MARK if history.simulated else ""
    # Ordered by run time, each run is a place of its own: no commit is named, so none is counted.
    places = "" if history.order == RUN_TIME else f" at {len(stations)} commit{'s' if len(stations) != 1 else ''}"
    return (f"{history.metric.label} per call over {runs} run{'s' if runs != 1 else ''}{places}{span} (ordered by "
            f"{history.order}); {len(history.series)} series (test, cap, GPU model){sim}")


def counts(report: HistoryReport) -> str:
    changes, trends, pending = len(report.changes), len(report.trends), len(report.pending)
    return (f"{changes} change point{'s' if changes != 1 else ''}, {trends} trend{'s' if trends != 1 else ''}, "
            f"{pending} newest run{'s' if pending != 1 else ''} off but not confirmed, "
            f"{len(report.quiet)} series without change")


def evidence(report: HistoryReport, change: ChangePoint) -> str:
    confidence = f"{100 * report.settings.confidence:g} %"
    return (f"t = {change.t:.1f} > {change.t_needed:.1f} ({confidence} confidence over {change.candidates} candidate "
            f"commit{'s' if change.candidates != 1 else ''}); session noise {change.noise_pct:.1f} %; "
            f"{change.before.size} runs before, {change.after.size} after; interval {pct(change.low_pct)} to "
            f"{pct(change.high_pct)}")


def cost_lines(report: HistoryReport) -> list[str]:
    """The history's energy and what it cost: over all runs, the newest run, the heaviest case in it."""
    history, tariff = report.history, report.tariff
    if not history.runs:
        return []
    newest_station = max(run.station for run in history.runs)
    newest = sum(run.energy_j for run in history.runs if run.station == newest_station)
    mark = SIM_MARK if history.simulated else ""
    lines = [f"energy in the measured regions{mark}: {si(report.energy_j, 'J')} over {len(history.runs)} runs "
             f"({tariff.describe(report.energy_j)}); newest commit {si(newest, 'J')} ({tariff.describe(newest)})"]
    heaviest = max(((r.series, p) for r in report.results for p in r.series.points if p.station == newest_station),
                   key=lambda sp: sp[1].energy_j, default=None)
    if heaviest is not None:
        series, point = heaviest
        lines.append(f"heaviest case at the newest commit: {elide(report.names()[series.key.case_id], _PROSE_NAME)} "
                     f"at {series.key.cap}, "
                     f"{si(point.energy_j, 'J')} ({tariff.describe(point.energy_j)})")
    if tariff.price_per_kwh is None and tariff.carbon_g_per_kwh is None:
        lines.append("cost and CO2e: give energy_price_per_kwh and energy_carbon_g_per_kwh (ini) or --price-per-kwh "
                     "and --carbon-g-per-kwh")
    return lines


def cost_table(report: HistoryReport, count: int = 10) -> tuple[list[str], list[list[str]]]:
    """(header, rows): the ``count`` cases that used the most energy over the history, with kWh, and the
    cost and CO2e where a price and an intensity are given."""
    tariff = report.tariff
    totals = sorted(((r, math.fsum(p.energy_j for p in r.series.points)) for r in report.results),
                    key=lambda rt: (-rt[1], rt[0].series.key.case_id))[:count]
    header = ["test", "cap", "GPU model", "runs", "energy", "kWh"]
    header += ["cost"] if tariff.price_per_kwh is not None else []
    header += ["CO2e"] if tariff.carbon_g_per_kwh is not None else []
    rows = []
    for result, energy_j in totals:
        key = result.series.key
        row = [key.case_id, key.cap, model_text(key.gpu_model), str(len(result.series.points)), si(energy_j, "J"),
               f"{kwh(energy_j):.3g}"]
        cost, carbon = tariff.cost(energy_j), tariff.carbon_g(energy_j)
        row += [f"{cost:.3g}"] if cost is not None else []
        row += [carbon_text(carbon)] if carbon is not None else []
        rows.append(row)
    return header, rows


# -- terminal ---------------------------------------------------------------------------------------

CHANGE_TABLE = (Column("change", right=True), Column("test", elide=True), Column("cap"),
                Column("GPU model", elide=True, keep_start=True, drop=2), Column("commit"),
                Column("before", right=True, drop=3), Column("after", right=True, drop=1))
TREND_TABLE = (Column("trend", right=True), Column("test", elide=True), Column("cap"),
               Column("GPU model", elide=True, keep_start=True, drop=2), Column("from"), Column("to", drop=1),
               Column("commits", right=True, drop=3))


def terminal_lines(report: HistoryReport, width: int | None = None) -> list[str]:
    """The summary for the terminal, led by the change points, no line wider than ``width``."""
    width = width or terminal_width()
    names, unit = report.names(), report.history.metric.unit
    lines = wrap(f"energy history: {headline(report)}", width) + wrap(counts(report), width)
    changes = report.changes
    if changes:
        rows = [[pct(c.change_pct), names[r.series.key.case_id], r.series.key.cap, model_text(r.series.key.gpu_model),
                 report.station_label(r, c.index), si(c.before.mean, unit), si(c.after.mean, unit)]
                for r, c in changes[:_LISTED]]
        lines += [""] + fit_table(CHANGE_TABLE, rows, width)
        for r, c in changes[:_LISTED]:
            name = elide(names[r.series.key.case_id], _PROSE_NAME)
            lines += wrap(f"{name} {r.series.key.cap}: {evidence(report, c)}", width, "  ")
        if len(changes) > _LISTED:
            lines += wrap(f"... and {len(changes) - _LISTED} more change points (all in --json, --markdown)", width)
    trends = report.trends
    if trends:
        rows = [[pct(t.total_pct), names[r.series.key.case_id], r.series.key.cap, model_text(r.series.key.gpu_model),
                 report.station_label(r, t.start), report.station_label(r, t.end - 1), str(t.end - t.start)]
                for r, t in trends[:_LISTED]]
        lines += [""] + fit_table(TREND_TABLE, rows, width)
        if len(trends) > _LISTED:
            lines += wrap(f"... and {len(trends) - _LISTED} more trends (all in --json, --markdown)", width)
    for r, p in report.pending[:_LISTED]:
        lines += wrap(f"not confirmed: {elide(names[r.series.key.case_id], _PROSE_NAME)} {r.series.key.cap} at "
                      f"{report.station_label(r, p.index)} is {pct(p.change_pct)} off its level; one run cannot be "
                      f"told from a noisy session: the next run will tell", width)
    lines.append("")
    lines += [w for line in cost_lines(report) for w in wrap(line, width)]
    lines += _footer(report, width)
    return lines


def _footer(report: HistoryReport, width: int) -> list[str]:
    history = report.history
    lines = []
    for problem in history.skipped:
        lines += wrap(f"skipped a damaged file: {problem}", width)
    for note in history.notes:
        lines += wrap(f"note: {note}", width)
    settings = report.settings
    lines += wrap(f"rule: a change point stands out from the sessions' noise at {100 * settings.confidence:g} % "
                  f"confidence, is at least {settings.min_change_pct:g} % and has {settings.min_runs} or more runs on "
                  f"each side that agree", width)
    if history.simulated:
        lines += wrap(SIM_FOOTNOTE, width)
    return lines


# -- Markdown ---------------------------------------------------------------------------------------

def markdown_report(report: HistoryReport) -> str:
    """A PR comment or job summary: the change points first, the rest folded."""
    history, unit = report.history, report.history.metric.unit
    lines = [f"## GPU energy history{' (simulated)' if history.simulated else ''}", ""]
    if history.simulated:
        lines += [SIM_WARNING, ""]
    lines += [f"{_md(headline(report))}.", "", f"**{_md(counts(report))}**", ""]
    if report.changes:
        rows = [[pct(c.change_pct), r.series.key.case_id, r.series.key.cap, model_text(r.series.key.gpu_model),
                 report.station_label(r, c.index), report.station_label(r, c.index - 1), si(c.before.mean, unit),
                 si(c.after.mean, unit), f"{pct(c.low_pct)} to {pct(c.high_pct)}"]
                for r, c in report.changes]
        lines += ["### Change points", ""]
        lines += table(["change", "test", "cap", "GPU model", "commit", "before it", "before", "after", "interval"], rows,
                       code_columns=(1, 4, 5), right=(0, 6, 7)) + [""]
    if report.trends:
        rows = [[pct(t.total_pct), r.series.key.case_id, r.series.key.cap, model_text(r.series.key.gpu_model),
                 report.station_label(r, t.start), report.station_label(r, t.end - 1), str(t.end - t.start),
                 f"{t.per_point_pct:+.2f} %"]
                for r, t in report.trends]
        lines += ["### Trends", ""]
        lines += table(["trend", "test", "cap", "GPU model", "from", "to", "commits", "per commit"], rows,
                       code_columns=(1, 4, 5), right=(0, 6, 7)) + [""]
    for r, p in report.pending:
        lines += [f"- not confirmed: {_md(r.series.key.case_id)} at {r.series.key.cap} is {pct(p.change_pct)} off its "
                  f"level at {_md(report.station_label(r, p.index))}; the next run will tell"]
    lines += [""] + [f"- {_md(line)}" for line in cost_lines(report)] + [""]
    if report.changes:
        body = [f"- {_md(r.series.key.case_id)} at {_md(r.series.key.cap)}: {_md(evidence(report, c))}"
                for r, c in report.changes]
        lines += _details("Evidence for each change point", body)
    header, rows = cost_table(report)
    if rows:
        lines += _details(f"What the {len(rows)} heaviest cases cost over the history",
                          table(header, rows, code_columns=(0,), right=tuple(range(3, len(header)))))
    quiet = report.quiet
    if quiet:
        rows = [[r.series.key.case_id, r.series.key.cap, model_text(r.series.key.gpu_model), str(len(r.series.points)),
                 si(r.series.points[-1].mean, unit)] for r in quiet]
        lines += _details(f"{len(quiet)} series without change", table(
            ["test", "cap", "GPU model", "commits", f"newest {history.metric.label}"], rows, code_columns=(0,), right=(3, 4)))
    notes = [f"- skipped a damaged file: {_md(s)}" for s in history.skipped] + [f"- {_md(n)}" for n in history.notes]
    if notes:
        lines += _details("Notes", notes)
    if history.simulated:
        lines += [f"_{_md(SIM_FOOTNOTE)}_", ""]
    return "\n".join(lines).rstrip() + "\n"


def _md(text: str) -> str:
    return table([text], [])[0][2:-2]     # the header cell of a one-column table: escaped as every cell is


def _details(summary: str, body: Sequence[str]) -> list[str]:
    return [f"<details><summary>{escape(summary)}</summary>", ""] + list(body) + ["", "</details>", ""]


# -- JSON -------------------------------------------------------------------------------------------

def json_report(report: HistoryReport) -> str:
    return json.dumps(report_data(report), indent=2, ensure_ascii=False, allow_nan=False) + "\n"


def report_data(report: HistoryReport) -> dict[str, Any]:
    """The history for scripts: ``change_points`` (each with at least test, cap, gpu_model, commit and
    change_pct), ``trends``, ``pending``, every series, the stations in order, the energy and its cost."""
    history, tariff = report.history, report.tariff
    return {
        "format": HISTORY_FORMAT,
        "version": HISTORY_VERSION,
        "simulated": history.simulated,
        "metric": history.metric.key,
        "unit": history.metric.unit,
        "order": history.order,
        "settings": {"confidence": report.settings.confidence, "min_change_pct": report.settings.min_change_pct,
                     "min_runs": report.settings.min_runs, "min_trend_points": report.settings.min_trend_points},
        "change_points": [_change_data(report, r, c) for r, c in report.changes],
        "trends": [_trend_data(report, r, t) for r, t in report.trends],
        "pending": [{**_series_id(r.series), "commit": _commit(report, r, p.index), "change_pct": p.change_pct}
                    for r, p in report.pending],
        "series": [{**_series_id(r.series), "commits": len(r.series.points), "newest_mean": r.series.points[-1].mean,
                    "energy": tariff.data(sum(p.energy_j for p in r.series.points))} for r in report.results],
        "stations": [{"commit": s.commit, "label": s.label, "at": s.at.isoformat(), "run_ids": list(s.run_ids),
                      "simulated": s.simulated} for s in history.stations],
        "energy": {**tariff.data(report.energy_j), "runs": len(history.runs),
                   "price_per_kwh": tariff.price_per_kwh, "carbon_g_per_kwh": tariff.carbon_g_per_kwh,
                   "per_run": [{"run_id": run.run_id, "commit": history.stations[run.station].commit,
                                **tariff.data(run.energy_j)} for run in history.runs]},
        "skipped": list(history.skipped),
        "notes": list(history.notes),
    }


def _series_id(series: Series) -> dict[str, Any]:
    key = series.key
    return {"test": key.test, "case_id": key.case_id, "cap": key.cap, "gpu_model": key.gpu_model,
            "backend": key.backend, "gpu_slot": key.gpu_slot, "simulated": series.simulated}


def _commit(report: HistoryReport, result: SeriesResult, index: int) -> str | None:
    station = report.history.stations[result.series.points[index].station]
    return station.commit or station.label


def _change_data(report: HistoryReport, result: SeriesResult, change: ChangePoint) -> dict[str, Any]:
    station = report.history.stations[result.series.points[change.index].station]
    return {
        **_series_id(result.series),
        "commit": station.commit or station.label,
        "previous_commit": _commit(report, result, change.index - 1),
        "run_ids": list(station.run_ids),
        "at": station.at.isoformat(),
        "change_pct": change.change_pct,
        "change_low_pct": change.low_pct,
        "change_high_pct": change.high_pct,
        "direction": "increase" if change.change_pct > 0 else "decrease",
        "before_mean": change.before.mean,
        "after_mean": change.after.mean,
        "runs_before": change.before.size,
        "runs_after": change.after.size,
        "t": change.t if change.t != float("inf") else None,
        "t_needed": change.t_needed,
        "session_noise_pct": change.noise_pct,
    }


def _trend_data(report: HistoryReport, result: SeriesResult, trend: Trend) -> dict[str, Any]:
    return {
        **_series_id(result.series),
        "from_commit": _commit(report, result, trend.start),
        "to_commit": _commit(report, result, trend.end - 1),
        "commits": trend.end - trend.start,
        "total_pct": trend.total_pct,
        "total_low_pct": trend.low_pct,
        "total_high_pct": trend.high_pct,
        "per_commit_pct": trend.per_point_pct,
        "t": trend.t if trend.t != float("inf") else None,
        "t_needed": trend.t_needed,
    }
