"""Mutation testing of the core with mutmut: would the tests catch a plausible bug in each module?

    python benchmarks/mutation.py                                    # every module below (about 1.5 h on 2 cores)
    python benchmarks/mutation.py --module pytest_gpuenergy/meter/integrate.py   # one module, before a commit

For each module, mutmut (https://mutmut.readthedocs.io) makes one small change at a time (an operator,
a constant, a comparison, an argument) and runs the module's fast tests against it, only those that
reach the changed function; a mutant that no test fails "survived". Each module runs in a copy of the
committed project (HEAD: commit first) under ``.mutation/`` (ignored by git), with the module's tests
only: the suite's tests that start a separate process (`runpytest_subprocess`, the CLI in a
subprocess) would run the unchanged code.

A module's tests are those named below plus ``tests/test_<module>.py`` where it exists (the file for
tests of that one module). Every survivor is either listed in ``benchmarks/mutation_equivalents/``
(``<package>.toml``: a mutant no test can kill because it does not change what the module does, with
the reason) or reported as a gap. The
results go to ``benchmarks/results/mutation.json`` (a ``--module`` run updates that module's entry):
per module the mutants, killed (a timeout counts as killed: the tests noticed), survived, the share
killed, and each survivor's function, line and change.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parent.parent
WORK = ROOT / ".mutation"
RESULTS = ROOT / "benchmarks" / "results" / "mutation.json"
EQUIVALENTS = ROOT / "benchmarks" / "mutation_equivalents"      # one TOML file per package
GOAL = 0.90
# A wall-clock limit per test (pytest-timeout): mutmut limits a mutant's CPU time only, and a mutant
# that makes a recorder thread wait forever uses none. A test past it fails: the mutant is killed.
TEST_TIMEOUT_S = 120

_METER = ["tests/test_integrate.py", "tests/test_meter.py"]
# The knobs' own in-process tests (tests/test_knob.py, test_capping.py, test_journal.py, test_clocks.py,
# found by name, with test_clocks_knob.py and test_clock_journal.py) and the enforced limits; test_faults.py and test_restore.py
# drive the knobs through killed processes, which run the unchanged code, and take minutes per mutant.
_KNOBS = ["tests/test_caps_budgets.py", "tests/test_enforced_limits.py", "tests/test_capping.py"]
_CLOCKS = ["tests/test_clocks.py"]
_GATE = ["tests/test_gate.py", "tests/test_compare.py", "tests/test_caps_budgets.py"]
_RUNS = ["tests/test_storage.py", "tests/test_shards.py", "tests/test_damaged_inputs.py", "tests/test_compare.py"]

# module -> its fast tests (in-process; see the docstring)
MODULES: dict[str, list[str]] = {
    "pytest_gpuenergy/meter/integrate.py": _METER,
    "pytest_gpuenergy/meter/lattice.py": _METER,
    "pytest_gpuenergy/meter/recorder.py": [*_METER, "tests/test_sparse_reads.py"],   # reading one tick in eight
    "pytest_gpuenergy/meter/region.py": _METER,
    "pytest_gpuenergy/meter/energy_meter.py": [*_METER, "tests/test_phases.py", "tests/test_watch.py",
                                               "tests/test_op_classes.py"],
    "pytest_gpuenergy/meter/results.py": [*_METER, "tests/test_phases.py", "tests/test_op_classes.py",   # phases, classes
                                          "tests/test_domains.py"],                                      # and per_domain
    "pytest_gpuenergy/meter/distributed.py": ["tests/test_meter.py"],
    "pytest_gpuenergy/meter/attribution.py": ["tests/test_attribution_parts.py",  # the fit's parts, exact
                                              "tests/test_phase_design.py"],     # its PhaseTimeline lays out designs
    "pytest_gpuenergy/meter/phase_design.py": [],     # tests/test_phase_design.py (test_attribution.py's run the fit)
    "pytest_gpuenergy/meter/watch.py": [],          # tests/test_watch.py (its end-to-end test runs in a subprocess: unchanged code)
    "pytest_gpuenergy/meter/op_classes.py": [],     # tests/test_op_classes.py
    "pytest_gpuenergy/meter/domains.py": [],                                      # tests/test_domains.py (powercap's do not reach it)
    "pytest_gpuenergy/host/recorder.py": ["tests/test_powercap.py"],               # (not the meter recorder's own file)
    "pytest_gpuenergy/gpu/knob.py": ["tests/test_capping.py", "tests/test_clocks_knob.py"],
    "pytest_gpuenergy/gpu/capping.py": _KNOBS,
    "pytest_gpuenergy/gpu/journal.py": [*_KNOBS, "tests/test_clocks_knob.py", "tests/test_clock_journal.py",
                                        "tests/test_knob.py"],
    "pytest_gpuenergy/gpu/clocks.py": _CLOCKS,
    "pytest_gpuenergy/gpu/leftovers.py": ["tests/test_journal.py", "tests/test_packaging.py"],   # the look at a start
    "pytest_gpuenergy/gate/budgets.py": _GATE,
    # (with its own tests/test_budget_file.py, which checks word for word what test_existing_suite.py's
    # in-process budget tests do; that file's slow test runs pytest in subprocesses, on the unchanged
    # code, and passed the 120 s limit under load, which left mutmut with no mutant run)
    "pytest_gpuenergy/gate/budget_file.py": _GATE,
    # (its own tests/test_ci.py only: the gate's tests reach EnergyGate.finish through whole pytester
    # sessions of 10 to 45 s each, over 2 h for its 134 mutants on 2 loaded cores)
    "pytest_gpuenergy/gate/ci.py": [],
    # compare.py and records.py meet their own in-process tests (test_gate.py's pytester sessions reach
    # every function of them: over two minutes per survivor under load); records.py's own file is
    # tests/test_gate_records.py, and the comparison that builds its records is tested in test_compare.py
    "pytest_gpuenergy/gate/compare.py": ["tests/test_compare.py", "tests/test_shared_noise.py"],   # (and the suite's shared noise)
    "pytest_gpuenergy/gate/decide.py": [*_GATE, "tests/test_shared_noise.py"],
    "pytest_gpuenergy/gate/records.py": ["tests/test_compare.py", "tests/test_shared_noise.py"],
    "pytest_gpuenergy/gate/settings.py": _GATE,
    "pytest_gpuenergy/gate/shared_noise.py": [],    # tests/test_shared_noise.py
    "pytest_gpuenergy/gate/student_t.py": _GATE,
    "pytest_gpuenergy/gate/verdicts.py": _GATE,
    "pytest_gpuenergy/runs/ids.py": _RUNS,
    "pytest_gpuenergy/runs/provenance.py": _RUNS,
    # its own tests (tests/test_reader.py) and the store's round trips: _RUNS's end-to-end files reach
    # every reader function, and a survivor ran them all (130 s a mutant, 928 mutants: past 2 h on 2 cores)
    "pytest_gpuenergy/runs/reader.py": ["tests/test_storage.py"],
    "pytest_gpuenergy/runs/records.py": _RUNS,
    "pytest_gpuenergy/runs/shards.py": _RUNS,
    "pytest_gpuenergy/runs/store.py": _RUNS,
    "pytest_gpuenergy/runs/validation.py": _RUNS,
    # the plots' placement (place_axes) and the SVG's ids and size: tests/test_plot_layout.py draws every
    # placed plot kind, test_reports.py the pages
    "pytest_gpuenergy/reports/svg.py": ["tests/test_plot_layout.py", "tests/test_reports.py"],
}

# Own test files whose names the rule in tests_of does not give, and files it gives that are another module's
OWN_FILES = {"pytest_gpuenergy/gpu/clocks.py": ["tests/test_clocks_knob.py"]}
NOT_OWN_FILES = {"pytest_gpuenergy/host/recorder.py": {"tests/test_recorder.py"}}    # the meter's recorder's

STATUS_BY_EXIT_CODE = {0: "survived", 1: "killed", 3: "killed", 5: "no tests", 33: "no tests", 34: "skipped",
                       36: "timeout", -24: "timeout", 24: "timeout", 152: "timeout", 255: "timeout"}


class ModuleNotRun(Exception):
    """mutmut gave no verdict for a module (its tests fail without a mutant): said, and not saved."""


@dataclass(frozen=True)
class Survivor:
    function: str
    line: int
    before: str
    after: str

    def key(self) -> tuple[str, str, str]:
        return self.function, self.before.strip(), self.after.strip()


def main() -> int:
    parser = argparse.ArgumentParser(description="Mutation testing of the core modules with mutmut.")
    parser.add_argument("--module", action="append", choices=sorted(MODULES), metavar="PATH",
                        help="a module to mutate (repeatable); default: all of them")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 2, help="mutants tested at once")
    parser.add_argument("--table", action="store_true", help="print the results as a Markdown table and stop")
    parser.add_argument("--reclassify", action="store_true",
                        help="mark the saved survivors listed in mutation_equivalents/ as equivalent (no mutant is run) and stop")
    args = parser.parse_args()
    if args.reclassify:
        reclassify(load_equivalents())
        return 0
    if args.table:
        print(markdown_table(json.loads(RESULTS.read_text())))
        return 0
    modules = args.module or list(MODULES)
    equivalents = load_equivalents()
    for module in modules:
        started = time.monotonic()
        try:
            statuses, survivors, commit = run_module(module, args.jobs)
        except ModuleNotRun as exc:
            print(f"{module}: NOT RUN. {exc}", flush=True)
            continue
        entry = summarise(module, statuses, survivors, equivalents, time.monotonic() - started, commit)
        print(f"{module}: {entry['mutants']} mutants, {entry['killed']} killed, {entry['survived']} survived "
              f"({entry['equivalent']} equivalent), {entry['killed_share']:.1%} killed, "
              f"{entry['score']:.1%} of the non-equivalent, {entry['seconds']:.0f} s", flush=True)
        for survivor in entry["survivors"]:
            tag = "equivalent" if survivor["equivalent"] else "GAP"
            print(f"    {tag}: {survivor['function']} line {survivor['line']}: {survivor['before']}  ->  {survivor['after']}")
        save(module, entry)
    results = json.loads(RESULTS.read_text()) if RESULTS.exists() else {"modules": {}}
    short = [m for m, e in results["modules"].items() if e["killed_share"] < GOAL]
    print(f"modules under {GOAL:.0%} killed: {', '.join(short) or 'none'}")
    return 0


def reclassify(equivalents: dict[str, dict[tuple[str, str, str], str]]) -> None:
    """Equivalence is a judgement about a survivor, not a run: one listed after its module's run is
    marked in the saved results without running the module again (a survivor a new test kills needs
    the run)."""
    def mark(results: dict) -> None:
        for module, entry in results.get("modules", {}).items():
            known = equivalents.get(module, {})
            for survivor in entry["survivors"]:
                key = (survivor["function"], survivor["before"].strip(), survivor["after"].strip())
                survivor["equivalent"] = known.get(key, survivor["equivalent"])
            entry["equivalent"] = sum(1 for survivor in entry["survivors"] if survivor["equivalent"])
            entry["score"] = score(entry["killed"], entry["mutants"], entry["equivalent"])
    update_results(mark)


def markdown_table(results: dict) -> str:
    """The docs' table: per module its mutants, killed, equivalent survivors, gaps, share killed, time."""
    rows = ["| module | mutants | killed | survived: equivalent | survived: gap | killed | time (s) | date |",
            "|---|---:|---:|---:|---:|---:|---:|---|"]
    for module in MODULES:
        entry = results["modules"].get(module)
        if entry is None:
            rows.append(f"| `{module.removeprefix('pytest_gpuenergy/')}` | not run yet | | | | | | |")
            continue
        gaps = entry["survived"] - entry["equivalent"]
        rows.append(f"| `{module.removeprefix('pytest_gpuenergy/')}` | {entry['mutants']} | {entry['killed']} | "
                    f"{entry['equivalent']} | {gaps} | {entry['killed_share']:.1%} | {entry['seconds']:.0f} | {entry['date']} |")
    return "\n".join(rows)


