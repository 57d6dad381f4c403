"""Existing suites measured (``--energy-all --gpu-caps``) beside the plugins and habits they already
have: every test ends as it does without the plugin. Each test here is a defect found by trying a
real project's suite or a popular plugin (2026-11-28), and fails with its fix reverted: Hypothesis
methods at their second cap, tests that other code finds by name (syrupy, pytest-regressions,
pytest-dependency, pytest-mpl), tests that stop the clock, and a project's own ``energy`` markers."""

from __future__ import annotations

import json
import textwrap

import pytest

from helpers import enable, same_outcome_without_the_plugin


def test_matrix_hypothesis_methods_run_at_every_cap_as_a_parametrised_test_does(pytester, monkeypatch):
    """Found in attrs' own suite (1,347 tests): with ``--energy-all --gpu-caps=60%,100%`` 59 of its
    ``@given`` methods failed at their second cap with Hypothesis's ``differing_executors`` health
    check (each cap runs the method on a new instance of its class), though the suite passes
    without the plugin and a method parametrised by hand passes too."""
    enable(monkeypatch, "hypothesispytest")
    pytester.makepyfile(test_h=textwrap.dedent(
        """
        import pytest
        from hypothesis import given, settings, strategies as st

        class TestProperties:
            @settings(max_examples=5)
            @given(st.integers())
            def test_method(self, x):
                assert isinstance(x, int)

            @pytest.mark.parametrize("k", [1, 2])
            @settings(max_examples=5)
            @given(st.integers())
            def test_parametrised_method(self, k, x):
                assert isinstance(x, int)

        @settings(max_examples=5)
        @given(st.integers())
        def test_function(x):
            assert isinstance(x, int)
        """
    ))
    plain = pytester.runpytest("-p", "hypothesispytest", "-p", "no:gpuenergy")
    plain.assert_outcomes(passed=4)
    for extra in ((), ("-p", "xdist", "-n", "2")):
        result = pytester.runpytest_subprocess("-p", "hypothesispytest", "--energy-all", "--gpu-caps=60%,100%", "-v", *extra)
        result.assert_outcomes(passed=8)
        result.stdout.fnmatch_lines(["*PASSED*test_method?100%?*" if extra else "*test_method?100%? PASSED*"])


SNAPSHOT_SUITE = textwrap.dedent(
    """
    import unittest
    import pytest

    def test_snap(snapshot):
        assert {"a": [1, 2]} == snapshot

    def test_data(data_regression):
        data_regression.check({"a": 1})

    @pytest.mark.gpu_caps("60%")
    def test_snap_at_a_cap_of_its_own(snapshot):
        assert 3 == snapshot

    def test_plain():
        pass

    class TestOld(unittest.TestCase):
        def test_old(self):
            pass
    """
)


