"""runs/reader.py on its own: reading a run document file, and every field's check at its edge, word
for word (what a damaged or hand-edited baseline is told), in this process (the mutation run's fast
tests for the module). ``tests/test_storage.py`` has the ordinary round trips and a few damaged
files; ``tests/test_damaged_inputs.py`` the same damage through the commands."""

from __future__ import annotations

import copy
import json
import math
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from pytest_gpuenergy.errors import StorageError
from pytest_gpuenergy.meter.results import DomainEnergy, EnergyResult, PhaseFigures, Repetition
from pytest_gpuenergy.runs.reader import DocumentReader, load_document
from pytest_gpuenergy.runs.records import FORMAT, VERSION, CaseEntry, RunDocument
from pytest_gpuenergy.runs.store import build_documents

from helpers import T0, gpu_result, machine

SOURCE = "runs/x.json"
FIX = "restore the file from version control, or move it out of the storage folder"
LOAD_FIX = "restore it from version control, or move it out of the storage folder"


def _whole(message: str) -> str:
    """A ``pytest.raises`` pattern that matches ``message`` whole, word for word."""
    return f"^{re.escape(message)}$"


def _invalid(where: str, problem: str) -> str:
    """The pattern of the one-line error for a field."""
    return _whole(f"{SOURCE}: invalid run document: {where}: {problem}; {FIX}")


def _phases() -> dict[str, PhaseFigures]:
    return {"forward": PhaseFigures(ets_j=3.0, ets_low_j=2.5, ets_high_j=3.5, time_s=0.25, power_w=12.0,
                                    time_share=0.25, energy_share=0.3, distinguishable=True),
            "other": PhaseFigures(ets_j=7.0, ets_low_j=6.0, ets_high_j=8.0, time_s=0.75, power_w=9.3,
                                  time_share=0.75, energy_share=0.7, distinguishable=False, why_not="too short")}


def _op_classes() -> dict[str, PhaseFigures]:
    return {"matmul": PhaseFigures(ets_j=6.0, ets_low_j=5.0, ets_high_j=6.5, time_s=0.5, power_w=12.0,
                                   time_share=0.5, energy_share=0.6, distinguishable=True),
            "idle": PhaseFigures(ets_j=4.0, ets_low_j=3.5, ets_high_j=5.0, time_s=0.5, power_w=8.0,
                                 time_share=0.5, energy_share=0.4, distinguishable=False, why_not="overlaps")}


def _rich() -> RunDocument:
    """A document that uses every field, each with a value of its own, on two GPUs of one case."""
    reps = (Repetition(ets_j=10.0, time_s=1.0, mean_power_w=10.0, peak_power_w=14.0, calls=3, ets_low_j=9.5,
                       ets_high_j=10.5, phases=_phases(), op_classes=_op_classes()),
            Repetition(ets_j=11.0, time_s=1.1, mean_power_w=10.0, peak_power_w=15.0, calls=3, ets_low_j=10.5,
                       ets_high_j=11.5, phases=_phases(), op_classes=_op_classes()))
    first = replace(gpu_result(cap="60%", limit_w=420.0, gpu_index=2), repetitions=reps, method="sampling",
                    power_source="usage", limit_requested_w=420.0, limit_enforced_w=415.0, default_limit_w=700.0,
                    notes=("throttled", "coarse"), clock_cap="1200MHz", sm_clock_cap_mhz=1185.0, host="node-7", rank=5)
    second = replace(first, gpu_index=3, gpu_uuid="GPU-other", rank=6)
    domains = {"gpu": DomainEnergy(21.0, 20.0, 22.0, True), "cpu": DomainEnergy(4.0, 3.0, 5.0, False)}
    cases = [("t.py::test_train[60%]#2", EnergyResult(per_gpu=(first, second), per_domain=domains))]
    return build_documents(cases, machine=machine(), options={"repeat": 2}, commit={"id": "abc", "dirty": True},
                           created_at=T0, outcomes={"t.py::test_train[60%]#2": "xfailed"})[0]


RICH = _rich()


