"""The two knobs a test can take (a power cap, an SM clock cap) as pytest sees them: which tests run
once per setting, and holding the setting for one test so that the GPU always comes back.

A knob's settings come from, nearest first: a ``pytest.param(..., marks=pytest.mark.gpu_caps(...))``,
a ``gpu_caps`` marker on the test (its class or module), the command line (``--gpu-caps``). Only a
test that takes the plugin's own fixture is parametrised: a project's fixture of the same name is
none of the plugin's business.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass
from typing import Any

import pytest

from ..errors import CapOutOfRange, CapSyntaxError, GpuEnergyError, LimitRestoreError
from ..gpu import signals
from .markers import own_marker_hint, project_markers

_PLUGIN_MODULES = ("pytest_gpuenergy.plugin.fixtures", "pytest_gpuenergy.plugin.clocks", "pytest_gpuenergy.plugin.every_test")
_PARAMETER_SET = type(pytest.param(None))          # what pytest.param() returns


@dataclass(frozen=True)
class Knob:
    """How one knob meets pytest: its fixture, its marker, and how its values are written."""

    fixture: str                    # "gpu_power_cap"
    marker: str                     # "gpu_caps"
    option: str                     # "--gpu-caps"
    parse: Callable[..., list[Any]]
    what: str                       # "cap", for messages
    example: str                    # "150, '60%'"
    skipped_property: str           # user property on a case skipped for its setting (reaches xdist's controller)
    # --energy-all's cap: a test it was not written for runs once, at the current limit, where running it
    # once per cap would put the cap into the names of the results it keeps (``named_after_the_test``)
    spares_named_results: bool = False


PLUGIN_FIXTURES = ("energy_meter", "gpu_power_cap", "gpu_clock_cap")


def takes_plugin_fixture(node: Any) -> bool:
    """Whether ``node`` takes any of the plugin's fixtures (a test written for it)."""
    return any(uses_plugin_fixture(node, name) for name in PLUGIN_FIXTURES)


def uses_plugin_fixture(node: Any, name: str) -> bool:
    """Whether ``node`` (an item or a test's definition) takes the plugin's own fixture ``name``,
    and not a project's fixture that happens to have the same name."""
    info = getattr(node, "_fixtureinfo", None)
    if info is None or name not in info.names_closure:
        return False
    definitions = info.name2fixturedefs.get(name) or ()
    if not definitions:
        return False
    func = definitions[-1].func             # the nearest definition wins, as pytest resolves it
    return getattr(func, "__module__", None) in _PLUGIN_MODULES and getattr(func, "__name__", None) == name


# Plugins that find a test by its name, cap id and all: run once per cap, ``test_x[60%]`` finds no
# snapshot of ``test_x`` and fails (syrupy), writes a new file into the project and fails
# (pytest-regressions), or is not the ``test_x`` other tests depend on, which are then skipped
# (pytest-dependency), or finds no baseline image (pytest-mpl). The fixtures by their top module; the
# marks by their plugin's pytest11 name: (plugin, as users know it, what it finds by the name).
_NAMED_AFTER_THE_TEST = {
    "syrupy": ("snapshot",),
    "pytest_snapshot": ("snapshot",),
    "pytest_regressions": ("data_regression", "dataframe_regression", "file_regression", "image_regression",
                           "ndarrays_regression", "num_regression"),
}
_FOUND_BY_NAME = {
    "dependency": ("dependency", "pytest-dependency", "tests find each other by name"),
    "mpl_image_compare": ("pytest_mpl", "pytest-mpl", "baseline images are kept under the test's name"),
}


def named_after_the_test(node: Any) -> str | None:
    """Why ``node`` is found by its name (``"with snapshot (syrupy), results are kept under the test's
    name"``), or None: a fixture it takes, or a mark it carries, of a plugin that finds it so."""
    info = getattr(node, "_fixtureinfo", None)
    closure: dict[str, Sequence[Any]] = info.name2fixturedefs if info is not None else {}
    for name in info.names_closure if info is not None else ():
        definitions = closure.get(name) or ()
        module = (getattr(definitions[-1].func, "__module__", None) or "") if definitions else ""
        plugin = module.split(".")[0]
        if name in _NAMED_AFTER_THE_TEST.get(plugin, ()):
            return f"with {name} ({plugin.replace('_', '-')}), results are kept under the test's name"
    for mark, (plugin, known_as, found) in _FOUND_BY_NAME.items():
        if node.get_closest_marker(mark) is not None and node.config.pluginmanager.has_plugin(plugin):
            return f"with {known_as}'s {mark} mark, {found}"
    return None


