"""Declared GPU work on a virtual clock: figures that repeat on any host, noise on purpose only."""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pytest_gpuenergy.sim import GpuWork, SimulatedNvml, declare_work
from pytest_gpuenergy.sim.clock import VirtualClock, clock_from_env
from pytest_gpuenergy.sim.models import GPU_MODELS
from pytest_gpuenergy.sim.roofline import ACTIVE_IDLE_FACTOR, run_step, step_times
from pytest_gpuenergy.sim.work import StepWork, declare_host_time

CONV_STEP = GpuWork(flops_tf32=2.0e12, flops_fp32=1e10, bytes=5e10, kernels=900)    # a ResNet-50 training step
EMBEDDING_STEP = GpuWork(flops_fp32=1.7e9, bytes=1e10, kernels=160)                # memory-bound
LAUNCH_BOUND_STEP = GpuWork(flops_fp32=3e8, bytes=6e7, kernels=120)                 # a tiny MLP


def run(lib: SimulatedNvml, work: GpuWork, steps: int, *, index: int = 0) -> tuple[float, float]:
    """(seconds, joules) of ``steps`` declared steps, from one synchronisation to the next."""
    handle = lib.nvmlDeviceGetHandleByIndex(index)
    lib.simSynchronize()
    t0, e0 = lib.simClock().now(), lib.simExactEnergyMj(handle)
    for _ in range(steps):
        declare_work(work)
    lib.simSynchronize()
    return lib.simClock().now() - t0, (lib.simExactEnergyMj(handle) - e0) / 1000


def fresh(state: Path, **options: float) -> SimulatedNvml:
    """A new simulated machine in ``state``, counting declared work only."""
    opened = SimulatedNvml(state_dir=state, **options)
    opened.nvmlInit()
    opened.simCountCpuWork(False)
    return opened


@pytest.fixture
def lib(sim_state):
    opened = fresh(sim_state, noise_cv=0.0)
    yield opened
    opened.nvmlShutdown()


def test_declared_work_gives_the_same_figures_to_the_last_digit_whatever_the_host_does(tmp_path):
    def session(name: str) -> list[tuple[float, float]]:
        lib = fresh(tmp_path / name, noise_cv=0.02, seed=3)
        figures = [run(lib, CONV_STEP, 20), run(lib, EMBEDDING_STEP, 30), run(lib, LAUNCH_BOUND_STEP, 50)]
        burned = time.process_time()
        for _ in range(200_000):       # this process burns CPU too: not declared, not GPU work
            pass
        assert time.process_time() > burned
        figures.append(run(lib, CONV_STEP, 20))
        lib.nvmlShutdown()
        return figures

    quiet = session("quiet")
    hog = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.2)
        busy = session("busy")
    finally:
        hog.kill()
        hog.wait()
    assert quiet == busy


def test_declared_work_takes_the_time_and_energy_the_roofline_model_gives(lib):
    expected = run_step(GPU_MODELS["H100"], CONV_STEP, 700.0)
    seconds, joules = run(lib, CONV_STEP, 20)
    assert seconds == pytest.approx(20 * expected.step_s, rel=1e-9)
    assert joules == pytest.approx(20 * expected.energy_j, rel=1e-6)


def test_virtual_time_does_not_move_while_the_host_sleeps(lib):
    before = lib.simClock().now()
    time.sleep(0.2)
    assert lib.simClock().now() == before
    lib.simSleepUntil(before + 1.5)
    assert lib.simClock().now() == before + 1.5


