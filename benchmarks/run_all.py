"""Run every benchmark, one after the other, and print a summary of the goals.

    python benchmarks/run_all.py --quick     # every figure, under 5 minutes on a 2-core machine
    python benchmarks/run_all.py             # the full runs (more regions, lengths and trials; much longer)

Each script prints its own tables and writes ``benchmarks/results/<name>[-quick].json``; this
one then reads those results back, prints a table of the goals (figure, target, met) and writes it
to ``benchmarks/results/goals[-quick].json``: a list of objects with ``goal``, ``figure``,
``target``, ``met``, ``simulated`` and ``source`` (the result file and when it ran). A goal whose
benchmark was not run (``--only``) takes its figure from that benchmark's last result file. The benchmarks run
one at a time (each one's timing would disturb another's).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
SCRIPTS = ("meter_overhead", "meter_accuracy", "detection_power", "energy_all_overhead", "tune_accuracy", "suite_time",
           "compare_scaling", "startup")


@dataclass(frozen=True)
class Goal:
    """One goal's figure against its target, as ``goals[-quick].json`` holds it."""

    goal: str
    figure: float | None
    target: float
    met: bool
    simulated: bool
    source: str                  # the result file the figure comes from, and when that ran
    text: str                    # the line printed in the summary

    def record(self) -> dict:
        return {"goal": self.goal, "figure": self.figure, "target": self.target, "met": self.met,
                "simulated": self.simulated, "source": self.source}


def _loader(results: Path, quick: bool):
    def load(name: str) -> tuple[dict | None, str]:
        path = results / f"{name}{'-quick' if quick else ''}.json"
        if not path.exists():
            return None, path.name
        data = json.loads(path.read_text(encoding="utf-8"))
        return data, f"{path.name} ({data.get('machine', {}).get('date', 'date unknown')}, {data.get('wall_s', '?')} s)"
    return load


def goals(results: Path, quick: bool) -> list[Goal]:
    """Every goal with a figure in the results (a benchmark not run yet gives none)."""
    load = _loader(results, quick)
    found: list[Goal] = []
    overhead, source = load("meter_overhead")
    if overhead:
        applies = [d for d in overhead.get("region_decomposition", []) if d.get("goal_applies")]
        for goal, mode in (("meter_overhead_python", "counter"), ("meter_overhead_slow_reads", "counter, 2.4 ms reads")):
            worst = max((d["estimated_overhead"] for d in applies if d["mode"] == mode), default=None)
            if worst is not None:
                found.append(Goal(goal, worst, 0.005, worst <= 0.005, True, source,
                                  f"meter overhead, {mode} (simulated), regions >= 1 s, python and torch work: worst "
                                  f"{worst:.2%} (goal <= 0.5 %)"))
    power, source = load("detection_power")
    if power and power.get("goal", {}).get("gate"):
        best = max(power["goal"]["gate"], key=lambda row: row["detection"] if row["false_alarm"] <= 0.01 else -1.0)
        figure = best["detection"] if best["false_alarm"] <= 0.01 else 0.0
        # Issue 28's goal: within 2 points of the best any test can do (Neyman-Pearson, the noise known).
        target = power["goal"]["z_test_limit_detection"] - 0.02
        found.append(Goal("detection_power_n5", figure, target, figure >= target, True, source,
                          f"detection at 2 % noise, n = 5, +5 % ETS (simulated): {figure:.1%} with {best['false_alarm']:.1%} "
                          f"false alarms ({best['setting']}); goal: within 2 points of the Neyman-Pearson bound "
                          f"{power['goal']['z_test_limit_detection']:.1%} at <= 1 % false alarms"))
    tune, source = load("tune_accuracy")
    if tune:
        summary = tune["summary"]
        share = summary["within_goal"] / summary["cases"]
        found.append(Goal("tune_within_5pct", share, 1.0, summary["goal_met"], True, source,
                          f"gpuenergy tune within 5 % of the sweep (simulated): {summary['within_goal']} of {summary['cases']} "
                          f"cases in at most {summary['max_settings']} settings (goal: all)"))
    energy_all, source = load("energy_all_overhead")
    for row in (energy_all or {}).get("goals", []):
        found.append(Goal(row["goal"], row["figure"], row["target"], row["met"], row.get("simulated", True), source,
                          f"{row['goal']} (simulated): {row['figure']:+.1%} (goal <= {row['target']:.0%})"))
    return found


