"""``gpuenergy compare OLD NEW`` and ``gpuenergy runs``: the CI gate outside pytest.

``compare`` applies the same rule and thresholds as ``pytest --energy-compare --energy-fail``
to two saved run documents and exits like the gate: 0 without a regression, 1 with one, 2 when
the input is bad (a corrupt or foreign file, an unknown run id, a malformed threshold), with a
one-line error that names the problem. ``cli.py`` registers both commands with
``add_compare_commands(subparsers)``.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from ..errors import SettingError, StorageError
from ..fileio import atomic_write_text
from ..gate.settings import DEFAULT_CONFIDENCE, check_confidence, parse_thresholds
from ..runs import DEFAULT_STORAGE, LATEST

if TYPE_CHECKING:
    from ..reports.terminal import Column
    from ..runs.records import RunDocument
    from ..runs.store import RunStore

# The run store, the comparison and the terminal's tables are imported by the commands that use
# them, not by the parser, which every ``gpuenergy --help`` builds.

EXIT_OK, EXIT_REGRESSION, EXIT_BAD_INPUT = 0, 1, 2


def add_compare_commands(subparsers: Any) -> None:
    """Add ``compare`` and ``runs`` to the ``gpuenergy`` parser's subcommands."""
    compare = subparsers.add_parser(
        "compare", help="compare two saved runs: per test and cap, the change and whether it is a regression",
        description="Compare run NEW with baseline OLD case by case. Exit 0: no regression; 1: a regression "
                    "beyond noise and threshold; 2: bad input.",
    )
    compare.add_argument("old", metavar="OLD",
                         help="the baseline: a run document's path, a run id in --storage, commit:ID (that "
                              "commit's runs merged), or 'latest' (per case, the newest run of NEW's GPU model "
                              "saved before it that has the case)")
    compare.add_argument("new", metavar="NEW",
                         help="the run to check: a path, a run id, or commit:ID (the runs of one commit, "
                              "e.g. a sharded suite's, as one)")
    compare.add_argument("--gpu", metavar="MODEL",
                         help="with commit:ID, the GPU model to compare when the commit has runs of several")
    compare.add_argument("--fail", metavar="THRESHOLDS",
                         help="fail (exit 1) on a regression beyond these changes, e.g. ets:5%%,edp:10%%,time:5%%; "
                              "each marked phase's ETS as phase.ets:10%%; without it changes are reported and "
                              "nothing fails (the phases that changed are named either way)")
    compare.add_argument("--confidence", type=_confidence, default=DEFAULT_CONFIDENCE,
                         help="confidence that a change is real, one-sided (default 0.99; also 99%%)")
    compare.add_argument("--storage", type=Path, default=None, metavar="DIR",
                         help=f"where run ids are looked up, and the saved runs before OLD from which the noise "
                              f"between sessions is learnt (default: the project's, {DEFAULT_STORAGE} in its rootdir)")
    compare.add_argument("--markdown", metavar="FILE", help="also write a Markdown report (- for standard output)")
    compare.add_argument("--html", metavar="FILE", help="also write a self-contained HTML report with plots")
    compare.add_argument("--json", metavar="FILE", help="also write a JSON report (- for standard output)")
    compare.set_defaults(handler=cmd_compare)

    runs = subparsers.add_parser("runs", help="list the saved runs: id, date, backend, GPU model, cases, commit")
    runs.add_argument("--storage", type=Path, default=None, metavar="DIR",
                      help=f"the storage folder (default: the project's, {DEFAULT_STORAGE} in its rootdir, found "
                           f"from the current folder up as pytest finds it)")
    runs.add_argument("--backend", help="only runs of this backend (nvml or sim)")
    runs.add_argument("--gpu", metavar="MODEL", help="only runs of this GPU model (its exact name)")
    runs.add_argument("--by-commit", action="store_true",
                      help="one row per commit and GPU model: its runs (a sharded suite's) combined; compare "
                           "them as one with: gpuenergy compare latest commit:ID")
    runs.set_defaults(handler=cmd_runs)


def _confidence(text: str) -> float:
    """argparse turns the error into a usage error (exit 2)."""
    try:
        return check_confidence(text, source="--confidence")
    except SettingError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


# -- compare ---------------------------------------------------------------------------------------

def cmd_compare(args: argparse.Namespace, out: TextIO | None = None) -> int:
    # The comparison and the report writers: only for this command, not every `gpuenergy` start.
    from ..gate.compare import compare_documents
    from ..reports.digest import skipped_caps
    from ..reports.html import html_report
    from ..reports.json_report import json_report
    from ..reports.markdown import markdown_report
    from ..reports.terminal import comparison_lines, terminal_width
    from ..runs.store import RunStore, project_storage

    out = out or sys.stdout
    try:
        thresholds = parse_thresholds(args.fail, source="--fail") if args.fail is not None else {}
        store = RunStore(args.storage or project_storage())
        new = _resolve(store, args.new, gpu_model=args.gpu)
        saved = store.runs(new.backend, new.gpu_model)   # the baseline's candidates and its history
        old = _baseline(store, args.old, new, saved)
        comparison = compare_documents(old, new, thresholds, args.confidence, history=saved)
        writes = [
            (args.markdown, lambda: markdown_report([new], comparison)),
            (args.json, lambda: json_report([new], comparison)),
            (args.html, lambda: html_report([new], comparison, baselines=[old])),
        ]
        texts = [(target, make()) for target, make in writes if target]
    except (StorageError, ValueError) as exc:
        return _error("compare", exc)
    if "-" not in (args.markdown, args.json, args.html):   # a report on stdout is the whole output
        for line in comparison_lines(comparison, terminal_width(), skipped_caps(new)):
            print(line, file=out)
    for target, text in texts:
        status = write_output("compare", target, text, out)
        if status:
            return status
    return EXIT_REGRESSION if comparison.failed else EXIT_OK


