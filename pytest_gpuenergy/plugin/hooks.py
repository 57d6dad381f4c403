"""The pytest glue: options, markers, fixtures and hooks. The logic lives in plain classes.

Registered through the ``pytest11`` entry point, so installing the package enables it in every
project on the machine, most of which never ask it for anything. So it is quiet where unused: its
import and ``pytest_configure`` parse the options and load nothing that talks to a GPU; the GPUs (or
the simulator's state) are opened only when the session asks for them (a GPU option, a run to save
or compare), a test takes one of its fixtures, or a journal entry says a run died with a GPU changed
(``state.PluginState.start``); no signal handler is installed until a GPU is held at a changed
setting; nothing it says is a warning that ``filterwarnings = error`` could turn into a failure:
notices are lines at the end of the session.
"""

from __future__ import annotations

import contextlib
import functools
import os
import sys
from collections.abc import Generator, Iterator, Sequence
from typing import TYPE_CHECKING, Any

import pytest

from .. import realtime
from ..errors import GpuEnergyError, SettingError
from ..gpu import signals
from ..gpu.placement import Placement
from ..runs import PASSED, Outcome
from ..runs.ids import test_key
from ..sim.seed import session_seed
from . import knobs, markers
from .clocks import CLOCK_KNOB, gpu_clock_cap  # noqa: F401  (the fixture, registered with this plugin)
from .every_test import EVERY_TEST_KNOB, EveryTest, meter_of
from .fixtures import POWER_KNOB, _gpuenergy_lease, energy_meter, gpu_power_cap  # noqa: F401  (the fixtures)
from .knobs import Knob, takes_plugin_fixture, uses_plugin_fixture
from .markers import MARKERS, NOTHING_MEASURED, settings_of
from .options import SessionOptions, asked_for_gpus, parse_settings, pytest_addoption, resolve_gate_options  # noqa: F401 (the hook)
from .state import STATE_KEY, PluginState, session_of, state_of

if TYPE_CHECKING:
    from ..gate.budget_file import BudgetFile
    from .session import EnergySession

_OUTCOME_KEY = pytest.StashKey[Any]()           # the gate's outcome (gate.ci.GateOutcome)
_SKIPPED_KEY = pytest.StashKey[list]()
_MARKER_ERRORS_KEY = pytest.StashKey[list]()     # knob markers found bad while generating tests
_DESELECTED_KEY = pytest.StashKey[list]()        # node ids -k/-m deselected (a budgets file may name them)
_WORKER_OUTPUT = "gpuenergy_cases"
_WORKER_ERRORS = "gpuenergy_errors"
_WORKER_NOTES = "gpuenergy_notes"       # the tests each worker ran once (see notice_lines)
_WORKER_WAITS = "gpuenergy_budget_waits"         # its budgeted tests' waits for their figures (s, tests)
_WORKER_SEED = "gpuenergy_sim_seed"              # the simulator's seed, handed to pytest-xdist workers
_WORKER_GPU_ORDER = "gpuenergy_gpu_order"        # the GPUs' order the controller chose (free ones first)
_KNOBS = (POWER_KNOB, CLOCK_KNOB, EVERY_TEST_KNOB)
TERMINAL_TESTS = 30                               # the results table's most tests in the terminal (pytest -v: all)


# -- lifetime --------------------------------------------------------------------------------------

def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    from . import hookspecs

    pluginmanager.add_hookspecs(hookspecs)


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
        placement = Placement.from_environment(worker_id=_worker_id(config))
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
    for marker in MARKERS:
        config.addinivalue_line("markers", marker)
    options = parse_settings(config)
    gate_options = resolve_gate_options(config)
    asked = asked_for_gpus(config, gate_options)
    problem = None
    try:
        placement = Placement.from_environment(worker_id=_worker_id(config))
    except GpuEnergyError as exc:
        if asked:
            raise pytest.UsageError(str(exc)) from None
        placement, problem = Placement.from_environment(env={}), str(exc)   # only the plugin's users hear of it
    state = PluginState(options, gate_options, placement, _simulator_seed(config), asked,
                        worker=hasattr(config, "workerinput"), unavailable=problem, budget_file=_budget_file(options),
                        on_result=lambda case_id, result: config.hook.pytest_gpuenergy_result(
                            config=config, case_id=case_id, result=result),
                        gpu_order=tuple(getattr(config, "workerinput", {}).get(_WORKER_GPU_ORDER, ())),
                        workers=_xdist_workers(config))
    config.stash[STATE_KEY] = state
    if placement.reports:   # only the controller (torchrun: global rank 0) saves, compares and reports
        config.pluginmanager.register(_SkippedCaps(config), "gpuenergy-skipped-caps")
    if options.every_test:
        config.pluginmanager.register(EveryTest(), "gpuenergy-every-test")
    if asked:
        state.start(usage_errors=True)
    elif not state.worker:
        from ..gpu.leftovers import may_need_repair

        if may_need_repair(options.backend):      # a run died with a GPU changed: put it back now
            state.start(usage_errors=False)
    signals.announce_with(_terminal_writer(config))


