"""The terminal: the comparison led by what changed, and the results, both within ``COLUMNS``.

A table that is wider than the terminal wraps into unreadable noise, so every table here is
fitted to the width: names are cut in the middle first (``alex…-train``), then the least needed
columns go (the old figure, the interval), and prose wraps at word boundaries. A gated run
prints the comparison only (the results it compares are in it); the folded parts are counts.
"""

from __future__ import annotations

import math
import shutil
import textwrap
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..gate.records import Comparison
from ..meter.results import EnergyResult
from ..runs import PASSED, Outcome
from ..runs.records import CaseEntry, RunDocument
from .digest import (
    CHANGE_COLUMNS,
    SIM_FOOTNOTE,
    SIM_MARK,
    Digest,
    digest,
    gate_text,
    grouped_notes,
    regression_details,
    skipped_groups,
    title_text,
)
from .numbers import cap_sort_key, elide, kwh_text, short_names, si
from .phase_changes import phase_lines
from .sweep import workload_key

DEFAULT_WIDTH = 80
_GAP = "  "
_MIN_NAME = 8
_COMFORT_NAME = 14


def terminal_width() -> int:
    """``COLUMNS`` when set, else the terminal's width, else 80 (a CI log, a pipe)."""
    return max(40, shutil.get_terminal_size((DEFAULT_WIDTH, 24)).columns)


@dataclass(frozen=True)
class Column:
    """A table column: ``drop`` > 0 may go when the table is too wide (highest first); ``elide`` may be
    cut, in the middle (where test ids differ least) or, with ``keep_start``, at the end (a GPU model's
    name says what tells models apart first: ``H100 80GB H…``)."""

    title: str
    right: bool = False
    drop: int = 0
    elide: bool = False
    keep_start: bool = False


def fit_table(columns: Sequence[Column], rows: Sequence[Sequence[str]], width: int) -> list[str]:
    """Aligned columns no wider than ``width``: names cut to a readable length, then columns go.

    Order: cut the names down to ``_COMFORT_NAME``; drop columns by ``drop`` (highest first),
    giving the names back what is freed; cut the names down to ``_MIN_NAME``; cut the lines.
    """
    natural = [max([len(c.title)] + [len(r[i]) for r in rows]) for i, c in enumerate(columns)]
    keep = list(range(len(columns)))
    size = list(natural)

    def excess() -> int:
        return sum(size[i] for i in keep) + len(_GAP) * (len(keep) - 1) - width

    def fit_names(floor: int) -> None:
        for i in keep:
            if columns[i].elide:
                size[i] = max(min(floor, natural[i]), min(natural[i], size[i] - excess()))

    fit_names(_COMFORT_NAME)
    while excess() > 0 and any(columns[i].drop for i in keep):
        keep.remove(max((i for i in keep if columns[i].drop), key=lambda i: columns[i].drop))
        for i in keep:
            if columns[i].elide and excess() < 0:     # give the names back what the dropped column freed
                size[i] = min(natural[i], size[i] - excess())
    fit_names(_MIN_NAME)

    def line(cells: Sequence[str]) -> str:
        parts = []
        for i in keep:
            text = elide(cells[i], size[i], keep_start=columns[i].keep_start)
            parts.append(text.rjust(size[i]) if columns[i].right else text.ljust(size[i]))
        return _GAP.join(parts).rstrip()[:width]

    rule = _GAP.join("-" * size[i] for i in keep)[:width]
    return [line([c.title for c in columns]), rule] + [line(r) for r in rows]


def wrap(text: str, width: int, indent: str = "") -> list[str]:
    """Prose wrapped at ``width``; continuation lines indented by two more spaces."""
    return textwrap.wrap(text, width=width, initial_indent=indent, subsequent_indent=indent + "  ",
                         break_on_hyphens=False, break_long_words=False) or [indent.rstrip()]


# -- the comparison --------------------------------------------------------------------------------

CHANGE_TABLE = (
    Column("verdict"), Column("test", elide=True), Column("cap"), Column("metric", drop=2),
    Column("old", right=True, drop=3), Column("new", right=True), Column("change", right=True),
    Column("interval", drop=1),
)
assert tuple(c.title for c in CHANGE_TABLE) == CHANGE_COLUMNS