def projects_own_marker(node: Any, knob: Knob) -> bool:
    """Whether the test carries a ``gpu_caps``/``gpu_clocks`` marker that is the project's own: the
    project registers a marker of that name itself (``markers.project_markers``) and the test takes
    none of the plugin's fixtures (``--energy-all`` measures it at the session's caps, and the end of
    the session says so). Such a marker once failed a suite at collection, or set its caps."""
    return (node.get_closest_marker(knob.marker) is not None and knob.marker in project_markers(node.config)
            and not takes_plugin_fixture(node))


def knob_marker(node: Any, knob: Knob) -> Any | None:
    """The test's ``gpu_caps``/``gpu_clocks`` marker, or None without one and where it is the project's
    own (``projects_own_marker``)."""
    return None if projects_own_marker(node, knob) else node.get_closest_marker(knob.marker)


def marker_settings(node: Any, knob: Knob) -> list[Any] | None:
    """The settings a ``gpu_caps``/``gpu_clocks`` marker gives one test, or None without one (or where
    it is the project's own, ``knob_marker``); a bad value raises CapSyntaxError naming the marker."""
    marker = knob_marker(node, knob)
    return None if marker is None else _marker_values(marker, knob)


def _marker_values(marker: Any, knob: Knob) -> list[Any]:
    name = knob.marker
    if marker.kwargs:
        raise CapSyntaxError(f"{name} takes {knob.what}s as positional arguments, got {sorted(marker.kwargs)}")
    if not marker.args:
        raise CapSyntaxError(f"{name} needs at least one {knob.what}, e.g. @pytest.mark.{name}({knob.example})")
    args = marker.args[0] if len(marker.args) == 1 and isinstance(marker.args[0], (list, tuple)) else marker.args
    return knob.parse(list(args), source=name)


def parametrize(metafunc: pytest.Metafunc, knob: Knob, session_values: Sequence[Any]) -> str | None:
    """Run the test once per setting of ``knob``; returns a problem to report instead (None when fine).

    Settings given to single parameter sets (``pytest.param(..., marks=...)``) join the test's own
    here, and each item keeps only its own after collection (``keep_own_settings``).
    """
    definition = metafunc.definition
    if not uses_plugin_fixture(definition, knob.fixture):
        return None
    hint = f"give the {knob.what}s with @pytest.mark.{knob.marker}({knob.example}) or {knob.option} instead"
    if _parametrised_by_hand(definition, knob.fixture):
        return f"{definition.nodeid}: {knob.fixture} is parametrised by hand; {hint}"
    try:
        own = marker_settings(definition, knob)
        per_parameter_set = _parameter_set_settings(definition, knob)
    except CapSyntaxError as exc:
        hint = "" if takes_plugin_fixture(definition) else f" {own_marker_hint(knob.marker)}"
        return f"{definition.nodeid}: {exc}{hint}"
    if knob.spares_named_results and own is None and not per_parameter_set and named_after_the_test(definition):
        return None         # once, at the current limit (``_note_unparametrised`` says so at the end)
    values = list(own if own is not None else session_values)
    values += [v for v in per_parameter_set if v not in values]
    if values:
        try:
            metafunc.parametrize(knob.fixture, values, indirect=True, ids=[v.label for v in values])
        except ValueError as exc:      # another plugin's or a conftest's pytest_generate_tests did it
            return f"{definition.nodeid}: {knob.fixture} cannot be parametrised ({exc}); {hint}"
    return None


def keep_own_settings(items: list[pytest.Item], knob: Knob, session_values: Sequence[Any]) -> None:
    """After ``parametrize``: drop the items whose setting came from another parameter set's marks."""
    kept = []
    for item in items:
        callspec = getattr(item, "callspec", None)
        value = callspec.params.get(knob.fixture) if callspec is not None else None
        marks = [m for m in getattr(callspec, "marks", ()) if m.name == knob.marker] if value is not None else []
        if marks:
            own = _marker_values(marks[0], knob)
        elif value is not None and _has_parameter_set_settings(item, knob):
            own = marker_settings(item, knob) or list(session_values)
        else:
            kept.append(item)
            continue
        if value is not None and any(v.label == value.label for v in own):
            kept.append(item)
    items[:] = kept


