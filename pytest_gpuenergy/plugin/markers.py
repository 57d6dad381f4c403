"""The plugin's markers, their descriptions for ``pytest --markers``, and the checks of their arguments.

Every marker is checked at collection, so that a typo fails the run before any GPU is touched; each
problem is a ``ValueError`` whose message the glue turns into a one-line usage error.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import pytest

from ..gpu.placement import check_wanted
from ..runs.validation import bounded_number, shown

if TYPE_CHECKING:
    from ..gate.budgets import Budget
    from ..sim.roofline import GpuWork

MAX_REPEAT = 10_000            # as --energy-repeat
MAX_MIN_TIME_S = 3600.0        # as --energy-min-time

MARKERS = (
    "gpu_clocks(*clocks): run this test at these SM clock caps (MHz, '50%' of the maximum SM clock, "
    "'max') instead of --gpu-clocks",
    "gpu_caps(*caps): run this test at these power caps (watts, '60%', 'min', 'max', 'default') "
    "instead of --gpu-caps",
    "energy_budget(ets=None, edp=None, time=None, gpu=None, cap=None, domain='gpu', phase=None): fail the test when "
    "its measured ETS (J), EDP (J s) or time (s) exceeds the budget; the most specific matching budget applies; "
    "domain= 'cpu', 'dram' or 'node' (GPUs, CPU and DRAM together) holds the host's or the node's energy "
    "(--energy-domains); phase= a phase marked with energy_meter.phase (or 'other') holds that phase's figures per call",
    "energy(repeat=None, compute_bound=None, min_time=None, work=None, gpus=1): how to measure this test: calls of "
    "the test per case, how compute-bound it is (0..1, for the GPU simulator), shortest region in seconds, "
    "GPUs it runs on (a number or 'all')",
)
_ENERGY_KEYS = {"repeat", "compute_bound", "min_time", "work", "gpus"}
_NAMES = ("gpu_clocks", "gpu_caps", "energy_budget", "energy")
NOTHING_MEASURED = ("energy budget set but nothing was measured: use the energy_meter fixture "
                    "(`with energy_meter:` or energy_meter.measure(fn))")


def budgets_of(item: pytest.Item) -> list[Budget]:
    """The item's ``energy_budget`` markers, nearest first (``BudgetError`` names a bad one)."""
    markers = list(item.iter_markers("energy_budget"))
    if not markers:
        return []
    from ..gate.budgets import budget_from_marker  # only for a suite that has budgets

    return [budget_from_marker(m.args, m.kwargs) for m in markers]


def energy_settings(item: pytest.Item) -> dict:
    """The ``energy(...)`` marker's settings for this item (empty without one)."""
    marker = item.get_closest_marker("energy")
    if marker is None:
        return {}
    if marker.args:
        raise ValueError(f"energy takes keyword arguments only ({', '.join(sorted(_ENERGY_KEYS))})")
    unknown = sorted(set(marker.kwargs) - _ENERGY_KEYS)
    if unknown:
        raise ValueError(f"energy got unknown argument(s) {', '.join(unknown)}; allowed: {', '.join(sorted(_ENERGY_KEYS))}")
    settings = dict(marker.kwargs)
    repeat = settings.get("repeat")
    if repeat is not None and (not isinstance(repeat, int) or bounded_number(repeat, low=1, high=MAX_REPEAT) is None):
        raise ValueError(f"energy(repeat=) must be a whole number >= 1 (at most {MAX_REPEAT}), got {shown(repeat)}")
    bound = settings.get("compute_bound")
    if bound is not None and bounded_number(bound, low=0, high=1) is None:
        raise ValueError(f"energy(compute_bound=) must be a number from 0 (memory-bound) to 1 (compute-bound), got {shown(bound)}")
    min_time = settings.get("min_time")
    if min_time is not None and bounded_number(min_time, low=0, high=MAX_MIN_TIME_S) is None:
        raise ValueError(f"energy(min_time=) must be a number of seconds >= 0 (at most {MAX_MIN_TIME_S:g}), got {shown(min_time)}")
    if settings.get("work") is not None:
        settings["work"] = _declared_work(settings["work"])
    if "gpus" in settings:
        settings["gpus"] = check_wanted(settings["gpus"])
    return settings


