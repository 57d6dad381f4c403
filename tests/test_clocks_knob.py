"""Tests of ``pytest_gpuenergy/gpu/clocks.py``, the SM-clock knob (``ClockCapper``), in-process.

A clock cap must snap to the highest supported clock at or below the one asked, be journaled before the
GPU changes, be refused below the lowest clock, and always come back to the exact previous lock (or
none), with every failure an error naming the GPU and the fix. ``tests/test_clocks.py`` tests the knob
end to end through the fixture; these tests drive ``ClockCapper`` itself on the GPU simulator (faults
armed while running, a library that cannot read a lock standing in for real NVML), so that mutation
testing of the module sees them. Tests of the journal itself are in ``tests/test_clock_journal.py``.
"""

from __future__ import annotations

import os
import re
import signal
from typing import Any

import pynvml
import pytest

from pytest_gpuenergy.errors import (
    CapOutOfRange,
    CapPermissionError,
    GpuLostError,
    LimitChangeError,
    LimitRestoreError,
)
from pytest_gpuenergy.gpu import knob, signals
from pytest_gpuenergy.gpu.clocks import (
    SM_CLOCK,
    ClockCap,
    ClockCapper,
    ClockLock,
    ClockRange,
    GpuClockCap,
    _legacy_clock,
    clock_journal_for,
    clock_range,
    lock_text,
    sm_clock_now_mhz,
)
from pytest_gpuenergy.gpu.device import Backend, Gpu
from pytest_gpuenergy.gpu.journal import Journal, JournalEntry
from pytest_gpuenergy.gpu.nvidia import NvmlGpu
from pytest_gpuenergy.gpu.specs import parse_clock

from helpers import DEAD_PID, H100, V100, lock_is_free, put_lock, read_lock, sigint_as_a_terminal_gives

pytestmark = pytest.mark.sim_gpus("H100,V100")

GPU0 = f"GPU 0 ({H100})"
GPU1 = f"GPU 1 ({V100})"


@pytest.fixture
def journal(backend: Backend) -> Journal[ClockLock]:
    return clock_journal_for(backend)


def capper_of(backend: Backend, *gpus: Gpu) -> ClockCapper:
    return ClockCapper(gpus or backend.all_gpus, clock_journal_for(backend), backend.lock_folder)


def locks(backend: Backend) -> list:
    return [read_lock(gpu)[1] for gpu in backend.all_gpus]


class Library:
    """The simulator with some calls replaced (``calls`` counts them): a GPU that misbehaves, or real
    NVML, which cannot read a lock back (``readable=False``)."""

    def __init__(self, lib: Any, readable: bool = True, **replaced: Any) -> None:
        self._lib, self._readable, self._replaced = lib, readable, replaced
        self.calls: list[str] = []

    def __getattr__(self, name: str) -> Any:
        if name == "simGetGpuLockedClocks" and not self._readable:
            raise AttributeError(name)
        real = getattr(self._lib, name)
        if not callable(real):
            return real

        def call(*args: Any) -> Any:
            self.calls.append(name)
            if name in self._replaced:
                return self._replaced[name](real, *args)
            return real(*args)

        return call


def gpu_on(library: Library, index: int = 0) -> Gpu:
    gpu = NvmlGpu(library, index, "sim")
    return gpu


def fails(error: type[BaseException]):
    def call(real, *args):
        raise error()
    return call


def plant_dead_runs_entry(journal: Journal[ClockLock], gpu: Gpu, previous: ClockLock, applied: tuple[int, int],
                          pid: int = DEAD_PID) -> None:
    from pytest_gpuenergy.fileio import atomic_write_json, state_folder

    put_lock(gpu, applied)
    entry = JournalEntry(SM_CLOCK, gpu.uuid, gpu.index, gpu.name, "nvidia", previous, applied, pid, "gone", "elsewhere", 1.0)
    state_folder(journal.folder)
    atomic_write_json(journal.folder / f"{gpu.uuid}.json", entry.to_json())


# -- a GPU's SM clocks ---------------------------------------------------------------------------------

def test_a_clock_range_snaps_to_the_highest_supported_clock_at_or_below_the_one_asked():
    found = ClockRange((1980, 990, 210))
    assert (found.max_mhz, found.min_mhz, found.text()) == (1980, 210, "210-1980 MHz")
    assert [found.snap(m) for m in (5000, 1980, 1979, 990, 989.9999999999, 989, 210, 209.9)] == [
        1980, 1980, 990, 990, 990, 210, 210, None]


