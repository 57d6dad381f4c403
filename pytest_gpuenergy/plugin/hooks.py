"""The pytest glue: options, markers, fixtures and hooks. The logic lives in plain classes.

Registered through the ``pytest11`` entry point, so installing the package enables it.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import sys
import threading
from collections.abc import Generator, Iterator
from typing import Any

import pytest

from ..errors import BudgetError, CapSyntaxError, GpuEnergyError, PowerLimitWarning
from ..gate.budgets import Budget, budget_from_marker
from ..gate.ci import EnergyGate, GateOutcome
from ..gpu import signals
from ..gpu.capping import CapSpec, PowerCap, parse_caps
from ..gpu.placement import Placement, check_wanted
from ..meter import EnergyMeter
from ..runs.validation import bounded_number, shown
from ..sim.nvml import SEED_ENV
from ..sim.roofline import GPU_WORK_FIELDS, GpuWork
from . import clocks as plugin_clocks
from .clocks import gpu_clock_cap  # noqa: F401  (the fixture, registered with this plugin)
from .knobs import held_setting, marker_settings
from .options import MAX_MIN_TIME_S, MAX_REPEAT, parse_settings, pytest_addoption, resolve_gate_options, setting  # noqa: F401 (the hook)
from .session import EnergySession

SESSION_KEY = pytest.StashKey[EnergySession]()
_BUDGETS_KEY = pytest.StashKey[list]()
_SETTINGS_KEY = pytest.StashKey[dict]()
_SIGNALS_KEY = pytest.StashKey[dict]()
_GATE_KEY = pytest.StashKey[EnergyGate]()
_OUTCOME_KEY = pytest.StashKey[GateOutcome]()
_SKIPPED_KEY = pytest.StashKey[list]()
_SKIPPED_CAP = "energy.skipped_cap"      # user property on a case skipped for its cap (reaches xdist's controller)
_MARKER_ERRORS_KEY = pytest.StashKey[list]()     # gpu_caps markers found bad while generating tests
_WORKER_OUTPUT = "gpuenergy_cases"

_MARKERS = (
    plugin_clocks.MARKER,
    "gpu_caps(*caps): run this test at these power caps (watts, '60%', 'min', 'max', 'default') "
    "instead of --gpu-caps",
    "energy_budget(ets=None, edp=None, time=None, gpu=None, cap=None): fail the test when its measured "
    "ETS (J), EDP (J s) or time (s) exceeds the budget; the most specific matching budget applies",
    "energy(repeat=None, compute_bound=None, min_time=None, work=None, gpus=1): how to measure this test: calls of "
    "the test per case, how compute-bound it is (0..1, for the GPU simulator), shortest region in seconds, "
    "GPUs it runs on (a number or 'all')",
)
_ENERGY_KEYS = {"repeat", "compute_bound", "min_time", "work", "gpus"}


# -- lifetime --------------------------------------------------------------------------------------

@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config: pytest.Config) -> None:
    """Under torchrun every rank is a pytest session of its own, and each would write pytest's
    ``--junitxml`` file: ranks other than 0 write theirs beside it (``report.rank1.xml``), so that
    no two processes write one file and no rank's outcomes are lost. (Before pytest configures
    its junitxml plugin, which opens the file.)"""
    xml_path = getattr(config.option, "xmlpath", None)
    if not xml_path:
        return
    try:
        placement = Placement.from_environment(worker_id=getattr(config, "workerinput", {}).get("workerid"))
    except GpuEnergyError:
        return                      # a usage error at configure names the bad variable
    if placement.kind == "torchrun" and placement.rank:
        config.option.xmlpath = rank_path(xml_path, placement.rank)


def rank_path(path: str, rank: int) -> str:
    """``report.xml`` -> ``report.rank1.xml`` (``report`` -> ``report.rank1``)."""
    head, dot, suffix = path.rpartition(".")
    if not dot or "/" in suffix or os.sep in suffix:
        return f"{path}.rank{rank}"
    return f"{head}.rank{rank}.{suffix}"


def pytest_configure(config: pytest.Config) -> None:
    for marker in _MARKERS:
        config.addinivalue_line("markers", marker)
    options = parse_settings(config)
    gate_options = resolve_gate_options(config)
    _share_the_simulators_seed(config)
    worker = getattr(config, "workerinput", {}).get("workerid")
    try:
        placement = Placement.from_environment(worker_id=worker)
    except GpuEnergyError as exc:
        raise pytest.UsageError(str(exc)) from None
    session = EnergySession(options, placement)
    try:
        session.start(repair=not hasattr(config, "workerinput"))
    except GpuEnergyError as exc:
        if setting(config, "gpu_backend") or options.caps or options.clocks or options.gpus:
            raise pytest.UsageError(str(exc)) from None
        # Installed but not asked for anything (a default from GPUENERGY_BACKEND is no request
        # of this session): only tests that use the fixtures fail.
        session.unavailable = str(exc)
    for message in session.repairs:
        config.issue_config_time_warning(PowerLimitWarning(f"gpuenergy: a run died with a GPU capped: {message}"), stacklevel=2)
    config.stash[SESSION_KEY] = session
    if placement.reports:   # only the controller (torchrun: global rank 0) saves, compares and reports
        gate = EnergyGate(gate_options)
        if session.backend is not None:
            try:
                gate.check_baselines(session.backend.name, sorted({g.name for g in session.gpus}))
            except GpuEnergyError as exc:
                raise pytest.UsageError(f"--energy-compare: {exc}") from None
        config.stash[_GATE_KEY] = gate
        config.pluginmanager.register(_SkippedCaps(config), "gpuenergy-skipped-caps")
    _interrupt_on_termination(config)
    signals.announce_with(_terminal_writer(config))


def _terminal_writer(config: pytest.Config) -> Any:
    """Writes a line on the terminal even while pytest captures a test's output (or on stderr without one)."""
    def write(text: str) -> None:
        reporter = config.pluginmanager.get_plugin("terminalreporter")   # registered after this plugin's configure
        capture = config.pluginmanager.get_plugin("capturemanager")
        if reporter is None:
            print(text, file=sys.stderr, flush=True)
            return
        with capture.global_and_fixture_disabled() if capture is not None else contextlib.nullcontext():
            reporter.write_line(text, yellow=True, bold=True)

    return write


