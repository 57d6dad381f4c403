"""Operator classes: which kind of kernel a step's GPU time went to, so its energy can be split by kind.

``energy_meter.measure(step, by_op=True)`` lays the step's kernels out on the GPU's time, each as
the class it belongs to (:data:`CLASSES`), and the region's ETS is split among the classes by the
same fit as phases (``attribution.attribute_phases``): the classes are phases whose marks are the
kernels themselves, and the GPU time no kernel covers is ``idle``. A class draws its own power on a
GPU (a matrix product keeps the tensor cores busy near the limit, an element-wise kernel waits on
memory at a third of it), which is what lets the counter's windows tell the classes apart.

Where the kernels come from:

* **a real GPU**: the PyTorch profiler's GPU timeline (``torch.profiler``, CUDA activity), each
  kernel's start and end as CUPTI dates them, which the profiler puts on the host's wall clock. The
  meter's clock is another one (``time.perf_counter``), so two anchors (a profiler event recorded
  around a read of the meter's clock, at the region's start and end) give the offset between them
  and check it held (:func:`kernel_marks`). **This path has not run on a GPU**: its mapping is tested on synthetic
  traces and on the CPU profiler's own events only.
* **the simulator**: ``sim.op_work`` declares each operation's counted work as its own piece on the
  simulated GPU, classified from the operation's name (:func:`op_class`).

Concurrent kernels (a communication kernel beside a product, on another stream) cannot both own
a moment of a timeline whose classes do not overlap: the later one starts where the earlier ends,
and the time taken away is said in a note.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Final, Protocol

from ..errors import MeasurementError
from .attribution import OTHER
from .results import PhaseFigures

MATMUL: Final = "matmul"                  # matrix products and convolutions
ATTENTION: Final = "attention"            # fused attention kernels (flash, memory-efficient, cuDNN)
ELEMENTWISE: Final = "elementwise"        # point-wise arithmetic and activations, the optimizer's updates
REDUCTION: Final = "reduction"            # normalisations (layer, batch, group norm; softmax), sums, means, losses
MEMORY: Final = "memory"                  # copies, fills, concatenations, gathers, host-device transfers
COMMUNICATION: Final = "communication"    # collectives between GPUs (NCCL, RCCL)
IDLE: Final = "idle"                      # GPU time no kernel covers
CLASSES: Final = (MATMUL, ATTENTION, ELEMENTWISE, REDUCTION, MEMORY, COMMUNICATION, IDLE)

# -- PyTorch operations (ATen names, without overload), the simulator's classes ---------------------
# Operations that only change a tensor's view or bookkeeping: no kernel.
NO_KERNEL: Final = frozenset({
    "alias", "as_strided", "detach", "expand", "permute", "reshape", "select", "slice", "squeeze", "t",
    "transpose", "unsqueeze", "view", "_unsafe_view", "unbind", "split", "split_with_sizes", "chunk",
    "lift_fresh", "_reshape_alias", "unfold", "empty", "empty_like", "empty_strided", "set_", "resize_",
    "_record_function_enter_new", "_record_function_exit", "_to_copy_noop", "is_same_size", "numel", "size",
})
_OPS: Final[Mapping[str, str]] = {
    **dict.fromkeys(("mm", "addmm", "bmm", "baddbmm", "addbmm", "matmul", "linear", "_scaled_mm", "addmv", "mv",
                     "dot", "convolution", "_convolution", "convolution_backward", "cudnn_convolution",
                     "convolution_overrideable", "_slow_conv2d_forward", "_slow_conv2d_backward",
                     "mkldnn_convolution", "_int_mm", "einsum", "tensordot"), MATMUL),
    **dict.fromkeys(("_scaled_dot_product_flash_attention", "_scaled_dot_product_flash_attention_backward",
                     "_scaled_dot_product_efficient_attention", "_scaled_dot_product_efficient_attention_backward",
                     "_scaled_dot_product_cudnn_attention", "_scaled_dot_product_cudnn_attention_backward",
                     "_scaled_dot_product_flash_attention_for_cpu",
                     "_scaled_dot_product_flash_attention_for_cpu_backward", "_flash_attention_forward",
                     "_flash_attention_backward", "_efficient_attention_forward", "_efficient_attention_backward",
                     "scaled_dot_product_attention", "flex_attention", "flex_attention_backward"), ATTENTION),
    **dict.fromkeys(("native_layer_norm", "native_layer_norm_backward", "native_batch_norm",
                     "native_batch_norm_backward", "_native_batch_norm_legit", "_native_batch_norm_legit_no_training",
                     "batch_norm_backward", "native_group_norm", "native_group_norm_backward", "_fused_rms_norm",
                     "_fused_rms_norm_backward", "_softmax", "_softmax_backward_data", "_safe_softmax", "_log_softmax",
                     "_log_softmax_backward_data", "sum", "mean", "var", "std", "var_mean", "std_mean", "amax",
                     "amin", "max", "min", "argmax", "argmin", "norm", "linalg_vector_norm", "prod", "cumsum",
                     "logsumexp", "nll_loss_forward", "nll_loss_backward", "nll_loss2d_forward",
                     "nll_loss2d_backward", "mse_loss", "mse_loss_backward", "binary_cross_entropy",
                     "binary_cross_entropy_backward", "smooth_l1_loss", "huber_loss", "_ctc_loss", "_ctc_loss_backward",
                     "_foreach_norm", "topk", "sort", "all", "any"), REDUCTION),
    **dict.fromkeys(("copy_", "_to_copy", "clone", "contiguous", "cat", "stack", "index", "index_select",
                     "index_put_", "index_add_", "gather", "scatter", "scatter_add", "scatter_add_", "embedding",
                     "embedding_dense_backward", "fill_", "zero_", "zeros", "zeros_like", "ones", "ones_like",
                     "full", "full_like", "new_zeros", "new_ones", "new_full", "new_empty", "constant_pad_nd",
                     "masked_fill", "masked_fill_", "repeat", "flip", "roll", "narrow_copy", "slice_backward",
                     "select_backward", "_foreach_copy_", "_foreach_zero_", "masked_scatter"), MEMORY),
    **dict.fromkeys(("all_reduce", "all_reduce_", "reduce_scatter_tensor", "all_gather_into_tensor",
                     "all_to_all_single", "broadcast", "broadcast_", "allreduce_", "allgather_",
                     "reduce_scatter_", "send", "recv_", "wait_tensor", "barrier"), COMMUNICATION),
}


def op_class(name: str) -> str | None:
    """The class of a PyTorch operation by its ATen name (``mm``, ``aten::mm``, ``aten.mm.default``);
    None for an operation that launches no kernel (a view, bookkeeping). Anything not listed is
    element-wise arithmetic (``add``, ``mul``, ``gelu``, ``threshold_backward``, ``_foreach_add_``)."""
    base = name.rsplit("::", maxsplit=1)[-1]
    if base.startswith("aten."):
        base = base[len("aten."):]
    base = base.split(".")[0]
    if base in NO_KERNEL:
        return None
    return _OPS.get(base, ELEMENTWISE)


# -- GPU kernels (the profiler's names), a real GPU's classes ------------------------------------------
# Checked in order, on the lower-cased name; the first pattern found in it decides.
_KERNEL_PATTERNS: Final[tuple[tuple[str, str], ...]] = (
    ("memcpy", MEMORY), ("memset", MEMORY),
    ("nccl", COMMUNICATION), ("rccl", COMMUNICATION), ("all_reduce", COMMUNICATION), ("allreduce", COMMUNICATION),
    ("all_gather", COMMUNICATION), ("allgather", COMMUNICATION), ("reduce_scatter", COMMUNICATION),
    ("flash", ATTENTION), ("fmha", ATTENTION), ("attention", ATTENTION), ("attn", ATTENTION), ("mha", ATTENTION),
    ("gemm", MATMUL), ("gemv", MATMUL), ("convolution", MATMUL), ("convolve", MATMUL), ("conv1d", MATMUL),
    ("conv2d", MATMUL), ("conv3d", MATMUL), ("wgrad", MATMUL), ("dgrad", MATMUL), ("cutlass", MATMUL),
    ("xmma", MATMUL), ("cublas", MATMUL), ("hipblas", MATMUL), ("rocblas", MATMUL), ("winograd", MATMUL),
    ("triton_tem", MATMUL),
    ("layer_norm", REDUCTION), ("layernorm", REDUCTION), ("batch_norm", REDUCTION), ("batchnorm", REDUCTION),
    ("group_norm", REDUCTION), ("groupnorm", REDUCTION), ("rms_norm", REDUCTION), ("rmsnorm", REDUCTION),
    ("instance_norm", REDUCTION), ("vector_norm", REDUCTION), ("bn_fw", REDUCTION), ("bn_bw", REDUCTION),
    ("softmax", REDUCTION), ("reduce", REDUCTION), ("nll_loss", REDUCTION), ("classnll", REDUCTION),
    ("cross_entropy", REDUCTION), ("welford", REDUCTION), ("argmax", REDUCTION), ("triton_red", REDUCTION),
    ("triton_per", REDUCTION),
    ("cat_array", MEMORY), ("catarray", MEMORY), ("copy", MEMORY), ("index", MEMORY), ("gather", MEMORY),
    ("scatter", MEMORY), ("embedding", MEMORY), ("fill", MEMORY), ("transpose", MEMORY), ("pad", MEMORY),
)


def kernel_class(name: str) -> str:
    """The class of a GPU kernel by the name the profiler gives it (``ampere_sgemm_128x64_tn``,
    ``void at::native::vectorized_elementwise_kernel<...>``, ``Memcpy HtoD (Pageable -> Device)``);
    anything not recognised is element-wise."""
    lowered = name.lower()
    for pattern, kind in _KERNEL_PATTERNS:
        if pattern in lowered:
            return kind
    return ELEMENTWISE


# -- a profiler trace on the meter's clock -------------------------------------------------------------
@dataclass(frozen=True)
class TraceEvent:
    """One event of a profiler trace: a GPU kernel (``on_gpu``) or a host event, in ns on the trace's clock."""

    name: str
    start_ns: int
    end_ns: int
    on_gpu: bool