def _budget_file(options: SessionOptions) -> BudgetFile | None:
    if options.budgets_file is None:
        return None
    from ..gate.budget_file import load_budget_file

    try:
        return load_budget_file(options.budgets_file)
    except SettingError as exc:
        raise pytest.UsageError(f"--energy-budgets: {exc}") from None


def _worker_id(config: pytest.Config) -> str | None:
    return getattr(config, "workerinput", {}).get("workerid")


def _simulator_seed(config: pytest.Config) -> int:
    """One seed for the whole session: pytest-xdist workers get the controller's (``workerinput``, not
    the environment, which the tests would see), so the simulated GPUs draw alike in every worker."""
    handed = getattr(config, "workerinput", {}).get(_WORKER_SEED)
    if handed is not None:
        return int(handed)
    try:
        return session_seed()
    except ValueError as exc:
        raise pytest.UsageError(str(exc)) from None


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    """pytest-xdist: a worker starts; it gets the session's simulator seed."""
    state = state_of(node.config)
    if state is not None:
        node.workerinput[_WORKER_SEED] = state.sim_seed
        if state.started and state.session is not None:      # the GPUs this session took come first
            node.workerinput[_WORKER_GPU_ORDER] = [gpu.uuid for gpu in state.session.gpus]


def _xdist_workers(config: pytest.Config) -> int:
    """How many pytest-xdist workers the session starts (``-n``, resolved by xdist by now); 1 without."""
    workers = getattr(config.option, "numprocesses", None)
    if hasattr(config, "workerinput") or getattr(config.option, "dist", "no") == "no":
        return 1
    return workers if isinstance(workers, int) and workers > 0 else 1


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


def pytest_keyboard_interrupt(excinfo: Any) -> None:
    """pytest stops: the teardown that follows restores the limits, and must not be interrupted again."""
    signals.set_stopping(True)


def pytest_unconfigure(config: pytest.Config) -> None:
    signals.unguard_termination()
    session = session_of(config)
    state = state_of(config)
    if session is None or state is None:
        signals.set_stopping(False)
        signals.announce_with(None)
        return
    signals.set_stopping(True)      # the session ends anyway: a signal during these last restores waits for them
    try:
        problems = session.finish(repair=not state.worker)
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
    state = state_of(config)
    if state is None:
        return []
    if state.session is not None:      # (whole lines, as pytest's own: a log searched for one finds it whole)
        return state.session.header_lines()
    if state.unavailable:
        return [f"gpuenergy: unavailable: {state.unavailable}"]
    return ["gpuenergy: standing by (no GPU opened until a test measures or caps one)"]


# -- collection ------------------------------------------------------------------------------------

@pytest.hookimpl(wrapper=True)
def pytest_generate_tests(metafunc: pytest.Metafunc) -> Iterator[None]:
    """After every other parametrisation (``@pytest.mark.parametrize``, pytest-repeat's count), so the
    cap comes last in ids: ``test_x[resnet-60%]``."""
    result = yield
    state = state_of(metafunc.config)
    if state is not None:
        for knob, values in _knobs(state):
            if knob is EVERY_TEST_KNOB and uses_plugin_fixture(metafunc.definition, "gpu_power_cap"):
                continue                          # the test's own fixture holds its cap
            problem = knobs.parametrize(metafunc, knob, values)
            if problem is not None:
                metafunc.config.stash.setdefault(_MARKER_ERRORS_KEY, []).append(problem)
    return result


