"""Run documents: building, saving, loading, refusing bad files, and keeping names inside the folder."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_gpuenergy.errors import StorageError
from pytest_gpuenergy.meter.results import DomainEnergy, EnergyResult, Repetition
from pytest_gpuenergy.runs import store as storage
from pytest_gpuenergy.runs.ids import node_id_of
from pytest_gpuenergy.runs.provenance import collect_commit_info
from pytest_gpuenergy.runs.reader import load_document
from pytest_gpuenergy.runs.records import FORMAT, VERSION, RunDocument
from pytest_gpuenergy.runs.store import RunStore, build_documents, file_stem, slug

from helpers import H100, T0, V100, gpu_result, machine, make_doc, sweep_cases

COMMIT = {"id": "0123456789abcdef0123456789abcdef01234567", "branch": "main", "dirty": False}


def _files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


# -- building ------------------------------------------------------------------------------------

def test_document_has_the_documented_fields():
    doc = make_doc(n=3)
    data = doc.to_json()
    assert data["format"] == FORMAT and data["version"] == VERSION == 3
    assert set(data) == {"format", "version", "run_id", "created_at", "backend", "simulated", "gpu_model",
                         "machine", "commit", "options", "cases"}
    case = data["cases"][0]
    assert set(case) == {"case_id", "test", "cap", "gpu_index", "gpu_name", "gpu_uuid", "backend", "simulated",
                         "method", "power_source", "limit_requested_w", "limit_enforced_w", "default_limit_w",
                         "repetitions", "summary", "notes", "gpu_slot", "host", "rank", "outcome"}
    assert case["outcome"] == "passed"
    assert set(case["repetitions"][0]) == {"ets_j", "time_s", "edp_js", "mean_power_w", "peak_power_w", "calls",
                                           "ets_low_j", "ets_high_j"}
    assert case["repetitions"][0]["ets_low_j"] <= case["repetitions"][0]["ets_j"] <= case["repetitions"][0]["ets_high_j"]
    assert len(case["repetitions"]) == 3 and case["summary"]["n"] == 3
    rep = case["repetitions"][0]
    assert rep["edp_js"] == pytest.approx(rep["ets_j"] * rep["time_s"])
    assert data["created_at"] == "2025-03-01T10:00:00+00:00"
    assert data["run_id"].startswith("20250301T100000Z-")
    assert data["simulated"] is True and data["backend"] == "sim" and data["gpu_model"] == H100


def test_a_version_1_document_without_bounds_is_still_read(tmp_path):
    data = make_doc(n=2).to_json()
    data["version"] = 1
    for case in data["cases"]:
        for rep in case["repetitions"]:
            del rep["ets_low_j"], rep["ets_high_j"]
    path = tmp_path / "old.json"
    path.write_text(json.dumps(data))
    doc = load_document(path)
    rep = doc.cases[0].repetitions[0]
    assert rep.ets_low_j is None and rep.ets_high_j is None and doc.cases[0].summary.ets_low_j is None


def test_bounds_survive_a_save_and_a_load_and_a_bound_that_misses_its_figure_is_refused(tmp_path):
    doc = make_doc(n=2)
    path = tmp_path / "new.json"
    path.write_text(json.dumps(doc.to_json()))
    loaded = load_document(path).cases[0].repetitions[0]
    assert loaded.ets_low_j == doc.cases[0].repetitions[0].ets_low_j and loaded.ets_low_j < loaded.ets_j < loaded.ets_high_j
    data = doc.to_json()
    data["cases"][0]["repetitions"][0]["ets_high_j"] = data["cases"][0]["repetitions"][0]["ets_j"] / 2
    path.write_text(json.dumps(data))
    with pytest.raises(StorageError, match="ets_low_j <= ets_j <= ets_high_j"):
        load_document(path)


def test_one_document_per_gpu_model_and_backend():
    cases = sweep_cases(gpu_name=H100, caps_w=(300.0,), workloads=("a",))
    cases += sweep_cases(gpu_name=V100, caps_w=(200.0,), workloads=("b",))
    cases += sweep_cases(gpu_name=H100, backend="nvml", caps_w=(300.0,), workloads=("c",))
    # one case measured on two GPUs of different models lands in both documents
    two = EnergyResult(per_gpu=(gpu_result(cap="250W", limit_w=250.0, gpu_name=H100),
                                gpu_result(cap="250W", limit_w=250.0, gpu_name=V100, gpu_index=1)))
    cases.append(("t.py::test_both[250W]", two))
    docs = build_documents(cases, machine=machine("sim", (H100, V100)), options={}, commit=None, created_at=T0)
    assert [(d.backend, d.gpu_model) for d in docs] == [("sim", H100), ("sim", V100), ("nvml", H100)]
    assert len({d.run_id for d in docs}) == 3
    by_model = {(d.backend, d.gpu_model): d for d in docs}
    assert {c.gpu_name for c in by_model[("sim", V100)].cases} == {V100}
    assert [c.case_id for c in by_model[("sim", V100)].cases][-1] == "t.py::test_both[250W]"
    assert [g["name"] for g in by_model[("sim", V100)].machine["gpus"]] == [V100]
    assert by_model[("nvml", H100)].simulated is False


def test_region_suffix_is_cut_from_the_test_id():
    assert node_id_of("t.py::test_a[150W]#2") == "t.py::test_a[150W]"
    assert node_id_of("t.py::test_a#3") == "t.py::test_a"
    assert node_id_of("t.py::test_a[x#2]") == "t.py::test_a[x#2]"
    cases = [("t.py::test_a[150W]#2", EnergyResult(per_gpu=(gpu_result(cap="150W", limit_w=150.0),)))]
    doc = build_documents(cases, machine={}, options={}, commit=None)[0]
    assert doc.cases[0].test == "t.py::test_a[150W]" and doc.cases[0].case_id == "t.py::test_a[150W]#2"


@pytest.mark.parametrize("name, value, expected", [
    ("options", {"caps": object()}, "options cannot be saved as JSON"),
    ("machine", ["not", "a", "dict"], "machine must be a dict"),
    ("options", {"x": math.nan}, "options cannot be saved as JSON"),
])
def test_unsavable_inputs_are_refused_with_the_reason(name, value, expected):
    kwargs = {"machine": {}, "options": {}, "commit": None, name: value}
    with pytest.raises(ValueError, match=expected):
        build_documents(sweep_cases(caps_w=(300.0,), workloads=("a",)), **kwargs)


# -- saving and loading ------------------------------------------------------------------------------

def test_round_trip(tmp_path):
    doc = make_doc(n=4, commit=COMMIT)
    store = RunStore(tmp_path / ".energy")
    path = store.save(doc)
    assert path == tmp_path / ".energy" / "sim" / "nvidia-h100-80gb-hbm3-simulated" / f"{doc.run_id}.json"
    loaded = store.load(path)
    assert loaded == doc and loaded.path == path
    assert loaded.cases[0].repetitions == doc.cases[0].repetitions     # floats survive exactly
    assert loaded.cases[0].summary == doc.cases[0].summary
    assert loaded.created_at.tzinfo is not None
    assert json.loads(path.read_text())["commit"] == COMMIT


def test_undefined_figures_are_written_as_null_and_read_back(tmp_path):
    rep = Repetition(ets_j=0.0, time_s=0.0, mean_power_w=math.nan, peak_power_w=5.0)
    result = replace(gpu_result(cap="current", limit_w=700.0), repetitions=(rep,), limit_requested_w=None)
    doc = build_documents([("t.py::test_zero", EnergyResult(per_gpu=(result,)))], machine={}, options={}, commit=None)[0]
    path = RunStore(tmp_path).save(doc)
    text = path.read_text()
    assert "NaN" not in text and json.loads(text)["cases"][0]["repetitions"][0]["mean_power_w"] is None
    loaded = load_document(path).cases[0]
    assert math.isnan(loaded.repetitions[0].mean_power_w) and loaded.limit_requested_w is None



def test_a_case_keeps_its_results_notes_on_each_gpu_and_its_gpus_own(tmp_path):
    """The meter puts its notes (a coarse figure, CPU time for GPU work, a host estimate) on the result:
    every GPU's case of it keeps them, with its own, once each and in order, through a save and a load."""
    first = gpu_result(cap="current", limit_w=700.0, notes=("d: the first GPU's own", "b: both"))
    second = replace(gpu_result(cap="current", limit_w=700.0, gpu_index=1), notes=())
    cpu = DomainEnergy(ets_j=2.0, ets_low_j=1.5, ets_high_j=2.5, simulated=True)
    result = EnergyResult(per_gpu=(first, second), notes=("c: coarse", "a: CPU time stood for GPU work", "b: both"),
                          per_domain={"cpu": cpu})
    doc = build_documents([("t.py::test_two", result)], machine={}, options={}, commit=None)[0]
    loaded = load_document(RunStore(tmp_path).save(doc))
    assert [case.notes for case in loaded.cases] == [
        ("a: CPU time stood for GPU work", "b: both", "c: coarse", "d: the first GPU's own"),
        ("a: CPU time stood for GPU work", "b: both", "c: coarse"),
    ]
    assert [case.per_domain for case in loaded.cases] == [{"cpu": cpu}, {"cpu": cpu}]     # the case's, on each GPU

