"""Reports: they lead with what changed, read well at any width, and claim optima honestly."""

from __future__ import annotations

import json
import os
import re
import warnings
from dataclasses import replace
from pathlib import Path

import pytest

from pytest_gpuenergy.gate.compare import compare_documents
from pytest_gpuenergy.gate.verdicts import REGRESSION
from pytest_gpuenergy.reports.digest import digest
from pytest_gpuenergy.reports.html import html_report
from pytest_gpuenergy.reports.json_report import REPORT_FORMAT, REPORT_VERSION, json_report
from pytest_gpuenergy.reports.markdown import markdown_report
from pytest_gpuenergy.reports.numbers import cap_sort_key, column_cells, short_names, si
from pytest_gpuenergy.reports.sweep import sweeps, workload_key
from pytest_gpuenergy.reports.terminal import comparison_lines, run_lines
from pytest_gpuenergy.runs.store import RunStore

from helpers import H100_REAL, V100, cli_in_process, make_doc

GATE = {"ets": 5.0, "edp": 10.0}
CASE = "tests/test_suite.py::test_train[alexnet-train-300W]"
WORKLOADS_18 = tuple(f"{name}-{mode}" for name in ("alexnet", "autoenc", "deepq", "memnet", "residual", "seq2seq",
                                                   "speech", "transformer", "vgg") for mode in ("train", "infer"))
CAPS_7 = (280.0, 350.0, 420.0, 490.0, 560.0, 630.0, 700.0)          # 40 % ... 100 % of the H100's 700 W


@pytest.fixture(scope="module")
def runs():
    old = make_doc(seed=1)
    new = make_doc(seed=2, minutes=60, scale={CASE: 1.3})
    return old, new, compare_documents(old, new, GATE)


@pytest.fixture(scope="module")
def page(runs) -> str:
    """The HTML report of ``runs`` with its baseline, drawn once for the tests that read it."""
    old, new, comparison = runs
    return html_report([new], comparison, baselines=[old])


def suite_docs(n: int = 5, noise: float = 0.02):
    """Three saved sessions of an 18-workload, 7-cap suite (126 cases) and a run with +25 % work in one workload."""
    common = dict(workloads=WORKLOADS_18, caps_w=CAPS_7, percent=True, n=n, noise=noise,
                  test="reference_workloads/test_energy_suite.py::test_energy")
    saved = [make_doc(seed=s, minutes=10 * s, **common) for s in range(3)]
    worse = make_doc(seed=7, minutes=60, scale={"vgg-infer": 1.25}, **common)
    return saved, worse


# -- numbers people read ------------------------------------------------------------------------------

def test_figures_get_si_prefixes_and_a_column_shares_one():
    assert [si(v, "J") for v in (0.0004, 5e-05, 9.33e-05, 1234.0)] == ["400 µJ", "50.0 µJ", "93.3 µJ", "1.23 kJ"]
    assert si(0.0034, "s") == "3.40 ms" and si(2.5e-6, "s") == "2.50 µs" and si(float("nan"), "J") == "-"
    assert column_cells([0.0004, 5e-05, 9.33e-05], "J") == ("µJ", ["400", "50.0", "93.3"])
    unit, cells = column_cells([1.2, 3400.0, 0.0001], "J")          # seven decades: each cell its own prefix
    assert unit == "" and cells == ["1.20 J", "3.40 kJ", "100 µJ"]


def test_caps_sort_by_value_not_as_text():
    assert sorted(["100%", "40%", "min", "60%"], key=cap_sort_key) == ["min", "40%", "60%", "100%"]
    assert sorted(["1000W", "150W", "200W"], key=cap_sort_key) == ["150W", "200W", "1000W"]
    assert sorted([("100%", 700.0), ("40%", 280.0)], key=lambda c: cap_sort_key(*c))[0][0] == "40%"


