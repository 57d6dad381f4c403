"""What a fleet run will do, decided before anything starts: plain Python, no Ray.

Three questions are answered here, each from plain data so that they are unit-tested without a
cluster:

* **Which GPU models does the cluster offer?** ``inventory(nodes)`` reads the node list that
  ``ray.nodes()`` returns. Ray labels a node's GPUs with one resource ``accelerator_type:<MODEL>``;
  a node with several such labels (only a fake local cluster has one) must say how many GPUs each
  model has with ``gpuenergy_gpus:<MODEL>`` resources, which the fleet's own local cluster does.
* **Which tasks run?** ``plan_tasks`` makes one task per GPU model (``--per-model``, each holding
  ``gpus_per_task`` GPUs), or one per model holding every GPU of its largest node with one
  pytest-xdist worker per GPU (``--per-gpu``).
* **Which of the user's pytest arguments belong to the driver?** The gate (``--energy-compare``,
  ``--energy-fail``, ``--energy-save``, the reports, the storage folder) runs once on the driver
  over every model's run, so ``split_pytest_args`` takes those out of what the tasks run.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import FleetUsageError
from ..gate.settings import (
    DEFAULT_CONFIDENCE,
    check_confidence,
    parse_thresholds,
    report_path_problem,
    save_storage_problem,
)
from ..runs import DEFAULT_STORAGE, LATEST
from ..sim.models import parse_model_list

ACCELERATOR_PREFIX = "accelerator_type:"
GPU_COUNT_PREFIX = "gpuenergy_gpus:"     # GPUs of one model on a node that has several (a fake local cluster)

PER_MODEL, PER_GPU = "per-model", "per-gpu"
PROGRESS_EVERY_S = 30.0        # the driver's default pause between progress lines
START_TIMEOUT_S = 900.0        # how long a model's task may take to find its GPUs, by default
EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT, EXIT_INCOMPLETE, EXIT_NO_TESTS = 0, 1, 2, 3, 5   # gpuenergy fleet's exit codes


# -- the cluster's GPUs ------------------------------------------------------------------------------

@dataclass(frozen=True)
class NodeGpus:
    """The GPUs of one model on one Ray node."""

    node_id: str
    address: str
    hostname: str
    model: str
    gpus: int

    def describe(self) -> str:
        return node_text(self.hostname, self.address, self.node_id)


def node_text(hostname: str | None, address: str | None, node_id: str | None) -> str:
    """``gpu-07 (10.0.0.7, node 3f2a9c01d4e5)``: how a node is named in progress and errors."""
    parts = [p for p in (address, f"node {node_id[:12]}" if node_id else None) if p]
    inner = ", ".join(parts)
    if hostname and hostname != address:
        return f"{hostname} ({inner})" if inner else hostname
    return inner or "an unknown node"


@dataclass(frozen=True)
class ModelGpus:
    """Every node that has GPUs of one model."""

    model: str
    nodes: tuple[NodeGpus, ...]

    @property
    def total_gpus(self) -> int:
        return sum(n.gpus for n in self.nodes)

    @property
    def largest_node_gpus(self) -> int:
        return max(n.gpus for n in self.nodes)

    def describe(self) -> str:
        nodes = len(self.nodes)
        return f"{self.model} ({self.total_gpus} GPU{'s' if self.total_gpus != 1 else ''} on {nodes} node{'s' if nodes != 1 else ''})"


@dataclass(frozen=True)
class Inventory:
    models: tuple[ModelGpus, ...]
    untyped_gpus: int = 0      # GPUs on nodes that carry no accelerator type: not schedulable by model
    counted: frozenset[str] = frozenset()   # models whose GPUs are counted by gpuenergy_gpus: resources

    def model(self, name: str) -> ModelGpus | None:
        return next((m for m in self.models if m.model == name), None)


def inventory(nodes: Iterable[Mapping[str, Any]]) -> Inventory:
    """The GPU models of a cluster, from ``ray.nodes()`` (dead nodes and nodes without GPUs left out)."""
    found: dict[str, list[NodeGpus]] = {}
    untyped = 0
    counted: set[str] = set()
    for node in nodes:
        if not (node.get("Alive") or node.get("alive")):
            continue
        resources = node.get("Resources") or {}
        gpus = _whole(resources.get("GPU", 0))
        if gpus <= 0:
            continue
        models = sorted(key[len(ACCELERATOR_PREFIX):] for key in resources if key.startswith(ACCELERATOR_PREFIX))
        node_id = str(node.get("NodeID", "?"))
        address = str(node.get("NodeManagerAddress", "?"))
        hostname = str(node.get("NodeManagerHostname", ""))
        if not models:
            untyped += gpus
            continue
        if len(models) == 1 and f"{GPU_COUNT_PREFIX}{models[0]}" not in resources:
            found.setdefault(models[0], []).append(NodeGpus(node_id, address, hostname, models[0], gpus))
            continue
        for model in models:   # several models on one node: each must be counted
            count = resources.get(f"{GPU_COUNT_PREFIX}{model}")
            if count is None:
                raise FleetUsageError(
                    f"node {address} ({node_id[:12]}) offers GPUs of several models ({', '.join(models)}) but does not "
                    f"say how many of each; start it with the resources {GPU_COUNT_PREFIX}<MODEL>=N for each model"
                )
            counted.add(model)
            found.setdefault(model, []).append(NodeGpus(node_id, address, hostname, model, _whole(count)))
    return Inventory(tuple(ModelGpus(m, tuple(ns)) for m, ns in sorted(found.items())), untyped, frozenset(counted))


def _whole(value: Any) -> int:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return 0
    return int(math.floor(number + 1e-9)) if math.isfinite(number) and number > 0 else 0


# -- a local cluster of simulated GPUs ---------------------------------------------------------------

@dataclass(frozen=True)
class LocalCluster:
    """What ``ray.init`` gets for a local try-out: fake GPUs labelled with simulated models."""

    models: tuple[str, ...]      # one entry per GPU, as GPUENERGY_SIM_GPUS lists them

    @classmethod
    def from_sim_gpus(cls, text: str) -> LocalCluster:
        try:
            return cls(parse_model_list(text))
        except ValueError as exc:
            raise FleetUsageError(f"GPUENERGY_SIM_GPUS: {exc}") from None

    @property
    def counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for model in self.models:
            counts[model] = counts.get(model, 0) + 1
        return counts

    def ray_resources(self) -> dict[str, float]:
        resources: dict[str, float] = {}
        for model, count in self.counts.items():
            resources[f"{ACCELERATOR_PREFIX}{model}"] = 1.0
            resources[f"{GPU_COUNT_PREFIX}{model}"] = float(count)
        return resources

    def describe(self) -> str:
        return ", ".join(f"{count} {model}" for model, count in self.counts.items())


def sim_model_for(accelerator_type: str) -> str:
    """The simulator's model for a Ray accelerator type (``A100-80G`` -> ``A100``), or a usage error."""
    for candidate in (accelerator_type, accelerator_type.split("-", maxsplit=1)[0]):
        try:
            return parse_model_list(candidate)[0]
        except ValueError:
            continue
    raise FleetUsageError(
        f"--simulate: the simulator has no GPU model for Ray's accelerator type {accelerator_type!r}; "
        f"choose models it has with --models (H100, A100, V100, T4, K80)"
    )