def _data() -> dict[str, Any]:
    return json.loads(json.dumps(RICH.to_json()))


def _read(data: Any) -> RunDocument:
    return RunDocument.from_json(data, SOURCE)


# -- load_document: the file -------------------------------------------------------------------------

def test_a_document_read_back_is_the_one_written_field_for_field(tmp_path):
    doc = RICH
    path = tmp_path / "run.json"
    path.write_text(json.dumps(doc.to_json()))
    loaded = load_document(str(path))
    assert loaded == doc and loaded.path == path and isinstance(loaded.path, Path)
    for read, written in zip(loaded.cases, doc.cases, strict=True):
        assert [r.phases for r in read.repetitions] == [r.phases for r in written.repetitions]
        assert [r.op_classes for r in read.repetitions] == [r.op_classes for r in written.repetitions] == [_op_classes()] * 2
        assert (read.test, read.gpu_slot, read.outcome, read.rank, read.host) == \
               (written.test, written.gpu_slot, written.outcome, written.rank, written.host)
    assert loaded.cases[1].gpu_slot == 1 and loaded.cases[0].outcome == "xfailed"
    assert loaded.cases[0].per_domain["cpu"].simulated is False


def test_a_missing_file_says_it_cannot_be_read(tmp_path):
    path = tmp_path / "gone.json"
    with pytest.raises(StorageError, match=_whole(f"{path}: cannot read the run document: No such file or directory")):
        load_document(path)


@pytest.mark.parametrize("content", [b"", b"  \n\t"])
def test_an_empty_file_is_a_write_that_did_not_finish(tmp_path, content):
    path = tmp_path / "run.json"
    path.write_bytes(content)
    with pytest.raises(StorageError, match=_whole(f"{path}: the run document is empty (a write that did not finish?); {LOAD_FIX}")):
        load_document(path)


def test_bytes_that_are_not_utf8_are_named_by_their_place(tmp_path):
    path = tmp_path / "run.json"
    path.write_bytes(b'{"format": "\xff"}')
    with pytest.raises(StorageError, match=_whole(f"{path}: not a run document: not UTF-8 text (byte 12); {LOAD_FIX}")):
        load_document(path)


def test_json_cut_short_is_a_corrupt_document_with_its_line_and_column(tmp_path):
    path = tmp_path / "run.json"
    path.write_text('{\n  "format": ')
    with pytest.raises(StorageError, match=_whole(
            f"{path}: corrupt run document: not valid JSON (line 2 column 13: Expecting value), perhaps cut short; {LOAD_FIX}")):
        load_document(path)


def test_a_damaged_field_in_a_file_is_named_with_the_files_path(tmp_path):
    path = tmp_path / "run.json"
    path.write_text(json.dumps(_data() | {"gpu_model": ""}))
    with pytest.raises(StorageError, match=_whole(
            f"{path}: invalid run document: gpu_model: must be a non-empty string, got ''; {FIX}")):
        load_document(path)


# -- the document ------------------------------------------------------------------------------------

@pytest.mark.parametrize("data, found", [
    ([1, 2], "'list'"),
    ("text", "'str'"),
    ({"format": "package.json"}, "'package.json'"),
    ({"version": 3}, "None"),
])
def test_something_else_than_a_run_document_is_named_for_what_it_is(data, found):
    with pytest.raises(StorageError, match=_whole(
            f'{SOURCE}: not a pytest-gpuenergy run document ("format" is {found}, expected {FORMAT!r}); '
            f"keep other files out of the storage folder")):
        _read(data)


@pytest.mark.parametrize("version", [True, 0, -1, "3", 2.0, None])
def test_a_version_that_is_no_whole_number_from_one_is_refused(version):
    data = _data() | {"version": version}
    if version is None:
        del data["version"]
    with pytest.raises(StorageError, match=_invalid("version", f"must be a whole number >= 1, got {version!r}")):
        _read(data)


