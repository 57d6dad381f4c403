"""Caps always come back: after failures, interrupts, teardown errors, and a killed run."""

from __future__ import annotations

import json
import os
import textwrap

import pytest

from pytest_gpuenergy.sim.nvml import SimulatedNvml

from helpers import cli_in_process, gpu_info, run_cli


def set_sim_limit(watts: float, index: int = 0) -> None:
    """Start from a limit that is neither the default nor the maximum, like a tuned fleet."""
    lib = SimulatedNvml()
    lib.nvmlInit()
    lib.nvmlDeviceSetPowerManagementLimit(lib.nvmlDeviceGetHandleByIndex(index), int(watts * 1000))
    lib.nvmlShutdown()


CRASHING_TESTS = textwrap.dedent(
    """
    import os, signal, pytest

    def test_fails(gpu_power_cap):
        assert gpu_power_cap.enforced_w == 250.0
        assert False, "the workload broke"

    def test_interrupted(gpu_power_cap):
        raise KeyboardInterrupt

    @pytest.fixture
    def breaks_in_teardown():
        yield
        raise RuntimeError("teardown broke")

    def test_teardown_error(breaks_in_teardown, gpu_power_cap):
        pass

    @pytest.fixture
    def breaks_in_setup(gpu_power_cap):
        raise RuntimeError("setup broke")

    def test_setup_error(breaks_in_setup):
        pass

    def test_killed(gpu_power_cap):
        os.kill(os.getpid(), signal.SIGKILL)
    """
)


@pytest.mark.parametrize(
    ("test_name", "outcome"),
    [
        ("test_fails", "1 failed"),
        ("test_interrupted", "KeyboardInterrupt"),
        ("test_teardown_error", "1 error"),
        ("test_setup_error", "1 error"),
    ],
)
def test_the_previous_limit_comes_back_whatever_the_test_does(pytester, sim_state, test_name, outcome):
    set_sim_limit(550)
    pytester.makepyfile(test_crash=CRASHING_TESTS)
    result = pytester.runpytest("--gpu-caps=250", "-k", test_name, no_reraise_ctrlc=True)   # in process: the interrupt is its own
    assert outcome in result.stdout.str()
    assert gpu_info()[0]["current_limit_w"] == 550.0   # the exact previous limit, not the default
    assert not list((sim_state / "journal").glob("GPU-*.json"))


def test_a_killed_run_is_repaired_by_the_next_session_which_says_so(pytester, sim_state):
    """SIGKILL while capped (the OOM killer, kill -9): nothing of the session runs, the journal stays."""
    set_sim_limit(550)
    pytester.makepyfile(test_crash=CRASHING_TESTS)
    killed = pytester.runpytest_subprocess("--gpu-caps=250", "-k", "test_killed")
    assert killed.ret not in (0, 1)
    assert gpu_info()[0]["current_limit_w"] == 250.0     # left capped, as a real GPU would be
    assert list((sim_state / "journal").glob("GPU-*.json"))
    info_text = cli_in_process("info", "--gpu-backend=sim").stdout
    assert "journal: GPU 0" in info_text and "capped at 250 W by pid" in info_text

    pytester.makepyfile(test_ok="def test_ok():\n    pass\n")
    result = pytester.runpytest("test_ok.py")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines([
        "*repaired: GPU 0*capped at 250 W by pid*previous limit 550 W: restored to 550 W*",
        "gpuenergy: a run died with a GPU capped: GPU 0 (NVIDIA H100 80GB HBM3",
        "*restored to 550 W",
    ])
    assert gpu_info()[0]["current_limit_w"] == 550.0
    assert not list((sim_state / "journal").glob("GPU-*.json"))      # repaired once: the entry is gone