def other_lines(results: Path, quick: bool) -> list[str]:
    """Figures without a target of their own: what the benchmarks say beside the goals."""
    load = _loader(results, quick)
    lines = []
    accuracy, _ = load("meter_accuracy")
    for s in (accuracy or {}).get("summary", []):
        lines.append(
            f"meter accuracy, {s['mode']} (simulated): {s['zero_j']} figures of 0 J, {s['above_max_power']} above the "
            f"GPU's maximum; bound holds the truth in {s['bound_holds_share']:.1%} of {s['regions']} regions; median "
            f"|error| from 1 s {s['median_abs_error_from_1s']:.2%}")
    suite, _ = load("suite_time")
    if suite:
        lines.append(f"main job: the plugin adds {suite['goal']['plugin_share_of_workloads']:.1%} on top of the workloads")
    scaling, _ = load("compare_scaling")
    if scaling:
        widest = max(scaling["rows"], key=lambda r: (r["cases"], r["cpu_s"]))
        lines.append(f"comparison: {widest['cases']} cases in {widest['cpu_s']:.1f} s of CPU, {widest['ratio_to_smallest']:.1f}x "
                     f"the CPU of {widest['cases_ratio']:.0f}x fewer cases (linear: about {widest['cases_ratio']:.0f}x)")
    startup, _ = load("startup")
    if startup:
        lines.append(f"start-up: the plugin adds {1000 * startup['plugin_added_s']:.0f} ms to a pytest session that measures nothing")
    return lines


def write_goals(results: Path, quick: bool, found: list[Goal], wall_s: float) -> Path:
    """``goals[-quick].json``: a list of objects with goal, figure, target, met (and simulated, source)."""
    path = results / f"goals{'-quick' if quick else ''}.json"
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps([g.record() for g in found], indent=2) + "\n", encoding="utf-8")
    tmp.replace(path)
    print(f"wrote {path} (this run took {wall_s:.0f} s)")
    return path


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="the quick variant of every benchmark (under 5 minutes)")
    p.add_argument("--only", default=",".join(SCRIPTS), help=f"comma-separated subset of {', '.join(SCRIPTS)}")
    args = p.parse_args()
    chosen = [name for name in args.only.split(",") if name]
    unknown = sorted(set(chosen) - set(SCRIPTS))
    if unknown:
        p.error(f"unknown benchmark(s) {', '.join(unknown)}; choose from {', '.join(SCRIPTS)}")
    started = time.time()
    failed = []
    for name in chosen:
        print(f"\n===== {name} =====", flush=True)
        t0 = time.time()
        done = subprocess.run([sys.executable, str(BENCH_DIR / f"{name}.py"), *(["--quick"] if args.quick else [])])
        print(f"({name}: {time.time() - t0:.0f} s, exit {done.returncode})", flush=True)
        if done.returncode != 0:
            failed.append(name)
    results = BENCH_DIR / "results"
    found = goals(results, args.quick)
    print(f"\n===== goals ({'quick' if args.quick else 'full'} runs; figures from the GPU simulator are simulated) =====")
    print(f"{'goal':<28} {'figure':>9} {'target':>8}  met")
    for goal in found:
        figure = "-" if goal.figure is None else f"{goal.figure:.4g}"
        print(f"{goal.goal:<28} {figure:>9} {goal.target:>8.4g}  {'yes' if goal.met else 'NO'}")
    for goal in found:
        print(f"  {goal.text}")
    for line in other_lines(results, args.quick):
        print(f"  {line}")
    wall_s = time.time() - started
    write_goals(results, args.quick, found, wall_s)
    print(f"\nall benchmarks: {wall_s:.0f} s" + (f"; FAILED: {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
