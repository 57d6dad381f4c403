"""The one table of the figures a case is judged by: ETS, T and EDP, with their record field, label and unit."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Metric:
    key: str        # as typed in --energy-fail=ets:5% and the budget markers
    field: str      # the attribute on results and repetitions
    label: str      # as the reports print it
    unit: str


ETS = Metric("ets", "ets_j", "ETS", "J")
TIME = Metric("time", "time_s", "T", "s")
EDP = Metric("edp", "edp_js", "EDP", "J s")

METRIC_TABLE = {metric.key: metric for metric in (ETS, TIME, EDP)}
METRICS = tuple(METRIC_TABLE)
METRIC_FIELDS = {key: metric.field for key, metric in METRIC_TABLE.items()}
METRIC_LABELS = {key: metric.label for key, metric in METRIC_TABLE.items()}
METRIC_UNITS = {key: metric.unit for key, metric in METRIC_TABLE.items()}
