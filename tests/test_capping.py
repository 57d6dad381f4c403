"""Tests of ``pytest_gpuenergy/gpu/capping.py``, the power-cap knob (``PowerCapper``).

A cap must resolve to the exact limit asked, be journaled before the GPU changes, be refused when out of
range, and always come back to the exact original limit, with every failure an error that names the GPU
and the fix. These tests drive ``PowerCapper`` in-process on the GPU simulator (its faults armed while
running), so that the mutation testing of the module sees them; each asserts exact limits in mW or W,
journal contents and the messages a user reads.
"""

from __future__ import annotations

import os
import re
import signal
from collections.abc import Callable

import pytest

from pytest_gpuenergy.errors import (
    CapOutOfRange,
    CapPermissionError,
    GpuLostError,
    LimitChangeError,
    LimitRestoreError,
)
from pytest_gpuenergy.gpu import knob, signals
from pytest_gpuenergy.gpu.capping import POWER_LIMIT, GpuCap, PowerCap, PowerCapper, power_journal_for, restore_after_failure
from pytest_gpuenergy.gpu.device import Backend, Gpu
from pytest_gpuenergy.gpu.journal import Journal, JournalEntry
from pytest_gpuenergy.gpu.specs import parse_cap

from helpers import DEAD_PID, H100, V100, lock_is_free, sigint_as_a_terminal_gives

pytestmark = pytest.mark.sim_gpus("H100,V100")

GPU0 = f"GPU 0 ({H100})"
GPU1 = f"GPU 1 ({V100})"


@pytest.fixture
def journal(backend: Backend) -> Journal[int]:
    return power_journal_for(backend)


def capper_of(backend: Backend, *gpus: Gpu) -> PowerCapper:
    return PowerCapper(gpus or backend.all_gpus, power_journal_for(backend), backend.lock_folder)


def limits_w(backend: Backend) -> list[float]:
    return [gpu.current_limit_mw() / 1000 for gpu in backend.all_gpus]


def plant_dead_runs_entry(journal: Journal[int], gpu: Gpu, previous_mw: int, applied_mw: int, pid: int = DEAD_PID) -> None:
    from pytest_gpuenergy.fileio import atomic_write_json, state_folder

    gpu.set_limit_mw(applied_mw)
    entry = JournalEntry(POWER_LIMIT, gpu.uuid, gpu.index, gpu.name, "nvidia", previous_mw, applied_mw, pid, "gone",
                         "elsewhere", 1.0)
    state_folder(journal.folder)
    atomic_write_json(journal.folder / f"{gpu.uuid}.json", entry.to_json())


def counting(monkeypatch: pytest.MonkeyPatch, gpu: Gpu, name: str, before=None) -> list:
    """Count the calls of one of ``gpu``'s methods (``before(args)`` runs first, and may raise)."""
    calls: list = []
    real = getattr(gpu, name)

    def wrapper(*args):
        calls.append(args)
        if before is not None:
            before(*args)
        return real(*args)

    monkeypatch.setattr(gpu, name, wrapper)
    return calls


def raising(error: Callable[[], BaseException]):
    def fail(*args):
        raise error()
    return fail


# -- applying and restoring ------------------------------------------------------------------------

def test_a_cap_is_journaled_set_described_and_undone_to_the_exact_previous_limits(backend, h100, v100, journal):
    v100.set_limit_mw(250_000)                   # a tuned limit, neither default nor maximum
    capper = capper_of(backend)
    cap = capper.apply(parse_cap("200"))
    assert cap == PowerCap("200W", parse_cap("200"), (
        GpuCap(0, H100, h100.uuid, 200.0, 200.0, 700.0, 700.0, 200.0, 700.0),
        GpuCap(1, V100, v100.uuid, 200.0, 200.0, 250.0, 300.0, 150.0, 300.0)))
    assert limits_w(backend) == [200.0, 200.0]
    assert capper.pending == [h100, v100] and capper.notices == []
    assert [(e.gpu_uuid, e.saved, e.applied, e.pid) for e in journal.entries()] == sorted(
        [(h100.uuid, 700_000, 200_000, os.getpid()), (v100.uuid, 250_000, 200_000, os.getpid())])
    assert not lock_is_free(backend, h100) and not lock_is_free(backend, v100)
    capper.restore()
    assert limits_w(backend) == [700.0, 250.0]
    assert capper.pending == [] and journal.entries() == []
    assert lock_is_free(backend, h100) and lock_is_free(backend, v100)
    capper.restore()                             # twice is harmless
    assert limits_w(backend) == [700.0, 250.0]


