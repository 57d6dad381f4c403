"""The simulated AMD SMI: AMD's calls, units and errors over the machine it shares with the simulated NVML."""

from __future__ import annotations

import ctypes
import os

import pytest

from pytest_gpuenergy.sim.amdsmi import AmdSmiLibraryException, AmdSmiParameterException, SimulatedAmdSmi
from pytest_gpuenergy.sim.models import GPU_MODELS
from pytest_gpuenergy.sim.nvml import SimulatedNvml
from pytest_gpuenergy.sim.roofline import GpuWork

STEP = GpuWork(flops_tf32=2e12, bytes=4e10, kernels=400)


def open_machine(state_dir, models, faults="", clock="virtual"):
    """A mixed machine as the plugin opens it: the NVML stand-in, and AMD SMI's over the same machine."""
    nvml = SimulatedNvml(state_dir=state_dir, models=models, faults=faults, seed=7, clock=clock, noise_cv=0.0)
    amd = SimulatedAmdSmi(nvml.machine)
    nvml.nvmlInit()
    amd.amdsmi_init()
    return nvml, amd


def energy_j(amd, handle):
    count = amd.amdsmi_get_energy_count(handle)
    return count["energy_accumulator"] * count["counter_resolution"] / 1e6


def code_of(excinfo):
    return excinfo.value.get_error_code()


@pytest.fixture
def mixed(tmp_path):
    nvml, amd = open_machine(tmp_path, ["H100", "MI250X", "MI300X"])
    yield nvml, amd
    amd.amdsmi_shut_down()
    nvml.nvmlShutdown()


def test_each_library_lists_its_own_vendors_gpus_with_their_machine_index(mixed):
    nvml, amd = mixed
    assert nvml.nvmlDeviceGetCount() == 1
    handles = amd.amdsmi_get_processor_handles()
    names = [amd.amdsmi_get_gpu_asic_info(h)["market_name"] for h in handles]
    assert names == ["AMD Instinct MI250X (simulated)"] * 2 + ["AMD Instinct MI300X (simulated)"]  # an MI250X is two GCDs
    assert [amd.simMachineIndex(h) for h in handles] == [1, 2, 3]
    assert nvml.simMachineIndex(nvml.nvmlDeviceGetHandleByIndex(0)) == 0
    uuids = [amd.amdsmi_get_gpu_device_uuid(h) for h in handles]
    assert len(set(uuids)) == 3 and not any(u.startswith("GPU-") for u in uuids)
    info = amd.amdsmi_get_gpu_asic_info(handles[2])
    assert (info["target_graphics_version"], info["device_id"], info["num_compute_units"]) == ("gfx942", "0x74a1", 304)
    assert amd.amdsmi_get_gpu_compute_partition(handles[2]) == "SPX"
    with pytest.raises(AmdSmiLibraryException) as excinfo:     # the MI200s have no partitions
        amd.amdsmi_get_gpu_compute_partition(handles[0])
    assert code_of(excinfo) == 2
    assert len(nvml.simTimelines()) == 4 and amd.simTimelines()[3] is nvml.simTimelines()[3]   # one machine
    with pytest.raises(AmdSmiLibraryException) as excinfo:      # NVML's handle is no AMD device
        amd.amdsmi_get_power_info(nvml.nvmlDeviceGetHandleByIndex(0))
    assert code_of(excinfo) == amd.AMDSMI_STATUS_INVAL == 1
    with pytest.raises(AmdSmiParameterException):
        amd.amdsmi_get_power_info(0)


def test_power_caps_are_micro_watts_in_whole_watts_and_outlive_the_process(tmp_path):
    nvml, amd = open_machine(tmp_path, ["MI300X"])
    assert nvml.nvmlDeviceGetCount() == 0
    (mi300x,) = amd.amdsmi_get_processor_handles()
    assert amd.amdsmi_get_power_cap_info(mi300x) == {
        "power_cap": 750_000_000, "default_power_cap": 750_000_000, "dpm_cap": 2100,
        "min_power_cap": 200_000_000, "max_power_cap": 750_000_000,
    }
    amd.amdsmi_set_power_cap(mi300x, 0, 450_999_999)            # the driver keeps whole watts
    assert amd.amdsmi_get_power_cap_info(mi300x)["power_cap"] == 450_000_000
    assert amd.amdsmi_get_power_info(mi300x)["power_limit"] == 450
    for sensor, cap in ((0, 199_999_999), (0, 751_000_000), (1, 500_000_000)):
        with pytest.raises(AmdSmiLibraryException) as excinfo:
            amd.amdsmi_set_power_cap(mi300x, sensor, cap)
        assert code_of(excinfo) == 1 and "AMDSMI_STATUS_INVAL" in excinfo.value.get_error_info()
    with pytest.raises(AmdSmiParameterException):
        amd.amdsmi_set_power_cap(mi300x, 0, 450.0e6)
    amd.amdsmi_shut_down()
    nvml.nvmlShutdown()
    later = SimulatedAmdSmi(state_dir=tmp_path, seed=1)          # another process: the cap is still there
    later.amdsmi_init()
    assert later.amdsmi_get_power_cap_info(later.amdsmi_get_processor_handles()[0])["power_cap"] == 450_000_000
    later.amdsmi_shut_down()