def comparison_lines(comparison: Comparison, width: int | None = None, skipped: Sequence = ()) -> list[str]:
    """The comparison for the terminal: the outcome and counts, the changed cases, then the rest as counts."""
    width = width or terminal_width()
    report = digest(comparison, skipped)
    lines = wrap(f"energy comparison: {title_text(comparison)}", width)
    if not comparison.comparable:
        return lines + [w for note in comparison.notes for w in wrap(f"note: {note}", width, "  ")]
    lines += wrap(f"{report.outcome}: {report.counts_text()}", width)
    if report.changed:
        rows = [[row.cells()[c] for c in CHANGE_COLUMNS] for row in report.changed]
        lines += fit_table(CHANGE_TABLE, rows, width)
    for line in phase_lines(report):
        lines += wrap(line.lstrip(), width, line[:len(line) - len(line.lstrip())])
    lines += _folded_lines(report, width)
    lines += _context_lines(report, width)
    for detail in regression_details(comparison):
        lines += textwrap.wrap(detail, width=width, subsequent_indent="  ", break_on_hyphens=False)
    return lines


def _folded_lines(report: Digest, width: int) -> list[str]:
    """Everything that is not a change, as counts (the reports list them)."""
    out = []
    if report.inconclusive:
        top = report.inconclusive[0]
        out += wrap(f"{len(report.inconclusive)} inconclusive (cannot tell: the interval is wider than the threshold; "
                    f"largest {top.name} {top.case.cap} {top.cells()['change']}): {report.hint()}", width)
    rest = [f"{len(items)} {word}" for word, items in (("unchanged", report.unchanged), ("new", report.new),
                                                       ("missing from this run", report.missing)) if items]
    if rest:
        out += wrap(", ".join(rest) + " (listed in the Markdown and HTML reports)", width)
    for cap, reason, tests in skipped_groups(report.skipped):
        out += wrap(f"skipped: cap {cap} for {len(tests)} test{'s' if len(tests) != 1 else ''}: {reason}", width)
    return out


def _context_lines(report: Digest, width: int) -> list[str]:
    comparison = report.comparison
    out = []
    if comparison.old_machine is not None:
        out += wrap(f"baseline: {comparison.old_machine.describe()}", width)
    out += wrap(f"this run: {comparison.new_machine.describe()}", width)
    out += wrap(f"gate: {gate_text(comparison)}", width)
    if comparison.simulated:
        out += wrap(SIM_FOOTNOTE, width)
    for note in grouped_notes(comparison, report.names):
        out += wrap(f"note: {note}", width)
    return out


def tables_for(comparisons: Sequence[Comparison], width: int | None = None,
               skipped: Sequence = ()) -> list[str]:
    """Several comparisons (one per GPU model) one after the other, a blank line between."""
    lines: list[str] = []
    for comparison in comparisons:
        if lines:
            lines.append("")
        lines += comparison_lines(comparison, width, skipped)
    return lines


# -- results -----------------------------------------------------------------------------------------

def results_lines(entries: Sequence[CaseEntry], width: int | None = None, most_tests: int | None = None) -> list[str]:
    """A run's results: one row per workload with its ETS at each cap across, or one row per case.

    The matrix is used when it fits ``width`` (the usual sweep); otherwise a row per case with
    as many figures as fit. ``most_tests``: a suite of hundreds of tests (``--energy-all``) shows
    only that many, those of highest ETS per call, and says how to see the rest.
    """
    width = width or terminal_width()
    if not entries:
        return []
    names = short_names(workload_key(e.case_id, e.cap) for e in entries)
    lines: list[str] = []
    shown = entries
    if most_tests is not None and len(names) > most_tests:
        shown = _heaviest(entries, most_tests)
        lines = wrap(f"the {most_tests} tests of highest ETS per call, of {len(names)} (pytest -v: all; a saved run "
                     "and the JSON, Markdown and HTML reports hold every case):", width)
    caps = sorted({(e.cap, e.limit_enforced_w) for e in shown}, key=lambda c: cap_sort_key(*c))
    cap_labels = list(dict.fromkeys(c for c, _ in caps))
    simulated = any(e.simulated for e in entries)
    table: list[str] = []
    if len(cap_labels) > 1:
        matrix = _matrix(shown, cap_labels, names)
        if matrix and max(len(line) for line in matrix) <= width:
            table = [f"ETS per call at each cap ({len(shown)} cases):"] + matrix
    lines += table or _long_table(shown, names, width)
    lines += wrap(_bound_line(entries, names), width)
    lines += _domain_lines(shown, names, width)
    lines += _not_passed_lines(entries, width)
    lines += wrap("method: " + ", ".join(sorted({_method(e) for e in entries})), width)
    if any(n != w for w, n in names.items()):
        lines += wrap("test: the workload's parameters; full ids in the JSON, Markdown and HTML reports", width)
    if simulated:
        lines += wrap(SIM_FOOTNOTE, width)
    return lines