def test_a_percent_cap_is_of_each_gpus_default(backend):
    with capper_of(backend) as capper:
        cap = capper.apply(parse_cap("60%"))
        assert [(g.requested_w, g.enforced_w) for g in cap.gpus] == [(420.0, 420.0), (180.0, 180.0)]
        assert limits_w(backend) == [420.0, 180.0]
    assert limits_w(backend) == [700.0, 300.0]


def test_the_capper_as_a_context_manager_is_itself_and_restores_on_the_way_out(backend, h100):
    capper = capper_of(backend, h100)
    with pytest.raises(RuntimeError, match="the test broke"), capper as entered:
        assert entered is capper
        capper.apply(parse_cap("300"))
        raise RuntimeError("the test broke")
    assert limits_w(backend)[0] == 700.0 and lock_is_free(backend, h100)


def test_a_second_cap_before_the_restore_is_refused(backend, h100):
    with capper_of(backend, h100) as capper:
        capper.apply(parse_cap("300"))
        with pytest.raises(LimitChangeError) as refused:
            capper.apply(parse_cap("400"))
        assert str(refused.value) == "a cap is already applied: restore it before applying another"
        assert limits_w(backend)[0] == 300.0
        capper.restore()
        assert capper.apply(parse_cap("400")).enforced_w == 400.0
    assert limits_w(backend)[0] == 700.0


def test_a_cap_at_the_current_limit_changes_nothing_and_journals_nothing(backend, h100, v100, journal, monkeypatch):
    v100.set_limit_mw(250_000)
    set_calls = counting(monkeypatch, h100, "set_limit_mw")
    capper = capper_of(backend)
    cap = capper.apply(parse_cap("250"))          # the V100 is there already; the H100 is capped
    assert cap.gpus[1] == GpuCap(1, V100, v100.uuid, 250.0, 250.0, 250.0, 300.0, 150.0, 300.0)
    assert capper.pending == [h100] and [e.gpu_uuid for e in journal.entries()] == [h100.uuid]
    assert set_calls == [(250_000,)]
    capper.restore()
    assert limits_w(backend) == [700.0, 250.0]


def test_the_gpus_as_they_are_are_described_without_a_change(backend, h100, v100, journal):
    h100.set_limit_mw(600_000)
    capper = capper_of(backend)
    cap = capper.current()
    assert cap == PowerCap("current", None, (
        GpuCap(0, H100, h100.uuid, None, 600.0, 600.0, 700.0, 200.0, 700.0),
        GpuCap(1, V100, v100.uuid, None, 300.0, 300.0, 300.0, 150.0, 300.0)))
    assert not cap.changed and capper.pending == [] and journal.entries() == []
    assert str(cap) == f"cap current (GPU 0 {H100}: enforced 600 W; GPU 1 {V100}: enforced 300 W)"


def test_a_cap_reads_its_first_gpu_and_prints_every_gpu(backend, h100):
    h100.set_limit_mw(650_000)
    with capper_of(backend) as capper:
        cap = capper.apply(parse_cap("250.5"))
        assert (cap.requested_w, cap.enforced_w, cap.previous_w, cap.gpu_name) == (250.5, 250.5, 650.0, H100)
        assert cap.changed
        text = f"cap 250.5W (GPU 0 {H100}: requested 250.5 W, enforced 250.5 W; GPU 1 {V100}: requested 250.5 W, enforced 250.5 W)"
        assert str(cap) == text and repr(cap) == f"PowerCap({text})"


def test_a_cap_is_changed_if_any_gpu_enforces_another_limit_than_before(backend, v100):
    v100.set_limit_mw(200_000)
    with capper_of(backend) as capper:
        cap = capper.apply(parse_cap("200"))      # the H100 changes, the V100 does not
        assert [g.enforced_w != g.previous_w for g in cap.gpus] == [True, False] and cap.changed
    with capper_of(backend, v100) as capper:
        assert not capper.apply(parse_cap("200")).changed


