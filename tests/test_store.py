"""runs/store.py at its edges, in this process (the mutation run's fast tests for the module): the
documents a session gives, saving (atomic, never over a saved run unless asked, the teams' hook
checked before anything is written), names, listing and filtering, 'latest' and run ids, the
project's storage folder, and every error word for word.

``tests/test_storage.py`` covers the ordinary paths (round trips, bad files, nasty names); these
tests pin what it leaves open: which series a lookup reads, which files it is allowed to trip
over, and what each error says.
"""

from __future__ import annotations

import hashlib
import io
import json
import math
import os
import re
import time
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from pytest_gpuenergy.errors import StorageError
from pytest_gpuenergy.meter.results import DomainEnergy, EnergyResult
from pytest_gpuenergy.runs.records import RunDocument
from pytest_gpuenergy.runs.store import RunStore, build_documents, file_stem, new_run_id, project_storage, slug

from helpers import H100, T0, V100, gpu_result, machine, make_doc, sweep_cases


def _case(case_id: str = "t.py::test_a[300W]", **kwargs) -> tuple[str, EnergyResult]:
    return case_id, EnergyResult(per_gpu=(gpu_result(cap="300W", limit_w=300.0, **kwargs),))


def _exactly(message: str) -> str:
    """A ``pytest.raises`` pattern that matches ``message`` whole, word for word."""
    return f"^{re.escape(message)}$"


# -- the documents a session gives ---------------------------------------------------------------

@pytest.mark.parametrize("commit, problem", [
    (["id"], "build_documents: commit must be a dict, got list"),
    ({"id": math.inf}, "build_documents: commit cannot be saved as JSON (Out of range float values are not JSON "
                       "compliant); pass only strings, numbers, booleans, None, lists and dicts"),
])
def test_a_commit_that_cannot_be_saved_is_refused_by_its_name(commit, problem):
    with pytest.raises(ValueError, match=_exactly(problem)):
        build_documents([_case()], machine={}, options={}, commit=commit)


@pytest.mark.parametrize("case_id", ["", None, 7])
def test_a_case_without_an_id_is_refused(case_id):
    with pytest.raises(ValueError, match=_exactly(
            f"build_documents: case id {case_id!r} must be a non-empty string (a pytest node id)")):
        build_documents([(case_id, _case()[1])], machine={}, options={}, commit=None)


def test_a_gpu_without_repetitions_is_refused_naming_the_case_and_gpu():
    empty = replace(gpu_result(cap="300W", limit_w=300.0, gpu_index=3), repetitions=())
    with pytest.raises(ValueError, match=_exactly("build_documents: case 't.py::test_e' has no repetition on GPU 3")):
        build_documents([("t.py::test_e", EnergyResult(per_gpu=(empty,)))], machine={}, options={}, commit=None)


def test_each_case_keeps_its_outcome_and_an_unnamed_case_passed():
    cases = [_case("t.py::test_a[300W]"), _case("t.py::test_b[300W]")]
    doc = build_documents(cases, machine={}, options={}, commit=None, outcomes={"t.py::test_b[300W]": "failed"})[0]
    assert [(c.case_id, c.outcome) for c in doc.cases] == [("t.py::test_a[300W]", "passed"), ("t.py::test_b[300W]", "failed")]


def test_the_case_figures_per_domain_go_into_each_gpu_entry():
    domains = {"gpu": DomainEnergy(10.0, 9.0, 11.0, True), "cpu": DomainEnergy(2.0, 1.5, 2.5, True)}
    two = EnergyResult(per_gpu=(gpu_result(cap="300W", limit_w=300.0), gpu_result(cap="300W", limit_w=300.0, gpu_index=1)),
                       per_domain=domains)
    doc = build_documents([("t.py::test_d[300W]", two)], machine={}, options={}, commit=None)[0]
    assert [dict(c.per_domain) for c in doc.cases] == [domains, domains]
    assert [c.gpu_slot for c in doc.cases] == [0, 1]


