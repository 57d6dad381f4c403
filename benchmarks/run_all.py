"""Run every benchmark, one after the other, and print a summary of the goals.

    python benchmarks/run_all.py --quick     # every figure, under 5 minutes on a 2-core machine
    python benchmarks/run_all.py             # the full runs (more regions, lengths and trials; much longer)

Each script prints its own tables and writes ``benchmarks/results/<name>[-quick].json``; this
one then reads those results back and prints one line per goal, met or not. The benchmarks run
one at a time (each one's timing would disturb another's).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
SCRIPTS = ("meter_overhead", "meter_accuracy", "detection_power", "suite_time", "compare_scaling", "startup")


def goal_lines(results: Path, quick: bool) -> list[str]:
    def load(name: str) -> dict | None:
        path = results / f"{name}{'-quick' if quick else ''}.json"
        return json.loads(path.read_text(encoding="utf-8")) if path.exists() else None

    lines = []
    overhead = load("meter_overhead")
    if overhead:
        parts = [d for d in overhead.get("region_decomposition", []) if d.get("goal_applies")]
        direct = [r for r in overhead.get("region_overhead", []) if r.get("goal_applies")]
        for mode in dict.fromkeys(d["mode"] for d in parts):
            worst = max(d["estimated_overhead"] for d in parts if d["mode"] == mode)
            verdicts = [r["goal_verdict"] for r in direct if r["mode"] == mode]
            said = ", ".join(f"{verdicts.count(v)} {v}" for v in ("met", "missed", "undecided") if verdicts.count(v))
            lines.append(f"meter overhead, {mode} (simulated), regions >= 1 s: worst estimate {worst:.2%} "
                         f"(goal <= 0.5 %): {'met' if worst <= 0.005 else 'NOT MET'}; direct measurement: {said}")
    accuracy = load("meter_accuracy")
    if accuracy:
        for s in accuracy.get("summary", []):
            lines.append(
                f"meter accuracy, {s['mode']} (simulated): {s['zero_j']} figures of 0 J, {s['above_max_power']} above the "
                f"GPU's maximum; bound holds the truth in {s['bound_holds_share']:.1%} of {s['regions']} regions "
                f"(goal 99 %): {'met' if s['bound_goal_met'] else 'NOT MET'}; median |error| from 1 s "
                f"{s['median_abs_error_from_1s']:.2%} (goal {s['goal']:.1%}): {'met' if s['median_goal_met'] else 'NOT MET'}")
    power = load("detection_power")
    if power:
        lines.extend(f"detection power: {line}" for line in power.get("headline", [])[:1])
    suite = load("suite_time")
    if suite:
        goal = suite["goal"]
        lines.append(f"main job: the plugin adds {goal['plugin_share_of_workloads']:.1%} on top of the workloads "
                     f"(goal <= 10 %): {'met' if goal['met'] else 'NOT MET'}")
    scaling = load("compare_scaling")
    if scaling:
        widest = max(scaling["rows"], key=lambda r: (r["cases"], r["cpu_s"]))
        lines.append(f"comparison: {widest['cases']} cases in {widest['cpu_s']:.1f} s of CPU, {widest['ratio_to_smallest']:.1f}x "
                     f"the CPU of {widest['cases_ratio']:.0f}x fewer cases (linear: about {widest['cases_ratio']:.0f}x)")
    startup = load("startup")
    if startup:
        lines.append(f"start-up: the plugin adds {1000 * startup['plugin_added_s']:.0f} ms to a pytest session that "
                     f"measures nothing")
    return lines


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
    print(f"\n===== goals ({'quick' if args.quick else 'full'} runs; figures from the GPU simulator are simulated) =====")
    for line in goal_lines(BENCH_DIR / "results", args.quick):
        print(line)
    print(f"\nall benchmarks: {time.time() - started:.0f} s" + (f"; FAILED: {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
