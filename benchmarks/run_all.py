"""Run every benchmark, one after the other, and print a summary of the goals.

    python benchmarks/run_all.py --quick     # every goal's figure, about 5 minutes on an idle 2-core machine
    python benchmarks/run_all.py             # the full runs (more regions, lengths, trials and cases; much longer)

Each script prints its own tables and writes ``benchmarks/results/<name>[-quick].json``; a script
with goals lists them in that document's top-level ``goals`` (``_common.Goal``: ``goal``,
``figure``, ``target``, ``met``, ``simulated``). This one reads those lists back, whatever the
benchmark, prints a table of the goals and writes it to ``benchmarks/results/goals[-quick].json``:
a list of objects with ``goal``, ``figure``, ``target``, ``met``, ``simulated`` and ``source`` (the
result file and when it ran). The goals the project tracks (``EXPECTED``) are always listed: one
without a figure (its script is missing or failed, or its result has no such goal) is not met, and
says why (``reason``). A goal whose benchmark was not run (``--only``) takes its figure from that
benchmark's last result file; one whose benchmark failed in this run takes none.

The benchmarks that time something run one at a time: each one's timing would disturb another's.
Those whose figures do not depend on the host's load (``LOAD_FREE``: the simulator's virtual clock,
Monte Carlo on seeded samples, the CPU seconds of one process) run side by side before them. Each benchmark's wall and CPU seconds
are printed at the end: on a busy host the CPU seconds say more about its time on an idle one.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import _common as common
from _common import Goal

BENCH_DIR = Path(__file__).resolve().parent
SCRIPTS = ("meter_overhead", "meter_accuracy", "detection_power", "energy_all_overhead", "phase_marks_overhead",
           "tune_accuracy", "suite_time", "compare_scaling", "startup")

# Benchmarks whose figures do not depend on what else the host runs (the simulator's virtual clock,
# Monte Carlo on seeded samples, CPU seconds of one process): run_all runs them side by side, before
# the others, which time something in wall seconds and run one at a time.
LOAD_FREE = ("tune_accuracy", "detection_power", "compare_scaling")

# The goals the project tracks (issue 28), with the benchmark that gives each one's figure.
EXPECTED = {
    "meter_overhead_python": "meter_overhead",
    "meter_overhead_slow_reads": "meter_overhead",
    "detection_power_n5": "detection_power",
    "tune_within_5pct": "tune_accuracy",
    "energy_all_overhead": "energy_all_overhead",
    "phase_marks_overhead": "phase_marks_overhead",
}


def result_file(results: Path, name: str, quick: bool) -> Path:
    return results / f"{name}{'-quick' if quick else ''}.json"


def _load(results: Path, name: str, quick: bool) -> tuple[dict | None, str, str]:
    """A benchmark's result document (None where there is none or it cannot be read), its source
    text and, where it cannot be used, why."""
    path = result_file(results, name, quick)
    if not path.exists():
        return None, path.name, f"no {path.name}: run python benchmarks/{name}.py{' --quick' if quick else ''}"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        return None, path.name, f"{path.name} is not readable JSON ({error}): rerun benchmarks/{name}.py"
    if not isinstance(data, dict):
        return None, path.name, f"{path.name} is not a benchmark result (not a JSON object): rerun benchmarks/{name}.py"
    machine: dict[str, Any] = data["machine"] if isinstance(data.get("machine"), dict) else {}
    return data, f"{path.name} ({machine.get('date', 'date unknown')}, {data.get('wall_s', '?')} s)", ""


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def read_goal(row: Any, document: dict, source: str) -> Goal:
    """One row of a result's ``goals`` list; a row that breaks the format is a goal not met, saying why."""
    name = row.get("goal") if isinstance(row, dict) else None
    if not isinstance(name, str) or not name:
        return Goal(f"(unnamed goal in {source.split(' ', 1)[0]})", None, None, False, True, source=source,
                    reason=f"a goals entry without a name: {json.dumps(row)[:80]}")
    simulated = row.get("simulated", document.get("simulated"))
    figure, target, met = row.get("figure"), row.get("target"), row.get("met")
    problems = [f"{key} is {json.dumps(value)}, not a number" for key, value in (("figure", figure), ("target", target))
                if value is not None and not _number(value)]
    if not isinstance(met, bool):
        problems.append(f"met is {json.dumps(met)}, not true or false")
    if not isinstance(simulated, bool):
        problems.append("it does not say whether its figure is simulated")
    if problems:
        return Goal(name, None, target if _number(target) else None, False, True, source=source,
                    reason="; ".join(problems))
    text = row.get("text") if isinstance(row.get("text"), str) else ""
    if figure is None:
        given = row.get("reason") if isinstance(row.get("reason"), str) else ""
        return Goal(name, None, target, False, simulated, text, source, given or "the benchmark gave no figure")
    return Goal(name, float(figure), None if target is None else float(target), met, simulated, text, source)