def _knobs(state: PluginState) -> list[tuple[Knob, tuple]]:
    """The knobs tests run once per setting of, with the session's settings: a test that does not take
    gpu_power_cap itself has its cap from ``--energy-all`` (each test takes one of the two at most)."""
    found: list[tuple[Knob, tuple]] = [(POWER_KNOB, state.options.caps), (CLOCK_KNOB, state.options.clocks)]
    if state.options.every_test:
        found.append((EVERY_TEST_KNOB, state.options.caps))
    return found


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Validate every marker now, so a typo fails the run before any GPU is touched."""
    for problem in config.stash.get(_MARKER_ERRORS_KEY, [])[:1]:
        raise pytest.UsageError(problem)
    state = state_of(config)
    if state is None:
        return
    for knob, values in _knobs(state):
        knobs.keep_own_settings(items, knob, values)
        knobs.mark_for_hypothesis(items, knob)
    theirs = markers.project_markers(config)
    in_use = state.options.every_test or any(takes_plugin_fixture(item) for item in items)
    for item in items:
        item.stash[markers.BUDGETS_KEY], item.stash[markers.SETTINGS_KEY] = markers.checked_markers(
            item, takes_plugin_fixture, theirs, note=state.options.every_test, in_use=in_use)
        if state.options.every_test and knobs.projects_own_marker(item, EVERY_TEST_KNOB):
            markers.note_kept(item, EVERY_TEST_KNOB.marker)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_finish(session: pytest.Session) -> None:
    """Tests that use the plugin's fixtures were collected: open the GPUs now, before the first of them
    runs, so that what the header would have said is said after the collection instead."""
    state = state_of(session.config)
    if state is None or session.config.option.collectonly:
        return
    if state.session is None and state.unavailable is None and any(takes_plugin_fixture(item) for item in session.items):
        state.start(usage_errors=False)
        state.late = True
    if state.budget_file is not None and state.session is not None:
        deselected = session.config.stash.get(_DESELECTED_KEY, [])
        keys = [file_key(item) for item in session.items] + [test_key(node_id) for node_id in deselected]
        modules = {item.nodeid.split("::", 1)[0] for item in session.items}
        for entry in state.budget_file.unknown_tests(keys, modules):
            state.session.notices.append(f"{entry.where}: a budget for {entry.test}, which this session did not collect "
                                         f"(renamed or removed? regenerate the file with gpuenergy budgets)")


def pytest_deselected(items: Sequence[pytest.Item]) -> None:
    if items:
        items[0].config.stash.setdefault(_DESELECTED_KEY, []).extend(item.nodeid for item in items)


def file_key(item: pytest.Item) -> str:
    """The item's id without the plugin's settings: what a budgets file names it by."""
    params = getattr(getattr(item, "callspec", None), "params", {})
    labels = [getattr(params.get(k.fixture), "label", None) for k in (POWER_KNOB, EVERY_TEST_KNOB, CLOCK_KNOB)]
    return test_key(item.nodeid, *labels)


def pytest_report_collectionfinish(config: pytest.Config) -> list[str]:
    state = state_of(config)
    if state is None or not state.late:
        return []
    if state.session is not None:
        return state.session.header_lines()
    return [f"gpuenergy: unavailable: {state.unavailable}"]


# -- running ---------------------------------------------------------------------------------------

@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """Each attempt at a test starts with nothing measured (pytest-rerunfailures runs it again)."""
    session = session_of(item.config)
    if session is not None:
        session.begin_attempt(item.nodeid)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    """With repetitions, call a measuring test several times (fixtures are set up once)."""
    with _benchmark_measured(item):
        return (yield from _measured_call(item))


def _measured_call(item: pytest.Item) -> Generator[None, Any, Any]:
    session = session_of(item.config)
    if session is None:
        return (yield)
    every_test = meter_of(item)             # --energy-all: the call phase is the region
    measures = every_test is not None or uses_plugin_fixture(item, "energy_meter")
    session.begin_call(item.nodeid)
    with _each_example_a_call(item, session) if measures else contextlib.nullcontext():
        with every_test if every_test is not None else contextlib.nullcontext():
            result = yield
        if measures:
            repeat = settings_of(item).get("repeat") or session.options.repeat
            for _ in range(repeat - 1):
                session.begin_call(item.nodeid)
                with every_test if every_test is not None else contextlib.nullcontext():
                    item.runtest()
    return result


@contextlib.contextmanager
def _benchmark_measured(item: pytest.Item) -> Iterator[None]:
    """A test that takes pytest-benchmark's ``benchmark``: its rounds are measured and their energy per
    call written into ``benchmark.extra_info`` (``bridges.benchmark``), on the test's GPUs."""
    fixture = getattr(item, "funcargs", {}).get("benchmark")
    if fixture is None or not type(fixture).__module__.startswith("pytest_benchmark") or not getattr(fixture, "enabled", True):
        yield
        return
    state = state_of(item.config)
    session = state.start(usage_errors=False) if state is not None else None
    if session is None:
        yield
        return
    from ..bridges.benchmark import MeasuredBenchmark

    lease = contextlib.nullcontext() if session.leased else session.lease(1, item.nodeid)
    with lease:
        settings = settings_of(item)
        meter = session.meter(item.nodeid, compute_bound=settings.get("compute_bound"), work=settings.get("work"), record=False)
        item.funcargs["benchmark"] = MeasuredBenchmark(fixture, meter)    # type: ignore[attr-defined]
        try:
            yield
        finally:
            item.funcargs["benchmark"] = fixture                          # type: ignore[attr-defined]


