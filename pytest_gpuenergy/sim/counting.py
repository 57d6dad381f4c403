"""Counting a PyTorch step's GPU work, so that the simulator can run it on any host the same way.

``count_work(fn)`` runs ``fn`` once under two dispatch modes: torch's own ``FlopCounterMode`` (the
FLOPs of convolutions and matrix products, from their shapes) and a counter of the bytes every
other kernel reads and writes (its tensors' sizes: an upper bound on memory traffic, which the
roofline model's memory efficiency is calibrated against) and of the kernels launched. It works on
CPU tensors, and on the ``meta`` device without computing anything.

Which tensor-core unit a product runs on follows torch's own settings: convolutions in TF32 where
``torch.backends.cudnn.allow_tf32`` (the default), matrix products in TF32 only where
``torch.backends.cuda.matmul.allow_tf32``; half-precision products on the FP16 tensor cores.

Kernels: on a GPU a recurrent layer (``nn.LSTM``, ``nn.GRU``, ``nn.RNN``) is one cuDNN call per
layer and direction, but on the CPU or the meta device torch runs it cell by cell, thousands of
small operations. So the operations inside a recurrent layer's forward count as one kernel per
layer and direction, and when a step had any, its backward pass counts twice its forward's
kernels (the usual ratio) instead of its own cell-by-cell operations.

Phases (``count_step``): an operation belongs to ``backward`` while autograd runs a graph task, to
``update`` between an optimizer's step pre- and post-hooks, to ``forward`` inside the given model's
own forward call, and to ``other`` otherwise (the loss, ``zero_grad``, gradient clipping). These are
the points ``energy_meter.watch(model, optimizer)`` marks, so declared phase work and the marks agree.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .roofline import GpuWork
from .work import STEP_PHASES, StepWork

# Operations that only change a tensor's view: no kernel, no memory traffic.
_VIEWS = frozenset({
    "alias", "as_strided", "detach", "expand", "permute", "reshape", "select", "slice", "squeeze",
    "t", "transpose", "unsqueeze", "view", "_unsafe_view", "unbind", "split", "chunk", "lift_fresh",
})
_CONVOLUTIONS = frozenset({"convolution", "convolution_backward", "_convolution"})


def count_work(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> tuple[GpuWork, Any]:
    """``fn(*args, **kwargs)`` run once while counting its work; returns (the work, fn's result)."""
    phases, result = _count(fn, args, kwargs, model=None)
    return phases.total, result


def count_step(fn: Callable[[], Any], model: Any) -> tuple[StepWork, Any]:
    """``fn()`` (a training or inference step of ``model``) run once while counting its work by
    phase (see the module's docstring); returns (the work per phase, fn's result). The phases add up
    to what ``count_work`` counts for the same step."""
    return _count(fn, (), {}, model=model)


def _count(fn: Callable[..., Any], args: tuple, kwargs: dict, model: Any) -> tuple[StepWork, Any]:
    import torch
    from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_flatten
    from torch.utils.flop_counter import FlopCounterMode

    flops = FlopCounterMode(display=False)
    half = torch.get_default_dtype() in (torch.float16, torch.bfloat16)

    def unit_of(name: str) -> str:
        if half:
            return "fp16"
        if name in _CONVOLUTIONS:
            return "tf32" if torch.backends.cudnn.allow_tf32 else "fp32"
        return "tf32" if torch.backends.cuda.matmul.allow_tf32 else "fp32"

    class Traffic(TorchDispatchMode):
        def __init__(self) -> None:
            super().__init__()
            self.bytes = dict.fromkeys(STEP_PHASES, 0)
            self.kernels = dict.fromkeys(STEP_PHASES, 0)
            self.flops = {phase: {"fp32": 0.0, "tf32": 0.0, "fp16": 0.0} for phase in STEP_PHASES}
            self.inside_recurrent = 0
            self.recurrent = False
            self.in_model = 0
            self.in_update = 0

        def phase(self) -> str:
            if torch._C._current_graph_task_id() != -1:
                return "backward"
            if self.in_update:
                return "update"
            return "forward" if self.in_model else "other"

        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            counts = flops.flop_counts["Global"]
            before = dict(counts)         # an operation may count sub-operations' FLOPs under their names
            out = func(*args, **(kwargs or {}))
            phase = self.phase()
            for op, count in counts.items():
                if count != before.get(op, 0):
                    self.flops[phase][unit_of(getattr(op, "__name__", str(op)))] += float(count - before.get(op, 0))
            if func._overloadpacket.__name__ not in _VIEWS:
                if phase == "backward" or not self.inside_recurrent:
                    self.kernels[phase] += 1
                for item in tree_flatten((args, kwargs or {}, out))[0]:
                    if isinstance(item, torch.Tensor):
                        self.bytes[phase] += item.numel() * item.element_size()
            return out

        def work(self) -> StepWork:
            kernels = dict(self.kernels)
            if self.recurrent and kernels["backward"]:
                kernels["backward"] = 2 * sum(n for phase, n in kernels.items() if phase != "backward")
            parts: dict[str, GpuWork | None] = {}
            for phase in STEP_PHASES:
                by_unit = self.flops[phase]
                figures = (by_unit["fp32"], by_unit["tf32"], by_unit["fp16"], float(self.bytes[phase]), kernels[phase])
                parts[phase] = GpuWork(*figures) if any(figures) else None
            return StepWork(forward=parts["forward"], backward=parts["backward"], update=parts["update"],
                            other=parts["other"])

    traffic = Traffic()

    def enter(module: Any, inputs: Any) -> None:
        if module is model:
            traffic.in_model += 1
        if isinstance(module, torch.nn.RNNBase):
            traffic.inside_recurrent += 1
            traffic.recurrent = True

    def leave(module: Any, inputs: Any, output: Any) -> None:
        if isinstance(module, torch.nn.RNNBase):
            traffic.inside_recurrent -= 1
            phase = traffic.phase()
            traffic.kernels[phase] += module.num_layers * (2 if module.bidirectional else 1)
        if module is model:
            traffic.in_model -= 1

    def stepping(*_: Any) -> None:
        traffic.in_update += 1

    def stepped(*_: Any) -> None:
        traffic.in_update -= 1

    hooks = [torch.nn.modules.module.register_module_forward_pre_hook(enter),
             torch.nn.modules.module.register_module_forward_hook(leave),
             register_optimizer_step_pre_hook(stepping), register_optimizer_step_post_hook(stepped)]
    try:
        with flops, traffic:
            result = fn(*args, **kwargs)
    finally:
        for hook in hooks:
            hook.remove()
    return traffic.work(), result
