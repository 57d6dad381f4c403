"""``gpuenergy history [STORAGE]``: energy over the history of commits, its change points and trends.

Reads every saved run in the storage folder (``history/series.py``), finds per test, cap and GPU
model the steps that stand out from the noise between sessions and the slow drifts
(``history/changes.py``), and prints them first, with what the history cost. Exit 0 when it could
read the history (whatever it found), 2 on bad input: a missing or empty storage folder, an option
value it cannot use, a report it cannot write; each a one-line error. A damaged run file is skipped
with a note naming it (see ``series.py`` for why).
"""

from __future__ import annotations

import argparse
import configparser
import sys
from datetime import datetime, time, timezone
from pathlib import Path
from typing import Any, TextIO

import tomllib

from ..errors import SettingError, StorageError
from ..gate.settings import DEFAULT_CONFIDENCE, check_confidence
from ..metrics import METRICS
from ..runs import DEFAULT_STORAGE
from .compare import write_output

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover (Python 3.10)
    import tomli as tomllib

EXIT_OK, EXIT_BAD_INPUT = 0, 2
PRICE_KEY = "energy_price_per_kwh"
CARBON_KEY = "energy_carbon_g_per_kwh"


def add_history_command(subparsers: Any) -> None:
    """Add ``history`` to the ``gpuenergy`` parser's subcommands."""
    history = subparsers.add_parser(
        "history", help="energy over the history of commits: change points, trends, kWh, cost and CO2e",
        description="Read every saved run in STORAGE, order them by commit date (or run time where git cannot "
                    "tell), and report per test, cap and GPU model the commits where the energy stepped up or down "
                    "beyond the noise between sessions, and slow drifts. Exit 0: read (whatever was found); 2: bad input.",
    )
    history.add_argument("storage", nargs="?", type=Path, metavar="STORAGE",
                         help=f"the storage folder (default: the project's, {DEFAULT_STORAGE} in its rootdir)")
    history.add_argument("-k", "--test", action="append", default=[], metavar="TEXT",
                         help="only cases whose id contains TEXT (a plain substring or a node id, not an expression); "
                              "repeat for several")
    history.add_argument("--gpu", action="append", default=[], metavar="MODEL",
                         help="only GPU models whose name contains MODEL (any case), e.g. H100; repeat for several")
    history.add_argument("--cap", action="append", default=[], metavar="CAP",
                         help="only these cap labels as the runs name them (60%%, 150W); commas or repeats for several")
    history.add_argument("--backend", help="only runs of this backend (nvml, amdsmi or sim)")
    history.add_argument("--since", type=_date(end=False), metavar="DATE",
                         help="from this date on (YYYY-MM-DD or ISO 8601; UTC unless it says)")
    history.add_argument("--until", type=_date(end=True), metavar="DATE", help="up to this date (a day alone: all of it)")
    history.add_argument("--commits", type=_commit_range, metavar="FIRST..LAST",
                         help="only the commits from FIRST to LAST in the history's order, both kept (ids or prefixes; "
                              "FIRST.. or ..LAST leave one end open)")
    history.add_argument("--metric", choices=METRICS, default="ets", help="the figure to follow (default ets)")
    history.add_argument("--min-change", type=_percent, default=None, metavar="PCT",
                         help="smallest step or drift reported, in per cent (default 5%%)")
    history.add_argument("--confidence", type=_confidence, default=DEFAULT_CONFIDENCE,
                         help="confidence that a step stands out from the sessions' noise (default 0.99; also 99%%)")
    history.add_argument("--min-runs", type=_min_runs, default=None, metavar="N",
                         help="commits on each side of a step whose runs must agree (default 2; the runs of one commit "
                              "count once; 1 lets one session make a step)")
    history.add_argument("--price-per-kwh", type=_tariff("--price-per-kwh"), default=None, metavar="PRICE",
                         help=f"price of a kWh, for the cost (default: ini {PRICE_KEY})")
    history.add_argument("--carbon-g-per-kwh", type=_tariff("--carbon-g-per-kwh"), default=None, metavar="GRAMS",
                         help=f"the grid's g CO2e per kWh, for the emissions (default: ini {CARBON_KEY})")
    history.add_argument("--markdown", metavar="FILE", help="also write a Markdown report (- for standard output)")
    history.add_argument("--html", metavar="FILE", help="also write a self-contained HTML page with a plot per change")
    history.add_argument("--json", metavar="FILE", help="also write a JSON report (- for standard output)")
    history.set_defaults(handler=cmd_history)


# -- option values (argparse turns these errors into usage errors, exit 2) -----------------------------

def _date(*, end: bool):
    """A date or time as typed; a day alone as its first moment (``--since``) or its last (``--until``)."""
    def parse(text: str) -> datetime:
        try:
            moment = datetime.fromisoformat(text.strip())
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a date: give YYYY-MM-DD or an ISO 8601 time") from None
        if end and len(text.strip()) == 10:
            moment = datetime.combine(moment.date(), time.max)
        return moment.replace(tzinfo=timezone.utc) if moment.tzinfo is None else moment.astimezone(timezone.utc)
    return parse