def test_without_a_time_the_document_is_dated_now_in_utc_whatever_the_local_zone(monkeypatch):
    """A naive local time taken as UTC would date a run hours off on a machine outside UTC."""
    monkeypatch.setenv("TZ", "XYZ-07")          # seven hours east of UTC (a POSIX zone: no tz database needed)
    time.tzset()
    try:
        before = datetime.now(timezone.utc)
        doc = build_documents([_case()], machine={}, options={}, commit=None)[0]
        after = datetime.now(timezone.utc)
    finally:
        monkeypatch.undo()
        time.tzset()
    assert before - timedelta(seconds=1) <= doc.created_at <= after + timedelta(seconds=1)
    assert doc.created_at.utcoffset() == timedelta(0)


def test_a_run_id_is_the_second_in_utc_and_eight_hex_digits():
    run_id = new_run_id(datetime(2025, 3, 1, 12, 15, 30, tzinfo=timezone(timedelta(hours=2))))
    assert re.fullmatch(r"20250301T101530Z-[0-9a-f]{8}", run_id), run_id


def test_the_machine_lists_only_the_models_gpus_or_all_when_none_is_named_so():
    both = machine("sim", (H100, V100))
    cases = [_case(gpu_name=V100)]
    assert [g["name"] for g in build_documents(cases, machine=both, options={}, commit=None)[0].machine["gpus"]] == [V100]
    other = machine("sim", (H100,))     # the list names no V100: it is kept whole rather than emptied
    assert build_documents(cases, machine=other, options={}, commit=None)[0].machine["gpus"] == other["gpus"]


# -- saving --------------------------------------------------------------------------------------------

def test_a_storage_folder_reached_through_a_link_elsewhere_is_refused(tmp_path):
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    folder = tmp_path / "store"
    folder.mkdir()
    (folder / "sim").symlink_to(outside)
    doc = make_doc()
    with pytest.raises(StorageError, match=_exactly(f"run {doc.run_id!r} would be written outside {folder}; refusing")):
        RunStore(folder).save(doc)
    assert list(outside.iterdir()) == []


def test_the_teams_hook_changes_what_is_saved(tmp_path):
    def add_team(run: dict) -> None:
        run["options"]["team"] = "vision"

    path = RunStore(tmp_path).save(make_doc(), update=add_team)
    assert json.loads(path.read_text())["options"]["team"] == "vision"


@pytest.mark.parametrize("damage, problem", [
    (lambda run: run["options"].update(x=math.nan), "Out of range float values are not JSON compliant"),
    (lambda run: run["options"].update(x=object()), "Object of type object is not JSON serializable"),
])
def test_a_hook_that_leaves_no_json_is_refused_and_nothing_is_written(tmp_path, damage, problem):
    with pytest.raises(StorageError, match=_exactly(
            f"the run document as pytest_gpuenergy_update_run left it is not JSON: {problem}")):
        RunStore(tmp_path).save(make_doc(), update=damage)
    assert list(tmp_path.iterdir()) == []


def test_a_hook_that_breaks_a_field_is_refused_naming_the_hook(tmp_path):
    def drop_id(run: dict) -> None:
        del run["run_id"]

    with pytest.raises(StorageError, match=_exactly(
            "the run document as pytest_gpuenergy_update_run left it: invalid run document: run_id: must be a non-empty "
            "string, got None; restore the file from version control, or move it out of the storage folder")):
        RunStore(tmp_path).save(make_doc(), update=drop_id)
    assert list(tmp_path.iterdir()) == []


def test_saving_over_a_saved_run_says_so_word_for_word(tmp_path):
    store, doc = RunStore(tmp_path), make_doc()
    path = store.save(doc)
    with pytest.raises(StorageError, match=_exactly(
            f"{path} already exists: run {doc.run_id} was saved before; nothing was overwritten "
            f"(run ids are unique, so save a new run instead of this one)")):
        store.save(doc)


def test_a_folder_every_user_can_write_is_refused_before_writing(tmp_path):
    folder = tmp_path / "open"
    folder.mkdir()
    folder.chmod(0o777)
    doc = make_doc()
    with pytest.raises(StorageError, match=f"^cannot save run {re.escape(doc.run_id)}: {re.escape(str(folder))} "
                                           f"is writable by every user: "):
        RunStore(folder).save(doc)
    assert list(folder.iterdir()) == []


def test_a_failed_write_names_the_system_error_not_its_number(tmp_path, monkeypatch):
    def full(fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)
    store, doc = RunStore(tmp_path), make_doc()
    with pytest.raises(StorageError, match=_exactly(
            f"cannot write {store.path_for(doc)}: No space left on device; check that {tmp_path} is a writable folder")):
        store.save(doc)


