"""GPUs that disagree with what they are asked: a maximum above the default (GeForce boards), a limit
enforced in steps or held down by another power manager. Percent caps, the enforced limit, its notice,
budgets matched by cap and the run document must all follow what the GPU really does."""

from __future__ import annotations

import json
import textwrap

from helpers import cli_in_process, declare_source, gpu_info

CAP_VALUE = textwrap.dedent(
    """
    import json, os

    def test_cap(gpu_power_cap, energy_meter):
        energy_meter.measure(declare, 0.01)
        with open(f"cap-{gpu_power_cap.label}.json", "w") as out:
            json.dump({"requested": gpu_power_cap.requested_w, "enforced": gpu_power_cap.enforced_w,
                       "previous": gpu_power_cap.previous_w}, out)
    """
)


def cap_seen(pytester, label: str) -> dict:
    return json.loads((pytester.path / f"cap-{label}.json").read_text())


def test_a_geforce_boards_percent_caps_are_of_its_default_not_its_maximum(pytester, monkeypatch):
    monkeypatch.setenv("GPUENERGY_SIM_GPUS", "RTX4090")
    rows = json.loads(cli_in_process("info", "--json", "--gpu-backend=sim").stdout)
    assert (rows[0]["default_limit_w"], rows[0]["min_limit_w"], rows[0]["max_limit_w"]) == (450.0, 150.0, 600.0)
    pytester.makepyfile(test_c=declare_source() + CAP_VALUE)
    pytester.runpytest("--gpu-caps=60%,100%,max", "--energy-save").assert_outcomes(passed=3)
    assert cap_seen(pytester, "60%")["enforced"] == 270.0             # 60 % of 450 W, not of 600 W
    assert cap_seen(pytester, "100%")["enforced"] == 450.0            # 100 % is the default
    assert cap_seen(pytester, "max")["enforced"] == 600.0
    doc = json.loads(next((pytester.path / ".energy").rglob("*.json")).read_text())
    assert sorted((c["cap"], c["limit_requested_w"], c["default_limit_w"]) for c in doc["cases"]) == [
        ("100%", 450.0, 450.0), ("60%", 270.0, 450.0), ("max", 600.0, 450.0)]
    assert gpu_info()[0]["current_limit_w"] == 450.0                   # and back to its default after


def test_a_budget_keyed_by_a_percent_cap_matches_the_defaults_share(pytester, monkeypatch):
    monkeypatch.setenv("GPUENERGY_SIM_GPUS", "RTX4090")
    pytester.makepyfile(test_c=declare_source() + textwrap.dedent(
        """
        import pytest

        @pytest.mark.energy_budget(cap="60%", ets=1e-6)          # 270 W on this board: must match
        @pytest.mark.energy_budget(cap=360, ets=1e6)             # 60 % of its maximum: must not
        def test_cap(gpu_power_cap, energy_meter):
            energy_meter.measure(declare, 0.01)
        """
    ))
    result = pytester.runpytest("--gpu-caps=60%")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*energy budget exceeded: ETS * > budget 1e-06 J*at cap 60% (enforced 270 W*"])


def test_a_limit_enforced_in_steps_is_recorded_said_and_matched_by_the_cap_asked(pytester, monkeypatch):
    monkeypatch.setenv("GPUENERGY_SIM_FAULTS", "limit_rounded")
    pytester.makepyfile(test_c=declare_source() + CAP_VALUE)
    result = pytester.runpytest("--gpu-caps=333", "--energy-save", "-W", "error", "-W", "ignore::pytest.PytestAssertRewriteWarning")
    result.assert_outcomes(passed=1)
    assert cap_seen(pytester, "333W") == {"requested": 333.0, "enforced": 325.0, "previous": 700.0}
    said = " ".join(result.stdout.str().split())
    assert "gpuenergy: note: GPU 0 (NVIDIA H100 80GB HBM3 (simulated)) enforces 325 W after a request for 333 W" in said
    case = json.loads(next((pytester.path / ".energy").rglob("*.json")).read_text())["cases"][0]
    assert (case["limit_requested_w"], case["limit_enforced_w"]) == (333.0, 325.0)
    # the simulated GPU draws under what it enforces: mean power never above 325 W
    assert max(rep["mean_power_w"] for rep in case["repetitions"]) <= 325.0
    pytester.makepyfile(test_b=declare_source() + textwrap.dedent(
        """
        import pytest

        @pytest.mark.energy_budget(cap=333, ets=1e-6)     # the cap asked for names the case
        def test_cap(gpu_power_cap, energy_meter):
            energy_meter.measure(declare, 0.01)
        """
    ))
    budgeted = pytester.runpytest("test_b.py", "--gpu-caps=333")
    budgeted.assert_outcomes(failed=1)
    budgeted.stdout.fnmatch_lines(["*at cap 333W (enforced 325 W, simulated*"])


def test_a_limit_another_manager_holds_down_comes_back_as_it_was_set(pytester, sim_state, monkeypatch):
    """A BMC holds an H100 at 70 % of its maximum (490 W) whatever is set: a 600 W cap is enforced at
    490 W, and the restore puts back the 700 W that was *set* (what it enforces is not ours to change)."""
    monkeypatch.setenv("GPUENERGY_SIM_FAULTS", "limit_clamped")
    pytester.makepyfile(test_c=declare_source() + CAP_VALUE)
    result = pytester.runpytest("--gpu-caps=600,300")
    result.assert_outcomes(passed=2)
    assert cap_seen(pytester, "600W")["enforced"] == 490.0 and cap_seen(pytester, "300W")["enforced"] == 300.0
    assert "GPU LEFT AT A CHANGED POWER LIMIT" not in result.stdout.str()
    info = gpu_info()[0]
    assert (info["current_limit_w"], info["enforced_limit_w"]) == (700.0, 490.0)
    assert not list((sim_state / "journal").glob("GPU-*.json"))