@pytest.mark.parametrize(("text", "watts"), [("min", 200.0), ("max", 700.0), ("200", 200.0), ("700", 700.0)])
def test_caps_at_the_ends_of_the_allowed_range_are_applied(backend, h100, text, watts):
    h100.set_limit_mw(450_000)
    with capper_of(backend, h100) as capper:
        assert capper.apply(parse_cap(text)).enforced_w == watts
        assert limits_w(backend)[0] == watts
    assert limits_w(backend)[0] == 450.0


@pytest.mark.parametrize(("text", "label", "watts"), [("199.999", "199.999W", "199.999"), ("700.001", "700.001W", "700.001")])
def test_a_cap_outside_the_range_of_any_gpu_changes_no_gpu_and_names_the_range(backend, h100, journal, text, label, watts):
    capper = capper_of(backend, h100)
    with pytest.raises(CapOutOfRange) as caught:
        capper.apply(parse_cap(text))
    assert str(caught.value) == f"cap {label} = {watts} W is outside the allowed range 200-700 W of {GPU0}"
    assert limits_w(backend)[0] == 700.0 and journal.entries() == [] and lock_is_free(backend, h100)


def test_a_cap_one_gpu_cannot_take_leaves_the_other_gpus_untouched(backend, h100, v100, journal):
    capper = capper_of(backend)
    with pytest.raises(CapOutOfRange, match=re.escape(f"cap 350W = 350 W is outside the allowed range 150-300 W of {GPU1}")):
        capper.apply(parse_cap("350"))
    assert limits_w(backend) == [700.0, 300.0] and journal.entries() == [] and capper.pending == []
    assert lock_is_free(backend, h100) and lock_is_free(backend, v100)


# -- a cap someone left ------------------------------------------------------------------------------

def test_a_cap_a_dead_run_left_is_taken_over_its_original_comes_back_and_the_user_is_told(backend, h100, journal):
    plant_dead_runs_entry(journal, h100, 550_000, 250_000)
    with capper_of(backend, h100) as capper:
        cap = capper.apply(parse_cap("300"))
        assert (cap.previous_w, cap.enforced_w) == (550.0, 300.0)
        [entry] = journal.entries()
        assert (entry.saved, entry.applied, entry.pid) == (550_000, 300_000, os.getpid())
        assert capper.notices == [
            f"{GPU0} was left at 250 W by pid {DEAD_PID} (gone, its restore never happened); this test took over "
            f"its journal entry and put back the original 550 W afterwards"]
    assert limits_w(backend)[0] == 550.0 and journal.entries() == []


def test_a_cap_left_by_a_running_process_is_said_to_be_still_running(backend, h100, journal, monkeypatch):
    monkeypatch.setattr(JournalEntry, "owner_runs", lambda self: True)
    plant_dead_runs_entry(journal, h100, 550_000, 250_000, pid=4321)
    with capper_of(backend, h100) as capper:
        capper.apply(parse_cap("300"))
        assert capper.notices[0].startswith(f"{GPU0} was left at 250 W by pid 4321 (still running, its restore")


def test_a_cap_this_process_left_is_taken_back_without_a_notice(backend, h100, journal):
    plant_dead_runs_entry(journal, h100, 550_000, 250_000, pid=os.getpid())
    with capper_of(backend, h100) as capper:
        assert capper.apply(parse_cap("300")).previous_w == 550.0
        assert capper.notices == []
    assert limits_w(backend)[0] == 550.0


def test_a_cap_equal_to_what_a_dead_run_left_is_still_undone_to_the_original(backend, h100, journal, monkeypatch):
    plant_dead_runs_entry(journal, h100, 550_000, 250_000)
    backend.nvml.simArmFaults("limit_clamped")      # what the GPU enforces is read, not set
    set_calls = counting(monkeypatch, h100, "set_limit_mw")
    with capper_of(backend, h100) as capper:
        cap = capper.apply(parse_cap("250"))
        assert cap.gpus[0] == GpuCap(0, H100, h100.uuid, 250.0, 250.0, 550.0, 700.0, 200.0, 700.0)
        assert set_calls == [] and capper.pending == [h100]
        assert [(e.saved, e.pid) for e in journal.entries()] == [(550_000, os.getpid())]
    assert set_calls == [(550_000,)]
    assert limits_w(backend)[0] == 550.0 and journal.entries() == []


