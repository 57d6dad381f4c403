"""The meter on a loaded host: how far a 2 s region's figure strays when the lattice is learned under load.

    python benchmarks/lattice_under_load.py [--quick] [--runs N] [--hogs K]

A diagnosis, not a goal (found 2026-11-28, where ``tests/test_sparse_reads.py``'s 2 % check failed
about one run in twenty under ``pytest -n 2``): each run opens a fresh simulated H100 on the host's
clock (seed 0, the default noise, as the test), learns the counter's lattice with a 0.3 s
``measure``, then measures a region of 2.0 s of declared GPU work while the test's thread spins
Python for 1.8 s (the recorder reads sparsely inside), beside ``--hogs`` processes that keep the
CPU busy. Per run: the period the lattice learned (the simulated counter publishes every 100 ms),
the figure's error against the simulator's exact energy, and where the truth lies in the meter's
bound (0 its low end, 1 its high end). On 2026-11-28 (2-core VM, two hogs) the figures off by more
than 2 % were exactly those whose lattice had learned a wrong period: -2.6 %, -4.1 % and -4.4 % at
95.5-96.2 ms in 3 of 60 runs of a first version, -4.7 % at 98.6 ms in 1 of 60 of this script (every
other run learned 99.7-100.1 ms and was within 0.3 %); the truth sat at the top of the bound (0.99),
which held every time. The cause: the region's sparse reads leave seconds between the newest brackets
and the dense ones before, the prior on the period (0.8-1.25 x 100 ms) admits many tick counts across
such a gap, so the fit fell back to the newest two brackets and the middle of the periods those two
alone allow. Since 2026-11-28 the learner keeps the periods its brackets allowed
(``TickLearner.period_range_s``) and numbers across the gap with them: 0 of 60 runs off by more than
2 %, the worst 0.24 %, every lattice at 100.0 ms. Figures simulated.
"""

from __future__ import annotations

import multiprocessing
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import _common as common

NAME = "lattice_under_load"
sys.path.insert(0, str(common.REPO_ROOT / "tests"))


def _hog(stop: multiprocessing.synchronize.Event) -> None:
    while not stop.is_set():
        sum(range(10_000))


def _busy_s(seconds: float) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        pass


def one_run(folder: Path) -> dict:
    from pytest_gpuenergy.gpu.device import open_backend
    from pytest_gpuenergy.meter import EnergyMeter

    from helpers import declare, exact_j, spin  # the test's own work (tests/helpers.py)

    os.environ.update({"GPUENERGY_SIM_STATE": str(folder), "GPUENERGY_SIM_CLOCK": "wall", "GPUENERGY_SIM_SEED": "0"})
    backend = open_backend("sim")
    try:
        meter = EnergyMeter(backend, backend.select(None))
        meter.measure(spin, 0.01, min_time_s=0.3)
        with meter:
            declare(2.0)
            _busy_s(1.8)
        t0, t1 = meter.last_region
        truth_j = exact_j(backend, meter.gpus[0], t0, t1)
        result = meter.result
        lattice = meter.recorders[0].learner.lattice
        low_j, high_j = result.ets_low_j or result.ets_j, result.ets_high_j or result.ets_j
        return {"period_ms": lattice.period_s * 1000 if lattice is not None else None, "error": result.ets_j / truth_j - 1,
                "ets_j": result.ets_j, "truth_j": truth_j, "low_j": low_j, "high_j": high_j,
                "held": low_j <= truth_j <= high_j, "truth_in_bound": (truth_j - low_j) / (high_j - low_j) if high_j > low_j else None,
                "region_s": t1 - t0}
    finally:
        backend.close()


def main() -> None:
    p = common.parser(__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=None, help="regions measured (default 60, --quick 12)")
    p.add_argument("--hogs", type=int, default=2, help="processes that keep the CPU busy meanwhile (default 2)")
    args = p.parse_args()
    runs = args.runs or (12 if args.quick else 60)
    started = time.time()
    stop = multiprocessing.Event()
    hogs = [multiprocessing.Process(target=_hog, args=(stop,), daemon=True) for _ in range(args.hogs)]
    for hog in hogs:
        hog.start()
    rows = []
    try:
        with tempfile.TemporaryDirectory(prefix="gpuenergy-lattice-") as scratch:
            for run in range(runs):
                rows.append(one_run(Path(scratch) / f"sim{run}"))
    finally:
        stop.set()
        for hog in hogs:
            hog.join()
    common.print_table(
        ["run", "period learned (ms)", "error", "truth in bound", "held"],
        [[i, f"{r['period_ms']:.1f}" if r["period_ms"] else "-", f"{r['error']:+.2%}",
          f"{r['truth_in_bound']:.2f}" if r["truth_in_bound"] is not None else "-", r["held"]] for i, r in enumerate(rows)],
        title=f"2 s regions beside {args.hogs} busy processes (simulated H100, wall clock)")
    off = [r for r in rows if abs(r["error"]) > 0.02]
    summary = {"runs": runs, "hogs": args.hogs, "beyond_2pct": len(off), "bound_failures": sum(not r["held"] for r in rows),
               "worst_error": max((abs(r["error"]) for r in rows), default=0.0),
               "median_abs_error": statistics.median(abs(r["error"]) for r in rows),
               "periods_of_runs_beyond_2pct_ms": [r["period_ms"] for r in off]}
    print(f"{summary['beyond_2pct']} of {runs} regions off by more than 2 % (worst {summary['worst_error']:.2%}, median "
          f"{summary['median_abs_error']:.2%}); the bound failed in {summary['bound_failures']}; the periods those runs learned: "
          f"{', '.join(f'{ms:.1f} ms' for ms in summary['periods_of_runs_beyond_2pct_ms'] if ms) or 'none'} (simulated)")
    path = common.write_result(NAME, {"description": __doc__.splitlines()[0], "summary": summary, "rows": rows},
                               quick=args.quick, started=started, out_dir=args.out,
                               simulated_gpus=["NVIDIA H100 80GB HBM3 (simulated)"])
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
