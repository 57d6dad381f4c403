"""The CI gate's decision: thresholds, the statistical test, and comparing two run documents."""

from __future__ import annotations

import math
import time
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_gpuenergy.gate.compare import baseline_comparison, compare_documents
from pytest_gpuenergy.gate.decide import decide
from pytest_gpuenergy.gate.records import MISSING, NEW, THRESHOLD_ONLY, SessionNoise
from pytest_gpuenergy.gate.settings import check_confidence, parse_thresholds
from pytest_gpuenergy.gate.student_t import student_t_cdf, student_t_ppf
from pytest_gpuenergy.gate.verdicts import (
    CHANGED,
    DECREASE,
    IMPROVEMENT,
    INCONCLUSIVE,
    INCREASE,
    REGRESSION,
    UNCHANGED,
    UNDEFINED,
    Evidence,
    classify,
    interval_text,
    pct_text,
)
from pytest_gpuenergy.runs.store import RunStore

from helpers import H100, H100_REAL, V100, machine, make_doc, wide_runs, with_phases

GATE = {"ets": 5.0, "edp": 10.0, "time": 5.0}
CASE = "tests/test_suite.py::test_train[alexnet-train-300W]"


def _samples(mean: float, cv: float, n: int, seed: int) -> list[float]:
    return list(mean * np.exp(np.random.default_rng(seed).normal(0.0, cv, n)))


# -- thresholds ------------------------------------------------------------------------------------

@pytest.mark.parametrize("text, expected", [
    ("ets:5%,edp:10%,time:5%", {"ets": 5.0, "edp": 10.0, "time": 5.0}),
    ("ets:5", {"ets": 5.0}),
    (" ETS : 2.5 % , edp=0% ", {"ets": 2.5, "edp": 0.0}),
    ("time:1e1%", {"time": 10.0}),
])
def test_thresholds_parse(text, expected):
    assert parse_thresholds(text) == expected


@pytest.mark.parametrize("text, named", [
    ("", "no threshold given"),
    ("ets", "'ets' is not a threshold"),
    ("ets:five%", "'ets:five%' is not a threshold"),
    ("ets:-5%", "'ets:-5%' is not a threshold"),
    ("energy:5%", "unknown metric 'energy' in 'energy:5%'"),
    ("ets:5%,,edp:10%", "empty item"),
    ("ets:5%,ets:6%", "ets is given twice"),
    ("ets:5000%", "from 0 to 1000"),
])
def test_bad_thresholds_name_the_item_and_the_form(text, named):
    with pytest.raises(ValueError) as info:
        parse_thresholds(text)
    message = str(info.value)
    assert message.startswith("--energy-fail: ") and named in message
    if "given twice" not in named:
        assert "METRIC:PERCENT" in message and "ets:5%,edp:10%" in message


def test_threshold_errors_can_name_another_option():
    with pytest.raises(ValueError, match=r"^--fail: 'x' is not a threshold.*--fail=ets:5%"):
        parse_thresholds("x", source="--fail")


@pytest.mark.parametrize("bad", [0.5, 1.0, 99, -0.1, True, "99", math.nan])
def test_confidence_must_be_between_one_half_and_one(bad):
    with pytest.raises(ValueError, match="not a confidence level"):
        check_confidence(bad)


# -- Student's t ----------------------------------------------------------------------------------

@pytest.mark.parametrize("p, df, table", [
    (0.99, 4, 3.7469), (0.975, 10, 2.2281), (0.95, 1, 6.3138), (0.99, 30, 2.4573), (0.9, 1e6, 1.2816),
])
def test_t_quantiles_match_the_tables(p, df, table):
    assert student_t_ppf(p, df) == pytest.approx(table, abs=2e-4)


def test_t_distribution_matches_scipy_everywhere():
    from scipy import stats  # a dev dependency: the reference the plugin's own quantiles must match
    for df in (0.7, 1, 1.9, 3.3, 8, 25, 300, 1e5):
        for p in (0.5001, 0.8, 0.95, 0.99, 0.999):
            assert student_t_ppf(p, df) == pytest.approx(stats.t.ppf(p, df), rel=1e-8)
        for t in (-4.0, -0.3, 0.0, 1e-7, 2.0, 30.0):
            assert student_t_cdf(t, df) == pytest.approx(stats.t.cdf(t, df), abs=1e-10)


# -- the decision ---------------------------------------------------------------------------------

def test_no_change_with_two_percent_noise_is_unchanged():
    verdicts = []
    for seed in range(20):
        old, new = _samples(100, 0.02, 5, seed), _samples(100, 0.02, 5, seed + 1000)
        change = decide("ets", old, new, 5.0)
        verdicts.append(change.verdict)
        assert change.verdict in (UNCHANGED, INCONCLUSIVE), change.reason
        assert (change.verdict == UNCHANGED) == (change.ci_high_pct - change.ci_low_pct <= 10), change.reason
    assert verdicts.count(UNCHANGED) >= 12


def test_thirty_percent_more_is_a_regression_with_change_and_interval_in_the_text():
    change = decide("ets", _samples(100, 0.02, 5, 1), _samples(130, 0.02, 5, 2), 5.0)
    assert change.verdict == REGRESSION
    assert 25 < change.change_pct < 35 and 0 < change.ci_low_pct < change.change_pct < change.ci_high_pct
    assert f"{change.change_pct:+.1f} %" in change.reason
    assert f"[{change.ci_low_pct:+.1f}, {change.ci_high_pct:+.1f}]" in change.reason
    assert "99 % confidence" in change.reason and "n=5/5" in change.reason and "5 % threshold" in change.reason


def test_thirty_percent_less_is_an_improvement():
    change = decide("edp", _samples(100, 0.02, 5, 3), _samples(70, 0.02, 5, 4), 10.0)
    assert change.verdict == IMPROVEMENT and change.ci_high_pct < 0


def test_a_change_the_meters_bounds_can_explain_is_never_a_regression():
    """Short regions are coarse: +30 % measured, but the bounds of the two means overlap."""
    old, new = _samples(100, 0.02, 5, 1), _samples(130, 0.02, 5, 2)
    wide = ((60.0, 140.0), (80.0, 170.0))
    change = decide("ets", old, new, 5.0, bounds=wide)
    assert change.verdict == INCONCLUSIVE and "own error bounds" in change.reason and "60-140 J" in change.reason
    tight = ((99.0, 101.0), (128.0, 132.0))
    assert decide("ets", old, new, 5.0, bounds=tight).verdict == REGRESSION
    assert decide("ets", old[:1], new[:1], 5.0, bounds=wide).verdict == INCONCLUSIVE     # threshold-only too


