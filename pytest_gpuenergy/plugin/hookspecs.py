"""Hooks a team's ``conftest.py`` (or plugin) can implement, as pytest-benchmark's nine do for it.

    def pytest_gpuenergy_update_machine_info(config, machine_info):
        machine_info["cluster"] = os.environ.get("SLURM_CLUSTER_NAME")

    def pytest_gpuenergy_update_run(config, run):
        run["options"]["team"] = "vision"

    def pytest_gpuenergy_result(config, case_id, result):
        dashboard.push(case_id, result.ets_j, result.ets_low_j, result.ets_high_j)
"""

from __future__ import annotations

from typing import Any

import pytest


def pytest_gpuenergy_update_machine_info(config: pytest.Config, machine_info: dict[str, Any]) -> None:
    """Add to (or change) the machine information saved with a run: host, GPUs, driver, CUDA, torch...
    Called once per session, on the process that saves (the controller under pytest-xdist)."""


def pytest_gpuenergy_update_run(config: pytest.Config, run: dict[str, Any]) -> None:
    """Change a run document (its JSON form, ``docs/run-format.md``) just before it is saved with
    ``--energy-save``; called once per document (one per GPU model). What is written must still be
    a valid document: the plugin checks it on every read."""


def pytest_gpuenergy_result(config: pytest.Config, case_id: str, result: Any) -> None:
    """A measured region's figures, as soon as they are worked out (``meter.results.EnergyResult``:
    ``ets_j``, ``ets_low_j``, ``ets_high_j``, ``time_s``, ``edp_js``, ``per_gpu``...), on the process
    that measured it (a pytest-xdist worker's results are called there, not on the controller)."""
