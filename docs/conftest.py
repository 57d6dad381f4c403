"""``pytest docs``: every Python example in the documentation runs as a test (with sybil).

Three kinds of fenced block are examples:

* ```` ```python ```` : a snippet, run as it stands in a fresh namespace, on a private simulated GPU
  (the environment of the file examples below while it runs). It must be complete (its own imports),
  so that a reader can paste it, and so that it runs alike under pytest-xdist.
* ```` ```python title="conftest.py" ```` (any ``*.py`` title that is not a test file): a file of the
  reader's project. It is written beside the test files that follow it on the same page.
* ```` ```python title="test_x.py" ````: a test file. It is run as the reader would run it: pytest in a
  fresh process, in a fresh folder holding the page's files so far, on a private simulated GPU. It
  must pass, unless an HTML comment right after the block says otherwise:
  ``<!-- pytest: --gpu-caps=60%,100% | exit 1 | energy budget exceeded -->`` (the arguments, the exit
  code expected, and text the output must contain; each part optional; also ``env NAME=VALUE`` and
  ``torchrun N``, to run it under torchrun with N ranks).

Blocks in other languages (bash, yaml, toml, text) are not run here: the tutorial's commands are run by
``tests/test_docs.py``, which also parses the how-tos' CI configurations.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from sybil import Document, Example, Region, Sybil
from sybil.parsers.markdown.lexers import RawFencedCodeBlockLexer

INFO = re.compile(r'(?P<language>python|py)(?:[ \t]+title="(?P<title>[^"]+)")?[^\n]*$\n', re.MULTILINE)
RUN_COMMENT = re.compile(r"\A\s*<!--\s*pytest:(?P<spec>.*?)-->")
# The plugins the project's own suite leaves out of child sessions (see tests/helpers.py): installed for
# its compatibility tests, they would reorder, warn or print in an example's session.
CHILD_PYTEST_ADDOPTS = " ".join(f"-p no:{name}" for name in (
    "hypothesispytest", "randomly", "asyncio", "benchmark", "pytest_cov", "rerunfailures", "repeat", "cacheprovider"))
SESSION_TIMEOUT_S = 300


@dataclass(frozen=True)
class Snippet:
    """A Python block to run as it stands."""

    source: str


@dataclass(frozen=True)
class ProjectFile:
    """A file of the reader's project; a test file is run with the page's files written before it."""

    name: str
    source: str
    earlier: dict[str, str] = field(default_factory=dict)   # the page's files before this one
    args: tuple[str, ...] = ()
    exit_code: int = 0
    expected: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)   # e.g. GPUENERGY_SIM_GPUS=H100,H100
    ranks: int = 0                                       # run under torchrun with this many ranks

    @property
    def is_test(self) -> bool:
        return Path(self.name).name.startswith("test_")


def _run_spec(text: str) -> dict:
    """``--gpu-caps=60% | exit 1 | budget exceeded | env GPUENERGY_SIM_GPUS=H100,H100 | torchrun 2``: the
    arguments, the exit code expected, texts the output must show, environment, ranks under torchrun."""
    parts = [part.strip() for part in text.split("|")]
    spec: dict = {"args": tuple(shlex.split(parts[0])) if parts and parts[0] else (), "expected": [], "env": {}}
    for part in parts[1:]:
        if re.fullmatch(r"exit \d+", part):
            spec["exit_code"] = int(part.split()[1])
        elif re.fullmatch(r"torchrun \d+", part):
            spec["ranks"] = int(part.split()[1])
        elif part.startswith("env "):
            name, _, value = part[4:].partition("=")
            spec["env"][name.strip()] = value.strip()
        elif part:
            spec["expected"].append(part)
    spec["expected"] = tuple(spec["expected"])
    return spec


class ExampleParser:
    """Finds the page's Python blocks in order; a file block carries every file the page showed before it."""

    def __init__(self) -> None:
        self.lexer = RawFencedCodeBlockLexer(info_pattern=INFO, mapping={"language": "language", "title": "title", "source": "source"})

    def __call__(self, document: Document) -> Iterable[Region]:
        files: dict[str, str] = {}
        for region in self.lexer(document):
            source = str(region.lexemes["source"])
            title = region.lexemes.get("title")
            if not title:
                region.parsed = Snippet(source)
            else:
                after = RUN_COMMENT.match(document.text[region.end:])
                spec = _run_spec(after.group("spec")) if after else {}
                region.parsed = ProjectFile(title, source, dict(files), **spec)
                files[title] = source
            region.evaluator = evaluate
            yield region


def _example_env(state: Path) -> dict[str, str]:
    env = dict(os.environ)
    for name in list(env):
        if name.startswith("GPUENERGY_SIM_") or name in ("PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT", "CUDA_VISIBLE_DEVICES"):
            del env[name]
    env.update(GPUENERGY_BACKEND="sim", GPUENERGY_SIM_STATE=str(state), GPUENERGY_SIM_SEED="1",
               GPUENERGY_STRICT_ESTIMATES="1", PYTEST_ADDOPTS=CHILD_PYTEST_ADDOPTS, COLUMNS="100")
    return env


def evaluate(example: Example) -> str | None:
    parsed = example.parsed
    if isinstance(parsed, Snippet):
        code = compile(parsed.source, f"{example.path}:{example.line}", "exec")
        with tempfile.TemporaryDirectory(prefix="docs-snippet-") as folder:
            saved, env = dict(os.environ), _example_env(Path(folder) / "sim-state")   # its own simulated GPU
            os.environ.clear()
            os.environ.update(env)
            try:
                exec(code, {"__name__": "__docs_example__"})
            finally:
                os.environ.clear()
                os.environ.update(saved)
        return None
    assert isinstance(parsed, ProjectFile)
    if not parsed.is_test:
        compile(parsed.source, f"{example.path}:{example.line} ({parsed.name})", "exec")   # a file that does not parse fails here
        return None
    with tempfile.TemporaryDirectory(prefix="docs-example-") as folder:
        project = Path(folder) / "project"
        for name, source in {**parsed.earlier, parsed.name: parsed.source}.items():
            path = project / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(source)
        launcher = ["-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={parsed.ranks}"] if parsed.ranks else []
        command = [sys.executable, *launcher, "-m", "pytest", parsed.name, "-q", *parsed.args]
        env = {**_example_env(Path(folder) / "sim-state"), "OMP_NUM_THREADS": "1", **parsed.env}
        done = subprocess.run(command, cwd=project, env=env, capture_output=True, text=True, timeout=SESSION_TIMEOUT_S)
    output = done.stdout + done.stderr
    where = f"{example.path}, line {example.line}: the example {parsed.name} run as `pytest {parsed.name} {' '.join(parsed.args)}`"
    if done.returncode != parsed.exit_code:
        return f"{where} exited {done.returncode}, not {parsed.exit_code}:\n{output[-4000:]}"
    missing = [text for text in parsed.expected if text not in output]
    if missing:
        return f"{where} did not print {missing!r}:\n{output[-4000:]}"
    return None


pytest_collect_file = Sybil(parsers=[ExampleParser()], patterns=["*.md"]).pytest()
