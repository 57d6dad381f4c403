"""The sweep and Pareto plots place their axes themselves (``svg.place_axes``), not by matplotlib's
constrained layout: whatever the data's scale and however many GPU models share a plot, no text is
cut off at the figure's edge, none overlaps another or an axes, and the margins are as tight as the
constrained layout's (it stays the judge: the test runs it on the same figure).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from pytest_gpuenergy.reports import plots
from pytest_gpuenergy.reports.sweep import sweeps

from helpers import make_doc

CAPS_7 = (280.0, 350.0, 420.0, 490.0, 560.0, 630.0, 700.0)
MODELS = ("NVIDIA H100 80GB HBM3 (simulated)", "NVIDIA A100-SXM4-80GB", "Tesla V100-SXM2-16GB")
# Energies of 40 mJ to 1 GJ: tick labels of 4 to 7 characters ("12 J", "137.5 mJ", "9.25 kJ s").
SCALES = (1e-4, 0.031, 7.0, 2e6)


def scaled_sweep(scale: float, name: str = "alexnet-train"):
    doc = make_doc(seed=1, workloads=(name,), caps_w=CAPS_7, percent=True, test="t.py::test_energy")
    cases = tuple(replace(case, repetitions=tuple(replace(rep, ets_j=rep.ets_j * scale, time_s=rep.time_s * scale ** 0.5)
                                                  for rep in case.repetitions)) for case in doc.cases)
    return sweeps(replace(doc, cases=cases))[0]


@pytest.fixture
def drawn(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """The figures the plots hand to ``figure_svg``, kept for inspection."""
    figures: list[Any] = []
    original = plots.figure_svg

    def keep(fig: Any, *args: Any, **kwargs: Any) -> str:
        figures.append(fig)
        return original(fig, *args, **kwargs)

    monkeypatch.setattr(plots, "figure_svg", keep)
    return figures


def layout(fig: Any) -> tuple[list[Any], list[Any], Any]:
    """The figure drawn (Agg, 100 dpi): the box of every text drawn, of every axes, and the figure's."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    from pytest_gpuenergy.reports.svg import rc_context

    with rc_context():
        canvas = FigureCanvasAgg(fig)
        fig.set_dpi(100)
        canvas.draw()
        renderer = canvas.get_renderer()
        texts = [*fig.texts, *(t for legend in fig.legends for t in legend.get_texts())]
        for ax in fig.axes:
            texts += [ax.title, ax.xaxis.label, ax.yaxis.label, *drawn_tick_labels(ax.xaxis), *drawn_tick_labels(ax.yaxis)]
            texts += [t for legend in [ax.get_legend()] if legend is not None for t in legend.get_texts()]
        boxes = [t.get_window_extent(renderer) for t in texts if t.get_visible() and t.get_text().strip()]
    return boxes, [ax.get_window_extent(renderer) for ax in fig.axes], fig.bbox


def drawn_tick_labels(axis: Any) -> list[Any]:
    """The axis' major tick labels that are drawn: those of ticks inside its view."""
    low, high = sorted(axis.get_view_interval())
    slack = 1e-9 * (high - low)
    locations = axis.get_majorticklocs()
    return [tick.label1 for tick in axis.get_major_ticks(len(locations)) if low - slack <= tick.get_loc() <= high + slack]


def overlap_px(a: Any, b: Any) -> float:
    """How far two boxes overlap, in the direction they overlap least (0 where they do not)."""
    across = min(a.x1, b.x1) - max(a.x0, b.x0)
    up = min(a.y1, b.y1) - max(a.y0, b.y0)
    return min(across, up) if across > 0 and up > 0 else 0.0


def check_placed(fig: Any) -> tuple[float, float, float, float]:
    """Every text inside the figure, clear of every other text and of every axes; returns the axes'
    margins (left, right, top, bottom) in points."""
    texts, axes, figure = layout(fig)
    for box in texts:
        assert figure.x0 - 0.5 <= box.x0 and box.x1 <= figure.x1 + 0.5, ("cut off left or right", box, figure)
        assert figure.y0 - 0.5 <= box.y0 and box.y1 <= figure.y1 + 0.5, ("cut off at the top or bottom", box, figure)
    for i, box in enumerate(texts):
        for other in texts[i + 1:]:
            assert overlap_px(box, other) <= 0.5, ("texts overlap", box, other)
        for area in axes:
            assert overlap_px(box, area) <= 0.5, ("a text on an axes", box, area)
    return margins_pt(fig)