def run_module(module: str, jobs: int) -> tuple[dict[str, str], dict[str, Survivor], str]:
    """mutmut over one module in a fresh copy of the project; its statuses and survivors."""
    work = WORK / re.sub(r"[^A-Za-z0-9]+", "-", module.removeprefix("pytest_gpuenergy/").removesuffix(".py"))
    shutil.rmtree(work, ignore_errors=True)
    commit = copy_project(work)
    with open(work / "pyproject.toml", "a") as config:
        config.write("\n[tool.mutmut]\n"
                     'source_paths = ["pytest_gpuenergy/"]\n'
                     f"only_mutate = [{json.dumps(module)}]\n"
                     # benchmarks/: tests/test_attribution.py takes its synthetic truth from phase_attribution.py
                     'also_copy = ["conftest.py", "reference_workloads/", "benchmarks/"]\n'
                     f"pytest_add_cli_args_test_selection = {json.dumps(tests_of(module))}\n"
                     f'pytest_add_cli_args = {json.dumps(["-p", "no:cacheprovider", "--timeout", str(TEST_TIMEOUT_S), *extra_args(module)])}\n')
    env = dict(os.environ, GPUENERGY_SIM_STATE=str(work / ".gpuenergy-sim"))
    done = subprocess.run([sys.executable, "-m", "mutmut", "run", "--max-children", str(jobs)], cwd=work, env=env,
                          capture_output=True, text=True)
    meta = work / "mutants" / f"{module}.meta"
    if not meta.exists():
        raise SystemExit(f"mutmut made no result for {module} (exit {done.returncode}):\n{done.stdout[-3000:]}\n"
                         f"{done.stderr[-3000:]}")
    codes = json.loads(meta.read_text())["exit_code_by_key"]
    statuses = {name: STATUS_BY_EXIT_CODE.get(code, "suspicious") for name, code in codes.items()}
    if statuses and not any(status in ("killed", "survived", "timeout") for status in statuses.values()):
        # mutmut ran no mutant: the module's tests failed on the unchanged code (it says so first)
        raise ModuleNotRun(f"mutmut tested no mutant of {module}: {done.stdout.strip()[-1500:]}")
    source = (work / module).read_text().splitlines()
    survivors = {name: describe(work, name, source, env) for name, status in statuses.items() if status == "survived"}
    return statuses, survivors, commit


