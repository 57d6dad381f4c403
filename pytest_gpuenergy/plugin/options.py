"""The plugin's options: each command-line option with its ini form, resolved once per session into
settings, with one validator per setting and a usage error that names the value and what is valid.

The plugin shares pytest's option and ini namespaces with every other plugin and with the project's
own ``conftest.py``, so it claims only names of its own: every flag starts with ``--gpu-`` or
``--energy-``, its ini key is the flag's name (``gpu_caps``), and its argparse destination carries
the plugin's prefix (``gpuenergy_gpu_caps``), so a project's own ``--gpus`` (dest ``gpus``) never
meets it. Ini keys are registered with a type, so that TOML values (``gpu_caps = ["60%", "80%"]``,
``energy_repeat = 3``) arrive as what they are instead of tripping pytest's type checks.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from ..errors import BackendUnavailable, CapSyntaxError, SettingError
from ..gate.settings import (
    DEFAULT_CONFIDENCE,
    GateOptions,
    check_confidence,
    parse_thresholds,
    report_path_problem,
    save_storage_problem,
    step_summary_path,
)
from ..gpu.locks import DEFAULT_TIMEOUT_S
from ..gpu.specs import BACKEND_CHOICES, CapSpec, ClockSpec, default_backend, parse_caps, parse_clocks
from ..meter.defaults import DEFAULT_MIN_TIME_S
from ..runs import DEFAULT_STORAGE, LATEST
from .markers import MAX_MIN_TIME_S, MAX_REPEAT

if TYPE_CHECKING:
    from ..meter.results import Domain

DEST_PREFIX = "gpuenergy_"


@dataclass(frozen=True)
class SessionOptions:
    """The session's GPU settings, parsed: what ``EnergySession`` is started with."""

    backend: str = "auto"
    caps: tuple[CapSpec, ...] = ()
    gpus: str | None = None
    clocks: tuple[ClockSpec, ...] = ()
    min_time_s: float = DEFAULT_MIN_TIME_S
    repeat: int = 1
    lock_timeout_s: float = DEFAULT_TIMEOUT_S
    domains: tuple[Domain, ...] = ("gpu",)   # --energy-domains: gpu, and the host's cpu and dram
    every_test: bool = False            # --energy-all
    top: int | None = None              # --energy-top
    phases: bool = False                # --energy-phases
    budgets_file: Path | None = None    # --energy-budgets


@dataclass(frozen=True)
class Option:
    """One setting: its flag, how its ini value is typed (``kind``), its help, argparse extras."""

    flag: str
    kind: str                       # "list", "int", "float", "bool" or "text"
    help: str
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def ini(self) -> str:
        """The ini key and the name the plugin asks for: ``--gpu-caps`` -> ``gpu_caps``."""
        return self.flag[2:].replace("-", "_")

    @property
    def dest(self) -> str:
        """The argparse destination, prefixed so that no project's option can share it."""
        return DEST_PREFIX + self.ini


