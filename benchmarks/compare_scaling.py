"""How the comparison's cost grows with the number of cases: CPU seconds to compare two runs.

    python benchmarks/compare_scaling.py [--quick]

Each size compares a run of N cases against its baseline with the two earlier runs as history
(the gate then also estimates the noise between sessions from the saved runs), as
``gpuenergy compare`` and ``--energy-compare`` do; once on the same GPU and once with the new run
on another GPU index (cases pair by test and cap only). The documents are the realistic ones the
comparison tests build (``tests/helpers.py``: three repetitions per case, seeded noise).
No GPU is involved: the figures are the comparison's CPU time on this machine.

A pairing or history scan that is quadratic in the cases shows as a ratio near 64 between N and
8 N; a linear one near 8. The test ``tests/test_compare.py::test_comparing_runs_is_linear_in_their_cases``
checks the ratio at small sizes; this script measures the sizes users have.
"""

from __future__ import annotations

import sys
import time

import _common as common

sys.path.insert(0, str(common.REPO_ROOT / "tests"))

from pytest_gpuenergy.gate.compare import compare_documents  # noqa: E402

from helpers import wide_runs  # noqa: E402

NAME = "compare_scaling"
GATE = {"ets": 5.0}


def cpu_seconds(cases: int, moved: bool) -> float:
    runs = wide_runs(cases, moved=moved)
    started = time.process_time()
    comparison = compare_documents(runs[1], runs[2], GATE, history=runs)
    elapsed = time.process_time() - started
    if len(comparison.cases) != cases or {c.status for c in comparison.cases} != {"compared"}:
        raise SystemExit(f"{cases} cases did not all compare: the benchmark's documents are wrong")
    return elapsed


def main() -> None:
    args = common.parser(__doc__.splitlines()[0]).parse_args()
    started = time.time()
    sizes = (1250, 10_000) if args.quick else (1250, 2500, 5000, 10_000, 20_000)
    rows = []
    for moved in (False, True):
        for cases in sizes:
            rows.append({"cases": cases, "gpu": "moved to GPU 1" if moved else "same GPU",
                         "cpu_s": cpu_seconds(cases, moved)})
    for row in rows:
        first = next(r for r in rows if r["gpu"] == row["gpu"])
        row["ratio_to_smallest"] = row["cpu_s"] / first["cpu_s"] if first["cpu_s"] > 0 else None
        row["cases_ratio"] = row["cases"] / first["cases"]
    common.print_table(["cases", "gpu", "CPU s", "x CPU", "x cases"],
                       [[r["cases"], r["gpu"], r["cpu_s"], r["ratio_to_smallest"], r["cases_ratio"]] for r in rows],
                       title="Comparing two runs (with two runs of history), CPU seconds")
    path = common.write_result(NAME, {
        "description": "CPU seconds to compare two runs of N cases with the noise between sessions from history",
        "rows": rows,
    }, quick=args.quick, started=started, out_dir=args.out)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
