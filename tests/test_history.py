"""``gpuenergy history``: the commit where a test's energy stepped, found in real sessions' runs, and nothing
where nothing changed; slow drifts as trends; one noisy session never a change point."""

from __future__ import annotations

import json
import math
import os
import random
import re
import subprocess
from datetime import datetime, timezone
from pathlib import Path

import pytest

from pytest_gpuenergy.history.changes import Settings, find_changes
from pytest_gpuenergy.runs.store import RunStore

from helpers import cli_in_process, declared_suite, make_doc, run_cli

# -- the scenario: six sessions, six commits, a test's work 30 % heavier from the fourth -------------


def git(folder: Path, *args: str, when: datetime | None = None) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.org", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@example.org"}
    if when is not None:
        env.update(GIT_AUTHOR_DATE=when.isoformat(), GIT_COMMITTER_DATE=when.isoformat())
    return subprocess.run(["git", *args], cwd=folder, env=env, check=True, capture_output=True, text=True).stdout.strip()


@pytest.mark.slow
def test_history_names_exactly_the_test_whose_work_rose_at_the_commit_that_did_it(pytester, monkeypatch):
    """Six sessions on the simulated H100 at six commits of a real git repository, each with its own seed
    (the simulator's default noise between sessions, 1.5 %); test_train's work is 30 % more from the fourth."""
    folder = pytester.path
    pytester.makeini("[pytest]\nenergy_price_per_kwh = 0.30\nenergy_carbon_g_per_kwh = 400\n")
    git(folder, "init", "-q", "-b", "main")
    monkeypatch.delenv("GPUENERGY_SIM_NOISE", raising=False)
    commits = []
    for i in range(6):
        pytester.makepyfile(test_suite=declared_suite(4e12 * (1.3 if i >= 3 else 1.0)) + f"\n# commit {i}\n")
        git(folder, "add", "test_suite.py", "tox.ini")
        git(folder, "commit", "-q", "-m", f"change {i}", when=datetime(2025, 3, 1 + i, 9, tzinfo=timezone.utc))
        commits.append(git(folder, "rev-parse", "HEAD"))
        monkeypatch.setenv("GPUENERGY_SIM_SEED", str(101 + i))
        pytester.runpytest("--gpu-caps=100%", "--energy-repeat=3", "--energy-save").assert_outcomes(passed=2)

    done = cli_in_process("history", ".energy", "--json", "h.json", "--markdown", "h.md", "--html", "h.html")
    data = json.loads((folder / "h.json").read_text())
    assert data["order"] == "commit date" and data["simulated"] is True
    assert [s["commit"] for s in data["stations"]] == commits
    (change,) = data["change_points"]
    assert change["test"] == "test_suite.py::test_train[100%]" and change["cap"] == "100%"
    assert change["commit"] == commits[3] and change["previous_commit"] == commits[2]
    assert "H100" in change["gpu_model"] and 24 < change["change_pct"] < 36
    assert change["change_low_pct"] > 5 and change["runs_before"] == 3 and change["runs_after"] == 3
    assert data["trends"] == [] and data["pending"] == []
    infer = next(s for s in data["series"] if "test_infer" in s["test"])
    assert infer["commits"] == 6      # followed at every commit, and nothing reported for it

    # the sessions really differ: the unchanged test's six figures are not all one number
    levels = {round(p, 6) for p in _series_means(folder, "test_infer")}
    assert len(levels) == 6

    # the terminal leads with the change point and fits 80 columns
    lines = done.stdout.splitlines()
    assert all(len(line) <= 80 for line in lines), [line for line in lines if len(line) > 80]
    assert lines[2].startswith("1 change point, 0 trends")
    table = next(i for i, line in enumerate(lines) if re.match(r"\s*change\s+test\s+cap", line))
    assert "train" in lines[table + 2] and commits[3][:10] in lines[table + 2] and "+" in lines[table + 2]
    assert "infer" not in "\n".join(lines[:table + 3])

    # kWh always; cost and CO2e from the project's ini settings
    assert data["energy"]["price_per_kwh"] == 0.30 and data["energy"]["carbon_g_per_kwh"] == 400
    assert math.isclose(data["energy"]["cost"], data["energy"]["energy_kwh"] * 0.30)
    assert "kWh" in done.stdout and "CO2e" in done.stdout

    markdown = (folder / "h.md").read_text()
    changes = markdown.split("### Change points")[1].split("\n\n")[1]
    assert "test_train" in changes and commits[3][:10] in changes and "test_infer" not in changes
    costs = markdown.split("What the 2 heaviest cases cost over the history")[1].split("</details>")[0]
    assert "| energy | kWh | cost | CO2e |" in costs and costs.index("test_train") < costs.index("test_infer")

    html = (folder / "h.html").read_text()
    plots = re.findall(r'<svg class="plot"[^>]* id="(history-[^"]+)"', html)
    assert len(plots) == 1 and "test-train" in plots[0]
    assert "SIMULATED" in html and commits[3][:8] in html


