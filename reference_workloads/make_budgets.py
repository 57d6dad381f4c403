"""Regenerate ``budgets.json`` from measured runs of the energy suite.

    python reference_workloads/make_budgets.py --models H100,V100,A100,T4 --runs 2

For each simulated GPU model it runs the suite (``pytest reference_workloads``) ``--runs`` times
at ``--caps`` on a private simulated machine, takes for every workload, mode and cap the
highest ETS, EDP and T per step seen, and writes that times ``--margin`` as the budget (EDP:
times the margin squared, since a machine k times slower multiplies ETS and T by k and so EDP by
k squared); plus one budget per GPU model without a cap (the highest over the caps, times the
margin) for caps the file does not list.

On the simulator a workload's energy follows the CPU time its steps take on the machine that
runs them, so the margin has to absorb the difference between this machine and the ones that
will run the suite: the default of 3x is there for that, and still catches a workload that
starts doing several times the work. Budgets for real GPU models are added from runs on those
GPUs (``--gpu-backend=nvml``, no ``--caps`` unless you may change limits there), never invented.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from pytest_gpuenergy.fileio import atomic_write_json  # noqa: E402
from pytest_gpuenergy.plugin import SESSION_KEY  # noqa: E402

FIGURES = (("ets", "ets_j"), ("edp", "edp_js"), ("time", "time_s"))


class _Collector:
    """A pytest plugin object that keeps the session's per-case summaries."""

    def __init__(self) -> None:
        self.rows: list[dict] = []

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        energy = session.config.stash.get(SESSION_KEY, None)
        if energy is None:
            return
        for case in energy.cases.values():
            params = case.test_id.split("[", 1)[1].rstrip("]")
            for gpu in case.merged.per_gpu:
                workload_mode = params[: -len(gpu.cap_label) - 1] if params.endswith("-" + gpu.cap_label) else params
                workload, mode = workload_mode.rsplit("-", 1)
                summary = gpu.summary
                self.rows.append({
                    "gpu": gpu.gpu_name, "simulated": gpu.simulated, "workload": workload, "mode": mode,
                    "cap": gpu.cap_label, **{key: getattr(summary, attr) for key, attr in FIGURES},
                })


def run_suite(args: argparse.Namespace, model: str | None) -> list[dict]:
    collector = _Collector()
    with tempfile.TemporaryDirectory() as state:
        if model is not None:
            os.environ["GPUENERGY_SIM_GPUS"] = model
            os.environ["GPUENERGY_SIM_STATE"] = state
        pytest_args = [str(HERE), "-q", "-p", "no:cacheprovider", f"--gpu-backend={args.gpu_backend}",
                       f"--workload-size={args.size}"]
        if args.caps:
            pytest_args.append(f"--gpu-caps={args.caps}")
        # Cases over the current budgets still report their figures; only a suite that did not
        # run is an error.
        exit_code = pytest.main(pytest_args, plugins=[collector])
    if exit_code not in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED) or not collector.rows:
        raise SystemExit(f"the suite did not run (pytest exit code {exit_code})")
    return collector.rows


def budgets_from(rows: list[dict], margin: float, size: str) -> list[dict]:
    highest: dict[tuple, dict] = defaultdict(lambda: {key: 0.0 for key, _ in FIGURES})
    for row in rows:
        for cap in (row["cap"], None):
            slot = highest[(row["gpu"], row["workload"], row["mode"], cap)]
            for key, _ in FIGURES:
                slot[key] = max(slot[key], row[key])
    entries = []
    for (gpu, workload, mode, cap), figures in sorted(highest.items(), key=lambda kv: tuple(str(k) for k in kv[0])):
        entries.append({
            "gpu": gpu, "size": size, "workload": workload, "mode": mode, "cap": cap,
            **{key: float(f"{value * margin ** (2 if key == 'edp' else 1):.4g}") for key, value in figures.items()},
        })
    return entries


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default="H100", help="simulated GPU models, comma-separated (default H100)")
    parser.add_argument("--gpu-backend", default="sim", choices=("sim", "nvml"))
    parser.add_argument("--caps", default="60%,80%,100%", help="caps to measure at ('' for the current limit)")
    parser.add_argument("--runs", type=int, default=2, help="suite runs per model; the highest figure counts")
    parser.add_argument("--margin", type=float, default=3.0, help="budget = highest measured figure x margin (EDP: x margin squared)")
    parser.add_argument("--size", default="tiny", choices=("tiny", "full"))
    parser.add_argument("--output", type=Path, default=HERE / "budgets.json")
    args = parser.parse_args(argv)
    if args.runs < 1 or args.margin < 1:
        parser.error("--runs must be >= 1 and --margin >= 1")
    models = [m.strip() for m in args.models.split(",")] if args.gpu_backend == "sim" else [None]
    rows = [row for model in models for _ in range(args.runs) for row in run_suite(args, model)]
    keep = [] if not args.output.exists() else [
        entry for entry in json.loads(args.output.read_text(encoding="utf-8"))["budgets"]
        if entry["gpu"] not in {row["gpu"] for row in rows} or entry["size"] != args.size
    ]
    document = {
        "format": "pytest-gpuenergy-budgets",
        "version": 1,
        "generated_by": "python reference_workloads/make_budgets.py " + " ".join(argv or sys.argv[1:]),
        "generated_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "machine": f"{platform.node()} ({platform.processor() or platform.machine()}, {os.cpu_count()} CPUs)",
        "margin": args.margin,
        "note": "per step of each workload; entries for simulated GPUs come from the simulator, not from real GPUs",
        "budgets": keep + budgets_from(rows, args.margin, args.size),
    }
    atomic_write_json(args.output, document)
    print(f"wrote {len(document['budgets'])} budgets to {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
