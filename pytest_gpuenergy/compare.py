"""Comparing a run with its baseline: per test, cap and GPU, is the change a regression beyond noise?

The decision rule (the CI gate)
-------------------------------
For each case and metric (ETS, T, EDP) the repetitions of the baseline and of the new run are
two samples. The **change** is the ratio of their means, new / old - 1, in per cent (the means
are the figures the result tables show), with one-sided confidence bounds (below). From these
``verdicts.classify`` decides: a **regression** is a change above the metric's threshold
(``--energy-fail=ets:5%``) whose increase is real (lower bound above 0 %); an **improvement**
the mirror image; **unchanged** when the whole interval lies within the threshold; otherwise
**inconclusive**: the data cannot tell (see ``verdicts.py``, with the hint that would tell). A
metric without a threshold is reported (``increase``/``decrease``/``unchanged``) but never
gates; it only labels the whole case (``changed``) when no metric is gated at all. With fewer
than 2 repetitions on either side there is no spread to test against, so the threshold alone
decides, and the result says so. Whatever the statistics say, a change of ETS or EDP that the
meter's own bounds can explain (the bound of the old mean and that of the new one overlap: short
regions are coarse) is never a regression nor an improvement: it is inconclusive.

The statistical test: Welch's t on the log of the ratio of means
----------------------------------------------------------------
``log(mean_new / mean_old)`` has, by the delta method, the standard error
``sqrt(cv_old**2 / n_old + cv_new**2 / n_new)`` (``cv`` = sample standard deviation / mean),
with the Welch-Satterthwaite degrees of freedom of those two terms. The bounds are
``exp(log ratio -/+ t(confidence, df) * se) - 1``; each bound is one-sided at the stated
confidence, so together they form a (2 x confidence - 1) two-sided interval (98 % for 99 %).

Why this test:

- Energy noise is multiplicative (a few per cent of the figure, whatever its size), so the
  log scale makes the noise additive and the interval is one on the *ratio*, which is what a
  "5 %" threshold talks about; it is always positive and centred on the reported change.
- Welch's form does not assume equal spread: a new driver or a different cap changes it.
- It works at the small sample sizes of GPU benchmarks (3 to 10 repetitions), where a
  bootstrap interval is too narrow (it cannot see more spread than the few samples show) and
  the Mann-Whitney U test cannot reach 99 % at all with 4 against 4 samples (its smallest
  one-sided p-value is 1/70) and gives no interval on the ratio.
- To first order in the CV it equals Welch's t-test on log-values (Welch 1947, Biometrika 34;
  the delta method for a ratio of means, e.g. Casella & Berger, Statistical Inference, 5.5.4).
  ``tests/test_compare.py`` checks by simulation that unchanged workloads with 2-5 % noise are
  called real increases in about 1 % of comparisons at 99 %.

Noise between sessions
----------------------
Repetitions inside one session share its machine state (clocks, temperature, the host's load,
the allocator's layout), so their spread understates how much a whole session's mean moves from
one session to the next. On a real H100 an unchanged full-size suite run twice gave step times
up to 40 % apart at 1 to 3 % CV within each run, and the within-run test called three of 18
cases real EDP regressions. So when the store holds earlier runs of the same GPU model and
backend, the gate also estimates, per case and metric, the variance of a session's mean around
the true one: ``s_b**2 = var(log run means) - mean(within-run variance of a run's log mean)`` over
the baseline and up to ``HISTORY_RUNS - 1`` runs before it (floored at 0). Each side's mean
carries one session effect, so ``se**2`` gains ``2 * s_b**2``, with ``k - 1`` degrees of freedom
(k runs) in the Welch-Satterthwaite sum. With a single saved run this term is unknown: the test
then sees within-run noise only, and the comparison says so. Save several baselines (k >= 3;
the t quantile at 99 % is 31.8 for k = 2, 4.5 for k = 4 and 3.4 for k = 6).

The Student t quantile is computed in ``student_t.py`` (regularised incomplete beta, DLMF 8.17.22), so the
plugin does not depend on SciPy.
"""