def _declared_work(work: Any) -> GpuWork:
    """``energy(work={"flops_tf32": 2e12, "bytes": 5e10, "kernels": 900})``: one call's GPU work."""
    from ..sim.roofline import GPU_WORK_FIELDS, GpuWork  # (the simulator's model: a test that declares work only)

    if isinstance(work, GpuWork):
        return work
    if not isinstance(work, dict):
        raise ValueError(f"energy(work=) must be a dict of {', '.join(GPU_WORK_FIELDS)}, got {work!r}")
    unknown = sorted(set(work) - set(GPU_WORK_FIELDS))
    if unknown:
        raise ValueError(f"energy(work=) got unknown figure(s) {', '.join(map(str, unknown))}; "
                         f"allowed: {', '.join(GPU_WORK_FIELDS)}")
    return GpuWork(**work)


def project_markers(config: pytest.Config) -> set[str]:
    """The plugin's marker names that the project also registers as its own (its ini ``markers``, a
    conftest's ``addinivalue_line``): a physics suite's ``energy`` marker, say. On a test the plugin
    measures only because of ``--energy-all`` such a marker is the project's, not the plugin's."""
    found = set()
    for line in config.getini("markers"):
        name = line.split(":", 1)[0].split("(", 1)[0].strip()
        if name in _NAMES and line not in MARKERS:
            found.add(name)
    return found


def own_marker_hint(marker: str) -> str:
    """What a usage error about a marker the plugin cannot read adds, on a test that takes none of its fixtures."""
    return (f"(a marker of your project's own named {marker}? register it in your pytest configuration, "
            f"markers = {marker}: ..., and the plugin leaves it to the tests that take none of its fixtures)")


# marker -> the tests whose marker of that name was the project's own (``checked_markers``)
KEPT_MARKERS_KEY = pytest.StashKey[dict]()
SETTINGS_KEY = pytest.StashKey[dict]()      # the test's energy(...) marker, checked
BUDGETS_KEY = pytest.StashKey[list]()       # the test's energy_budget markers, checked


def note_kept(item: pytest.Item, marker: str) -> None:
    """Remember that ``item``'s ``marker`` was the project's own, once per test function (not per cap)."""
    tests = item.config.stash.setdefault(KEPT_MARKERS_KEY, {}).setdefault(marker, [])
    test = item.nodeid.split("[", 1)[0]
    if test not in tests:
        tests.append(test)


def settings_of(item: pytest.Item) -> dict:
    """The test's ``energy(...)`` settings, as checked at collection (``checked_markers``)."""
    return item.stash.get(SETTINGS_KEY, {})


def checked_markers(item: pytest.Item, takes_fixture: Callable[[pytest.Item], bool], theirs: set[str], *,
                    note: bool, in_use: bool) -> tuple[list[Budget], dict]:
    """The item's budgets and ``energy`` settings, or a one-line usage error naming the bad marker.

    A marker the plugin cannot read is left alone where it cannot be the plugin's: in a session that
    uses the plugin nowhere (``in_use``: no ``--energy-all``, no test takes its fixtures), or, where
    the project registers a marker of that name itself (``theirs``), on a test that takes none of the
    plugin's fixtures (``note``: ``--energy-all`` measures it as if it had none, and the end of the
    session says so, ``KEPT_MARKERS_KEY``, ``reports.terminal.notice_lines``)."""
    found: list[Any] = []
    for marker, parse, default in (("energy_budget", budgets_of, []), ("energy", energy_settings, {})):
        try:
            found.append(parse(item))
        except ValueError as exc:         # (BudgetError is one)
            if not in_use:
                found.append(default)
                continue
            if takes_fixture(item):
                raise pytest.UsageError(f"{item.nodeid}: {exc}") from None
            if marker not in theirs:
                raise pytest.UsageError(f"{item.nodeid}: {exc} {own_marker_hint(marker)}") from None
            if note:
                note_kept(item, marker)
            found.append(default)
    return found[0], found[1]