def test_saving_never_overwrites(tmp_path):
    store = RunStore(tmp_path)
    doc = make_doc()
    path = store.save(doc)
    before = path.read_bytes()
    changed = replace(doc, options={"different": True})
    with pytest.raises(StorageError, match="already exists.*nothing was overwritten"):
        store.save(changed)
    assert path.read_bytes() == before
    store.save(changed, overwrite=True)          # only when asked
    assert json.loads(path.read_text())["options"] == {"different": True}


def test_a_failing_write_leaves_the_old_file_and_no_debris(tmp_path, monkeypatch):
    store = RunStore(tmp_path)
    doc = make_doc()
    path = store.save(doc)
    before = _files(tmp_path)
    assert path.name in "".join(before)

    def broken_fsync(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", broken_fsync)
    with pytest.raises(StorageError, match="cannot write .*No space left on device"):
        store.save(replace(doc, options={"new": 1}), overwrite=True)
    assert _files(tmp_path) == before


def test_unique_run_ids_for_runs_in_the_same_second():
    ids = {storage.new_run_id(T0) for _ in range(200)}
    assert len(ids) == 200


# -- bad files ---------------------------------------------------------------------------------------

def _good_json(doc: RunDocument) -> dict:
    return json.loads(json.dumps(doc.to_json()))


def _bad_files(doc: RunDocument) -> dict[str, tuple[bytes, str]]:
    good = json.dumps(doc.to_json(), indent=2).encode()
    newer = _good_json(doc) | {"version": VERSION + 1}
    wrong_field = _good_json(doc)
    wrong_field["cases"][1]["repetitions"][0]["ets_j"] = "lots"
    no_reps = _good_json(doc)
    no_reps["cases"][0]["repetitions"] = []
    return {
        "truncated": (good[: len(good) // 2], "corrupt run document: not valid JSON"),
        "empty": (b"", "is empty"),
        "binary": (b"\xff\xfe\x00garbage", "not UTF-8"),
        "foreign": (json.dumps({"name": "package.json", "version": "1.0.0"}).encode(), "not a pytest-gpuenergy run document"),
        "list": (b"[1, 2, 3]", "not a pytest-gpuenergy run document"),
        "newer": (json.dumps(newer).encode(), "version 4 is newer.*pip install -U pytest-gpuenergy"),
        "wrong-field": (json.dumps(wrong_field).encode(), r"cases\[1\]\.repetitions\[0\]\.ets_j: must be a number"),
        "no-repetitions": (json.dumps(no_reps).encode(), r"cases\[0\]\.repetitions: is empty"),
        "bad-version": (json.dumps(_good_json(doc) | {"version": "1"}).encode(), "version: must be a whole number"),
    }


@pytest.mark.parametrize("kind", list(_bad_files(make_doc(workloads=("a",), caps_w=(200.0, 300.0)))))
def test_bad_files_give_an_error_naming_the_file_and_stay_untouched(tmp_path, kind):
    doc = make_doc(workloads=("a",), caps_w=(200.0, 300.0))
    content, message = _bad_files(doc)[kind]
    store = RunStore(tmp_path)
    path = store.path_for(doc)
    path.parent.mkdir(parents=True)
    path.write_bytes(content)
    stat = path.stat()
    for attempt in (lambda: store.load(path), lambda: store.runs(), lambda: store.latest("sim", H100),
                    lambda: store.resolve(doc.run_id), lambda: store.resolve(str(path))):
        with pytest.raises(StorageError, match=message) as info:
            attempt()
        assert str(path) in str(info.value)
    assert path.read_bytes() == content and path.stat().st_mtime_ns == stat.st_mtime_ns
    assert [p.name for p in path.parent.iterdir()] == [path.name]
    docs, problems = store.scan()
    assert docs == [] and len(problems) == 1 and str(path) in str(problems[0])


def test_a_bad_file_is_not_skipped_when_finding_the_baseline(tmp_path):
    """The newest baseline being corrupt must stop the comparison, not fall back to an older one."""
    store = RunStore(tmp_path)
    store.save(make_doc(minutes=0))
    newest = make_doc(minutes=10)
    path = store.save(newest)
    path.write_text(path.read_text()[:100])
    with pytest.raises(StorageError, match=str(path)):
        store.latest("sim", H100)


# -- names and paths ----------------------------------------------------------------------------------

NASTY = ["../../../etc/evil", "/abs/olute", "a/b\\c", "..", ".", "", "GPU ☃ ünïcödé 日本", "x" * 300,
         "NUL\x00byte", "  spaces  ", "-leading-dash", "CON"]


@pytest.mark.parametrize("name", NASTY)
def test_names_cannot_leave_the_storage_folder(tmp_path, name):
    folder = tmp_path / "store"
    doc = replace(make_doc(workloads=("a",), caps_w=(300.0,)), gpu_model=name or "x", backend=name or "y", run_id=name or "z")
    store = RunStore(folder)
    path = store.save(doc)
    assert path.resolve().is_relative_to(folder.resolve())
    assert path.parent.parent.parent == folder
    assert len(path.name) <= 120 and path.name.isascii()
    assert [p for p in tmp_path.rglob("*") if p.is_file()] == [path]
    assert store.load(path).run_id == doc.run_id
    if doc.run_id.strip():
        assert store.resolve(doc.run_id).run_id == doc.run_id


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=400))
def test_slugs_and_file_stems_are_always_plain_names(text):
    for name in (slug(text), file_stem(text)):
        assert name and name not in (".", "..") and "/" not in name and "\\" not in name and "\x00" not in name
        assert name.isascii() and len(name) <= 100 and not name.startswith(".")
    assert all(c.isalnum() or c == "-" for c in slug(text))


def test_distinct_unsafe_run_ids_get_distinct_files():
    assert file_stem("a/b") != file_stem("a b") != file_stem("a-b")
    assert file_stem("20250301T100000Z-1a2b3c4d") == "20250301T100000Z-1a2b3c4d"


# -- listing and resolving ----------------------------------------------------------------------------

def _store_with_history(tmp_path: Path) -> tuple[RunStore, list[RunDocument]]:
    store = RunStore(tmp_path)
    docs = [make_doc(minutes=20, seed=2), make_doc(minutes=0, seed=1), make_doc(minutes=10, gpu_name=V100),
            make_doc(minutes=30, backend="nvml", gpu_name="NVIDIA H100 80GB HBM3")]
    for doc in docs:
        store.save(doc)
    (tmp_path / "README.txt").write_text("not a run")          # other files are ignored
    return store, docs


def test_runs_are_listed_oldest_first_and_filtered(tmp_path):
    store, docs = _store_with_history(tmp_path)
    assert [d.run_id for d in store.runs()] == [docs[1].run_id, docs[2].run_id, docs[0].run_id, docs[3].run_id]
    assert [d.run_id for d in store.runs("sim", H100)] == [docs[1].run_id, docs[0].run_id]
    assert store.latest("sim", H100).run_id == docs[0].run_id
    assert store.latest("nvml", "NVIDIA H100 80GB HBM3").run_id == docs[3].run_id
    assert store.latest("sim", "Tesla T4 (simulated)") is None
    assert RunStore(tmp_path / "missing").runs() == []


def test_resolve_by_path_id_prefix_and_latest(tmp_path):
    store, docs = _store_with_history(tmp_path)
    path = store.path_for(docs[0])
    assert store.resolve(str(path)).run_id == docs[0].run_id
    assert store.resolve(docs[2].run_id).run_id == docs[2].run_id
    assert store.resolve(docs[2].run_id[:22]).run_id == docs[2].run_id
    assert store.resolve("latest", "sim", H100).run_id == docs[0].run_id
    with pytest.raises(StorageError, match="'latest' is ambiguous"):
        store.resolve("latest")
    with pytest.raises(StorageError, match="ambiguous"):
        store.resolve("2025")
    with pytest.raises(StorageError, match="no saved run 'nope'.*gpuenergy runs"):
        store.resolve("nope")
    with pytest.raises(StorageError, match="no such run document"):
        store.resolve(str(tmp_path / "gone.json"))
    with pytest.raises(StorageError, match="no saved run for Tesla T4.*--energy-save"):
        store.resolve("latest", "sim", "Tesla T4")


# -- machine and commit ----------------------------------------------------------------------------

class _Limits:
    default_mw, min_mw, max_mw = 700_000, 200_000, 700_000


class _FakeGpu:
    def __init__(self, index: int) -> None:
        self.index, self.name, self.uuid = index, H100, f"GPU-{index}"

    def limits(self) -> _Limits:
        return _Limits()


class _FakeBackend:
    name, simulated, driver_version, cuda_driver_version = "sim", True, "550.54.15", "12.4"


def test_machine_info_describes_the_gpus_without_importing_torch():
    code = (
        "import sys, json\n"
        "sys.path.insert(0, %r)\n"
        "from test_storage import _FakeBackend, _FakeGpu\n"
        "from pytest_gpuenergy.runs.provenance import collect_machine_info\n"
        "info = collect_machine_info(_FakeBackend(), [_FakeGpu(0), _FakeGpu(1)])\n"
        "print(json.dumps({'info': info, 'torch_imported': 'torch' in sys.modules}))\n"
    ) % str(Path(__file__).parent)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    data = json.loads(out.stdout)
    info = data["info"]
    assert data["torch_imported"] is False
    assert {"host", "platform", "python", "backend", "simulated", "driver", "cuda", "torch", "gpus"} <= set(info)
    assert info["driver"] == "550.54.15" and info["cuda_driver"] == "12.4" and info["cuda"] is None
    assert info["gpus"][1] == {"index": 1, "name": H100, "uuid": "GPU-1", "default_limit_w": 700.0,
                               "min_limit_w": 200.0, "max_limit_w": 700.0}
    json.dumps(info, allow_nan=False)


def _git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True,
                   env={**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@e", "GIT_COMMITTER_NAME": "t",
                        "GIT_COMMITTER_EMAIL": "t@e"})