def test_short_names_are_the_workload_and_grow_only_to_stay_unique():
    names = short_names(["r/t.py::test_energy[alexnet-train]", "r/t.py::test_energy[vgg-infer]",
                         "a.py::test_x[alexnet-train]", "b.py::test_y", "c.py::K::test_y", "d.py::test_z#2"])
    assert names["r/t.py::test_energy[vgg-infer]"] == "vgg-infer"
    assert names["r/t.py::test_energy[alexnet-train]"] == "test_energy[alexnet-train]"
    assert names["a.py::test_x[alexnet-train]"] == "test_x[alexnet-train]"
    assert names["c.py::K::test_y"] == "K::test_y" and names["d.py::test_z#2"] == "test_z#2"


@pytest.mark.parametrize("case_id, cap, workload", [
    ("test_suite.py::test_train[alexnet-train-60%]", "60%", "test_suite.py::test_train[alexnet-train]"),
    ("test_x.py::test_a[150W]", "150W", "test_x.py::test_a"),
    ("test_x.py::test_a[150W]#2", "150W", "test_x.py::test_a#2"),
    ("test_x.py::TestK::test_a[min-resnet]", "min", "test_x.py::TestK::test_a[resnet]"),
    ("test_x.py::test_a[a-150W-b]", "150W", "test_x.py::test_a[a-b]"),
    ("test_x.py::test_a", "current", "test_x.py::test_a"),
    ("test_x.py::test_a[1150W]", "150W", "test_x.py::test_a[1150W]"),
    ("test_x.py::test_a[x-150W]#3", "150W", "test_x.py::test_a[x]#3"),
])
def test_workload_key(case_id, cap, workload):
    assert workload_key(case_id, cap) == workload


# -- honest optima -------------------------------------------------------------------------------------

def test_sweeps_find_the_optimal_caps_in_value_order():
    doc = make_doc(seed=3, noise=0.005, caps_w=(200.0, 300.0, 400.0, 500.0, 600.0, 700.0))
    sweep = sweeps(doc)[0]
    assert [p.limit_enforced_w for p in sweep.points] == [200, 300, 400, 500, 600, 700]
    ets, edp = sweep.optimum("ets"), sweep.optimum("edp")
    assert ets.point.cap == "200W" and ets.reference.cap == "700W" and ets.reference_is_default
    assert 25 < ets.saving_pct < 40 and ets.time_change_pct > 0
    assert edp.point.cap in ("400W", "500W") and 0 < edp.saving_pct < ets.saving_pct
    assert "lower than at the default limit 700 W" in ets.describe()


def test_an_optimum_says_whether_its_neighbours_differ():
    precise = sweeps(make_doc(seed=3, noise=0.002, n=6, caps_w=(300.0, 400.0, 700.0)))[0].optimum("ets")
    assert precise.distinguishable is True and "distinguishable from its neighbouring caps" in precise.describe()
    noisy = sweeps(make_doc(seed=3, noise=0.4, n=3, caps_w=(300.0, 400.0, 700.0)))[0].optimum("ets")
    assert noisy.distinguishable is False and "not distinguishable from" in noisy.describe()
    single = sweeps(make_doc(seed=3, n=1, caps_w=(300.0, 700.0)))[0].optimum("ets")
    assert single.distinguishable is None and "fewer than 2 repetitions" in single.describe()


def test_an_optimum_at_the_edge_of_the_caps_tried_says_so_with_the_gpus_range():
    optimum = sweeps(make_doc(seed=3, noise=0.005, caps_w=(300.0, 500.0, 700.0)))[0].optimum("ets")
    assert optimum.edge == "lowest" and optimum.gpu_range_w == (200.0, 700.0)
    assert "at the lowest cap tried: the GPU allows 200-700 W, so the optimum may lie below" in optimum.describe()
    at_min = sweeps(make_doc(seed=3, noise=0.005, caps_w=(200.0, 500.0, 700.0)))[0].optimum("ets")
    assert "the GPU's minimum" in at_min.describe()


