"""The wheel a user installs holds what the README promises: the plugin, the simulator and the
reference workloads with their budgets and declared work (`pytest --pyargs reference_workloads`)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_wheel_ships_the_reference_workloads_with_their_data(tmp_path):
    had_build = (ROOT / "build").exists()
    # The build backend of the dev install (pyproject's build-system requires): an isolated build would
    # install it again, 1.5 s; the README's install command builds the project isolated anyway.
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
                    "-w", str(tmp_path), str(ROOT)], check=True, capture_output=True, timeout=300)
    if not had_build:                                   # setuptools builds inside the source tree
        shutil.rmtree(ROOT / "build", ignore_errors=True)
    (wheel,) = tmp_path.glob("pytest_gpuenergy-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    expected = {"reference_workloads/test_energy_suite.py", "reference_workloads/conftest.py",
                "reference_workloads/budgets.json", "reference_workloads/declared_work.json",
                "reference_workloads/models/residual.py", "pytest_gpuenergy/plugin/hooks.py", "pytest_gpuenergy/sim/nvml.py"}
    assert expected <= names, sorted(expected - names)
    entry_points = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
    text = zipfile.ZipFile(wheel).read(entry_points).decode()
    assert "gpuenergy = pytest_gpuenergy.plugin.hooks" in text and "gpuenergy = pytest_gpuenergy.cli:main" in text


def test_the_command_loads_only_what_its_commands_need():
    """``gpuenergy`` starts in every shell that types it: the package exports its names lazily
    (``lazy.py``), and each command imports what it runs, so the parser (every ``gpuenergy --help``)
    leaves out the GPUs' libraries, the journal, the run store, the tuner, the meter, the comparison,
    the report writers, the fleet's driver, pytest, matplotlib and Ray (``benchmarks/startup.py``)."""
    code = "import sys, pytest_gpuenergy.cli.main; print('\\n'.join(sorted(sys.modules)))"
    loaded = set(subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True,
                                timeout=60).stdout.split())
    assert {"pytest_gpuenergy.cli.compare", "pytest_gpuenergy.cli.tune", "pytest_gpuenergy.fleet.cli"} <= loaded
    left_out = ("pytest_gpuenergy.gpu.device", "pytest_gpuenergy.gpu.journal", "pytest_gpuenergy.runs.store",
                "pytest_gpuenergy.tune.runner", "pytest_gpuenergy.reports.terminal",
                "pytest_gpuenergy.meter.energy_meter", "pytest_gpuenergy.gate.compare", "pytest_gpuenergy.reports.html",
                "pytest_gpuenergy.fleet.driver", "pytest", "matplotlib", "ray")
    assert not loaded.intersection(left_out), sorted(loaded.intersection(left_out))
    # The names the package exports still resolve, each from its own module.
    import pytest_gpuenergy
    from pytest_gpuenergy.meter import EnergyMeter
    assert pytest_gpuenergy.EnergyMeter is EnergyMeter and set(pytest_gpuenergy.__all__) <= set(dir(pytest_gpuenergy))


MODULES_AT_THE_END = """
import json, sys

def pytest_unconfigure(config):
    with open("modules.json", "w") as out:
        json.dump(sorted(m for m in sys.modules if m.startswith("pytest_gpuenergy")), out)
"""


def test_a_session_that_measures_nothing_loads_only_what_reads_its_options(pytester):
    """Installing the plugin enables it in every pytest session of the environment: one that measures
    nothing reads its options and looks for a journal a killed run left (``gpu.leftovers``), and loads
    neither the journal, the GPUs' libraries, the simulator nor the meter (each of those some
    milliseconds of every start: ``benchmarks/startup.py``). With a journal entry the session repairs the
    GPU (``test_clocks``: a killed run's clock lock put back by the next plain session)."""
    import json

    pytester.makeconftest(MODULES_AT_THE_END)
    pytester.makepyfile(test_plain="def test_one():\n    assert True\n")
    pytester.runpytest_subprocess("-p", "no:randomly").assert_outcomes(passed=1)
    loaded = set(json.loads((pytester.path / "modules.json").read_text()))
    assert {"pytest_gpuenergy.plugin.hooks", "pytest_gpuenergy.plugin.options", "pytest_gpuenergy.gpu.leftovers"} <= loaded
    heavy = {"pytest_gpuenergy.gpu.journal", "pytest_gpuenergy.gpu.device", "pytest_gpuenergy.sim.state",
             "pytest_gpuenergy.sim.models", "pytest_gpuenergy.sim.roofline", "pytest_gpuenergy.meter.results",
             "pytest_gpuenergy.meter.domains", "pytest_gpuenergy.host.recorder", "pytest_gpuenergy.plugin.session"}
    assert not loaded & heavy, sorted(loaded & heavy)
