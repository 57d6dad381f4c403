"""The fleet's fan-out against running the GPU models' sessions one after the other.

Run A is ``gpuenergy fleet -- reference_workloads --gpu-caps=60%,100%`` with
``GPUENERGY_SIM_GPUS=H100,A100``: it starts a local Ray cluster with two simulated GPU models,
runs one task per model side by side, brings both run documents back and reports once. Its wall
time is split into Ray's start-up (until the driver has its plan: the ``Ray ready after`` line),
the tasks (until the last one is done) and the end (the gate, the reports, shutting Ray down).

Run B is what a user does without the fleet: ``pytest reference_workloads --gpu-caps=60%,100%``
with ``GPUENERGY_SIM_GPUS=H100``, then the same with ``A100``, one after the other.

Both save their run documents (``--energy-save``) into a fresh folder, with the same simulator
seed and no noise. The rounds alternate A and B. Every GPU figure is simulated; what this
measures is the host's time, which on a 2-core machine is shared by the two tasks.
"""

from __future__ import annotations

import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import _common as common

NAME = "fleet_time"
MODELS = ("H100", "A100")
CAPS = "60%,100%"
QUICK_FILTER = "alexnet or transformer"


def _env(state: Path, sim_gpus: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in common.SIM_ENV}
    env.update(GPUENERGY_SIM_STATE=str(state), GPUENERGY_SIM_GPUS=sim_gpus, GPUENERGY_SIM_SEED="1",
               GPUENERGY_SIM_NOISE="0", GPUENERGY_BACKEND="sim", PYTHONUNBUFFERED="1")
    return env


def _suite_args(storage: Path, quick: bool) -> list[str]:
    args = ["reference_workloads", f"--gpu-caps={CAPS}", "--energy-save", f"--energy-storage={storage}",
            "-p", "no:cacheprovider", "-q"]
    return args + (["-k", QUICK_FILTER] if quick else [])


def fan_out(work: Path, quick: bool) -> dict[str, Any]:
    """Run A: the fleet command on a local Ray cluster with both models."""
    storage = work / "fleet-runs"
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "pytest_gpuenergy.cli", "fleet", "--progress-every", "3600", "--",
         *_suite_args(storage, quick)],
        cwd=common.REPO_ROOT, capture_output=True, text=True, timeout=1800, env=_env(work / "sim", ",".join(MODELS)),
    )
    wall_s = time.monotonic() - started
    if done.returncode != 0:
        raise SystemExit(f"gpuenergy fleet exited {done.returncode}:\n{done.stdout}\n{done.stderr}")
    ready = re.search(r"Ray ready after ([0-9.]+) s", done.stdout)
    tasks = [float(x) for x in re.findall(r" done on .* in ([0-9.]+) s:", done.stdout)]
    total = re.search(r"; ([0-9.]+) s in all", done.stdout)
    ready_s = float(ready.group(1)) if ready else float("nan")
    driver_s = float(total.group(1)) if total else wall_s
    documents = sorted(p.parent.name for p in storage.glob("*/*/*.json"))
    return {"wall_s": wall_s, "ray_ready_s": ready_s, "task_wall_s": tasks,
            "after_tasks_s": driver_s - ready_s - max(tasks, default=0.0),
            "process_start_s": wall_s - driver_s, "documents": documents}


def one_after_the_other(work: Path, quick: bool) -> dict[str, Any]:
    """Run B: one pytest session per model, in sequence."""
    storage = work / "sequential-runs"
    sessions = []
    started = time.monotonic()
    for model in MODELS:
        t0 = time.monotonic()
        done = subprocess.run([sys.executable, "-m", "pytest", *_suite_args(storage, quick)], cwd=common.REPO_ROOT,
                              capture_output=True, text=True, timeout=1800, env=_env(work / f"sim-{model}", model))
        if done.returncode != 0:
            raise SystemExit(f"pytest ({model}) exited {done.returncode}:\n{done.stdout[-3000:]}\n{done.stderr[-2000:]}")
        sessions.append(time.monotonic() - t0)
    documents = sorted(p.parent.name for p in storage.glob("*/*/*.json"))
    return {"wall_s": time.monotonic() - started, "session_wall_s": sessions, "documents": documents}


def main() -> None:
    p = common.parser(__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=None, help="A/B pairs (default 2, quick 1)")
    args = p.parse_args()
    rounds = args.rounds or (1 if args.quick else 2)
    started = time.time()
    rows = []
    for index in range(rounds):
        with tempfile.TemporaryDirectory(prefix="gpuenergy-fleet-bench-") as tmp:
            a = fan_out(Path(tmp) / "a", args.quick)
            b = one_after_the_other(Path(tmp) / "b", args.quick)
        assert len(a["documents"]) == len(b["documents"]) == len(MODELS), (a["documents"], b["documents"])
        rows.append({"round": index + 1, "fleet": a, "sequential": b, "ratio": a["wall_s"] / b["wall_s"]})
        print(f"round {index + 1}: fleet {a['wall_s']:.1f} s (Ray ready {a['ray_ready_s']:.1f} s, tasks "
              f"{' / '.join(f'{t:.1f}' for t in a['task_wall_s'])} s, after them {a['after_tasks_s']:.1f} s, "
              f"process start {a['process_start_s']:.1f} s); one after the other {b['wall_s']:.1f} s "
              f"({' + '.join(f'{t:.1f}' for t in b['session_wall_s'])} s)", flush=True)
    fleet_s = statistics.median(r["fleet"]["wall_s"] for r in rows)
    sequential_s = statistics.median(r["sequential"]["wall_s"] for r in rows)
    ready_s = statistics.median(r["fleet"]["ray_ready_s"] for r in rows)
    print()
    print(f"suite: reference_workloads{' -k ' + repr(QUICK_FILTER) if args.quick else ''} --gpu-caps={CAPS}, "
          f"simulated {' and '.join(MODELS)}, {rounds} round(s), medians:")
    print(f"  gpuenergy fleet (local Ray, both models side by side): {fleet_s:.1f} s, of which Ray start-up "
          f"{ready_s:.1f} s")
    print(f"  one pytest session per model, one after the other:      {sequential_s:.1f} s")
    print(f"  fleet / sequential: {fleet_s / sequential_s:.2f}")
    for line in common.machine_lines(common.machine_info(simulated_gpus=list(MODELS))):
        print(line)
    path = common.write_result(NAME, {"settings": {"caps": CAPS, "models": list(MODELS), "rounds": rounds,
                                                   "filter": QUICK_FILTER if args.quick else None},
                                      "rows": rows, "fleet_median_s": fleet_s, "sequential_median_s": sequential_s,
                                      "ray_ready_median_s": ready_s},
                               quick=args.quick, started=started, simulated_gpus=list(MODELS), out_dir=args.out)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