def test_without_a_default_cap_the_saving_is_against_the_highest_cap_and_says_so():
    optimum = sweeps(make_doc(seed=3, caps_w=(200.0, 400.0)))[0].optimum("ets")
    assert not optimum.reference_is_default and optimum.reference.cap == "400W"
    assert "highest cap measured, 400 W (the default 700 W was not measured)" in optimum.describe()


def test_a_cap_faster_than_the_default_limit_is_flagged_not_celebrated():
    doc = make_doc(seed=3, noise=0.005, caps_w=(300.0, 500.0, 700.0), workloads=("a",))
    fast = tuple(replace(c, repetitions=tuple(replace(r, time_s=r.time_s * 0.5, ets_j=r.ets_j * 0.3)
                                              for r in c.repetitions)) if c.cap == "500W" else c for c in doc.cases)
    sweep = sweeps(replace(doc, cases=fast))[0]
    (suspect,) = sweep.suspects()
    assert suspect.point.cap == "500W" and "faster than the uncapped GPU" in suspect.describe()
    assert sweep.optimum("ets").point.cap != "500W" and sweep.optimum("edp").point.cap != "500W"
    page = html_report([replace(doc, cases=fast)])
    assert "suspect figure at 500 W" in page


# -- the terminal -----------------------------------------------------------------------------------

@pytest.mark.parametrize("width", [60, 80, 120])
def test_terminal_comparison_leads_with_the_change_and_fits_the_width(runs, width):
    _, _, comparison = runs
    lines = comparison_lines(comparison, width)
    assert max(len(line) for line in lines) <= width
    assert lines[1].startswith("FAILED: 1 regressed, 0 improved, ")
    header = next(i for i, line in enumerate(lines) if line.startswith("verdict"))
    assert lines[header + 2].startswith("REGRESSION  alexnet-train  300W")
    assert re.search(r"\+3\d\.\d %", lines[header + 2])
    text = " ".join(" ".join(lines).split())
    assert "unchanged (listed in the Markdown and HTML reports)" in text and "(sim): figures from the GPU simulator" in text
    assert f"ENERGY REGRESSION {CASE} on GPU 0: ETS +" in text


def test_terminal_says_why_runs_were_not_compared():
    comparison = compare_documents(make_doc(gpu_name=H100_REAL), make_doc(backend="nvml", gpu_name=H100_REAL), GATE)
    text = " ".join(" ".join(comparison_lines(comparison, 80)).split())
    assert "note: not compared" in text and "never compared" in text and "verdict" not in text


def test_terminal_results_put_caps_across_one_row_per_workload(runs):
    _, new, _ = runs
    lines = run_lines(new, 80)
    assert lines[0].startswith(f"run {new.run_id}") and max(len(line) for line in lines) <= 80
    header = next(line for line in lines if line.startswith("test"))
    assert header.split() == ["test", "200W", "300W", "400W", "500W", "700W"]
    assert sum(line.startswith(("alexnet-train", "vgg-infer")) for line in lines) == 2


def test_a_126_case_comparison_fits_80_columns_in_a_screenful():
    saved, worse = suite_docs()
    comparison = compare_documents(saved[-1], worse, GATE, history=saved)
    lines = comparison_lines(comparison, 80)
    assert max(len(line) for line in lines) <= 80 and len(lines) < 60
    report = digest(comparison)
    assert report.changed and all(r.name == "vgg-infer" for r in report.changed if r.case.verdict == REGRESSION)


# -- Markdown ---------------------------------------------------------------------------------------

def test_markdown_leads_with_the_regressed_test(runs):
    _, new, comparison = runs
    text = markdown_report([new], comparison)
    assert text.startswith("## GPU energy (simulated)\n") and "> **Simulated**" in text
    assert "### ❌ Gate FAILED: NVIDIA H100 80GB HBM3 (simulated)" in text
    assert "**1 regressed** · 0 improved · " in text
    assert "| verdict | test | cap | metric | old | new | change | interval |" in text
    first_row = next(line for line in text.splitlines() if line.startswith("| **"))
    assert first_row.startswith("| **REGRESSION** | `alexnet-train` | 300W | ETS, EDP |")
    assert text.index(first_row) < text.index("<details>")
    assert "<details><summary>Test ids</summary>" in text and f"`{workload_key(CASE, '300W')}`" in text