@pytest.mark.parametrize("workers", [(), ("-p", "xdist", "-n", "2")], ids=["serial", "xdist"])
def test_matrix_snapshots_and_regression_files_named_after_the_test_run_once_under_energy_all(pytester, monkeypatch, workers):
    """Found trying syrupy and pytest-regressions (2026-11-28): with ``--energy-all --gpu-caps=60%,100%``
    a snapshot test ran as ``test_snap[60%]`` and failed (no snapshot of that name), and a
    data_regression test failed and wrote ``test_data_60__.yml`` into the project. Such a test now
    runs once, at the current limit, and the end of the session says which and why (from pytest-xdist's
    workers too, as it says of a unittest.TestCase method, which pytest cannot run once per cap)."""
    enable(monkeypatch, "syrupy", "regressions", "pytest-datadir")
    pytester.makepyfile(test_s=SNAPSHOT_SUITE)
    pytester.runpytest("-p", "syrupy", "-p", "regressions", "-p", "no:gpuenergy", "--snapshot-update")
    pytester.runpytest("-p", "syrupy", "-p", "regressions", "-p", "no:gpuenergy").assert_outcomes(passed=5)
    def stored_results() -> list[str]:      # syrupy's and pytest-regressions' folders in the project
        return sorted(str(p.relative_to(pytester.path)) for folder in ("__snapshots__", "test_s")
                      for p in (pytester.path / folder).iterdir() if p.suffix != ".lock")   # (syrupy's, under xdist)

    stored = stored_results()
    assert stored == ["__snapshots__/test_s.ambr", "test_s/test_data.yml"]
    result = pytester.runpytest_subprocess("-p", "syrupy", "-p", "regressions", "--energy-all", "--gpu-caps=60%,100%",
                                           "--energy-json=report.json", "-rA", *workers)
    # test_plain at each cap; the rest once; the test with caps of its own at its cap, under a name with the
    # cap, for which no snapshot was stored: the marker is the way to measure such a test at caps all the same
    result.assert_outcomes(passed=5, failed=1)
    result.stdout.fnmatch_lines(["FAILED test_s.py::test_snap_at_a_cap_of_its_own[[]60%[]]*"])
    assert stored_results() == stored and (pytester.path / "__snapshots__/test_s.ambr").stat().st_size > 0
    cases = {c["case_id"]: c["cap"] for c in json.loads((pytester.path / "report.json").read_text())["runs"][0]["cases"]}
    assert cases == {"test_s.py::test_snap": "current", "test_s.py::test_data": "current",
                     "test_s.py::test_plain[60%]": "60%",
                     "test_s.py::test_plain[100%]": "100%", "test_s.py::TestOld::test_old": "current"}
    text = " ".join(result.stdout.str().split())
    assert ("gpuenergy: note: 1 test ran once, at the GPU's current limit, not once per cap: with snapshot (syrupy), "
            "results are kept under the test's name, and a cap in the name would miss them") in text
    assert text.count("with snapshot (syrupy)") == 1 and "with data_regression (pytest-regressions)" in text
    assert ("pytest cannot run a unittest.TestCase method or a doctest once per setting (a test function runs at every "
            "cap): test_s.py::TestOld::test_old") in text


def test_matrix_pytest_dependency_finds_its_tests_under_energy_all(pytester, monkeypatch):
    """Found trying pytest-dependency (2026-11-28): under ``--energy-all --gpu-caps`` ``test_b``, which
    depends on ``test_a``, was skipped at every cap, because no test was named ``test_a`` any more.
    Tests with its mark run once, at the current limit, under their own names; pytest-order's
    ``after=`` finds parametrised tests as they are."""
    enable(monkeypatch, "dependency")
    pytester.makepyfile(test_d=textwrap.dedent(
        """
        import pytest

        @pytest.mark.dependency()
        def test_a():
            pass

        @pytest.mark.dependency(depends=["test_a"])
        def test_b():
            pass

        def test_c():
            pass
        """
    ))
    assert same_outcome_without_the_plugin(pytester, "-p", "dependency") == {"passed": 3}
    result = pytester.runpytest("-p", "dependency", "--energy-all", "--gpu-caps=60%,100%", "-rA")
    result.assert_outcomes(passed=4)
    result.stdout.fnmatch_lines(["PASSED test_d.py::test_a", "PASSED test_d.py::test_b", "PASSED test_d.py::test_c[[]60%[]]",
                                 "PASSED test_d.py::test_c[[]100%[]]"], consecutive=False)
    assert ("2 tests ran once, at the GPU's current limit, not once per cap: with pytest-dependency's dependency "
            "mark, tests find each other by name") in " ".join(result.stdout.str().split())


def test_matrix_pytest_mpl_finds_its_baseline_images_under_energy_all(pytester, monkeypatch):
    """Found trying pytest-mpl (2026-11-28): under ``--energy-all --gpu-caps`` ``test_plot[60%]`` found
    no baseline image (they are kept under the test's name) and failed at every cap."""
    enable(monkeypatch, "pytest_mpl")
    pytester.makepyfile(test_m=textwrap.dedent(
        """
        import matplotlib
        import pytest

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        @pytest.mark.mpl_image_compare
        def test_plot():
            figure, axes = plt.subplots()
            axes.plot([1, 2, 3])
            return figure
        """
    ))
    pytester.runpytest("-p", "pytest_mpl", "-p", "no:gpuenergy", "--mpl-generate-path=baseline")
    assert [p.name for p in (pytester.path / "baseline").iterdir()] == ["test_plot.png"]
    compare = ("-p", "pytest_mpl", "--mpl", "--mpl-baseline-path=baseline")
    pytester.runpytest(*compare, "-p", "no:gpuenergy").assert_outcomes(passed=1)
    result = pytester.runpytest(*compare, "--energy-all", "--gpu-caps=60%,100%", "-rA")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["PASSED test_m.py::test_plot"])
    assert ("1 test ran once, at the GPU's current limit, not once per cap: with pytest-mpl's mpl_image_compare mark, "
            "baseline images are kept under the test's name") in " ".join(result.stdout.str().split())