def test_a_gpus_clock_range_is_its_supported_sm_clocks_highest_first(h100, v100):
    assert clock_range(h100).supported_mhz[:3] == (1980, 1965, 1950)
    assert (clock_range(h100).min_mhz, len(clock_range(h100).supported_mhz)) == (210, 119)
    assert clock_range(v100).text() == "135-1530 MHz"


def test_the_clock_range_is_read_at_the_highest_memory_clock_sorted_and_without_repeats(backend):
    library = Library(backend.nvml, nvmlDeviceGetSupportedMemoryClocks=lambda real, handle: [800, real(handle)[0], 1000],
                      nvmlDeviceGetSupportedGraphicsClocks=lambda real, handle, memory: (
                          [210, 1980, 990, 990] if memory == 2619 else []))
    gpu = gpu_on(library)
    assert backend.nvml.nvmlDeviceGetSupportedMemoryClocks(gpu.handle) == [2619]
    assert clock_range(gpu) == ClockRange((1980, 990, 210))


def test_a_gpu_that_lists_no_sm_clocks_cannot_be_locked(backend):
    gpu = gpu_on(Library(backend.nvml, nvmlDeviceGetSupportedGraphicsClocks=lambda real, handle, memory: []))
    with pytest.raises(LimitChangeError, match=re.escape(f"{GPU0} lists no supported SM clocks: its clocks cannot be locked")):
        clock_range(gpu)


def test_the_sm_clock_now_is_read_as_whole_mhz(backend):
    gpu = gpu_on(Library(backend.nvml, nvmlDeviceGetClockInfo=lambda real, handle, kind: 1234.0 + kind))
    assert sm_clock_now_mhz(gpu) == 1234 + pynvml.NVML_CLOCK_SM
    assert isinstance(sm_clock_now_mhz(gpu), int)


# -- applying and restoring -----------------------------------------------------------------------------

def test_a_clock_cap_is_journaled_locked_described_and_undone_to_no_lock(backend, h100, v100, journal):
    capper = capper_of(backend)
    cap = capper.apply(parse_clock("1000"))
    assert cap == ClockCap("1000MHz", parse_clock("1000"), (
        GpuClockCap(0, H100, h100.uuid, 1000.0, 990, None, True, 210, 1980),
        GpuClockCap(1, V100, v100.uuid, 1000.0, 990, None, True, 135, 1530)))
    assert locks(backend) == [(210, 990), (135, 990)] and capper.pending == [h100, v100]
    assert sorted((e.gpu_uuid, e.saved, e.applied, e.pid) for e in journal.entries()) == sorted(
        [(h100.uuid, None, (210, 990), os.getpid()), (v100.uuid, None, (135, 990), os.getpid())])
    assert not lock_is_free(backend, h100) and not lock_is_free(backend, v100)
    capper.restore()
    assert locks(backend) == [None, None] and capper.pending == [] and journal.entries() == []
    assert lock_is_free(backend, h100) and lock_is_free(backend, v100)
    capper.restore()
    assert locks(backend) == [None, None]


def test_a_percent_clock_cap_is_of_each_gpus_maximum_and_an_earlier_lock_comes_back(backend, h100, v100):
    put_lock(v100, (300, 1200))
    with capper_of(backend) as capper:
        cap = capper.apply(parse_clock("50%"))
        assert [(g.requested_mhz, g.enforced_mhz, g.previous_lock_mhz) for g in cap.gpus] == [
            (990.0, 990, None), (765.0, 765, (300, 1200))]
        assert (cap.requested_mhz, cap.enforced_mhz, cap.previous_lock_mhz, cap.gpu_name) == (990.0, 990, None, H100)
    assert locks(backend) == [None, (300, 1200)]


def test_a_clock_cap_prints_every_gpu(backend, h100):
    with capper_of(backend) as capper:
        cap = capper.apply(parse_clock("clk50%"))
        text = (f"clock cap clk50% (GPU 0 {H100}: requested 990 MHz, SM clock at most 990 MHz; "
                f"GPU 1 {V100}: requested 765 MHz, SM clock at most 765 MHz)")
        assert str(cap) == text and repr(cap) == f"ClockCap({text})"


