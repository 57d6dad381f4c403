"""Tests of ``pytest_gpuenergy/gpu/journal.py``, the journal of changed power limits.

The journal is what brings a GPU's original limit back after a crash: its entries must be written,
read, refused when damaged, cleared only by their own writer and repaired with the exact limit.
These tests drive it in-process against the GPU simulator (no subprocess, so that mutation testing
of the module sees them), each asserting exact limits, entry fields and the messages a user reads.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import subprocess
import threading
import time
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest

from pytest_gpuenergy.errors import JournalCorrupt
from pytest_gpuenergy.fileio import atomic_write_json, sim_state_dir, state_folder
from pytest_gpuenergy.gpu.capping import POWER_LIMIT, power_journal_for
from pytest_gpuenergy.gpu.device import Backend, Gpu, open_backend
from pytest_gpuenergy.gpu.journal import Journal, JournalEntry
from pytest_gpuenergy.gpu.leftovers import may_need_repair
from pytest_gpuenergy.gpu.locks import lock_paths
from pytest_gpuenergy.gpu.processes import process_start
from pytest_gpuenergy.trusted_path import UntrustedPath

from helpers import DEAD_PID, H100


@pytest.fixture
def gpu(backend: Backend) -> Gpu:
    return backend.all_gpus[0]


@pytest.fixture
def journal(backend: Backend) -> Journal[int]:
    return power_journal_for(backend)


def power_entry(*args) -> JournalEntry[int]:
    """``JournalEntry(POWER_LIMIT, uuid, index, name, "nvidia", saved, applied, pid, start, host, written_at)``."""
    uuid, index, name, *rest = args
    return JournalEntry(POWER_LIMIT, uuid, index, name, "nvidia", *rest)


def entry_for(gpu: Gpu, previous_mw: int, applied_mw: int, **changes) -> JournalEntry[int]:
    fields = dict(knob=POWER_LIMIT, gpu_uuid=gpu.uuid, gpu_index=gpu.index, gpu_name=gpu.name, vendor="nvidia",
                  saved=previous_mw, applied=applied_mw, pid=DEAD_PID, process_start="gone", host="elsewhere",
                  written_at=5.0)
    return JournalEntry(**(fields | changes))


def plant(journal: Journal[int], entry: JournalEntry[int]) -> None:
    """An entry written by another process (a dead run, unless ``entry`` says otherwise)."""
    state_folder(journal.folder)
    atomic_write_json(journal.folder / f"{entry.gpu_uuid}.json", entry.to_json())


def legacy_json(entry: JournalEntry[int]) -> dict:
    """``entry`` as pytest-gpuenergy wrote power-limit entries before the one journal of every knob."""
    return {"gpu_uuid": entry.gpu_uuid, "gpu_index": entry.gpu_index, "gpu_name": entry.gpu_name,
            "previous_limit_mw": entry.saved, "applied_limit_mw": entry.applied, "pid": entry.pid,
            "process_start": entry.process_start, "host": entry.host, "written_at": entry.written_at,
            "format": "gpuenergy-limit-journal"}


def left_capped(journal: Journal[int], gpu: Gpu, previous_mw: int, applied_mw: int, **changes) -> JournalEntry[int]:
    """A run that set ``applied_mw`` and died: the GPU at that limit, its entry in the journal."""
    gpu.set_limit_mw(applied_mw)
    entry = entry_for(gpu, previous_mw, applied_mw, **changes)
    plant(journal, entry)
    return entry


def raw_entry(gpu: Gpu, **changes) -> dict:
    return entry_for(gpu, 550_000, 250_000).to_json() | changes


# -- an entry ----------------------------------------------------------------------------------

def test_an_entry_describes_its_gpu_its_cap_its_owner_and_the_previous_limit_in_watts():
    entry = power_entry("GPU-abc", 3, "Some GPU", 550_500, 250_000, 42, "77", "node7", 1.0)
    assert entry.describe() == ("GPU 3 (Some GPU, GPU-abc): capped at 250 W by pid 42 on node7, "
                                "previous limit 550.5 W")


@pytest.mark.parametrize("change", [{"pid": 43}, {"process_start": "78"}, {"written_at": 2.0}])
def test_an_entry_is_the_same_write_only_with_the_same_pid_start_and_moment(change):
    entry = power_entry("GPU-abc", 0, "g", 550_000, 250_000, 42, "77", "node7", 1.0)
    assert entry.same_write(replace(entry, applied=300_000, host="other"))
    assert not entry.same_write(replace(entry, **change))


def test_an_entry_is_owned_by_a_running_process_only_if_another_live_process_on_this_host_wrote_it():
    child = subprocess.Popen(["sleep", "30"])
    try:
        here = socket.gethostname()
        live = power_entry("GPU-a", 0, "g", 1, 1, child.pid, process_start(child.pid), here, 1.0)
        assert live.owner_runs()
        assert not replace(live, host=here + "-elsewhere").owner_runs()
        assert not replace(live, process_start="1").owner_runs()          # a reused pid is not the owner
        assert not replace(live, pid=os.getpid(), process_start=process_start(os.getpid())).owner_runs()
    finally:
        child.kill()
        child.wait()
    assert not live.owner_runs()                                             # gone


# -- the journal's files -------------------------------------------------------------------------

def test_a_journal_keeps_its_locks_beside_its_folder_unless_told_where(tmp_path, backend):
    assert Journal(POWER_LIMIT, tmp_path / "state" / "journal").lock_folder == tmp_path / "state" / "locks"
    assert Journal(POWER_LIMIT, str(tmp_path / "j"), str(tmp_path / "l")).lock_folder == tmp_path / "l"  # type: ignore[arg-type]
    opened = power_journal_for(backend)
    assert (opened.folder, opened.lock_folder) == (backend.state_dir / "journal", backend.lock_folder)


def test_recording_writes_the_original_limit_and_this_process_as_owner_before_any_change(journal, gpu):
    before = time.time()
    entry = journal.record(gpu, 550_000, 250_000)
    assert (entry.gpu_uuid, entry.gpu_index, entry.gpu_name) == (gpu.uuid, 0, H100)
    assert (entry.knob, entry.vendor, entry.saved, entry.applied) == (POWER_LIMIT, "nvidia", 550_000, 250_000)
    assert (entry.pid, entry.process_start, entry.host) == (os.getpid(), process_start(os.getpid()), socket.gethostname())
    assert before <= entry.written_at <= time.time()
    on_disk = json.loads((journal.folder / f"{gpu.uuid}.json").read_text())
    assert on_disk == entry.to_json()
    assert (on_disk["format"], on_disk["knob"], on_disk["vendor"], on_disk["gpu_uuid"], on_disk["saved"],
            on_disk["applied"]) == ("gpuenergy-journal", "power-limit", "nvidia", gpu.uuid, 550_000, 250_000)
    assert journal.entry(gpu.uuid) == entry
    assert gpu.current_limit_mw() == 700_000          # recording changes nothing on the GPU


def test_recording_over_an_entry_keeps_its_original_limit_and_takes_it_over(journal, gpu):
    plant(journal, entry_for(gpu, 550_000, 250_000))
    entry = journal.record(gpu, 250_000, 300_000)      # the dead run's cap is no original
    assert (entry.saved, entry.applied, entry.pid) == (550_000, 300_000, os.getpid())
    assert journal.entry(gpu.uuid) == entry


def test_clearing_removes_the_entry_only_when_it_is_still_the_same_write(journal, gpu):
    first = journal.record(gpu, 550_000, 250_000)
    newer = replace(first, written_at=first.written_at + 1, applied=300_000)
    plant(journal, newer)                               # someone took it over meanwhile
    journal.clear(first)
    assert journal.entry(gpu.uuid) == newer
    journal.clear(newer)
    assert journal.entry(gpu.uuid) is None
    journal.clear(newer)                                # already gone: nothing to do, no error
    assert journal.entries() == []


def test_an_entry_left_behind_names_its_limits_and_the_command_that_puts_the_limit_back(backend, gpu):
    entry = power_entry(gpu.uuid, 0, H100, 700_000, 420_000, DEAD_PID, "gone", "elsewhere", 5.0)
    assert entry.left_text() == f"GPU 0 ({H100}, {gpu.uuid}) at 420 W, its limit before 700 W"
    simulated = backend.nvml.state_dir / "gpus" / f"{gpu.uuid}.json"
    assert entry.fix_command(gpu) == f"rm {simulated} (the simulated GPU restarts at its defaults)"
    real = SimpleNamespace(simulated_state_file=None, uuid=gpu.uuid)     # a real GPU: the driver's command
    assert entry.fix_command(real) == f"sudo nvidia-smi -i {gpu.uuid} -pl 700"  # type: ignore[arg-type]
    on_amd = replace(entry, vendor="amd", saved=750_000)                 # AMD's: amd-smi, in watts
    assert gpu.uuid.startswith("GPU-")                                  # AMD SMI's own UUID has no prefix
    assert on_amd.fix_command(real) == f"sudo amd-smi set --gpu {gpu.uuid[4:]} --power-cap 750"  # type: ignore[arg-type]


def test_clearing_waits_for_the_journals_lock_that_a_repair_holds(journal, gpu):
    entry = journal.record(gpu, 700_000, 420_000)
    held = os.open(journal.folder / ".lock", os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(held, fcntl.LOCK_EX)
    done = threading.Event()
    clearer = threading.Thread(target=lambda: (journal.clear(entry), done.set()))
    clearer.start()
    try:
        assert not done.wait(0.3)                    # the entry stays while the journal is being repaired
    finally:
        fcntl.flock(held, fcntl.LOCK_UN)
        os.close(held)
    clearer.join(10)
    assert done.is_set() and journal.entry(gpu.uuid) is None


def test_entries_are_listed_by_file_name_and_other_files_are_ignored(tmp_path):
    journal = Journal(POWER_LIMIT, tmp_path / "journal")
    assert journal.entries() == []                      # no folder yet
    assert not journal.folder.exists()                  # and listing makes none
    second = power_entry("GPU-b", 1, "g", 300_000, 200_000, DEAD_PID, "s", "h", 1.0)
    first = replace(second, gpu_uuid="GPU-a", gpu_index=0)
    for entry in (second, first):
        plant(journal, entry)
    (journal.folder / "notes.json").write_text("not an entry")
    assert journal.entries() == [first, second]


def test_a_missing_entry_reads_as_none(journal, gpu):
    assert journal.entry(gpu.uuid) is None


def test_a_damaged_entry_is_an_error_naming_the_file_and_what_to_do(journal, gpu):
    state_folder(journal.folder)
    path = journal.folder / f"{gpu.uuid}.json"
    path.write_text("{not json")
    with pytest.raises(JournalCorrupt) as caught:
        journal.entry(gpu.uuid)
    text = str(caught.value)
    assert f"the power limit journal entry {path} is unreadable (" in text
    assert "`gpuenergy info`" in text and "then delete the file" in text


# -- every field is checked -------------------------------------------------------------------------

@pytest.mark.parametrize(("change", "says"), [
    ({"format": "gpuenergy-clock-journal"}, "not a limit journal entry"),
    ({"gpu_name": 5}, "gpu_name must be a string, got 5"),
    ({"gpu_uuid": None}, "gpu_uuid must be a string, got None"),
    ({"process_start": 12}, "process_start must be a string, got 12"),
    ({"host": ["h"]}, "host must be a string, got ['h']"),
    ({"gpu_uuid": "GPU-other"}, "it names GPU 'GPU-other', not the GPU of its file name"),
    ({"gpu_index": -1}, "gpu_index must be a whole number from 0 to 65535, got -1"),
    ({"gpu_index": 65_536}, "gpu_index must be a whole number from 0 to 65535, got 65536"),
    ({"gpu_index": True}, "gpu_index must be a whole number from 0 to 65535, got True"),
    ({"gpu_index": 1.0}, "gpu_index must be a whole number from 0 to 65535, got 1.0"),
    ({"pid": 0}, "pid must be a whole number from 1 to 2147483647, got 0"),
    ({"pid": 2**31}, "pid must be a whole number from 1 to 2147483647, got 2147483648"),
    ({"written_at": "today"}, "written_at must be a time, got 'today'"),
    ({"written_at": True}, "written_at must be a time, got True"),
    ({"written_at": None}, "written_at must be a time, got None"),
    ({"written_at": 1e400}, "written_at must be a time, got inf"),
    ({"saved": 0}, "saved must be a whole number from 1 to 100000000, got 0"),
    ({"saved": 100_000_001}, "saved must be a whole number from 1 to 100000000, got 100000001"),
    ({"saved": None}, "saved must be a whole number from 1 to 100000000, got None"),
    ({"applied": 0}, "applied must be a whole number from 1 to 100000000, got 0"),
    ({"applied": 250_000.5}, "applied must be a whole number from 1 to 100000000, got 250000.5"),
    ({"knob": "sm-clock"}, "it is an entry of the knob 'sm-clock', not of power-limit"),
    ({"knob": None}, "it is an entry of the knob None, not of power-limit"),
    ({"vendor": "intel"}, "vendor must be one of nvidia, amd, got 'intel'"),
    ({"vendor": None}, "vendor must be one of nvidia, amd, got None"),
])
def test_a_damaged_field_is_refused_with_what_is_wrong(journal, gpu, change, says):
    state_folder(journal.folder)
    text = json.dumps(raw_entry(gpu, **change)).replace("Infinity", "1e400")
    (journal.folder / f"{gpu.uuid}.json").write_text(text)
    with pytest.raises(JournalCorrupt, match="unreadable") as caught:
        journal.entry(gpu.uuid)
    assert f"({says});" in str(caught.value)


def test_a_document_that_is_no_object_is_refused(journal, gpu):
    state_folder(journal.folder)
    (journal.folder / f"{gpu.uuid}.json").write_text("[1, 2]")
    with pytest.raises(JournalCorrupt, match=r"\(not a limit journal entry\)"):
        journal.entry(gpu.uuid)


@pytest.mark.parametrize("change", [
    {"gpu_index": 0}, {"gpu_index": 65_535}, {"pid": 1}, {"pid": 2**31 - 1}, {"written_at": 7},
    {"saved": 1}, {"saved": 100_000_000}, {"applied": 1}, {"applied": 100_000_000}, {"vendor": "amd"},
])
def test_fields_at_the_ends_of_their_ranges_are_accepted(journal, gpu, change):
    plant(journal, replace(entry_for(gpu, 550_000, 250_000), **change))
    assert journal.entry(gpu.uuid) == replace(entry_for(gpu, 550_000, 250_000), **change)


# -- entries an earlier version wrote (a user upgrading with a capped GPU) ---------------------------

def test_an_entry_in_the_earlier_format_is_read_as_the_same_nvidia_setting(journal, gpu):
    entry = entry_for(gpu, 550_000, 250_000)
    state_folder(journal.folder)
    atomic_write_json(journal.folder / f"{gpu.uuid}.json", legacy_json(entry))
    assert journal.entry(gpu.uuid) == entry and journal.entries() == [entry]
    assert entry.describe() == (f"GPU 0 ({H100}, {gpu.uuid}): capped at 250 W by pid {DEAD_PID} on elsewhere, "
                                f"previous limit 550 W")


def test_a_gpu_an_earlier_version_left_capped_is_repaired_to_its_exact_original(journal, gpu, backend):
    gpu.set_limit_mw(250_000)
    state_folder(journal.folder)
    atomic_write_json(journal.folder / f"{gpu.uuid}.json", legacy_json(entry_for(gpu, 550_000, 250_000)))
    [outcome] = journal.repair(backend)
    assert outcome.action == "restored" and outcome.message.endswith(": restored to 550 W")
    assert gpu.current_limit_mw() == 550_000 and journal.entries() == []


def test_a_cap_over_an_earlier_versions_entry_keeps_its_original_and_rewrites_it_in_the_new_format(journal, gpu):
    state_folder(journal.folder)
    atomic_write_json(journal.folder / f"{gpu.uuid}.json", legacy_json(entry_for(gpu, 550_000, 250_000)))
    entry = journal.record(gpu, 250_000, 300_000)
    assert (entry.saved, entry.applied, entry.pid) == (550_000, 300_000, os.getpid())
    assert json.loads((journal.folder / f"{gpu.uuid}.json").read_text())["format"] == "gpuenergy-journal"


@pytest.mark.parametrize(("change", "says"), [
    ({"previous_limit_mw": 0}, "previous_limit_mw must be a whole number from 1 to 100000000, got 0"),
    ({"previous_limit_mw": 100_000_001}, "previous_limit_mw must be a whole number from 1 to 100000000, got 100000001"),
    ({"previous_limit_mw": None}, "previous_limit_mw must be a whole number from 1 to 100000000, got None"),
    ({"applied_limit_mw": 0}, "applied_limit_mw must be a whole number from 1 to 100000000, got 0"),
    ({"applied_limit_mw": 250_000.5}, "applied_limit_mw must be a whole number from 1 to 100000000, got 250000.5"),
    ({"pid": 0}, "pid must be a whole number from 1 to 2147483647, got 0"),
    ({"gpu_uuid": "GPU-other"}, "it names GPU 'GPU-other', not the GPU of its file name"),
])
def test_a_damaged_field_of_an_earlier_versions_entry_is_refused(journal, gpu, change, says):
    state_folder(journal.folder)
    (journal.folder / f"{gpu.uuid}.json").write_text(json.dumps(legacy_json(entry_for(gpu, 550_000, 250_000)) | change))
    with pytest.raises(JournalCorrupt, match="unreadable") as caught:
        journal.entry(gpu.uuid)
    assert f"({says});" in str(caught.value)


# -- repairing ----------------------------------------------------------------------------------------

def test_repair_puts_back_the_exact_original_of_a_dead_runs_entry_and_clears_it(journal, gpu, backend):
    entry = left_capped(journal, gpu, 550_000, 250_000)
    [outcome] = journal.repair(backend)
    assert (outcome.entry, outcome.action) == (entry, "restored")
    assert outcome.message == f"{entry.describe()}: restored to 550 W"
    assert gpu.current_limit_mw() == 550_000 and journal.entries() == []
    assert journal.repair(backend) == []


def test_repair_clears_an_entry_whose_gpu_is_already_back(journal, gpu, backend):
    entry = left_capped(journal, gpu, 550_000, 250_000)
    gpu.set_limit_mw(550_000)
    [outcome] = journal.repair(backend)
    assert (outcome.action, outcome.message) == ("already-restored", f"{entry.describe()}: already back to 550 W")
    assert journal.entries() == [] and gpu.current_limit_mw() == 550_000


def test_repair_leaves_a_limit_someone_changed_since_and_clears_the_entry(journal, gpu, backend):
    entry = left_capped(journal, gpu, 550_000, 250_000)
    gpu.set_limit_mw(450_000)
    [outcome] = journal.repair(backend)
    assert outcome.action == "changed-since"
    assert outcome.message == f"{entry.describe()}: now 450 W, set by someone else since; left as it is"
    assert journal.entries() == [] and gpu.current_limit_mw() == 450_000


def test_repair_keeps_an_entry_whose_gpu_is_not_present(journal, backend):
    entry = power_entry("GPU-gone", 5, "Old GPU", 300_000, 200_000, DEAD_PID, "s", "elsewhere", 1.0)
    plant(journal, entry)
    [outcome] = journal.repair(backend)
    assert (outcome.entry, outcome.action) == (entry, "gpu-missing")
    assert outcome.message == f"{entry.describe()}: this GPU is not present; entry kept"
    assert journal.entries() == [entry]


def test_repair_leaves_alone_an_entry_whose_writer_still_runs_unless_told_to_include_it(journal, gpu, backend):
    child = subprocess.Popen(["sleep", "30"])
    try:
        entry = left_capped(journal, gpu, 550_000, 250_000, pid=child.pid, process_start=process_start(child.pid),
                            host=socket.gethostname())
        [outcome] = journal.repair(backend)
        assert (outcome.entry, outcome.action, outcome.message) == (
            entry, "owner-alive", f"{entry.describe()}: left alone, pid {child.pid} is still running")
        assert journal.entries() == [entry] and gpu.current_limit_mw() == 250_000
        [forced] = journal.repair(backend, include_live_owners=True)
        assert forced.action == "restored" and gpu.current_limit_mw() == 550_000 and journal.entries() == []
    finally:
        child.kill()
        child.wait()


def test_repair_leaves_a_gpu_whose_lock_another_session_holds_to_that_session(journal, gpu, backend):
    entry = left_capped(journal, gpu, 550_000, 250_000)
    [path] = lock_paths(journal.lock_folder, [gpu.uuid])
    path.parent.mkdir(parents=True, exist_ok=True)
    other = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)     # another open file: its flock excludes ours
    try:
        fcntl.flock(other, fcntl.LOCK_EX)
        [outcome] = journal.repair(backend)
    finally:
        os.close(other)
    assert (outcome.entry, outcome.action) == (entry, "busy")
    assert outcome.message.startswith(f"{entry.describe()}: left to the test session that holds this GPU now "
                                      f"(pid {os.getpid()} ")                      # the holder, as the kernel says
    assert outcome.message.endswith("; if the GPU stays changed after it, run `gpuenergy restore`")
    assert journal.entries() == [entry] and gpu.current_limit_mw() == 250_000


def test_within_gpuenergy_restore_a_busy_gpu_is_left_with_the_drivers_own_fix(journal, gpu, backend):
    entry = left_capped(journal, gpu, 550_000, 250_000)
    [path] = lock_paths(journal.lock_folder, [gpu.uuid])
    path.parent.mkdir(parents=True, exist_ok=True)
    other = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(other, fcntl.LOCK_EX)
        [outcome] = journal.repair(backend, in_restore_command=True)
    finally:
        os.close(other)
    assert outcome.action == "busy" and "gpuenergy restore" not in outcome.message
    assert outcome.message.endswith(f", which puts it back when it ends; if it does not, end that process or put it "
                                    f"back yourself: {entry.fix_command(gpu)}")


def test_after_a_second_signal_a_repair_restores_nothing_more_and_says_so(journal, gpu, backend, monkeypatch):
    from pytest_gpuenergy.gpu import signals

    entry = left_capped(journal, gpu, 550_000, 250_000)
    monkeypatch.setattr(signals, "_gave_up", ["SIGTERM"])            # a restore of this process stopped so
    [outcome] = journal.repair(backend)
    assert (outcome.entry, outcome.action) == (entry, "stopped")
    assert outcome.message == f"{entry.describe()}: not restored, this process stops after a second signal"
    assert journal.entries() == [entry] and gpu.current_limit_mw() == 250_000


def test_repair_never_sets_an_original_outside_the_gpus_range(journal, gpu, backend):
    entry = left_capped(journal, gpu, 800_000, 250_000)       # recorded on another board, say
    [outcome] = journal.repair(backend)
    assert (outcome.entry, outcome.action) == (entry, "failed")
    assert outcome.message == f"{entry.describe()}: 800 W is outside the GPU's range 200-700 W; entry kept, check it"
    assert journal.entries() == [entry] and gpu.current_limit_mw() == 250_000


def test_repair_accepts_an_original_at_the_ends_of_the_range(journal, gpu, backend):
    left_capped(journal, gpu, 700_000, 250_000)
    assert [o.action for o in journal.repair(backend)] == ["restored"]
    left_capped(journal, gpu, 200_000, 250_000)
    assert [o.action for o in journal.repair(backend)] == ["restored"]
    assert gpu.current_limit_mw() == 200_000


def test_a_repair_that_nvml_refuses_keeps_the_entry_and_says_why(journal, gpu, backend):
    entry = left_capped(journal, gpu, 550_000, 250_000)
    backend.nvml.simArmFaults("set_error")
    [outcome] = journal.repair(backend)
    assert (outcome.action, outcome.message) == ("failed", f"{entry.describe()}: could not restore it (NVML: Unknown Error)")
    assert journal.entries() == [entry] and gpu.current_limit_mw() == 250_000


def test_a_repair_whose_limit_does_not_take_keeps_the_entry_and_says_what_the_gpu_reads(journal, gpu, backend):
    entry = left_capped(journal, gpu, 550_000, 250_000)
    backend.nvml.simArmFaults("set_ignored")
    [outcome] = journal.repair(backend)
    assert (outcome.action, outcome.message) == ("failed", f"{entry.describe()}: set back, but it reads 250 W")
    assert journal.entries() == [entry]


def test_a_repaired_limit_that_another_manager_enforces_lower_counts_as_restored(journal, gpu, backend):
    """The limit set is what comes back (as ``capping.py`` restores it): a BMC holding the H100 at
    490 W enforces less, as it did before the run; the entry must not stay as a failure."""
    left_capped(journal, gpu, 700_000, 250_000)
    backend.nvml.simArmFaults("limit_clamped")
    [outcome] = journal.repair(backend)
    assert outcome.action == "restored" and outcome.message.endswith(": restored to 700 W")
    assert (gpu.current_limit_mw(), gpu.enforced_limit_mw()) == (700_000, 490_000)
    assert journal.entries() == []


def test_repair_goes_through_every_entry(journal, backend, monkeypatch, sim_state):
    backend.close()
    monkeypatch.setenv("GPUENERGY_SIM_GPUS", "H100,V100")
    two = open_backend("sim", sim_state_dir=sim_state / "two")
    try:
        journal = power_journal_for(two)
        h100, v100 = two.all_gpus
        left_capped(journal, h100, 600_000, 250_000)
        left_capped(journal, v100, 250_000, 200_000)
        outcomes = journal.repair(two)
        assert sorted((o.entry.gpu_index, o.action) for o in outcomes) == [(0, "restored"), (1, "restored")]
        assert (h100.current_limit_mw(), v100.current_limit_mw()) == (600_000, 250_000)
    finally:
        two.close()


# -- may a run have died with a GPU changed? -------------------------------------------------------

@pytest.mark.parametrize("kind", ["sim", "auto"])
@pytest.mark.parametrize("sub", ["journal", "journal/clocks"])
def test_an_entry_in_either_journal_means_a_repair_may_be_needed(sim_state, tmp_path, monkeypatch, kind, sub):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg"))
    assert not may_need_repair(kind)
    (sim_state / sub).mkdir(parents=True)
    (sim_state / sub / "notes.json").write_text("{}")
    assert not may_need_repair(kind)
    (sim_state / sub / "GPU-abc.json").write_text("{}")
    assert may_need_repair(kind)
    assert not may_need_repair("nvml") and not may_need_repair("amdsmi")   # the simulator's journal is not the real GPUs'


def test_the_simulators_state_lives_under_the_users_state_unless_gpuenergy_sim_state_says(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg"))
    monkeypatch.delenv("GPUENERGY_SIM_STATE", raising=False)
    assert sim_state_dir() == tmp_path / "xdg" / "pytest-gpuenergy" / "sim"
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("GPUENERGY_SIM_STATE", "~/sims")
    assert sim_state_dir() == tmp_path / "home" / "sims"


@pytest.mark.parametrize("kind", ["nvml", "amdsmi", "auto"])
def test_the_real_gpus_journal_is_looked_at_for_nvml(sim_state, tmp_path, monkeypatch, kind):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg"))
    folder = tmp_path / "xdg" / "pytest-gpuenergy" / "journal" / "clocks"
    folder.mkdir(parents=True)
    (folder / "GPU-abc.json").write_text("{}")
    assert may_need_repair(kind)
    assert not may_need_repair("sim")


def test_an_unreadable_journal_folder_is_left_to_the_session_that_uses_the_gpus(sim_state, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg"))
    (sim_state / "journal").mkdir(parents=True)
    (sim_state / "journal" / "GPU-abc.json").write_text("{}")
    real_glob = Path.glob

    def glob(self, pattern):
        if self == sim_state / "journal":
            raise PermissionError(13, "Permission denied")
        return real_glob(self, pattern)

    monkeypatch.setattr(Path, "glob", glob)
    assert not may_need_repair("sim")
    (sim_state / "journal" / "clocks").mkdir()
    (sim_state / "journal" / "clocks" / "GPU-abc.json").write_text("{}")
    assert may_need_repair("sim")                     # the next folder is still looked at


# -- what a record or a clear leaves for a stopped restore to say ------------------------------------

def test_a_recorded_entry_is_noted_as_left_changed_until_it_is_cleared(journal, gpu, monkeypatch):
    """A restore stopped by a second signal names every setting still changed (``left_behind``):
    the journal notes each entry it records, with `gpuenergy restore` as the fix, and forgets it
    on clear."""
    from pytest_gpuenergy.gpu import signals

    monkeypatch.setattr(signals, "_left", {})
    entry = journal.record(gpu, 550_000, 250_000)
    assert signals.left_behind() == f"; left changed: {entry.left_text()}; to put it back: gpuenergy restore"
    journal.clear(entry)
    assert signals.left_behind() == ""


def test_reading_an_entry_makes_no_folder(tmp_path):
    journal = Journal(POWER_LIMIT, tmp_path / "journal")
    assert journal.entry("GPU-abc") is None
    assert not journal.folder.exists()                  # a look never leaves state behind


@pytest.mark.parametrize("how", ["link", "world-writable"])
def test_an_entry_someone_else_could_have_planted_is_refused_naming_its_file(journal, gpu, tmp_path, how):
    state_folder(journal.folder)
    path = journal.folder / f"{gpu.uuid}.json"
    if how == "link":
        (tmp_path / "elsewhere.json").write_text(json.dumps(raw_entry(gpu)))
        path.symlink_to(tmp_path / "elsewhere.json")
    else:
        path.write_text(json.dumps(raw_entry(gpu)))
        path.chmod(0o666)
    with pytest.raises(UntrustedPath) as caught:
        journal.entry(gpu.uuid)
    assert str(caught.value).startswith(f"{path} ")
    assert gpu.current_limit_mw() == 700_000


def test_an_entry_swapped_for_a_link_between_the_read_and_the_write_is_refused_naming_its_file(
        journal, gpu, tmp_path, monkeypatch):
    """A process that ignores the journal's lock could replace the entry after ``record`` read it:
    the write refuses to go through the link, and says which file."""
    import pytest_gpuenergy.gpu.journal as journal_module

    path = journal.folder / f"{gpu.uuid}.json"
    real_write = journal_module.write_state_json

    def swapped_first(folder_fd, name, data, *, shown, **options):
        (tmp_path / "target.json").write_text("{}")
        os.symlink(tmp_path / "target.json", name, dir_fd=folder_fd)
        real_write(folder_fd, name, data, shown=shown, **options)

    monkeypatch.setattr(journal_module, "write_state_json", swapped_first)
    with pytest.raises(UntrustedPath) as caught:
        journal.record(gpu, 550_000, 250_000)
    assert str(caught.value).startswith(f"{path} is a symbolic link, not a regular file: ")
    assert (tmp_path / "target.json").read_text() == "{}"      # nothing written through the link


# -- a repair that stops, and one that goes on past an entry it cannot repair ------------------------

def test_repair_goes_on_past_an_entry_whose_gpu_is_not_present(journal, gpu, backend):
    gone = power_entry("GPU-0", 5, "Old GPU", 300_000, 200_000, DEAD_PID, "s", "elsewhere", 1.0)
    plant(journal, gone)                                # listed first: "GPU-0.json" sorts before the H100's
    entry = left_capped(journal, gpu, 550_000, 250_000)
    assert [(o.entry, o.action) for o in journal.repair(backend)] == [(gone, "gpu-missing"), (entry, "restored")]
    assert gpu.current_limit_mw() == 550_000 and journal.entries() == [gone]


def test_after_a_second_signal_every_entry_is_said_not_restored(journal, gpu, backend, monkeypatch):
    from pytest_gpuenergy.gpu import signals

    entry = left_capped(journal, gpu, 550_000, 250_000)
    gone = power_entry("GPU-zzz", 5, "Old GPU", 300_000, 200_000, DEAD_PID, "s", "elsewhere", 1.0)
    plant(journal, gone)                                # listed after the H100's
    monkeypatch.setattr(signals, "_gave_up", ["SIGTERM"])
    assert [(o.entry, o.action) for o in journal.repair(backend)] == [(entry, "stopped"), (gone, "gpu-missing")]
    assert gpu.current_limit_mw() == 250_000


def test_repair_never_waits_for_a_gpus_lock(journal, gpu, backend, monkeypatch):
    """A GPU another session holds is left to it at once: were the repair to wait, the other session
    would end meanwhile (here, at the first pause of the wait) and the GPU would be restored."""
    from pytest_gpuenergy import fileio

    entry = left_capped(journal, gpu, 550_000, 250_000)
    [path] = lock_paths(journal.lock_folder, [gpu.uuid])
    path.parent.mkdir(parents=True, exist_ok=True)
    other = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(other, fcntl.LOCK_EX)
    waited = []

    def other_session_ends() -> None:
        waited.append(True)
        fcntl.flock(other, fcntl.LOCK_UN)

    monkeypatch.setattr(fileio, "check_abandoned", other_session_ends)
    try:
        [outcome] = journal.repair(backend)
    finally:
        os.close(other)
    assert (outcome.entry, outcome.action, waited) == (entry, "busy", [])
    assert gpu.current_limit_mw() == 250_000


def sim_gpu_lock(gpu: Gpu) -> int:
    """The simulated GPU's own state lock, held here as another process would: a limit set waits for it."""
    state_file = gpu.simulated_state_file
    assert state_file is not None
    held = os.open(state_file.parent / f"{gpu.uuid}.lock", os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(held, fcntl.LOCK_EX)
    return held


def test_a_repair_stuck_on_a_lock_stops_keeping_the_entry_and_says_what_it_leaves(journal, gpu, backend, monkeypatch):
    from pytest_gpuenergy import fileio
    from pytest_gpuenergy.gpu import signals

    monkeypatch.setattr(fileio, "LOCK_WAIT_S", 0.2)
    monkeypatch.setattr(signals, "_left", {})
    entry = left_capped(journal, gpu, 550_000, 250_000)
    held = sim_gpu_lock(gpu)
    try:
        [outcome] = journal.repair(backend)
    finally:
        os.close(held)
    assert (outcome.entry, outcome.action) == (entry, "stopped")
    assert outcome.message.startswith(f"{entry.describe()}: waited 0.2 s for the lock ")
    assert outcome.message.endswith(f"; left changed: {entry.left_text()}; to put it back: {entry.fix_command(gpu)}")
    assert journal.entries() == [entry] and gpu.current_limit_mw() == 250_000
    assert signals.left_behind() == ""                  # the repair's own note is gone with it


@pytest.mark.parametrize("in_restore_command", [False, True])
def test_a_second_signal_while_a_repair_waits_stops_it_there(journal, gpu, backend, monkeypatch, in_restore_command):
    """Within a session the repair says the entry is left (the session then stops); within
    `gpuenergy restore` the command itself stops, with what it leaves and where it waited."""
    from pytest_gpuenergy.gpu import signals
    from pytest_gpuenergy.gpu.signals import RestoreAbandoned

    said: list[str] = []
    monkeypatch.setattr(signals, "_announce", said.append)
    monkeypatch.setattr(signals, "_again", ["SIGTERM"])       # a second signal came during the restore
    monkeypatch.setattr(signals, "_gave_up", [])
    monkeypatch.setattr(signals, "_left", {})
    entry = left_capped(journal, gpu, 550_000, 250_000)
    held = sim_gpu_lock(gpu)
    try:
        if in_restore_command:
            with pytest.raises(RestoreAbandoned) as caught:
                journal.repair(backend, in_restore_command=True)
            stopped = str(caught.value)
        else:
            try:
                [outcome] = journal.repair(backend)
            except RestoreAbandoned:        # a KeyboardInterrupt: uncaught, it would stop the whole test session
                pytest.fail("within a session the repair raised RestoreAbandoned instead of saying 'stopped'")
            assert (outcome.entry, outcome.action, outcome.message) == (
                entry, "stopped", f"{entry.describe()}: not restored, stopped by a second signal")
            stopped = said[-1]
    finally:
        os.close(held)
    assert stopped.startswith(f"gpuenergy: SIGTERM received again while restoring the power limit of {gpu.label}: "
                              f"stopped where it waited, without finishing; left changed: {entry.left_text()}")
    assert journal.entries() == [entry] and gpu.current_limit_mw() == 250_000


def test_an_entry_is_written_atomically_without_an_fsync(journal, gpu, monkeypatch):
    """The entry must outlive the process (the page cache does) and is renamed into place whole; an
    fsync would protect it only from the host going down, which resets the GPU's limit anyway, and
    cost every capped test of --energy-all --gpu-caps two of them."""
    import pytest_gpuenergy.fileio as fileio_module

    synced = []
    monkeypatch.setattr(fileio_module.os, "fsync", synced.append)
    journal.record(gpu, 550_000, 250_000)
    assert synced == [] and journal.entry(gpu.uuid).applied == 250_000