def test_documents_with_coarse_figures_gate_nothing_the_bounds_can_explain():
    def coarse(doc):
        return replace(doc, cases=tuple(
            replace(case, repetitions=tuple(replace(r, ets_low_j=0.5 * r.ets_j, ets_high_j=1.6 * r.ets_j)
                                            for r in case.repetitions))
            for case in doc.cases))

    old, new = coarse(make_doc(seed=1)), coarse(make_doc(seed=2, minutes=60, scale={CASE: 1.3}))
    comparison = compare_documents(old, new, GATE)
    assert not comparison.failed
    assert next(c for c in comparison.cases if c.case_id == CASE).metric("ets").verdict == INCONCLUSIVE


def test_a_large_change_in_very_noisy_samples_is_inconclusive_with_a_hint():
    old = [100, 60, 140, 80, 120]
    new = [150, 70, 170, 95, 110]
    change = decide("ets", old, new, 5.0)
    assert change.change_pct > 5 and change.ci_low_pct < 0
    assert change.verdict == INCONCLUSIVE and "cannot tell" in change.reason
    assert "more repetitions" in change.hint and "n=5/5" in change.hint


def test_an_interval_wider_than_the_threshold_is_inconclusive_not_unchanged():
    """A small change measured at 5 % noise with 3 repetitions: a 5 % change could not have been seen."""
    old = [95.0, 100.0, 105.0]
    new = [96.0, 101.0, 106.0]
    change = decide("ets", old, new, 5.0)
    assert (change.ci_high_pct - change.ci_low_pct) / 2 > 5 and abs(change.change_pct) < 5
    assert change.verdict == INCONCLUSIVE and "wider than ±5 %" in change.reason


def test_unchanged_is_the_common_verdict_of_a_well_measured_unchanged_workload():
    rng = np.random.default_rng(5)
    verdicts = [decide("ets", list(100 * np.exp(rng.normal(0, 0.02, 5))), list(100 * np.exp(rng.normal(0, 0.02, 5))),
                       5.0).verdict for _ in range(400)]
    assert verdicts.count(UNCHANGED) / len(verdicts) > 0.8 and verdicts.count(REGRESSION) <= 4


def test_a_real_change_below_the_threshold_is_unchanged():
    change = decide("ets", [100.0, 100.1, 99.9, 100.0], [103.0, 103.1, 102.9, 103.0], 5.0)
    assert change.ci_low_pct > 0 and change.verdict == UNCHANGED and "within the 5 % threshold" in change.reason


def test_one_function_decides_and_measurement_bounds_make_a_regression_inconclusive():
    real = Evidence(change_pct=12.0, low_pct=8.0, high_pct=16.0, confidence=0.99)
    assert classify(real, 5.0)[0] == REGRESSION
    within = Evidence(12.0, 8.0, 16.0, 0.99, within_measurement_bounds=True)
    verdict, why = classify(within, 5.0)
    assert verdict == INCONCLUSIVE and "measurements' own error bounds" in why
    assert classify(Evidence(-12.0, -16.0, -8.0, 0.99), 5.0)[0] == IMPROVEMENT
    assert classify(Evidence(1.0, -2.0, 3.0, 0.99), 5.0)[0] == UNCHANGED
    assert classify(Evidence(1.0, -9.0, 12.0, 0.99), 5.0)[0] == INCONCLUSIVE
    assert classify(Evidence(8.0, -1.0, 17.0, 0.99), None)[0] == INCONCLUSIVE
    assert classify(Evidence(30.0, 20.0, 40.0, 0.99), None)[0] == INCREASE


def test_absurd_bounds_read_as_what_they_are():
    assert interval_text(-95.5, 3396.8) == "[< -90, > +1000]"
    assert interval_text(-3.25, 12.0) == "[-3.2, +12.0]" or interval_text(-3.25, 12.0) == "[-3.3, +12.0]"
    assert pct_text(24.8) == "+24.8 %" and pct_text(5000.0) == "> +1000 %"
    change = decide("ets", [1.0, 30.0], [1.2, 36.0], 5.0)
    assert change.verdict == INCONCLUSIVE and "> +1000" in change.reason and "e+" not in change.reason


def test_one_repetition_decides_by_threshold_alone_and_says_so():
    change = decide("ets", [100.0], _samples(130, 0.02, 5, 1), 5.0)
    assert change.verdict == REGRESSION and change.method == THRESHOLD_ONLY
    assert change.ci_low_pct is None and change.ci_high_pct is None
    assert "threshold only" in change.reason and "n=1/5" in change.reason and "at least 2" in change.reason
    assert decide("ets", [100.0], [103.0], 5.0).verdict == UNCHANGED
    assert decide("ets", [100.0], [90.0], 5.0).verdict == IMPROVEMENT


def test_a_metric_without_threshold_is_reported_but_never_regresses():
    change = decide("time", _samples(1.0, 0.01, 5, 1), _samples(1.5, 0.01, 5, 2), None)
    assert change.verdict == INCREASE and change.change_pct > 40 and "not gated" in change.reason
    assert decide("time", _samples(1.0, 0.01, 5, 1), _samples(0.5, 0.01, 5, 2), None).verdict == DECREASE
    assert decide("time", [1.0], [1.01], None).verdict == UNCHANGED


def test_no_spread_makes_the_interval_the_point():
    change = decide("ets", [100.0, 100.0, 100.0], [110.0, 110.0, 110.0], 5.0)
    assert change.verdict == REGRESSION and change.ci_low_pct == change.ci_high_pct == pytest.approx(10.0)


def test_zero_means_have_no_ratio():
    change = decide("ets", [0.0, 0.0], [1.0, 1.1], 5.0)
    assert change.verdict == UNDEFINED and change.change_pct is None and "above 0" in change.reason


def test_false_regressions_are_about_one_percent_at_99_percent_confidence():
    """Calibration: unchanged workloads with 2-5 % (unequal) noise, n=5 against n=4."""
    rng = np.random.default_rng(12345)
    trials, real = 1500, 0
    for _ in range(trials):
        old = 100 * np.exp(rng.normal(0, rng.uniform(0.02, 0.05), 5))
        new = 100 * np.exp(rng.normal(0, rng.uniform(0.02, 0.05), 4))
        real += decide("ets", list(old), list(new), 0.0).verdict == REGRESSION
    assert 0.002 <= real / trials <= 0.025


