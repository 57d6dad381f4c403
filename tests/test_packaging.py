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
