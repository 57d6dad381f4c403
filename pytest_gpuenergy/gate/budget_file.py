"""Energy budgets kept in a file, for a suite whose tests carry no marker: written from a saved run
(``gpuenergy budgets --from RUN.json``), committed, applied with ``--energy-budgets=FILE``.

The file is TOML, one ``[[budget]]`` table per test, GPU model and cap::

    format = "pytest-gpuenergy-budgets"
    version = 2

    [[budget]]
    test = "tests/test_train.py::test_step[resnet]"     # the node id without the cap
    gpu = "NVIDIA H100 80GB HBM3"                       # the exact model, as run documents name it
    cap = "60%"                                         # as --gpu-caps wrote it (watts where none was set)
    ets_j = 12.3                                        # at least one of ets_j, edp_js, time_s
    edp_js = 4.41
    time_s = 0.358

A budget applies to a case of that test on that GPU model (exactly: a real model's budget never
gates its simulated twin) at a cap that resolves to the same limit, as an
``energy_budget(gpu=, cap=)`` marker would; a marker on the test wins over the file. Every problem
in a file is one line naming the file and the line.
"""

from __future__ import annotations

import math
import re
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import BudgetError, CapSyntaxError, SettingError
from ..gpu.specs import parse_cap
from ..runs.ids import test_key
from ..runs.validation import shown
from .budgets import MAX_BUDGET, Budget

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover (Python 3.10)
    import tomli as tomllib

FORMAT = "pytest-gpuenergy-budgets"
VERSION = 2        # version 1 is the reference workloads' own JSON (reference_workloads/budgets.json)
_FIGURES = ("ets_j", "edp_js", "time_s")
_KEYS = ("test", "gpu", "cap", *_FIGURES)
_TABLE = re.compile(r"^[ \t]*\[\[[ \t]*budget[ \t]*\]\]", re.MULTILINE)


@dataclass(frozen=True)
class FileBudget:
    """One ``[[budget]]`` of a file, with where it stands (``file:line``)."""

    test: str
    budget: Budget
    where: str


class BudgetFile:
    """A budgets file, checked line by line: ``budgets_for(test)`` gives a test's budgets."""

    def __init__(self, path: Path, entries: Sequence[FileBudget]) -> None:
        self.path = path
        self.entries = list(entries)
        self._by_test: dict[str, list[Budget]] = {}
        for entry in self.entries:
            self._by_test.setdefault(entry.test, []).append(entry.budget)

    def budgets_for(self, test: str) -> list[Budget]:
        return self._by_test.get(test, [])

    def unknown_tests(self, tests: Iterable[str], modules: Iterable[str]) -> list[FileBudget]:
        """The entries whose test this session did not collect although it collected the test's
        file: tests renamed or removed since the file was written (a ``-k`` selection that left a
        test out is no reason: pass the deselected tests too)."""
        known, collected = set(tests), set(modules)
        return [e for e in self.entries if e.test not in known and e.test.split("::", 1)[0] in collected]


