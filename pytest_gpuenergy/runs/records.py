"""Run documents: a session's results as versioned JSON files, kept per backend and GPU model.

A team commits the storage folder (``.energy/`` by default) to its repository; the newest
document for a GPU model is the baseline the next run is compared with. Baselines outlive the
job that wrote them, so every write is atomic (``fileio.atomic_write_json``), nothing is
overwritten unless asked, and a file this module cannot read is reported by name and left
exactly as it is: a corrupt baseline must be looked at by a person, not silently replaced.

Layout::

    <storage>/<backend>/<gpu-model-slug>/<run_id>.json

``backend`` is ``nvml`` or ``sim``; the slug is the GPU model name in lower-case ASCII with
dashes (``nvidia-h100-80gb-hbm3``). A session that measured two GPU models writes two documents.

Format (``"format": "pytest-gpuenergy-run"``, ``"version": 3``; the full description with an
example is ``docs/run-format.md``)::

    {
      "format": "pytest-gpuenergy-run",   # any other value: not ours, refused
      "version": 3,                       # integer; a newer one is refused (upgrade the plugin); 1 and 2 are read
      "run_id": "20250301T101500Z-1a2b3c4d",   # UTC time of the run + random; unique
      "created_at": "2025-03-01T10:15:00+00:00",
      "backend": "nvml" | "sim",
      "simulated": false,                 # true: figures come from the GPU simulator
      "gpu_model": "NVIDIA H100 80GB HBM3",
      "machine": {"host", "platform", "python", "backend", "simulated", "driver",
                  "cuda_driver", "cuda", "torch", "pytest_gpuenergy",
                  "gpus": [{"index", "name", "uuid", "default_limit_w", "min_limit_w",
                            "max_limit_w"}]},
      "commit": {"id", "branch", "dirty"} | null,
      "options": {...},                   # the session's options (caps, repeat, ...)
      "cases": [{
          "case_id": "tests/test_x.py::test_train[150W]#2",   # "#n": n-th measured region
          "test": "tests/test_x.py::test_train[150W]",
          "cap": "150W",  "gpu_index": 0, "gpu_name": ..., "gpu_uuid": ...,
          "backend": "nvml", "simulated": false,
          "method": "counter" | "sampling", "power_source": null | "instant" | "usage",
          "limit_requested_w": 150.0 | null, "limit_enforced_w": 150.0, "default_limit_w": 700.0,
          "repetitions": [{"ets_j", "time_s", "edp_js", "mean_power_w", "peak_power_w",
                           "calls", "ets_low_j", "ets_high_j",     # per call; the bound holds the true ETS
                           "phases"?, "op_classes"?}],              # (absent in version 1); phases: see below
          "summary": {"n", "ets_j", "time_s", "edp_js", "mean_power_w", "peak_power_w",
                      "ets_std_j", "ets_cv", "ets_min_j", "ets_max_j"},
          "notes": ["..."],
          "outcome": "passed"             # how the test ended: passed, failed, error, skipped, xfailed,
      }]                                  # xpassed; only passed cases are baselines (absent before version 3: passed)
    }

``phases`` (optional, in a repetition and, as the mean over them, in the case): regions with phase
marks (``energy_meter.phase``), each phase by name (``other``: the unmarked rest) with ``ets_j``,
``ets_low_j``, ``ets_high_j``, ``time_s``, ``power_w``, ``time_share``, ``energy_share``,
``distinguishable`` (and ``why_not`` where false), per call.

``op_classes`` (optional, beside ``phases``, the same figures): regions measured with
``measure(fn, by_op=True)``, each operator class by name (``matmul``, ``attention``, ``elementwise``,
``reduction``, ``memory``, ``communication``, ``idle``: those the region had). Documents saved
before it have none, and load as before.

Units are in the names (J, s, J s, W). Numbers that are undefined (a mean power over a zero
duration) are written as ``null``. ``summary`` is written for readers of the file; on loading
it is recomputed from ``repetitions``, which are the data.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from ..meter.results import Domain, DomainEnergy, EnergyResult, GpuResult
from . import PASSED, Outcome
from .ids import node_id_of

FORMAT = "pytest-gpuenergy-run"
VERSION = 3   # 3: cases carry their test's outcome; 2: repetitions carry the bound of their ETS; 1 and 2 are still read



# -- records -------------------------------------------------------------------------------------

@dataclass(frozen=True, kw_only=True)
class CaseEntry(GpuResult):
    """One GPU's figures for one case (one measured region of one test at one cap), as a run keeps them.

    The figures are the meter's own record (``GpuResult``, which also owns their JSON form); an
    entry adds where they belong: the case, the GPU's place among the case's GPUs, how the test ended.
    """

    case_id: str
    test: str
    gpu_slot: int = 0              # the GPU's place among the case's GPUs (0 for a one-GPU test; a rank's order)
    outcome: Outcome = PASSED      # how the test ended; only passed cases are baselines and are compared
    # --energy-domains: the case's figures per domain (its GPUs, the host's cpu and dram, the node's
    # total), the same on each of its GPUs' entries; empty where only the GPUs were measured
    per_domain: Mapping[Domain, DomainEnergy] = field(default_factory=dict, hash=False)

    @property
    def passed(self) -> bool:
        return self.outcome == PASSED

    @property
    def key(self) -> tuple[str, str, int]:
        """What identifies the case across runs: case id, cap label, and the GPU's place in the case.

        Not the GPU's index: a pytest-xdist worker takes whichever GPU is its own, so one test runs
        on GPU 3 today and GPU 0 tomorrow, and ranks on two hosts both have a GPU 0.
        """
        return (self.case_id, self.cap, self.gpu_slot)

    @classmethod
    def from_gpu_result(cls, case_id: str, gpu: GpuResult, slot: int = 0, outcome: Outcome = PASSED,
                        per_domain: Mapping[Domain, DomainEnergy] | None = None) -> CaseEntry:
        """``gpu``'s figures placed in a run: the ``slot``-th GPU of case ``case_id`` (``per_domain``: the case's)."""
        figures = {f.name: getattr(gpu, f.name) for f in fields(GpuResult)}
        return cls(**figures, case_id=case_id, test=node_id_of(case_id), gpu_slot=slot, outcome=outcome,
                   per_domain=dict(per_domain or {}))

    @classmethod
    def entries_of(cls, case_id: str, result: EnergyResult, outcome: Outcome = PASSED) -> list[CaseEntry]:
        """Each GPU's case of ``result``. The meter's notes (a coarse figure, CPU time standing for GPU
        work, a host figure's estimate) belong to the result as a whole: every GPU's case keeps them
        with its own, so that a saved run, and a pytest-xdist worker's hand-over, carry them."""
        return [cls.from_gpu_result(case_id, replace(gpu, notes=tuple(sorted({*gpu.notes, *result.notes}))), slot,
                                    outcome, result.per_domain)
                for slot, gpu in enumerate(result.per_gpu)]

    @classmethod
    def from_json(cls, data: Any, source: str) -> CaseEntry:
        """Check and read one case as written by ``to_json`` (``source`` is named in errors)."""
        from .reader import DocumentReader  # reading checks every field; it builds these records

        return DocumentReader(source).case(data, "case")

    def to_json(self) -> dict[str, Any]:
        domains = {"per_domain": {d: f.to_json() for d, f in self.per_domain.items()}} if self.per_domain else {}
        return {"case_id": self.case_id, "test": self.test, **super().to_json(),
                "gpu_slot": self.gpu_slot, "outcome": self.outcome, **domains}


@dataclass(frozen=True)
class RunDocument:
    """One session's results on one GPU model and backend, as saved and loaded."""

    run_id: str
    created_at: datetime
    backend: str
    simulated: bool
    gpu_model: str
    machine: dict[str, Any]
    commit: dict[str, Any] | None
    options: dict[str, Any]
    cases: tuple[CaseEntry, ...]
    path: Path | None = field(default=None, compare=False)   # where it was loaded from or saved to
    sources: tuple[str, ...] = field(default=(), compare=False)  # runs merged into this one (``shards.merge_runs``)

    @property
    def origin(self) -> str:
        return "simulated" if self.simulated else "measured"

    def passed_only(self) -> RunDocument:
        """The document without the cases whose test did not pass: what baselines and comparisons use."""
        if all(case.passed for case in self.cases):
            return self
        return replace(self, cases=tuple(case for case in self.cases if case.passed))

    def describe(self) -> str:
        """One line for listings: id, date, backend, model, cases, commit."""
        return (
            f"{self.run_id}  {self.created_at:%Y-%m-%d %H:%M} UTC  {model_label(self.gpu_model, self.backend, self.simulated)}  "
            f"{len(self.cases)} cases  {commit_text(self.commit)}"
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "version": VERSION,
            "run_id": self.run_id,
            "created_at": self.created_at.isoformat(),
            "backend": self.backend,
            "simulated": self.simulated,
            "gpu_model": self.gpu_model,
            "machine": self.machine,
            "commit": self.commit,
            "options": self.options,
            "cases": [case.to_json() for case in self.cases],
        }

    @classmethod
    def from_json(cls, data: Any, source: str = "run document") -> RunDocument:
        """Check and read a parsed document; ``source`` (the file) is named in every error."""
        from .reader import DocumentReader

        return DocumentReader(source).document(data)


def commit_text(commit: dict[str, Any] | None) -> str:
    """``abc1234 (main, dirty)`` or ``no commit``: how a run's commit reads in listings."""
    if not commit or not commit.get("id"):
        return "no commit"
    parts = [p for p in (commit.get("branch"), "dirty" if commit.get("dirty") else None) if p]
    return str(commit["id"])[:10] + (f" ({', '.join(parts)})" if parts else "")


def with_origin(name: str, simulated: bool) -> str:
    """A GPU model name that says it is simulated (the simulator's names already do)."""
    return f"{name} (simulated)" if simulated and "simulated" not in name.lower() else name


def model_text(gpu_model: str) -> str:
    """A GPU model's name in a table that says the backend beside it: the vendor's prefix and the
    simulator's suffix left out, so the part that tells models apart comes first (``H100 80GB HBM3``)."""
    name = gpu_model.removesuffix(" (simulated)")
    for vendor in ("NVIDIA ", "AMD "):
        name = name.removeprefix(vendor)
    return name or gpu_model


def model_label(gpu_model: str, backend: str, simulated: bool) -> str:
    """``NVIDIA H100 80GB HBM3 [nvml]`` / ``... (simulated) [sim]``: a run's model in titles."""
    return f"{with_origin(gpu_model, simulated)} [{backend}]"


# -- small helpers ---------------------------------------------------------------------------------

def nan_if_none(value: float | None) -> float:
    return math.nan if value is None else value


def as_utc(moment: datetime) -> datetime:
    """Times are kept in UTC; a naive time is taken to be UTC already."""
    if moment.tzinfo is None:
        return moment.replace(tzinfo=timezone.utc)
    return moment.astimezone(timezone.utc)


def require_json(name: str, value: Any) -> None:
    if not isinstance(value, dict):
        raise ValueError(f"build_documents: {name} must be a dict, got {type(value).__name__}")
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise ValueError(
            f"build_documents: {name} cannot be saved as JSON ({exc}); pass only strings, numbers, "
            f"booleans, None, lists and dicts"
        ) from None
