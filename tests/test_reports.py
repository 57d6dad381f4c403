"""Reports: workloads and optimal caps, the terminal and Markdown tables, the HTML page, JSON."""

from __future__ import annotations

import json
import re
from dataclasses import replace

import pytest

from energy_factories import H100, H100_REAL, make_doc
from pytest_gpuenergy.compare import compare_documents
from pytest_gpuenergy.reports.comparison_table import comparison_lines, regression_lines, run_lines
from pytest_gpuenergy.reports.html import html_report, nice_ticks
from pytest_gpuenergy.reports.json_report import REPORT_FORMAT, json_report
from pytest_gpuenergy.reports.markdown import markdown_report
from pytest_gpuenergy.reports.sweep import sweeps, workload_key

GATE = {"ets": 5.0, "edp": 10.0}
CASE = "tests/test_suite.py::test_train[alexnet-train-300W]"


@pytest.fixture(scope="module")
def runs():
    old = make_doc(seed=1)
    new = make_doc(seed=2, minutes=60, scale={CASE: 1.3})
    return old, new, compare_documents(old, new, GATE)


# -- workloads and optima --------------------------------------------------------------------------

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


def test_sweeps_find_the_energy_and_edp_optimal_caps():
    doc = make_doc(seed=3, noise=0.005, caps_w=(200.0, 300.0, 400.0, 500.0, 600.0, 700.0))
    found = sweeps(doc)
    assert [s.workload for s in found] == ["tests/test_suite.py::test_train[alexnet-train]",
                                           "tests/test_suite.py::test_train[vgg-infer]"]
    sweep = found[0]
    assert [p.limit_enforced_w for p in sweep.points] == [200, 300, 400, 500, 600, 700]
    ets, edp = sweep.optimum("ets"), sweep.optimum("edp")
    assert ets.point.cap == "200W" and ets.reference.cap == "700W" and ets.reference_is_default
    assert 25 < ets.saving_pct < 40 and ets.time_change_pct > 0          # less energy, more time
    assert edp.point.cap in ("400W", "500W") and 0 < edp.saving_pct < ets.saving_pct
    assert "ETS" in ets.describe() and "lower than at the default limit 700 W" in ets.describe()


def test_without_a_default_cap_the_saving_is_against_the_highest_cap_and_says_so():
    doc = make_doc(seed=3, caps_w=(200.0, 400.0))
    optimum = sweeps(doc)[0].optimum("ets")
    assert not optimum.reference_is_default and optimum.reference.cap == "400W"
    assert "highest cap measured, 400 W (the default 700 W was not measured)" in optimum.describe()


def test_nice_ticks():
    assert nice_ticks(0, 10) == [0, 2, 4, 6, 8, 10]
    assert nice_ticks(183.2, 712.5) == [200, 400, 600]
    assert nice_ticks(183.2, 712.5, count=8) == [200, 300, 400, 500, 600, 700]
    assert nice_ticks(0.93, 1.61) == [1.0, 1.2, 1.4, 1.6]


# -- terminal --------------------------------------------------------------------------------------

def test_terminal_comparison_table(runs):
    _, new, comparison = runs
    lines = comparison_lines(comparison)
    text = "\n".join(lines)
    header = next(line for line in lines if line.startswith("test "))
    for column in ("cap", "GPU", "ETS J", "ETS change", "T s", "EDP J s", "EDP change", "verdict"):
        assert column in header
    row = next(line for line in lines if line.startswith(CASE))
    assert "REGRESSION (ETS, EDP)" in row and re.search(r"\+3\d\.\d% \[\+\d+\.\d, \+\d+\.\d\]", row)
    assert "0 (sim)" in row and "(sim): figures from the GPU simulator" in text
    assert "baseline: " in text and "this run: " in text and "result: 1 regression, 9 noise" in text
    assert "one-sided 99 % confidence bounds" in text
    ets_line, edp_line = regression_lines(comparison)
    assert ets_line.startswith(f"ENERGY REGRESSION {CASE} at cap 300W on GPU 0 {H100}: ETS ")
    assert edp_line.split(": ")[1].startswith("EDP ") and "J s, +3" in edp_line


def test_terminal_says_why_runs_were_not_compared():
    comparison = compare_documents(make_doc(gpu_name=H100_REAL), make_doc(backend="nvml", gpu_name=H100_REAL), GATE)
    text = "\n".join(comparison_lines(comparison))
    assert "note: not compared" in text and "never compared" in text and "ETS change" not in text


def test_run_lines_list_every_case(runs):
    _, new, _ = runs
    lines = run_lines(new)
    assert lines[0].startswith(f"run {new.run_id}") and len(lines) == 2 + 1 + len(new.cases) + 1


# -- Markdown --------------------------------------------------------------------------------------

def test_markdown_report(runs):
    _, new, comparison = runs
    text = markdown_report([new], comparison)
    assert text.startswith("## GPU energy\n")
    assert "> **Simulated**" in text
    assert "Gate **FAILED**: 1 regression, 9 noise." in text
    assert "| test | cap | GPU | ETS J | ETS change |" in text
    row = next(line for line in text.splitlines() if CASE in line)
    assert row.startswith(f"| `{CASE}` |") and "REGRESSION (ETS, EDP)" in row
    assert "<details><summary>All results of run" in text
    assert "energy-optimal cap: 200 W" in text and "EDP-optimal cap" in text
    table_rows = [line for line in text.splitlines() if line.startswith("| `")]
    assert all(line.count(" | ") == 9 for line in table_rows if "change" not in line and CASE in line)


