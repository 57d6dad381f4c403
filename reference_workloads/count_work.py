"""Count the GPU work of every reference workload's step, for the GPU simulator: ``declared_work.json``.

    python reference_workloads/count_work.py

Each workload, size and mode is built on PyTorch's ``meta`` device (shapes, no memory, no
computing; ``speech`` on the CPU, because PyTorch's CTC loss has no meta kernel) and one step is
counted with ``pytest_gpuenergy.sim.counting.count_step``: FLOPs per kind of unit from torch's
FlopCounterMode, bytes moved and kernels from every operation's tensors, by phase (forward, backward,
update, other; ``phases``, with the step's host-only time ``host_s``: 0, the batch stays on the
device) and in all (``work``). Under the simulator a
workload declares this work at every step, so the simulated GPU runs the papers' configurations
(``full``) even when the CPU runs the tiny ones (``--workload-sim-size``, default ``full``).
Rerun it when a workload's model or batch changes (a test compares the file with a fresh count).
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

import torch  # noqa: E402

from pytest_gpuenergy.fileio import atomic_write_json  # noqa: E402
from pytest_gpuenergy.sim.counting import count_step  # noqa: E402
from reference_workloads import build, list_workloads  # noqa: E402
from reference_workloads.registry import DECLARED_WORK_FILE, SIZES  # noqa: E402

#: Workloads whose step cannot run on the meta device, counted on the CPU instead.
CPU_COUNTED = {"speech"}


def count(name: str, size: str, mode: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the step's whole work, its work by phase with its host-only time)."""
    device = "cpu" if name in CPU_COUNTED else "meta"
    workload = build(name, size=size, mode=mode, device=device, seed=0)
    phases, _ = count_step(workload.step_without_declaring, workload.model)
    return asdict(phases.total), phases.to_json()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DECLARED_WORK_FILE)
    args = parser.parse_args()
    torch.set_num_threads(1)
    entries: dict[str, Any] = {}
    phases: dict[str, Any] = {}
    for spec in list_workloads():
        for mode in spec.modes:
            for size in SIZES:
                work, split = count(spec.name, size, mode)
                entries.setdefault(spec.name, {}).setdefault(mode, {})[size] = work
                phases.setdefault(spec.name, {}).setdefault(mode, {})[size] = split
                print(f"{spec.name:12s} {mode:5s} {size:4s} {work}", flush=True)
    atomic_write_json(args.out, {
        "format": "pytest-gpuenergy-declared-work", "version": 2,
        "generated_by": "python reference_workloads/count_work.py",
        "generated_at": dt.datetime.now(dt.timezone.utc).replace(microsecond=0).isoformat(),
        "torch": torch.__version__, "work": entries, "phases": phases,
    })
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
