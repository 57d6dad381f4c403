"""The simulated GPU stands in for NVML: same calls, units and errors; state that outlives a process."""

from __future__ import annotations

import statistics
import subprocess
import sys
import time

import pynvml
import pytest

from pytest_gpuenergy.errors import SimStateError
from pytest_gpuenergy.sim.faults import parse_faults
from pytest_gpuenergy.sim.nvml import SimulatedNvml
from pytest_gpuenergy.sim.roofline import GpuWork


def _started(clock: str):
    lib = SimulatedNvml(clock=clock)
    lib.nvmlInit()
    yield lib
    lib.nvmlShutdown()


@pytest.fixture
def nvml(sim_state):
    yield from _started("wall")


def test_it_answers_like_pynvml(nvml):
    handle = nvml.nvmlDeviceGetHandleByIndex(0)
    assert nvml.nvmlDeviceGetCount() == 1
    assert "H100" in nvml.nvmlDeviceGetName(handle) and "simulated" in nvml.nvmlDeviceGetName(handle)
    assert nvml.nvmlDeviceGetUUID(handle).startswith("GPU-")
    assert nvml.nvmlDeviceGetPowerManagementLimit(handle) == 700_000          # mW, an int
    assert nvml.nvmlDeviceGetPowerManagementDefaultLimit(handle) == 700_000
    assert nvml.nvmlDeviceGetPowerManagementLimitConstraints(handle) == [200_000, 700_000]
    assert isinstance(nvml.nvmlDeviceGetTotalEnergyConsumption(handle), int)  # mJ
    field = nvml.nvmlDeviceGetFieldValues(handle, [pynvml.NVML_FI_DEV_POWER_INSTANT])[0]
    assert field.nvmlReturn == pynvml.NVML_SUCCESS and 50_000 < field.value.uiVal < 800_000
    assert nvml.NVML_FI_DEV_POWER_INSTANT == pynvml.NVML_FI_DEV_POWER_INSTANT  # constants pass through
    assert nvml.nvmlDeviceGetHandleByUUID(nvml.nvmlDeviceGetUUID(handle)) == handle


def test_errors_are_pynvmls_own_classes(nvml):
    handle = nvml.nvmlDeviceGetHandleByIndex(0)
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        nvml.nvmlDeviceSetPowerManagementLimit(handle, 900_000)
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        nvml.nvmlDeviceGetHandleByIndex(3)
    with pytest.raises(pynvml.NVMLError_NotFound):
        nvml.nvmlDeviceGetHandleByUUID("GPU-00000000-0000-0000-0000-000000000000")
    fresh = SimulatedNvml(clock="wall")
    with pytest.raises(pynvml.NVMLError_Uninitialized):
        fresh.nvmlDeviceGetCount()


