"""Fixtures for the plugin's own tests (their helper functions are in ``helpers.py``).

Every test gets a fresh simulated machine, so tests never see each other's limits or energy
counters, and never touch the user's own simulated machine.
"""

from __future__ import annotations

import importlib
import os
import pkgutil
from collections.abc import Iterator
from pathlib import Path

import pytest

import pytest_gpuenergy
from pytest_gpuenergy.gpu.device import Backend, Gpu, open_backend

from helpers import CHILD_PYTEST_ADDOPTS


def _import_before_any_test() -> None:
    """Import every module of the plugin, and the process pool's, before any test runs.

    An in-process pytester run forgets the modules first imported inside it, while the package that
    holds one keeps it as an attribute: a later import makes a second copy, and the test and the code
    it calls then hold different ones. Whatever ran before decided which: the simulator's work
    registry (``declare_work`` in tests/test_shards.py reached a stale one after
    tests/test_damaged_inputs.py), ``history.series`` (a test's ``monkeypatch`` of it missed the
    command it ran) and ``concurrent.futures.process`` (first imported by torch or Ray inside a
    session of the reference workloads or the fleet; a process pool then failed to pickle its own
    call items: ``gpuenergy history`` after tests/test_energy_suite_job.py). Imported here, every
    module is one object for the whole session, whatever order the tests run in.
    """
    import concurrent.futures.process  # noqa: F401

    for module in pkgutil.walk_packages(pytest_gpuenergy.__path__, "pytest_gpuenergy."):
        if not module.name.endswith(".__main__"):        # (running it is the command itself)
            importlib.import_module(module.name)


_import_before_any_test()

# The plugin's own tests never touch a real GPU, even on a machine that has one: many of them set
# power caps, and `auto` would pick NVML there. A test that wants NVML says --gpu-backend=nvml (and
# stands the simulator in for the library, see test_plugin_core.py).
os.environ["GPUENERGY_BACKEND"] = "sim"
os.environ["GPUENERGY_STRICT_ESTIMATES"] = "1"    # an estimate outside its own bound stops the test

os.environ["PYTEST_ADDOPTS"] = f"{os.environ.get('PYTEST_ADDOPTS', '')} {CHILD_PYTEST_ADDOPTS}".strip()

# Every pytest or gpuenergy process a test starts imports the plugin afresh. Where
# PYTHONDONTWRITEBYTECODE is set (this project's development and CI machines), each one compiled and
# assertion-rewrote the plugin's ~80 modules again: about 1.5 s of a 2.5 s child session on 2
# cores. The children may write their bytecode (into __pycache__, which git ignores), so that the
# first compiles it and the others read it.
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)


@pytest.fixture
def pytester(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    """pytest's own fixture, whose sessions also leave hypothesis out (pytester clears PYTEST_ADDOPTS)."""
    monkeypatch.setenv("PYTEST_ADDOPTS", CHILD_PYTEST_ADDOPTS)
    return pytester


SIM_ENV = ("GPUENERGY_SIM_STATE", "GPUENERGY_SIM_GPUS", "GPUENERGY_SIM_FAULTS", "GPUENERGY_SIM_NOISE", "GPUENERGY_SIM_SEED",
           "GPUENERGY_SIM_COUNTER_READ_MS", "GPUENERGY_SIM_CLOCK", "GPUENERGY_POWERCAP_ROOT",
           "GPUENERGY_SIM_POWERCAP_RANGE_UJ", "GPUENERGY_SIM_POWERCAP_FAULT")


@pytest.fixture(autouse=True)
def sim_state(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private simulated machine for every test: no test sees another's GPUs, limits, journal or
    locks, whatever order or worker runs them. One H100, unless the test is marked
    ``@pytest.mark.sim_gpus("H100,V100")`` or sets GPUENERGY_SIM_GPUS itself.
    A test asks for it by name only to use its path."""
    for name in SIM_ENV:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    state = tmp_path / "sim-state"
    monkeypatch.setenv("GPUENERGY_SIM_STATE", str(state))
    monkeypatch.setenv("GPUENERGY_SIM_SEED", "0")     # the default noise, the same draws in every run
    if (gpus := request.node.get_closest_marker("sim_gpus")) is not None:
        monkeypatch.setenv("GPUENERGY_SIM_GPUS", gpus.args[0])
    return state


@pytest.fixture
def backend(sim_state: Path) -> Iterator[Backend]:
    """The simulated machine opened in this process, as the plugin opens it (closed after the test)."""
    opened = open_backend("sim")
    yield opened
    opened.close()


@pytest.fixture
def wall_backend(sim_state: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Backend]:
    """The same machine on the host's clock (``GPUENERGY_SIM_CLOCK=wall``): a recorder's thread runs
    in real time there, as on a real GPU."""
    monkeypatch.setenv("GPUENERGY_SIM_CLOCK", "wall")
    opened = open_backend("sim")
    yield opened
    opened.close()


@pytest.fixture
def h100(backend: Backend) -> Gpu:
    """The simulated machine's first GPU (an H100 unless the test says otherwise)."""
    return backend.all_gpus[0]


@pytest.fixture
def v100(backend: Backend) -> Gpu:
    """The second GPU of a machine marked ``@pytest.mark.sim_gpus("H100,V100")``."""
    return backend.all_gpus[1]
