"""MkDocs hooks: the reference pages that must never drift from the code are written at build time.

``reference/options.md`` comes from the plugin's own ``pytest_addoption`` (each flag, its ini key,
its help), ``reference/cli.md`` from the ``gpuenergy`` command's own argparse parser (each
subcommand, its usage and arguments), and the generated half of ``reference/errors.md`` from
``pytest_gpuenergy/errors.py`` and every ``raise`` of one of its classes in the package. A new
option, subcommand, argument or error message therefore appears in the site with no edit to the docs;
``tests/test_docs.py`` checks that ``pytest --help`` and ``gpuenergy --help`` agree with the built site.

Each page has a hand-written introduction in ``docs/reference/`` (``options.md`` and so on) with a
marker line ``<!-- generated -->`` where the tables go.
"""

from __future__ import annotations

import argparse
import ast
from pathlib import Path
from typing import Any

GENERATED = "<!-- generated -->"
PACKAGE = Path(__file__).resolve().parent.parent / "pytest_gpuenergy"


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    """Put the generated tables where a reference page asks for them."""
    writers = {"reference/options.md": options_markdown, "reference/cli.md": cli_markdown,
               "reference/errors.md": errors_markdown, "reference/markers.md": markers_markdown,
               "reference/environment.md": faults_markdown, "reference/fixtures.md": results_markdown}
    writer = writers.get(page.file.src_uri)
    if writer is None or GENERATED not in markdown:
        return markdown
    return markdown.replace(GENERATED, writer())


def _cell(text: str) -> str:
    """Text for one cell of a Markdown table."""
    return " ".join(str(text).split()).replace("|", "\\|")


# -- pytest options ------------------------------------------------------------------------------------

def plugin_options() -> tuple[list[Any], dict[str, Any]]:
    """The plugin's command-line options and ini keys, as pytest registers them."""
    import pytest

    from pytest_gpuenergy.plugin import hooks

    parser = pytest.Parser(_ispytest=True)
    hooks.pytest_addoption(parser)
    group = parser.getgroup("gpuenergy")
    return list(group.options), dict(parser._inidict)


def options_markdown() -> str:
    options, inis = plugin_options()
    rows = ["| option | ini key | meaning |", "|---|---|---|"]
    for option in options:
        flag = option.names()[0]
        attrs = option.attrs()
        metavar = attrs.get("metavar")
        usage = flag if attrs.get("const") is True else (f"{flag}[={metavar}]" if attrs.get("nargs") == "?" else f"{flag}={metavar or 'VALUE'}")
        if attrs.get("choices"):
            usage = flag + "={" + ",".join(attrs["choices"]) + "}"     # as argparse writes choices
        ini = flag[2:].replace("-", "_")
        ini_cell = f"`{ini}`" if ini in inis else "(none)"
        rows.append(f"| <span id=\"{flag[2:]}\"></span>`{usage}` | {ini_cell} | {_cell(attrs.get('help', '').replace('%%', '%'))} |")
    flags = {option.names()[0][2:].replace("-", "_") for option in options}
    for ini, (text, *_) in sorted(inis.items()):          # settings that are ini keys only
        if ini not in flags and ini.startswith(("gpu_", "energy_")):
            rows.append(f"| (ini only) | <span id=\"{ini}\"></span>`{ini}` | {_cell(text)} |")
    return "\n".join(rows)


# -- the gpuenergy command -------------------------------------------------------------------------------

def subcommands() -> dict[str, tuple[str, argparse.ArgumentParser]]:
    """Each ``gpuenergy`` subcommand: its one-line help and its parser."""
    from pytest_gpuenergy.cli.main import build_parser

    parser = build_parser()
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    helps = {choice.dest: choice.help or "" for choice in action._choices_actions}
    return {name: (helps.get(name, ""), sub) for name, sub in action.choices.items()}


