"""Regenerate ``budgets.json`` from measured runs of the energy suite.

    python reference_workloads/make_budgets.py --models H100,V100,A100,T4 --runs 3

For each simulated GPU model it runs the suite ``--runs`` times at ``--caps`` on a private
simulated machine, each run exactly as the README's main job runs (a fresh
``python -m pytest reference_workloads`` process, saving a run document with ``--energy-save``
into a temporary folder), with the seeds 1, 2, 3, ... (``GPUENERGY_SIM_SEED``). The steps declare
the full-size workloads' GPU work (``--workload-sim-size=full``), so the figures do not depend on
this machine; what varies between runs is the simulator's noise, drawn from the seed. For every
workload, mode and cap the budget is the mean over the runs times ``1 + 4.5 x noise`` (the
configured ``GPUENERGY_SIM_NOISE``, 1.5 % by default: a 7 % margin), EDP times that squared (a
step k times slower costs k times the energy and k squared the EDP); plus one budget per GPU
model without a cap (the highest over the caps) for caps the file does not list. So an unchanged
workload stays under its budget (4.5 standard deviations of the session drift) and one whose
declared work grows by 10 % goes over it.

Budgets for real GPU models are added from runs on those GPUs (``--gpu-backend=nvml``, no
``--caps`` unless you may change limits there), never invented: there the highest figure of the
runs times ``--margin`` (default 2) is the budget, since a real GPU's noise is not known in advance.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))

from pytest_gpuenergy.fileio import atomic_write_json  # noqa: E402
from pytest_gpuenergy.runs.store import RunStore  # noqa: E402

FIGURES = (("ets", "ets_j"), ("edp", "edp_js"), ("time", "time_s"))


def run_suite(args: argparse.Namespace, model: str | None, seed: int) -> list[dict]:
    """One run of the suite in a fresh process; its saved document's cases as rows."""
    with tempfile.TemporaryDirectory(prefix="gpuenergy-budgets-") as folder:
        env = dict(os.environ)
        if model is not None:
            env.update(GPUENERGY_SIM_GPUS=model, GPUENERGY_SIM_STATE=str(Path(folder) / "sim"),
                       GPUENERGY_SIM_SEED=str(seed))
            for name in ("GPUENERGY_SIM_FAULTS", "GPUENERGY_SIM_CLOCK", "GPUENERGY_SIM_COUNTER_READ_MS"):
                env.pop(name, None)
        storage = Path(folder) / "runs"
        command = [sys.executable, "-m", "pytest", "reference_workloads", "-q", "-p", "no:cacheprovider",
                   f"--gpu-backend={args.gpu_backend}", f"--workload-size={args.size}",
                   f"--workload-sim-size={args.sim_size}", "--energy-save", f"--energy-storage={storage}"]
        if args.caps:
            command.append(f"--gpu-caps={args.caps}")
        # Cases over the current budgets still report their figures; only a suite that did not
        # run is an error.
        done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
        documents = RunStore(storage).runs() if storage.exists() else []
        if done.returncode not in (0, 1) or not documents:
            raise SystemExit(f"the suite did not run (pytest exit code {done.returncode}):\n{done.stdout[-3000:]}{done.stderr[-2000:]}")
    rows = []
    for document in documents:
        for case in document.cases:
            params = case.case_id.split("[", 1)[1].rstrip("]")          # e.g. "alexnet-train-60%"
            workload_mode = params[: -len(case.cap) - 1] if params.endswith("-" + case.cap) else params
            workload, mode = workload_mode.rsplit("-", 1)
            summary = case.summary
            rows.append({"gpu": case.gpu_name, "simulated": case.simulated, "workload": workload, "mode": mode,
                         "cap": case.cap, **{key: getattr(summary, attr) for key, attr in FIGURES}})
    return rows


def budgets_from(rows: list[dict], margin: float, size: str, *, mean: bool) -> list[dict]:
    """Per GPU, workload, mode and cap: the mean (``mean``) or the highest of the runs, times ``margin``;
    per GPU, workload and mode without a cap: the highest of those over the caps."""
    samples: dict[tuple, dict[str, list[float]]] = defaultdict(lambda: {key: [] for key, _ in FIGURES})
    for row in rows:
        # Without --caps a case ran at the GPU's limit of the moment ("current"): that is no cap a
        # budget can name, so such runs give the budget for the GPU model alone.
        for key, _ in FIGURES:
            samples[(row["gpu"], row["workload"], row["mode"], row["cap"])][key].append(row[key])
    per_cap = {slot: {key: (statistics.fmean(values) if mean else max(values)) for key, values in figures.items()}
               for slot, figures in samples.items()}
    highest: dict[tuple, dict] = defaultdict(lambda: {key: 0.0 for key, _ in FIGURES})
    for (gpu, workload, mode, cap), figures in per_cap.items():
        for slot_cap in (cap, None) if cap != "current" else (None,):
            slot = highest[(gpu, workload, mode, slot_cap)]
            for key, _ in FIGURES:
                slot[key] = max(slot[key], figures[key])
    entries = []
    for (gpu, workload, mode, cap), figures in sorted(highest.items(), key=lambda kv: tuple(str(k) for k in kv[0])):
        entries.append({
            "gpu": gpu, "size": size, "workload": workload, "mode": mode, "cap": cap,
            **{key: float(f"{value * margin ** (2 if key == 'edp' else 1):.4g}") for key, value in figures.items()},
        })
    return entries