def test_versions_one_to_the_current_are_read_and_a_newer_one_asks_for_an_upgrade():
    for version in range(1, VERSION + 1):
        assert _read(_data() | {"version": version}).run_id == RICH.run_id
    with pytest.raises(StorageError, match=_whole(
            f"{SOURCE}: run document format version {VERSION + 1} is newer than this pytest-gpuenergy reads "
            f"(version {VERSION}); upgrade it: pip install -U pytest-gpuenergy")):
        _read(_data() | {"version": VERSION + 1})


def test_created_at_must_be_an_iso_date_and_a_naive_one_is_utc():
    with pytest.raises(StorageError, match=_invalid("created_at", "'yesterday' is not an ISO 8601 date and time")):
        _read(_data() | {"created_at": "yesterday"})
    assert _read(_data() | {"created_at": "2025-03-01T10:00:00"}).created_at == T0
    assert _read(_data() | {"created_at": "2025-03-01T12:00:00+02:00"}).created_at == T0


def test_commit_may_be_null_or_an_object_and_nothing_else():
    assert _read(_data() | {"commit": None}).commit is None
    data = _data()
    del data["commit"]
    assert _read(data).commit is None
    with pytest.raises(StorageError, match=_invalid("commit", "must be an object or null")):
        _read(_data() | {"commit": "abc123"})


@pytest.mark.parametrize("key, problem", [
    ("run_id", "must be a non-empty string, got None"),
    ("created_at", "must be a non-empty string, got None"),
    ("backend", "must be a non-empty string, got None"),
    ("simulated", "must be true or false, got None"),
    ("gpu_model", "must be a non-empty string, got None"),
    ("machine", "must be an object"),
    ("options", "must be an object"),
    ("cases", "must be a list"),
])
def test_each_field_of_the_document_is_required_and_named(key, problem):
    data = _data()
    del data[key]
    with pytest.raises(StorageError, match=_invalid(key, problem)):
        _read(data)


@pytest.mark.parametrize("key, value, problem", [
    ("run_id", "", "must be a non-empty string, got ''"),
    ("backend", 5, "must be a non-empty string, got 5"),
    ("simulated", 1, "must be true or false, got 1"),
    ("machine", [], "must be an object"),
    ("cases", {}, "must be a list"),
])
def test_a_document_field_of_the_wrong_type_is_named(key, value, problem):
    with pytest.raises(StorageError, match=_invalid(key, problem)):
        _read(_data() | {key: value})


# -- a case --------------------------------------------------------------------------------------------

def _with_case(change: Any) -> dict[str, Any]:
    data = _data()
    change(data["cases"][1])
    return data


def _set(key: str, value: Any) -> Any:
    return lambda case: case.__setitem__(key, value)


def _drop(key: str) -> Any:
    return lambda case: case.pop(key)


def test_a_case_that_is_no_object_is_named_by_its_place():
    data = _data()
    data["cases"][1] = ["t.py::test_a"]
    with pytest.raises(StorageError, match=_invalid("cases[1]", "must be an object")):
        _read(data)


@pytest.mark.parametrize("key, problem", [
    ("repetitions", "must be a list"),
    ("case_id", "must be a non-empty string, got None"),
    ("gpu_index", "must be a whole number, got None"),
    ("cap", "must be a non-empty string, got None"),
    ("gpu_name", "must be a non-empty string, got None"),
    ("gpu_uuid", "must be a non-empty string, got None"),
    ("backend", "must be one of nvml, amdsmi, sim, got None"),
    ("simulated", "must be true or false, got None"),
    ("method", "must be one of counter, sampling, got None"),
    ("limit_enforced_w", "must be a number, got None"),
    ("default_limit_w", "must be a number, got None"),
])
def test_each_required_field_of_a_case_is_named_with_its_place(key, problem):
    with pytest.raises(StorageError, match=_invalid(f"cases[1].{key}", problem)):
        _read(_with_case(_drop(key)))


def test_a_case_without_repetitions_is_refused():
    with pytest.raises(StorageError, match=_invalid("cases[1].repetitions", "is empty; a case has at least one repetition")):
        _read(_with_case(_set("repetitions", [])))