@pytest.mark.parametrize("workers", [(), ("-p", "xdist", "-n", "2")], ids=["serial", "xdist"])
def test_matrix_a_test_that_stops_the_clock_is_measured_on_the_real_one(pytester, monkeypatch, workers):
    """Found trying freezegun, pytest-freezer and time-machine (2026-11-28): on real time (the simulator's
    wall clock here, as on a real GPU) a test with the ``freezer`` fixture hung ``--energy-all``: the
    plugin waited for the counter's publications on ``time.monotonic``, which freezegun had stopped;
    time-machine's ``move_to(..., tick=False)`` stopped ``time.time``, the simulator's clock. The plugin
    times on the clocks as they were at its import (``realtime``): each test passes, in seconds, and
    its region is as long as its work."""
    enable(monkeypatch, "freezer", "time_machine")
    monkeypatch.setenv("GPUENERGY_SIM_CLOCK", "wall")
    pytester.makepyfile(test_f=textwrap.dedent(
        """
        import datetime
        import time

        import pytest
        from freezegun import freeze_time

        UTC = datetime.timezone.utc

        def work():
            end = time.thread_time() + 0.05
            while time.thread_time() < end:
                pass

        @freeze_time("2020-01-01")
        def test_decorated():
            work()
            assert datetime.datetime.now().year == 2020

        def test_freezer(freezer):
            freezer.move_to("2021-01-01")
            work()
            assert datetime.datetime.now().year == 2021

        @pytest.mark.freeze_time("2019-05-05")
        def test_marked():
            work()
            assert datetime.date.today().year == 2019

        def test_time_machine(time_machine):
            time_machine.move_to(datetime.datetime(1999, 1, 1, tzinfo=UTC), tick=False)
            work()
            assert datetime.datetime.now(UTC).year == 1999 and time.time() < 1e9
        """
    ))
    result = pytester.runpytest_subprocess("-p", "freezer", "-p", "time_machine", "--energy-all", "--energy-json=report.json",
                                           *workers, timeout=120)
    result.assert_outcomes(passed=4)
    cases = json.loads((pytester.path / "report.json").read_text())["runs"][0]["cases"]
    assert len(cases) == 4
    for case in cases:
        assert 0.04 <= case["time_s"] <= 5.0 and case["ets_j"] > 0, case


PROJECT_MARKERS = textwrap.dedent(
    """
    import pytest

    @pytest.mark.energy("kinetic")
    def test_kinetic():
        pass

    @pytest.mark.energy_budget(100)
    def test_budget():
        pass

    def test_plain():
        pass
    """
)