def previous_generations(path: Path) -> list[dict]:
    """How the entries already in ``path`` were made (files from before generations: their header)."""
    if not path.exists():
        return []
    data = json.loads(path.read_text(encoding="utf-8"))
    if "generations" in data:
        return data["generations"]
    gpus = sorted({entry["gpu"] for entry in data.get("budgets", [])})
    sizes = sorted({entry["size"] for entry in data.get("budgets", [])})
    return [{"generated_by": data.get("generated_by"), "generated_at": data.get("generated_at"),
             "machine": data.get("machine"), "gpus": gpus, "size": sizes[0] if len(sizes) == 1 else sizes,
             "runs": data.get("runs"), "margin": data.get("margin")}] if gpus else []


def superseded(generations: list[dict], new: dict) -> list[dict]:
    """The older generations without the GPUs (of the same size) whose entries ``new`` replaces."""
    kept = []
    for generation in generations:
        gpus = generation["gpus"] if generation["size"] != new["size"] else [
            gpu for gpu in generation["gpus"] if gpu not in new["gpus"]]
        if gpus:
            kept.append({**generation, "gpus": gpus})
    return kept


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default="H100", help="simulated GPU models, comma-separated (default H100)")
    parser.add_argument("--gpu-backend", default="sim", choices=("sim", "nvml"))
    parser.add_argument("--caps", default="60%,80%,100%", help="caps to measure at ('' for the current limit)")
    parser.add_argument("--runs", type=int, default=3, help="suite runs per model, each a fresh process (seeds 1, 2, ...)")
    parser.add_argument("--margin", type=float, default=None,
                        help="budget = figure x margin (EDP: x margin squared); default 1 + 4.5 x the simulator's noise, "
                             "2 on a real GPU")
    parser.add_argument("--size", default="tiny", choices=("tiny", "full"), help="the size the suite runs")
    parser.add_argument("--sim-size", default="full", choices=("tiny", "full"),
                        help="the size whose GPU work the steps declare to the simulator (default full)")
    parser.add_argument("--output", type=Path, default=HERE / "budgets.json")
    args = parser.parse_args(argv)
    simulated = args.gpu_backend == "sim"
    if args.margin is None:
        args.margin = round(1 + 4.5 * _configured_noise(), 3) if simulated else 2.0
    if args.runs < 1 or args.margin < 1:
        parser.error("--runs must be >= 1 and --margin >= 1")
    models = [m.strip() for m in args.models.split(",")] if simulated else [None]
    budget_size = args.sim_size if simulated else args.size
    rows = []
    for model in models:
        for number in range(args.runs):
            print(f"{model or args.gpu_backend}: run {number + 1}/{args.runs} (seed {number + 1})", flush=True)
            rows.extend(run_suite(args, model, seed=number + 1))
    # A new generation replaces the entries of its GPUs (on the simulator all of them: its figures
    # now come from declared work, whatever the size the suite ran).
    keep = [] if not args.output.exists() else [
        entry for entry in json.loads(args.output.read_text(encoding="utf-8"))["budgets"]
        if entry["gpu"] not in {row["gpu"] for row in rows} or (not simulated and entry["size"] != budget_size)
    ]
    measured_gpus = sorted({row["gpu"] for row in rows})
    generation = {
        "generated_by": "python reference_workloads/make_budgets.py " + " ".join(argv or sys.argv[1:]),
        "generated_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "machine": f"{platform.node()} ({platform.processor() or platform.machine()}, {os.cpu_count()} CPUs)",
        "gpus": measured_gpus, "size": budget_size, "runs": args.runs, "margin": args.margin,
        "statistic": "mean" if simulated else "highest",
    }
    document = {
        "format": "pytest-gpuenergy-budgets",
        "version": 1,
        "note": "per step of each workload; entries for simulated GPUs come from the simulator, not from real GPUs",
        # Each generation says how the entries of its GPUs and size were made; a new one replaces them.
        "generations": superseded(previous_generations(args.output), generation) + [generation],
        "budgets": keep + budgets_from(rows, args.margin, budget_size, mean=simulated),
    }
    atomic_write_json(args.output, document)
    print(f"wrote {len(document['budgets'])} budgets to {args.output}")
    return 0


def _configured_noise() -> float:
    from pytest_gpuenergy.sim.nvml import DEFAULT_NOISE, NOISE_ENV

    text = os.environ.get(NOISE_ENV, "").strip()
    return float(text) if text else DEFAULT_NOISE


if __name__ == "__main__":
    sys.exit(main())