from __future__ import annotations

import math
import re
import statistics
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Mapping, Sequence

from .shards import case_baseline
from .storage import LATEST, CaseEntry, RunDocument, RunStore, commit_text, model_label
from .student_t import student_t_ppf
from .verdicts import (
    CHANGED, DECREASE, IMPROVEMENT, INCONCLUSIVE, INCREASE, REGRESSION, UNCHANGED, UNDEFINED, Evidence, classify,
    confidence_text, inconclusive_hint, interval_text, pct_text,
)

METRICS = ("ets", "time", "edp")
METRIC_FIELDS = {"ets": "ets_j", "time": "time_s", "edp": "edp_js"}
METRIC_LABELS = {"ets": "ETS", "time": "T", "edp": "EDP"}
METRIC_UNITS = {"ets": "J", "time": "s", "edp": "J s"}
DEFAULT_CONFIDENCE = 0.99

#: Every verdict a case or metric can have (``verdicts.py`` says what each means).
VERDICTS = (REGRESSION, IMPROVEMENT, INCONCLUSIVE, UNCHANGED, CHANGED, INCREASE, DECREASE, UNDEFINED)

COMPARED = "compared"
NEW = "new"
MISSING = "missing"

WELCH = "welch-log-ratio"
#: The baseline and at most this many runs before it inform the estimate of noise between sessions.
HISTORY_RUNS = 10
THRESHOLD_ONLY = "threshold-only"

_THRESHOLD_ITEM = re.compile(r"\s*([A-Za-z]+)\s*[:=]\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*(%?)\s*")


# -- thresholds ------------------------------------------------------------------------------------

def parse_thresholds(text: str, *, source: str = "--energy-fail") -> dict[str, float]:
    """``"ets:5%,edp:10%,time:5%"`` -> ``{"ets": 5.0, "edp": 10.0, "time": 5.0}`` (per cent).

    Every mistake names the item and the valid form, prefixed by ``source`` (the option).
    """
    form = f"write METRIC:PERCENT items separated by commas, METRIC one of {', '.join(METRICS)}, e.g. {source}=ets:5%,edp:10%"
    if text is None or not str(text).strip():
        raise ValueError(f"{source}: no threshold given; {form}")
    thresholds: dict[str, float] = {}
    for item in str(text).split(","):
        match = _THRESHOLD_ITEM.fullmatch(item)
        if not item.strip():
            raise ValueError(f"{source}: empty item in {text!r}; {form}")
        if match is None:
            raise ValueError(f"{source}: {item.strip()!r} is not a threshold; {form}")
        metric, number = match.group(1).lower(), float(match.group(2))
        if metric not in METRICS:
            raise ValueError(f"{source}: unknown metric {match.group(1)!r} in {item.strip()!r}; {form}")
        if not math.isfinite(number) or number > 1000:
            raise ValueError(f"{source}: {item.strip()!r}: a threshold is a percentage from 0 to 1000; {form}")
        if metric in thresholds:
            raise ValueError(f"{source}: {metric} is given twice in {text!r}; give each metric once")
        thresholds[metric] = number
    return thresholds


def check_confidence(confidence: float, *, source: str = "confidence") -> float:
    """A confidence level between 0.5 and 1 (exclusive); 99 % is written 0.99."""
    if isinstance(confidence, bool) or not isinstance(confidence, (int, float)) or not 0.5 < confidence < 1:
        raise ValueError(f"{source}: {confidence!r} is not a confidence level; give a number between 0.5 and 1, e.g. 0.99")
    return float(confidence)


def _check_thresholds(thresholds: Mapping[str, float] | None) -> dict[str, float]:
    result = dict(thresholds or {})
    for metric, value in result.items():
        if metric not in METRICS:
            raise ValueError(f"thresholds: unknown metric {metric!r}; use {', '.join(METRICS)}")
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < math.inf:
            raise ValueError(f"thresholds: {metric}={value!r} must be a percentage >= 0")
    return result


