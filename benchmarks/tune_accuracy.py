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

``--quick``: the training steps only (9 workloads, 36 cases), 2 repetitions, and each workload
replaced by its stand-in (``_stand_ins.py``): a test with the suite's node ids whose step declares
what the real step declares to the simulator, without the real step's torch work on the CPU. On the
simulator a step that declares its work runs it the same whatever the host does, so the stand-ins'
figures are the real workloads' to the last digit (``tests/test_benchmark_scripts.py`` checks one
case) at a small part of the CPU; the sweep, ``gpuenergy tune`` and its pytest sessions, the plugin
and the meter all run as in the full run. The two models run side by side, each in its own process
(their figures on the simulator's virtual clock do not depend on the host's load). All figures
are SIMULATED.
"""

from __future__ import annotations

import dataclasses
import json
import multiprocessing
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import _common as common
import _stand_ins as stand_ins

NAME = "tune_accuracy"
MODELS = ("H100", "A100")
GOAL_ERROR_PCT = 5.0
GOAL_SETTINGS = 5
METRICS = {"ets": "ets_j", "edp": "edp_js"}
WORKLOADS_TEXT = {
    False: "reference_workloads, training and inference (torch steps on the CPU that declare their GPU work)",
    True: "stand-ins for the 9 training steps of reference_workloads: the suite's node ids and each step's declared "
          "GPU work, without the real step's torch work on the CPU (the simulator's figures are the same)",
}


def grid_w(model: str) -> list[float]:
    from pytest_gpuenergy.sim.models import GPU_MODELS

    spec = GPU_MODELS[model]
    values, value = [], spec.min_limit_w
    while value < spec.max_limit_w:
        values.append(value)
        value += 25.0
    return values + [spec.max_limit_w]


@dataclasses.dataclass(frozen=True)
class Suite:
    """What the sweep and tune run: the folder of tests and where to run pytest from (its rootdir)."""

    path: Path
    cwd: Path
    stand_in: bool


def sweep(model: str, folder: Path, suite: Suite, repeat: int) -> dict[str, dict[float, dict[str, float]]]:
    """Every workload at every cap of the grid: {workload: {cap W: {"ets_j", "edp_js"}}}."""
    from pytest_gpuenergy.reports.sweep import workload_key
    from pytest_gpuenergy.runs.store import RunStore

    store = folder / "sweep"
    caps = ",".join(f"{w:g}" for w in grid_w(model))
    command = [sys.executable, "-m", "pytest", str(suite.path),
               f"--gpu-caps={caps}", "--gpu-backend=sim", "--energy-save", f"--energy-storage={store}",
               f"--energy-repeat={repeat}", "-q", "-p", "no:cacheprovider"]
    done = subprocess.run(command, capture_output=True, text=True, cwd=suite.cwd)
    if done.returncode not in (0, 1):
        raise SystemExit(f"the sweep failed ({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-2000:]}")
    found: dict[str, dict[float, dict[str, float]]] = {}
    for doc in RunStore(store).runs():
        for entry in doc.cases:
            key = workload_key(entry.case_id, entry.cap).split("::")[-1]
            found.setdefault(key, {})[entry.limit_enforced_w] = {
                "ets_j": entry.summary.ets_j, "edp_js": entry.summary.edp_js}
    return found


def tune(objective: str, folder: Path, suite: Suite, repeat: int) -> list[dict[str, Any]]:
    out = folder / f"tune-{objective}.json"
    command = [sys.executable, "-m", "pytest_gpuenergy.cli", "tune", str(suite.path),
               f"--objective={objective}", "--gpu-backend=sim", f"--repeat={repeat}",
               f"--storage={folder / ('tune-' + objective)}", f"--json={out}"]
    done = subprocess.run(command, capture_output=True, text=True, cwd=suite.cwd)
    if done.returncode != 0:
        raise SystemExit(f"gpuenergy tune failed ({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return json.loads(out.read_text())


def main() -> int:
    args = common.parser(__doc__.splitlines()[0]).parse_args()
    started = time.time()
    repeat = 2 if args.quick else 3
    rows, timings = [], {}
    with tempfile.TemporaryDirectory() as suites:
        suite = (Suite(stand_ins.write_suite(Path(suites)), Path(suites), True) if args.quick
                 else Suite(common.REPO_ROOT / "reference_workloads", common.REPO_ROOT, False))
        # The models side by side, each in its own process and simulated machine: on the virtual clock their
        # figures do not depend on what else the host runs (the same to the last digit), only the time does.
        with ProcessPoolExecutor(len(MODELS), mp_context=multiprocessing.get_context("spawn")) as pool:
            futures = {model: pool.submit(one_model, model, suite, repeat, args.seed) for model in MODELS}
            for model, future in futures.items():
                model_rows, timings[model] = future.result()
                rows += model_rows
    report(rows, timings, suite, repeat, args, started)
    return 0


def one_model(model: str, suite: Suite, repeat: int, seed: int) -> tuple[list[dict[str, Any]], dict[str, float]]:
    """The sweep and tune's two searches (ETS, EDP) on one simulated model: a row per workload and
    objective, and how long the sweep and the searches took."""
    with common.private_sim(model, clock="virtual"), tempfile.TemporaryDirectory() as scratch:
        os.environ.pop("GPUENERGY_SIM_NOISE", None)            # the simulator's default noise
        os.environ["GPUENERGY_SIM_SEED"] = str(seed)
        folder = Path(scratch)
        t0 = time.time()
        swept = sweep(model, folder, suite, repeat)
        t1 = time.time()
        tuned = {objective: tune(objective, folder, suite, repeat) for objective in METRICS}
        timing = {"sweep_s": round(t1 - t0, 1), "tune_s": round(time.time() - t1, 1)}
    rows = []
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
    return rows, timing


def report(rows: list[dict[str, Any]], timings: dict[str, dict[str, float]], suite: Suite, repeat: int, args: Any,
           started: float) -> None:
    table = [(r["model"], r["workload"], r["objective"].upper(), f"{r['settings_measured']} of {r['sweep_settings']}",
              f"{r['tune_w']:g} W", f"{r['sweep_best_w']:g} W",
              "-" if r["error_pct"] is None else f"{r['error_pct']:.2f} %") for r in rows]
    for line in common.machine_lines(common.machine_info([f"{m} (simulated)" for m in MODELS])):
        print(line)
    print(f"workloads: {WORKLOADS_TEXT[suite.stand_in]}")
    common.print_table(["GPU", "workload", "objective", "settings", "tune", "sweep best", "error"], table,
                       title="gpuenergy tune against the exhaustive 25 W sweep (SIMULATED)")
    errors = [r["error_pct"] for r in rows if r["error_pct"] is not None]
    settings = [r["settings_measured"] for r in rows]
    summary: dict[str, Any] = {
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
    share = summary["within_goal"] / summary["cases"] if rows else None
    goal = common.Goal(
        "tune_within_5pct", share, 1.0, summary["goal_met"], True,
        f"gpuenergy tune within {GOAL_ERROR_PCT:g} % of the sweep (simulated): {summary['within_goal']} of "
        f"{summary['cases']} cases in at most {summary['max_settings']} settings (goal: all, in at most {GOAL_SETTINGS})"
        + (" - workload stand-ins that declare the same GPU work" if suite.stand_in else ""),
        reason="" if rows else "no case came back from the sweep and tune")
    path = common.write_result(NAME, {"settings": {"repeat": repeat, "seed": args.seed,
                                                   "models": list(MODELS), "grid_step_w": 25,
                                                   "workloads": WORKLOADS_TEXT[suite.stand_in],
                                                   "stand_ins": suite.stand_in},
                                      "rows": rows, "summary": summary, "timings": timings,
                                      "goals": [goal.record()]},
                               quick=args.quick, started=started, simulated_gpus=list(MODELS), out_dir=args.out)
    print(f"wrote {path}")


if __name__ == "__main__":
    sys.exit(main())
