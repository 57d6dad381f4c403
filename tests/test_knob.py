"""Tests of ``pytest_gpuenergy/gpu/knob.py``: the one knob mechanism, through a third knob.

The power limit and the SM clock lock plug into one mechanism (locks, journal before the change, exact
restore with retries and signals held, repair of what a dead run left). A third knob that implements
only the ``Knob`` protocol (a fan speed, kept here in a dict per GPU) must get all of it without a line
of its own: these tests drive it on the simulated GPUs and assert the journal's files, the settings
put back and the messages a user reads.
"""

from __future__ import annotations

import json
import os
import signal
from typing import Any

import pytest

from pytest_gpuenergy.errors import DeviceError, GpuLostError, LimitChangeError, LimitRestoreError
from pytest_gpuenergy.fileio import atomic_write_json, state_folder
from pytest_gpuenergy.gpu import knob as knob_module
from pytest_gpuenergy.gpu import signals
from pytest_gpuenergy.gpu.device import Backend, Gpu
from pytest_gpuenergy.gpu.journal import Journal, JournalEntry, journal_for, whole_number
from pytest_gpuenergy.gpu.knob import UNREADABLE, Knob, Setter, Unreadable

from helpers import DEAD_PID, H100, V100, lock_is_free, sigint_as_a_terminal_gives

pytestmark = pytest.mark.sim_gpus("H100,V100")

GPU0 = f"GPU 0 ({H100})"
GPU1 = f"GPU 1 ({V100})"


class FanKnob:
    """A fan's speed in %: the smallest knob there is. ``failing``: calls that raise what a library would."""

    name = "fan-speed"
    what = "fan speed"

    def __init__(self) -> None:
        self.speed_pct: dict[str, int] = {}
        self.readable = True
        self.failing: dict[str, BaseException] = {}      # "put" or "read" -> the error it raises
        self.journal_seen_at_put: list[list[int]] = []     # what the journal held at each put
        self.journal: Journal[int] | None = None

    def read(self, gpu: Gpu) -> int | Unreadable:
        if "read" in self.failing:
            raise self.failing["read"]
        return self.speed_pct.get(gpu.uuid, 30) if self.readable else UNREADABLE

    def put(self, gpu: Gpu, setting: int) -> None:
        if "put" in self.failing:
            raise self.failing["put"]
        if self.journal is not None:
            self.journal_seen_at_put.append([e.applied for e in self.journal.entries()])
        self.speed_pct[gpu.uuid] = setting

    def refusal(self, gpu: Gpu, setting: int) -> str | None:
        return None if setting <= 100 else f"{setting} % is more than a fan turns"

    def text(self, setting: int) -> str:
        return f"{setting} %"

    def describe(self, entry: JournalEntry[int]) -> str:
        return f"GPU {entry.gpu_index}: fan at {entry.applied} % by pid {entry.pid}, before {entry.saved} %"

    def left_text(self, entry: JournalEntry[int]) -> str:
        return f"GPU {entry.gpu_index} with its fan at {entry.applied} %"

    def driver_command(self, gpu_uuid: str, vendor: str, setting: int) -> str:
        return f"fanctl --gpu {gpu_uuid} --speed {setting}"

    def encode(self, setting: int) -> int:
        return setting

    def decode(self, value: Any, field: str) -> int:
        return whole_number(value, field, 0, 1000)


class FanSetter(Setter[int]):
    """All a third knob's own setter needs: ``apply``, built on ``changing`` and ``journaled``."""

    def apply(self, speed_pct: int) -> None:
        with self.changing("a fan speed is already applied: restore it first"):
            for gpu in self.gpus:
                if speed_pct < 0:
                    raise LimitChangeError(f"no fan turns at {speed_pct} %")
                self.journaled(gpu, self.knob.read(gpu), speed_pct)  # type: ignore[arg-type]
                self.knob.put(gpu, speed_pct)


@pytest.fixture
def fan() -> FanKnob:
    return FanKnob()


@pytest.fixture
def journal(backend: Backend, fan: FanKnob) -> Journal[int]:
    fan.journal = journal_for(backend, fan)
    return fan.journal


def setter_of(backend: Backend, fan: FanKnob, journal: Journal[int], *gpus: Gpu) -> FanSetter:
    return FanSetter(fan, gpus or backend.all_gpus, journal, backend.lock_folder)


def test_the_fan_implements_the_protocol(fan):
    typed: Knob[int] = fan       # what mypy checks for the two real knobs; here the attributes are there
    assert all(callable(getattr(typed, name)) for name in
               ("read", "put", "refusal", "text", "describe", "left_text", "driver_command", "encode", "decode"))


