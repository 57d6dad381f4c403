"""The documentation: the site builds strictly and lists every option, subcommand and error; the
tutorial works as written on a fresh project; the how-tos' CI configurations parse; every Python
example in ``docs/`` is collected by ``pytest docs`` and a broken one fails it; the README stays short
and agrees with CI; every error the package raises is a ``GpuEnergyError``."""

from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
BIN = Path(sys.executable).parent
TUTORIAL = ("existing-suite", "energy-per-test", "budgets", "ci-gate")
FENCE = re.compile(r'^```(?P<lang>[\w-]*)(?:[ \t]+title="(?P<title>[^"]+)")?[^\n]*\n(?P<body>.*?)^```[ \t]*$', re.MULTILINE | re.DOTALL)
# The plugins the suite leaves out of its child sessions (tests/helpers.py says why).
CHILD_ADDOPTS = " ".join(f"-p no:{name}" for name in (
    "hypothesispytest", "randomly", "asyncio", "benchmark", "pytest_cov", "rerunfailures", "repeat", "cacheprovider"))


def blocks(page: Path) -> list[tuple[str, str | None, str]]:
    """The fenced blocks of a Markdown page, in order: (language, title, body)."""
    return [(m.group("lang"), m.group("title"), m.group("body")) for m in FENCE.finditer(page.read_text())]


def user_env(folder: Path) -> dict[str, str]:
    """A newcomer's shell: the installed plugin on PATH, a simulated GPU of their own, git configured."""
    env = {name: value for name, value in os.environ.items()
           if not name.startswith(("GPUENERGY_", "PYTEST_XDIST")) and name != "CUDA_VISIBLE_DEVICES"}
    env.update(PATH=f"{BIN}{os.pathsep}{env.get('PATH', '')}", GPUENERGY_SIM_STATE=str(folder / "sim-state"),
               PYTEST_ADDOPTS=CHILD_ADDOPTS, COLUMNS="100", GIT_AUTHOR_NAME="New Comer", GIT_AUTHOR_EMAIL="new@example.com",
               GIT_COMMITTER_NAME="New Comer", GIT_COMMITTER_EMAIL="new@example.com", GIT_CONFIG_GLOBAL=os.devnull)
    return env


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The site, built as CI builds it: strict, so a broken link, anchor or nav entry fails here."""
    out = tmp_path_factory.mktemp("site")
    done = subprocess.run([str(BIN / "mkdocs"), "build", "--strict", "--site-dir", str(out)], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    return out


def page_text(site: Path, page: str) -> str:
    """The text of a built page's article (not its navigation), tags removed."""
    html = (site / page / "index.html").read_text()
    html = html[html.index("<article"):html.index("</article>")]
    return re.sub(r"<[^>]+>", "", html).replace("&amp;", "&").replace("&lt;", "<").replace("&gt;", ">")


@pytest.mark.slow
def test_every_option_pytest_lists_is_in_the_generated_options_page(site):
    done = subprocess.run([sys.executable, "-m", "pytest", "--help", "-p", "no:cacheprovider"], cwd=DOCS.parent,
                          capture_output=True, text=True, timeout=120)
    listed = set(re.findall(r"^\s+(--(?:gpu|energy)-[a-z-]+)", done.stdout, re.MULTILINE))
    assert {"--gpu-caps", "--gpu-backend", "--energy-all", "--energy-fail", "--energy-budgets"} <= listed
    options = page_text(site, "reference/options")
    missing = sorted(flag for flag in listed if flag not in options)
    assert not missing, f"pytest --help lists options the site does not: {missing}"
    for flag in listed:                                       # and with its ini key, as the page promises
        ini = flag[2:].replace("-", "_")
        assert re.search(rf"{re.escape(flag)}\S*\s+{ini}\b", options), (flag, ini)
    ini_keys = set(re.findall(r"^  ((?:gpu|energy)_[a-z_]+) \(", done.stdout, re.MULTILINE))     # the [pytest] ini-options
    assert {flag[2:].replace("-", "_") for flag in listed} <= ini_keys
    assert not sorted(key for key in ini_keys if key not in options), "ini keys the site does not list"


