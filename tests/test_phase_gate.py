"""Phases in the gate, end to end on the simulator: a training step whose update phase got 30 % heavier,
and nothing else, is named by ``gpuenergy compare`` and by ``pytest --energy-compare`` as ``update``
and no other phase; ``energy_budget(phase=...)`` holds a phase's figures; the HTML report draws the
phases' shares of energy beside their shares of time."""

from __future__ import annotations

import json
import re
import textwrap

import pytest

from pytest_gpuenergy.runs.store import RunStore

from helpers import run_cli

# The training-like step of tests/test_phases.py (forward and backward compute-bound, update and the
# unmarked rest memory-bound), one test whose update work is UPDATE_SCALE times the base's. Its update is
# 22 ms (an optimizer over four times test_phases.py's parameters): the fit bounds it within a few per cent,
# so a 30 % change lies outside both runs' bounds. test_phases.py's 5.5 ms update at 160 W is bounded to
# about ±20 % on the simulated H100, and a 30 % change of it is inconclusive (tests/test_compare.py).
STEP = textwrap.dedent("""
    import os

    from pytest_gpuenergy.meter.phase_design import region_time_needed_s
    from pytest_gpuenergy.sim.work import declare_work

    LENGTHS_S = {"forward": 0.008, "backward": 0.016, "update": 0.022, "other": 0.0064}
    POWERS_W = {"forward": 590.0, "backward": 590.0, "update": 160.0, "other": 160.0}
    UPDATE_SCALE = float(os.environ.get("UPDATE_SCALE", "1.0"))


    def step_of(meter):
        def step():
            with meter.phase("forward"):
                declare_work(flops_tf32=0.8e12, bytes=1e9, kernels=200)
            with meter.phase("backward"):
                declare_work(flops_tf32=1.6e12, bytes=2e9, kernels=400)
            with meter.phase("update"):
                declare_work(bytes=4e10 * UPDATE_SCALE, kernels=200)
            declare_work(bytes=1.2e10, kernels=20)         # other: the next batch's copy, unmarked
        return step


    def test_train(energy_meter):
        needed_s = region_time_needed_s(LENGTHS_S, POWERS_W, 0.1, 0.10, power_noise=0.0)
        energy_meter.measure(step_of(energy_meter), min_time_s=needed_s)
""")
PHASES = ("forward", "backward", "update", "other")
REPEAT = "--energy-repeat=3"


def _named(text: str) -> set[str]:
    """The phases a report's text names as changed: ``update: +30.2 % ETS``."""
    return set(re.findall(r"\b(\w+): [+-]\d+\.\d %", text)) & set(PHASES)


