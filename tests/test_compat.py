"""The plugin installed beside what teams already use: it breaks nothing, and where it takes part it
does what a team expects. First the defects found when it was tried in real projects (each a test that
failed before it was fixed), then the compatibility matrix (docs/compatibility.md), one plugin or
pytest feature per test, each with that plugin turned on in the session under test only."""

from __future__ import annotations

import json
import signal
import textwrap

import pytest

from helpers import cli_in_process, declare_source, enable, gpu_info, outcomes, same_outcome_without_the_plugin

REWRITE_OK = ("-W", "ignore::pytest.PytestAssertRewriteWarning")   # in process the plugin is imported already
MEASURED = declare_source() + textwrap.dedent(
    """
    def test_measured(energy_meter):
        energy_meter.measure(declare, 0.02)
        assert energy_meter.result.ets_j > 0
    """
)


def plant_dead_runs_cap(limit_w: float = 300.0) -> None:
    """What a SIGKILLed capped run leaves: the GPU at ``limit_w`` and a journal entry of a dead process."""
    from pytest_gpuenergy.fileio import atomic_write_json
    from pytest_gpuenergy.gpu.capping import POWER_LIMIT, power_journal_for
    from pytest_gpuenergy.gpu.device import open_backend
    from pytest_gpuenergy.gpu.journal import JournalEntry

    backend = open_backend("sim")
    try:
        gpu = backend.all_gpus[0]
        previous = gpu.current_limit_mw()
        gpu.set_limit_mw(int(limit_w * 1000))
        entry = JournalEntry(POWER_LIMIT, gpu.uuid, gpu.index, gpu.name, gpu.vendor, previous, int(limit_w * 1000),
                             pid=2**31 - 2, process_start="", host="nowhere", written_at=0.0)
        atomic_write_json(power_journal_for(backend).folder / f"{gpu.uuid}.json", entry.to_json())
    finally:
        backend.close()


# -- the eight defects -------------------------------------------------------------------------------

def test_pytest_help_works_and_lists_every_option_of_the_plugin(pytester):
    from pytest_gpuenergy.plugin.options import OPTIONS

    result = pytester.runpytest("--help")
    assert result.ret == 0, result.stderr.str()
    text = result.stdout.str()
    for option in OPTIONS:
        assert option.flag in text and f"{option.ini} (" in text, option.flag
    assert "(60%,80%)" in text           # the % that crashed argparse's help formatting


def test_every_gpuenergy_command_has_working_help():
    from pytest_gpuenergy.cli.main import build_parser

    commands = build_parser()._subparsers._group_actions[0].choices      # noqa: SLF001 (argparse keeps them here)
    assert {"info", "restore", "compare", "runs", "tune", "fleet"} <= set(commands)
    assert cli_in_process("--help").returncode == 0
    for name in commands:
        done = cli_in_process(name, "--help", check=False)
        assert done.returncode == 0 and "usage: gpuenergy" in done.stdout, (name, done.stderr)


def test_a_cap_repaired_under_filterwarnings_error_is_a_summary_line_not_an_internal_error(pytester):
    plant_dead_runs_cap(300.0)
    pytester.makeini("[pytest]\nfilterwarnings =\n    error\n    ignore::pytest.PytestAssertRewriteWarning\n")
    pytester.makepyfile(test_plain="def test_plain():\n    pass\n")
    result = pytester.runpytest()
    assert result.ret == 0, result.stdout.str()
    result.stdout.fnmatch_lines(["gpuenergy: a run died with a GPU capped: GPU 0*", "*restored to 700 W"])
    assert gpu_info()[0]["current_limit_w"] == 700.0


def test_a_projects_own_gpus_option_and_ini_key_are_its_own(pytester):
    pytester.makeconftest(textwrap.dedent(
        """
        def pytest_addoption(parser):
            parser.addoption("--gpus", type=int, default=1, help="the project's own: how many GPUs to train on")
            parser.addini("gpus", "the project's own ini key")
        """
    ))
    pytester.makeini("[pytest]\ngpus = 7\n")
    pytester.makepyfile(test_own=MEASURED + textwrap.dedent(
        """
        def test_own_option(request):
            assert request.config.getoption("gpus") == 2 and request.config.getini("gpus") == "7"
        """
    ))
    result = pytester.runpytest("--gpus=2", "--gpu-devices=0")
    result.assert_outcomes(passed=2)


