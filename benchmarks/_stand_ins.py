"""Stand-ins for the reference workloads on the GPU simulator: the same declared GPU work, no torch step.

On the simulator a reference workload's step declares its GPU work (``pytest_gpuenergy.sim.work``)
and the simulated GPU turns it into time and energy; the step's own torch work on the CPU plays no
part in the figures once work is declared. A benchmark that needs many simulated sessions of the
suite (``tune_accuracy.py --quick``) runs these stand-ins instead: a test module with the suite's
node ids (``reference_workloads/test_energy_suite.py::test_energy[<workload>-<mode>-<setting>]``, which
the simulator's noise is drawn from) and the suite's test body, whose step replays what one real
step declared, in order. The figures are then the suite's to the last digit
(``tests/test_benchmark_scripts.py`` checks one case), at a small part of the CPU.

What a real step declares is recorded here, not copied: each workload is built (tiny on the CPU,
declaring the full size's work, as the suite does by default) and stepped once with a recorder
registered as a simulator, after one warm-up step.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import _common as common

TEST_MODULE = '''"""Stand-ins for the reference workloads' steps, written by benchmarks/_stand_ins.py.

Each case has the suite's node id and its compute_bound; its step replays what one step of the real
workload declared to the GPU simulator (the full size's work, in order); the real step's torch work
on the CPU, which the simulator does not count once work is declared, is left out. The test body is
the suite's (reference_workloads/test_energy_suite.py).
"""

import json
import math

import pytest

from pytest_gpuenergy.sim import GpuWork
from pytest_gpuenergy.sim import work as sim_work

WORKLOADS = json.loads(%r)


class StandIn:
    def __init__(self, parts):
        self.parts = [(GpuWork(**part["work"]), None) if "work" in part else (None, part["host_s"]) for part in parts]

    def step(self):
        for work, host_s in self.parts:
            if work is not None:
                sim_work.declare_work(work)
            else:
                sim_work.declare_host_time(host_s)
        return 1.0


@pytest.fixture
def workload(request):
    built = StandIn(WORKLOADS[request.param]["parts"])
    built.step()  # untimed warm-up, as the suite's
    return built


CASES = [pytest.param(key, id=key, marks=pytest.mark.energy(compute_bound=entry["compute_bound"]))
         for key, entry in WORKLOADS.items()]


@pytest.mark.parametrize("workload", CASES, indirect=True)
def test_energy(workload, gpu_power_cap, gpu_clock_cap, energy_meter):
    result = energy_meter.measure(workload.step, warmup=1)
    assert result.ets_j > 0 and math.isfinite(result.ets_j)
    assert result.time_s > 0 and result.edp_js > 0
    assert math.isfinite(workload.step())
'''

# What a simulator is told, and how a stand-in's step says it again (``pytest_gpuenergy.sim.work``).
_REPLAYABLE = {"simDeclareWork": "work", "simHostTime": "host_s"}


class _Recorder:
    """Registered as a simulator (``sim.work.register``): keeps what a step declares, in order."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []

    def __getattr__(self, name: str) -> Any:
        if not name.startswith("sim"):
            raise AttributeError(name)
        return lambda *args, **keywords: self.calls.append((name, args, keywords))


def recorded_step(name: str, mode: str, build: Callable[..., Any] | None = None) -> list[dict[str, Any]]:
    """What one steady step of the reference workload ``name`` in ``mode`` declares to the simulator,
    in order: ``{"work": GpuWork's figures}`` or ``{"host_s": seconds}`` parts. ``build``:
    ``reference_workloads.build`` unless given."""
    from pytest_gpuenergy.sim import work as sim_work

    if build is None:
        from reference_workloads import build as suite_build

        build = suite_build
    workload = build(name, size="tiny", mode=mode, device="cpu", seed=0, sim_size="full")
    recorder = _Recorder()
    sim_work.register(recorder)
    try:
        workload.step()                 # the suite's warm-up step
        recorder.calls.clear()
        workload.step()
    finally:
        sim_work.unregister(recorder)
    parts = []
    for method, args, keywords in recorder.calls:
        if method not in _REPLAYABLE or len(args) != 1 or keywords:
            raise SystemExit(f"a {name} {mode} step tells the simulator {method}{args!r:.60}, which the stand-ins cannot say again: "
                             f"add it to benchmarks/_stand_ins.py (_REPLAYABLE and TEST_MODULE)")
        value = args[0]
        parts.append({"work": dataclasses.asdict(value)} if method == "simDeclareWork" else {"host_s": float(value)})
    if not any("work" in part for part in parts):
        raise SystemExit(f"a {name} {mode} step declared no GPU work: its stand-in would measure nothing")
    return parts


def write_suite(folder: Path, mode: str = "train", names: tuple[str, ...] | None = None) -> Path:
    """Write the stand-ins of the reference workloads' ``mode`` steps (all, or ``names``) under
    ``folder``; returns the folder to give pytest (``folder/reference_workloads``, so that node ids
    are the suite's). Run pytest from ``folder``: its ``pytest.ini`` makes it the rootdir."""
    import torch

    from reference_workloads import list_workloads

    torch.set_num_threads(1)           # as the suite on the CPU; the recording steps are tiny
    workloads = {f"{spec.name}-{mode}": {"compute_bound": spec.compute_bound, "parts": recorded_step(spec.name, mode)}
                 for spec in list_workloads() if mode in spec.modes and (names is None or spec.name in names)}
    suite = folder / "reference_workloads"
    suite.mkdir(parents=True, exist_ok=True)
    (suite / "test_energy_suite.py").write_text(TEST_MODULE % json.dumps(workloads), encoding="utf-8")
    # The repository's pytest settings (pyproject.toml's addopts), so that the sessions load the same plugins.
    (folder / "pytest.ini").write_text(f"[pytest]\naddopts = {' '.join(common.DEV_PLUGINS_OFF)}\n", encoding="utf-8")
    return suite
