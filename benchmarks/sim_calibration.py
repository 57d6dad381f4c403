"""The simulator's model against what a real H100 measured, and against the seeds' findings.

Part 1. For each reference workload at full size, the simulated H100's time and energy per step
(the roofline and DVFS models applied to the step's declared work, ``reference_workloads/
declared_work.json``, at the 700 W default limit, noise off) against the same step measured on a
real H100 (``benchmarks/results/real-h100-2026-11-22/main-full-run.json``, driver 580.159.04,
read-only, at its 700 W limit). Goal (issue 15): the median ratio within 1.5x for time and energy.

Part 2. The seeds' shape: on the simulated V100 a typical training step (the full-size ResNet, and
the median over the training steps) at its lowest cap of 150 W against its default 300 W: the
seeds measured about 30 % less energy and an EDP about 14 % lower; and per workload, whether EDP
has an interior optimum among the caps (V100 150-300 W in 25 W steps; H100 200-700 W in 50 W steps).

Everything here is computed from the model: no process is timed, so the figures are the same on
any machine.
"""

from __future__ import annotations

import json
import statistics
import time
from typing import Any

import _common as common

NAME = "sim_calibration"
REAL_RUN = common.BENCH_DIR / "results" / "real-h100-2026-11-22" / "main-full-run.json"
GOAL_RATIO = 1.5


def real_figures() -> dict[str, tuple[float, float]]:
    """Per workload-mode: (seconds, joules) per step measured on the real H100."""
    data = json.loads(REAL_RUN.read_text(encoding="utf-8"))
    return {case["case_id"].split("[")[-1].rstrip("]"): (case["summary"]["time_s"], case["summary"]["ets_j"])
            for case in data["cases"]}


def part1() -> tuple[list[dict], dict[str, Any]]:
    from pytest_gpuenergy.sim.models import GPU_MODELS
    from pytest_gpuenergy.sim.roofline import run_step
    from reference_workloads.registry import counted_work

    real = real_figures()
    h100 = GPU_MODELS["H100"]
    rows = []
    for key, (real_s, real_j) in sorted(real.items()):
        name, mode = key.rsplit("-", 1)
        run = run_step(h100, counted_work(name, mode, "full"), h100.default_limit_w)
        rows.append({"workload": key, "sim_ms": 1000 * run.step_s, "real_ms": 1000 * real_s, "time_ratio": run.step_s / real_s,
                     "sim_j": run.energy_j, "real_j": real_j, "energy_ratio": run.energy_j / real_j,
                     "sim_w": run.energy_j / run.step_s, "real_w": real_j / real_s})
    summary = {
        "median_time_ratio": statistics.median(r["time_ratio"] for r in rows),
        "median_energy_ratio": statistics.median(r["energy_ratio"] for r in rows),
    }
    summary["goal_met"] = all(1 / GOAL_RATIO <= summary[k] <= GOAL_RATIO for k in ("median_time_ratio", "median_energy_ratio"))
    return rows, summary


def part2() -> tuple[list[dict], dict[str, Any]]:
    from pytest_gpuenergy.sim.models import GPU_MODELS
    from pytest_gpuenergy.sim.roofline import run_step
    from reference_workloads import list_workloads
    from reference_workloads.registry import counted_work

    v100 = GPU_MODELS["V100"]
    caps = [150.0 + 25.0 * i for i in range(7)]
    rows = []
    for spec in list_workloads():
        for mode in spec.modes:
            work = counted_work(spec.name, mode, "full")
            runs = {cap: run_step(v100, work, cap) for cap in caps}
            edp = {cap: r.energy_j * r.step_s for cap, r in runs.items()}
            best_edp = min(edp, key=edp.__getitem__)
            rows.append({
                "workload": f"{spec.name}-{mode}",
                "energy_saving_at_150w": 1 - runs[150.0].energy_j / runs[300.0].energy_j,
                "edp_change_at_150w": edp[150.0] / edp[300.0] - 1,
                "slowdown_at_150w": runs[150.0].step_s / runs[300.0].step_s - 1,
                "edp_optimal_cap_w": best_edp, "interior_edp_optimum": caps[0] < best_edp < caps[-1],
            })
    h100 = GPU_MODELS["H100"]
    h100_caps = [200.0 + 50.0 * i for i in range(11)]
    for row in rows:
        name, mode = row["workload"].rsplit("-", 1)
        work = counted_work(name, mode, "full")
        steps = {cap: run_step(h100, work, cap) for cap in h100_caps}
        edp = {cap: step.energy_j * step.step_s for cap, step in steps.items()}
        best = min(edp, key=edp.__getitem__)
        row["h100_edp_optimal_cap_w"] = best
        row["h100_interior_edp_optimum"] = h100_caps[0] < best < h100_caps[-1]
    train = [r for r in rows if r["workload"].endswith("-train")]
    residual = next(r for r in rows if r["workload"] == "residual-train")
    summary = {
        "residual_train_energy_saving": residual["energy_saving_at_150w"],
        "residual_train_edp_change": residual["edp_change_at_150w"],
        "median_train_energy_saving": statistics.median(r["energy_saving_at_150w"] for r in train),
        "median_train_edp_change": statistics.median(r["edp_change_at_150w"] for r in train),
        "workloads_with_interior_edp_optimum": sum(r["interior_edp_optimum"] for r in rows),
        "h100_workloads_with_interior_edp_optimum": sum(r["h100_interior_edp_optimum"] for r in rows),
    }
    return rows, summary