def test_a_rerun_flaky_test_keeps_only_its_passing_attempt(pytester, monkeypatch):
    enable(monkeypatch, "rerunfailures")
    pytester.makepyfile(test_flaky=declare_source() + textwrap.dedent(
        """
        ATTEMPTS = []

        def test_flaky(energy_meter):
            ATTEMPTS.append(1)
            energy_meter.measure(declare, 0.02)
            assert len(ATTEMPTS) == 3, "fails twice, then passes"
        """
    ))
    result = pytester.runpytest("--reruns=2", "--energy-save", "--energy-json=report.json")
    assert outcomes(result).get("passed") == 1 and outcomes(result).get("rerun") == 2
    case = json.loads((pytester.path / "report.json").read_text())["runs"][0]["cases"][0]
    assert case["n"] == 1, case                      # not the failed attempts' figures averaged in
    saved = next((pytester.path / ".energy").rglob("*.json"))
    assert [c["outcome"] for c in json.loads(saved.read_text())["cases"]] == ["passed"]


def test_an_unwritable_simulator_folder_fails_only_the_tests_that_measure(pytester, monkeypatch, tmp_path):
    blocked = tmp_path / "a-file"
    blocked.write_text("not a folder")
    monkeypatch.setenv("GPUENERGY_SIM_STATE", str(blocked / "sim"))
    pytester.makepyfile(test_mix=MEASURED + "\ndef test_plain():\n    pass\n")
    result = pytester.runpytest()
    assert result.ret == 1 and "INTERNALERROR" not in result.stdout.str()
    result.assert_outcomes(passed=1, errors=1)
    result.stdout.fnmatch_lines(["*the GPU simulator cannot use its state folder*set GPUENERGY_SIM_STATE to a folder you can write"])
    info = cli_in_process("info", check=False)
    assert info.returncode == 2 and "Traceback" not in info.stderr
    assert info.stderr.startswith("gpuenergy info: error: the GPU simulator cannot use its state folder")


@pytest.mark.parametrize("table", ["[tool.pytest.ini_options]", "[tool.pytest]"])
def test_toml_lists_and_numbers_are_read_as_they_are_typed(pytester, monkeypatch, table):
    monkeypatch.setenv("GPUENERGY_SIM_GPUS", "H100,H100")
    devices = "[0, 1]" if table.endswith("ini_options]") else '["0", "1"]'    # native TOML: a list of strings
    pytester.makepyprojecttoml(f'{table}\ngpu_caps = ["60%", "80%"]\ngpu_devices = {devices}\nenergy_repeat = 2\n'
                               'filterwarnings = ["error", "ignore::pytest.PytestAssertRewriteWarning"]\n')
    pytester.makepyfile(test_t="def test_caps(gpu_power_cap, energy_meter):\n    with energy_meter:\n        pass\n")
    result = pytester.runpytest("-v", "--energy-json=report.json")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["  GPU 1: *", "*test_caps?60%? PASSED*", "*test_caps?80%? PASSED*"])
    cases = json.loads((pytester.path / "report.json").read_text())["runs"][0]["cases"]
    assert sorted((c["cap"], c["n"]) for c in cases) == [("60%", 2), ("80%", 2)]


@pytest.mark.parametrize(("setting", "message"), [
    ('energy_repeat = "many"', "--energy-repeat='many' is not a whole number"),
    ("energy_repeat = 2.5", "*pyproject.toml: config option 'energy_repeat' expects one of int | string, got float: 2.5"),
    ('gpu_caps = ["60%", "fast"]', "--gpu-caps: 'fast' is not a cap"),
])
def test_a_bad_toml_value_is_a_one_line_usage_error(pytester, setting, message):
    pytester.makepyprojecttoml(f"[tool.pytest]\n{setting}\n")
    pytester.makepyfile(test_t="def test_t():\n    pass\n")
    result = pytester.runpytest()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"ERROR: {message}*" if not message.startswith("*") else f"ERROR: {message}"])
    assert "Traceback" not in result.stderr.str()


FORKS = textwrap.dedent(
    """
    import multiprocessing, time

    def nap():
        time.sleep(60)

    def forked_child_exit():
        child = multiprocessing.get_context("fork").Process(target=nap)
        child.start()
        time.sleep(0.2)
        child.terminate()
        child.join()
        return child.exitcode

    def test_plain_fork():
        assert forked_child_exit() == -15

    def test_pool_terminate():
        with multiprocessing.get_context("fork").Pool(2) as pool:
            pool.map_async(time.sleep, [30, 30])
            time.sleep(0.2)
            pool.terminate()

    def test_fork_while_capped(gpu_power_cap):
        assert gpu_power_cap.enforced_w == 420.0
        assert forked_child_exit() == -15
    """
)