def goals(results: Path, quick: bool, failed: Mapping[str, str] | None = None) -> list[Goal]:
    """Every goal of every benchmark's result, then each expected goal that has none (not met, with why).

    ``failed``: the benchmarks that failed in this run, with why: their result files (left from an
    earlier run) give no figure.
    """
    failed = failed or {}
    found: list[Goal] = []
    missing_reason: dict[str, str] = {}
    for name in SCRIPTS:
        data, source, why = _load(results, name, quick)
        if name in failed:
            earlier = [row.get("goal") for row in (data or {}).get("goals", []) if isinstance(row, dict)]
            for goal in dict.fromkeys([*earlier, *(g for g, n in EXPECTED.items() if n == name)]):
                if isinstance(goal, str):
                    found.append(Goal(goal, None, None, False, True, source="",
                                      reason=f"{name} failed in this run ({failed[name]})"))
            continue
        if data is None:
            missing_reason[name] = why
            continue
        rows = data.get("goals")
        file = result_file(results, name, quick).name
        if rows is None:
            missing_reason[name] = f"{file} lists no goals (written before benchmarks listed theirs): rerun benchmarks/{name}.py"
            continue
        if not isinstance(rows, list):
            missing_reason[name] = f"the goals of {file} are not a list: rerun benchmarks/{name}.py"
            continue
        found.extend(read_goal(row, data, source) for row in rows)
    named = {goal.goal for goal in found}
    for goal, name in EXPECTED.items():
        if goal not in named:
            found.append(Goal(goal, None, None, False, True, source="",
                              reason=missing_reason.get(name, f"{name}'s result has no goal {goal}")))
    order = list(EXPECTED)
    return sorted(found, key=lambda g: order.index(g.goal) if g.goal in order else len(order))


def other_lines(results: Path, quick: bool, failed: Mapping[str, str] | None = None) -> list[str]:
    """Figures without a target of their own: what the benchmarks say beside the goals (none from
    a benchmark that failed in this run: its result file is an earlier run's)."""
    def load(name: str) -> dict | None:
        return None if name in (failed or {}) else _load(results, name, quick)[0]

    lines = []
    accuracy = load("meter_accuracy")
    for s in (accuracy or {}).get("summary", []):
        lines.append(
            f"meter accuracy, {s['mode']} (simulated): {s['zero_j']} figures of 0 J, {s['above_max_power']} above the "
            f"GPU's maximum; bound holds the truth in {s['bound_holds_share']:.1%} of {s['regions']} regions; median "
            f"|error| from 1 s {s['median_abs_error_from_1s']:.2%}")
    suite = load("suite_time")
    if suite:
        lines.append(f"main job: the plugin adds {suite['goal']['plugin_share_of_workloads']:.1%} on top of the workloads")
    scaling = load("compare_scaling")
    if scaling:
        widest = max(scaling["rows"], key=lambda r: (r["cases"], r["cpu_s"]))
        lines.append(f"comparison: {widest['cases']} cases in {widest['cpu_s']:.1f} s of CPU, {widest['ratio_to_smallest']:.1f}x "
                     f"the CPU of {widest['cases_ratio']:.0f}x fewer cases (linear: about {widest['cases_ratio']:.0f}x)")
    startup = load("startup")
    if startup:
        lines.append(f"start-up: the plugin adds {1000 * startup['plugin_added_s']:.0f} ms to a pytest session that measures nothing")
    return lines


def write_goals(results: Path, quick: bool, found: list[Goal], wall_s: float) -> Path:
    """``goals[-quick].json``: a list of objects with goal, figure, target, met (and simulated, source, reason)."""
    path = results / f"goals{'-quick' if quick else ''}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    records = [{key: value for key, value in g.record().items() if key != "text"} for g in found]
    tmp.write_text(json.dumps(records, indent=2) + "\n", encoding="utf-8")
    tmp.replace(path)
    print(f"wrote {path} (this run took {wall_s:.0f} s)")
    return path


def print_goals(found: list[Goal], quick: bool) -> None:
    print(f"\n===== goals ({'quick' if quick else 'full'} runs; figures from the GPU simulator are simulated) =====")
    print(f"{'goal':<28} {'figure':>9} {'target':>8}  met  simulated")
    for goal in found:
        figure = "-" if goal.figure is None else f"{goal.figure:.4g}"
        target = "-" if goal.target is None else f"{goal.target:.4g}"
        print(f"{goal.goal:<28} {figure:>9} {target:>8}  {'yes' if goal.met else 'NO ':<4} {'yes' if goal.simulated else 'no'}")
    for goal in found:
        if goal.reason:
            print(f"  {goal.goal}: no figure: {goal.reason}")
        elif goal.text:
            print(f"  {goal.text}")


