"""The ``gpuenergy`` command."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ..errors import GpuEnergyError
from ..fleet.cli import add_fleet_command
from ..gpu.specs import BACKEND_CHOICES, default_backend
from .budgets import add_budgets_command
from .compare import add_compare_commands
from .history import add_history_command
from .table import add_table_command
from .tune import add_tune_command, split_pytest_args

if TYPE_CHECKING:
    from ..gpu.device import Backend
    from ..gpu.journal import JournalEntry

# Each command imports what it runs (the GPUs' libraries, the journal, the comparison, the search):
# the parser, which every ``gpuenergy --help`` builds, imports none of it.


def _backend_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--gpu-backend", choices=BACKEND_CHOICES, default=None,
        help="auto (every library that finds a GPU: NVML, AMD SMI; else the simulator; default, or "
             "$GPUENERGY_BACKEND), nvml, amdsmi, sim",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="gpuenergy", description="GPU energy testing: inspect GPUs, repair limits, compare runs, tune caps.")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    info = commands.add_parser("info", help="each GPU: name, current, default, min and max power limit")
    _backend_argument(info)
    info.add_argument("--json", action="store_true", help="print a JSON list of objects instead of text")
    info.set_defaults(handler=cmd_info)

    restore = commands.add_parser("restore", help="put back power limits and SM clock locks that a killed run left changed")
    _backend_argument(restore)
    restore.add_argument("--force", action="store_true",
                         help="also restore GPUs whose capping process is still running")
    restore.set_defaults(handler=cmd_restore)

    add_compare_commands(commands)  # compare, runs: they live with the comparison logic
    add_budgets_command(commands)
    add_history_command(commands)   # history: energy over the commits, change points and trends
    add_table_command(commands)     # table: GPU models side by side, each at its default and best cap
    add_tune_command(commands)
    add_fleet_command(commands)     # fleet: the suite on every GPU model of a Ray cluster
    return parser


def gpu_rows(backend: Backend) -> list[dict]:
    """The rows of ``gpuenergy info --json`` (the keys scripts rely on first, as the README documents them; extras after them)."""
    from ..gpu.clocks_info import clock_fields

    rows = []
    for gpu in backend.visible_gpus:
        limits = gpu.limits()
        rows.append({
            "index": gpu.index,
            "name": gpu.name,
            "uuid": gpu.uuid,
            "backend": gpu.backend,
            "vendor": gpu.vendor,          # nvidia, amd
            "library": gpu.library,        # nvml, amdsmi: the library the plugin drives (the simulator standing in)
            "current_limit_w": limits.current_mw / 1000,
            "default_limit_w": limits.default_mw / 1000,
            "min_limit_w": limits.min_mw / 1000,
            "max_limit_w": limits.max_mw / 1000,
            "enforced_limit_w": limits.enforced_mw / 1000,
            "simulated": gpu.simulated,
            "driver": backend.driver_versions.get(gpu.library, backend.driver_version),
            "unmeasurable_reason": gpu.unmeasurable_reason(),   # null, or why the meter refuses it (MIG, a second die)
            **clock_fields(gpu),
        })
    return rows


def cmd_info(args: argparse.Namespace) -> int:
    from ..gpu.clocks_info import clock_line
    from ..gpu.device import open_backend

    backend = open_backend(args.gpu_backend or default_backend())
    try:
        rows = gpu_rows(backend)
        pending = _pending_entries(backend)
    finally:
        backend.close()
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    print(f"backend {backend.name}: {backend.label}")
    for row in rows:
        print(
            f"GPU {row['index']}  {row['name']}  {row['uuid']}  ({row['vendor']}, {row['library']})\n"
            f"      limit {row['current_limit_w']:g} W (enforced {row['enforced_limit_w']:g} W), "
            f"default {row['default_limit_w']:g} W, range {row['min_limit_w']:g}-{row['max_limit_w']:g} W\n"
            f"      {clock_line(row)}"
            + (f"\n      not measured: it {row['unmeasurable_reason']}" if row["unmeasurable_reason"] else "")
        )
    for entry in pending:
        print(f"journal: {entry.describe()} (repair with: gpuenergy restore)")
    return 0


def _pending_entries(backend: Backend) -> list[JournalEntry[Any]]:
    """The journals' entries; a damaged journal is a warning here: the GPUs' limits are what to look at then."""
    from ..gpu.journal import journals_for

    found = []
    for journal in journals_for(backend):
        try:
            found += journal.entries()
        except GpuEnergyError as exc:
            print(f"gpuenergy info: warning: {exc}", file=sys.stderr)
    return found


def cmd_restore(args: argparse.Namespace) -> int:
    from ..gpu.device import open_backend
    from ..gpu.journal import PROBLEM_ACTIONS, journals_for
    from ..gpu.signals import RestoreAbandoned

    backend = open_backend(args.gpu_backend or default_backend())
    try:
        outcomes = [outcome for journal in journals_for(backend)
                    for outcome in journal.repair(backend, include_live_owners=args.force, in_restore_command=True)]
    except RestoreAbandoned:
        return 130          # a second signal: what is left and its fix were said when it stopped
    finally:
        backend.close()
    if not outcomes:
        print("nothing to restore: no power limit or clock lock changed by pytest-gpuenergy is pending")
        return 0
    for outcome in outcomes:
        print(f"{outcome.action}: {outcome.message}")
    return 1 if any(o.action in PROBLEM_ACTIONS for o in outcomes) else 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    own, pytest_args = split_pytest_args(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(own)
    args.pytest_args = pytest_args
    try:
        return args.handler(args)
    except GpuEnergyError as exc:      # also a damaged or untrusted journal entry
        print(f"gpuenergy {args.command}: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
