"""The device boundary (gpu/device.py, gpu/nvidia.py, gpu/amd.py): both libraries behind one Gpu, each
tested against its simulated stand-in (the simulated NVML, the simulated ``amdsmi``), their errors
translated into the package's own, and the backend's list of GPUs (mixed machines, visibility variables)."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

import pynvml
import pytest

from pytest_gpuenergy.cli.main import main as gpuenergy
from pytest_gpuenergy.errors import (
    BackendUnavailable,
    DeviceError,
    DeviceNotSupported,
    DevicePermissionError,
    DeviceTransientError,
    GpuLostError,
    GpuSelectionError,
    MeasurementError,
)
from pytest_gpuenergy.gpu import amd, nvidia
from pytest_gpuenergy.gpu.amd import AmdGpu
from pytest_gpuenergy.gpu.device import (
    Backend,
    OpenedLibrary,
    SimulatedBackend,
    SmClockLocking,
    open_backend,
    retry_transient,
)
from pytest_gpuenergy.gpu.nvidia import NvmlGpu
from pytest_gpuenergy.gpu.placement import Placement, pin_current_device, pin_worker
from pytest_gpuenergy.gpu.visibility import hiding_variable
from pytest_gpuenergy.meter import EnergyMeter
from pytest_gpuenergy.sim.amdsmi import COUNTER_RESOLUTION_UJ, SimulatedAmdSmi
from pytest_gpuenergy.sim.nvml import SimulatedNvml
from pytest_gpuenergy.sim.roofline import GpuWork

from helpers import spin


def opened(monkeypatch: pytest.MonkeyPatch, gpus: str, **env: str) -> Backend:
    monkeypatch.setenv("GPUENERGY_SIM_GPUS", gpus)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return open_backend("sim")


def identities(backend: Backend, gpus: list | None = None) -> list[tuple[int, str, str, str]]:
    return [(g.index, g.name.split(" (")[0], g.vendor, g.library) for g in (gpus if gpus is not None else backend.all_gpus)]


# -- one interface, two libraries ----------------------------------------------------------------------

@pytest.mark.sim_gpus("H100")
def test_an_nvidia_gpu_speaks_milliwatts_and_millijoules_through_nvml(backend):
    gpu = backend.all_gpus[0]
    assert isinstance(gpu, NvmlGpu) and (gpu.vendor, gpu.library, gpu.backend, gpu.simulated) == ("nvidia", "nvml", "sim", True)
    limits = gpu.limits()
    assert (limits.default_mw, limits.min_mw, limits.max_mw) == (700_000, 200_000, 700_000)
    assert gpu.set_limit_mw(350_000) == 350_000 == gpu.current_limit_mw()
    assert gpu.has_energy_counter() and gpu.energy_resolution_mj == 1.0 and gpu.counter_period_s == 0.1
    assert (gpu.power_source, gpu.power_window_s) == ("instant", 0.025)
    assert isinstance(gpu, SmClockLocking) and gpu.reads_clock_lock
    gpu.lock_sm_clock_mhz(1200, 1200)
    assert gpu.sm_clock_lock_mhz() == (1200, 1200) and gpu.supported_sm_clocks_mhz()[0] == 1980
    gpu.unlock_sm_clock()
    assert gpu.sm_clock_lock_mhz() is None
    assert gpu.simulated_state_file == backend.state_dir / "gpus" / f"{gpu.uuid}.json"


@pytest.mark.sim_gpus("RTX4090")
def test_the_boards_default_and_highest_limit_are_read_once_and_stay_when_a_cap_is_set(backend, monkeypatch):
    """An RTX 4090's default (450 W) is not its highest limit (600 W): each is its own, and both come from
    one read of the limits, which a cap set afterwards does not change (they are the board's)."""
    gpu = backend.all_gpus[0]
    reads = []
    limits = gpu.limits
    monkeypatch.setattr(gpu, "limits", lambda: reads.append(1) or limits())
    assert (gpu.default_limit_mw(), gpu.max_limit_mw()) == (450_000, 600_000)
    gpu.set_limit_mw(300_000)
    assert (gpu.default_limit_mw(), gpu.max_limit_mw()) == (450_000, 600_000)
    assert reads == [1]


@pytest.mark.sim_gpus("MI300X")
def test_an_amd_gpu_gives_the_same_units_from_micro_watts_and_counts_of_15_3_micro_joules(backend):
    gpu = backend.all_gpus[0]
    assert isinstance(gpu, AmdGpu) and (gpu.vendor, gpu.library, gpu.backend) == ("amd", "amdsmi", "sim")
    assert gpu.uuid.startswith("GPU-") and gpu.uuid[4:] == gpu.amdsmi.amdsmi_get_gpu_device_uuid(gpu.handle)
    assert not isinstance(gpu, SmClockLocking)          # AMD's clocks are no knob here
    limits = gpu.limits()
    assert (limits.current_mw, limits.enforced_mw, limits.default_mw, limits.min_mw, limits.max_mw) == (
        750_000, 750_000, 750_000, 200_000, 750_000)
    assert gpu.set_limit_mw(450_000) == 450_000
    assert gpu.amdsmi.amdsmi_get_power_cap_info(gpu.handle)["power_cap"] == 450_000_000     # micro-watts
    backend.sleep_until(backend.clock() + 0.5)
    count = gpu.amdsmi.amdsmi_get_energy_count(gpu.handle)
    assert gpu.energy_mj() == int(count["energy_accumulator"] * COUNTER_RESOLUTION_UJ // 1000) > 0
    assert gpu.counter_period_s == 0.001 and gpu.energy_resolution_mj == 1.0
    assert gpu.power_source == "current" and gpu.power_mw() % 1000 == 0       # whole watts from AMD SMI


class FakeAmdSmi:
    """Just enough of ``amdsmi`` for one GPU whose readings a test chooses."""

    class AmdSmiLibraryException(Exception):
        def __init__(self, code: int) -> None:
            super().__init__(code)
            self.err_code = code

        def get_error_code(self) -> int:
            return self.err_code

    def __init__(self, power: dict[str, Any] | None = None, energy: dict[str, Any] | None = None,
                 partition: str = "SPX", failing: dict[str, int] | None = None) -> None:
        self.power, self.energy, self.partition, self.failing = power or {}, energy or {}, partition, failing or {}

    def _maybe_fail(self, call: str) -> None:
        if call in self.failing:
            raise self.AmdSmiLibraryException(self.failing[call])

    def amdsmi_get_gpu_asic_info(self, handle):
        return {"market_name": "AMD Instinct MI210"}

    def amdsmi_get_gpu_device_uuid(self, handle):
        return "d2ff74a1-0000-1000-80f0-5a3c1e7e2e31"

    def amdsmi_get_power_info(self, handle):
        self._maybe_fail("power")
        return self.power

    def amdsmi_get_energy_count(self, handle):
        self._maybe_fail("energy")
        return self.energy

    def amdsmi_get_power_cap_info(self, handle):
        self._maybe_fail("cap")
        return {"power_cap": 300_000_000, "default_power_cap": 300_000_000, "min_power_cap": 0,
                "max_power_cap": 300_000_000, "dpm_cap": 1700}

    def amdsmi_get_gpu_compute_partition(self, handle):
        return self.partition


def fake_gpu(library: FakeAmdSmi) -> AmdGpu:
    return AmdGpu(library, object(), 0, index=0, simulated=False)


@pytest.mark.parametrize(("power", "expected_mw", "source"), [
    ({"current_socket_power": 512, "average_socket_power": "N/A", "socket_power": 512}, 512_000, "current"),
    ({"current_socket_power": "N/A", "average_socket_power": 301}, 301_000, "average"),        # MI200 and older
    ({"current_socket_power": "N/A", "average_socket_power": 301, "socket_power": 301}, 301_000, "average"),  # ROCm 7
    ({"socket_power": 250}, 250_000, "socket"),                                                 # only ROCm 7's field
])
def test_the_power_field_that_answers_is_read_in_watts_and_named(power, expected_mw, source):
    gpu = fake_gpu(FakeAmdSmi(power=power))
    assert (gpu.power_mw(), gpu.power_source) == (expected_mw, source)
    assert gpu.power_window_s == (0.1 if source == "average" else 0.001)


def test_a_gpu_without_any_power_reading_says_so():
    with pytest.raises(DeviceNotSupported, match="no power reading"):
        fake_gpu(FakeAmdSmi(power={"current_socket_power": "N/A", "average_socket_power": "N/A"})).power_mw()


def test_the_accumulator_is_read_under_its_old_name_too():
    """amdsmi before 6.2.1 called it ``power`` (AMDResearch/hpcfund#21 shows such a dict on ROCm 6.0.2)."""
    old = fake_gpu(FakeAmdSmi(energy={"power": 8_152_136, "counter_resolution": 15.3, "timestamp": 1}))
    assert old.energy_mj() == int(8_152_136 * 15.3 // 1000) == 124_727
    new = fake_gpu(FakeAmdSmi(energy={"energy_accumulator": 1000, "counter_resolution": 15.3}))
    assert new.energy_mj() == 15


def test_a_partitioned_amd_gpu_cannot_be_measured_and_says_what_to_do():
    reason = fake_gpu(FakeAmdSmi(partition="CPX")).unmeasurable_reason()
    assert reason is not None and "compute partitions (CPX)" in reason and "SPX" in reason
    assert fake_gpu(FakeAmdSmi(partition="SPX")).unmeasurable_reason() is None


# -- errors, translated in one place per library ------------------------------------------------------

@pytest.mark.parametrize(("nvml_error", "kind"), [
    (pynvml.NVMLError_NoPermission, DevicePermissionError),
    (pynvml.NVMLError_NotSupported, DeviceNotSupported),
    (pynvml.NVMLError_FunctionNotFound, DeviceNotSupported),
    (pynvml.NVMLError_Unknown, DeviceTransientError),
    (pynvml.NVMLError_Timeout, DeviceTransientError),
    (pynvml.NVMLError_InvalidArgument, DeviceError),
])
def test_nvml_errors_become_the_packages_own_kinds_with_nvmls_words(nvml_error, kind):
    translated = nvidia.translate(nvml_error())
    assert type(translated) is kind and str(translated) == f"NVML: {nvml_error()}"


@pytest.mark.parametrize(("code", "kind"), [
    (amd.STATUS_NO_PERM, DevicePermissionError), (amd.STATUS_NOT_SUPPORTED, DeviceNotSupported),
    (amd.STATUS_BUSY, DeviceTransientError), (amd.STATUS_RETRY, DeviceTransientError),
    (amd.STATUS_TIMEOUT, DeviceTransientError), (amd.STATUS_UNKNOWN_ERROR, DeviceTransientError),
    (1, DeviceError),   # AMDSMI_STATUS_INVAL: a cap outside the range, a second die
])
def test_amd_smi_status_codes_become_the_packages_own_kinds(code, kind):
    translated = amd.translate(FakeAmdSmi.AmdSmiLibraryException(code))
    assert type(translated) is kind and str(translated).startswith("AMD SMI: ")


def test_a_device_that_vanishes_from_amd_smi_is_a_lost_gpu():
    gpu = fake_gpu(FakeAmdSmi(failing={"cap": amd.STATUS_NOT_FOUND}))
    with pytest.raises(GpuLostError, match=r"GPU 0 \(AMD Instinct MI210\) is lost \(AMD SMI: GPU is lost\)"):
        gpu.limits()


@pytest.mark.sim_gpus("H100,MI300X")
@pytest.mark.parametrize("index", [0, 1])
def test_either_library_reports_a_lost_gpu_as_the_same_error(backend, index):
    gpu = backend.all_gpus[index]
    backend.nvml.simArmFaults(f"lost@{index}")
    with pytest.raises(GpuLostError, match=rf"^GPU {index} \(.*\) is lost \((NVML|AMD SMI): GPU is lost\)"):
        gpu.energy_mj()
    with pytest.raises(GpuLostError):
        gpu.limits()


@pytest.mark.sim_gpus("H100,MI300X")
@pytest.mark.parametrize("index", [0, 1])
def test_no_permission_and_a_busy_driver_come_as_the_same_kinds_from_both(backend, index):
    gpu = backend.all_gpus[index]
    backend.nvml.simArmFaults(f"no_permission@{index}=1-1")
    with pytest.raises(DevicePermissionError):
        gpu.set_limit_mw(400_000)
    backend.nvml.simArmFaults(f"set_error@{index}=1-2")           # two busy answers, then the driver takes it
    assert retry_transient(lambda: gpu.set_limit_mw(400_000), backoff_s=0.0) == 400_000
    backend.nvml.simArmFaults(f"set_error@{index}")               # busy for good: the last error comes out
    with pytest.raises(DeviceTransientError):
        retry_transient(lambda: gpu.set_limit_mw(300_000), backoff_s=0.0)


# -- the meter on an AMD GPU -------------------------------------------------------------------------------

@pytest.mark.sim_gpus("MI300X")
@pytest.mark.parametrize("steps", [1, 10, 100])
def test_a_region_on_a_simulated_mi300x_is_within_a_percent_of_the_truth_and_its_bound_holds_it(backend, steps):
    """AMD SMI's counter, published every millisecond, read every 10 ms with no lattice: short and long
    regions alike come out close to the simulator's exact integral, inside their bound."""
    gpu = backend.all_gpus[0]
    meter = EnergyMeter(backend, [gpu])
    for _ in range(3):
        with meter:
            for _ in range(steps):
                backend.declare_work(GpuWork(flops_tf32=2e12))
        t0, t1 = meter.last_region
        truth_j = (gpu.amdsmi.simExactEnergyMj(gpu.handle, t1) - gpu.amdsmi.simExactEnergyMj(gpu.handle, t0)) / 1000
        part = meter.result.per_gpu[0]
        rep = part.repetitions[0]
        assert part.method == "counter" and rep.ets_low_j <= truth_j <= rep.ets_high_j, (rep, truth_j)
        assert abs(rep.ets_j / truth_j - 1) < 0.01, (rep.ets_j, truth_j)


@pytest.mark.sim_gpus("MI300X")
def test_a_1_ms_counter_is_read_every_10_ms_not_chased_tick_by_tick(backend):
    """A read sees a value at most 1 ms old: nothing to learn, and 100 reads a second, not a thousand."""
    gpu = backend.all_gpus[0]
    meter = EnergyMeter(backend, [gpu])
    meter.measure(lambda: backend.declare_work(GpuWork(flops_tf32=2e12)), repeat=3)
    recorder = meter.recorders[0]
    reads, lattice = recorder.snapshot(0.0, float("inf"))
    gaps = sorted(b.started - a.started for a, b in zip(reads, reads[1:]))
    assert not recorder.learns_lattice and lattice is None
    assert len(gaps) > 50 and gaps[len(gaps) // 2] == pytest.approx(0.01, abs=1e-6)
    assert all(rep.ets_j > 0 for rep in meter.result.per_gpu[0].repetitions)      # and never a false "stuck"


def test_in_real_time_a_recorder_thread_reads_the_1_ms_counter_and_the_bound_holds_the_truth(monkeypatch):
    """On the wall clock (a thread reads the counter, as on a real GPU): the figure of 0.3 s of work
    is inside its bound and within 2 % of the simulator's exact integral, on a loaded machine."""
    monkeypatch.setenv("GPUENERGY_SIM_CLOCK", "wall")
    backend = opened(monkeypatch, "MI300X")
    try:
        gpu = backend.all_gpus[0]
        meter = EnergyMeter(backend, [gpu])
        with meter:
            spin(0.3)
        t0, t1 = meter.last_region
        truth_j = (gpu.amdsmi.simExactEnergyMj(gpu.handle, t1) - gpu.amdsmi.simExactEnergyMj(gpu.handle, t0)) / 1000
        rep = meter.result.per_gpu[0].repetitions[0]
        assert rep.ets_low_j <= truth_j <= rep.ets_high_j and abs(rep.ets_j / truth_j - 1) < 0.02, (rep, truth_j)
    finally:
        backend.close()


@pytest.mark.sim_gpus("MI300X")
def test_an_amd_counter_that_stops_moving_gives_no_figure_and_says_it_is_stuck(backend):
    gpu = backend.all_gpus[0]
    meter = EnergyMeter(backend, [gpu], work=GpuWork(flops_tf32=2e13))
    backend.nvml.simArmFaults("counter_stuck=3")
    with pytest.raises(MeasurementError, match=r"energy counter of GPU 0 .* did not move .* every 1 ms: it is stuck"):
        with meter:
            for _ in range(10):
                backend.declare_work(GpuWork(flops_tf32=2e13))
        meter.result


@pytest.mark.parametrize("faults", ["", "no_counter"], ids=["counter", "average-power"])
def test_an_mi250xs_first_die_measures_the_whole_board(monkeypatch, faults):
    """The first die reports the package: its figure is both dies' energy (by its counter, or by
    sampling the MI200s' average power, assumed a 100 ms average)."""
    backend = opened(monkeypatch, "MI250X", GPUENERGY_SIM_FAULTS=faults)
    try:
        first, second = backend.all_gpus
        meter = EnergyMeter(backend, [first])
        with meter:
            for _ in range(20):
                backend.declare_work(GpuWork(flops_tf32=2e12))
        t0, t1 = meter.last_region
        truth_j = sum(g.amdsmi.simExactEnergyMj(g.handle, t1) - g.amdsmi.simExactEnergyMj(g.handle, t0)
                      for g in (first, second)) / 1000
        part = meter.result.per_gpu[0]
        rep = part.repetitions[0]
        assert part.method == ("sampling" if faults else "counter")
        assert rep.ets_low_j <= truth_j <= rep.ets_high_j and abs(rep.ets_j / truth_j - 1) < 0.01, (rep, truth_j)
    finally:
        backend.close()


@pytest.mark.sim_gpus("MI250X")
def test_the_second_die_of_an_mi250x_is_refused_with_the_die_to_measure_instead(backend):
    first, second = backend.all_gpus
    assert first.unmeasurable_reason() is None
    with pytest.raises(MeasurementError, match=r"^GPU 1 \(AMD Instinct MI250X.*\) is the second die of an MI250X"):
        EnergyMeter(backend, [second])


# -- the backend: one list, NVIDIA first, each library's visibility variable -----------------------------

@pytest.mark.parametrize("machine", ["H100,MI300X", "MI300X,H100"])
def test_a_mixed_machine_lists_nvidia_gpus_first_then_amd_ones(monkeypatch, machine):
    backend = opened(monkeypatch, machine)
    try:
        assert isinstance(backend, SimulatedBackend)
        assert identities(backend) == [(0, "NVIDIA H100 80GB HBM3", "nvidia", "nvml"),
                                       (1, "AMD Instinct MI300X", "amd", "amdsmi")]
        positions = {g.vendor: g.machine_index for g in backend.all_gpus}
        assert positions == ({"nvidia": 0, "amd": 1} if machine.startswith("H100") else {"nvidia": 1, "amd": 0})
    finally:
        backend.close()


def test_the_simulated_extras_address_the_machines_gpus_whichever_library_shows_them(monkeypatch):
    backend = opened(monkeypatch, "MI300X,H100")
    calls: list[list[int]] = []
    real = backend.nvml.simUseDevices
    monkeypatch.setattr(backend.nvml, "simUseDevices", lambda indices: calls.append(list(indices)) or real(indices))
    try:
        nvidia_gpu, amd_gpu = backend.all_gpus
        backend.use([nvidia_gpu])
        backend.use([amd_gpu, nvidia_gpu])
        assert calls == [[1], [0, 1]]          # machine indices: the MI300X is the machine's first GPU
    finally:
        backend.close()


@pytest.mark.parametrize(("env", "visible"), [
    ({"CUDA_VISIBLE_DEVICES": "1", "HIP_VISIBLE_DEVICES": "0,1"}, [1, 2, 3]),
    ({"CUDA_VISIBLE_DEVICES": "1,0", "HIP_VISIBLE_DEVICES": "0,1"}, [1, 0, 2, 3]),
    ({"CUDA_VISIBLE_DEVICES": "0,7,1", "HIP_VISIBLE_DEVICES": "0,1"}, [0, 2, 3]),   # parsing stops at an entry that matches nothing
    ({"ROCR_VISIBLE_DEVICES": "1"}, [0, 1, 3]),               # AMD's own indices: the second AMD GPU
    ({"ROCR_VISIBLE_DEVICES": "1,0", "HIP_VISIBLE_DEVICES": "1"}, [0, 1, 2]),   # HIP indexes what ROCR left
    ({"HIP_VISIBLE_DEVICES": "0"}, [0, 1, 2]),
    ({"CUDA_VISIBLE_DEVICES": "1"}, [1, 3]),                  # without HIP's, HIP reads CUDA's: both vendors
    ({"CUDA_VISIBLE_DEVICES": "1", "HIP_VISIBLE_DEVICES": "0"}, [1, 2]),
    ({"CUDA_VISIBLE_DEVICES": "", "ROCR_VISIBLE_DEVICES": ""}, [0, 1, 2, 3]),   # "" hides nothing simulated
])
def test_each_librarys_gpus_are_filtered_by_its_own_runtimes_variable(monkeypatch, env, visible):
    backend = opened(monkeypatch, "H100,V100,MI300X,MI210", **env)
    try:
        assert [g.index for g in backend.visible_gpus] == visible
        assert [g.index for g in backend.select(None)] == visible
    finally:
        backend.close()


def test_an_xdist_worker_on_a_mixed_node_pins_each_vendors_runtime_to_its_own_gpu_first(monkeypatch):
    """NVIDIA: CUDA_VISIBLE_DEVICES by uuid; AMD: ROCR_VISIBLE_DEVICES by AMD SMI's index, and HIP's
    variable keeping them all (HIP would read CUDA's otherwise); torch on ROCm then follows the test."""
    backend = opened(monkeypatch, "H100,H100,MI300X,MI210")
    try:
        pool = backend.select(None)
        h100_0, h100_1, mi300x, mi210 = pool
        for worker, expected in [
            ("gw1", {"CUDA_VISIBLE_DEVICES": f"{h100_1.uuid},{h100_0.uuid}", "ROCR_VISIBLE_DEVICES": "0,1",
                     "HIP_VISIBLE_DEVICES": "0,1"}),
            ("gw3", {"CUDA_VISIBLE_DEVICES": f"{h100_0.uuid},{h100_1.uuid}", "ROCR_VISIBLE_DEVICES": "1,0",
                     "HIP_VISIBLE_DEVICES": "0,1"}),
        ]:
            env: dict[str, str] = {}
            assert pin_worker(pool, Placement.from_environment({}, worker_id=worker), env) == env == expected
        amd_only = opened(monkeypatch, "MI300X,MI210")
        env = {}
        pin_worker(amd_only.select(None), Placement.from_environment({}, worker_id="gw1"), env)
        assert env == {"ROCR_VISIBLE_DEVICES": "1,0", "HIP_VISIBLE_DEVICES": "0,1"}     # no CUDA_VISIBLE_DEVICES="" hiding all
        amd_only.close()
        for name, value in expected.items():        # gw3's worker: torch on ROCm makes the held MI300X current
            monkeypatch.setenv(name, value)
        chosen: list[int] = []
        cuda = SimpleNamespace(is_available=lambda: True, is_initialized=lambda: True, device_count=lambda: 2,
                               set_device=chosen.append)
        monkeypatch.setitem(__import__("sys").modules, "torch", SimpleNamespace(cuda=cuda))
        assert pin_current_device([mi300x], backend.all_gpus) == 1 and chosen == [1]    # the MI210 is device 0 there
    finally:
        backend.close()


def test_an_amd_gpu_is_made_visible_by_its_uuid(monkeypatch):
    backend = opened(monkeypatch, "MI300X,MI210")
    uuid = backend.all_gpus[1].uuid
    backend.close()
    backend = opened(monkeypatch, "MI300X,MI210", ROCR_VISIBLE_DEVICES=uuid[:12])
    try:
        assert [g.index for g in backend.visible_gpus] == [1]
    finally:
        backend.close()


def test_an_amd_uuid_that_amd_smi_does_not_list_is_an_error_not_a_hidden_gpu(monkeypatch):
    """ROCR's UUIDs (rocminfo's GPU-<16 hex>) need not be AMD SMI's: say so rather than hide the GPUs."""
    with pytest.raises(GpuSelectionError, match=r"^ROCR_VISIBLE_DEVICES: no AMD GPU has the UUID 'GPU-deadbeefdeadbeef' "
                                                r"as AMD SMI reports them \(0 \(GPU-.*\)\); name them by index"):
        opened(monkeypatch, "MI300X", ROCR_VISIBLE_DEVICES="GPU-deadbeefdeadbeef")


def test_auto_takes_every_library_that_finds_gpus_nvidia_first(monkeypatch, sim_state):
    """The real libraries' places taken by the simulated ones, presented as real: auto opens both."""
    monkeypatch.setenv("GPUENERGY_SIM_GPUS", "H100,MI300X")
    sim = SimulatedNvml(state_dir=sim_state)
    amdsmi = SimulatedAmdSmi(sim.machine)

    def nvml_found(*, hidden_counts: bool, first_index: int) -> OpenedLibrary:
        sim.nvmlInit()
        return OpenedLibrary(nvidia.nvml_gpus(sim, simulated=False, first_index=first_index), "570.1", sim.nvmlShutdown,
                             cuda_driver_version="12.8")

    def amd_found(*, hidden_counts: bool, first_index: int) -> OpenedLibrary:
        amdsmi.amdsmi_init()
        return OpenedLibrary(amd.amd_gpus(amdsmi, simulated=False, first_index=first_index), "6.10.5",
                             amdsmi.amdsmi_shut_down)

    monkeypatch.setattr(nvidia, "open_nvml", nvml_found)
    monkeypatch.setattr(amd, "open_amdsmi", amd_found)
    backend = open_backend("auto")
    try:
        assert (backend.name, backend.simulated, backend.cuda_driver_version) == ("nvml+amdsmi", False, "12.8")
        assert [(g.index, g.vendor, g.backend) for g in backend.all_gpus] == [(0, "nvidia", "nvml"), (1, "amd", "amdsmi")]
        assert backend.label == "NVML, driver 570.1, AMD SMI, driver 6.10.5"
    finally:
        backend.close()
    monkeypatch.setattr(nvidia, "open_nvml", lambda **_: "NVML finds no GPU")
    backend = open_backend("auto")
    try:
        assert backend.name == "amdsmi" and [g.index for g in backend.all_gpus] == [0]   # AMD's first is the plugin's 0
    finally:
        backend.close()


def test_a_library_asked_for_by_name_that_is_not_there_is_a_one_line_error_with_the_fix(monkeypatch):
    monkeypatch.setattr(amd, "open_amdsmi", lambda **_: "the amdsmi package is not installed")
    with pytest.raises(BackendUnavailable) as caught:
        open_backend("amdsmi")
    assert str(caught.value) == (
        "--gpu-backend=amdsmi: the amdsmi package is not installed; install ROCm and its Python package "
        "(pip install 'pytest-gpuenergy[amd]'), or use --gpu-backend=sim to run on simulated GPUs")
    with pytest.raises(BackendUnavailable, match="unknown GPU backend 'rocm': choose from auto, nvml, amdsmi, sim"):
        open_backend("rocm")


def test_the_real_amd_path_opens_the_amdsmi_module_it_finds(monkeypatch, sim_state):
    """``open_amdsmi`` as on an AMD node, the simulated AMD SMI standing in for the ``amdsmi`` module."""
    monkeypatch.setenv("GPUENERGY_SIM_GPUS", "MI300X,MI210")
    monkeypatch.setitem(__import__("sys").modules, "amdsmi", SimulatedAmdSmi(SimulatedNvml(state_dir=sim_state).machine))
    found = amd.open_amdsmi(hidden_counts=True, first_index=3)
    assert isinstance(found, OpenedLibrary) and found.driver_version == "simulated"
    assert [(g.index, g.library_index, g.backend, g.simulated) for g in found.gpus] == [(3, 0, "amdsmi", False),
                                                                                         (4, 1, "amdsmi", False)]
    found.close()
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")            # a CPU-only job: HIP reads it too
    assert amd.open_amdsmi(hidden_counts=True) == "CUDA_VISIBLE_DEVICES hides every GPU"
    monkeypatch.setenv("HIP_VISIBLE_DEVICES", "1")            # ...unless HIP's own variable is set
    found = amd.open_amdsmi(hidden_counts=True)
    assert isinstance(found, OpenedLibrary)
    found.close()
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    monkeypatch.delenv("HIP_VISIBLE_DEVICES")
    backend = open_backend("amdsmi")
    try:
        assert (backend.name, backend.label, backend.simulated) == ("amdsmi", "AMD SMI, driver simulated", False)
        assert [g.name.split(" (")[0] for g in backend.visible_gpus] == ["AMD Instinct MI300X", "AMD Instinct MI210"]
    finally:
        backend.close()


@pytest.mark.parametrize(("env", "hiding"), [
    ({"CUDA_VISIBLE_DEVICES": ""}, {"nvml": "CUDA_VISIBLE_DEVICES", "amdsmi": "CUDA_VISIBLE_DEVICES"}),
    ({"CUDA_VISIBLE_DEVICES": "", "HIP_VISIBLE_DEVICES": "0"}, {"nvml": "CUDA_VISIBLE_DEVICES", "amdsmi": None}),
    ({"ROCR_VISIBLE_DEVICES": " "}, {"nvml": None, "amdsmi": "ROCR_VISIBLE_DEVICES"}),
    ({"CUDA_VISIBLE_DEVICES": "0"}, {"nvml": None, "amdsmi": None}),
])
def test_a_variable_set_to_nothing_hides_its_librarys_gpus_from_auto(env, hiding):
    assert {library: hiding_variable(library, env) for library in ("nvml", "amdsmi")} == hiding


def test_nvml_without_a_driver_is_a_one_line_error_and_auto_falls_back_to_the_simulator(monkeypatch, sim_state):
    def no_driver() -> None:
        raise pynvml.NVMLError_LibraryNotFound()

    monkeypatch.setattr(pynvml, "nvmlInit", no_driver)
    monkeypatch.setattr(amd, "open_amdsmi", lambda **_: "the amdsmi package is not installed")
    with pytest.raises(BackendUnavailable, match=r"^--gpu-backend=nvml: NVML is not available \(NVML Shared Library "
                                                 r"Not Found\); install the NVIDIA driver, or use --gpu-backend=sim"):
        open_backend("nvml")
    backend = open_backend("auto")
    try:
        assert isinstance(backend, SimulatedBackend) and backend.name == "sim"
    finally:
        backend.close()


def test_without_the_amdsmi_package_no_amd_library_is_found(monkeypatch):
    monkeypatch.setitem(__import__("sys").modules, "amdsmi", None)      # an import of it fails
    assert amd.open_amdsmi() == "the amdsmi package is not installed"


@pytest.mark.parametrize(("reported", "expected"), [
    (12040, "12.4"), (11080, "11.8"), (9020, "9.2"), (10010, "10.1"), (12090, "12.9"), ("12040", "12.4"), (13000, "13.0"),
])
def test_the_cuda_version_the_driver_supports_reads_as_major_dot_minor(reported, expected):
    assert nvidia.cuda_driver_version(SimpleNamespace(nvmlSystemGetCudaDriverVersion=lambda: reported)) == expected


def test_a_driver_that_cannot_tell_its_cuda_version_gives_none():
    def failing():
        raise pynvml.NVMLError_FunctionNotFound()

    assert nvidia.cuda_driver_version(SimpleNamespace(nvmlSystemGetCudaDriverVersion=failing)) is None
    assert nvidia.cuda_driver_version(SimpleNamespace()) is None
    assert nvidia.cuda_driver_version(SimpleNamespace(nvmlSystemGetCudaDriverVersion=lambda: "twelve")) is None


# -- gpuenergy info ----------------------------------------------------------------------------------------

@pytest.mark.sim_gpus("H100,MI300X")
def test_gpuenergy_info_gives_each_gpus_vendor_and_library(capsys):
    assert gpuenergy(["info", "--json", "--gpu-backend", "sim"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [(r["index"], r["vendor"], r["library"], r["backend"], r["simulated"]) for r in rows] == [
        (0, "nvidia", "nvml", "sim", True), (1, "amd", "amdsmi", "sim", True)]
    assert rows[1]["max_limit_w"] == 750.0 and rows[1]["sm_clock_max_mhz"] is None
    assert gpuenergy(["info", "--gpu-backend", "sim"]) == 0
    text = capsys.readouterr().out
    assert "AMD Instinct MI300X (simulated)" in text and "(amd, amdsmi)" in text and "(nvidia, nvml)" in text
    assert "not measured" not in text and all(row["unmeasurable_reason"] is None for row in rows)


@pytest.mark.sim_gpus("MI250X")
def test_gpuenergy_info_says_which_gpu_measures_an_mi250xs_second_die(capsys):
    assert gpuenergy(["info", "--gpu-backend", "sim"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[-1] == ("      not measured: it is the second die of an MI250X: AMD SMI reports the package's energy and "
                         "power on its first die (the GPU listed just before it), whose figures cover both dies; select "
                         "that one with --gpu-devices")
    assert sum("not measured" in line for line in lines) == 1