def _commit_range(text: str) -> tuple[str | None, str | None]:
    first, dots, last = text.strip().partition("..")
    if not dots or not (first or last) or "." in first + last:
        raise argparse.ArgumentTypeError(f"{text!r}: give FIRST..LAST (commit ids or prefixes), FIRST.. or ..LAST")
    return (first.strip() or None, last.strip() or None)


def _percent(text: str) -> float:
    try:
        value = float(text.strip().removesuffix("%"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a percentage; give e.g. 5 or 5%") from None
    if not 0 <= value <= 1000:
        raise argparse.ArgumentTypeError(f"{text!r} must lie between 0 and 1000 %")
    return value


def _min_runs(text: str) -> int:
    if not text.strip().isdigit() or not 1 <= int(text) <= 100:
        raise argparse.ArgumentTypeError(f"{text!r}: give a whole number from 1 to 100")
    return int(text)


def _confidence(text: str) -> float:
    try:
        return check_confidence(text, source="--confidence")
    except SettingError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _tariff(name: str):
    def parse(text: str) -> float | None:
        from ..history.cost import tariff_value

        try:
            return tariff_value(text, name)
        except SettingError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
    return parse


# -- the command ------------------------------------------------------------------------------------

def cmd_history(args: argparse.Namespace, out: TextIO | None = None) -> int:
    from ..history.changes import DEFAULT_MIN_CHANGE_PCT, DEFAULT_MIN_RUNS, Settings
    from ..history.cost import Tariff, tariff_value
    from ..history.report import analyse, json_report, markdown_report, terminal_lines
    from ..history.series import Selection, read_history
    from ..runs.store import project_storage

    out = out or sys.stdout
    caps = tuple(c.strip() for item in args.cap for c in item.split(",") if c.strip())
    selection = Selection(tests=tuple(args.test), gpu_models=tuple(args.gpu), caps=caps, backend=args.backend,
                          since=args.since, until=args.until, commits=args.commits or (None, None), metric=args.metric)
    settings = Settings(confidence=args.confidence,
                        min_change_pct=DEFAULT_MIN_CHANGE_PCT if args.min_change is None else args.min_change,
                        min_runs=DEFAULT_MIN_RUNS if args.min_runs is None else args.min_runs)
    try:
        ini = project_ini(Path.cwd())
        tariff = Tariff(
            args.price_per_kwh if args.price_per_kwh is not None else tariff_value(ini.get(PRICE_KEY), PRICE_KEY),
            args.carbon_g_per_kwh if args.carbon_g_per_kwh is not None else tariff_value(ini.get(CARBON_KEY), CARBON_KEY),
        )
        history = read_history(args.storage or project_storage(), selection)
    except (StorageError, SettingError) as exc:
        return _error(exc)
    report = analyse(history, settings, tariff)
    writes = [(args.markdown, lambda: markdown_report(report)), (args.json, lambda: json_report(report)),
              (args.html, lambda: _html(report))]
    on_stdout = "-" in (args.markdown, args.json, args.html)
    if not on_stdout:                  # a report on stdout is the whole output: the rest goes to stderr
        for line in terminal_lines(report):
            print(line, file=out)
    for target, make in writes:
        if target:
            status = write_output("history", target, make(), out, sys.stderr if on_stdout else out)
            if status:
                return status
    return EXIT_OK


def _html(report: Any) -> str:
    from ..history.plots import html_report

    return html_report(report)


def _error(problem: object) -> int:
    print(f"gpuenergy history: error: {problem}", file=sys.stderr)
    return EXIT_BAD_INPUT


# -- the project's ini settings ----------------------------------------------------------------------

def project_ini(start: Path) -> dict[str, str]:
    """The pytest ini settings of the project ``start`` is in, as text: the first configuration file
    pytest itself would use, from ``start`` up (pytest.toml, pytest.ini, pyproject.toml with
    ``[tool.pytest.ini_options]``, tox.ini with ``[pytest]``, setup.cfg with ``[tool:pytest]``).
    A file that cannot be parsed is an error naming it."""
    for folder in (start.resolve(), *start.resolve().parents):
        for name in ("pytest.toml", ".pytest.toml", "pytest.ini", ".pytest.ini", "pyproject.toml", "tox.ini", "setup.cfg"):
            path = folder / name
            if not path.is_file():
                continue
            found = _ini_section(path)
            if found is not None:
                return found
    return {}


def _ini_section(path: Path) -> dict[str, str] | None:
    try:
        if path.suffix == ".toml":
            data = tomllib.loads(path.read_text(encoding="utf-8"))
            section = data.get("pytest") if path.name.endswith("pytest.toml") else data.get("tool", {}).get("pytest")
            if isinstance(section, dict) and isinstance(section.get("ini_options"), dict):
                section = section["ini_options"]          # [tool.pytest.ini_options]; else pytest 9's [tool.pytest]
            return None if not isinstance(section, dict) else {str(k): str(v) for k, v in section.items()}
        parser = configparser.ConfigParser(interpolation=None)
        parser.read_string(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError, configparser.Error) as exc:
        raise SettingError(f"{path}: cannot read the pytest configuration: {exc}") from None
    wanted = {"setup.cfg": "tool:pytest"}.get(path.name, "pytest")
    if path.name in ("pytest.ini", ".pytest.ini") and not parser.has_section(wanted):
        return {}           # pytest.ini is the configuration file even without its section
    return dict(parser.items(wanted)) if parser.has_section(wanted) else None