def test_a_cap_slows_compute_bound_work_more_than_memory_bound_and_spares_launch_bound_work(lib):
    handle = lib.nvmlDeviceGetHandleByIndex(0)
    times = {}
    for limit_mw in (700_000, 200_000):
        lib.nvmlDeviceSetPowerManagementLimit(handle, limit_mw)
        times[limit_mw] = {name: run(lib, work, 5) for name, work in
                           (("conv", CONV_STEP), ("embedding", EMBEDDING_STEP), ("launch", LAUNCH_BOUND_STEP))}
    lib.nvmlDeviceSetPowerManagementLimit(handle, 700_000)
    slowdown = {name: times[200_000][name][0] / times[700_000][name][0] for name in times[700_000]}
    assert slowdown["conv"] > 1.3 * slowdown["embedding"] > 1.0
    assert slowdown["launch"] == pytest.approx(1.0, abs=0.02)       # the host, not the GPU, sets its pace
    assert times[200_000]["conv"][1] < times[700_000]["conv"][1]      # a cap saves energy on this work


def test_a_launch_bound_step_draws_little_more_than_a_working_idle_gpu(lib):
    seconds, joules = run(lib, LAUNCH_BOUND_STEP, 50)
    assert 120 < joules / seconds < 180          # the real H100 drew 130-145 W on such steps


def test_noise_is_seeded_drawn_per_kind_of_step_and_repeats(tmp_path):
    def figures(seed: int) -> list[tuple[float, float]]:
        lib = fresh(tmp_path / f"{seed}-{time.monotonic_ns()}", noise_cv=0.05, seed=seed)
        out = [run(lib, GpuWork(flops_tf32=1e12 * (1 + k / 10), bytes=1e10, kernels=100), 3) for k in range(12)]
        lib.nvmlShutdown()
        return out

    first, again, other = figures(7), figures(7), figures(8)
    assert first == again and first != other
    expected = [run_step(GPU_MODELS["H100"], GpuWork(flops_tf32=1e12 * (1 + k / 10), bytes=1e10, kernels=100), 700.0)
                for k in range(12)]
    deviations = [seconds / (3 * e.step_s) - 1 for (seconds, _), e in zip(first, expected)]
    assert 0.01 < statistics.pstdev(deviations) < 0.15     # about the 5 % asked for (and its per-region part)


def test_the_clock_and_noise_settings_are_checked(monkeypatch):
    assert clock_from_env(None) == "virtual" and clock_from_env("WALL") == "wall"
    with pytest.raises(ValueError, match="GPUENERGY_SIM_CLOCK='sundial'"):
        clock_from_env("sundial")
    monkeypatch.setenv("GPUENERGY_SIM_SEED", "x")
    with pytest.raises(ValueError, match="GPUENERGY_SIM_SEED='x' is not a whole number"):
        SimulatedNvml()
    with pytest.raises(ValueError, match="flops_tf32 must be a number"):
        GpuWork(flops_tf32=-1)
    with pytest.raises(ValueError, match="empty"):
        GpuWork()


def test_a_virtual_clock_wakes_plans_in_order_at_the_moments_they_ask_for():
    clock = VirtualClock()
    seen = []

    def plan(name: str, every: float):
        while True:
            seen.append((name, clock.now()))
            yield clock.now() + every

    clock.start(plan("a", 0.3), pytest.fail)
    clock.start(plan("b", 0.5), pytest.fail)
    clock.advance_to(1.0)
    assert seen == [("a", 0.0), ("b", 0.0), ("a", 0.3), ("b", 0.5), ("a", 0.6), ("a", 0.8999999999999999), ("b", 1.0)]
    assert clock.now() == 1.0


def test_work_declared_without_a_simulator_is_ignored():
    declare_work(flops_fp32=1e9)      # no simulator open: nothing happens, nothing fails


def test_step_times_follow_the_data_sheets():
    h100, v100 = step_times(GPU_MODELS["H100"], CONV_STEP), step_times(GPU_MODELS["V100"], CONV_STEP)
    assert h100.compute_s < v100.compute_s / 10       # TF32 tensor cores against V100's FP32 units
    assert v100.compute_bound > h100.compute_bound


