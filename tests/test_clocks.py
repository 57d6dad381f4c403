"""SM clock caps, the second knob: typed values, the fixture, the simulator's locked clocks, and
that a clock lock always comes back (after the test, a SIGKILL, a failing reset)."""

from __future__ import annotations

import json
import textwrap

import pytest

from pytest_gpuenergy.errors import CapSyntaxError
from pytest_gpuenergy.gpu.clocks import ClockCapper, clock_journal_for
from pytest_gpuenergy.gpu.device import open_backend
from pytest_gpuenergy.gpu.specs import parse_clock, parse_clocks
from pytest_gpuenergy.sim.dvfs import WorkloadProfile, operating_point
from pytest_gpuenergy.sim.models import GPU_MODELS
from pytest_gpuenergy.sim.nvml import SimulatedNvml

from helpers import cli_in_process, gpu_info, read_lock

CLOCKED = textwrap.dedent(
    """
    import pytest

    @pytest.mark.energy(work={"flops_fp32": 2e13})
    def test_compute(gpu_clock_cap, energy_meter):
        energy_meter.measure(lambda: None, repeat=2)

    @pytest.mark.energy(work={"bytes": 2e12, "flops_fp32": 1e11})
    def test_memory(gpu_clock_cap, energy_meter):
        energy_meter.measure(lambda: None, repeat=2)
    """
)


def lock_now(index: int = 0):
    return gpu_info()[index]["sm_clock_lock_mhz"]


# -- what users type ----------------------------------------------------------------------------

def test_clock_caps_parse_to_labels_that_never_read_as_a_power_cap():
    assert [c.label for c in parse_clocks("1200,1600MHz,50%,max,100%")] == ["1200MHz", "1600MHz", "clk50%", "clkmax"]
    assert parse_clock("clk50%").resolve_mhz(1980) == 990.0
    assert parse_clock(" MAX ").resolve_mhz(1530) == 1530.0


@pytest.mark.parametrize("bad", ["", "fast", "0", "150%", "-5", "99999", "nan", "1e400", "50W"])
def test_a_bad_clock_cap_is_an_error_naming_it(bad):
    with pytest.raises(CapSyntaxError) as caught:
        parse_clocks(bad)
    assert "--gpu-clocks" in str(caught.value)
    assert "MHz (1200)" in str(caught.value) or "no clock cap given" in str(caught.value)


def test_bad_gpu_clocks_are_usage_errors(pytester):
    pytester.makepyfile(test_a="def test_a(gpu_clock_cap):\n    pass\n")
    result = pytester.runpytest("--gpu-clocks=1200,fast")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--gpu-clocks: 'fast' is not a clock cap; write MHz (1200)*"])
    empty = pytester.runpytest("--gpu-clocks=")
    assert empty.ret == pytest.ExitCode.USAGE_ERROR
    empty.stderr.fnmatch_lines(["*--gpu-clocks: no clock cap given*"])
    pytester.makeini("[pytest]\ngpu_clocks = 1200, often\n")
    assert pytester.runpytest().ret == pytest.ExitCode.USAGE_ERROR
    pytester.makepyfile(test_a="import pytest\n@pytest.mark.gpu_clocks(10**6)\ndef test_a(gpu_clock_cap):\n    pass\n")
    pytester.makeini("[pytest]\n")
    marked = pytester.runpytest()
    assert marked.ret == pytest.ExitCode.USAGE_ERROR
    marked.stderr.fnmatch_lines(["*test_a.py::test_a: gpu_clocks: '1000000' MHz is not a plausible SM clock*"])


# -- the simulator -----------------------------------------------------------------------------------