@settings(max_examples=60, deadline=None)
@given(
    old=st.lists(st.floats(1.0, 1e4), min_size=2, max_size=8),
    factor=st.floats(0.3, 3.0),
    noise=st.lists(st.floats(0.9, 1.1), min_size=2, max_size=8),
)
def test_interval_holds_the_change_and_swapping_mirrors_the_verdict(old, factor, noise):
    new = [factor * x for x in noise]
    forward = decide("ets", old, new, 5.0)
    backward = decide("ets", new, old, 5.0)
    assert forward.ci_low_pct <= forward.change_pct + 1e-9 and forward.change_pct <= forward.ci_high_pct + 1e-9
    mirror = {REGRESSION: IMPROVEMENT, IMPROVEMENT: REGRESSION, UNCHANGED: UNCHANGED, INCONCLUSIVE: INCONCLUSIVE}
    if abs(forward.change_pct) > 6 and abs(backward.change_pct) > 6:   # away from the threshold's edge
        assert backward.verdict == mirror[forward.verdict]
    if forward.verdict == REGRESSION:
        assert forward.change_pct > 5 and forward.ci_low_pct > 0


# -- comparing documents ------------------------------------------------------------------------------

def test_documents_compare_case_by_case():
    old = make_doc(seed=1)
    new = make_doc(seed=2, minutes=60, scale={CASE: 1.3, "tests/test_suite.py::test_train[vgg-infer-500W]": 0.7})
    comparison = compare_documents(old, new, GATE)
    assert comparison.comparable and comparison.old_run_id == old.run_id and comparison.new_run_id == new.run_id
    verdicts = {c.case_id: c.verdict for c in comparison.cases}
    assert verdicts.pop(CASE) == REGRESSION
    assert verdicts.pop("tests/test_suite.py::test_train[vgg-infer-500W]") == IMPROVEMENT
    assert set(verdicts.values()) <= {UNCHANGED, INCONCLUSIVE} and list(verdicts.values()).count(UNCHANGED) >= 6
    assert [c.case_id for c in comparison.regressions] == [CASE] and comparison.failed
    regressed = comparison.regressions[0]
    assert regressed.key == (CASE, "300W", 0) and regressed.cap == "300W" and regressed.gpu_name == H100
    assert {m.metric for m in regressed.regressed_metrics} == {"ets", "edp"}
    assert comparison.counts()[REGRESSION] == 1 and comparison.counts()[IMPROVEMENT] == 1
    assert sum(comparison.counts().values()) == 10


def test_without_thresholds_nothing_fails_but_changes_show():
    old, new = make_doc(seed=1), make_doc(seed=2, minutes=5, scale={CASE: 1.3})
    comparison = compare_documents(old, new, {})
    assert not comparison.failed
    case = next(c for c in comparison.cases if c.case_id == CASE)
    assert case.verdict == CHANGED and case.metric("ets").verdict == INCREASE


def test_only_gated_metrics_regress():
    old, new = make_doc(seed=1), make_doc(seed=2, minutes=5, scale={CASE: 1.3})
    comparison = compare_documents(old, new, {"time": 5.0})
    assert not comparison.failed
    case = next(c for c in comparison.cases if c.case_id == CASE)
    assert case.metric("ets").verdict == INCREASE and case.metric("ets").change_pct > 25
    assert case.verdict == UNCHANGED   # the gated metric (T) did not move: an ungated change does not relabel the case


def test_new_and_missing_cases():
    old = make_doc(seed=1, workloads=("alexnet-train", "old-only"))
    new = make_doc(seed=2, minutes=5, workloads=("alexnet-train", "new-only"))
    comparison = compare_documents(old, new, GATE)
    status = {c.case_id: c.status for c in comparison.cases}
    assert status["tests/test_suite.py::test_train[new-only-300W]"] == NEW
    assert status["tests/test_suite.py::test_train[old-only-300W]"] == MISSING
    new_case = next(c for c in comparison.cases if c.status == NEW)
    assert new_case.verdict == NEW and new_case.metrics == () and new_case.old is None and new_case.new is not None
    assert not comparison.failed


def test_simulated_and_real_runs_are_not_compared():
    sim = make_doc(seed=1, gpu_name=H100_REAL)
    real = make_doc(seed=2, backend="nvml", gpu_name=H100_REAL, minutes=5)
    for old, new in ((sim, real), (real, sim)):
        comparison = compare_documents(old, new, GATE)
        assert not comparison.comparable and comparison.cases == () and not comparison.failed
        (note,) = comparison.notes
        assert "simulated" in note and "measured" in note and "never compared" in note


def test_two_gpu_models_are_not_compared():
    comparison = compare_documents(make_doc(seed=1), make_doc(seed=2, gpu_name=V100), GATE)
    assert not comparison.comparable
    assert "different GPU models" in comparison.notes[0] and V100 in comparison.notes[0] and H100 in comparison.notes[0]


def test_a_gpu_with_another_index_pairs_when_unambiguous():
    old = make_doc(seed=1, workloads=("a",), caps_w=(300.0,))
    new = make_doc(seed=2, workloads=("a",), caps_w=(300.0,), minutes=5)
    moved = replace(new, cases=tuple(replace(c, gpu_index=1, limit_enforced_w=310.0, method="sampling") for c in new.cases))
    (case,) = compare_documents(old, moved, GATE).cases
    assert case.status == "compared"
    assert any("GPU 0 of the baseline with GPU 1" in n for n in case.notes)
    assert any("enforced limit differs" in n for n in case.notes)
    assert any("measured differently" in n for n in case.notes)


@pytest.mark.parametrize("moved", [False, True])
def test_comparing_runs_is_linear_in_their_cases(moved):
    """Eight times the cases (with the noise between sessions from the saved runs) cost about eight
    times the CPU: a quadratic pairing or history scan would cost 64. The sizes users have (10,000
    cases and more) are timed by benchmarks/compare_scaling.py."""
    def cpu_seconds(cases: int) -> float:
        runs = wide_runs(cases, moved=moved)
        start = time.process_time()
        comparison = compare_documents(runs[1], runs[2], GATE, history=runs)
        elapsed = time.process_time() - start
        assert len(comparison.cases) == cases and {c.status for c in comparison.cases} == {"compared"}
        return elapsed

    small, large = cpu_seconds(300), cpu_seconds(2400)
    assert large < 24 * small, f"8x the cases took {large / small:.0f}x the CPU ({small:.2f} s -> {large:.2f} s)"


