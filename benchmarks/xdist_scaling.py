"""Wall time of the reference suite on a simulated 4-GPU machine: one process, -n 1 and -n 4.

Each pytest-xdist worker takes its own simulated GPU (worker gwN: GPU N), so with four workers
four tests run side by side, one per GPU. On the simulator (virtual clock, the default) the GPU's
time costs no wall time: what is left is the host's own work (the tiny models on the CPU, torch's
import in each worker, the plugin), so the speed-up is bounded by the host's CPU cores, not by
the GPUs. The script prints the machine's core count next to the figures and says so.

    python benchmarks/xdist_scaling.py --quick    # --gpu-caps=80%: 18 cases, one round
    python benchmarks/xdist_scaling.py            # the main job's caps 60%,80%,100%: 54 cases, two rounds

Every run also checks what the issue asks of it: each case saved once, on one GPU, and with four
workers all four GPUs used.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import _common as common

NAME = "xdist_scaling"
GPUS = "H100,H100,H100,H100"
MODES = (("one process", []), ("-n 1", ["-n", "1"]), ("-n 4", ["-n", "4"]))


def run_suite(extra: list[str], caps: str, storage: Path) -> dict[str, Any]:
    """One run of ``pytest reference_workloads``; its wall time and where its cases ran."""
    from pytest_gpuenergy.runs.store import RunStore

    command = [sys.executable, "-m", "pytest", "reference_workloads", f"--gpu-caps={caps}", "-q",
               "-p", "no:cacheprovider", "--energy-save", f"--energy-storage={storage}", *extra]
    started = time.perf_counter()
    # One torch thread per process in every mode (torchrun's default too): four workers of two threads
    # each on a 2-core host would mostly measure the oversubscription.
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run(command, cwd=common.REPO_ROOT, capture_output=True, text=True, env=env)
    wall_s = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(f"the suite failed (exit {done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    (run,) = RunStore(storage).runs()
    per_case = Counter(c.case_id for c in run.cases)
    return {
        "wall_s": wall_s,
        "cases": len(per_case),
        "entries": len(run.cases),
        "each_case_once_on_one_gpu": all(count == 1 for count in per_case.values()),
        "cases_per_gpu": dict(sorted(Counter(c.gpu_index for c in run.cases).items())),
    }


def main() -> None:
    args = common.parser(__doc__.splitlines()[0]).parse_args()
    caps = "80%" if args.quick else "60%,80%,100%"
    rounds = 1 if args.quick else 2
    started = time.time()
    cores = os.cpu_count() or 1
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None     # other jobs on the host at the start
    print(f"{NAME}{' (quick)' if args.quick else ''}: pytest reference_workloads --gpu-caps={caps} on a SIMULATED "
          f"4 x H100 machine, {cores} CPU cores, load average {load}\n", flush=True)
    results: dict[str, list[dict[str, Any]]] = {label: [] for label, _ in MODES}
    with tempfile.TemporaryDirectory(prefix="gpuenergy-fleet-") as tmp:
        for index in range(rounds):
            for label, extra in MODES:
                with common.private_sim(GPUS, clock="virtual"):
                    outcome = run_suite(extra, caps, Path(tmp) / f"storage-{index}-{label.replace(' ', '-')}")
                results[label].append(outcome)
                print(f"  round {index + 1}/{rounds}, {label}: {outcome['wall_s']:.1f} s, {outcome['cases']} cases "
                      f"on GPUs {outcome['cases_per_gpu']}", flush=True)
    base = statistics.median(r["wall_s"] for r in results["one process"])
    rows = []
    summary = {}
    for label, _ in MODES:
        wall = statistics.median(r["wall_s"] for r in results[label])
        last = results[label][-1]
        summary[label] = {"wall_s": wall, "speedup": base / wall, "cases_per_gpu": last["cases_per_gpu"],
                          "each_case_once_on_one_gpu": all(r["each_case_once_on_one_gpu"] for r in results[label])}
        rows.append([label, f"{wall:.1f}", f"{base / wall:.2f}x", str(last["cases"]),
                     " ".join(f"GPU{g}:{n}" for g, n in last["cases_per_gpu"].items()),
                     "yes" if summary[label]["each_case_once_on_one_gpu"] else "NO"])
    common.print_table(["run", "wall s", "speed-up", "cases", "cases per GPU", "each case once, one GPU"], rows,
                       title=f"Reference suite wall time, median of {rounds} round(s), simulated 4 x H100, {cores} cores")
    four = summary["-n 4"]
    print(f"\n-n 4 spreads the cases over {len(four['cases_per_gpu'])} GPUs and runs {four['speedup']:.2f}x as fast as "
          f"one process. On the simulator (virtual clock) the GPUs' time costs no wall time: what is left is the host's "
          f"work (the tiny models on the CPU, torch's import in every worker), so the speed-up is bounded by the free CPU "
          f"cores: {cores} here, load average {load} from other jobs at the start. On real GPUs the GPUs' time divides "
          f"by the number of GPUs.")
    path = common.write_result(
        NAME,
        {
            "description": "wall time of the reference suite on a simulated 4-GPU machine, one process vs pytest-xdist",
            "settings": {"caps": caps, "rounds": rounds, "gpus": GPUS, "clock": "virtual", "cpu_cores": cores,
                         "omp_num_threads": 1, "load_average_at_start": load},
            "summary": summary,
            "rounds": results,
            "note": f"on {cores} CPU cores the speed-up is bounded by the cores: the simulated GPU work takes no wall time",
        },
        quick=args.quick, started=started, simulated_gpus=["NVIDIA H100 80GB HBM3"] * 4, out_dir=args.out,
    )
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