def _heaviest(entries: Sequence[CaseEntry], tests: int) -> list[CaseEntry]:
    """The entries of the ``tests`` workloads whose highest ETS per call (over their caps) is highest."""
    highest: dict[str, float] = {}
    for e in entries:
        key = workload_key(e.case_id, e.cap)
        highest[key] = max(highest.get(key, -math.inf), e.summary.ets_j)
    kept = set(sorted(highest, key=lambda key: (-highest[key], key))[:tests])
    return [e for e in entries if workload_key(e.case_id, e.cap) in kept]


def _domain_lines(entries: Sequence[CaseEntry], names: dict[str, str], width: int) -> list[str]:
    """``--energy-domains``: each case's ETS per call by domain (its GPUs, the host's CPU and DRAM, the node)."""
    cases = [e for e in entries if e.per_domain and e.gpu_slot == 0]
    if not cases:
        return []
    lines = ["ETS per call by domain (the host's figures are the whole host's):"]
    for entry in cases:
        figures = ", ".join(f"{domain} {si(f.ets_j, 'J')}" for domain, f in entry.per_domain.items())
        lines += wrap(f"{names[workload_key(entry.case_id, entry.cap)]} [{entry.cap}]: {figures}", width, indent="  ")
    return lines


def _not_passed_lines(entries: Sequence[CaseEntry], width: int) -> list[str]:
    """Cases whose test did not pass are shown, and said to be no baseline."""
    by_outcome: dict[str, list[str]] = {}
    for entry in entries:
        if not entry.passed and entry.case_id not in by_outcome.get(entry.outcome, []):
            by_outcome.setdefault(entry.outcome, []).append(entry.case_id)
    if not by_outcome:
        return []
    counts = ", ".join(f"{len(ids)} {outcome}" for outcome, ids in sorted(by_outcome.items()))
    return wrap(f"not passed ({counts}): measured, but no baseline and never compared: "
                + ", ".join(i for ids in by_outcome.values() for i in ids), width)


def _bound_share(entry: CaseEntry) -> float | None:
    return entry.summary.ets_bound_share


def _bound_text(share: float | None) -> str:
    return "-" if share is None else f"±{100 * share:.1f}%"


