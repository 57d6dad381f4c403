"""The ``gpuenergy tune`` subcommand: options, the table it prints, and its JSON and HTML files.

    gpuenergy tune reference_workloads --knob power --objective edp -- -k train

Everything after ``--`` goes to every pytest session. Per test and GPU model it prints the
optimal setting for each objective, its saving against the default, whether it is
distinguishable from its measured neighbours, and the settings it measured.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..fileio import folder_problem
from ..gate.settings import report_path_problem
from ..gpu.specs import BACKEND_CHOICES, default_backend
from ..tune.defaults import DEFAULT_MAX_SETTINGS, DEFAULT_STEP_W, DEFAULT_TUNE_STORAGE, KNOBS, OBJECTIVES
from .compare import write_output

if TYPE_CHECKING:
    from ..tune.runner import ModelTuning
    from ..tune.search import Found

# The search, its pytest sessions and the GPUs' libraries are imported by the command, not by its
# parser: every ``gpuenergy --help`` builds the parser.


def add_tune_command(commands: Any) -> None:
    tune = commands.add_parser(
        "tune", help="find the energy- or EDP-optimal power cap (or SM clock cap) per test in few runs",
        description="Run the selected tests as pytest sessions at power caps (or SM clock caps) chosen over the GPU's "
                    "whole allowed range and print, per test and GPU model, the optimal setting, its saving against "
                    "the default, whether it is distinguishable from its neighbours, and the settings measured. "
                    "Arguments after -- go to every pytest session.")
    tune.add_argument("tests", nargs="+", metavar="TESTS", help="what pytest should run (paths, node ids)")
    tune.add_argument("--knob", choices=KNOBS, default="power", help="power caps (default) or SM clock caps")
    tune.add_argument("--objective", choices=OBJECTIVES + ("both",), default="ets",
                      help="what to minimise: ets (energy, default), edp (energy x time), or both (a search each)")
    tune.add_argument("--max-settings", type=_whole, default=DEFAULT_MAX_SETTINGS,
                      help=f"settings measured per test and objective, at most (default {DEFAULT_MAX_SETTINGS})")
    tune.add_argument("--repeat", type=_whole, default=3, help="repetitions per setting (default 3; 2+ to tell neighbours apart)")
    tune.add_argument("--step", type=float, default=DEFAULT_STEP_W, help=f"power grid step in W (default {DEFAULT_STEP_W:g})")
    tune.add_argument("--storage", default=DEFAULT_TUNE_STORAGE,
                      help=f"where the sessions save their run documents (default {DEFAULT_TUNE_STORAGE}; not your baselines)")
    tune.add_argument("--gpu-devices", help="GPUs to tune, NVML indices or UUIDs (default all visible; one per model is tuned)")
    tune.add_argument("--gpu-backend", choices=BACKEND_CHOICES, default=None)
    tune.add_argument("--json", metavar="FILE", help="also write the results as JSON (- for standard output)")
    tune.add_argument("--html", metavar="FILE", help="also write an HTML report plotting the measured settings (power knob)")
    tune.set_defaults(handler=cmd_tune)


def _whole(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if not 1 <= value <= 1000:
        raise argparse.ArgumentTypeError(f"{text!r} must lie between 1 and 1000")
    return value


def split_pytest_args(argv: Sequence[str]) -> tuple[list[str], list[str]]:
    """``gpuenergy tune ... -- PYTEST ARGS``: what is the command's and what goes to pytest."""
    argv = list(argv)
    if "--" in argv:
        at = argv.index("--")
        return argv[:at], argv[at + 1:]
    return argv, []


# A node id with parameters: what pytest would not find once tune's setting is appended to the id.
_PARAMETRISED = re.compile(r"(?P<test>.+::[^\[\]:]+)\[(?P<params>[^\]]+)\]")
_KEYWORD_SAFE = re.compile(r"[\w:+\-.\[\]/]+")     # what pytest's -k accepts in one word


def select_parametrised(targets: Sequence[str], pytest_args: Sequence[str]) -> tuple[list[str], list[str]]:
    """``file.py::test[alexnet-train]`` becomes ``file.py::test`` and ``-k "test[alexnet-train-"``.

    Every session appends its setting to the test ids (``[alexnet-train-60%]``), so the id the user
    copied from a plain run names no test there; its test and the start of its id select the same
    cases. A ``ValueError`` explains what cannot be translated (with ``-k`` of the user's own, or
    parameters that ``-k`` cannot spell).
    """
    plain: list[str] = []
    starts: list[str] = []
    for target in targets:
        found = _PARAMETRISED.fullmatch(target)
        if found is None:
            plain.append(target)
            continue
        start = f"{found['test'].rsplit('::', 1)[1]}[{found['params']}-"
        if not _KEYWORD_SAFE.fullmatch(start):
            raise ValueError(f"{target}: tune appends its setting to each test id, so select this case with its test "
                             f"and -k after --, e.g. -- -k '<a word of its parameters>'")
        if found["test"] not in plain:
            plain.append(found["test"])
        starts.append(start)
    if not starts:
        return list(targets), list(pytest_args)
    if any(arg.startswith(("-k", "--keyword")) for arg in pytest_args):
        raise ValueError(f"{', '.join(t for t in targets if _PARAMETRISED.fullmatch(t))}: tune selects a parametrised "
                         f"case with -k (the setting is appended to its id); give the test without its parameters "
                         f"and put them in your -k expression")
    return plain, [*pytest_args, "-k", " or ".join(starts)]


