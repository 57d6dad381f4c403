"""``--energy-phases``: where each test's energy went, a table of its phases per measured region.

A region with phase marks (``energy_meter.phase``) has each phase's ETS per call with its bound,
its time, power and shares (``EnergyResult.phases``). The table fits the terminal's width like
the others (``terminal.fit_table``); a phase the counter's windows could not tell apart from
others is starred, with the reason under the table, because its figure is then a split the data
do not support and only its bound is information; the result's notes about the split (calls in
step with the counter's publications, marks dated on the host) follow it. Regions measured with
``measure(fn, by_op=True)`` get the same table of their operator classes (``EnergyResult.op_classes``).
"""

from __future__ import annotations

from collections.abc import Sequence

from ..meter.results import EnergyResult, Phases
from .digest import SIM_FOOTNOTE, SIM_MARK
from .numbers import si
from .terminal import Column, fit_table, wrap

PHASE_TABLE = (
    Column("phase", elide=True), Column("ETS", right=True), Column("bound", right=True, drop=1),
    Column("T", right=True, drop=3), Column("P", right=True, drop=4), Column("time", right=True, drop=2),
    Column("energy", right=True),
)
NOT_TOLD_APART = "*"


OP_CLASS_TABLE = (Column("class", elide=True), *PHASE_TABLE[1:])


def phase_lines(cases: Sequence[tuple[str, EnergyResult]], width: int) -> list[str]:
    """Per case with phases: its title line, the table and the reasons for starred phases (empty
    when no case has phases, with one line saying how to mark them); then, per case measured with
    ``measure(fn, by_op=True)``, the same table of its operator classes."""
    marked = [(case_id, result, phases) for case_id, result in cases if (phases := result.phases)]
    by_op = [(case_id, result, classes) for case_id, result in cases if (classes := result.op_classes)]
    lines: list[str] = []
    if marked:
        lines += wrap("energy per phase, per call (the bound is the fit's, at 99 %; time and energy: shares of the "
                      "region's):", width)
        lines += _tables(marked, PHASE_TABLE, width, "phases: ")
    elif not by_op:
        return wrap("energy per phase: no measured region had phase marks (mark them with "
                    "`with energy_meter.phase(\"forward\"):` inside the region)", width)
    if by_op:
        lines += wrap("energy per operator class, per call (energy_meter.measure(fn, by_op=True); the bound is the "
                      "fit's, at 99 %; time and energy: shares of the region's):", width)
        lines += _tables(by_op, OP_CLASS_TABLE, width, "op classes: ")
    if any(result.simulated for _, result, _ in marked + by_op):
        lines += wrap(SIM_FOOTNOTE, width)
    return lines


def _tables(found: Sequence[tuple[str, EnergyResult, Phases]], table: tuple[Column, ...], width: int,
            note_prefix: str) -> list[str]:
    """Each case's table, the reasons for its starred rows, and the result's notes about its split
    (those starting with ``note_prefix``: why the calls cannot be split, marks dated on the host)."""
    lines = []
    for case_id, result, phases in found:
        rows, reasons = [], []
        for name, figure in phases.items():
            star = "" if figure.distinguishable else NOT_TOLD_APART
            rows.append([name + star, si(figure.ets_j, "J"), f"{si(figure.ets_low_j, 'J')}-{si(figure.ets_high_j, 'J')}",
                         si(figure.time_s, "s"), si(figure.power_w, "W"), f"{100 * figure.time_share:.1f} %",
                         f"{100 * figure.energy_share:.1f} %"])
            if star and figure.why_not:
                reasons.append(f"{name}: {figure.why_not}")
        mark = SIM_MARK if result.simulated else ""
        lines += wrap(f"{case_id} [{result.per_gpu[0].cap}]{mark}: ETS {si(result.ets_j, 'J')} per call", width)
        lines += ["  " + line for line in fit_table(table, rows, width - 2)]
        for reason in reasons:
            lines += wrap(f"{NOT_TOLD_APART} not told apart: {reason}", width, indent="  ")
        for note in dict.fromkeys(n for n in result.notes if n.startswith(note_prefix)):   # once each, in order
            lines += wrap(f"note: {note[len(note_prefix):]}", width, indent="  ")
    return lines