@contextlib.contextmanager
def _each_example_a_call(item: pytest.Item, session: EnergySession) -> Iterator[None]:
    """Hypothesis calls a ``@given`` test once per example inside one pytest call: each example is a
    call of its own, so its measured blocks are repetitions of the test's cases (not regions 2, 3...)."""
    handle: Any = getattr(getattr(item, "obj", None), "hypothesis", None)
    inner = getattr(handle, "inner_test", None)
    if handle is None or inner is None:
        yield
        return

    @functools.wraps(inner)
    def example(*args: Any, **kwargs: Any) -> Any:
        session.begin_call(item.nodeid)
        return inner(*args, **kwargs)

    handle.inner_test = example
    try:
        yield
    finally:
        handle.inner_test = inner


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """A signal that came while a fixture restored a limit stops the session once the whole teardown ran."""
    with signals.delivered_at_end():
        return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """A passed test that misses its energy budget fails, with one line per miss; every case records
    how its test's own code ended (failed and xfailed tests' figures are no baseline)."""
    report = yield
    session = session_of(item.config)
    budgets: list = item.stash.get(markers.BUDGETS_KEY, [])     # (checked at collection)
    if session is None:
        if report.when == "call" and report.passed and budgets:
            report.outcome = "failed"
            report.longrepr = NOTHING_MEASURED
        return report
    if report.when == "call":
        # The outcome of the test's own code: a budget miss is a valid figure that the gate must see.
        session.set_outcome(item.nodeid, _outcome_of(report))
        if report.passed:
            waited_from = realtime.monotonic()       # (a budget's verdict may wait for the test's figure)
            failures = session.budget_failures(item.nodeid, budgets, file_key(item) if session.budget_file else None)
            if failures is not None and (state := state_of(item.config)) is not None:
                state.add_budget_wait(realtime.monotonic() - waited_from)
            if failures:
                report.outcome = "failed"
                report.longrepr = "\n".join(failures)
        if getattr(item.config.option, "xmlpath", None):
            # junitxml writes the properties the item has when its teardown is reported (the figures
            # are worked out for it now: without --junitxml nothing waits for them here)
            item.user_properties.extend(session.junit_properties(item.nodeid))
    elif report.failed:
        session.set_outcome(item.nodeid, "error")
    return report


def _outcome_of(report: pytest.TestReport) -> Outcome:
    if hasattr(report, "wasxfail"):
        return "xfailed" if report.skipped else "xpassed"
    return PASSED if report.passed else report.outcome


# -- the end of the session: pytest-xdist workers hand their results to the controller --------------

def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    config = session.config
    state = state_of(config)
    if state is None:
        return
    energy = state.session
    if energy is not None:
        energy.errors += energy.resolve(wait=True)     # the figures still pending, now that the tests are done
    if state.worker:
        output = config.workeroutput  # type: ignore[attr-defined]  # pytest-xdist sets it on workers
        output[_WORKER_OUTPUT] = energy.export_cases() if energy is not None else "[]"
        output[_WORKER_ERRORS] = list(energy.errors) if energy is not None else []
        output[_WORKER_WAITS] = [state.budget_wait_s, state.budgeted_tests]
        output[_WORKER_NOTES] = [energy.unparametrised if energy is not None else {}, energy.named_once if energy is not None else {},
                                 config.stash.get(markers.KEPT_MARKERS_KEY, {})]
        return
    if not state.reports or energy is None:    # torchrun: every rank holds the total; rank 0 saves it
        return
    from ..runs.provenance import collect_commit_info, collect_machine_info  # (only a session that measured needs them)

    machine = collect_machine_info(energy.backend, energy.gpus)
    config.hook.pytest_gpuenergy_update_machine_info(config=config, machine_info=machine)
    outcome = state.gate().finish(
        [(case_id, record.merged) for case_id, record in sorted(energy.cases.items())],
        machine=machine,
        commit=collect_commit_info(config.rootpath),
        run_options=_run_options(config, energy),
        outcomes=energy.outcomes(),
        update_run=lambda run: config.hook.pytest_gpuenergy_update_run(config=config, run=run),
    )
    outcome.errors += [f"a figure could not be worked out: {problem}" for problem in energy.errors]
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
        cap = next((value for key, value in report.user_properties if key in {k.skipped_property for k in _KNOBS}), None)
        if cap is None:
            return
        longrepr = report.longrepr
        reason = longrepr[2] if isinstance(longrepr, tuple) and len(longrepr) == 3 else str(longrepr)
        from ..reports.digest import Skipped

        self.config.stash.setdefault(_SKIPPED_KEY, []).append(Skipped(report.nodeid, str(cap), str(reason)))


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: Any) -> None:
    """pytest-xdist: a worker finished; its measured cases join the controller's. A worker that died
    may have left a GPU capped: the controller opens the GPUs, which repairs it, now and at its end."""
    state = state_of(node.config)
    if state is None:
        return
    output = getattr(node, "workeroutput", {})
    exported, errors = output.get(_WORKER_OUTPUT), output.get(_WORKER_ERRORS) or []
    if (exported and exported != "[]") or errors or error:
        session = state.start(usage_errors=False)
        if session is not None:
            if exported:
                session.import_cases(exported)
            session.errors += errors
    state.add_budget_wait(*output.get(_WORKER_WAITS, (0.0, 0)))
    notes = output.get(_WORKER_NOTES)
    if notes and any(notes) and state.session is not None:       # what each worker's tests left to say
        kept_markers = node.config.stash.setdefault(markers.KEPT_MARKERS_KEY, {})
        for kept, found in zip((state.session.unparametrised, state.session.named_once, kept_markers), notes):
            for key, tests in found.items():
                known = set(kept.setdefault(key, []))
                kept[key] += [t for t in tests if t not in known]


