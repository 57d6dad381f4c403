"""The end of a fleet run: every model's run documents, one gate over them, one report, one exit code.

The documents came back from the nodes as JSON text; they are read with the same checks as a
file in the storage folder (a damaged one is named with its model and node, never trusted),
marked with the fleet run they belong to (``options["fleet"]``: its id, whether it is complete,
the models that did not finish), compared each with its own model's baseline in the driver's
storage folder, saved there when ``--energy-save`` asked for it (after comparing, so a run is
never its own baseline), and reported once: the terminal, Markdown, HTML and JSON reports cover
every model, each comparison under its model, led by the fleet's own status.

Exit codes, as pytest's where they mean the same: 0 passed; 1 a test failed or an energy
regression; 2 bad input (a usage error in any task); 3 incomplete (a model's task died or its
pytest crashed or was interrupted: the other models' results are still saved and reported);
5 no test ran on any model.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from html import escape
from pathlib import Path
from typing import Any

from ..errors import JsonInputError, StorageError
from ..gate.ci import comparison_baselines, write_reports
from ..gate.compare import baseline_comparison
from ..gate.records import Comparison
from ..reports.html import html_report
from ..reports.json_report import report_data
from ..reports.markdown import markdown_report
from ..reports.terminal import run_lines, tables_for, wrap
from ..runs.records import RunDocument
from ..runs.store import RunStore
from ..runs.validation import parse_json
from .driver import TaskState
from .plan import EXIT_BAD_INPUT, EXIT_FAILED, EXIT_INCOMPLETE, EXIT_NO_TESTS, EXIT_OK, FleetGate

_PYTEST_USAGE_ERROR, _PYTEST_NO_TESTS = 4, 5


def new_fleet_id() -> str:
    return f"fleet-{datetime.now(timezone.utc):%Y%m%dT%H%M%SZ}-{secrets.token_hex(3)}"


@dataclass
class FleetOutcome:
    fleet_id: str
    tasks: list[TaskState]
    documents: list[RunDocument] = field(default_factory=list)
    comparisons: list[Comparison] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)    # a model that did not finish, named with its node
    lines: list[str] = field(default_factory=list)       # saved runs, written reports
    errors: list[str] = field(default_factory=list)      # the gate could not do its job
    usage_errors: list[str] = field(default_factory=list)

    @property
    def finished_models(self) -> list[str]:
        return [t.model for t in self.tasks if t.model not in self.missing_models]

    @property
    def missing_models(self) -> list[str]:
        return [t.model for t in self.tasks if not _completed(t)]

    @property
    def complete(self) -> bool:
        return not self.missing_models and not self.problems

    def status_text(self) -> str:
        n, total = len(self.finished_models), len(self.tasks)
        if self.complete:
            return f"fleet run {self.fleet_id}: complete: {total} of {total} GPU models ran"
        return (f"fleet run {self.fleet_id}: INCOMPLETE: {n} of {total} GPU models ran"
                f"{' (' + ', '.join(self.finished_models) + ')' if n else ''}; "
                f"did not finish: {', '.join(self.missing_models)}")

    def fleet_data(self) -> dict[str, Any]:
        """What every saved run and the JSON report carry about the fleet run."""
        return {
            "fleet_id": self.fleet_id,
            "complete": self.complete,
            "models": [t.model for t in self.tasks],
            "missing": self.missing_models,
            "problems": list(self.problems),
            "tasks": [_task_data(t) for t in self.tasks],
        }

    @property
    def exit_code(self) -> int:
        if self.usage_errors:
            return EXIT_BAD_INPUT
        if not self.complete:
            return EXIT_INCOMPLETE
        codes = [t.result.get("exit_code") for t in self.tasks if t.result]
        if self.errors or any(c.failed for c in self.comparisons) or 1 in codes:
            return EXIT_FAILED
        if codes and all(c == _PYTEST_NO_TESTS for c in codes):
            return EXIT_NO_TESTS
        return EXIT_OK


def _completed(task: TaskState) -> bool:
    """The task came back and its pytest ran to its end (passed, failed tests, or nothing collected)."""
    return task.status == "finished" and task.result is not None and task.result.get("exit_code") in (0, 1, 5)


def _task_data(task: TaskState) -> dict[str, Any]:
    result = task.result or {}
    return {
        "model": task.model, "gpus": task.spec.num_gpus, "node": task.where if task.node else None,
        "status": "finished" if _completed(task) else "failed", "exit_code": result.get("exit_code"),
        "summary": result.get("summary"), "wall_s": result.get("wall_s"), "error": task.error,
    }


# -- from the tasks' events to checked documents ---------------------------------------------------

def collect(fleet_id: str, tasks: list[TaskState]) -> FleetOutcome:
    """Check every document that came back; name each model that did not finish and why."""
    outcome = FleetOutcome(fleet_id, tasks)
    docs: list[RunDocument] = []
    for task in tasks:
        if task.result is None:
            outcome.problems.append(task.error or f"{task.model}: the task did not finish")
            continue
        code = task.result.get("exit_code")
        if code == _PYTEST_USAGE_ERROR:
            outcome.usage_errors.append(f"{task.model} on {task.where}: pytest refused the arguments: "
                                        f"{_usage_line(task.result.get('output_tail') or '')}")
            continue
        if code not in (0, 1, 5):
            outcome.problems.append(f"{task.model}: pytest {_crash_text(code)} on {task.where}; its output ends: "
                                    f"{_last_lines(task.result.get('output_tail') or '')}")
        for item in task.result.get("documents") or []:
            source = f"the run document {item.get('path')} of {task.model} from {task.where}"
            try:
                docs.append(RunDocument.from_json(parse_json(str(item.get("text", ""))), source))
            except (StorageError, JsonInputError) as exc:
                outcome.problems.append(f"{task.model}: {exc}" if isinstance(exc, StorageError) else
                                        f"{task.model}: {source} is not valid JSON: {exc}")
    fleet = outcome.fleet_data()
    outcome.documents = [replace(doc, options={**doc.options, "fleet": fleet}) for doc in docs]
    return outcome


def _crash_text(code: Any) -> str:
    if isinstance(code, int) and code < 0:
        return f"was killed by signal {-code}"
    meaning = {2: "was interrupted (exit 2)", 3: "stopped with an internal error (exit 3)"}
    return meaning.get(code, f"exited {code}")


def _usage_line(output: str) -> str:
    errors = [line.strip() for line in output.splitlines() if line.strip().startswith(("ERROR:", "error:"))]
    return errors[-1] if errors else _last_lines(output)


def _last_lines(output: str, count: int = 3) -> str:
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    return " | ".join(lines[-count:])[-600:] or "(nothing)"


# -- the gate, once over every model ---------------------------------------------------------------

def apply_gate(outcome: FleetOutcome, gate: FleetGate, step_summary: Path | None = None) -> None:
    """Compare each model's run with its own baseline, save if asked, write the reports."""
    store = RunStore(gate.storage)
    try:
        if gate.compare:
            for doc in outcome.documents:
                outcome.comparisons.append(
                    baseline_comparison(store, doc, gate.compare, gate.thresholds, gate.confidence))
        if gate.save:
            for doc in outcome.documents:
                path = store.save(doc)
                outcome.lines.append(f"gpuenergy: saved run {doc.run_id} ({doc.origin}, {doc.gpu_model}) to {path}")
    except StorageError as exc:
        outcome.errors.append(str(exc))
    baselines = comparison_baselines(store, outcome.comparisons)
    write_reports(
        outcome.lines, outcome.errors,
        ((gate.markdown, lambda: fleet_markdown(outcome)),
         (gate.html, lambda: fleet_html(outcome, baselines)),
         (gate.json, lambda: fleet_json(outcome))),
        step_summary, lambda: fleet_markdown(outcome),
    )


