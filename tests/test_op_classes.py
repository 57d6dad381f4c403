"""Operator classes (``measure(fn, by_op=True)``): the grouping of operation and kernel names into
classes, a profiler trace put on the meter's clock, the simulator's per-operation work, and the
split end to end on the simulator against its exact energy per class."""

from __future__ import annotations

import contextlib
import json
import math
import textwrap
import time
from collections.abc import Iterator
from types import SimpleNamespace

import pytest
import torch

from pytest_gpuenergy.errors import MeasurementError
from pytest_gpuenergy.meter import op_classes
from pytest_gpuenergy.meter.energy_meter import EnergyMeter
from pytest_gpuenergy.meter.op_classes import (
    ATTENTION,
    COMMUNICATION,
    ELEMENTWISE,
    IDLE,
    MATMUL,
    MEMORY,
    REDUCTION,
    ProfilerTracer,
    TraceEvent,
    as_classes,
    kernel_class,
    kernel_marks,
    merged_marks,
    op_class,
)
from pytest_gpuenergy.meter.results import PhaseFigures, Repetition
from pytest_gpuenergy.runs.reader import DocumentReader
from pytest_gpuenergy.sim import op_work
from pytest_gpuenergy.sim.op_work import SimOpTracer
from pytest_gpuenergy.sim.work import declare_work

from helpers import marks_truth_j

OPS = [
    ("mm", MATMUL), ("aten::addmm", MATMUL), ("aten.bmm.default", MATMUL), ("convolution", MATMUL),
    ("convolution_backward", MATMUL), ("_scaled_mm", MATMUL),
    ("_scaled_dot_product_flash_attention", ATTENTION), ("_scaled_dot_product_flash_attention_for_cpu_backward", ATTENTION),
    ("_efficient_attention_forward", ATTENTION),
    ("native_layer_norm", REDUCTION), ("native_layer_norm_backward", REDUCTION), ("_softmax", REDUCTION),
    ("_log_softmax_backward_data", REDUCTION), ("sum", REDUCTION), ("aten::mean", REDUCTION),
    ("nll_loss_forward", REDUCTION), ("native_batch_norm", REDUCTION),
    ("copy_", MEMORY), ("_to_copy", MEMORY), ("clone", MEMORY), ("cat", MEMORY), ("embedding", MEMORY),
    ("zero_", MEMORY), ("index_select", MEMORY),
    ("all_reduce", COMMUNICATION), ("aten::all_gather_into_tensor", COMMUNICATION),
    ("add", ELEMENTWISE), ("mul_", ELEMENTWISE), ("gelu", ELEMENTWISE), ("threshold_backward", ELEMENTWISE),
    ("_foreach_add_", ELEMENTWISE), ("aten.sigmoid.default", ELEMENTWISE),
    ("view", None), ("transpose", None), ("aten::detach", None), ("_unsafe_view", None), ("t", None),
    ("_record_function_enter_new", None),
]