def test_a_third_knob_is_journaled_before_it_changes_and_comes_back_exactly(backend, h100, v100, fan, journal):
    fan.speed_pct = {h100.uuid: 40, v100.uuid: 55}
    setter = setter_of(backend, fan, journal)
    setter.apply(90)
    assert fan.journal_seen_at_put == [[90], [90, 90]]          # each GPU's entry written before its change
    assert fan.speed_pct == {h100.uuid: 90, v100.uuid: 90} and setter.pending == [h100, v100]
    assert journal.folder == backend.state_dir / "journal" / "fan-speed"
    on_disk = json.loads((journal.folder / f"{h100.uuid}.json").read_text())
    assert {k: on_disk[k] for k in ("format", "knob", "vendor", "gpu_uuid", "saved", "applied", "pid")} == {
        "format": "gpuenergy-journal", "knob": "fan-speed", "vendor": "nvidia", "gpu_uuid": h100.uuid,
        "saved": 40, "applied": 90, "pid": os.getpid()}
    assert not lock_is_free(backend, h100)
    setter.restore()
    assert fan.speed_pct == {h100.uuid: 40, v100.uuid: 55}
    assert journal.entries() == [] and setter.pending == [] and lock_is_free(backend, h100)


def test_a_second_setting_before_the_restore_is_refused(backend, fan, journal):
    with setter_of(backend, fan, journal) as setter:
        setter.apply(90)
        with pytest.raises(LimitChangeError, match="^a fan speed is already applied: restore it first$"):
            setter.apply(80)
    assert journal.entries() == []


def test_a_failed_apply_puts_back_what_it_changed(backend, h100, v100, fan, journal):
    fan.speed_pct = {h100.uuid: 40}
    setter = setter_of(backend, fan, journal, h100)
    with pytest.raises(LimitChangeError, match="no fan turns at -5 %"):
        setter.apply(-5)
    assert setter.pending == [] and lock_is_free(backend, h100)


def test_a_restore_that_keeps_failing_names_the_knob_the_gpu_and_keeps_the_entry(backend, h100, fan, journal, monkeypatch):
    setter = setter_of(backend, fan, journal, h100)
    setter.apply(90)
    fan.failing["put"] = DeviceError("FAN: stuck")
    pauses: list[float] = []
    monkeypatch.setattr(knob_module.realtime, "sleep", pauses.append)
    with pytest.raises(LimitRestoreError) as caught:
        setter.restore()
    assert str(caught.value) == f"the fan speed of {GPU0} could not be set back to 30 % after 4 attempts (FAN: stuck)"
    assert pauses == [0.01, 0.02, 0.03]
    assert [e.applied for e in journal.entries()] == [90] and lock_is_free(backend, h100)


def test_a_lost_gpu_stops_the_restore_at_once_and_says_which_setting_stays(backend, h100, fan, journal):
    setter = setter_of(backend, fan, journal, h100)
    setter.apply(90)
    fan.failing["put"] = h100.lost_error()
    with pytest.raises(LimitRestoreError) as caught:
        setter.restore()
    assert str(caught.value) == f"{GPU0} is lost: its fan speed could not be set back to 30 %"


def test_a_restore_that_does_not_read_back_says_what_it_reads(backend, h100, fan, journal, monkeypatch):
    setter = setter_of(backend, fan, journal, h100)
    setter.apply(90)
    monkeypatch.setattr(fan, "put", lambda gpu, setting: None)       # a driver that ignores it
    with pytest.raises(LimitRestoreError, match=r"could not be set back to 30 % after 4 attempts \(it reads 90 % after the restore\)"):
        setter.restore()


def test_a_knob_that_cannot_be_read_back_is_trusted_once_put(backend, h100, fan, journal):
    setter = setter_of(backend, fan, journal, h100)
    setter.apply(90)
    fan.readable = False
    setter.restore()
    assert fan.speed_pct[h100.uuid] == 30 and journal.entries() == []


def test_a_signal_during_a_third_knobs_restore_waits_and_names_the_knob(backend, fan, journal, monkeypatch):
    said: list[str] = []
    monkeypatch.setattr(signals, "_announce", said.append)
    monkeypatch.setattr(signals, "_stopping", True)          # the held signal is then dropped, not raised
    setter = setter_of(backend, fan, journal)
    setter.apply(90)
    real_put = fan.put
    monkeypatch.setattr(fan, "put", lambda gpu, setting: (signal.raise_signal(signal.SIGINT), real_put(gpu, setting)))
    with sigint_as_a_terminal_gives():         # not ignored, as a background job inherits it
        setter.restore()
    assert said == [f"gpuenergy: SIGINT received while restoring the fan speed of {GPU0}, {GPU1}: finishing that "
                    f"first, then stopping"]
    assert set(fan.speed_pct.values()) == {30}


