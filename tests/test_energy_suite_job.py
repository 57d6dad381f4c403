"""The main job, as the README's quick start runs it, and the budgets it checks against."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from reference_workloads import list_workloads  # noqa: E402
from reference_workloads.conftest import BUDGETS_FILE, applies, load_budgets  # noqa: E402

# The caps the suite runs at that each simulated model allows (a T4's range, 60-70 W, has no 60 or 80 %).
SIM_MODEL_CAPS = {"H100": ("60%", "80%", "100%"), "A100": ("60%", "80%", "100%"), "V100": ("60%", "80%", "100%"),
                  "T4": ("100%",)}


def main_job(tmp_path: Path, *args: str, seed: int | None = None, columns: int | None = None) -> subprocess.CompletedProcess:
    """``pytest reference_workloads ARGS`` in a fresh process, as the README runs it, on a private simulated GPU."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUENERGY_SIM")}
    if columns is not None:
        env["COLUMNS"] = str(columns)
    tmp_path.mkdir(parents=True, exist_ok=True)
    env["GPUENERGY_SIM_STATE"] = str(tmp_path / "sim-state")
    if seed is not None:
        env["GPUENERGY_SIM_SEED"] = str(seed)
    command = [sys.executable, "-m", "pytest", "reference_workloads", *args, "-p", "no:cacheprovider", "-p", "no:randomly"]
    return subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)


def saved_figures(storage: Path) -> dict[str, list[tuple[float, float]]]:
    from pytest_gpuenergy.runs.store import RunStore

    (document,) = RunStore(storage).runs()
    return {case.case_id: [(rep.ets_j, rep.time_s) for rep in case.repetitions] for case in document.cases}


def main_job_in_process(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, *args: str, seed: int) -> pytest.RunResult:
    """``pytest ARGS`` on the reference suite as a session in this process (torch is imported here
    already: 1.5 s less than a fresh interpreter), on the test's private simulated GPU (``sim_state``)
    with ``seed``. The suite's conftest makes torch single-threaded; this process gets its thread
    count back."""
    import torch

    monkeypatch.setenv("GPUENERGY_SIM_SEED", str(seed))
    threads = torch.get_num_threads()
    try:
        return pytester.runpytest_inprocess(*args, "-p", "no:randomly")
    finally:
        torch.set_num_threads(threads)


@pytest.mark.slow
def test_the_main_job_repeats_to_the_last_digit_with_one_seed_even_beside_a_busy_core(pytester, monkeypatch, tmp_path):
    """Declared work on a virtual clock: the host's load is no part of a simulated figure. The same
    cases with the same seed in two interpreters (this one, quiet; a fresh one beside a CPU hog: other
    hash seeds, other timings) give the same figures. A CNN's and an RNN's step (compute- and
    memory-bound) at two caps stand for the suite, which runs whole in the test below. Inference
    steps: a process's first training step imports torch's compiler for the optimiser (1.4 s of
    start-up here), and the steps' own CPU work is no part of a figure."""
    subset = ("-k", "vgg-infer or seq2seq-infer", "--gpu-caps=60%,100%", "--energy-save")
    quiet = main_job_in_process(pytester, monkeypatch, str(ROOT / "reference_workloads"), *subset,
                                f"--energy-storage={tmp_path / 'quiet-runs'}", seed=11)
    hog = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        busy = main_job(tmp_path / "busy", *subset, f"--energy-storage={tmp_path / 'busy-runs'}", seed=11)
    finally:
        hog.kill()
        hog.wait()
    assert quiet.ret == busy.returncode == 0, quiet.stdout.str()[-3000:] + busy.stdout[-3000:]
    assert "seed 11" in quiet.stdout.str() and "seed 11" in busy.stdout
    first, second = saved_figures(tmp_path / "quiet-runs"), saved_figures(tmp_path / "busy-runs")
    assert len(first) == 4 and first == second


@pytest.fixture(scope="module")
def readme_main_job(tmp_path_factory: pytest.TempPathFactory) -> tuple[subprocess.CompletedProcess, Path]:
    """The README's main job, once for the tests below: in an 80-column terminal, with seed 1 (one of
    the seeds the budgets were made with, so it repeats) and its run saved as a baseline."""
    where = tmp_path_factory.mktemp("main-job")
    storage = where / "runs"
    done = main_job(where, "--gpu-caps=60%,80%,100%", f"--energy-storage={storage}", "--energy-save", seed=1,
                    columns=80)
    return done, storage