def test_machine_changes_and_order_are_noted():
    old = make_doc(seed=1, minutes=10)
    info = dict(old.machine, driver="555.42.02")
    new = make_doc(seed=2, minutes=0, machine_info=info, commit={"id": "f" * 40, "branch": "x", "dirty": True})
    notes = " | ".join(compare_documents(old, new, GATE).notes)
    assert "driver changed: 550.54.15 in the baseline, 555.42.02 now" in notes
    assert "newer than the run compared with it" in notes and "dirty" in notes


def test_bad_thresholds_or_confidence_are_refused():
    doc = make_doc()
    with pytest.raises(ValueError, match="unknown metric"):
        compare_documents(doc, doc, {"power": 5})
    with pytest.raises(ValueError, match="confidence"):
        compare_documents(doc, doc, GATE, confidence=1.5)


def test_baseline_is_the_latest_of_the_model_and_never_the_run_itself(tmp_path):
    store = RunStore(tmp_path)
    new = make_doc(seed=9, minutes=60, scale={CASE: 1.3})
    empty = baseline_comparison(store, new, thresholds=GATE)
    assert empty.old_run_id is None and {c.status for c in empty.cases} == {NEW} and not empty.failed
    assert "no saved run for" in empty.notes[0] and "--energy-save" in empty.notes[0]
    first, second = make_doc(seed=1, minutes=0), make_doc(seed=2, minutes=30)
    for doc in (first, second, make_doc(seed=3, minutes=40, gpu_name=V100), new):
        store.save(doc)                      # the new run saved before comparing must not be its own baseline
    comparison = baseline_comparison(store, new, thresholds=GATE)
    assert comparison.old_run_id == second.run_id and comparison.failed
    assert baseline_comparison(store, new, first.run_id, GATE).old_run_id == first.run_id


# -- noise between sessions ------------------------------------------------------------------------

def _sessions(rng: np.random.Generator, count: int, *, between: float, within: float = 0.01, n: int = 3,
              true: float = 1.0) -> list[list[float]]:
    """Runs whose means move by ``between`` (log sd) from session to session, ``within`` inside one."""
    return [list(true * math.exp(rng.normal(0.0, between)) * np.exp(rng.normal(0.0, within, n))) for _ in range(count)]


def test_session_noise_is_estimated_from_the_spread_of_run_means_beyond_their_own_spread():
    rng = np.random.default_rng(3)
    estimate = SessionNoise.estimate(_sessions(rng, 60, between=0.10, within=0.05, n=4))
    assert estimate is not None and estimate.runs == 60
    assert 0.075 < estimate.cv < 0.125
    assert SessionNoise.estimate(_sessions(rng, 60, between=0.0, within=0.05, n=4)).cv < 0.02
    assert SessionNoise.estimate([[1.0, 1.1]]) is None          # one run says nothing about sessions


def test_known_session_noise_keeps_an_unchanged_workloads_false_alarms_near_the_confidence_level():
    """Sessions 20 % apart at 1 % CV inside each (what a real H100 showed for launch-bound steps):
    the within-run test calls a third of unchanged reruns regressions; with the noise estimated
    from six saved runs about 1 % are, and a 4x regression is still caught."""
    rng = np.random.default_rng(11)
    trials = 400
    naive = calibrated = caught = 0
    for _ in range(trials):
        history = _sessions(rng, 6, between=0.2)
        noise = SessionNoise.estimate(history)
        (new,) = _sessions(rng, 1, between=0.2)
        naive += decide("ets", history[-1], new, 5.0).verdict == REGRESSION
        calibrated += decide("ets", history[-1], new, 5.0, session=noise).verdict == REGRESSION
        (slower,) = _sessions(rng, 1, between=0.2, true=4.0)
        caught += decide("ets", history[-1], slower, 5.0, session=noise).verdict == REGRESSION
    assert naive / trials > 0.25
    assert calibrated / trials < 0.03
    assert caught / trials > 0.8


def test_the_gate_learns_session_noise_from_the_saved_runs_before_the_baseline(tmp_path):
    store = RunStore(tmp_path)
    sessions = [make_doc(seed=i, minutes=10 * i, scale={"alexnet-train": 1.0 + 0.25 * ((i + 1) % 2)}) for i in range(4)]
    for doc in sessions:
        store.save(doc)
    new = make_doc(seed=9, minutes=60, scale={"alexnet-train": 1.25})      # like sessions 0 and 2: no regression
    calibrated = baseline_comparison(store, new, thresholds=GATE)
    assert calibrated.old_run_id == sessions[-1].run_id
    assert any("estimated per case from 4 saved runs" in note for note in calibrated.notes)
    alexnet = [c for c in calibrated.cases if "alexnet" in c.case_id]
    assert alexnet and all(c.verdict in (UNCHANGED, INCONCLUSIVE) for c in alexnet)
    assert not calibrated.failed and "session noise" in alexnet[0].metric("ets").reason
    unsure = [c.metric("ets") for c in alexnet if c.verdict == INCONCLUSIVE]
    assert all("noise between sessions dominates" in m.hint and "4 saved runs" in m.hint for m in unsure)
    only_baseline = compare_documents(sessions[-1], new, GATE)            # what the gate knew before
    assert any("noise between sessions unknown" in note for note in only_baseline.notes)
    assert any(c.verdict == REGRESSION for c in only_baseline.cases if "alexnet" in c.case_id)


# -- phases (energy_meter.phase): each phase's ETS decided with the fit's bounds ---------------------

def _step_runs(update: float = 1.3, n: int = 3, **kwargs) -> tuple:
    old = with_phases(make_doc(seed=1, workloads=("step",), caps_w=(300.0,), n=n), seed=1, **kwargs)
    new = with_phases(make_doc(seed=2, workloads=("step",), caps_w=(300.0,), n=n, minutes=5),
                      scale={"update": update}, seed=2, **kwargs)
    return old, new