def margins_pt(fig: Any) -> tuple[float, float, float, float]:
    width_pt, height_pt = (float(v) * 72.0 for v in fig.get_size_inches())
    boxes = [ax.get_position() for ax in fig.axes]
    return (min(b.x0 for b in boxes) * width_pt, (1 - max(b.x1 for b in boxes)) * width_pt,
            (1 - max(b.y1 for b in boxes)) * height_pt, min(b.y0 for b in boxes) * height_pt)


def gaps_pt(fig: Any) -> list[float]:
    """The room between stacked axes, top to bottom, in points."""
    height_pt = float(fig.get_size_inches()[1]) * 72.0
    boxes = sorted((ax.get_position() for ax in fig.axes), key=lambda b: -b.y1)
    return [(upper.y0 - lower.y1) * height_pt for upper, lower in zip(boxes, boxes[1:])]


def constrained_margins_pt(fig: Any) -> tuple[float, float, float, float]:
    """The margins matplotlib's constrained layout gives the same figure."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    from pytest_gpuenergy.reports.svg import rc_context

    with rc_context():
        fig.set_layout_engine("constrained")
        FigureCanvasAgg(fig).draw()
    return margins_pt(fig)


def assert_as_tight(placed: tuple[float, ...], constrained: tuple[float, ...]) -> None:
    """The left, right and bottom margins within 2 pt of constrained layout's, and at most 1.5 pt tighter
    (placed from the labels' widths they come within 1.2 pt of it; the title above is placed
    differently, so the top is left out)."""
    for side, name in ((0, "left"), (1, "right"), (3, "bottom")):
        assert -1.5 <= placed[side] - constrained[side] <= 2.0, (name, placed, constrained)


@pytest.mark.parametrize("scale", SCALES)
def test_a_sweep_plot_places_its_labels_inside_clear_and_as_tight_as_constrained_layout(drawn, scale):
    sweep = scaled_sweep(scale)
    plots.sweep_svg(sweep, {}, sweep, name="alexnet-train", element_id="s")
    (fig,) = drawn
    placed, placed_gaps, above = check_placed(fig), gaps_pt(fig), title_gaps_pt(fig)
    constrained = constrained_margins_pt(fig)
    assert len(placed_gaps) == 2 and all(max(gaps_pt(fig)) - 1.0 <= gap <= min(gaps_pt(fig)) + 2.0 for gap in placed_gaps), (
        placed_gaps, gaps_pt(fig))
    assert_as_tight(placed, constrained)
    assert all(0.0 <= gap <= 5.0 for gap in above), above       # the title: at the top, just above the axes


def title_gaps_pt(fig: Any) -> tuple[float, float]:
    """The room above the title (the figure's, else the top axes') and between it and the axes below, in pt."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    from pytest_gpuenergy.reports.svg import rc_context

    with rc_context():
        canvas = FigureCanvasAgg(fig)
        fig.set_dpi(72)                      # a pixel is a point
        canvas.draw()
        top_axes = max(fig.axes, key=lambda ax: ax.get_position().y1)
        title = fig.texts[0] if fig.texts else top_axes.title
        box = title.get_window_extent(canvas.get_renderer())
        axes_top = top_axes.get_window_extent(canvas.get_renderer()).y1
    return fig.bbox.y1 - box.y1, box.y0 - axes_top


@pytest.mark.parametrize("models", [1, 2, 3])
@pytest.mark.parametrize("scale", SCALES)
def test_a_pareto_plot_keeps_its_labels_and_its_models_legend_inside_and_clear(drawn, scale, models):
    sweep = scaled_sweep(scale)
    plots.pareto_svg("alexnet-train", [(model, sweep) for model in MODELS[:models]], element_id="p")
    (fig,) = drawn
    placed = check_placed(fig)
    legends = fig.legends
    assert len(legends) == (1 if models > 1 else 0)
    assert all(0.0 <= gap <= 9.0 for gap in title_gaps_pt(fig)), title_gaps_pt(fig)    # (9: the title's own pad, 6 pt)
    if legends:
        assert [t.get_text() for t in legends[0].get_texts()] == list(MODELS[:models])
    else:       # (constrained layout does not make room for a legend placed in the figure's margin)
        assert_as_tight(placed, constrained_margins_pt(fig))