def _series_means(folder: Path, test: str) -> list[float]:
    runs = RunStore(folder / ".energy").runs()
    return [next(c for c in doc.cases if test in c.case_id).summary.ets_j for doc in runs]


# -- the rule on series (log means) -------------------------------------------------------------------------


def noisy(values, sd: float = 0.015, seed: int = 0) -> list[float]:
    rng = random.Random(seed)
    return [math.log(v) + rng.gauss(0.0, sd) for v in values]


def test_a_step_is_found_at_its_first_point_with_its_size_and_a_decrease_as_well():
    up = find_changes(noisy([1.0] * 10 + [1.3] * 10))
    (change,) = up.changes
    assert change.index == 10 and 25 < change.change_pct < 35 and change.low_pct < change.change_pct < change.high_pct
    assert change.t > change.t_needed and not up.trends
    down = find_changes(noisy([1.0] * 8 + [0.8] * 8, seed=3))
    assert [c.index for c in down.changes] == [8] and -25 < down.changes[0].change_pct < -15


def test_one_noisy_session_is_never_a_change_point_anywhere_in_the_history():
    for where in range(20):
        values = [1.0] * 20
        values[where] = 1.4
        found = find_changes(noisy(values, seed=where))
        assert not found.changes and not found.trends, where
        assert (found.pending is not None) == (where == 19)     # the newest alone: said to be unconfirmed


def test_a_slow_drift_is_a_trend_not_a_change_point():
    found = find_changes(noisy([1.006 ** i for i in range(40)], seed=5))
    assert not found.changes
    (trend,) = found.trends
    assert (trend.start, trend.end) == (0, 40) and 20 < trend.total_pct < 32 and 0.4 < trend.per_point_pct < 0.8


def test_a_step_too_small_or_too_few_runs_after_it_is_not_a_change_point():
    assert not find_changes(noisy([1.0] * 10 + [1.03] * 10, sd=0.002)).changes       # 3 % < 5 %
    assert find_changes(noisy([1.0] * 10 + [1.03] * 10, sd=0.002), settings=Settings(min_change_pct=2)).changes
    one_after = find_changes(noisy([1.0] * 10 + [1.3]))
    assert not one_after.changes and one_after.pending is not None and 25 < one_after.pending.change_pct < 35
    assert find_changes(noisy([1.0] * 10 + [1.3]), settings=Settings(min_runs=1)).changes


def test_no_change_without_one_and_the_meters_bounds_can_explain_a_step():
    assert not find_changes(noisy([1.0] * 30, seed=11)).found
    values = noisy([1.0] * 6 + [1.2] * 6)
    wide = [(math.exp(v) * 0.8, math.exp(v) * 1.25) for v in values]       # coarse regions: bounds of +-20 %
    assert find_changes(values).changes and not find_changes(values, bounds=wide).changes


def test_two_steps_and_the_noise_of_the_repetitions_is_a_floor():
    found = find_changes(noisy([1.0] * 12 + [1.25] * 12 + [1.0] * 12, seed=2))
    assert [c.index for c in found.changes] == [12, 24]
    flat = [0.0, 0.0, 0.0, 0.1, 0.1, 0.1]        # identical sessions: only the repetitions' spread is noise
    assert find_changes(flat).changes
    assert not find_changes(flat, within_var=[0.05 ** 2] * 6).changes


# -- reading a storage folder ---------------------------------------------------------------------------------

COMMIT = "{:02d}" + "ab" * 19


def saved(folder: Path, count: int = 6, *, step_at: int = 3, order=None, commits: bool = True) -> list:
    """``count`` runs (two workloads at two caps) ten minutes apart; alexnet-train 30 % heavier from ``step_at``."""
    store, docs = RunStore(folder), []
    for i in order or range(count):
        scale = {"alexnet-train": 1.3 if i >= step_at else 1.0}
        commit = {"id": COMMIT.format(i), "branch": "main", "dirty": False} if commits else None
        doc = make_doc(seed=i, minutes=10 * i, commit=commit, scale=scale, caps_w=(300.0, 700.0), noise=0.01)
        if not commits:
            from dataclasses import replace
            doc = replace(doc, commit=None)
        store.save(doc)
        docs.append(doc)
    return docs


