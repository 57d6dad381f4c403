"""Helpers for the plugin's own tests, in one place: a user's commands, simulated GPUs and work, and
realistic results and run documents. Fixtures live in ``conftest.py``; tests import these by name
(``from helpers import run_cli``).

The run documents follow a small DVFS-like model: capping to a fraction f of the default limit slows
the work as f**0.35 while power falls linearly from the default limit to a floor, so ETS is least at
the lowest cap and EDP at about 60 % (the shape the DVFS papers report). Each repetition gets seeded
multiplicative noise.
"""

from __future__ import annotations

import contextlib
import fcntl
import inspect
import io
import os
import subprocess
import sys
import textwrap
import time
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import replace
from datetime import datetime, timedelta, timezone

import numpy as np
import pytest

from pytest_gpuenergy.gpu.device import Backend, Gpu
from pytest_gpuenergy.meter.results import EnergyResult, GpuResult, Repetition
from pytest_gpuenergy.runs.records import RunDocument
from pytest_gpuenergy.runs.store import build_documents

# The simulated GPUs' names as NVML gives them, and a pid no process has (a writer that is gone).
H100 = "NVIDIA H100 80GB HBM3 (simulated)"
V100 = "Tesla V100-SXM2-32GB (simulated)"
DEAD_PID = 2**31 - 2

# Every pytest these tests start (pytester's, `gpuenergy tune`'s, the fleet's, torchrun's) would load
# hypothesis's pytest plugin, which imports all of hypothesis: 0.5 s of a 0.9 s start, paid by each of
# the suite's ~200 child sessions and xdist workers. The sessions under test never use hypothesis
# (only test_fuzz_inputs.py does, in this process), so their pytest leaves it out. The same goes for
# the plugins the compatibility matrix (test_compat.py) tries the plugin beside: installed for it,
# they would reorder (randomly), warn (asyncio) or print (benchmark) in every other child session;
# each test of the matrix turns on the one it tries.
COMPAT_PLUGINS = ("randomly", "asyncio", "benchmark", "pytest_cov", "rerunfailures", "repeat", "syrupy", "regressions",
                  "pytest-datadir", "dependency", "pytest_mpl", "freezer", "time_machine")
CHILD_PYTEST_ADDOPTS = " ".join(f"-p no:{name}" for name in ("hypothesispytest", *COMPAT_PLUGINS))


# --- the plugin beside others (test_compat.py, test_compat_measured.py) -----------------------------

def enable(monkeypatch: pytest.MonkeyPatch, *plugins: str) -> None:
    """Turn these plugins back on for the sessions under test (the suite's children leave them out)."""
    kept = [part for part in CHILD_PYTEST_ADDOPTS.split("-p ") if part.strip() and part.split()[0][3:] not in plugins]
    monkeypatch.setenv("PYTEST_ADDOPTS", " ".join(f"-p {part.strip()}" for part in kept))


def outcomes(result: pytest.RunResult) -> dict[str, int]:
    return result.parseoutcomes()


def same_outcome_without_the_plugin(pytester: pytest.Pytester, *args: str) -> dict[str, int]:
    """Run a suite that uses none of the plugin with it and without it: the outcomes must agree."""
    with_plugin = outcomes(pytester.runpytest(*args))
    without = outcomes(pytester.runpytest("-p", "no:gpuenergy", *args))
    assert with_plugin == without, (with_plugin, without)
    with_plugin.pop("warnings", None)       # (pytest's own, about modules imported before it in this process)
    return with_plugin


# --- a user's commands -------------------------------------------------------------------------

