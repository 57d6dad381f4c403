"""A machine-readable report of runs and comparisons, for dashboards and scripts.

Unlike a run document (the raw repetitions, for a later comparison), the report carries the
conclusions: per case the means, per workload the optimal caps with their caveats, and per
compared case each metric's change, bounds and verdict. Its own ``format``/``version`` pair lets
readers check what they got. Undefined figures are ``null`` (JSON has no NaN).

Within version 2, a compared case whose phases (``energy_meter.phase``) are in both runs also has
``phases`` (each phase's ETS change, as a metric's), and ``summary.phase_changes`` lists the phases
that changed (case, phase, verdict, change): keys added, none changed.

Version 2 (from version 1): verdicts ``inconclusive`` and ``unchanged`` replace ``noise``; each
metric has a ``hint``; each comparison has ``summary`` (the counts line's counts, the changed and
inconclusive case ids in the reports' order, the skipped caps); each optimum says whether it is
``distinguishable`` from its neighbours, its ``edge`` and the GPU's range, and each run lists its
``suspects``. Every version 1 key is still there with its meaning.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import Any

from ..gate.records import WELCH, CaseComparison, Comparison, MetricChange, RunInfo
from ..runs.records import RunDocument
from .digest import digest, skipped_caps
from .numbers import JOULES_PER_KWH, run_energy_j
from .phase_changes import phase_rows
from .sweep import OPTIMISED, optimum_data, sweeps, workload_key

REPORT_FORMAT = "pytest-gpuenergy-report"
REPORT_VERSION = 2


def json_report(docs: Sequence[RunDocument] = (), comparison: Comparison | Sequence[Comparison] | None = None) -> str:
    """The report as JSON text (indented, UTF-8, ending with a newline)."""
    return json.dumps(report_data(docs, comparison), indent=2, ensure_ascii=False, allow_nan=False) + "\n"


def report_data(docs: Sequence[RunDocument] = (), comparison: Comparison | Sequence[Comparison] | None = None) -> dict[str, Any]:
    comparisons = [comparison] if isinstance(comparison, Comparison) else list(comparison or [])
    return _clean({
        "format": REPORT_FORMAT,
        "version": REPORT_VERSION,
        "simulated": any(d.simulated for d in docs) or any(c.simulated for c in comparisons),
        "failed": any(c.failed for c in comparisons),
        "runs": [run_data(doc) for doc in docs],
        "comparisons": [comparison_data(c, _new_doc(c, docs)) for c in comparisons],
    })


def _new_doc(comparison: Comparison, docs: Sequence[RunDocument]) -> RunDocument | None:
    return next((doc for doc in docs if doc.run_id == comparison.new_run_id), None)


def run_data(doc: RunDocument) -> dict[str, Any]:
    cases = []
    for entry in doc.cases:
        summary = entry.summary
        cases.append({
            "case_id": entry.case_id, "test": entry.test, "workload": workload_key(entry.case_id, entry.cap),
            "cap": entry.cap, "gpu_index": entry.gpu_index, "gpu_name": entry.gpu_name, "simulated": entry.simulated,
            "method": entry.method, "limit_enforced_w": entry.limit_enforced_w, "default_limit_w": entry.default_limit_w,
            "n": summary.n, "ets_j": summary.ets_j, "ets_low_j": summary.ets_low_j, "ets_high_j": summary.ets_high_j,
            "time_s": summary.time_s, "edp_js": summary.edp_js,
            "mean_power_w": summary.mean_power_w, "peak_power_w": summary.peak_power_w,
            "ets_std_j": summary.ets_std_j, "ets_cv": summary.ets_cv, "notes": list(entry.notes),
        })
    optima, suspects = [], []
    for sweep in sweeps(doc):
        found = {metric: sweep.optimum(metric) for metric in OPTIMISED}
        optima.append({
            "workload": sweep.workload, "gpu_index": sweep.gpu_index, "caps": len(sweep.points),
            "energy_optimal": optimum_data(found["ets"]), "edp_optimal": optimum_data(found["edp"]),
        })
        suspects += [{"workload": sweep.workload, "gpu_index": sweep.gpu_index, "cap": x.point.cap,
                      "time_change_pct": x.change.change_pct, "reason": x.describe()} for x in sweep.suspects()]
    return {
        "run_id": doc.run_id, "created_at": doc.created_at.isoformat(), "backend": doc.backend,
        "simulated": doc.simulated, "gpu_model": doc.gpu_model, "commit": doc.commit,
        "cases": cases, "optima": optima, "suspects": suspects,
        "energy_j": run_energy_j(doc), "energy_kwh": run_energy_j(doc) / JOULES_PER_KWH,   # the measured regions
        "skipped": [vars(item) for item in skipped_caps(doc)],
    }


def comparison_data(comparison: Comparison, new_doc: RunDocument | None = None) -> dict[str, Any]:
    report = digest(comparison, skipped_caps(new_doc))
    return {
        "old_run": _run_info(comparison.old_machine),
        "new_run": _run_info(comparison.new_machine),
        "comparable": comparison.comparable,
        "failed": comparison.failed,
        "thresholds_pct": dict(comparison.thresholds),
        "confidence": comparison.confidence,
        "method": WELCH,
        "counts": comparison.counts(),
        "notes": list(comparison.notes),
        "cases": [_case(c) for c in comparison.cases],
        "summary": {
            "outcome": report.outcome, "counts": dict(report.counts()),
            "changed": [_key(r.case) for r in report.changed],
            "inconclusive": [_key(r.case) for r in report.inconclusive],
            "inconclusive_hint": report.hint() or None,
            "skipped": [vars(item) for item in report.skipped],
            "phase_changes": [{"case_id": r.case.case_id, "cap": r.case.cap, "gpu_index": r.case.gpu_index,
                               "phase": r.change.phase, "verdict": r.change.verdict, "change_pct": r.change.change_pct}
                              for r in phase_rows(report)],
        },
    }


def _key(case: CaseComparison) -> dict[str, Any]:
    return {"case_id": case.case_id, "cap": case.cap, "gpu_index": case.gpu_index, "verdict": case.verdict}


def _run_info(info: RunInfo | None) -> dict[str, Any] | None:
    if info is None:
        return None
    return {
        "run_id": info.run_id, "created_at": info.created_at.isoformat(), "backend": info.backend,
        "simulated": info.simulated, "gpu_model": info.gpu_model, "host": info.host, "driver": info.driver,
        "torch": info.torch, "cuda": info.cuda, "commit": info.commit,
    }


def _case(case: CaseComparison) -> dict[str, Any]:
    return {
        "case_id": case.case_id, "test": case.test, "cap": case.cap, "gpu_index": case.gpu_index,
        "gpu_name": case.gpu_name, "simulated": case.simulated, "status": case.status, "verdict": case.verdict,
        "notes": list(case.notes), "metrics": {m.key: _metric(m) for m in case.metrics if not m.phase},
        **({"phases": {m.phase: _metric(m) for m in case.phases}} if case.phases else {}),
    }


def _metric(change: MetricChange) -> dict[str, Any]:
    return {
        "old_mean": change.old_mean, "new_mean": change.new_mean, "old_n": change.old_n, "new_n": change.new_n,
        "change_pct": change.change_pct, "ci_low_pct": change.ci_low_pct, "ci_high_pct": change.ci_high_pct,
        "confidence": change.confidence, "threshold_pct": change.threshold_pct, "method": change.method,
        "verdict": change.verdict, "reason": change.reason, "hint": change.hint or None,
    }


def _clean(value: Any) -> Any:
    """Non-finite numbers become null, recursively (JSON has no NaN)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    return value