# The meter's real-time cases (tests/test_meter.py, ids "in-real-time-..."): the recorder's thread against the
# host's clock, whose figures move with the host's load. A run's tests must pass on the unchanged code, and on a
# loaded host these did not (2026-11-27), so the run made no result. Only the recorder's own mutants need them.
REAL_TIME_CASES = "in-real-time"
NEEDS_REAL_TIME = {"pytest_gpuenergy/meter/recorder.py"}


def extra_args(module: str) -> list[str]:
    """pytest options for the module's run beyond its test files: the real-time cases left out where not needed."""
    return [] if module in NEEDS_REAL_TIME else ["-k", f"not {REAL_TIME_CASES}"]


def tests_of(module: str) -> list[str]:
    """The module's fast tests: those named in MODULES, and its own file where it exists:
    tests/test_<module>.py, or tests/test_<package>_<module>.py where two packages share a name."""
    path = Path(module)
    own = {f"tests/test_{path.stem}.py", f"tests/test_{path.parent.name}_{path.stem}.py", *OWN_FILES.get(module, ())}
    own -= NOT_OWN_FILES.get(module, set())
    return sorted(name for name in set(MODULES[module]) | own if (ROOT / name).exists())


def copy_project(work: Path) -> str:
    """The committed project (HEAD), not the working tree: a result belongs to a commit, and edits in
    progress (another session's, half-written) never decide whether a mutant survives. Returns the commit."""
    commit = subprocess.run(["git", "rev-parse", "--short=10", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                            check=True).stdout.strip()
    work.mkdir(parents=True, exist_ok=True)
    archive = subprocess.run(["git", "archive", "--format=tar", commit], cwd=ROOT, capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(work), "--exclude=benchmarks/results"], input=archive, check=True)
    (work / ".mutation-commit").write_text(commit)
    return commit