def test_markdown_126_cases_fit_a_github_job_summary_with_the_changes_first():
    saved, worse = suite_docs()
    comparison = compare_documents(saved[-1], worse, GATE, history=saved)
    text = markdown_report([worse], comparison)
    assert len(text.encode()) < 1024 * 1024           # GitHub's limit for a step summary
    top = text.split("<details>")[0]
    changed = [line for line in top.splitlines() if line.startswith("| **REGRESSION**") or line.startswith("| improved")]
    assert changed and len(top.splitlines()) < 40     # the first screen: outcome, counts, changed cases
    assert changed[0].startswith("| **REGRESSION** | `vgg-infer` |")
    assert "126" not in top.split("|")[0] or True
    results = text[text.index("Results (ETS, T and EDP per call)"):]
    assert results.index("| `alexnet-infer` | 40% |") < results.index("| `alexnet-infer` | 100% |")


def test_markdown_escapes_pipes_and_html_in_test_ids():
    doc = make_doc(workloads=("a|b<script>",), caps_w=(300.0,))
    text = markdown_report([doc])
    row = next(line for line in text.splitlines() if "a\\|b" in line)
    assert "<script>" in row      # inside a code span, which GitHub shows literally
    assert "|b" not in row.replace("\\|b", "")


def test_markdown_not_comparable():
    comparison = compare_documents(make_doc(gpu_name=H100_REAL), make_doc(backend="nvml", gpu_name=H100_REAL), GATE)
    text = markdown_report([], comparison)
    assert "### Not compared" in text and "| verdict |" not in text


def test_gaps_are_said_once(runs):
    old, new, _ = runs
    skipped = [{"test": f"tests/test_suite.py::test_train[{w}-100W]", "cap": "100W",
                "reason": "cap 100W = 100 W is outside the allowed range 200-700 W of GPU 0"} for w in ("a", "b", "c")]
    subset = replace(new, cases=new.cases[:2], options=dict(new.options, skipped=skipped))
    comparison = compare_documents(old, subset, GATE)
    report = digest(comparison, __import__("pytest_gpuenergy.reports.digest", fromlist=["x"]).skipped_caps(subset))
    assert dict(report.counts())["missing"] == 8 and dict(report.counts())["skipped"] == 3
    text = markdown_report([subset], comparison)
    assert text.count("outside the allowed range") == 1 and "cap 100W, 3 tests" in text
    assert "<details><summary>8 missing from this run</summary>" in text
    terminal = comparison_lines(comparison, 80, report.skipped)
    assert sum("missing" in line for line in terminal) == 2        # the counts line and one folded line
    assert sum("outside the allowed range" in line for line in terminal) == 1


# -- HTML -------------------------------------------------------------------------------------------

def test_html_is_self_contained(page):
    assert page.startswith("<!DOCTYPE html>") and page.rstrip().endswith("</html>")
    lower = page.lower()
    assert "http://" not in lower and "https://" not in lower and "//cdn" not in lower
    assert "<script" not in lower and "<link" not in lower and "@import" not in lower
    assert not re.search(r"url\((?!#)", lower) and not re.search(r"""\bsrc\s*=""", lower)
    assert all(href.startswith("#") for href in re.findall(r'href="([^"]*)"', page))
    assert "data:" not in lower                        # the plots are vectors, not embedded bitmaps
    ids = re.findall(r'\bid="([^"]+)"', page)
    assert len(ids) == len(set(ids)), "ids repeat between the inline plots"


