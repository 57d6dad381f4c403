"""Comparing a run with its baseline: every case paired with its own, each metric decided
(``decide.py`` holds the rule and why), notes on what differs between the two machines.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Literal

from ..metrics import METRIC_FIELDS, METRICS
from ..runs import LATEST
from ..runs.records import CaseEntry, RunDocument
from ..runs.shards import case_baseline
from ..runs.store import RunStore
from .decide import both_bounds, decide
from .records import COMPARED, MISSING, NEW, THRESHOLD_ONLY, CaseComparison, Comparison, MetricChange, RunInfo, SessionNoise
from .settings import DEFAULT_CONFIDENCE, DOMAIN_METRICS, PHASE_METRIC, check_confidence, check_thresholds
from .shared_noise import share
from .verdicts import CHANGED, DECREASE, IMPROVEMENT, INCONCLUSIVE, INCREASE, REGRESSION, UNCHANGED, Verdict

#: The baseline and at most this many runs before it inform the estimate of noise between sessions.
HISTORY_RUNS = 10
CaseKey = tuple[str, str, int]      # CaseEntry.key


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
    thresholds = check_thresholds(thresholds)
    confidence = check_confidence(confidence)
    info_old, info_new = RunInfo.of(old), RunInfo.of(new)
    refusal = _refusal(old, new)
    if refusal:
        return Comparison(old.run_id, new.run_id, info_old, info_new, (), (refusal,), False, thresholds, confidence)
    old, new, outcome_note = _passed_cases(old, new)
    runs = _history_runs(old, new, [doc.passed_only() for doc in history])
    saved = _saved_by_key(runs)
    pairs = _pair_cases(old.cases, new.cases)
    noises = _session_noises(saved, [o.key for o, n in pairs if o is not None and n is not None])
    cases = tuple(_compare_case(o, n, thresholds, confidence, saved[o.key] if o else (),   # (the baseline is one of the runs)
                                {m: by_key.get(o.key) for m, by_key in noises.items()} if o else {})
                  for o, n in pairs)
    notes = tuple(_machine_notes(old, new)) + (_session_note(runs, old),) + _shared_note(cases, noises) + outcome_note
    return Comparison(old.run_id, new.run_id, info_old, info_new, cases, notes, True, thresholds, confidence)


def _passed_cases(old: RunDocument, new: RunDocument) -> tuple[RunDocument, RunDocument, tuple[str, ...]]:
    """Only cases whose test passed are compared: a failed, erroring or xfailed test's figures are no
    baseline, and a case whose test did not pass this time is not reported missing (a note says why)."""
    not_passed = [case for case in new.cases if not case.passed]
    if not not_passed and all(case.passed for case in old.cases):
        return old, new, ()
    left_out = {case.key for case in not_passed}
    old = replace(old, cases=tuple(c for c in old.cases if c.passed and c.key not in left_out))
    new = new.passed_only()
    if not not_passed:
        return old, new, ()
    counts: dict[str, int] = {}
    for case in not_passed:
        counts[case.outcome] = counts.get(case.outcome, 0) + 1
    how = ", ".join(f"{count} {outcome}" for outcome, count in sorted(counts.items()))
    return old, new, (f"{len(not_passed)} case{'s' if len(not_passed) != 1 else ''} not compared: their test did not pass ({how})",)


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
        runs = [doc.passed_only() for doc in store.runs(new.backend, new.gpu_model) if doc.run_id != new.run_id]
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
                      check_thresholds(thresholds), check_confidence(confidence))


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


def _shared_note(cases: Sequence[CaseComparison], noises: Mapping[str, Mapping[CaseKey, SessionNoise | None]]) -> tuple[str, ...]:
    """How many cases a moderated estimate decided (a case with one repetition a side is decided by
    the threshold alone: the noise does not enter)."""
    count = sum(1 for case in cases if case.status == COMPARED and case.old is not None and any(
        m.method != THRESHOLD_ONLY and getattr(noises[m.metric][case.old.key], "shared", False) for m in case.metrics))
    if not count:
        return ()
    whose = "1 case's noise estimates were" if count == 1 else f"{count} cases' noise estimates were"
    return (f"{whose} moderated with the other cases' (their saved sessions agree: more degrees of freedom, a "
            f"sharper test; a case noisier than the rest keeps its own)",)


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


def _saved_by_key(runs: Sequence[RunDocument]) -> dict[CaseKey, list[CaseEntry]]:
    """Every saved case by its key, in the runs' order: one pass, so a case's history is a look-up."""
    saved: dict[CaseKey, list[CaseEntry]] = {}
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


def _session_noises(saved: Mapping[CaseKey, Sequence[CaseEntry]],
                    keys: Sequence[CaseKey]) -> dict[str, dict[CaseKey, SessionNoise | None]]:
    """Per metric, the session noise of each compared case, moderated with the other cases' (``shared_noise``)."""
    return {m: share({key: SessionNoise.estimate([case.samples(METRIC_FIELDS[m]) for case in saved[key]])
                      for key in keys})
            for m in METRICS}