@pytest.mark.slow
def test_a_heavier_update_phase_is_named_by_compare_and_the_gate_and_no_other_phase(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two saved runs, the second with 30 % more update work: the gate (ETS gated, phases reported, then
    phase.ets gated) and ``gpuenergy compare`` in each report name update and no other phase."""
    monkeypatch.setenv("COLUMNS", "100")
    pytester.makepyfile(test_step=STEP)
    pytester.runpytest(REPEAT, "--energy-save").assert_outcomes(passed=1)

    monkeypatch.setenv("UPDATE_SCALE", "1.3")
    gate = pytester.runpytest(REPEAT, "--energy-compare", "--energy-fail=ets:10%", "--energy-save",
                                         "--energy-json=gate.json")
    gate.assert_outcomes(passed=1)
    assert gate.ret == pytest.ExitCode.OK           # the step's ETS moved about 7 %: within 10 %
    gate.stdout.fnmatch_lines(["passed: 0 regressed, *",
                               "phases that changed (each phase's ETS per call; decided with the fit's bounds):",
                               "  test_train [[]current[]]: update: +* % ETS [[]*[]] (increase)"])
    assert _named(gate.stdout.str()) == {"update"}
    [case] = json.loads((pytester.path / "gate.json").read_text())["comparisons"][0]["cases"]
    assert list(case["phases"]) == list(PHASES)
    verdicts = {name: change["verdict"] for name, change in case["phases"].items()}
    assert verdicts.pop("update") == "increase" and set(verdicts.values()) <= {"unchanged", "inconclusive"}
    assert 25.0 < case["phases"]["update"]["change_pct"] < 45.0      # 30 % more work at a higher power
    assert case["phases"]["update"]["old_n"] == case["phases"]["update"]["new_n"] == 3

    gated = pytester.runpytest(REPEAT, "--energy-compare=" + _run_ids(pytester)[0],
                                          "--energy-fail=ets:10%,phase.ets:10%")
    assert gated.ret == pytest.ExitCode.TESTS_FAILED
    regressions = [line for line in gated.stdout.lines if line.startswith("ENERGY REGRESSION")]
    assert len(regressions) == 1 and re.search(r"test_train on GPU 0: update ETS \+\d+\.\d % ", regressions[0])
    gated.stdout.fnmatch_lines(["FAILED: 1 regressed, *", "verdict *", "REGRESSION  test_train  current  update ETS  *"])
    assert _named(gated.stdout.str()) == {"update"}

    old, new = (str(path) for path in _run_paths(pytester))
    shown = run_cli("compare", old, new, "--markdown", "cmp.md", "--html", "cmp.html", "--json", "cmp.json")
    assert _named(shown.stdout) == {"update"} and "update: +" in shown.stdout
    summary = json.loads((pytester.path / "cmp.json").read_text())["comparisons"][0]["summary"]
    assert [(c["phase"], c["verdict"]) for c in summary["phase_changes"]] == [("update", "increase")]
    markdown = (pytester.path / "cmp.md").read_text()
    assert "**Phases that changed" in markdown and _named(markdown) == set()    # the table's cells: phase, change
    rows = [line for line in markdown.splitlines() if line.startswith("| increase ")]
    assert len(rows) == 1 and "| update |" in rows[0] and "% ETS |" in rows[0]
    html = (pytester.path / "cmp.html").read_text()
    assert html.count('<tr class="increase">') == 1 and 'data-label="phase">update</td>' in html
    assert html.count('class="plot phases"') == 1           # the new run's one case with phases
    title = html.split('class="plot phases"')[1].split("<title", 1)[1].split("</title>", 1)[0]
    assert "(simulated): each phase&#x27;s share of the energy beside its share of the time" in title
    assert all(re.search(rf"{name} \d+ % of the time, \d+ % of the energy", title) for name in PHASES), title

    failing = run_cli("compare", old, new, "--fail", "phase.ets:10%", check=False)
    assert failing.returncode == 1 and _named(failing.stdout) == {"update"}
    assert "ENERGY REGRESSION test_step.py::test_train on GPU 0: update ETS +" in " ".join(failing.stdout.split())


def _run_paths(pytester: pytest.Pytester) -> list:
    """The saved runs' files, oldest first (as the store orders them: two runs saved in the same second
    have ids that sort by their random part)."""
    files = {path.stem: path for path in (pytester.path / ".energy").rglob("*.json")}
    return [files[run_id] for run_id in _run_ids(pytester)]


def _run_ids(pytester: pytest.Pytester) -> list[str]:
    return [doc.run_id for doc in RunStore(pytester.path / ".energy").runs()]


# -- energy_budget(phase=...) ----------------------------------------------------------------------

BUDGETS = STEP.replace("def test_train(energy_meter):", "def _train(energy_meter):") + textwrap.dedent("""
    import pytest


    @pytest.mark.energy_budget(phase="update", ets=0.5)
    def test_update_over(energy_meter):
        _train(energy_meter)


    @pytest.mark.energy_budget(phase="update", ets=50.0, time=1.0, edp=50.0)
    @pytest.mark.energy_budget(ets=0.5)                      # the region's: it does not hold the phase
    def test_region_over_update_within(energy_meter):
        _train(energy_meter)


    @pytest.mark.energy_budget(phase="update", gpu="H100", ets=0.5)    # the most specific: GPU model
    @pytest.mark.energy_budget(phase="update", ets=50.0)
    @pytest.mark.energy_budget(phase="update", gpu="V100", ets=50.0)   # another GPU's
    def test_most_specific(energy_meter):
        _train(energy_meter)


    @pytest.mark.energy_budget(phase="backward", time=0.001, edp=1e-6)
    def test_backward_time(energy_meter):
        _train(energy_meter)


    @pytest.mark.energy_budget(phase="optimizer", ets=1.0)
    def test_unmarked_phase(energy_meter):
        _train(energy_meter)


    @pytest.mark.energy_budget(phase="update", ets=1.0)
    def test_no_marks(energy_meter):
        with energy_meter:
            declare_work(bytes=1e10, kernels=10)
