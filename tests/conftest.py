"""Shared helpers for the plugin's own tests.

Every test that touches a simulated GPU gets a fresh state folder, so tests never see each
other's limits or energy counters, and never touch the user's own simulated machine.
"""

from __future__ import annotations

import contextlib
import inspect
import io
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

# The plugin's own tests never touch a real GPU, even on a machine that has one: many of them set
# power caps, and `auto` would pick NVML there. A test that wants NVML says --gpu-backend=nvml (and
# stands the simulator in for the library, see test_plugin_core.py).
os.environ["GPUENERGY_BACKEND"] = "sim"
os.environ["GPUENERGY_STRICT_ESTIMATES"] = "1"    # an estimate outside its own bound stops the test

# Every pytest these tests start (pytester's, `gpuenergy tune`'s, the fleet's, torchrun's) would load
# hypothesis's pytest plugin, which imports all of hypothesis: 0.5 s of a 0.9 s start, paid by each of
# the suite's ~200 child sessions and xdist workers. The sessions under test never use hypothesis
# (only test_fuzz_inputs.py does, in this process), so their pytest leaves it out. The same goes for
# the plugins the compatibility matrix (test_compat.py) tries the plugin beside: installed for it,
# they would reorder (randomly), warn (asyncio) or print (benchmark) in every other child session;
# each test of the matrix turns on the one it tries.
COMPAT_PLUGINS = ("randomly", "asyncio", "benchmark", "pytest_cov", "rerunfailures", "repeat")
CHILD_PYTEST_ADDOPTS = " ".join(f"-p no:{name}" for name in ("hypothesispytest", *COMPAT_PLUGINS))
os.environ["PYTEST_ADDOPTS"] = f"{os.environ.get('PYTEST_ADDOPTS', '')} {CHILD_PYTEST_ADDOPTS}".strip()


@pytest.fixture
def pytester(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    """pytest's own fixture, whose sessions also leave hypothesis out (pytester clears PYTEST_ADDOPTS)."""
    monkeypatch.setenv("PYTEST_ADDOPTS", CHILD_PYTEST_ADDOPTS)
    return pytester

SIM_ENV = ("GPUENERGY_SIM_STATE", "GPUENERGY_SIM_GPUS", "GPUENERGY_SIM_FAULTS", "GPUENERGY_SIM_NOISE", "GPUENERGY_SIM_SEED",
           "GPUENERGY_SIM_COUNTER_READ_MS", "GPUENERGY_SIM_CLOCK")


@pytest.fixture(autouse=True)
def sim_state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private simulated machine for every test (one H100 unless a test sets GPUENERGY_SIM_GPUS):
    no test sees another's GPUs, limits, journal or locks, whatever order or worker runs them.
    A test asks for it by name only to use its path."""
    for name in SIM_ENV:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    state = tmp_path / "sim-state"
    monkeypatch.setenv("GPUENERGY_SIM_STATE", str(state))
    monkeypatch.setenv("GPUENERGY_SIM_SEED", "0")     # the default noise, the same draws in every run
    return state


def run_cli(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    """Run the ``gpuenergy`` command as a user would, in a fresh process."""
    proc = subprocess.run(
        [sys.executable, "-m", "pytest_gpuenergy.cli", *args], capture_output=True, text=True, timeout=60
    )
    if check and proc.returncode != 0:
        raise AssertionError(f"gpuenergy {' '.join(args)} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}")
    return proc


def cli_in_process(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    """``gpuenergy ARGS`` run by its ``main`` in this process: what it prints and returns, as
    :func:`run_cli` gives it, without a process start. For checks of what a command does to the
    GPUs' state or says about it; :func:`run_cli` where the process itself is under test (its exit
    status as a script sees it, the entry point, a fresh interpreter)."""
    from pytest_gpuenergy.cli.main import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(list(args))
        except SystemExit as stop:          # argparse's usage errors
            code = stop.code if isinstance(stop.code, int) else 2
    done = subprocess.CompletedProcess(["gpuenergy", *args], code, out.getvalue(), err.getvalue())
    if check and code != 0:
        raise AssertionError(f"gpuenergy {' '.join(args)} exited {code}:\n{done.stdout}\n{done.stderr}")
    return done


def gpu_info() -> list[dict]:
    """The rows ``gpuenergy info --json --gpu-backend=sim`` prints, read in this process.

    The same function builds them as the command does, from a backend opened and closed here: a
    check of a GPU's state costs no process start (the command itself is tested on its own).
    """
    from pytest_gpuenergy.cli.main import gpu_rows
    from pytest_gpuenergy.gpu.device import open_backend

    backend = open_backend("sim")
    try:
        return gpu_rows(backend)
    finally:
        backend.close()


def spin(seconds: float) -> None:
    """``seconds`` of CPU time: on the simulator, CPU work nobody declared runs as GPU work."""
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass


def declare(seconds: float) -> None:
    """Declare GPU work that takes ``seconds`` on a simulated H100 at its default limit and full clocks.

    It moves the simulator's virtual clock without costing the host any CPU time: for tests of
    what the meter makes of GPU work, where spinning the CPU (the stand-in for undeclared work,
    :func:`spin`) would only cost the suite time.
    """
    from pytest_gpuenergy.sim import declare_work
    from pytest_gpuenergy.sim.models import GPU_MODELS
    from pytest_gpuenergy.sim.roofline import GpuWork, run_step

    spec, unit = GPU_MODELS["H100"], GpuWork(flops_tf32=1e12)
    declare_work(unit.scaled(seconds / run_step(spec, unit, spec.default_limit_w).step_s))


def spin_source() -> str:
    """Source of :func:`spin` for test files written by pytester: the one definition, reused."""
    return "import time\n" + inspect.getsource(spin)


def declare_source() -> str:
    """Source of :func:`declare` for test files written by pytester: the one definition, reused."""
    return inspect.getsource(declare)