@dataclass(frozen=True)
class KernelTimeline:
    """A region's kernels as (class, start_s, end_s) on the meter's clock, not overlapping, in order."""

    marks: tuple[tuple[str, float, float], ...]
    overlap_s: float              # concurrent kernels' time given to the kernel that started first
    dating_error_s: float         # how far the mapping onto the meter's clock may be off


def kernel_marks(events: Sequence[TraceEvent], anchor: str, anchor_moments_s: Sequence[float]) -> KernelTimeline:
    """The GPU kernels of a trace on the meter's clock, classified (:func:`kernel_class`).

    The host events named ``anchor`` are, in order, the profiler's records of the moments
    ``anchor_moments_s`` read on the meter's clock inside them: each pairs the trace's clock with the
    meter's, to within half the event's length. The two clocks run at one rate (the kernel slews
    the host's wall clock, which the profiler dates on, and the monotonic one alike), so the map is
    an offset, taken from the anchor known best. The wall clock can also be stepped (NTP): anchors
    whose offsets differ by more than their uncertainty (and 0.01 % of the time between them) are
    refused.
    """
    anchors = sorted((e for e in events if e.name == anchor and not e.on_gpu), key=lambda e: e.start_ns)
    if not anchors or len(anchors) != len(anchor_moments_s):
        raise MeasurementError(f"the profiler's trace holds {len(anchors)} anchor events {anchor!r} for "
                               f"{len(anchor_moments_s)} moments read: the trace cannot be put on the meter's clock")
    offsets_s = [moment - (e.start_ns + e.end_ns) / 2e9 for e, moment in zip(anchors, anchor_moments_s)]
    errors_s = [(e.end_ns - e.start_ns) / 2e9 for e in anchors]
    best = min(range(len(anchors)), key=errors_s.__getitem__)
    for offset_s, error_s, moment_s in zip(offsets_s, errors_s, anchor_moments_s):
        allowed_s = error_s + errors_s[best] + 1e-4 * abs(moment_s - anchor_moments_s[best])
        if abs(offset_s - offsets_s[best]) > allowed_s:
            raise MeasurementError(f"the profiler's clock jumped {1000 * abs(offset_s - offsets_s[best]):.3f} ms against "
                                   f"the meter's between the anchors (the host's clock was stepped): the trace cannot "
                                   f"be put on the meter's clock; measure again")

    def on_meter_s(ns: int) -> float:
        return ns / 1e9 + offsets_s[best]

    kernels = sorted(((kernel_class(e.name), on_meter_s(e.start_ns), on_meter_s(e.end_ns))
                      for e in events if e.on_gpu and e.end_ns >= e.start_ns), key=lambda m: (m[1], m[2]))
    marks, overlap_s = merged_marks(kernels)
    return KernelTimeline(tuple(marks), overlap_s, errors_s[best])