def run_cli(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    """Run the ``gpuenergy`` command as a user would, in a fresh process."""
    proc = subprocess.run(
        [sys.executable, "-m", "pytest_gpuenergy.cli", *args], capture_output=True, text=True, timeout=60
    )
    if check and proc.returncode != 0:
        raise AssertionError(f"gpuenergy {' '.join(args)} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}")
    return proc


def cli_in_process(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    """``gpuenergy ARGS`` run by its ``main`` in this process: what it prints and returns, as
    :func:`run_cli` gives it, without a process start. For checks of what a command does to the
    GPUs' state or says about it; :func:`run_cli` where the process itself is under test (its exit
    status as a script sees it, the entry point, a fresh interpreter)."""
    from pytest_gpuenergy.cli.main import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(list(args))
        except SystemExit as stop:          # argparse's usage errors
            code = stop.code if isinstance(stop.code, int) else 2
    done = subprocess.CompletedProcess(["gpuenergy", *args], code, out.getvalue(), err.getvalue())
    if check and code != 0:
        raise AssertionError(f"gpuenergy {' '.join(args)} exited {code}:\n{done.stdout}\n{done.stderr}")
    return done


def gpu_info() -> list[dict]:
    """The rows ``gpuenergy info --json --gpu-backend=sim`` prints, read in this process.

    The same function builds them as the command does, from a backend opened and closed here: a
    check of a GPU's state costs no process start (the command itself is tested on its own).
    """
    from pytest_gpuenergy.cli.main import gpu_rows
    from pytest_gpuenergy.gpu.device import open_backend

    backend = open_backend("sim")
    try:
        return gpu_rows(backend)
    finally:
        backend.close()


# --- simulated work --------------------------------------------------------------------------------

def spin(seconds: float) -> None:
    """``seconds`` of CPU time: on the simulator, CPU work nobody declared runs as GPU work."""
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass


def declare(seconds: float) -> None:
    """Declare GPU work that takes ``seconds`` on a simulated H100 at its default limit and full clocks.

    It moves the simulator's virtual clock without costing the host any CPU time: for tests of
    what the meter makes of GPU work, where spinning the CPU (the stand-in for undeclared work,
    :func:`spin`) would only cost the suite time.
    """
    from pytest_gpuenergy.sim import declare_work
    from pytest_gpuenergy.sim.models import GPU_MODELS
    from pytest_gpuenergy.sim.roofline import GpuWork, run_step

    spec, unit = GPU_MODELS["H100"], GpuWork(flops_tf32=1e12)
    declare_work(unit.scaled(seconds / run_step(spec, unit, spec.default_limit_w).step_s))


def spin_source() -> str:
    """Source of :func:`spin` for test files written by pytester: the one definition, reused."""
    return "import time\n" + inspect.getsource(spin)


def declare_source() -> str:
    """Source of :func:`declare` for test files written by pytester: the one definition, reused."""
    return inspect.getsource(declare)


def declared_suite(train_flops: float) -> str:
    """A test file of two tests whose calls declare their GPU work (``test_train``: ``train_flops`` of
    TF32 work, compute-bound; ``test_infer``: fixed, memory-bound): the simulator runs it on its
    virtual clock, so the suite costs no real CPU time and its figures repeat on any host."""
    return textwrap.dedent(
        f"""
        import pytest

        def step():
            pass

        @pytest.mark.energy(work={{"flops_tf32": {train_flops!r}, "bytes": 1e8, "kernels": 40}})
        def test_train(gpu_power_cap, energy_meter):
            energy_meter.measure(step, warmup=1, min_time_s=0.2)

        @pytest.mark.energy(work={{"flops_tf32": 1e12, "bytes": 2e10, "kernels": 40}})
        def test_infer(gpu_power_cap, energy_meter):
            energy_meter.measure(step, warmup=1, min_time_s=0.2)
        """
    )


def lock_is_free(backend: Backend, gpu: Gpu) -> bool:
    """Whether another process could take the GPU's lock now (a second open file stands in for it)."""
    from pytest_gpuenergy.gpu.locks import lock_paths

    [path] = lock_paths(backend.lock_folder, [gpu.uuid])
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False
    finally:
        os.close(fd)


@contextlib.contextmanager
def sigint_as_a_terminal_gives() -> Iterator[None]:
    """SIGINT raising KeyboardInterrupt for the block, as a terminal gives it. A process started with
    SIGINT ignored (a background job of a script, mutmut's test runs) keeps it ignored, and a restore
    then has no signal to hold: the tests of a signal during a restore would see nothing."""
    import signal

    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, before)


def read_lock(gpu: Gpu) -> tuple[bool, tuple[int, int] | None]:
    """(readable, lock) of a GPU's SM clock, through the clock knob: (False, None) where the library
    cannot read a lock back (real NVML), else (True, the lock or None)."""
    from pytest_gpuenergy.gpu.clocks import SM_CLOCK
    from pytest_gpuenergy.gpu.knob import UNREADABLE

    found = SM_CLOCK.read(gpu)
    return (False, None) if found is UNREADABLE else (True, found)


def put_lock(gpu: Gpu, lock: tuple[int, int] | None) -> None:
    """Lock a GPU's SM clock (None: reset it), through the clock knob."""
    from pytest_gpuenergy.gpu.clocks import SM_CLOCK

    SM_CLOCK.put(gpu, lock)


# --- results and run documents ------------------------------------------------------------------

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
        power_source=None if method == "counter" else "instant", cap=cap,
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


# A training step's phases per call (ETS J, T s) as the simulated H100 makes them (tests/test_phases.py).
STEP_PHASES = {"forward": (4.7, 0.008), "backward": (9.4, 0.016), "update": (0.88, 0.0055), "other": (1.02, 0.0064)}


def with_phases(doc: RunDocument, *, scale: dict[str, float] | None = None, seed: int = 0, noise: float = 0.01,
                bound: float = 0.08, told: bool = True) -> RunDocument:
    """``doc`` with ``STEP_PHASES`` in every repetition of every case (``scale``: a phase's factor), each
    figure with ``noise`` and a bound of ``bound`` either side (``told``: the fit could tell them apart)."""
    from pytest_gpuenergy.meter.results import PhaseFigures

    rng = np.random.default_rng(seed)
    cases = []
    for case in doc.cases:
        reps = []
        for rep in case.repetitions:
            energies = {name: ets * (scale or {}).get(name, 1.0) * float(np.exp(rng.normal(0.0, noise)))
                        for name, (ets, _) in STEP_PHASES.items()}
            total_j, total_s = sum(energies.values()), sum(t for _, t in STEP_PHASES.values())
            phases = {name: PhaseFigures(ets, ets * (1 - bound), ets * (1 + bound), STEP_PHASES[name][1],
                                         ets / STEP_PHASES[name][1], STEP_PHASES[name][1] / total_s, ets / total_j, told,
                                         "" if told else "always in the same proportions")
                      for name, ets in energies.items()}
            reps.append(replace(rep, phases=phases))
        cases.append(replace(case, repetitions=tuple(reps)))
    return replace(doc, cases=tuple(cases))


def exact_j(backend, gpu, t0: float, t1: float) -> float:
    """The simulator's exact energy integral over [t0, t1] (the backend's clock is the simulator's)."""
    nvml = backend.nvml
    return (nvml.simExactEnergyMj(gpu.handle, t1) - nvml.simExactEnergyMj(gpu.handle, t0)) / 1000


def marks_truth_j(library, handle, meter, calls: int, rest: str) -> dict[str, float]:
    """Each mark's name's exact energy per call inside the last region (the simulator's integral between
    the marks, ``simExactEnergyMj`` of NVML's or AMD SMI's stand-in), and ``rest`` for the unmarked time."""
    def exact_j(t0: float, t1: float) -> float:
        return (library.simExactEnergyMj(handle, t1) - library.simExactEnergyMj(handle, t0)) / 1000

    assert meter.last_region is not None
    t0, t1 = meter.last_region
    truth: dict[str, float] = {}
    for name, start, end in meter.last_op_marks:
        if end > t0 and start < t1:
            truth[name] = truth.get(name, 0.0) + exact_j(max(start, t0), min(end, t1)) / calls
    truth[rest] = exact_j(t0, t1) / calls - sum(truth.values())
    return truth