def cli_markdown() -> str:
    lines: list[str] = []
    commands = subcommands()
    lines += ["| command | what it does |", "|---|---|"]
    lines += [f"| [`gpuenergy {name}`](#gpuenergy-{name}) | {_cell(text)} |" for name, (text, _) in commands.items()]
    for name, (text, sub) in commands.items():
        lines += ["", f"## `gpuenergy {name}` {{#gpuenergy-{name}}}", "", _cell(sub.description or text), "",
                  "```text", sub.format_usage().strip(), "```", "",
                  "| argument | meaning |", "|---|---|"]
        for action in sub._actions:
            if isinstance(action, argparse._HelpAction):
                continue
            names = ", ".join(action.option_strings) or (action.metavar or action.dest)
            if action.option_strings and action.nargs != 0:
                names += f" {action.metavar or action.dest.upper()}"
            helptext = (action.help or "").replace("%%", "%")
            if action.choices and not isinstance(action, argparse._SubParsersAction):
                helptext += f" (one of: {', '.join(map(str, action.choices))})"
            lines.append(f"| `{_cell(names)}` | {_cell(helptext)} |")
    return "\n".join(lines)


# -- markers ----------------------------------------------------------------------------------------------

def markers_markdown() -> str:
    from pytest_gpuenergy.plugin.markers import MARKERS

    rows = ["| marker | what it does |", "|---|---|"]
    for marker in MARKERS:
        signature, _, text = marker.partition(": ")
        rows.append(f"| `@pytest.mark.{_cell(signature)}` | {_cell(text)} |")
    return "\n".join(rows)


# -- results -------------------------------------------------------------------------------------------

# What the figures every result carries mean, where the code has no comment beside them.
KNOWN = {
    "ets_j": "energy to solution, J (with several GPUs or ranks: their total)",
    "time_s": "the region's duration T, s (with several GPUs: the longest)", "edp_js": "energy-delay product ETS x T, J s",
    "mean_power_w": "mean power over the region, W", "peak_power_w": "highest power seen in the region, W",
    "n": "repetitions", "ets_std_j": "standard deviation of ETS over the repetitions, J",
    "ets_cv": "coefficient of variation of ETS over the repetitions", "method": '"counter" or "sampling"',
    "backend": '"nvml" or "sim"', "simulated": "whether the figures come from the simulated GPU",
    "per_gpu": "one GpuResult per GPU the test ran on", "notes": "what the figures deserve to be told with (a coarse region, another process on the GPU, ...)",
    "gpu_index": "the GPU's NVML index", "gpu_name": "the GPU's name, as NVML gives it", "gpu_uuid": "the GPU's UUID",
    "limit_enforced_w": "the power limit the GPU enforced, W", "default_limit_w": "the GPU's default power limit, W",
    "repetitions": "each repetition's figures",
}


def attributes_markdown(cls: type) -> str:
    """A result class's public attributes: dataclass fields with their type and the comment beside
    them in the source, and properties with the first line of their docstring."""
    import dataclasses
    import inspect
    import re

    comments: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if klass.__module__.startswith("pytest_gpuenergy"):
            for line in inspect.getsource(klass).splitlines():
                found = re.match(r"\s+([a-z_]+): [^#=]+(?:=[^#]*)?#\s*(.+)$", line)
                if found:
                    comments[found.group(1)] = found.group(2)
    rows = ["| attribute | type | meaning |", "|---|---|---|"]
    for item in dataclasses.fields(cls):
        if not item.name.startswith("_"):
            kind = item.type if isinstance(item.type, str) else getattr(item.type, "__name__", str(item.type))
            rows.append(f"| `{item.name}` | `{_cell(kind)}` | {_cell(comments.get(item.name) or KNOWN.get(item.name, ''))} |")
    for name, member in sorted(inspect.getmembers(cls, lambda m: isinstance(m, property))):
        if not name.startswith("_"):
            doc = " ".join((member.__doc__ or "").strip().split("\n\n")[0].split()) or KNOWN.get(name, "")
            returns = inspect.signature(member.fget).return_annotation if member.fget else ""
            kind = returns if isinstance(returns, str) else getattr(returns, "__name__", str(returns))
            rows.append(f"| `{name}` | `{_cell(kind)}` | {_cell(doc.replace('``', '`'))} |")
    return "\n".join(rows)