def mark_for_hypothesis(items: list[pytest.Item], knob: Knob) -> None:
    """Give a Hypothesis test that ``parametrize`` ran once per setting the ``parametrize`` mark that
    Hypothesis looks for: its pytest plugin treats a test with one as parametrised (each case its own
    database key, and no ``differing_executors`` health check, which a ``@given`` method run for a
    second setting with a new instance of its class failed). ``metafunc.parametrize`` leaves no mark,
    so without this every such method failed at its second cap, in a suite that passes without the
    plugin (Hypothesis 6.x, its issue 3733)."""
    for item in items:
        callspec = getattr(item, "callspec", None)
        if callspec is None or knob.fixture not in callspec.params:
            continue
        if getattr(getattr(item, "obj", None), "is_hypothesis_test", False) is True:
            value = callspec.params[knob.fixture]
            item.add_marker(pytest.mark.parametrize(knob.fixture, [value], indirect=True, ids=[value.label]))


def _has_parameter_set_settings(item: pytest.Item, knob: Knob) -> bool:
    try:
        return bool(_parameter_set_settings(item, knob))     # an item carries its function's parametrize marks
    except CapSyntaxError:
        return False


def _parameter_set_settings(definition: Any, knob: Knob) -> list[Any]:
    """Every setting that ``pytest.param(..., marks=pytest.mark.<marker>(...))`` gives this test."""
    found: list[Any] = []
    for mark in definition.iter_markers("parametrize"):
        argvalues = mark.args[1] if len(mark.args) > 1 else mark.kwargs.get("argvalues", ())
        for value in argvalues:
            if isinstance(value, _PARAMETER_SET):
                for param_mark in value.marks:
                    if getattr(param_mark, "name", None) == knob.marker:
                        found += [v for v in _marker_values(param_mark, knob) if v not in found]
    return found


def _parametrised_by_hand(definition: Any, fixture: str) -> bool:
    for mark in definition.iter_markers("parametrize"):
        names = mark.args[0] if mark.args else mark.kwargs.get("argnames", ())
        if isinstance(names, str):
            names = [n.strip() for n in names.split(",")]
        if fixture in names:
            return True
    return False


def held_setting(request: pytest.FixtureRequest, session: Any, capper: Any, knob: Knob,
                 activate: Callable[[Any], None]) -> Generator[Any, None, None]:
    """Apply this case's setting with ``capper`` (or describe the GPUs as they are without one), yield
    the value, restore after. A setting outside the GPU's range skips the case and records why (the
    property reaches pytest-xdist's controller); any other failure fails the test in one line."""
    spec = getattr(request, "param", None)
    if spec is not None and not hasattr(spec, "label"):
        session.release(capper)
        pytest.fail(f"{knob.fixture} got {spec!r}: it is parametrised by the plugin only; give the {knob.what}s "
                    f"with @pytest.mark.{knob.marker}({knob.example}) or {knob.option}", pytrace=False)
    if spec is None:
        _note_unparametrised(request, session, knob)
    else:
        signals.guard_termination()     # from now on SIGTERM ends the test by tearing it down
    skipped = failed = None      # said outside the handlers: one line each, not a chained traceback
    try:
        value = capper.apply(spec) if spec is not None else capper.current()
    except CapOutOfRange as exc:
        session.release(capper)
        request.node.user_properties.append((knob.skipped_property, spec.label if spec is not None else "current"))
        skipped = str(exc)
    except GpuEnergyError as exc:
        session.release(capper)
        failed = str(exc)
    if skipped is not None:
        pytest.skip(skipped)
    if failed is not None:
        pytest.fail(failed, pytrace=False)
    activate(value)
    try:
        yield value
    finally:
        activate(None)
        try:
            session.release(capper)
        except LimitRestoreError as exc:
            failed = f"{exc}. Fix it with: gpuenergy restore"
        if failed is not None:
            pytest.fail(failed, pytrace=False)


def _note_unparametrised(request: pytest.FixtureRequest, session: Any, knob: Knob) -> None:
    """A test that would have settings but runs without: pytest could not parametrise it (a
    unittest.TestCase method, ``request.getfixturevalue``), or ``--energy-all`` spared its results
    named after it (``named_after_the_test``): it runs once, unchanged, and the end of the session
    says so instead of leaving it unsaid."""
    wanted = session.options.clocks if knob.fixture == "gpu_clock_cap" else session.options.caps
    try:
        wanted = marker_settings(request.node, knob) or wanted
    except CapSyntaxError:
        pass
    if not wanted:
        return
    named = named_after_the_test(request.node) if knob.spares_named_results else None
    if named is not None:
        session.named_once.setdefault(named, []).append(request.node.nodeid)
    else:
        session.unparametrised.setdefault(knob.fixture, []).append(request.node.nodeid)