def test_the_gpus_as_they_are_are_described_with_their_locks(backend, h100, v100, journal):
    put_lock(v100, (300, 1200))
    capper = capper_of(backend)
    cap = capper.current()
    assert cap == ClockCap("current", None, (
        GpuClockCap(0, H100, h100.uuid, None, None, None, True, 210, 1980),
        GpuClockCap(1, V100, v100.uuid, None, 1200, (300, 1200), True, 135, 1530)))
    assert str(cap) == f"clock cap current (GPU 0 {H100}: SM clock not locked; GPU 1 {V100}: SM clock at most 1200 MHz)"
    assert capper.pending == [] and journal.entries() == [] and locks(backend) == [None, (300, 1200)]


def test_on_a_library_that_cannot_read_a_lock_the_previous_lock_is_unknown_and_the_reset_comes_back(backend, journal):
    library = Library(backend.nvml, readable=False)
    gpu = gpu_on(library)
    assert capper_of(backend, gpu).current().gpus[0] == GpuClockCap(0, H100, gpu.uuid, None, None, None, False, 210, 1980)
    with ClockCapper([gpu], journal, backend.lock_folder) as capper:
        cap = capper.apply(parse_clock("1200"))
        assert cap.gpus[0] == GpuClockCap(0, H100, gpu.uuid, 1200.0, 1200, None, False, 210, 1980)
        assert read_lock(backend.all_gpus[0]) == (True, (210, 1200))
    assert read_lock(backend.all_gpus[0]) == (True, None) and journal.entries() == []
    assert library.calls.count("nvmlDeviceResetGpuLockedClocks") == 1


def test_the_capper_as_a_context_manager_is_itself_and_restores_on_the_way_out(backend, h100):
    capper = capper_of(backend, h100)
    with pytest.raises(RuntimeError, match="the test broke"), capper as entered:
        assert entered is capper
        capper.apply(parse_clock("max"))
        raise RuntimeError("the test broke")
    assert read_lock(h100) == (True, None) and lock_is_free(backend, h100)


def test_a_second_clock_cap_before_the_restore_is_refused(backend, h100):
    with capper_of(backend, h100) as capper:
        capper.apply(parse_clock("1200"))
        with pytest.raises(LimitChangeError) as refused:
            capper.apply(parse_clock("990"))
        assert str(refused.value) == "a clock cap is already applied: restore it before applying another"
        assert read_lock(h100) == (True, (210, 1200))
        capper.restore()
        assert capper.apply(parse_clock("990")).enforced_mhz == 990
    assert read_lock(h100) == (True, None)


@pytest.mark.parametrize(("text", "mhz"), [("210", 210), ("224.9", 210), ("1980", 1980), ("max", 1980)])
def test_clock_caps_at_the_ends_of_the_range_are_locked(backend, h100, text, mhz):
    with capper_of(backend, h100) as capper:
        assert capper.apply(parse_clock(text)).enforced_mhz == mhz
        assert read_lock(h100) == (True, (210, mhz))


def test_a_clock_cap_below_the_lowest_clock_of_any_gpu_locks_no_gpu_and_names_the_range(backend, h100, v100, journal):
    capper = capper_of(backend)
    with pytest.raises(CapOutOfRange) as caught:
        capper.apply(parse_clock("200"))         # above the V100's lowest, below the H100's
    assert str(caught.value) == f"clock cap 200MHz = 200 MHz is below the lowest SM clock of {GPU0}; it supports 210-1980 MHz"
    assert locks(backend) == [None, None] and journal.entries() == [] and capper.pending == []
    assert lock_is_free(backend, h100) and lock_is_free(backend, v100)
    with pytest.raises(CapOutOfRange, match=re.escape("clock cap clk5% = 99 MHz is below the lowest SM clock of")):
        capper.apply(parse_clock("5%"))


# -- a lock someone left ------------------------------------------------------------------------------

def test_a_lock_a_dead_run_left_is_taken_over_and_the_state_from_before_it_comes_back(backend, h100, journal):
    plant_dead_runs_entry(journal, h100, None, (210, 1200))
    with capper_of(backend, h100) as capper:
        cap = capper.apply(parse_clock("990"))
        assert (cap.previous_lock_mhz, cap.enforced_mhz) == (None, 990)
        [entry] = journal.entries()
        assert (entry.saved, entry.applied, entry.pid) == (None, (210, 990), os.getpid())
    assert read_lock(h100) == (True, None) and journal.entries() == []