def test_a_heavier_update_phase_is_named_and_no_other_phase():
    old, new = _step_runs()
    [case] = compare_documents(old, new, {"ets": 5.0}).cases
    assert [m.phase for m in case.phases] == ["forward", "backward", "update", "other"]
    assert {m.phase: m.verdict for m in case.phases} == {"forward": UNCHANGED, "backward": UNCHANGED,
                                                         "update": INCREASE, "other": UNCHANGED}
    update = case.phase("update")
    assert update is not None and update.change_pct == pytest.approx(30.0, abs=3.0)
    assert update.old_n == update.new_n == 3 and update.threshold_pct is None and not update.gated
    assert update.key == "phase.ets" and update.label == "update ETS" and update.domain == "gpu"
    assert update.reason.startswith("+") and "n=3/3" in update.reason and "not gated" in update.reason
    assert case.metric("ets") is case.metrics[0] and case.metric("phase.ets") is None and case.phase("data") is None
    assert case.verdict != REGRESSION      # an ungated phase never fails the case


def test_phase_ets_gates_each_phase_and_names_the_one_that_regressed():
    old, new = _step_runs()
    comparison = compare_documents(old, new, {"ets": 5.0, "phase.ets": 10.0})
    [case] = comparison.cases
    assert comparison.failed and case.verdict == REGRESSION
    assert [m.label for m in case.regressed_metrics] == ["update ETS"]
    assert case.phase("update").threshold_pct == 10.0 and case.phase("forward").verdict == UNCHANGED
    lighter = compare_documents(*_step_runs(update=0.7), {"phase.ets": 10.0}).cases[0]
    assert lighter.verdict == IMPROVEMENT and lighter.phase("update").verdict == IMPROVEMENT


def test_a_phase_change_its_bounds_can_explain_is_inconclusive():
    """Bounds of ±20 % overlap between 0.88 J and 1.14 J; phases the fit could not tell apart have such bounds."""
    old, new = _step_runs(bound=0.2)
    [case] = compare_documents(old, new, {"phase.ets": 10.0}).cases
    update = case.phase("update")
    assert update.verdict == INCONCLUSIVE and case.verdict == INCONCLUSIVE
    assert "within the two measurements' own error bounds" in update.reason
    assert "the meter's bounds: baseline 0.7" in update.reason


def test_one_repetition_decides_a_phase_by_the_threshold_and_the_bounds():
    old, new = _step_runs(n=1)
    [case] = compare_documents(old, new, {"phase.ets": 10.0}).cases
    update = case.phase("update")
    assert update.method == THRESHOLD_ONLY and update.verdict == REGRESSION and update.old_n == 1
    assert {m.phase: m.verdict for m in case.phases if m.phase != "update"} == dict.fromkeys(
        ("forward", "backward", "other"), UNCHANGED)
    old, new = _step_runs(n=1, bound=0.2)
    assert compare_documents(old, new, {"phase.ets": 10.0}).cases[0].phase("update").verdict == INCONCLUSIVE


def test_phases_in_one_run_only_are_said_not_compared():
    old, new = _step_runs()
    bare = make_doc(seed=3, workloads=("step",), caps_w=(300.0,), n=3, minutes=9)
    [case] = compare_documents(old, bare, {}).cases
    assert case.phases == () and case.notes[-1] == ("phases not compared: this run has no phase marks "
                                                    "(energy_meter.phase) in this case")
    [case] = compare_documents(bare, new, {}).cases
    assert case.notes[-1] == "phases not compared: the baseline has no phase marks (energy_meter.phase) in this case"
    [case] = compare_documents(make_doc(seed=1, workloads=("step",), caps_w=(300.0,), n=3), bare, {}).cases
    assert not any("phase" in note for note in case.notes)

    def renamed(doc, names):
        cases = [replace(c, repetitions=tuple(replace(r, phases={names.get(k, k): v for k, v in r.phases.items()})
                                              for r in c.repetitions)) for c in doc.cases]
        return replace(doc, cases=tuple(cases))

    [case] = compare_documents(renamed(old, {"forward": "fwd", "backward": "bwd"}), renamed(new, {"other": "data"}), {}).cases
    assert [m.phase for m in case.phases] == ["update"]
    assert case.notes[-2:] == ("phases fwd, bwd, other only in the baseline: not compared",
                               "phases forward, backward, data only in this run: not compared")
    [case] = compare_documents(renamed(old, {"other": "data"}), new, {}).cases
    assert case.notes[-2:] == ("phase data only in the baseline: not compared", "phase other only in this run: not compared")


def test_the_saved_runs_give_each_phase_its_session_noise(tmp_path):
    store = RunStore(tmp_path / ".energy")
    for seed in range(4):
        store.save(with_phases(make_doc(seed=seed, workloads=("step",), caps_w=(300.0,), n=3, minutes=seed),
                               seed=seed, noise=0.02))
    new = with_phases(make_doc(seed=9, workloads=("step",), caps_w=(300.0,), n=3, minutes=30),
                      scale={"update": 1.3}, seed=9, noise=0.02)
    [case] = baseline_comparison(store, new, thresholds={"phase.ets": 10.0}).cases
    update = case.phase("update")
    assert "from 4 runs" in update.reason and update.verdict == REGRESSION
    assert "from 4 runs" in case.phase("forward").reason


def test_without_a_baseline_every_case_is_new_and_the_note_says_why(tmp_path):
    new = make_doc(seed=2, workloads=("step", "infer"), caps_w=(300.0,), n=3)
    comparison = baseline_comparison(RunStore(tmp_path / "empty"), new, thresholds={"ets": 5.0}, confidence=0.95)
    assert comparison.comparable and not comparison.failed
    assert (comparison.old_run_id, comparison.new_run_id, comparison.old_machine) == (None, new.run_id, None)
    assert comparison.new_machine.run_id == new.run_id
    assert comparison.thresholds == {"ets": 5.0} and comparison.confidence == 0.95
    assert [(c.case_id, c.status, c.verdict, c.metrics, c.old, c.new) for c in comparison.cases] == [
        (entry.case_id, NEW, NEW, (), None, entry) for entry in new.cases]
    [note] = comparison.notes
    assert note.startswith("no saved run for NVIDIA H100 80GB HBM3 (simulated) (sim) in ") and note.endswith(
        " has any of this run's cases: every case is new; save a baseline with --energy-save")
    with pytest.raises(ValueError, match="unknown metric 'watts'"):
        baseline_comparison(RunStore(tmp_path / "empty"), new, thresholds={"watts": 5.0})