def test_the_energy_accumulator_counts_15_3_uj_published_every_millisecond(tmp_path):
    nvml, amd = open_machine(tmp_path, ["MI300X"])
    (h,) = amd.amdsmi_get_processor_handles()
    amd.simSleepUntil(0.5)
    first = amd.amdsmi_get_energy_count(h)
    assert first["counter_resolution"] == ctypes.c_float(15.3).value
    amd.simSleepUntil(2.5)
    again = amd.amdsmi_get_energy_count(h)
    assert again == amd.amdsmi_get_energy_count(h)              # one publication, read twice
    ticks_ms = (again["timestamp"] - first["timestamp"]) / 1e6
    assert abs(ticks_ms - round(ticks_ms)) < 1e-3 and 1999 <= ticks_ms <= 2001   # ns stamps, 1 ms apart
    idle_j = (again["energy_accumulator"] - first["energy_accumulator"]) * again["counter_resolution"] / 1e6
    assert idle_j == pytest.approx(GPU_MODELS["MI300X"].idle_w * ticks_ms / 1000, abs=1e-4)
    amd.simSleepUntil(2.5105)
    moved = (amd.amdsmi_get_energy_count(h)["timestamp"] - again["timestamp"]) / 1e6
    assert round(moved) in (10, 11)
    assert amd.amdsmi_get_power_info(h)["current_socket_power"] == 150
    assert amd.amdsmi_get_power_info(h)["average_socket_power"] == "N/A"     # MI300X reports no average
    amd.amdsmi_shut_down()
    nvml.nvmlShutdown()


def test_a_cap_slows_declared_work_and_the_counter_follows_the_exact_energy(tmp_path):
    nvml, amd = open_machine(tmp_path, ["MI300X"])
    (h,) = amd.amdsmi_get_processor_handles()
    figures = {}
    for cap_w in (750, 300):
        amd.amdsmi_set_power_cap(h, 0, cap_w * 1_000_000)
        start_s, start_j, exact_start_mj = amd.simClock().now(), energy_j(amd, h), amd.simExactEnergyMj(h)
        for _ in range(50):
            nvml.simDeclareWork(STEP)          # the machine's work, whichever library declares it
        amd.simSynchronize()
        amd.simSleepUntil(amd.simClock().now() + 0.002)          # past the next publication
        time_s = amd.simClock().now() - start_s
        counted_j = energy_j(amd, h) - start_j
        exact_j = (amd.simExactEnergyMj(h) - exact_start_mj) / 1000
        assert counted_j == pytest.approx(exact_j, abs=0.002 * GPU_MODELS["MI300X"].max_limit_w)
        figures[cap_w] = time_s, counted_j
    assert figures[300][0] > 1.2 * figures[750][0]               # slower under the lower cap
    assert figures[300][1] / figures[300][0] < 300                # and its power held under it
    assert figures[750][1] / figures[750][0] > 300
    amd.amdsmi_shut_down()
    nvml.nvmlShutdown()