def describe(work: Path, name: str, source: list[str], env: dict[str, str]) -> Survivor:
    """Where a mutant is (the function, the line in the module) and what it changed."""
    shown = subprocess.run([sys.executable, "-m", "mutmut", "show", name], cwd=work, env=env,
                           capture_output=True, text=True).stdout.splitlines()
    removed = [line[1:] for line in shown if line.startswith("-") and not line.startswith("---")]
    added = [line[1:] for line in shown if line.startswith("+") and not line.startswith("+++")]
    function = name.rsplit(".", 1)[-1].split("__mutmut_", maxsplit=1)[0].removeprefix("x_").removeprefix("xǁ").replace("ǁ", ".")
    before, after = " ".join(s.strip() for s in removed), " ".join(s.strip() for s in added)
    line = next((i + 1 for i, text in enumerate(source) if removed and text.strip() == removed[0].strip()), 0)
    return Survivor(function, line, before, after)


def load_equivalents() -> dict[str, dict[tuple[str, str, str], str]]:
    """Equivalent mutants by module: (function, line before, line after) -> why no test can kill it."""
    found: dict[str, dict[tuple[str, str, str], str]] = {}
    entries = [e for path in sorted(EQUIVALENTS.glob("*.toml")) for e in tomllib.loads(path.read_text()).get("equivalent", [])]
    for entry in entries:
        key = (entry["function"], entry["before"].strip(), entry["after"].strip())
        found.setdefault(entry["module"], {})[key] = entry["reason"]
    return found