def _compare_case(old: CaseEntry | None, new: CaseEntry | None, thresholds: Mapping[str, float],
                  confidence: float, saved: Sequence[CaseEntry] = (),
                  noises: Mapping[str, SessionNoise | None] | None = None) -> CaseComparison:
    """One pair of cases; ``saved``: the baseline's case in the saved runs (its phases' noise between
    sessions), ``noises``: per metric, the noise between sessions (``_session_noises``), if known."""
    entry = new or old
    assert entry is not None
    if old is None or new is None:
        status: Literal["new", "missing"] = NEW if old is None else MISSING     # a status and the case's verdict
        return CaseComparison(entry.key, entry.test, entry.cap, entry.gpu_name, status, (), status, old, new)
    metrics = tuple(
        decide(m, old.samples(METRIC_FIELDS[m]), new.samples(METRIC_FIELDS[m]), thresholds.get(m), confidence,
               (noises or {}).get(m), both_bounds(old, new, m))
        for m in METRICS
    )
    domains, domain_notes = _domain_changes(old, new, thresholds, confidence)
    phases, phase_notes = _phase_changes(old, new, thresholds.get(PHASE_METRIC), confidence, saved)
    metrics += domains + phases
    return CaseComparison(new.key, new.test, new.cap, new.gpu_name, COMPARED, metrics,
                          _case_verdict(metrics), old, new, (*_case_notes(old, new), *domain_notes, *phase_notes))


def _domain_changes(old: CaseEntry, new: CaseEntry, thresholds: Mapping[str, float],
                    confidence: float) -> tuple[tuple[MetricChange, ...], list[str]]:
    """The host domains a threshold names (``node.ets:5%``), once per case (on its first GPU).

    A run keeps a domain's mean per call and its bound, not each repetition's: the threshold and the
    meter's bounds decide (a change the two bounds can explain is inconclusive), not a t test.
    """
    changes: list[MetricChange] = []
    notes: list[str] = []
    if new.key[2] != 0:
        return (), notes
    for key in DOMAIN_METRICS:
        if key not in thresholds:
            continue
        domain, metric = key.split(".")
        before, after = old.per_domain.get(domain), new.per_domain.get(domain)   # type: ignore[call-overload]
        if before is None or after is None:
            missing = "the baseline" if before is None else "this run"
            notes.append(f"{key} not compared: {missing} did not measure {domain} "
                         f"(run both with --energy-domains=gpu,cpu,dram)")
            continue
        bounds = ((before.ets_low_j, before.ets_high_j), (after.ets_low_j, after.ets_high_j))
        change = decide(metric, [before.ets_j], [after.ets_j], thresholds[key], confidence, bounds=bounds)
        changes.append(replace(change, domain=domain))
    return tuple(changes), notes


def _phase_changes(old: CaseEntry, new: CaseEntry, threshold_pct: float | None, confidence: float,
                   saved: Sequence[CaseEntry] = ()) -> tuple[tuple[MetricChange, ...], list[str]]:
    """Each phase marked in both runs (``energy_meter.phase``): its ETS per call, decided as a metric is.

    The samples are the repetitions' own figures for the phase (each repetition's fit: n = the
    repetitions on each side, so one repetition is decided by the threshold alone), the session noise
    is that of the phase in the saved runs, and the bounds are the fit's: a change the two phases'
    bounds can explain (they overlap, as they always do for phases the fit could not tell apart) is
    never a regression nor an improvement. ``phase.ets`` gates them; without it they are reported
    (``increase``/``decrease``), never failing the case.
    """
    before, after = old.phases, new.phases
    if before is None and after is None:
        return (), []
    if before is None or after is None:
        which = "the baseline" if before is None else "this run"
        return (), [f"phases not compared: {which} has no phase marks (energy_meter.phase) in this case"]
    changes = []
    for name in after:
        if name not in before:
            continue
        samples = [_phase_samples(case, name) for case in (old, new)]
        change = decide("ets", samples[0], samples[1], threshold_pct, confidence,
                        SessionNoise.estimate([_phase_samples(case, name) for case in saved]),
                        (_phase_bounds(old, name), _phase_bounds(new, name)))
        changes.append(replace(change, phase=name))
    only = [(which, [n for n in one if n not in other])
            for which, one, other in (("the baseline", before, after), ("this run", after, before))]
    notes = [f"phase{'s' if len(names) > 1 else ''} {', '.join(names)} only in {which}: not compared"
             for which, names in only if names]
    return tuple(changes), notes


def _phase_samples(entry: CaseEntry, name: str) -> list[float]:
    """The phase's ETS per call in each repetition that has it."""
    return [rep.phases[name].ets_j for rep in entry.repetitions if rep.phases is not None and name in rep.phases]


def _phase_bounds(entry: CaseEntry, name: str) -> tuple[float, float]:
    """The fit's bound on the phase's mean ETS: the mean of the repetitions' bounds (as a region's)."""
    figures = [rep.phases[name] for rep in entry.repetitions if rep.phases is not None and name in rep.phases]
    return statistics.fmean(f.ets_low_j for f in figures), statistics.fmean(f.ets_high_j for f in figures)


def _case_verdict(metrics: Sequence[MetricChange]) -> Verdict:
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