# -- records ---------------------------------------------------------------------------------------

@dataclass(frozen=True)
class MetricChange:
    """One metric of one case: old and new mean, the change with its bounds, and the verdict."""

    metric: str                    # "ets", "time" or "edp"
    old_mean: float
    new_mean: float
    change_pct: float | None       # new/old - 1 in per cent; None when no ratio exists
    ci_low_pct: float | None       # one-sided lower bound at `confidence`; None without a test
    ci_high_pct: float | None      # one-sided upper bound at `confidence`
    confidence: float
    threshold_pct: float | None    # None: the metric is reported, not gated
    verdict: str
    reason: str
    old_n: int = 0
    new_n: int = 0
    method: str = WELCH
    hint: str = ""                 # for an inconclusive verdict: what would tell

    @property
    def label(self) -> str:
        return METRIC_LABELS[self.metric]

    @property
    def gated(self) -> bool:
        return self.threshold_pct is not None

    def describe(self) -> str:
        """``ETS regression: +30.0 % [+25.1 %, +35.2 %] ...`` for failure messages."""
        return f"{self.label} {self.verdict}: {self.reason}"


@dataclass(frozen=True)
class SessionNoise:
    """How much a session's mean of one case and metric moves between sessions (log scale)."""

    variance: float                # s_b**2 of the log of a session's mean
    runs: int                      # saved runs it was estimated from (its degrees of freedom: runs - 1)

    @property
    def cv(self) -> float:
        return math.sqrt(self.variance)

    @classmethod
    def estimate(cls, runs: Sequence[Sequence[float]]) -> "SessionNoise | None":
        """From the repetitions of the same case in ``runs`` (one sequence per saved run); None under 2 runs.

        A run with a single repetition shows no within-run spread: all of its run mean's spread
        then counts as session noise, which errs towards fewer false alarms.
        """
        usable = [list(r) for r in runs if r and statistics.fmean(r) > 0]
        if len(usable) < 2:
            return None
        means = [statistics.fmean(r) for r in usable]
        between = sample_variance([math.log(m) for m in means])
        within = statistics.fmean(
            sample_variance([v / m for v in r]) / len(r) if len(r) > 1 else 0.0 for r, m in zip(usable, means)
        )
        return cls(max(0.0, between - within), len(usable))


@dataclass(frozen=True)
class CaseComparison:
    """One case (case id, cap, GPU) in both runs, in only the new one, or in only the old one."""

    key: tuple[str, str, int]      # (case_id, cap label, the GPU's place in the case)
    test: str
    cap: str
    gpu_name: str
    status: str                    # "compared", "new" or "missing"
    metrics: tuple[MetricChange, ...]
    verdict: str                   # regression, improvement, inconclusive, unchanged, changed, new, missing
    old: CaseEntry | None = None
    new: CaseEntry | None = None
    notes: tuple[str, ...] = ()

    @property
    def case_id(self) -> str:
        return self.key[0]

    @property
    def gpu_index(self) -> int:
        """The GPU this run measured the case on (the baseline's for a missing case)."""
        entry = self.new or self.old
        return entry.gpu_index if entry is not None else self.key[2]

    @property
    def simulated(self) -> bool:
        return any(e is not None and e.simulated for e in (self.old, self.new))

    def metric(self, name: str) -> MetricChange | None:
        return next((m for m in self.metrics if m.metric == name), None)

    @property
    def regressed_metrics(self) -> tuple[MetricChange, ...]:
        return tuple(m for m in self.metrics if m.verdict == REGRESSION)


