"""The report's plots, drawn with matplotlib: an overview first, then one small multiple per workload.

- **Heatmap** (``heatmap_svg``): workloads x caps (caps in value order), each cell the ETS
  against the same workload at the default limit, in per cent, on a diverging colour-blind-safe
  scale (PuOr); regressed cases outlined in black, suspect figures hatched.
- **Pareto view** (``pareto_svg``): per workload, ETS against T across its caps, one line per
  GPU model; the caps no other cap beats in both are filled, the default limit is a star.
- **Phases** (``phase_shares_svg``): per test with phase marks, each phase's share of the
  region's energy (with the fit's bound) beside its share of the time.
- **Sweep** (``sweep_svg``): per workload, ETS, T and EDP against the enforced limit, with the
  repetitions' spread, the default limit dashed, the baseline in grey, the energy-optimal cap
  in a ring and the EDP-optimal cap in a larger square (concentric, so neither hides the
  other), suspect figures crossed. No text is drawn over the data: what the markers mean is the
  page's legend (``legend_svg``) and the words above the plots.

Colours are the Okabe-Ito palette (distinguishable with every common colour-vision deficiency),
each line at least 3:1 against white (WCAG's AA for graphics); text is near-black. Axis ticks
use ``EngFormatter`` (``400 µJ``, ``1.2 kJ``), never ``5e-05``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from .svg import EDGE_PT, figure_svg, figure_title, fitted_title, new_figure, place_axes, rc_context, title_room_pt
from .sweep import Optimum, Sweep, SweepPoint

if TYPE_CHECKING:
    from ..meter.results import PhaseFigures

METRICS = (("ets", "ETS", "J"), ("time", "T", "s"), ("edp", "EDP", "J s"))
COLOURS = {"ets": "#0072B2", "time": "#009E73", "edp": "#D55E00"}     # Okabe-Ito blue, green, vermillion
MODEL_COLOURS = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#56B4E9", "#000000")
BASELINE_COLOUR = "#8c8c8c"
ETS_OPT_COLOUR = "#000000"
EDP_OPT_COLOUR = "#6a3d9a"
SUSPECT_COLOUR = "#b3261e"
_DEFAULT_LINE = "#555555"


def _eng(unit: str):
    from matplotlib.ticker import EngFormatter

    return EngFormatter(unit=unit, places=None, sep=" ")


def sweep_svg(sweep: Sweep, optima: dict[str, Optimum | None], baseline: Sweep | None, *, name: str,
              element_id: str, regressed_caps: Sequence[str] = ()) -> str:
    """ETS, T and EDP of one workload against the enforced limit, stacked with a shared axis."""
    with rc_context():
        fig = new_figure(3.6, 4.6, placed=True)
        axes = fig.subplots(3, 1, sharex=True)
        suspects = {id(s.point) for s in sweep.suspects()}
        for ax, (metric, label, unit) in zip(axes, METRICS):
            _sweep_axis(ax, sweep, metric, label, unit, baseline, optima, suspects, regressed_caps)
        axes[-1].set_xlabel("enforced power limit")
        axes[-1].xaxis.set_major_formatter(_eng("W"))
        sim = " (simulated)" if sweep.simulated else ""
        place_axes(fig, axes, top_pt=figure_title(fig, name, sim, 9.5, bold=True), gap_pt=9.5)
    return figure_svg(fig, _sweep_label(sweep, optima, name), element_id=element_id)


def _sweep_axis(ax, sweep: Sweep, metric: str, label: str, unit: str, baseline: Sweep | None,
                optima: dict[str, Optimum | None], suspects: set[int], regressed_caps: Sequence[str]) -> None:
    xs = [p.limit_enforced_w for p in sweep.points]
    ys = [p.value(metric) for p in sweep.points]
    ax.axvline(sweep.default_limit_w, color=_DEFAULT_LINE, linestyle=(0, (4, 3)), linewidth=1.0, zorder=1)
    if baseline is not None:
        ax.plot([p.limit_enforced_w for p in baseline.points], [p.value(metric) for p in baseline.points],
                color=BASELINE_COLOUR, linestyle=(0, (5, 3)), marker="o", markersize=3, linewidth=1.4, zorder=2)
    ax.errorbar(xs, ys, yerr=[p.spread(metric) for p in sweep.points], color=COLOURS[metric], marker="o",
                markersize=4, linewidth=2.0, capsize=3, elinewidth=1.2, zorder=3)
    for point in sweep.points:
        if point.cap in regressed_caps:
            ax.plot([point.limit_enforced_w], [point.value(metric)], marker="o", markersize=9, markerfacecolor="none",
                    markeredgecolor=SUSPECT_COLOUR, markeredgewidth=2.0, zorder=4)
        if id(point) in suspects:
            ax.plot([point.limit_enforced_w], [point.value(metric)], marker="X", markersize=9, color=SUSPECT_COLOUR,
                    zorder=6)
    _optimum_markers(ax, metric, optima)
    ax.set_ylabel(f"{label}")
    ax.yaxis.set_major_formatter(_eng(unit))
    ax.grid(True, color="#e6e6e6", linewidth=0.6)
    ax.margins(x=0.08, y=0.15)


def _optimum_markers(ax, metric: str, optima: dict[str, Optimum | None]) -> None:
    """Ring (least ETS) inside a square (least EDP): concentric, so coinciding optima both show."""
    shapes = (("edp", "s", 15, EDP_OPT_COLOUR), ("ets", "o", 10, ETS_OPT_COLOUR))
    for which, marker, size, colour in shapes:
        found = optima.get(which)
        if found is None:
            continue
        point = found.point
        ax.plot([point.limit_enforced_w], [point.value(metric)], marker=marker, markersize=size,
                markerfacecolor="none", markeredgecolor=colour, markeredgewidth=1.8, zorder=5)


def _sweep_label(sweep: Sweep, optima: dict[str, Optimum | None], name: str) -> str:
    sim = " (simulated)" if sweep.simulated else ""
    parts = [f"{name} on {sweep.gpu_model}, GPU {sweep.gpu_index}{sim}: ETS, T and EDP against the power limit "
             f"at {len(sweep.points)} caps"]
    for metric, what in (("ets", "least ETS"), ("edp", "least EDP")):
        found = optima.get(metric)
        if found is not None:
            parts.append(f"{what} at {found.point.cap} ({found.point.limit_enforced_w:g} W)")
    return "; ".join(parts)


def legend_svg(with_baseline: bool) -> str:
    """What the sweep plots' lines and markers mean, drawn once for the page."""
    from matplotlib.lines import Line2D

    handles = [
        Line2D([], [], color=COLOURS["ets"], marker="o", markersize=4, linewidth=2, label="ETS, T, EDP (mean ± 1 sd)"),
        Line2D([], [], color=_DEFAULT_LINE, linestyle=(0, (4, 3)), label="default limit"),
        Line2D([], [], linestyle="none", marker="o", markersize=9, markerfacecolor="none",
               markeredgecolor=ETS_OPT_COLOUR, markeredgewidth=1.8, label="energy-optimal cap (least ETS)"),
        Line2D([], [], linestyle="none", marker="s", markersize=12, markerfacecolor="none",
               markeredgecolor=EDP_OPT_COLOUR, markeredgewidth=1.8, label="EDP-optimal cap (least ETS × T)"),
        Line2D([], [], linestyle="none", marker="o", markersize=9, markerfacecolor="none",
               markeredgecolor=SUSPECT_COLOUR, markeredgewidth=2, label="regressed case"),
        Line2D([], [], linestyle="none", marker="X", markersize=8, color=SUSPECT_COLOUR,
               label="suspect: faster than at the default limit"),
    ]
    if with_baseline:
        handles.insert(1, Line2D([], [], color=BASELINE_COLOUR, linestyle=(0, (5, 3)), marker="o", markersize=3,
                                 label="baseline run"))
    with rc_context():
        fig = new_figure(7.2, 0.75)
        fig.legend(handles=handles, loc="center", ncol=3, frameon=False, fontsize=8)
    return figure_svg(fig, "Legend of the sweep plots: " + "; ".join(str(h.get_label()) for h in handles),
                      css_class="legend-plot")