# -- what the GPU enforces -------------------------------------------------------------------------

def test_a_limit_enforced_in_steps_is_recorded_and_noted(backend, h100):
    backend.nvml.simArmFaults("limit_rounded")
    with capper_of(backend, h100) as capper:
        cap = capper.apply(parse_cap("333"))
        assert (cap.requested_w, cap.enforced_w, cap.previous_w) == (333.0, 325.0, 700.0)
        assert capper.notices == [f"{GPU0} enforces 325 W after a request for 333 W; results record both"]


@pytest.mark.parametrize(("text", "noted"), [("326", False), ("326.001", True)])
def test_an_enforced_limit_within_a_watt_of_the_request_is_not_noted(backend, h100, text, noted):
    backend.nvml.simArmFaults("limit_rounded")
    with capper_of(backend, h100) as capper:
        assert capper.apply(parse_cap(text)).enforced_w == 325.0
        assert bool(capper.notices) is noted


def test_a_limit_that_does_not_take_effect_is_an_error_and_nothing_stays_journaled(backend, h100, journal):
    backend.nvml.simArmFaults("set_ignored")
    with pytest.raises(LimitChangeError) as caught:
        capper_of(backend, h100).apply(parse_cap("300"))
    assert str(caught.value) == (f"{GPU0} still has its limit at 700 W after a request for 300 W: the limit did not "
                                 f"take effect (another power manager, or a driver that ignores it)")
    assert journal.entries() == [] and lock_is_free(backend, h100)


@pytest.mark.parametrize(("off_mw", "fails"), [(1000, False), (1001, True)])
def test_a_limit_that_reads_back_within_a_watt_of_the_request_counts_as_set(backend, h100, monkeypatch, off_mw, fails):
    real = h100.set_limit_mw
    monkeypatch.setattr(h100, "set_limit_mw", lambda mw: real(mw + off_mw if mw == 300_000 else mw))
    capper = capper_of(backend, h100)
    if fails:
        with pytest.raises(LimitChangeError, match="still has its limit at 301.001 W after a request for 300 W"):
            capper.apply(parse_cap("300"))
    else:
        assert capper.apply(parse_cap("300")).enforced_w == 301.0
        capper.restore()
    assert limits_w(backend)[0] == 700.0


# -- failures while capping -------------------------------------------------------------------------

def test_no_permission_to_set_a_limit_says_how_to_get_it_and_changes_nothing(backend, h100, journal):
    backend.nvml.simArmFaults("no_permission")
    with pytest.raises(CapPermissionError) as caught:
        capper_of(backend, h100).apply(parse_cap("300"))
    text = str(caught.value)
    assert text.startswith(f"not allowed to set the power limit of {GPU0}: NVML needs root (CAP_SYS_ADMIN)")
    assert "`sudo -E pytest ...`" in text and "drop --gpu-caps to measure at the current limit" in text
    assert caught.value.__cause__ is None and caught.value.__suppress_context__
    assert limits_w(backend)[0] == 700.0 and journal.entries() == [] and lock_is_free(backend, h100)


@pytest.mark.sim_gpus("MI300X")
def test_no_permission_to_set_an_amd_gpus_limit_names_amd_smi_and_changes_nothing(backend, journal):
    mi300x = backend.all_gpus[0]
    backend.nvml.simArmFaults("no_permission")
    with pytest.raises(CapPermissionError) as caught:
        capper_of(backend, mi300x).apply(parse_cap("300"))
    assert str(caught.value).startswith(
        "not allowed to set the power limit of GPU 0 (AMD Instinct MI300X (simulated)): AMD SMI needs root for that "
        "(it writes the amdgpu driver's power1_cap). Run pytest with the right privileges")
    backend.nvml.simArmFaults("")
    assert mi300x.current_limit_mw() == 750_000 and journal.entries() == [] and lock_is_free(backend, mi300x)


