"""Tests of ``pytest_gpuenergy/gate/ci.py``, the end of a session: compare, save, report.

In-process (no pytester, no subprocess), so that mutation testing of the module sees them: each
drives ``EnergyGate`` or ``write_reports`` with the suite's synthetic results (simulated H100 runs
from ``helpers``) and asserts what was saved, compared, written and said.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from types import SimpleNamespace

import pytest

from pytest_gpuenergy.errors import StorageError
from pytest_gpuenergy.gate.ci import EnergyGate, GateOutcome, comparison_baselines, write_reports
from pytest_gpuenergy.gate.settings import GateOptions
from pytest_gpuenergy.reports.html import html_report
from pytest_gpuenergy.reports.json_report import json_report
from pytest_gpuenergy.reports.markdown import markdown_report
from pytest_gpuenergy.runs.store import RunStore

from helpers import H100, V100, machine, make_doc, sweep_cases

COMMIT = {"id": "0123456789abcdef0123456789abcdef01234567", "branch": "main", "dirty": False}


def session_cases(scale: float = 1.0) -> list:
    """One simulated H100 case of three repetitions (``scale``: its energy, against the default run)."""
    return sweep_cases(workloads=("resnet",), caps_w=(300.0,), n=3, noise=0.01, scale={"resnet": scale})


def finish(gate: EnergyGate, cases: list, **kwargs) -> GateOutcome:
    return gate.finish(cases, machine=machine(), commit=COMMIT, run_options={"repeat": 3}, **kwargs)


def saved_files(storage: Path) -> list[Path]:
    return sorted(storage.glob("*/*/*.json"))


def damaged_run(storage: Path, model_slug: str) -> Path:
    """A saved run's file that cannot be read, under ``model_slug``'s folder."""
    folder = storage / "sim" / model_slug
    folder.mkdir(parents=True)
    (folder / "20260101T000000Z-deadbeef.json").write_text("{not json")
    return folder / "20260101T000000Z-deadbeef.json"


def h100_slug(tmp_path: Path) -> str:
    """The folder a simulated H100's runs are saved under."""
    store = RunStore(tmp_path / "probe")
    return store.path_for(make_doc()).parent.name


def numbered_ids_alike(html: str) -> str:
    """An HTML report with its plots' element ids (numbered per process: ``g3-title``) made alike."""
    return re.sub(r"\bg\d+-", "g-", html)


# -- the outcome -------------------------------------------------------------------------------------

def test_an_outcome_fails_on_an_error_or_a_failed_comparison_only():
    assert not GateOutcome().failed
    assert GateOutcome(errors=["cannot write the report r.md: Permission denied"]).failed
    passing, failing = SimpleNamespace(failed=False), SimpleNamespace(failed=True)
    assert not GateOutcome(comparisons=[passing, passing]).failed      # type: ignore[list-item]
    assert GateOutcome(comparisons=[passing, failing]).failed          # type: ignore[list-item]
    assert GateOutcome().documents == [] and GateOutcome().lines == []


# -- before any test: the baselines are checked ------------------------------------------------------

def test_without_a_comparison_no_baseline_is_read(tmp_path):
    damaged_run(tmp_path / "runs", h100_slug(tmp_path))
    gate = EnergyGate(GateOptions(storage=tmp_path / "runs"))
    assert gate.store.folder == tmp_path / "runs"
    gate.check_baselines("sim", [H100])               # nothing is compared: a damaged run is no reason to stop


def test_a_damaged_latest_baseline_of_a_sessions_gpu_model_stops_the_session_before_any_test(tmp_path):
    bad = damaged_run(tmp_path / "runs", h100_slug(tmp_path))
    gate = EnergyGate(GateOptions(storage=tmp_path / "runs", compare="latest"))
    with pytest.raises(StorageError, match=str(bad)):
        gate.check_baselines("sim", [V100, H100])      # every model of the session is checked
    gate.check_baselines("sim", [V100])                 # another model's damaged run is not its baseline
    gate.check_baselines("nvml", [H100])                # nor another backend's


def test_an_empty_store_is_no_error_for_latest(tmp_path):
    EnergyGate(GateOptions(storage=tmp_path / "runs", compare="latest")).check_baselines("sim", [H100])