# -- overview --------------------------------------------------------------------------------------

def heatmap_svg(rows: Sequence[tuple[str, Sequence[SweepPoint]]], caps: Sequence[str], *, title: str,
                outlined: set[tuple[str, str]], hatched: set[tuple[str, str]]) -> str:
    """Workloads x caps: ETS against each workload's default-limit point, in per cent."""
    import numpy as np

    values = np.full((len(rows), len(caps)), np.nan)
    for r, (_, points) in enumerate(rows):
        reference = _reference(points)
        for point in points:
            if reference is not None and point.cap in caps and reference.ets_j > 0:
                values[r, list(caps).index(point.cap)] = 100.0 * (point.ets_j / reference.ets_j - 1.0)
    finite = values[np.isfinite(values)]
    span = max(10.0, float(np.max(np.abs(finite)))) if finite.size else 10.0
    with rc_context():
        fig = new_figure(min(8.0, 2.2 + 0.72 * len(caps)), 0.9 + 0.26 * len(rows))
        ax = fig.add_subplot()
        image = ax.pcolormesh(np.arange(len(caps) + 1) - 0.5, np.arange(len(rows) + 1) - 0.5, values, cmap="PuOr_r",
                              vmin=-span, vmax=span, edgecolors="#ffffff", linewidth=0.5)   # vector cells, no bitmap
        ax.invert_yaxis()
        _annotate_cells(ax, values, span)
        _outline(ax, rows, caps, outlined, hatched)
        ax.set_xticks(range(len(caps)), labels=list(caps))
        ax.set_yticks(range(len(rows)), labels=[name for name, _ in rows])
        ax.tick_params(length=0)
        ax.xaxis.set_ticks_position("top")
        # Below the cells, its label across: beside them a rotated label is taller than two rows and is cut.
        colourbar = fig.colorbar(image, ax=ax, location="bottom", shrink=0.7, pad=0.03, aspect=40)
        colourbar.set_label("ETS against the default limit (%)")
        colourbar.solids.set_rasterized(False)
    label = (f"{title}: heatmap of ETS at {len(caps)} caps against the default limit for {len(rows)} workloads; "
             f"{len(outlined)} regressed cases outlined")
    return figure_svg(fig, label, css_class="plot heatmap", fixed=True)


