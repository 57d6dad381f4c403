"""``gpuenergy tune`` against the exhaustive sweep: does it find the optimum in few settings?

Per simulated GPU model (H100: 200-700 W, A100: 100-400 W), on the reference workloads:

* the exhaustive sweep: one pytest session at every power cap of the 25 W grid over the GPU's
  whole allowed range (21 caps on the H100, 13 on the A100), ``--energy-repeat`` repetitions;
* ``gpuenergy tune --objective ets`` and ``--objective edp`` (each its own search, at most 5
  settings per test), saving into their own storage folders.

Both use the simulator's default noise (1.5 % drift of a kind of step between sessions, a quarter
of it per region) with one seed, as back-to-back runs on one machine would share their drift.
Per workload and objective it prints: settings measured, the optimum tune found and the sweep's
best cap, and the error: how much more ETS (EDP) the sweep measured at tune's cap than at its best
cap (0 % when tune found the same cap). Goal (issue 13): error within 5 % with at most 5 settings.

``--quick``: the training steps only (9 workloads), 2 repetitions. All figures are SIMULATED.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import _common as common

NAME = "tune_accuracy"
MODELS = ("H100", "A100")
GOAL_ERROR_PCT = 5.0
GOAL_SETTINGS = 5
METRICS = {"ets": "ets_j", "edp": "edp_js"}


def grid_w(model: str) -> list[float]:
    from pytest_gpuenergy.sim.models import GPU_MODELS

    spec = GPU_MODELS[model]
    values, value = [], spec.min_limit_w
    while value < spec.max_limit_w:
        values.append(value)
        value += 25.0
    return values + [spec.max_limit_w]


def sweep(model: str, folder: Path, select: list[str], repeat: int) -> dict[str, dict[float, dict[str, float]]]:
    """Every workload at every cap of the grid: {workload: {cap W: {"ets_j", "edp_js"}}}."""
    from pytest_gpuenergy.reports.sweep import workload_key
    from pytest_gpuenergy.runs.store import RunStore

    store = folder / "sweep"
    caps = ",".join(f"{w:g}" for w in grid_w(model))
    command = [sys.executable, "-m", "pytest", str(common.REPO_ROOT / "reference_workloads"), *select,
               f"--gpu-caps={caps}", "--gpu-backend=sim", "--energy-save", f"--energy-storage={store}",
               f"--energy-repeat={repeat}", "-q", "-p", "no:cacheprovider"]
    done = subprocess.run(command, capture_output=True, text=True, cwd=common.REPO_ROOT)
    if done.returncode not in (0, 1):
        raise SystemExit(f"the sweep failed ({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-2000:]}")
    found: dict[str, dict[float, dict[str, float]]] = {}
    for doc in RunStore(store).runs():
        for entry in doc.cases:
            key = workload_key(entry.case_id, entry.cap).split("::")[-1]
            found.setdefault(key, {})[entry.limit_enforced_w] = {
                "ets_j": entry.summary.ets_j, "edp_js": entry.summary.edp_js}
    return found


def tune(objective: str, folder: Path, select: list[str], repeat: int) -> list[dict[str, Any]]:
    out = folder / f"tune-{objective}.json"
    command = [sys.executable, "-m", "pytest_gpuenergy.cli", "tune", str(common.REPO_ROOT / "reference_workloads"),
               f"--objective={objective}", "--gpu-backend=sim", f"--repeat={repeat}",
               f"--storage={folder / ('tune-' + objective)}", f"--json={out}", "--", *select]
    done = subprocess.run(command, capture_output=True, text=True, cwd=common.REPO_ROOT)
    if done.returncode != 0:
        raise SystemExit(f"gpuenergy tune failed ({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return json.loads(out.read_text())


def main() -> int:
    args = common.parser(__doc__.splitlines()[0]).parse_args()
    started = time.time()
    select = ["-k", "train"] if args.quick else []
    repeat = 2 if args.quick else 3
    rows, timings = [], {}
    for model in MODELS:
        with common.private_sim(model, clock="virtual") as private, tempfile.TemporaryDirectory() as scratch:
            os.environ.pop("GPUENERGY_SIM_NOISE", None)            # the simulator's default noise
            os.environ["GPUENERGY_SIM_SEED"] = str(args.seed)
            folder = Path(scratch)
            t0 = time.time()
            swept = sweep(model, folder, select, repeat)
            t1 = time.time()
            tuned = {objective: tune(objective, folder, select, repeat) for objective in METRICS}
            timings[model] = {"sweep_s": round(t1 - t0, 1), "tune_s": round(time.time() - t1, 1)}
            del private
        for objective, results in tuned.items():
            for result in results:
                key = result["test"].split("::")[-1]
                curve = swept.get(key)
                if not curve:
                    continue
                figure = METRICS[objective]
                best_w = min(curve, key=lambda w: (curve[w][figure], -w))
                at_tuned = curve.get(result["setting"])
                error = None if at_tuned is None else 100.0 * (at_tuned[figure] / curve[best_w][figure] - 1.0)
                rows.append({
                    "model": model, "workload": key.removeprefix("test_energy[").removesuffix("]"),
                    "objective": objective, "settings_measured": result["settings_measured"],
                    "sweep_settings": len(curve), "tune_w": result["setting"], "sweep_best_w": best_w,
                    "error_pct": error, "saving_pct": result["saving_pct"],
                    "distinguishable": result["distinguishable"],
                })
    table = [(r["model"], r["workload"], r["objective"].upper(), f"{r['settings_measured']} of {r['sweep_settings']}",
              f"{r['tune_w']:g} W", f"{r['sweep_best_w']:g} W",
              "-" if r["error_pct"] is None else f"{r['error_pct']:.2f} %") for r in rows]
    for line in common.machine_lines(common.machine_info([f"{m} (simulated)" for m in MODELS])):
        print(line)
    common.print_table(["GPU", "workload", "objective", "settings", "tune", "sweep best", "error"], table,
                       title="gpuenergy tune against the exhaustive 25 W sweep (SIMULATED)")
    errors = [r["error_pct"] for r in rows if r["error_pct"] is not None]
    settings = [r["settings_measured"] for r in rows]
    summary = {
        "cases": len(rows), "exact": sum(1 for e in errors if e == 0.0),
        "median_error_pct": common.median(errors) if errors else None, "worst_error_pct": max(errors, default=None),
        "within_goal": sum(1 for e in errors if e <= GOAL_ERROR_PCT), "max_settings": max(settings, default=None),
        "goal": f"error <= {GOAL_ERROR_PCT:g} % with <= {GOAL_SETTINGS} settings per test",
    }
    summary["goal_met"] = bool(rows) and summary["within_goal"] == len(rows) and summary["max_settings"] <= GOAL_SETTINGS
    print(f"\n{summary['cases']} workload-objective cases: {summary['exact']} found the sweep's best cap exactly; "
          f"median error {summary['median_error_pct']:.2f} %, worst {summary['worst_error_pct']:.2f} %; "
          f"{summary['within_goal']} within {GOAL_ERROR_PCT:g} %; at most {summary['max_settings']} settings per test "
          f"(the sweep: {', '.join(f'{m} {len(grid_w(m))}' for m in MODELS)}). Goal met: {summary['goal_met']}")
    print("time: " + ", ".join(f"{m}: sweep {t['sweep_s']} s, tune (ETS and EDP) {t['tune_s']} s" for m, t in timings.items()))
    path = common.write_result(NAME, {"settings": {"repeat": repeat, "select": select, "seed": args.seed,
                                                   "models": list(MODELS), "grid_step_w": 25},
                                      "rows": rows, "summary": summary, "timings": timings},
                               quick=args.quick, started=started, simulated_gpus=list(MODELS), out_dir=args.out)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