def test_a_baseline_named_by_id_must_exist(tmp_path):
    store = RunStore(tmp_path / "runs")
    doc = make_doc()
    store.save(doc)
    EnergyGate(GateOptions(storage=store.folder, compare=doc.run_id)).check_baselines("sim", [H100])
    gate = EnergyGate(GateOptions(storage=store.folder, compare="20990101T000000Z-00000000"))
    with pytest.raises(StorageError, match="no saved run '20990101T000000Z-00000000'"):
        gate.check_baselines("sim", [H100])


def test_a_padded_latest_is_the_latest_run_of_the_sessions_own_model_and_backend(tmp_path):
    """``--energy-compare=" latest"`` (a quoted shell variable) names a run the store resolves: the
    latest of the session's GPU model and backend, never another model's run."""
    store = RunStore(tmp_path / "runs")
    store.save(make_doc(gpu_name=V100))
    gate = EnergyGate(GateOptions(storage=store.folder, compare=" latest "))
    gate.check_baselines("sim", [V100])
    with pytest.raises(StorageError) as caught:
        gate.check_baselines("sim", [H100])
    assert str(caught.value) == (f"no saved run for {H100} (backend sim) in {store.folder}; "
                                 f"save one with pytest --energy-save")


# -- the end of a session --------------------------------------------------------------------------

def test_a_session_that_measured_nothing_says_so_only_when_the_gate_was_asked_for(tmp_path, monkeypatch):
    quiet = EnergyGate(GateOptions(storage=tmp_path / "runs"))
    outcome = finish(quiet, [])
    assert (outcome.lines, outcome.errors, outcome.documents, outcome.comparisons) == ([], [], [], [])
    summary = tmp_path / "summary.md"
    asked = EnergyGate(GateOptions(storage=tmp_path / "runs", save=True, markdown=tmp_path / "r.md",
                                   step_summary=summary))
    outcome = finish(asked, [])
    assert outcome.lines == ["gpuenergy: nothing was measured: no run saved, nothing compared",
                             f"gpuenergy: wrote {tmp_path / 'r.md'}"]
    assert (tmp_path / "r.md").read_text() == markdown_report([], [])   # an asked-for file says so
    assert not summary.exists()                          # the job summary is left alone
    assert saved_files(tmp_path / "runs") == [] and not outcome.failed


@pytest.mark.parametrize("asked", ["markdown", "html", "json", "step_summary"])
def test_each_report_asked_for_alone_is_written(tmp_path, asked):
    """A session that asks for no report does not even import the writers; one asked for alone is
    written all the same (``--energy-report-md``, ``-html``, ``-json``, ``$GITHUB_STEP_SUMMARY``)."""
    target = tmp_path / f"report.{asked}"
    outcome = finish(EnergyGate(GateOptions(storage=tmp_path / "runs", **{asked: target})), session_cases())
    docs = outcome.documents
    expected = {"markdown": lambda: markdown_report(docs, []), "html": lambda: html_report(docs, [], baselines=[]),
                "json": lambda: json_report(docs, []), "step_summary": lambda: markdown_report(docs, []) + "\n"}[asked]()
    assert numbered_ids_alike(target.read_text()) == numbered_ids_alike(expected)
    wrote = [] if asked == "step_summary" else [f"gpuenergy: wrote {target}"]
    assert outcome.lines == wrote and outcome.errors == []


def test_a_session_is_saved_as_one_document_per_gpu_model_with_what_it_was_given(tmp_path):
    gate = EnergyGate(GateOptions(storage=tmp_path / "runs", save=True))
    cases = session_cases()
    outcome = finish(gate, cases, outcomes={cases[0][0]: "failed"})
    [doc] = outcome.documents
    [path] = saved_files(tmp_path / "runs")
    assert outcome.lines == [f"gpuenergy: saved run {doc.run_id} ({doc.origin}, {doc.gpu_model}) to {path}"]
    saved = RunStore(tmp_path / "runs").load(path)
    assert saved == doc
    assert (saved.gpu_model, saved.commit, saved.options) == (H100, COMMIT, {"repeat": 3})
    assert saved.machine["host"] == machine()["host"]
    assert [c.passed for c in saved.cases] == [False]    # the outcome given for the case
    assert outcome.comparisons == [] and outcome.errors == [] and not outcome.failed