def test_host_only_time_is_the_gpu_idle_at_its_working_clocks_the_same_on_any_host(lib):
    """declare_host_time: the host waits for the GPU, then works alone; the GPU idles that long at the
    power a GPU between a step's kernels draws (ACTIVE_IDLE_FACTOR x idle), whatever the host really did."""
    h100 = GPU_MODELS["H100"]
    handle = lib.nvmlDeviceGetHandleByIndex(0)
    declare_work(CONV_STEP)                                  # queued work first: host time comes after it
    queued_until = lib.simQueuedUntil()
    burned = time.process_time()
    declare_host_time(0.004)
    while time.process_time() < burned + 0.05:              # the host really spends 50 ms: not what counts
        pass
    assert lib.simQueuedUntil() == pytest.approx(queued_until + 0.004, abs=1e-12)
    lib.simSynchronize()
    energy_mj = lib.simExactEnergyMj(handle, queued_until + 0.004) - lib.simExactEnergyMj(handle, queued_until)
    assert energy_mj / 1000 == pytest.approx(ACTIVE_IDLE_FACTOR * h100.idle_w * 0.004, rel=1e-9)
    with pytest.raises(ValueError, match="declared host time must be a number of seconds from 0 to 3600, got -1"):
        declare_host_time(-1)


def test_a_step_declared_phase_by_phase_takes_as_long_as_declared_at_once_and_its_phases_differ_in_power(lib):
    """The host launches ahead of the GPU: an optimizer's many small kernels after the backward pass cost
    their GPU time, not their launches', so the split step lasts as the whole one did (max(G, H))."""
    handle = lib.nvmlDeviceGetHandleByIndex(0)
    forward = GpuWork(flops_tf32=0.7e12, bytes=1.5e10, kernels=280)
    backward = GpuWork(flops_tf32=1.4e12, bytes=2.9e10, kernels=180)
    update = GpuWork(bytes=8e8, kernels=480)                 # launch-bound alone: 12 ms of launches, 0.4 ms of GPU
    whole = StepWork(forward=forward, backward=backward, update=update)
    at_once, _ = run(lib, whole.total, 5)
    lib.simSynchronize()
    marks = [lib.simQueuedUntil()]
    for work in (forward, backward, update):
        declare_work(work)
        marks.append(lib.simQueuedUntil())
    lib.simSynchronize()
    split_s = marks[-1] - marks[0]
    assert split_s == pytest.approx(at_once / 5, rel=0.01)
    powers_w = [(lib.simExactEnergyMj(handle, b) - lib.simExactEnergyMj(handle, a)) / 1000 / (b - a)
                for a, b in zip(marks, marks[1:])]
    assert marks[3] - marks[2] < 0.001                       # the update's GPU time only
    assert min(powers_w[:2]) > 400 and powers_w[2] < powers_w[0]
    assert whole.scaled(1.1).total.flops_tf32 == pytest.approx(1.1 * whole.total.flops_tf32, rel=1e-12)
    assert whole.with_total(whole.total) is whole and whole.with_total(whole.total.scaled(2)).update == update.scaled(2)
    assert StepWork.from_json(whole.to_json()) == whole


def test_count_step_splits_a_training_step_by_the_points_watch_marks_and_adds_up_to_count_work():
    """Backward is autograd's graph task, update the optimizer's step, forward the model's own call; the
    loss and zero_grad are other."""
    import torch

    from pytest_gpuenergy.sim.counting import count_step, count_work

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    batch, target = torch.randn(16, 32), torch.randn(16, 8)

    def step() -> None:
        optimizer.zero_grad()
        torch.nn.functional.mse_loss(model(batch), target).backward()
        optimizer.step()

    phases, _ = count_step(step, model)
    whole, _ = count_work(step)
    assert phases.total == whole
    assert phases.forward is not None and phases.forward.flops_fp32 == 2 * 16 * (32 * 64 + 64 * 8)
    assert phases.backward is not None and phases.backward.flops_fp32 == 2 * phases.forward.flops_fp32 - 2 * 16 * 32 * 64
    assert phases.update is not None and phases.update.flops_fp32 == 0 and phases.update.kernels > 0
    assert phases.other is not None and phases.other.kernels > 0 and phases.other.flops_fp32 == 0
