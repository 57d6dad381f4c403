"""State files nobody else may plant, report targets that are not files, and the modes of what we write.

The journal decides which power limit a GPU gets and a lock file is truncated by whoever takes
it, so a damaged, foreign, world-writable or symlinked one is refused with one line naming it;
a report is never renamed over a device, a folder or a FIFO.
"""

from __future__ import annotations

import json
import os
import socket
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_gpuenergy.errors import UnsafeStateFile
from pytest_gpuenergy.fileio import atomic_write_text
from pytest_gpuenergy.gpu.capping import power_journal_for
from pytest_gpuenergy.gpu.device import open_backend
from pytest_gpuenergy.runs.store import RunStore

from helpers import cli_in_process, gpu_info, make_doc, run_cli


def limit_w() -> float:
    return gpu_info()[0]["current_limit_w"]


def _dead_pid() -> int:
    """The pid of a process that has exited (its number is unlikely to be reused within the test)."""
    proc = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True, check=True)
    return int(proc.stdout)


def plant_entry(sim_state: Path, *, original_w: float, applied_w: float, **changes: object) -> Path:
    """A journal entry as a killed run would leave it (the GPU at ``applied_w``, its original ``original_w``)."""
    uuid = gpu_info()[0]["uuid"]
    entry = {
        "gpu_uuid": uuid, "gpu_index": 0, "gpu_name": "NVIDIA H100 80GB HBM3 (simulated)",
        "previous_limit_mw": int(original_w * 1000), "applied_limit_mw": int(applied_w * 1000),
        "pid": _dead_pid(), "process_start": "1", "host": socket.gethostname(), "written_at": 1.0,
        "format": "gpuenergy-limit-journal", **changes,
    }
    path = sim_state / "journal" / f"{uuid}.json"
    path.parent.mkdir(exist_ok=True)
    path.write_text(json.dumps(entry))
    return path


# -- the journal ---------------------------------------------------------------------------------

DAMAGED_ENTRIES = {
    "not JSON": "{not json",
    "cut short": '{"format": "gpuenergy-limit-journal", "gpu_uuid": ',
    "wrong type": None,                                   # previous_limit_mw as a string
    "huge integer": None,                                 # previous_limit_mw with 5000 digits
    "deep nesting": "[" * 100_000 + "]" * 100_000,
    "NaN": None,
    "another GPU": None,
}


@pytest.mark.parametrize("damage", list(DAMAGED_ENTRIES))
def test_a_damaged_journal_entry_is_one_line_naming_the_file_never_an_internal_error(pytester, sim_state, damage):
    path = plant_entry(sim_state, original_w=700, applied_w=300)
    text = path.read_text()
    damaged = DAMAGED_ENTRIES[damage] or {
        "wrong type": text.replace('"previous_limit_mw": 700000', '"previous_limit_mw": "700000"'),
        "huge integer": text.replace('"previous_limit_mw": 700000', '"previous_limit_mw": 7' + "0" * 5000),
        "NaN": text.replace('"written_at": 1.0', '"written_at": NaN'),
        "another GPU": text.replace('"gpu_uuid": "GPU-', '"gpu_uuid": "GPU-0'),
    }[damage]
    path.write_text(damaged)
    pytester.makepyfile(test_a="def test_a(gpu_power_cap):\n    pass\n")
    result = pytester.runpytest("--gpu-caps=250")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    errors = [line for line in result.stderr.str().splitlines() if line.strip()]
    assert len(errors) == 1 and "INTERNALERROR" not in result.stderr.str(), result.stderr.str()
    assert str(path) in errors[0] and "unreadable" in errors[0] and "delete the file" in errors[0]
    restore = cli_in_process("restore", "--gpu-backend=sim", check=False)
    assert restore.returncode == 2 and restore.stderr.count("\n") == 1 and str(path) in restore.stderr
    assert limit_w() == 700.0 and path.read_text() == damaged


def test_a_world_writable_journal_entry_sets_no_limit(sim_state):
    # Planted in a state folder others can write: "restore" GPU 0 to its minimum.
    path = plant_entry(sim_state, original_w=200, applied_w=700)
    path.chmod(0o666)
    restore = run_cli("restore", "--gpu-backend=sim", check=False)
    assert restore.returncode == 2 and restore.stderr.count("\n") == 1
    assert str(path) in restore.stderr and "writable by every user" in restore.stderr
    assert limit_w() == 700.0 and path.exists()


def test_a_journal_entry_of_another_user_sets_no_limit(sim_state, monkeypatch):
    path = plant_entry(sim_state, original_w=200, applied_w=700)
    owner = path.stat().st_uid
    if os.geteuid() == 0:
        os.chown(path, 65534, 65534)                   # nobody's
    else:
        monkeypatch.setattr(os, "geteuid", lambda: owner + 1)   # as if another user wrote it
    backend = open_backend("sim")
    try:
        with pytest.raises(UnsafeStateFile, match=r"belongs to another user \(uid \d+; you are uid \d+\)") as info:
            power_journal_for(backend).repair(backend)
    finally:
        backend.close()
    assert str(path) in str(info.value) and "\n" not in str(info.value)
    monkeypatch.undo()
    assert limit_w() == 700.0


def test_a_journal_folder_every_user_can_write_is_refused(sim_state):
    path = plant_entry(sim_state, original_w=700, applied_w=300)
    path.parent.chmod(0o777)
    restore = cli_in_process("restore", "--gpu-backend=sim", check=False)
    assert restore.returncode == 2 and f"{path.parent} is writable by every user" in restore.stderr
    assert "chmod o-w" in restore.stderr