@pytest.mark.sim_gpus("MI300X")
def test_an_amd_gpu_is_capped_journaled_with_its_vendor_and_restored_exactly(backend, journal):
    mi300x = backend.all_gpus[0]
    mi300x.set_limit_mw(600_000)
    with capper_of(backend, mi300x) as capper:
        cap = capper.apply(parse_cap("60%"))
        assert (cap.requested_w, cap.enforced_w, cap.previous_w) == (450.0, 450.0, 600.0)
        [entry] = journal.entries()
        assert (entry.vendor, entry.saved, entry.applied) == ("amd", 600_000, 450_000)
        assert entry.fix_command(mi300x).startswith("rm ")          # simulated: its state file
    assert mi300x.current_limit_mw() == 600_000 and journal.entries() == []


def test_a_set_that_keeps_failing_is_an_error_with_the_watts_asked(backend, h100, journal):
    backend.nvml.simArmFaults("set_error")
    with pytest.raises(LimitChangeError) as caught:
        capper_of(backend, h100).apply(parse_cap("300.5"))
    assert str(caught.value) == f"setting the limit of {GPU0} to 300.5 W failed: NVML: Unknown Error"
    assert caught.value.__suppress_context__
    assert journal.entries() == []


def test_a_transient_set_error_is_retried(backend, h100):
    backend.nvml.simArmFaults("set_error=1-3")
    with capper_of(backend, h100) as capper:
        assert capper.apply(parse_cap("300")).enforced_w == 300.0
    assert limits_w(backend)[0] == 700.0


def test_a_gpu_lost_while_setting_its_limit_is_named(backend, h100, monkeypatch):
    counting(monkeypatch, h100, "set_limit_mw", raising(h100.lost_error))
    with pytest.raises(GpuLostError) as caught:
        capper_of(backend, h100).apply(parse_cap("300"))
    assert str(caught.value) == (f"{GPU0} is lost (NVML: GPU is lost) while setting its limit: it fell off the bus "
                                 f"or its driver reset")
    assert caught.value.__suppress_context__


def test_limits_that_cannot_be_read_are_an_error_naming_the_gpu(backend, h100, journal):
    backend.nvml.simArmFaults("read_error")
    with pytest.raises(LimitChangeError) as caught:
        capper_of(backend, h100).apply(parse_cap("300"))
    assert str(caught.value) == f"reading the power limits of {GPU0} failed: NVML: Unknown Error"
    assert caught.value.__suppress_context__
    backend.nvml.simArmFaults("")
    assert journal.entries() == [] and lock_is_free(backend, h100)


def test_a_transient_read_error_is_retried(backend, h100):
    backend.nvml.simArmFaults("read_error=1-3")
    with capper_of(backend, h100) as capper:
        assert capper.apply(parse_cap("300")).previous_w == 700.0


def test_a_gpu_lost_while_reading_its_limits_is_named(backend, h100, monkeypatch):
    monkeypatch.setattr(h100, "limits", raising(h100.lost_error))
    with pytest.raises(GpuLostError) as caught:
        capper_of(backend, h100).apply(parse_cap("300"))
    assert str(caught.value) == f"{GPU0} is lost (NVML: GPU is lost): it fell off the bus or its driver reset"
    assert caught.value.__suppress_context__


def test_a_failed_cap_puts_back_the_gpus_already_capped(backend, h100, v100, journal):
    backend.nvml.simArmFaults("no_permission@1")
    capper = capper_of(backend)
    with pytest.raises(CapPermissionError, match=re.escape(f"not allowed to set the power limit of {GPU1}")):
        capper.apply(parse_cap("200"))
    assert limits_w(backend) == [700.0, 300.0] and journal.entries() == [] and capper.pending == []


def test_a_failed_cap_whose_undoing_fails_too_says_the_cause_first(backend, h100, v100, journal):
    backend.nvml.simArmFaults("no_permission@1,set_error@0=2")
    with pytest.raises(LimitRestoreError) as caught:
        capper_of(backend).apply(parse_cap("200"))
    assert str(caught.value).startswith(f"not allowed to set the power limit of {GPU1}: NVML needs root")
    assert str(caught.value).endswith(f"; putting the GPU back failed too: the power limit of {GPU0} could not be set back to 700 W "
                                      f"after 4 attempts (NVML: Unknown Error)")
    assert caught.value.__suppress_context__
    assert [e.gpu_uuid for e in journal.entries()] == [h100.uuid]     # kept for `gpuenergy restore`