@dataclass(frozen=True)
class RunInfo:
    """What a reader needs to know about one side of a comparison."""

    run_id: str
    created_at: datetime
    backend: str
    simulated: bool
    gpu_model: str
    host: str | None
    driver: str | None
    torch: str | None
    cuda: str | None
    commit: dict[str, Any] | None

    @classmethod
    def of(cls, doc: RunDocument) -> "RunInfo":
        machine = doc.machine
        return cls(
            run_id=doc.run_id, created_at=doc.created_at, backend=doc.backend, simulated=doc.simulated,
            gpu_model=doc.gpu_model, host=machine.get("host"), driver=machine.get("driver"),
            torch=machine.get("torch"), cuda=machine.get("cuda"), commit=doc.commit,
        )

    def describe(self) -> str:
        return (
            f"{self.run_id} ({self.created_at:%Y-%m-%d %H:%M} UTC, {commit_text(self.commit)}, "
            f"{model_label(self.gpu_model, self.backend, self.simulated)})"
        )


@dataclass(frozen=True)
class Comparison:
    """A new run against its baseline: every case's comparison and what a reader must know."""

    old_run_id: str | None
    new_run_id: str
    old_machine: RunInfo | None
    new_machine: RunInfo
    cases: tuple[CaseComparison, ...]
    notes: tuple[str, ...]
    comparable: bool
    thresholds: dict[str, float] = field(default_factory=dict)
    confidence: float = DEFAULT_CONFIDENCE

    @property
    def regressions(self) -> list[CaseComparison]:
        return [c for c in self.cases if c.verdict == REGRESSION]

    @property
    def improvements(self) -> list[CaseComparison]:
        return [c for c in self.cases if c.verdict == IMPROVEMENT]

    @property
    def failed(self) -> bool:
        """Whether the gate fails: at least one regression beyond noise and threshold."""
        return bool(self.regressions)

    @property
    def simulated(self) -> bool:
        return self.new_machine.simulated or (self.old_machine is not None and self.old_machine.simulated)

    def counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for case in self.cases:
            counts[case.verdict] = counts.get(case.verdict, 0) + 1
        return counts


# -- the decision ----------------------------------------------------------------------------------

def decide(
    metric: str,
    old: Sequence[float],
    new: Sequence[float],
    threshold_pct: float | None,
    confidence: float = DEFAULT_CONFIDENCE,
    session: SessionNoise | None = None,
    bounds: tuple[tuple[float, float], tuple[float, float]] | None = None,
) -> MetricChange:
    """The verdict for one metric from the two runs' repetitions (see the module docstring).

    ``session``: the noise between sessions, estimated from saved runs; None when unknown.
    ``bounds``: the meter's bounds on the old and the new mean, where known. A change that the
    bounds can explain (they overlap) is never a regression nor an improvement, whatever the
    statistics say: the figures themselves are not that certain.
    """
    if metric not in METRICS:
        raise ValueError(f"unknown metric {metric!r}; use {', '.join(METRICS)}")
    if not old or not new:
        raise ValueError(f"{metric}: both runs need at least one repetition")
    old_mean, new_mean = statistics.fmean(old), statistics.fmean(new)
    base = dict(metric=metric, old_mean=old_mean, new_mean=new_mean, confidence=confidence,
                threshold_pct=threshold_pct, old_n=len(old), new_n=len(new))
    if not (old_mean > 0 and new_mean > 0 and math.isfinite(old_mean) and math.isfinite(new_mean)):
        return MetricChange(
            **base, change_pct=None, ci_low_pct=None, ci_high_pct=None, verdict=UNDEFINED, method=THRESHOLD_ONLY,
            reason=f"no ratio: the mean is {old_mean:.4g} in the baseline and {new_mean:.4g} now; both must be above 0",
        )
    change = 100.0 * (new_mean / old_mean - 1.0)
    explained = bounds is not None and _overlap(*bounds)
    if min(len(old), len(new)) < 2:
        return _threshold_only(base, change, explained)
    spread = _log_ratio_spread(old, new, old_mean, new_mean, confidence, session)
    verdict, why = classify(Evidence(change, spread.low_pct, spread.high_pct, confidence, explained), threshold_pct)
    if explained and bounds is not None:
        why += f" ({_bounds_text(bounds, metric)})"
    noise = "" if session is None else f", session noise {100 * session.cv:.1f} % from {session.runs} runs"
    text = (f"{pct_text(change)} {interval_text(spread.low_pct, spread.high_pct)} (bounds one-sided at "
            f"{confidence_text(confidence)}, n={len(old)}/{len(new)}{noise}): {why}")
    hint = "" if verdict != INCONCLUSIVE else inconclusive_hint(
        len(old), len(new), session.runs if session is not None else 1, spread.session_dominates)
    return MetricChange(**base, change_pct=change, ci_low_pct=spread.low_pct, ci_high_pct=spread.high_pct,
                        verdict=verdict, reason=text, hint=hint)


