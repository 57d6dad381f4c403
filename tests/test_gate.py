"""Baselines and the CI gate, end to end: save, compare, fail on a regression and not on noise."""

from __future__ import annotations

import json
import textwrap

import pytest

from pytest_gpuenergy.runs.store import RunStore

from helpers import cli_in_process, declared_suite


def suite(work_s: float) -> str:
    """Two tests whose calls declare their GPU work (``work_s`` of a compute-bound step on an H100 at
    full power): the simulator's virtual clock runs it, so the suite costs no real CPU time."""
    return declared_suite(work_s * 4e14)


@pytest.fixture
def noisy(sim_state, monkeypatch):
    monkeypatch.setenv("GPUENERGY_SIM_NOISE", "0.02")
    return sim_state


ARGS = ("--gpu-caps=60%,100%", "--energy-repeat=5", "-p", "no:randomly")


def saved_runs(pytester) -> list:
    return RunStore(pytester.path / ".energy").runs()


def test_an_unchanged_run_is_noise_and_30_percent_more_work_is_a_regression(pytester, noisy, monkeypatch):
    pytester.makepyfile(test_suite=suite(0.01))
    monkeypatch.setenv("GPUENERGY_SIM_SEED", "1")
    pytester.runpytest(*ARGS, "--energy-save").assert_outcomes(passed=4)
    (baseline,) = saved_runs(pytester)
    assert baseline.simulated and len(baseline.cases) == 4 and all(len(c.repetitions) == 5 for c in baseline.cases)

    monkeypatch.setenv("GPUENERGY_SIM_SEED", "2")
    same = pytester.runpytest(*ARGS, "--energy-compare", "--energy-fail=ets:5%")
    same.assert_outcomes(passed=4)
    assert same.ret == pytest.ExitCode.OK
    same.stdout.fnmatch_lines(["passed: 0 regressed, 0 improved, *", "*gate: regression when ETS > 5 %*"])
    assert "results table" not in same.stdout.str() and "ETS per call" not in same.stdout.str()   # no second table

    pytester.makepyfile(test_suite=suite(0.013))   # 30 % more work per call in test_train
    monkeypatch.setenv("GPUENERGY_SIM_SEED", "3")
    worse = pytester.runpytest(*ARGS, "--energy-compare", "--energy-fail=ets:5%")
    assert worse.ret == pytest.ExitCode.TESTS_FAILED
    worse.assert_outcomes(passed=4)                # the tests themselves passed: the gate failed
    worse.stdout.fnmatch_lines(["FAILED: * regressed, *", "verdict *", "REGRESSION  test_train  *", "*= 4 passed*"])
    regressions = [line for line in worse.stdout.lines if line.startswith("ENERGY REGRESSION")]
    regressed = {line.split()[2] for line in regressions}
    assert regressed and regressed <= {"test_suite.py::test_train[100%]", "test_suite.py::test_train[60%]"}
    assert all(" on GPU 0: ETS +" in line for line in regressions)
    assert "Traceback" not in worse.stdout.str()


def test_a_case_without_baseline_is_new_and_compare_alone_never_fails(pytester):
    pytester.makepyfile(test_suite=suite(0.01))
    result = pytester.runpytest("--gpu-caps=100%", "--energy-compare")
    assert result.ret == pytest.ExitCode.OK
    flat = " ".join(result.stdout.str().split())     # the terminal's width wraps the note
    assert "no saved run for NVIDIA H100 80GB HBM3 (simulated) (sim)" in flat and "every case is new" in flat


@pytest.mark.slow
def test_reports_and_the_ci_job_summary(pytester, monkeypatch):
    summary = pytester.path / "step-summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    pytester.makepyfile(test_suite=suite(0.01))
    pytester.runpytest("--gpu-caps=60%,100%", "--energy-save").assert_outcomes(passed=4)
    result = pytester.runpytest(
        "--gpu-caps=60%,100%", "--energy-compare", "--energy-markdown=r.md", "--energy-html=r.html",
        "--energy-json=r.json", "--junitxml=junit.xml",
    )
    result.assert_outcomes(passed=4)
    assert "simulated" in (pytester.path / "r.md").read_text().lower()
    html = (pytester.path / "r.html").read_text()
    assert "<svg" in html and "SIMULATED" in html.upper() and "http://" not in html and "https://" not in html
    data = json.loads((pytester.path / "r.json").read_text())
    assert data["comparisons"][0]["cases"]
    assert summary.read_text().count("simulated") >= 1
    junit = (pytester.path / "junit.xml").read_text()
    assert 'name="energy.gpu0.ets_j"' in junit and 'name="energy.gpu0.simulated" value="True"' in junit