def merged_marks(marks: Sequence[tuple[str, float, float]]) -> tuple[list[tuple[str, float, float]], float]:
    """Marks in time order as a timeline without overlaps: a mark starting before the previous one ends
    starts at that end instead (the time taken away is returned), and touching marks of one class
    become one (a phase timeline of a few thousand marks rather than a million kernels)."""
    out: list[tuple[str, float, float]] = []
    overlap_s = 0.0
    for kind, start_s, end in sorted(marks, key=lambda m: (m[1], m[2])):
        start = start_s
        if out and start < out[-1][2]:
            overlap_s += min(end, out[-1][2]) - start
            start = out[-1][2]
            if end <= start:
                continue
        if out and out[-1][0] == kind and start - out[-1][2] <= 1e-12:
            out[-1] = (kind, out[-1][1], end)
        else:
            out.append((kind, start, end))
    return out, overlap_s


def as_classes(figures: Mapping[str, PhaseFigures] | None) -> dict[str, PhaseFigures] | None:
    """The split a region's op marks gave (``attribution``'s phases), with its unmarked rest named ``idle``."""
    if figures is None:
        return None
    return {IDLE if name == OTHER else name: figure for name, figure in figures.items()}


def merged_note(classes: Mapping[str, PhaseFigures] | None) -> str | None:
    """A note where some classes could not be told apart: the fit then gives them one power between
    them, and the bounds of the classes it did tell apart do not cover what that costs them."""
    merged = [name for name, figure in (classes or {}).items() if not figure.distinguishable]
    if not merged:
        return None
    return (f"op classes: {', '.join(merged)} could not be told apart, and the fit gave them one power between "
            f"them; the other classes' bounds do not cover what that may cost them (on the simulator, products "
            f"told apart beside such classes came out up to 3.1 % off, outside bounds of 1.2-2.2 %, in regions "
            f"under 2.5 s): measure longer (min_time_s) until every class is told apart")