def history_json(*args: str) -> dict:
    done = cli_in_process("history", *args, "--json", "-")
    return json.loads(done.stdout)


def test_every_change_point_has_its_test_cap_gpu_model_commit_and_size(tmp_path):
    saved(tmp_path / "s")
    data = history_json(str(tmp_path / "s"))
    assert {(c["cap"], c["commit"]) for c in data["change_points"]} == {("300W", COMMIT.format(3)), ("700W", COMMIT.format(3))}
    for change in data["change_points"]:
        assert {"test", "cap", "gpu_model", "commit", "change_pct"} <= set(change)
        assert "alexnet-train" in change["test"] and 25 < change["change_pct"] < 35
    assert data["order"] == "run time" and any("no git repository" in n for n in data["notes"])


def test_runs_are_ordered_by_commit_date_where_git_knows_the_commits(tmp_path):
    """A run of an older commit saved last (a backfill) lands where its commit belongs."""
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    ids = []
    for i in range(6):
        (repo / "f.txt").write_text(str(i))
        git(repo, "add", "f.txt")
        git(repo, "commit", "-q", "-m", str(i), when=datetime(2025, 1, 1 + i, tzinfo=timezone.utc))
        ids.append(git(repo, "rev-parse", "HEAD"))
    store = RunStore(repo / ".energy")
    for minutes, i in enumerate([0, 1, 2, 4, 5, 3]):          # commit 3's run saved last
        doc = make_doc(seed=i, minutes=10 * minutes, commit={"id": ids[i], "branch": "main", "dirty": False},
                       scale={"alexnet-train": 1.3 if i >= 3 else 1.0}, caps_w=(300.0,), noise=0.01)
        store.save(doc)
    data = history_json(str(repo / ".energy"))
    assert data["order"] == "commit date" and [s["commit"] for s in data["stations"]] == ids
    assert [c["commit"] for c in data["change_points"]] == [ids[3]]
    by_time = history_json(str(repo / ".energy"), "--commits", f"{ids[1][:8]}..{ids[4][:8]}")
    assert [s["commit"] for s in by_time["stations"]] == ids[1:5]


def test_picking_tests_gpu_models_caps_and_dates(tmp_path):
    saved(tmp_path / "s")
    folder = str(tmp_path / "s")
    assert {s["cap"] for s in history_json(folder, "--cap", "300W")["series"]} == {"300W"}
    assert {s["test"].split("[")[1] for s in history_json(folder, "-k", "vgg")["series"]} == {"vgg-infer-300W]", "vgg-infer-700W]"}
    assert history_json(folder, "-k", "vgg")["change_points"] == []
    assert len(history_json(folder, "--gpu", "h100")["series"]) == 4
    late = history_json(folder, "--since", "2025-03-01T10:25:00")
    assert len(late["stations"]) == 3 and late["change_points"] == []        # the step is at the first of them
    assert len(history_json(folder, "--until", "2025-03-01")["stations"]) == 6


def test_a_damaged_run_is_skipped_with_a_note_naming_it(tmp_path):
    docs = saved(tmp_path / "s", 7)
    damaged = RunStore(tmp_path / "s").path_for(docs[5])
    damaged.write_text('{"format": "pytest-gpuenergy-run", "version": 3, "cut sho')
    done = cli_in_process("history", str(tmp_path / "s"), "--json", "h.json")
    flat = " ".join(done.stdout.split())
    assert f"skipped a damaged file: {damaged}" in flat and "corrupt run document" in flat
    data = json.loads(Path("h.json").read_text()) if Path("h.json").exists() else None
    assert data is not None and len(data["stations"]) == 6 and data["skipped"][0].startswith(str(damaged))
    assert {c["commit"] for c in data["change_points"]} == {COMMIT.format(3)}


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)


@pytest.mark.parametrize(("args", "message"), [
    (("missing",), "missing: no such storage folder"),
    (("empty",), "empty holds no saved run"),
    (("s", "--gpu", "A100"), "no saved run in s is of GPU model A100"),
    (("s", "--commits", "ffff.."), "no run of commit 'ffff' in the history"),
    (("s", "--commits", "04..01"), "comes after"),
    (("s", "-k", "resnet"), "no passed case in the 6 runs read matches -k resnet"),
    (("s", "--since", "2030-01-01"), "no run is dated between --since and --until"),
])
def test_bad_storage_and_selections_are_one_line_errors(tmp_path, args, message):
    (tmp_path / "empty").mkdir()
    saved(tmp_path / "s")
    done = cli_in_process("history", *args, check=False)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("gpuenergy history: error: ") and message in done.stderr


