"""Tests of ``pytest_gpuenergy/gate/records.py``: what a comparison says, record by record.

In-process and exact (every name, label and figure), so that mutation testing of the module sees
them; ``tests/test_compare.py`` tests the comparison that builds these records. (``runs/`` has a
``records.py`` too: this file is the gate's.)
"""

from __future__ import annotations

import math
import statistics
from dataclasses import replace

import pytest

from pytest_gpuenergy.gate.records import (
    COMPARED,
    MISSING,
    NEW,
    THRESHOLD_ONLY,
    WELCH,
    CaseComparison,
    Comparison,
    MetricChange,
    RunInfo,
    SessionNoise,
    sample_variance,
)
from pytest_gpuenergy.gate.settings import DEFAULT_CONFIDENCE
from pytest_gpuenergy.gate.verdicts import IMPROVEMENT, INCONCLUSIVE, REGRESSION, UNCHANGED

from helpers import H100, H100_REAL, machine, make_doc


def _change(metric: str = "ets", verdict: str = UNCHANGED, threshold_pct: float | None = 5.0, **kwargs) -> MetricChange:
    return MetricChange(metric=metric, old_mean=1.0, new_mean=1.1, change_pct=10.0, ci_low_pct=5.0, ci_high_pct=15.0,
                        confidence=0.99, threshold_pct=threshold_pct, verdict=verdict,  # type: ignore[arg-type]
                        reason="+10.0 % [+5.0, +15.0]", **kwargs)


# -- MetricChange ----------------------------------------------------------------------------------

def test_a_metric_change_is_keyed_and_labelled_as_the_threshold_that_gates_it():
    assert (_change().key, _change().label) == ("ets", "ETS")
    assert (_change("time").key, _change("time").label) == ("time", "T")
    assert (_change("edp").key, _change("edp").label) == ("edp", "EDP")
    node = _change(domain="node")
    assert (node.key, node.label) == ("node.ets", "node ETS")
    update = _change(phase="update")
    assert (update.key, update.label, update.domain) == ("phase.ets", "update ETS", "gpu")
    assert _change("time", phase="other").label == "other T"
    assert _change(domain="cpu", phase="update").key == "phase.ets"      # a phase is named by its own key


def test_a_metric_change_without_a_threshold_is_reported_and_not_gated():
    assert _change(threshold_pct=0.0).gated and _change().gated and not _change(threshold_pct=None).gated
    change = _change(verdict=REGRESSION)
    assert change.describe() == "ETS regression: +10.0 % [+5.0, +15.0]"
    assert _change(verdict=INCONCLUSIVE, phase="update").describe() == "update ETS inconclusive: +10.0 % [+5.0, +15.0]"
    assert (change.old_n, change.new_n, change.method, change.hint, change.domain, change.phase) == (0, 0, WELCH, "", "gpu", "")
    assert (WELCH, THRESHOLD_ONLY) == ("welch-log-ratio", "threshold-only")


# -- SessionNoise ----------------------------------------------------------------------------------

def test_session_noise_needs_two_usable_runs():
    assert SessionNoise.estimate([]) is None
    assert SessionNoise.estimate([[1.0, 1.1]]) is None
    assert SessionNoise.estimate([[1.0, 1.1], []]) is None                  # a run without the case
    assert SessionNoise.estimate([[1.0, 1.1], [0.0, 0.0]]) is None          # no mean above 0
    assert SessionNoise.estimate([[1.0, 1.1], [-1.0, -2.0]]) is None
    assert SessionNoise.estimate([[1.0], [2.0]]) is not None


def test_session_noise_is_the_spread_of_run_means_beyond_their_own_spread():
    runs = [[1.0, 1.02, 0.98], [1.2, 1.18], [0.9, 0.93, 0.87, 0.9]]
    noise = SessionNoise.estimate(runs)
    assert noise is not None
    means = [statistics.fmean(r) for r in runs]
    cv2 = [statistics.variance([v / m for v in r]) for r, m in zip(runs, means)]
    between = statistics.variance([math.log(m) for m in means])
    within = statistics.fmean(c / len(r) for c, r in zip(cv2, runs))
    assert noise.variance == pytest.approx(between - within, rel=1e-12)
    assert noise.cv == pytest.approx(math.sqrt(between - within), rel=1e-12)
    assert noise.runs == 3 and noise.within_df == 2 + 1 + 3
    assert noise.within_cv2 == pytest.approx((2 * cv2[0] + 1 * cv2[1] + 3 * cv2[2]) / 6, rel=1e-12)


def test_session_noise_is_never_negative_and_single_repetitions_count_as_session_noise():
    steady = SessionNoise.estimate([[1.0, 1.5], [1.0, 1.5]])     # equal means, spread inside: floored at 0
    assert steady is not None and steady.variance == 0.0 and steady.cv == 0.0
    assert steady.within_cv2 > 0 and steady.within_df == 2
    single = SessionNoise.estimate([[1.0], [2.0], [4.0]])
    assert single is not None and single.within_df == 0 and single.within_cv2 == 0.0
    assert single.variance == pytest.approx(statistics.variance([0.0, math.log(2), math.log(4)]), rel=1e-12)
    assert SessionNoise(0.04, 5).cv == pytest.approx(0.2) and (SessionNoise(0.04, 5).within_cv2,
                                                              SessionNoise(0.04, 5).within_df) == (0.0, 0)


