"""runs/records.py on its own: a saved case and a run document, their JSON form (the documented
format, key by key), the passed-only view baselines use, and the small texts listings print, in this
process (the mutation run's fast tests for the module; named for its package, as gate/ has a
records.py too)."""

from __future__ import annotations

import json
import math
import re
import time
from dataclasses import fields, replace
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from pytest_gpuenergy.errors import StorageError
from pytest_gpuenergy.meter.results import DomainEnergy, GpuResult, Repetition
from pytest_gpuenergy.runs.records import (
    FORMAT,
    VERSION,
    CaseEntry,
    RunDocument,
    as_utc,
    commit_text,
    model_label,
    model_text,
    nan_if_none,
    require_json,
    with_origin,
)

from helpers import H100, T0, gpu_result

DOMAINS = {"gpu": DomainEnergy(21.0, 20.0, 22.0, True), "node": DomainEnergy(30.0, 28.0, 32.0, True)}


def _gpu(**changes: Any) -> GpuResult:
    rep = Repetition(ets_j=10.0, time_s=2.0, mean_power_w=5.0, peak_power_w=7.0, calls=2, ets_low_j=9.0, ets_high_j=11.0)
    return replace(gpu_result(cap="300W", limit_w=300.0, gpu_index=1), repetitions=(rep,), **changes)


def _entry(case_id: str = "t.py::test_a[300W]#2", **changes: Any) -> CaseEntry:
    return replace(CaseEntry.from_gpu_result(case_id, _gpu(), 1, "failed", DOMAINS), **changes)


def _doc(*cases: CaseEntry, **changes: Any) -> RunDocument:
    doc = RunDocument(run_id="20250301T100000Z-0a1b2c3d", created_at=T0, backend="sim", simulated=True, gpu_model=H100,
                      machine={"host": "ci-1"}, commit={"id": "0123456789abcdef", "branch": "main", "dirty": False},
                      options={"repeat": 1}, cases=cases or (_entry(),))
    return replace(doc, **changes)


# -- a saved case ---------------------------------------------------------------------------------------

def test_a_case_placed_in_a_run_keeps_the_gpus_figures_and_says_where_it_belongs():
    gpu = _gpu(clock_cap="1200MHz", sm_clock_cap_mhz=1185.0, host="node-2", rank=3, notes=("hot",))
    entry = CaseEntry.from_gpu_result("t.py::test_a[300W]#2", gpu, 1, "failed", DOMAINS)
    assert GpuResult.to_json(entry) == gpu.to_json()
    assert (entry.case_id, entry.test, entry.gpu_slot, entry.outcome) == ("t.py::test_a[300W]#2", "t.py::test_a[300W]", 1, "failed")
    assert entry.per_domain == DOMAINS and entry.per_domain is not DOMAINS


def test_a_case_placed_without_a_slot_outcome_or_domains_is_the_first_gpu_and_passed():
    entry = CaseEntry.from_gpu_result("t.py::test_a", _gpu())
    assert (entry.gpu_slot, entry.outcome, dict(entry.per_domain), entry.passed) == (0, "passed", {}, True)
    assert dict(CaseEntry.from_gpu_result("t.py::test_a", _gpu(), per_domain=None).per_domain) == {}


def test_a_case_made_directly_is_the_first_gpu_passed_and_without_domains_and_can_be_hashed():
    gpu = _gpu()
    entry = CaseEntry(**{f.name: getattr(gpu, f.name) for f in fields(GpuResult)}, case_id="t.py::test_a", test="t.py::test_a")
    assert (entry.gpu_slot, entry.outcome, dict(entry.per_domain)) == (0, "passed", {})
    assert hash(_entry()) == hash(_entry()) and len({_entry(), _entry(), _entry(outcome="passed")}) == 2


def test_a_case_is_known_across_runs_by_its_id_cap_and_place_not_its_gpu_index():
    entry = _entry()
    assert entry.key == ("t.py::test_a[300W]#2", "300W", 1)
    assert replace(entry, gpu_index=5).key == entry.key
    assert replace(entry, cap="200W").key != entry.key


@pytest.mark.parametrize("outcome, passed", [("passed", True), ("failed", False), ("xfailed", False), ("skipped", False)])
def test_only_a_passed_case_counts_as_passed(outcome, passed):
    assert _entry(outcome=outcome).passed is passed