KERNELS = [
    ("ampere_sgemm_128x64_tn", MATMUL),
    ("sm90_xmma_gemm_f32f32_tf32f32_f32_tn_n_tilesize128x128x32_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas",
     MATMUL),
    ("void cutlass::Kernel2<cutlass_80_tensorop_s1688gemm_64x64_32x6_tn_align4>(Params)", MATMUL),
    ("void implicit_convolve_sgemm<float, float, 1024, 5, 5, 3, 3, 3, 1, false, false, true>(int, int)", MATMUL),
    ("void cudnn::cnn::wgrad_alg0_engine<float, 128, 6, 8, 3, 3, 5, false, 512>(int, int)", MATMUL),
    ("void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<64, 128, 128, 4>, false>(Flash_fwd_params)", ATTENTION),
    ("fmha_cutlassF_f32_aligned_64x64_rf_sm80(PyTorchMemEffAttention::AttentionKernel<float>::Params)", ATTENTION),
    ("void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<float, float>(int, float, float const*)",
     REDUCTION),
    ("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::MeanOps<float, float>>>", REDUCTION),
    ("void (anonymous namespace)::cunn_SoftMaxForward<4, float, float, float, Epilogue>(float*, float const*, int)",
     REDUCTION),
    ("void at::native::batch_norm_collect_statistics_kernel<InvStd, float, float, float, int>", REDUCTION),
    ("triton_red_fused_sum_0", REDUCTION),
    ("Memcpy HtoD (Pageable -> Device)", MEMORY), ("Memset (Device)", MEMORY),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)>",
     MEMORY),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, at::detail::Array<char*, 1>>",
     MEMORY),
    ("void at::native::(anonymous namespace)::CatArrayBatchedCopy<float, unsigned int, 3, 128, 1>", MEMORY),
    ("void at::native::indexSelectLargeIndex<float, long, unsigned int, 2, 2, -2, true>", MEMORY),
    ("ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)", COMMUNICATION),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, at::detail::Array<char*, 3>>",
     ELEMENTWISE),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::GeluCUDAKernelImpl(...)::{lambda(float)#1}>",
     ELEMENTWISE),
    ("void at::native::(anonymous namespace)::multi_tensor_apply_kernel<TensorListMetadata<3>, AddFunctor<float>>",
     ELEMENTWISE),
    ("void at::native::(anonymous namespace)::distribution_elementwise_grid_stride_kernel<float, 4, normal_kernel>",
     ELEMENTWISE),
    ("triton_poi_fused_add_mul_0", ELEMENTWISE),
]


@pytest.mark.parametrize(("name", "expected"), OPS, ids=[n for n, _ in OPS])
def test_an_operation_falls_in_its_class_and_a_view_in_none(name: str, expected: str | None) -> None:
    assert op_class(name) == expected


@pytest.mark.parametrize(("name", "expected"), KERNELS, ids=[n[:40] for n, _ in KERNELS])
def test_a_kernel_falls_in_its_class_by_the_profilers_name(name: str, expected: str) -> None:
    assert kernel_class(name) == expected


def test_classes_not_told_apart_get_a_note_that_the_others_bounds_do_not_cover_them() -> None:
    told = PhaseFigures(1.0, 0.9, 1.1, 0.01, 100.0, 0.5, 0.5, True)
    merged = PhaseFigures(1.0, 0.0, 2.0, 0.01, 100.0, 0.5, 0.5, False, "only their sum is known")
    assert op_classes.merged_note({MATMUL: told, IDLE: told}) is None
    assert op_classes.merged_note(None) is None
    note = op_classes.merged_note({MATMUL: told, MEMORY: merged, REDUCTION: merged})
    assert note is not None and note.startswith("op classes: memory, reduction could not be told apart")
    assert note.endswith("measure longer (min_time_s) until every class is told apart")


def test_the_classes_are_seven_and_idle_is_the_unmarked_rest() -> None:
    assert op_classes.CLASSES == (MATMUL, ATTENTION, ELEMENTWISE, REDUCTION, MEMORY, COMMUNICATION, IDLE)
    figure = PhaseFigures(1.0, 0.9, 1.1, 0.01, 100.0, 0.5, 0.5, True)
    assert list(as_classes({"matmul": figure, "other": figure}) or {}) == ["matmul", "idle"]
    assert as_classes(None) is None


# -- a profiler trace on the meter's clock ---------------------------------------------------------------
def _trace(offset_s: float, step_s: float = 0.0) -> tuple[list[TraceEvent], list[float]]:
    """Kernels on a profiler clock whose moment t_ns is the meter's offset_s + t_ns / 1e9 - 5000, the
    clock stepped by ``step_s`` after 11 s (the second anchor and the last kernel are after it)."""
    def ns(meter_s: float) -> int:
        return round((meter_s - offset_s + 5000.0 + (step_s if meter_s > 11.0 else 0.0)) * 1e9)

    anchors = [TraceEvent(op_classes.ANCHOR, ns(10.0) - 3000, ns(10.0) + 3000, on_gpu=False),
               TraceEvent(op_classes.ANCHOR, ns(12.0) - 1000, ns(12.0) + 1000, on_gpu=False)]
    kernels = [
        TraceEvent("ampere_sgemm_128x64_tn", ns(10.1), ns(10.3), on_gpu=True),
        TraceEvent("sm80_xmma_gemm_f32f32", ns(10.3), ns(10.4), on_gpu=True),          # touches: one matmul mark
        TraceEvent("vectorized_layer_norm_kernel", ns(10.5), ns(10.6), on_gpu=True),
        TraceEvent("ncclDevKernel_AllReduce_Sum_f32", ns(10.55), ns(10.8), on_gpu=True),  # overlaps by 0.05 s
        TraceEvent("aten::mm", ns(10.9), ns(11.0), on_gpu=False),                      # host: not a kernel
        TraceEvent("Memcpy DtoH (Device -> Pinned)", ns(11.5), ns(11.6), on_gpu=True),
    ]
    return anchors + kernels, [10.0, 12.0]