def _bound_line(entries: Sequence[CaseEntry], names: dict[str, str]) -> str:
    """How far the true ETS may lie from the figures: the meter's bound, at a glance."""
    known = [(share, e) for e in entries if (share := _bound_share(e)) is not None]
    if not known:
        return "ETS bound: not recorded (runs saved before the meter bounded its figures)"
    widest, entry = max(known, key=lambda pair: pair[0])
    shares = sorted(share for share, _ in known)
    median = shares[len(shares) // 2]
    return (f"ETS bound (the meter's, widest side): median {_bound_text(median)}, widest {_bound_text(widest)} "
            f"({names[workload_key(entry.case_id, entry.cap)]} at {entry.cap})")


def _method(entry: CaseEntry) -> str:
    """``counter (sim)``, ``sampling (sim) from usage``: how the figures were measured."""
    text = entry.method + (SIM_MARK if entry.simulated else "")
    return text + (f" from {entry.power_source}" if entry.power_source else "")


def _matrix(entries: Sequence[CaseEntry], caps: Sequence[str], names: dict[str, str]) -> list[str]:
    cells: dict[tuple[str, int], dict[str, str]] = {}
    for e in entries:
        row = cells.setdefault((names[workload_key(e.case_id, e.cap)], e.gpu_index), {})
        row[e.cap] = si(e.summary.ets_j, "J")
    gpus = {gpu for _, gpu in cells}
    header = ["test"] + (["GPU"] if len(gpus) > 1 else []) + list(caps)
    rows = [[name] + ([str(gpu)] if len(gpus) > 1 else []) + [figures.get(cap, "-") for cap in caps]
            for (name, gpu), figures in sorted(cells.items())]
    columns = [Column(h, right=i >= (2 if len(gpus) > 1 else 1)) for i, h in enumerate(header)]
    return fit_table(columns, rows, 10 ** 6)


def _long_table(entries: Sequence[CaseEntry], names: dict[str, str], width: int) -> list[str]:
    columns = (Column("test", elide=True), Column("cap"), Column("GPU", drop=4), Column("ETS", right=True),
               Column("±", right=True, drop=1), Column("T", right=True, drop=2), Column("EDP", right=True, drop=3),
               Column("P", right=True, drop=5), Column("n", right=True, drop=6), Column("cv", right=True, drop=7))
    ordered = sorted(entries, key=lambda e: (names[workload_key(e.case_id, e.cap)], cap_sort_key(e.cap, e.limit_enforced_w)))
    rows = []
    for e in ordered:
        s = e.summary
        rows.append([names[workload_key(e.case_id, e.cap)], e.cap, str(e.gpu_index), si(s.ets_j, "J"),
                     _bound_text(_bound_share(e)), si(s.time_s, "s"), si(s.edp_js, "J s"), si(s.mean_power_w, "W"), str(s.n),
                     f"{s.ets_cv * 100:.1f}%" if s.n > 1 else "-"])
    return fit_table(columns, rows, width)


def run_lines(doc: RunDocument, width: int | None = None) -> list[str]:
    """A saved run: its description and its results."""
    width = width or terminal_width()
    return wrap(f"run {doc.describe()}", width) + results_lines(doc.cases, width)


def session_lines(cases: Iterable[tuple[str, EnergyResult]], width: int | None = None,
                  outcomes: Mapping[str, Outcome] | None = None, most_tests: int | None = None) -> list[str]:
    """The session's measured cases (``(case id, EnergyResult)``, ``outcomes`` by case id) as results lines."""
    outcomes = outcomes or {}
    entries = [entry for case_id, result in cases for entry in CaseEntry.entries_of(case_id, result, outcomes.get(case_id, PASSED))]
    return results_lines(entries, width, most_tests)


def skipped_lines(skipped: Sequence, width: int) -> list[str]:
    lines = []
    for cap, reason, tests in skipped_groups(skipped):
        lines += wrap(f"skipped: cap {cap} for {len(tests)} test{'s' if len(tests) != 1 else ''}: {reason}", width)
    return lines


def budget_wait_line(waited_s: float, tests: float, session_s: float, period_s: float | None) -> str | None:
    """What tests with an energy budget spent waiting for their figures, where it is a large part of
    the session (at least 2 s and a fifth of it); else None. A budget's verdict is the test's own, so
    a budgeted test waits for the counter's publications after its region before it ends."""
    if waited_s < 2.0 or waited_s < 0.2 * session_s:
        return None
    period = f" ({period_s * 1000:.0f} ms here)" if period_s else ""
    count = int(tests)
    return (f"{count} test{'s' if count != 1 else ''} with an energy budget waited {waited_s:.1f} s in all for "
            f"{'their' if count != 1 else 'its'} figures, {min(waited_s / session_s, 1.0):.0%} of the session: a "
            f"budget's verdict is the test's own, and a region shorter than the energy counter's period{period} "
            f"needs the counter's next two publications; budget tests that run a period or longer, and gate "
            f"shorter ones against a saved run instead (--energy-compare), which waits once, at the end")


def notice_lines(repairs: Sequence[str], notices: Sequence[str], coarse: Sequence[str],
                 unparametrised: Mapping[str, Sequence[str]], width: int,
                 named_once: Mapping[str, Sequence[str]] | None = None,
                 kept_markers: Mapping[str, Sequence[str]] | None = None) -> list[str]:
    """What the user should know at the end of a session, as lines: the plugin never says it with a
    warning, which a suite's ``filterwarnings = error`` would turn into a failed test."""
    lines = []
    for message in repairs:
        lines += wrap(f"gpuenergy: a run died with a GPU capped: {message}", width)
    for message in notices:
        lines += wrap(f"gpuenergy: note: {message}", width)
    if coarse:
        count, cases = len(coarse), list(dict.fromkeys(coarse))
        lines += wrap(f"gpuenergy: note: {count} measured region{'s were' if count != 1 else ' was'} too short for the "
                      f"GPU's counter to resolve (coarse): the ETS is interpolated and its bound is wide (each case's "
                      f"notes say how wide); measure with energy_meter.measure(fn), which repeats the work until it is "
                      f"long enough (a test that does: a longer min_time): {_listed(cases)}", width)
    for fixture, tests in unparametrised.items():
        count = len(tests)
        if fixture.startswith("_gpuenergy"):      # --energy-all's own: the test took no fixture of the plugin
            lines += wrap(f"gpuenergy: note: {count} test{'s' if count != 1 else ''} ran once, at the GPU's current "
                          f"limit, not once per cap: pytest cannot run a unittest.TestCase method or a doctest once per "
                          f"setting (a test function runs at every cap): {_listed(tests)}", width)
            continue
        lines += wrap(f"gpuenergy: note: {count} test{'s' if count != 1 else ''} took {fixture} where pytest cannot run "
                      f"a test once per setting (a unittest.TestCase method, request.getfixturevalue): "
                      f"{'they' if count != 1 else 'it'} ran once, at the GPU's current setting; take the fixture as "
                      f"an argument of a test function instead: {_listed(tests)}", width)
    for reason, tests in (named_once or {}).items():
        count = len(tests)
        lines += wrap(f"gpuenergy: note: {count} test{'s' if count != 1 else ''} ran once, at the GPU's current limit, "
                      f"not once per cap: {reason}, and a cap in the name would miss them (@pytest.mark.gpu_caps(...) "
                      f"on such a test runs it at its caps, under names with the cap): {_listed(tests)}", width)
    for marker, tests in (kept_markers or {}).items():      # (plugin.markers.checked_markers)
        count = len(tests)
        lines += wrap(f"gpuenergy: note: this project registers a marker named {marker} of its own: --energy-all "
                      f"measured {count} {'tests that carry it and take' if count != 1 else 'test that carries it and takes'} "
                      f"none of the plugin's fixtures as if {'they' if count != 1 else 'it'} had none (on a test that takes "
                      f"energy_meter or gpu_power_cap the marker is the plugin's): {_listed(tests)}", width)
    return lines


def _listed(tests: Sequence[str]) -> str:
    """The first five, and "..." where there are more."""
    return f"{', '.join(tests[:5])}{' ...' if len(tests) > 5 else ''}"


def top_lines(cases: Sequence[tuple[str, EnergyResult]], total: Any, count: int, width: int | None = None) -> list[str]:
    """``--energy-top``: the session's GPU energy (``total``: ``plugin.session.SessionTotal`` or None)
    and the ``count`` tests that used the most of it in their measured regions (every call of every
    repetition: a test's ETS per call times its calls), with the bound and the share of the total."""
    width = width or terminal_width()
    used = []
    for case_id, result in cases:
        energy = sum(rep.ets_j * rep.calls for rep in result.repetitions)
        low = sum((rep.ets_low_j if rep.ets_low_j is not None else rep.ets_j) * rep.calls for rep in result.repetitions)
        high = sum((rep.ets_high_j if rep.ets_high_j is not None else rep.ets_j) * rep.calls for rep in result.repetitions)
        used.append((energy, low, high, case_id, result))
    measured_j = sum(u[0] for u in used)
    lines = []
    mark = SIM_MARK if any(r.simulated for *_, r in used) or (total is not None and total.simulated) else ""
    if total is not None:
        lines += wrap(f"GPU energy over the session: {si(total.ets_j, 'J')} ({kwh_text(total.ets_j)}; "
                      f"{si(total.low_j, 'J')}-{si(total.high_j, 'J')}) on {total.gpus} GPU{'s' if total.gpus != 1 else ''} "
                      f"in {total.time_s:.1f} s{_beyond_text(total) or mark}; {si(measured_j, 'J')} "
                      f"({_share(measured_j, total.ets_j)}) in the measured regions of {len(used)} cases, the rest "
                      f"between and around them (setup, collection, idle)", width)
    else:
        lines += wrap(f"GPU energy in the measured regions of {len(used)} cases: {si(measured_j, 'J')}{mark} "
                      f"(the session's total needs the GPUs' energy counters)", width)
    heaviest = sorted(used, key=lambda u: (-u[0], u[3]))[:count]
    if not heaviest:
        return lines
    lines.append(f"the {len(heaviest)} cases that used the most energy:")
    base = total.ets_j if total is not None else measured_j
    rows = [[case_id, result.per_gpu[0].cap, si(energy, "J"), f"{si(low, 'J')}-{si(high, 'J')}", _share(energy, base),
             str(sum(rep.calls for rep in result.repetitions))]
            for energy, low, high, case_id, result in heaviest]
    columns = (Column("test", elide=True), Column("cap", drop=3), Column("energy", right=True),
               Column("bound", right=True, drop=1), Column("share", right=True), Column("calls", right=True, drop=2))
    return lines + fit_table(columns, rows, width)


def _beyond_text(total: Any) -> str:
    """Where the session's time is longer than pytest's: the simulated GPUs' work outran the wall clock."""
    beyond_s = getattr(total, "beyond_wall_s", 0.0)
    return f" (sim; {beyond_s:.1f} s of it the simulated GPUs' work beyond the wall clock)" if beyond_s >= 0.05 else ""


def _share(part: float, whole: float) -> str:
    return f"{100 * part / whole:.1f} %" if whole > 0 else "-"
