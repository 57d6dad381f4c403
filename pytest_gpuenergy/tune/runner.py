"""``gpuenergy tune``: the energy- or EDP-optimal power cap (or SM clock cap) per test, in few runs.

It drives ordinary pytest sessions (subprocesses) of the selected tests with ``--gpu-caps`` (or
``--gpu-clocks``) at settings it chooses (``tune_search.py``) and ``--energy-save`` into a storage
folder, so every figure it uses is an ordinary run document that ``gpuenergy runs`` lists and the
reports plot. Each GPU model among the visible GPUs is tuned on its first GPU (``--gpu-devices=INDEX``).

A round is one pytest session: the first runs the user's selection at both ends of the range,
the second the golden-section points, then one setting per test and round, each test selected
by its node id at its own next setting. On the simulator all sessions share one
``GPUENERGY_SIM_SEED`` (set once if unset): like back-to-back runs on one machine, a kind of step
drifts the same way at every setting, so the settings are compared, not the sessions.
"""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import GpuEnergyError
from ..gpu.clocks import clock_range
from ..gpu.device import Backend, Gpu
from ..gpu.specs import parse_cap, parse_clock
from ..reports.sweep import workload_key
from ..runs.records import CaseEntry, RunDocument
from ..runs.store import RunStore
from ..sim.seed import SEED_ENV
from .defaults import DEFAULT_MAX_SETTINGS, DEFAULT_STEP_W, DEFAULT_TUNE_STORAGE
from .search import Found, best_setting, first_settings, next_setting

CLOCK_STEPS = 20


class TuneError(GpuEnergyError):
    """A tuning session could not run or gave nothing to tune; the message says what to do."""


@dataclass(frozen=True)
class Grid:
    """The settings of one knob on one GPU model, ascending: what ``--gpu-caps``/``--gpu-clocks`` gets."""

    knob: str
    values: tuple[float, ...]          # W or MHz
    default_index: int                 # the default power limit; the highest clock

    @property
    def unit(self) -> str:
        return "W" if self.knob == "power" else "MHz"

    def label(self, index: int) -> str:
        """The case label pytest puts in the test id (``225W``, ``1200MHz``)."""
        value = self.values[index]
        return parse_cap(f"{value:g}").label if self.knob == "power" else parse_clock(f"{value:g}").label

    def option(self, indices: Sequence[int]) -> str:
        flag = "--gpu-caps" if self.knob == "power" else "--gpu-clocks"
        return f"{flag}={','.join(f'{self.values[i]:g}' for i in sorted(set(indices)))}"

    def text(self, index: int) -> str:
        return f"{self.values[index]:g} {self.unit}"

    def range_text(self) -> str:
        step = (f"{self.values[1] - self.values[0]:g} {self.unit} steps" if self.knob == "power" and len(self.values) > 1
                else f"{len(self.values)} settings")
        return f"{self.values[0]:g}-{self.values[-1]:g} {self.unit} in {step}"


def power_grid(gpu: Gpu, step_w: float = DEFAULT_STEP_W) -> Grid:
    """The GPU's whole allowed power range in ``step_w`` steps from its minimum, with its default limit."""
    limits = gpu.limits()
    low, high, default = limits.min_mw / 1000.0, limits.max_mw / 1000.0, limits.default_mw / 1000.0
    values = {low, high, default}
    value = low
    while value < high:
        values.add(round(value, 3))
        value += step_w
    ordered = tuple(sorted(values))
    return Grid("power", ordered, ordered.index(default))


def clock_grid(gpu: Gpu, steps: int = CLOCK_STEPS) -> Grid:
    """About ``steps`` supported SM clocks evenly over the GPU's range, with its maximum."""
    found = clock_range(gpu)
    wanted = [found.min_mhz + (found.max_mhz - found.min_mhz) * k / steps for k in range(steps + 1)]
    values = tuple(sorted({found.snap(w) or found.min_mhz for w in wanted}))
    return Grid("clock", tuple(float(v) for v in values), len(values) - 1)


@dataclass
class TestTuning:
    """One test (one measured region of it) on one GPU model: what was measured where."""

    key: str                                   # the case id without the setting's label
    node_ids: dict[int, str] = field(default_factory=dict)   # grid index -> the pytest node id run there
    entries: dict[int, CaseEntry] = field(default_factory=dict)
    attempted: set[int] = field(default_factory=set)         # asked for, whether or not a figure came back

    def samples(self) -> dict[int, dict[str, list[float]]]:
        return {i: {"ets": e.samples("ets_j"), "edp": e.samples("edp_js"), "time": e.samples("time_s")}
                for i, e in self.entries.items()}

    def means(self, metric: str) -> dict[int, float]:
        return {i: sum(v) / len(v) for i, v in ((i, s[metric]) for i, s in self.samples().items())}

    def node_id_at(self, label: str, known_label: str) -> str:
        """The node id of this test at ``label``: pytest puts the setting's id last in the brackets."""
        base = workload_key(next(iter(self.node_ids.values())), known_label)
        return f"{base[:-1]}-{label}]" if base.endswith("]") else f"{base}[{label}]"


@dataclass(frozen=True)
class TuneOptions:
    targets: tuple[str, ...]                   # what pytest selects in the first round
    pytest_args: tuple[str, ...] = ()          # passed to every session
    knob: str = "power"
    objectives: tuple[str, ...] = ("ets",)
    max_settings: int = DEFAULT_MAX_SETTINGS
    repeat: int = 3
    storage: Path = Path(DEFAULT_TUNE_STORAGE)
    backend: str = "sim"
    step_w: float = DEFAULT_STEP_W
    confidence: float = 0.99