def _baseline(store: RunStore, ref: str, new: RunDocument, saved: list[RunDocument]) -> RunDocument:
    """OLD as named; ``latest`` is, per case, the newest of ``saved`` (NEW's GPU model and backend)
    before NEW that has the case: the gate's rule (``shards.case_baseline``)."""
    from ..runs.shards import case_baseline

    if ref != LATEST:
        return _resolve(store, ref, new.backend, new.gpu_model)
    found = case_baseline(saved, new)
    if found is None:
        raise StorageError(
            f"OLD is 'latest' but {store.folder} holds no run of {new.gpu_model} ({new.backend}) before {new.run_id} "
            f"with any of its cases; name the baseline's file or run id"
        )
    return found


def _resolve(store: RunStore, ref: str, backend: str | None = None, gpu_model: str | None = None) -> RunDocument:
    """A path, a run id, or ``commit:ID`` (that commit's runs of one GPU model, merged)."""
    from ..runs.shards import COMMIT_PREFIX, resolve_commit

    if str(ref).startswith(COMMIT_PREFIX):
        return resolve_commit(store, ref, backend, gpu_model)
    return store.resolve(ref)


def write_output(command: str, target: str, text: str, out: TextIO, told: TextIO | None = None) -> int:
    """A report's ``text`` to ``target`` (``-``: ``out``), whole or not at all, saying so on ``told``
    (default ``out``); a file that cannot be written is ``command``'s one-line error."""
    if target == "-":
        out.write(text)
        return EXIT_OK
    try:
        atomic_write_text(Path(target), text)
    except OSError as exc:
        return _error(command, f"cannot write {target}: {exc.strerror or exc}; check the folder exists and is writable")
    print(f"wrote {target}", file=told or out)
    return EXIT_OK


# -- runs ------------------------------------------------------------------------------------------

def cmd_runs(args: argparse.Namespace, out: TextIO | None = None) -> int:
    from ..reports.terminal import Column, fit_table, terminal_width
    from ..runs.records import commit_text, model_text
    from ..runs.store import RunStore, project_storage

    out = out or sys.stdout
    store = RunStore(args.storage or project_storage())
    docs, problems = store.scan(args.backend, args.gpu)
    if not docs and not problems:
        print(f"no saved runs in {store.folder} (save one with: pytest --energy-save)", file=out)
        return EXIT_OK
    rows = [
        [d.run_id, f"{d.created_at:%Y-%m-%d %H:%M}", d.backend + (" (simulated)" if d.simulated else ""),
         model_text(d.gpu_model), str(len(d.cases)), commit_text(d.commit)]
        for d in docs
    ]
    columns: tuple[Column, ...] = (Column("run id"), Column("date (UTC)", drop=2), Column("backend", drop=4),
               Column("GPU model", elide=True, keep_start=True), Column("cases", right=True, drop=3),
               Column("commit", drop=1))
    if args.by_commit:
        columns, rows = _commit_rows(docs)
    if rows:
        for line in fit_table(columns, rows, terminal_width()):
            print(line, file=out)
    for problem in problems:
        print(f"gpuenergy runs: error: {problem}", file=sys.stderr)
    return EXIT_BAD_INPUT if problems else EXIT_OK


def _commit_rows(docs: list[RunDocument]) -> tuple[tuple[Column, ...], list[list[str]]]:
    """``gpuenergy runs --by-commit``: per commit and GPU model, its runs merged (each case once)."""
    from ..reports.terminal import Column
    from ..runs.records import commit_text, model_text
    from ..runs.shards import by_commit

    rows = []
    for group in by_commit(docs):
        merged = group.merged
        rows.append([
            commit_text(merged.commit) if group.commit_id else "no commit", str(len(group.runs)),
            str(len({(c.case_id, c.cap) for c in merged.cases})), f"{group.runs[-1].created_at:%Y-%m-%d %H:%M}",
            merged.backend + (" (simulated)" if merged.simulated else ""), model_text(merged.gpu_model),
            " ".join(d.run_id for d in group.runs),
        ])
    columns = (Column("commit"), Column("runs", right=True), Column("cases", right=True),
               Column("latest (UTC)", drop=3), Column("backend", drop=4), Column("GPU model", elide=True, keep_start=True),
               Column("run ids", drop=1, elide=True))
    return columns, rows


def _error(command: str, problem: object) -> int:
    print(f"gpuenergy {command}: error: {problem}", file=sys.stderr)
    return EXIT_BAD_INPUT


def build_parser() -> argparse.ArgumentParser:
    """A parser with only these commands, for tests and for running this module on its own."""
    parser = argparse.ArgumentParser(prog="gpuenergy")
    add_compare_commands(parser.add_subparsers(dest="command", required=True, metavar="COMMAND"))
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    handler: Callable[[argparse.Namespace], int] = args.handler
    return handler(args)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