def test_an_interrupt_while_capping_whose_undoing_fails_raises_the_restore_error(backend, h100, v100, monkeypatch):
    backend.nvml.simArmFaults("set_error@0=2")
    counting(monkeypatch, v100, "set_limit_mw", raising(KeyboardInterrupt))
    with pytest.raises(LimitRestoreError) as caught:
        capper_of(backend).apply(parse_cap("200"))
    assert str(caught.value) == f"the power limit of {GPU0} could not be set back to 700 W after 4 attempts (NVML: Unknown Error)"


def test_an_interrupt_while_capping_is_raised_once_the_gpus_are_back(backend, h100, v100, monkeypatch):
    counting(monkeypatch, v100, "set_limit_mw", raising(KeyboardInterrupt))
    with pytest.raises(KeyboardInterrupt):
        capper_of(backend).apply(parse_cap("200"))
    assert limits_w(backend) == [700.0, 300.0]


def test_restoring_after_a_failure_lets_other_restore_errors_through():
    class Broken:
        def restore(self):
            raise OSError("disk gone")

    with pytest.raises(OSError, match="disk gone"):
        restore_after_failure(Broken(), ValueError("cause"))


# -- failures while restoring ------------------------------------------------------------------------

def test_a_restore_that_keeps_failing_names_every_gpu_keeps_their_entries_and_frees_the_locks(backend, h100, v100, journal):
    capper = capper_of(backend)
    capper.apply(parse_cap("200"))
    backend.nvml.simArmFaults("set_error")
    with pytest.raises(LimitRestoreError) as caught:
        capper.restore()
    assert str(caught.value) == (f"the power limit of {GPU1} could not be set back to 300 W after 4 attempts (NVML: Unknown "
                                 f"Error); the power limit of {GPU0} could not be set back to 700 W after 4 attempts "
                                 f"(NVML: Unknown Error)")
    assert limits_w(backend) == [200.0, 200.0] and len(journal.entries()) == 2
    assert capper.pending == [] and lock_is_free(backend, h100) and lock_is_free(backend, v100)


def test_a_restore_is_retried_with_a_growing_pause(backend, h100, monkeypatch):
    capper = capper_of(backend, h100)
    capper.apply(parse_cap("300"))
    backend.nvml.simArmFaults("set_error=1-3")
    pauses: list[float] = []
    monkeypatch.setattr(knob.realtime, "sleep", pauses.append)
    capper.restore()
    assert pauses == [0.01, 0.02, 0.03] and limits_w(backend)[0] == 700.0


def test_a_restore_that_does_not_take_says_what_the_gpu_reads(backend, h100, journal):
    capper = capper_of(backend, h100)
    capper.apply(parse_cap("300"))
    backend.nvml.simArmFaults("set_ignored")
    with pytest.raises(LimitRestoreError) as caught:
        capper.restore()
    assert str(caught.value) == (f"the power limit of {GPU0} could not be set back to 700 W after 4 attempts (it reads "
                                 f"300 W after the restore)")
    assert len(journal.entries()) == 1


def test_a_gpu_lost_during_the_restore_is_named_at_once(backend, h100, journal, monkeypatch):
    capper = capper_of(backend, h100)
    capper.apply(parse_cap("300.5"))
    calls = counting(monkeypatch, h100, "set_limit_mw", raising(h100.lost_error))
    with pytest.raises(LimitRestoreError) as caught:
        capper.restore()
    assert str(caught.value) == f"{GPU0} is lost: its power limit could not be set back to 700 W"
    assert len(calls) == 1 and len(journal.entries()) == 1


def test_a_gpu_someone_already_set_back_is_not_set_again(backend, h100, journal, monkeypatch):
    capper = capper_of(backend, h100)
    capper.apply(parse_cap("300"))
    h100.set_limit_mw(700_000)
    calls = counting(monkeypatch, h100, "set_limit_mw")
    capper.restore()
    assert calls == [] and journal.entries() == []