# -- tracers: what lays a region's kernels out -----------------------------------------------------------
class OpTracer(Protocol):
    """Turns the calls of ``measure(fn, by_op=True)`` into class marks on the meter's clock."""

    def traced(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """``fn`` as the meter calls it (the simulator declares each operation's work inside it)."""

    def recording(self, marks: list[tuple[str, float, float]]) -> Any:
        """A context around one region: its kernels' marks go to ``marks`` (those outside go nowhere)."""

    @property
    def notes(self) -> list[str]:
        """What the trace leaves less certain (overlapping kernels), for the result's notes."""


def op_tracer(backend: Any) -> OpTracer:
    """The simulator's tracer (each operation's counted work, declared) or the PyTorch profiler's."""
    if backend.simulated:
        from ..sim.op_work import SimOpTracer

        return SimOpTracer(backend.queue_time)
    return ProfilerTracer(backend.clock)


ANCHOR = "gpuenergy.clock_anchor"


class ProfilerTracer:
    """A real GPU: the region runs under ``torch.profiler`` (CPU and CUDA activity); its kernels are put
    on the meter's clock through two anchors (:func:`kernel_marks`). Not yet run on a GPU."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self.clock = clock
        self._notes: list[str] = []

    @property
    def notes(self) -> list[str]:
        return self._notes

    def traced(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        return fn

    @contextmanager
    def recording(self, marks: list[tuple[str, float, float]]) -> Iterator[None]:
        import torch
        from torch.profiler import ProfilerActivity, profile, record_function

        if not torch.cuda.is_available():
            raise MeasurementError("measure(by_op=True) on a real GPU needs PyTorch with CUDA (its profiler's GPU "
                                   "timeline): install a CUDA build of torch, or leave by_op out")
        moments_s: list[float] = []
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            with record_function(ANCHOR):
                moments_s.append(self.clock())
            yield
            torch.cuda.synchronize()
            with record_function(ANCHOR):
                moments_s.append(self.clock())
        events = [TraceEvent(e.name(), e.start_ns(), e.end_ns(), e.device_type() != torch.autograd.DeviceType.CPU)
                  for e in prof.profiler.kineto_results.events()]
        found = kernel_marks(events, ANCHOR, moments_s)
        marks.extend(found.marks)
        if found.overlap_s > 0:
            self._notes.append(f"op classes: concurrent kernels overlapped for {found.overlap_s * 1000:.3g} ms; "
                               f"that time went to the kernel that started first")


def check_by_op(by_op: Any) -> bool:
    if not isinstance(by_op, bool):
        raise ValueError(f"by_op must be True or False, got {by_op!r}")
    return by_op
