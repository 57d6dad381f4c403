"""``gpuenergy fleet`` end to end on a real (local) Ray cluster with two simulated GPU models.

One Ray start for the whole module (it costs seconds): the cluster has fake GPUs labelled H100
and A100, as a fleet's nodes are labelled by Ray, and the fleet command connects to it from a
fresh process with ``--address`` as a user would to an existing cluster (which also ships the
project folder to the tasks through Ray, not through the filesystem). Two runs: a baseline of
both models, then a gated run in which the H100's work grew and the A100 task's Ray worker is
killed while a cap is applied. (The A100 gated against its own baseline: ``test_fleet.py``.)
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import ray

from pytest_gpuenergy.fleet.plan import LocalCluster
from pytest_gpuenergy.runs.store import RunStore

from helpers import gpu_info

SUITE = textwrap.dedent(
    """
    import os, signal, time
    from pathlib import Path
    import pytest

    MODEL = os.environ["GPUENERGY_SIM_GPUS"].split(",")[0]
    GROWTH = Path("h100-grows").exists() and MODEL == "H100"
    WORK = {"flops_tf32": 2e12 * (1.6 if GROWTH else 1.0), "bytes": 5e10, "kernels": 900}

    @pytest.mark.energy(work=WORK, repeat=3)
    def test_step(gpu_power_cap, energy_meter):
        energy_meter.measure(lambda: None, min_time_s=0.3)

    def test_dies_on_a100_when_told(gpu_power_cap):
        if Path("kill-a100").exists() and MODEL == "A100":
            Path(os.environ["GPUENERGY_SIM_STATE"], "killed-at-cap").write_text(str(gpu_power_cap.enforced_w))
            os.kill(os.getppid(), signal.SIGKILL)    # the Ray worker running this task: as if OOM-killed
            time.sleep(60)                           # SIGTERM from the dying parent ends this first
    """
)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory):
    """A local Ray cluster with 1 fake H100 and 1 fake A100; its workers see this folder as the sim state."""
    state = tmp_path_factory.mktemp("fleet-sim-state")
    saved = {k: os.environ.get(k) for k in ("GPUENERGY_SIM_STATE", "GPUENERGY_SIM_GPUS", "CUDA_VISIBLE_DEVICES")}
    os.environ["GPUENERGY_SIM_STATE"] = str(state)     # the raylet and its workers inherit it
    os.environ.pop("GPUENERGY_SIM_GPUS", None)
    local = LocalCluster(("H100", "A100"))
    # ray.init installs handlers of its own in this process and ray.shutdown leaves them: put this
    # process's back, for the tests that run after this one in it (tests/test_compat.py checks them).
    handlers = {number: signal.getsignal(number) for number in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)}
    ray.init(num_cpus=2, num_gpus=2, resources=local.ray_resources(), include_dashboard=False,
             logging_level="WARNING", log_to_driver=False)
    try:
        yield ray.get_runtime_context().gcs_address, state
    finally:
        ray.shutdown()
        for number, handler in handlers.items():
            signal.signal(number, handler)
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def fleet(project: Path, address: str, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "GPUENERGY_SIM_GPUS"}
    env.update(GPUENERGY_SIM_SEED="3", GPUENERGY_SIM_NOISE="0.002", COLUMNS="120")
    return subprocess.run(
        [sys.executable, "-m", "pytest_gpuenergy.cli", "fleet", "--address", address, "--simulate",
         "--progress-every", "2", "--", "test_suite.py", "--gpu-caps=60%,100%", "-p", "no:cacheprovider", *args],
        cwd=project, capture_output=True, text=True, timeout=300, env=env,
    )


@pytest.mark.slow
def test_a_fleet_run_gates_each_model_against_its_own_baseline_and_survives_a_killed_task(cluster, tmp_path):
    address, state = cluster
    project = tmp_path / "project"
    project.mkdir()
    (project / "test_suite.py").write_text(SUITE)
    store = RunStore(project / ".energy")

    # 1. The baseline: one run document per model, saved in the driver's storage folder.
    first = fleet(project, address, "--energy-save")
    assert first.returncode == 0, first.stdout + first.stderr
    assert "A100 x1 started on" in first.stdout and "H100 x1 started on" in first.stdout
    assert "complete: 2 of 2 GPU models ran" in first.stdout
    baselines = {doc.gpu_model: doc for doc in store.runs()}
    assert sorted(baselines) == ["NVIDIA A100-SXM4-40GB (simulated)", "NVIDIA H100 80GB HBM3 (simulated)"]
    assert all(len(doc.cases) == 2 and doc.options["fleet"]["complete"] for doc in baselines.values())

    # 2. The H100's work grew by 60 % and the A100 task's Ray worker is killed while a 60 % cap is
    #    applied: the H100 run is gated against the H100 baseline (a regression), the A100 is named
    #    with its node, the H100's results are kept, and the exit code says the run is incomplete.
    (project / "h100-grows").touch()
    (project / "kill-a100").touch()
    second = fleet(project, address, "--energy-fail=ets:5%", "--energy-save",
                   "--energy-json=report.json", "--energy-markdown=report.md")
    assert second.returncode == 3, second.stdout + second.stderr
    assert "A100: the task died on " in second.stderr and "WorkerCrashedError" in second.stderr
    assert ray.nodes()[0]["NodeManagerAddress"] in second.stderr          # the node is named
    assert "INCOMPLETE: 1 of 2 GPU models ran (H100); did not finish: A100" in second.stdout
    report = json.loads((project / "report.json").read_text())
    [comparison] = report["comparisons"]
    h100 = "NVIDIA H100 80GB HBM3 (simulated)"
    assert comparison["new_run"]["gpu_model"] == h100
    assert comparison["old_run"]["run_id"] == baselines[h100].run_id    # its own model's baseline
    assert comparison["failed"] and comparison["counts"]["regression"] == 2
    assert report["fleet"]["complete"] is False and report["fleet"]["missing"] == ["A100"]
    assert "INCOMPLETE" in (project / "report.md").read_text()
    latest_h100 = store.runs(gpu_model=h100)[-1]
    assert latest_h100.run_id != baselines[h100].run_id
    assert latest_h100.options["fleet"]["complete"] is False and latest_h100.options["fleet"]["missing"] == ["A100"]
    assert len(store.runs(gpu_model="NVIDIA A100-SXM4-40GB (simulated)")) == 1
    # The A100's session got SIGTERM from its dying worker and restored the cap it had applied.
    a100_state = state / "fleet" / "a100-x1"
    assert (a100_state / "killed-at-cap").exists()
    journal = a100_state / "journal"
    deadline = time.monotonic() + 60       # the restore runs in the orphaned session, after the driver has its answer
    while True:                            # (slow on a loaded host): wait for the limit itself, not only the journal
        gpu = sim_gpu(a100_state, "A100")
        if (gpu["current_limit_w"] == gpu["default_limit_w"] and not any(journal.glob("*.json"))) or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert float((a100_state / "killed-at-cap").read_text()) == pytest.approx(0.6 * gpu["default_limit_w"])
    assert gpu["current_limit_w"] == gpu["default_limit_w"]


def sim_gpu(state: Path, model: str) -> dict:
    """The row ``gpuenergy info --json`` prints for that task's simulated GPU (read in this process)."""
    with pytest.MonkeyPatch.context() as env:
        env.setenv("GPUENERGY_SIM_STATE", str(state))
        env.setenv("GPUENERGY_SIM_GPUS", model)
        return gpu_info()[0]