def test_commit_info_from_git(tmp_path, monkeypatch):
    for name in ("GITHUB_HEAD_REF", "GITHUB_REF_NAME", "CI_COMMIT_REF_NAME"):
        monkeypatch.delenv(name, raising=False)
    _git(tmp_path, "init", "-q", "-b", "energy-work")
    (tmp_path / "f.txt").write_text("1")
    _git(tmp_path, "add", "f.txt")
    _git(tmp_path, "commit", "-q", "-m", "one")
    info = collect_commit_info(tmp_path)
    assert info is not None and len(info["id"]) == 40
    assert info["branch"] == "energy-work" and info["dirty"] is False
    (tmp_path / "untracked.json").write_text("{}")            # a new run document is not "dirty"
    assert collect_commit_info(tmp_path)["dirty"] is False
    (tmp_path / "f.txt").write_text("2")
    assert collect_commit_info(tmp_path)["dirty"] is True
    _git(tmp_path, "checkout", "-q", "--detach")
    monkeypatch.setenv("GITHUB_HEAD_REF", "feature/faster")
    assert collect_commit_info(tmp_path)["branch"] == "feature/faster"


def test_commit_info_is_none_outside_git_or_without_git(tmp_path, monkeypatch):
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path))
    assert collect_commit_info(tmp_path) is None
    assert collect_commit_info(tmp_path / "does-not-exist") is None
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))
    assert collect_commit_info(Path(__file__).parent) is None


def test_naive_created_at_is_taken_as_utc():
    doc = build_documents(sweep_cases(caps_w=(300.0,), workloads=("a",)), machine={}, options={}, commit=None,
                          created_at=datetime(2025, 1, 2, 3, 4, 5))[0]
    assert doc.created_at == datetime(2025, 1, 2, 3, 4, 5, tzinfo=timezone.utc)