@pytest.mark.slow
def test_every_gpuenergy_subcommand_and_its_arguments_are_in_the_generated_cli_page(site):
    """... and every command's help fits an 80-column terminal (argparse wraps all but a usage given whole)."""
    env = {**os.environ, "COLUMNS": "80"}
    done = subprocess.run([str(BIN / "gpuenergy"), "--help"], capture_output=True, text=True, timeout=60, env=env)
    assert all(len(line) <= 80 for line in done.stdout.splitlines())
    listed = re.search(r"\{([a-z,]+)\}", done.stdout)
    names = listed.group(1).split(",") if listed else re.findall(r"^    ([a-z]+)\s", done.stdout, re.MULTILINE)
    assert {"info", "restore", "compare", "runs", "budgets", "tune", "fleet"} <= set(names)
    cli = page_text(site, "reference/cli")
    for name in names:
        assert f"gpuenergy {name}" in cli, name
        sub = subprocess.run([str(BIN / "gpuenergy"), name, "--help"], capture_output=True, text=True, timeout=60, env=env)
        assert sub.returncode == 0, sub.stderr
        wide = [line for line in sub.stdout.splitlines() if len(line) > 80]
        assert not wide, f"gpuenergy {name} --help is wider than 80 columns: {wide}"
        for flag in set(re.findall(r"^\s+(--[a-z][a-z-]+)", sub.stdout, re.MULTILINE)) - {"--help"}:
            assert flag in cli, f"gpuenergy {name} {flag} is not in the site"


@pytest.mark.slow
def test_every_error_class_is_documented_with_what_to_do(site):
    from pytest_gpuenergy.errors import GpuEnergyError

    errors = page_text(site, "reference/errors")
    what_to_do = errors.split("Every error and every message")[0]
    bases, names = class_bases(), error_class_names()
    for name in sorted(names):
        assert name in errors, f"{name} is not in the errors page"
        if name != GpuEnergyError.__name__:       # its own row, or a row of the error it specialises
            lineage = [name, *(base for base in bases.get(name, []) if base in names - {"GpuEnergyError"})]
            assert any(cls in what_to_do for cls in lineage), f"{name} has no row in the errors page's 'What to do' table"


def class_bases() -> dict[str, list[str]]:
    """Every class of the package and the names of its base classes (read from the source)."""
    bases: dict[str, list[str]] = {}
    for path in (ROOT / "pytest_gpuenergy").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                bases[node.name] = [b.id if isinstance(b, ast.Name) else getattr(b, "attr", "") for b in node.bases]
    return bases


def error_class_names() -> set[str]:
    """Every class of the package that derives, directly or not, from ``GpuEnergyError`` (read from the source)."""
    bases = class_bases()

    def is_error(name: str, seen: frozenset = frozenset()) -> bool:
        return name == "GpuEnergyError" or any(b not in seen and is_error(b, seen | {name}) for b in bases.get(name, []))

    return {name for name in bases if is_error(name)}


# Exceptions the user never sees: control flow inside the meter, the project's own strict check, and
# the simulated amdsmi's stand-ins for the amdsmi library's own errors (gpu/amd.py translates those, as
# gpu/nvidia.py translates pynvml's; deriving them from GpuEnergyError would make CI unlike hardware),
# with gpu/amd.py's placeholder for an error class an old amdsmi lacks.
INTERNAL_EXCEPTIONS = {"NotYet", "EstimateOutsideBound", "AmdSmiException", "AmdSmiLibraryException",
                       "AmdSmiParameterException", "_NeverRaised"}


def test_every_exception_the_package_defines_is_a_gpu_energy_error():
    """One error tree: a user's ``except GpuEnergyError`` catches every error the plugin raises on purpose."""
    defined = set()
    for path in (ROOT / "pytest_gpuenergy").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef) and any(
                    (b.id if isinstance(b, ast.Name) else "").endswith(("Error", "Exception", "Missing")) for b in node.bases):
                defined.add(node.name)
    outside = sorted(defined - error_class_names() - INTERNAL_EXCEPTIONS)
    assert not outside, f"exceptions outside GpuEnergyError: {outside}"
    from pytest_gpuenergy.errors import FleetUsageError, GpuEnergyError, RayMissing

    assert issubclass(RayMissing, GpuEnergyError) and issubclass(RayMissing, RuntimeError)
    assert issubclass(FleetUsageError, GpuEnergyError) and issubclass(FleetUsageError, ValueError)


# Where the meter writes the notes a figure carries, and the functions that return one.
NOTE_MODULES = (*sorted((ROOT / "pytest_gpuenergy" / "meter").glob("*.py")), ROOT / "pytest_gpuenergy" / "host" / "recorder.py",
                ROOT / "pytest_gpuenergy" / "gpu" / "moments.py")
NOTE_FUNCTIONS = ("_unseen_wraps", "date_marks")


