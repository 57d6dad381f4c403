"""The plugin driven end to end the way a user drives it: a test file, pytest options, the CLI."""

from __future__ import annotations

import json
import re
import textwrap

import pytest

from helpers import cli_in_process, declare_source, gpu_info, spin_source

# Declared GPU work: the plugin's behaviour around a measurement, without the CPU time spin() would
# cost (the CPU-time stand-in has tests of its own: the short blocks, measure(), the meter's).
MEASURED_TEST = declare_source() + textwrap.dedent(
    """
    def test_work(gpu_power_cap, energy_meter):
        with energy_meter:
            declare(0.25)
        result = energy_meter.result
        assert result.ets_j > 0 and result.time_s > 0
        assert result.edp_js == pytest.approx(result.ets_j * result.time_s, rel=0.05)
    """
)


def write(pytester: pytest.Pytester, source: str, name: str = "test_user") -> None:
    pytester.makepyfile(**{name: "import pytest\n" + source})


def test_three_caps_give_three_passing_simulated_cases(pytester):
    write(pytester, MEASURED_TEST)
    result = pytester.runpytest("--gpu-caps=60%,80%,100%", "-v")
    result.assert_outcomes(passed=3)
    result.stdout.fnmatch_lines([
        "gpuenergy: backend sim: simulated GPUs (no real measurement)",
        "*GPU 0: NVIDIA H100 80GB HBM3 (simulated)*energy counter*",
        "*test_work?60%? PASSED*",
        "*test_work?80%? PASSED*",
        "*test_work?100%? PASSED*",
        "ETS per call at each cap (3 cases):",
        "test  *60%  *80%  *100%",
        "test_work  * J  * J  * J",
        "method: counter (sim)",
        "(sim): figures from the GPU simulator, not measured on a real GPU",
    ])


def test_caps_in_watts_and_names_have_readable_ids_and_duplicates_merge(pytester):
    write(pytester, "def test_a(gpu_power_cap):\n    assert gpu_power_cap.enforced_w == gpu_power_cap.requested_w\n")
    result = pytester.runpytest("--gpu-caps=250,250W,min,max,default,100%", "--collect-only", "-q")
    result.stdout.fnmatch_lines(["*test_a?250W?", "*test_a?min?", "*test_a?max?", "*test_a?default?", "4 tests collected*"])


def test_the_cap_value_tells_requested_enforced_and_gpu(pytester):
    write(pytester, textwrap.dedent(
        """
        def test_cap(gpu_power_cap):
            assert gpu_power_cap.label == "60%"
            assert gpu_power_cap.requested_w == 420.0
            assert gpu_power_cap.enforced_w == 420.0
            assert gpu_power_cap.previous_w == 700.0
            assert "H100" in gpu_power_cap.gpu_name
        """
    ))
    pytester.runpytest("--gpu-caps=60%").assert_outcomes(passed=1)


def test_an_ini_option_works_like_the_flag(pytester):
    pytester.makeini("[pytest]\ngpu_caps = 300,min\ngpu_backend = sim\n")
    write(pytester, "def test_a(gpu_power_cap):\n    pass\n")
    pytester.runpytest().assert_outcomes(passed=2)


def test_without_caps_a_test_runs_once_and_changes_nothing(pytester, sim_state, monkeypatch):
    # Any attempt to set a limit would fail: the run passes only if nothing is set.
    monkeypatch.setenv("GPUENERGY_SIM_FAULTS", "set_error")
    write(pytester, MEASURED_TEST + textwrap.dedent(
        """
        def test_current(gpu_power_cap):
            assert gpu_power_cap.label == "current" and not gpu_power_cap.changed
            assert gpu_power_cap.requested_w is None and gpu_power_cap.enforced_w == 700.0
        """
    ))
    result = pytester.runpytest("-v")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["*caps: none given, tests run at the current limit*", "*::test_work PASSED*"])
    assert not (sim_state / "journal").exists() or not any((sim_state / "journal").glob("GPU-*.json"))