# -- reports ---------------------------------------------------------------------------------------

def task_rows(outcome: FleetOutcome) -> list[list[str]]:
    rows = []
    for task in outcome.tasks:
        result = task.result or {}
        state = "ran" if _completed(task) else "DID NOT FINISH"
        wall = f"{result['wall_s']:.1f} s" if isinstance(result.get("wall_s"), (int, float)) else "-"
        rows.append([task.model, str(task.spec.num_gpus), task.where if task.node else "-", state,
                     result.get("summary") or (f"exit {result['exit_code']}" if "exit_code" in result else "-"), wall])
    return rows


_TASK_HEADER = ["GPU model", "GPUs", "node", "state", "pytest", "wall"]


def terminal_lines(outcome: FleetOutcome, width: int) -> list[str]:
    """The fleet's status, its tasks, then the comparisons (or results) per GPU model."""
    lines = wrap(outcome.status_text(), width)
    for row in task_rows(outcome):
        lines += wrap(f"{row[0]} x{row[1]} on {row[2]}: {row[3]}, {row[4]}, {row[5]}", width, "  ")
    for task in outcome.tasks:
        for failure in (task.result or {}).get("failures") or []:
            lines += wrap(f"{task.model}: {failure}", width, "  ")
    lines.append("")
    if outcome.comparisons:
        lines += tables_for(outcome.comparisons, width)
    else:
        for doc in outcome.documents:
            lines += run_lines(doc, width) + [""]
    for text in outcome.lines:
        lines += wrap(text, width)
    return lines


def fleet_markdown(outcome: FleetOutcome) -> str:
    head = [f"**{'✅' if outcome.complete else '⚠️'} {outcome.status_text()}**", ""]
    head += ["| " + " | ".join(_TASK_HEADER) + " |", "|" + "---|" * len(_TASK_HEADER)]
    head += ["| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |" for row in task_rows(outcome)]
    head += [""] + ([f"- {problem}" for problem in outcome.problems] + [""] if outcome.problems else [])
    body = markdown_report(outcome.documents, outcome.comparisons, title="GPU energy across the fleet")
    title, _, rest = body.partition("\n")
    return "\n".join([title, "", *head, rest.lstrip("\n")])


def fleet_html(outcome: FleetOutcome, baselines: Sequence[RunDocument]) -> str:
    page = html_report(outcome.documents, outcome.comparisons, baselines=baselines,
                       title="GPU energy report across the fleet")
    rows = "".join("<tr>" + "".join(f"<td>{escape(cell)}</td>" for cell in row) + "</tr>" for row in task_rows(outcome))
    header = "".join(f"<th>{escape(h)}</th>" for h in _TASK_HEADER)
    problems = "".join(f"<li>{escape(p)}</li>" for p in outcome.problems)
    section = (f'<section class="fleet"><p><strong>{escape(outcome.status_text())}</strong></p>'
               f'<div class="scroll"><table><thead><tr>{header}</tr></thead><tbody>{rows}</tbody></table></div>'
               f'{"<ul>" + problems + "</ul>" if problems else ""}</section>')
    at = page.find("</h1>")
    return page[:at + 5] + "\n" + section + page[at + 5:] if at >= 0 else page


def fleet_json(outcome: FleetOutcome) -> str:
    data = report_data(outcome.documents, outcome.comparisons)
    data["fleet"] = outcome.fleet_data()
    data["failed"] = bool(data.get("failed")) or outcome.exit_code != EXIT_OK
    return json.dumps(data, indent=2, ensure_ascii=False, allow_nan=False) + "\n"
