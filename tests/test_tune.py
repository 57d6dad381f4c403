"""``gpuenergy tune``: the search finds the optimum in at most 5 settings, and the command drives
ordinary pytest sessions whose run documents it reads."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from pytest_gpuenergy.runs.store import RunStore
from pytest_gpuenergy.sim.models import GPU_MODELS
from pytest_gpuenergy.sim.roofline import GpuWork, run_step
from pytest_gpuenergy.tune.search import best_setting, first_settings, next_setting

from helpers import cli_in_process, gpu_info


def search(curve: list[float], budget: int = 5) -> tuple[int, int]:
    """Run the search on a noise-free curve: (chosen index, settings measured)."""
    values: dict[int, float] = {}
    for planned in first_settings(len(curve)):
        for i in planned:
            values[i] = curve[i]
    while len(values) < budget:
        pick = next_setting(values, len(curve))
        if pick is None:
            break
        assert pick not in values
        values[pick] = curve[pick]
    return min(values, key=lambda i: (values[i], -i)), len(values)


def model_curve(model: str, work: GpuWork, metric: str) -> list[float]:
    spec = GPU_MODELS[model]
    caps, cap = [], spec.min_limit_w
    while cap < spec.max_limit_w:
        caps.append(cap)
        cap += 25
    caps.append(spec.max_limit_w)
    curve = []
    for limit in caps:
        step = run_step(spec, work, limit)
        curve.append(step.energy_j if metric == "ets" else step.energy_j * step.step_s)
    return curve


WORKS = [GpuWork(flops_tf32=f, bytes=b, kernels=k) for f in (1e11, 1e12, 5e12, 2e13)
         for b in (1e9, 2e10, 6e10, 2e11) for k in (10, 400)]


def test_on_the_simulators_curves_the_search_is_within_5_percent_in_5_settings():
    """192 curves (3 models, ETS and EDP, 32 kinds of step): what the README's search figures say."""
    errors = []
    for model in ("H100", "A100", "V100"):
        for metric in ("ets", "edp"):
            for work in WORKS:
                curve = model_curve(model, work, metric)
                chosen, measured = search(curve)
                assert measured <= 5
                errors.append(curve[chosen] / min(curve) - 1)
    assert sum(errors) / len(errors) <= 0.005
    assert max(errors) <= 0.05


def test_on_the_reference_workloads_every_curve_is_within_5_percent_in_5_settings():
    """Their declared work (reference_workloads/declared_work.json) on every model with an energy
    counter: 216 curves, with the H100's knee at 225 W, where a line through the lowest cap aims too far."""
    declared = json.loads((Path(__file__).parent.parent / "reference_workloads" / "declared_work.json").read_text())
    works = [GpuWork(**w) for kinds in declared["work"].values() for sizes in kinds.values() for w in sizes.values()]
    misses = []
    for model in ("H100", "A100", "V100"):
        for metric in ("ets", "edp"):
            for number, work in enumerate(works):
                curve = model_curve(model, work, metric)
                chosen, measured = search(curve)
                assert measured <= 5
                if curve[chosen] > 1.05 * min(curve):
                    misses.append((model, metric, number, curve.index(min(curve)), chosen))
    assert len(works) == 36 and misses == []


def test_the_search_starts_at_both_ends_then_the_golden_points_and_stops_when_the_bracket_is_tight():
    assert first_settings(21) == [[0, 20], [4, 7]]
    assert first_settings(2) == [[0, 1]]
    flat_low = {0: 1.0, 1: 2.0}                       # adjacent, best at an end: nothing left between
    assert next_setting(flat_low, 2) is None
    valley = {0: 10.0, 8: 3.0, 12: 4.0, 20: 9.0}
    assert 0 < next_setting(valley, 21) < 12


def test_the_answer_says_whether_neighbours_differ_beyond_the_noise():
    samples = {0: {"ets": [100.0, 101, 99], "time": [2.0, 2, 2]},
               5: {"ets": [80.0, 80.5, 79.5], "time": [2.5, 2.5, 2.5]},
               9: {"ets": [80.2, 80.9, 79.8], "time": [2.4, 2.4, 2.4]},
               20: {"ets": [120.0, 121, 119], "time": [1.0, 1, 1]}}
    found = best_setting(samples, "ets", default_index=20)
    assert found.index == 5 and found.saving_pct == pytest.approx(100 * (1 - 80 / 120))
    assert found.distinguishable is False and [n.index for n in found.neighbours if not n.worse] == [9]
    single = {i: {"ets": s["ets"][:1], "time": s["time"][:1]} for i, s in samples.items()}
    assert best_setting(single, "ets", default_index=20).distinguishable is None


TUNED = textwrap.dedent(
    """
    import pytest

    @pytest.mark.parametrize("kind", [
        pytest.param("compute", marks=pytest.mark.energy(work={"flops_tf32": 2e13, "bytes": 2e10, "kernels": 200})),
        pytest.param("memory", marks=pytest.mark.energy(work={"flops_tf32": 1e11, "bytes": 2e11, "kernels": 50})),
    ])
    def test_step(kind, gpu_power_cap, energy_meter):
        energy_meter.measure(lambda: None)
    """
)


