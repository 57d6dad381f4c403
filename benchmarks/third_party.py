"""Third-party projects' own test suites, with the plugin installed and without it (``-p no:gpuenergy``).

    python benchmarks/third_party.py [--quick] [--runs N] [--cache DIR]

The plugin is enabled in every pytest session of an environment it is installed in, so it must
leave a suite that never uses it exactly as it was: the same outcome for every test, and little
time. Four projects, chosen for what trips plugins, each from its source distribution on PyPI
(pinned, so the figures repeat):

* **pluggy 1.6.0**: ``filterwarnings = error`` (any warning the plugin issued would fail tests);
* **attrs 26.1.0**: ``--strict-markers --strict-config``, ``--import-mode=importlib``; about 1,400
  CPU-bound tests (hypothesis): the suite on which the plugin's cost is measured;
* **pebble 5.2.3**: multiprocessing: process pools that fork, time out and terminate their
  workers (the files with ``fork`` in their name; ``--quick``: the pool's only);
* **jinja2 3.1.6**: a plain application-style suite (784 tests, 704 distinct ids; parametrised fixtures), with
  ``filterwarnings = error`` too (its two async files need trio: left out).

Each suite runs in this environment with its own package first on ``sys.path``, alternately with
the plugin and without it (ABBA...), ``--runs`` times each (default 3, ``--quick`` 1); the compatibility
plugins of the dev install (randomly, asyncio, benchmark) are off in both, so the order is the
project's own. What is compared: every test's outcome (``-rA`` lines), and the median wall time.
Pebble's tests wait on timeouts and sleeps: its wall time says little about the plugin's cost.
Those sessions do not use the plugin: nothing touches a GPU.

Then each suite runs once more **measured**, as a team would measure the suite it has:
``--energy-all --gpu-caps=60%,100%`` on the simulated GPU (figures simulated, not kept). Every
test then runs once per cap (a ``unittest.TestCase`` method, which pytest cannot parametrise, once
at the current limit: pebble's are), and each must end as it did without the plugin (``test_x[60%]``
and ``test_x[100%]`` as ``test_x``). This found attrs' Hypothesis methods failing at their second cap
(2026-11-28).
"""

from __future__ import annotations

import re
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import _common as common

NAME = "third_party"
QUIET_GOAL = 0.03        # the plugin may cost a suite that does not use it at most 3 % of its wall time
_OUTCOME_LINE = re.compile(r"^(PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS) (\S+)")
_OFF = [*common.DEV_PLUGINS_OFF, "-p", "no:cacheprovider"]


@dataclass(frozen=True)
class Project:
    name: str
    version: str
    source: str            # the folder put first on sys.path
    tests: tuple[str, ...]
    quick_tests: tuple[str, ...]
    why: str


PROJECTS = (
    Project("pluggy", "1.6.0", "src", ("testing",), ("testing",), "filterwarnings = error"),
    Project("attrs", "26.1.0", "src", ("tests",), ("tests",), "--strict-markers --strict-config, importlib imports"),
    Project("pebble", "5.2.3", ".", ("test/test_process_pool_fork.py", "test/test_concurrent_process_fork.py",
                                     "test/test_asynchronous_process_fork.py"),
            ("test/test_process_pool_fork.py",), "multiprocessing: fork, timeouts, terminate"),
    # (its two async test files need trio, which this environment does not install)
    Project("jinja2", "3.1.6", "src", ("tests", "--ignore=tests/test_async.py", "--ignore=tests/test_async_filters.py"),
            ("tests", "--ignore=tests/test_async.py", "--ignore=tests/test_async_filters.py"),
            "filterwarnings = error; fixtures with params; a template engine's 784 tests"),
)


def fetch(project: Project, cache: Path) -> Path:
    """The project's source distribution from PyPI, unpacked into ``cache`` (once)."""
    folder = cache / f"{project.name}-{project.version}"
    if folder.is_dir():
        return folder
    cache.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--no-binary", ":all:",
                    "--dest", str(cache), f"{project.name}=={project.version}"], check=True)
    archive = next(cache.glob(f"{project.name}-{project.version}.tar.gz"))
    with tarfile.open(archive) as tar:
        tar.extractall(cache, filter="data")
    return folder


MEASURED = ("--energy-all", "--gpu-caps=60%,100%")
_CAP_ID = re.compile(r"(?:\[|-)(?:60|100)%\]$")


def run_suite(folder: Path, project: Project, tests: tuple[str, ...], plugin: bool, state: Path,
              extra: tuple[str, ...] = ()) -> tuple[float, dict[str, str]]:
    """One run: wall seconds and every test's outcome."""
    env = {"PATH": "/usr/bin:/bin", "HOME": str(state), "GPUENERGY_SIM_STATE": str(state / "sim"),
           "PYTHONPATH": str((folder / project.source).resolve()), "PYTHONDONTWRITEBYTECODE": "1"}
    command = [sys.executable, "-m", "pytest", *tests, "-q", "-rA", *_OFF, *([] if plugin else ["-p", "no:gpuenergy"]), *extra]
    started = time.perf_counter()
    done = subprocess.run(command, cwd=folder, env=env, capture_output=True, text=True, timeout=1800)
    elapsed = time.perf_counter() - started
    outcomes = {m.group(2): m.group(1) for line in done.stdout.splitlines() if (m := _OUTCOME_LINE.match(line))}
    if not outcomes:
        raise SystemExit(f"{project.name}: no outcome read (exit {done.returncode}):\n{done.stdout[-3000:]}{done.stderr[-3000:]}")
    return elapsed, outcomes