@pytest.mark.slow
def test_xdist_gives_the_same_cases_as_a_single_process(pytester):
    pytest.importorskip("xdist")
    pytester.makepyfile(test_suite=suite(0.01) + textwrap.dedent(
        """
        @pytest.mark.parametrize("n", range(3))
        @pytest.mark.energy(work={"flops_tf32": 5e13, "bytes": 1e9, "kernels": 100})
        def test_more(gpu_power_cap, energy_meter, n):
            with energy_meter:
                step()
        """
    ))
    serial = pytester.runpytest("--gpu-caps=60%,100%", "--energy-save", "--energy-storage=serial")
    serial.assert_outcomes(passed=10)
    parallel = pytester.runpytest_subprocess("-n", "2", "--gpu-caps=60%,100%", "--energy-save", "--energy-storage=parallel")
    parallel.assert_outcomes(passed=10)
    parallel.stdout.fnmatch_lines(["*gpu energy*", "ETS per call at each cap (10 cases):", "test  *60%  *100%",
                                   "test_more?1?  * J  * J"])
    (one,) = RunStore(pytester.path / "serial").runs()
    (two,) = RunStore(pytester.path / "parallel").runs()
    assert sorted(c.key for c in one.cases) == sorted(c.key for c in two.cases)
    assert len(two.cases) == 10 and len({c.key for c in two.cases}) == 10   # nothing lost, nothing doubled


def test_a_corrupt_baseline_is_named_and_left_untouched(pytester):
    pytester.makepyfile(test_suite=suite(0.01))
    pytester.runpytest("--gpu-caps=100%", "--energy-save").assert_outcomes(passed=2)
    (saved,) = saved_runs(pytester)
    bad = saved.path.with_name("20990101T000000Z-deadbeef.json")
    bad.write_text('{"format": "pytest-gpuenergy-run", "version": 1, "cases": [')
    before = bad.read_bytes()
    result = pytester.runpytest("--gpu-caps=100%", "--energy-compare")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert str(bad) in result.stderr.str()
    assert bad.read_bytes() == before

    foreign = saved.path.with_name("notes.json")
    bad.unlink()
    foreign.write_text('{"hello": "world"}')
    result = pytester.runpytest("--gpu-caps=100%", "--energy-compare")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert str(foreign) in result.stderr.str() and foreign.read_text() == '{"hello": "world"}'


def test_a_named_baseline_of_the_other_backend_is_not_compared(pytester):
    pytester.makepyfile(test_suite=suite(0.01))
    pytester.runpytest("--gpu-caps=100%", "--energy-save").assert_outcomes(passed=2)
    (saved,) = saved_runs(pytester)
    data = json.loads(saved.path.read_text())
    data.update(run_id="20200101T000000Z-00000001", backend="nvml", simulated=False, gpu_model="NVIDIA H100 80GB HBM3")
    for case in data["cases"]:
        case.update(backend="nvml", simulated=False, gpu_name="NVIDIA H100 80GB HBM3")
    real = pytester.path / "real-h100.json"
    real.write_text(json.dumps(data))
    result = pytester.runpytest("--gpu-caps=100%", f"--energy-compare={real}", "--energy-fail=ets:1%")
    assert result.ret == pytest.ExitCode.OK
    flat = " ".join(result.stdout.str().split())
    assert "not compared: the baseline is measured (nvml" in flat
    assert "simulated and real measurements are never compared" in flat


@pytest.mark.parametrize("value", ["ets", "ets:five", "power:5%", "ets:-5%", "ets:5%,ets:6%", ""])
def test_bad_thresholds_are_usage_errors(pytester, value):
    pytester.makepyfile(test_suite=suite(0.01))
    result = pytester.runpytest(f"--energy-fail={value}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "--energy-fail" in result.stderr.str() and "Traceback" not in result.stderr.str()


def test_gpuenergy_compare_and_runs_on_saved_documents(pytester, monkeypatch):
    pytester.makepyfile(test_suite=suite(0.01))
    monkeypatch.setenv("GPUENERGY_SIM_NOISE", "0.02")
    for _ in range(2):
        pytester.runpytest("--gpu-caps=100%", "--energy-repeat=4", "--energy-save").assert_outcomes(passed=2)
    old, new = saved_runs(pytester)
    monkeypatch.chdir(pytester.path)
    listing = cli_in_process("runs")
    assert old.run_id in listing.stdout and new.run_id in listing.stdout
    compared = cli_in_process("compare", old.run_id, new.run_id, "--fail", "ets:5%", "--html", "c.html", check=False)
    assert compared.returncode == 0, compared.stdout + compared.stderr
    assert "noise" in compared.stdout and (pytester.path / "c.html").exists()


def test_a_gated_run_fits_80_columns_prints_one_table_and_says_skipped_caps_once(pytester, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    pytester.makepyfile(test_suite=suite(0.01))
    pytester.runpytest("--gpu-caps=20%,100%", "--energy-save").assert_outcomes(passed=2, skipped=2)
    result = pytester.runpytest("--gpu-caps=20%,100%", "--energy-compare", "--energy-fail=ets:5%")
    result.assert_outcomes(passed=2, skipped=2)
    section = result.stdout.str().split("gpu energy")[-1]
    assert max(len(line) for line in section.splitlines()) <= 80
    assert "ETS per call" not in section                      # the comparison only, no results table beside it
    assert section.count("outside the allowed range") == 1 and "skipped: cap 20% for 2 tests" in section
    assert ", 2 skipped" in " ".join(section.split())
    (saved,) = saved_runs(pytester)
    assert oct(saved.path.stat().st_mode & 0o777) == "0o644"   # the user's umask, not mkstemp's 0600