def test_a_locked_clock_bounds_the_governor():
    spec = GPU_MODELS["H100"]
    for c in (1.0, 0.5, 0.1):
        free = operating_point(spec, WorkloadProfile(c), 700.0)
        locked = operating_point(spec, WorkloadProfile(c), 700.0, 0.5)
        assert locked.sm_clock_fraction == 0.5
        assert locked.time_factor == pytest.approx(c / 0.5 + (1 - c))
        assert locked.busy_power_w < free.busy_power_w
    # a power limit below what the locked clock draws lowers the clock further
    both = operating_point(spec, WorkloadProfile(1.0), 200.0, 0.8)
    assert both.sm_clock_fraction < 0.8 and both.busy_power_w <= 200.0 + 1e-6


def test_the_simulated_nvml_locks_snaps_reads_and_resets():
    lib = SimulatedNvml()
    lib.nvmlInit()
    handle = lib.nvmlDeviceGetHandleByIndex(0)
    clocks = lib.nvmlDeviceGetSupportedGraphicsClocks(handle, lib.nvmlDeviceGetSupportedMemoryClocks(handle)[0])
    assert clocks[0] == 1980 and clocks[-1] == 210 and clocks == sorted(clocks, reverse=True)
    lib.nvmlDeviceSetGpuLockedClocks(handle, 210, 1000)
    assert lib.simGetGpuLockedClocks(handle) == (210, 990)     # snapped to a supported clock
    lib.simDeclareWork(__import__("pytest_gpuenergy.sim.roofline", fromlist=["GpuWork"]).GpuWork(flops_fp32=1e14))
    assert lib.nvmlDeviceGetClockInfo(handle, lib.NVML_CLOCK_SM) <= 990    # busy, under the lock
    with pytest.raises(lib.NVMLError_InvalidArgument):
        lib.nvmlDeviceSetGpuLockedClocks(handle, 1500, 1000)
    lib.nvmlDeviceResetGpuLockedClocks(handle)
    assert lib.simGetGpuLockedClocks(handle) is None
    lib.nvmlShutdown()


# -- the fixture, end to end -----------------------------------------------------------------------

def test_half_the_clock_slows_compute_bound_work_and_barely_memory_bound_work(pytester, sim_state):
    pytester.makepyfile(test_clocked=CLOCKED)
    result = pytester.runpytest("--gpu-clocks=50%,100%", "--energy-save", "--energy-storage=store")
    result.assert_outcomes(passed=4)
    result.stdout.fnmatch_lines(["*SM clock caps: clk50%, clk100%*"])
    times = {}
    for saved in (pytester.path / "store").rglob("*.json"):
        for case in json.loads(saved.read_text())["cases"]:
            times[case["case_id"].split("::")[1]] = (case["summary"]["time_s"], case["clock_cap"], case["sm_clock_cap_mhz"])
    compute = times["test_compute[clk50%]"][0] / times["test_compute[clk100%]"][0]
    memory = times["test_memory[clk50%]"][0] / times["test_memory[clk100%]"][0]
    assert compute >= 1.3, times
    assert memory < 1.1 and memory < compute - 0.5, times
    assert times["test_compute[clk50%]"][1:] == ("clk50%", 990.0)
    row = gpu_info()[0]
    assert row["sm_clock_locked"] is False and row["current_limit_w"] == 700.0     # every GPU reads as before
    assert not list((sim_state / "journal" / "clocks").glob("GPU-*.json"))


def test_both_knobs_run_over_the_cross_product_with_readable_ids(pytester):
    pytester.makepyfile(test_both=textwrap.dedent("""
        def test_both(gpu_power_cap, gpu_clock_cap):
            assert gpu_power_cap.enforced_w in (420.0, 700.0)
            assert gpu_clock_cap.enforced_mhz in (990, 1200)
            assert gpu_clock_cap.previous_lock_mhz is None
    """))
    result = pytester.runpytest("--gpu-caps=60%,100%", "--gpu-clocks=50%,1200", "-v")
    result.assert_outcomes(passed=4)
    for case in ("60%-clk50%", "60%-1200MHz", "100%-clk50%", "100%-1200MHz"):
        assert f"test_both[{case}] PASSED" in result.stdout.str()
    assert lock_now() is None and gpu_info()[0]["current_limit_w"] == 700.0