def _run_options(config: pytest.Config, energy: EnergySession) -> dict:
    options = energy.options
    return {
        "gpu_backend": options.backend,
        "gpu_caps": [c.label for c in options.caps],
        "gpu_clocks": [c.label for c in options.clocks],
        "gpu_devices": options.gpus,
        "energy_repeat": options.repeat,
        "energy_min_time": options.min_time_s,
        "args": [str(a) for a in config.invocation_params.args],
        "rootdir": str(config.rootpath),
        "skipped": [vars(item) for item in config.stash.get(_SKIPPED_KEY, [])],
        "simulator": energy.backend.sim_settings() if energy.backend is not None else None,
    }


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    """The comparison when there is one (it holds the results), else the results; both fit the width.
    Then what the user should know (repairs, notices), as lines rather than warnings."""
    state = state_of(config)
    session = state.session if state is not None else None
    if state is None or session is None or not state.reports:
        return
    from ..reports.terminal import budget_wait_line, notice_lines, session_lines, skipped_lines, tables_for, top_lines, wrap  # only now

    width = config.get_terminal_writer().fullwidth
    waited = budget_wait_line(state.budget_wait_s, state.budgeted_tests, realtime.monotonic() - state.began_at,
                              min((gpu.counter_period_s for gpu in session.gpus), default=None))
    notices = notice_lines(session.repairs, session.notices + ([waited] if waited else []), session.coarse_cases(),
                           session.unparametrised, width, session.named_once, config.stash.get(markers.KEPT_MARKERS_KEY, {}))
    outcome = config.stash.get(_OUTCOME_KEY, None)
    if not session.cases and not notices and not (outcome is not None and outcome.errors):
        return
    terminalreporter.section("gpu energy")
    skipped = config.stash.get(_SKIPPED_KEY, [])
    lines: list[str] = []
    if outcome is not None and outcome.comparisons:
        lines = tables_for(outcome.comparisons, width, skipped)
    elif session.cases:
        cases = [(case_id, record.merged) for case_id, record in sorted(session.cases.items())]
        most = None if config.get_verbosity() > 0 else TERMINAL_TESTS
        lines = session_lines(cases, width, session.outcomes(), most) + skipped_lines(skipped, width)
    if session.options.top and session.cases:
        cases = [(case_id, record.merged) for case_id, record in sorted(session.cases.items()) if record.outcome == PASSED]
        lines += [""] + top_lines(cases, session.session_total(), session.options.top, width)
    if session.options.phases and session.cases:
        from ..reports.phases import phase_lines

        lines += [""] + phase_lines([(case_id, record.merged) for case_id, record in sorted(session.cases.items())], width)
    for text in outcome.lines if outcome is not None else []:
        lines += wrap(text, width)
    for line in lines:
        alarm = line.startswith("ENERGY REGRESSION")
        terminalreporter.write_line(line, red=alarm, bold=alarm)
    for line in notices:
        terminalreporter.write_line(line, yellow=True)
    for error in outcome.errors if outcome is not None else []:
        # One line, never wrapped: a path or value in it stays whole for a user (or a script) to copy.
        terminalreporter.write_line(f"gpuenergy: error: {error}", red=True, bold=True)