def test_a_dead_runs_entry_makes_the_previous_lock_known_where_nvml_cannot_read_it(backend, journal):
    gpu = gpu_on(Library(backend.nvml, readable=False))
    plant_dead_runs_entry(journal, gpu, (300, 1500), (210, 1200))
    with ClockCapper([gpu], journal, backend.lock_folder) as capper:
        assert capper.apply(parse_clock("990")).gpus[0] == GpuClockCap(0, H100, gpu.uuid, 990.0, 990, (300, 1500), True,
                                                                        210, 1980)
    assert read_lock(backend.all_gpus[0]) == (True, (300, 1500))


# -- failures while locking --------------------------------------------------------------------------

def test_no_permission_to_lock_a_clock_says_how_to_get_it_and_locks_nothing(backend, h100, journal):
    backend.nvml.simArmFaults("no_permission")
    with pytest.raises(CapPermissionError) as caught:
        capper_of(backend, h100).apply(parse_clock("990"))
    text = str(caught.value)
    assert text.startswith(f"not allowed to lock the SM clock of {GPU0}: NVML needs root (CAP_SYS_ADMIN)")
    assert "`sudo -E pytest ...`" in text and "drop --gpu-clocks to run at the GPU's own clocks" in text
    assert caught.value.__suppress_context__
    assert read_lock(h100) == (True, None) and journal.entries() == [] and lock_is_free(backend, h100)


def test_a_lock_that_keeps_failing_is_an_error_with_the_range_asked(backend, h100, journal):
    backend.nvml.simArmFaults("clock_set_error")
    with pytest.raises(LimitChangeError) as caught:
        capper_of(backend, h100).apply(parse_clock("990"))
    assert str(caught.value) == f"locking the SM clock of {GPU0} at 210-990 MHz failed: NVML: Unknown Error"
    assert caught.value.__suppress_context__
    assert journal.entries() == []


def test_a_transient_lock_error_is_retried(backend, h100):
    backend.nvml.simArmFaults("clock_set_error=1-3")
    with capper_of(backend, h100) as capper:
        assert capper.apply(parse_clock("990")).enforced_mhz == 990


def test_a_gpu_lost_while_locking_its_clock_is_named(backend):
    gpu = gpu_on(Library(backend.nvml, nvmlDeviceSetGpuLockedClocks=fails(pynvml.NVMLError_GpuIsLost)))
    with pytest.raises(GpuLostError) as caught:
        capper_of(backend, gpu).apply(parse_clock("990"))
    assert str(caught.value) == (f"{GPU0} is lost (NVML: GPU is lost) while locking its SM clock: it fell off the bus "
                                 f"or its driver reset")
    assert caught.value.__suppress_context__


def test_clocks_that_cannot_be_read_are_an_error_naming_the_gpu(backend, journal):
    gpu = gpu_on(Library(backend.nvml, nvmlDeviceGetSupportedMemoryClocks=fails(pynvml.NVMLError_Unknown)))
    with pytest.raises(LimitChangeError) as caught:
        capper_of(backend, gpu).apply(parse_clock("990"))
    assert str(caught.value) == f"reading the SM clocks of {GPU0} failed: NVML: Unknown Error"
    assert caught.value.__suppress_context__ and journal.entries() == []


def test_a_transient_error_reading_the_clocks_is_retried(backend):
    tries: list[int] = []

    def flaky(real, handle):
        tries.append(1)
        if len(tries) < 3:
            raise pynvml.NVMLError_Unknown()
        return real(handle)

    gpu = gpu_on(Library(backend.nvml, nvmlDeviceGetSupportedMemoryClocks=flaky))
    with capper_of(backend, gpu) as capper:
        assert capper.apply(parse_clock("990")).enforced_mhz == 990


def test_a_gpu_lost_while_reading_its_clocks_is_named(backend):
    gpu = gpu_on(Library(backend.nvml, simGetGpuLockedClocks=fails(pynvml.NVMLError_GpuIsLost)))
    with pytest.raises(GpuLostError) as caught:
        capper_of(backend, gpu).current()
    assert str(caught.value) == f"{GPU0} is lost (NVML: GPU is lost): it fell off the bus or its driver reset"
    assert caught.value.__suppress_context__


