"""The energy suite: every reference workload, in training and inference mode, at every cap.

Each case builds the workload, runs one untimed warm-up step (the first step in a process pays
for one-off start-up), and measures the energy of its steps with ``energy_meter.measure``: the
figures are per step. Budgets per GPU model and cap come from ``budgets.json``. On the GPU
simulator every step declares its GPU work (the papers' full-size configurations by default, see
``--workload-sim-size``), so the simulated figures repeat on any host.
"""

from __future__ import annotations

import math

import pytest

from reference_workloads import build, list_workloads

CASES = [
    pytest.param((spec.name, mode), id=f"{spec.name}-{mode}",
                 marks=pytest.mark.energy(compute_bound=spec.compute_bound))
    for spec in list_workloads()
    for mode in spec.modes
]


@pytest.fixture
def workload(request: pytest.FixtureRequest, workload_size: str, workload_device: str, workload_sim_size: str):
    name, mode = request.param
    built = build(name, size=workload_size, mode=mode, device=workload_device, seed=0, sim_size=workload_sim_size)
    built.step()  # untimed warm-up, outside every measurement
    return built


@pytest.mark.parametrize("workload", CASES, indirect=True)
def test_energy(workload, gpu_power_cap, gpu_clock_cap, energy_meter):
    result = energy_meter.measure(workload.step, warmup=1)
    assert result.ets_j > 0 and math.isfinite(result.ets_j)
    assert result.time_s > 0 and result.edp_js > 0
    assert math.isfinite(workload.step())