def _share_the_simulators_seed(config: pytest.Config) -> None:
    """One seed for the whole session: pytest-xdist workers inherit it from the controller, so the
    simulated GPUs draw the same noise in every worker (and the run document records it)."""
    if not hasattr(config, "workerinput") and not os.environ.get(SEED_ENV, "").strip():
        os.environ[SEED_ENV] = str(secrets.randbits(31))


def _interrupt_on_termination(config: pytest.Config) -> None:
    """Turn SIGTERM and SIGHUP into KeyboardInterrupt, so that fixtures tear down and caps come back.

    By default both kill the process on the spot, leaving a GPU capped until the journal is
    replayed. Only handlers nobody else installed are replaced; the old ones come back at the end.
    """
    if threading.current_thread() is not threading.main_thread():
        return
    previous = {}
    for name in ("SIGTERM", "SIGHUP"):
        number = getattr(signal, name, None)
        if number is not None and signal.getsignal(number) in (signal.SIG_DFL, None):
            previous[number] = signal.signal(number, _raise_interrupt)
    config.stash[_SIGNALS_KEY] = previous


def _raise_interrupt(signum: int, frame: Any) -> None:
    name = signal.Signals(signum).name
    if signals.is_stopping():   # raising again would abort the teardown that restores the limits
        signals.announce(f"gpuenergy: {name} received again: already stopping, after the GPUs' limits are restored")
        return
    raise KeyboardInterrupt(f"{name} received: pytest-gpuenergy restores the GPUs' limits and stops")


def pytest_keyboard_interrupt(excinfo: Any) -> None:
    """pytest stops: the teardown that follows restores the limits, and must not be interrupted again."""
    signals.set_stopping(True)


def pytest_unconfigure(config: pytest.Config) -> None:
    for number, handler in config.stash.get(_SIGNALS_KEY, {}).items():
        signal.signal(number, handler)
    session = config.stash.get(SESSION_KEY, None)
    if session is None:
        signals.set_stopping(False)
        return
    signals.set_stopping(True)      # the session ends anyway: a signal during these last restores waits for them
    try:
        problems = session.finish(repair=not hasattr(config, "workerinput"))
    finally:
        signals.set_stopping(False)
        signals.announce_with(None)
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    for repaired in session.end_repairs:
        _say(reporter, f"gpuenergy: repaired at the end of the session: {repaired}", yellow=True)
    for problem in problems:
        _say(reporter, f"gpuenergy: GPU LEFT AT A CHANGED POWER LIMIT: {problem}. Fix it with: gpuenergy restore",
             red=True, bold=True)


def _say(reporter: Any, message: str, **markup: bool) -> None:
    if reporter is not None:
        reporter.write_line(message, **markup)
    else:
        print(message)


def pytest_report_header(config: pytest.Config) -> list[str]:
    session = config.stash.get(SESSION_KEY, None)
    return session.header_lines() if session is not None else []


# -- collection ------------------------------------------------------------------------------------

def _marker_caps(node: Any) -> list[CapSpec] | None:
    return marker_settings(node, "gpu_caps", parse_caps, "cap", "150, '60%'")