# -- the tasks ----------------------------------------------------------------------------------------

@dataclass(frozen=True)
class TaskSpec:
    """One Ray task: the suite on ``num_gpus`` GPUs of ``model``, as it is sent to the node."""

    model: str                      # Ray's accelerator type
    num_gpus: int
    pytest_args: tuple[str, ...]
    xdist_workers: int = 0          # 0: no pytest-xdist; N: ``-n N`` (one worker per GPU)
    simulate: bool = False          # run on simulated GPUs of this model instead of the node's own
    env: tuple[tuple[str, str], ...] = ()   # variables passed from the driver (GPUENERGY_SIM_SEED, ...)
    counted: bool = False           # the model's GPUs are counted by gpuenergy_gpus: resources

    @property
    def label(self) -> str:
        return f"{self.model} x{self.num_gpus}"

    def ray_resources(self) -> dict[str, float]:
        """Custom resources the task asks for besides ``num_gpus`` and ``accelerator_type``."""
        return {f"{GPU_COUNT_PREFIX}{self.model}": float(self.num_gpus)} if self.counted else {}


def plan_tasks(found: Inventory, mode: str, pytest_args: Sequence[str], *, gpus_per_task: int = 1,
               models: Sequence[str] | None = None, simulate: bool = False,
               env: Mapping[str, str] | None = None) -> list[TaskSpec]:
    """One task per GPU model (in name order); a usage error when there is nothing to run or too few GPUs."""
    if mode not in (PER_MODEL, PER_GPU):
        raise FleetUsageError(f"unknown fan-out {mode!r}: use --per-model or --per-gpu")
    if gpus_per_task < 1:
        raise FleetUsageError(f"--gpus-per-task={gpus_per_task} must be 1 or more")
    chosen = list(found.models)
    if models:
        names = {m.model.lower(): m for m in found.models}
        missing = [name for name in models if name.lower() not in names]
        if missing:
            offered = ", ".join(m.model for m in found.models) or "none"
            raise FleetUsageError(f"--models: the cluster has no GPUs of {', '.join(missing)} (it offers: {offered})")
        chosen = [names[name.lower()] for name in dict.fromkeys(models)]
    if not chosen:
        hint = (f" ({found.untyped_gpus} GPU(s) carry no accelerator type: start those nodes with "
                f"--resources='{{\"{ACCELERATOR_PREFIX}<MODEL>\": 1}}')") if found.untyped_gpus else ""
        raise FleetUsageError(
            "the Ray cluster offers no GPU of a known model" + hint +
            "; for a local try-out without GPUs set GPUENERGY_SIM_GPUS=H100,A100"
        )
    if simulate:
        for model in chosen:
            sim_model_for(model.model)
    tasks = []
    for model in chosen:
        if mode == PER_GPU:
            gpus, workers = model.largest_node_gpus, model.largest_node_gpus
        else:
            gpus, workers = gpus_per_task, 0
            if gpus > model.largest_node_gpus:
                raise FleetUsageError(
                    f"--gpus-per-task={gpus_per_task}: no node has {gpus_per_task} GPUs of {model.model} "
                    f"(the largest has {model.largest_node_gpus})"
                )
        tasks.append(TaskSpec(model.model, gpus, tuple(pytest_args), workers if workers > 1 else 0, simulate,
                              tuple(sorted((env or {}).items())), model.model in found.counted))
    return tasks


