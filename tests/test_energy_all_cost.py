"""What ``--energy-all`` does once per session, lazily or not at all, so that a suite of short tests
pays little for being measured (``benchmarks/energy_all_overhead.py`` times it): the behaviour that
keeps it cheap, never its speed. A test's GPUs are held by one fixture, not two, and a fixture of the
plugin asked for late (``request.getfixturevalue``) finds them held; the GPUs' lock folder is walked
to once; numpy is imported only for a region with phase marks, the report writers only for a report asked
for; a case's merged figures are worked
out once for the end of the session."""

from __future__ import annotations

import json
import textwrap

import pytest

from pytest_gpuenergy import trusted_path
from pytest_gpuenergy.gpu import locks
from pytest_gpuenergy.meter.region import PendingResult
from pytest_gpuenergy.meter.results import EnergyResult, GpuResult, Repetition
from pytest_gpuenergy.plugin.session import CaseRecord

from helpers import declare_source

NO_NUMPY_CONFTEST = textwrap.dedent(
    """
    import json, sys

    def pytest_unconfigure(config):     # after the plugin's end of the session
        writers = [m for m in ("html", "json_report", "markdown") if f"pytest_gpuenergy.reports.{m}" in sys.modules]
        with open("modules.json", "w") as out:
            json.dump({"numpy": "numpy" in sys.modules, "session": "pytest_gpuenergy.plugin.session" in sys.modules,
                       "report_writers": writers}, out)
    """
)


@pytest.mark.slow
def test_an_energy_all_session_without_phase_marks_never_imports_numpy(pytester):
    """numpy is 85 modules: a session that measures but splits no region among phases never loads it;
    nor does a session that asks for no report load the report writers (about 40 ms)."""
    pytester.makeconftest(NO_NUMPY_CONFTEST)
    pytester.makepyfile(declare_source() + "\n\ndef test_one():\n    declare(0.005)\n\n\ndef test_two():\n    declare(0.006)\n")
    result = pytester.runpytest_subprocess("--energy-all", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=2)
    assert "test_one" in result.stdout.str() and "test_two" in result.stdout.str()     # both measured, in the table
    assert json.loads((pytester.path / "modules.json").read_text()) == {"numpy": False, "session": True,
                                                                        "report_writers": []}


@pytest.mark.slow
def test_a_plugin_fixture_asked_for_late_under_energy_all_finds_the_gpus_held(pytester):
    """--energy-all's own fixture holds the test's GPUs; ``request.getfixturevalue("energy_meter")`` in
    the test must not hold them a second time (which would start the simulated test's world over in the
    middle of it): the late meter's block and the call phase are both measured, each with its figure."""
    pytester.makepyfile(declare_source() + textwrap.dedent(
        """

        def test_asks_late(request):
            declare(0.004)
            meter = request.getfixturevalue("energy_meter")
            with meter:
                declare(0.2)
            assert 0 < meter.result.ets_j < 700 * 0.25
        """
    ))
    result = pytester.runpytest("--energy-all", "--energy-save", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    saved = [case for path in (pytester.path / ".energy").rglob("*.json") for case in json.loads(path.read_text())["cases"]]
    regions = sorted(case["case_id"].split("::")[1] for case in saved)
    assert regions == ["test_asks_late", "test_asks_late#2"]
    figures = {case["case_id"].split("::")[1]: case["repetitions"][0] for case in saved}
    assert figures["test_asks_late"]["time_s"] == pytest.approx(0.2, rel=0.05)     # the meter's block ends first
    assert figures["test_asks_late#2"]["time_s"] > 0.2                              # the whole call phase, then
    for rep in figures.values():
        assert 0 < rep["ets_low_j"] <= rep["ets_j"] <= rep["ets_high_j"]


def test_the_lock_folder_is_walked_to_once_for_every_lock_taken_in_it(sim_state, monkeypatch):
    """A session takes its GPU's lock for every test: the checked walk from / to the lock folder is done
    once and its descriptor kept, and done again where the folder was removed and made anew."""
    walks: list[str] = []
    real_open_folder = trusted_path.open_folder

    def counting_open_folder(path, **kwargs):
        walks.append(str(path))
        return real_open_folder(path, **kwargs)

    monkeypatch.setattr(trusted_path, "open_folder", counting_open_folder)
    folder = sim_state / "lock-walks"
    paths = locks.lock_paths(folder, ["GPU-a", "GPU-b"])
    for _ in range(5):
        with locks.holding(paths, timeout_s=1):
            pass
    assert walks == [str(folder)]
    for path in paths:
        path.unlink()
    folder.rmdir()
    with locks.holding(paths, timeout_s=1):
        assert sorted(p.name for p in folder.iterdir()) == ["GPU-a.lock", "GPU-b.lock"]
    assert walks == [str(folder)] * 2


def _result(ets_j: float) -> EnergyResult:
    rep = Repetition.of_region(ets_j, 0.9 * ets_j, 1.1 * ets_j, 300.0, 0.5, 1)
    gpu = GpuResult(gpu_index=0, gpu_name="H100", gpu_uuid="GPU-x", backend="sim", simulated=True, method="counter",
                    power_source=None, cap="current", limit_requested_w=None, limit_enforced_w=700.0,
                    default_limit_w=700.0, repetitions=(rep,))
    return EnergyResult(per_gpu=(gpu,))


def test_a_cases_merged_figures_are_worked_out_once_until_its_results_change():
    record = CaseRecord("test_x.py::test_x", [PendingResult.of(_result(100.0))])
    first = record.merged
    assert record.merged is first                                   # the end of the session asks several times
    record.results.append(PendingResult.of(_result(120.0)))         # a repetition more (--energy-repeat)
    both = record.merged
    assert [rep.ets_j for rep in both.per_gpu[0].repetitions] == [100.0, 120.0]
    record.results = record.results[1:]                             # a failed figure dropped (``_drop_failed``)
    assert [rep.ets_j for rep in record.merged.per_gpu[0].repetitions] == [120.0]