def test_an_mi250x_reports_power_and_takes_caps_on_its_first_die_only(mixed):
    nvml, amd = mixed
    first, second, _ = amd.amdsmi_get_processor_handles()
    assert amd.amdsmi_get_power_cap_info(first)["power_cap"] == 560_000_000        # the whole board
    assert amd.amdsmi_get_power_cap_info(second)["power_cap"] == 0
    with pytest.raises(AmdSmiLibraryException) as excinfo:
        amd.amdsmi_set_power_cap(second, 0, 400_000_000)
    assert code_of(excinfo) == 1
    amd.simUseDevices([amd.simMachineIndex(second)])             # work on the second die only
    before = energy_j(amd, first), amd.simExactEnergyMj(first), amd.simExactEnergyMj(second), amd.simClock().now()
    session_before_mj = amd.simWallEnergyMj(first)
    for _ in range(20):
        amd.simDeclareWork(STEP)
    amd.simSynchronize()
    amd.simSleepUntil(amd.simClock().now() + 0.002)
    assert amd.amdsmi_get_energy_count(second)["energy_accumulator"] == 0
    second_dynamic_mj = amd.simExactEnergyMj(second) - before[2] - 45 * (amd.simClock().now() - before[3]) * 1000
    assert amd.simWallEnergyMj(first) - session_before_mj > 0.99 * second_dynamic_mj > 0   # the session's total too
    assert amd.simWallEnergyMj(second) == 0
    assert amd.amdsmi_get_power_info(second)["socket_power"] == 0
    board_j = energy_j(amd, first) - before[0]
    own_j = (amd.simExactEnergyMj(first) - before[1]) / 1000
    other_j = (amd.simExactEnergyMj(second) - before[2]) / 1000
    assert other_j > own_j                                        # the second die worked, the first idled
    assert board_j == pytest.approx(own_j + other_j, abs=0.6)     # ...and the first die's counter shows both
    busy_s = amd.simClock().now() - before[3]
    amd.amdsmi_set_power_cap(first, 0, 200_000_000)              # the board's cap holds both dies
    start = amd.simClock().now()
    for _ in range(20):
        amd.simDeclareWork(STEP)
    amd.simSynchronize()
    assert amd.simClock().now() - start > 1.2 * busy_s


@pytest.mark.parametrize("fault, call, code", [
    ("no_permission@3", "set", 10), ("set_error@3", "set", 4294967295), ("no_counter@3", "energy", 2),
    ("read_error@3", "energy", 4294967295), ("lost@3", "power", 31),
])
def test_faults_are_raised_in_amd_smis_words_on_the_machine_index(tmp_path, fault, call, code):
    nvml, amd = open_machine(tmp_path, ["H100", "MI250X", "MI300X"], faults=fault)
    calls = {"set": lambda h: amd.amdsmi_set_power_cap(h, 0, 500_000_000),
             "energy": amd.amdsmi_get_energy_count, "power": amd.amdsmi_get_power_info}
    first, _, mi300x = amd.amdsmi_get_processor_handles()
    calls[call](first)                                            # machine index 1: no fault there
    with pytest.raises(AmdSmiLibraryException) as excinfo:
        calls[call](mi300x)
    assert code_of(excinfo) == code
    amd.amdsmi_shut_down()
    nvml.nvmlShutdown()


def test_a_stalled_counter_repeats_and_unreported_power_is_na(tmp_path):
    nvml, amd = open_machine(tmp_path, ["MI210"], faults="counter_stuck=3,no_instant_power")
    (h,) = amd.amdsmi_get_processor_handles()
    reads = []
    for moment in (1.0, 2.0, 3.0, 4.0):
        amd.simSleepUntil(moment)
        reads.append(amd.amdsmi_get_energy_count(h)["energy_accumulator"])
    assert reads[0] < reads[1] < reads[2] == reads[3]             # from the third read on it repeats
    power = amd.amdsmi_get_power_info(h)
    assert (power["socket_power"], power["average_socket_power"], power["current_socket_power"]) == ("N/A",) * 3
    amd.amdsmi_shut_down()
    nvml.nvmlShutdown()


def test_calls_before_init_and_after_shutdown_are_not_initialised(tmp_path):
    amd = SimulatedAmdSmi(state_dir=tmp_path, models=["MI300X"], seed=1)
    with pytest.raises(AmdSmiLibraryException) as excinfo:
        amd.amdsmi_get_processor_handles()
    assert code_of(excinfo) == 32
    amd.amdsmi_init()
    (h,) = amd.amdsmi_get_processor_handles()
    amd.simUseDevices([0])
    assert [p["pid"] for p in amd.amdsmi_get_gpu_process_list(h)] == [os.getpid()]
    amd.amdsmi_shut_down()
    with pytest.raises(AmdSmiLibraryException):
        amd.amdsmi_get_energy_count(h)
    with pytest.raises(amd.AmdSmiParameterException):
        amd.amdsmi_init(2)                                         # a flag, not a number


def test_the_machine_comes_from_gpuenergy_sim_gpus(tmp_path, monkeypatch):
    monkeypatch.setenv("GPUENERGY_SIM_GPUS", "mi300x,H100")
    nvml, amd = open_machine(tmp_path, None)
    assert nvml.nvmlDeviceGetCount() == 1 and len(amd.amdsmi_get_processor_handles()) == 1
    assert nvml.state_dir == amd.state_dir and nvml.simClock() is amd.simClock()
    amd.amdsmi_shut_down()
    nvml.nvmlShutdown()
