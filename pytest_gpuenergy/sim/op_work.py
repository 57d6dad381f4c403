"""Each PyTorch operation of a step as its own piece of simulated GPU work, classified, for ``by_op=True``.

``energy_meter.measure(step, by_op=True)`` on the simulator runs every call of ``step`` under
:class:`SimOpTracer`'s torch dispatch mode, which counts each operation's work as ``counting`` counts a
whole step's (FLOPs of products and attention from torch's own formulas, bytes from its tensors'
sizes, one kernel), declares it on the simulated GPU as a piece of its own and records where the
GPU's queue put it (``Backend.queue_time``), with its class (``meter.op_classes.op_class``). The
roofline and DVFS models then give each piece its own time and power: a large product runs
compute-bound near the limit, a layer norm or a copy memory-bound at a third of it, a tiny kernel
waits on its launch near idle, as on a GPU. The simulator's exact energy between a class's marks
is that class's truth.

Works on CPU tensors and on the ``meta`` device (nothing is computed: a model of any size, in no
time). ``scaled_dot_product_attention`` is one fused piece forward and one backward, as on a GPU
(flash or memory-efficient attention), whatever parts torch runs it as on the host (on ``meta``:
products and a softmax that would move the whole score matrix); a torch function mode sees the
call, and its autograd nodes are remembered by sequence number for the backward.

The step's work is counted here: do not declare it by hand as well (it would run twice; work
declared by hand inside the step is counted to the operation after it). Not modelled: the
recurrent layers' cell-by-cell operations (``counting`` counts those as one
kernel per layer; here each is a piece), kernels overlapping on several streams.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from ..meter.op_classes import ATTENTION, MATMUL, op_class
from .roofline import GpuWork
from .work import declare_work

# torch's formulas for the CPU's fused attention (called as such, not through scaled_dot_product_attention,
# which is one piece of its own: SimOpTracer.attend) are those of the flash kernels
_AS_REGISTERED = {
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
        # sequence numbers of the autograd nodes an attention call made -> its backward piece (a list
        # shared by them, emptied once declared)
        self.attention_nodes: dict[int, list[GpuWork]] = {}
        self.inside_attention = 0
        self.unknown_flops: set[str] = set()        # products torch has no FLOP formula for (counted as bytes)
        self.queued_s: float | None = None          # where the previous operation of this call ended on the queue

    @property
    def notes(self) -> list[str]:
        if not self.unknown_flops:
            return []
        return [f"op classes: torch has no FLOP formula for {', '.join(sorted(self.unknown_flops))}: the simulator "
                f"ran their bytes only (simulated)"]

    def traced(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        tracer = self

        def call(*args: Any, **kwargs: Any) -> Any:
            tracer.queued_s = None
            with _modes(tracer):
                return fn(*args, **kwargs)
        return call

    def recording(self, marks: list[tuple[str, float, float]]) -> Any:
        return _Recording(self, marks)

    def run(self, func: Any, args: tuple, kwargs: dict) -> Any:
        """One operation: run it (on CPU or meta tensors), then declare its work and mark where it ran.
        The parts of an attention call, forward or backward, are not pieces: the call is (``attend``)."""
        import torch

        out = func(*args, **kwargs)
        packet = func._overloadpacket
        kind = op_class(packet.__name__)
        if kind is None or self.inside_attention:
            return out
        if self.attention_nodes:
            node = torch._C._current_autograd_node()
            backward = self.attention_nodes.get(node._sequence_nr()) if node is not None else None
            if backward is not None:
                if backward:
                    self.declare(ATTENTION, backward.pop())
                return out
        work = op_work(packet, args, kwargs, out)
        if kind == MATMUL and not (work.flops_fp32 or work.flops_tf32 or work.flops_fp16):
            self.unknown_flops.add(packet.__name__)
        self.declare(kind, work)
        return out

    def declare(self, kind: str, work: GpuWork) -> None:
        """Queue one piece on the simulated GPU and mark where the queue put it."""
        # Within a call the GPU's queue only grows by these pieces, so one reading of it per piece
        # gives both ends (reading it costs the simulator a pass over its GPUs).
        start_s = self.queue_time() if self.queued_s is None else self.queued_s
        declare_work(work)
        self.queued_s = self.queue_time()
        if self.marks is not None:
            self.marks.append((kind, start_s, self.queued_s))

    def attend(self, call: Callable[[], Any], query: Any, key: Any, value: Any) -> Any:
        """``scaled_dot_product_attention``: one fused piece forward and one backward, as on a GPU, where
        it is one kernel each way that never writes the score matrix to memory (its parts, as torch
        runs them on meta or CPU tensors, would move it; and would split attention between classes)."""
        self.inside_attention += 1
        try:
            out = call()
        finally:
            self.inside_attention -= 1
        if self.inside_attention:
            return out
        forward, backward = attention_work(query, key, value, out)
        self.declare(ATTENTION, forward)
        self._remember(out, (query, key, value), [backward])
        return out

    def _remember(self, out: Any, inputs: tuple, backward: list[GpuWork]) -> None:
        """The autograd nodes the attention call made (from its output back to its inputs'): the first
        of their backward operations declares ``backward``, the others none."""
        import torch

        stop = {id(t.grad_fn) for t in inputs if isinstance(t, torch.Tensor) and t.grad_fn is not None}
        todo: list[Any] = [out.grad_fn] if isinstance(out, torch.Tensor) else []
        seen: set[int] = set()
        while todo:
            node = todo.pop()
            if node is None or id(node) in stop or id(node) in seen or not node.next_functions:
                continue          # an input's node, or a leaf's AccumulateGrad (no next functions)
            seen.add(id(node))
            self.attention_nodes[node._sequence_nr()] = backward
            todo.extend(next_node for next_node, _ in node.next_functions)


def attention_work(query: Any, key: Any, value: Any, out: Any) -> tuple[GpuWork, GpuWork]:
    """A fused attention kernel's work, forward and backward: torch's FLOP formulas for attention;
    the bytes of its inputs and output (forward), and of those, the output's gradient and the
    inputs' gradients (backward)."""
    import torch
    from torch.utils.flop_counter import sdpa_backward_flop_count, sdpa_flop_count

    def four_d(shape: Any) -> tuple[int, ...]:          # (batch, heads, length, width), however many leading dims
        *lead, length, width = shape
        return (math.prod(lead[:-1]) if len(lead) > 1 else 1, lead[-1] if lead else 1, length, width)

    q, k, v, o = (four_d(t.shape) for t in (query, key, value, out))
    sizes = [t.numel() * t.element_size() for t in (query, key, value, out)]
    forward_flops = float(sdpa_flop_count(q, k, v))
    backward_flops = float(sdpa_backward_flop_count(o, q, k, v))
    unit = ("flops_fp16" if query.dtype in (torch.float16, torch.bfloat16)
            else "flops_tf32" if torch.backends.cuda.matmul.allow_tf32 else "flops_fp32")
    return (GpuWork(**{unit: forward_flops}, bytes=float(sum(sizes)), kernels=1),
            GpuWork(**{unit: backward_flops}, bytes=float(2 * sum(sizes)), kernels=1))


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
            kwargs = kwargs or {}
            if func is not attention:
                return func(*args, **kwargs)
            named = dict(zip(("query", "key", "value"), args))
            named.update((k, kwargs[k]) for k in ("query", "key", "value") if k in kwargs)
            return tracer.attend(lambda: func(*args, **kwargs), named["query"], named["key"], named["value"])

    stack = contextlib.ExitStack()
    stack.enter_context(Attention())
    stack.enter_context(Operations())
    return stack
