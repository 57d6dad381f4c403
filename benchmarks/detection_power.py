"""Detection power of the CI gate (--energy-fail): false alarms and detections on simulated samples.

What is simulated. Per trial, a baseline run and a candidate run of ``n`` repetitions each: ETS
values with multiplicative (log-normal) noise of a given coefficient of variation (CV), the
candidate's mean ``1 + change`` times the baseline's. Noise 1 %, 2 %, 5 %; n = 3, 5, 10; true
changes 0 %, +2 %, +5 %, +10 %. The samples come from numpy's seeded generator (no GPU, no GPU
simulator: every figure here is a Monte Carlo estimate on SIMULATED samples). Within one noise
level and n the same standard-normal draws are used for every change (common random numbers), and
every rule below sees exactly the same samples.

The rules, applied to the same samples:

* ``gate ets:T%`` -- the plugin's own decision, ``pytest_gpuenergy.gate.decide.decide("ets", old,
  new, T, confidence)``, exactly what ``--energy-fail=ets:T%`` (``--energy-confidence``, default
  0.99) runs per case: a regression when the ratio of means is above +T % AND the one-sided
  lower confidence bound of the ratio (Welch's t on the log ratio) is above 0.
* ``pytest-benchmark mean:T%`` -- ``--benchmark-compare-fail=mean:T%``: fails when
  ``mean_new / mean_old * 100 - 100 > T``, no statistics. Read in ionelmc/pytest-benchmark,
  ``src/pytest_benchmark/utils.py`` (``PercentageRegressionCheck.compute``/``RegressionCheck.fails``,
  ``parse_compare_fail``: the percentage is a whole number) and ``docs/usage.rst`` ("will make
  the suite fail if Min is 5% slower").
* ``asv factor F`` -- ``asv compare``/``asv continuous`` as of asv 0.6 (asv_runner 0.2): the
  result of a run is the MEDIAN of its samples; the candidate is "worse" when
  ``median_old < median_new / F`` (``_is_result_better`` in ``asv/commands/compare.py``; ``--factor``
  defaults to 1.1 in ``asv/commands/common_args.py``) AND ``is_different`` says the two runs differ
  (``asv/_stats.py``): when the two-sided Mann-Whitney U test can reach p < 0.002 at these sample
  sizes (1 / C(n_a + n_b, n) < 0.002, i.e. n = 10 here, not n = 3 or 5) it decides with the exact
  U test at p < 0.002; otherwise the runs differ only when their 99 % confidence intervals of the
  median do not overlap. That interval (``compute_stats`` in ``asv_runner/statistics.py``) is the
  order-statistic interval of the median with coverage >= 99 %; where it is unbounded (n <= 7),
  the unbounded side is replaced by the 0.5 % / 99.5 % quantile of the posterior of the location
  under Laplace noise with a scale prior 1/sigma, p(beta | y) ~ (sum |y_j - beta|)^-(n), widened
  to at least the sample's min / max. Implemented here from that description (no asv code is
  used or copied); ties (probability 0 with continuous samples) are not given asv's conservative
  tie-breaking.
* ``gate ets:T% with 10 saved runs`` -- the same decision as ``--energy-save`` runs give it: the case's
  10 saved sessions (the baseline and 9 before it) estimate the noise between sessions and pool the
  repetitions' spread (``gate/decide.py``); drawn at 2 % noise with no session effect (the z-test
  limit's assumption) for detection and false alarms, and with sessions 1 % and 2 % apart (log sd)
  for the false alarms a real machine's drift would cause.
* ``z-test limit`` -- the best any rule can do: the one-sided z-test on the mean log-values with
  the noise variance KNOWN, at a 1 % false-alarm rate. By the Neyman-Pearson lemma no test whose
  false-alarm rate is at most 1 % detects the change more often (log-normal noise is normal on the
  log scale, and the likelihood ratio is monotone in the difference of the mean logs). Computed
  exactly: power = Phi(ln(1 + change) / (sigma * sqrt(2 / n)) - z_0.99), sigma^2 = ln(1 + CV^2).

The goal (issue 6): at 2 % noise and n = 5, a 5 % ETS regression detected at least 95 % of the time
with at most 1 % false alarms. A gate threshold of exactly 5 % cannot do that by construction: a
true +5 % change gives an observed change above +5 % only about half the time, so the gate is
reported at ets:2 %, ets:3 % and ets:5 %, and at every threshold and both usual confidences for the
headline cell.
"""

