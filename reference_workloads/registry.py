"""The registry of reference workloads and the generic training/inference loop they share.

Each workload module (``reference_workloads/models/*.py``) subclasses :class:`Workload`, fills in
four hooks (``make_model``, ``make_batch``, ``make_optimizer``, ``compute_loss``) and registers the
class with :func:`register`.  Everything else (seeding, the fixed synthetic batch, the step loop)
lives here, so that all nine workloads are measured the same way.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any, ClassVar

import torch
from torch import nn

from pytest_gpuenergy.sim import GpuWork, declare_work, simulating
from pytest_gpuenergy.sim.counting import count_step
from pytest_gpuenergy.sim.work import StepWork, declare_host_time

SIZES: tuple[str, ...] = ("tiny", "full")
MODES: tuple[str, ...] = ("train", "infer")
#: Each workload's step's GPU work per mode and size, counted by count_work.py: under the GPU
#: simulator a workload declares the work of its ``sim_size`` at every step.
DECLARED_WORK_FILE = Path(__file__).with_name("declared_work.json")

#: A workload's fixed batch: ``(inputs, targets)``; either part may itself be a tuple of tensors.
Batch = tuple[Any, Any]

# Per-step seeds are derived from the workload seed so that dropout masks and VAE noise repeat
# run to run but differ from step to step.
_STEP_SEED_STRIDE = 1_000_003


@dataclass(frozen=True)
class WorkloadSpec:
    """What the energy suite and the simulator need to know about a workload, without building it."""

    name: str
    description: str
    compute_bound: float
    fathom_batch: int
    sizes: tuple[str, ...] = SIZES
    modes: tuple[str, ...] = MODES

    def __post_init__(self) -> None:
        if not 0.0 <= self.compute_bound <= 1.0:
            raise ValueError(f"compute_bound must lie in [0, 1], got {self.compute_bound!r} for {self.name!r}")
        if self.fathom_batch <= 0:
            raise ValueError(f"fathom_batch must be positive, got {self.fathom_batch!r} for {self.name!r}")


def check_choice(what: str, value: object, valid: Sequence[str]) -> None:
    """Raise ``ValueError`` naming the bad value and listing the valid ones."""
    if value not in valid:
        raise ValueError(f"unknown {what} {value!r}; valid {what}s: {', '.join(valid)}")


def _to_device(data: Any, device: torch.device) -> Any:
    """Move a (possibly nested) tuple of tensors to ``device``, keeping its structure and type."""
    if isinstance(data, torch.Tensor):
        return data.to(device)
    if isinstance(data, tuple):
        moved = [_to_device(item, device) for item in data]
        return type(data)(*moved) if hasattr(data, "_fields") else tuple(moved)
    return data


class Workload:
    """One model, one size, one mode, on one device, with a fixed seeded synthetic batch.

    Subclasses implement the hooks below.  ``step()`` is one optimiser step in ``"train"`` mode and
    one forward pass under ``torch.inference_mode()`` in ``"infer"`` mode (the model is put in
    ``eval()`` so that dropout is off and batch-norm statistics are frozen); both return the loss.
    """

    spec: ClassVar[WorkloadSpec]
    #: Clip the global gradient norm to this value before each update (seq2seq: 5).
    grad_clip_norm: ClassVar[float | None] = None
    #: Whether a training step draws random numbers (dropout, the VAE's noise); such steps reseed
    #: the global generator from the workload seed and the step index so that runs repeat.
    stochastic_train_step: ClassVar[bool] = False

    def __init__(self, size: str, mode: str, device: torch.device | str, seed: int, sim_size: str | None = None) -> None:
        check_choice("size", size, self.spec.sizes)
        check_choice("mode", mode, self.spec.modes)
        if sim_size is not None:
            check_choice("simulated size", sim_size, self.spec.sizes)
        self.size = size
        self.sim_size = sim_size or size
        self.mode = mode
        self.device = torch.device(device)
        self.seed = seed
        self._steps_done = 0
        self._work: StepWork | None = None     # this step's GPU work by phase, counted once (simulator only)
        self._undeclared: dict[str, GpuWork | None] = {}     # the running step's phases not declared yet
        self.model: nn.Module = _seeded_model(type(self), size, seed).to(self.device)
        self.model.train(mode == "train")
        data_generator = torch.Generator().manual_seed(seed)
        self._batch: Batch = _to_device(self.make_batch(data_generator), self.device)
        self.optimizer: torch.optim.Optimizer | None = self.make_optimizer() if mode == "train" else None
        self.setup()
        self._declare_at_each_phase()

    # ----------------------------------------------------------------- hooks for subclasses
    @classmethod
    def make_model(cls, size: str) -> nn.Module:
        """Build the network for ``size`` on the current default device (CPU, or meta for counting)."""
        raise NotImplementedError

    def make_batch(self, generator: torch.Generator) -> Batch:
        """Generate the fixed synthetic ``(inputs, targets)`` batch on the CPU from ``generator``."""
        raise NotImplementedError

    def make_optimizer(self) -> torch.optim.Optimizer:
        """The optimiser of the paper / Fathom configuration for ``self.size``."""
        raise NotImplementedError

    def compute_loss(self, batch: Batch) -> torch.Tensor:
        """Forward pass and loss on ``batch`` (a scalar tensor)."""
        raise NotImplementedError

    def setup(self) -> None:
        """Extra state built after the model, batch and optimiser (the DQN's target network)."""

    def after_update(self) -> None:
        """Called after every optimiser step (the DQN syncs its target network here)."""

    # ----------------------------------------------------------------- the public interface
    def batch(self) -> Batch:
        """The fixed, seeded synthetic batch ``(inputs, targets)`` this workload trains on."""
        return self._batch

    def step(self) -> float:
        """One training step (forward, loss, backward, update) or one inference forward pass.

        Under the GPU simulator the step also declares its GPU work, so that the simulated GPU runs
        it the same on any host: the work of ``sim_size`` (counted from this step's shapes on its
        first call when that is the size that runs, else from ``declared_work.json``), phase by
        phase where each phase runs (``_declare_at_each_phase``). The counting call declares it all
        at its end. The step keeps its batch on the device and declares no host-only time (a loop
        that loads data can: ``declare_host_time``); ``declared_work.json``'s ``host_s`` is 0.
        """
        if not simulating():
            loss = self._one_step()
        elif self._work is None and self.sim_size == self.size:
            self._work, loss = count_step(self._one_step, self.model)
            self._undeclared = self._work.phases()
            declare_host_time(self._work.host_s)
        else:
            self._work = self._work or counted_phases(self.spec.name, self.mode, self.sim_size).with_total(
                counted_work(self.spec.name, self.mode, self.sim_size))
            declare_host_time(self._work.host_s)
            self._undeclared = self._work.phases()
            self._declare("other")
            try:
                loss = self._one_step()
            except BaseException:
                self._undeclared = {}
                raise
        for name in list(self._undeclared):     # phases whose point never came (counted, or skipped)
            self._declare(name)
        self._steps_done += 1
        return float(loss.item())

    def step_without_declaring(self) -> torch.Tensor:
        """One step's loss tensor, declaring nothing (what ``count_work.py`` counts)."""
        return self._one_step()

    @property
    def work(self) -> GpuWork | None:
        """The GPU work of one step, once counted (under the simulator)."""
        return self._work.total if self._work is not None else None

    @property
    def step_work(self) -> StepWork | None:
        """The GPU work of one step by phase, and its host-only time, once counted (under the simulator)."""
        return self._work

    def _declare_at_each_phase(self) -> None:
        """Hooks that declare each phase's work where it runs, so that phase marks
        (``energy_meter.watch(model, optimizer)``) fall between them: the forward's when the model's
        forward returns, the backward's at the first gradient it accumulates, the update's when the
        optimizer's step returns. They are the model's and optimizer's first hooks, so they run
        before hooks added later (a watch's end marks); a watch's start marks come before these points."""
        self.model.register_forward_hook(lambda *_: self._declare("forward"))
        for parameter in self.model.parameters():
            if parameter.requires_grad:
                parameter.register_post_accumulate_grad_hook(lambda _: self._declare("backward"))
        if self.optimizer is not None:
            self.optimizer.register_step_post_hook(lambda *_: self._declare("update"))

    def _declare(self, phase: str) -> None:
        work = self._undeclared.pop(phase, None)
        if work is not None:
            declare_work(work)

    def _one_step(self) -> torch.Tensor:
        if self.mode == "infer":
            with torch.inference_mode():
                return self.compute_loss(self._batch)
        return self._train_step()

    def run(self, steps: int) -> list[float]:
        """``steps`` consecutive steps; the losses, in order."""
        return [self.step() for _ in range(steps)]

    # ----------------------------------------------------------------- internals
    def _train_step(self) -> torch.Tensor:
        assert self.optimizer is not None
        if self.stochastic_train_step:
            _seed_generators(self.device, (self.seed * _STEP_SEED_STRIDE + self._steps_done) % 2**63)
        self.optimizer.zero_grad(set_to_none=True)
        loss = self.compute_loss(self._batch)
        loss.backward()
        if self.grad_clip_norm is not None:
            nn.utils.clip_grad_norm_(self.model.parameters(), self.grad_clip_norm)
        self.optimizer.step()
        self.after_update()
        return loss.detach()

    def __repr__(self) -> str:
        return f"<Workload {self.spec.name} size={self.size} mode={self.mode} device={self.device}>"


def _seed_generators(device: torch.device, seed: int) -> None:
    """Seed the generators a step draws from: the CPU's and, on a GPU, that GPU's. Not
    ``torch.manual_seed``: for each backend not initialised in the process (CUDA on a CPU-only
    host; XPU and MTIA everywhere) it queues a seeding with the Python stack formatted, about 2 ms
    on the CI VM, more than a tiny model's whole step (2026-11-28: 2.2 s of the main job's 20 s)."""
    torch.default_generator.manual_seed(seed)
    if device.type == "cuda":
        index = device.index if device.index is not None else torch.cuda.current_device()
        torch.cuda.default_generators[index].manual_seed(seed)
    elif device.type != "cpu":
        torch.manual_seed(seed)


def _seeded_model(cls: type[Workload], size: str, seed: int) -> nn.Module:
    """Build on the CPU with the global generator seeded, then restore it: same seed, same weights."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return cls.make_model(size)


_REGISTRY: dict[str, type[Workload]] = {}


def register(cls: type[Workload]) -> type[Workload]:
    """Class decorator: add a workload to the registry (``list_workloads`` gives the listing order)."""
    name = cls.spec.name
    if name in _REGISTRY:
        raise ValueError(f"workload {name!r} registered twice")
    _REGISTRY[name] = cls
    return cls


def _workload_class(name: str) -> type[Workload]:
    check_choice("workload", name, tuple(_REGISTRY))
    return _REGISTRY[name]


#: Fathom's order (Adolf et al., IISWC 2016), then the transformer; a workload not named here comes after, by name.
LISTING_ORDER = ("alexnet", "vgg", "residual", "autoenc", "deepq", "memnet", "seq2seq", "speech", "transformer")


def list_workloads() -> list[WorkloadSpec]:
    """The registered workloads' specs, in a stable order that does not depend on import order."""
    def place(spec: WorkloadSpec) -> tuple[int, str]:
        return (LISTING_ORDER.index(spec.name) if spec.name in LISTING_ORDER else len(LISTING_ORDER), spec.name)

    return sorted((cls.spec for cls in _REGISTRY.values()), key=place)


def build(name: str, size: str = "tiny", mode: str = "train", device: torch.device | str = "cpu",
          seed: int = 0, sim_size: str | None = None) -> Workload:
    """Build a ready-to-step workload: seeded weights, a fixed seeded batch, its optimiser.

    ``sim_size``: whose GPU work a step declares under the GPU simulator (default: ``size``).
    """
    cls = _workload_class(name)
    check_choice("size", size, cls.spec.sizes)
    check_choice("mode", mode, cls.spec.modes)
    return cls(size, mode, device, seed, sim_size)


@cache
def _declared_work_file() -> dict[str, Any]:
    data = json.loads(DECLARED_WORK_FILE.read_text(encoding="utf-8"))
    if data.get("format") != "pytest-gpuenergy-declared-work" or data.get("version") != 2:
        raise ValueError(f"{DECLARED_WORK_FILE} is not a version 2 declared-work file: rerun count_work.py")
    return data


def counted_work(name: str, mode: str, size: str) -> GpuWork:
    """The GPU work of one step of ``name`` in ``mode`` at ``size``, as count_work.py counted it."""
    try:
        return GpuWork(**_declared_work_file()["work"][name][mode][size])
    except KeyError:
        raise ValueError(f"{DECLARED_WORK_FILE.name} has no work for {name} {mode} {size}: "
                         f"rerun python reference_workloads/count_work.py") from None


def counted_phases(name: str, mode: str, size: str) -> StepWork:
    """The same step's work by phase (forward, backward, update, other) and its host-only time."""
    try:
        return StepWork.from_json(_declared_work_file()["phases"][name][mode][size])
    except KeyError:
        raise ValueError(f"{DECLARED_WORK_FILE.name} has no phases for {name} {mode} {size}: "
                         f"rerun python reference_workloads/count_work.py") from None


def build_model(name: str, size: str, device: torch.device | str = "meta", seed: int = 0) -> nn.Module:
    """Just the network; on the meta device (the default) it costs no memory, for counting parameters."""
    cls = _workload_class(name)
    check_choice("size", size, cls.spec.sizes)
    if torch.device(device).type == "meta":
        with torch.device("meta"):
            return cls.make_model(size)
    return _seeded_model(cls, size, seed).to(device)


def count_parameters(model: nn.Module) -> int:
    """Number of trainable parameter elements (buffers such as batch-norm statistics excluded)."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)