def _overlap(old: tuple[float, float], new: tuple[float, float]) -> bool:
    return old[0] <= new[1] and new[0] <= old[1]


def _bounds_text(bounds: tuple[tuple[float, float], tuple[float, float]], metric: str) -> str:
    (old_low, old_high), (new_low, new_high) = bounds
    unit = METRIC_UNITS[metric]
    return f"the meter's bounds: baseline {old_low:.4g}-{old_high:.4g} {unit}, now {new_low:.4g}-{new_high:.4g} {unit}"


def metric_bounds(entry: CaseEntry, metric: str) -> tuple[float, float] | None:
    """The meter's bound on a case's mean ETS or EDP (None for T, which is timed exactly, or where
    the document predates bounds)."""
    reps = entry.repetitions
    lows = [r.ets_low_j for r in reps]
    highs = [r.ets_high_j for r in reps]
    if metric == "time" or None in lows or None in highs:
        return None
    scales = [1.0 if metric == "ets" else r.time_s for r in reps]
    return (statistics.fmean(low * k for low, k in zip(lows, scales) if low is not None),
            statistics.fmean(high * k for high, k in zip(highs, scales) if high is not None))


def _both_bounds(old: CaseEntry, new: CaseEntry, metric: str) -> tuple[tuple[float, float], tuple[float, float]] | None:
    old_bounds, new_bounds = metric_bounds(old, metric), metric_bounds(new, metric)
    return (old_bounds, new_bounds) if old_bounds is not None and new_bounds is not None else None


def _threshold_only(base: dict[str, Any], change: float, explained: bool = False) -> MetricChange:
    n_text = f"n={base['old_n']}/{base['new_n']}"
    note = (f"threshold only: {n_text} repetitions, a statistical test needs at least 2 on each side "
            f"(measure more: --energy-repeat or energy_meter.measure(repeat=))")
    verdict, why = classify(Evidence(change, None, None, base["confidence"], explained), base["threshold_pct"])
    return MetricChange(**base, change_pct=change, ci_low_pct=None, ci_high_pct=None, verdict=verdict,
                        method=THRESHOLD_ONLY, reason=f"{pct_text(change)}: {why}; {note}")


@dataclass(frozen=True)
class _Spread:
    """The bounds of new/old - 1 in per cent, and which noise makes them wide."""

    low_pct: float
    high_pct: float
    session_dominates: bool      # the noise between sessions outweighs the repetitions' own