def test_a_case_in_json_is_the_documented_record():
    data = _entry().to_json()
    assert list(data)[:2] == ["case_id", "test"]
    assert {k: data[k] for k in ("case_id", "test", "cap", "gpu_index", "gpu_slot", "outcome")} == {
        "case_id": "t.py::test_a[300W]#2", "test": "t.py::test_a[300W]", "cap": "300W", "gpu_index": 1,
        "gpu_slot": 1, "outcome": "failed"}
    assert data["per_domain"] == {"gpu": {"ets_j": 21.0, "ets_low_j": 20.0, "ets_high_j": 22.0, "simulated": True},
                                  "node": {"ets_j": 30.0, "ets_low_j": 28.0, "ets_high_j": 32.0, "simulated": True}}
    assert {k: v for k, v in data.items() if k not in ("case_id", "test", "gpu_slot", "outcome", "per_domain")} == _gpu().to_json()
    assert "per_domain" not in _entry(per_domain={}).to_json()


def test_a_case_reads_back_from_its_json_as_it_was():
    entry = _entry(test="t.py::test_a[custom]")       # a test id that the case id alone would not give
    assert CaseEntry.from_json(json.loads(json.dumps(entry.to_json())), "run.json") == entry


def test_a_damaged_case_is_named_as_the_case_of_its_source():
    data = _entry().to_json()
    data["cap"] = ""
    with pytest.raises(StorageError, match=re.escape("run.json: invalid run document: case.cap: must be a non-empty string, got ''; ")):
        CaseEntry.from_json(data, "run.json")


# -- a run document ---------------------------------------------------------------------------------------

def test_a_document_in_json_is_the_documented_format():
    doc = _doc()
    assert doc.to_json() == {
        "format": "pytest-gpuenergy-run", "version": 3, "run_id": "20250301T100000Z-0a1b2c3d",
        "created_at": "2025-03-01T10:00:00+00:00", "backend": "sim", "simulated": True, "gpu_model": H100,
        "machine": {"host": "ci-1"}, "commit": {"id": "0123456789abcdef", "branch": "main", "dirty": False},
        "options": {"repeat": 1}, "cases": [doc.cases[0].to_json()],
    }
    assert (FORMAT, VERSION) == ("pytest-gpuenergy-run", 3)


def test_a_document_reads_back_from_its_json_as_it_was():
    doc = _doc(_entry(), _entry("t.py::test_b", gpu_slot=0, outcome="passed"), commit=None)
    assert RunDocument.from_json(json.loads(json.dumps(doc.to_json())), "run.json") == doc


def test_a_damaged_document_names_its_source_or_says_run_document():
    data = _doc().to_json() | {"backend": ""}
    problem = "invalid run document: backend: must be a non-empty string, got ''; "
    with pytest.raises(StorageError, match="^" + re.escape("run.json: " + problem)):
        RunDocument.from_json(data, "run.json")
    with pytest.raises(StorageError, match="^" + re.escape("run document: " + problem)):
        RunDocument.from_json(data)


def test_a_documents_origin_says_whether_the_simulator_made_it():
    assert _doc().origin == "simulated"
    assert _doc(simulated=False).origin == "measured"


def test_the_passed_only_view_drops_the_cases_whose_test_did_not_pass():
    passed, failed, also_passed = _entry(outcome="passed"), _entry("t.py::test_b"), _entry("t.py::test_c", outcome="passed")
    doc = _doc(passed, failed, also_passed)
    assert doc.passed_only().cases == (passed, also_passed)
    assert doc.passed_only().run_id == doc.run_id
    whole = _doc(passed, also_passed)
    assert whole.passed_only() is whole
    assert _doc(failed).passed_only().cases == ()


def test_a_listing_line_says_id_date_model_cases_and_commit():
    doc = _doc(_entry(), _entry("t.py::test_b"), created_at=datetime(2025, 3, 1, 12, 5, tzinfo=timezone.utc))
    assert doc.describe() == f"20250301T100000Z-0a1b2c3d  2025-03-01 12:05 UTC  {H100} [sim]  2 cases  0123456789 (main)"
    simulated = replace(doc, gpu_model="NVIDIA H100 80GB HBM3", commit=None)    # a name that does not say it
    assert simulated.describe().split("  ")[2:] == ["NVIDIA H100 80GB HBM3 (simulated) [sim]", "2 cases", "no commit"]
    measured = replace(simulated, backend="nvml", simulated=False)
    assert measured.describe().split("  ")[2] == "NVIDIA H100 80GB HBM3 [nvml]"


def test_a_document_keeps_where_it_came_from_out_of_its_equality():
    doc = _doc()
    assert replace(doc, path=Path("a.json")) == replace(doc, path=Path("b.json"), sources=("a", "b"))
    assert doc.path is None and doc.sources == ()