def main() -> None:
    args = common.parser(__doc__.splitlines()[0]).parse_args()
    started = time.time()
    print(f"{NAME}: the SIMULATOR's model (computed, nothing timed) against a real H100 and the seeds\n")
    rows1, summary1 = part1()
    common.print_table(
        ["workload (full size)", "sim ms", "real ms", "T ratio", "sim J", "real J", "E ratio", "sim W", "real W"],
        [[r["workload"], r["sim_ms"], r["real_ms"], round(r["time_ratio"], 2), r["sim_j"], r["real_j"],
          round(r["energy_ratio"], 2), round(r["sim_w"]), round(r["real_w"])] for r in rows1],
        title="Per step on a simulated H100 (700 W) against the real H100 (700 W)",
    )
    print(f"median ratio: time {summary1['median_time_ratio']:.2f}, energy {summary1['median_energy_ratio']:.2f} "
          f"(goal within {GOAL_RATIO:g}x): {'met' if summary1['goal_met'] else 'NOT MET'}\n")
    rows2, summary2 = part2()
    common.print_table(
        ["workload (full size)", "V100: energy at 150 W", "EDP at 150 W", "slower", "EDP-optimal cap", "H100 EDP-optimal cap"],
        [[r["workload"], common.pct(-r["energy_saving_at_150w"], 1), common.pct(r["edp_change_at_150w"], 1),
          common.pct(r["slowdown_at_150w"], 1), f"{r['edp_optimal_cap_w']:g} W" + (" (interior)" if r["interior_edp_optimum"] else ""),
          f"{r['h100_edp_optimal_cap_w']:g} W" + (" (interior)" if r["h100_interior_edp_optimum"] else "")]
         for r in rows2],
        title="Simulated V100: its lowest cap (150 W) against its default (300 W); the seeds: about -30 % energy, -14 % EDP",
    )
    print(f"ResNet training step: {common.pct(summary2['residual_train_energy_saving'], 1)} energy saved, EDP "
          f"{common.pct(summary2['residual_train_edp_change'], 1)}; median over training steps "
          f"{common.pct(summary2['median_train_energy_saving'], 1)} / {common.pct(summary2['median_train_edp_change'], 1)}; "
          f"interior EDP optimum: {summary2['workloads_with_interior_edp_optimum']} of {len(rows2)} workloads on the V100 "
          f"(150-300 W), {summary2['h100_workloads_with_interior_edp_optimum']} on the H100 (200-700 W)")
    path = common.write_result(
        NAME,
        {"description": "the simulator's model against the real H100 and the seeds' findings (computed, nothing timed)",
         "real_run": str(REAL_RUN.relative_to(common.REPO_ROOT)),
         "h100": {"summary": summary1, "rows": rows1}, "v100_caps": {"summary": summary2, "rows": rows2}},
        quick=args.quick, started=started, simulated_gpus=["NVIDIA H100 80GB HBM3 (simulated)", "Tesla V100-SXM2-32GB (simulated)"],
        out_dir=args.out,
    )
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