@pytest.mark.parametrize(("args", "message"), [
    (("--min-change", "five"), "'five' is not a percentage"),
    (("--since", "yesterday"), "'yesterday' is not a date"),
    (("--commits", "abc"), "give FIRST..LAST"),
    (("--confidence", "2"), "--confidence"),
    (("--min-runs", "0"), "from 1 to 100"),
    (("--price-per-kwh", "-1"), "must be a number from 0"),
    (("--metric", "watts"), "invalid choice"),
])
def test_bad_option_values_are_usage_errors_naming_the_value(tmp_path, args, message):
    saved(tmp_path / "s", 2)
    done = cli_in_process("history", "s", *args, check=False)
    assert done.returncode == 2 and message in done.stderr


def test_a_bad_ini_price_names_the_setting(tmp_path):
    saved(tmp_path / "s", 2)
    (tmp_path / "pyproject.toml").write_text('[tool.pytest.ini_options]\nenergy_price_per_kwh = "cheap"\n')
    done = cli_in_process("history", "s", check=False)
    assert done.returncode == 2 and "energy_price_per_kwh='cheap' is not a number" in done.stderr
    (tmp_path / "pyproject.toml").write_text('[tool.pytest.ini_options]\nenergy_price_per_kwh = 0.25\n')
    data = history_json("s")
    assert data["energy"]["price_per_kwh"] == 0.25 and data["energy"]["co2e_g"] is None
    assert history_json("s", "--price-per-kwh", "0.5")["energy"]["price_per_kwh"] == 0.5
    (tmp_path / "pyproject.toml").write_text("[tool.pytest]\nenergy_carbon_g_per_kwh = 300\n")   # pytest 9's own table
    assert history_json("s")["energy"]["carbon_g_per_kwh"] == 300


def test_runs_without_commits_are_ordered_by_run_time_and_still_analysed(tmp_path):
    saved(tmp_path / "s", commits=False)
    data = history_json("s")
    assert data["order"] == "run time" and any("name no commit" in n for n in data["notes"])
    assert len(data["change_points"]) == 2 and all(c["commit"].startswith("2025") for c in data["change_points"])
    head = " ".join(cli_in_process("history", "s").stdout.split()[:16])
    assert head.startswith("energy history: ETS per call over ") and " runs, 20" in head and "commit" not in head, head