OPTIONS = (
    Option("--gpu-backend", "text",
           "GPU access: auto (every library that finds a GPU: NVML, AMD SMI; else the simulator; default, or "
           "$GPUENERGY_BACKEND), nvml, amdsmi, sim",
           {"choices": BACKEND_CHOICES}),
    Option("--gpu-caps", "list",
           "power caps to run every gpu_power_cap test at: watts (150,200), percent of the default "
           "limit (60%,80%), min, max, default. Without it tests run at the current limit", {"metavar": "CAPS"}),
    Option("--gpu-clocks", "list",
           "SM clock caps to run every gpu_clock_cap test at: MHz (1200,1600), percent of the GPU's maximum "
           "SM clock (50%), max. Without it the clocks are left alone", {"metavar": "CLOCKS"}),
    Option("--gpu-devices", "list",
           "GPUs to cap and measure: indices or UUIDs as `gpuenergy info` lists them (default: all visible)",
           {"metavar": "GPUS"}),
    Option("--energy-all", "bool",
           "measure every test's call phase, with no test rewritten (tests that take energy_meter keep their own "
           "regions); with --gpu-caps every test runs once per cap"),
    Option("--energy-top", "int", "list the N tests that used the most energy, and the session's total GPU energy",
           {"metavar": "N"}),
    Option("--energy-phases", "bool",
           "print each test's energy per phase (regions with `with energy_meter.phase(name):` marks): ETS per call "
           "with its bound, time, power, shares of time and energy"),
    Option("--energy-budgets", "text",
           "a TOML file of energy budgets per test, GPU model and cap (write one with `gpuenergy budgets`); "
           "a test's energy_budget marker wins over it", {"metavar": "FILE"}),
    Option("--energy-domains", "list",
           "what to measure beside the GPUs: gpu,cpu,dram adds the host's CPU packages and DRAM through Linux "
           "powercap (RAPL), each with its ETS and the node's total (default gpu)", {"metavar": "DOMAINS"}),
    Option("--energy-min-time", "float",
           f"shortest measured region in seconds for energy_meter.measure() (default {DEFAULT_MIN_TIME_S})",
           {"metavar": "SECONDS"}),
    Option("--energy-repeat", "int", "calls of each measured test per case, for repeated samples (default 1)",
           {"metavar": "N"}),
    Option("--energy-lock-timeout", "float",
           f"seconds a test waits for a GPU another test session holds (default {DEFAULT_TIMEOUT_S:g})",
           {"metavar": "SECONDS"}),
    Option("--energy-storage", "text", f"folder of saved runs, the baselines (default {DEFAULT_STORAGE} in the rootdir)",
           {"metavar": "DIR"}),
    Option("--energy-save", "bool", "save this run's results as a new run document (the next baseline)"),
    Option("--energy-compare", "text",
           "compare with the latest saved run of the same GPU model and backend, or with run REF",
           {"nargs": "?", "const": LATEST, "metavar": "REF"}),
    Option("--energy-fail", "text",
           "fail the session on a regression beyond these changes, e.g. ets:5%,edp:10%,time:5%; a host domain's "
           "ETS as node.ets:5% (with --energy-domains), each marked phase's as phase.ets:10% (implies --energy-compare)",
           {"metavar": "THRESHOLDS"}),
    Option("--energy-confidence", "float",
           f"confidence that a change is real before it counts as a regression (default {DEFAULT_CONFIDENCE})",
           {"metavar": "LEVEL"}),
    Option("--energy-markdown", "text", "write a Markdown report to this file", {"metavar": "FILE"}),
    Option("--energy-html", "text", "write a self-contained HTML report with plots to this file", {"metavar": "FILE"}),
    Option("--energy-json", "text", "write a JSON report to this file", {"metavar": "FILE"}),
)
_BY_INI = {option.ini: option for option in OPTIONS}
# Ini keys without a flag: settings of the project, not of one session, read by `gpuenergy history`
# (``cli/history.py``) for the cost and the CO2e of the energy. Registered so that pytest accepts them.
INI_ONLY = (
    ("energy_price_per_kwh", "float", "price of a kWh of energy, for the cost `gpuenergy history` reports"),
    ("energy_carbon_g_per_kwh", "float", "the grid's g CO2e per kWh, for the emissions `gpuenergy history` reports"),
)
# Settings whose presence asks the session for the GPUs before any test does (see ``asked_for_gpus``).
_GPU_REQUESTS = ("gpu_backend", "gpu_caps", "gpu_clocks", "gpu_devices", "energy_all", "energy_top", "energy_budgets",
                 "energy_domains")


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("gpuenergy", "GPU energy testing (pytest-gpuenergy)")
    for option in OPTIONS:
        extra = dict(option.extra)
        if option.kind == "bool":
            extra.update(action="store_const", const=True)
        # argparse formats help texts with %: a bare % (60%) would crash `pytest --help`.
        group.addoption(option.flag, dest=option.dest, default=None, help=option.help.replace("%", "%%"), **extra)
        parser.addini(option.ini, f"{option.help} (as {option.flag})", **_ini_type(option.kind))
    for name, kind, text in INI_ONLY:
        parser.addini(name, text, **_ini_type(kind))