@pytest.mark.slow
def test_gpuenergy_tune_finds_the_optimum_in_ordinary_runs(tmp_path):
    work_c, work_m = GpuWork(flops_tf32=2e13, bytes=2e10, kernels=200), GpuWork(flops_tf32=1e11, bytes=2e11, kernels=50)
    (tmp_path / "test_w.py").write_text(TUNED)
    done = subprocess.run(
        [sys.executable, "-m", "pytest_gpuenergy.cli", "tune", "test_w.py", "--objective=both", "--repeat=2",
         "--max-settings=5", "--json=out.json", "--html=tune.html", "--gpu-backend=sim", "--", "-p", "no:randomly"],  # everything after -- goes to pytest
        cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "200-700 W in 25 W steps" in done.stdout and "simulated" in done.stdout
    rows = json.loads((tmp_path / "out.json").read_text())
    assert {(r["test"].split("::")[-1], r["objective"]) for r in rows} == {
        ("test_step[compute]", "ets"), ("test_step[compute]", "edp"), ("test_step[memory]", "ets"),
        ("test_step[memory]", "edp")}
    for row in rows:
        work = work_c if "compute" in row["test"] else work_m
        curve = model_curve("H100", work, row["objective"])
        found = curve[int((row["setting"] - 200) / 25)]
        assert found / min(curve) - 1 <= 0.05, row
        assert row["settings_measured"] <= 10 and 700.0 in [float(k) for k in row["measured"]]
        assert row["distinguishable"] in (True, False)
    docs = RunStore(tmp_path / ".energy-tune").runs()
    assert docs and all(d.simulated for d in docs)       # ordinary run documents
    assert "<svg" in (tmp_path / "tune.html").read_text()
    assert "wrote out.json\nwrote tune.html\n" in done.stderr          # as compare and history say it
    assert gpu_info()[0]["current_limit_w"] == 700.0


def test_gpuenergy_tune_with_nothing_to_tune_is_a_one_line_error(tmp_path):
    (tmp_path / "test_plain.py").write_text("def test_plain():\n    pass\n")
    done = subprocess.run([sys.executable, "-m", "pytest_gpuenergy.cli", "tune", "test_plain.py", "--gpu-backend=sim"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert "gpuenergy tune: error: no measured case came back" in done.stderr and "Traceback" not in done.stderr


@pytest.mark.parametrize("flag", ["--html", "--json"])
def test_a_report_tune_cannot_write_is_said_before_any_session(tmp_path, monkeypatch, flag):
    """A mistyped report path is a one-line error at the start, not a traceback after every session."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "a-file").write_text("")
    (tmp_path / "test_w.py").write_text(TUNED)
    target = tmp_path / "a-file" / "report"
    done = cli_in_process("tune", "test_w.py", "--gpu-backend=sim", flag, str(target), check=False)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr == f"gpuenergy tune: error: {flag}: cannot write {target}: {tmp_path / 'a-file'} is not a folder\n"
    assert not (tmp_path / ".energy-tune").exists()                # no session ran


def test_a_storage_tune_cannot_save_in_is_said_before_any_session(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "test_w.py").write_text(TUNED)
    done = cli_in_process("tune", "test_w.py", "--gpu-backend=sim", "--storage", "test_w.py", check=False)
    assert done.returncode == 2 and "session" not in done.stderr
    assert done.stderr == "gpuenergy tune: error: --storage: cannot save runs in test_w.py: test_w.py is not a folder\n"


def test_a_parametrised_node_id_is_selected_by_its_test_and_the_start_of_its_id():
    """tune appends its setting to every id ([alexnet-train-60%]): the id a user copied from a plain
    run ([alexnet-train]) would name no test, so it becomes the test and a -k on the id's start."""
    from pytest_gpuenergy.cli.tune import select_parametrised

    suite = "reference_workloads/test_energy_suite.py::test_energy"
    assert select_parametrised([f"{suite}[alexnet-train]", f"{suite}[vgg-infer]", "tests/other.py"], ["-x"]) == (
        [suite, "tests/other.py"], ["-x", "-k", "test_energy[alexnet-train- or test_energy[vgg-infer-"])
    assert select_parametrised(["tests", f"{suite}"], []) == (["tests", suite], [])          # nothing to translate
    with pytest.raises(ValueError, match="put them in your -k expression"):
        select_parametrised([f"{suite}[alexnet-train]"], ["-k", "train"])
    with pytest.raises(ValueError, match="select this case with its test and -k"):
        select_parametrised([f"{suite}[a b]"], [])                                          # -k cannot spell a space


@pytest.mark.slow
def test_gpuenergy_tune_takes_a_parametrised_node_id_as_a_plain_run_names_it(tmp_path):
    (tmp_path / "test_w.py").write_text(TUNED)
    done = subprocess.run(
        [sys.executable, "-m", "pytest_gpuenergy.cli", "tune", "test_w.py::test_step[memory]", "--repeat=2",
         "--max-settings=3", "--json=out.json", "--gpu-backend=sim"],
        cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert [r["test"].split("::")[-1] for r in json.loads((tmp_path / "out.json").read_text())] == ["test_step[memory]"]
    mixed = subprocess.run(
        [sys.executable, "-m", "pytest_gpuenergy.cli", "tune", "test_w.py::test_step[memory]", "--", "-k", "step"],
        cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert mixed.returncode == 2 and mixed.stderr.count("\n") == 1 and "put them in your -k expression" in mixed.stderr