def test_forked_children_end_on_sigterm_as_without_the_plugin(pytester):
    """Real processes: the handler the plugin installs while a cap is held never reaches a forked child."""
    pytester.makepyfile(test_forks=FORKS)
    plain = pytester.runpytest_subprocess("-k", "not capped", "-p", "no:cacheprovider")
    plain.assert_outcomes(passed=2)
    assert "KeyboardInterrupt" not in plain.stdout.str() + plain.stderr.str()
    capped = pytester.runpytest_subprocess("--gpu-caps=60%", "-k", "capped", "-p", "no:cacheprovider")
    capped.assert_outcomes(passed=1)


def test_a_projects_own_energy_meter_fixture_is_left_alone(pytester):
    pytester.makeconftest(textwrap.dedent(
        """
        import pytest

        CALLS = []

        @pytest.fixture
        def energy_meter():
            return "the project's own meter"
        """
    ))
    pytester.makepyfile(test_own=textwrap.dedent(
        """
        from conftest import CALLS

        def test_own(energy_meter):
            CALLS.append(1)
            assert energy_meter == "the project's own meter" and len(CALLS) == 1
        """
    ))
    result = pytester.runpytest("--energy-repeat=3")
    result.assert_outcomes(passed=1)
    assert "gpu energy" not in result.stdout.str()


def test_a_session_that_uses_nothing_touches_no_state_and_installs_no_handler(pytester, sim_state):
    # The handlers this process was started with (SIG_DFL from a shell; SIGHUP is SIG_IGN under nohup).
    before = {name: int(signal.getsignal(getattr(signal, name))) for name in ("SIGTERM", "SIGHUP")}
    pytester.makepyfile(test_quiet=textwrap.dedent(
        f"""
        import signal

        def test_handlers_are_the_ones_the_process_started_with():
            assert int(signal.getsignal(signal.SIGTERM)) == {before["SIGTERM"]}
            assert int(signal.getsignal(signal.SIGHUP)) == {before["SIGHUP"]}
        """
    ), test_later=MEASURED)
    quiet = pytester.runpytest("test_quiet.py")
    quiet.assert_outcomes(passed=1)
    assert quiet.stdout.lines[2].startswith("gpuenergy: standing by") and not sim_state.exists()
    pytester.runpytest("--collect-only", "-q").assert_outcomes()
    assert not sim_state.exists()                     # listing tests that measure opens no GPU either
    pytester.runpytest("test_later.py").assert_outcomes(passed=1)
    assert sim_state.exists()


# -- rough edges -------------------------------------------------------------------------------------

def test_caps_given_to_single_parameter_sets_apply_to_those_only(pytester):
    pytester.makepyfile(test_p=textwrap.dedent(
        """
        import pytest

        @pytest.mark.parametrize("model", ["small", pytest.param("large", marks=pytest.mark.gpu_caps(250))])
        def test_train(model, gpu_power_cap):
            assert (model, gpu_power_cap.label) in {("small", "60%"), ("small", "100%"), ("large", "250W")}
        """
    ))
    result = pytester.runpytest("--gpu-caps=60%,100%", "-v")
    result.assert_outcomes(passed=3)
    result.stdout.fnmatch_lines(["*test_train?small-60%? PASSED*", "*test_train?small-100%? PASSED*",
                                 "*test_train?large-250W? PASSED*"])


def test_a_hand_parametrised_cap_is_a_usage_error_with_the_way_to_do_it(pytester):
    pytester.makepyfile(test_h=textwrap.dedent(
        """
        import pytest

        @pytest.mark.parametrize("gpu_power_cap", [150, 200], indirect=True)
        def test_h(gpu_power_cap):
            pass
        """
    ))
    for args in ((), ("--gpu-caps=60%",)):
        result = pytester.runpytest(*args)
        assert result.ret == pytest.ExitCode.USAGE_ERROR
        result.stderr.fnmatch_lines(["*test_h.py::test_h: gpu_power_cap is parametrised by hand; give the caps with "
                                     "@pytest.mark.gpu_caps(150, '60%') or --gpu-caps instead"])


