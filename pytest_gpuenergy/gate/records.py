"""What a comparison says: per metric, per case, per run pair; the verdicts and what each case was."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final, Literal

from ..metrics import METRIC_LABELS
from ..runs.records import CaseEntry, RunDocument, commit_text, model_label
from .settings import DEFAULT_CONFIDENCE, threshold_label
from .verdicts import (
    REGRESSION,
    Verdict,
)

CaseStatus = Literal["compared", "new", "missing"]
COMPARED: Final = "compared"
NEW: Final = "new"
MISSING: Final = "missing"

WELCH = "welch-log-ratio"
THRESHOLD_ONLY = "threshold-only"


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
    verdict: Verdict
    reason: str
    old_n: int = 0
    new_n: int = 0
    method: str = WELCH
    hint: str = ""                 # for an inconclusive verdict: what would tell
    domain: str = "gpu"            # --energy-domains: "gpu" (the case's GPUs), or the host's "cpu", "dram", "node"
    phase: str = ""                # energy_meter.phase(): the phase whose ETS this is ("" for the whole region)

    @property
    def key(self) -> str:
        """How ``--energy-fail`` names it: ``ets``, ``node.ets`` for a host domain's, ``phase.ets`` for a phase's."""
        if self.phase:
            return f"phase.{self.metric}"
        return self.metric if self.domain == "gpu" else f"{self.domain}.{self.metric}"

    @property
    def label(self) -> str:
        """``ETS``, ``node ETS``, or the phase by its name: ``update ETS``."""
        return f"{self.phase} {METRIC_LABELS[self.metric]}" if self.phase else threshold_label(self.key)

    @property
    def gated(self) -> bool:
        return self.threshold_pct is not None

    def describe(self) -> str:
        """``ETS regression: +30.0 % [+25.1 %, +35.2 %] ...`` for failure messages."""
        return f"{self.label} {self.verdict}: {self.reason}"


@dataclass(frozen=True)
class SessionNoise:
    """What the saved sessions of one case and metric say about its noise: how much a session's mean
    moves between sessions (log scale), and the repetitions' own spread pooled over the sessions.
    ``shared``: moderated with the same metric's estimates of the suite's other cases (``shared_noise``),
    which adds to the degrees of freedom."""

    variance: float                # s_b**2 of the log of a session's mean: between - within_of_mean (floored at 0 unless shared)
    runs: int                      # saved runs it was estimated from
    within_cv2: float = 0.0        # the repetitions' squared CV, pooled over the saved runs
    within_df: float = 0           # its degrees of freedom: the sum of (repetitions - 1) over the runs
    between: float = 0.0           # the sample variance of the log of the runs' means (runs - 1 degrees of freedom)
    within_of_mean: float = 0.0    # what the repetitions' spread alone gives a run mean's log: mean of cv**2 / n
    session_df: float | None = None    # the degrees of freedom of ``variance`` where not runs - 1 (shared)
    shared: bool = False

    @property
    def cv(self) -> float:
        """The session noise as a CV (0 where a shared estimate is below 0)."""
        return math.sqrt(max(self.variance, 0.0))

    @property
    def df(self) -> float:
        """The degrees of freedom of ``variance``."""
        return self.session_df if self.session_df is not None else self.runs - 1

    @classmethod
    def estimate(cls, runs: Sequence[Sequence[float]]) -> SessionNoise | None:
        """From the repetitions of the same case in ``runs`` (one sequence per saved run); None under 2 runs.

        A run with a single repetition shows no within-run spread: all of its run mean's spread
        then counts as session noise, which errs towards fewer false alarms.
        """
        usable = [list(r) for r in runs if r and statistics.fmean(r) > 0]
        if len(usable) < 2:
            return None
        means = [statistics.fmean(r) for r in usable]
        between = sample_variance([math.log(m) for m in means])
        spreads = [sample_variance([v / m for v in r]) if len(r) > 1 else 0.0 for r, m in zip(usable, means)]
        within = statistics.fmean(cv2 / len(r) for cv2, r in zip(spreads, usable))
        within_df = sum(len(r) - 1 for r in usable)
        pooled = sum((len(r) - 1) * cv2 for cv2, r in zip(spreads, usable)) / within_df if within_df else 0.0
        return cls(max(0.0, between - within), len(usable), pooled, within_df, between, within)


@dataclass(frozen=True)
class CaseComparison:
    """One case (case id, cap, GPU) in both runs, in only the new one, or in only the old one."""

    key: tuple[str, str, int]      # (case_id, cap label, the GPU's place in the case)
    test: str
    cap: str
    gpu_name: str
    status: CaseStatus             # "compared", "new" or "missing"
    metrics: tuple[MetricChange, ...]
    verdict: Verdict               # regression, improvement, inconclusive, unchanged, changed, new, missing
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
        """``ets``, ``time``, ``edp`` (the GPUs'), or a host domain's ``node.ets`` (a phase's: ``phase``)."""
        return next((m for m in self.metrics if m.key == name and not m.phase), None)

    @property
    def phases(self) -> tuple[MetricChange, ...]:
        """The ETS change of each phase marked in both runs (``energy_meter.phase``), in the new run's order."""
        return tuple(m for m in self.metrics if m.phase)

    def phase(self, name: str) -> MetricChange | None:
        """The change of the phase ``name`` (None: not marked in both runs)."""
        return next((m for m in self.metrics if m.phase == name), None)

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
    def of(cls, doc: RunDocument) -> RunInfo:
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


def sample_variance(values: Sequence[float]) -> float:
    """The sample variance (n - 1) in floats: ``statistics.variance`` is exact in fractions, about 50 times
    slower, which a comparison of 10,000 cases feels. Equal values give exactly 0 (a deterministic run)."""
    if len(values) < 2:
        raise ValueError("a sample variance needs at least two values")
    if all(value == values[0] for value in values):
        return 0.0
    mean = math.fsum(values) / len(values)
    return math.fsum((value - mean) ** 2 for value in values) / (len(values) - 1)