def test_axes_without_labels_get_no_room_for_them(drawn):
    """``place_axes`` on a plot whose axes have no label: the margins hold the tick labels only, as
    constrained layout's do."""
    from pytest_gpuenergy.reports.svg import EDGE_PT, figure_svg, new_figure, place_axes, rc_context

    with rc_context():
        fig = new_figure(3.0, 2.0, placed=True)
        ax = fig.add_subplot()
        ax.plot([1.0, 2.0, 3.0], [10.0, 30.0, 20.0])
        place_axes(fig, [ax], top_pt=EDGE_PT)
    figure_svg(fig, "unlabelled")
    assert_as_tight(check_placed(fig), constrained_margins_pt(fig))


@pytest.mark.parametrize(("fastest_s", "slowest_s"), [(0.5, 0.95), (0.25, 0.5), (0.15, 0.4), (0.3, 1.2), (0.35, 0.8)])
def test_a_pareto_plots_time_labels_neither_crowd_nor_reach_past_the_figure(drawn, fastest_s, slowest_s):
    """Times from ``fastest_s`` to ``slowest_s``: "500 ms" is wider than matplotlib spaces x ticks for (its
    labels overlapped at 0.5-0.95 s, constrained layout or not), and a last label at the axes' right edge
    reaches past it by half its width (the right margin holds it)."""
    sweep = scaled_sweep(1.0)
    ordered = sorted(sweep.points, key=lambda p: p.time_s)
    step_s = (slowest_s - fastest_s) / (len(ordered) - 1)
    points = tuple(replace(point, time_s=fastest_s + k * step_s) for k, point in enumerate(ordered))
    plots.pareto_svg("alexnet-train", [(MODELS[0], replace(sweep, points=points))], element_id="p")
    check_placed(drawn[0])


def test_the_check_sees_a_label_cut_off_and_a_legend_on_the_labels(drawn):
    """The control: a sweep with its left margin taken away, and a Pareto plot of three models with
    its legend's room taken away, fail the check."""
    sweep = scaled_sweep(7.0)
    plots.sweep_svg(sweep, {}, None, name="alexnet-train", element_id="s")
    plots.pareto_svg("alexnet-train", [(model, sweep) for model in MODELS], element_id="p")
    swept, pareto = drawn
    check_placed(swept)
    swept.subplots_adjust(left=0.02)
    with pytest.raises(AssertionError, match="cut off"):
        check_placed(swept)
    check_placed(pareto)
    pareto.subplots_adjust(bottom=0.2)
    with pytest.raises(AssertionError, match="texts overlap|a text on an axes"):
        check_placed(pareto)


def test_the_plots_left_to_constrained_layout_keep_every_text_inside(drawn):
    """The heatmap (18 workloads at 7 caps), a phase plot with a phase the fit could not tell apart, and
    the legend keep matplotlib's constrained layout: their labels, cells' numbers and legends fit."""
    from pytest_gpuenergy.meter.results import PhaseFigures
    from pytest_gpuenergy.reports.sweep import sweeps as all_sweeps

    workloads = [f"{n}-{m}" for n in ("alexnet", "autoenc", "deepq", "memnet", "residual", "seq2seq", "speech",
                                      "transformer", "vgg") for m in ("train", "infer")]
    doc = make_doc(seed=1, workloads=workloads, caps_w=CAPS_7, percent=True, test="t.py::test_energy")
    found = all_sweeps(doc)
    caps = [p.cap for p in found[0].points]
    plots.heatmap_svg([(s.workload, s.points) for s in found], caps, title="ETS", outlined=set(), hatched=set())
    phases = {name: PhaseFigures(ets, 0.9 * ets, 1.1 * ets, 0.01, ets / 0.01, share, share, told, "")
              for name, ets, share, told in (("forward", 4.0, 0.3, True), ("backward", 6.0, 0.5, True),
                                              ("optimizer-update", 2.0, 0.2, False))}
    plots.phase_shares_svg("transformer-train [60%]", phases, simulated=True, element_id="f")
    plots.legend_svg(True)
    assert len(drawn) == 3
    for fig in drawn:
        texts, areas, figure = layout(fig)
        with_cells = texts + [t.get_window_extent() for ax in fig.axes for t in ax.texts]
        assert len(with_cells) >= 5
        for box in with_cells:
            assert figure.x0 - 0.5 <= box.x0 and box.x1 <= figure.x1 + 0.5 and figure.y0 - 0.5 <= box.y0 \
                and box.y1 <= figure.y1 + 0.5, ("cut off", box, figure)
        for title in fig.texts:          # the phase plot's title: above its axes, not on them
            assert all(overlap_px(title.get_window_extent(), area) <= 0.5 for area in areas), title.get_text()


