"""How long ``gpuenergy history`` takes on a big storage folder: 500 runs of 200 cases, and whether it is linear.

    python benchmarks/history_scale.py [--quick]

A storage folder is filled with saved runs of 200 one-cap cases each (three repetitions, 1 % noise,
the documents the tests build: ``tests/helpers.py``), ten minutes apart, five tests 30 % heavier from
the middle run on. Then the command as a user runs it (``gpuenergy history DIR --json --markdown
--html``, in this process) is timed at 1/4, 1/2 and all of the runs: wall seconds, and the part spent
reading the files. The goal (issue 29): 500 runs of 200 cases read and reported within 30 s. A ratio of
the seconds near the ratio of the runs is linear. No GPU is involved: the figures are this machine's.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path

import _common as common

sys.path.insert(0, str(common.REPO_ROOT / "tests"))

from pytest_gpuenergy.cli.main import main as gpuenergy  # noqa: E402
from pytest_gpuenergy.fileio import atomic_write_text  # noqa: E402
from pytest_gpuenergy.history import series  # noqa: E402
from pytest_gpuenergy.history.series import read_history  # noqa: E402
from pytest_gpuenergy.runs.store import RunStore  # noqa: E402

from helpers import make_doc  # noqa: E402

NAME = "history_scale"
GOAL_S = 30.0
CHANGED = 5


def fill(folder: Path, runs: int, cases: int) -> float:
    """``runs`` saved runs of ``cases`` cases in ``folder``; the seconds it took (not part of the figure)."""
    started = time.perf_counter()
    store = RunStore(folder)
    workloads = [f"w{i:03d}" for i in range(cases)]
    for i in range(runs):
        scale = {w: 1.3 for w in workloads[:CHANGED]} if i >= runs // 2 else {}
        doc = make_doc(seed=i, minutes=10 * i, workloads=workloads, caps_w=(300.0,), n=3, noise=0.01, scale=scale,
                       commit={"id": f"{i:040x}", "branch": "main", "dirty": False})
        atomic_write_text(store.path_for(doc), json.dumps(doc.to_json()), durable=False)   # as saved, minus the fsync
    return time.perf_counter() - started


def cpu_s() -> float:
    """CPU seconds of this process and of its finished children (the reading processes)."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def timed(folder: Path, out: Path) -> dict:
    started = time.perf_counter()
    read_history(folder)
    read_s = time.perf_counter() - started
    started, cpu_started = time.perf_counter(), cpu_s()
    with contextlib.redirect_stdout(io.StringIO()) as printed:
        status = gpuenergy(["history", str(folder), "--json", str(out / "h.json"), "--markdown", str(out / "h.md"),
                            "--html", str(out / "h.html")])
    wall_s, used_s = time.perf_counter() - started, cpu_s() - cpu_started
    if status != 0 or f"{CHANGED} change points" not in printed.getvalue().replace("\n", " ").replace("  ", " "):
        raise SystemExit(f"gpuenergy history did not find the {CHANGED} changes:\n{printed.getvalue()}")
    return {"wall_s": wall_s, "cpu_s": used_s, "read_s": read_s, "load_avg_1min": os.getloadavg()[0]}


def main() -> None:
    p = common.parser(__doc__.splitlines()[0])
    p.add_argument("--readers", type=int, default=None, help=f"processes reading the files (default: one per CPU, "
                                                             f"at most {series.MAX_READERS}; 1: read in this process)")
    args = p.parse_args()
    if args.readers is not None:
        series.MAX_READERS = args.readers
    started = time.time()
    runs, cases = (100, 50) if args.quick else (500, 200)
    rows = []
    work = Path(tempfile.mkdtemp(prefix="history-scale-"))
    try:
        for share in (4, 2, 1):
            count = runs // share
            folder = work / f"runs-{count}"
            fill_s = fill(folder, count, cases)
            row = {"runs": count, "cases": cases, "fill_s": fill_s, **timed(folder, work)}
            rows.append(row)
            shutil.rmtree(folder)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    first = rows[0]
    for row in rows:
        row["x_seconds"] = row["wall_s"] / first["wall_s"]
        row["x_runs"] = row["runs"] / first["runs"]
    common.print_table(["runs", "cases", "history s", "CPU s", "reading alone s", "x seconds", "x runs", "load"],
                       [[r["runs"], r["cases"], r["wall_s"], r["cpu_s"], r["read_s"], r["x_seconds"], r["x_runs"],
                         r["load_avg_1min"]] for r in rows],
                       title="gpuenergy history --json --markdown --html, wall seconds")
    full = rows[-1]
    met = full["wall_s"] <= GOAL_S
    growth = full["x_seconds"] / full["x_runs"]
    print(f"{full['runs']} runs x {full['cases']} cases: {full['wall_s']:.1f} s (goal {GOAL_S:g} s: "
          f"{'met' if met else 'NOT met'}); {full['x_runs']:g}x the runs took {full['x_seconds']:.2f}x the time")
    path = common.write_result(NAME, {
        "description": "wall and CPU seconds of gpuenergy history (all three reports) on a storage of N runs of 200 cases; "
                       "load: the host's 1-minute load average after the run (this VM is shared)",
        "readers": min(series.MAX_READERS, len(os.sched_getaffinity(0))),
        "rows": rows,
        "goals": [{"goal": f"{runs} runs x {cases} cases read and reported within {GOAL_S:g} s",
                   "figure": full["wall_s"], "target": GOAL_S, "met": met}],
        "linear": {"time_ratio_per_run_ratio": growth, "linear": 0.75 <= growth <= 1.35},
    }, quick=args.quick, started=started, out_dir=args.out)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