def load_budget_file(path: Path) -> BudgetFile:
    """Read and check a budgets file; every problem is a ``SettingError`` naming the file and line."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise SettingError(f"{path}: cannot read the budgets file: {exc.strerror or exc}; write one with "
                           f"`gpuenergy budgets --from RUN.json -o {path}`") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise SettingError(f"{path}: not a TOML file: {exc}") from None
    lines = [text[: m.start()].count("\n") + 1 for m in _TABLE.finditer(text)]
    unknown = sorted(set(data) - {"format", "version", "budget"})
    if unknown:
        raise SettingError(f"{path}:{_line_of(text, unknown[0])}: unknown key {unknown[0]!r}; a budgets file has "
                           f"format, version and [[budget]] tables")
    if data.get("format") != FORMAT or data.get("version") != VERSION:
        raise SettingError(f"{path}: not a version {VERSION} budgets file (format = {FORMAT!r}, version = {VERSION} "
                           f"expected); write one with `gpuenergy budgets --from RUN.json`")
    tables = data.get("budget", [])
    if not isinstance(tables, list):
        raise SettingError(f"{path}: budget must be [[budget]] tables")
    entries: list[FileBudget] = []
    seen: dict[tuple[str, str | None, Any], str] = {}
    text_lines = text.splitlines()
    for index, table in enumerate(tables):
        start = lines[index] if index < len(lines) else 1
        end = lines[index + 1] if index + 1 < len(lines) else len(text_lines) + 1

        def at(key: str | None, start: int = start, end: int = end) -> str:
            """``path:line`` of ``key`` in this table (of the table's header without a key)."""
            for number in range(start, end):
                if key is not None and re.match(rf"\s*{re.escape(key)}\s*=", text_lines[number - 1]):
                    return f"{path}:{number}"
            return f"{path}:{start}"

        entry = _entry(table, at)
        key = (entry.test, entry.budget.gpu, entry.budget.cap)
        if key in seen:
            raise SettingError(f"{entry.where}: a second budget for {entry.test} on {entry.budget.gpu} at "
                               f"{entry.budget.cap.label if entry.budget.cap else 'any cap'} (the first is at {seen[key]})")
        seen[key] = entry.where
        entries.append(entry)
    return BudgetFile(path, entries)


def _entry(table: Any, at: Callable[[str | None], str]) -> FileBudget:
    """One ``[[budget]]`` checked; ``at(key)`` says where a key (or, for None, the table) stands."""
    if not isinstance(table, dict):
        raise SettingError(f"{at(None)}: a [[budget]] must be a table")
    unknown = sorted(set(table) - set(_KEYS))
    if unknown:
        raise SettingError(f"{at(unknown[0])}: unknown key {unknown[0]!r} in [[budget]]; allowed: {', '.join(_KEYS)}")
    for key in ("test", "gpu"):
        if not isinstance(table.get(key), str) or not table[key].strip():
            raise SettingError(f"{at(key if key in table else None)}: [[budget]] needs {key} = \"...\" (got {shown(table.get(key))})")
    figures = {}
    for key in _FIGURES:
        if key in table:
            value = table[key]
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= MAX_BUDGET \
                    or not math.isfinite(value):
                raise SettingError(f"{at(key)}: {key} must be a positive number, got {shown(value)}")
            figures[key] = float(value)
    if not figures:
        raise SettingError(f"{at(None)}: [[budget]] needs at least one of {', '.join(_FIGURES)}")
    cap = None
    if "cap" in table:
        try:
            cap = parse_cap(str(table["cap"]), source="cap")
        except CapSyntaxError as exc:
            raise SettingError(f"{at('cap')}: {exc}") from None
    where = at(None)
    budget = Budget(ets_j=figures.get("ets_j"), edp_js=figures.get("edp_js"), time_s=figures.get("time_s"),
                    gpu=table["gpu"], exact_gpu=True, cap=cap, source=where)
    return FileBudget(table["test"], budget, where)


def _line_of(text: str, key: str) -> int:
    match = re.search(rf"^\s*{re.escape(key)}\s*=", text, re.MULTILINE)
    return text[: match.start()].count("\n") + 1 if match else 1


# -- writing one from a run ------------------------------------------------------------------------------

def budgets_from_run(doc: Any, margin: float) -> list[dict[str, Any]]:
    """One budget per passed case and GPU of a run document: ETS and T plus ``margin`` (0.1: 10 %),
    EDP (their product) plus the margin of both, ``(1 + margin)**2``; the ETS never below the upper
    end of the meter's bound on it (a region's figure is only as exact as its bound: a budget below
    the bound's top could fail the very run it came from)."""
    if not 0 <= margin <= 10:
        raise BudgetError(f"--margin={margin:g}: a margin is a share from 0 to 10 (0.1 or 10%)")
    found: dict[tuple[str, str, str], dict[str, Any]] = {}
    for case in doc.cases:
        if not case.passed:
            continue
        summary = case.summary
        cap = case.cap if case.cap != "current" else f"{case.limit_enforced_w:g}W"
        test = test_key(case.case_id, case.cap, case.clock_cap)
        high = summary.ets_high_j if summary.ets_high_j is not None else summary.ets_j
        entry = {"test": test, "gpu": case.gpu_name, "cap": cap,
                 "ets_j": _round_up(max(summary.ets_j * (1 + margin), high)),
                 "edp_js": _round_up(max(summary.edp_js * (1 + margin) ** 2, high * summary.time_s * (1 + margin))),
                 "time_s": _round_up(summary.time_s * (1 + margin))}
        key = (test, case.gpu_name, cap)
        previous = found.get(key)
        if previous is not None:        # two GPUs of one case, or a clock cap folded away: the larger
            entry = {k: max(v, previous[k]) if k in _FIGURES else v for k, v in entry.items()}
        found[key] = entry
    return [found[key] for key in sorted(found)]


def budget_file_text(entries: Sequence[dict[str, Any]], header: Sequence[str]) -> str:
    """The TOML text of a budgets file (``header``: comment lines, what it came from)."""
    lines = [f"# {line}" for line in header] + ["", f'format = "{FORMAT}"', f"version = {VERSION}"]
    for entry in entries:
        lines += ["", "[[budget]]"]
        lines += [f"{key} = {_toml(entry[key])}" for key in _KEYS if key in entry]
    return "\n".join(lines) + "\n"


def _toml(value: Any) -> str:
    if isinstance(value, str):
        escaped = value.replace("\\", "\\\\").replace('"', '\\"')
        return f'"{escaped}"'
    return repr(float(value))


def _round_up(value: float) -> float:
    """Four significant figures, rounded up (a budget never below what it was computed as)."""
    if value <= 0 or not math.isfinite(value):
        return value
    digits = 3 - math.floor(math.log10(value))

    def up(steps: float) -> float:
        if digits >= 0:
            return (math.ceil(value * 10**digits - 1e-9) + steps) / 10**digits
        return float((math.ceil(value / 10**-digits - 1e-9) + steps) * 10**-digits)

    # A value a hair above a round figure (15.280000000000001: float noise) rounds to it, unless that
    # would put the budget below the value itself: then one step up (15.29).
    rounded = up(0)
    return rounded if rounded >= value else up(1)