def _log_ratio_spread(old: Sequence[float], new: Sequence[float], old_mean: float, new_mean: float,
                      confidence: float, session: SessionNoise | None = None) -> _Spread:
    """One-sided lower and upper bounds of new/old - 1 in per cent (Welch, delta method, session noise)."""
    var_old = sample_variance([v / old_mean for v in old]) / len(old)     # cv**2 / n, scaled first: no overflow
    var_new = sample_variance([v / new_mean for v in new]) / len(new)
    var_sessions = 2.0 * session.variance if session is not None else 0.0
    log_ratio = math.log(new_mean / old_mean)
    se = math.sqrt(var_old + var_new + var_sessions)
    dominates = var_sessions > var_old + var_new
    if se == 0.0:   # no spread at all (a deterministic simulation): the bounds are the point
        point = 100.0 * math.expm1(log_ratio)
        return _Spread(point, point, dominates)
    df = (var_old + var_new + var_sessions) ** 2 / (
        var_old ** 2 / (len(old) - 1) + var_new ** 2 / (len(new) - 1)
        + (var_sessions ** 2 / (session.runs - 1) if session is not None else 0.0)
    )
    half = student_t_ppf(confidence, df) * se
    return _Spread(100.0 * math.expm1(log_ratio - half), 100.0 * math.expm1(log_ratio + half), dominates)


# -- comparing two documents -------------------------------------------------------------------------

def compare_documents(
    old: RunDocument,
    new: RunDocument,
    thresholds: Mapping[str, float] | None = None,
    confidence: float = DEFAULT_CONFIDENCE,
    history: Sequence[RunDocument] = (),
) -> Comparison:
    """Compare ``new`` with its baseline ``old`` case by case.

    ``history``: saved runs of the same GPU model and backend up to the baseline (which may be
    among them), from which the noise between sessions is estimated (module docstring).

    Simulated and measured runs, or two GPU models, are never compared: the result then has
    ``comparable=False``, no cases, and a note that says why (not an exception, so a session
    can report it and carry on).
    """
    thresholds = _check_thresholds(thresholds)
    confidence = check_confidence(confidence)
    info_old, info_new = RunInfo.of(old), RunInfo.of(new)
    refusal = _refusal(old, new)
    if refusal:
        return Comparison(old.run_id, new.run_id, info_old, info_new, (), (refusal,), False, thresholds, confidence)
    runs = _history_runs(old, new, history)
    saved = _saved_by_key(runs)
    cases = tuple(_compare_case(o, n, thresholds, confidence, saved.get(o.key, ()) if o else ())
                  for o, n in _pair_cases(old.cases, new.cases))
    notes = tuple(_machine_notes(old, new)) + (_session_note(runs, old),)
    return Comparison(old.run_id, new.run_id, info_old, info_new, cases, notes, True, thresholds, confidence)


def baseline_comparison(
    store: RunStore,
    new: RunDocument,
    ref: str = LATEST,
    thresholds: Mapping[str, float] | None = None,
    confidence: float = DEFAULT_CONFIDENCE,
) -> Comparison:
    """``new`` against its baseline in ``store``: ``latest`` (per case, the latest saved run of its GPU
    model and backend that has the case: ``shards.case_baseline``), or ``ref``.

    Without a saved run for the model every case is reported as new, with a note. A ``ref``
    that names no run, or a corrupt baseline file, raises ``StorageError``.
    """
    if ref == LATEST:
        runs = [doc for doc in store.runs(new.backend, new.gpu_model) if doc.run_id != new.run_id]
        found = case_baseline(runs, new)    # per case: the latest saved run that has it (shards.py)
        if found is None:
            what = f"none of the {len(runs)} saved runs of" if runs else "no saved run for"
            return no_baseline(new, f"{what} {new.gpu_model} ({new.backend}) in {store.folder} has any of this run's "
                                    f"cases: every case is new; save a baseline with --energy-save",
                               thresholds, confidence)
        old = found
    else:
        old = store.resolve(ref, new.backend, new.gpu_model)
        runs = [doc for doc in store.runs(new.backend, new.gpu_model) if doc.run_id != new.run_id]
    return compare_documents(old, new, thresholds, confidence, history=runs)


def no_baseline(new: RunDocument, note: str, thresholds: Mapping[str, float] | None = None,
                confidence: float = DEFAULT_CONFIDENCE) -> Comparison:
    """A comparison without a baseline: every case new, and the note that says why."""
    cases = tuple(_compare_case(None, entry, {}, confidence) for entry in new.cases)
    return Comparison(None, new.run_id, None, RunInfo.of(new), cases, (note,), True,
                      _check_thresholds(thresholds), check_confidence(confidence))


