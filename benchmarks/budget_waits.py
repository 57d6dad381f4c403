"""How long budgeted short tests wait for their verdicts, in real time.

    python benchmarks/budget_waits.py [--quick] [--count N] [--margin PCT] [--backend sim|nvml]

A budget's verdict is the test's own, so a budgeted test may wait for its figure: a region shorter
than the energy counter's period needs the counter's next two publications (about 0.19 s on a
100 ms counter). Since 8c0b97c the verdict comes at once where the upper end of the figure's bound
from the reads taken so far already meets every budget. This runs ``--count`` tests of 5 ms under
``--energy-all`` three ways, in real time (the simulator's wall clock, ``GPUENERGY_SIM_CLOCK=wall``,
which stands for a real GPU here; or a real GPU, read-only: no caps, every NVML setter refuses):

* without budgets, saving the run (``--energy-save``), from which ``gpuenergy budgets --margin``
  writes each test's budget, as the README's CI step does;
* with those budgets (``--energy-budgets``): the verdicts the bound decides take no wait;
* with those budgets and ``--junitxml``, which waits for every figure before its test ends: every
  verdict then comes after its figure, as before 8c0b97c.

It prints each run's wall time, its outcomes and the session's own line on how long budgeted tests
waited, and writes ``budget_waits[-quick].json``. Figures on the simulator are simulated.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import _common as common
from energy_all_overhead import _OFF, real_gpu_name, short_suite

NAME = "budget_waits"
_WAITED = re.compile(r"(\d+) tests? with an energy budget waited ([\d.]+) s in all")
_OUTCOMES = re.compile(r"(\d+) (passed|failed)")


def run(command: list[str], cwd: Path, env: dict[str, str]) -> dict:
    """One pytest session: its wall time, outcomes and what its end said of budgets' waits. Tests
    over their budget fail (exit 1), which is no error here; any other exit is."""
    started = time.perf_counter()
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=1800)
    wall_s = time.perf_counter() - started
    if done.returncode not in (0, 1):
        raise SystemExit(f"{' '.join(command)} exited {done.returncode}:\n{done.stdout[-3000:]}{done.stderr[-2000:]}")
    text = " ".join(line.strip() for line in done.stdout.splitlines())
    outcomes = {kind: int(n) for n, kind in _OUTCOMES.findall(done.stdout.splitlines()[-1])}
    waited = _WAITED.search(text)
    return {"wall_s": wall_s, "passed": outcomes.get("passed", 0), "failed": outcomes.get("failed", 0),
            "waited_tests": int(waited.group(1)) if waited else 0, "waited_s": float(waited.group(2)) if waited else 0.0}


def main() -> None:
    p = common.parser(__doc__.splitlines()[0])
    p.add_argument("--count", type=int, default=None, help="tests of 5 ms (default 120, --quick 40)")
    p.add_argument("--margin", default="40", help="gpuenergy budgets' margin in percent (default 40)")
    p.add_argument("--backend", choices=("sim", "nvml"), default="sim")
    args = p.parse_args()
    count = args.count or (40 if args.quick else 120)
    real = args.backend == "nvml"
    started = time.time()
    with tempfile.TemporaryDirectory() as folder:
        where = Path(folder)
        short_suite(where, count=count)
        env = {**os.environ, "GPUENERGY_SIM_STATE": str(where / "sim"), "GPUENERGY_SIM_CLOCK": "wall",
               "GPUENERGY_SIM_SEED": "1", "GPUENERGY_BACKEND": args.backend,
               "PYTHONPATH": os.pathsep.join([str(common.BENCH_DIR), os.environ.get("PYTHONPATH", "")])}
        env.pop("PYTEST_ADDOPTS", None)
        safety = ["-p", "read_only_nvml"] if real else []
        pytest = [sys.executable, "-m", "pytest", "-q", *_OFF, *safety, "test_short.py", "--energy-all",
                  f"--energy-storage={where / 'runs'}"]
        rows = {"no budgets (saved)": run([*pytest, "--energy-save"], where, env)}
        subprocess.run([sys.executable, "-m", "pytest_gpuenergy.cli", "budgets", "--from", "latest", "--storage",
                        str(where / "runs"), "--margin", f"{args.margin}%", "-o", str(where / "budgets.toml")],
                       cwd=where, env=env, check=True, capture_output=True, timeout=300)
        rows["budgets"] = run([*pytest, "--energy-budgets=budgets.toml"], where, env)
        rows["budgets, every figure waited for (--junitxml)"] = run(
            [*pytest, "--energy-budgets=budgets.toml", f"--junitxml={where / 'junit.xml'}"], where, env)
    common.print_table(["session", "wall s", "passed", "failed", "budgeted tests (the session's line)", "their waits s"],
                       [[name, f"{r['wall_s']:.2f}", r["passed"], r["failed"], r["waited_tests"], f"{r['waited_s']:.1f}"]
                        for name, r in rows.items()],
                       title=f"{count} tests of 5 ms, budgets with a margin of {args.margin} % "
                             f"({'a real GPU' if real else 'the simulated GPU on the wall clock'})")
    path = common.write_result(NAME, {"count": count, "margin_pct": float(args.margin), "backend": args.backend,
                                      "description": __doc__.splitlines()[0], "rows": rows},
                               quick=args.quick, started=started, out_dir=args.out,
                               simulated_gpus=None if real else ["H100"], real_gpu=real_gpu_name() if real else None)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