@pytest.mark.parametrize("key, value, problem", [
    ("power_source", "psu", "must be one of instant, usage or null, got 'psu'"),
    ("gpu_index", True, "must be a whole number, got True"),
    ("gpu_index", "0", "must be a whole number, got '0'"),
    ("notes", "one note", "must be a list"),
    ("clock_cap", "", "must be a non-empty string or absent, got ''"),
    ("clock_cap", 1200, "must be a non-empty string or absent, got 1200"),
    ("gpu_slot", -1, "must be a whole number >= 0, got -1"),
    ("gpu_slot", 1 << 20, "must be a whole number >= 0, got 1048576"),
    ("gpu_slot", True, "must be a whole number >= 0, got True"),
    ("gpu_slot", 1.0, "must be a whole number >= 0, got 1.0"),
    ("rank", -1, "must be a whole number >= 0 or null, got -1"),
    ("rank", 1 << 31, "must be a whole number >= 0 or null, got 2147483648"),
    ("rank", False, "must be a whole number >= 0 or null, got False"),
    ("rank", "5", "must be a whole number >= 0 or null, got '5'"),
    ("host", 7, "must be a string or null, got 7"),
    ("outcome", "crashed", "must be one of passed, failed, error, skipped, xfailed, xpassed, got 'crashed'"),
    ("outcome", None, "must be one of passed, failed, error, skipped, xfailed, xpassed, got None"),
    ("backend", "cuda", "must be one of nvml, amdsmi, sim, got 'cuda'"),
    ("limit_requested_w", "150W", "must be a number, got '150W'"),
    ("sm_clock_cap_mhz", -5, "must be a number of MHz from 0 to 100000, got -5"),
    ("per_domain", [], "must be an object"),
])
def test_a_case_field_out_of_its_range_is_named_with_the_value(key, value, problem):
    with pytest.raises(StorageError, match=_invalid(f"cases[1].{key}", problem)):
        _read(_with_case(_set(key, value)))


@pytest.mark.parametrize("key, value", [
    ("gpu_slot", (1 << 20) - 1), ("gpu_slot", 0), ("rank", (1 << 31) - 1), ("rank", 0), ("rank", None), ("host", None),
    ("host", ""), ("clock_cap", None), ("power_source", None), ("power_source", "instant"), ("limit_requested_w", None),
    ("sm_clock_cap_mhz", None), ("gpu_index", 0),
])
def test_a_case_field_at_the_edge_of_its_range_is_read(key, value):
    assert getattr(_read(_with_case(_set(key, value))).cases[1], key) == value


def test_what_an_older_document_leaves_out_gets_its_default():
    data = _data()
    for case in data["cases"]:
        for key in ("outcome", "test", "notes", "clock_cap", "sm_clock_cap_mhz", "host", "rank", "per_domain",
                    "limit_requested_w", "power_source", "summary"):
            del case[key]
    case = _read(data).cases[1]
    assert (case.outcome, case.test, case.notes, case.clock_cap, case.sm_clock_cap_mhz, case.host, case.rank) == \
           ("passed", "t.py::test_train[60%]", (), None, None, None, None)
    assert (dict(case.per_domain), case.limit_requested_w, case.power_source) == ({}, None, None)


def test_a_case_keeps_its_own_test_id_and_its_notes_as_text():
    case = _read(_with_case(lambda c: c.update(test="t.py::test_renamed", notes=["a", 5]))).cases[1]
    assert case.test == "t.py::test_renamed" and case.notes == ("a", "5")
    assert _read(_with_case(_set("test", 5))).cases[1].test == "t.py::test_train[60%]"


# -- the GPU's place in an older document -----------------------------------------------------------

def test_a_document_from_before_gpu_slots_numbers_each_cases_gpus_in_file_order():
    data = _data()
    first = copy.deepcopy(data["cases"][0]) | {"cap": "300W"}
    data["cases"].insert(1, first)           # the same case at another cap, between the two GPUs of the first
    for case in data["cases"]:
        del case["gpu_slot"]
    assert [(c.cap, c.gpu_slot) for c in _read(data).cases] == [("60%", 0), ("300W", 0), ("60%", 1)]