@dataclass(frozen=True)
class Ran:
    """One benchmark script's run: its exit status (None: not run), wall and CPU seconds, why it failed."""

    name: str
    code: int | None
    wall_s: float
    cpu_s: float                 # user + system of its whole process tree
    why: str


def start(name: str, quick: bool, out: Path, log: Any = None) -> subprocess.Popen | Ran:
    """Start one benchmark script (its output to ``log``, else to this one's), or say why it cannot run."""
    script = BENCH_DIR / f"{name}.py"
    if not script.exists():
        return Ran(name, None, 0.0, 0.0, f"benchmarks/{script.name} is missing")
    extra = ["--out", str(out)] if out != common.RESULTS_DIR else []
    return subprocess.Popen([sys.executable, str(script), *(["--quick"] if quick else []), *extra],
                            stdout=log, stderr=subprocess.STDOUT if log else None)


def finish(name: str, proc: subprocess.Popen, started: float) -> Ran:
    """Wait for a started script; its CPU seconds come from wait4 (its own and its waited children's)."""
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = code = os.waitstatus_to_exitcode(status)
    return Ran(name, code, time.time() - started, usage.ru_utime + usage.ru_stime, "" if code == 0 else f"exit {code}")


def run_each(names: list[str], quick: bool, out: Path) -> list[Ran]:
    """The load-free benchmarks side by side (their output shown as each ends), then the others one at a time."""
    ran = []
    together = [name for name in names if name in LOAD_FREE]
    if together:
        print(f"\n===== side by side: {', '.join(together)} (figures that do not depend on the host's load) =====",
              flush=True)
        with tempfile.TemporaryDirectory(prefix="gpuenergy-run-all-") as folder, contextlib.ExitStack() as files:
            logs = {name: files.enter_context(open(Path(folder) / f"{name}.log", "w+", encoding="utf-8"))
                    for name in together}
            t0 = time.time()
            procs = {name: start(name, quick, out, logs[name]) for name in together}
            for name, proc in procs.items():
                done = proc if isinstance(proc, Ran) else finish(name, proc, t0)
                logs[name].seek(0)
                print(f"\n===== {name} =====\n{logs[name].read()}", end="", flush=True)
                ran.append(report(done))
    for name in names:
        if name in LOAD_FREE:
            continue
        print(f"\n===== {name} =====", flush=True)
        t0 = time.time()
        proc = start(name, quick, out)
        ran.append(report(proc if isinstance(proc, Ran) else finish(name, proc, t0)))
    return ran


def report(done: Ran) -> Ran:
    if done.code is None:
        print(f"({done.name}: not run: {done.why})", flush=True)
    else:
        print(f"({done.name}: {done.wall_s:.0f} s, {done.cpu_s:.0f} s of CPU, exit {done.code})", flush=True)
    return done


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="the quick variant of every benchmark (about 5 minutes)")
    p.add_argument("--only", default=",".join(SCRIPTS), help=f"comma-separated subset of {', '.join(SCRIPTS)}")
    p.add_argument("--out", type=Path, default=common.RESULTS_DIR,
                   help=f"folder of the results, passed to each script (default {common.RESULTS_DIR})")
    args = p.parse_args(argv)
    chosen = [name for name in args.only.split(",") if name]
    unknown = sorted(set(chosen) - set(SCRIPTS))
    if unknown:
        p.error(f"unknown benchmark(s) {', '.join(unknown)}; choose from {', '.join(SCRIPTS)}")
    started = time.time()
    ran = run_each(chosen, args.quick, args.out)
    failed = {done.name: done.why for done in ran if done.why}
    timings = [done for done in ran if done.code is not None]
    found = goals(args.out, args.quick, failed)
    print_goals(found, args.quick)
    for line in other_lines(args.out, args.quick, failed):
        print(f"  {line}")
    wall_s = time.time() - started
    write_goals(args.out, args.quick, found, wall_s)
    if timings:
        print("time per benchmark (wall s / CPU s of its processes): "
              + ", ".join(f"{done.name} {done.wall_s:.0f}/{done.cpu_s:.0f}" for done in timings))
    print(f"\nall benchmarks: {wall_s:.0f} s" + (f"; FAILED: {', '.join(f'{n} ({w})' for n, w in failed.items())}"
                                                  if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