def test_markdown_escapes_pipes_and_html_in_test_ids():
    doc = make_doc(workloads=("a|b<script>",), caps_w=(300.0,))
    text = markdown_report([doc])
    row = next(line for line in text.splitlines() if "a\\|b" in line)
    assert "<script>" in row  # inside a code span, which GitHub shows literally
    assert row.count(" | ") == 9 and "|b" not in row.replace("\\|b", "")


def test_markdown_not_comparable():
    comparison = compare_documents(make_doc(gpu_name=H100_REAL), make_doc(backend="nvml", gpu_name=H100_REAL), GATE)
    text = markdown_report([], comparison)
    assert "**Not compared**" in text and "| test |" not in text


# -- HTML ------------------------------------------------------------------------------------------

def test_html_is_self_contained(runs):
    old, new, comparison = runs
    page = html_report([new], comparison, baselines=[old])
    assert page.startswith("<!DOCTYPE html>") and page.rstrip().endswith("</html>")
    lower = page.lower()
    assert "http://" not in lower and "https://" not in lower and "//cdn" not in lower
    assert "<script" not in lower and "<link" not in lower and "@import" not in lower and "url(" not in lower
    assert not re.search(r"""(src|href)\s*=""", lower)


def test_html_has_a_plot_per_metric_and_workload_with_the_optimal_caps(runs):
    old, new, comparison = runs
    page = html_report([new], comparison, baselines=[old])
    workloads = len(sweeps(new))
    for metric in ("ets", "time", "edp"):
        assert page.count(f'class="plot plot-{metric}"') == workloads
    assert page.count("<svg class=\"plot") == 3 * workloads
    assert page.count('class="optimal-ets"') == 3 * workloads and page.count('class="optimal-edp"') == 3 * workloads
    assert "min ETS 200 W, -" in page and "min EDP " in page
    assert "energy-optimal cap: 200 W, ETS" in page and "lower than at the default limit 700 W" in page
    assert page.count('class="default-limit"') == 3 * workloads
    assert page.count('<g class="baseline">') == 3 * workloads
    assert "enforced power limit (W)" in page


def test_html_labels_simulated_figures_everywhere(runs):
    _, new, comparison = runs
    page = html_report([new], comparison)
    assert "<title>GPU energy report (simulated)</title>" in page
    assert 'class="sim"' in page and page.count("sim-watermark") == 3 * len(sweeps(new))
    assert "ETS (simulated)" in page and "(sim): figures from the GPU simulator" in page
    real = make_doc(backend="nvml", gpu_name=H100_REAL)
    real_page = html_report([real])
    assert "simulated" not in real_page.lower()
    assert "sim-watermark" not in real_page and "<title>GPU energy report</title>" in real_page


def test_html_comparison_table_and_escaping(runs):
    _, new, comparison = runs
    page = html_report([new], comparison)
    assert '<tr class="regression">' in page and "REGRESSION (ETS, EDP)" in page
    assert '<span class="fail">FAILED</span>' in page
    nasty = make_doc(workloads=('x"><script>alert(1)</script>',), caps_w=(300.0, 700.0))
    nasty_page = html_report([nasty])
    assert "<script>" not in nasty_page and "&lt;script&gt;" in nasty_page


def test_html_single_cap_says_how_to_find_the_optimum():
    page = html_report([make_doc(caps_w=(300.0,))])
    assert "one cap measured (300W)" in page and page.count("<svg class=\"plot") == 6


# -- JSON ------------------------------------------------------------------------------------------

def test_json_report(runs):
    _, new, comparison = runs
    data = json.loads(json_report([new], comparison))
    assert data["format"] == REPORT_FORMAT and data["version"] == 1
    assert data["simulated"] is True and data["failed"] is True
    (run,) = data["runs"]
    assert run["run_id"] == new.run_id and len(run["cases"]) == len(new.cases)
    assert run["cases"][0]["workload"] == "tests/test_suite.py::test_train[alexnet-train]"
    optimum = run["optima"][0]["energy_optimal"]
    assert optimum["cap"] == "200W" and optimum["reference_is_default"] and optimum["saving_pct"] > 20
    (comp,) = data["comparisons"]
    assert comp["thresholds_pct"] == GATE and comp["confidence"] == 0.99 and comp["counts"]["regression"] == 1
    case = next(c for c in comp["cases"] if c["case_id"] == CASE)
    assert case["verdict"] == "regression"
    assert case["metrics"]["ets"]["verdict"] == "regression" and case["metrics"]["ets"]["ci_low_pct"] > 0
    assert set(case["metrics"]) == {"ets", "time", "edp"}


def test_json_report_has_no_nan():
    doc = make_doc(n=1)
    nan_doc = replace(doc, cases=tuple(replace(c, repetitions=(replace(c.repetitions[0], mean_power_w=float("nan")),))
                                        for c in doc.cases))
    text = json_report([nan_doc], compare_documents(doc, nan_doc, GATE))
    assert "NaN" not in text and json.loads(text)["comparisons"][0]["cases"][0]["metrics"]["ets"]["method"] == "threshold-only"
