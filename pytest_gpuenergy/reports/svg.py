"""Matplotlib figures as inline SVG elements for the HTML report: accessible, unique, no network.

Matplotlib's SVG backend writes a standalone file; inlined many times in one page it needs three
changes: the XML prologue and namespace declarations go (HTML parses inline SVG without them,
and the report must name no URL), every ``id`` gets the figure's own prefix (matplotlib numbers
them ``figure_1``, ``axes_1``... in every figure, and a reference resolving into another plot
draws the wrong clip or marker), and the root gets a role, an accessible name and a title, so a
screen reader says what each of the plots shows. Its size comes from CSS (``width: 100%``), so
the plots fill their column at any page width and never overflow it.

Matplotlib is imported here only, when a page is drawn: a test session that writes no HTML
report never pays for the import.

Most plots have their axes placed by ``place_axes``, not by matplotlib's constrained layout: the
layout draws a figure once more before saving it to measure every artist (half of a plot's time;
the main job's 126-case page took 4.7 s, 38 plots), where the room a plot's labels need follows
from a few strings' widths: the tick labels, the axis labels and the title.
"""

from __future__ import annotations

import functools
import io
import itertools
import math
import re
from collections.abc import Sequence
from html import escape
from typing import Any

_COUNTER = itertools.count(1)
_ID = re.compile(r'\bid="([^"]+)"')
_RC = {
    "svg.fonttype": "none",            # real text: selectable, searchable, read by screen readers
    "svg.hashsalt": "pytest-gpuenergy",  # the same page for the same data
    "font.family": "sans-serif",
    "font.size": 9.0,
    "axes.titlesize": 9.5,
    "axes.labelsize": 9.0,
    "xtick.labelsize": 8.0,
    "ytick.labelsize": 8.0,
    "legend.fontsize": 8.0,
    "axes.edgecolor": "#6b6b6b",
    "axes.labelcolor": "#1d1d1f",
    "xtick.color": "#3a3a3a",
    "ytick.color": "#3a3a3a",
    "text.color": "#1d1d1f",
}


def new_figure(width_in: float, height_in: float, *, placed: bool = False) -> Any:
    """A matplotlib Figure (not pyplot: no global state, no GUI backend) of this size in inches, laid
    out by matplotlib's constrained layout, or, ``placed``, by ``place_axes`` once its data is drawn."""
    from matplotlib.figure import Figure

    return Figure(figsize=(width_in, height_in), layout=None if placed else "constrained")


EDGE_PT = 3.0       # room left at the figure's edges (constrained layout's own pad: 3 pt)
_SLACK_PT = 1.0     # what a placement may be short of matplotlib's own measure (0.3-0.5 pt found)


@functools.lru_cache(maxsize=512)
def text_size_pt(text: str, size_pt: float, bold: bool = False) -> tuple[float, float]:
    """Width and height in points of ``text`` on one line in the report's font, as matplotlib lays it
    out: a line is at least as tall as "lp" (ascender to descender). Call it inside ``rc_context``."""
    from matplotlib.font_manager import FontProperties
    from matplotlib.textpath import text_to_path

    font = FontProperties(size=size_pt, weight="bold" if bold else "normal")
    width, height, _ = text_to_path.get_text_width_height_descent(text, font, ismath=False)
    _, line, _ = text_to_path.get_text_width_height_descent("lp", font, ismath=False)
    return width, max(height, line)


def fitted_title(name: str, suffix: str, size_pt: float, width_pt: float, *, bold: bool = False) -> str:
    """``name`` + ``suffix`` on one line no wider than ``width_pt``: ``name`` elided in its middle where
    it is too long (the card under a plot gives the whole id), ``suffix`` (" (simulated)") always whole.
    Call it inside ``rc_context``."""
    from .numbers import elide

    chars = len(name)
    while chars > 1 and text_size_pt(elide(name, chars) + suffix, size_pt, bold)[0] > width_pt:
        chars -= 1
    return elide(name, chars) + suffix


