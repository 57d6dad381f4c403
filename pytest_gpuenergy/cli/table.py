"""``gpuenergy table RUN.json RUN.json ...``: one table across GPU models, as Tang et al. lay it out.

Reads each run document (``runs/reader.py``: a damaged or foreign file is a one-line error naming
it), builds the table (``reports/table.py``: per workload, each device at its default and at its
best cap, the saving, the most efficient device) and prints it fitted to the terminal; ``--markdown``
and ``--html`` also write it, whole or not at all (``compare.write_output``), ``-`` for standard
output, where the report is then the whole output. Exit 0 when the table was made, 2 on bad input.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any, TextIO

from ..errors import SettingError, StorageError
from .compare import write_output

EXIT_OK, EXIT_BAD_INPUT = 0, 2


def add_table_command(subparsers: Any) -> None:
    """Add ``table`` to the ``gpuenergy`` parser's subcommands."""
    table = subparsers.add_parser(
        "table", help="one table across GPU models: per test, each at its default and best cap",
        description="Set saved runs of several GPU models side by side. Per workload (a test without "
                    "its cap) and device: ETS, T and EDP at the default limit and at the cap with the "
                    "least ETS, the saving, and the most efficient device. Simulated runs are marked "
                    "and never ranked against measured ones. Exit 0: table made; 2: bad input.",
    )
    table.add_argument("runs", nargs="+", metavar="RUN.json",
                       help="run documents (pytest --energy-save writes them under .energy/), one per GPU "
                            "model; a mixed machine's document may hold several models")
    table.add_argument("--markdown", metavar="FILE", help="also write the table as Markdown (- for standard output)")
    table.add_argument("--html", metavar="FILE", help="also write a self-contained HTML page (- for standard output)")
    table.set_defaults(handler=cmd_table)


def cmd_table(args: argparse.Namespace, out: TextIO | None = None) -> int:
    from ..reports.table import build_table, table_html, table_lines, table_markdown
    from ..reports.terminal import terminal_width
    from ..runs.reader import load_document

    out = out or sys.stdout
    try:
        table = build_table([load_document(path) for path in args.runs])
    except (StorageError, SettingError) as exc:
        print(f"gpuenergy table: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    on_stdout = "-" in (args.markdown, args.html)
    if not on_stdout:                   # a report on stdout is the whole output: the rest goes to stderr
        for line in table_lines(table, terminal_width()):
            print(line, file=out)
    for target, make in ((args.markdown, table_markdown), (args.html, table_html)):
        if target:
            status = write_output("table", target, make(table), out, sys.stderr if on_stdout else out)
            if status:
                return status
    return EXIT_OK