def test_a_lock_that_reads_back_other_than_asked_is_an_error_and_is_undone(backend, journal):
    gpu = gpu_on(Library(backend.nvml, nvmlDeviceSetGpuLockedClocks=lambda real, handle, low, high: real(handle, low, high + 15)))
    with pytest.raises(LimitChangeError) as caught:
        capper_of(backend, gpu).apply(parse_clock("990"))
    assert str(caught.value) == (f"{GPU0} locks its SM clock at 210-1005 MHz after a request for 210-990 MHz: the lock "
                                 f"did not take effect as asked")
    assert read_lock(gpu) == (True, None) and journal.entries() == []


def test_a_lock_that_reads_back_with_another_lower_end_counts_as_taken(backend):
    gpu = gpu_on(Library(backend.nvml, nvmlDeviceSetGpuLockedClocks=lambda real, handle, low, high: real(handle, 300, high)))
    with capper_of(backend, gpu) as capper:
        assert capper.apply(parse_clock("990")).enforced_mhz == 990
        assert read_lock(gpu) == (True, (300, 990))


def test_a_lock_that_does_not_take_is_an_error_and_nothing_stays_journaled(backend, journal):
    gpu = gpu_on(Library(backend.nvml, nvmlDeviceSetGpuLockedClocks=lambda real, *args: None))
    with pytest.raises(LimitChangeError) as caught:
        capper_of(backend, gpu).apply(parse_clock("990"))
    assert str(caught.value) == (f"{GPU0} shows no SM clock lock after a request for 210-990 MHz: the lock did not take "
                                 f"effect (another clock manager, or a driver that ignores it)")
    assert journal.entries() == []


def test_a_failed_clock_cap_unlocks_the_gpus_already_locked(backend, h100, v100, journal):
    backend.nvml.simArmFaults("no_permission@1")
    capper = capper_of(backend)
    with pytest.raises(CapPermissionError, match=re.escape(f"not allowed to lock the SM clock of {GPU1}")):
        capper.apply(parse_clock("990"))
    assert locks(backend) == [None, None] and journal.entries() == [] and capper.pending == []


def test_a_failed_clock_cap_whose_undoing_fails_too_says_the_cause_first(backend, h100, journal):
    backend.nvml.simArmFaults("no_permission@1,clock_reset_error@0")
    with pytest.raises(LimitRestoreError) as caught:
        capper_of(backend).apply(parse_clock("990"))
    assert str(caught.value).startswith(f"not allowed to lock the SM clock of {GPU1}: NVML needs root")
    assert str(caught.value).endswith(f"; putting the GPU back failed too: the SM clock of {GPU0} could not be set back "
                                      f"to not locked after 4 attempts (NVML: Unknown Error)")
    assert [e.gpu_uuid for e in journal.entries()] == [h100.uuid]


# -- failures while restoring ----------------------------------------------------------------------------

def test_a_restore_that_keeps_failing_names_every_gpu_keeps_their_entries_and_frees_the_locks(backend, h100, v100, journal):
    put_lock(v100, (300, 1200))
    capper = capper_of(backend)
    capper.apply(parse_clock("990"))
    backend.nvml.simArmFaults("clock_reset_error,clock_set_error")
    with pytest.raises(LimitRestoreError) as caught:
        capper.restore()
    assert str(caught.value) == (
        f"the SM clock of {GPU1} could not be set back to 300-1200 MHz after 4 attempts (NVML: Unknown Error); "
        f"the SM clock of {GPU0} could not be set back to not locked after 4 attempts (NVML: Unknown Error)")
    assert locks(backend) == [(210, 990), (135, 990)] and len(journal.entries()) == 2
    assert capper.pending == [] and lock_is_free(backend, h100) and lock_is_free(backend, v100)


def test_a_clock_restore_is_retried_with_a_growing_pause(backend, h100, monkeypatch):
    capper = capper_of(backend, h100)
    capper.apply(parse_clock("990"))
    backend.nvml.simArmFaults("clock_reset_error=1-3")
    pauses: list[float] = []
    monkeypatch.setattr(knob.realtime, "sleep", pauses.append)
    capper.restore()
    assert pauses == [0.01, 0.02, 0.03] and read_lock(h100) == (True, None)


