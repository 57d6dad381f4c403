"""Tests of ``pytest_gpuenergy/gpu/clock_journal.py``, the journal of locked SM clocks.

A clock lock outlives the process that set it, so its entry must hold the exact lock from before (or
none), be refused when damaged, and be repaired by putting that state back, read back where the
library can read a lock (the simulator) and trusted where it cannot (real NVML). These tests drive the
journal in-process on the GPU simulator, so that mutation testing of the module sees them; each
asserts exact clocks in MHz, entry fields and the messages a user reads.
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
from types import SimpleNamespace
from typing import Any

import pytest

from pytest_gpuenergy.errors import JournalCorrupt
from pytest_gpuenergy.fileio import atomic_write_json, state_folder
from pytest_gpuenergy.gpu.capping import POWER_LIMIT
from pytest_gpuenergy.gpu.clocks import SM_CLOCK, ClockLock, clock_journal_for, lock_text
from pytest_gpuenergy.gpu.device import Backend, Gpu
from pytest_gpuenergy.gpu.journal import Journal, JournalEntry, journals_for
from pytest_gpuenergy.gpu.nvidia import NvmlGpu
from pytest_gpuenergy.gpu.processes import process_start

from helpers import DEAD_PID, H100, put_lock, read_lock


@pytest.fixture
def gpu(backend: Backend) -> Gpu:
    return backend.all_gpus[0]


@pytest.fixture
def journal(backend: Backend) -> Journal[ClockLock]:
    return clock_journal_for(backend)


class WithoutLockReading:
    """The simulator as real NVML looks to the plugin: it sets and resets locks, but cannot read one."""

    def __init__(self, lib: Any) -> None:
        self._lib = lib

    def __getattr__(self, name: str) -> Any:
        if name == "simGetGpuLockedClocks":
            raise AttributeError(name)
        return getattr(self._lib, name)


def nvml_like(backend: Backend) -> Gpu:
    gpu = NvmlGpu(WithoutLockReading(backend.nvml), 0, "nvml")
    gpu.retry_backoff_s = 0.0
    return gpu


def clock_entry(uuid: str, index: int, name: str, previous_min: int, previous_max: int, applied_min: int,
                applied_max: int, pid: int, start: str, host: str, written_at: float) -> JournalEntry[ClockLock]:
    """An SM clock entry from the figures of the earlier format (0, 0 before: not locked)."""
    return JournalEntry(SM_CLOCK, uuid, index, name, "nvidia", (previous_min, previous_max) if previous_max else None,
                        (applied_min, applied_max), pid, start, host, written_at)


def entry_for(gpu: Gpu, previous: ClockLock, applied: tuple[int, int], **changes) -> JournalEntry[ClockLock]:
    fields = dict(knob=SM_CLOCK, gpu_uuid=gpu.uuid, gpu_index=gpu.index, gpu_name=gpu.name, vendor="nvidia",
                  saved=previous, applied=applied, pid=DEAD_PID, process_start="gone", host="elsewhere", written_at=5.0)
    return JournalEntry(**(fields | changes))


def legacy_json(entry: JournalEntry[ClockLock]) -> dict:
    """``entry`` as pytest-gpuenergy wrote clock-lock entries before the one journal of every knob."""
    before = entry.saved or (0, 0)
    return {"gpu_uuid": entry.gpu_uuid, "gpu_index": entry.gpu_index, "gpu_name": entry.gpu_name,
            "previous_min_mhz": before[0], "previous_max_mhz": before[1], "applied_min_mhz": entry.applied[0],
            "applied_max_mhz": entry.applied[1], "pid": entry.pid, "process_start": entry.process_start,
            "host": entry.host, "written_at": entry.written_at, "format": "gpuenergy-clock-journal"}


def plant(journal: Journal[ClockLock], entry: JournalEntry[ClockLock]) -> None:
    state_folder(journal.folder)
    atomic_write_json(journal.folder / f"{entry.gpu_uuid}.json", entry.to_json())


def left_locked(journal: Journal[ClockLock], gpu: Gpu, previous: ClockLock, applied: tuple[int, int]) -> JournalEntry[ClockLock]:
    """A run that locked ``applied`` and died: the GPU locked so, its entry in the journal."""
    put_lock(gpu, applied)
    entry = entry_for(gpu, previous, applied)
    plant(journal, entry)
    return entry


# -- an entry ----------------------------------------------------------------------------------------

def test_an_entry_without_a_previous_lock_describes_it_as_not_locked():
    entry = clock_entry("GPU-abc", 2, "Some GPU", 0, 0, 210, 990, 42, "77", "node7", 1.0)
    assert (entry.saved, entry.applied) == (None, (210, 990))
    assert entry.describe() == "GPU 2 (Some GPU, GPU-abc): SM clock locked at 210-990 MHz by pid 42 on node7, before: not locked"


def test_an_entry_with_a_previous_lock_describes_both_locks():
    entry = clock_entry("GPU-abc", 0, "g", 300, 1500, 210, 990, 42, "77", "node7", 1.0)
    assert entry.saved == (300, 1500)
    assert entry.describe().endswith("SM clock locked at 210-990 MHz by pid 42 on node7, before: 300-1500 MHz")


@pytest.mark.parametrize(("previous", "before", "flags"), [((300, 1500), "300-1500 MHz", "-lgc 300,1500"), (None, "not locked", "-rgc")])
def test_an_entry_left_behind_names_both_locks_and_the_drivers_command_that_puts_it_back(previous, before, flags):
    entry = clock_entry("GPU-abc", 0, H100, *(previous or (0, 0)), 990, 1200, DEAD_PID, "gone", "elsewhere", 5.0)
    assert entry.left_text() == f"GPU 0 ({H100}, GPU-abc) with its SM clock locked at 990-1200 MHz, before: {before}"
    real_gpu = SimpleNamespace(simulated_state_file=None, uuid="GPU-abc")   # a real GPU: no simulated state file
    assert entry.fix_command(real_gpu) == f"sudo nvidia-smi -i GPU-abc {flags}"  # type: ignore[arg-type]


def test_recording_a_lock_waits_for_the_journals_lock_that_a_repair_holds(journal, gpu):
    state_folder(journal.folder)
    held = os.open(journal.folder / ".lock", os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(held, fcntl.LOCK_EX)
    done = threading.Event()
    writer = threading.Thread(target=lambda: (journal.record(gpu, None, (990, 990)), done.set()))
    writer.start()
    try:
        assert not done.wait(0.3)                  # the entry waits while the journal is being repaired
    finally:
        fcntl.flock(held, fcntl.LOCK_UN)
        os.close(held)
    writer.join(10)
    assert done.is_set() and journal.entry(gpu.uuid) is not None


def test_a_lock_reads_as_its_range_or_not_locked():
    assert (lock_text(None), lock_text((210, 1200))) == ("not locked", "210-1200 MHz")


@pytest.mark.parametrize("change", [{"pid": 43}, {"process_start": "78"}, {"written_at": 2.0}])
def test_an_entry_is_the_same_write_only_with_the_same_pid_start_and_moment(change):
    entry = clock_entry("GPU-abc", 0, "g", 0, 0, 210, 990, 42, "77", "node7", 1.0)
    assert entry.same_write(replace(entry, applied=(210, 1200), host="other"))
    assert not entry.same_write(replace(entry, **change))


def test_an_entry_is_owned_by_a_running_process_only_if_another_live_process_on_this_host_wrote_it():
    child = subprocess.Popen(["sleep", "30"])
    try:
        here = socket.gethostname()
        live = clock_entry("GPU-a", 0, "g", 0, 0, 210, 990, child.pid, process_start(child.pid), here, 1.0)
        assert live.owner_runs()
        assert not replace(live, host=here + "-elsewhere").owner_runs()
        assert not replace(live, process_start="1").owner_runs()
        assert not replace(live, pid=os.getpid(), process_start=process_start(os.getpid())).owner_runs()
    finally:
        child.kill()
        child.wait()
    assert not live.owner_runs()


# -- reading and setting a lock ------------------------------------------------------------------------

def test_the_simulator_reads_its_lock_and_put_lock_sets_or_resets_it(gpu):
    assert read_lock(gpu) == (True, None)
    put_lock(gpu, (210, 1200))
    assert read_lock(gpu) == (True, (210, 1200))
    put_lock(gpu, (225.0, 1500.0))                # NVML takes whole MHz
    assert read_lock(gpu) == (True, (225, 1500))
    put_lock(gpu, None)
    assert read_lock(gpu) == (True, None)


def test_a_library_that_cannot_read_a_lock_reads_as_unreadable(backend, gpu):
    put_lock(gpu, (210, 1200))
    assert read_lock(nvml_like(backend)) == (False, None)


# -- the journal's files ---------------------------------------------------------------------------

def test_the_clock_journal_lives_beside_the_power_journal_and_both_are_repaired(backend):
    clocks = clock_journal_for(backend)
    assert (clocks.folder, clocks.lock_folder) == (backend.state_dir / "journal" / "clocks", backend.lock_folder)
    power, clock = journals_for(backend)
    assert (power.knob, power.folder, power.lock_folder) == (POWER_LIMIT, backend.state_dir / "journal", backend.lock_folder)
    assert (clock.knob, clock.folder, clock.lock_folder) == (SM_CLOCK, clocks.folder, backend.lock_folder)


def test_recording_a_lock_writes_the_previous_state_and_this_process_as_owner(journal, gpu):
    before = time.time()
    entry = journal.record(gpu, None, (210, 990))
    assert (entry.gpu_uuid, entry.gpu_index, entry.gpu_name) == (gpu.uuid, 0, H100)
    assert (entry.knob, entry.vendor, entry.saved, entry.applied) == (SM_CLOCK, "nvidia", None, (210, 990))
    assert (entry.pid, entry.process_start, entry.host) == (os.getpid(), process_start(os.getpid()), socket.gethostname())
    assert before <= entry.written_at <= time.time()
    on_disk = json.loads((journal.folder / f"{gpu.uuid}.json").read_text())
    assert on_disk == entry.to_json()
    assert (on_disk["format"], on_disk["knob"], on_disk["saved"], on_disk["applied"]) == ("gpuenergy-journal", "sm-clock", None, [210, 990])
    assert journal.entry(gpu.uuid) == entry and read_lock(gpu) == (True, None)


def test_recording_a_lock_over_an_entry_keeps_its_previous_state(journal, gpu):
    plant(journal, entry_for(gpu, (300, 1500), (210, 1200)))
    entry = journal.record(gpu, (210, 1200), (210, 990))          # the dead run's lock is no "before"
    assert (entry.saved, entry.applied, entry.pid) == ((300, 1500), (210, 990), os.getpid())
    plant(journal, entry_for(gpu, None, (210, 1200)))
    assert journal.record(gpu, (210, 1200), (210, 990)).saved is None
    journal.clear(journal.entry(gpu.uuid))
    assert journal.record(gpu, (255, 1500), (210, 990)).saved == (255, 1500)


def test_a_damaged_clock_entry_is_an_error_naming_the_file_and_what_to_do(journal, gpu):
    state_folder(journal.folder)
    path = journal.folder / f"{gpu.uuid}.json"
    path.write_text("[]")
    with pytest.raises(JournalCorrupt) as caught:
        journal.entry(gpu.uuid)
    assert str(caught.value) == (
        f"the SM clock journal entry {path} is unreadable (not a clock-lock journal entry); check the GPU's SM clock "
        f"with `gpuenergy info`, put it back if needed, then delete the file")
    assert caught.value.__suppress_context__


def test_a_missing_clock_entry_reads_as_none_and_a_power_entry_is_no_clock_entry(journal, gpu, backend):
    assert journal.entry(gpu.uuid) is None
    power = Journal(POWER_LIMIT, journal.folder).record(gpu, 550_000, 250_000)
    with pytest.raises(JournalCorrupt, match=r"\(it is an entry of the knob 'power-limit', not of sm-clock\)"):
        journal.entry(power.gpu_uuid)


@pytest.mark.parametrize(("change", "says"), [
    ({"previous_min_mhz": -1}, "previous_min_mhz must be a whole number from 0 to 100000, got -1"),
    ({"previous_max_mhz": 100_001}, "previous_max_mhz must be a whole number from 0 to 100000, got 100001"),
    ({"applied_min_mhz": 0}, "applied_min_mhz must be a whole number from 1 to 100000, got 0"),
    ({"applied_max_mhz": 100_001}, "applied_max_mhz must be a whole number from 1 to 100000, got 100001"),
    ({"applied_max_mhz": "990"}, "applied_max_mhz must be a whole number from 1 to 100000, got '990'"),
    ({"previous_min_mhz": 1600}, "a lock's lower end lies above its upper end"),
    ({"applied_min_mhz": 1000}, "a lock's lower end lies above its upper end"),
    ({"pid": 0}, "pid must be a whole number from 1 to 2147483647, got 0"),
    ({"gpu_uuid": "GPU-other"}, "it names GPU 'GPU-other', not the GPU of its file name"),
])
def test_a_damaged_clock_field_of_an_earlier_versions_entry_is_refused_with_what_is_wrong(journal, gpu, change, says):
    state_folder(journal.folder)
    (journal.folder / f"{gpu.uuid}.json").write_text(json.dumps(legacy_json(entry_for(gpu, (300, 1500), (210, 990))) | change))
    with pytest.raises(JournalCorrupt) as caught:
        journal.entry(gpu.uuid)
    assert f"is unreadable ({says}); check the GPU's SM clock" in str(caught.value)


@pytest.mark.parametrize(("change", "says"), [
    ({"saved": [1600, 300]}, "a lock's lower end lies above its upper end"),
    ({"applied": [1000, 990]}, "a lock's lower end lies above its upper end"),
    ({"saved": [0, 1500]}, "saved's min must be a whole number from 1 to 100000, got 0"),
    ({"saved": [300, 100_001]}, "saved's max must be a whole number from 1 to 100000, got 100001"),
    ({"applied": [210, "990"]}, "applied's max must be a whole number from 1 to 100000, got '990'"),
    ({"applied": None}, "applied must be a lock [min MHz, max MHz], got None"),
    ({"saved": [300]}, "saved must be a lock [min MHz, max MHz] or null, got [300]"),
    ({"saved": "300-1500"}, "saved must be a lock [min MHz, max MHz] or null, got '300-1500'"),
    ({"knob": "power-limit"}, "it is an entry of the knob 'power-limit', not of sm-clock"),
    ({"format": "gpuenergy-limit-journal"}, "not a clock-lock journal entry"),
])
def test_a_damaged_clock_field_is_refused_with_what_is_wrong(journal, gpu, change, says):
    state_folder(journal.folder)
    (journal.folder / f"{gpu.uuid}.json").write_text(json.dumps(entry_for(gpu, (300, 1500), (210, 990)).to_json() | change))
    with pytest.raises(JournalCorrupt) as caught:
        journal.entry(gpu.uuid)
    assert f"is unreadable ({says}); check the GPU's SM clock" in str(caught.value)


@pytest.mark.parametrize(("previous", "applied"), [
    (None, (1, 1)), ((1, 100_000), (100_000, 100_000)), ((1500, 1500), (990, 990)), (None, (1, 100_000))])
def test_clock_fields_at_the_ends_of_their_ranges_are_accepted(journal, gpu, previous, applied):
    entry = entry_for(gpu, previous, applied)
    plant(journal, entry)
    assert journal.entry(gpu.uuid) == entry


@pytest.mark.parametrize(("previous", "applied"), [
    ((0, 0), (1, 1)), ((0, 100_000), (100_000, 100_000)), ((1500, 1500), (990, 990)), ((0, 0), (1, 100_000))])
def test_clock_fields_of_an_earlier_versions_entry_at_the_ends_of_their_ranges_are_accepted(journal, gpu, previous, applied):
    state_folder(journal.folder)
    raw = legacy_json(entry_for(gpu, None, applied)) | {"previous_min_mhz": previous[0], "previous_max_mhz": previous[1]}
    atomic_write_json(journal.folder / f"{gpu.uuid}.json", raw)
    assert journal.entry(gpu.uuid) == entry_for(gpu, previous if previous[1] else None, applied)


def test_a_gpu_an_earlier_version_left_locked_is_repaired_to_the_lock_before(journal, gpu, backend):
    put_lock(gpu, (210, 990))
    state_folder(journal.folder)
    atomic_write_json(journal.folder / f"{gpu.uuid}.json", legacy_json(entry_for(gpu, (300, 1500), (210, 990))))
    [outcome] = journal.repair(backend)
    assert outcome.action == "restored" and outcome.message.endswith(": restored to 300-1500 MHz")
    assert read_lock(gpu) == (True, (300, 1500)) and journal.entries() == []


# -- repairing ---------------------------------------------------------------------------------------

def test_repair_resets_a_dead_runs_lock_that_had_none_before(journal, gpu, backend):
    entry = left_locked(journal, gpu, None, (210, 990))
    [outcome] = journal.repair(backend)
    assert (outcome.entry, outcome.action, outcome.message) == (entry, "restored", f"{entry.describe()}: restored to not locked")
    assert read_lock(gpu) == (True, None) and journal.entries() == []


def test_repair_puts_back_the_lock_that_was_there_before(journal, gpu, backend):
    entry = left_locked(journal, gpu, (300, 1500), (210, 990))
    [outcome] = journal.repair(backend)
    assert (outcome.entry, outcome.action, outcome.message) == (entry, "restored", f"{entry.describe()}: restored to 300-1500 MHz")
    assert read_lock(gpu) == (True, (300, 1500)) and journal.entries() == []


def test_repair_clears_an_entry_whose_gpu_is_already_back(journal, gpu, backend):
    entry = left_locked(journal, gpu, (300, 1500), (210, 990))
    put_lock(gpu, (300, 1500))
    [outcome] = journal.repair(backend)
    assert (outcome.entry, outcome.action, outcome.message) == (entry, "already-restored", f"{entry.describe()}: already back to 300-1500 MHz")
    assert journal.entries() == []


def test_repair_leaves_a_lock_someone_changed_since_and_clears_the_entry(journal, gpu, backend):
    entry = left_locked(journal, gpu, None, (210, 990))
    put_lock(gpu, (210, 1200))
    [outcome] = journal.repair(backend)
    assert (outcome.entry, outcome.action) == (entry, "changed-since")
    assert outcome.message == f"{entry.describe()}: now 210-1200 MHz, set by someone else since; left as it is"
    assert read_lock(gpu) == (True, (210, 1200)) and journal.entries() == []


def test_a_repair_the_library_refuses_keeps_the_entry_and_says_why(journal, gpu, backend):
    entry = left_locked(journal, gpu, None, (210, 990))
    backend.nvml.simArmFaults("clock_reset_error")
    [outcome] = journal.repair(backend)
    assert (outcome.entry, outcome.action, outcome.message) == (entry, "failed", f"{entry.describe()}: could not restore it (NVML: Unknown Error)")
    assert read_lock(gpu) == (True, (210, 990)) and journal.entries() == [entry]


def test_a_repair_whose_lock_does_not_read_back_keeps_the_entry_and_says_what_it_reads(journal, gpu, backend):
    entry = left_locked(journal, gpu, (300, 1500), (210, 990))
    real = backend.nvml.nvmlDeviceSetGpuLockedClocks
    backend.nvml.nvmlDeviceSetGpuLockedClocks = lambda handle, low, high: real(handle, low, 1200)
    try:
        [outcome] = journal.repair(backend)
    finally:
        del backend.nvml.nvmlDeviceSetGpuLockedClocks
    assert (outcome.entry, outcome.action, outcome.message) == (entry, "failed", f"{entry.describe()}: set back, but it reads 300-1200 MHz")
    assert journal.entries() == [entry]


def test_a_repair_that_cannot_read_the_lock_puts_back_the_previous_state_and_trusts_it(journal, backend):
    gpu = backend.all_gpus[0]
    entry = left_locked(journal, gpu, (300, 1500), (210, 990))
    blind = nvml_like(backend)
    outcome = journal._repair_one(blind, entry)
    assert (outcome.entry, outcome.action, outcome.message) == (entry, "restored", f"{entry.describe()}: restored to 300-1500 MHz")
    assert read_lock(gpu) == (True, (300, 1500)) and journal.entries() == []
    left_locked(journal, gpu, (300, 1500), (210, 990))
    put_lock(gpu, (300, 1500))                   # back already, but it cannot tell: it sets it again
    assert journal._repair_one(blind, journal.entry(gpu.uuid)).action == "restored"
    left_locked(journal, gpu, None, (210, 990))
    put_lock(gpu, (210, 1200))                   # changed since, but it cannot tell: the reset wins
    assert journal._repair_one(blind, journal.entry(gpu.uuid)).action == "restored"
    assert read_lock(gpu) == (True, None)