def figure_title(fig: Any, name: str, suffix: str, size_pt: float, *, bold: bool = False) -> float:
    """``name`` + ``suffix`` over the whole figure, fitted to its width (``fitted_title``): at its top
    edge where ``place_axes`` places the axes below it, where constrained layout puts it otherwise (a
    title placed by hand is one that layout makes no room for). Returns the room it takes above the
    axes, ``place_axes``'s ``top_pt`` (constrained layout measures it itself)."""
    width_pt, height_pt = (float(v) * 72.0 for v in fig.get_size_inches())
    at_edge = {"y": 1 - EDGE_PT / height_pt, "va": "top"} if fig.get_layout_engine() is None else {}
    fig.suptitle(fitted_title(name, suffix, size_pt, width_pt - 2 * EDGE_PT, bold=bold), fontsize=size_pt,
                 fontweight="bold" if bold else "normal", **at_edge)
    return title_room_pt(size_pt, bold=bold, pad_pt=EDGE_PT)


def title_room_pt(size_pt: float, *, bold: bool = False, pad_pt: float = 0.0) -> float:
    """The room above the axes for a one-line title of this size ``pad_pt`` above them (edge included)."""
    return EDGE_PT + text_size_pt("lp", size_pt, bold)[1] + pad_pt + _SLACK_PT


def place_axes(fig: Any, axes: Sequence[Any], *, top_pt: float, below_pt: float = 0.0, gap_pt: float = 0.0) -> None:
    """Place ``axes``, stacked top to bottom and sharing their x axis (the last one's labelled), with
    ``top_pt`` above them, ``below_pt`` below the lowest one's x labels (a legend's room) and ``gap_pt``
    between them: the left margin holds the widest y tick label and the y label, the bottom the x tick
    labels (rotated as they are drawn) and the x label, the right a last x tick label that reaches past
    the axes."""
    import matplotlib

    width_pt, height_pt = (float(v) * 72.0 for v in fig.get_size_inches())
    lowest = axes[-1]
    tallest_pt = max((down for _, _, down in _x_label_boxes(lowest)), default=0.0)
    bottom_pt = below_pt + EDGE_PT + _axis_room_pt(lowest.xaxis) + tallest_pt + _SLACK_PT
    rows = len(axes)
    axes_height_pt = (height_pt - top_pt - bottom_pt - gap_pt * (rows - 1)) / rows
    fig.subplots_adjust(top=1 - top_pt / height_pt, bottom=bottom_pt / height_pt, hspace=gap_pt / axes_height_pt)
    tick_pt = matplotlib.rcParams["ytick.labelsize"]      # (the y ticks follow from the heights just set)
    widest_pt = max((text_size_pt(label, tick_pt)[0] for ax in axes for _, label in _tick_labels(ax.yaxis, ax.get_ylim())),
                    default=0.0)
    left_pt = EDGE_PT + _axis_room_pt(axes[0].yaxis) + widest_pt + _SLACK_PT
    fig.subplots_adjust(left=left_pt / width_pt, right=1 - EDGE_PT / width_pt)    # the x ticks follow from the width
    axes_width_pt = width_pt - left_pt - EDGE_PT
    reach_pt = max((at * axes_width_pt + right - axes_width_pt for at, right, _ in _x_label_boxes(lowest)), default=0.0)
    fig.subplots_adjust(right=1 - (EDGE_PT + max(0.0, reach_pt)) / width_pt)


def _axis_room_pt(axis: Any) -> float:
    """An axis's label, its pad, and its ticks' length and pad (not its tick labels, the caller's)."""
    import matplotlib

    rc = matplotlib.rcParams
    label = axis.label.get_text()
    label_pt = text_size_pt(label, float(axis.label.get_fontsize()))[1] + axis.labelpad if label else 0.0
    if axis.axis_name == "x":
        return label_pt + rc["xtick.major.size"] + rc["xtick.major.pad"]
    return label_pt + rc["ytick.major.size"] + rc["ytick.major.pad"]


def _tick_labels(axis: Any, limits: tuple[float, float]) -> list[tuple[float, str]]:
    """The major ticks drawn (those inside the view) and their labels, as the axis will draw them."""
    low, high = sorted(limits)
    slack = 1e-9 * (high - low)
    locations = [v for v in axis.get_majorticklocs() if low - slack <= v <= high + slack]
    return list(zip(locations, axis.get_major_formatter().format_ticks(locations)))