def test_a_clock_restore_that_does_not_take_says_what_the_gpu_reads(backend, journal):
    library = Library(backend.nvml, nvmlDeviceResetGpuLockedClocks=lambda real, handle: None)
    gpu = gpu_on(library)
    capper = capper_of(backend, gpu)
    capper.apply(parse_clock("990"))
    with pytest.raises(LimitRestoreError) as caught:
        capper.restore()
    assert str(caught.value) == (f"the SM clock of {GPU0} could not be set back to not locked after 4 attempts "
                                 f"(it reads 210-990 MHz after the restore)")
    assert library.calls.count("nvmlDeviceResetGpuLockedClocks") == 4 and len(journal.entries()) == 1


def test_a_gpu_lost_while_its_earlier_lock_is_put_back_names_that_lock(backend, journal):
    calls = []

    def lost_on_the_second(real, *args):       # the cap's lock takes, the restore's is refused
        calls.append(args)
        if len(calls) > 1:
            raise pynvml.NVMLError_GpuIsLost()
        return real(*args)

    put_lock(gpu_on(Library(backend.nvml)), (210, 1200))             # a lock someone set before the tests
    gpu = gpu_on(Library(backend.nvml, nvmlDeviceSetGpuLockedClocks=lost_on_the_second))
    capper = capper_of(backend, gpu)
    capper.apply(parse_clock("990"))
    with pytest.raises(LimitRestoreError) as caught:
        capper.restore()
    assert str(caught.value) == f"{GPU0} is lost: its SM clock could not be set back to 210-1200 MHz"


def test_each_gpus_sm_clock_is_read_from_that_gpu(backend, h100, v100):
    own = {gpu.index: int(backend.nvml.nvmlDeviceGetClockInfo(gpu.handle, pynvml.NVML_CLOCK_SM)) for gpu in (h100, v100)}
    assert own[0] != own[1]                                   # the two models idle at different clocks
    assert (sm_clock_now_mhz(h100), sm_clock_now_mhz(v100)) == (own[0], own[1])


def test_a_gpu_lost_during_a_clock_restore_is_named_at_once(backend, journal):
    library = Library(backend.nvml, nvmlDeviceResetGpuLockedClocks=fails(pynvml.NVMLError_GpuIsLost))
    gpu = gpu_on(library)
    capper = capper_of(backend, gpu)
    capper.apply(parse_clock("990"))
    with pytest.raises(LimitRestoreError) as caught:
        capper.restore()
    assert str(caught.value) == f"{GPU0} is lost: its SM clock could not be set back to not locked"
    assert library.calls.count("nvmlDeviceResetGpuLockedClocks") == 1 and len(journal.entries()) == 1


def test_a_gpu_someone_already_unlocked_is_not_reset_again(backend, journal):
    library = Library(backend.nvml)
    gpu = gpu_on(library)
    capper = capper_of(backend, gpu)
    capper.apply(parse_clock("990"))
    put_lock(backend.all_gpus[0], None)
    capper.restore()
    assert "nvmlDeviceResetGpuLockedClocks" not in library.calls and journal.entries() == []


def test_a_signal_during_a_clock_restore_waits_and_is_announced_with_the_gpus(backend, h100, v100, monkeypatch):
    said: list[str] = []
    signals.announce_with(said.append)
    monkeypatch.setattr(signals, "_stopping", True)          # the held signal is then dropped, not raised
    library = Library(backend.nvml, nvmlDeviceResetGpuLockedClocks=lambda real, handle: (
        signal.raise_signal(signal.SIGINT), real(handle)))
    gpus = [gpu_on(library, 0), gpu_on(library, 1)]
    try:
        capper = capper_of(backend, *gpus)
        capper.apply(parse_clock("990"))
        with sigint_as_a_terminal_gives():     # not ignored, as a background job inherits it
            capper.restore()
    finally:
        signals.announce_with(None)
    assert said == [f"gpuenergy: SIGINT received while restoring the SM clock of {GPU0}, {GPU1}: finishing that "
                    f"first, then stopping"]
    assert locks(backend) == [None, None]


# -- the SM clock lock as a knob: its words, its fix, what it reads back (the clocks' mutation gaps) -----