# -- the GPU locks ---------------------------------------------------------------------------------

@pytest.mark.parametrize("planted", ["symlink", "hard link", "world-writable"])
def test_a_planted_lock_file_is_refused_and_nothing_is_overwritten(pytester, sim_state, tmp_path, planted):
    uuid = gpu_info()[0]["uuid"]
    victim = tmp_path / "a-file-of-root"
    victim.write_text("precious\n")
    lock = sim_state / "locks" / f"{uuid}.lock"
    lock.parent.mkdir(exist_ok=True)
    if planted == "symlink":
        lock.symlink_to(victim)
    elif planted == "hard link":
        os.link(victim, lock)
    else:
        lock.write_text("")
        lock.chmod(0o666)
    pytester.makepyfile(test_a="def test_a(gpu_power_cap):\n    pass\n")
    result = pytester.runpytest("--gpu-caps=250")
    result.assert_outcomes(errors=1)
    expected = {"symlink": "is a symbolic link", "hard link": "has 2 hard links", "world-writable": "is writable by every user"}
    result.stdout.fnmatch_lines([f"*{lock}*{expected[planted]}*"])
    assert victim.read_text() == "precious\n"
    assert limit_w() == 700.0


# -- files we write --------------------------------------------------------------------------------

def _fifo(tmp_path):
    fifo = tmp_path / "report.md"
    os.mkfifo(fifo)
    return fifo


@pytest.mark.parametrize("kind", ["FIFO", "folder"])
def test_gpuenergy_compare_refuses_a_report_target_that_is_not_a_file(tmp_path, kind):
    store = RunStore(tmp_path / ".energy")
    old, new = store.save(make_doc(seed=1)), store.save(make_doc(seed=2, minutes=10))
    target = _fifo(tmp_path) if kind == "FIFO" else tmp_path / "a-folder"
    target.mkdir() if kind == "folder" else None
    proc = run_cli("compare", str(old), str(new), "--markdown", str(target), check=False)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert f"{target} is {'a FIFO' if kind == 'FIFO' else 'a folder'}" in proc.stderr and "not a regular file" in proc.stderr
    mode = os.stat(target).st_mode
    assert stat.S_ISFIFO(mode) if kind == "FIFO" else stat.S_ISDIR(mode)


def test_the_gate_refuses_a_report_target_that_is_not_a_file(pytester):
    fifo = _fifo(pytester.path)
    pytester.makepyfile(test_m="def test_m(energy_meter):\n    with energy_meter:\n        sum(range(10**6))\n")
    result = pytester.runpytest_subprocess(f"--energy-markdown={fifo}")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines([f"*gpuenergy: error: cannot write the report {fifo}: *is a FIFO (named pipe), not a regular file*"])
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)


@pytest.mark.parametrize(("option", "blocked", "problem"), [
    ("--energy-html", "a-file/r.html", "{path}/a-file is not a folder"),
    ("--energy-json", "a-folder", "{path}/a-folder is a folder; name a file"),
    ("--energy-markdown", "a-file/deeper/r.md", "{path}/a-file is not a folder"),
])
def test_a_report_path_that_cannot_be_written_is_a_usage_error_before_any_test(pytester, option, blocked, problem):
    """Said at the start in one line, not after every test has run (the session's end can only fail)."""
    (pytester.path / "a-file").write_text("")
    (pytester.path / "a-folder").mkdir()
    pytester.makepyfile(test_m="def test_m(energy_meter):\n    raise AssertionError('ran')\n")
    result = pytester.runpytest(f"{option}={pytester.path / blocked}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"ERROR: {option}: cannot write {pytester.path / blocked}: "
                                 f"{problem.format(path=pytester.path)}"])
    assert "ran" not in result.stdout.str()


def test_saving_into_a_storage_that_is_a_file_is_a_usage_error_before_any_test(pytester):
    (pytester.path / "a-file").write_text("")
    pytester.makepyfile(test_m="def test_m(energy_meter):\n    raise AssertionError('ran')\n")
    result = pytester.runpytest("--energy-save", "--energy-storage=a-file/runs")
    assert result.ret == pytest.ExitCode.USAGE_ERROR and "ran" not in result.stdout.str()
    result.stderr.fnmatch_lines([f"ERROR: --energy-save: cannot save runs in {pytester.path / 'a-file' / 'runs'}: "
                                 f"{pytester.path / 'a-file'} is not a folder; give a folder with --energy-storage"])
    pytester.runpytest("--energy-storage=a-file/runs").assert_outcomes(failed=1)    # not saving: nothing to check


def test_a_report_path_is_fine_where_its_folders_can_be_made(tmp_path, monkeypatch):
    from pytest_gpuenergy.fileio import output_problem

    assert output_problem(tmp_path / "new" / "deeper" / "r.html") is None        # made when written
    assert output_problem(tmp_path / "r.html") is None
    monkeypatch.setattr(os, "access", lambda path, mode: Path(path) != tmp_path)  # (root may write anywhere)
    assert output_problem(tmp_path / "new" / "r.html") == f"{tmp_path} is not writable by you"


@pytest.mark.parametrize(("umask", "mode"), [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664)])
def test_files_we_write_get_the_users_umask(tmp_path, umask, mode):
    old = os.umask(umask)
    try:
        atomic_write_text(tmp_path / "report.md", "# report\n")
        path = RunStore(tmp_path / ".energy").save(make_doc())
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "report.md").stat().st_mode) == mode
    assert stat.S_IMODE(path.stat().st_mode) == mode