LONG_NAME = "test_checkout_flow_retries_an_expired_card_and_emails_the_customer[visa-3ds]"


def test_a_long_test_name_is_elided_in_its_middle_and_simulated_is_never_cut_off(drawn):
    """An existing suite's test names (``--energy-all``) are longer than a plot is wide: the title keeps
    the name's start and end and says "(simulated)" whole; the card under the plot gives the whole id."""
    from pytest_gpuenergy.meter.results import PhaseFigures

    sweep = scaled_sweep(7.0, name=LONG_NAME)
    pages = [plots.sweep_svg(sweep, {}, None, name=LONG_NAME, element_id="s"),
             plots.pareto_svg(LONG_NAME, [(MODELS[0], sweep)], element_id="p")]
    assert all(f">{LONG_NAME}" in page.split("</title>")[0] for page in pages)    # the accessible name: whole
    phases = {name: PhaseFigures(ets, 0.9 * ets, 1.1 * ets, 0.01, ets / 0.01, share, share, True, "")
              for name, ets, share in (("forward", 4.0, 0.4), ("backward", 6.0, 0.6))}
    plots.phase_shares_svg(LONG_NAME, phases, simulated=True, element_id="f")
    swept, pareto, phased = drawn
    titles = [swept.texts[0].get_text(), pareto.axes[0].get_title(), phased.texts[0].get_text()]
    assert titles[0].endswith(" (simulated)") and titles[2].endswith(" (simulated)"), titles
    for title in titles:
        name = title.removesuffix(" (simulated)")
        head, tail = name.split("…")
        assert LONG_NAME.startswith(head) and LONG_NAME.endswith(tail) and len(head) >= 10 and len(tail) >= 10, title
    # as long as fits: one character more would not (the sweep's title: bold 9.5 pt over 3.6 in less the edges)
    from pytest_gpuenergy.reports.numbers import elide
    from pytest_gpuenergy.reports.svg import EDGE_PT, rc_context, text_size_pt

    with rc_context():
        shown = titles[0].removesuffix(" (simulated)")
        longer = elide(LONG_NAME, len(shown) + 1) + " (simulated)"
        assert text_size_pt(longer, 9.5, True)[0] > 3.6 * 72 - 2 * EDGE_PT >= text_size_pt(titles[0], 9.5, True)[0]
    check_placed(swept)
    check_placed(pareto)
    texts, _, figure = layout(phased)
    assert all(figure.x0 - 0.5 <= box.x0 and box.x1 <= figure.x1 + 0.5 for box in texts), "a phase plot's text cut off"


def test_a_name_that_fits_is_left_whole(drawn):
    sweep = scaled_sweep(7.0)
    plots.sweep_svg(sweep, {}, None, name="alexnet-train", element_id="s")
    plots.pareto_svg("alexnet-train", [(MODELS[0], sweep)], element_id="p")
    swept, pareto = drawn
    assert swept.texts[0].get_text() == "alexnet-train (simulated)" and pareto.axes[0].get_title() == "alexnet-train"


