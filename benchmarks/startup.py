"""What the plugin adds to every pytest start, and how long the ``gpuenergy`` command takes to start.

    python benchmarks/startup.py [--quick]

Installing the package enables the plugin in every pytest session of the environment, whether a
session measures energy or not: its import and its session start are a tax on every run. Timed
here as wall seconds of fresh processes (the median of ``--runs``, each after one unmeasured run
that warms the file cache), on the simulated GPU:

* ``pytest`` on one empty test, with the plugin and with ``-p no:gpuenergy``;
* ``gpuenergy info``, ``gpuenergy runs`` and ``gpuenergy --help``;
* ``python -c pass`` and ``python -c "import pytest"`` for scale.

No GPU is involved and nothing is measured on one: the figures are process start-up times.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import _common as common

NAME = "startup"


def wall_s(command: list[str], cwd: Path, env: dict[str, str], runs: int) -> float:
    """Median wall seconds of ``command`` in fresh processes (after one warm-up run)."""
    took = []
    for i in range(runs + 1):
        started = time.perf_counter()
        done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=120)
        elapsed = time.perf_counter() - started
        if done.returncode != 0:
            raise SystemExit(f"{' '.join(command)} exited {done.returncode}:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
        if i:
            took.append(elapsed)
    return statistics.median(took)


def main() -> None:
    p = common.parser(__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=None, help="timed runs per command (default 10, --quick 5)")
    args = p.parse_args()
    runs = args.runs or (5 if args.quick else 10)
    started = time.time()
    python = sys.executable
    with tempfile.TemporaryDirectory() as folder:
        where = Path(folder)
        (where / "test_empty.py").write_text("def test_empty():\n    pass\n", encoding="utf-8")
        # The dev install's hypothesis plugin (0.4 s of imports per start) is blocked in both pytest runs:
        # it is not this project's, and it would hide the difference measured here.
        env = {**os.environ, "GPUENERGY_SIM_STATE": str(where / "sim-state"), "GPUENERGY_BACKEND": "sim",
               "PYTEST_ADDOPTS": "-p no:cacheprovider -p no:hypothesispytest"}
        commands = {
            "python -c pass": [python, "-c", "pass"],
            "python -c 'import pytest'": [python, "-c", "import pytest"],
            "pytest, one empty test, -p no:gpuenergy": [python, "-m", "pytest", "-q", "-p", "no:gpuenergy", "test_empty.py"],
            "pytest, one empty test, with the plugin": [python, "-m", "pytest", "-q", "test_empty.py"],
            "gpuenergy --help": [python, "-m", "pytest_gpuenergy.cli", "--help"],
            "gpuenergy info": [python, "-m", "pytest_gpuenergy.cli", "info"],
            "gpuenergy runs": [python, "-m", "pytest_gpuenergy.cli", "runs"],
        }
        rows = [{"command": name, "median_wall_s": wall_s(command, where, env, runs), "runs": runs}
                for name, command in commands.items()]
    by_name = {row["command"]: row["median_wall_s"] for row in rows}
    plugin_s = by_name["pytest, one empty test, with the plugin"] - by_name["pytest, one empty test, -p no:gpuenergy"]
    common.print_table(["command", "median wall s", "runs"], [[r["command"], r["median_wall_s"], r["runs"]] for r in rows],
                       title="Start-up of fresh processes (simulated GPU)")
    print(f"the plugin adds {1000 * plugin_s:.0f} ms to a pytest session that measures nothing")
    path = common.write_result(NAME, {
        "description": "wall seconds of fresh processes: pytest with and without the plugin, the gpuenergy command",
        "rows": rows,
        "plugin_added_s": plugin_s,
    }, quick=args.quick, started=started, out_dir=args.out, simulated_gpus=["NVIDIA H100 80GB HBM3 (simulated)"])
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