def test_failed_and_xfailed_tests_are_saved_with_their_outcome_and_never_compared(pytester, monkeypatch):
    pytester.makepyfile(test_o=declare_source() + textwrap.dedent(
        """
        import os, pytest

        WORK = float(os.environ.get("WORK", "0.02"))

        def test_ok(energy_meter):
            energy_meter.measure(declare, 0.02)

        def test_broken(energy_meter):
            energy_meter.measure(declare, WORK)
            assert False, "the result is wrong"

        @pytest.mark.xfail(reason="known bug")
        def test_known(energy_meter):
            energy_meter.measure(declare, WORK)
            assert False
        """
    ))
    pytester.runpytest("--energy-save").assert_outcomes(passed=1, failed=1, xfailed=1)
    saved = json.loads(next((pytester.path / ".energy").rglob("*.json")).read_text())
    assert {c["case_id"].split("::")[1]: c["outcome"] for c in saved["cases"]} == {
        "test_ok": "passed", "test_broken": "failed", "test_known": "xfailed"}
    # Five times the work in the tests that do not pass: no regression, for their figures are never
    # compared (and were no baseline); the note says why.
    monkeypatch.setenv("WORK", "0.1")
    second = pytester.runpytest("--energy-fail=ets:5%")
    second.assert_outcomes(passed=1, failed=1, xfailed=1)
    text = second.stdout.str()
    assert "0 regressed" in text and "ENERGY REGRESSION" not in text
    assert "2 cases not compared: their test did not pass (1 failed, 1 xfailed)" in " ".join(text.split())


def test_a_unittest_testcase_or_getfixturevalue_runs_once_and_says_so(pytester):
    pytester.makepyfile(test_u=textwrap.dedent(
        """
        import unittest, pytest

        @pytest.mark.usefixtures("gpu_power_cap")
        class TestOld(unittest.TestCase):
            def test_old(self):
                pass

        def test_dynamic(request):
            assert request.getfixturevalue("gpu_power_cap").label == "current"
        """
    ))
    result = pytester.runpytest("--gpu-caps=60%,80%")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["gpuenergy: note: 2 tests took gpu_power_cap where pytest cannot run a test once*",
                                 "*test_u.py::TestOld::test_old, test_u.py::test_dynamic"])


def test_the_simulators_seed_stays_out_of_the_tests_environment(pytester, monkeypatch):
    monkeypatch.delenv("GPUENERGY_SIM_SEED")
    pytester.makepyfile(test_env=MEASURED + textwrap.dedent(
        """
        import os

        def test_env():
            assert "GPUENERGY_SIM_SEED" not in os.environ
        """
    ))
    pytester.runpytest("-p", "no:randomly").assert_outcomes(passed=2)


def test_cpu_only_ci_hiding_every_gpu_still_measures_on_the_simulator(pytester, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    monkeypatch.delenv("GPUENERGY_BACKEND")
    pytester.makepyfile(test_m=MEASURED)
    result = pytester.runpytest()
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["gpuenergy: backend sim: simulated GPUs (no real measurement)"])


def test_a_json_report_asked_for_is_written_when_nothing_was_measured(pytester):
    pytester.makepyfile(test_plain="def test_plain():\n    pass\n")
    pytester.runpytest("--energy-json=report.json").assert_outcomes(passed=1)
    report = json.loads((pytester.path / "report.json").read_text())
    assert report["runs"] == [] and report["comparisons"] == []


def test_junit_properties_are_named_by_the_tests_gpu_not_the_workers(pytester, monkeypatch):
    monkeypatch.setenv("GPUENERGY_SIM_GPUS", "H100,H100")
    pytester.makepyfile(test_j=MEASURED + "\ndef test_second(energy_meter):\n    with energy_meter:\n        pass\n")
    pytester.runpytest_subprocess("-n", "2", "--junitxml=out.xml", "-p", "no:cacheprovider").assert_outcomes(passed=2)
    xml = (pytester.path / "out.xml").read_text()
    assert xml.count('name="energy.gpu0.ets_j"') == 2 and 'energy.gpu1.' not in xml
    assert 'name="energy.gpu0.gpu_index" value="0"' in xml and 'name="energy.gpu0.gpu_index" value="1"' in xml


def test_gpuenergy_runs_finds_the_projects_storage_from_a_subfolder(pytester, monkeypatch):
    pytester.makepyprojecttoml("[tool.pytest.ini_options]\nenergy_storage = 'results/energy'\n")
    pytester.makepyfile(test_m=MEASURED)
    pytester.runpytest("--energy-save").assert_outcomes(passed=1)
    (pytester.path / "src" / "deep").mkdir(parents=True)
    monkeypatch.chdir(pytester.path / "src" / "deep")
    listing = cli_in_process("runs").stdout
    assert "H100 80GB HBM3" in listing and "1" in listing, listing     # the model's name starts the cell
    assert "no saved runs" not in listing