def test_a_marker_chooses_the_tests_own_caps(pytester):
    write(pytester, textwrap.dedent(
        """
        @pytest.mark.gpu_caps(300, "50%")
        def test_own(gpu_power_cap):
            assert gpu_power_cap.enforced_w in (300.0, 350.0)

        def test_global(gpu_power_cap):
            assert gpu_power_cap.enforced_w == 200.0
        """
    ))
    result = pytester.runpytest("--gpu-caps=min", "-v")
    result.assert_outcomes(passed=3)
    result.stdout.fnmatch_lines(["*test_own?300W? PASSED*", "*test_own?50%? PASSED*", "*test_global?min? PASSED*"])


@pytest.mark.parametrize("bad", ["abc", "-5", "0", "1e9", "50%%", "", "150,,200", "nan", "300%", "inf"])
def test_every_bad_cap_is_a_usage_error_naming_it(pytester, bad):
    write(pytester, "def test_a(gpu_power_cap):\n    pass\n")
    result = pytester.runpytest(f"--gpu-caps={bad}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: --gpu-caps: *"])
    shown = bad.split(",")[0] if bad.split(",")[0] else ""
    assert shown in result.stderr.str()
    assert "Traceback" not in result.stderr.str()


def test_a_cap_outside_the_gpus_range_skips_with_the_range(pytester):
    write(pytester, "def test_a(gpu_power_cap):\n    pass\n")
    result = pytester.runpytest("--gpu-caps=150,300", "-rs")
    result.assert_outcomes(passed=1, skipped=1)
    result.stdout.fnmatch_lines(["*cap 150W = 150 W is outside the allowed range 200-700 W of GPU 0*"])


def test_no_permission_is_an_error_that_says_what_to_do(pytester, monkeypatch):
    monkeypatch.setenv("GPUENERGY_SIM_FAULTS", "no_permission")
    write(pytester, "def test_a(gpu_power_cap):\n    pass\n")
    result = pytester.runpytest("--gpu-caps=300")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines([
        "*not allowed to set the power limit of GPU 0*needs root (CAP_SYS_ADMIN)*drop --gpu-caps*"
    ])
    assert gpu_info()[0]["current_limit_w"] == 700.0


def test_a_budget_below_the_measured_ets_fails_in_one_line_and_above_passes(pytester):
    write(pytester, declare_source() + textwrap.dedent(
        """
        @pytest.mark.energy_budget(ets=1.0)
        def test_over(gpu_power_cap, energy_meter):
            with energy_meter:
                declare(0.25)

        @pytest.mark.energy_budget(ets=1e6, edp=1e6, time=100)
        def test_under(gpu_power_cap, energy_meter):
            with energy_meter:
                declare(0.25)
        """
    ))
    result = pytester.runpytest("--gpu-caps=60%")
    result.assert_outcomes(passed=1, failed=1)
    lines = [line for line in result.stdout.lines if line.startswith("energy budget exceeded")]
    assert len(lines) == 1
    assert lines[0].startswith("energy budget exceeded: ETS ")
    for part in ("> budget 1 J (+", " %)", "on GPU 0 NVIDIA H100 80GB HBM3 (simulated)", "at cap 60%", "enforced 420 W", "simulated"):
        assert part in lines[0]
    assert "Traceback" not in result.stdout.str()


SHORT_TESTS = textwrap.dedent(
    """
    import time

    import pytest

    @pytest.mark.parametrize("n", range({count}))
    def test_short(n):
        end = time.thread_time() + 0.005
        while time.thread_time() < end:
            pass
    """
)