def _annotate_cells(ax, values, span: float) -> None:
    for (r, c), value in _cells(values):
        text = "–" if not math.isfinite(value) else "0" if round(value) == 0 else f"{value:+.0f}"
        dark = math.isfinite(value) and abs(value) > 0.55 * span
        ax.text(c, r, text, ha="center", va="center", fontsize=7.5, color="#ffffff" if dark else "#1d1d1f")


def _cells(values):
    rows, cols = values.shape
    return (((r, c), float(values[r, c])) for r in range(rows) for c in range(cols))


def _outline(ax, rows, caps, outlined: set[tuple[str, str]], hatched: set[tuple[str, str]]) -> None:
    from matplotlib.patches import Rectangle

    for r, (name, _) in enumerate(rows):
        for c, cap in enumerate(caps):
            if (name, cap) in outlined:
                ax.add_patch(Rectangle((c - 0.46, r - 0.42), 0.92, 0.84, fill=False, edgecolor="#000000", linewidth=2.2))
            if (name, cap) in hatched:
                ax.add_patch(Rectangle((c - 0.5, r - 0.5), 1, 1, fill=False, hatch="///", edgecolor=SUSPECT_COLOUR,
                                       linewidth=0))


def _reference(points: Sequence[SweepPoint]) -> SweepPoint | None:
    at_default = [p for p in points if p.at_default]
    return at_default[0] if at_default else (max(points, key=lambda p: p.limit_enforced_w) if points else None)


def pareto_svg(name: str, series: Sequence[tuple[str, Sweep]], *, element_id: str) -> str:
    """ETS against T across the caps of one workload, one line per GPU model."""
    import matplotlib
    from matplotlib.ticker import MaxNLocator

    with rc_context():
        # Several models: their legend goes under the plot (full model names are wider than the plot
        # beside it), and the figure grows by a line per model to hold it.
        legend_pt = 0.2 * 72 * len(series) if len(series) > 1 else 0.0
        fig = new_figure(2.6, 2.3 + legend_pt / 72, placed=True)
        ax = fig.add_subplot()
        for index, (model, sweep) in enumerate(series):
            colour = MODEL_COLOURS[index % len(MODEL_COLOURS)]
            points = sweep.points
            ax.plot([p.time_s for p in points], [p.ets_j for p in points], color=colour, linewidth=1.2,
                    label=model)
            front = _pareto_front(points)
            for point in points:
                filled = id(point) in front
                ax.plot([point.time_s], [point.ets_j], marker="*" if point.at_default else "o",
                        markersize=9 if point.at_default else 4.5, color=colour,
                        markerfacecolor=colour if filled else "#ffffff", markeredgewidth=1.2)
        ax.set_xlabel("T")
        ax.set_ylabel("ETS")
        # At most four ticks: matplotlib spaces x ticks for labels 3 em wide, "500 ms" is 4.5 em
        ax.xaxis.set_major_locator(MaxNLocator(nbins=3))
        ax.xaxis.set_major_formatter(_eng("s"))
        ax.yaxis.set_major_formatter(_eng("J"))
        ax.grid(True, color="#e6e6e6", linewidth=0.6)
        if len(series) > 1:
            fig.legend(*ax.get_legend_handles_labels(), loc="lower center", frameon=False, fontsize=6.5,
                       bbox_to_anchor=(0.5, EDGE_PT / (fig.get_figheight() * 72)), bbox_transform=fig.transFigure)
        place_axes(fig, [ax], top_pt=title_room_pt(8.5, pad_pt=matplotlib.rcParams["axes.titlepad"]), below_pt=legend_pt)
        box, width_pt = ax.get_position(), fig.get_figwidth() * 72
        centre_pt = (box.x0 + box.x1) / 2 * width_pt     # the title is centred on the axes: as wide as fits either side
        ax.set_title(fitted_title(name, "", 8.5, 2 * min(centre_pt, width_pt - centre_pt) - 2 * EDGE_PT), fontsize=8.5)
    models = ", ".join(model for model, _ in series)
    return figure_svg(fig, f"{name}: ETS against T across the caps on {models}; filled: caps no other beats in both; "
                           f"star: the default limit", element_id=element_id, css_class="plot pareto")