# -- the compatibility matrix -----------------------------------------------------------------------

PLAIN = textwrap.dedent(
    """
    import pytest

    def test_pass():
        assert True

    def test_fail():
        assert 1 == 2

    @pytest.mark.skip(reason="not today")
    def test_skip():
        pass

    @pytest.mark.xfail(reason="known")
    def test_xfail():
        assert False
    """
)


def ets_by_case(report_path) -> dict[str, float]:
    report = json.loads(report_path.read_text())
    return {c["case_id"]: c["ets_j"] for run in report["runs"] for c in run["cases"]}


ORDERED = declare_source() + "".join(
    f"\ndef test_{i}(energy_meter):\n    with energy_meter:\n        declare({0.05 * (i + 1)})\n" for i in range(4)
)


@pytest.mark.slow
def test_matrix_pytest_xdist_gives_each_test_the_figures_of_a_serial_run(pytester, monkeypatch):
    monkeypatch.setenv("GPUENERGY_SIM_GPUS", "H100,H100")
    pytester.makepyfile(test_x=ORDERED)
    pytester.runpytest("--energy-json=serial.json").assert_outcomes(passed=4)
    parallel = pytester.runpytest_subprocess("-n", "2", "--energy-json=parallel.json", "-p", "no:cacheprovider")
    parallel.assert_outcomes(passed=4)
    assert ets_by_case(pytester.path / "parallel.json") == ets_by_case(pytester.path / "serial.json")


def test_matrix_pytest_randomly_shuffles_and_every_figure_stays_the_same(pytester, monkeypatch):
    pytester.makepyfile(test_r=ORDERED)
    pytester.runpytest("--energy-json=ordered.json").assert_outcomes(passed=4)
    enable(monkeypatch, "randomly")
    shuffled = pytester.runpytest("-p", "randomly", "-p", "no:cacheprovider", "--randomly-seed=3", "-v",
                                  "--energy-json=shuffled.json")
    shuffled.assert_outcomes(passed=4)
    order = [line.split("::")[1].split()[0] for line in shuffled.stdout.lines if " PASSED" in line]
    assert order != sorted(order)                       # really shuffled
    assert ets_by_case(pytester.path / "shuffled.json") == ets_by_case(pytester.path / "ordered.json")
    pytester.makepyfile(test_plain=PLAIN)
    assert same_outcome_without_the_plugin(pytester, "test_plain.py", "-p", "randomly") == {
        "passed": 1, "failed": 1, "skipped": 1, "xfailed": 1}


def test_matrix_pytest_cov_measures_coverage_and_energy_side_by_side(pytester, monkeypatch):
    enable(monkeypatch, "pytest_cov")
    pytester.makepyfile(work="def add(a, b):\n    return a + b\n", test_c=MEASURED + textwrap.dedent(
        """
        from work import add

        def test_add():
            assert add(1, 2) == 3
        """
    ))
    result = pytester.runpytest_subprocess("--cov=work", "--cov-report=term", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["*work.py*100%*", "*gpu energy*"])


def test_matrix_pytest_timeout_ends_a_capped_test_and_the_limit_comes_back(pytester, sim_state):
    pytester.makepyfile(test_t="import time\n\ndef test_hangs(gpu_power_cap):\n    time.sleep(30)\n")
    result = pytester.runpytest_subprocess("--timeout=1", "--timeout-method=signal", "--gpu-caps=60%",
                                           "-p", "no:cacheprovider")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*Timeout*"])
    assert gpu_info()[0]["current_limit_w"] == 700.0
    assert not list((sim_state / "journal").glob("GPU-*.json"))


def test_matrix_pytest_asyncio_measures_an_async_test(pytester, monkeypatch):
    enable(monkeypatch, "asyncio")
    pytester.makeini("[pytest]\nasyncio_default_fixture_loop_scope = function\n")
    pytester.makepyfile(test_a=declare_source() + textwrap.dedent(
        """
        import asyncio, pytest

        @pytest.mark.asyncio
        async def test_async(energy_meter):
            with energy_meter:
                await asyncio.sleep(0)
                declare(0.3)
            assert energy_meter.result.ets_j > 0

        @pytest.mark.asyncio
        async def test_plain_async():
            await asyncio.sleep(0)
        """
    ))
    pytester.runpytest("-p", "asyncio").assert_outcomes(passed=2)
    pytester.makepyfile(test_plain=PLAIN)
    same_outcome_without_the_plugin(pytester, "test_plain.py", "-p", "asyncio")