def test_budgeted_short_tests_are_told_how_long_they_waited_for_their_figures(pytester, monkeypatch):
    """A budget's verdict is the test's own: a budgeted test whose bound so far cannot decide it waits
    for its figure (a 5 ms region needs the counter's next two publications, ~0.19 s here). In real time (the wall-clock simulator,
    as on a real GPU) and most of a session, the end says how long they waited in all, and what to do,
    counting the tests with a budget only (10 from a budgets file, 2 by their marker, not 4 others) and
    adding pytest-xdist's workers' waits up; on the virtual clock nothing waits: no line."""
    marked = SHORT_TESTS.format(count=2).replace("@pytest.mark.parametrize", "@pytest.mark.energy_budget(time=0.001)\n@pytest.mark.parametrize")
    pytester.makepyfile(test_budgeted=SHORT_TESTS.format(count=10), test_free=SHORT_TESTS.format(count=4), test_marked=marked)
    entries = [f'[[budget]]\ntest = "test_budgeted.py::test_short[{n}]"\ngpu = "NVIDIA H100 80GB HBM3 (simulated)"\n'
               f"time_s = 0.001\n" for n in range(10)]       # under the tests' 5 ms: they wait, and miss
    pytester.makefile(".toml", budgets='format = "pytest-gpuenergy-budgets"\nversion = 2\n\n' + "\n".join(entries))
    result = pytester.runpytest_inprocess("--energy-all", "--energy-budgets=budgets.toml")
    result.assert_outcomes(passed=4, failed=12)
    assert "with an energy budget waited" not in result.stdout.str()
    monkeypatch.setenv("GPUENERGY_SIM_CLOCK", "wall")
    result = pytester.runpytest_subprocess("--energy-all", "--energy-budgets=budgets.toml", "-n", "2")
    result.assert_outcomes(passed=4, failed=12)
    text = " ".join(line.strip() for line in result.stdout.lines)
    found = re.search(r"gpuenergy: note: 12 tests with an energy budget waited ([\d.]+) s in all for their figures, "
                      r"(\d+)% of the session: .*period \(100 ms here\) needs the counter's next two publications; "
                      r"budget tests that run a period or longer, and gate shorter ones against a saved run instead "
                      r"\(--energy-compare\), which waits once, at the end", text)
    assert found, text[-2000:]
    assert 12 * 0.1 <= float(found.group(1)) <= 12 * 0.5 and 20 <= int(found.group(2)) <= 100


PENDING_AT_THE_VERDICT = textwrap.dedent(
    """
    import pytest
    from pytest_gpuenergy.plugin.state import session_of

    PENDING = []

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_runtest_makereport(item, call):
        report = yield
        if call.when == "call":      # after the budget's verdict: was the figure waited for?
            case = session_of(item.config).cases_of(item.nodeid)[0]
            PENDING.append(str(not case.results[0].resolved))
        return report

    def pytest_sessionfinish(session):
        with open("pending.txt", "w") as file:
            file.write(" ".join(PENDING))
    """
)


@pytest.mark.parametrize("time_budget, pending, outcome", [(10.0, "True", "passed"), (0.001, "False", "failed")])
def test_a_budget_the_bound_so_far_decides_takes_no_wait_and_the_same_verdict(pytester, monkeypatch, time_budget, pending,
                                                                              outcome):
    """In real time a 5 ms test's figure needs the counter's next two publications (~0.19 s). Where the
    upper end of its bound from the reads so far (the GPU's ceiling over the region's time, 3.85 J
    here) is within every budget, the figure worked out later is too: the test passes at once, its
    figure still to come (and saved as ever). A budget the bound cannot decide waits for the figure
    and fails on it, in the line it always had (here a time budget under the test's 5 ms)."""
    monkeypatch.setenv("GPUENERGY_SIM_CLOCK", "wall")
    pytester.makeconftest(PENDING_AT_THE_VERDICT)
    write(pytester, SHORT_TESTS.format(count=4).replace("import pytest\n", "import pytest\n\n@pytest.mark.energy_budget("
                                                        f"ets=1000.0, edp=1000.0, time={time_budget})", 1))
    result = pytester.runpytest_inprocess("--energy-all", "--energy-json=report.json")
    result.assert_outcomes(**{outcome: 4})
    assert (pytester.path / "pending.txt").read_text().split() == [pending] * 4
    cases = json.loads((pytester.path / "report.json").read_text())["runs"][0]["cases"]
    assert len(cases) == 4 and all(0 <= c["ets_low_j"] <= c["ets_j"] <= c["ets_high_j"] and c["ets_j"] > 0 for c in cases)
    if outcome == "failed":
        assert len([line for line in result.stdout.lines if line.startswith("FAILED ") and "energy budget exceeded: T " in line]) == 4


