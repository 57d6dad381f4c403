"""Damaged baselines and bad marker values: one line naming the file or the value, never a traceback,
and never a damaged figure accepted (a negative ETS has no ratio, so it would pass any gate)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pytest_gpuenergy.errors import SettingError, StorageError
from pytest_gpuenergy.gate.compare import compare_documents
from pytest_gpuenergy.gate.settings import check_confidence
from pytest_gpuenergy.reports.terminal import comparison_lines
from pytest_gpuenergy.runs.reader import load_document
from pytest_gpuenergy.runs.store import RunStore
from pytest_gpuenergy.runs.validation import FIGURE_RANGES

from helpers import cli_in_process, make_doc, run_cli, spin_source


def _set(field: str, value):
    def damage(doc: dict) -> None:
        doc["cases"][0]["repetitions"][0][field] = value
    return damage


def _every_ets_negative(doc: dict) -> None:
    for case in doc["cases"]:
        for rep in case["repetitions"]:
            rep["ets_j"] = -rep["ets_j"]


def _nested(levels: int):
    def damage(doc: dict) -> None:
        doc["machine"]["extra"] = json.loads("[" * levels + "]" * levels)
    return damage


def _raw(old: str, new: str):
    return lambda text: text.replace(old, new, 1)


# name: (change to the parsed document, or to its text), what the one-line error says
DAMAGES = {
    "ETS of 1.7e308 J": (_set("ets_j", 1.7e308), r"cases\[0\]\.repetitions\[0\]\.ets_j: must be a number of J from 0 to 1e\+12, got 1\.7e\+308"),
    "negative ETS": (_every_ets_negative, r"cases\[0\]\.repetitions\[0\]\.ets_j: must be a number of J from 0 to 1e\+12, got -"),
    "ETS of 5e-324 J": (_set("ets_j", 5e-324), r"ets_j: must be 0 or at least 1e-15 J, got 5e-324"),   # its ratio underflows
    "negative time": (_set("time_s", -1.0), r"time_s: must be a number of s from 0 to 1e\+07, got -1\.0"),
    "a limit of 1e300 W": (lambda d: d["cases"][0].update(limit_enforced_w=1e300), r"cases\[0\]\.limit_enforced_w: must be a number of W"),
    "NaN": (_raw('"ets_j": ', '"ets_j": NaN, "x": '), "NaN is not a JSON number"),
    "-Infinity": (_raw('"time_s": ', '"time_s": -Infinity, "x": '), "-Infinity is not a JSON number"),
    "1e999": (_raw('"ets_j": ', '"ets_j": 1e999, "x": '), r"ets_j: must be a number of J from 0 to 1e\+12, got inf"),
    "5000-digit integer": (_raw('"calls": 1', '"calls": 1' + "0" * 5000), "an integer of 5001 digits"),
    "4000-digit integer": (_raw('"gpu_index": 0', '"gpu_index": 1' + "0" * 3999), "an integer of 4000 digits"),
    "nesting 40 deep": (_nested(40), "nested deeper than 32 levels"),
    "nesting 100000 deep": (_raw('"machine": {', '"machine": {"deep": ' + "[" * 100_000 + "]" * 100_000 + ", "), "nested deeper"),
    "an object where a number goes": (_set("ets_j", {"value": 1}), r"ets_j: must be a number, got \{'value': 1\}"),
    "a huge list where a name goes": (lambda d: d["cases"][0].update(gpu_name=list(range(100_000))), r"gpu_name: must be a non-empty string, got \[0, 1, 2"),
}


def damage(path: Path, name: str) -> str:
    """Apply the damage ``name`` to the run document at ``path``; returns the message expected."""
    change, message = DAMAGES[name]
    if change.__code__.co_varnames[:1] == ("text",):
        path.write_text(change(path.read_text()))
    else:
        data = json.loads(path.read_text())
        change(data)
        path.write_text(json.dumps(data))
    return message


def _damaged(tmp_path: Path, name: str) -> tuple[Path, Path, str]:
    """A good baseline and a damaged copy of the next run; returns their paths and the expected message."""
    store = RunStore(tmp_path / ".energy")
    good = store.save(make_doc(seed=1))
    bad = store.save(make_doc(seed=2, minutes=10))
    return good, bad, damage(bad, name)


@pytest.mark.parametrize("name", list(DAMAGES))
def test_a_damaged_run_document_is_one_line_naming_the_file_and_what_is_wrong(tmp_path, name):
    good, bad, message = _damaged(tmp_path, name)
    before = bad.read_bytes()
    with pytest.raises(StorageError, match=message) as info:
        load_document(bad)
    text = str(info.value)
    assert text.startswith(f"{bad}: ") and "\n" not in text and len(text) < 400
    for old, new in ((good, bad), (bad, good)):
        proc = cli_in_process("compare", str(old), str(new), "--fail", "ets:5%", check=False)
        assert proc.returncode == 2, proc.stdout + proc.stderr
        assert proc.stderr.startswith(f"gpuenergy compare: error: {bad}: ") and proc.stderr.count("\n") == 1
    assert bad.read_bytes() == before


@pytest.mark.parametrize("name", ["ETS of 1.7e308 J", "negative ETS", "5000-digit integer", "nesting 100000 deep"])
def test_the_gate_names_a_damaged_baseline_before_any_test_runs(pytester, name):
    pytester.makepyfile(test_m=spin_source() + "def test_m(gpu_power_cap, energy_meter):\n    with energy_meter:\n        spin(0.15)\n")
    pytester.runpytest("--energy-save").assert_outcomes(passed=1)
    (saved,) = (pytester.path / ".energy").rglob("*.json")
    damage(saved, name)
    result = pytester.runpytest("--energy-compare", "--energy-fail=ets:5%")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    errors = [line for line in result.stderr.str().splitlines() if line.strip()]
    assert len(errors) == 1 and errors[0].startswith(f"ERROR: --energy-compare: {saved}: "), errors
    assert "Traceback" not in result.stdout.str() + result.stderr.str()


def _figure_values():
    return st.one_of(
        st.floats(allow_nan=True, allow_infinity=True), st.integers(), st.just(10**5000), st.just(-(10**400)),
        st.none(), st.booleans(), st.text(max_size=5), st.lists(st.integers(), max_size=3),
        st.floats(min_value=0, max_value=1e12), st.floats(min_value=0, max_value=1e-300),
    )


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(field=st.sampled_from(sorted(set(FIGURE_RANGES) - {"ets_low_j", "ets_high_j"})), value=_figure_values(),
       everywhere=st.booleans())
def test_any_figure_loads_and_compares_or_is_a_storage_error(tmp_path, field, value, everywhere):
    """Whatever number sits in a figure, the file is refused with a StorageError or compares without a crash."""
    doc = make_doc(seed=1, workloads=("a",), caps_w=(300.0, 700.0), n=3)
    data = json.loads(json.dumps(doc.to_json()))
    targets = data["cases"] if field.startswith(("limit", "default")) else [r for c in data["cases"] for r in c["repetitions"]]
    for target in targets if everywhere else targets[:1]:
        target[field] = value
    path = tmp_path / "damaged.json"
    try:
        text = json.dumps(data)
    except ValueError:           # an integer too long for Python to print: it cannot be in a file either
        return
    path.write_text(text)
    try:
        loaded = load_document(path)
    except StorageError as exc:
        assert str(exc).startswith(f"{path}: ") and "\n" not in str(exc)
        return
    for rep in (r for c in loaded.cases for r in c.repetitions):
        assert all(math.isfinite(x) and x >= 0 for x in (rep.ets_j, rep.time_s, rep.edp_js))
    for old, new in ((doc, loaded), (loaded, doc)):
        comparison = compare_documents(old, new, {"ets": 5.0, "edp": 10.0, "time": 5.0}, history=[doc])
        comparison_lines(comparison)


# -- marker values ------------------------------------------------------------------------------------

@pytest.mark.parametrize(("marker", "message"), [
    ("energy_budget(ets=10**400)", "energy_budget ets= must be a positive number of J, got an integer of about 401 digits (at most 1e+15 J)"),
    ("energy_budget(edp=10**5000)", "energy_budget edp= must be a positive number of J s, got an integer of about 5001 digits"),
    ("energy_budget(time=float('nan'))", "energy_budget time= must be a positive number of s, got nan"),
    ("energy_budget(ets=float('inf'))", "got inf"),
    ("energy_budget(ets=-5)", "got -5"),
    ("energy_budget(ets=5, cap=10**5000)", "energy_budget cap=: an integer of about 5001 digits is not a plausible GPU power limit"),
    ("energy(repeat=10**400)", "energy(repeat=) must be a whole number >= 1 (at most 10000), got an integer of about 401 digits"),
    ("energy(min_time=1e300)", "energy(min_time=) must be a number of seconds >= 0 (at most 3600), got 1e+300"),
    ("energy(compute_bound=10**5000)", "energy(compute_bound=) must be a number from 0 (memory-bound) to 1 (compute-bound), got an integer"),
    ("gpu_caps(10**5000)", "gpu_caps: an integer of about 5001 digits is not a plausible GPU power limit"),
])
def test_a_bad_marker_value_is_a_usage_error_naming_the_test_and_the_value(pytester, marker, message):
    pytester.makepyfile(test_user=f"import pytest\n\n@pytest.mark.{marker}\ndef test_a(gpu_power_cap, energy_meter):\n    pass\n")
    result = pytester.runpytest()
    assert result.ret == pytest.ExitCode.USAGE_ERROR, result.stdout.str()
    errors = [line for line in result.stderr.str().splitlines() if line.strip()]
    assert len(errors) == 1 and "INTERNALERROR" not in result.stderr.str(), result.stderr.str()
    assert "test_user.py::test_a" in errors[0] and message in errors[0], errors[0]


@pytest.mark.parametrize(("text", "value"), [("0.99", 0.99), ("99%", 0.99), (" 0.9 ", 0.9), (0.95, 0.95)])
def test_a_confidence_level_is_read_one_way_everywhere(text, value):
    assert check_confidence(text) == pytest.approx(value)


@pytest.mark.parametrize("text", ["0.5", "1", "50%", "abc", "nan", "", True, 2])
def test_a_bad_confidence_level_is_a_setting_error_naming_it(text):
    with pytest.raises(SettingError, match="confidence=.*(not a number|not a confidence level)"):
        check_confidence(text)


def test_a_bad_confidence_level_stops_the_session_before_any_test_runs(pytester):
    # It once ran every test and then ended in a ValueError traceback.
    pytester.makepyfile(test_m="def test_m(energy_meter):\n    raise AssertionError('must not run')\n")
    result = pytester.runpytest_subprocess("--energy-compare", "--energy-confidence=0.5")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    errors = [line for line in result.stderr.str().splitlines() if line.strip()]
    assert errors == ["ERROR: --energy-confidence='0.5' is not a confidence level; give a number between 0.5 and 1 "
                      "(exclusive), e.g. 0.99 or 99%"]
    assert "must not run" not in result.stdout.str()
    cli = run_cli("compare", "a.json", "b.json", "--confidence=1.5", check=False)
    assert cli.returncode == 2 and "--confidence='1.5' is not a confidence level" in cli.stderr and "Traceback" not in cli.stderr