def _x_label_boxes(ax: Any) -> list[tuple[float, float, float]]:
    """Each drawn x tick label's box as drawn (its size, rotation and alignment): where its tick is, as a
    share of the axes' width, and in points how far the box reaches right of the tick and down from
    it (at least a line's height: a label's box is as tall as "lp"). (How far left is not asked: the
    y labels' margin is wider than any first x label's half, or a rotated one's reach.)"""
    low, high = ax.get_xlim()
    shown = ax.xaxis.get_majorticklabels()
    if not shown:                    # an axis without ticks
        return []
    size_pt, angle = float(shown[0].get_fontsize()), math.radians(shown[0].get_rotation())
    align = shown[0].get_horizontalalignment()          # (set for every tick alike)
    boxes = []
    for location, label in _tick_labels(ax.xaxis, (low, high)):
        width_pt, line_pt = text_size_pt(label or "lp", size_pt)
        across = width_pt * abs(math.cos(angle)) + line_pt * abs(math.sin(angle))
        down = width_pt * abs(math.sin(angle)) + line_pt * abs(math.cos(angle))
        right = {"right": 0.0, "left": across}.get(align, across / 2)
        boxes.append(((location - low) / (high - low), right, down))
    return boxes


def rc_context() -> Any:
    import matplotlib

    return matplotlib.rc_context(_RC)  # type: ignore[arg-type]  # matplotlib types rc keys as literals


def figure_svg(fig: Any, label: str, *, element_id: str | None = None, css_class: str = "plot",
               fixed: bool = False) -> str:
    """``fig`` as one ``<svg>`` element named ``label`` for assistive technology: as wide as its column
    up to its own width, or, ``fixed``, always its own width (a table of figures, in a box that scrolls:
    shrunk to a phone's width its numbers would be too small to read)."""
    buffer = io.StringIO()
    with rc_context():
        # no <metadata> (its date would make the same data a different page), and no stylesheet
        fig.savefig(buffer, format="svg", metadata={"Date": None, "Creator": None, "Format": None, "Type": None})
    text = buffer.getvalue()
    text = text[text.index("<svg"):]
    text = re.sub(r"<style[^>]*>.*?</style>", "", text, flags=re.S)
    prefix = f"g{next(_COUNTER)}-"
    text = _prefix_ids(text, prefix)
    title_id = f"{prefix}title"
    root = (f'<svg class="{css_class}" role="img" aria-labelledby="{title_id}"'
            + (f' id="{escape(element_id)}"' if element_id else ""))
    text = re.sub(r"<svg\b[^>]*?(viewBox=\"[^\"]*\")[^>]*>",
                  lambda m: f'{root} {m.group(1)} style="{_size_style(m.group(1), fixed)}" '
                            f'preserveAspectRatio="xMidYMid meet"><title id="{title_id}">{escape(label)}</title>',
                  text, count=1)
    return re.sub(r">\s+<", "><", text).strip()


def _size_style(view_box: str, fixed: bool) -> str:
    """The figure's own width in CSS pixels (its viewBox is in points, 72 to the inch; CSS has 96 px to
    the inch) as its widest: a plot may shrink to fit a phone but never grows past it, so every plot's
    text keeps the size the figure gave it (one type scale for the page: 9 pt labels are 12 px wherever
    they are)."""
    width_px = round(float(view_box.split('"')[1].split()[2]) * 96 / 72)
    return f"width:{width_px}px;max-width:none" if fixed else f"max-width:{width_px}px"


def _prefix_ids(text: str, prefix: str) -> str:
    """Every id and every reference to one (``#id``, ``url(#id)``) made unique in the page."""
    ids = set(_ID.findall(text))
    text = _ID.sub(lambda m: f'id="{prefix}{m.group(1)}"', text)
    return re.sub(r"#([A-Za-z_][\w.\-]*)", lambda m: f"#{prefix}{m.group(1)}" if m.group(1) in ids else m.group(0), text)