def test_a_projects_own_energy_markers_stay_its_own(pytester):
    """Found trying a physics-style suite (2026-11-28): a project whose tests carry markers of their
    own named ``energy`` and ``energy_budget`` could not run at all once the plugin was installed (a
    usage error: "energy takes keyword arguments only"), though it used none of the plugin. A marker
    the plugin cannot read is now left alone in a session that uses the plugin nowhere; under
    ``--energy-all`` it is the project's where the project registers it, and the end says so."""
    pytester.makepyfile(test_m=PROJECT_MARKERS)
    assert same_outcome_without_the_plugin(pytester) == {"passed": 3}          # registered nowhere
    unregistered = pytester.runpytest("--energy-all")
    assert unregistered.ret == pytest.ExitCode.USAGE_ERROR
    assert any("energy takes keyword arguments only" in line and "register it in your pytest configuration" in line
               for line in unregistered.errlines + unregistered.outlines)
    pytester.makeini("[pytest]\nmarkers =\n    energy: tests of the energy module\n    energy_budget(value): physics\n")
    assert same_outcome_without_the_plugin(pytester, "--strict-markers") == {"passed": 3}
    for extra in ((), ("-p", "xdist", "-n", "2")):
        result = pytester.runpytest_subprocess("--energy-all", "--strict-markers", "--energy-json=report.json", *extra)
        result.assert_outcomes(passed=3)
        text = " ".join(result.stdout.str().split())
        assert ("this project registers a marker named energy of its own: --energy-all measured 1 test that carries it "
                "and takes none of the plugin's fixtures as if it had none") in text and text.count("named energy of") == 1
        assert "registers a marker named energy_budget of its own" in text and "test_m.py::test_budget" in text
        assert len(json.loads((pytester.path / "report.json").read_text())["runs"][0]["cases"]) == 3
    pytester.makepyfile(test_m=PROJECT_MARKERS + "\n@pytest.mark.energy('x')\ndef test_meter(energy_meter):\n    pass\n")
    taken = pytester.runpytest("--energy-all")          # on a test that takes the plugin's fixture it is the plugin's
    assert taken.ret == pytest.ExitCode.USAGE_ERROR


PROJECT_CAPS_MARKER = textwrap.dedent(
    """
    import pytest

    @pytest.mark.gpu_caps("fp64")
    def test_needs_fp64():
        pass

    @pytest.mark.gpu_caps(2)
    def test_two_gpus():
        pass

    def test_plain():
        pass
    """
)


def test_a_projects_own_gpu_caps_marker_stays_its_own(pytester):
    """As a project's own ``energy`` markers (above): a suite whose tests carry a ``gpu_caps`` marker of
    its own (what GPU capabilities a test needs) failed ``--energy-all`` at collection ("fp64" is no
    cap), or had its tests run at caps it never asked for (``gpu_caps(2)``: 2 W, skipped as out of
    range). Registered by the project, on a test that takes none of the plugin's fixtures, the marker
    is the project's: the test runs at the session's caps, and the end of the session says so."""
    pytester.makepyfile(test_m=PROJECT_CAPS_MARKER)
    assert same_outcome_without_the_plugin(pytester) == {"passed": 3}
    unregistered = pytester.runpytest("--energy-all", "--gpu-caps=60%,100%")
    assert unregistered.ret == pytest.ExitCode.USAGE_ERROR
    assert any("test_needs_fp64" in line and "register it in your pytest configuration, markers = gpu_caps" in line
               for line in unregistered.errlines + unregistered.outlines)
    pytester.makeini("[pytest]\nmarkers =\n    gpu_caps(*needs): what GPU the test needs\n")
    assert same_outcome_without_the_plugin(pytester, "--strict-markers") == {"passed": 3}
    for extra in ((), ("-p", "xdist", "-n", "2")):
        result = pytester.runpytest_subprocess("--energy-all", "--gpu-caps=60%,100%", "--strict-markers", "-v", *extra)
        result.assert_outcomes(passed=6)
        for test in ("test_needs_fp64", "test_two_gpus", "test_plain"):
            assert sum("PASSED" in line and (f"{test}[60%]" in line or f"{test}[100%]" in line)
                       for line in result.outlines) == 2, result.outlines
        text = " ".join(result.stdout.str().split())
        assert ("this project registers a marker named gpu_caps of its own: --energy-all measured 2 tests that carry it "
                "and take none of the plugin's fixtures as if they had none") in text, text[-1500:]
        assert text.count("named gpu_caps of") == 1
    pytester.makepyfile(test_m=PROJECT_CAPS_MARKER + "\n@pytest.mark.gpu_caps('fp64')\ndef test_capped(gpu_power_cap):\n    pass\n")
    taken = pytester.runpytest("--energy-all", "--gpu-caps=60%")   # on a test that takes the plugin's fixture it is the plugin's
    assert taken.ret == pytest.ExitCode.USAGE_ERROR
    assert not any("register it" in line for line in taken.errlines + taken.outlines)