def test_a_restored_limit_is_the_one_set_whatever_another_manager_enforces(backend, h100, journal):
    capper = capper_of(backend, h100)
    capper.apply(parse_cap("300"))
    backend.nvml.simArmFaults("limit_clamped")
    capper.restore()
    assert (h100.current_limit_mw(), h100.enforced_limit_mw()) == (700_000, 490_000) and journal.entries() == []


def test_a_signal_during_a_restore_waits_and_is_announced_with_the_gpus_restored(backend, h100, v100, monkeypatch):
    said: list[str] = []
    signals.announce_with(said.append)
    monkeypatch.setattr(signals, "_stopping", True)          # the held signal is then dropped, not raised
    try:
        capper = capper_of(backend)
        capper.apply(parse_cap("200"))
        counting(monkeypatch, v100, "set_limit_mw", lambda mw: signal.raise_signal(signal.SIGINT))
        with sigint_as_a_terminal_gives():     # not ignored, as a background job inherits it
            capper.restore()
    finally:
        signals.announce_with(None)
    assert said == [f"gpuenergy: SIGINT received while restoring the power limit of {GPU0}, {GPU1}: finishing that "
                    f"first, then stopping"]
    assert limits_w(backend) == [700.0, 300.0]


# -- the power limit as a knob: the fix it names, what it reads back from a journal ------------------

def test_the_fix_a_power_limit_names_is_each_vendors_own_command_in_watts():
    assert POWER_LIMIT.driver_command("GPU-1234", "nvidia", 250_000) == "nvidia-smi -i GPU-1234 -pl 250"
    assert POWER_LIMIT.driver_command("GPU-abcd", "amd", 450_500) == "amd-smi set --gpu abcd --power-cap 450.5"


def test_a_journaled_limit_is_a_whole_number_of_milliwatts_from_1():
    assert POWER_LIMIT.decode(1, "saved") == 1 and POWER_LIMIT.decode(700_000, "saved") == 700_000
    for damaged in (0, -5, 250.5, "250000", True, 10**9):
        with pytest.raises(ValueError, match=r"^saved must be a whole number from 1 to 100000000, got "):
            POWER_LIMIT.decode(damaged, "saved")


def test_the_power_journal_reads_what_an_earlier_version_wrote(backend, journal):
    from pytest_gpuenergy.fileio import atomic_write_json, state_folder

    gpu = backend.all_gpus[0]
    state_folder(journal.folder)
    atomic_write_json(journal.folder / f"{gpu.uuid}.json", {
        "gpu_uuid": gpu.uuid, "gpu_index": 0, "gpu_name": gpu.name, "previous_limit_mw": 550_000,
        "applied_limit_mw": 250_000, "pid": DEAD_PID, "process_start": "1", "host": "elsewhere",
        "written_at": 5.0, "format": "gpuenergy-limit-journal"})
    [entry] = journal.entries()
    assert (entry.saved, entry.applied, entry.vendor) == (550_000, 250_000, "nvidia")


def test_a_power_limit_is_refused_outside_the_gpus_range_and_accepted_at_its_ends(h100):
    """What a repair checks before it puts a journaled limit back (the simulated H100: 200-700 W)."""
    assert POWER_LIMIT.refusal(h100, 200_000) is None and POWER_LIMIT.refusal(h100, 700_000) is None
    assert POWER_LIMIT.refusal(h100, 199_999) == "199.999 W is outside the GPU's range 200-700 W"
    assert POWER_LIMIT.refusal(h100, 700_001) == "700.001 W is outside the GPU's range 200-700 W"


def test_a_power_limit_entry_is_described_with_its_gpu_cap_owner_and_previous_limit():
    entry = JournalEntry(POWER_LIMIT, "GPU-abc", 3, "Some GPU", "nvidia", 550_500, 250_000, 42, "77", "node7", 1.0)
    assert POWER_LIMIT.describe(entry) == ("GPU 3 (Some GPU, GPU-abc): capped at 250 W by pid 42 on node7, "
                                           "previous limit 550.5 W")