def per_cap(outcomes: dict[str, str]) -> dict[str, list[str]]:
    """A measured run's outcomes by the test's id without its cap (``test_x[a-60%]`` is ``test_x[a]``);
    a test that pytest cannot parametrise (a ``unittest.TestCase`` method) runs once, with no cap in
    its id. Skips that ``-rA`` groups by place (``SKIPPED [2] file.py:12``) name no test and are left out."""
    found: dict[str, list[str]] = {}
    for test, outcome in outcomes.items():
        if test.startswith("["):
            continue
        plain = _CAP_ID.sub(lambda m: "]" if m.group(0).startswith("-") else "", test)
        found.setdefault(plain, []).append(outcome if plain != test else f"{outcome} (once)")
    return found


def measured_differences(measured: dict[str, str], without: dict[str, str]) -> list[str]:
    """The tests that did not end at both caps (or once, where run once) as they ended without the plugin."""
    caps = per_cap(measured)
    tests = set(caps) | {t for t in without if not t.startswith("[")}
    expected = {t: [f"{without.get(t)} (once)"] if caps.get(t, [""])[0].endswith("(once)") else [without.get(t)] * 2
                for t in tests}
    return sorted(t for t in tests if caps.get(t, []) != expected[t])


def counts(outcomes: dict[str, str]) -> str:
    tally: dict[str, int] = {}
    for outcome in outcomes.values():
        tally[outcome] = tally.get(outcome, 0) + 1
    return ", ".join(f"{n} {k.lower()}" for k, n in sorted(tally.items()))


def main() -> None:
    p = common.parser(__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=None, help="runs with and without the plugin each (default 3, --quick 1)")
    p.add_argument("--cache", type=Path, default=Path(tempfile.gettempdir()) / "gpuenergy-third-party",
                   help="where the source distributions are kept between runs")
    args = p.parse_args()
    runs = args.runs or (1 if args.quick else 3)
    started = time.time()
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        for project in PROJECTS:
            folder = fetch(project, args.cache)
            tests = project.quick_tests if args.quick else project.tests
            timings: dict[bool, list[float]] = {True: [], False: []}
            seen: dict[bool, dict[str, str]] = {}
            for run in range(runs):
                for plugin in ((True, False) if run % 2 == 0 else (False, True)):   # ABBA: a slow spell hits both
                    elapsed, outcomes = run_suite(folder, project, tests, plugin, Path(scratch))
                    timings[plugin].append(elapsed)
                    seen[plugin] = outcomes
            differ = sorted(t for t in set(seen[True]) | set(seen[False]) if seen[True].get(t) != seen[False].get(t))
            with_s, without_s = statistics.median(timings[True]), statistics.median(timings[False])
            measured_s, measured = run_suite(folder, project, tests, True, Path(scratch), MEASURED)
            measured_differ = measured_differences(measured, seen[False])
            rows.append({
                "project": f"{project.name} {project.version}", "why": project.why, "tests": len(seen[True]),
                "outcomes_with_plugin": counts(seen[True]), "outcomes_without": counts(seen[False]),
                "identical": not differ, "differing_tests": differ[:20],
                "wall_with_s": round(with_s, 2), "wall_without_s": round(without_s, 2),
                "overhead": with_s / without_s - 1, "runs": runs, "command_tests": list(tests),
                "measured_options": " ".join(MEASURED), "measured_cases": len(measured), "measured_wall_s": round(measured_s, 2),
                "measured_identical": not measured_differ, "measured_differing_tests": measured_differ[:20],
            })
    common.print_table(
        ["project", "tests", "outcomes (with = without)", "identical", "with s", "without s", "cost"],
        [[r["project"], r["tests"], r["outcomes_with_plugin"], r["identical"], r["wall_with_s"], r["wall_without_s"],
          f"{r['overhead']:+.1%}"] for r in rows],
        title="Third-party suites with and without the plugin (no GPU used)")
    common.print_table(
        ["project", "cases", "each as without the plugin", "s", "differing (first)"],
        [[r["project"], r["measured_cases"], r["measured_identical"], r["measured_wall_s"],
          ", ".join(r["measured_differing_tests"][:2])] for r in rows],
        title=f"The same suites measured: {' '.join(MEASURED)} (simulated GPU)")
    cpu_bound = next(r for r in rows if r["project"].startswith("attrs"))
    goal = {"goal": "plugin_quiet_overhead", "figure": cpu_bound["overhead"], "target": QUIET_GOAL,
            "met": cpu_bound["overhead"] <= QUIET_GOAL and all(r["identical"] for r in rows),
            "measured_on": cpu_bound["project"]}
    print(f"the plugin costs attrs' suite {cpu_bound['overhead']:+.1%} of its wall time (goal <= {QUIET_GOAL:.0%}); "
          f"outcomes identical in {sum(r['identical'] for r in rows)} of {len(rows)} suites")
    path = common.write_result(NAME, {"description": __doc__.splitlines()[0], "rows": rows, "goals": [goal]},
                               quick=args.quick, started=started, out_dir=args.out)
    print(f"wrote {path}")
    if not all(r["identical"] for r in rows):
        raise SystemExit("outcomes differ with the plugin installed: see differing_tests")
    if not all(r["measured_identical"] for r in rows):
        raise SystemExit(f"outcomes differ with {' '.join(MEASURED)}: see measured_differing_tests")


if __name__ == "__main__":
    main()