# -- what a dead run left --------------------------------------------------------------------------

def plant(journal: Journal[int], fan: FanKnob, gpu: Gpu, saved: int, applied: int) -> JournalEntry[int]:
    fan.speed_pct[gpu.uuid] = applied
    entry = JournalEntry(fan, gpu.uuid, gpu.index, gpu.name, "nvidia", saved, applied, DEAD_PID, "gone", "elsewhere", 1.0)
    state_folder(journal.folder)
    atomic_write_json(journal.folder / f"{gpu.uuid}.json", entry.to_json())
    return entry


def test_a_dead_runs_setting_of_a_third_knob_is_repaired_by_the_journal(backend, h100, fan, journal):
    entry = plant(journal, fan, h100, 40, 90)
    assert journal.entries() == [entry]
    [outcome] = journal.repair(backend)
    assert (outcome.entry, outcome.action, outcome.message) == (entry, "restored", f"{entry.describe()}: restored to 40 %")
    assert fan.speed_pct[h100.uuid] == 40 and journal.entries() == []


@pytest.mark.parametrize(("now", "action", "ends"), [
    (40, "already-restored", "already back to 40 %"),
    (70, "changed-since", "now 70 %, set by someone else since; left as it is"),
])
def test_a_repair_of_a_third_knob_leaves_a_setting_already_back_or_changed_since(backend, h100, fan, journal, now, action, ends):
    entry = plant(journal, fan, h100, 40, 90)
    fan.speed_pct[h100.uuid] = now
    [outcome] = journal.repair(backend)
    assert (outcome.action, outcome.message) == (action, f"{entry.describe()}: {ends}")
    assert fan.speed_pct[h100.uuid] == now and journal.entries() == []


def test_a_repair_the_knob_refuses_keeps_the_entry(backend, h100, fan, journal):
    entry = plant(journal, fan, h100, 120, 90)
    [outcome] = journal.repair(backend)
    assert (outcome.action, outcome.message) == ("failed", f"{entry.describe()}: 120 % is more than a fan turns; "
                                                           f"entry kept, check it")
    assert journal.entries() == [entry] and fan.speed_pct[h100.uuid] == 90


def test_a_repair_the_device_refuses_keeps_the_entry_and_says_why(backend, h100, fan, journal):
    entry = plant(journal, fan, h100, 40, 90)
    fan.failing["put"] = DeviceError("FAN: busy")
    [outcome] = journal.repair(backend)
    assert (outcome.action, outcome.message) == ("failed", f"{entry.describe()}: could not restore it (FAN: busy)")
    assert journal.entries() == [entry]


def test_a_repair_whose_setting_does_not_read_back_keeps_the_entry(backend, h100, fan, journal, monkeypatch):
    entry = plant(journal, fan, h100, 40, 90)
    monkeypatch.setattr(fan, "put", lambda gpu, setting: None)
    [outcome] = journal.repair(backend)
    assert (outcome.action, outcome.message) == ("failed", f"{entry.describe()}: set back, but it reads 90 %")
    assert journal.entries() == [entry]


def test_a_third_knobs_entry_names_the_vendors_command_and_a_simulated_gpus_state_file(h100, fan):
    entry = JournalEntry(fan, h100.uuid, 0, H100, "nvidia", 40, 90, DEAD_PID, "gone", "elsewhere", 1.0)
    assert entry.fix_command(h100) == f"rm {h100.simulated_state_file} (the simulated GPU restarts at its defaults)"


def test_a_lost_gpu_during_a_repair_is_a_failed_repair(backend, h100, fan, journal):
    plant(journal, fan, h100, 40, 90)
    fan.failing["read"] = GpuLostError(f"{GPU0} is lost")
    [outcome] = journal.repair(backend)
    assert outcome.action == "failed" and outcome.message.endswith(f"could not restore it ({GPU0} is lost)")


@pytest.mark.parametrize("kind", ["gpuenergy-limit-journal", None, "gpuenergy-journal-2"])
def test_a_third_knob_without_an_earlier_format_refuses_any_other_format(h100, fan, journal, kind):
    from pytest_gpuenergy.errors import JournalCorrupt

    entry = JournalEntry(fan, h100.uuid, 0, H100, "nvidia", 40, 90, DEAD_PID, "gone", "elsewhere", 1.0)
    state_folder(journal.folder)
    atomic_write_json(journal.folder / f"{h100.uuid}.json", entry.to_json() | {"format": kind})
    with pytest.raises(JournalCorrupt, match=r"is unreadable \(not a fan-speed journal entry\); check the GPU's fan speed"):
        journal.entry(h100.uuid)