def test_a_trace_is_put_on_the_meters_clock_through_its_anchors_merged_and_without_overlaps() -> None:
    events, moments = _trace(offset_s=10.0 - 3.7)
    found = kernel_marks(events, op_classes.ANCHOR, moments)
    expected = [(MATMUL, 10.1, 10.4), (REDUCTION, 10.5, 10.6), (COMMUNICATION, 10.6, 10.8), (MEMORY, 11.5, 11.6)]
    assert [m[0] for m in found.marks] == [e[0] for e in expected]
    for (_, start, end), (_, want_start, want_end) in zip(found.marks, expected):
        assert (start, end) == pytest.approx((want_start, want_end), abs=1e-8)
    assert found.overlap_s == pytest.approx(0.05, abs=1e-8)
    assert found.dating_error_s == pytest.approx(1e-6)           # half the anchor known best (the second)


def test_a_clock_stepped_between_the_anchors_is_refused_and_a_step_within_their_uncertainty_is_not() -> None:
    _, moments = _trace(offset_s=10.0)
    within, _ = _trace(offset_s=10.0, step_s=3e-6)               # under 3 + 1 us and 0.01 % of 2 s
    # mapped by the anchor known best (the second, after the step): a kernel before it lands 3 us early
    assert kernel_marks(within, op_classes.ANCHOR, moments).marks[0][1] == pytest.approx(10.1 - 3e-6, abs=1e-8)
    stepped, _ = _trace(offset_s=10.0, step_s=0.02)
    with pytest.raises(MeasurementError, match=r"^the profiler's clock jumped 20\.000 ms against the meter's between "
                                               r"the anchors \(the host's clock was stepped\)"):
        kernel_marks(stepped, op_classes.ANCHOR, moments)


def test_a_trace_without_its_anchors_is_a_one_line_error() -> None:
    events, _ = _trace(offset_s=0.0)
    with pytest.raises(MeasurementError, match=r"holds 2 anchor events 'gpuenergy.clock_anchor' for 3 moments read"):
        kernel_marks(events, op_classes.ANCHOR, [1.0, 2.0, 3.0])


def test_merged_marks_join_touching_marks_of_a_class_and_cut_overlaps() -> None:
    marks, overlap_s = merged_marks([(MATMUL, 0.0, 1.0), (MATMUL, 1.0, 2.0), (MEMORY, 1.5, 1.8), (MEMORY, 2.5, 3.0),
                                     (ELEMENTWISE, 2.6, 3.5)])
    assert marks == [(MATMUL, 0.0, 2.0), (MEMORY, 2.5, 3.0), (ELEMENTWISE, 3.0, 3.5)]
    assert overlap_s == pytest.approx(0.3 + 0.4)