def test_the_most_specific_budget_wins(pytester):
    write(pytester, declare_source() + textwrap.dedent(
        """
        @pytest.mark.energy_budget(ets=1e6)                         # any GPU, any cap: would pass
        @pytest.mark.energy_budget(cap=300, ets=1e6)                # cap only
        @pytest.mark.energy_budget(gpu="h100", ets=1e6)             # GPU model: matches, case-insensitive
        @pytest.mark.energy_budget(gpu="H100", cap="60%", ets=1.0)  # GPU and cap: the most specific
        @pytest.mark.energy_budget(gpu="V100", cap="60%", ets=1.0)  # another GPU: never applies
        def test_budgets(gpu_power_cap, energy_meter):
            with energy_meter:
                declare(0.2)
        """
    ))
    result = pytester.runpytest("--gpu-caps=60%,300")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*test_budgets?60%? - energy budget exceeded*"])


def test_a_budget_on_a_test_that_measured_nothing_fails(pytester):
    write(pytester, "@pytest.mark.energy_budget(ets=5)\ndef test_a(energy_meter):\n    pass\n")
    result = pytester.runpytest()
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*energy budget set but nothing was measured*"])


@pytest.mark.parametrize(
    ("marker", "message"),
    [
        ("energy_budget(ets='lots')", "ets= must be a positive number of J, got 'lots'"),
        ("energy_budget(energy=5)", "unknown argument(s) energy"),
        ("energy_budget(gpu='H100')", "needs at least one of ets="),
        ("energy_budget(ets=-1)", "must be a positive number"),
        ("energy_budget(ets=5, cap='fast')", "'fast' is not a cap"),
        ("energy_budget(5)", "keyword arguments only"),
        ("energy(repeat=0)", "energy(repeat=) must be a whole number >= 1"),
        ("energy(compute_bound=2)", "energy(compute_bound=) must be a number from 0"),
    ],
)
def test_malformed_markers_are_errors_at_collection(pytester, marker, message):
    write(pytester, f"@pytest.mark.{marker}\ndef test_a(energy_meter):\n    pass\n")
    result = pytester.runpytest()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "test_user.py::test_a" in result.stderr.str()
    assert message in result.stderr.str()


def test_a_bad_gpu_caps_marker_names_the_test(pytester):
    write(pytester, "@pytest.mark.gpu_caps('fast')\ndef test_a(gpu_power_cap):\n    pass\n")
    result = pytester.runpytest()
    assert result.ret != 0
    assert "test_a" in result.stdout.str() + result.stderr.str()
    assert "gpu_caps: 'fast' is not a cap" in result.stdout.str() + result.stderr.str()


def test_asking_for_nvml_without_a_gpu_is_a_usage_error(pytester):
    write(pytester, "def test_a():\n    pass\n")
    result = pytester.runpytest("--gpu-backend=nvml")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--gpu-backend=nvml: NVML*use --gpu-backend=sim*"])


def test_gpu_selection_and_cuda_visible_devices(pytester, monkeypatch):
    monkeypatch.setenv("GPUENERGY_SIM_GPUS", "H100,V100")
    write(pytester, textwrap.dedent(
        """
        def test_a(gpu_power_cap):
            assert [g.gpu_index for g in gpu_power_cap.gpus] == [1]
            assert gpu_power_cap.enforced_w == 150.0
        """
    ))
    pytester.runpytest("--gpu-devices=1", "--gpu-caps=50%").assert_outcomes(passed=1)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    pytester.runpytest("--gpu-caps=50%").assert_outcomes(passed=1)
    result = pytester.runpytest("--gpu-devices=0")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--gpu-devices: no visible GPU matches '0'*"])
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert [row["current_limit_w"] for row in gpu_info()] == [700.0, 300.0]


def test_a_gpu_without_energy_counter_falls_back_to_sampling(pytester, monkeypatch):
    monkeypatch.setenv("GPUENERGY_SIM_GPUS", "K80")
    write(pytester, MEASURED_TEST + textwrap.dedent(
        """
        def test_method(energy_meter):
            with energy_meter:
                declare(0.3)
            assert energy_meter.result.method == "sampling"
            assert energy_meter.result.per_gpu[0].power_source == "usage"
        """
    ))
    result = pytester.runpytest("-v")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["*GPU 0: Tesla K80 (simulated)*power sampling (usage)*", "*sampling (sim)*"])