def test_a_figure_becomes_one_inline_svg_with_ids_of_its_own_a_name_and_its_own_width():
    """``figure_svg``: no XML prologue, metadata or stylesheet; every id prefixed, unique in the page, and
    every reference to one pointing into the same plot (matplotlib numbers its ids alike in every
    figure); the root named by its title for screen readers; as wide as the figure at most (in CSS px:
    96 to the inch), or exactly that wide where ``fixed``."""
    import re

    from pytest_gpuenergy.reports.svg import figure_svg, new_figure, rc_context

    def drawn(**kwargs: Any) -> str:
        with rc_context():
            fig = new_figure(3.0, 2.0)
            ax = fig.add_subplot()
            ax.plot([0, 1, 2], [1, 3, 2], marker="o")          # markers are <use> references to a <defs> path
            ax.set_title("work & rest")
        return figure_svg(fig, "a <plot> & its label", **kwargs)

    first, second = drawn(element_id="sweep-1"), drawn(fixed=True, css_class="plot heatmap")
    for page in (first, second):
        assert page.startswith("<svg ") and page.endswith("</svg>") and page.count("<svg") == 1
        assert "<?xml" not in page and "<metadata" not in page and "<style" not in page and "<!DOCTYPE" not in page
        assert not re.search(r">\s+<", page)
        # its only character data is the title's and the plot's own text (nothing left of what was cut)
        bare = re.sub(r"<(text|title)\b[^>]*>.*?</\1>", "", page, flags=re.S)
        assert not re.sub(r"<[^>]+>", "", bare).strip(), re.sub(r"<[^>]+>", "", bare)[:200]
        # colours are not references: white and the line's own blue are left as they are
        assert "#ffffff" in page and "#1f77b4" in page and "-ffffff" not in page
        ids = re.findall(r'\bid="([^"]+)"', page)
        own = [i for i in ids if i != "sweep-1"]
        assert len(own) > 3 and all(i.startswith(own[0].split("-")[0] + "-") for i in own), own
        references = re.findall(r'(?:xlink:href|href)="#([^"]+)"|url\(#([^)]+)\)', page)
        assert references, "matplotlib's markers and clips are references"
        for found in (ref for pair in references for ref in pair if ref):
            assert found in ids, found
    first_ids = set(re.findall(r'\bid="([^"]+)"', first)) - {"sweep-1"}
    second_ids = set(re.findall(r'\bid="([^"]+)"', second))
    assert first_ids and second_ids and not first_ids & second_ids, "ids shared between two plots of one page"
    title_id = re.search(r'aria-labelledby="([^"]+)"', first).group(1)
    assert f'<title id="{title_id}">a &lt;plot&gt; &amp; its label</title>' in first
    assert re.match(r'<svg class="plot" role="img" aria-labelledby="[^"]+" id="sweep-1" viewBox="0 0 216 144" '
                    r'style="max-width:288px" preserveAspectRatio="xMidYMid meet"><title', first), first[:200]
    assert re.match(r'<svg class="plot heatmap" role="img" aria-labelledby="[^"]+" viewBox="0 0 216 144" '
                    r'style="width:288px;max-width:none"', second), second[:200]
    assert "work &amp; rest" in first         # the plot's own text, real text (svg.fonttype none)


def test_a_figure_title_is_bold_where_asked_and_at_the_top_edge_only_where_the_axes_are_placed():
    from pytest_gpuenergy.reports.svg import EDGE_PT, figure_title, new_figure, rc_context

    with rc_context():
        placed, laid_out = new_figure(3.6, 4.6, placed=True), new_figure(3.6, 4.6)
        figure_title(placed, "alexnet-train", " (simulated)", 9.5, bold=True)
        figure_title(laid_out, "alexnet-train", "", 9.5)
    first, second = placed.texts[0], laid_out.texts[0]
    assert (first.get_text(), first.get_fontweight(), first.get_fontsize()) == ("alexnet-train (simulated)", "bold", 9.5)
    assert first.get_position()[1] == pytest.approx(1 - EDGE_PT / (4.6 * 72)) and first.get_va() == "top"
    assert (second.get_text(), second.get_fontweight()) == ("alexnet-train", "normal")
    assert second.get_position()[1] == pytest.approx(0.98)       # matplotlib's own place, which its layout moves


