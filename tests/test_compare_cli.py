"""``gpuenergy compare`` and ``gpuenergy runs``: exit codes, errors and the report files."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_gpuenergy.cli import compare as compare_cli
from pytest_gpuenergy.runs.store import RunStore

from helpers import H100_REAL, V100, make_doc

CASE = "tests/test_suite.py::test_train[alexnet-train-300W]"


def run(*argv: str) -> int:
    return compare_cli.main(list(argv))


def flat(text: str) -> str:
    """Output with its wrapping undone, for phrases that a narrow terminal breaks over lines."""
    return " ".join(text.split())


@pytest.fixture
def store(tmp_path: Path) -> RunStore:
    return RunStore(tmp_path / ".energy")


@pytest.fixture
def saved(store: RunStore) -> dict[str, Path]:
    """A baseline, a later run with a 30 % regression, one with no change, and another GPU model."""
    docs = {
        "old": make_doc(seed=1, minutes=0),
        "worse": make_doc(seed=2, minutes=10, scale={CASE: 1.3}),
        "same": make_doc(seed=3, minutes=20),
        "v100": make_doc(seed=4, minutes=30, gpu_name=V100),
        "real": make_doc(seed=5, minutes=40, backend="nvml", gpu_name=H100_REAL),
    }
    return {name: store.save(doc) for name, doc in docs.items()}


def test_no_regression_exits_0(saved, capsys):
    assert run("compare", str(saved["old"]), str(saved["same"]), "--fail", "ets:5%,edp:10%,time:5%") == 0
    out = capsys.readouterr().out
    assert "passed: 0 regressed, 0 improved, " in out and "REGRESSION" not in out


def test_a_regression_exits_1_and_names_it(saved, capsys):
    assert run("compare", str(saved["old"]), str(saved["worse"]), "--fail", "ets:5%,edp:10%") == 1
    out = capsys.readouterr().out
    assert f"ENERGY REGRESSION {CASE} on GPU 0: ETS +" in flat(out) and "[+" in out
    assert out.index("REGRESSION  alexnet-train") < out.index("unchanged (listed")


def test_without_fail_changes_are_reported_and_nothing_fails(saved, capsys):
    assert run("compare", str(saved["old"]), str(saved["worse"])) == 0
    out = capsys.readouterr().out
    assert "no thresholds (--energy-fail)" in flat(out) and "reported: 0 regressed" in out
    assert any(line.split()[:4] == ["changed", "alexnet-train", "300W", "ETS,"] for line in out.splitlines())


def test_run_ids_are_looked_up_in_storage(saved, store, capsys):
    old_id, new_id = saved["old"].stem, saved["worse"].stem
    assert run("compare", old_id, new_id[:23], "--storage", str(store.folder), "--fail", "ets:5%") == 1
    assert f"baseline: {old_id}" in capsys.readouterr().out


def test_latest_old_is_the_newest_other_run_of_the_same_model(saved, store, capsys):
    assert run("compare", "latest", saved["worse"].stem, "--storage", str(store.folder), "--fail", "ets:5%") == 1
    assert f"baseline: {saved['old'].stem}" in capsys.readouterr().out
    assert run("compare", "latest", saved["same"].stem, "--storage", str(store.folder), "--fail", "ets:5%") == 0
    assert f"baseline: {saved['worse'].stem}" in capsys.readouterr().out
    assert run("compare", "latest", saved["v100"].stem, "--storage", str(store.folder)) == 2
    assert "holds no run of" in capsys.readouterr().err


def test_other_gpu_model_or_backend_is_a_note_not_a_crash(saved, capsys):
    assert run("compare", str(saved["old"]), str(saved["v100"]), "--fail", "ets:5%") == 0
    assert "not compared: different GPU models" in flat(capsys.readouterr().out)
    assert run("compare", str(saved["real"]), str(saved["old"]), "--fail", "ets:5%") == 0
    assert "simulated and real measurements are never compared" in flat(capsys.readouterr().out)


@pytest.mark.parametrize("damage", ["truncate", "foreign", "newer"])
def test_a_corrupt_file_exits_2_with_one_line_naming_it_and_is_left_alone(saved, capsys, damage):
    path = saved["worse"]
    data = json.loads(path.read_text())
    content = {
        "truncate": path.read_text()[:200],
        "foreign": json.dumps({"format": "something-else", "version": 1}),
        "newer": json.dumps(data | {"version": 7}),
    }[damage]
    path.write_text(content)
    assert run("compare", str(saved["old"]), str(path), "--fail", "ets:5%", "--html", str(path.parent / "r.html")) == 2
    captured = capsys.readouterr()
    err_lines = captured.err.strip().splitlines()
    assert len(err_lines) == 1 and err_lines[0].startswith("gpuenergy compare: error: ") and str(path) in err_lines[0]
    assert path.read_text() == content and not (path.parent / "r.html").exists()


@pytest.mark.parametrize("argv, message", [
    (["--fail", "ets:lots"], "--fail: 'ets:lots' is not a threshold"),
    (["--fail", "power:5%"], "unknown metric 'power'"),
])
def test_bad_thresholds_exit_2(saved, capsys, argv, message):
    assert run("compare", str(saved["old"]), str(saved["same"]), *argv) == 2
    assert message in capsys.readouterr().err


def test_unknown_run_exits_2(store, capsys):
    assert run("compare", "nope", "nada", "--storage", str(store.folder)) == 2
    err = capsys.readouterr().err
    assert "no saved run 'nada'" in err and "gpuenergy runs" in err


@pytest.mark.parametrize("value", ["1.5", "abc", "50%"])
def test_bad_confidence_is_a_usage_error(saved, capsys, value):
    with pytest.raises(SystemExit) as info:
        run("compare", str(saved["old"]), str(saved["same"]), "--confidence", value)
    assert info.value.code == 2 and "--confidence" in capsys.readouterr().err


def test_confidence_as_percent(saved, capsys):
    assert run("compare", str(saved["old"]), str(saved["worse"]), "--fail", "ets:5%", "--confidence", "95%") == 1
    assert "95 % confidence" in capsys.readouterr().out


def test_report_files(saved, tmp_path, capsys):
    md, page, js = tmp_path / "r.md", tmp_path / "r.html", tmp_path / "r.json"
    code = run("compare", str(saved["old"]), str(saved["worse"]), "--fail", "ets:5%,edp:10%",
               "--markdown", str(md), "--html", str(page), "--json", str(js))
    assert code == 1
    out = capsys.readouterr().out
    assert f"wrote {md}" in out and f"wrote {page}" in out and f"wrote {js}" in out
    assert "Gate FAILED" in md.read_text()
    assert page.read_text().count('<svg class="plot" ') == 2 and "baseline run" in page.read_text()
    assert json.loads(js.read_text())["failed"] is True


def test_reports_to_stdout(saved, capsys):
    assert run("compare", str(saved["old"]), str(saved["same"]), "--json", "-") == 0
    data = json.loads(capsys.readouterr().out)
    assert data["comparisons"][0]["comparable"] is True


def test_unwritable_report_exits_2(saved, tmp_path, capsys):
    target = tmp_path / "no" / "such" / "folder"
    target.parent.parent.mkdir()
    target.parent.write_text("a file, not a folder")
    assert run("compare", str(saved["old"]), str(saved["same"]), "--markdown", str(target)) == 2
    assert f"cannot write {target}" in capsys.readouterr().err


# -- runs -------------------------------------------------------------------------------------------

def test_runs_lists_saved_runs(saved, store, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    assert run("runs", "--storage", str(store.folder)) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[:7] == ["run", "id", "date", "(UTC)", "backend", "GPU", "model"]
    rows = lines[2:]
    assert [r.split()[0] for r in rows] == [saved[k].stem for k in ("old", "worse", "same", "v100", "real")]
    assert "2025-03-01 10:00" in rows[0] and "sim (simulated)" in rows[0] and "10" in rows[0].split()
    assert "0123456789 (main)" in rows[0] and "nvml" in rows[-1] and H100_REAL.removeprefix("NVIDIA ") in rows[-1]


def test_runs_fit_a_narrow_terminal(saved, store, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    assert run("runs", "--storage", str(store.folder)) == 0
    lines = capsys.readouterr().out.splitlines()
    assert max(len(line) for line in lines) <= 80
    assert [r.split()[0] for r in lines[2:]] == [saved[k].stem for k in ("old", "worse", "same", "v100", "real")]
    assert "0123456789 (main)" in lines[2]


def test_runs_filters(saved, store, capsys):
    assert run("runs", "--storage", str(store.folder), "--gpu", V100) == 0
    rows = capsys.readouterr().out.splitlines()[2:]
    assert [r.split()[0] for r in rows] == [saved["v100"].stem]


def test_runs_on_an_empty_folder(tmp_path, capsys):
    assert run("runs", "--storage", str(tmp_path / "none")) == 0
    assert "no saved runs" in capsys.readouterr().out


def test_runs_lists_the_good_and_names_the_bad(saved, store, capsys):
    bad = saved["same"]
    bad.write_text("{ not json")
    assert run("runs", "--storage", str(store.folder)) == 2
    captured = capsys.readouterr()
    assert saved["old"].stem in captured.out and bad.stem not in captured.out
    assert str(bad) in captured.err and bad.read_text() == "{ not json"


def test_exit_codes_in_a_real_process(saved):
    proc = subprocess.run(
        [sys.executable, "-m", "pytest_gpuenergy.cli.compare", "compare", str(saved["old"]), str(saved["worse"]),
         "--fail", "ets:5%"], capture_output=True, text=True, timeout=60,
    )
    assert proc.returncode == 1 and "ENERGY REGRESSION" in proc.stdout


def test_commands_plug_into_another_parser():
    import argparse
    parser = argparse.ArgumentParser(prog="gpuenergy")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("info")
    compare_cli.add_compare_commands(sub)
    args = parser.parse_args(["compare", "a.json", "b.json", "--fail", "ets:5%"])
    assert args.handler is compare_cli.cmd_compare and args.old == "a.json" and args.confidence == 0.99
    assert parser.parse_args(["runs"]).handler is compare_cli.cmd_runs


def test_compare_learns_the_noise_between_sessions_from_the_storage_folder(tmp_path, capsys):
    """Four sessions whose ETS alternates by 25 %: a fifth like the first is no regression once the
    saved sessions are known, though it is beyond the noise inside a single run."""
    store = RunStore(tmp_path / "sessions")
    paths = [store.save(make_doc(seed=i, minutes=10 * i, scale={"alexnet-train": 1.0 + 0.25 * ((i + 1) % 2)}))
             for i in range(4)]
    new = store.save(make_doc(seed=9, minutes=60, scale={"alexnet-train": 1.25}))
    alone = tmp_path / "alone"
    alone.mkdir()
    for path in (paths[-1], new):
        (alone / path.name).write_bytes(path.read_bytes())
    assert run("compare", str(alone / paths[-1].name), str(alone / new.name), "--fail", "ets:5%",
               "--storage", str(tmp_path / "nothing-here")) == 1
    assert "noise between sessions unknown" in capsys.readouterr().out
    assert run("compare", "latest", new.stem, "--fail", "ets:5%", "--storage", str(store.folder)) == 0
    assert "estimated per case from 4 saved runs" in capsys.readouterr().out
