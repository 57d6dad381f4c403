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
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .roofline import GpuWork

# Operations that only change a tensor's view: no kernel, no memory traffic.
_VIEWS = frozenset({
    "alias", "as_strided", "detach", "expand", "permute", "reshape", "select", "slice", "squeeze",
    "t", "transpose", "unsqueeze", "view", "_unsafe_view", "unbind", "split", "chunk", "lift_fresh",
})
_CONVOLUTIONS = frozenset({"convolution", "convolution_backward", "_convolution"})


def count_work(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> tuple[GpuWork, Any]:
    """``fn(*args, **kwargs)`` run once while counting its work; returns (the work, fn's result)."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_flatten
    from torch.utils.flop_counter import FlopCounterMode

    class Traffic(TorchDispatchMode):
        def __init__(self) -> None:
            super().__init__()
            self.bytes = 0
            self.forward_kernels = 0
            self.backward_kernels = 0
            self.inside_recurrent = 0
            self.recurrent = False

        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            out = func(*args, **(kwargs or {}))
            if func._overloadpacket.__name__ not in _VIEWS:
                if torch._C._current_graph_task_id() != -1:
                    self.backward_kernels += 1
                elif not self.inside_recurrent:
                    self.forward_kernels += 1
                for item in tree_flatten((args, kwargs or {}, out))[0]:
                    if isinstance(item, torch.Tensor):
                        self.bytes += item.numel() * item.element_size()
            return out

        @property
        def kernels(self) -> int:
            backward = 2 * self.forward_kernels if self.recurrent and self.backward_kernels else self.backward_kernels
            return self.forward_kernels + backward

    traffic = Traffic()

    def enter(module: Any, inputs: Any) -> None:
        if isinstance(module, torch.nn.RNNBase):
            traffic.inside_recurrent += 1
            traffic.recurrent = True

    def leave(module: Any, inputs: Any, output: Any) -> None:
        if isinstance(module, torch.nn.RNNBase):
            traffic.inside_recurrent -= 1
            traffic.forward_kernels += module.num_layers * (2 if module.bidirectional else 1)

    flops = FlopCounterMode(display=False)
    hooks = [torch.nn.modules.module.register_module_forward_pre_hook(enter),
             torch.nn.modules.module.register_module_forward_hook(leave)]
    try:
        with flops, traffic:
            result = fn(*args, **kwargs)
    finally:
        for hook in hooks:
            hook.remove()
    by_unit = {"fp32": 0.0, "tf32": 0.0, "fp16": 0.0}
    half = torch.get_default_dtype() in (torch.float16, torch.bfloat16)
    for op, count in flops.get_flop_counts().get("Global", {}).items():
        name = getattr(op, "__name__", str(op))
        if half:
            unit = "fp16"
        elif name in _CONVOLUTIONS:
            unit = "tf32" if torch.backends.cudnn.allow_tf32 else "fp32"
        else:
            unit = "tf32" if torch.backends.cuda.matmul.allow_tf32 else "fp32"
        by_unit[unit] += float(count)
    work = GpuWork(flops_fp32=by_unit["fp32"], flops_tf32=by_unit["tf32"], flops_fp16=by_unit["fp16"],
                   bytes=float(traffic.bytes), kernels=traffic.kernels)
    return work, result