def _history_runs(old: RunDocument, new: RunDocument, history: Sequence[RunDocument]) -> list[RunDocument]:
    """The baseline and the comparable saved runs before it, newest last, at most HISTORY_RUNS."""
    earlier = [
        doc for doc in history
        if doc.run_id not in (old.run_id, new.run_id, *old.sources, *new.sources) and doc.created_at <= old.created_at
        and _refusal(doc, old) is None
    ]
    earlier.sort(key=lambda doc: doc.created_at)
    return earlier[-(HISTORY_RUNS - 1):] + [old]


def _session_note(runs: Sequence[RunDocument], old: RunDocument) -> str:
    if len(runs) < 2:
        return (
            f"noise between sessions unknown: no saved run of {old.gpu_model} before the baseline, so the test knows "
            f"only the spread within a run, which understates how much a session's mean moves (save 3 or more runs "
            f"with --energy-save and the gate learns it)"
        )
    return f"noise between sessions estimated per case from {len(runs)} saved runs (the baseline and those before it)"


def _refusal(old: RunDocument, new: RunDocument) -> str | None:
    if old.simulated != new.simulated or old.backend != new.backend:
        def side(doc: RunDocument) -> str:
            return f"{doc.origin} ({doc.backend}, run {doc.run_id})"
        return (
            f"not compared: the baseline is {side(old)} and this run is {side(new)}; simulated and real "
            f"measurements are never compared; compare runs of the same backend"
        )
    if old.gpu_model != new.gpu_model:
        return (
            f"not compared: different GPU models: the baseline ran on {old.gpu_model} (run {old.run_id}), this run on "
            f"{new.gpu_model}; compare runs of the same GPU model"
        )
    return None


def sample_variance(values: Sequence[float]) -> float:
    """The sample variance (n - 1) in floats: ``statistics.variance`` is exact in fractions, about 50 times
    slower, which a comparison of 10,000 cases feels. Equal values give exactly 0 (a deterministic run)."""
    if len(values) < 2:
        raise ValueError("a sample variance needs at least two values")
    if all(value == values[0] for value in values):
        return 0.0
    mean = math.fsum(values) / len(values)
    return math.fsum((value - mean) ** 2 for value in values) / (len(values) - 1)


def _saved_by_key(runs: Sequence[RunDocument]) -> dict[tuple[str, str, int], list[CaseEntry]]:
    """Every saved case by its key, in the runs' order: one pass, so a case's history is a look-up."""
    saved: dict[tuple[str, str, int], list[CaseEntry]] = {}
    for doc in runs:
        for case in doc.cases:
            saved.setdefault(case.key, []).append(case)
    return saved


def _by_test_and_cap(entries: Sequence[CaseEntry]) -> dict[tuple[str, str], list[CaseEntry]]:
    grouped: dict[tuple[str, str], list[CaseEntry]] = {}
    for entry in entries:
        grouped.setdefault((entry.case_id, entry.cap), []).append(entry)
    return grouped


def _pair_cases(old: Sequence[CaseEntry], new: Sequence[CaseEntry]) -> list[tuple[CaseEntry | None, CaseEntry | None]]:
    """Pairs by (case id, cap, GPU index); leftovers that match uniquely on (case id, cap) pair too.

    The second rule covers a runner whose one GPU of the model has another index this time.
    Both rules are dictionary look-ups: the pairing is linear in the cases.
    """
    old_by_key = {entry.key: entry for entry in old}
    new_keys = {entry.key for entry in new}
    left_old = [e for e in old if e.key not in new_keys]
    left_new = [e for e in new if e.key not in old_by_key]
    old_by_test = _by_test_and_cap(left_old)
    loose: dict[int, CaseEntry] = {}     # id(new entry) -> its old partner
    for test_and_cap, peers in _by_test_and_cap(left_new).items():
        same = old_by_test.get(test_and_cap, [])
        if len(same) == 1 and len(peers) == 1:
            loose[id(peers[0])] = same[0]
    used = {id(o) for o in loose.values()}
    pairs: list[tuple[CaseEntry | None, CaseEntry | None]] = []
    for entry in new:
        pairs.append((old_by_key.get(entry.key) or loose.get(id(entry)), entry))
    pairs.extend((entry, None) for entry in left_old if id(entry) not in used)
    return pairs