from __future__ import annotations

import math
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as common  # noqa: E402
from _asv_rule import asv_is_different  # noqa: E402

from pytest_gpuenergy.gate.decide import decide
from pytest_gpuenergy.gate.settings import DEFAULT_CONFIDENCE
from pytest_gpuenergy.gate.verdicts import REGRESSION

NAME = "detection_power"
BASE_ETS_J = 100.0

NOISES = (0.01, 0.02, 0.05)
NS = (3, 5, 10)
CHANGES = (0.0, 0.02, 0.05, 0.10)
THRESHOLDS = (2, 3, 5)                  # per cent, for the gate and pytest-benchmark
ASV_DEFAULT_FACTOR = 1.1
HEADLINE = (0.02, 5)                    # (noise CV, n) of the goal
GOAL_CHANGE = 0.05
GOAL_DETECTION = 0.95
GOAL_FALSE_ALARM = 0.01
OPERATING_THRESHOLDS = (0, 2, 3, 4, 5)
OPERATING_CONFIDENCES = (0.95, 0.99)
SEARCH_NS = (4, 5, 6, 7, 8, 9, 10)

TRIALS = {  # (trials per cell, trials per headline cell, trials per cell of the n search)
    "full": (6000, 20000, 5000),
    "quick": (1500, 4000, 600),
}


# -- the rules ---------------------------------------------------------------------------------------

def gate_fails(old: Sequence[float], new: Sequence[float], threshold_pct: float, confidence: float) -> bool:
    """The plugin's gate, as --energy-fail=ets:T% with --energy-confidence runs it."""
    return decide("ets", old, new, threshold_pct, confidence).verdict == REGRESSION


def pytest_benchmark_fails(old: np.ndarray, new: np.ndarray, threshold_pct: int) -> np.ndarray:
    """--benchmark-compare-fail=mean:T%: the change of the means above T per cent (trials x n arrays)."""
    compared, current = old.mean(axis=1), new.mean(axis=1)
    return current / compared * 100 - 100 > threshold_pct


def z_test_limit(cv: float, n: int, change: float, alpha: float = GOAL_FALSE_ALARM) -> float:
    """Power of the most powerful level-alpha test (known variance, log scale) for a +change."""
    sigma = math.sqrt(math.log1p(cv * cv))
    se = sigma * math.sqrt(2.0 / n)
    normal = statistics.NormalDist()
    if change == 0:
        return alpha
    return normal.cdf(math.log1p(change) / se - normal.inv_cdf(1 - alpha))


# -- simulation --------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Rule:
    key: str
    family: str          # gate, pytest-benchmark, asv
    label: str


def main_rules() -> list[Rule]:
    rules = [Rule(f"gate:{t}", "gate", f"gate ets:{t}% ({DEFAULT_CONFIDENCE:.0%})") for t in THRESHOLDS]
    rules += [Rule(f"pytest-benchmark:{t}", "pytest-benchmark", f"pytest-benchmark mean:{t}%") for t in THRESHOLDS]
    rules += [Rule(f"asv:{1 + t / 100:g}", "asv", f"asv factor {1 + t / 100:g}") for t in THRESHOLDS]
    rules.append(Rule(f"asv:{ASV_DEFAULT_FACTOR:g}", "asv", f"asv factor {ASV_DEFAULT_FACTOR:g} (default)"))
    return rules


