"""The energy suite's settings: which size of the workloads to run, and on which device.

``pytest reference_workloads --gpu-caps=60%,80%,100%`` is the project's main job: every reference
workload, in training and inference mode, at every cap, on the simulated GPU where there is no
real one. ``--workload-size=full`` runs the papers' configurations (for a real GPU).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

BUDGETS_FILE = Path(__file__).with_name("budgets.json")


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("reference workloads")
    group.addoption("--workload-size", dest="workload_size", default=None, choices=("tiny", "full"),
                    help="tiny (CPU seconds, the default) or full (the papers' configurations, for a GPU)")
    group.addoption("--workload-device", dest="workload_device", default=None,
                    help="torch device to run on (default: cuda where available, else cpu)")
    group.addoption("--workload-sim-size", dest="workload_sim_size", default=None, choices=("tiny", "full"),
                    help="on the GPU simulator, whose GPU work a step declares: full (default: the papers' "
                         "configurations, whatever size the CPU runs) or tiny")
    parser.addini("workload_size", "default for --workload-size")
    parser.addini("workload_device", "default for --workload-device")
    parser.addini("workload_sim_size", "default for --workload-sim-size")


def _setting(config: pytest.Config, name: str, default: str) -> str:
    return config.getoption(name) or config.getini(name) or default


def _size_setting(config: pytest.Config, name: str, default: str) -> str:
    size = _setting(config, name, default)
    if size not in ("tiny", "full"):
        raise pytest.UsageError(f"{name} = {size!r}: choose tiny or full")
    return size


@pytest.fixture(scope="session")
def workload_size(pytestconfig: pytest.Config) -> str:
    return _size_setting(pytestconfig, "workload_size", "tiny")


@pytest.fixture(scope="session")
def workload_sim_size(pytestconfig: pytest.Config) -> str:
    """On the simulator: the size whose GPU work the steps declare (full by default)."""
    return _size_setting(pytestconfig, "workload_sim_size", "full")


@pytest.fixture(scope="session")
def workload_device(pytestconfig: pytest.Config) -> str:
    """The torch device; on the CPU, torch runs single-threaded for the whole suite.

    On the CPU the steps declare their GPU work to the simulator, so the host's speed plays no
    part in the figures; one intra-op thread keeps a step's CPU cost down on a small shared
    machine (two threads spin-wait at every barrier beside a busy neighbour), and the tiny sizes
    gain nothing from a second one.
    """
    import torch

    device = _setting(pytestconfig, "workload_device", "cuda" if torch.cuda.is_available() else "cpu")
    if torch.device(device).type == "cpu":
        torch.set_num_threads(1)
    return device


def load_budgets(path: Path = BUDGETS_FILE) -> list[dict]:
    """The budgets file's entries (see make_budgets.py, which writes it)."""
    data = json.loads(path.read_text(encoding="utf-8"))
    if data.get("format") != "pytest-gpuenergy-budgets" or data.get("version") != 1:
        raise pytest.UsageError(f"{path} is not a version 1 budgets file: regenerate it with make_budgets.py")
    return data["budgets"]


def applies(entry: dict, simulated: bool | None) -> bool:
    """Whether a budgets-file entry may gate this session's GPUs.

    A budget marker's ``gpu`` matches a substring of the GPU's name, and a real model's name is
    part of its simulated twin's ("NVIDIA H100 80GB HBM3 (simulated)"): entries measured on a
    real GPU must not gate the simulator, nor simulated ones a real GPU.
    """
    return simulated is None or ("(simulated)" in entry["gpu"]) == simulated


def _session_simulated(config: pytest.Config) -> bool | None:
    """Whether the session's GPUs are simulated (opening them now, during collection); None where
    they cannot be opened (the tests that use them then say why)."""
    from pytest_gpuenergy.plugin.state import started_session

    session = started_session(config)
    backend = session.backend if session is not None else None
    return backend.simulated if backend is not None else None


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Give each suite case the energy budgets recorded for its workload, mode and size: on the
    simulator the size whose work the steps declare (``--workload-sim-size``), on a real GPU the
    size that runs."""
    simulated = _session_simulated(config)
    size = _setting(config, "workload_sim_size" if simulated else "workload_size", "full" if simulated else "tiny")
    budgets = [e for e in load_budgets() if applies(e, simulated)] if BUDGETS_FILE.exists() else []
    for item in items:
        case = getattr(item, "callspec", None)
        workload = case.params.get("workload") if case is not None else None
        if not isinstance(workload, tuple):
            continue
        name, mode = workload
        for entry in budgets:
            if (entry["workload"], entry["mode"], entry["size"]) == (name, mode, size):
                limits = {k: entry[k] for k in ("ets", "edp", "time") if entry.get(k) is not None}
                item.add_marker(pytest.mark.energy_budget(gpu=entry["gpu"], cap=entry.get("cap"), **limits))
