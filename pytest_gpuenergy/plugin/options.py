"""The plugin's options: each command-line option with its ini form, resolved once per session into
settings, with one validator per setting and a usage error that names the value and what is valid."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ..errors import CapSyntaxError, SettingError
from ..gate.ci import GateOptions, step_summary_path
from ..gate.settings import DEFAULT_CONFIDENCE, check_confidence, parse_thresholds
from ..gpu.capping import parse_caps
from ..gpu.clocks import parse_clocks
from ..gpu.device import BACKEND_CHOICES, BackendUnavailable, default_backend
from ..gpu.locks import DEFAULT_TIMEOUT_S
from ..meter import DEFAULT_MIN_TIME_S
from ..runs.store import DEFAULT_STORAGE, LATEST
from .clocks import gpu_clock_cap  # noqa: F401  (the fixture, registered with this plugin)
from .session import SessionOptions

MAX_REPEAT = 10_000            # as --energy-repeat
MAX_MIN_TIME_S = 3600.0        # as --energy-min-time


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("gpuenergy", "GPU energy testing (pytest-gpuenergy)")

    def add(flag: str, ini: str, help_text: str, ini_type: Any = None, **kwargs: Any) -> None:
        group.addoption(flag, dest=ini, default=None, help=help_text, **kwargs)
        parser.addini(ini, help_text, type=ini_type)

    add("--gpu-backend", "gpu_backend",
        "GPU access: auto (NVML where a GPU is found, else the simulator; default, or $GPUENERGY_BACKEND), nvml, sim",
        choices=BACKEND_CHOICES)
    add("--gpu-caps", "gpu_caps",
        "power caps to run every gpu_power_cap test at: watts (150,200), percent of the default "
        "limit (60%,80%), min, max, default. Without it tests run at the current limit")
    add("--gpu-clocks", "gpu_clocks",
        "SM clock caps to run every gpu_clock_cap test at: MHz (1200,1600), percent of the GPU's maximum "
        "SM clock (50%), max. Without it the clocks are left alone")
    add("--gpus", "gpus",
        "GPUs to cap and measure: NVML indices or UUIDs as `gpuenergy info` lists them (default: all visible)")
    add("--energy-min-time", "energy_min_time",
        f"shortest measured region in seconds for energy_meter.measure() (default {DEFAULT_MIN_TIME_S})")
    add("--energy-repeat", "energy_repeat",
        "calls of each measured test per case, for repeated samples (default 1)")
    add("--energy-lock-timeout", "energy_lock_timeout",
        f"seconds a test waits for a GPU another test session holds (default {DEFAULT_TIMEOUT_S:g})")
    add("--energy-storage", "energy_storage",
        f"folder of saved runs, the baselines (default {DEFAULT_STORAGE} in the rootdir)")
    group.addoption("--energy-save", dest="energy_save", action="store_const", const=True, default=None,
                    help="save this run's results as a new run document (the next baseline)")
    parser.addini("energy_save", "save every run's results (as --energy-save)", type="bool")
    add("--energy-compare", "energy_compare",
        "compare with the latest saved run of the same GPU model and backend, or with run REF",
        nargs="?", const=LATEST, metavar="REF")
    add("--energy-fail", "energy_fail",
        "fail the session on a regression beyond these changes, e.g. ets:5%,edp:10%,time:5% "
        "(implies --energy-compare)")
    add("--energy-confidence", "energy_confidence",
        f"confidence that a change is real before it counts as a regression (default {DEFAULT_CONFIDENCE})")
    add("--energy-markdown", "energy_markdown", "write a Markdown report to this file")
    add("--energy-html", "energy_html", "write a self-contained HTML report with plots to this file")
    add("--energy-json", "energy_json", "write a JSON report to this file")


def setting(config: pytest.Config, name: str) -> Any:
    value = config.getoption(name)
    if value == "" and name not in ("gpu_caps", "gpu_clocks"):   # --gpu-caps= has its own message
        raise pytest.UsageError(f"--{name.replace('_', '-')}= needs a value after the '='")
    if value is None:
        value = config.getini(name)
    return value if value not in ("", None, []) else None


def parse_settings(config: pytest.Config) -> SessionOptions:
    caps_text = setting(config, "gpu_caps")
    if config.getoption("gpu_caps") == "":
        caps_text = ""  # typed as --gpu-caps= with nothing after it: a mistake, not "no caps"
    try:
        caps = tuple(parse_caps(caps_text)) if caps_text is not None else ()
    except CapSyntaxError as exc:
        raise pytest.UsageError(str(exc)) from None
    clocks_text = "" if config.getoption("gpu_clocks") == "" else setting(config, "gpu_clocks")
    try:
        clocks = tuple(parse_clocks(clocks_text)) if clocks_text is not None else ()
    except CapSyntaxError as exc:
        raise pytest.UsageError(str(exc)) from None
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
        gpus=setting(config, "gpus"),
        min_time_s=_number_setting(config, "energy_min_time", float, DEFAULT_MIN_TIME_S, minimum=0.0, maximum=MAX_MIN_TIME_S),
        repeat=_number_setting(config, "energy_repeat", int, 1, minimum=1, maximum=MAX_REPEAT),
        lock_timeout_s=_number_setting(config, "energy_lock_timeout", float, DEFAULT_TIMEOUT_S, minimum=0.0, maximum=1e7),
    )


def _number_setting(config: pytest.Config, name: str, kind: type, default: Any, *, minimum: float, maximum: float) -> Any:
    flag = "--" + name.replace("_", "-")
    text = setting(config, name)
    if text is None:
        return default
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
        return Path(value) if value else None

    return GateOptions(
        storage=storage if storage.is_absolute() else config.rootpath / storage,
        save=bool(setting(config, "energy_save")),
        compare=compare,
        thresholds=thresholds,
        confidence=_confidence_setting(config),
        markdown=report("energy_markdown"),
        html=report("energy_html"),
        json=report("energy_json"),
        step_summary=step_summary_path(),
    )
