"""``gpuenergy budgets --from RUN.json [--margin 10%] [-o energy-budgets.toml]``: a budgets file from a
saved run, for a suite whose tests carry no budget markers.

The team's loop: save a run on the main branch (``pytest --energy-all --energy-save``), write the
budgets from it, commit the file, and let CI gate on it (``--energy-budgets=energy-budgets.toml``).
"""

from __future__ import annotations

import argparse
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from ..errors import BudgetError, GpuEnergyError
from ..fileio import atomic_write_text

DEFAULT_OUTPUT = "energy-budgets.toml"
# Tests this short vary from run to run by up to 10 % on a quiet machine and 30 % on a loaded one
# (600 cases of 5-8 ms under -n 2 beside two busy processes on 2 cores): a margin below this fails
# them at random (docs/reference/energy-all.md).
SHORT_TEST_S = 0.05
SHORT_TEST_MARGIN = 0.40


def add_budgets_command(commands: Any) -> None:
    budgets = commands.add_parser(
        "budgets", help="write a budgets file (TOML) from a saved run: each passed case's figures plus a margin",
        description="Write a budgets file from a saved run: per test, GPU model and cap, the run's ETS, EDP and T "
                    "plus --margin, never below the upper end of the meter's bound on the ETS. Apply it with "
                    "pytest --energy-budgets=FILE (ini energy_budgets); a test's energy_budget marker wins over it.")
    budgets.add_argument("--from", dest="source", required=True, metavar="RUN",
                         help="the run: a run document's path, a run id in --storage, or 'latest'")
    budgets.add_argument("--margin", type=_margin, default=0.10,
                         help="how far above the run's figure a budget lies: 10%% (default) or 0.1")
    budgets.add_argument("-o", "--output", type=Path, default=Path(DEFAULT_OUTPUT), metavar="FILE",
                         help=f"the file to write (default {DEFAULT_OUTPUT}; - for standard output)")
    budgets.add_argument("--storage", type=Path, default=None, metavar="DIR",
                         help="where run ids are looked up (default: the project's storage folder)")
    budgets.set_defaults(handler=cmd_budgets)


def _margin(text: str) -> float:
    """``10%`` or ``0.1`` -> 0.1; argparse turns the error into a usage error (exit 2)."""
    value = text.strip()
    try:
        share = float(value[:-1]) / 100 if value.endswith("%") else float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a margin: write 10% or 0.1") from None
    if not 0 <= share <= 10:
        raise argparse.ArgumentTypeError(f"{text!r}: a margin lies from 0 to 1000%")
    return share


def cmd_budgets(args: argparse.Namespace) -> int:
    from ..gate.budget_file import budget_file_text, budgets_from_run
    from ..runs.records import commit_text
    from ..runs.store import RunStore, project_storage

    store = RunStore(args.storage or project_storage())
    try:
        doc = store.resolve(args.source)
        entries = budgets_from_run(doc, args.margin)
    except (GpuEnergyError, BudgetError) as exc:
        print(f"gpuenergy budgets: error: {exc}", file=sys.stderr)
        return 2
    if not entries:
        print(f"gpuenergy budgets: error: run {doc.run_id} has no passed case to take budgets from", file=sys.stderr)
        return 2
    origin = "simulated" if doc.simulated else "measured"
    header = [
        "Energy budgets for pytest-gpuenergy: pytest --energy-budgets=FILE (or ini energy_budgets = FILE).",
        f"From run {doc.run_id} ({doc.gpu_model}, {origin}, {commit_text(doc.commit)}, {doc.created_at:%Y-%m-%d}),",
        f"written {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC by: gpuenergy budgets --from {args.source} --margin {args.margin:.0%}",
        "Each budget is the run's figure plus the margin, never below the upper end of the meter's bound.",
    ]
    text = budget_file_text(entries, header)
    note = _short_tests_note(doc, args.margin)
    if note is not None:
        print(note, file=sys.stderr)
    if str(args.output) == "-":
        sys.stdout.write(text)
        return 0
    try:
        atomic_write_text(args.output, text, overwrite=True)
    except OSError as exc:
        print(f"gpuenergy budgets: error: cannot write {args.output}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    print(f"wrote {len(entries)} budgets for {len({e['test'] for e in entries})} tests to {args.output}")
    return 0


def _short_tests_note(doc: Any, margin: float) -> str | None:
    """Where budgets for tests of a few ms get a margin their run-to-run spread passes: say so."""
    passed = [case for case in doc.cases if case.passed]
    short = sum(1 for case in passed if case.summary.time_s < SHORT_TEST_S)
    if not short or margin >= SHORT_TEST_MARGIN:
        return None
    return (f"gpuenergy budgets: note: {short} of the run's {len(passed)} passed cases took under "
            f"{SHORT_TEST_S * 1000:.0f} ms a call; such tests vary by up to 10 % between runs on a quiet machine and "
            f"30 % on a loaded one, so a margin of {margin:.0%} fails them at random: use --margin "
            f"{SHORT_TEST_MARGIN:.0%}, or measure them longer (energy_meter.measure)")
