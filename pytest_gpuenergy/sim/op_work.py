"""Each PyTorch operation of a step as its own piece of simulated GPU work, classified, for ``by_op=True``.

``energy_meter.measure(step, by_op=True)`` on the simulator runs every call of ``step`` under
:class:`OpWork`, a torch dispatch mode that counts each operation's work as ``counting`` counts a
whole step's (FLOPs of products and attention from torch's own formulas, bytes from its tensors'
sizes, one kernel), declares it on the simulated GPU as a piece of its own and records where the
GPU's queue put it (``Backend.queue_time``), with its class (``meter.op_classes.op_class``). The
roofline and DVFS models then give each piece its own time and power: a large product runs
compute-bound near the limit, a layer norm or a copy memory-bound at a third of it, a tiny kernel
waits on its launch near idle, as on a GPU. The simulator's exact energy between a class's marks
is that class's truth.

Works on CPU tensors and on the ``meta`` device (nothing is computed: a model of any size, in no
time). On ``meta`` ``scaled_dot_product_attention`` is not one fused operation but its parts
(products, softmax); the parts it runs, forward and backward, count as attention all the same
(a torch function mode sees the call; the autograd nodes it made are remembered by sequence number).
Not modelled: the recurrent layers' cell-by-cell operations (``counting`` counts those as one
kernel per layer; here each is a piece), kernels overlapping on several streams.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..meter.op_classes import ATTENTION, MATMUL, op_class
from .roofline import GpuWork
from .work import declare_work

_AS_REGISTERED = {      # torch's formulas for the CPU's fused attention are those of the flash kernels
    "_scaled_dot_product_flash_attention_for_cpu": "_scaled_dot_product_flash_attention",
    "_scaled_dot_product_flash_attention_for_cpu_backward": "_scaled_dot_product_flash_attention_backward",
}
_CONVOLUTIONS = frozenset({"convolution", "_convolution", "convolution_backward", "cudnn_convolution"})


def op_work(packet: Any, args: tuple, kwargs: dict, out: Any) -> GpuWork:
    """One operation's GPU work: its FLOPs by unit (where torch knows a formula), the bytes of its
    tensors (an upper bound on its memory traffic, as ``counting`` takes it), one kernel."""
    import torch
    from torch.utils._pytree import tree_flatten
    from torch.utils.flop_counter import flop_registry

    tensors = [t for t in tree_flatten((args, kwargs, out))[0] if isinstance(t, torch.Tensor)]
    moved = float(sum(t.numel() * t.element_size() for t in tensors))
    name = packet.__name__
    formula = flop_registry.get(packet)
    if formula is None and name in _AS_REGISTERED:
        formula = flop_registry.get(getattr(torch.ops.aten, _AS_REGISTERED[name]))
    flops = float(formula(*args, **kwargs, out_val=out)) if formula is not None else 0.0
    if not flops:
        return GpuWork(bytes=moved, kernels=1)
    if any(t.dtype in (torch.float16, torch.bfloat16) for t in tensors):
        return GpuWork(flops_fp16=flops, bytes=moved, kernels=1)
    tf32 = torch.backends.cudnn.allow_tf32 if name in _CONVOLUTIONS else torch.backends.cuda.matmul.allow_tf32
    return GpuWork(flops_tf32=flops, bytes=moved, kernels=1) if tf32 else GpuWork(flops_fp32=flops, bytes=moved,
                                                                                       kernels=1)


class SimOpTracer:
    """The simulator's ``OpTracer``: each operation of a traced call declared as its own classified piece."""

    def __init__(self, queue_time: Callable[[], float]) -> None:
        self.queue_time = queue_time
        self.marks: list[tuple[str, float, float]] | None = None    # the open region's, else None
        self.attention_nodes: set[int] = set()      # sequence numbers of autograd nodes attention made
        self.inside_attention = 0
        self.unknown_flops: set[str] = set()        # products torch has no FLOP formula for (counted as bytes)

    @property
    def notes(self) -> list[str]:
        if not self.unknown_flops:
            return []
        return [f"op classes: torch has no FLOP formula for {', '.join(sorted(self.unknown_flops))}: the simulator "
                f"ran their bytes only (simulated)"]

    def traced(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        tracer = self

        def call(*args: Any, **kwargs: Any) -> Any:
            with _modes(tracer):
                return fn(*args, **kwargs)
        return call

    def recording(self, marks: list[tuple[str, float, float]]) -> Any:
        return _Recording(self, marks)

    def run(self, func: Any, args: tuple, kwargs: dict) -> Any:
        """One operation: run it (on CPU or meta tensors), then declare its work and mark where it ran."""
        import torch

        out = func(*args, **kwargs)
        packet = func._overloadpacket
        kind = op_class(packet.__name__)
        if kind is None:
            return out
        if self.inside_attention or self._in_attention_backward(torch):
            kind = ATTENTION
        work = op_work(packet, args, kwargs, out)
        if kind == MATMUL and not (work.flops_fp32 or work.flops_tf32 or work.flops_fp16):
            self.unknown_flops.add(packet.__name__)
        start_s = self.queue_time()
        declare_work(work)
        if self.marks is not None:
            self.marks.append((kind, start_s, self.queue_time()))
        return out

    def _in_attention_backward(self, torch: Any) -> bool:
        if not self.attention_nodes:
            return False
        node = torch._C._current_autograd_node()
        return node is not None and node._sequence_nr() in self.attention_nodes

    def remember_attention(self, out: Any, inputs: tuple) -> None:
        """The autograd nodes an attention call made (from its output back to its inputs'), so that
        their backward counts as attention too."""
        import torch
        from torch.utils._pytree import tree_flatten

        stop = {id(t.grad_fn) for t in tree_flatten(inputs)[0] if isinstance(t, torch.Tensor) and t.grad_fn is not None}
        todo: list[Any] = [t.grad_fn for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor) and t.grad_fn is not None]
        seen: set[int] = set()
        while todo:
            node = todo.pop()
            if node is None or id(node) in stop or id(node) in seen or not node.next_functions:
                continue          # an input's node, or a leaf's AccumulateGrad (no next functions)
            seen.add(id(node))
            self.attention_nodes.add(node._sequence_nr())
            todo.extend(next_node for next_node, _ in node.next_functions)


class _Recording:
    def __init__(self, tracer: SimOpTracer, marks: list[tuple[str, float, float]]) -> None:
        self.tracer, self.marks = tracer, marks

    def __enter__(self) -> None:
        self.tracer.marks = self.marks

    def __exit__(self, *exc: Any) -> None:
        self.tracer.marks = None


def _modes(tracer: SimOpTracer) -> Any:
    """The dispatch mode that declares each operation, inside a function mode that sees attention calls."""
    import contextlib

    import torch
    from torch.overrides import TorchFunctionMode
    from torch.utils._python_dispatch import TorchDispatchMode

    attention = torch.nn.functional.scaled_dot_product_attention

    class Operations(TorchDispatchMode):
        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            return tracer.run(func, args, kwargs or {})

    class Attention(TorchFunctionMode):
        def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            if func is not attention:
                return func(*args, **(kwargs or {}))
            tracer.inside_attention += 1
            try:
                out = func(*args, **(kwargs or {}))
            finally:
                tracer.inside_attention -= 1
            tracer.remember_attention(out, (args, kwargs))
            return out

    stack = contextlib.ExitStack()
    stack.enter_context(Attention())
    stack.enter_context(Operations())
    return stack