@dataclass
class ModelTuning:
    """Tuning of every selected test on one GPU model."""

    gpu_index: int
    gpu_model: str
    grid: Grid
    tests: dict[str, TestTuning] = field(default_factory=dict)
    sessions: int = 0
    documents: list[RunDocument] = field(default_factory=list)

    def found(self, key: str, metric: str, confidence: float) -> Found:
        test = self.tests[key]
        return best_setting(test.samples(), metric, self.grid.default_index, confidence)


def tune_model(options: TuneOptions, gpu: Gpu, backend: Backend, log=print) -> ModelTuning:
    """Run the search for every selected test on ``gpu``'s model; returns what was measured."""
    grid = power_grid(gpu, options.step_w) if options.knob == "power" else clock_grid(gpu)
    tuning = ModelTuning(gpu.index, gpu.name, grid)
    rounds = first_settings(len(grid.values))
    log(f"gpuenergy tune: GPU {gpu.index} {gpu.name}: {options.knob}, {grid.range_text()}")
    _run_round(options, backend, tuning, {None: rounds[0]}, log)          # the user's selection
    if not tuning.tests:
        raise TuneError(f"no measured case came back from {' '.join(options.targets)} on GPU {gpu.index}: select tests "
                        f"that use the {'gpu_power_cap' if options.knob == 'power' else 'gpu_clock_cap'} and "
                        f"energy_meter fixtures")
    for planned in rounds[1:]:
        _run_round(options, backend, tuning, {key: _within_budget(planned, t, options) for key, t in tuning.tests.items()}, log)
    while True:
        wanted: dict[str | None, list[int]] = {}
        for key, test in tuning.tests.items():
            picks = {pick for metric in options.objectives
                     if (pick := next_setting(test.means(metric), len(grid.values))) is not None}
            wanted[key] = _within_budget(sorted(picks), test, options)
        if not any(wanted.values()):
            return tuning
        _run_round(options, backend, tuning, wanted, log)


def _within_budget(indices: Sequence[int], test: TestTuning, options: TuneOptions) -> list[int]:
    new = [i for i in indices if i not in test.entries and i not in test.attempted]
    left = options.max_settings * len(options.objectives) - len(test.attempted | set(test.entries))
    chosen = new[:max(left, 0)]
    test.attempted.update(chosen)
    return chosen


def _run_round(options: TuneOptions, backend: Backend, tuning: ModelTuning,
               wanted: dict[str | None, list[int]], log) -> None:
    """One pytest session measuring each test at its wanted settings (``None``: the user's selection)."""
    indices = sorted({i for picks in wanted.values() for i in picks})
    if not indices:
        return
    grid = tuning.grid
    if None in wanted:
        targets = list(options.targets)
    else:
        targets = []
        for key, picks in wanted.items():
            assert key is not None     # None (the user's selection) is handled above
            test = tuning.tests[key]
            known_index = next(iter(test.node_ids))
            for i in picks:
                node = test.node_id_at(grid.label(i), grid.label(known_index))
                if node not in targets:
                    targets.append(node)
    store = RunStore(options.storage)
    before = set(store.files())
    command = [sys.executable, "-m", "pytest", *targets, *options.pytest_args, grid.option(indices),
               f"--gpu-devices={tuning.gpu_index}", f"--gpu-backend={options.backend}", "--energy-save",
               f"--energy-storage={options.storage}", f"--energy-repeat={options.repeat}", "-q",
               "-p", "no:cacheprovider"]
    log(f"  session {tuning.sessions + 1}: {', '.join(grid.text(i) for i in indices)} "
        f"({len(targets) if None not in wanted else 'the selected'} test{'s' if len(targets) != 1 else ''})")
    proc = subprocess.run(command, capture_output=True, text=True, env=_session_env())
    tuning.sessions += 1
    if proc.returncode not in (0, 1):
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-12:])
        raise TuneError(f"the pytest session at {grid.option(indices)} exited {proc.returncode}:\n{tail}")
    for path in sorted(set(store.files()) - before):
        doc = store.load(path)
        if doc.gpu_model != tuning.gpu_model:
            continue
        tuning.documents.append(doc)
        _take(doc, tuning)


def _take(doc: RunDocument, tuning: ModelTuning) -> None:
    grid = tuning.grid
    by_label = {grid.label(i): i for i in range(len(grid.values))}
    for entry in doc.cases:
        if entry.gpu_index != tuning.gpu_index:
            continue
        label = entry.cap if grid.knob == "power" else (entry.clock_cap or "")
        index = by_label.get(label)
        if index is None:
            continue
        key = workload_key(entry.case_id, label)
        test = tuning.tests.setdefault(key, TestTuning(key))
        test.entries[index] = entry
        rootdir = doc.options.get("rootdir")
        # node ids are relative to the session's rootdir: absolute, they select the test from any folder
        test.node_ids[index] = str(Path(rootdir) / entry.test) if isinstance(rootdir, str) else entry.test


def _session_env() -> dict[str, str]:
    env = dict(os.environ)
    if not env.get(SEED_ENV, "").strip():
        env[SEED_ENV] = os.environ[SEED_ENV] = str(secrets.randbits(31))
    return env


def models_to_tune(backend: Backend, gpus: str | None) -> list[Gpu]:
    """The first selected GPU of each model (a model's optimum is tuned once)."""
    chosen: dict[str, Gpu] = {}
    for gpu in backend.select(gpus):
        chosen.setdefault(gpu.name, gpu)
    return list(chosen.values())