def test_the_terminal_summary_fits_80_columns_with_long_names(tmp_path, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    store = RunStore(tmp_path / "s")
    for i in range(6):
        store.save(make_doc(seed=i, minutes=10 * i, commit={"id": COMMIT.format(i), "branch": "main", "dirty": False},
                            workloads=["a-very-long-workload-name-that-goes-on-and-on-" * 2 + "x"],
                            scale={"x": 1.0}, caps_w=(300.0,), noise=0.01,
                            test="tests/deeply/nested/folder/test_module_with_a_long_name.py::TestClass::test_method"))
    lines = cli_in_process("history", "s").stdout.splitlines()
    assert lines and all(len(line) <= 80 for line in lines)


def test_the_false_alarm_benchmarks_histories_with_no_change_rarely_alarm_and_a_30_percent_step_is_found():
    """The benchmark's own figures on a few histories: the statistics alone hold about their 1 % (at most
    2 % with the seeded intervals' second look), and the 5 % minimum leaves none at the default noise."""
    import sys

    bench = Path(__file__).resolve().parent.parent / "benchmarks"
    sys.path.insert(0, str(bench))
    try:
        import history_false_alarms as benchmark
    finally:
        sys.path.remove(str(bench))
    bare = benchmark.alarm_rates(20, 0.015, 300, Settings(min_change_pct=0.0))
    assert bare["change_pct"] <= 3.0 and bare["trend_pct"] <= 3.0
    assert benchmark.alarm_rates(20, 0.015, 300, Settings()) == {"change_pct": 0.0, "trend_pct": 0.0, "pending_pct": 0.0}
    assert benchmark.found_rate(20, 0.015, 100, 30.0) == 100.0


@pytest.mark.slow
def test_many_runs_are_read_by_several_processes_with_the_same_result(tmp_path, monkeypatch):
    """From PARALLEL_FROM files on, a process per CPU reads them: the command (in a process of its own, as a
    user runs it) gives what reading them one by one gives, a damaged file skipped alike."""
    from pytest_gpuenergy.history import series

    store = RunStore(tmp_path / "s")
    for i in range(series.PARALLEL_FROM + 1):
        store.save(make_doc(seed=i, minutes=10 * i, commit={"id": COMMIT.format(i), "branch": "main", "dirty": False},
                            workloads=["alexnet-train"], caps_w=(300.0,), n=2, noise=0.01,
                            scale={"alexnet-train": 1.3 if i >= 20 else 1.0}))
    store.files()[5].write_text("{}")
    parallel = json.loads(run_cli("history", str(tmp_path / "s"), "--json", "-").stdout)
    monkeypatch.setattr(series, "PARALLEL_FROM", 10 ** 6)
    serial = history_json(str(tmp_path / "s"))
    assert parallel == serial and len(serial["skipped"]) == 1
    assert [c["commit"] for c in serial["change_points"]] == [COMMIT.format(20)]


def test_the_run_reports_say_the_runs_energy_in_kwh():
    from pytest_gpuenergy.reports.html import html_report
    from pytest_gpuenergy.reports.json_report import report_data
    from pytest_gpuenergy.reports.markdown import markdown_report
    from pytest_gpuenergy.reports.numbers import si

    doc = make_doc(seed=1, caps_w=(300.0, 700.0), n=3)
    used_j = sum(rep.ets_j * rep.calls for case in doc.cases for rep in case.repetitions)
    (run,) = report_data([doc])["runs"]
    assert run["energy_j"] == pytest.approx(used_j) and run["energy_kwh"] == pytest.approx(used_j / 3.6e6)
    line = f"GPU energy in the measured regions (simulated): {si(used_j, 'J')} ({used_j / 3.6e6:.3g} kWh)"
    assert line in markdown_report([doc]) and line in html_report([doc])


def test_a_slow_drift_over_the_commits_is_a_trend_in_every_report(tmp_path):
    store = RunStore(tmp_path / "s")
    for i in range(12):
        store.save(make_doc(seed=i, minutes=10 * i, commit={"id": COMMIT.format(i), "branch": "main", "dirty": False},
                            scale={"alexnet-train": 1.02 ** i}, caps_w=(300.0,), noise=0.005))
    data = history_json("s", "--markdown", "h.md")
    (trend,) = data["trends"]
    assert data["change_points"] == [] and "alexnet-train" in trend["test"]
    assert (trend["from_commit"], trend["to_commit"], trend["commits"]) == (COMMIT.format(0), COMMIT.format(11), 12)
    assert 18 < trend["total_pct"] < 27 and 1.5 < trend["per_commit_pct"] < 2.5
    assert "### Trends" in Path("h.md").read_text() and "0 change points, 1 trend" in cli_in_process("history", "s").stdout


def test_a_plot_of_a_long_test_name_keeps_it_inside_and_says_simulated(tmp_path, monkeypatch):
    """A test's name wider than its plot (a long parameter id): its middle is elided and "(simulated)"
    stays whole, inside the figure (the title was cut off at both edges)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    from pytest_gpuenergy.history import plots
    from pytest_gpuenergy.history.report import analyse
    from pytest_gpuenergy.history.series import read_history
    from pytest_gpuenergy.reports.svg import rc_context

    workload = "a-very-long-workload-name-that-goes-on-and-on-and-on-with-its-parameters-x"
    store = RunStore(tmp_path / "s")
    for i in range(6):
        store.save(make_doc(seed=i, minutes=10 * i, commit={"id": COMMIT.format(i), "branch": "main", "dirty": False},
                            workloads=[workload], scale={workload: 1.3 if i >= 3 else 1.0}, caps_w=(300.0,), noise=0.01))
    figures = []
    original = plots.figure_svg
    monkeypatch.setattr(plots, "figure_svg", lambda fig, *a, **k: (figures.append(fig), original(fig, *a, **k))[1])
    plots.html_report(analyse(read_history(tmp_path / "s")))
    assert len(figures) == 1, "the step is a change point: its series is plotted"
    (fig,) = figures
    title = fig.texts[0]
    assert title.get_text().endswith(" (simulated)") and "…" in title.get_text(), title.get_text()
    with rc_context():
        canvas = FigureCanvasAgg(fig)
        canvas.draw()
        box = title.get_window_extent(canvas.get_renderer())
    assert fig.bbox.x0 <= box.x0 and box.x1 <= fig.bbox.x1, (box, fig.bbox)