def cmd_tune(args: argparse.Namespace) -> int:
    if args.step <= 0 or not math.isfinite(args.step):
        print("gpuenergy tune: error: --step must be a positive number of W", file=sys.stderr)
        return 2
    try:
        targets, pytest_args = select_parametrised(args.tests, getattr(args, "pytest_args", ()))
    except ValueError as exc:
        print(f"gpuenergy tune: error: {exc}", file=sys.stderr)
        return 2
    for flag, target in (("--json", args.json), ("--html", args.html)):
        usage = report_path_problem(flag, Path(target)) if target and target != "-" else None
        if usage is not None:        # said now, not after the sessions
            print(f"gpuenergy tune: error: {usage}", file=sys.stderr)
            return 2
    problem = folder_problem(Path(args.storage))
    if problem is not None:          # (every session saves its run there)
        print(f"gpuenergy tune: error: --storage: cannot save runs in {args.storage}: {problem}", file=sys.stderr)
        return 2
    from ..gpu.device import open_backend
    from ..tune.runner import TuneOptions, models_to_tune, tune_model

    objectives = OBJECTIVES if args.objective == "both" else (args.objective,)
    kind = args.gpu_backend or default_backend()
    backend = open_backend(kind)
    try:
        gpus = models_to_tune(backend, args.gpu_devices)
        options = TuneOptions(
            targets=tuple(targets), pytest_args=tuple(pytest_args), knob=args.knob,
            objectives=objectives, max_settings=args.max_settings, repeat=args.repeat,
            storage=Path(args.storage).resolve(), backend=backend.name, step_w=args.step,
        )
        results = [tune_model(options, gpu, backend, log=lambda text: print(text, file=sys.stderr)) for gpu in gpus]
    finally:
        backend.close()
    rows = [row for tuning in results for row in result_rows(tuning, objectives, options.confidence)]
    for tuning in results:
        print(f"\n{tuning.gpu_model} (GPU {tuning.gpu_index}): {options.knob}, {tuning.grid.range_text()}, "
              f"{tuning.sessions} pytest sessions, run documents in {options.storage}")
        print_table([r for r in rows if r["gpu_model"] == tuning.gpu_model])
    status = write_output("tune", args.json, json.dumps(rows, indent=2) + "\n", sys.stdout, sys.stderr) if args.json else 0
    if args.html:
        docs = [merged_document(t) for t in results if t.documents]
        if options.knob != "power":
            print("gpuenergy tune: the HTML report plots power caps; the clock settings are in the table and JSON",
                  file=sys.stderr)
        from ..reports.html import html_report  # (the writers: only when a report is asked for)
        status = write_output("tune", args.html, html_report(docs, title="gpuenergy tune"), sys.stdout, sys.stderr) or status
    return status


def merged_document(tuning: ModelTuning):
    """The tune's sessions on one model as one document (cases of every setting), for the HTML plots."""
    cases = tuple(entry for doc in tuning.documents for entry in doc.cases)
    return replace(tuning.documents[-1], cases=cases)


def result_rows(tuning: ModelTuning, objectives: Sequence[str], confidence: float) -> list[dict[str, Any]]:
    grid = tuning.grid
    rows = []
    for key, test in sorted(tuning.tests.items()):
        for metric in objectives:
            found = tuning.found(key, metric, confidence)
            rows.append({
                "gpu_model": tuning.gpu_model, "gpu_index": tuning.gpu_index, "knob": grid.knob, "test": key,
                "objective": metric, "setting": grid.values[found.index], "unit": grid.unit,
                "default_setting": grid.values[grid.default_index],
                "saving_pct": _finite(found.saving_pct), "time_change_pct": _finite(found.time_change_pct),
                "distinguishable": found.distinguishable, "uncertainty": uncertainty_text(found, tuning),
                "edge": edge(found, tuning), "settings_measured": len(test.entries),
                "measured": {f"{grid.values[i]:g}": {"ets_j": e.summary.ets_j, "edp_js": e.summary.edp_js,
                                                     "time_s": e.summary.time_s, "n": e.summary.n}
                             for i, e in sorted(test.entries.items())},
                "simulated": any(e.simulated for e in test.entries.values()),
            })
    return rows


def edge(found: Found, tuning: ModelTuning) -> str | None:
    last = len(tuning.grid.values) - 1
    return "lowest" if found.index == 0 else ("highest" if found.index == last else None)


def uncertainty_text(found: Found, tuning: ModelTuning) -> str:
    grid = tuning.grid
    if found.distinguishable is None:
        return "not tested (use --repeat 2 or more)"
    ties = [n for n in found.neighbours if not n.worse]
    if not ties:
        text = "distinguishable from its measured neighbours"
    else:
        text = "not distinguishable from " + ", ".join(
            f"{grid.text(n.index)} ({n.change_pct:+.1f} %)" for n in ties)
    where = edge(found, tuning)
    if where is not None:
        text += f"; the GPU's {'lowest' if where == 'lowest' else 'highest'} setting"
    return text


def print_table(rows: Sequence[dict[str, Any]]) -> None:
    header = ("test", "objective", "optimum", "vs default", "T", "settings", "uncertainty")
    body = []
    for row in rows:
        saving = "-" if row["saving_pct"] is None else f"{-row['saving_pct']:+.1f} %"
        time_change = "-" if row["time_change_pct"] is None else f"{row['time_change_pct']:+.1f} %"
        body.append((row["test"].split("::")[-1], row["objective"].upper(), f"{row['setting']:g} {row['unit']}",
                     saving, time_change, str(row["settings_measured"]), row["uncertainty"]))
    widths = [max(len(h), *(len(r[i]) for r in body)) if body else len(h) for i, h in enumerate(header)]
    for line in [header, tuple("-" * w for w in widths), *body]:
        print("  ".join(cell.ljust(width) for cell, width in zip(line, widths)).rstrip())
    if rows and rows[0]["simulated"]:
        print("(simulated: figures from the GPU simulator, not measured on a real GPU)")


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None
