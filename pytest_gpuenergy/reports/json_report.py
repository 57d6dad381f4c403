"""A machine-readable report of runs and comparisons, for dashboards and scripts.

Unlike a run document (the raw repetitions, for a later comparison), the report carries the
conclusions: per case the means, per workload the optimal caps, and per compared case each
metric's change, bounds and verdict. Its own ``format``/``version`` pair lets readers check
what they got. Undefined figures are ``null`` (JSON has no NaN).
"""

from __future__ import annotations

import json
import math
from typing import Any, Sequence

from ..compare import WELCH, CaseComparison, Comparison, MetricChange, RunInfo
from ..storage import RunDocument
from .sweep import OPTIMISED, Optimum, sweeps, workload_key

REPORT_FORMAT = "pytest-gpuenergy-report"
REPORT_VERSION = 1


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
        "comparisons": [comparison_data(c) for c in comparisons],
    })


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
    optima = []
    for sweep in sweeps(doc):
        found = {metric: sweep.optimum(metric) for metric in OPTIMISED}
        optima.append({
            "workload": sweep.workload, "gpu_index": sweep.gpu_index, "caps": len(sweep.points),
            "energy_optimal": _optimum(found["ets"]), "edp_optimal": _optimum(found["edp"]),
        })
    return {
        "run_id": doc.run_id, "created_at": doc.created_at.isoformat(), "backend": doc.backend,
        "simulated": doc.simulated, "gpu_model": doc.gpu_model, "commit": doc.commit,
        "cases": cases, "optima": optima,
    }


def _optimum(found: Optimum | None) -> dict[str, Any] | None:
    if found is None:
        return None
    return {
        "cap": found.point.cap, "limit_enforced_w": found.point.limit_enforced_w,
        "value": found.point.value(found.metric), "reference_cap": found.reference.cap,
        "reference_limit_w": found.reference.limit_enforced_w, "reference_is_default": found.reference_is_default,
        "saving_pct": found.saving_pct, "time_change_pct": found.time_change_pct,
    }


def comparison_data(comparison: Comparison) -> dict[str, Any]:
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
    }


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
        "notes": list(case.notes), "metrics": {m.metric: _metric(m) for m in case.metrics},
    }


def _metric(change: MetricChange) -> dict[str, Any]:
    return {
        "old_mean": change.old_mean, "new_mean": change.new_mean, "old_n": change.old_n, "new_n": change.new_n,
        "change_pct": change.change_pct, "ci_low_pct": change.ci_low_pct, "ci_high_pct": change.ci_high_pct,
        "confidence": change.confidence, "threshold_pct": change.threshold_pct, "method": change.method,
        "verdict": change.verdict, "reason": change.reason,
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