def _clock_entry(saved, applied) -> JournalEntry:
    return JournalEntry(knob=SM_CLOCK, gpu_uuid="GPU-1234", gpu_index=2, gpu_name="H100", vendor="nvidia",
                        saved=saved, applied=applied, pid=4242, process_start="1", host="node7", written_at=5.0)


def test_a_lock_reads_as_its_range_not_locked_or_unknown():
    assert lock_text((705, 1200)) == "705-1200 MHz"
    assert lock_text(None) == "not locked"
    assert lock_text(knob.UNREADABLE) == "unknown (not readable)"


def test_a_clock_entry_describes_both_locks_and_names_nvidia_smis_fix():
    entry = _clock_entry((300, 1980), (705, 990))
    assert SM_CLOCK.describe(entry) == ("GPU 2 (H100, GPU-1234): SM clock locked at 705-990 MHz by pid 4242 on "
                                        "node7, before: 300-1980 MHz")
    assert SM_CLOCK.left_text(entry) == "GPU 2 (H100, GPU-1234) with its SM clock locked at 705-990 MHz, before: 300-1980 MHz"
    assert SM_CLOCK.driver_command("GPU-1234", "nvidia", None) == "nvidia-smi -i GPU-1234 -rgc"
    assert SM_CLOCK.driver_command("GPU-1234", "nvidia", (705, 990)) == "nvidia-smi -i GPU-1234 -lgc 705,990"


def test_a_journaled_lock_is_two_whole_megahertz_low_to_high():
    assert SM_CLOCK.decode([1, 990], "applied") == (1, 990)
    assert SM_CLOCK.decode(None, "saved") is None
    with pytest.raises(ValueError, match=r"^saved must be a lock \[min MHz, max MHz\] or null, got 'x'$"):
        SM_CLOCK.decode("x", "saved")
    with pytest.raises(ValueError, match=r"^applied must be a lock \[min MHz, max MHz\], got \[1, 2, 3\]$"):
        SM_CLOCK.decode([1, 2, 3], "applied")
    with pytest.raises(ValueError, match=r"^applied must be a lock \[min MHz, max MHz\], got None$"):
        SM_CLOCK.decode(None, "applied")
    with pytest.raises(ValueError, match=r"^applied's min must be a whole number from 1 to "):
        SM_CLOCK.decode([0, 990], "applied")
    with pytest.raises(ValueError, match=r"^applied's max must be a whole number from 1 to "):
        SM_CLOCK.decode([705, 0], "applied")
    with pytest.raises(ValueError, match=r"^a lock's lower end lies above its upper end$"):
        SM_CLOCK.decode([990, 705], "applied")


def test_an_earlier_versions_clock_entry_reads_no_lock_before_as_none():
    old = {"previous_min_mhz": 0, "previous_max_mhz": 0, "applied_min_mhz": 1, "applied_max_mhz": 990}
    assert _legacy_clock(old) == (None, (1, 990))
    assert _legacy_clock(old | {"previous_min_mhz": 300, "previous_max_mhz": 1980}) == ((300, 1980), (1, 990))
    with pytest.raises(ValueError, match=r"^previous_max_mhz must be a whole number from 0 to "):
        _legacy_clock(old | {"previous_max_mhz": -1})
    with pytest.raises(ValueError, match=r"^applied_min_mhz must be a whole number from 1 to "):
        _legacy_clock(old | {"applied_min_mhz": 0})


@pytest.mark.sim_gpus("H100,MI300X")
def test_as_they_are_an_nvidia_gpu_shows_its_clock_range_and_an_amd_gpu_none(backend):
    nvidia, amd = backend.all_gpus
    current = capper_of(backend).current()
    assert current.label == "current" and [g.gpu_uuid for g in current.gpus] == [nvidia.uuid, amd.uuid]
    on_nvidia, on_amd = current.gpus
    low, high = clock_range(nvidia).min_mhz, clock_range(nvidia).max_mhz
    assert (on_nvidia.min_mhz, on_nvidia.max_mhz) == (low, high) and low < high
    assert (on_nvidia.enforced_mhz, on_nvidia.previous_lock_mhz, on_nvidia.previous_known) == (None, None, True)
    assert (on_amd.min_mhz, on_amd.max_mhz, on_amd.enforced_mhz) == (None, None, None)