def summarise(module: str, statuses: dict[str, str], survivors: dict[str, Survivor],
              equivalents: dict[str, dict[tuple[str, str, str], str]], seconds: float, commit: str = "") -> dict:
    counts = {status: list(statuses.values()).count(status) for status in set(statuses.values())}
    killed = counts.get("killed", 0) + counts.get("timeout", 0)
    known = equivalents.get(module, {})
    listed = [{"function": s.function, "line": s.line, "before": s.before, "after": s.after,
               "equivalent": known.get(s.key())} for s in survivors.values()]
    listed.sort(key=lambda s: (s["line"], s["after"]))
    equivalent = sum(1 for s in listed if s["equivalent"])
    total = len(statuses)
    return {"tests": tests_of(module), "mutants": total, "killed": killed, "survived": counts.get("survived", 0),
            "no_tests": counts.get("no tests", 0), "other": total - killed - counts.get("survived", 0) - counts.get("no tests", 0),
            "equivalent": equivalent, "killed_share": round(killed / total, 4) if total else 1.0,
            "score": score(killed, total, equivalent),
            "seconds": round(seconds), "commit": commit, "survivors": listed}


def score(killed: int, mutants: int, equivalent: int) -> float:
    """The share killed of the mutants that could be killed (all of them but the equivalent ones)."""
    return round(killed / (mutants - equivalent), 4) if mutants > equivalent else 1.0


def machine() -> dict[str, str]:
    return {"machine": f"{platform.machine()}, {os.cpu_count()} CPUs, {platform.system()} {platform.release()}",
            "python": platform.python_version(), "date": time.strftime("%Y-%m-%d")}


def mutmut_version() -> str:
    from importlib.metadata import version

    return version("mutmut")


def save(module: str, entry: dict) -> dict:
    """The module's entry into mutation.json, whole or not at all."""
    def put(results: dict) -> None:
        results.setdefault("modules", {})[module] = entry | machine()
        results.update(tool=f"mutmut {mutmut_version()}", goal_killed_share=GOAL,
                       command="python benchmarks/mutation.py [--module PATH]")
        results["modules"] = dict(sorted(results["modules"].items()))
    return update_results(put)


def update_results(change: Callable[[dict], None]) -> dict:
    """Read, change and write mutation.json whole, one process at a time (runs for different modules
    may go on side by side)."""
    import fcntl

    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    with open(RESULTS.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        results = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
        change(results)
        temporary = RESULTS.with_suffix(".json.tmp")
        temporary.write_text(json.dumps(results, indent=1, sort_keys=True) + "\n")
        temporary.replace(RESULTS)
    RESULTS.with_suffix(".lock").unlink(missing_ok=True)
    return results


if __name__ == "__main__":
    sys.exit(main())
