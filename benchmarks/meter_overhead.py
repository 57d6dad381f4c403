"""What measuring costs: a region's wall time with and without the energy meter, and the fixtures' cost per test.

Part 1, region overhead. The same fixed amount of work (pure Python, which holds the GIL, or torch
matmuls, which release it) runs unmeasured and inside ``with meter:``, in counter mode (simulated
H100) and in sampling mode (simulated H100 without its energy counter). Each case is timed in
interleaved pairs (measured and unmeasured in random order, cases shuffled per round) and
reduced to medians, so that the load of other processes falls on both sides alike. The overhead
is the median of the measured times over the median of the unmeasured ones, minus one; the
median of the per-pair differences is shown in milliseconds. Goal: at most 0.5 % for regions of
1 s and more.

Part 2, fixed cost per test. ``pytest`` runs, in subprocesses, a file of N trivial tests: without
fixtures, with ``gpu_power_cap`` and ``energy_meter``, with an (empty) measured block, and with a
cap applied and restored (``--gpu-caps=60%``), plus the trivial file without the plugin at all
(``-p no:gpuenergy``). The cost per test is the difference of the median wall times over N.

On the simulator an "NVML call" is Python code that holds the GIL while it runs; real NVML calls
are C functions, so the figures here are an upper bound for what the meter's threads cost.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any, Callable

import _common as common

NAME = "meter_overhead"
GOAL = 0.005            # 0.5 % of the region's wall time
GOAL_FROM_S = 1.0       # for regions of 1 s and more

FULL_LENGTHS = (0.01, 0.03, 0.1, 0.3, 1.0, 3.0, 10.0)
QUICK_LENGTHS = (0.01, 0.1, 1.0)


def rounds_for(length_s: float, quick: bool) -> int:
    """Interleaved pairs per case: more for short regions, whose noise is relatively larger."""
    if quick:
        return 12 if length_s < 0.5 else 5
    return {0.01: 40, 0.03: 40, 0.1: 25, 0.3: 15, 1.0: 11, 3.0: 7, 10.0: 5}.get(length_s, 5)


# -- part 1: region overhead -----------------------------------------------------------------------

MODES = {
    # name: (simulated models, faults, expected method)
    "counter": ("H100", "", "counter"),
    "sampling": ("H100", "no_counter", "sampling"),
}


def region_overhead(args: Any) -> tuple[list[dict], list[str]]:
    from pytest_gpuenergy.device import open_backend
    from pytest_gpuenergy.meter import EnergyMeter

    lengths = QUICK_LENGTHS if args.quick else FULL_LENGTHS
    torch_work = common.TorchWork()
    kinds: dict[str, Callable[[int], Any]] = {"python": common.python_work, "torch": torch_work.run}
    per_second = {kind: common.calibrate(run, 1.0, start=1000 if kind == "python" else 10) for kind, run in kinds.items()}

    opened = []
    stack = []
    meters = {}
    gpu_names = []
    for mode, (models, faults, method) in MODES.items():
        ctx = common.private_sim(models, faults)
        ctx.__enter__()
        stack.append(ctx)
        backend = open_backend("sim")   # reads the private machine and its faults now
        opened.append(backend)
        meter = EnergyMeter(backend, backend.select(None))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            meter.measure(common.spin_python, 0.05, warmup=1, repeat=1, min_time_s=0.3)  # learn the cadence
        assert meter.result.method == method, (mode, meter.result.method)
        meters[mode] = meter
        gpu_names.append(backend.select(None)[0].name)

    cases = [(mode, kind, length) for mode in MODES for kind in kinds for length in lengths]
    samples: dict[tuple, dict[str, list[float]]] = {c: {"plain": [], "measured": [], "plain_cpu": [], "measured_cpu": []} for c in cases}
    rng = random.Random(args.seed)
    max_rounds = max(rounds_for(length, args.quick) for length in lengths)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")   # short regions warn that they are too short to measure
            for round_number in range(max_rounds):
                todo = [c for c in cases if round_number < rounds_for(c[2], args.quick)]
                rng.shuffle(todo)
                for case in todo:
                    mode, kind, length = case
                    run, units, meter = kinds[kind], max(1, round(per_second[kind] * length)), meters[mode]
                    order = ["plain", "measured"]
                    rng.shuffle(order)
                    for which in order:
                        cpu, start = time.process_time(), time.perf_counter()
                        if which == "plain":
                            run(units)
                        else:
                            with meter:
                                run(units)
                        samples[case][which].append(time.perf_counter() - start)
                        samples[case][which + "_cpu"].append(time.process_time() - cpu)
    finally:
        for backend in opened:
            backend.close()
        for ctx in reversed(stack):
            ctx.__exit__(None, None, None)

    rows = []
    for case in cases:
        mode, kind, length = case
        s = samples[case]
        plain, measured = common.median(s["plain"]), common.median(s["measured"])
        diffs = [m - p for m, p in zip(s["measured"], s["plain"])]
        overhead = measured / plain - 1
        rows.append({
            "mode": mode, "work": kind, "region_s": length, "pairs": len(diffs),
            "plain_median_s": plain, "measured_median_s": measured,
            "overhead": overhead,
            "pair_diff_median_ms": common.median(diffs) * 1000,
            "pair_diff_q25_ms": common.quantile(diffs, 0.25) * 1000,
            "pair_diff_q75_ms": common.quantile(diffs, 0.75) * 1000,
            "plain_spread": (common.quantile(s["plain"], 0.75) - common.quantile(s["plain"], 0.25)) / plain,
            "extra_cpu_ms": (common.median(s["measured_cpu"]) - common.median(s["plain_cpu"])) * 1000,
            "goal_applies": length >= GOAL_FROM_S,
            "goal_met": (overhead <= GOAL) if length >= GOAL_FROM_S else None,
        })
    return rows, gpu_names


# -- part 2: fixture cost per test -----------------------------------------------------------------

VARIANTS = {
    # name: (test body, extra pytest arguments)
    "no plugin": ("def test_{i}():\n    pass\n", ["-p", "no:gpuenergy"]),
    "plain test": ("def test_{i}():\n    pass\n", []),
    "fixtures": ("def test_{i}(gpu_power_cap, energy_meter):\n    pass\n", []),
    "fixtures + empty measured block": ("def test_{i}(gpu_power_cap, energy_meter):\n    with energy_meter:\n        pass\n", []),
    "fixtures + cap 60% applied/restored": ("def test_{i}(gpu_power_cap, energy_meter):\n    pass\n", ["--gpu-caps=60%"]),
}


def fixture_cost(args: Any) -> list[dict]:
    n_tests = 100 if args.quick else 400
    reps = 3 if args.quick else 5
    rng = random.Random(args.seed + 1)
    times: dict[str, list[float]] = {v: [] for v in VARIANTS}
    with tempfile.TemporaryDirectory(prefix="gpuenergy-bench-fixtures-") as folder:
        root = Path(folder)
        files = {}
        for number, (variant, (body, _)) in enumerate(VARIANTS.items()):
            path = root / f"test_variant{number}.py"
            path.write_text("".join(body.format(i=i) for i in range(n_tests)), encoding="utf-8")
            files[variant] = path
        (root / "pytest.ini").write_text("[pytest]\n", encoding="utf-8")   # keep the repo's config out
        with common.private_sim("H100"):
            env = dict(os.environ)
            env["PYTHONDONTWRITEBYTECODE"] = "1"
            for _ in range(reps):
                order = list(VARIANTS)
                rng.shuffle(order)
                for variant in order:
                    extra = VARIANTS[variant][1]
                    backend = [] if "no:gpuenergy" in extra else ["--gpu-backend=sim"]
                    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-W", "ignore",
                               *backend, *extra, str(files[variant])]
                    start = time.perf_counter()
                    proc = subprocess.run(command, cwd=root, env=env, capture_output=True, text=True, timeout=600)
                    elapsed = time.perf_counter() - start
                    if proc.returncode != 0:
                        raise RuntimeError(f"{variant}: pytest exited {proc.returncode}:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
                    times[variant].append(elapsed)
    base_plain = common.median(times["plain test"])
    base_none = common.median(times["no plugin"])
    rows = []
    for variant, values in times.items():
        med = common.median(values)
        rows.append({
            "variant": variant, "tests": n_tests, "runs": len(values),
            "run_median_s": med,
            "run_min_s": min(values), "run_max_s": max(values),
            "per_test_vs_plain_ms": (med - base_plain) / n_tests * 1000,
            "per_run_vs_no_plugin_s": med - base_none,
        })
    return rows


def main() -> None:
    args = common.parser(__doc__.splitlines()[0]).parse_args()
    started = time.time()
    print(f"{NAME}{' (quick)' if args.quick else ''}: figures are on SIMULATED GPUs (the meter against the GPU simulator)\n")

    region_rows, gpu_names = region_overhead(args)
    common.print_table(
        ["mode (simulated)", "work", "region s", "pairs", "plain s", "measured s", "overhead", "pair diff ms",
         "plain IQR", "extra CPU ms", "goal <=0.5%"],
        [[r["mode"], r["work"], r["region_s"], r["pairs"], r["plain_median_s"], r["measured_median_s"],
          common.pct(r["overhead"], 2), round(r["pair_diff_median_ms"], 2), common.pct(r["plain_spread"], 1),
          round(r["extra_cpu_ms"], 2), "-" if r["goal_met"] is None else ("met" if r["goal_met"] else "MISSED")]
         for r in region_rows],
        title="Region overhead: wall time of `with meter:` around fixed work vs the same work unmeasured (medians of interleaved pairs)",
    )
    fixture_rows = fixture_cost(args)
    common.print_table(
        ["variant", "tests", "runs", "median run s", "per test vs plain ms", "per run vs no plugin s"],
        [[r["variant"], r["tests"], r["runs"], r["run_median_s"], round(r["per_test_vs_plain_ms"], 3),
          round(r["per_run_vs_no_plugin_s"], 3)] for r in fixture_rows],
        title="Fixture cost: pytest runs of N trivial tests in a subprocess (simulated H100)",
    )
    goal_rows = [r for r in region_rows if r["goal_applies"]]
    summary = {
        "goal": f"overhead <= {GOAL:.1%} for regions >= {GOAL_FROM_S:g} s",
        "goal_met": all(r["goal_met"] for r in goal_rows) if goal_rows else None,
        "worst_overhead_from_1s": max((r["overhead"] for r in goal_rows), default=None),
    }
    print(f"goal ({summary['goal']}): {'met' if summary['goal_met'] else 'NOT met'}; worst {common.pct(summary['worst_overhead_from_1s'], 2)}")
    path = common.write_result(
        NAME,
        {
            "description": "wall time of a measured region vs the same region unmeasured; fixture cost per test",
            "settings": {"lengths_s": list(QUICK_LENGTHS if args.quick else FULL_LENGTHS), "seed": args.seed,
                         "modes": {m: {"models": v[0], "faults": v[1]} for m, v in MODES.items()}},
            "summary": summary,
            "region_overhead": region_rows,
            "fixture_cost": fixture_rows,
        },
        quick=args.quick, started=started, simulated_gpus=gpu_names,
    )
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
