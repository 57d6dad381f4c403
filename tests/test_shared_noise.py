"""The noise a suite's cases share (gate/shared_noise.py): the empirical Bayes fit, moderation, and what
it gives the gate: more detections at the same false alarms, and no noisy case hidden among quiet ones."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from pytest_gpuenergy.gate.compare import compare_documents
from pytest_gpuenergy.gate.decide import decide
from pytest_gpuenergy.gate.records import SessionNoise
from pytest_gpuenergy.gate.shared_noise import (
    DF_LIMIT,
    MIN_CASES,
    Prior,
    digamma,
    moderated,
    prior,
    share,
    trigamma,
    trigamma_inverse,
)
from pytest_gpuenergy.gate.verdicts import REGRESSION

from helpers import make_doc

EULER = 0.5772156649015329


@pytest.mark.parametrize(("x", "psi", "psi1"), [
    (1.0, -EULER, math.pi ** 2 / 6),
    (0.5, -EULER - 2 * math.log(2), math.pi ** 2 / 2),
    (2.0, 1 - EULER, math.pi ** 2 / 6 - 1),
    (10.0, 2.251752589066721, 0.10516633568168575),
    (1e4, 9.210290371142850, 1.0000500016666667e-4),
])
def test_digamma_and_trigamma_match_their_known_values(x, psi, psi1):
    assert digamma(x) == pytest.approx(psi, rel=1e-10, abs=1e-12)
    assert trigamma(x) == pytest.approx(psi1, rel=1e-9)


@pytest.mark.parametrize("value", [1e-6, 0.01, 0.3, 1.0, 7.0, 1e4])
def test_trigamma_inverse_inverts_trigamma(value):
    assert trigamma(trigamma_inverse(value)) == pytest.approx(value, rel=1e-9)


def test_trigamma_inverse_refuses_what_has_no_inverse():
    with pytest.raises(ValueError, match="above 0"):
        trigamma_inverse(0.0)


def _chi2_variances(rng, true, df: int) -> list[float]:
    return list(np.asarray(true) * rng.chisquare(df, len(true)) / df)


def test_the_prior_is_fitted_from_the_cases_variances():
    """Variances that all scatter around one value by chance alone: d0 comes out large (the cases
    agree); variances around values drawn with d0 = 10: d0 near 10; either way s0**2 near the truth."""
    rng = np.random.default_rng(1)
    alike = prior(_chi2_variances(rng, [4e-4] * 3000, 9), [9] * 3000)
    assert alike is not None and alike.df > 100 and alike.variance == pytest.approx(4e-4, rel=0.05)
    true = 4e-4 * 10 / rng.chisquare(10, 3000)
    spread = prior(_chi2_variances(rng, true, 9), [9] * 3000)
    assert spread is not None and 7 < spread.df < 14 and spread.variance == pytest.approx(4e-4, rel=0.1)


def test_too_few_cases_or_no_spread_at_all_give_no_prior():
    assert prior([1e-4] * (MIN_CASES - 1), [9] * (MIN_CASES - 1)) is None
    assert prior([0.0] * 20, [9] * 20) is None          # a deterministic simulator: nothing to share
    exact = prior([2e-4] * 20, [9] * 20)                # identical variances: the cases agree exactly
    assert exact is not None and exact.df == DF_LIMIT


def test_moderation_weighs_the_case_and_the_prior_by_their_degrees_of_freedom():
    assert moderated(2e-4, 9, Prior(1e-4, 27)) == pytest.approx((1.25e-4, 36))
    assert moderated(2e-4, 9, None) == (2e-4, 9)
    assert moderated(2e-4, 0, Prior(1e-4, 27)) == (2e-4, 0)


def test_a_case_noisier_than_the_others_beyond_chance_keeps_its_own_estimate():
    assert moderated(5e-4, 9, Prior(1e-4, 300)) == (5e-4, 9)        # F = 5 on (9, 300): p < 1e-5
    variance, df = moderated(1.6e-4, 9, Prior(1e-4, 300))          # F = 1.6: chance
    assert df == 309 and 1e-4 < variance < 1.6e-4


def _suite(rng, cases: int, *, runs: int = 10, n: int = 5, cv: float = 0.02, session_sd=0.0) -> np.ndarray:
    sds = np.broadcast_to(np.asarray(session_sd, dtype=float), (cases,))
    sigma = math.sqrt(math.log1p(cv * cv))
    return np.exp(-0.5 * sigma ** 2 + sigma * rng.standard_normal((cases, runs + 1, n))
                  + sds[:, None, None] * rng.standard_normal((cases, runs + 1, 1)))


def _regressions(data: np.ndarray, *, shared: bool, change: float = 0.0) -> np.ndarray:
    noises = {i: SessionNoise.estimate(data[i, :-1].tolist()) for i in range(len(data))}
    if shared:
        noises = share(noises)
    return np.array([decide("ets", data[i, -2].tolist(), (data[i, -1] * (1 + change)).tolist(), 2.0,
                            session=noises[i]).verdict == REGRESSION for i in range(len(data))])


def test_sharing_the_suites_noise_detects_more_at_the_same_false_alarms():
    """2 % noise, n = 5, 10 saved runs, +5 %: each case alone detects about 87 %, moderated with the
    19 other cases of its suite about 92 % (the best test, the noise known: 93.7 %; 85 % and 90 % in
    these 800 cases, whose binomial error is about 1.2 points); unchanged cases
    still fail about 1 % of the time or less (benchmarks/detection_power.py has the full grid)."""
    rng = np.random.default_rng(7)
    suites = [_suite(rng, 20) for _ in range(40)]
    alone = np.concatenate([_regressions(s, shared=False, change=0.05) for s in suites]).mean()
    together = np.concatenate([_regressions(s, shared=True, change=0.05) for s in suites]).mean()
    false_alarms = np.concatenate([_regressions(s, shared=True) for s in suites]).mean()
    assert alone < 0.90 and together > 0.88 and together > alone + 0.03, (alone, together)
    assert false_alarms <= 0.02, false_alarms


def test_a_case_whose_sessions_move_far_more_than_the_others_is_not_hidden_among_them():
    """One case of twenty whose sessions are 6 % apart while the others' are steady: moderated with
    them it would take their near-zero session noise and call its own drift a regression; it keeps its
    own estimate, and its false alarms stay as rare as when it is judged alone."""
    rng = np.random.default_rng(8)
    wild = []
    for _ in range(150):
        data = _suite(rng, 20, session_sd=[0.06] + [0.0] * 19)
        noises = share({i: SessionNoise.estimate(data[i, :-1].tolist()) for i in range(20)})
        assert noises[0].df == 9                    # its session noise is its own (9 runs' worth)
        wild.append(decide("ets", data[0, -2].tolist(), data[0, -1].tolist(), 2.0, session=noises[0]).verdict == REGRESSION)
    assert np.mean(wild) <= 0.03


def test_the_comparison_moderates_its_cases_and_says_so():
    """Through compare_documents, as ``gpuenergy compare`` and the gate run it: ten cases, four saved
    runs; each case's reason names the suite's other cases and a note says how many were moderated."""
    workloads = [f"w{i}" for i in range(10)]
    runs = [make_doc(seed=seed, workloads=workloads, caps_w=(300.0,), n=5, minutes=10 * seed) for seed in range(4)]
    new = make_doc(seed=9, workloads=workloads, caps_w=(300.0,), n=5, minutes=60, scale={"w3": 1.3})
    comparison = compare_documents(runs[-1], new, {"ets": 5.0}, history=runs)
    assert any("10 cases' noise estimates were moderated with the other cases'" in n for n in comparison.notes)
    reasons = [case.metric("ets").reason for case in comparison.cases]
    assert all("from 4 runs and the suite's other cases): " in r for r in reasons), reasons[0]
    assert [case.verdict for case in comparison.cases if case.verdict == REGRESSION] == [REGRESSION]
    assert "w3" in next(c.case_id for c in comparison.cases if c.verdict == REGRESSION)
    alone = compare_documents(runs[-1], new, {"ets": 5.0}, history=runs[-1:])     # one saved run: nothing to share
    assert not any("moderated" in n for n in alone.notes)
    singles = [make_doc(seed=seed, workloads=workloads, caps_w=(300.0,), n=1, minutes=10 * seed) for seed in range(5)]
    by_threshold = compare_documents(singles[-2], singles[-1], {"ets": 5.0}, history=singles[:-1])
    assert all("threshold only" in c.metric("ets").reason for c in by_threshold.cases)   # the noise never enters
    assert not any("moderated" in n for n in by_threshold.notes)
    one_tested = [replace(doc, cases=tuple(c if c.case_id.endswith("[w3-300W]") else replace(c, repetitions=c.repetitions[:1])
                                           for c in doc.cases)) for doc in (*runs, new)]
    single = compare_documents(one_tested[-2], one_tested[-1], {"ets": 5.0}, history=one_tested[:-1])
    assert any(n.startswith("1 case's noise estimates were moderated") for n in single.notes), single.notes


def test_the_session_terms_degrees_of_freedom_are_the_moderated_ones():
    """Three saved runs give the session noise 2 degrees of freedom (t at 99 %: 6.96); moderated with
    the suite's cases, 300: the same change's interval is far narrower, and here it is a regression."""
    alone = SessionNoise(variance=4e-4, runs=3, within_cv2=1e-4, within_df=10)
    shared = replace(alone, session_df=300.0, shared=True)
    old, new = [1.0, 1.01, 0.99], [1.1, 1.11, 1.09]
    wide, narrow = (decide("ets", old, new, 5.0, session=s) for s in (alone, shared))
    assert narrow.ci_low_pct > wide.ci_low_pct + 5, (wide.reason, narrow.reason)
    assert narrow.verdict == REGRESSION and wide.verdict != REGRESSION


def test_cases_with_one_degree_of_freedom_count_and_those_with_none_do_not():
    """Two saved runs give a case 1 degree of freedom: it counts towards the prior and is moderated;
    a case with no spread to speak of (0) neither; exactly MIN_CASES usable cases are enough."""
    rng = np.random.default_rng(2)
    one = list(1e-4 * rng.chisquare(1, MIN_CASES))
    assert prior(one, [1] * MIN_CASES) is not None
    assert prior([*one, 3e-4], [*[1] * MIN_CASES, 0]) == prior(one, [1] * MIN_CASES)
    assert prior(one[:-1], [1] * (MIN_CASES - 1)) is None
    assert moderated(2e-4, 1, Prior(1e-4, 9)) == pytest.approx((1.1e-4, 10))


def _noise(between: float, within_cv2: float, *, runs: int = 10, n: int = 5) -> SessionNoise:
    within_of_mean = within_cv2 / n
    return SessionNoise(max(0.0, between - within_of_mean), runs, within_cv2, runs * (n - 1), between, within_of_mean)


def test_share_moderates_each_part_with_its_own_prior_and_keeps_every_field_consistent():
    """Each case's between-run variance is moderated with the prior of all cases' (runs - 1 degrees of
    freedom each), its repetitions' spread with theirs; what the spread adds to a run mean scales
    with it, and the session variance is the difference of the two, as for a case alone."""
    rng = np.random.default_rng(4)
    noises = {i: _noise(float(b), float(w)) for i, (b, w) in
              enumerate(zip(1e-4 * rng.chisquare(9, 12) / 9, 4e-4 * rng.chisquare(40, 12) / 40))}
    between_prior = prior([n.between for n in noises.values()], [9] * 12)
    within_prior = prior([n.within_cv2 for n in noises.values()], [40] * 12)
    shared = share(noises)
    for key, own in noises.items():
        got = shared[key]
        between, between_df = moderated(own.between, 9, between_prior)
        within, within_df = moderated(own.within_cv2, 40, within_prior)
        within_of_mean = own.within_of_mean * within / own.within_cv2
        assert got.shared and got.runs == 10
        assert got.between == pytest.approx(between) and got.df == pytest.approx(between_df)
        assert got.within_cv2 == pytest.approx(within) and got.within_df == pytest.approx(within_df)
        assert got.within_of_mean == pytest.approx(within_of_mean)
        assert got.variance == pytest.approx(between - within_of_mean)     # not floored: see the next test
    assert any(n.variance < 0 for n in shared.values()) and any(n.variance > 0 for n in shared.values())


def test_a_shared_session_variance_below_0_narrows_the_interval_down_to_a_floor():
    """Moderated, the session variance's estimate is unbiased and may be below 0: the interval is then
    narrower than with none (a floored estimate would widen it whenever chance puts it above 0), but
    never narrower than half of the repetitions' variance allows, however low the estimate."""
    old, new = [1.0, 1.02, 0.98], [1.06, 1.08, 1.04]
    base = SessionNoise(variance=0.0, runs=10, within_cv2=4e-4, within_df=300, between=4e-4 / 3,
                        within_of_mean=4e-4 / 3, session_df=400.0, shared=True)

    def half_width(variance: float) -> float:
        got = decide("ets", old, new, 2.0, session=replace(base, variance=variance))
        return (math.log1p(got.ci_high_pct / 100) - math.log1p(got.ci_low_pct / 100)) / 2

    repetitions = 4e-4 * (1 / 3 + 1 / 3)                       # the pooled spread over both means
    assert half_width(-2e-5) < half_width(0.0) < half_width(2e-5)
    floor = half_width(-repetitions / 4)                        # 2 * variance = -half of the repetitions' part
    assert half_width(-repetitions) == pytest.approx(floor, rel=0.02)
    assert half_width(-10 * repetitions) == pytest.approx(floor, rel=0.02)
    assert floor == pytest.approx(half_width(0.0) * math.sqrt(0.5), rel=0.04)   # (the t quantile's df move a little)


