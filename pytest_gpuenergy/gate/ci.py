"""The end of a session: save the run, compare it with its baseline, write the reports.

Plain Python (the pytest glue calls ``EnergyGate.finish``), so the same flow can run from a
script. The order matters: compare before saving (a run is never its own baseline), and write
nothing half: every file goes through ``fileio``'s atomic writes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import StorageError
from ..fileio import atomic_write_text
from ..meter.results import EnergyResult
from ..runs import LATEST, Outcome
from ..runs.records import RunDocument
from ..runs.store import RunStore, build_documents
from .settings import STEP_SUMMARY_ENV, GateOptions

if TYPE_CHECKING:
    from .records import Comparison


@dataclass
class GateOutcome:
    documents: list[RunDocument] = field(default_factory=list)
    comparisons: list[Comparison] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)     # for the terminal, after the comparisons
    errors: list[str] = field(default_factory=list)

    @property
    def failed(self) -> bool:
        """A regression beyond noise and threshold, or a gate that could not do its job."""
        return bool(self.errors) or any(c.failed for c in self.comparisons)


class EnergyGate:
    def __init__(self, options: GateOptions) -> None:
        self.options = options
        self.store = RunStore(options.storage)

    def check_baselines(self, backend: str, gpu_models: Sequence[str]) -> None:
        """Fail fast, before any test runs: a corrupt baseline or an unknown run id is an error now."""
        if not self.options.compare:
            return
        for model in gpu_models:
            if self.options.compare == LATEST:
                self.store.runs(backend, model)   # raises StorageError naming a bad file
            else:
                self.store.resolve(self.options.compare, backend, model)

    def finish(self, cases: Sequence[tuple[str, EnergyResult]], *, machine: dict[str, Any],
               commit: dict[str, Any] | None, run_options: dict[str, Any],
               outcomes: Mapping[str, Outcome] | None = None,
               update_run: Callable[[dict[str, Any]], None] | None = None) -> GateOutcome:
        """Compare, save and report the session's cases (``outcomes``: how each case's test ended;
        ``update_run``: changes a document's JSON before it is saved, the teams' hook)."""
        outcome = GateOutcome()
        if not cases:
            if self.options.active:
                outcome.lines.append("gpuenergy: nothing was measured: no run saved, nothing compared")
                self._write_reports(outcome, job_summary=False)   # an asked-for file says so, rather than being missing
            return outcome
        outcome.documents = build_documents(cases, machine=machine, options=run_options, commit=commit, outcomes=outcomes)
        try:
            self._compare(outcome)
            self._save(outcome, update_run)
        except StorageError as exc:
            outcome.errors.append(str(exc))
        self._write_reports(outcome)
        return outcome

    def _compare(self, outcome: GateOutcome) -> None:
        if not self.options.compare:
            return
        from .compare import baseline_comparison  # (a session that compares nothing does without it: 14 ms)

        for doc in outcome.documents:
            comparison = baseline_comparison(
                self.store, doc, self.options.compare, self.options.thresholds, self.options.confidence
            )
            outcome.comparisons.append(comparison)   # the terminal shows it at its own width

    def _save(self, outcome: GateOutcome, update_run: Callable[[dict[str, Any]], None] | None = None) -> None:
        if not self.options.save:
            return
        for doc in outcome.documents:
            path = self.store.save(doc, update=update_run)
            outcome.lines.append(f"gpuenergy: saved run {doc.run_id} ({doc.origin}, {doc.gpu_model}) to {path}")

    def _write_reports(self, outcome: GateOutcome, *, job_summary: bool = True) -> None:
        options = self.options
        step_summary = options.step_summary if job_summary else None
        if options.markdown is None and options.html is None and options.json is None and step_summary is None:
            return      # most sessions write none: the writers are not even imported (about 40 ms)
        from ..reports.html import html_report
        from ..reports.json_report import json_report
        from ..reports.markdown import markdown_report

        docs, comparisons = outcome.documents, outcome.comparisons
        write_reports(
            outcome.lines, outcome.errors,
            ((options.markdown, lambda: markdown_report(docs, comparisons)),
             (options.html, lambda: html_report(docs, comparisons,
                                                baselines=comparison_baselines(self.store, comparisons))),
             (options.json, lambda: json_report(docs, comparisons))),
            step_summary, lambda: markdown_report(docs, comparisons),
        )


def comparison_baselines(store: RunStore, comparisons: Sequence[Comparison]) -> list[RunDocument]:
    """The baselines the comparisons used, for the plots' grey curves."""
    found = []
    for comparison in comparisons:
        if comparison.old_run_id and comparison.comparable:
            try:
                found.append(store.resolve(comparison.old_run_id))
            except StorageError:
                pass  # the comparison itself already read it; a report can do without
    return found


def write_reports(lines: list[str], errors: list[str], targets: Iterable[tuple[Path | None, Callable[[], str]]],
                  step_summary: Path | None, summary: Callable[[], str]) -> None:
    """Write each asked-for report atomically (the one list of report writers, shared by the pytest gate
    and the fleet), and append the Markdown to the CI job summary; a failed write is an error line."""
    for path, render in targets:
        if path is None:
            continue
        try:
            atomic_write_text(path, render())
        except OSError as exc:
            errors.append(f"cannot write the report {path}: {exc.strerror or exc}")
            continue
        lines.append(f"gpuenergy: wrote {path}")
    if step_summary is not None:
        try:
            with open(step_summary, "a", encoding="utf-8") as handle:
                handle.write(summary() + "\n")
        except OSError as exc:
            errors.append(f"cannot append to ${STEP_SUMMARY_ENV} ({step_summary}): {exc}")