def test_without_save_nothing_is_written(tmp_path):
    outcome = finish(EnergyGate(GateOptions(storage=tmp_path / "runs", compare="latest")), session_cases())
    assert len(outcome.documents) == 1 and len(outcome.comparisons) == 1
    assert outcome.lines == [] and saved_files(tmp_path / "runs") == []


def test_a_run_is_compared_before_it_is_saved_so_it_is_never_its_own_baseline(tmp_path):
    gate = EnergyGate(GateOptions(storage=tmp_path / "runs", save=True, compare="latest"))
    first = finish(gate, session_cases())
    [comparison] = first.comparisons
    assert comparison.old_run_id is None and comparison.new_run_id == first.documents[0].run_id
    second = finish(gate, session_cases())
    assert second.comparisons[0].old_run_id == first.documents[0].run_id
    assert len(saved_files(tmp_path / "runs")) == 2 and not second.failed


def test_a_regression_fails_the_outcome_and_the_thresholds_and_confidence_are_the_gates(tmp_path):
    storage = tmp_path / "runs"
    finish(EnergyGate(GateOptions(storage=storage, save=True)), session_cases())
    options = GateOptions(storage=storage, compare="latest", thresholds={"ets": 0.05}, confidence=0.9)
    outcome = finish(EnergyGate(options), session_cases(scale=1.5))
    [comparison] = outcome.comparisons
    assert (comparison.thresholds, comparison.confidence) == ({"ets": 0.05}, 0.9)
    assert comparison.failed and outcome.failed and outcome.errors == []


def test_the_teams_hook_changes_the_saved_document(tmp_path):
    gate = EnergyGate(GateOptions(storage=tmp_path / "runs", save=True))

    def update(data: dict) -> None:
        data["options"]["team"] = "vision"

    finish(gate, session_cases(), update_run=update)
    [path] = saved_files(tmp_path / "runs")
    assert json.loads(path.read_text())["options"] == {"repeat": 3, "team": "vision"}


def test_a_baseline_that_cannot_be_found_is_an_error_and_the_run_is_not_saved(tmp_path):
    gate = EnergyGate(GateOptions(storage=tmp_path / "runs", save=True, compare="20990101T000000Z-00000000",
                                  markdown=tmp_path / "r.md"))
    outcome = finish(gate, session_cases())
    [error] = outcome.errors
    assert error.startswith("no saved run '20990101T000000Z-00000000' in ")
    assert outcome.failed and saved_files(tmp_path / "runs") == []
    assert outcome.lines == [f"gpuenergy: wrote {tmp_path / 'r.md'}"]        # the reports are still written


def test_a_save_that_fails_is_an_error(tmp_path):
    gate = EnergyGate(GateOptions(storage=tmp_path / "runs", save=True))

    def breaks(data: dict) -> None:
        data["cases"] = "none"

    outcome = finish(gate, session_cases(), update_run=breaks)
    [error] = outcome.errors
    assert error.startswith("the run document as pytest_gpuenergy_update_run left it: invalid run document: cases: ")
    assert outcome.failed and outcome.lines == [] and saved_files(tmp_path / "runs") == []


def test_every_asked_for_report_is_written_and_the_job_summary_appended(tmp_path):
    storage = tmp_path / "runs"
    finish(EnergyGate(GateOptions(storage=storage, save=True)), session_cases())
    summary = tmp_path / "summary.md"
    summary.write_text("earlier step\n")
    options = GateOptions(storage=storage, compare="latest", markdown=tmp_path / "r.md", html=tmp_path / "r.html",
                          json=tmp_path / "r.json", step_summary=summary)
    outcome = finish(EnergyGate(options), session_cases())
    docs, comparisons = outcome.documents, outcome.comparisons
    assert outcome.lines == [f"gpuenergy: wrote {tmp_path / name}" for name in ("r.md", "r.html", "r.json")]
    assert (tmp_path / "r.md").read_text() == markdown_report(docs, comparisons)
    assert (tmp_path / "r.json").read_text() == json_report(docs, comparisons)
    baselines = [RunStore(storage).resolve(comparisons[0].old_run_id)]
    assert numbered_ids_alike((tmp_path / "r.html").read_text()) == numbered_ids_alike(
        html_report(docs, comparisons, baselines=baselines))
    assert summary.read_text() == "earlier step\n" + markdown_report(docs, comparisons) + "\n"


