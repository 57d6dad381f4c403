"""Where ``--energy-all``'s time goes by function: 600 plain tests of 5 ms under cProfile.

    python benchmarks/energy_all_profile.py [--backend sim|nvml] [--out DIR] [--count N]

``energy_all_parts.py`` times the parts a test is known to have; this finds the ones nobody named.
It runs the suite of ``energy_all_overhead.py`` (tests that spin for 5 ms of their own thread's CPU
time) once with ``--energy-all`` and once without under ``cProfile``, and prints, for the
functions of ``pytest_gpuenergy`` and pytest's fixture and hook machinery, the time each adds a
test (inclusive and own). A deterministic profiler slows every Python call by about the same
amount, so the figures are inflated (compare them with each other, and with the run without the
plugin, not with wall time). Each way runs once unprofiled first (modules compiled to bytecode,
as in a project's second run). Read the threads' waits with care: the real H200's profile (Python
3.12) held the recorder thread's counter reads and its sleeps between them (lock waits), which the
tests' thread never waits for. On a real GPU (``--backend nvml``) no cap is asked for and every NVML
setter refuses (``read_only_nvml.py``). Writes ``energy_all_profile[_real_gpu].json`` and the
two ``.pstats`` files to ``--out``.
"""

from __future__ import annotations

import argparse
import os
import pstats
import sys
import tempfile
import time
from pathlib import Path

import _common as common
from energy_all_overhead import _OFF, real_gpu_name, short_suite, timed

_SHOWN = 40
_OURS = ("pytest_gpuenergy", "_pytest/fixtures.py", "_pytest/runner.py", "pluggy", "threading.py", "contextlib.py")


def profiled(command: list[str], cwd: Path, env: dict[str, str], out: Path) -> float:
    """Run ``command`` (a ``-m pytest`` line) under cProfile into ``out``; its wall time."""
    return timed([sys.executable, "-m", "cProfile", "-o", str(out), *command[1:]], cwd, env)[0]


def rows_of(stats_path: Path, tests: int) -> dict[str, dict[str, float]]:
    """Per function of interest: calls, inclusive and own microseconds a test."""
    stats = pstats.Stats(str(stats_path)).stats  # type: ignore[attr-defined]
    rows = {}
    for (filename, line, name), (_, calls, own_s, inclusive_s, _) in stats.items():
        if not any(part in filename for part in _OURS):
            continue
        short = filename.split("site-packages/")[-1].split("pytest_gpuenergy/")[-1]
        rows[f"{short}:{line}({name})"] = {"calls_per_test": calls / tests, "inclusive_us": inclusive_s / tests * 1e6,
                                           "own_us": own_s / tests * 1e6}
    return rows


def added(with_rows: dict[str, dict[str, float]], without_rows: dict[str, dict[str, float]]) -> list[tuple[str, dict[str, float]]]:
    """Each function of the run with the plugin and what it adds a test against the run without
    (all of it where the plain run never called it), the largest first."""
    found = {name: {**row, "added_inclusive_us": row["inclusive_us"] - without_rows.get(name, {}).get("inclusive_us", 0.0)}
             for name, row in with_rows.items()}
    return sorted(found.items(), key=lambda item: -item[1]["added_inclusive_us"])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--backend", choices=("sim", "nvml"), default="sim")
    p.add_argument("--out", type=Path, default=common.RESULTS_DIR)
    p.add_argument("--count", type=int, default=600, help="plain tests of 5 ms (default 600)")
    args = p.parse_args()
    real = args.backend == "nvml"
    started = time.time()
    with tempfile.TemporaryDirectory() as folder:
        where = Path(folder)
        short_suite(where, count=args.count)
        env = {**os.environ, "GPUENERGY_SIM_STATE": str(where / "sim"), "GPUENERGY_BACKEND": args.backend,
               "GPUENERGY_SIM_SEED": "1", "PYTHONPATH": os.pathsep.join([str(common.BENCH_DIR), os.environ.get("PYTHONPATH", "")])}
        env.pop("PYTEST_ADDOPTS", None)
        safety = ["-p", "read_only_nvml"] if real else []
        command = [sys.executable, "-m", "pytest", "-q", *_OFF, *safety, "test_short.py"]
        stem = "energy_all_profile" + ("_real_gpu" if real else "")
        args.out.mkdir(parents=True, exist_ok=True)
        walls, tables = {}, {}
        for extra in ([], ["--energy-all"]):     # untimed first: each module's bytecode is compiled once
            timed([*command, *extra], where, env)
        for label, extra in (("without", []), ("with", ["--energy-all"])):
            stats_path = args.out / f"{stem}-{label}.pstats"
            walls[label] = profiled([*command, *extra], where, env, stats_path)
            tables[label] = rows_of(stats_path, args.count)
    with_rows = tables["with"]
    shown = added(with_rows, tables["without"])[:_SHOWN]
    common.print_table(
        ["function", "calls a test", "inclusive us a test", "own us", "added us (inclusive, against without)"],
        [[name[-70:], round(r["calls_per_test"], 2), round(r["inclusive_us"]), round(r["own_us"]), round(r["added_inclusive_us"])]
         for name, r in shown],
        title=f"{args.count} tests of 5 ms, --energy-all, under cProfile ({'a real GPU' if real else 'simulated GPU'}; "
              f"{walls['with']:.2f} s against {walls['without']:.2f} s profiled)")
    own = sorted(with_rows.items(), key=lambda item: -item[1]["own_us"])
    common.print_table(["function", "own us a test"], [[n[-70:], round(r["own_us"])] for n, r in own[:25]],
                       title="the same run: own time, the largest")
    path = common.write_result(stem, {
        "backend": args.backend, "count": args.count,
        "description": "--energy-all under cProfile: the time each function adds a test (profiled, inflated)",
        "profiled_wall_s": walls, "functions": dict(shown),
    }, quick=False, started=started, out_dir=args.out,
        simulated_gpus=None if real else ["NVIDIA H100 80GB HBM3 (simulated)"], real_gpu=real_gpu_name() if real else None)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