def test_gpuenergy_restore_repairs_a_killed_run(pytester):
    set_sim_limit(600)
    pytester.makepyfile(test_crash=CRASHING_TESTS)
    pytester.runpytest_subprocess("--gpu-caps=min", "-k", "test_killed")
    assert gpu_info()[0]["current_limit_w"] == 200.0
    restored = run_cli("restore", "--gpu-backend=sim")
    assert "restored: GPU 0" in restored.stdout and "restored to 600 W" in restored.stdout
    assert gpu_info()[0]["current_limit_w"] == 600.0
    again = cli_in_process("restore", "--gpu-backend=sim")
    assert "nothing to restore" in again.stdout


def test_restore_leaves_a_gpu_alone_that_someone_changed_since(pytester):
    pytester.makepyfile(test_crash=CRASHING_TESTS)
    pytester.runpytest_subprocess("--gpu-caps=min", "-k", "test_killed")
    set_sim_limit(450)   # an operator changed it after the crash
    restored = cli_in_process("restore", "--gpu-backend=sim")
    assert "changed-since" in restored.stdout and "left as it is" in restored.stdout
    assert gpu_info()[0]["current_limit_w"] == 450.0


def test_a_failing_restore_is_retried(pytester, monkeypatch):
    # The 2nd set (the restore) fails twice, then works: the retries get it back.
    monkeypatch.setenv("GPUENERGY_SIM_FAULTS", "set_error=2-3")
    pytester.makepyfile(test_a="def test_a(gpu_power_cap):\n    pass\n")
    pytester.runpytest("--gpu-caps=300").assert_outcomes(passed=1)
    monkeypatch.delenv("GPUENERGY_SIM_FAULTS")
    assert gpu_info()[0]["current_limit_w"] == 700.0


def test_a_restore_that_keeps_failing_is_named_loudly_with_the_fix(pytester, monkeypatch):
    monkeypatch.setenv("GPUENERGY_SIM_FAULTS", "set_error=2")
    pytester.makepyfile(test_a="def test_a(gpu_power_cap):\n    pass\n")
    result = pytester.runpytest("--gpu-caps=300")
    result.assert_outcomes(passed=1, errors=1)
    result.stdout.fnmatch_lines(["*GPU 0 (NVIDIA H100 80GB HBM3 (simulated)) could not be set back to 700 W*gpuenergy restore*"])
    monkeypatch.delenv("GPUENERGY_SIM_FAULTS")
    assert gpu_info()[0]["current_limit_w"] == 300.0
    cli_in_process("restore", "--gpu-backend=sim")
    assert gpu_info()[0]["current_limit_w"] == 700.0


def test_a_cap_that_does_not_take_effect_is_an_error(pytester, monkeypatch):
    monkeypatch.setenv("GPUENERGY_SIM_FAULTS", "set_ignored")
    pytester.makepyfile(test_a="def test_a(gpu_power_cap):\n    pass\n")
    result = pytester.runpytest("--gpu-caps=300")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*still has its limit at 700 W after a request for 300 W: the limit did not take effect*"])


def test_gpuenergy_info_json_has_the_fixed_keys(monkeypatch):
    monkeypatch.setenv("GPUENERGY_SIM_GPUS", "A100,T4")
    rows = json.loads(run_cli("info", "--json", "--gpu-backend=sim").stdout)    # the command, as scripts run it
    assert rows == gpu_info()                                                  # the tests' in-process reading
    fixed = {"index", "name", "uuid", "backend", "current_limit_w", "default_limit_w", "min_limit_w", "max_limit_w"}
    assert all(fixed <= set(row) for row in rows)
    assert [(r["index"], r["backend"], r["default_limit_w"], r["min_limit_w"], r["max_limit_w"]) for r in rows] == [
        (0, "sim", 400.0, 100.0, 400.0),
        (1, "sim", 70.0, 60.0, 70.0),
    ]
    assert all("simulated" in r["name"] for r in rows)


def test_cli_errors_are_one_line(sim_state):
    os.makedirs(sim_state, exist_ok=True)
    (sim_state / "machine.json").write_text("garbage")
    proc = run_cli("info", "--gpu-backend=sim", check=False)
    assert proc.returncode == 2
    assert proc.stderr.startswith("gpuenergy info: error: the GPU simulator cannot start")
    assert "Traceback" not in proc.stderr