# -- names -------------------------------------------------------------------------------------------

def test_a_slug_cut_at_its_length_ends_without_a_dash():
    assert slug("a" * 79 + " b") == "a" * 79
    assert slug(" -- NVIDIA  H100 -- ") == "nvidia-h100"


def test_a_name_with_no_ascii_gets_unnamed_and_a_hash_of_itself():
    assert slug("☃") == "unnamed-" + hashlib.sha256("☃".encode()).hexdigest()[:10]
    assert slug("☃") != slug("日本")


def test_a_name_with_a_lone_surrogate_still_gets_a_name():
    """Python lets a file name decoded with errors='surrogateescape' carry one; it must not crash the save."""
    lone = "\udc80"
    assert slug(lone) == "unnamed-" + hashlib.sha256(lone.encode("utf-8", "surrogatepass")).hexdigest()[:10]
    assert slug(lone) != slug("\udc81")


def test_a_run_id_with_two_dots_is_no_file_name_of_its_own():
    stem = file_stem("a..b")
    assert stem == "a-b-" + hashlib.sha256(b"a..b").hexdigest()[:10]
    assert file_stem("a.b") == "a.b"


def test_an_unsafe_long_run_id_keeps_sixty_characters_and_its_hash():
    run_id = "x" * 100 + "/"
    assert file_stem(run_id) == "x" * 60 + "-" + hashlib.sha256(run_id.encode()).hexdigest()[:10]


# -- listing -----------------------------------------------------------------------------------------

def _saved(store: RunStore, *docs: RunDocument) -> list[RunDocument]:
    for doc in docs:
        store.save(doc)
    return list(docs)


def _damaged(store: RunStore, backend: str, gpu_model: str, name: str = "20990101T000000Z-deadbeef") -> Path:
    path = store.folder / slug(backend) / slug(gpu_model) / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("{")
    return path


def test_files_are_those_of_the_backend_and_model_asked_for(tmp_path):
    store = RunStore(tmp_path)
    sim_h100, sim_v100, nvml_h100 = _saved(store, make_doc(), make_doc(gpu_name=V100, minutes=1),
                                           make_doc(backend="nvml", minutes=2))
    assert store.files("sim", H100) == [store.path_for(sim_h100)]
    assert store.files("nvml") == [store.path_for(nvml_h100)]
    assert store.files(gpu_model=V100) == [store.path_for(sim_v100)]
    assert len(store.files()) == 3


def test_half_written_temporary_files_are_not_runs(tmp_path):
    store = RunStore(tmp_path)
    (doc,) = _saved(store, make_doc())
    hidden = store.path_for(doc).with_name(f".{doc.run_id}.json")
    hidden.write_text("{")
    assert store.files() == [store.path_for(doc)]
    assert [d.run_id for d in store.runs()] == [doc.run_id]


def test_a_damaged_file_of_another_series_does_not_stop_a_lookup(tmp_path):
    """The baseline rule refuses a damaged file of the series it reads, not one of another model or backend."""
    store = RunStore(tmp_path)
    (doc,) = _saved(store, make_doc())
    other_backend, other_model = _damaged(store, "nvml", H100), _damaged(store, "sim", V100)
    docs, problems = store.scan("sim", H100)
    assert [d.run_id for d in docs] == [doc.run_id] and problems == []
    assert [d.run_id for d in store.runs("sim", H100)] == [doc.run_id]
    assert store.latest("sim", H100).run_id == doc.run_id
    assert store.resolve("latest", "sim", H100).run_id == doc.run_id
    docs, problems = store.scan()
    assert sorted(str(p).split(":")[0] for p in problems) == sorted([str(other_backend), str(other_model)])


def test_a_damaged_file_is_reported_and_the_readable_ones_after_it_still_listed(tmp_path):
    store = RunStore(tmp_path)
    damaged = _damaged(store, "sim", H100, name="00000000T000000Z-00000000")     # sorts first
    later = _saved(store, make_doc(), make_doc(minutes=5, seed=1))
    docs, problems = store.scan("sim", H100)
    assert [d.run_id for d in docs] == [d.run_id for d in later]
    assert len(problems) == 1 and str(problems[0]).startswith(f"{damaged}: corrupt run document: not valid JSON")