@pytest.mark.slow
def test_matrix_pytest_benchmark_runs_as_without_the_plugin(pytester, monkeypatch):
    enable(monkeypatch, "benchmark")
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)   # (this suite's own worker: pytest-benchmark would turn off)
    pytester.makepyfile(test_b="def test_sum(benchmark):\n    assert benchmark(sum, range(100)) == 4950\n")
    result = pytester.runpytest("-p", "benchmark", "--benchmark-disable-gc")
    result.assert_outcomes(passed=1)
    assert same_outcome_without_the_plugin(pytester, "-p", "benchmark") == {"passed": 1}


def test_matrix_hypothesis_examples_are_the_repetitions_of_one_case(pytester, monkeypatch):
    enable(monkeypatch, "hypothesispytest")
    pytester.makepyfile(test_h=declare_source() + textwrap.dedent(
        """
        from hypothesis import HealthCheck, given, settings, strategies as st

        EXAMPLES = []

        @settings(max_examples=8, suppress_health_check=[HealthCheck.function_scoped_fixture], database=None)
        @given(st.integers(min_value=1, max_value=1000))
        def test_property(energy_meter, steps):
            EXAMPLES.append(steps)
            with energy_meter:
                declare(0.001 * steps)
            with open("examples.txt", "w") as out:
                out.write(str(len(EXAMPLES)))
        """
    ))
    pytester.runpytest("--energy-json=report.json").assert_outcomes(passed=1)
    examples = int((pytester.path / "examples.txt").read_text())
    cases = json.loads((pytester.path / "report.json").read_text())["runs"][0]["cases"]
    assert examples > 2 and [(c["case_id"], c["n"]) for c in cases] == [("test_h.py::test_property", examples)]


def test_matrix_pytest_repeat_puts_the_cap_last_in_ids(pytester, monkeypatch):
    enable(monkeypatch, "repeat")
    pytester.makepyfile(test_r="def test_r(gpu_power_cap, energy_meter):\n    with energy_meter:\n        pass\n")
    result = pytester.runpytest("-p", "repeat", "--count=2", "--gpu-caps=60%,100%", "-v")
    result.assert_outcomes(passed=4)
    result.stdout.fnmatch_lines(["*test_r?1-2-60%? PASSED*", "*test_r?1-2-100%? PASSED*",
                                 "*test_r?2-2-60%? PASSED*", "*test_r?2-2-100%? PASSED*"])


def test_matrix_doctest_modules_run_beside_measured_tests(pytester):
    pytester.makepyfile(lib='def double(x):\n    """\n    >>> double(2)\n    4\n    """\n    return 2 * x\n',
                        test_d=MEASURED)
    pytester.runpytest("--doctest-modules").assert_outcomes(passed=2)
    result = pytester.runpytest("--doctest-modules", "--energy-all", "--gpu-caps=60%,100%", "-rA")
    result.assert_outcomes(passed=3)       # the doctest once, at the current limit, and said; the test at each cap
    result.stdout.fnmatch_lines(["PASSED lib.py::lib.double"])
    assert ("1 test ran once, at the GPU's current limit, not once per cap: pytest cannot run a unittest.TestCase method "
            "or a doctest once per setting (a test function runs at every cap): lib.py::lib.double") in " ".join(result.stdout.str().split())


def test_matrix_w_error_strict_config_and_strict_markers_pass_a_suite_that_uses_the_plugin(pytester):
    """A real process: -W error sees every warning, also those of the plugin's import."""
    pytester.makepyprojecttoml('[tool.pytest.ini_options]\ngpu_caps = ["60%", "100%"]\nenergy_repeat = 2\n')
    pytester.makepyfile(test_s=declare_source() + textwrap.dedent(
        """
        import pytest

        @pytest.mark.energy_budget(ets=1e6)
        @pytest.mark.energy(repeat=1)
        def test_capped_short_block(gpu_power_cap, energy_meter):
            with energy_meter:
                declare(0.005)

        @pytest.mark.gpu_caps(300)
        def test_marker(gpu_power_cap):
            assert gpu_power_cap.enforced_w == 300.0
        """
    ))
    result = pytester.runpytest_subprocess("-W", "error", "--strict-config", "--strict-markers", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=3)
    assert result.ret == 0
