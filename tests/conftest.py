"""Shared helpers for the plugin's own tests.

Every test that touches a simulated GPU gets a fresh state folder, so tests never see each
other's limits or energy counters, and never touch the user's own simulated machine.
"""

from __future__ import annotations

import inspect
import json
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

SIM_ENV = ("GPUENERGY_SIM_STATE", "GPUENERGY_SIM_GPUS", "GPUENERGY_SIM_FAULTS", "GPUENERGY_SIM_NOISE", "GPUENERGY_SIM_SEED",
           "GPUENERGY_SIM_COUNTER_READ_MS", "GPUENERGY_SIM_CLOCK")


@pytest.fixture
def sim_state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private simulated machine (one H100 unless a test sets GPUENERGY_SIM_GPUS)."""
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


def gpu_info(*extra: str) -> list[dict]:
    """``gpuenergy info --json --gpu-backend=sim``, parsed."""
    return json.loads(run_cli("info", "--json", "--gpu-backend=sim", *extra).stdout)


def spin(seconds: float) -> None:
    """``seconds`` of CPU time: on the simulator, CPU work nobody declared runs as GPU work."""
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass


def spin_source() -> str:
    """Source of :func:`spin` for test files written by pytester: the one definition, reused."""
    return "import time\n" + inspect.getsource(spin)