def _ini_type(kind: str) -> dict[str, Any]:
    """How pytest should read the ini value: lists as lists (a string is split as in a shell), numbers
    as numbers or text where pytest can say so (9.2 and newer; the plugin checks the text itself)."""
    if kind == "list":
        return {"type": "args"}
    if kind == "bool":
        return {"type": "bool"}
    if kind in ("int", "float") and pytest.version_tuple[:2] >= (9, 2):
        return {"type": (int if kind == "int" else float) | str, "default": None}
    return {"type": "string"}


def setting(config: pytest.Config, name: str) -> Any:
    """The value of setting ``name`` (its ini key): the command line wins over the ini file; None
    when neither gives one. A list from the ini file comes back as the comma-separated text the
    command line would give."""
    option = _BY_INI[name]
    value = config.getoption(option.dest)
    if value == "" and option.kind != "list":   # --gpu-caps= has its own message
        raise pytest.UsageError(f"{option.flag}= needs a value after the '='")
    if value is None:
        value = config.getini(name)
        if isinstance(value, (list, tuple)):
            value = ",".join(str(item) for item in value)
    return value if value not in ("", None, []) else None


def asked_for_gpus(config: pytest.Config, gate: GateOptions) -> bool:
    """Whether the session itself asks for the GPUs (an option or ini setting naming them, or a run to
    save, compare or report): then they are opened at the start, and any problem is a usage error.
    Otherwise the plugin stays out of the way until a test uses one of its fixtures."""
    reports = gate.save or gate.compare or gate.markdown or gate.html or gate.json   # not $GITHUB_STEP_SUMMARY alone
    return any(setting(config, name) not in (None, False) for name in _GPU_REQUESTS) or bool(reports)


def parse_settings(config: pytest.Config) -> SessionOptions:
    caps = _knob_setting(config, "gpu_caps", parse_caps)
    clocks = _knob_setting(config, "gpu_clocks", parse_clocks)
    try:
        backend = setting(config, "gpu_backend") or default_backend()
    except BackendUnavailable as exc:
        raise pytest.UsageError(str(exc)) from None
    if backend not in BACKEND_CHOICES:
        raise pytest.UsageError(f"gpu_backend = {backend!r}: choose from {', '.join(BACKEND_CHOICES)}")
    return SessionOptions(
        backend=backend,
        caps=caps,
        clocks=clocks,
        gpus=setting(config, "gpu_devices"),
        min_time_s=_number_setting(config, "energy_min_time", float, DEFAULT_MIN_TIME_S, minimum=0.0, maximum=MAX_MIN_TIME_S),
        repeat=_number_setting(config, "energy_repeat", int, 1, minimum=1, maximum=MAX_REPEAT),
        lock_timeout_s=_number_setting(config, "energy_lock_timeout", float, DEFAULT_TIMEOUT_S, minimum=0.0, maximum=1e7),
        every_test=bool(setting(config, "energy_all")),
        top=_number_setting(config, "energy_top", int, None, minimum=1, maximum=1_000_000),
        phases=bool(setting(config, "energy_phases")),
        budgets_file=_path_setting(config, "energy_budgets"),
        domains=_domains_setting(config),
    )


def _domains_setting(config: pytest.Config) -> tuple[Domain, ...]:
    try:
        return parse_domains(setting(config, "energy_domains"))
    except ValueError as exc:
        raise pytest.UsageError(str(exc)) from None