def test_a_limit_outlives_the_process_that_set_it(nvml):
    handle = nvml.nvmlDeviceGetHandleByIndex(0)
    nvml.nvmlDeviceSetPowerManagementLimit(handle, 350_000)
    script = (
        "from pytest_gpuenergy.sim.nvml import SimulatedNvml\n"
        "n = SimulatedNvml(clock='wall'); n.nvmlInit(); h = n.nvmlDeviceGetHandleByIndex(0)\n"
        "print(n.nvmlDeviceGetPowerManagementLimit(h)); n.nvmlDeviceSetPowerManagementLimit(h, 250000)\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "350000"
    time.sleep(0.06)  # the state file is re-read at most every 50 ms
    assert nvml.nvmlDeviceGetPowerManagementLimit(handle) == 250_000


def test_the_counter_is_published_every_100_ms(nvml):
    handle = nvml.nvmlDeviceGetHandleByIndex(0)
    changes, last = [], nvml.nvmlDeviceGetTotalEnergyConsumption(handle)
    started = time.perf_counter()
    end = started + 0.55
    while time.perf_counter() < end:
        value = nvml.nvmlDeviceGetTotalEnergyConsumption(handle)
        assert value >= last
        if value != last:
            changes.append(time.perf_counter())
            last = value
        time.sleep(0.001)
    watched_s = time.perf_counter() - started          # (a loaded host oversleeps the last millisecond)
    gaps = [b - a for a, b in zip(changes, changes[1:])]
    assert 4 <= len(changes) <= watched_s / 0.1 + 1
    assert statistics.median(gaps) == pytest.approx(0.1, abs=0.01)


@pytest.fixture
def virtual(sim_state):
    """The simulator on its virtual clock with declared work: figures that no host load can move."""
    yield from _started("virtual")


COMPUTE_STEP = GpuWork(flops_tf32=2e14, bytes=1e9, kernels=50)       # about 0.3 s on an H100 at 700 W


def test_idle_gpu_draws_idle_power_and_work_draws_more(virtual):
    handle = virtual.nvmlDeviceGetHandleByIndex(0)
    clock = virtual.simClock()
    t0, e0 = clock.now(), virtual.simExactEnergyMj(handle)
    virtual.simSleepUntil(t0 + 0.3)
    t1, e1 = clock.now(), virtual.simExactEnergyMj(handle)
    assert (e1 - e0) / 1000 / (t1 - t0) == pytest.approx(70.0, rel=0.05)   # H100 idle
    virtual.simDeclareWork(COMPUTE_STEP)
    virtual.simSynchronize()
    t2, e2 = clock.now(), virtual.simExactEnergyMj(handle)
    assert t2 - t1 > 0.1 and (e2 - e1) / 1000 / (t2 - t1) > 400


def test_a_lower_cap_slows_the_work_down_and_saves_energy(virtual):
    handle = virtual.nvmlDeviceGetHandleByIndex(0)
    clock = virtual.simClock()
    figures = {}
    for limit_mw in (700_000, 200_000):
        virtual.nvmlDeviceSetPowerManagementLimit(handle, limit_mw)
        virtual.simSynchronize()
        t0, e0 = clock.now(), virtual.simExactEnergyMj(handle)
        virtual.simDeclareWork(COMPUTE_STEP)
        virtual.simSynchronize()
        figures[limit_mw] = (clock.now() - t0, virtual.simExactEnergyMj(handle) - e0)
    assert figures[200_000][0] > 1.3 * figures[700_000][0]       # slower
    assert figures[200_000][1] < 0.8 * figures[700_000][1]       # cheaper


def test_the_workload_profile_is_a_fraction(nvml):
    nvml.simSetWorkloadProfile(0.3)
    with pytest.raises(ValueError):
        nvml.simSetWorkloadProfile(2.0)


def test_several_models_and_a_gpu_without_counter(monkeypatch):
    monkeypatch.setenv("GPUENERGY_SIM_GPUS", "V100,K80")
    lib = SimulatedNvml(clock="virtual")      # idle stays idle, whatever the host's CPU is doing
    lib.nvmlInit()
    assert lib.nvmlDeviceGetCount() == 2
    k80 = lib.nvmlDeviceGetHandleByIndex(1)
    assert "K80" in lib.nvmlDeviceGetName(k80)
    with pytest.raises(pynvml.NVMLError_NotSupported):
        lib.nvmlDeviceGetTotalEnergyConsumption(k80)
    assert lib.nvmlDeviceGetFieldValues(k80, [pynvml.NVML_FI_DEV_POWER_INSTANT])[0].nvmlReturn == pynvml.NVML_ERROR_NOT_SUPPORTED
    assert lib.nvmlDeviceGetPowerUsage(k80) == pytest.approx(25_000, rel=0.2)
    lib.nvmlShutdown()


@pytest.mark.parametrize(
    ("faults", "call", "error"),
    [
        ("no_permission", "set", pynvml.NVMLError_NoPermission),
        ("set_error", "set", pynvml.NVMLError_Unknown),
        ("no_counter", "energy", pynvml.NVMLError_NotSupported),
        ("read_error", "energy", pynvml.NVMLError_Unknown),
        ("lost=3", "energy", pynvml.NVMLError_GpuIsLost),
    ],
)
def test_faults_raise_what_real_nvml_raises(faults, call, error):
    lib = SimulatedNvml(faults=faults, clock="wall")
    lib.nvmlInit()
    handle = lib.nvmlDeviceGetHandleByIndex(0)
    with pytest.raises(error):
        if call == "set":
            lib.nvmlDeviceSetPowerManagementLimit(handle, 300_000)
        else:
            for _ in range(3):
                lib.nvmlDeviceGetTotalEnergyConsumption(handle)


def test_fault_call_ranges_and_gpu_scope(monkeypatch):
    monkeypatch.setenv("GPUENERGY_SIM_GPUS", "H100,H100")
    lib = SimulatedNvml(faults="set_error@1=2-2,set_ignored@0", clock="wall")
    lib.nvmlInit()
    h0, h1 = lib.nvmlDeviceGetHandleByIndex(0), lib.nvmlDeviceGetHandleByIndex(1)
    lib.nvmlDeviceSetPowerManagementLimit(h0, 300_000)                 # ignored: reports success
    assert lib.nvmlDeviceGetPowerManagementLimit(h0) == 700_000
    lib.nvmlDeviceSetPowerManagementLimit(h1, 300_000)                 # 1st set on GPU 1: fine
    with pytest.raises(pynvml.NVMLError_Unknown):
        lib.nvmlDeviceSetPowerManagementLimit(h1, 400_000)             # 2nd: fails
    lib.nvmlDeviceSetPowerManagementLimit(h1, 700_000)                 # 3rd: fine again
    assert lib.nvmlDeviceGetPowerManagementLimit(h1) == 700_000


def test_counter_faults(virtual):
    lib = virtual
    lib.simArmFaults("counter_reset=3,counter_stuck=5")

    def idle(seconds: float) -> None:
        lib.simSleepUntil(lib.simClock().now() + seconds)

    handle = lib.nvmlDeviceGetHandleByIndex(0)
    first = lib.nvmlDeviceGetTotalEnergyConsumption(handle)
    idle(0.2)
    assert lib.nvmlDeviceGetTotalEnergyConsumption(handle) > first
    assert lib.nvmlDeviceGetTotalEnergyConsumption(handle) < 100   # reset: starts again from 0
    idle(0.15)
    lib.nvmlDeviceGetTotalEnergyConsumption(handle)
    stuck = lib.nvmlDeviceGetTotalEnergyConsumption(handle)
    idle(0.25)
    assert lib.nvmlDeviceGetTotalEnergyConsumption(handle) == stuck


@pytest.mark.parametrize("text", ["bogus", "set_error=0", "set_error=3-2", "lost@x", "read_error=a"])
def test_malformed_fault_specs_are_named(text):
    with pytest.raises(ValueError, match="fault"):
        parse_faults(text)


def test_a_corrupt_state_file_is_a_clear_error(sim_state):
    lib = SimulatedNvml(clock="wall")
    lib.nvmlInit()
    handle = lib.nvmlDeviceGetHandleByIndex(0)
    lib.nvmlDeviceGetPowerManagementLimit(handle)   # the state file exists from the first use
    path = sim_state / "gpus" / f"{lib.nvmlDeviceGetUUID(handle)}.json"
    path.write_text("{not json")
    time.sleep(0.06)
    with pytest.raises(SimStateError, match="corrupt") as caught:
        lib.nvmlDeviceGetPowerManagementLimit(handle)
    assert str(path) in str(caught.value) and "delete it" in str(caught.value)
    path.unlink()
    lib.nvmlShutdown()


def _another_process_works_on_gpu_0(seconds: float) -> None:
    """``seconds`` of CPU-proxy work on the simulated GPU 0 in a process of its own (wall clock), which
    commits it at its end as a test's process does at a hand-over."""
    script = (
        "import time\n"
        "from pytest_gpuenergy.sim.nvml import SimulatedNvml\n"
        "n = SimulatedNvml(clock='wall'); n.nvmlInit()\n"
        f"end = time.process_time() + {seconds}\n"
        "while time.process_time() < end: pass\n"
        "n.simSynchronize(); n.nvmlShutdown()\n"
    )
    subprocess.run([sys.executable, "-c", script], check=True)


def test_the_library_lists_the_processes_that_hold_the_gpu_now_and_a_closed_one_leaves_no_marker(sim_state):
    """A hand-over flips a marker this process keeps open (twice a test under --energy-all: making
    and removing a file cost 50-100 us there). What NVML lists must not change with it: a process
    while it holds the GPU and not after; another process holding it; the marker made again when its
    folder was removed meanwhile; and nothing of a process left once it closed the library."""
    import os
    import shutil

    lib = SimulatedNvml(clock="virtual")
    lib.nvmlInit()
    handle = lib.nvmlDeviceGetHandleByIndex(0)

    def listed() -> set[int]:
        return {p.pid for p in lib.nvmlDeviceGetComputeRunningProcesses(handle)}

    me = os.getpid()
    procs = sim_state / "gpus" / f"{lib.nvmlDeviceGetUUID(handle)}.procs"
    lib.simUseDevices([])
    assert me not in listed()
    for _ in range(3):                                       # hand-overs in and out, as tests do
        lib.simUseDevices([0])
        assert me in listed()
        lib.simUseDevices([])
        assert me not in listed()
    lib.simUseDevices([0])
    other = subprocess.Popen([sys.executable, "-c",
                              "import sys\nfrom pytest_gpuenergy.sim.nvml import SimulatedNvml\n"
                              "n = SimulatedNvml(clock='virtual'); n.nvmlInit(); n.simUseDevices([0])\n"
                              "print('holding', flush=True); sys.stdin.readline(); n.nvmlShutdown()\n"],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert other.stdout is not None and other.stdout.readline().strip() == "holding"
        assert listed() == {me, other.pid}
    finally:
        other.communicate("\n", timeout=60)
    assert listed() == {me}                                  # its marker went with it
    shutil.rmtree(procs)                                     # the markers' folder removed meanwhile
    assert listed() == set()
    lib.simUseDevices([])
    lib.simUseDevices([0])
    assert listed() == {me}                                  # made again
    lib.nvmlShutdown()
    assert not (procs / str(me)).exists()


def test_another_processs_work_shows_on_the_counter_from_its_commit_on_the_same_for_every_read(nvml):
    """A tick's published value must not change with when it is read: another process's work
    appears from (100 ms after) its commit on, so a reader never sees a jump inside an old interval."""
    handle = nvml.nvmlDeviceGetHandleByIndex(0)
    nvml.simUseDevices([])
    moment = time.time() - 0.05
    before_mj = nvml.simExactEnergyMj(handle, moment)
    _another_process_works_on_gpu_0(0.2)
    time.sleep(0.15)
    assert nvml.simExactEnergyMj(handle, moment) == pytest.approx(before_mj, abs=1.0)
    assert nvml.simExactEnergyMj(handle) - before_mj > 0.2 * (646 - 70) * 0.8 * 1000


def test_a_process_that_takes_the_gpu_over_is_not_charged_with_the_last_holders_work(nvml):
    """On the wall clock another process's work shows on the counter 100 ms after its hand-over commit.
    Taking the GPU over returns once that work is on the counter and published: the idle GPU's next
    0.2 s hold the idle level, not the other process's 0.2 s of work (two xdist workers on one GPU
    once had 1-3 tests in 40 above the H100's 700 W)."""
    handle = nvml.nvmlDeviceGetHandleByIndex(0)
    nvml.simUseDevices([])
    _another_process_works_on_gpu_0(0.2)
    nvml.simUseDevices([0])
    start_s, start_mj = time.time(), nvml.simExactEnergyMj(handle)
    published_mj = nvml.nvmlDeviceGetTotalEnergyConsumption(handle)     # at most a period (100 ms) old
    assert start_mj - published_mj < 0.1 * 150 * 1000                  # the other's work published already
    time.sleep(0.2)
    mean_w = (nvml.simExactEnergyMj(handle) - start_mj) / (time.time() - start_s) / 1000
    assert mean_w < 150, f"{mean_w:.0f} W on an idle GPU: the other process's work came after the hand-over"


def test_the_state_file_keeps_the_commits_of_the_longest_reading_of_any_model():
    """A reading looks back one power window before a publication up to one period old, and another
    process's commit shows VISIBLE_AFTER_S after it: a commit dropped sooner would change what one
    publication shows between two reads. (The state file is rewritten at every hand-over, so it keeps
    no more than that, with slack.)"""
    from pytest_gpuenergy.sim.device import COMMITS_KEPT_S, VISIBLE_AFTER_S
    from pytest_gpuenergy.sim.models import GPU_MODELS

    average_field_s = 1.0      # NVML_FI_DEV_POWER_AVERAGE's window, on every model
    needed_s = max(max(spec.power_window_s, spec.power_usage_average_s, average_field_s)
                   + max(spec.power_publish_s, spec.counter_period_s) for spec in GPU_MODELS.values()) + VISIBLE_AFTER_S
    assert needed_s <= COMMITS_KEPT_S <= 3 * needed_s


def test_energy_from_another_process_reaches_the_shared_counter(nvml):
    handle = nvml.nvmlDeviceGetHandleByIndex(0)
    nvml.simUseDevices([])          # this process does no work on the GPU
    e0 = nvml.simExactEnergyMj(handle)
    started = time.time()
    _another_process_works_on_gpu_0(0.4)
    elapsed = time.time() - started
    time.sleep(0.15)   # another process's work shows on the counter 100 ms after its commit
    gained_j = (nvml.simExactEnergyMj(handle) - e0) / 1000
    idle_only_j = 70 * (elapsed + 0.15)
    assert gained_j > idle_only_j + 0.4 * (646 - 70) * 0.8


@pytest.mark.parametrize("model", ["K80", "H100"])
def test_a_reading_is_as_of_the_moment_the_call_brought_the_gpu_up_to_even_after_a_slow_commit(
        sim_state, monkeypatch, model):
    """On the wall clock a library call brings the GPU's timeline up to its moment and may then commit
    the state file, which waits for the GIL at each file operation behind a main thread running Python
    (a 125 ms read was seen). A reading published after that moment averaged a window no work had been
    flowed into yet: the idle level for a window a later call filled (a sampled bound missed the truth
    by 13 %), and a counter value below what the same publication showed later. Here the main thread
    works all the time (its CPU clock is the wall clock) and every commit takes 150 ms."""
    from pytest_gpuenergy.sim.device import SimDevice

    commit = SimDevice.commit

    def slow_commit(self):
        state = commit(self)
        time.sleep(0.15)
        return state

    monkeypatch.setattr(SimDevice, "commit", slow_commit)
    started = time.perf_counter()
    lib = SimulatedNvml(models=[model], clock="wall", cpu_clock=lambda: time.perf_counter() - started)
    lib.nvmlInit()
    try:
        machine = lib.machine
        machine.commit_period_s = 0.0                  # every call commits
        handle = lib.nvmlDeviceGetHandleByIndex(0)
        device = machine.devices[0]
        lib.simUseDevices([0])
        lib.simCountCpuWork(True)
        lib.nvmlDeviceGetPowerUsage(handle)            # from here on the CPU time counted is all the wall time
        time.sleep(0.3)
        if model == "K80":                             # no counter: power readings (25 ms windows)
            readings_w = [lib.nvmlDeviceGetPowerUsage(handle) / 1000 for _ in range(4)]
            busy_w = device.operating_point(device.state_file.read()).busy_power_w
            assert min(readings_w) > 0.9 * busy_w, (readings_w, busy_w)
        else:
            for _ in range(4):
                value_mj, published = machine.counter_reading(device, 1.0)
                time.sleep(0.12)                      # later calls flow the work after this one
                assert value_mj == int(lib.simExactEnergyMj(handle, published)), published
    finally:
        lib.nvmlShutdown()


def test_a_sessions_wall_clock_total_counts_the_worlds_work_beyond_the_wall_clock_not_the_meters_waits(virtual):
    """Each test's virtual world: the meter's recorder learns and waits on the virtual clock (a real
    GPU's meter learns once a session and reads in the background), the test works for a while. Only
    what a real session would also have taken may lengthen the session's total: the declared work's
    time, not the two seconds of waiting around it."""
    handle = virtual.nvmlDeviceGetHandleByIndex(0)
    virtual.simUseDevices([0])
    before_mj, before_s, waits_started = virtual.simWallEnergyMj(handle), virtual.simBeyondWallS(handle), time.time()
    virtual.simBeginTest("test_waits_only", [0])
    virtual.simCountCpuWork(False)
    virtual.simSleepUntil(virtual.simClock().now() + 1.0)      # a recorder learning, then waiting
    wall_started = time.time()
    virtual.simBeginTest("test_works", [0])
    waited_j = (virtual.simWallEnergyMj(handle) - before_mj) / 1000
    assert waited_j <= 70.0 * 1.05 * (time.time() - waits_started) + 0.1   # idle through the wall time alone, not 70 J
    assert virtual.simBeyondWallS(handle) == before_s
    virtual.simCountCpuWork(False)
    virtual.simSleepUntil(virtual.simClock().now() + 0.6)      # learning
    virtual.simCountCpuWork(True)                              # the region
    virtual.simDeclareWork(COMPUTE_STEP)
    virtual.simSynchronize()
    virtual.simCountCpuWork(False)
    region_s = virtual.simClock().now() - 0.6
    virtual.simSleepUntil(virtual.simClock().now() + 0.4)      # waiting for the publications
    virtual.simBeginTest("next", [0])
    wall_s = time.time() - wall_started
    beyond_s = virtual.simBeyondWallS(handle) - before_s
    assert region_s > 0.2 and wall_s < 1.0                    # (a loaded host's wall time is allowed for below)
    assert region_s - wall_s <= beyond_s <= region_s            # the work, less the wall time it took; no wait
    drawn_j = (virtual.simWallEnergyMj(handle) - before_mj) / 1000
    assert drawn_j < 700 * (beyond_s + 1.0)                     # never more than the GPU can draw in that time


def test_work_declared_outside_a_measured_region_lengthens_the_sessions_total_too(virtual):
    """A test that launches GPU work and measures none of it: the GPU's busy time is what a real session
    would have spent, region or not."""
    handle = virtual.nvmlDeviceGetHandleByIndex(0)
    virtual.simUseDevices([0])
    wall_started = time.time()
    virtual.simBeginTest("test_unmeasured", [0])
    before_s = virtual.simBeyondWallS(handle)
    virtual.simCountCpuWork(False)
    started = virtual.simClock().now()
    virtual.simDeclareWork(COMPUTE_STEP)
    virtual.simSynchronize()
    busy_s = virtual.simClock().now() - started
    virtual.simBeginTest("next", [0])
    wall_s = time.time() - wall_started
    assert busy_s > 0.2 and wall_s < 1.0
    assert busy_s - wall_s <= virtual.simBeyondWallS(handle) - before_s <= busy_s      # the work, less its wall time


def test_a_limit_another_process_set_a_moment_ago_is_read_as_it_is_now(sim_state):
    """Two sessions on one GPU: one reads the limit (while the other's cap is on), the other puts it
    back, and the first, now holding the GPU, reads the limit to save for its own restore. A read from
    a copy cached for RECHECK_S (50 ms) saved the other's cap, restored it at the end and left the GPU
    at 250 W one run in eight (tests/test_faults.py); settings are read from the file, and the work's
    own reads look again when the process takes the GPU over."""
    first, second = SimulatedNvml(state_dir=sim_state), SimulatedNvml(state_dir=sim_state)
    for lib in (first, second):
        lib.nvmlInit()
    mine, theirs = first.nvmlDeviceGetHandleByIndex(0), second.nvmlDeviceGetHandleByIndex(0)
    second.nvmlDeviceSetPowerManagementLimit(theirs, 250_000)
    assert first.nvmlDeviceGetEnforcedPowerLimit(mine) == 250_000          # cached from here on
    second.nvmlDeviceSetPowerManagementLimit(theirs, 700_000)             # the other session's restore
    assert first.nvmlDeviceGetEnforcedPowerLimit(mine) == 700_000
    assert first.nvmlDeviceGetPowerManagementLimit(mine) == 700_000
    first.simUseDevices([])                                               # its test let the GPU go (state cached)
    second.nvmlDeviceSetPowerManagementLimit(theirs, 400_000)
    first.simUseDevices([0])                                              # a hand-over: the file is looked at again
    device = first.machine.devices[0]
    assert device.enforced_limit_mw(device.state_file.read()) == 400_000