def test_the_cpu_profilers_own_events_land_where_the_meters_clock_saw_them() -> None:
    """The real profiler's timestamps (the host's wall clock) mapped by the anchors: a product timed
    on time.perf_counter lies where its profiler event is put (the CPU's events standing in for kernels)."""
    from torch.profiler import ProfilerActivity, profile, record_function

    a, b = torch.randn(300, 300), torch.randn(300, 300)
    moments = []
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        with record_function(op_classes.ANCHOR):
            moments.append(time.perf_counter())
        before_s = time.perf_counter()
        for _ in range(20):
            a @ b
        after_s = time.perf_counter()
        with record_function(op_classes.ANCHOR):
            moments.append(time.perf_counter())
    events = [TraceEvent(e.name(), e.start_ns(), e.end_ns(), on_gpu=e.name() == "aten::mm")
              for e in prof.profiler.kineto_results.events()]
    found = kernel_marks(events, op_classes.ANCHOR, moments)
    assert found.marks and {kind for kind, _, _ in found.marks} == {ELEMENTWISE}    # "aten::mm" is no kernel name
    slack_s = found.dating_error_s + 1e-4
    assert before_s - slack_s <= found.marks[0][1] and found.marks[-1][2] <= after_s + slack_s


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal where PyTorch has no CUDA")
def test_by_op_on_a_real_gpu_without_cuda_torch_is_a_one_line_error() -> None:
    tracer = ProfilerTracer(time.perf_counter)
    with pytest.raises(MeasurementError, match=r"needs PyTorch with CUDA .*install a CUDA build of torch, or leave "
                                               r"by_op out"), tracer.recording([]):
        pass


class _FakeProfilerEvent:
    """One event of a fake ``torch.profiler`` trace, with the accessors ProfilerTracer reads."""

    def __init__(self, name: str, start_ns: int, end_ns: int, on_gpu: bool) -> None:
        self._name, self._start_ns, self._end_ns, self._on_gpu = name, start_ns, end_ns, on_gpu

    def name(self) -> str:
        return self._name

    def start_ns(self) -> int:
        return self._start_ns

    def end_ns(self) -> int:
        return self._end_ns

    def device_type(self) -> object:
        return torch.autograd.DeviceType.CUDA if self._on_gpu else torch.autograd.DeviceType.CPU