@pytest.hookimpl(trylast=True)  # after @pytest.mark.parametrize, so the cap comes last in ids
def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    _power_params(metafunc)
    problem = plugin_clocks.clock_params(metafunc, metafunc.config.stash[SESSION_KEY].options.clocks)
    if problem is not None:
        metafunc.config.stash.setdefault(_MARKER_ERRORS_KEY, []).append(problem)


def _power_params(metafunc: pytest.Metafunc) -> None:
    if "gpu_power_cap" not in metafunc.fixturenames:
        return
    try:
        caps = _marker_caps(metafunc.definition)
    except CapSyntaxError as exc:   # a UsageError here would be a collection error with a traceback
        metafunc.config.stash.setdefault(_MARKER_ERRORS_KEY, []).append(f"{metafunc.definition.nodeid}: {exc}")
        return
    if caps is None:
        caps = list(metafunc.config.stash[SESSION_KEY].options.caps)
    if caps:
        metafunc.parametrize("gpu_power_cap", caps, indirect=True, ids=[c.label for c in caps])


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Validate every marker now, so a typo fails the run before any GPU is touched."""
    for problem in config.stash.get(_MARKER_ERRORS_KEY, [])[:1]:
        raise pytest.UsageError(problem)
    for item in items:
        try:
            item.stash[_BUDGETS_KEY] = [budget_from_marker(m.args, m.kwargs) for m in item.iter_markers("energy_budget")]
            item.stash[_SETTINGS_KEY] = _energy_settings(item)
        except (BudgetError, ValueError) as exc:
            raise pytest.UsageError(f"{item.nodeid}: {exc}") from None


def _energy_settings(item: pytest.Item) -> dict:
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
    if isinstance(work, GpuWork):
        return work
    if not isinstance(work, dict):
        raise ValueError(f"energy(work=) must be a dict of {', '.join(GPU_WORK_FIELDS)}, got {work!r}")
    unknown = sorted(set(work) - set(GPU_WORK_FIELDS))
    if unknown:
        raise ValueError(f"energy(work=) got unknown figure(s) {', '.join(map(str, unknown))}; "
                         f"allowed: {', '.join(GPU_WORK_FIELDS)}")
    return GpuWork(**work)


# -- fixtures --------------------------------------------------------------------------------------

@pytest.fixture
def _gpuenergy_lease(request: pytest.FixtureRequest) -> Iterator[None]:
    """Holds the test's GPUs for the whole test: one, or ``energy(gpus=N)`` (see ``EnergySession.lease``)."""
    session = request.config.stash[SESSION_KEY]
    wanted = request.node.stash.get(_SETTINGS_KEY, {}).get("gpus", 1)
    if session.backend is not None and wanted != "all" and wanted > len(session.gpus):
        pytest.skip(f"needs {wanted} GPUs; {len(session.gpus)} selected (--gpus, CUDA_VISIBLE_DEVICES)")
    lease = session.lease(wanted)
    try:
        lease.__enter__()
    except GpuEnergyError as exc:
        pytest.fail(str(exc), pytrace=False)
    try:
        yield
    finally:
        lease.__exit__(None, None, None)


@pytest.fixture
def gpu_power_cap(request: pytest.FixtureRequest, _gpuenergy_lease: None) -> Iterator[PowerCap]:
    """Applies this case's power cap to the selected GPUs and restores the previous limit after.

    Without ``--gpu-caps`` (or a ``gpu_caps`` marker) nothing is changed and the value describes
    the current limit.
    """
    session = request.config.stash[SESSION_KEY]
    spec: CapSpec | None = getattr(request, "param", None)
    yield from held_setting(request, session, session.capper(), spec, _SKIPPED_CAP,
                            lambda cap: setattr(session, "active_cap", cap))


@pytest.fixture
def energy_meter(request: pytest.FixtureRequest, _gpuenergy_lease: None) -> EnergyMeter:
    """Measures ETS, T and EDP of a block (``with energy_meter:``) or of ``measure(fn)``."""
    session = request.config.stash[SESSION_KEY]
    settings = request.node.stash.get(_SETTINGS_KEY, {})
    try:
        return session.meter(
            request.node.nodeid,
            compute_bound=settings.get("compute_bound"),
            min_time_s=settings.get("min_time"),
            work=settings.get("work"),
        )
    except GpuEnergyError as exc:
        pytest.fail(str(exc), pytrace=False)


# -- running ---------------------------------------------------------------------------------------