def test_one_part_is_shared_where_only_it_can_be():
    """Runs of one repetition each show no spread (no prior for it): their between-run variance is
    still moderated, and what a run mean's spread adds stays 0."""
    rng = np.random.default_rng(5)
    noises = {i: SessionNoise(float(b), 10, 0.0, 0, float(b), 0.0) for i, b in enumerate(1e-4 * rng.chisquare(9, 8) / 9)}
    shared = share(noises)
    assert all(n.shared and n.within_of_mean == 0.0 and n.variance == n.between for n in shared.values())
    assert len({round(n.between, 12) for n in shared.values()}) == 8        # moderated, not all the prior's
    steady = {i: _noise(1e-4, float(w)) for i, w in enumerate(4e-4 * rng.chisquare(40, 8) / 40)}
    steady = {i: replace(n, between=0.0, variance=0.0) for i, n in steady.items()}   # a deterministic session mean
    assert all(n.shared and n.between == 0.0 for n in share(steady).values())


def test_a_cases_estimate_keeps_the_parts_that_sharing_moderates():
    """SessionNoise.estimate: the variance of the log run means (runs - 1 degrees of freedom) and what
    the repetitions' spread alone adds to it (the mean of cv**2 / n), whose difference is the session
    variance; sharing moderates the two parts separately."""
    runs = [[1.0, 1.02, 0.98], [1.05, 1.04, 1.06, 1.05], [0.97, 0.99]]
    noise = SessionNoise.estimate(runs)
    means = [float(np.mean(r)) for r in runs]
    between = float(np.var(np.log(means), ddof=1))
    within_of_mean = float(np.mean([np.var(np.array(r) / m, ddof=1) / len(r) for r, m in zip(runs, means)]))
    assert noise.between == pytest.approx(between) and noise.within_of_mean == pytest.approx(within_of_mean)
    assert noise.variance == pytest.approx(between - within_of_mean) and noise.df == 2 and not noise.shared


def test_gpuenergy_compare_shares_the_suites_noise_as_a_user_runs_it(tmp_path, capsys):
    """``gpuenergy compare`` over a storage folder with four saved sessions of ten cases: the command's
    report says the cases' estimates were moderated, names the one regression, and exits 1."""
    from pytest_gpuenergy.cli import compare as compare_cli
    from pytest_gpuenergy.runs.store import RunStore

    store = RunStore(tmp_path / ".energy")
    workloads = [f"w{i}" for i in range(10)]
    for seed in range(4):
        store.save(make_doc(seed=seed, workloads=workloads, caps_w=(300.0,), n=5, minutes=10 * seed))
    new = store.save(make_doc(seed=9, workloads=workloads, caps_w=(300.0,), n=5, minutes=60, scale={"w3": 1.3}))
    code = compare_cli.main(["compare", "latest", str(new), "--storage", str(tmp_path / ".energy"), "--fail", "ets:5%"])
    out = " ".join(capsys.readouterr().out.split())
    assert code == 1, out
    assert "10 cases' noise estimates were moderated with the other cases'" in out
    assert "1 regressed" in out and "w3-300W" in out
