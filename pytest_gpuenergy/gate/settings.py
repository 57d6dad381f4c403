"""The gate's settings as a user types them: thresholds (``--energy-fail=ets:5%``), the confidence
level, and where runs and reports go (``GateOptions``), each validated in one place for the pytest
options, the CLI and the API. Read at every pytest start: nothing here loads the comparison."""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import SettingError
from ..metrics import METRIC_LABELS, METRICS

DEFAULT_CONFIDENCE = 0.99
STEP_SUMMARY_ENV = "GITHUB_STEP_SUMMARY"

# Host domains the gate compares (--energy-domains): their ETS per call, as ``node.ets:5%``.
DOMAIN_METRICS = ("cpu.ets", "dram.ets", "node.ets")
# Each phase's ETS per call (``energy_meter.phase``), as ``phase.ets:10%``: without it phases are reported, not gated.
PHASE_METRIC = "phase.ets"
GATED = (*METRICS, *DOMAIN_METRICS, PHASE_METRIC)



def threshold_label(key: str) -> str:
    """``ETS`` for ``ets``, ``node ETS`` for ``node.ets``: how the reports name what a threshold gates."""
    domain, _, metric = key.rpartition(".")
    return f"{domain} {METRIC_LABELS[metric]}" if domain else METRIC_LABELS[metric]


_THRESHOLD_ITEM = re.compile(r"\s*([A-Za-z]+(?:\.[A-Za-z]+)?)\s*[:=]\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*(%?)\s*")


def parse_thresholds(text: str, *, source: str = "--energy-fail") -> dict[str, float]:
    """``"ets:5%,edp:10%,time:5%"`` -> ``{"ets": 5.0, "edp": 10.0, "time": 5.0}`` (per cent); a host
    domain's ETS as ``node.ets:5%`` (also ``cpu.ets``, ``dram.ets``; measured with --energy-domains); each
    marked phase's ETS as ``phase.ets:10%``.

    Every mistake names the item and the valid form, prefixed by ``source`` (the option).
    """
    form = (f"write METRIC:PERCENT items separated by commas, METRIC one of {', '.join(GATED)}, "
            f"e.g. {source}=ets:5%,edp:10%")
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
        if metric not in GATED:
            raise ValueError(f"{source}: unknown metric {match.group(1)!r} in {item.strip()!r}; {form}")
        if not math.isfinite(number) or number > 1000:
            raise ValueError(f"{source}: {item.strip()!r}: a threshold is a percentage from 0 to 1000; {form}")
        if metric in thresholds:
            raise ValueError(f"{source}: {metric} is given twice in {text!r}; give each metric once")
        thresholds[metric] = number
    return thresholds


def check_confidence(confidence: float | str, *, source: str = "confidence") -> float:
    """A confidence level between 0.5 and 1 (exclusive): ``0.99``, or as text ``"0.99"`` or ``"99%"``.
    The one validator for the level, shared by the pytest option, the CLI and the API."""
    value: object = confidence
    if isinstance(confidence, str):
        text = confidence.strip()
        try:
            value = float(text[:-1]) / 100 if text.endswith("%") else float(text)
        except ValueError:
            raise SettingError(f"{source}={confidence!r} is not a number; give e.g. 0.99 or 99%") from None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.5 < value < 1:
        raise SettingError(f"{source}={confidence!r} is not a confidence level; "
                           f"give a number between 0.5 and 1 (exclusive), e.g. 0.99 or 99%")
    return float(value)


def check_thresholds(thresholds: Mapping[str, float] | None) -> dict[str, float]:
    result = dict(thresholds or {})
    for metric, value in result.items():
        if metric not in GATED:
            raise ValueError(f"thresholds: unknown metric {metric!r}; use {', '.join(GATED)}")
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < math.inf:
            raise ValueError(f"thresholds: {metric}={value!r} must be a percentage >= 0")
    return result


@dataclass(frozen=True)
class GateOptions:
    storage: Path
    save: bool = False
    compare: str | None = None                  # None: no comparison; "latest" or a run id/path
    thresholds: dict[str, float] = field(default_factory=dict)
    confidence: float = DEFAULT_CONFIDENCE
    markdown: Path | None = None
    html: Path | None = None
    json: Path | None = None
    step_summary: Path | None = None            # $GITHUB_STEP_SUMMARY: Markdown is appended there

    @property
    def active(self) -> bool:
        return bool(self.save or self.compare or self.markdown or self.html or self.json or self.step_summary)


def report_path_problem(option: str, path: Path) -> str | None:
    """The one-line usage error for a report ``option`` whose ``path`` cannot be written, or None: asked
    before a session or a fleet runs (pytest's options and ``gpuenergy fleet`` alike)."""
    from ..fileio import output_problem  # (only where a report is asked for)

    problem = output_problem(path)
    return None if problem is None else f"{option}: cannot write {path}: {problem}"


def save_storage_problem(storage: Path) -> str | None:
    """The one-line usage error for ``--energy-save`` into a ``storage`` folder that cannot be made or
    written, or None (checked before the run: at its end the run's results would be lost)."""
    from ..fileio import folder_problem

    problem = folder_problem(storage)
    return None if problem is None else (f"--energy-save: cannot save runs in {storage}: {problem}; give a folder "
                                         f"with --energy-storage")


def step_summary_path() -> Path | None:
    value = os.environ.get(STEP_SUMMARY_ENV)
    return Path(value) if value else None