def test_the_marker_chooses_the_clocks_and_a_cap_below_the_lowest_clock_skips(pytester):
    pytester.makepyfile(test_m=textwrap.dedent("""
        import pytest

        @pytest.mark.gpu_clocks(100, "1500MHz")
        def test_m(gpu_clock_cap):
            assert gpu_clock_cap.enforced_mhz == 1500

        def test_untouched(gpu_clock_cap):
            assert gpu_clock_cap.label == "current" and gpu_clock_cap.enforced_mhz is None
    """))
    result = pytester.runpytest("-rs")
    result.assert_outcomes(passed=2, skipped=1)
    result.stdout.fnmatch_lines(["*clock cap 100MHz = 100 MHz is below the lowest SM clock*supports 210-1980 MHz*"])


def test_a_failing_lock_or_no_permission_is_a_clear_error_and_nothing_stays_locked(pytester, sim_state, monkeypatch):
    pytester.makepyfile(test_a="def test_a(gpu_clock_cap):\n    pass\n")
    monkeypatch.setenv("GPUENERGY_SIM_FAULTS", "no_permission")
    denied = pytester.runpytest("--gpu-clocks=1200")
    denied.assert_outcomes(errors=1)
    denied.stdout.fnmatch_lines(["*not allowed to lock the SM clock of GPU 0*drop --gpu-clocks*"])
    monkeypatch.setenv("GPUENERGY_SIM_FAULTS", "clock_set_error")
    failed = pytester.runpytest("--gpu-clocks=1200")
    failed.assert_outcomes(errors=1)
    failed.stdout.fnmatch_lines(["*locking the SM clock of GPU 0*failed: NVML: Unknown Error*"])
    monkeypatch.delenv("GPUENERGY_SIM_FAULTS")
    assert lock_now() is None and not list((sim_state / "journal" / "clocks").glob("GPU-*.json"))


def test_a_reset_that_keeps_failing_is_named_and_gpuenergy_restore_fixes_it(pytester, monkeypatch):
    monkeypatch.setenv("GPUENERGY_SIM_FAULTS", "clock_reset_error")
    pytester.makepyfile(test_a="def test_a(gpu_clock_cap):\n    pass\n")
    result = pytester.runpytest("--gpu-clocks=1200")
    result.assert_outcomes(passed=1, errors=1)
    result.stdout.fnmatch_lines(["*the SM clock of GPU 0*could not be set back to not locked*gpuenergy restore*"])
    monkeypatch.delenv("GPUENERGY_SIM_FAULTS")
    assert lock_now() == [210, 1200]
    restored = cli_in_process("restore", "--gpu-backend=sim")
    assert "restored: GPU 0" in restored.stdout and "restored to not locked" in restored.stdout
    assert lock_now() is None


KILLED = textwrap.dedent(
    """
    import os, signal

    def test_killed(gpu_clock_cap):
        os.kill(os.getpid(), signal.SIGKILL)
    """
)


def test_a_sigkilled_clock_capped_run_is_repaired_by_the_next_session(pytester):
    pytester.makepyfile(test_k=KILLED)
    killed = pytester.runpytest_subprocess("--gpu-clocks=50%")
    assert killed.ret not in (0, 1)
    assert lock_now() == [210, 990]                    # left locked, as a real GPU would be
    assert "SM clock locked at 210-990 MHz by pid" in cli_in_process("info", "--gpu-backend=sim").stdout
    pytester.makepyfile(test_k="def test_ok():\n    pass\n")
    result = pytester.runpytest()
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*repaired: GPU 0*SM clock locked at 210-990 MHz*restored to not locked*"])
    assert lock_now() is None