def results_markdown() -> str:
    from pytest_gpuenergy.meter.results import EnergyResult, GpuResult

    return "\n".join([
        "### `energy_meter.result`: `EnergyResult`", "", _cell((EnergyResult.__doc__ or "").replace("``", "`")), "",
        attributes_markdown(EnergyResult), "",
        "### `result.per_gpu[i]`: `GpuResult`", "", _cell((GpuResult.__doc__ or "").replace("``", "`")), "",
        attributes_markdown(GpuResult)])


# -- simulated faults ----------------------------------------------------------------------------------

def faults_markdown() -> str:
    """The simulator's faults (``GPUENERGY_SIM_FAULTS``), from the table in ``sim/faults.py``'s docstring."""
    from pytest_gpuenergy.sim import faults

    rows: dict[str, str] = {}
    name = None
    for line in (faults.__doc__ or "").splitlines():
        if line.startswith("``") and "``  " in line:
            name, _, text = line[2:].partition("``")
            rows[name] = text.strip()
        elif name and line.startswith(" " * 10) and line.strip():
            rows[name] += " " + line.strip()
        elif not line.strip() or line.startswith("="):
            name = None if not line.startswith("=") else name
    lines = ["| fault | what the simulated GPU does |", "|---|---|"]
    lines += [f"| `{fault}` | {_cell(rows.get(fault, '').replace('``', '`'))} |" for fault in faults.FAULT_NAMES]
    return "\n".join(lines)


# -- errors ----------------------------------------------------------------------------------------------

def error_classes() -> list[type]:
    """Every error the user can meet: ``GpuEnergyError`` and every class below it, in the package's
    modules that define one (found by reading them, so that a new one cannot be left out)."""
    import importlib

    from pytest_gpuenergy.errors import GpuEnergyError

    for path in sorted(PACKAGE.rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        if path.name != "errors.py" and ("Error)" in text or "Missing)" in text) and "\nclass " in text:
            module = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts)
            if any(isinstance(node, ast.ClassDef) for node in ast.parse(text).body):
                importlib.import_module(module)
    found: list[type] = []
    todo = [GpuEnergyError]
    while todo:
        cls = todo.pop()
        if cls not in found:
            found.append(cls)
            todo.extend(cls.__subclasses__())
    return sorted(found, key=lambda cls: cls.__name__)


def _message(node: ast.expr) -> str | None:
    """The text of a message as written in the code, with ``{...}`` where a value goes in."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(part.value if isinstance(part, ast.Constant) else "{" + ast.unparse(part.value) + "}"  # type: ignore[attr-defined]
                       for part in node.values)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _message(node.left), _message(node.right)
        return None if left is None or right is None else left + right
    return None


def raised_messages(names: set[str]) -> dict[str, list[tuple[str, str]]]:
    """For each error class name, the messages the package raises it with, and where."""
    found: dict[str, list[tuple[str, str]]] = {name: [] for name in names}
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call)):
                continue
            func = node.exc.func
            name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None
            if name not in found:
                continue
            text = _message(node.exc.args[0]) if node.exc.args else None
            where = f"{path.relative_to(PACKAGE.parent)}:{node.lineno}"
            found[name].append((text if text is not None else "(the message of the error underneath)", where))
    return found


def errors_markdown() -> str:
    classes = error_classes()
    messages = raised_messages({cls.__name__ for cls in classes})
    lines: list[str] = []
    for cls in classes:
        bases = ", ".join(base.__name__ for base in cls.__bases__)
        doc = " ".join((cls.__doc__ or "").split())
        lines += ["", f"### `{cls.__name__}` {{#{cls.__name__.lower()}}}", "", f"*{bases}.* {doc}", ""]
        raised = messages.get(cls.__name__, [])
        if not raised:
            lines.append("Raised with messages made elsewhere (see the table above), or a base class of the errors below it.")
            continue
        lines += ["| message (as written in the code; `{...}` is filled in) | raised in |", "|---|---|"]
        lines += [f"| {_cell(text)} | `{where}` |" for text, where in raised]
    return "\n".join(lines)