def test_a_document_filed_under_another_model_is_not_that_models_run(tmp_path):
    """A file moved by hand into another model's folder: the document's own fields decide."""
    store = RunStore(tmp_path)
    (h100,) = _saved(store, make_doc())
    stray = make_doc(gpu_name=V100, minutes=5)
    target = store.path_for(h100).with_name(f"{stray.run_id}.json")
    target.write_text(json.dumps(stray.to_json()))
    assert [d.run_id for d in store.runs("sim", H100)] == [h100.run_id]
    assert [d.run_id for d in store.runs("sim", V100)] == []


def test_latest_is_the_newest_of_the_backend_asked_for(tmp_path):
    store = RunStore(tmp_path)
    sim = _saved(store, make_doc(minutes=0), make_doc(minutes=10, seed=1), make_doc(minutes=5, seed=2))
    _saved(store, make_doc(backend="nvml", minutes=20))          # the same model name, measured, newer
    assert store.latest("sim", H100).run_id == sim[1].run_id
    assert store.resolve("latest", "sim", H100).run_id == sim[1].run_id
    assert store.resolve("latest", "nvml", H100).backend == "nvml"


# -- resolving ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("ref", [None, "", "   "])
def test_no_ref_is_refused_with_what_to_give(tmp_path, ref):
    store = RunStore(tmp_path)
    _saved(store, make_doc())
    with pytest.raises(StorageError, match=_exactly(
            "no run named: give a run document's path, a run id (see: gpuenergy runs) or 'latest'")):
        store.resolve(ref)


@pytest.mark.parametrize("ref", ["gone.json", f"runs{os.sep}gone"])
def test_a_ref_that_looks_like_a_path_is_told_the_file_is_missing(tmp_path, ref):
    with pytest.raises(StorageError, match=_exactly(
            f"{ref}: no such run document (not a file); give a path to a saved run or a run id")):
        RunStore(tmp_path).resolve(ref)


def test_a_ref_that_looks_like_an_id_is_told_where_runs_are_listed(tmp_path):
    with pytest.raises(StorageError, match=_exactly(
            f"no saved run 'gone' in {tmp_path} (and no such file); list the runs with: gpuenergy runs --storage {tmp_path}")):
        RunStore(tmp_path).resolve("gone")


@pytest.mark.parametrize("backend, gpu_model, what", [
    (None, None, ""),
    (None, "Tesla T4", "for Tesla T4 "),
    ("nvml", None, "(backend nvml) "),
    ("nvml", "Tesla T4", "for Tesla T4 (backend nvml) "),
])
def test_no_latest_run_says_for_what_and_how_to_save_one(tmp_path, backend, gpu_model, what):
    with pytest.raises(StorageError, match=_exactly(
            f"no saved run {what}in {tmp_path}; save one with pytest --energy-save")):
        RunStore(tmp_path).resolve("latest", backend, gpu_model)


def test_latest_of_two_series_is_ambiguous_and_names_both(tmp_path):
    store = RunStore(tmp_path)
    _saved(store, make_doc(), make_doc(gpu_name=V100, minutes=1))
    with pytest.raises(StorageError, match=_exactly(
            f"'latest' is ambiguous in {tmp_path}: it holds runs of {H100} (sim); {V100} (sim); "
            f"name a run id instead (see: gpuenergy runs)")):
        store.resolve("latest")


def test_an_id_prefix_of_two_runs_is_ambiguous(tmp_path):
    store = RunStore(tmp_path)
    docs = _saved(store, replace(make_doc(), run_id="20250301T100000Z-aaaa0001"),
                  replace(make_doc(minutes=1), run_id="20250301T100000Z-aaaa0002"))
    with pytest.raises(StorageError, match=_exactly(
            f"run id '20250301T100000Z-aaaa' is ambiguous in {tmp_path}: it matches "
            f"{docs[0].run_id}, {docs[1].run_id}; give more of the id")):
        store.resolve("20250301T100000Z-aaaa")


def test_an_ambiguous_id_names_five_of_its_matches(tmp_path):
    store = RunStore(tmp_path)
    ids = [f"20250301T100000Z-bbbb000{i}" for i in range(6)]
    _saved(store, *(replace(make_doc(minutes=i), run_id=run_id) for i, run_id in enumerate(ids)))
    with pytest.raises(StorageError, match=_exactly(
            f"run id '2025' is ambiguous in {tmp_path}: it matches {', '.join(ids[:5])}; give more of the id")):
        store.resolve("2025")


