"""The benchmark scripts run and write what the README reads from them (behaviour, not speed)."""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import numpy as np
import pytest

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(BENCH))

import detection_power  # noqa: E402
import energy_all_overhead  # noqa: E402
import energy_all_profile  # noqa: E402
import run_all  # noqa: E402
import third_party  # noqa: E402


def test_detection_power_writes_its_grid_and_the_gate_holds_its_false_alarm_rate(tmp_path):
    done = subprocess.run(
        [sys.executable, str(BENCH / "detection_power.py"), "--quick", "--out", str(tmp_path), "--trials", "300",
         "--headline-trials", "600", "--search-trials", "100", "--noises", "0.02", "--ns", "5", "--search-ns", "5"],
        capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert "Monte Carlo on SIMULATED samples" in done.stdout and "z-test" in done.stdout
    result = json.loads((tmp_path / "detection_power-quick.json").read_text())
    assert result["benchmark"] == "detection_power" and result["machine"]["cpu_count"] >= 1
    rows = {(r["rule"], r["change"]): r["fail_rate"] for r in result["rows"]}
    # No change: the gate at 99 % almost never fails; +10 % at 2 % noise, n=5: it nearly always does.
    assert rows[("gate:5", 0.0)] <= 0.02
    assert rows[("gate:2", 0.10)] >= 0.9
    # The threshold-only rule (pytest-benchmark) fails on noise far more often at a 2 % threshold.
    assert rows[("pytest-benchmark:2", 0.0)] > rows[("gate:2", 0.0)]
    assert isinstance(result["goal"]["goal_met"], bool)
    [goal] = result["goals"]                                       # what run_all.py reads
    assert goal["goal"] == "detection_power_n5" and goal["simulated"] and isinstance(goal["met"], bool)
    assert goal["target"] == pytest.approx(result["goal"]["z_test_limit_detection"] - 0.02)


def test_z_test_limit_is_the_known_normal_power():
    # sigma = sqrt(ln(1 + 0.02^2)), se = sigma sqrt(2/5); power = Phi(ln 1.05 / se - z_0.99)
    sigma = math.sqrt(math.log1p(0.0004))
    expected = 0.5 * math.erfc(-(math.log(1.05) / (sigma * math.sqrt(0.4)) - 2.3263478740408408) / math.sqrt(2))
    assert detection_power.z_test_limit(0.02, 5, 0.05) == pytest.approx(expected, rel=1e-9)
    assert detection_power.z_test_limit(0.02, 5, 0.0) == pytest.approx(0.01)


def test_pytest_benchmark_rule_is_a_plain_threshold_on_the_mean():
    old = np.array([[100.0, 100.0], [100.0, 100.0]])
    new = np.array([[104.0, 106.0], [102.0, 103.0]])   # +5 % and +2.5 %
    assert detection_power.pytest_benchmark_fails(old, new, 3).tolist() == [True, False]


def _result(folder: Path, name: str, goals: list | None = None, **keys) -> None:
    document = {"benchmark": name, "simulated": True, "machine": {"date": "2026-11-25T10:00:00+00:00"}, "wall_s": 12.5, **keys}
    if goals is not None:
        document["goals"] = goals
    (folder / f"{name}-quick.json").write_text(json.dumps(document))


def _goal(goal: str, figure, target: float, met: bool, **more) -> dict:
    return {"goal": goal, "figure": figure, "target": target, "met": met, **more}


def test_run_all_reads_every_benchmarks_goals_whatever_the_benchmark(tmp_path):
    _result(tmp_path, "meter_overhead", [_goal("meter_overhead_python", 0.004, 0.005, True, simulated=True),
                                         _goal("meter_overhead_slow_reads", 0.02, 0.005, False, simulated=True)])
    _result(tmp_path, "detection_power", [_goal("detection_power_n5", 0.92, 0.917, True, simulated=True,
                                                text="detection at 2 % noise, n = 5: 92.0 %")])
    _result(tmp_path, "tune_accuracy", [_goal("tune_within_5pct", 33 / 36, 1.0, False)])   # simulated: the document's
    _result(tmp_path, "energy_all_overhead", [_goal("energy_all_overhead", 0.08, 0.1, True, simulated=True)])
    _result(tmp_path, "phase_marks_overhead", [_goal("phase_marks_overhead", 0.01, 0.02, True, simulated=True)])
    _result(tmp_path, "startup", [_goal("a_new_goal", 3.0, 5.0, True, simulated=False)], plugin_added_s=0.1)
    _result(tmp_path, "compare_scaling", rows=[{"cases": 1250, "cpu_s": 0.3, "ratio_to_smallest": 1.0, "cases_ratio": 1.0},
                                               {"cases": 10000, "cpu_s": 2.6, "ratio_to_smallest": 8.7, "cases_ratio": 8.0}])
    found = run_all.goals(tmp_path, quick=True)
    assert [g.goal for g in found] == [*run_all.EXPECTED, "a_new_goal"]        # the tracked goals first, then the rest
    by_name = {goal.goal: goal for goal in found}
    assert (by_name["meter_overhead_python"].figure, by_name["meter_overhead_python"].met) == (0.004, True)
    assert (by_name["meter_overhead_slow_reads"].figure, by_name["meter_overhead_slow_reads"].met) == (0.02, False)
    assert by_name["meter_overhead_python"].source == "meter_overhead-quick.json (2026-11-25T10:00:00+00:00, 12.5 s)"
    assert by_name["tune_within_5pct"].simulated and not by_name["a_new_goal"].simulated
    assert by_name["detection_power_n5"].text == "detection at 2 % noise, n = 5: 92.0 %"
    assert all(not goal.reason for goal in found)
    path = run_all.write_goals(tmp_path, True, found, 1.0)
    written = json.loads(path.read_text())
    assert path.name == "goals-quick.json" and len(written) == 7
    assert written[0] == {"goal": "meter_overhead_python", "figure": 0.004, "target": 0.005, "met": True, "simulated": True,
                          "source": "meter_overhead-quick.json (2026-11-25T10:00:00+00:00, 12.5 s)"}
    others = run_all.other_lines(tmp_path, quick=True)
    assert "comparison: 10000 cases in 2.6 s of CPU, 8.7x the CPU of 8x fewer cases (linear: about 8x)" in others
    assert "start-up: the plugin adds 100 ms to a pytest session that measures nothing" in others
    assert not any(line.startswith("start-up") for line in run_all.other_lines(tmp_path, True, {"startup": "exit 1"}))


def test_a_goal_without_a_figure_is_listed_as_not_met_with_the_reason(tmp_path):
    _result(tmp_path, "meter_overhead", [_goal("meter_overhead_python", None, 0.005, False, simulated=True,
                                               reason="no region of 1 s was measured")])
    _result(tmp_path, "detection_power", [_goal("detection_power_n5", "92 %", 0.917, True, simulated=True)])
    _result(tmp_path, "tune_accuracy", rows=[])                        # a result written before goals were listed
    (tmp_path / "energy_all_overhead-quick.json").write_text("{not json")
    _result(tmp_path, "phase_marks_overhead", [_goal("phase_marks_overhead", 0.01, 0.02, True, simulated=True)])
    found = {goal.goal: goal for goal in run_all.goals(tmp_path, quick=True,
                                                         failed={"phase_marks_overhead": "exit 1"})}
    assert set(found) == set(run_all.EXPECTED)
    assert not any(goal.met for goal in found.values()) and all(goal.figure is None for goal in found.values())
    reasons = {name: goal.reason for name, goal in found.items()}
    assert reasons["meter_overhead_python"] == "no region of 1 s was measured"
    assert reasons["meter_overhead_slow_reads"] == "meter_overhead's result has no goal meter_overhead_slow_reads"
    assert reasons["detection_power_n5"] == 'figure is "92 %", not a number'
    assert reasons["tune_within_5pct"] == ("tune_accuracy-quick.json lists no goals (written before benchmarks listed "
                                           "theirs): rerun benchmarks/tune_accuracy.py")
    assert reasons["energy_all_overhead"].startswith("energy_all_overhead-quick.json is not readable JSON")
    # an earlier run's figure is not this run's: a benchmark that failed now gives none
    assert reasons["phase_marks_overhead"] == "phase_marks_overhead failed in this run (exit 1)"
    written = json.loads(run_all.write_goals(tmp_path, True, list(found.values()), 1.0).read_text())
    assert {row["goal"]: (row["figure"], row["met"], row["reason"]) for row in written}["phase_marks_overhead"] == (
        None, False, "phase_marks_overhead failed in this run (exit 1)")


def test_run_all_runs_each_script_and_a_missing_one_is_a_failed_benchmark_not_a_crash(tmp_path, monkeypatch, capsys):
    """Scripts given --quick and --out write their goals; the load-free ones run side by side and show
    their output when they end; one that is not there, or fails, is listed at the end."""
    scripts = tmp_path / "scripts"
    scripts.mkdir()
    (scripts / "writes_a_goal.py").write_text(textwrap.dedent("""
        import json, sys
        out = sys.argv[sys.argv.index("--out") + 1]
        assert "--quick" in sys.argv
        goal = {"goal": "meter_overhead_python", "figure": 0.003, "target": 0.005, "met": True, "simulated": True}
        open(out + "/writes_a_goal-quick.json", "w").write(json.dumps({"simulated": True, "goals": [goal]}))
        print("wrote the goal")
    """))
    (scripts / "fails.py").write_text("raise SystemExit(3)\n")
    monkeypatch.setattr(run_all, "BENCH_DIR", scripts)
    monkeypatch.setattr(run_all, "SCRIPTS", ("writes_a_goal", "not_written_yet", "fails"))
    monkeypatch.setattr(run_all, "LOAD_FREE", ("writes_a_goal", "not_written_yet"))
    results = tmp_path / "results"
    results.mkdir()
    assert run_all.main(["--quick", "--out", str(results)]) == 1
    out = capsys.readouterr().out
    assert "side by side: writes_a_goal, not_written_yet" in out
    assert re.search(r"===== writes_a_goal =====\nwrote the goal\n\(writes_a_goal: \d+ s, \d+ s of CPU, exit 0\)", out)
    assert "(not_written_yet: not run: benchmarks/not_written_yet.py is missing)" in out
    assert "FAILED: not_written_yet (benchmarks/not_written_yet.py is missing), fails (exit 3)" in out
    written = {row["goal"]: row for row in json.loads((results / "goals-quick.json").read_text())}
    assert written["meter_overhead_python"]["met"] and written["meter_overhead_python"]["figure"] == 0.003
    assert set(written) == set(run_all.EXPECTED)
    assert not written["phase_marks_overhead"]["met"] and written["phase_marks_overhead"]["reason"]


def test_the_benchmarks_with_goals_state_them_in_their_results():
    """The goals run_all tracks come from the scripts' own goal functions (figures made up here)."""
    import meter_overhead

    parts = [{"mode": "counter", "goal_applies": True, "estimated_overhead": 0.001},
             {"mode": "counter", "goal_applies": True, "estimated_overhead": 0.004},
             {"mode": "counter", "goal_applies": False, "estimated_overhead": 0.5},            # a short region: no goal
             {"mode": "counter, 2.4 ms reads", "goal_applies": True, "estimated_overhead": 0.02}]
    found = {goal.goal: goal for goal in meter_overhead.goals(parts)}
    assert (found["meter_overhead_python"].figure, found["meter_overhead_python"].met) == (0.004, True)   # the worst
    assert (found["meter_overhead_slow_reads"].figure, found["meter_overhead_slow_reads"].met) == (0.02, False)
    missing = {goal.goal: goal for goal in meter_overhead.goals(parts[:3])}["meter_overhead_slow_reads"]
    assert missing.figure is None and not missing.met and "counter, 2.4 ms reads" in missing.reason
    headline = {"available": True, "z_test_limit_detection": 0.937, "gate": [
        {"setting": "ets:2%", "false_alarm": 0.007, "detection": 0.92},
        {"setting": "ets:0%", "false_alarm": 0.03, "detection": 0.99}]}                   # too many false alarms
    detection = detection_power.headline_goal(headline)
    assert detection.figure == 0.92 and detection.target == pytest.approx(0.917) and detection.met
    assert detection_power.headline_goal({"available": False}).figure is None


def test_a_stand_in_replays_what_a_step_declares_and_refuses_what_it_cannot(monkeypatch):
    import dataclasses
    import weakref

    import _stand_ins

    from pytest_gpuenergy.sim import GpuWork
    from pytest_gpuenergy.sim import work as sim_work

    work = GpuWork(flops_fp32=1e9, bytes=1e6, kernels=3)
    # Only the stand-in's recorder listens: a simulator an earlier test left for the garbage collector
    # would be told the made-up call below too (and has no such method).
    monkeypatch.setattr(sim_work, "_SIMULATORS", weakref.WeakSet())

    class Step:
        def __init__(self, *extra: str) -> None:
            self.extra = extra

        def step(self) -> None:
            sim_work.declare_work(work)
            for simulator in list(sim_work._SIMULATORS):
                for name in self.extra:
                    getattr(simulator, name)(2.0)

    assert _stand_ins.recorded_step("some", "train", lambda *args, **keywords: Step()) == [
        {"work": dataclasses.asdict(work)}]
    with pytest.raises(SystemExit, match="a some train step tells the simulator simSomethingNew"):
        _stand_ins.recorded_step("some", "train", lambda *args, **keywords: Step("simSomethingNew"))
    assert not sim_work.simulating()          # the recorder is gone again


@pytest.mark.slow
def test_the_stand_ins_give_the_reference_workloads_figures_to_the_last_digit(tmp_path):
    """tune_accuracy --quick measures stand-ins (_stand_ins.py) instead of the suite's torch steps: the same
    case, seed and noise on the simulator give the same saved figures from both."""
    import _stand_ins

    from pytest_gpuenergy.runs.store import RunStore

    stand_ins = _stand_ins.write_suite(tmp_path / "stand-ins", names=("autoenc",))
    figures = {}
    for kind, path, cwd in (("suite", BENCH.parent / "reference_workloads", BENCH.parent),
                            ("stand-in", stand_ins, stand_ins.parent)):
        env = {**os.environ, "GPUENERGY_SIM_STATE": str(tmp_path / f"sim-{kind}"), "GPUENERGY_SIM_GPUS": "H100",
               "GPUENERGY_SIM_CLOCK": "virtual", "GPUENERGY_SIM_SEED": "3", "GPUENERGY_SIM_NOISE": "0.015"}
        store = tmp_path / f"runs-{kind}"
        done = subprocess.run([sys.executable, "-m", "pytest", str(path), "-k", "autoenc-train", "--gpu-caps=200",
                               "--gpu-backend=sim", "--energy-save", f"--energy-storage={store}", "--energy-repeat=2",
                               "-q", "-p", "no:cacheprovider"], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode in (0, 1), done.stdout[-2000:] + done.stderr[-2000:]   # 1: a budget of the suite's missed
        figures[kind] = sorted((entry.test, entry.cap, entry.summary.ets_j, entry.summary.edp_js, entry.summary.time_s)
                               for run in RunStore(store).runs() for entry in run.cases)
    assert len(figures["suite"]) == 1 and figures["stand-in"] == figures["suite"]


def test_compare_scaling_compares_every_case_of_its_runs():
    """The script's documents and its check that every case compared (it raises otherwise)."""
    import compare_scaling

    assert compare_scaling.cpu_seconds(40, moved=True) > 0


def test_html_report_times_each_plot_kind_and_puts_the_functions_back():
    """The script's per-kind timing: every plot the page draws is counted under its kind, and the
    report's own functions are restored after (a later page is not timed)."""
    import html_report

    from pytest_gpuenergy.reports import html

    from helpers import make_doc

    before = {kind: getattr(html, kind) for kind in html_report.KINDS}
    spent: dict[str, list[float]] = {kind: [] for kind in html_report.KINDS}
    undo = html_report.timed_kinds(spent)
    try:
        page = html.html_report([make_doc(seed=1, workloads=("a", "b"), caps_w=(200.0, 300.0))])
    finally:
        undo()
    assert {kind: len(times) for kind, times in spent.items()} == {
        "sweep_svg": 2, "pareto_svg": 2, "heatmap_svg": 1, "legend_svg": 1}
    assert page.count("<svg") == 6 and all(t > 0 for times in spent.values() for t in times)
    assert {kind: getattr(html, kind) for kind in html_report.KINDS} == before


def test_run_all_rejects_an_unknown_benchmark():
    done = subprocess.run([sys.executable, str(BENCH / "run_all.py"), "--only", "nope"], capture_output=True, text=True)
    assert done.returncode == 2 and "unknown benchmark(s) nope" in done.stderr


@pytest.mark.slow
def test_the_real_gpu_script_dry_runs_on_the_simulator_and_changes_no_limit(tmp_path, monkeypatch, capsys):
    """The script's main() in this process (torch is imported here already: 1.3 s less than a fresh
    interpreter; the benchmark scripts as processes: run_all's test above)."""
    import real_gpu

    # The script times a real GPU from threads on the host's clock: its dry run needs the simulator
    # in real time too.
    monkeypatch.setenv("GPUENERGY_SIM_CLOCK", "wall")
    monkeypatch.setattr(sys, "argv", ["real_gpu.py", "--backend", "sim", "--device", "cpu", "--size", "tiny", "--smoke",
                                      "--out", str(tmp_path)])
    with warnings.catch_warnings():        # the script silences the meter's warnings for its whole run
        real_gpu.main()
    done = capsys.readouterr()
    assert "SIMULATED GPU (dry run)" in done.out
    result = json.loads((tmp_path / "real_gpu-quick.json").read_text())
    assert result["simulated"] and result["gpu"]["simulated"] and result["machine"]["gpu"].startswith("simulated GPU")
    assert result["limit_unchanged"] is True
    comparison = result["counter_vs_sampling"]
    assert comparison["counter_period_s"] == pytest.approx(0.1, abs=0.01)   # the simulator's documented period
    assert abs(comparison["sampling_vs_counter"]) < 0.05
    assert [row["workload"] for row in result["repeatability"]] == ["transformer-infer-tiny"]   # --smoke: one, inference
    assert 0 < result["read_costs"]["mark_moment"]["median_us"] <= result["read_costs"]["mark_moment"]["p99_us"]
    # The overhead: a fixed amount of work three ways, against a baseline with the recorder's thread
    # stopped; the recorder, started again with what it knew, read inside the measured regions.
    overhead = result["overhead"]
    assert [row["work"] for row in overhead] == ["torch", "python"]
    for row in overhead:
        assert row["units"] >= 1 and row["rounds"] == 1
        assert {way: len(times) for way, times in row["runs_s"].items()} == {"stopped": 1, "running": 1, "measured": 1}
        assert row["overhead"] == pytest.approx(row["measured_median_s"] / row["baseline_median_s"] - 1)
        assert row["baseline_median_s"] == row["runs_s"]["stopped"][0]
        # (a 0.1 s region on a loaded 2-core machine may hold no read; its figure needed the restarted
        # recorder's reads after it, or the run would have raised)
        assert row["recorder_reads_per_s"] >= 0 and row["recorder_reads_per_s_between_regions"] >= 0


def test_the_real_gpu_overhead_rotates_which_way_runs_first():
    import real_gpu

    ways = ("stopped", "running", "measured")
    firsts = [real_gpu._rotated(ways, i)[0] for i in range(3)]
    assert sorted(firsts) == sorted(ways)
    assert all(sorted(real_gpu._rotated(ways, i)) == sorted(ways) for i in range(5))


@pytest.mark.slow
def test_the_real_gpu_phases_script_dry_runs_on_the_simulator(tmp_path, monkeypatch, capsys):
    """Its dry run: the transformer's phases under watch add up to the region's ETS, the classes come
    from by_op, the phases alone are there, everything is labelled simulated and no limit changed."""
    import real_gpu_phases

    monkeypatch.setattr(sys, "argv", ["real_gpu_phases.py", "--backend", "sim", "--device", "cpu", "--size", "tiny",
                                      "--quick", "--out", str(tmp_path)])
    with warnings.catch_warnings():
        real_gpu_phases.main()
    assert "SIMULATED GPU (dry run)" in capsys.readouterr().out
    result = json.loads((tmp_path / "real_gpu_phases-quick.json").read_text())
    assert result["simulated"] and result["gpu"]["simulated"] and result["limit_unchanged"] is True
    [row] = result["workloads"]
    watch = row["watch"]
    assert row["workload"] == "transformer-train-tiny" and set(watch["phases"]) == {"forward", "backward", "update", "other"}
    assert watch["phases_sum_j"] == pytest.approx(watch["ets_j"], rel=1e-9)
    assert "error" not in row["by_op"] and {"matmul", "elementwise"} <= set(row["by_op"]["op_classes"])
    assert set(row["alone"]) == {"forward", "update"}


def test_the_read_dating_probe_measures_brackets_by_host_clock_and_by_the_fields_stamp():
    """Reads of 2.4 ms whose host end comes 5 ms late (the GIL's wait), stamped 2.4 ms after they
    begin, at a counter publishing every 100 ms: a bracket by the host's clock runs from one read's
    start to the next one's late end; by the stamps, from one stamp to the next."""
    import nvml_read_dating

    rows, began = [], 1000.0
    while began < 1003.0:
        stamp = began + 0.0024
        rows.append((began, stamp + 0.005, stamp, 2400, int((stamp - 1000.0301) // 0.1)))
        began = stamp + 0.005 + 0.001
    summary = nvml_read_dating.summarise(rows)
    assert summary["changes"] == 30 and summary["timestamp_outside_span"] == 0
    assert summary["span_ms_median"] == pytest.approx(7.4, abs=1e-6)
    assert summary["timestamp_before_end_ms_median"] == pytest.approx(5.0, abs=1e-6)
    host, stamp = summary["host_brackets"], summary["timestamp_brackets"]
    # host: previous read's start to this read's (late) end = 7.4 + 1 + 7.4 ms; stamps: one read period, 8.4 ms
    assert host["width_ms_median"] == pytest.approx(15.8, abs=1e-6)
    assert stamp["width_ms_median"] == pytest.approx(8.4, abs=1e-6)


def test_the_read_dating_probes_lattice_residuals_are_each_middles_distance_from_the_100_ms_lattice():
    import nvml_read_dating

    middles = [5.03 + 0.1 * k for k in range(9)]
    assert nvml_read_dating.lattice_residuals_ms(middles) == pytest.approx([0.0] * 9, abs=1e-6)
    middles[4] += 0.002
    middles[6] -= 0.097            # 3 ms after the tick before it
    assert nvml_read_dating.lattice_residuals_ms(middles) == pytest.approx([0, 0, 0, 0, 2.0, 0, 3.0, 0, 0], abs=1e-6)
    assert nvml_read_dating.lattice_residuals_ms([]) == []


def test_energy_all_overhead_splits_what_a_session_pays_once_from_what_each_test_pays() -> None:
    """Pair by pair: 600 tests add 2.5, 2.0 and 3.0 s (median 2.5); one test adds 0.3, 0.1 and 0.2 s
    (median 0.2): 0.2 s once, and (2.5 - 0.2) / 599 s a test, against the 600 tests' 5 s without."""
    short = {"with_s": [7.5, 7.0, 8.0], "without_s": [5.0, 5.0, 5.0]}
    single = {"with_s": [1.3, 1.1, 1.2], "without_s": [1.0, 1.0, 1.0]}
    found = energy_all_overhead.split(short, single)
    assert found["once_s"] == pytest.approx(0.2)
    assert found["once_share"] == pytest.approx(0.2 / 5.0)
    assert found["per_test_ms"] == pytest.approx(2.3 / 599 * 1000.0)


def test_energy_all_overhead_times_pairs_only_after_one_untimed_run_of_each(monkeypatch) -> None:
    """The first process in a fresh bytecode cache compiles what it imports (the main job's first run:
    27.5 s against 21 s): it runs untimed, once each way, and the ABBA pairs follow it."""
    calls = []

    def fake_timed(command, cwd, env):
        calls.append("--energy-all" in command)
        return (30.0, 30.0) if len(calls) == 1 else (2.2, 2.2) if calls[-1] else (2.0, 2.0)

    monkeypatch.setattr(energy_all_overhead, "timed", fake_timed)
    found = energy_all_overhead.ratio(["pytest"], Path("."), {}, pairs=3)
    assert calls == [True, False, True, False, False, True, True, False]
    assert found["warm_up_s"] == [30.0, 2.0]
    assert found["with_s"] == [2.2] * 3 and found["without_s"] == [2.0] * 3
    assert found["overhead"] == pytest.approx(0.1)


def test_energy_all_profile_puts_each_functions_time_per_test_and_what_the_plugin_adds(tmp_path, monkeypatch) -> None:
    """``energy_all_profile.py`` (a real GPU session's step ``profile``): a profile's functions of the
    plugin and pytest's machinery only, per test, and what each adds against the run without."""
    import cProfile

    def our_part() -> None:
        sum(range(20_000))

    def other() -> None:
        sum(range(1000))

    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(4):
        our_part()
    other()
    profiler.disable()
    stats_path = tmp_path / "run.pstats"
    profiler.dump_stats(stats_path)
    # pretend the function lives in the plugin: the filter goes by the file's path
    monkeypatch.setattr(energy_all_profile, "_OURS", (*energy_all_profile._OURS, "test_benchmark_scripts.py"))
    rows = energy_all_profile.rows_of(stats_path, tests=2)
    mine = [name for name in rows if name.endswith("(our_part)")]
    assert len(mine) == 1 and not any(name.endswith("(dumps)") for name in rows)
    row = rows[mine[0]]
    assert row["calls_per_test"] == 2.0 and 0 < row["own_us"] <= row["inclusive_us"]
    without = {mine[0]: {**row, "inclusive_us": row["inclusive_us"] / 4}}
    found = dict(energy_all_profile.added(rows, without))
    assert found[mine[0]]["added_inclusive_us"] == pytest.approx(row["inclusive_us"] * 3 / 4)
    other_rows = [name for name in rows if name.endswith("(other)")]
    assert found[other_rows[0]]["added_inclusive_us"] == rows[other_rows[0]]["inclusive_us"]   # never called without
    assert [name for name, _ in energy_all_profile.added(rows, without)][0] == mine[0]


def test_energy_all_parts_times_each_part_of_a_measured_test_and_changes_nothing(pytester, monkeypatch):
    """The timing plugin a real GPU's session runs (``energy_all_overhead.py --parts``): 3 plain tests
    under ``--energy-all`` give one lock, one meter and one region a test, the simulator's world
    started over each test, and pytest's three phases; the tests pass and are measured as without it."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(BENCH), os.environ.get("PYTHONPATH", "")]))
    out = pytester.path / "parts.json"
    monkeypatch.setenv("GPUENERGY_PARTS_OUT", str(out))
    pytester.makepyfile(test_three="def test_a():\n    pass\n\ndef test_b():\n    pass\n\ndef test_c():\n    pass\n")
    result = pytester.runpytest_subprocess("-p", "energy_all_parts", "--energy-all", "--energy-json=report.json")
    result.assert_outcomes(passed=3)
    found = json.loads(out.read_text())
    assert found["tests"] == 3
    calls = {label: part["calls"] for label, part in found["parts"].items()}
    for label in ("GPU lock: take", "GPU lock: let go", "session: a test's meter", "meter: region start",
                  "meter: region end", "backend: a test's world (simulator)", "pytest: setup", "pytest: call",
                  "pytest: teardown", "library: enforced limit"):
        assert calls[label] == 3, label
    assert all(part["total_s"] > 0 for part in found["parts"].values())
    # figures tried between tests apart from those waited for (on the virtual clock: after each test,
    # and the session's end), so that a once-a-session wait is not read as every test's cost
    assert calls["session: figures worked out: tried between tests"] == 3
    assert calls["session: figures worked out: waited for"] == 4
    assert calls["region: its figure: waited for"] == 3 and "region: its figure" not in calls
    assert calls["pytest: the session's end (once; grows with the cases)"] == 2   # sessionfinish, the summary
    report = json.loads((pytester.path / "report.json").read_text())
    assert len(report["runs"][0]["cases"]) == 3


def test_free_meter_leaves_the_glue_and_takes_the_gpu_work_away_only_under_energy_all(pytester, monkeypatch):
    """``energy_all_overhead.py``'s floor: with ``-p free_meter --energy-all`` the tests run through the
    plugin's fixture and hooks but hold no GPU and measure nothing (no lock file, no case); without
    ``--energy-all`` it changes nothing, so the run it is compared with is a plain one."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(BENCH), os.environ.get("PYTHONPATH", "")]))
    pytester.makepyfile(test_two="def test_a():\n    pass\n\ndef test_b():\n    pass\n")
    pytester.makeconftest(textwrap.dedent("""
        from pytest_gpuenergy.plugin import session

        ORIGINAL = session.EnergySession.lease

        def pytest_sessionfinish(session):
            from pytest_gpuenergy.plugin import session as module
            print("LEASE REPLACED" if module.EnergySession.lease is not ORIGINAL else "LEASE KEPT")
    """))
    free = pytester.runpytest_subprocess("-p", "free_meter", "--energy-all", "--energy-json=free.json", "-s")
    free.assert_outcomes(passed=2)
    assert "LEASE REPLACED" in free.stdout.str()
    assert sum(len(run["cases"]) for run in json.loads((pytester.path / "free.json").read_text())["runs"]) == 0
    measured = pytester.runpytest_subprocess("--energy-all", "--energy-json=measured.json", "-s")
    measured.assert_outcomes(passed=2)
    assert len(json.loads((pytester.path / "measured.json").read_text())["runs"][0]["cases"]) == 2
    plain = pytester.runpytest_subprocess("-p", "free_meter", "-s")
    plain.assert_outcomes(passed=2)
    assert "LEASE KEPT" in plain.stdout.str()


def test_third_party_measured_runs_must_end_each_test_at_both_caps_as_without_the_plugin():
    without = {"t.py::test_x": "PASSED", "t.py::T::test_y[k]": "PASSED", "t.py::test_z": "PASSED",
               "t.py::U::test_u": "FAILED", "t.py::test_gone": "PASSED", "[1]": "SKIPPED"}
    measured = {"t.py::test_x[60%]": "PASSED", "t.py::test_x[100%]": "PASSED",
                "t.py::T::test_y[k-60%]": "PASSED", "t.py::T::test_y[k-100%]": "FAILED",   # fails at one cap
                "t.py::test_z[60%]": "PASSED",                                             # ran at one cap only
                "t.py::U::test_u": "FAILED",                                               # unittest: once, no cap
                "[2]": "SKIPPED"}
    assert third_party.per_cap(measured)["t.py::T::test_y[k]"] == ["PASSED", "FAILED"]
    assert third_party.measured_differences(measured, without) == ["t.py::T::test_y[k]", "t.py::test_gone", "t.py::test_z"]
    measured.update({"t.py::T::test_y[k-100%]": "PASSED", "t.py::test_z[100%]": "PASSED",
                     "t.py::test_gone[60%]": "PASSED", "t.py::test_gone[100%]": "PASSED"})
    assert third_party.measured_differences(measured, without) == []
    measured["t.py::U::test_u"] = "PASSED"
    assert third_party.measured_differences(measured, without) == ["t.py::U::test_u"]


def test_lattice_under_load_measures_regions_and_records_the_learned_period(tmp_path):
    done = subprocess.run([sys.executable, str(BENCH / "lattice_under_load.py"), "--runs", "1", "--hogs", "0", "--out", str(tmp_path)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    document = json.loads((tmp_path / "lattice_under_load.json").read_text())
    (row,) = document["rows"]
    assert document["simulated"] and document["summary"]["runs"] == 1 and "(simulated)" in done.stdout
    assert 80 <= row["period_ms"] <= 120 and row["held"] and abs(row["error"]) < 0.05 and 1.9 <= row["region_s"] <= 2.5


def test_budget_waits_runs_the_three_sessions_and_reads_their_outcomes_and_waits(tmp_path):
    """``budget_waits.py``: a saved run, budgets from it, the budgeted run and the one that waits for
    every figure, on the wall clock; each session's outcomes read from its summary; a session's own
    line on budgets' waits read where there is one (a unit check of the parser, as the 3 tests here
    wait too little for the session to print it)."""
    import budget_waits

    done = subprocess.run([sys.executable, str(BENCH / "budget_waits.py"), "--quick", "--count", "3", "--out", str(tmp_path)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    document = json.loads((tmp_path / "budget_waits-quick.json").read_text())
    assert document["simulated"] and document["count"] == 3 and document["margin_pct"] == 40.0
    rows = document["rows"]
    assert list(rows) == ["no budgets (saved)", "budgets", "budgets, every figure waited for (--junitxml)"]
    assert all(r["passed"] + r["failed"] == 3 and r["wall_s"] > 0 for r in rows.values())
    assert rows["no budgets (saved)"]["failed"] == 0 and rows["no budgets (saved)"]["waited_tests"] == 0
    assert "3 tests of 5 ms, budgets with a margin of 40 %" in done.stdout
    line = "gpuenergy: note: 12 tests with an energy budget waited 2.4 s in all for their figures, 86% of the session"
    assert budget_waits._WAITED.search(line).groups() == ("12", "2.4")
