"""How long the HTML reports take to draw: the main job's 126 cases with a comparison, and a history page of 60 plots.

    python benchmarks/html_report.py [--quick] [--repeats N]

The page is the one ``tests/test_html_screenshot.py`` screenshots: 18 workloads at 7 caps (the main
job run with ``--gpu-caps`` of 7 values), compared with a baseline run of the same cases, one
workload 25 % heavier (``tests/helpers.py`` builds the documents; seeded noise). It has 38 plots:
18 sweeps (ETS, T and EDP against the limit), 18 Pareto plots, the heatmap and the legend. The
figure is the median wall time of ``html_report`` over the repeats, in one process (matplotlib
imported and its fonts cached by a first page that is not counted: a session draws one page, but
pays for the import whether the page is quick or not, and ``startup.py`` times imports); then each
plot kind's time, from the same page. Then ``gpuenergy history``'s page at its most plots (60: 30
workloads at 2 caps, 8 runs at 8 commits, all 30 % heavier from the fifth). No GPU is involved.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import _common as common

sys.path.insert(0, str(common.REPO_ROOT / "tests"))

from pytest_gpuenergy.gate.compare import compare_documents  # noqa: E402
from pytest_gpuenergy.history import plots as history_plots  # noqa: E402
from pytest_gpuenergy.history.report import analyse  # noqa: E402
from pytest_gpuenergy.history.series import read_history  # noqa: E402
from pytest_gpuenergy.reports import html  # noqa: E402
from pytest_gpuenergy.runs.store import RunStore  # noqa: E402

from helpers import make_doc  # noqa: E402

NAME = "html_report"
WORKLOADS = tuple(f"{n}-{m}" for n in ("alexnet", "autoenc", "deepq", "memnet", "residual", "seq2seq", "speech",
                                         "transformer", "vgg") for m in ("train", "infer"))
CAPS_W = (280.0, 350.0, 420.0, 490.0, 560.0, 630.0, 700.0)
KINDS = ("sweep_svg", "pareto_svg", "heatmap_svg", "legend_svg")


def documents() -> tuple[Any, Any]:
    common_args = dict(workloads=WORKLOADS, caps_w=CAPS_W, percent=True,
                       test="reference_workloads/test_energy_suite.py::test_energy")
    old = make_doc(seed=1, **common_args)
    new = make_doc(seed=2, minutes=30, scale={"vgg-infer": 1.25}, **common_args)
    return old, new


def history_report(folder: Path) -> Any:
    """The history of 8 runs of 30 workloads at 2 caps, every one 30 % heavier from the fifth: 60 series
    with a change point, as many as the page draws."""
    workloads = [f"w{i:02d}-train" for i in range(30)]
    store = RunStore(folder / "runs")
    for i in range(8):
        store.save(make_doc(seed=i, minutes=10 * i, commit={"id": f"{i + 1:040x}", "branch": "main", "dirty": False},
                            workloads=workloads, scale={w: 1.3 if i >= 4 else 1.0 for w in workloads},
                            caps_w=(300.0, 700.0), noise=0.01))
    return analyse(read_history(folder / "runs"))


def median_page_s(draw: Callable[[], str], repeats: int) -> tuple[float, list[float], int]:
    """The median wall time of ``draw`` over ``repeats`` pages (a first page not counted), each time, and its plots."""
    plots_drawn = draw().count("<svg")
    walls = []
    for _ in range(repeats):
        begun = time.perf_counter()
        draw()
        walls.append(time.perf_counter() - begun)
    return statistics.median(walls), walls, plots_drawn


def timed_kinds(spent: dict[str, list[float]]) -> Callable[[], None]:
    """Time every call of each plot kind (as ``html`` calls them) into ``spent``; returns the undo."""
    originals = {kind: getattr(html, kind) for kind in KINDS}       # html.py imports them by name

    def wrap(kind: str, function: Callable[..., str]) -> Callable[..., str]:
        def timed(*args: Any, **kwargs: Any) -> str:
            started = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                spent[kind].append(time.perf_counter() - started)
        return timed

    for kind, function in originals.items():
        setattr(html, kind, wrap(kind, function))

    def undo() -> None:
        for kind, function in originals.items():
            setattr(html, kind, function)
    return undo


def main() -> None:
    p = common.parser(__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=None, help="pages timed (default 5, --quick 2)")
    args = p.parse_args()
    repeats = args.repeats or (2 if args.quick else 5)
    started = time.time()
    old, new = documents()
    comparison = compare_documents(old, new, {"ets": 5.0})
    median_s, walls, plots_drawn = median_page_s(lambda: html.html_report([new], comparison, baselines=[old]), repeats)
    with tempfile.TemporaryDirectory() as folder:
        report = history_report(Path(folder))
        history_s, history_walls, history_plots_drawn = median_page_s(lambda: history_plots.html_report(report), repeats)
    spent: dict[str, list[float]] = defaultdict(list)
    undo = timed_kinds(spent)
    try:
        html.html_report([new], comparison, baselines=[old])
    finally:
        undo()
    kinds = {kind: {"plots": len(times), "total_s": sum(times), "each_ms": 1000 * statistics.median(times)}
             for kind, times in spent.items()}
    common.print_table(["page", "plots", "median s", "all s"],
                       [["126 cases, compared, with baseline", plots_drawn, median_s, " ".join(f"{w:.2f}" for w in walls)],
                        ["gpuenergy history, 60 changed series", history_plots_drawn, history_s,
                         " ".join(f"{w:.2f}" for w in history_walls)]],
                       title=f"wall time of the whole page ({repeats} pages)")
    common.print_table(["plot kind", "plots", "s in all", "ms each (median)"],
                       [[kind, row["plots"], row["total_s"], row["each_ms"]] for kind, row in kinds.items()],
                       title="where the page's time goes (one page)")
    path = common.write_result(NAME, {"description": __doc__.splitlines()[0], "plots": plots_drawn,
                                      "median_s": median_s, "walls_s": walls, "kinds": kinds,
                                      "history": {"plots": history_plots_drawn, "median_s": history_s,
                                                  "walls_s": history_walls}},
                               quick=args.quick, started=started, out_dir=args.out)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