def test_slots_written_in_the_document_are_kept_as_written():
    data = _data()
    data["cases"][0]["gpu_slot"], data["cases"][1]["gpu_slot"] = 4, 2
    assert [c.gpu_slot for c in _read(data).cases] == [4, 2]
    del data["cases"][0]["gpu_slot"]          # one case without: the document is an old one, numbered afresh
    assert [c.gpu_slot for c in _read(data).cases] == [0, 1]


# -- a repetition ---------------------------------------------------------------------------------------

def _with_rep(change: Any) -> dict[str, Any]:
    return _with_case(lambda case: change(case["repetitions"][1]))


REP = "cases[1].repetitions[1]"


def test_a_repetition_that_is_no_object_is_named_by_its_place():
    with pytest.raises(StorageError, match=_invalid(REP, "must be an object")):
        _read(_with_case(lambda case: case["repetitions"].__setitem__(1, 10.0)))


@pytest.mark.parametrize("calls", [0, -2, True, "3", 1.5])
def test_calls_must_be_a_whole_number_from_one(calls):
    with pytest.raises(StorageError, match=_invalid(f"{REP}.calls", f"must be a whole number >= 1, got {calls!r}")):
        _read(_with_rep(_set("calls", calls)))


def test_a_repetition_without_calls_was_one_call_and_missing_powers_are_undefined():
    rep = _read(_with_rep(lambda r: [r.pop(k) for k in ("calls", "mean_power_w", "peak_power_w", "phases")])).cases[1].repetitions[1]
    assert rep.calls == 1 and math.isnan(rep.mean_power_w) and math.isnan(rep.peak_power_w) and rep.phases is None
    assert _read(_with_rep(_set("calls", 1))).cases[1].repetitions[1].calls == 1


@pytest.mark.parametrize("key, problem", [("ets_j", "must be a number, got None"), ("time_s", "must be a number, got None")])
def test_a_repetitions_figures_are_required(key, problem):
    with pytest.raises(StorageError, match=_invalid(f"{REP}.{key}", problem)):
        _read(_with_rep(_drop(key)))


@pytest.mark.parametrize("low, high", [(None, 12.0), (10.0, None), (11.5, 12.0), (9.0, 10.9)])
def test_the_bound_must_hold_the_figure_or_be_absent_both_ends(low, high):
    problem = f"ets_low_j <= ets_j <= ets_high_j must hold (or both bounds be absent), got {low!r} <= 11.0 <= {high!r}"
    with pytest.raises(StorageError, match=_invalid(REP, problem)):
        _read(_with_rep(lambda r: r.update(ets_low_j=low, ets_high_j=high)))


@pytest.mark.parametrize("key", ["ets_low_j", "ets_high_j", "mean_power_w", "peak_power_w"])
def test_an_optional_figure_of_a_repetition_that_is_no_number_is_named_with_its_place(key):
    with pytest.raises(StorageError, match=_invalid(f"{REP}.{key}", "must be a number, got 'x'")):
        _read(_with_rep(_set(key, "x")))


@pytest.mark.parametrize("key", ["power_w", "time_share", "energy_share"])
def test_an_optional_figure_of_a_phase_that_is_no_number_is_named_with_its_place(key):
    with pytest.raises(StorageError, match=_invalid(f"{PHASE}.{key}", "must be a number, got 'x'")):
        _read(_with_phase(_set(key, "x")))


def test_a_bound_that_meets_its_figure_or_is_absent_is_read():
    rep = _read(_with_rep(lambda r: r.update(ets_low_j=11.0, ets_high_j=11.0))).cases[1].repetitions[1]
    assert (rep.ets_low_j, rep.ets_j, rep.ets_high_j) == (11.0, 11.0, 11.0)
    rep = _read(_with_rep(lambda r: r.update(ets_low_j=None, ets_high_j=None))).cases[1].repetitions[1]
    assert rep.ets_low_j is None and rep.ets_high_j is None


# -- phases ---------------------------------------------------------------------------------------------

PHASE = f"{REP}.phases.forward"