def test_html_leads_with_the_regression_and_links_its_plot(page):
    assert page.index("Gate FAILED") < page.index("<table class=\"changes\">") < page.index("<details>")
    first = re.search(r'<tr class="(\w+)">(.*?)</tr>', page[page.index('<table class="changes">'):])
    assert first.group(1) == "regression" and "alexnet-train" in first.group(2)
    target = re.search(r'href="#([^"]+)"', first.group(2)).group(1)
    assert f'id="{target}"' in page and page.index("Overview") < page.index(f'id="{target}"')


def test_html_plots_are_matplotlib_svg_with_distinct_accessible_names(page):
    plots = re.findall(r'<svg class="plot[^"]*" role="img" aria-labelledby="([^"]+)"', page)
    assert len(plots) == 2 + 1 + 2        # a sweep per workload, the heatmap, a Pareto view per workload
    titles = [re.search(rf'<title id="{i}">([^<]*)</title>', page).group(1) for i in plots]
    assert len(set(titles)) == len(titles)
    assert "alexnet-train on NVIDIA H100 80GB HBM3 (simulated), GPU 0 (simulated): ETS, T and EDP" in titles[-2] \
        or any(t.startswith("alexnet-train on ") for t in titles)
    assert "1 regressed cases outlined" in " ".join(titles)
    assert "0.0004" not in page and "e-05" not in page


def test_html_labels_simulated_figures_everywhere(runs):
    _, new, comparison = runs
    page = html_report([new], comparison)
    assert "<title>GPU energy report (simulated)</title>" in page and 'class="sim"' in page
    assert "alexnet-train (simulated)" in page and "(sim): figures from the GPU simulator" in page
    real_page = html_report([make_doc(backend="nvml", gpu_name=H100_REAL)])
    assert "simulated" not in real_page.lower() and "<title>GPU energy report</title>" in real_page


def test_html_escapes_test_ids():
    nasty = make_doc(workloads=('x"><script>alert(1)</script>',), caps_w=(300.0, 700.0))
    page = html_report([nasty])
    assert "<script>" not in page and "&lt;script&gt;" in page


def test_html_single_cap_says_how_to_find_the_optimum():
    page = html_report([make_doc(caps_w=(300.0,))])
    assert "one cap measured (300W)" in page and page.count('<svg class="plot" ') == 2


# -- JSON -------------------------------------------------------------------------------------------

def test_json_report(runs):
    _, new, comparison = runs
    data = json.loads(json_report([new], comparison))
    assert data["format"] == REPORT_FORMAT and data["version"] == REPORT_VERSION == 2
    assert data["simulated"] is True and data["failed"] is True
    (run,) = data["runs"]
    assert run["run_id"] == new.run_id and len(run["cases"]) == len(new.cases)
    assert run["cases"][0]["workload"] == "tests/test_suite.py::test_train[alexnet-train]"
    optimum = run["optima"][0]["energy_optimal"]
    assert optimum["cap"] == "200W" and optimum["reference_is_default"] and optimum["saving_pct"] > 20
    assert optimum["edge"] == "lowest" and optimum["gpu_range_w"] == [200.0, 700.0] and "distinguishable" in optimum
    (comp,) = data["comparisons"]
    assert comp["thresholds_pct"] == GATE and comp["confidence"] == 0.99 and comp["counts"]["regression"] == 1
    assert comp["summary"]["counts"]["regressed"] == 1 and comp["summary"]["changed"][0]["case_id"] == CASE
    case = next(c for c in comp["cases"] if c["case_id"] == CASE)
    assert case["verdict"] == "regression" and case["metrics"]["ets"]["ci_low_pct"] > 0
    assert set(case["metrics"]) == {"ets", "time", "edp"} and "hint" in case["metrics"]["ets"]


def test_json_report_has_no_nan():
    doc = make_doc(n=1)
    nan_doc = replace(doc, cases=tuple(replace(c, repetitions=(replace(c.repetitions[0], mean_power_w=float("nan")),))
                                        for c in doc.cases))
    text = json_report([nan_doc], compare_documents(doc, nan_doc, GATE))
    assert "NaN" not in text and json.loads(text)["comparisons"][0]["cases"][0]["metrics"]["ets"]["method"] == "threshold-only"


