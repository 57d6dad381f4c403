"""The benchmark scripts run and write what the README reads from them (behaviour, not speed)."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(BENCH))

import detection_power  # noqa: E402
import run_all  # noqa: E402


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


def test_run_all_writes_each_goal_with_its_figure_target_and_verdict(tmp_path):
    write = lambda name, data: (tmp_path / f"{name}-quick.json").write_text(json.dumps(data))  # noqa: E731
    write("meter_overhead", {"machine": {"date": "2026-11-25T10:00:00+00:00"}, "wall_s": 12.5, "region_decomposition": [
        {"mode": "counter", "goal_applies": True, "estimated_overhead": 0.001},
        {"mode": "counter", "goal_applies": True, "estimated_overhead": 0.004},
        {"mode": "counter, 2.4 ms reads", "goal_applies": True, "estimated_overhead": 0.02},
        {"mode": "counter", "goal_applies": False, "estimated_overhead": 0.5},          # a short region: no goal
    ]})
    write("detection_power", {"goal": {"z_test_limit_detection": 0.937, "gate": [
        {"setting": "ets:2%", "false_alarm": 0.007, "detection": 0.92},
        {"setting": "ets:0%", "false_alarm": 0.03, "detection": 0.99},                  # too many false alarms
    ]}})
    write("tune_accuracy", {"summary": {"cases": 36, "within_goal": 33, "max_settings": 5, "goal_met": False}})
    write("energy_all_overhead", {"goals": [{"goal": "energy_all_overhead", "figure": 0.08, "target": 0.1, "met": True,
                                             "simulated": True}]})
    write("compare_scaling", {"rows": [{"cases": 1250, "cpu_s": 0.3, "ratio_to_smallest": 1.0, "cases_ratio": 1.0},
                                       {"cases": 10000, "cpu_s": 2.6, "ratio_to_smallest": 8.7, "cases_ratio": 8.0}]})
    found = {goal.goal: goal for goal in run_all.goals(tmp_path, quick=True)}
    assert set(found) == {"meter_overhead_python", "meter_overhead_slow_reads", "detection_power_n5", "tune_within_5pct",
                          "energy_all_overhead"}
    assert (found["meter_overhead_python"].figure, found["meter_overhead_python"].met) == (0.004, True)     # the worst
    assert (found["meter_overhead_slow_reads"].figure, found["meter_overhead_slow_reads"].met) == (0.02, False)
    assert found["meter_overhead_python"].source == "meter_overhead-quick.json (2026-11-25T10:00:00+00:00, 12.5 s)"
    detection = found["detection_power_n5"]
    assert detection.figure == 0.92 and detection.target == pytest.approx(0.917) and detection.met
    assert (found["tune_within_5pct"].figure, found["tune_within_5pct"].met) == (33 / 36, False)
    assert found["energy_all_overhead"].met
    path = run_all.write_goals(tmp_path, True, list(found.values()), 1.0)
    written = json.loads(path.read_text())
    assert path.name == "goals-quick.json" and len(written) == 5
    assert all({"goal", "figure", "target", "met"} <= set(row) for row in written)
    others = run_all.other_lines(tmp_path, quick=True)
    assert "comparison: 10000 cases in 2.6 s of CPU, 8.7x the CPU of 8x fewer cases (linear: about 8x)" in others


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