# -- the texts of listings ----------------------------------------------------------------------------------

@pytest.mark.parametrize("commit, text", [
    (None, "no commit"),
    ({}, "no commit"),
    ({"id": "", "branch": "main"}, "no commit"),
    ({"branch": "main"}, "no commit"),
    ({"id": "0123456789abcdef", "branch": "main", "dirty": True}, "0123456789 (main, dirty)"),
    ({"id": "0123456789abcdef", "branch": "main", "dirty": False}, "0123456789 (main)"),
    ({"id": "0123456789abcdef", "dirty": True}, "0123456789 (dirty)"),
    ({"id": "0123456789abcdef", "branch": None}, "0123456789"),
    ({"id": "0123456789", "branch": ""}, "0123456789"),
    ({"id": 12345678901}, "1234567890"),
])
def test_a_commit_reads_as_its_short_id_branch_and_state(commit, text):
    assert commit_text(commit) == text


@pytest.mark.parametrize("name, simulated, text", [
    ("NVIDIA H100 80GB HBM3", True, "NVIDIA H100 80GB HBM3 (simulated)"),
    ("NVIDIA H100 80GB HBM3", False, "NVIDIA H100 80GB HBM3"),
    (H100, True, H100),
    ("Tesla V100 (Simulated)", True, "Tesla V100 (Simulated)"),
])
def test_a_simulated_models_name_says_so_once(name, simulated, text):
    assert with_origin(name, simulated) == text


@pytest.mark.parametrize("name, text", [
    (H100, "H100 80GB HBM3"),
    ("AMD Instinct MI300X", "Instinct MI300X"),
    ("AMD NVIDIA X", "NVIDIA X"),
    ("Tesla V100-SXM2-32GB", "Tesla V100-SXM2-32GB"),
    ("NVIDIA ", "NVIDIA "),
    (" (simulated)", " (simulated)"),
])
def test_a_models_name_in_a_table_leaves_out_the_vendor_and_the_simulators_suffix(name, text):
    assert model_text(name) == text


def test_a_models_label_in_titles_says_its_origin_and_backend():
    assert model_label("NVIDIA H100 80GB HBM3", "nvml", False) == "NVIDIA H100 80GB HBM3 [nvml]"
    assert model_label("NVIDIA H100 80GB HBM3", "sim", True) == "NVIDIA H100 80GB HBM3 (simulated) [sim]"


# -- small helpers ----------------------------------------------------------------------------------------

def test_an_undefined_figure_is_nan_and_a_figure_stays_itself():
    assert math.isnan(nan_if_none(None))
    assert nan_if_none(0.0) == 0.0 and nan_if_none(2.5) == 2.5


def test_times_are_kept_in_utc_and_a_naive_one_is_utc_already():
    naive = datetime(2025, 3, 1, 10, 0)
    assert as_utc(naive) == T0 and as_utc(naive).tzinfo is timezone.utc
    east = datetime(2025, 3, 1, 12, 0, tzinfo=timezone(timedelta(hours=2)))
    assert as_utc(east) == T0 and as_utc(east).utcoffset() == timedelta(0) and as_utc(east).hour == 10


def test_an_aware_time_is_converted_to_utc_not_to_the_local_zone(monkeypatch):
    monkeypatch.setenv("TZ", "XYZ-07")          # seven hours east of UTC (a POSIX zone: no tz database needed)
    time.tzset()
    try:
        moved = as_utc(datetime(2025, 3, 1, 12, 0, tzinfo=timezone(timedelta(hours=2))))
    finally:
        monkeypatch.undo()
        time.tzset()
    assert (moved.hour, moved.utcoffset()) == (10, timedelta(0))


@pytest.mark.parametrize("value, message", [
    (["a"], "build_documents: options must be a dict, got list"),
    (None, "build_documents: options must be a dict, got NoneType"),
    ({"x": math.nan}, "build_documents: options cannot be saved as JSON (Out of range float values are not JSON "
                      "compliant); pass only strings, numbers, booleans, None, lists and dicts"),
    ({"x": {1, 2}}, "build_documents: options cannot be saved as JSON (Object of type set is not JSON serializable); "
                    "pass only strings, numbers, booleans, None, lists and dicts"),
])
def test_what_cannot_be_saved_as_json_is_refused_naming_it(value, message):
    with pytest.raises(ValueError, match="^" + re.escape(message) + "$"):
        require_json("options", value)


def test_what_can_be_saved_as_json_passes():
    assert require_json("machine", {"gpus": [{"name": "x", "limit_w": 300.0, "ok": True, "none": None}]}) is None