def test_a_report_the_session_cannot_write_fails_the_gate(tmp_path):
    (tmp_path / "a-file").write_text("")
    blocked = tmp_path / "a-file" / "r.md"                # its folder is a file
    gate = EnergyGate(GateOptions(storage=tmp_path / "runs", save=True, markdown=blocked, json=tmp_path / "r.json"))
    outcome = finish(gate, session_cases())
    assert outcome.errors == [f"cannot write the report {blocked}: Not a directory"] and outcome.failed
    assert outcome.lines[-1] == f"gpuenergy: wrote {tmp_path / 'r.json'}" and len(saved_files(tmp_path / "runs")) == 1


# -- the baselines the reports plot ----------------------------------------------------------------

def test_the_baselines_of_comparable_comparisons_are_read_and_missing_ones_left_out(tmp_path):
    store = RunStore(tmp_path / "runs")
    old, other = make_doc(seed=1), make_doc(seed=2, minutes=5)
    store.save(old)
    store.save(other)
    comparisons = [SimpleNamespace(old_run_id=old.run_id, comparable=True),
                   SimpleNamespace(old_run_id=None, comparable=True),                 # no baseline
                   SimpleNamespace(old_run_id=other.run_id, comparable=False),        # another machine
                   SimpleNamespace(old_run_id="20990101T000000Z-00000000", comparable=True),   # gone since
                   SimpleNamespace(old_run_id=other.run_id, comparable=True)]
    assert comparison_baselines(store, comparisons) == [old, other]                   # type: ignore[arg-type]


# -- writing the reports ---------------------------------------------------------------------------

def test_a_report_that_cannot_be_written_is_an_error_and_the_others_are_still_written(tmp_path):
    (tmp_path / "a-file").write_text("")
    lines: list[str] = []
    errors: list[str] = []
    rendered: list[str] = []

    def render(text: str):
        return lambda: rendered.append(text) or text

    blocked = tmp_path / "a-file" / "r.md"               # its folder is a file
    write_reports(lines, errors, ((None, render("none")), (blocked, render("md")), (tmp_path / "r.json", render("json"))),
                  None, render("summary"))
    assert errors == [f"cannot write the report {blocked}: Not a directory"]
    assert lines == [f"gpuenergy: wrote {tmp_path / 'r.json'}"]
    assert (tmp_path / "r.json").read_text() == "json"
    assert rendered == ["md", "json"]                    # nothing rendered for no path, nor for no job summary


def test_a_job_summary_that_cannot_be_appended_to_is_an_error(tmp_path):
    lines: list[str] = []
    errors: list[str] = []
    folder = tmp_path / "summary"
    folder.mkdir()
    write_reports(lines, errors, (), folder, lambda: "## energy")
    assert errors == [f"cannot append to $GITHUB_STEP_SUMMARY ({folder}): [Errno 21] Is a directory: '{folder}'"]
    assert lines == []


def test_the_job_summary_is_utf_8_whatever_the_hosts_locale(tmp_path, monkeypatch):
    """A runner whose locale is Latin-1 (simulated: files opened without an encoding get it) still
    gets UTF-8, as GitHub reads the job summary."""
    import builtins

    from pytest_gpuenergy.gate import ci

    def open_as_a_latin_1_host(file, mode="r", encoding=None, **kwargs):
        return builtins.open(file, mode, encoding=encoding or "latin-1", **kwargs)

    monkeypatch.setattr(ci, "open", open_as_a_latin_1_host, raising=False)
    summary = tmp_path / "summary.md"
    errors: list[str] = []
    write_reports([], errors, (), summary, lambda: "## ETS \u0394 +3.1 % \u00b1 0.4 %")
    assert errors == [] and summary.read_bytes() == "## ETS \u0394 +3.1 % \u00b1 0.4 %\n".encode()