@pytest.mark.slow
def test_the_main_job_passes_on_the_simulated_gpu(readme_main_job):
    done, storage = readme_main_job
    out = done.stdout
    cases = sum(len(spec.modes) for spec in list_workloads()) * 3
    assert done.returncode == 0, out[-4000:] + done.stderr[-2000:]
    assert f"{cases} passed" in out
    assert "backend sim: simulated GPUs" in out and "(sim): figures from the GPU simulator" in out
    lines = out.splitlines()
    header = next(line for line in lines if line.startswith("test "))
    assert header.split() == ["test", "60%", "80%", "100%"]           # one row per workload, caps across by value
    for spec in list_workloads():
        for mode in spec.modes:
            row = next(line for line in lines if line.startswith(f"{spec.name}-{mode} "))
            assert len(re.findall(r"\d [kmµ]?J\b", row)) == 3, row
    section = out.split(" gpu energy ")[-1].splitlines()[1:-1]        # the plugin's section, before the summary line
    # COLUMNS=80 in this job's environment: only a word longer than that (the saved run's path) overflows
    assert all(len(line) <= 80 or len(line.split()) == 1 for line in section), section
    assert any(line.strip().startswith(str(storage)) for line in section)
    assert len(saved_figures(storage)) == cases


def test_ten_percent_more_declared_work_fails_its_budget_and_the_gate(readme_main_job, pytester, monkeypatch):
    """Unchanged, the step passed its budget in the main job (seed 1); the same step doing 10 % more
    work goes over it, and the gate, against the main job's saved run, calls it a regression. (A
    pytest session in this process, where torch is imported already: the main job above is the
    README's command in a process of its own.)"""
    from reference_workloads import registry

    done, storage = readme_main_job
    assert done.returncode == 0, done.stdout[-3000:]
    counted = registry.counted_work
    monkeypatch.setattr(registry, "counted_work", lambda *args: counted(*args).scaled(1.10))
    case = ROOT / "reference_workloads" / "test_energy_suite.py"
    grown = main_job_in_process(pytester, monkeypatch, f"{case}::test_energy[memnet-infer-100%]",  # cheap, no optimiser
                                "--gpu-caps=100%", f"--energy-storage={storage}", "--energy-fail=ets:5%", seed=1)
    out = grown.stdout.str()
    assert grown.ret == pytest.ExitCode.TESTS_FAILED, out[-3000:]
    assert re.search(r"energy budget exceeded: ETS [\d.]+ J > budget [\d.]+ J \(\+[\d.]+ %\)", out), out[-3000:]
    assert "REGRESSION" in out and "memnet-infer" in out, out[-3000:]


def test_budgets_cover_every_workload_mode_and_cap_of_the_simulated_models():
    budgets = load_budgets()
    generations = json.loads(BUDGETS_FILE.read_text(encoding="utf-8"))["generations"]
    for entry in budgets:
        assert entry["ets"] > 0 and entry["edp"] > 0 and entry["time"] > 0
        # Every entry says how it was made; simulator budgets never match a real GPU's name, and
        # real-GPU budgets come from the full-size workloads measured on that GPU.
        (made,) = [g for g in generations if entry["gpu"] in g["gpus"] and g["size"] == entry["size"]]
        if "(simulated)" not in entry["gpu"]:
            assert entry["size"] == "full" and "--gpu-backend nvml" in made["generated_by"], entry
    for model, model_caps in SIM_MODEL_CAPS.items():
        for spec in list_workloads():
            for mode in spec.modes:
                # Simulated budgets are for the work the steps declare: the full-size configurations.
                caps = {e.get("cap") for e in budgets
                        if model in e["gpu"] and (e["workload"], e["mode"], e["size"]) == (spec.name, mode, "full")}
                assert {*model_caps, None} <= caps, (model, spec.name, mode, caps)


def test_real_gpu_budgets_never_gate_the_simulator_nor_simulated_ones_a_real_gpu():
    budgets = load_budgets()
    real = [e for e in budgets if "(simulated)" not in e["gpu"]]
    simulated = [e for e in budgets if "(simulated)" in e["gpu"]]
    assert real and simulated
    assert all(applies(e, False) and not applies(e, True) for e in real)
    assert all(applies(e, True) and not applies(e, False) for e in simulated)