""")


def _failure_lines(result: pytest.RunResult, test: str) -> list[str]:
    """The lines of ``test``'s failure report (between its header and the next one)."""
    lines = result.outlines
    start = next(i for i, line in enumerate(lines) if line.startswith("_") and f" {test} " in line)
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith(("_", "="))), len(lines))
    return [line for line in lines[start + 1:end] if line.strip()]


@pytest.mark.slow
def test_a_phase_budget_holds_that_phases_figures_and_a_miss_is_one_line(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_step_budgets=BUDGETS)     # not test_budgets: tests/test_budgets.py may be imported
    result = pytester.runpytest("-p", "no:randomly")
    result.assert_outcomes(passed=0, failed=6)
    [over] = _failure_lines(result, "test_update_over")
    assert re.fullmatch(r"energy budget exceeded: phase 'update' ETS (\d\.\d+) J > budget 0\.5 J \(\+\d+\.\d %\) "
                        r"\(true update ETS within \d\.\d+-\d\.\d+ J\) on GPU 0 NVIDIA H100 80GB HBM3 \(simulated\) "
                        r"at cap current \(enforced 700 W, simulated, n=1\)", over), over
    [region] = _failure_lines(result, "test_region_over_update_within")
    assert region.startswith("energy budget exceeded: ETS ") and "phase" not in region
    [specific] = _failure_lines(result, "test_most_specific")
    assert specific.startswith("energy budget exceeded: phase 'update' ETS ") and "> budget 0.5 J" in specific
    [backward] = _failure_lines(result, "test_backward_time")
    assert re.match(r"energy budget exceeded: phase 'backward' EDP [\d.e-]+ J s > budget 1e-06 J s \(\+[\d.]+ %\); "
                    r"T 0\.01\d+ s > budget 0\.001 s \(", backward), backward
    assert _failure_lines(result, "test_unmarked_phase") == [
        "energy_budget(ets=1, phase='optimizer'): the region on GPU 0 has no phase 'optimizer'; its phases are "
        "forward, backward, update, other"]
    assert _failure_lines(result, "test_no_marks") == [
        "energy_budget(ets=1, phase='update'): the region on GPU 0 has no phase 'update'; it has no phase marks "
        "(with energy_meter.phase(...): inside the measured region)"]


@pytest.mark.parametrize(("marker", "message"), [
    ('phase=3, ets=1.0', "energy_budget phase= must name a phase marked with energy_meter.phase (or 'other'), got 3"),
    ('phase=" ", ets=1.0', "energy_budget phase= must name a phase marked with energy_meter.phase (or 'other'), got ' '"),
    ('phase="update", domain="node", ets=1.0',
     "energy_budget phase='update' holds a phase of the GPUs' energy; drop domain='node' (phases are attributed from "
     "the GPU's counter only)"),
])
def test_a_bad_phase_budget_is_a_one_line_usage_error(pytester: pytest.Pytester, marker: str, message: str) -> None:
    pytester.makepyfile(f"""
        import pytest

        @pytest.mark.energy_budget({marker})
        def test_x(energy_meter):
            pass
    """)
    result = pytester.runpytest("-p", "no:randomly")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert any(line.endswith(message) for line in result.errlines + result.outlines), result.errlines