def draw(seed: int, noise: float, n: int, trials: int, tag: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Standard-normal draws for the baseline and candidate runs of one (noise, n) row."""
    rng = np.random.default_rng([seed, int(round(noise * 10000)), n, tag])
    return rng.standard_normal((trials, n)), rng.standard_normal((trials, n))


def samples(z_old: np.ndarray, z_new: np.ndarray, noise: float, change: float) -> tuple[np.ndarray, np.ndarray]:
    """Log-normal ETS samples with mean BASE and BASE x (1 + change) and the given CV."""
    sigma = math.sqrt(math.log1p(noise * noise))
    mu = -0.5 * sigma * sigma             # so that the mean of exp(mu + sigma Z) is 1
    old = BASE_ETS_J * np.exp(mu + sigma * z_old)
    new = BASE_ETS_J * (1 + change) * np.exp(mu + sigma * z_new)
    return old, new


def evaluate_cell(old: np.ndarray, new: np.ndarray, gate_settings: Sequence[tuple[float, float]],
                  asv_factors: Sequence[float], bench_thresholds: Sequence[int]) -> dict[str, np.ndarray]:
    """Each rule's verdict (fails: True) per trial, all on the same samples."""
    trials = old.shape[0]
    out: dict[str, np.ndarray] = {}
    for t in bench_thresholds:
        out[f"pytest-benchmark:{t}"] = pytest_benchmark_fails(old, new, t)
    gate = {s: np.zeros(trials, dtype=bool) for s in gate_settings}
    different = np.zeros(trials, dtype=bool)
    old_rows, new_rows = old.tolist(), new.tolist()
    for i, (a, b) in enumerate(zip(old_rows, new_rows)):
        for setting in gate_settings:   # one t quantile per trial and confidence: decide() caches it
            gate[setting][i] = gate_fails(a, b, *setting)
        if asv_factors:
            different[i] = asv_is_different(a, b)
    for (t, conf), verdicts in gate.items():
        out[f"gate:{t:g}" if conf == DEFAULT_CONFIDENCE else f"gate:{t:g}@{conf:g}"] = verdicts
    if asv_factors:
        med_old, med_new = np.median(old, axis=1), np.median(new, axis=1)
        for f in asv_factors:
            out[f"asv:{f:g}"] = different & (med_old < med_new / f)
    return out


HISTORY_RUNS = 10                       # saved runs the gate sees: 9 before the baseline, and the baseline
HISTORY_NS = (3, 5, 7, 10)
HISTORY_THRESHOLDS = (2, 3)
SESSION_EFFECTS = (0.0, 0.01, 0.02)     # log sd of a whole session's mean (0: the z-test limit's own assumption)


SUITE_CASES = 20                        # the cases of one suite whose saved sessions the gate shares (shared_noise)
MIXED_CVS = (0.01, 0.02, 0.05)          # a suite whose cases differ: their noise ...
MIXED_SESSIONS = (0.0, 0.01, 0.03)      # ... and how far apart their sessions are (log sd)


def with_history(seed: int, noise: float, n: int, trials: int, session_sd: float, change: float,
                 thresholds: Sequence[int], suite_cases: int = 1, mixed: bool = False) -> dict[int, np.ndarray]:
    """The gate as ``--energy-save`` runs it: HISTORY_RUNS saved sessions of the case (the last is the
    baseline) whose repetitions' spread is pooled and whose means give the session noise, then the new run.
    ``suite_cases`` > 1: the trials are the cases of suites that many cases long, whose estimates are
    moderated with each other's (``gate.shared_noise.share``, as ``gpuenergy compare`` does); ``mixed``:
    the cases' noise and session effects cycle through MIXED_CVS x MIXED_SESSIONS instead."""
    from pytest_gpuenergy.gate.records import SessionNoise
    from pytest_gpuenergy.gate.shared_noise import share

    key = [seed, int(round(noise * 10000)), n, int(round(session_sd * 10000)), 7]
    rng = np.random.default_rng(key if (suite_cases, mixed) == (1, False) else [*key, suite_cases, int(mixed)])
    case = np.arange(trials) % suite_cases
    cvs = np.array([MIXED_CVS[c % 3] for c in case]) if mixed else np.full(trials, noise)
    sds = np.array([MIXED_SESSIONS[(c // 3) % 3] for c in case]) if mixed else np.full(trials, session_sd)
    sigma = np.sqrt(np.log1p(cvs * cvs))[:, None, None]
    runs = BASE_ETS_J * np.exp(-0.5 * sigma * sigma + sigma * rng.standard_normal((trials, HISTORY_RUNS + 1, n))
                               + sds[:, None, None] * rng.standard_normal((trials, HISTORY_RUNS + 1, 1)))
    runs[:, -1, :] *= 1 + change
    fails = {t: np.zeros(trials, dtype=bool) for t in thresholds}
    for first in range(0, trials, suite_cases):
        suite = range(first, min(first + suite_cases, trials))
        noises = share({i: SessionNoise.estimate(runs[i, :HISTORY_RUNS].tolist()) for i in suite})
        for i in suite:
            for t in thresholds:
                fails[t][i] = decide("ets", runs[i, HISTORY_RUNS - 1].tolist(), runs[i, -1].tolist(), t,
                                     DEFAULT_CONFIDENCE, noises[i]).verdict == REGRESSION
    return fails


def rate(verdicts: np.ndarray) -> tuple[float, float]:
    """The fraction that failed and its binomial standard error."""
    p = float(np.mean(verdicts))
    return p, math.sqrt(max(p * (1 - p), 0.0) / len(verdicts))


def fmt_rate(p: float | None) -> str:
    return "-" if p is None else f"{100 * p:.1f}%"


def _list(text: str, kind: Callable[[str], Any]) -> tuple:
    return tuple(kind(item) for item in text.split(",") if item.strip())


def parse_args(argv: Sequence[str] | None) -> Any:
    p = common.parser(__doc__.splitlines()[0])
    p.add_argument("--trials", type=int, default=None, help="trials per cell (default 6000; 1500 with --quick)")
    p.add_argument("--headline-trials", type=int, default=None,
                   help="trials per cell at 2 %% noise and n = 5 (default 20000; 4000 with --quick)")
    p.add_argument("--search-trials", type=int, default=None,
                   help="trials per cell of the search for the n that meets the goal (default 5000; 600 with --quick)")
    p.add_argument("--history-trials", type=int, default=None,
                   help="trials per cell of the gate with saved sessions (default 3000; 600 with --quick)")
    p.add_argument("--noises", type=lambda s: _list(s, float), default=NOISES, help="noise CVs, e.g. 0.01,0.02,0.05")
    p.add_argument("--ns", type=lambda s: _list(s, int), default=NS, help="repetitions a side, e.g. 3,5,10")
    p.add_argument("--search-ns", type=lambda s: _list(s, int), default=SEARCH_NS,
                   help="repetitions a side searched for the goal at 2 %% noise")
    args = p.parse_args(argv)
    trials, headline, search = TRIALS["quick" if args.quick else "full"]
    args.trials = args.trials or trials
    args.headline_trials = args.headline_trials or headline
    args.search_trials = args.search_trials or search
    args.history_trials = args.history_trials or (600 if args.quick else 3000)
    for name in ("trials", "headline_trials", "search_trials", "history_trials"):
        if getattr(args, name) < 2:
            p.error(f"--{name.replace('_', '-')} must be at least 2")
    if any(n < 2 for n in (*args.ns, *args.search_ns)):
        p.error("n must be at least 2 repetitions a side (the gate's test needs 2)")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    started = time.time()
    rules = main_rules()
    asv_factors = [1 + t / 100 for t in THRESHOLDS] + [ASV_DEFAULT_FACTOR]
    print(f"{NAME}{' (quick)' if args.quick else ''}: Monte Carlo on SIMULATED samples (seeded numpy, log-normal "
          f"noise), no GPU involved; gate = pytest_gpuenergy.gate.decide.decide\n", flush=True)

    # -- the grid: every noise, n, change, rule ---------------------------------------------------
    rows: list[dict[str, Any]] = []
    operating: list[dict[str, Any]] = []
    for noise in args.noises:
        for n in args.ns:
            headline_row = (noise, n) == HEADLINE
            trials = args.headline_trials if headline_row else args.trials
            z_old, z_new = draw(args.seed, noise, n, trials)
            gate_settings = [(t, DEFAULT_CONFIDENCE) for t in THRESHOLDS]
            if headline_row:
                gate_settings = list(dict.fromkeys(
                    gate_settings + [(t, c) for c in OPERATING_CONFIDENCES for t in OPERATING_THRESHOLDS]))
            for change in CHANGES:
                t0 = time.perf_counter()
                old, new = samples(z_old, z_new, noise, change)
                verdicts = evaluate_cell(old, new, gate_settings, asv_factors, THRESHOLDS)
                for rule in rules:
                    p, se = rate(verdicts[rule.key])
                    rows.append({"noise_cv": noise, "n": n, "change": change, "rule": rule.key, "family": rule.family,
                                 "label": rule.label, "fail_rate": p, "se": se, "trials": trials})
                rows.append({"noise_cv": noise, "n": n, "change": change, "rule": "z-limit", "family": "reference",
                             "label": "z-test limit at 1% false alarms", "fail_rate": z_test_limit(noise, n, change),
                             "se": 0.0, "trials": None})
                if headline_row:
                    for t, conf in gate_settings:
                        key = f"gate:{t:g}" if conf == DEFAULT_CONFIDENCE else f"gate:{t:g}@{conf:g}"
                        p, se = rate(verdicts[key])
                        operating.append({"threshold_pct": t, "confidence": conf, "change": change,
                                          "fail_rate": p, "se": se, "trials": trials})
                print(f"  noise {noise:.0%} n={n} change {change:+.0%}: {trials} trials in "
                      f"{time.perf_counter() - t0:.1f} s", flush=True)
    print()

    def cell(noise: float, n: int, change: float, rule: str) -> dict[str, Any] | None:
        return next((r for r in rows if (r["noise_cv"], r["n"], r["change"], r["rule"]) == (noise, n, change, rule)), None)

    for noise in args.noises:
        table = []
        for n in args.ns:
            trials = args.headline_trials if (noise, n) == HEADLINE else args.trials
            for rule in [*rules, Rule("z-limit", "reference", "z-test limit (known variance, 1% false alarms)")]:
                table.append([n, trials if rule.family != "reference" else "exact", rule.label,
                              *[fmt_rate(cell(noise, n, c, rule.key)["fail_rate"]) for c in CHANGES]])
        common.print_table(
            ["n", "trials", "rule", *[("0% (false alarm)" if c == 0 else f"+{c:.0%} (detected)") for c in CHANGES]],
            table, title=f"Noise CV {noise:.0%}: share of comparisons that FAIL the build (simulated samples)")

    # -- the headline cell: every threshold at both usual confidences ------------------------------
    headline: dict[str, Any] = {"available": HEADLINE[0] in args.noises and HEADLINE[1] in args.ns}
    if headline["available"]:
        op_table = []
        for conf in OPERATING_CONFIDENCES:
            for t in OPERATING_THRESHOLDS:
                fa = next(o for o in operating if (o["threshold_pct"], o["confidence"], o["change"]) == (t, conf, 0.0))
                det = next(o for o in operating if (o["threshold_pct"], o["confidence"], o["change"]) == (t, conf, GOAL_CHANGE))
                op_table.append([f"ets:{t}%", f"{conf:.0%}", fmt_rate(fa["fail_rate"]), fmt_rate(det["fail_rate"]),
                                 "yes" if fa["fail_rate"] <= GOAL_FALSE_ALARM and det["fail_rate"] >= GOAL_DETECTION else "no"])
        limit = z_test_limit(*HEADLINE, GOAL_CHANGE)
        common.print_table(
            ["--energy-fail", "--energy-confidence", "false alarms (0%)", "detected (+5%)", "goal met"], op_table,
            title=f"Gate operating points at noise {HEADLINE[0]:.0%}, n={HEADLINE[1]} ({args.headline_trials} trials a cell, "
                  f"simulated samples); z-test limit at 1% false alarms: {limit:.1%}")
        settings = []
        for t in THRESHOLDS:
            fa, det = cell(*HEADLINE, 0.0, f"gate:{t}"), cell(*HEADLINE, GOAL_CHANGE, f"gate:{t}")
            settings.append({"setting": f"ets:{t}%", "confidence": DEFAULT_CONFIDENCE,
                             "false_alarm": fa["fail_rate"], "false_alarm_se": fa["se"],
                             "detection": det["fail_rate"], "detection_se": det["se"], "trials": det["trials"],
                             "goal_met": fa["fail_rate"] <= GOAL_FALSE_ALARM and det["fail_rate"] >= GOAL_DETECTION})
        met_anywhere = [o for o in op_table if o[-1] == "yes"]
        headline.update({
            "noise_cv": HEADLINE[0], "n": HEADLINE[1], "change": GOAL_CHANGE, "trials": args.headline_trials,
            "gate": settings,
            "z_test_limit_detection": limit,
            "goal_reachable_by_any_test": limit >= GOAL_DETECTION,
            "goal_met": any(s["goal_met"] for s in settings),
            "goal_met_by_any_operating_point": bool(met_anywhere),
            "other_rules": {
                rule.key: {"false_alarm": cell(*HEADLINE, 0.0, rule.key)["fail_rate"],
                           "detection": cell(*HEADLINE, GOAL_CHANGE, rule.key)["fail_rate"]}
                for rule in rules if rule.family != "gate"},
        })

    # -- with saved sessions: what --energy-save gives the gate -------------------------------------
    history_rows: list[dict[str, Any]] = []
    for suite_cases in (1, SUITE_CASES):
        for n in HISTORY_NS:
            # the goal's cell (the suite's, n = 5) with as many trials as the headline's, the others fewer
            trials = args.headline_trials if (n, suite_cases) == (HEADLINE[1], SUITE_CASES) else args.history_trials
            for t in HISTORY_THRESHOLDS:
                history_rows.append({"noise_cv": HEADLINE[0], "n": n, "threshold_pct": t, "confidence": DEFAULT_CONFIDENCE,
                                     "saved_runs": HISTORY_RUNS, "suite_cases": suite_cases, "trials": trials,
                                     "z_test_limit_detection": z_test_limit(HEADLINE[0], n, GOAL_CHANGE)})
            detected = with_history(args.seed, HEADLINE[0], n, trials, 0.0, GOAL_CHANGE, HISTORY_THRESHOLDS, suite_cases)
            alarms = {sd: with_history(args.seed, HEADLINE[0], n, trials, sd, 0.0, HISTORY_THRESHOLDS, suite_cases)
                      for sd in SESSION_EFFECTS}
            mixed = with_history(args.seed, HEADLINE[0], n, trials, 0.0, 0.0, HISTORY_THRESHOLDS,
                                 suite_cases, mixed=True) if suite_cases > 1 else None
            for row in history_rows[-len(HISTORY_THRESHOLDS):]:
                t = row["threshold_pct"]
                row["detection"], row["detection_se"] = rate(detected[t])
                row["false_alarm"], row["false_alarm_se"] = rate(alarms[0.0][t])
                row["false_alarm_with_session_effect"] = {f"{sd:g}": rate(alarms[sd][t])[0] for sd in SESSION_EFFECTS if sd}
                row["false_alarm_mixed_suite"] = rate(mixed[t])[0] if mixed is not None else None
    common.print_table(
        ["n", "--energy-fail", "shared", "z-limit (+5%)", "detected (+5%)", "false alarms",
         *[f"FA, sessions {sd:.0%} apart" for sd in SESSION_EFFECTS if sd], "FA, mixed suite"],
        [[r["n"], f"ets:{r['threshold_pct']}%", f"{r['suite_cases']} cases" if r["suite_cases"] > 1 else "no",
          fmt_rate(r["z_test_limit_detection"]), fmt_rate(r["detection"]), fmt_rate(r["false_alarm"]),
          *[fmt_rate(v) for v in r["false_alarm_with_session_effect"].values()],
          fmt_rate(r["false_alarm_mixed_suite"]) if r["false_alarm_mixed_suite"] is not None else "-"]
         for r in history_rows],
        title=f"The gate with {HISTORY_RUNS} saved sessions (the baseline and 9 before it), noise {HEADLINE[0]:.0%}, "
              f"{args.history_trials} trials a cell, {args.headline_trials} for the suite at n={HEADLINE[1]} (simulated samples): the "
              f"repetitions' spread pooled over them; "
              f"shared: each case's estimates moderated with those of a suite of {SUITE_CASES} cases (mixed suite: "
              f"noise {'/'.join(f'{c:.0%}' for c in MIXED_CVS)}, sessions {'/'.join(f'{c:.0%}' for c in MIXED_SESSIONS)} apart)")
    if headline["available"]:
        headline["gate"] += [
            {"setting": f"ets:{r['threshold_pct']}% with {HISTORY_RUNS} saved runs"
                        + (f", shared by {r['suite_cases']} cases" if r["suite_cases"] > 1 else ""),
             "confidence": r["confidence"],
             "false_alarm": r["false_alarm"], "false_alarm_se": r["false_alarm_se"], "detection": r["detection"],
             "detection_se": r["detection_se"], "trials": r["trials"],
             "false_alarm_with_session_effect": r["false_alarm_with_session_effect"],
             "goal_met": r["false_alarm"] <= GOAL_FALSE_ALARM and r["detection"] >= GOAL_DETECTION}
            for r in history_rows if r["n"] == HEADLINE[1]]
        headline["goal_met"] = any(g["goal_met"] for g in headline["gate"])

    # -- how many repetitions the goal needs -----------------------------------------------------
    search_rows: list[dict[str, Any]] = []
    search_settings = [(0, DEFAULT_CONFIDENCE), (2, DEFAULT_CONFIDENCE), (3, DEFAULT_CONFIDENCE), (2, 0.95), (3, 0.95)]
    for n in args.search_ns:
        z_old, z_new = draw(args.seed, HEADLINE[0], n, args.search_trials, tag=1)
        entry: dict[str, Any] = {"n": n, "trials": args.search_trials,
                                 "z_test_limit_detection": z_test_limit(HEADLINE[0], n, GOAL_CHANGE), "gate": {}}
        results = {}
        for change in (0.0, GOAL_CHANGE):
            old, new = samples(z_old, z_new, HEADLINE[0], change)
            results[change] = evaluate_cell(old, new, search_settings, [], [])
        for t, conf in search_settings:
            key = f"gate:{t:g}" if conf == DEFAULT_CONFIDENCE else f"gate:{t:g}@{conf:g}"
            fa, fa_se = rate(results[0.0][key])
            det, det_se = rate(results[GOAL_CHANGE][key])
            entry["gate"][f"ets:{t}%@{conf:g}"] = {"false_alarm": fa, "false_alarm_se": fa_se, "detection": det,
                                                   "detection_se": det_se,
                                                   "goal_met": fa <= GOAL_FALSE_ALARM and det >= GOAL_DETECTION}
        search_rows.append(entry)
    keys = list(search_rows[0]["gate"]) if search_rows else []
    common.print_table(
        ["n", "z-limit (+5%)", *[f"{k}: FA / det" for k in keys]],
        [[e["n"], fmt_rate(e["z_test_limit_detection"]),
          *[f"{fmt_rate(e['gate'][k]['false_alarm'])} / {fmt_rate(e['gate'][k]['detection'])}"
            + (" *" if e["gate"][k]["goal_met"] else "") for k in keys]] for e in search_rows],
        title=f"Repetitions the goal needs at noise {HEADLINE[0]:.0%} ({args.search_trials} trials a cell, fresh simulated "
              f"samples; FA = false alarms at 0%, det = detected at +5%, * = goal met)")
    first_n = {k: next((e["n"] for e in search_rows if e["gate"][k]["goal_met"]), None) for k in keys}
    z_n = next((n for n in range(2, 100) if z_test_limit(HEADLINE[0], n, GOAL_CHANGE) >= GOAL_DETECTION), None)

    # -- the headline ---------------------------------------------------------------------------
    lines = []
    if headline["available"]:
        se1 = math.sqrt(GOAL_FALSE_ALARM * (1 - GOAL_FALSE_ALARM) / args.headline_trials)
        # The first goal (issue 25), out of reach at n = 5 for any test; the tracked one is in the goals list.
        verdict = f"The original goal (issue 25) {'met' if headline['goal_met'] else 'NOT met'}"
        parts = "; ".join(
            f"ets:{s['setting'][4:]} {fmt_rate(s['detection'])} detected (+-{100 * s['detection_se']:.1f}), "
            f"{fmt_rate(s['false_alarm'])} false alarms (+-{100 * s['false_alarm_se']:.2f})" for s in headline["gate"])
        lines.append(f"{verdict} (simulated samples, noise {HEADLINE[0]:.0%}, n={HEADLINE[1]}, +5% ETS, goal >= 95% detected "
                     f"with <= 1% false alarms, {args.headline_trials} trials a cell, binomial SE at 1%: "
                     f"{100 * se1:.2f} points): gate at 99%: {parts}.")
        lines.append(f"Best possible with known variance at 1% false alarms (z-test, Neyman-Pearson): "
                     f"{headline['z_test_limit_detection']:.1%} -> the goal is "
                     f"{'reachable' if headline['goal_reachable_by_any_test'] else 'NOT reachable by any test'} at n={HEADLINE[1]}; "
                     f"the z-test reaches 95% from n={z_n}.")
        lines.append("Smallest n meeting the goal in the search: "
                     + ", ".join(f"{k} -> {first_n[k] if first_n[k] else 'none up to ' + str(max(args.search_ns))}" for k in keys)
                     + ".")
        other = headline["other_rules"]
        lines.append(
            "Same samples, other rules: " + "; ".join(
                f"{r.label}: {fmt_rate(other[r.key]['detection'])} detected, {fmt_rate(other[r.key]['false_alarm'])} false alarms"
                for r in rules if r.family != "gate") + ".")
    for line in lines:
        print(line)

    path = common.write_result(
        NAME,
        {
            "description": "false-alarm and detection rates of the CI gate vs pytest-benchmark's and asv's rules, "
                           "Monte Carlo on simulated log-normal samples",
            "figures": "simulated: Monte Carlo estimates on seeded numpy samples, no GPU and no GPU simulator involved",
            "settings": {
                "noise_cvs": list(args.noises), "ns": list(args.ns), "changes": list(CHANGES),
                "thresholds_pct": list(THRESHOLDS), "confidence": DEFAULT_CONFIDENCE,
                "asv_factors": asv_factors, "trials_per_cell": args.trials,
                "trials_headline_cell": args.headline_trials, "trials_search_cell": args.search_trials,
                "seed": args.seed, "base_ets_j": BASE_ETS_J,
                "noise_model": "ETS = mean x exp(mu + sigma Z), sigma^2 = ln(1 + CV^2), mu = -sigma^2/2; "
                               "common random numbers across changes within a (noise, n) row",
            },
            "rules": {
                "gate": "pytest_gpuenergy.gate.decide.decide('ets', old, new, T, confidence) == 'regression' "
                        "(--energy-fail=ets:T%, --energy-confidence, default 0.99)",
                "pytest-benchmark": "--benchmark-compare-fail=mean:T%: mean_new / mean_old * 100 - 100 > T "
                                    "(ionelmc/pytest-benchmark src/pytest_benchmark/utils.py PercentageRegressionCheck; "
                                    "docs/usage.rst)",
                "asv": "asv compare: median_new > F x median_old AND is_different (exact two-sided Mann-Whitney U "
                       "p < 0.002 where it can reach it, here n = 10; else disjoint 99 % median intervals: "
                       "order statistics, Laplace-posterior quantiles where unbounded) "
                       "(airspeed-velocity/asv asv/commands/compare.py _is_result_better, asv/commands/common_args.py "
                       "--factor default 1.1, asv/_stats.py is_different; airspeed-velocity/asv_runner "
                       "asv_runner/statistics.py compute_stats, quantile_ci, LaplacePosterior); reimplemented here",
                "z-limit": "most powerful level-1% test with known variance (one-sided z on mean log-values)",
            },
            "goal": {"statement": "at 2 % noise and n = 5, a 5 % ETS regression detected >= 95 % of the time "
                                  "with <= 1 % false alarms", **headline},
            "headline": lines,
            "rows": rows,
            "operating_points": operating,
            "with_history": history_rows,
            "n_search": {"noise_cv": HEADLINE[0], "change": GOAL_CHANGE, "rows": search_rows,
                         "first_n_meeting_goal": first_n, "z_test_first_n": z_n},
            "goals": [headline_goal(headline).record()],
        },
        quick=args.quick, started=started, out_dir=args.out,
    )
    print(f"\nwrote {path} in {time.time() - started:.1f} s")
    return 0


def headline_goal(headline: dict[str, Any]) -> common.Goal:
    """Issue 28's goal at the headline cell: detection within 2 points of the Neyman-Pearson bound
    (the best any test can do, the noise known) at <= 1 % false alarms, by the gate's best setting."""
    if not headline.get("available") or not headline.get("gate"):
        return common.Goal("detection_power_n5", None, None, False, True,
                           reason=f"the headline cell (noise {HEADLINE[0]:.0%}, n = {HEADLINE[1]}) was not run")
    allowed = [row for row in headline["gate"] if row["false_alarm"] <= GOAL_FALSE_ALARM]
    bound = headline["z_test_limit_detection"]
    target = bound - 0.02
    if not allowed:
        return common.Goal("detection_power_n5", 0.0, target, False, True,
                           f"detection at {HEADLINE[0]:.0%} noise, n = {HEADLINE[1]}, +5 % ETS (simulated samples): "
                           f"no gate setting keeps false alarms at or below {GOAL_FALSE_ALARM:.0%}")
    best = max(allowed, key=lambda row: row["detection"])
    return common.Goal("detection_power_n5", best["detection"], target, best["detection"] >= target, True,
                       f"detection at {HEADLINE[0]:.0%} noise, n = {HEADLINE[1]}, +5 % ETS (simulated samples): "
                       f"{best['detection']:.1%} with {best['false_alarm']:.1%} false alarms ({best['setting']}); goal: "
                       f"within 2 points of the Neyman-Pearson bound {bound:.1%} at <= {GOAL_FALSE_ALARM:.0%} false alarms")


if __name__ == "__main__":
    sys.exit(main())
