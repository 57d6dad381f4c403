"""Realistic results and run documents for the storage, comparison and report tests.

A workload's figures across caps follow a small DVFS-like model: capping to a fraction f of the
default limit slows the work as f**0.35 while power falls linearly from the default limit to a
floor, so ETS is least at the lowest cap and EDP at about 60 % (the shape the DVFS papers
report). Each repetition gets seeded multiplicative noise.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime, timedelta, timezone

import numpy as np

from pytest_gpuenergy.meter.results import EnergyResult, GpuResult, Repetition
from pytest_gpuenergy.runs.records import RunDocument
from pytest_gpuenergy.runs.store import build_documents

H100 = "NVIDIA H100 80GB HBM3 (simulated)"
V100 = "Tesla V100-SXM2-32GB (simulated)"
H100_REAL = "NVIDIA H100 80GB HBM3"
DEFAULT_W = {H100: 700.0, V100: 300.0, H100_REAL: 700.0}
CAPS_W = (200.0, 300.0, 400.0, 500.0, 700.0)
T0 = datetime(2025, 3, 1, 10, 0, tzinfo=timezone.utc)


def figures(limit_w: float, default_w: float, *, ets_at_default_j: float = 500.0, time_at_default_s: float = 1.0) -> tuple[float, float]:
    """(ETS J, T s) at a cap, noise-free, from the DVFS-like model above."""
    f = limit_w / default_w
    time_s = time_at_default_s / f ** 0.35
    power = (ets_at_default_j / time_at_default_s) * (0.2 + 0.8 * f)
    return power * time_s, time_s


def repetitions(ets_j: float, time_s: float, n: int, noise: float, rng: np.random.Generator) -> tuple[Repetition, ...]:
    reps = []
    for _ in range(n):
        e = ets_j * float(np.exp(rng.normal(0.0, noise))) if noise else ets_j
        t = time_s * float(np.exp(rng.normal(0.0, noise / 2))) if noise else time_s
        # A measure() region of a second or so: the meter's bound reaches about 0.5 % either side.
        reps.append(Repetition(ets_j=e, time_s=t, mean_power_w=e / t, peak_power_w=1.2 * e / t, calls=1,
                               ets_low_j=0.995 * e, ets_high_j=1.005 * e))
    return tuple(reps)


def gpu_result(
    *, cap: str, limit_w: float, gpu_name: str = H100, gpu_index: int = 0, backend: str = "sim",
    n: int = 5, noise: float = 0.02, scale: float = 1.0, rng: np.random.Generator | None = None,
    method: str = "counter", notes: Sequence[str] = (), default_w: float | None = None,
) -> GpuResult:
    rng = rng or np.random.default_rng(0)
    default_w = default_w if default_w is not None else DEFAULT_W.get(gpu_name, 700.0)
    ets, time_s = figures(limit_w, default_w)
    return GpuResult(
        gpu_index=gpu_index, gpu_name=gpu_name, gpu_uuid=f"GPU-{gpu_index:08d}-{zlib.crc32(gpu_name.encode()):08x}",
        backend=backend, simulated=backend == "sim", method=method,
        power_source=None if method == "counter" else "instant", cap_label=cap,
        limit_requested_w=limit_w, limit_enforced_w=limit_w, default_limit_w=default_w,
        repetitions=repetitions(ets * scale, time_s, n, noise, rng), notes=tuple(notes),
    )


def sweep_cases(
    *, workloads: Sequence[str] = ("alexnet-train", "vgg-infer"), caps_w: Sequence[float] = CAPS_W,
    gpu_name: str = H100, backend: str = "sim", n: int = 5, noise: float = 0.02, seed: int = 0,
    scale: dict[str, float] | None = None, test: str = "tests/test_suite.py::test_train", percent: bool = False,
) -> list[tuple[str, EnergyResult]]:
    """One case per workload and cap, ids as pytest writes them: ``test[workload-200W]`` (``-40%`` with ``percent``)."""
    rng = np.random.default_rng(seed)
    cases = []
    for workload in workloads:
        for limit_w in caps_w:
            cap = f"{100 * limit_w / DEFAULT_W.get(gpu_name, 700.0):g}%" if percent else f"{limit_w:g}W"
            case_id = f"{test}[{workload}-{cap}]"
            factor = (scale or {}).get(case_id, (scale or {}).get(workload, 1.0))
            result = gpu_result(cap=cap, limit_w=limit_w, gpu_name=gpu_name, backend=backend, n=n, noise=noise,
                                scale=factor, rng=rng)
            cases.append((case_id, EnergyResult(per_gpu=(result,))))
    return cases


def machine(backend: str = "sim", gpu_names: Sequence[str] = (H100,)) -> dict:
    return {
        "host": "ci-runner-1", "platform": "Linux-test", "python": "3.11.0", "backend": backend,
        "simulated": backend == "sim", "driver": "550.54.15", "cuda_driver": "12.4", "cuda": None,
        "torch": "2.3.0", "pytest_gpuenergy": "0.1.0",
        "gpus": [{"index": i, "name": name, "uuid": f"GPU-{i}", "default_limit_w": DEFAULT_W.get(name, 700.0),
                  "min_limit_w": 200.0, "max_limit_w": DEFAULT_W.get(name, 700.0)} for i, name in enumerate(gpu_names)],
    }


def make_doc(*, minutes: int = 0, commit: dict | None = None, machine_info: dict | None = None, **kwargs) -> RunDocument:
    """One run document of a sweep (``sweep_cases`` arguments), created ``minutes`` after T0."""
    cases = sweep_cases(**kwargs)
    backend = kwargs.get("backend", "sim")
    docs = build_documents(
        cases, machine=machine_info or machine(backend, (kwargs.get("gpu_name", H100),)),
        options={"caps": [c for c in ("200W", "300W")], "repeat": kwargs.get("n", 5)},
        commit=commit if commit is not None else {"id": "0123456789abcdef0123456789abcdef01234567", "branch": "main", "dirty": False},
        created_at=T0 + timedelta(minutes=minutes),
    )
    assert len(docs) == 1
    return docs[0]


def wide_runs(cases: int, *, moved: bool) -> list[RunDocument]:
    """Three runs of ``cases`` one-cap cases, ten minutes apart; with ``moved`` the last ran on GPU 1
    (cases then pair by id and cap only). The comparison's scaling test and benchmark use them."""
    runs = [make_doc(seed=seed, workloads=[f"w{i}" for i in range(cases)], caps_w=(300.0,), n=3, minutes=10 * seed)
            for seed in range(3)]
    if moved:
        runs[-1] = replace(runs[-1], cases=tuple(replace(c, gpu_index=1) for c in runs[-1].cases))
    return runs