def _template(node: ast.AST) -> str | None:
    """A note's text with ``{}`` for each value put into it."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(v.value if isinstance(v, ast.Constant) else "{}" for v in node.values)
    if isinstance(node, ast.BinOp):
        return (_template(node.left) or "{}") + (_template(node.right) or "{}")
    return None


def _note_texts(tree: ast.AST) -> list[ast.AST]:
    """What is appended to a list of notes, ``*_NOTE`` constants, and what a note function returns."""
    found: list[ast.AST] = []
    for node in ast.walk(tree):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in ("append", "extend")
                and "note" in ast.unparse(node.func.value).lower() and node.args):
            found.append(node.args[0])
        elif isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and (t.id.endswith("_NOTE") or t.id == "short")
                                                  for t in node.targets):
            found.append(node.value)
        elif isinstance(node, ast.FunctionDef) and ("note" in node.name or node.name in NOTE_FUNCTIONS):
            for ret in ast.walk(node):
                if isinstance(ret, ast.Return) and ret.value is not None:
                    values = ret.value.elts if isinstance(ret.value, ast.Tuple) else [ret.value]
                    found += [v.elts[0] if isinstance(v, ast.List) and v.elts else v for v in values]
    return found


def _words(text: str) -> str:
    return " ".join(re.findall(r"[\w'.\-]+", text))


def test_every_note_the_meter_writes_is_on_the_notes_page():
    """A user who finds a note in a result looks it up on ``reference/notes.md``: the first words of
    every note the meter, the host's recorder and the marks can write (its first run of three or more
    words between the values put into it) are there."""
    page = _words((DOCS / "reference" / "notes.md").read_text())
    phrases = {}
    for path in NOTE_MODULES:
        for node in _note_texts(ast.parse(path.read_text())):
            text = _template(node)
            segment = next((seg for seg in (text or "").split("{}") if len(_words(seg).split()) >= 3), None)
            if segment is not None:
                phrases[" ".join(_words(segment).split()[:4])] = f"{path.name}: {text}"
    assert len(phrases) >= 20, phrases                   # the scan still finds the notes
    missing = {phrase: where for phrase, where in phrases.items() if phrase not in page}
    assert not missing, f"notes not on docs/reference/notes.md: {missing}"


@pytest.mark.slow
def test_the_tutorial_works_as_written_on_a_fresh_project(tmp_path):
    """Every file and command of the tutorial's four pages, in order, in an empty folder, on a private
    simulated GPU: each command exits as the page says (0, or 1 where it says `# exits 1`)."""
    project = tmp_path / "project"
    project.mkdir()
    env = user_env(tmp_path)
    outputs: list[str] = []
    commands = 0
    for page in TUTORIAL:
        for lang, title, body in blocks(DOCS / "tutorial" / f"{page}.md"):
            if title:
                (project / title).write_text(body)
                continue
            if lang != "bash":
                continue
            for line in body.splitlines():
                command = line.split("   #")[0].strip()
                if not command or command.startswith("#"):
                    continue
                if command.startswith("pip install"):          # installed already: the README's install command
                    assert command == "pip install pytest-gpuenergy"
                    continue
                expected = 1 if "# exits 1" in line else 0
                done = subprocess.run(["bash", "-c", command], cwd=project, env=env, capture_output=True, text=True, timeout=600)
                output = done.stdout + done.stderr
                assert done.returncode == expected, f"{page}: `{command}` exited {done.returncode}, not {expected}:\n{output[-3000:]}"
                outputs.append(output)
                commands += 1
    assert commands >= 12
    text = "\n".join(outputs)
    assert "2 passed" in text                                             # the suite as it was
    assert "ETS per call at each cap (4 cases)" in text and "(sim)" in text   # energy per test, labelled simulated
    row = re.search(r"^test_large_product\s+([\d.]+) J\s+([\d.]+) (k?)J", text, re.MULTILINE)
    assert row, text[:3000]
    at_60, at_100 = float(row.group(1)), float(row.group(2)) * (1000 if row.group(3) else 1)
    assert 0.70 < at_60 / at_100 < 0.80                                   # "25 % less energy at 60 %", as the page says
    assert "wrote 4 budgets for 2 tests to energy-budgets.toml" in text
    assert "energy budget exceeded: ETS" in text                          # the heavier change, caught by its budget
    assert "ENERGY REGRESSION test_mylib.py::test_large_product" in text  # and by the gate
    assert (project / "energy.md").read_text().strip()
    runs = list((project / ".energy").rglob("*.json"))
    assert len(runs) == 4                                                 # the budgets run and the three baseline runs


@pytest.mark.slow
def test_every_environment_variable_and_simulated_fault_is_documented(site):
    from pytest_gpuenergy.sim.faults import FAULT_NAMES

    page = page_text(site, "reference/environment")
    used = set()
    for path in (ROOT / "pytest_gpuenergy").rglob("*.py"):
        used |= set(re.findall(r"[\"'](GPUENERGY_[A-Z_]+)[\"']", path.read_text()))
    assert {"GPUENERGY_BACKEND", "GPUENERGY_SIM_STATE", "GPUENERGY_SIM_FAULTS"} <= used
    assert not sorted(name for name in used if name not in page), "environment variables the site does not list"
    faults = page.split("Simulated faults")[-1]
    assert not [name for name in FAULT_NAMES if f"{name}" not in faults]


@pytest.mark.slow
def test_every_attribute_of_a_result_is_on_the_fixtures_page(site):
    import dataclasses

    from pytest_gpuenergy.meter.results import EnergyResult, GpuResult

    page = page_text(site, "reference/fixtures")
    for cls in (EnergyResult, GpuResult):
        names = {f.name for f in dataclasses.fields(cls)} | {n for n in dir(cls) if isinstance(getattr(cls, n), property)}
        missing = sorted(name for name in names if not name.startswith("_") and not re.search(rf"\b{name}\b", page))
        assert not missing, (cls.__name__, missing)


def test_the_ci_configurations_in_the_how_tos_parse_and_use_real_options():
    yaml = pytest.importorskip("yaml")
    options = set(re.findall(r"^\s+(--(?:gpu|energy)-[a-z-]+)", subprocess.run(
        [sys.executable, "-m", "pytest", "--help", "-p", "no:cacheprovider"], cwd=ROOT, capture_output=True, text=True,
        timeout=120).stdout, re.MULTILINE))
    found = 0
    for page in sorted((DOCS / "how-to").glob("*.md")):
        for lang, title, body in blocks(page):
            if lang not in ("yaml", "yml"):
                continue
            config = yaml.safe_load(body)
            found += 1
            assert isinstance(config, dict), (page.name, title)
            if title and title.startswith(".github/workflows/"):
                assert config.get("on") or config.get(True), title          # YAML 1.1 reads `on:` as True
                for job in config["jobs"].values():
                    assert job["runs-on"] and all("run" in step or "uses" in step for step in job["steps"]), title
            if title == ".gitlab-ci.yml":
                jobs = {name: job for name, job in config.items() if isinstance(job, dict) and not name.startswith(".")
                        and name not in ("variables", "default")}
                assert jobs and all("script" in job or "extends" in job for job in jobs.values())
            used = set(re.findall(r"(--(?:gpu|energy)-[a-z-]+)", body))
            assert used <= options, f"{page.name}: {sorted(used - options)} are not options of the plugin"
    assert found >= 3


def test_pytest_docs_collects_every_python_example():
    done = subprocess.run([sys.executable, "-m", "pytest", "docs", "--collect-only", "-q", "-p", "no:cacheprovider"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    collected = [line for line in done.stdout.splitlines() if line.startswith("docs/") and "::line:" in line]
    python_blocks = sum(1 for page in DOCS.rglob("*.md") for lang, _, _ in blocks(page) if lang in ("python", "py"))
    assert len(collected) == python_blocks >= 10, done.stdout[-2000:]


def test_a_broken_example_fails_pytest_docs(tmp_path):
    """A snippet that raises, a test file that fails and an expectation the output does not meet each fail."""
    docs = tmp_path / "docs"
    docs.mkdir()
    shutil.copy(DOCS / "conftest.py", docs / "conftest.py")
    (docs / "page.md").write_text(
        "```python\nassert 1 + 1 == 3\n```\n\n"
        '```python title="test_broken.py"\ndef test_broken(energy_meter):\n    with energy_meter:\n        pass\n'
        "    assert energy_meter.result.ets_j < 0\n```\n\n"
        '```python title="test_fine.py"\ndef test_fine():\n    pass\n```\n<!-- pytest: | 2 passed -->\n\n'
        '```python title="test_ok.py"\ndef test_ok():\n    pass\n```\n'
    )
    done = subprocess.run([sys.executable, "-m", "pytest", "docs", "-q", "-p", "no:cacheprovider", "-p", "no:randomly"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300, env={**os.environ, "PYTEST_ADDOPTS": CHILD_ADDOPTS})
    assert done.returncode == 1, done.stdout
    assert "3 failed, 1 passed" in done.stdout, done.stdout[-3000:]


def test_the_readme_is_short_and_its_commands_are_what_ci_runs():
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 150
    quick = readme.split("## Quick start")[1]
    install, main_job, tests = (line.split("#")[0].strip() for line in quick.split("```bash\n")[1].splitlines()[:3])
    ci = (ROOT / ".ci" / "run").read_text()
    assert f"pip install --quiet {install.removeprefix('pip install ')}" in ci
    assert tests == "pytest tests docs -n 2" and re.search(r"^pytest tests docs -n 2$", ci, re.MULTILINE)
    assert re.search(r"^mkdocs build --strict", ci, re.MULTILINE)
    assert main_job == "pytest reference_workloads --gpu-caps=60%,80%,100%"
    for link in re.findall(r"\]\((docs/[^)#]+)", readme):                 # every link into the site is there
        assert (ROOT / link).exists(), link
    home = (DOCS / "index.md").read_text()                               # the site's home page says the same
    assert quick.split("```bash\n")[1].split("```")[0] in home