def parse_domains(text: str | None) -> tuple[Domain, ...]:
    """``--energy-domains=gpu,cpu,dram``: the domains to measure, in that order (None: the GPUs only).
    The GPUs are always measured (``gpu`` must be named); ``node`` is their total, never asked for."""
    if text is None:
        return ("gpu",)
    names = [item.strip().lower() for item in str(text).split(",") if item.strip()]
    unknown = [name for name in names if name not in ("gpu", "cpu", "dram")]
    if unknown or "gpu" not in names:
        problem = f"unknown domain {unknown[0]!r}" if unknown else "gpu is always measured and must be named"
        raise ValueError(f"--energy-domains={text}: {problem}; choose from gpu,cpu,dram (e.g. gpu,cpu,dram)")
    return tuple(domain for domain in ("gpu", "cpu", "dram") if domain in names)


def _path_setting(config: pytest.Config, name: str) -> Path | None:
    """A file setting: on the command line relative to where pytest was started, in the ini file
    relative to that file's folder, as pytest's own paths are."""
    value = setting(config, name)
    if value is None:
        return None
    path = Path(str(value)).expanduser()
    if path.is_absolute():
        return path
    typed = config.getoption(_BY_INI[name].dest) is not None
    base = config.invocation_params.dir if typed else (config.inipath.parent if config.inipath else config.rootpath)
    return base / path


def _knob_setting(config: pytest.Config, name: str, parse: Any) -> tuple:
    """``--gpu-caps`` / ``--gpu-clocks`` parsed; typed as ``--gpu-caps=`` with nothing after it is a
    mistake (its own message), not "no caps"."""
    text = "" if config.getoption(_BY_INI[name].dest) == "" else setting(config, name)
    try:
        return tuple(parse(text)) if text is not None else ()
    except CapSyntaxError as exc:
        raise pytest.UsageError(str(exc)) from None


def _number_setting(config: pytest.Config, name: str, kind: type, default: Any, *, minimum: float, maximum: float) -> Any:
    flag = _BY_INI[name].flag
    text = setting(config, name)
    if text is None:
        return default
    if isinstance(text, bool) or (kind is int and isinstance(text, float)):
        raise pytest.UsageError(f"{flag}={text!r} is not a {'whole ' if kind is int else ''}number")
    try:
        value = kind(str(text).strip())
    except ValueError:
        raise pytest.UsageError(f"{flag}={text!r} is not a {'whole ' if kind is int else ''}number") from None
    if not minimum <= value <= maximum:  # also rejects nan
        raise pytest.UsageError(f"{flag}={text!r} must lie between {minimum:g} and {maximum:g}")
    return value


def _confidence_setting(config: pytest.Config) -> float:
    text = setting(config, "energy_confidence")
    try:
        return DEFAULT_CONFIDENCE if text is None else check_confidence(str(text), source="--energy-confidence")
    except SettingError as exc:
        raise pytest.UsageError(str(exc)) from None


def resolve_gate_options(config: pytest.Config) -> GateOptions:
    fail = setting(config, "energy_fail")
    try:
        thresholds = parse_thresholds(fail) if fail is not None else {}
    except ValueError as exc:
        raise pytest.UsageError(str(exc)) from None
    compare = setting(config, "energy_compare")
    if fail is not None and compare is None:
        compare = LATEST
    storage = Path(setting(config, "energy_storage") or DEFAULT_STORAGE)

    def report(name: str) -> Path | None:
        value = setting(config, name)
        if not value:
            return None
        problem = report_path_problem(f"--{name.replace('_', '-')}", Path(value))
        if problem is not None:
            raise pytest.UsageError(problem)
        return Path(value)

    storage = storage if storage.is_absolute() else config.rootpath / storage
    save = bool(setting(config, "energy_save"))
    problem = save_storage_problem(storage) if save else None
    if problem is not None:
        raise pytest.UsageError(problem)
    return GateOptions(
        storage=storage,
        save=save,
        compare=compare,
        thresholds=thresholds,
        confidence=_confidence_setting(config),
        markdown=report("energy_markdown"),
        html=report("energy_html"),
        json=report("energy_json"),
        step_summary=step_summary_path(),
    )