def _compare_case(old: CaseEntry | None, new: CaseEntry | None, thresholds: Mapping[str, float],
                  confidence: float, saved: Sequence[CaseEntry] = ()) -> CaseComparison:
    """One pair of cases; ``saved``: the baseline's case in the saved runs (the noise between sessions)."""
    entry = new or old
    assert entry is not None
    if old is None or new is None:
        status = NEW if old is None else MISSING
        return CaseComparison(entry.key, entry.test, entry.cap, entry.gpu_name, status, (), status, old, new)
    metrics = tuple(
        decide(m, old.samples(METRIC_FIELDS[m]), new.samples(METRIC_FIELDS[m]), thresholds.get(m), confidence,
               SessionNoise.estimate([case.samples(METRIC_FIELDS[m]) for case in saved]), _both_bounds(old, new, m))
        for m in METRICS
    )
    return CaseComparison(new.key, new.test, new.cap, new.gpu_name, COMPARED, metrics,
                          _case_verdict(metrics), old, new, tuple(_case_notes(old, new)))


def _case_verdict(metrics: Sequence[MetricChange]) -> str:
    """The case's verdict from its gated metrics: regression, improvement, inconclusive, unchanged.

    A user who gates on ETS asks whether ETS moved: an ungated T or EDP that drifted between
    sessions (the machine's load changes wall time) keeps its change and interval in its own
    column but does not relabel the case. Without any threshold every real change is news
    (``changed``), and a metric that cannot tell makes the case inconclusive.
    """
    gated = [m for m in metrics if m.gated]
    verdicts = {m.verdict for m in (gated or metrics)}
    order = (REGRESSION, IMPROVEMENT, INCONCLUSIVE) if gated else (INCREASE, DECREASE, INCONCLUSIVE)
    for verdict in order:
        if verdict in verdicts:
            return CHANGED if verdict in (INCREASE, DECREASE) else verdict
    return UNCHANGED


def _case_notes(old: CaseEntry, new: CaseEntry) -> list[str]:
    notes = []
    if old.gpu_index != new.gpu_index:
        notes.append(f"compared GPU {old.gpu_index} of the baseline with GPU {new.gpu_index} (same model)")
    if abs(old.limit_enforced_w - new.limit_enforced_w) > 0.5:
        notes.append(f"enforced limit differs: {old.limit_enforced_w:g} W in the baseline, {new.limit_enforced_w:g} W now")
    if old.method != new.method:
        notes.append(f"measured differently: {old.method} in the baseline, {new.method} now")
    if min(len(old.repetitions), len(new.repetitions)) < 2:
        notes.append("threshold only: fewer than 2 repetitions on a side")
    return notes


def _machine_notes(old: RunDocument, new: RunDocument) -> list[str]:
    notes = []
    for key, name in (("driver", "driver"), ("cuda", "CUDA"), ("torch", "torch")):
        before, after = old.machine.get(key), new.machine.get(key)
        if before and after and before != after:
            notes.append(f"{name} changed: {before} in the baseline, {after} now")
    if old.created_at > new.created_at:
        notes.append(f"the baseline ({old.run_id}) is newer than the run compared with it ({new.run_id}): check the order OLD NEW")
    if new.commit and new.commit.get("dirty"):
        notes.append("this run measured uncommitted changes (dirty working tree)")
    return notes