# -- the project's storage folder --------------------------------------------------------------------

def test_the_nearest_folder_holding_the_storage_folder_is_the_project(tmp_path):
    (tmp_path / ".energy").mkdir()
    below = tmp_path / "tests" / "unit"
    below.mkdir(parents=True)
    assert project_storage(below) == tmp_path / ".energy"


@pytest.mark.parametrize("name, text", [
    ("pytest.ini", "[pytest]\n"),
    ("tox.ini", "[tox]\nenvlist = py311\n\n[pytest]\naddopts = -q\n"),
    ("setup.cfg", "[tool:pytest]\naddopts = -q\n"),
    ("pyproject.toml", "[tool.pytest.ini_options]\naddopts = '-q'\n"),
])
def test_a_pytest_configuration_file_makes_its_folder_the_project(tmp_path, name, text):
    project = tmp_path / "project"
    below = project / "tests"
    below.mkdir(parents=True)
    (project / name).write_text(text)
    (tmp_path / "pytest.ini").write_text("[pytest]\nenergy_storage = outer\n")    # farther up: not used
    assert project_storage(below) == project / ".energy"


@pytest.mark.parametrize("name, text", [
    ("tox.ini", "[tox]\nenvlist = py311\n"),
    ("setup.cfg", "[metadata]\nname = x\n"),
    ("pyproject.toml", "[project]\nname = 'x'\n"),
])
def test_a_file_without_pytests_section_is_no_configuration(tmp_path, name, text):
    project = tmp_path / "project"
    project.mkdir()
    (project / name).write_text(text + "energy_storage = wrong\n")
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    assert project_storage(project) == tmp_path / ".energy"


def test_the_configurations_energy_storage_is_used_relative_to_its_folder(tmp_path):
    (tmp_path / "pyproject.toml").write_text('[tool.pytest.ini_options]\nenergy_storage = "ci/energy"   # kept in git\n')
    assert project_storage(tmp_path) == tmp_path / "ci" / "energy"


def test_an_absolute_energy_storage_is_used_as_it_is(tmp_path):
    (tmp_path / "pytest.ini").write_text(f"[pytest]\nenergy_storage = {tmp_path / 'shared' / 'runs'}\n")
    assert project_storage(tmp_path / ".") == tmp_path / "shared" / "runs"


def test_a_configuration_that_is_not_utf8_is_still_read(tmp_path):
    (tmp_path / "pytest.ini").write_bytes(b"[pytest]\n# caf\xe9 (latin-1)\nenergy_storage = runs\n")
    assert project_storage(tmp_path) == tmp_path / "runs"


def test_a_configuration_is_read_as_utf8_whatever_the_locale(tmp_path, monkeypatch):
    """On a machine whose locale is not UTF-8 (Windows' cp1252), a folder named in UTF-8 keeps its name."""
    monkeypatch.setattr(io, "text_encoding", lambda encoding, stacklevel=2: encoding or "latin-1")
    (tmp_path / "pytest.ini").write_text("[pytest]\nenergy_storage = énergie\n", encoding="utf-8")
    assert project_storage(tmp_path) == tmp_path / "énergie"


def test_without_a_project_the_start_folders_own_storage_folder(tmp_path):
    start = tmp_path / "loose"
    start.mkdir()
    assert not any((folder / name).exists() for folder in start.parents
                   for name in (".energy", "pytest.ini", "pyproject.toml", "tox.ini", "setup.cfg", "pytest.toml")), \
        "a folder above the test's tmp_path holds a pytest configuration: this test cannot see the fallback"
    assert project_storage(start) == start / ".energy"


def test_the_current_folder_is_the_default_start(tmp_path, monkeypatch):
    (tmp_path / ".energy").mkdir()
    monkeypatch.chdir(tmp_path)
    assert project_storage() == tmp_path / ".energy"


def test_sweep_documents_of_one_model_share_its_folder(tmp_path):
    store = RunStore(tmp_path)
    first = store.save(make_doc())
    second = store.save(build_documents(sweep_cases(seed=3), machine=machine(), options={}, commit=None,
                                        created_at=T0 + timedelta(hours=1))[0])
    assert first.parent == second.parent == tmp_path / "sim" / "nvidia-h100-80gb-hbm3-simulated"