def _pareto_front(points: Sequence[SweepPoint]) -> set[int]:
    """The points no other point beats in both ETS and T."""
    front = set()
    for p in points:
        if not any(q.ets_j <= p.ets_j and q.time_s <= p.time_s and (q.ets_j < p.ets_j or q.time_s < p.time_s)
                   for q in points):
            front.add(id(p))
    return front


# -- phases ----------------------------------------------------------------------------------------

TIME_SHARE_COLOUR = "#b4b4b4"       # grey: the reference the energy is read against
ENERGY_SHARE_COLOUR = "#0072B2"     # Okabe-Ito blue, as ETS in the sweeps


def phase_shares_svg(name: str, phases: Mapping[str, PhaseFigures], *, simulated: bool, element_id: str) -> str:
    """Per phase, its share of the region's energy (with the fit's bound) beside its share of time.

    One pair of bars per phase, in the order the phases first appear: a phase whose energy bar is
    longer than its time bar draws more than the region's mean power. A phase the fit could not tell
    apart from the others is hatched and says so in its label.
    """
    names = list(phases)
    total_j = math.fsum(f.ets_j for f in phases.values())
    with rc_context():
        fig = new_figure(3.6, 0.75 + 0.42 * len(names))
        ax = fig.add_subplot()
        rows = range(len(names))
        times = [100.0 * phases[n].time_share for n in names]
        energies = [100.0 * phases[n].energy_share for n in names]
        lows = [max(0.0, e - 100.0 * phases[n].ets_low_j / total_j) if total_j > 0 else 0.0 for n, e in zip(names, energies)]
        highs = [max(0.0, 100.0 * phases[n].ets_high_j / total_j - e) if total_j > 0 else 0.0 for n, e in zip(names, energies)]
        ax.barh([r - 0.19 for r in rows], times, height=0.36, color=TIME_SHARE_COLOUR, label="share of time")
        bars = ax.barh([r + 0.19 for r in rows], energies, height=0.36, color=ENERGY_SHARE_COLOUR,
                       xerr=[lows, highs], error_kw={"elinewidth": 1.0, "capsize": 2, "ecolor": "#1d1d1f"},
                       label="share of energy, with its bound")
        for bar, n in zip(bars, names):
            if not phases[n].distinguishable:
                bar.set_hatch("///")
                bar.set_edgecolor("#ffffff")
        right = max([*times, *(e + h for e, h in zip(energies, highs)), 1.0])
        for r, t, e, h in zip(rows, times, energies, highs):
            ax.text(t + 0.01 * right, r - 0.19, f"{t:.0f} %", va="center", fontsize=7.5, color="#3a3a3a")
            ax.text(e + h + 0.01 * right, r + 0.19, f"{e:.0f} %", va="center", fontsize=7.5, color="#1d1d1f")
        ax.set_yticks(list(rows), labels=[n if phases[n].distinguishable else f"{n} (not told apart)" for n in names])
        ax.invert_yaxis()
        ax.set_xlim(0, right * 1.18)
        ax.set_xlabel("share of the region (%)")
        ax.tick_params(axis="y", length=0)
        ax.grid(True, axis="x", color="#e6e6e6", linewidth=0.6)
        ax.set_axisbelow(True)
        fig.legend(loc="outside lower center", ncol=2, frameon=False, fontsize=7.5)
        figure_title(fig, name, " (simulated)" if simulated else "", 8.5, bold=True)
    shares = "; ".join(f"{n} {t:.0f} % of the time, {e:.0f} % of the energy" for n, t, e in zip(names, times, energies))
    return figure_svg(fig, f"{name}{' (simulated)' if simulated else ''}: each phase's share of the energy beside its "
                           f"share of the time: {shares}", element_id=element_id, css_class="plot phases")