def test_a_real_gpus_tracer_puts_the_profilers_kernels_on_its_clock_and_notes_overlaps(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """ProfilerTracer.recording end to end against a fake profiler (no GPU here): the trace's clock is the
    meter's + 5000 s, the anchors are read on the backend's clock, and two kernels overlap by 100 ms."""
    import torch.profiler

    now = [10.0]                                                 # the meter's clock, moved by hand

    def clock() -> float:
        now[0] += 1e-6
        return now[0]

    def ns(meter_s: float) -> int:
        return round((meter_s + 5000.0) * 1e9)

    events: list[_FakeProfilerEvent] = []

    class Profile:
        def __init__(self, activities: list) -> None:
            self.profiler = self
            self.kineto_results = self

        def __enter__(self) -> Profile:
            return self

        def __exit__(self, *exc: object) -> None:
            return None

        def events(self) -> list[_FakeProfilerEvent]:
            return list(events)

    @contextlib.contextmanager
    def record_function(name: str) -> Iterator[None]:
        start = ns(now[0])
        yield
        now[0] += 1e-6
        events.append(_FakeProfilerEvent(name, start, ns(now[0]), on_gpu=False))

    monkeypatch.setattr(torch.profiler, "profile", Profile)
    monkeypatch.setattr(torch.profiler, "record_function", record_function)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    tracer = op_classes.op_tracer(SimpleNamespace(simulated=False, clock=clock))     # a real GPU's backend
    assert isinstance(tracer, ProfilerTracer) and tracer.notes == [] and tracer.traced(len) is len
    marks: list[tuple[str, float, float]] = []
    with tracer.recording(marks):
        events.append(_FakeProfilerEvent("ampere_sgemm_128x64_tn", ns(10.1), ns(10.3), on_gpu=True))
        events.append(_FakeProfilerEvent("ncclDevKernel_AllReduce_Sum_f32", ns(10.2), ns(10.4), on_gpu=True))
        events.append(_FakeProfilerEvent("aten::mm", ns(10.1), ns(10.3), on_gpu=False))     # host: no kernel
        now[0] = 10.5
    assert [kind for kind, _, _ in marks] == [MATMUL, COMMUNICATION]
    assert [moment for _, start, end in marks for moment in (start, end)] == pytest.approx([10.1, 10.3, 10.3, 10.4], abs=1e-8)
    assert tracer.notes == ["op classes: concurrent kernels overlapped for 100 ms; that time went to the kernel "
                            "that started first"]


# -- the simulator's pieces ------------------------------------------------------------------------------
def _traced(step, monkeypatch: pytest.MonkeyPatch) -> tuple[list, list]:
    """Run ``step`` under the simulator's tracer with a fake queue: each piece lasts 1 s per GB (+1 ms)."""
    declared: list = []
    queue = [0.0]

    def declare(work) -> None:
        declared.append(work)
        queue[0] += 1e-3 + work.bytes / 1e9

    monkeypatch.setattr(op_work, "declare_work", declare)
    tracer = SimOpTracer(lambda: queue[0])
    marks: list = []
    with tracer.recording(marks):
        tracer.traced(step)()
    return declared, marks


def test_each_operation_is_its_own_piece_with_its_flops_bytes_and_class(monkeypatch: pytest.MonkeyPatch) -> None:
    layer = torch.nn.Linear(64, 32).to("meta")
    x = torch.randn(16, 64, device="meta")
    declared, marks = _traced(lambda: torch.nn.functional.gelu(layer(x)).sum(), monkeypatch)
    assert [kind for kind, _, _ in marks] == [MATMUL, ELEMENTWISE, REDUCTION]     # t(weight) is a view: no piece
    product = declared[0]
    assert product.flops_fp32 == 2 * 16 * 64 * 32 and product.kernels == 1 and not product.flops_tf32
    assert product.bytes == 4 * (32 + 16 * 64 + 64 * 32 + 16 * 32)                # bias, input, weight, output
    assert declared[1].flops_fp32 == 0 and declared[1].bytes == 4 * 2 * 16 * 32
    assert marks[0] == (MATMUL, 0.0, pytest.approx(1e-3 + product.bytes / 1e9))
    assert all(previous[2] == mark[1] for previous, mark in zip(marks, marks[1:]))  # back to back on the queue


def test_half_precision_and_tf32_products_run_on_the_tensor_cores(monkeypatch: pytest.MonkeyPatch) -> None:
    a = torch.randn(8, 8, device="meta", dtype=torch.float16)
    declared, _ = _traced(lambda: a @ a, monkeypatch)
    assert declared[0].flops_fp16 == 2 * 8 ** 3 and not declared[0].flops_fp32
    b = torch.randn(8, 8, device="meta")
    torch.backends.cuda.matmul.allow_tf32 = True       # a property of torch's: monkeypatch cannot put it back
    try:
        declared, _ = _traced(lambda: b @ b, monkeypatch)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = False
    assert declared[0].flops_tf32 == 2 * 8 ** 3 and not declared[0].flops_fp32


@pytest.mark.parametrize("device", ["meta", "cpu"])
def test_attention_is_one_fused_piece_forward_and_one_backward_however_torch_runs_it(
        device: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """On meta, scaled_dot_product_attention runs as products and a softmax, on the CPU as one fused
    operation; either way the GPU runs one fused kernel each way: torch's attention FLOPs, its
    tensors' bytes (no score matrix). The products around it stay matmul."""
    torch.manual_seed(0)
    project = torch.nn.Linear(16, 16).to(device)
    x = torch.randn(2, 2, 8, 16, device=device)

    def step() -> None:
        q = project(x)
        torch.nn.functional.scaled_dot_product_attention(q, q, q).sum().backward()

    declared, marks = _traced(step, monkeypatch)
    kinds = [kind for kind, _, _ in marks]
    assert kinds.count(ATTENTION) == 2 and kinds[:3] == [MATMUL, ATTENTION, REDUCTION]   # projection, attention, sum
    assert kinds[-2:] == [MATMUL, REDUCTION]             # the projection's gradients: weight (a product), bias (a sum)
    forward, backward = (work for work, kind in zip(declared, kinds) if kind == ATTENTION)
    tensor_bytes = 4 * 2 * 2 * 8 * 16
    assert (forward.flops_fp32, forward.bytes, forward.kernels) == (2 * (2 * 2 * 2 * 8 * 8 * 16), 4 * tensor_bytes, 1)
    assert (backward.flops_fp32, backward.bytes) == (2.5 * forward.flops_fp32, 2 * forward.bytes)


# -- results and run documents ---------------------------------------------------------------------------
def test_a_documents_op_classes_are_read_back_and_an_older_document_has_none() -> None:
    classes = {MATMUL: PhaseFigures(1.0, 0.9, 1.1, 0.002, 500.0, 0.4, 0.8, True),
               IDLE: PhaseFigures(0.25, 0.1, 0.4, 0.003, 83.3, 0.6, 0.2, False, "only their sum is known")}
    saved = Repetition.of_region(1.25, 1.2, 1.3, 400.0, 0.005, 1, None, classes).to_json()
    assert "phases" not in saved and list(saved["op_classes"]) == [MATMUL, IDLE]
    reader = DocumentReader("run.json")
    read = reader.repetition(json.loads(json.dumps(saved)), "cases[0].repetitions[0]")
    assert read.phases is None and read.op_classes is not None
    assert read.op_classes[IDLE].why_not == "only their sum is known" and read.op_classes[MATMUL].ets_high_j == 1.1
    del saved["op_classes"]
    assert reader.repetition(saved, "r").op_classes is None


# -- end to end on the simulator -------------------------------------------------------------------------
BLOCK = textwrap.dedent("""
    import dataclasses
    import json

    import torch
    import torch.nn.functional as F
    from torch import nn


    class Block(nn.Module):
        \"\"\"A transformer block: layer norm, attention, a feed-forward pair of products.\"\"\"

        def __init__(self, d, heads):
            super().__init__()
            self.norm, self.norm2, self.heads = nn.LayerNorm(d), nn.LayerNorm(d), heads
            self.qkv, self.out = nn.Linear(d, 3 * d), nn.Linear(d, d)
            self.up, self.down = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

        def forward(self, x):
            b, t, d = x.shape
            q, k, v = (y.view(b, t, self.heads, d // self.heads).transpose(1, 2)
                       for y in self.qkv(self.norm(x)).chunk(3, -1))
            x = x + self.out(F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(b, t, d))
            return x + self.down(F.gelu(self.up(self.norm2(x))))


    def test_block(energy_meter):
        model = Block(2048, 16).to("meta")             # shapes only: nothing is computed on the host
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
        x = torch.randn(8, 1024, 2048, device="meta")

        def step():
            model(x).pow(2).mean().backward()
            optimizer.step()
            optimizer.zero_grad()

        result = energy_meter.measure(step, min_time_s=4, by_op=True)
        nvml, gpu = energy_meter.backend.nvml, energy_meter.gpus[0]

        def exact_j(t0, t1):
            return (nvml.simExactEnergyMj(gpu.handle, t1) - nvml.simExactEnergyMj(gpu.handle, t0)) / 1000

        (t0, t1), calls = energy_meter.last_region, result.repetitions[-1].calls
        truth = {}
        for name, start, end in energy_meter.last_op_marks:
            if end > t0 and start < t1:
                truth[name] = truth.get(name, 0.0) + exact_j(max(start, t0), min(end, t1)) / calls
        truth["idle"] = exact_j(t0, t1) / calls - sum(truth.values())
        print("CLASSES " + json.dumps({"ets_j": result.ets_j, "truth": truth, "notes": list(result.notes),
                                       "classes": {n: dataclasses.asdict(f) for n, f in result.op_classes.items()}}))
""")


@pytest.mark.slow
def test_a_transformer_blocks_classes_against_the_simulators_truth(pytester: pytest.Pytester) -> None:
    """Products and attention, the step's energy, are each within 5 % of the simulator's exact energy
    between their marks and inside their bounds; the small classes are inside their bounds where the
    fit tells them apart; the classes add up to the region's ETS; --energy-phases shows them and the
    run document keeps them."""
    pytester.makepyfile(test_block=BLOCK)
    result = pytester.runpytest_subprocess("-s", "--energy-save", "--energy-phases", "-p", "no:randomly")
    result.assert_outcomes(passed=1)
    [case] = [json.loads(line.split("CLASSES ", 1)[1]) for line in result.outlines if "CLASSES {" in line]
    classes, truth = case["classes"], case["truth"]
    assert set(classes) <= {MATMUL, ATTENTION, ELEMENTWISE, REDUCTION, MEMORY, IDLE}
    assert {MATMUL, ATTENTION, ELEMENTWISE, REDUCTION, MEMORY} <= set(classes)
    for name in (MATMUL, ATTENTION):
        figure = classes[name]
        assert figure["distinguishable"], (name, figure)
        assert abs(figure["ets_j"] - truth[name]) <= 0.05 * truth[name], (name, figure, truth[name])
    for name, figure in classes.items():
        if figure["distinguishable"]:
            assert figure["ets_low_j"] <= truth[name] <= figure["ets_high_j"], (name, figure, truth[name])
        else:
            assert figure["why_not"], name
    assert math.fsum(f["ets_j"] for f in classes.values()) == pytest.approx(case["ets_j"], rel=1e-9)
    result.stdout.fnmatch_lines(["energy per operator class, per call*", "*test_block [[]current[]] (sim): ETS * J per call",
                                 "*class * ETS * bound * T * P * time * energy", "*matmul *J *J-*J *s *W *% *%"])
    [path] = (pytester.path / ".energy").rglob("*.json")
    saved = json.loads(path.read_text())["cases"][0]
    assert list(saved["op_classes"]) == list(classes) and "phases" not in saved


@pytest.mark.slow
def test_classes_always_in_the_same_proportion_are_said_to_be_inseparable_with_bounds_that_hold(backend) -> None:
    """Element-wise and copy kernels of tens of microseconds, one after the other: every counter window
    holds them in the same proportion, give or take less than its publications' dating error, so no
    fit can split their energy. The result says so, and each bound still holds the simulator's truth."""
    gpu = backend.select(None)[0]
    backend.begin_test("inseparable", [gpu])
    meter = EnergyMeter(backend, [gpu])
    x, y = torch.empty(10_000_000, device="meta"), torch.empty(10_000_000, device="meta")

    def step() -> None:
        for _ in range(4):
            x.add_(1.0)           # 80 MB read and written: about 45 us on a simulated H100
            x.copy_(y)            # 120 MB: about 65 us

    result = meter.measure(step, min_time_s=1.0, by_op=True)
    truth = _truth(meter, gpu, result)
    classes = result.op_classes
    assert classes is not None and set(classes) <= {ELEMENTWISE, MEMORY, IDLE}
    for name in (ELEMENTWISE, MEMORY):
        assert not classes[name].distinguishable, (name, classes[name])
        assert "cannot tell it from" in classes[name].why_not
    for name, figure in classes.items():
        assert figure.ets_low_j <= truth[name] <= figure.ets_high_j, (name, figure, truth[name])
    assert math.fsum(f.ets_j for f in classes.values()) == pytest.approx(result.ets_j, rel=1e-9)
    assert any(note.startswith("op classes: elementwise, memory could not be told apart") for note in result.notes)


def _truth(meter: EnergyMeter, gpu, result) -> dict[str, float]:
    """Each class's exact energy per call between its marks in the last region (the simulator's integral)."""
    return marks_truth_j(gpu.nvml, gpu.handle, meter, result.repetitions[-1].calls, IDLE)


def test_by_op_takes_true_or_false_and_a_step_without_torch_operations_has_no_classes(backend) -> None:
    gpu = backend.select(None)[0]
    backend.begin_test("plain", [gpu])
    meter = EnergyMeter(backend, [gpu])
    with pytest.raises(ValueError, match=r"^by_op must be True or False, got 'yes'$"):
        meter.measure(lambda: None, by_op="yes")    # type: ignore[arg-type]
    x = torch.empty(1000, device="meta")
    assert meter.measure(lambda: x.add_(1.0), min_time_s=0.3).op_classes is None          # without by_op
    assert meter.measure(lambda: declare_work(flops_tf32=1e10), min_time_s=0.3, by_op=True).op_classes is None
    assert meter.last_op_marks == ()