def test_gpuenergy_restore_repairs_a_sigkilled_clock_capped_run(pytester):
    pytester.makepyfile(test_k=KILLED.replace("(gpu_clock_cap)", "(gpu_power_cap, gpu_clock_cap)"))
    pytester.runpytest_subprocess("--gpu-clocks=1500", "--gpu-caps=300")
    assert lock_now() == [210, 1500] and gpu_info()[0]["current_limit_w"] == 300.0
    restored = cli_in_process("restore", "--gpu-backend=sim")
    assert "restored to not locked" in restored.stdout and "restored to 700 W" in restored.stdout
    assert lock_now() is None and gpu_info()[0]["current_limit_w"] == 700.0
    assert "nothing to restore" in cli_in_process("restore", "--gpu-backend=sim").stdout


def test_a_lock_a_dead_run_recorded_comes_back_not_the_dead_runs_cap():
    """An entry left by a dead run owns the state from before it: the next cap puts that back, also
    where the run was of an earlier version, which wrote its entries in another format."""
    backend = open_backend("sim")
    try:
        gpu = backend.all_gpus[0]
        gpu.nvml.nvmlDeviceSetGpuLockedClocks(gpu.handle, 210, 1200)     # the dead run's lock
        journal = clock_journal_for(backend)
        assert journal.folder == backend.state_dir / "journal" / "clocks"
        dead = {"gpu_uuid": gpu.uuid, "gpu_index": 0, "gpu_name": gpu.name, "previous_min_mhz": 210,
                "previous_max_mhz": 1500, "applied_min_mhz": 210, "applied_max_mhz": 1200, "pid": 2**31 - 2,
                "process_start": "gone", "host": "elsewhere", "written_at": 1.0, "format": "gpuenergy-clock-journal"}
        from pytest_gpuenergy.fileio import atomic_write_json, state_folder
        state_folder(journal.folder)
        atomic_write_json(journal.folder / f"{gpu.uuid}.json", dead)
        with ClockCapper([gpu], journal, backend.lock_folder) as capper:
            cap = capper.apply(parse_clock("50%"))
            assert cap.previous_lock_mhz == (210, 1500) and read_lock(gpu) == (True, (210, 990))
        assert read_lock(gpu) == (True, (210, 1500)) and journal.entries() == []
    finally:
        backend.close()


def test_gpuenergy_info_shows_the_clock_range_and_a_lock(monkeypatch):
    monkeypatch.setenv("GPUENERGY_SIM_GPUS", "H100,V100")
    lib = SimulatedNvml()
    lib.nvmlInit()
    lib.nvmlDeviceSetGpuLockedClocks(lib.nvmlDeviceGetHandleByIndex(1), 135, 1000)
    lib.nvmlShutdown()
    rows = gpu_info()
    assert [(r["sm_clock_min_mhz"], r["sm_clock_max_mhz"], r["sm_clock_locked"]) for r in rows] == [
        (210, 1980, False), (135, 1530, True)]
    assert {"index", "name", "uuid", "backend", "current_limit_w", "default_limit_w", "min_limit_w",
            "max_limit_w"} <= set(rows[0])
    text = cli_in_process("info", "--gpu-backend=sim").stdout
    assert "SM clock range 210-1980 MHz" in text and "LOCKED to 135-" in text


@pytest.mark.sim_gpus("H100,MI300X")
def test_on_a_mixed_node_a_clock_cap_needs_only_the_tests_own_gpu_to_support_it(pytester):
    """The clock knob takes the test's GPUs, as the power cap does, not the whole pool: a test on the
    H100 of an H100,MI300X node is clock-capped, not skipped for the MI300X it does not use."""
    pytester.makepyfile(test_a="def test_a(gpu_clock_cap):\n    assert gpu_clock_cap.label == 'clk50%'\n")
    result = pytester.runpytest("--gpu-clocks=50%", "-rs")
    result.assert_outcomes(passed=1)
    amd_only = pytester.runpytest("--gpu-clocks=50%", "--gpu-devices=1", "-rs")
    amd_only.assert_outcomes(skipped=1)
    amd_only.stdout.fnmatch_lines(["*SM clock caps are not supported on GPU 1 (AMD Instinct MI300X*"])