def _with_phase(change: Any) -> dict[str, Any]:
    return _with_rep(lambda rep: change(rep["phases"]["forward"]))


@pytest.mark.parametrize("phases", [{}, [], "forward"])
def test_phases_must_be_a_non_empty_object(phases):
    with pytest.raises(StorageError, match=_invalid(f"{REP}.phases", "must be a non-empty object (or absent)")):
        _read(_with_rep(_set("phases", phases)))


def test_a_phase_that_is_no_object_is_named():
    with pytest.raises(StorageError, match=_invalid(PHASE, "must be an object")):
        _read(_with_rep(lambda rep: rep["phases"].__setitem__("forward", 3.0)))


@pytest.mark.parametrize("key, problem", [
    ("ets_j", "must be a number, got None"), ("ets_low_j", "must be a number, got None"),
    ("ets_high_j", "must be a number, got None"), ("time_s", "must be a number, got None"),
    ("distinguishable", "must be true or false, got None"),
])
def test_each_required_figure_of_a_phase_is_named(key, problem):
    with pytest.raises(StorageError, match=_invalid(f"{PHASE}.{key}", problem)):
        _read(_with_phase(_drop(key)))


@pytest.mark.parametrize("low, high", [(3.1, 3.5), (2.5, 2.9)])
def test_a_phases_bound_must_hold_its_figure(low, high):
    with pytest.raises(StorageError, match=_invalid(PHASE, f"ets_low_j <= ets_j <= ets_high_j must hold, got {low!r} <= 3.0 <= {high!r}")):
        _read(_with_phase(lambda f: f.update(ets_low_j=low, ets_high_j=high)))


def test_why_not_must_be_text():
    with pytest.raises(StorageError, match=_invalid(f"{PHASE}.why_not", "must be a string or absent, got 0")):
        _read(_with_phase(_set("why_not", 0)))


def test_a_phase_read_back_keeps_every_figure_and_missing_shares_are_undefined():
    phase = _read(_with_phase(lambda f: f.update(ets_low_j=3.0, ets_high_j=3.0))).cases[1].repetitions[1].phases["forward"]
    assert (phase.ets_low_j, phase.ets_j, phase.ets_high_j) == (3.0, 3.0, 3.0)
    phase = _read(_with_phase(lambda f: [f.pop(k) for k in ("power_w", "time_share", "energy_share")])).cases[1].repetitions[1].phases["forward"]
    assert math.isnan(phase.power_w) and math.isnan(phase.time_share) and math.isnan(phase.energy_share)
    assert phase.why_not == "" and phase.distinguishable is True
    assert _read(_data()).cases[1].repetitions[1].phases["other"].why_not == "too short"


def test_operator_classes_are_checked_as_phases_are_and_named_as_op_classes():
    with pytest.raises(StorageError, match=_invalid(f"{REP}.op_classes", "must be a non-empty object (or absent)")):
        _read(_with_rep(_set("op_classes", {})))
    with pytest.raises(StorageError, match=_invalid(f"{REP}.op_classes.matmul.ets_j", "must be a number, got None")):
        _read(_with_rep(lambda rep: rep["op_classes"]["matmul"].pop("ets_j")))
    rep = _read(_with_rep(_drop("op_classes"))).cases[1].repetitions[1]
    assert rep.op_classes is None and rep.phases == _phases()


# -- per domain -------------------------------------------------------------------------------------------

DOMAIN = "cases[1].per_domain.cpu"


def _with_domain(change: Any) -> dict[str, Any]:
    return _with_case(lambda case: change(case["per_domain"]))


def test_a_domain_must_be_one_the_meter_knows():
    with pytest.raises(StorageError, match=_invalid("cases[1].per_domain.gpus.domain", "must be one of gpu, cpu, dram, node, got 'gpus'")):
        _read(_with_domain(lambda d: d.__setitem__("gpus", d.pop("gpu"))))


def test_a_domains_figure_that_is_no_object_is_named():
    with pytest.raises(StorageError, match=_invalid(DOMAIN, "must be an object")):
        _read(_with_domain(_set("cpu", 4.0)))