def test_saved_runs_without_the_phase_give_it_no_session_noise(tmp_path):
    store = RunStore(tmp_path / ".energy")
    for seed in range(3):       # earlier runs: no phase marks, then the phases under other names
        doc = make_doc(seed=seed, workloads=("step",), caps_w=(300.0,), n=3, minutes=seed)
        store.save(doc if seed == 0 else with_phases(doc, seed=seed) if seed == 2 else replace(
            doc, cases=tuple(replace(c, repetitions=tuple(replace(r, phases={"fwd": next(iter(
                with_phases(doc).cases[0].repetitions[0].phases.values()))}) for r in c.repetitions)) for c in doc.cases)))
    new = with_phases(make_doc(seed=9, workloads=("step",), caps_w=(300.0,), n=3, minutes=30), seed=9)
    [case] = baseline_comparison(store, new, thresholds={"phase.ets": 10.0}).cases
    update = case.phase("update")
    assert update is not None and "session noise" not in update.reason and "n=3/3" in update.reason
    assert "session noise" in case.metric("ets").reason         # the region's figures are in all three


# -- which runs and cases are compared (in-process: the gate's pytester sessions test it end to end) --

def _outcomes(doc, outcomes: dict[str, str]):
    """``doc`` with the cases of these workloads ended so (``failed``, ``error``, ...)."""
    def outcome(case):
        return next((o for workload, o in outcomes.items() if f"[{workload}-" in case.case_id), case.outcome)
    return replace(doc, cases=tuple(replace(c, outcome=outcome(c)) for c in doc.cases))


def test_only_cases_whose_test_passed_are_compared_and_a_note_counts_the_others():
    workloads = ("a", "b", "c", "d")
    old = _outcomes(make_doc(seed=1, workloads=workloads, caps_w=(300.0,)), {"a": "failed"})
    new = _outcomes(make_doc(seed=2, workloads=workloads, caps_w=(300.0,), minutes=5), {"b": "failed", "c": "error"})
    comparison = compare_documents(old, new, GATE)
    status = {c.case_id.split("[")[1][0]: c.status for c in comparison.cases}
    assert status == {"a": NEW, "d": "compared"}         # a: no baseline (it failed there); b, c: not compared
    assert comparison.notes[-1] == "2 cases not compared: their test did not pass (1 error, 1 failed)"
    clean = make_doc(seed=2, workloads=workloads, caps_w=(300.0,), minutes=5)
    comparison = compare_documents(old, clean, GATE)
    assert {c.case_id.split("[")[1][0]: c.status for c in comparison.cases} == {
        "a": NEW, "b": "compared", "c": "compared", "d": "compared"}
    assert not any("not compared" in note for note in comparison.notes)
    one = compare_documents(make_doc(seed=1, workloads=workloads, caps_w=(300.0,)),
                            _outcomes(clean, {"d": "xfailed"}), GATE)
    assert one.notes[-1] == "1 case not compared: their test did not pass (1 xfailed)"
    assert len(one.cases) == 3


def _store_with_neighbours(tmp_path, *, newest_neighbours: bool = True):
    """Two saved runs of the simulated H100, and newer runs of the same cases on another backend (same
    model name) and on another model (same backend): a baseline must come from the first two only."""
    store = RunStore(tmp_path / ".energy")
    own = [make_doc(seed=seed, workloads=("step",), caps_w=(300.0,), minutes=seed) for seed in (1, 2)]
    for doc in own:
        store.save(doc)
    later = 10 if newest_neighbours else -10
    store.save(make_doc(seed=3, workloads=("step",), caps_w=(300.0,), backend="nvml", minutes=later))
    store.save(make_doc(seed=4, workloads=("step",), caps_w=(300.0,), gpu_name=V100, minutes=later))
    new = make_doc(seed=5, workloads=("step",), caps_w=(300.0,), minutes=20)
    return store, own, new


def test_the_latest_baseline_is_of_the_runs_backend_and_model_only(tmp_path):
    store, own, new = _store_with_neighbours(tmp_path)
    comparison = baseline_comparison(store, new, thresholds=GATE, confidence=0.95)
    assert comparison.comparable and comparison.old_run_id == own[1].run_id and comparison.confidence == 0.95
    assert comparison.notes[0] == ("noise between sessions estimated per case from 2 saved runs (the baseline and "
                                   "those before it)")
    padded = baseline_comparison(store, new, ref=" latest ", thresholds=GATE)     # resolved by the store
    assert padded.comparable and padded.old_run_id == own[1].run_id


def test_a_named_baseline_learns_the_noise_from_the_saved_runs_of_the_model_only(tmp_path):
    store, own, new = _store_with_neighbours(tmp_path, newest_neighbours=False)
    store.save(new)                                       # the run itself is saved too: never its own history
    comparison = baseline_comparison(store, new, ref=own[1].run_id, thresholds=GATE, confidence=0.95)
    assert comparison.comparable and comparison.old_run_id == own[1].run_id and comparison.confidence == 0.95
    assert comparison.notes[0] == ("noise between sessions estimated per case from 2 saved runs (the baseline and "
                                   "those before it)")


def test_saved_runs_without_any_of_the_cases_say_so(tmp_path):
    store = RunStore(tmp_path / ".energy")
    store.save(make_doc(seed=1, workloads=("other",), caps_w=(300.0,)))
    store.save(make_doc(seed=3, workloads=("step",), caps_w=(300.0,), backend="nvml"))     # not counted: another
    store.save(make_doc(seed=4, workloads=("step",), caps_w=(300.0,), gpu_name=V100))      # backend, another model
    new = make_doc(seed=2, workloads=("step",), caps_w=(300.0,), minutes=5)
    [note] = baseline_comparison(store, new).notes
    assert note.startswith("none of the 1 saved runs of NVIDIA H100 80GB HBM3 (simulated) (sim) in ")
    assert [c.status for c in baseline_comparison(store, new).cases] == [NEW]


def test_a_damaged_run_of_another_model_or_backend_never_stops_the_comparison(tmp_path):
    """Only the new run's backend and model are read: a damaged file elsewhere in the storage is
    someone else's problem (``gpuenergy runs`` names it)."""
    store, own, new = _store_with_neighbours(tmp_path)
    damaged = [path for path in (tmp_path / ".energy").rglob("*.json") if "nvml" in path.parts or "tesla" in str(path)]
    for path in damaged:
        path.write_text("{damaged")
    assert len(damaged) == 2
    for ref in ("latest", own[1].run_id):
        comparison = baseline_comparison(store, new, ref=ref, thresholds=GATE)
        assert comparison.comparable and comparison.old_run_id == own[1].run_id


