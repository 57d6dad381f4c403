"""What the plugin adds to every pytest start, and how long the ``gpuenergy`` command takes to start.

    python benchmarks/startup.py [--quick]

Installing the package enables the plugin in every pytest session of the environment, whether a
session measures energy or not: its import and its session start are a tax on every run. Timed
here as wall seconds of fresh processes (the median of ``--runs``, each after one unmeasured run
that warms the file cache), on the simulated GPU; the two pytest runs in pairs, back to back, and the
plugin's share is the median of the pairs' differences:

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


def once_s(command: list[str], cwd: Path, env: dict[str, str]) -> float:
    started = time.perf_counter()
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=120)
    elapsed = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)} exited {done.returncode}:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    return elapsed


def wall_s(command: list[str], cwd: Path, env: dict[str, str], runs: int) -> float:
    """Median wall seconds of ``command`` in fresh processes (after one warm-up run)."""
    return statistics.median([once_s(command, cwd, env) for _ in range(runs + 1)][1:])


def paired_s(with_plugin: list[str], without: list[str], cwd: Path, env: dict[str, str],
             runs: int) -> tuple[list[float], list[float]]:
    """Both pytest commands' wall seconds, run back to back in pairs that alternate which goes first
    (after one warm-up pair): the plugin's share is the median of the pairs' differences, which a
    host whose speed drifts over the minute the runs take moves far less than two medians apart."""
    pairs = []
    for i in range(runs + 1):
        if i % 2:
            without_s = once_s(without, cwd, env)
            pairs.append((once_s(with_plugin, cwd, env), without_s))
        else:
            pairs.append((once_s(with_plugin, cwd, env), once_s(without, cwd, env)))
    return [w for w, _ in pairs[1:]], [o for _, o in pairs[1:]]


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
            "gpuenergy --help": [python, "-m", "pytest_gpuenergy.cli", "--help"],
            "gpuenergy info": [python, "-m", "pytest_gpuenergy.cli", "info"],
            "gpuenergy runs": [python, "-m", "pytest_gpuenergy.cli", "runs"],
        }
        rows = [{"command": name, "median_wall_s": wall_s(command, where, env, runs), "runs": runs}
                for name, command in commands.items()]
        with_s, without_s = paired_s([python, "-m", "pytest", "-q", "test_empty.py"],
                                     [python, "-m", "pytest", "-q", "-p", "no:gpuenergy", "test_empty.py"], where, env, runs)
    rows[2:2] = [{"command": "pytest, one empty test, -p no:gpuenergy", "median_wall_s": statistics.median(without_s), "runs": runs},
                 {"command": "pytest, one empty test, with the plugin", "median_wall_s": statistics.median(with_s), "runs": runs}]
    plugin_s = statistics.median(w - o for w, o in zip(with_s, without_s))
    common.print_table(["command", "median wall s", "runs"], [[r["command"], r["median_wall_s"], r["runs"]] for r in rows],
                       title="Start-up of fresh processes (simulated GPU)")
    print(f"the plugin adds {1000 * plugin_s:.0f} ms to a pytest session that measures nothing "
          f"(median of {runs} paired differences, each pair's order alternating)")
    path = common.write_result(NAME, {
        "description": "wall seconds of fresh processes: pytest with and without the plugin, the gpuenergy command",
        "rows": rows,
        "plugin_added_s": plugin_s,
    }, quick=args.quick, started=started, out_dir=args.out, simulated_gpus=["NVIDIA H100 80GB HBM3 (simulated)"])
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
