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
"""

from __future__ import annotations

import io
import itertools
import re
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


def new_figure(width_in: float, height_in: float) -> Any:
    """A matplotlib Figure (not pyplot: no global state, no GUI backend) of this size in inches."""
    from matplotlib.figure import Figure

    return Figure(figsize=(width_in, height_in), layout="constrained")


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
        fig.savefig(buffer, format="svg", metadata={"Date": None, "Creator": None, "Format": None, "Type": None})
    text = buffer.getvalue()
    text = text[text.index("<svg"):]
    text = re.sub(r"<metadata>.*?</metadata>", "", text, flags=re.S)
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
