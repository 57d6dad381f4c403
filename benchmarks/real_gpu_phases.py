"""On a real GPU, read-only: where a training step's energy goes, by phase and by operator class.

    python benchmarks/real_gpu_phases.py                    # on a machine with an NVIDIA GPU (NVML)
    python benchmarks/real_gpu_phases.py --backend sim --device cpu --size tiny --quick   # a dry run

The residual network's and the transformer's training steps (reference workloads), each:

1. under ``energy_meter.watch(model, optimizer)``, ``measure(step, min_time_s=5)``: forward,
   backward, update and other, each with its bound, and their sum against the region's ETS;
2. ``measure(step, by_op=True)``: the operator classes from the PyTorch profiler's GPU timeline;
3. two phases measured alone, as a cross-check (the way CLEAR, arXiv 2510.02810, measures
   components): the forward pass (the loss, with its graph) and the optimizer's step repeated by
   themselves. Alone, a phase runs back to back with itself and may draw different power than inside
   a step, so this is a reference, not the truth; a real GPU has no truth to compare with.

It never changes the GPU's power limit, clocks, persistence or compute mode. With ``--backend sim``
every figure is from the GPU simulator and labelled so (the simulator's own truth is checked by
``tests/test_watch.py`` and ``benchmarks/phase_attribution.py``).
"""

from __future__ import annotations

import time
import traceback
from typing import Any

import _common as common
from real_gpu import machine_of, open_read_only, read_only_parser

NAME = "real_gpu_phases"
WORKLOADS = ("residual", "transformer")


def figures(parts: dict[str, Any] | None) -> dict[str, dict[str, Any]] | None:
    return None if parts is None else {name: f.to_json() for name, f in parts.items()}


def one_workload(backend: Any, gpu: Any, name: str, size: str, device: str, min_time_s: float) -> dict[str, Any]:
    from pytest_gpuenergy.meter import EnergyMeter
    from reference_workloads import build

    workload = build(name, size=size, mode="train", device=device, seed=0, sim_size="full")
    workload.step()
    meter = EnergyMeter(backend, [gpu])
    row: dict[str, Any] = {"workload": f"{name}-train-{size}"}
    with meter.watch(workload.model, workload.optimizer):
        watched = meter.measure(workload.step, min_time_s=min_time_s)
    phases = watched.phases or {}
    row["watch"] = {"ets_j": watched.ets_j, "ets_low_j": watched.ets_low_j, "ets_high_j": watched.ets_high_j,
                    "time_s": watched.time_s, "calls": watched.repetitions[-1].calls, "notes": list(watched.notes),
                    "phases": figures(phases), "phases_sum_j": sum(f.ets_j for f in phases.values())}
    try:
        by_op = meter.measure(workload.step, min_time_s=min_time_s, by_op=True)
        row["by_op"] = {"ets_j": by_op.ets_j, "time_s": by_op.time_s, "notes": list(by_op.notes),
                        "op_classes": figures(by_op.op_classes)}
    except Exception:   # noqa: BLE001  (the profiler path's first run on a GPU: keep what went wrong)
        row["by_op"] = {"error": traceback.format_exc()}
    forward = meter.measure(lambda: workload.compute_loss(workload.batch()), min_time_s=min_time_s / 2)
    update = meter.measure(workload.optimizer.step, min_time_s=min_time_s / 2)
    row["alone"] = {part: {"ets_j": r.ets_j, "ets_low_j": r.ets_low_j, "ets_high_j": r.ets_high_j, "time_s": r.time_s}
                    for part, r in (("forward", forward), ("update", update))}
    return row


def print_row(row: dict[str, Any]) -> None:
    watch = row["watch"]
    alone = row["alone"]
    table = [[name, f["ets_j"], f["ets_low_j"], f["ets_high_j"], f["time_s"], f["power_w"], common.pct(f["energy_share"], 1),
              f["distinguishable"], alone.get(name, {}).get("ets_j")] for name, f in (watch["phases"] or {}).items()]
    table.append(["(region)", watch["ets_j"], watch["ets_low_j"], watch["ets_high_j"], watch["time_s"], None, None, None,
                  None])
    common.print_table(["phase", "ETS J", "low J", "high J", "T s", "P W", "energy", "told apart", "alone J"], table,
                       title=f"{row['workload']}: phases under watch ({watch['calls']} calls; sum {watch['phases_sum_j']:.4g} J)")
    by_op = row["by_op"]
    if "error" in by_op:
        print(f"by_op failed:\n{by_op['error']}")
    else:
        common.print_table(["class", "ETS J", "low J", "high J", "T s", "P W", "told apart"],
                           [[name, f["ets_j"], f["ets_low_j"], f["ets_high_j"], f["time_s"], f["power_w"], f["distinguishable"]]
                            for name, f in (by_op["op_classes"] or {}).items()],
                           title=f"{row['workload']}: operator classes (by_op; region {by_op['ets_j']:.4g} J)")
    for note in watch["notes"]:
        print("note:", note)


def main() -> None:
    p = read_only_parser(__doc__.splitlines()[0])
    p.add_argument("--min-time", type=float, help="each region's length in seconds (default 5, --quick 1)")
    p.add_argument("--workloads", default=",".join(WORKLOADS), help=f"comma-separated (default {','.join(WORKLOADS)})")
    p.add_argument("--tag", help="written as real_gpu_phases_TAG (a second run beside the default one)")
    args = p.parse_args()
    names = [n for n in args.workloads.split(",") if n]
    if not names or set(names) - set(WORKLOADS):
        p.error(f"--workloads: choose from {', '.join(WORKLOADS)}, got {args.workloads!r}")
    import torch

    started = time.time()
    backend, gpu, limits = open_read_only(args.backend, args.gpu, NAME)
    limit_before = limits.enforced_mw
    min_time_s = args.min_time if args.min_time is not None else 1.0 if args.quick else 5.0
    rows = []
    try:
        for name in names[-1:] if args.quick else names:
            rows.append(one_workload(backend, gpu, name, args.size, args.device, min_time_s))
            print_row(rows[-1])
    finally:
        limit_after = gpu.limits().enforced_mw
        backend.close()
    path = common.write_result(
        f"{NAME}_{args.tag}" if args.tag else NAME, {"description": "phases under watch, operator classes, and phases alone, read-only",
               "gpu": {"name": gpu.name, "driver": backend.driver_version, "cuda": torch.version.cuda,
                       "limit_w": limit_before / 1000, "simulated": backend.simulated},
               "min_time_s": min_time_s, "workloads": rows, "limit_unchanged": limit_after == limit_before},
        quick=args.quick, started=started, out_dir=args.out, **machine_of(backend, gpu, torch.version.cuda))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