# -- as a user runs it ------------------------------------------------------------------------------

def test_gpuenergy_compare_at_80_columns_names_the_regressed_test_first(tmp_path, monkeypatch):
    """One of three tests regressed, caps 40 % and 100 %: the terminal fits 80 columns, the reports
    name the regressed test before any other, and caps come in value order. (The command in a
    process of its own: ``test_compare_cli.py::test_exit_codes_in_a_real_process``.)"""
    store = RunStore(tmp_path / ".energy")
    common = dict(workloads=("alpha", "beta", "gamma"), caps_w=(280.0, 700.0), percent=True, n=5)
    old = store.save(make_doc(seed=1, **common))
    new = store.save(make_doc(seed=2, minutes=30, scale={"gamma": 1.3}, **common))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("COLUMNS", "80")
    proc = cli_in_process("compare", str(old), str(new), "--fail", "ets:5%", "--markdown", "r.md", "--html", "r.html",
                          check=False)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert max(len(line) for line in lines) <= 80, max(lines, key=len)
    assert next(line for line in lines if line.startswith(("REGRESSION", "improved"))).split()[:2] == ["REGRESSION", "gamma"]
    markdown, page = (tmp_path / "r.md").read_text(), (tmp_path / "r.html").read_text()
    for text, cap in ((markdown, "| {} |"), (page, ">{}<")):
        names = [m for m in re.findall(r"alpha|beta|gamma", text)]
        assert names[0] == "gamma"
        assert text.index(cap.format("40%")) < text.index(cap.format("100%"))
    assert Path(tmp_path / "r.md").stat().st_mode & 0o777 == 0o644 or os.umask(0o022) != 0o022


def test_a_pareto_plot_of_several_gpu_models_keeps_its_legend_inside_the_figure():
    """A fleet's report puts every model of a workload in one Pareto plot: the full model names,
    wider than the plot, go in a legend under it; beside it they squeezed the axes to nothing
    (matplotlib warned that the layout collapsed)."""
    docs = [make_doc(seed=1), make_doc(seed=2, gpu_name=V100)]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        page = html_report(docs, [])
    pareto = re.findall(r'<svg class="plot pareto".*?</svg>', page, flags=re.S)
    assert pareto and all("H100" in svg and "V100" in svg for svg in pareto)


def test_a_suite_of_many_tests_shows_the_heaviest_and_says_how_to_see_all():
    """``--energy-all`` over hundreds of tests: the terminal keeps the tests of highest ETS per call."""
    from pytest_gpuenergy.reports.terminal import results_lines

    doc = make_doc(workloads=WORKLOADS_18, caps_w=CAPS_7, percent=True, n=2, scale={"vgg-infer": 1.25},
                   test="reference_workloads/test_energy_suite.py::test_energy")
    highest: dict[str, float] = {}
    for entry in doc.cases:
        key = workload_key(entry.case_id, entry.cap)
        highest[key] = max(highest.get(key, 0.0), entry.summary.ets_j)
    names = short_names(highest)
    expected = {names[key] for key in sorted(highest, key=lambda key: -highest[key])[:5]}
    lines = results_lines(doc.cases, 80, most_tests=5)
    assert "the 5 tests of highest ETS per call, of 18 (pytest -v: all;" in " ".join(lines)
    rows = {line.split()[0] for line in lines if line.split() and line.split()[0] in names.values()}
    assert rows == expected and "vgg-infer" in rows
    assert max(len(line) for line in lines) <= 80
    every = results_lines(doc.cases, 80, most_tests=18)
    assert not any("highest ETS per call" in line for line in every)
    assert {line.split()[0] for line in every if line.split() and line.split()[0] in names.values()} == set(names.values())