@pytest.mark.parametrize("key, problem", [
    ("ets_j", "must be a number, got None"), ("ets_low_j", "must be a number, got None"),
    ("ets_high_j", "must be a number, got None"), ("simulated", "must be true or false, got None"),
])
def test_each_figure_of_a_domain_is_required(key, problem):
    with pytest.raises(StorageError, match=_invalid(f"{DOMAIN}.{key}", problem)):
        _read(_with_domain(lambda d: d["cpu"].pop(key)))


@pytest.mark.parametrize("low, high", [(4.5, 5.0), (3.0, 3.5)])
def test_a_domains_bound_must_hold_its_figure(low, high):
    with pytest.raises(StorageError, match=_invalid(DOMAIN, f"ets_low_j <= ets_j <= ets_high_j must hold, got {low!r} <= 4.0 <= {high!r}")):
        _read(_with_domain(lambda d: d["cpu"].update(ets_low_j=low, ets_high_j=high)))


def test_a_domain_whose_bound_meets_its_figure_is_read():
    read = _read(_with_domain(lambda d: d["cpu"].update(ets_low_j=4.0, ets_high_j=4.0))).cases[1].per_domain["cpu"]
    assert read == DomainEnergy(4.0, 4.0, 4.0, False)


# -- the reader's typed fields, as CaseEntry.from_json uses them ------------------------------------

def test_a_field_read_at_the_top_is_named_by_its_key_alone_and_below_by_its_path():
    reader = DocumentReader(SOURCE)
    assert str(reader.fail("x", "bad")) == f"{SOURCE}: invalid run document: x: bad; {FIX}"
    with pytest.raises(StorageError, match=_invalid("cap", "must be a non-empty string, got ''")):
        reader.text({"cap": ""}, "cap", "cap")
    with pytest.raises(StorageError, match=_invalid("case.cap", "must be a non-empty string, got ''")):
        reader.text({"cap": ""}, "cap", "case")


def test_a_choice_is_matched_exactly_and_the_default_stands_for_an_absent_key():
    reader = DocumentReader(SOURCE)
    assert reader.choice({}, "method", "case", ("counter", "sampling"), default="sampling") == "sampling"
    with pytest.raises(StorageError, match=_invalid("case.method", "must be one of counter, sampling, got 'Counter'")):
        reader.choice({"method": "Counter"}, "method", "case", ("counter", "sampling"))


def test_numbers_optional_or_not():
    reader = DocumentReader(SOURCE)
    assert reader.number({}, "time_s", "r", optional=True) is None
    assert reader.number({"time_s": 2}, "time_s", "r") == 2.0 and isinstance(reader.number({"time_s": 2}, "time_s", "r"), float)
    with pytest.raises(StorageError, match=_invalid("r.time_s", "must be a number, got None")):
        reader.number({}, "time_s", "r")
    with pytest.raises(StorageError, match=_invalid("r.time_s", "must be a number of s from 0 to 1e+07, got nan")):
        reader.number({"time_s": math.nan}, "time_s", "r", optional=True)


def test_lists_optional_or_not():
    reader = DocumentReader(SOURCE)
    assert reader.items({}, "notes", "case", optional=True) == []
    assert reader.items({"notes": ["a"]}, "notes", "case", optional=True) == ["a"]
    with pytest.raises(StorageError, match=_invalid("case.notes", "must be a list")):
        reader.items({}, "notes", "case")


def test_a_case_read_on_its_own_without_a_slot_is_the_first_gpu():
    """An xdist worker's results are read case by case, without a document to number them."""
    data = {k: v for k, v in _data()["cases"][1].items() if k != "gpu_slot"}
    assert DocumentReader(SOURCE).case(data, "case").gpu_slot == 0


def test_a_case_read_on_its_own_is_named_case():
    data = _data()["cases"][0]
    assert CaseEntry.from_json(data, SOURCE) == RICH.cases[0]
    with pytest.raises(StorageError, match=_invalid("case.gpu_index", "must be a whole number, got None")):
        CaseEntry.from_json({k: v for k, v in data.items() if k != "gpu_index"}, SOURCE)