def test_the_sample_variance_is_exact_for_equal_values_and_refuses_one_value():
    assert sample_variance([2.0, 2.0, 2.0]) == 0.0
    assert sample_variance([0.1, 0.1, 0.1]) == 0.0 and sample_variance([0.7, 0.7, 0.7]) == 0.0   # fsum/n is not 0.1
    assert sample_variance([1.0, 2.0, 3.0, 4.0]) == pytest.approx(statistics.variance([1.0, 2.0, 3.0, 4.0]), rel=1e-15)
    assert sample_variance([1.0, 3.0]) == 2.0
    assert sample_variance([0.1] * 7 + [0.1000001]) > 0
    for values in ([], [1.0]):
        with pytest.raises(ValueError) as refused:
            sample_variance(values)
        assert str(refused.value) == "a sample variance needs at least two values"


# -- CaseComparison --------------------------------------------------------------------------------

def _entries():
    doc = make_doc(workloads=("step",), caps_w=(300.0,), n=2)
    [entry] = doc.cases
    return entry, replace(entry, gpu_index=3)


def test_a_case_comparison_finds_its_metrics_and_phases_by_name():
    old, new = _entries()
    ets, time_s = _change(verdict=REGRESSION), _change("time")
    node = _change(domain="node", verdict=REGRESSION)
    update, other = _change(phase="update", verdict=REGRESSION), _change(phase="other")
    case = CaseComparison(new.key, new.test, new.cap, new.gpu_name, COMPARED, (ets, time_s, node, update, other),
                          REGRESSION, old, new)
    assert case.metric("ets") is ets and case.metric("time") is time_s and case.metric("node.ets") is node
    assert case.metric("edp") is None and case.metric("phase.ets") is None
    assert case.phases == (update, other) and case.phase("other") is other and case.phase("forward") is None
    assert case.regressed_metrics == (ets, node, update)
    assert case.case_id == new.case_id and case.gpu_index == 3 and case.simulated
    assert case.notes == ()


def test_a_new_or_missing_case_is_placed_by_the_run_that_has_it():
    old, new = _entries()
    missing = CaseComparison(old.key, old.test, old.cap, old.gpu_name, MISSING, (), MISSING, old, None)
    assert missing.gpu_index == 0 and missing.simulated and missing.phases == ()
    fresh = CaseComparison(new.key, new.test, new.cap, new.gpu_name, NEW, (), NEW, None, new)
    assert fresh.gpu_index == 3
    real = replace(new, simulated=False)
    assert not CaseComparison(new.key, new.test, new.cap, new.gpu_name, NEW, (), NEW, None, real).simulated
    assert CaseComparison(new.key, new.test, new.cap, new.gpu_name, NEW, (), NEW, replace(old, simulated=False), real,
                          ).simulated is False
    nowhere = CaseComparison(("x", "300W", 2), "x", "300W", H100, NEW, (), NEW)
    assert nowhere.gpu_index == 2 and not nowhere.simulated


# -- RunInfo and Comparison ------------------------------------------------------------------------

def test_run_info_says_when_which_commit_and_which_model():
    doc = make_doc(machine_info={**machine("nvml", (H100_REAL,)), "cuda": "12.4"}, gpu_name=H100_REAL, backend="nvml",
                   workloads=("step",), caps_w=(300.0,))
    info = RunInfo.of(doc)
    assert (info.run_id, info.created_at, info.backend, info.simulated, info.gpu_model) == (
        doc.run_id, doc.created_at, "nvml", False, H100_REAL)
    assert (info.host, info.driver, info.torch, info.cuda, info.commit) == (
        "ci-runner-1", "550.54.15", "2.3.0", "12.4", doc.commit)
    assert info.describe() == f"{doc.run_id} (2025-03-01 10:00 UTC, 0123456789 (main), {H100_REAL} [nvml])"
    bare = RunInfo.of(replace(doc, machine={}, commit=None, simulated=True, backend="sim"))
    assert (bare.host, bare.driver, bare.torch, bare.cuda) == (None, None, None, None)
    assert bare.describe() == f"{doc.run_id} (2025-03-01 10:00 UTC, no commit, {H100_REAL} (simulated) [sim])"


def test_a_comparison_fails_on_a_regression_and_counts_its_verdicts():
    old, new = _entries()
    info = RunInfo.of(make_doc(workloads=("step",), caps_w=(300.0,)))

    def case(verdict):
        return CaseComparison(new.key, new.test, new.cap, new.gpu_name, COMPARED, (), verdict, old, new)

    cases = (case(REGRESSION), case(UNCHANGED), case(IMPROVEMENT), case(UNCHANGED))
    comparison = Comparison("a", "b", info, info, cases, (), True)
    assert comparison.failed and comparison.regressions == [cases[0]]
    assert comparison.counts() == {REGRESSION: 1, UNCHANGED: 2, IMPROVEMENT: 1}
    assert comparison.thresholds == {} and comparison.confidence == DEFAULT_CONFIDENCE
    calm = Comparison("a", "b", info, info, cases[1:], (), True)
    assert not calm.failed and calm.regressions == [] and Comparison(None, "b", None, info, (), (), True).counts() == {}


def test_a_comparison_is_simulated_when_either_side_is():
    real = RunInfo.of(make_doc(gpu_name=H100_REAL, backend="nvml", workloads=("step",), caps_w=(300.0,)))
    sim = replace(real, simulated=True)
    assert not Comparison("a", "b", real, real, (), (), True).simulated
    assert not Comparison(None, "b", None, real, (), (), True).simulated
    assert Comparison("a", "b", sim, real, (), (), False).simulated
    assert Comparison("a", "b", real, sim, (), (), False).simulated
    assert Comparison(None, "b", None, sim, (), (), True).simulated
