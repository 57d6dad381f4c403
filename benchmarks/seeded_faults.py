"""Would the fast tests catch the bugs users would pay for? Six plausible faults, seeded one at a time.

    python benchmarks/seeded_faults.py [--quick]

Each fault below is a one-line change a reviewer found that the whole suite once let through (issue
31): a unit slip, a sign, an off-by-one, an error bound on the wrong side, the requested limit taken
for the enforced one, percent caps of the wrong limit. For each, the project is copied (the files git
knows, tracked or new) into a temporary folder, the line is changed there, and the fast tests of the
meter and of the caps run against the copy (``PYTHONPATH`` puts it first). A fault is caught when at
least one test fails; the tests that failed are listed. No GPU is involved: the tests run on the
simulated GPU. ``mutation.py`` asks the same question of every mutant mutmut makes; this script
keeps the six that are known to matter, in seconds rather than an hour.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import _common as common

NAME = "seeded_faults"
FAST_TESTS = ("tests/test_integrate.py", "tests/test_meter.py", "tests/test_enforced_limits.py",
              "tests/test_caps_budgets.py", "tests/test_lattice.py")


@dataclass(frozen=True)
class Fault:
    name: str
    module: str
    original: str
    seeded: str


FAULTS = (
    Fault("the counter's mJ taken as J in the region's estimate", "pytest_gpuenergy/meter/integrate.py",
          "return (last.value - first.value) / 1000.0 + head_j + tail_j",
          "return (last.value - first.value) + head_j + tail_j"),
    Fault("a sign error in the estimate of a region shorter than two publications", "pytest_gpuenergy/meter/integrate.py",
          "guess_j = span_j - power_before_w * around_before_s - power_after_w * around_after_s",
          "guess_j = span_j - power_before_w * around_before_s + power_after_w * around_after_s"),
    Fault("the first publication inside the region skipped", "pytest_gpuenergy/meter/integrate.py",
          "    inside = [p for p in dated if t0 < p.when < t1]\n",
          "    inside = [p for p in dated if t0 < p.when < t1][1:]\n"),
    Fault("the lattice's error applied on the wrong side", "pytest_gpuenergy/meter/lattice.py",
          "first = self.index_before(started - error)", "first = self.index_before(started + error)"),
    Fault("the requested limit reported as the enforced one", "pytest_gpuenergy/gpu/capping.py",
          "enforced = retry_transient(lambda: gpu.set_limit_mw(target_mw), gpu.retry_backoff_s)",
          "retry_transient(lambda: gpu.set_limit_mw(target_mw), gpu.retry_backoff_s); enforced = target_mw"),
    Fault("percent caps computed from the maximum limit, not the default", "pytest_gpuenergy/gpu/specs.py",
          "limits.default_mw * value / 100.0", "limits.max_mw * value / 100.0"),
)


def copy_project(target: Path) -> None:
    """The files git knows (tracked, or new and not ignored), as they are in the working tree."""
    listing = ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"]
    names = subprocess.run(listing, cwd=common.REPO_ROOT, capture_output=True, text=True, check=True).stdout
    for name in filter(None, names.split("\0")):
        source = common.REPO_ROOT / name
        if source.is_file() and not name.startswith("benchmarks/results/"):
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target / name)


def seed(work: Path, fault: Fault) -> None:
    path = work / fault.module
    text = path.read_text(encoding="utf-8")
    if text.count(fault.original) != 1:
        raise SystemExit(f"{fault.module} no longer has the line `{fault.original.strip()}` exactly once: "
                         f"update FAULTS in {Path(__file__).name} to the code as it is now")
    path.write_text(text.replace(fault.original, fault.seeded), encoding="utf-8")


def failing_tests(work: Path, tests: tuple[str, ...]) -> tuple[list[str], str, int]:
    """The tests that fail against the copy in ``work``, pytest's last line and its exit status."""
    env = {**os.environ, "PYTHONPATH": str(work), "GPUENERGY_SIM_STATE": str(work / ".gpuenergy-sim")}
    done = subprocess.run([sys.executable, "-m", "pytest", *tests, "-q", "-n", "2", "-p", "no:cacheprovider", "-p", "no:randomly"],
                          cwd=work, env=env, capture_output=True, text=True, timeout=1800)
    # pytest's summary lines of this run's own tests (a pytester session's output, shown in a failure, has others)
    failed = [line.split()[1] for line in done.stdout.splitlines() if line.startswith(("FAILED tests/", "ERROR tests/"))]
    lines = done.stdout.strip().splitlines()
    return failed, lines[-1] if lines else done.stderr.strip()[-300:], done.returncode


def main() -> None:
    p = common.parser(__doc__.splitlines()[0])
    args = p.parse_args()
    started = time.time()
    faults = FAULTS[:2] if args.quick else FAULTS
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        pristine = Path(folder) / "pristine"
        copy_project(pristine)
        failed, last, code = failing_tests(pristine, FAST_TESTS)
        if code != 0:
            raise SystemExit(f"the fast tests fail without any fault ({last}): {', '.join(failed[:5])}")
        for fault in faults:
            work = Path(folder) / re.sub(r"[^a-z]+", "-", fault.name.lower()).strip("-")
            shutil.copytree(pristine, work)
            seed(work, fault)
            took = time.monotonic()
            failed, last, _ = failing_tests(work, FAST_TESTS)
            rows.append({"fault": fault.name, "module": fault.module, "caught": bool(failed), "failed_tests": failed,
                         "pytest_summary": last, "seconds": round(time.monotonic() - took, 1)})
            shutil.rmtree(work)
    common.print_table(["fault", "caught", "tests failed", "s"],
                       [[r["fault"], "yes" if r["caught"] else "NO", len(r["failed_tests"]), r["seconds"]] for r in rows],
                       title="Seeded faults against the fast tests (simulated GPU)")
    for row in rows:
        print(f"{row['fault']}:")
        for test in row["failed_tests"][:4]:
            print(f"    {test}")
        if len(row["failed_tests"]) > 4:
            print(f"    ... and {len(row['failed_tests']) - 4} more")
    caught = sum(r["caught"] for r in rows)
    print(f"caught {caught} of {len(rows)} seeded faults")
    path = common.write_result(NAME, {
        "description": "plausible faults seeded one at a time; caught = at least one fast test fails",
        "tests": list(FAST_TESTS), "rows": rows, "caught": caught, "faults": len(rows),
    }, quick=args.quick, started=started, out_dir=args.out, simulated_gpus=["NVIDIA H100 80GB HBM3 (simulated)"])
    print(f"wrote {path}")
    if caught < len(rows):
        raise SystemExit(1)


if __name__ == "__main__":
    main()