# -- the user's pytest arguments: the gate's stay on the driver ---------------------------------------

_VALUED = {
    "--energy-storage": "storage", "--energy-fail": "fail", "--energy-confidence": "confidence",
    "--energy-markdown": "markdown", "--energy-html": "html", "--energy-json": "json",
}
_FLAGS = {"--energy-save": "save"}
_OPTIONAL_VALUE = {"--energy-compare": "compare"}     # --energy-compare[=REF]
# Anything the task's own pytest could still take from an ini file is switched off with -o.
NEUTRAL_INI = ("energy_compare", "energy_fail", "energy_markdown", "energy_html", "energy_json", "energy_save")


@dataclass(frozen=True)
class FleetGate:
    """The gate's settings, taken from the pytest arguments; applied once, on the driver."""

    storage: Path = Path(DEFAULT_STORAGE)
    save: bool = False
    compare: str | None = None
    thresholds: dict[str, float] = field(default_factory=dict)
    confidence: float = DEFAULT_CONFIDENCE
    markdown: Path | None = None
    html: Path | None = None
    json: Path | None = None


def split_pytest_args(args: Sequence[str], cwd: Path | None = None) -> tuple[FleetGate, list[str]]:
    """The gate's settings and the arguments the tasks run with (the gate's removed).

    Both spellings are understood (``--energy-fail=ets:5%`` and ``--energy-fail ets:5%``); a value
    that is malformed is a ``FleetUsageError`` before anything starts, as pytest would make it.
    """
    values: dict[str, Any] = {}
    rest: list[str] = []
    items = list(args)
    i = 0
    while i < len(items):
        arg = items[i]
        name, eq, value = arg.partition("=")
        if arg == "--":
            rest += items[i:]
            break
        if name in _VALUED:
            if not eq:
                if i + 1 >= len(items):
                    raise FleetUsageError(f"{name} needs a value")
                value, i = items[i + 1], i + 1
            if not value:
                raise FleetUsageError(f"{name}= needs a value after the '='")
            values[_VALUED[name]] = value
        elif name in _FLAGS and not eq:
            values[_FLAGS[name]] = True
        elif name in _OPTIONAL_VALUE:
            values[_OPTIONAL_VALUE[name]] = value if eq else LATEST
            if eq and not value:
                raise FleetUsageError(f"{name}= needs a run id after the '=' (or leave the '=' out for the latest run)")
        else:
            rest.append(arg)
        i += 1
    return _gate(values, cwd or Path.cwd()), rest


def _gate(values: dict[str, Any], cwd: Path) -> FleetGate:
    try:
        thresholds = parse_thresholds(values["fail"]) if "fail" in values else {}
    except ValueError as exc:
        raise FleetUsageError(str(exc)) from None
    confidence = DEFAULT_CONFIDENCE
    if "confidence" in values:
        text = str(values["confidence"]).strip()
        try:
            number = float(text[:-1]) / 100 if text.endswith("%") else float(text)
            confidence = check_confidence(number, source="--energy-confidence")
        except ValueError:
            raise FleetUsageError(f"--energy-confidence={text!r} is not a confidence level; give a number "
                                  f"between 0.5 and 1, e.g. 0.99") from None
    compare = values.get("compare") or (LATEST if thresholds or "fail" in values else None)

    def path(key: str) -> Path | None:
        return (cwd / values[key]) if key in values else None

    def report(key: str) -> Path | None:
        """A report's path, checked before the fleet starts (said after it, every task's time was lost)."""
        found = path(key)
        problem = report_path_problem(f"--energy-{key}", found) if found is not None else None
        if problem is not None:
            raise FleetUsageError(problem)
        return found

    storage, save = path("storage") or cwd / DEFAULT_STORAGE, bool(values.get("save"))
    problem = save_storage_problem(storage) if save else None
    if problem is not None:
        raise FleetUsageError(problem)
    return FleetGate(
        storage=storage, save=save, compare=compare,
        thresholds=thresholds, confidence=confidence, markdown=report("markdown"), html=report("html"), json=report("json"),
    )