def test_energy_repeat_calls_the_test_again_and_collects_every_repetition(pytester):
    write(pytester, declare_source() + textwrap.dedent(
        """
        CALLS = []

        def test_rep(energy_meter):
            CALLS.append(1)
            with energy_meter:
                declare(0.15)

        @pytest.mark.energy(repeat=2)
        def test_marker(energy_meter):
            with energy_meter:
                declare(0.15)

        def test_count():
            assert len(CALLS) == 3
        """
    ))
    result = pytester.runpytest("--energy-repeat=3", "-p", "no:randomly")
    result.assert_outcomes(passed=3)
    result.stdout.fnmatch_lines(["*test_rep *  3 *"])
    result.stdout.fnmatch_lines(["*test_marker *  2 *"])


def test_a_short_with_block_is_a_note_at_the_end_and_no_warning_that_fails_the_suite(pytester):
    write(pytester, "def test_short(energy_meter):\n    with energy_meter:\n        pass\n    assert 'too short' in ' '.join(energy_meter.result.notes)\n")
    # (in process the plugin is imported already, which pytest warns about: that warning is not the plugin's)
    result = pytester.runpytest("-W", "error", "-W", "ignore::pytest.PytestAssertRewriteWarning")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["gpuenergy: note: 1 measured region was too short for the GPU's counter to",
                                 "*resolve (coarse)*", "*energy_meter.measure(fn)*", "*test_user.py::test_short"])


README_EXAMPLE_15_MS = spin_source() + textwrap.dedent(
    """
    @pytest.mark.energy_budget(ets=900.0, edp=2.0e3)
    def test_short_block(gpu_power_cap, energy_meter):
        with energy_meter:                 # 15 ms of work: shorter than the counter's 100 ms
            spin(0.015)
        result = energy_meter.result
        assert result.ets_j > 0
        assert result.mean_power_w <= gpu_power_cap.enforced_w
        assert result.ets_low_j <= result.ets_j <= result.ets_high_j
    """
)


def test_the_readmes_example_with_a_15_ms_block_passes_at_every_cap(pytester):
    """The issue's case: 0 J and 1,100 W figures from short blocks under caps failed this."""
    write(pytester, README_EXAMPLE_15_MS)
    for _ in range(2):
        pytester.runpytest("--gpu-caps=60%,80%,100%", "-p", "no:randomly").assert_outcomes(passed=3)


def test_measure_repeats_short_work_until_it_is_measurable(pytester):
    write(pytester, spin_source() + textwrap.dedent(
        """
        def test_measure(energy_meter):
            result = energy_meter.measure(spin, 0.01, repeat=2, warmup=1, min_time_s=0.3)
            assert result.n == 2
            assert all(rep.calls >= 25 for rep in result.repetitions)
            assert result.time_s == pytest.approx(0.01, rel=0.3)      # per call
            assert result.ets_std_j >= 0 and result.ets_cv < 0.2
            assert [n for n in result.notes if "CPU time stood for it" not in n] == []
        """
    ))
    pytester.runpytest().assert_outcomes(passed=1)


FAKE_DRIVER = '''
"""Stands the GPU simulator in for the NVML library itself (the real pynvml module's functions),
so that --gpu-backend=nvml runs the real-GPU code path; every call that could change the GPU's
state is recorded and refused."""
import os
import pynvml
from pytest_gpuenergy.sim.nvml import SimulatedNvml

_sim = SimulatedNvml(clock="wall")
_MUTATING = ("nvmlDeviceSetPowerManagementLimit", "nvmlDeviceSetApplicationsClocks", "nvmlDeviceSetGpuLockedClocks",
             "nvmlDeviceSetPersistenceMode", "nvmlDeviceSetComputeMode", "nvmlDeviceResetGpuLockedClocks",
             "nvmlDeviceResetApplicationsClocks", "nvmlDeviceSetPowerManagementLimit_v2")


def _refuse(name):
    def refused(*args, **kwargs):
        with open(os.environ["MUTATIONS_LOG"], "a") as log:
            log.write(name + "\\n")
        raise pynvml.NVMLError_NoPermission()
    return refused


for _name in dir(_sim):
    if _name.startswith("nvml"):
        setattr(pynvml, _name, getattr(_sim, _name))
for _name in _MUTATING:
    setattr(pynvml, _name, _refuse(_name))
'''