def test_a_history_plot_places_its_rotated_commit_labels_inside_clear_and_as_tight(tmp_path, monkeypatch):
    """The history page's plots (up to 60 a page) are placed too: their commit labels are rotated 45
    degrees and end at their ticks, so they reach down by their width and left of the first tick."""
    from pytest_gpuenergy.history import plots as history_plots
    from pytest_gpuenergy.history.report import analyse
    from pytest_gpuenergy.history.series import read_history
    from pytest_gpuenergy.runs.store import RunStore

    store = RunStore(tmp_path / "s")
    shifted = {"alexnet-train": (6, 1.3), "transformer-infer-with-a-long-parameter-id-x": (9, 0.7)}
    for i in range(14):
        store.save(make_doc(seed=i, minutes=10 * i, commit={"id": f"{i + 1:040x}", "branch": "main", "dirty": False},
                            workloads=list(shifted), caps_w=(300.0,), noise=0.01,
                            scale={w: factor if i >= at else 1.0 for w, (at, factor) in shifted.items()}))
    figures: list[Any] = []
    original = history_plots.figure_svg
    monkeypatch.setattr(history_plots, "figure_svg", lambda fig, *a, **k: (figures.append(fig), original(fig, *a, **k))[1])
    history_plots.html_report(analyse(read_history(tmp_path / "s")))
    assert len(figures) == 2
    for fig in figures:
        labels = [t for t in fig.axes[0].get_xticklabels() if t.get_text()]
        assert labels and {t.get_rotation() for t in labels} == {45.0}
        placed = check_placed(fig)
        assert_as_tight(placed, constrained_margins_pt(fig))


@pytest.mark.parametrize(("rotation", "align", "right_share"), [(0, "center", 0.5), (45, "right", 0.0), (45, "left", 1.0)])
def test_an_x_labels_box_reaches_right_and_down_as_it_is_drawn(rotation, align, right_share):
    """The box of a tick label as matplotlib draws it: its width and height turned by its rotation,
    placed at its tick by its alignment (matplotlib's own measure of the drawn label is the judge)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    from pytest_gpuenergy.reports.svg import _x_label_boxes, new_figure, rc_context

    with rc_context():
        fig = new_figure(4.0, 3.0, placed=True)
        ax = fig.add_subplot()
        ax.plot([0, 1, 2], [1, 2, 3])
        ax.set_xticks([0, 1, 2], labels=["a", "0123abcd", "wide label"], rotation=rotation, ha=align, fontsize=7)
        boxes = _x_label_boxes(ax)
        canvas = FigureCanvasAgg(fig)
        fig.set_dpi(72)                                   # a pixel is a point
        canvas.draw()
        drawn = [t.get_window_extent(canvas.get_renderer()) for t in ax.get_xticklabels()]
        axes_box = ax.get_window_extent(canvas.get_renderer())
    # short of the drawn box by no more than the placement's 1 pt slack, and at most 3 pt more (the
    # unhinted metrics it reads differ from the hinted ones Agg draws with by about 1 pt either way)
    for (at, right_pt, down_pt), box in zip(boxes, drawn):
        reach_pt = box.x1 - (axes_box.x0 + at * axes_box.width)
        assert reach_pt == pytest.approx(right_share * box.width, abs=0.5)
        assert reach_pt - 1.0 <= right_pt <= reach_pt + 3.0 and box.height - 1.0 <= down_pt <= box.height + 3.0, (
            right_pt, reach_pt, down_pt, box.height)


def test_an_axis_without_ticks_gets_no_room_for_their_labels(drawn):
    from pytest_gpuenergy.reports.svg import _x_label_boxes, new_figure, place_axes, rc_context

    with rc_context():
        fig = new_figure(3.0, 2.0, placed=True)
        ax = fig.add_subplot()
        ax.plot([1.0, 2.0], [1.0, 2.0])
        ax.set_xticks([])
        assert _x_label_boxes(ax) == []
        place_axes(fig, [ax], top_pt=3.0)
    assert margins_pt(fig)[3] == pytest.approx(11.0)   # the bottom: the edge, the ticks' length and pad, the slack