@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    """With repetitions, call a measuring test several times (fixtures are set up once)."""
    session = item.config.stash[SESSION_KEY]
    measures = "energy_meter" in getattr(item, "fixturenames", ())
    session.begin_call(item.nodeid)
    result = yield
    if measures:
        repeat = item.stash.get(_SETTINGS_KEY, {}).get("repeat") or session.options.repeat
        for _ in range(repeat - 1):
            session.begin_call(item.nodeid)
            item.runtest()
    return result


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """A signal that came while a fixture restored a limit stops the session once the whole teardown ran."""
    with signals.delivered_at_end():
        return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """A passed test that misses its energy budget fails, with one line per miss."""
    report = yield
    if report.when == "call" and report.passed:
        budgets: list[Budget] = item.stash.get(_BUDGETS_KEY, [])
        session = item.config.stash[SESSION_KEY]
        failures = session.budget_failures(item.nodeid, budgets)
        if failures:
            report.outcome = "failed"
            report.longrepr = "\n".join(failures)
        # junitxml writes the properties the item has when its teardown is reported
        item.user_properties.extend(session.junit_properties(item.nodeid))
    return report


# -- the end of the session: pytest-xdist workers hand their results to the controller --------------

def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    config = session.config
    energy = config.stash.get(SESSION_KEY, None)
    if energy is None:
        return
    if hasattr(config, "workerinput"):
        config.workeroutput[_WORKER_OUTPUT] = energy.export_cases()  # type: ignore[attr-defined]  # pytest-xdist sets it on workers
        return
    if not energy.placement.reports:      # torchrun: every rank holds the total; rank 0 saves it
        return
    gate = config.stash.get(_GATE_KEY, None)
    if gate is None or energy.backend is None:
        return
    from ..runs.provenance import collect_commit_info, collect_machine_info  # (only a session that measured needs them)

    outcome = gate.finish(
        [(case_id, record.merged) for case_id, record in sorted(energy.cases.items())],
        machine=collect_machine_info(energy.backend, energy.gpus),
        commit=collect_commit_info(config.rootpath),
        run_options=_run_options(config, energy),
    )
    config.stash[_OUTCOME_KEY] = outcome
    if outcome.failed and session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


class _SkippedCaps:
    """Remembers the cases skipped for their cap, on the controller (xdist workers' reports arrive there)."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if not report.skipped:
            return
        cap = next((value for key, value in report.user_properties if key in (_SKIPPED_CAP, plugin_clocks.SKIPPED_CLOCK)),
                   None)
        if cap is None:
            return
        longrepr = report.longrepr
        reason = longrepr[2] if isinstance(longrepr, tuple) and len(longrepr) == 3 else str(longrepr)
        from ..reports.digest import Skipped

        self.config.stash.setdefault(_SKIPPED_KEY, []).append(Skipped(report.nodeid, str(cap), str(reason)))


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: Any) -> None:
    """pytest-xdist: a worker finished; its measured cases join the controller's."""
    exported = getattr(node, "workeroutput", {}).get(_WORKER_OUTPUT)
    if exported:
        node.config.stash[SESSION_KEY].import_cases(exported)


def _run_options(config: pytest.Config, energy: EnergySession) -> dict:
    options = energy.options
    return {
        "gpu_backend": options.backend,
        "gpu_caps": [c.label for c in options.caps],
        "gpu_clocks": [c.label for c in options.clocks],
        "gpus": options.gpus,
        "energy_repeat": options.repeat,
        "energy_min_time": options.min_time_s,
        "args": [str(a) for a in config.invocation_params.args],
        "rootdir": str(config.rootpath),
        "skipped": [vars(item) for item in config.stash.get(_SKIPPED_KEY, [])],
        "simulator": energy.backend.sim_settings() if energy.backend is not None else None,
    }


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    """The comparison when there is one (it holds the results), else the results; both fit the width."""
    session = config.stash.get(SESSION_KEY, None)
    if session is None or not session.cases or not session.placement.reports:
        return
    from ..reports.digest import skipped_groups  # the reports' modules: only for a session that measured
    from ..reports.terminal import session_lines, tables_for, wrap

    terminalreporter.section("gpu energy")
    width = config.get_terminal_writer().fullwidth
    outcome = config.stash.get(_OUTCOME_KEY, None)
    skipped = config.stash.get(_SKIPPED_KEY, [])
    if outcome is not None and outcome.comparisons:
        lines = tables_for(outcome.comparisons, width, skipped)
    else:
        lines = session_lines([(case_id, record.merged) for case_id, record in sorted(session.cases.items())], width)
        for cap, reason, tests in skipped_groups(skipped):
            lines += wrap(f"skipped: cap {cap} for {len(tests)} test{'s' if len(tests) != 1 else ''}: {reason}", width)
    for text in outcome.lines if outcome is not None else []:
        lines += wrap(text, width)
    for line in lines:
        alarm = line.startswith("ENERGY REGRESSION")
        terminalreporter.write_line(line, red=alarm, bold=alarm)
    for error in outcome.errors if outcome is not None else []:
        # One line, never wrapped: a path or value in it stays whole for a user (or a script) to copy.
        terminalreporter.write_line(f"gpuenergy: error: {error}", red=True, bold=True)