def test_an_nvml_run_without_caps_changes_nothing_on_the_gpu(pytester, monkeypatch):
    """On a real GPU with no --gpu-caps the plugin only reads: no set call, the limit as it was."""
    pytester.makepyfile(fake_driver=FAKE_DRIVER)
    log = pytester.path / "mutations.log"
    monkeypatch.setenv("MUTATIONS_LOG", str(log))
    monkeypatch.setenv("XDG_STATE_HOME", str(pytester.path / "state"))
    monkeypatch.setenv("PYTHONPATH", str(pytester.path))
    pytester.makepyfile(test_real=spin_source() + textwrap.dedent(
        """
        def test_measured(gpu_power_cap, energy_meter):
            with energy_meter:          # (measure() reads the same: the NVML calls the meter makes only read)
                spin(0.3)
            part = energy_meter.result.per_gpu[0]
            assert part.backend == "nvml" and not part.simulated
            assert gpu_power_cap.label == "current"
        """
    ))
    before = gpu_info()
    result = pytester.runpytest_subprocess("-p", "fake_driver", "--gpu-backend=nvml")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["gpuenergy: backend nvml*"])
    assert not log.exists(), log.read_text()
    assert gpu_info() == before


def test_the_gpuenergy_backend_variable_is_the_default_and_the_command_line_wins(pytester, monkeypatch):
    pytester.makepyfile(fake_driver=FAKE_DRIVER)
    monkeypatch.setenv("MUTATIONS_LOG", str(pytester.path / "mutations.log"))
    monkeypatch.setenv("XDG_STATE_HOME", str(pytester.path / "state"))
    monkeypatch.setenv("PYTHONPATH", str(pytester.path))
    pytester.makepyfile(test_one="def test_one(energy_meter):\n    pass\n")
    monkeypatch.setenv("GPUENERGY_BACKEND", "nvml")
    pytester.runpytest_subprocess("-p", "fake_driver").stdout.fnmatch_lines(["gpuenergy: backend nvml*"])
    # The command line wins: in this process, without the stand-in library (NVML, were it chosen, has no GPU here).
    pytester.runpytest("--gpu-backend=sim").stdout.fnmatch_lines(["gpuenergy: backend sim*"])
    monkeypatch.setenv("GPUENERGY_BACKEND", "cuda")
    result = pytester.runpytest()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*GPUENERGY_BACKEND='cuda': choose from auto, nvml, amdsmi, sim, or unset it*"])
    assert cli_in_process("info", check=False).returncode == 2


def test_the_energy_marker_declares_each_calls_gpu_work_to_the_simulator(pytester):
    """A test without torch says what one call launches; the simulated GPU runs exactly that."""
    write(pytester, textwrap.dedent(
        """
        from pytest_gpuenergy.sim.models import GPU_MODELS
        from pytest_gpuenergy.sim.roofline import GpuWork, run_step

        WORK = {"flops_tf32": 2e12, "bytes": 5e10, "kernels": 900}

        @pytest.mark.energy(work=WORK)
        def test_declared(energy_meter):
            result = energy_meter.measure(lambda: None, min_time_s=0.5)
            expected = run_step(GPU_MODELS["H100"], GpuWork(**WORK), 700.0)
            assert result.time_s == pytest.approx(expected.step_s, rel=0.05)       # the session's noise: 1.5 %
            assert result.ets_j == pytest.approx(expected.energy_j, rel=0.05)
            assert result.ets_low_j <= result.ets_j <= result.ets_high_j
            assert not result.notes                                               # declared: no CPU-time note
        """
    ))
    pytester.runpytest().assert_outcomes(passed=1)


@pytest.mark.parametrize(("work", "message"), [
    ("'lots'", "energy(work=) must be a dict"),
    ("{'flops': 1e9}", "unknown figure(s) flops"),
    ("{'bytes': -5}", "bytes must be a number from 0"),
])
def test_a_bad_declared_work_is_a_usage_error_naming_it(pytester, work, message):
    write(pytester, f"@pytest.mark.energy(work={work})\ndef test_a(energy_meter):\n    pass\n")
    result = pytester.runpytest()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert message in result.stderr.str() and "test_a" in result.stderr.str()