def test_the_noise_between_sessions_is_learnt_from_the_baseline_and_at_most_nine_runs_before_it():
    baseline = make_doc(seed=0, workloads=("step",), caps_w=(300.0,), minutes=100)
    same_time = make_doc(seed=1, workloads=("step",), caps_w=(300.0,), minutes=100)    # saved with the baseline
    later = make_doc(seed=2, workloads=("step",), caps_w=(300.0,), minutes=101)        # after it: never history
    new = make_doc(seed=3, workloads=("step",), caps_w=(300.0,), minutes=200)
    comparison = compare_documents(baseline, new, GATE, history=[later, same_time, baseline, new])
    assert comparison.notes[0] == ("noise between sessions estimated per case from 2 saved runs (the baseline and "
                                   "those before it)")
    before = [make_doc(seed=10 + i, workloads=("step",), caps_w=(300.0,), minutes=i) for i in range(12)]
    comparison = compare_documents(baseline, new, GATE, history=[*before, baseline])
    assert comparison.notes[0].startswith("noise between sessions estimated per case from 10 saved runs")
    assert compare_documents(baseline, new, GATE, history=before[:1]).notes[0].startswith(
        "noise between sessions estimated per case from 2 saved runs")
    assert compare_documents(baseline, new, GATE).notes[0].startswith("noise between sessions unknown")


def test_a_case_on_another_gpu_slot_pairs_when_it_is_the_only_one_of_its_test_and_cap():
    """A rank or worker that ran the case on another of its GPUs: the second pairing rule (id and cap)."""
    old = make_doc(seed=1, workloads=("a", "b", "c"), caps_w=(300.0,))
    new = make_doc(seed=2, workloads=("a", "b", "c"), caps_w=(300.0,), minutes=5, scale={"a": 1.3})
    moved = replace(new, cases=tuple(replace(c, gpu_slot=1) if "[a-" in c.case_id else c for c in new.cases))
    cases = compare_documents(old, moved, GATE).cases
    assert [(c.case_id.split("[")[1][0], c.status, c.key[2]) for c in cases] == [
        ("a", "compared", 1), ("b", "compared", 0), ("c", "compared", 0)]
    assert cases[0].old is old.cases[0] and cases[0].new is moved.cases[0] and cases[0].verdict == REGRESSION
    twice_old = replace(old, cases=(*old.cases, replace(old.cases[0], gpu_slot=2)))     # two old ones: ambiguous
    statuses = [(c.case_id.split("[")[1][0], c.status, c.key[2]) for c in compare_documents(twice_old, moved, GATE).cases]
    assert statuses == [("a", NEW, 1), ("b", "compared", 0), ("c", "compared", 0), ("a", MISSING, 0), ("a", MISSING, 2)]
    twice_new = replace(moved, cases=(*moved.cases, replace(moved.cases[0], gpu_slot=3)))  # two new ones: ambiguous
    statuses = [(c.case_id.split("[")[1][0], c.status, c.key[2]) for c in compare_documents(old, twice_new, GATE).cases]
    assert statuses == [("a", NEW, 1), ("b", "compared", 0), ("c", "compared", 0), ("a", NEW, 3), ("a", MISSING, 0)]
    lone = compare_documents(make_doc(seed=1, workloads=("x",), caps_w=(300.0,)),       # one left on each side,
                             make_doc(seed=2, workloads=("y",), caps_w=(300.0,), minutes=5), GATE).cases   # other tests
    assert [(c.case_id.split("[")[1][0], c.status) for c in lone] == [("y", NEW), ("x", MISSING)]


def test_several_cases_of_one_outcome_are_counted_together():
    old = make_doc(seed=1, workloads=("a", "b", "c"), caps_w=(300.0,))
    new = _outcomes(make_doc(seed=2, workloads=("a", "b", "c"), caps_w=(300.0,), minutes=5), {"a": "failed", "b": "failed"})
    assert compare_documents(old, new, GATE).notes[-1] == "2 cases not compared: their test did not pass (2 failed)"


def test_a_host_domain_is_compared_once_per_case_on_its_first_gpu():
    from pytest_gpuenergy.meter.results import DomainEnergy

    def with_node(doc, node_j):
        return replace(doc, cases=tuple(replace(c, per_domain={"node": DomainEnergy(node_j, node_j * 0.99, node_j * 1.01, True)})
                                        for c in doc.cases))

    old = with_node(make_doc(seed=1, workloads=("a",), caps_w=(300.0,)), 600.0)
    new = with_node(make_doc(seed=2, workloads=("a",), caps_w=(300.0,), minutes=5), 780.0)
    [case] = compare_documents(old, new, {"node.ets": 5.0}).cases
    node = case.metric("node.ets")
    assert node is not None and node.domain == "node" and node.verdict == REGRESSION and node.method == THRESHOLD_ONLY
    second = replace(new, cases=tuple(replace(c, gpu_slot=1) for c in new.cases))
    old_second = replace(old, cases=tuple(replace(c, gpu_slot=1) for c in old.cases))
    [case] = compare_documents(old_second, second, {"node.ets": 5.0}).cases
    assert case.metric("node.ets") is None and not case.notes
    [case] = compare_documents(make_doc(seed=1, workloads=("a",), caps_w=(300.0,)), new, {"node.ets": 5.0}).cases
    assert case.metric("node.ets") is None
    assert case.notes[-1] == "node.ets not compared: the baseline did not measure node (run both with --energy-domains=gpu,cpu,dram)"
    assert compare_documents(old, new, {"ets": 5.0}).cases[0].metric("node.ets") is None      # not asked for


# -- every field of what a comparison says (compare.py's survivors, word for word) -------------------

def test_a_comparison_and_a_refusal_carry_both_runs_the_thresholds_and_the_confidence():
    old, new = make_doc(seed=1, workloads=("a",), caps_w=(300.0,)), make_doc(seed=2, workloads=("a",), caps_w=(300.0,), minutes=5)
    comparison = compare_documents(old, new, GATE, confidence=0.95)
    assert (comparison.old_machine.run_id, comparison.new_machine.run_id) == (old.run_id, new.run_id)
    assert comparison.thresholds == GATE and comparison.confidence == 0.95 and comparison.comparable is True
    real = make_doc(seed=3, workloads=("a",), caps_w=(300.0,), gpu_name=H100_REAL, backend="nvml", minutes=9)
    refused = compare_documents(old, real, GATE, confidence=0.95)
    assert (refused.old_run_id, refused.new_run_id, refused.cases, refused.comparable) == (old.run_id, real.run_id, (), False)
    assert (refused.old_machine.run_id, refused.new_machine.run_id) == (old.run_id, real.run_id)
    assert refused.thresholds == GATE and refused.confidence == 0.95
    amd = replace(real, backend="amdsmi", run_id="20250301T100900Z-0000amd0")     # real both: another backend
    assert not compare_documents(real, amd, GATE).comparable


def test_a_new_or_missing_case_carries_its_entry_and_a_compared_one_its_test():
    old = make_doc(seed=1, workloads=("a", "gone"), caps_w=(300.0,))
    new = make_doc(seed=2, workloads=("a", "fresh"), caps_w=(300.0,), minutes=5)
    by_status = {c.status: c for c in compare_documents(old, new, GATE).cases}
    gone, fresh, kept = by_status[MISSING], by_status[NEW], by_status["compared"]
    assert (gone.test, gone.cap, gone.gpu_name, gone.old, gone.new) == (old.cases[1].test, "300W", H100, old.cases[1], None)
    assert (fresh.test, fresh.cap, fresh.gpu_name, fresh.old, fresh.new) == (new.cases[1].test, "300W", H100, None, new.cases[1])
    assert kept.test == new.cases[0].test == "tests/test_suite.py::test_train[a-300W]"


def _node(doc, node_j: float, bound: float = 0.01, domains=("node",)):
    from pytest_gpuenergy.meter.results import DomainEnergy

    figures = {d: DomainEnergy(node_j, node_j * (1 - bound), node_j * (1 + bound), True) for d in domains}
    return replace(doc, cases=tuple(replace(c, per_domain=figures) for c in doc.cases))


def test_a_host_domains_change_is_decided_with_its_threshold_confidence_and_bounds():
    old = _node(make_doc(seed=1, workloads=("a",), caps_w=(300.0,)), 600.0, 0.06)
    new = _node(make_doc(seed=2, workloads=("a",), caps_w=(300.0,), minutes=5), 660.0, 0.06)
    [case] = compare_documents(old, new, {"node.ets": 5.0}, confidence=0.95).cases
    node = case.metric("node.ets")
    assert node.verdict == INCONCLUSIVE and node.threshold_pct == 5.0 and node.confidence == 0.95   # +10 %, bounds ±6 %
    assert "but within the two measurements' own error bounds" in node.reason and node.method == THRESHOLD_ONLY
    [case] = compare_documents(_node(old, 600.0), _node(new, 660.0), {"node.ets": 5.0}).cases
    assert case.metric("node.ets").verdict == REGRESSION
    [case] = compare_documents(old, _node(new, 660.0, domains=("cpu",)), {"cpu.ets": 5.0, "node.ets": 5.0}).cases
    assert case.notes[-2:] == ("cpu.ets not compared: the baseline did not measure cpu (run both with "
                               "--energy-domains=gpu,cpu,dram)", "node.ets not compared: this run did not measure node "
                               "(run both with --energy-domains=gpu,cpu,dram)")
    [case] = compare_documents(_node(old, 600.0, domains=("node",)), _node(new, 660.0, domains=("cpu", "node")),
                               {"cpu.ets": 5.0, "node.ets": 5.0}).cases
    assert [m.key for m in case.metrics][-1] == "node.ets"        # after a domain not compared, the next one is


def test_two_phases_only_in_one_run_are_named_in_the_plural():
    old, new = _step_runs()

    def renamed(doc, names):
        cases = [replace(c, repetitions=tuple(replace(r, phases={names.get(k, k): v for k, v in r.phases.items()})
                                              for r in c.repetitions)) for c in doc.cases]
        return replace(doc, cases=tuple(cases))

    [case] = compare_documents(renamed(old, {"forward": "fwd", "backward": "bwd"}), new, {}).cases
    assert case.notes[-2] == "phases fwd, bwd only in the baseline: not compared"


def test_a_case_note_says_what_differs_between_the_two_measurements():
    old = make_doc(seed=1, workloads=("a",), caps_w=(300.0,), n=1)
    new = make_doc(seed=2, workloads=("a",), caps_w=(300.0,), minutes=5, n=2)
    [case] = compare_documents(old, new, GATE).cases
    assert case.notes == ("threshold only: fewer than 2 repetitions on a side",)
    [case] = compare_documents(make_doc(seed=1, workloads=("a",), caps_w=(300.0,), n=2), new, GATE).cases
    assert case.notes == ()
    for moved_w, noted in ((0.5, False), (1.0, True)):
        shifted = replace(new, cases=tuple(replace(c, limit_enforced_w=c.limit_enforced_w + moved_w) for c in new.cases))
        [case] = compare_documents(make_doc(seed=1, workloads=("a",), caps_w=(300.0,), n=2), shifted, GATE).cases
        assert any(n.startswith("enforced limit differs: 300 W in the baseline") for n in case.notes) is noted


def test_the_machine_notes_name_what_changed_between_the_runs():
    old = make_doc(seed=1, workloads=("a",), caps_w=(300.0,), machine_info={**machine(), "cuda": "12.1", "torch": "2.3.0"})
    new = make_doc(seed=2, workloads=("a",), caps_w=(300.0,), minutes=0,
                   machine_info={**machine(), "cuda": "12.4", "torch": "2.4.1"},
                   commit={"id": "f" * 40, "branch": "main", "dirty": True})
    notes = compare_documents(old, new, GATE).notes
    assert notes[:3] == ("CUDA changed: 12.1 in the baseline, 12.4 now", "torch changed: 2.3.0 in the baseline, 2.4.1 now",
                         "this run measured uncommitted changes (dirty working tree)")
    assert not any("is newer than" in note for note in notes)      # saved in the same minute: not out of order


def test_the_time_is_decided_without_the_meters_energy_bounds():
    """T is timed exactly: the ETS bounds (here, scaled by T, they would overlap) never make it inconclusive."""
    old = make_doc(seed=1, workloads=("a",), caps_w=(300.0,))
    new = make_doc(seed=1, workloads=("a",), caps_w=(300.0,), minutes=5)
    slower = replace(new, cases=tuple(replace(c, repetitions=tuple(
        replace(r, time_s=r.time_s * 1.3, ets_j=r.ets_j / 1.3, ets_low_j=r.ets_low_j / 1.3, ets_high_j=r.ets_high_j / 1.3,
                mean_power_w=r.mean_power_w / 1.69, peak_power_w=r.peak_power_w / 1.69)
        for r in c.repetitions)) for c in new.cases))
    [case] = compare_documents(old, slower, GATE).cases
    assert case.metric("time").verdict == REGRESSION and case.metric("ets").verdict == IMPROVEMENT
