"""On a real GPU, read-only: the energy counter against integrated power, its update period, repeatability, overhead.

    python benchmarks/real_gpu.py                   # on a machine with an NVIDIA GPU (NVML)
    python benchmarks/real_gpu.py --backend sim --device cpu --size tiny --quick   # a dry run

It NEVER changes the GPU's power limit, clocks, persistence or compute mode: it reads NVML and
runs work at whatever limit the GPU has (which the result records). Four parts:

1. **Update period**: the energy counter and the instant-power field are polled every 0.5 ms for a
   few seconds of steady work; the median interval between changes is each one's update period.
2. **Counter against sampling**: over a steady workload of ``--steady-s`` seconds (default 12),
   the counter's energy between its first and last change is compared with the trapezoidal
   integral of the power readings (``NVML_FI_DEV_POWER_INSTANT``, else ``nvmlDeviceGetPowerUsage``)
   over exactly the same interval.
3. **Repeatability**: ``energy_meter.measure`` (5 repetitions of at least 2 s) on three full-size
   reference workloads (residual, vgg, transformer, training); the coefficient of variation of ETS.
4. **Short windows**: ``with meter:`` windows of 50 ms to 1 s, inside steady work and on an idle
   GPU, against the long-run power between two counter ticks ~20 s apart.
5. **Read costs**: the latency of one energy-counter and one power read, of one phase mark's
   moment (a CUDA event's record), and what an empty ``with meter:`` region adds.
6. **Overhead**: the same steady work for 1 s and 10 s, unmeasured and inside ``with meter:``,
   interleaved; the median wall-time ratio minus one; and GIL-bound Python work for 1 s.
7. **The recorder's lattice on the real counter**: after the meter's recorder has learned the
   counter's publication lattice, an independent poller (every 0.5 ms) brackets each publication;
   how far each bracket lies from the lattice's tick, and whether the lattice's own error bound
   holds it.
8. **Drift** (``--drift TAG``, alone): one workload measured with the GPU's temperature and clocks,
   run at the start and the end of a session to show how ETS moves as the GPU warms.

The result goes to ``benchmarks/results/real_gpu[-quick].json`` with the GPU name, driver, CUDA and
the date. With ``--backend sim`` every figure is from the GPU simulator and labelled so.
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import _common as common

NAME = "real_gpu"
WORKLOADS = ("residual", "vgg", "transformer")


@dataclass(frozen=True)
class Lengths:
    """How long each part runs: the full run, ``--quick``, and ``--smoke`` (the project's tests)."""

    steady_s: float                      # the counter against sampling
    margin_s: float                      # ...its readers start this long before the work and stop after it
    repeat: int                          # repeatability: repetitions of measure()
    min_time_s: float                    # ...each at least this long
    workloads: tuple[str, ...]
    mode: str                            # train, or infer (a process's first training step imports torch's compiler)
    window_lengths_s: tuple[float, ...]  # short windows
    per_length: int
    settle_s: float
    phases: tuple[str, ...]
    reads: int                           # read costs: reads timed
    empty_regions: int                   # ...and empty regions
    overhead_lengths_s: tuple[float, ...]
    overhead_pairs: int
    lattice_s: float                     # the independent poller's length


FULL = Lengths(12.0, 0.5, 5, 2.0, WORKLOADS, "train", (0.05, 0.1, 0.2, 0.5, 1.0), 8, 1.5, ("busy", "idle"), 2000, 12,
               (1.0, 10.0), 5, 4.0)
QUICK = replace(FULL, steady_s=3.0, repeat=3, min_time_s=0.5, per_length=3, overhead_lengths_s=(1.0,), overhead_pairs=3)
SMOKE = Lengths(0.4, 0.15, 2, 0.1, WORKLOADS[-1:], "infer", (0.05, 0.2), 1, 0.2, ("busy",), 200, 2, (0.1,), 1, 0.5)


class SteadyWork:
    """Matmuls that keep ``device`` busy: for a while (``spin``), or a fixed number of steps (``steps``).

    The overhead part times a fixed amount of work (a region that stops at a moment cannot take
    longer, whatever slows its work down); the other parts need the GPU busy for a while.
    """

    def __init__(self, device: str) -> None:
        import torch

        self.torch = torch
        self.cuda = device.startswith("cuda")
        size = 8192 if self.cuda else 256
        self.a = torch.randn(size, size, device=device)
        self.b = torch.randn(size, size, device=device)
        self.spin(0.2)  # warm-up: kernels chosen, clocks up

    def _step(self) -> None:
        for _ in range(4):
            self.torch.mm(self.a, self.b)
        if self.cuda:
            self.torch.cuda.synchronize()

    def spin(self, seconds: float) -> None:
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            self._step()

    def steps(self, count: int) -> None:
        for _ in range(count):
            self._step()


def poll(read: Callable[[], int], seconds: float, interval_s: float = 0.0005) -> list[tuple[float, int]]:
    """Read ``read()`` every ``interval_s`` for ``seconds``: ``(time, value)``."""
    samples = []
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        samples.append((time.perf_counter(), read()))
        time.sleep(interval_s)
    return samples


def in_background(fn: Callable[[], Any]) -> tuple[threading.Thread, dict]:
    box: dict = {}
    thread = threading.Thread(target=lambda: box.setdefault("value", fn()), daemon=True)
    thread.start()
    return thread, box


def update_period_s(samples: list[tuple[float, int]]) -> float | None:
    changes = [t for (t, v), (_, previous) in zip(samples[1:], samples) if v != previous]
    gaps = [b - a for a, b in zip(changes, changes[1:])]
    return statistics.median(gaps) if gaps else None


def counter_vs_sampling(gpu: Any, work: SteadyWork, seconds: float, margin_s: float = 0.5) -> dict[str, Any]:
    """The readers start ``margin_s`` before the work and stop ``margin_s`` after it."""
    energy_thread, energy = in_background(lambda: poll(gpu.energy_mj, seconds + 2 * margin_s))
    power_thread, power = in_background(lambda: poll(gpu.power_mw, seconds + 2 * margin_s, 0.005))
    time.sleep(margin_s)
    work.spin(seconds)
    energy_thread.join()
    power_thread.join()
    counter = energy["value"]
    changes = [(t, v) for (t, v), (_, previous) in zip(counter[1:], counter) if v != previous]
    if len(changes) < 2:
        return {"error": "the energy counter did not move"}
    (t0, e0), (t1, e1) = changes[0], changes[-1]
    readings = [(t, w / 1000.0) for t, w in power["value"] if t0 <= t <= t1]
    integral_j = sum((b_t - a_t) * (a_w + b_w) / 2 for (a_t, a_w), (b_t, b_w) in zip(readings, readings[1:]))
    counter_j = (e1 - e0) / 1000.0
    return {
        "interval_s": t1 - t0, "counter_j": counter_j, "sampling_j": integral_j,
        "sampling_vs_counter": integral_j / counter_j - 1 if counter_j > 0 else None,
        "mean_power_w": counter_j / (t1 - t0), "power_source": gpu.power_source,
        "counter_period_s": update_period_s(counter), "power_period_s": update_period_s(power["value"]),
    }


def repeatability(backend: Any, gpu: Any, size: str, device: str, repeat: int, min_time_s: float,
                  workloads: tuple[str, ...] = WORKLOADS, mode: str = "train") -> list[dict]:
    from pytest_gpuenergy.meter import EnergyMeter
    from reference_workloads import build

    rows = []
    for name in workloads:
        # On the simulator a step declares the full-size work, as the energy suite's steps do by default
        # (counting a tiny step's own work would also import torch's compiler, 1.4 s); a real GPU ignores it.
        workload = build(name, size=size, mode=mode, device=device, seed=0, sim_size="full")
        workload.step()
        meter = EnergyMeter(backend, [gpu])
        result = meter.measure(workload.step, repeat=repeat, warmup=2, min_time_s=min_time_s)
        ets = [rep.ets_j for rep in result.per_gpu[0].repetitions]
        rows.append({
            "workload": f"{name}-{mode}-{size}", "repetitions": len(ets), "calls": result.per_gpu[0].repetitions[0].calls,
            "ets_j_mean": statistics.fmean(ets), "ets_cv": statistics.stdev(ets) / statistics.fmean(ets) if len(ets) > 1 else None,
            "time_s_per_step": result.time_s, "mean_power_w": result.per_gpu[0].summary.mean_power_w,
            "method": result.method,
        })
        del workload
    return rows


def overhead(backend: Any, gpu: Any, work: Callable[[int], Any], lengths: tuple[float, ...], pairs: int,
             work_name: str = "torch") -> list[dict]:
    """A fixed amount of ``work`` (calibrated to each length) three ways, in rotating order: with the
    recorder's thread stopped (no meter at all: the baseline), with it running between regions (as
    it does all session once a test has measured), and inside ``with meter:``. The overhead is the
    median of measured / baseline - 1, in wall time.

    Until 2026-11-28 the Python work spun for a length of *process* CPU time, which counts the
    recorder's thread too: its NVML reads cost CPU, and it reads every tick between regions but one
    in eight inside one, so the spin ran longer inside a region than outside it for no fault of the
    meter's (+4.7 % on the H200); the torch work ran for a length of wall time, which no slowdown can
    lengthen; and the baseline ran with the recorder running. The recorder's CPU a second inside the
    regions and between them is recorded beside.
    """
    from pytest_gpuenergy.meter import EnergyMeter

    meter = EnergyMeter(backend, [gpu])
    recorder = meter.recorders[0]
    rows = []
    for length in lengths:
        units = common.calibrate(work, length, start=1 if work_name == "torch" else 1000)
        runs: dict[str, list[float]] = {"stopped": [], "running": [], "measured": []}
        reads_per_s, cpu_ms_per_s, running_cpu_ms_per_s, running_reads_per_s = [], [], [], []
        for i in range(pairs if length < 5 else min(pairs, 3)):   # 10 s regions: three rounds (1.5 minutes)
            for way in _rotated(("stopped", "running", "measured"), i):
                if way == "stopped":
                    recorder.stop()
                    started = time.perf_counter()
                    work(units)
                    runs[way].append(time.perf_counter() - started)
                    _restart(recorder, backend)
                    recorder.wait_until(recorder.clock() + 2 * recorder.period_s)   # reads before the next region
                elif way == "running":
                    started, cpu_before, since = time.perf_counter(), recorder.cpu_s(), recorder.clock()
                    work(units)
                    runs[way].append(time.perf_counter() - started)
                    running_cpu_ms_per_s.append(1000 * (recorder.cpu_s() - cpu_before) / runs[way][-1])
                    until = recorder.clock()
                    running_reads_per_s.append(len(recorder.snapshot(since, until)[0]) / (until - since))
                else:
                    with meter:
                        work(units)
                    runs[way].append(meter.result.time_s)   # T; the wait for the next publication comes after
                    t0, t1 = meter.last_region
                    inside = [r for r in recorder.snapshot(t0, t1)[0] if t0 <= r.started <= t1]
                    reads_per_s.append(len(inside) / (t1 - t0))
                    cpu_ms_per_s.append(1000 * (meter.last_thread_cpu_s or 0.0) / (t1 - t0))
        median = {way: statistics.median(times) for way, times in runs.items()}
        rows.append({"work": work_name, "region_s": length, "units": units, "rounds": len(runs["measured"]),
                     "runs_s": runs, "baseline_median_s": median["stopped"], "running_median_s": median["running"],
                     "measured_median_s": median["measured"],
                     "overhead": median["measured"] / median["stopped"] - 1,
                     "between_regions_overhead": median["running"] / median["stopped"] - 1,
                     "recorder_reads_per_s": statistics.median(reads_per_s),
                     "recorder_cpu_ms_per_s": statistics.median(cpu_ms_per_s),
                     "recorder_cpu_ms_per_s_between_regions": statistics.median(running_cpu_ms_per_s),
                     "recorder_reads_per_s_between_regions": statistics.median(running_reads_per_s)})
    return rows


def _restart(recorder: Any, backend: Any) -> None:
    """Start a stopped recorder again with what it learned (its lattice: no learning again)."""
    from pytest_gpuenergy.meter.recorder import PlanDriver, ThreadDriver

    virtual = backend.virtual_clock
    recorder.driver = (PlanDriver(recorder, virtual, backend.sleep_until) if virtual is not None
                       else ThreadDriver(recorder))
    recorder.driver.start()


def _rotated(ways: tuple[str, ...], i: int) -> tuple[str, ...]:
    shift = i % len(ways)
    return ways[shift:] + ways[:shift]


def until(stop: threading.Event, action: Callable[[], Any]) -> None:
    while not stop.is_set():
        action()


def window_accuracy(backend: Any, gpu: Any, work: SteadyWork, lengths: tuple[float, ...],
                    per_length: int, settle_s: float = 1.5, phases: tuple[str, ...] = ("busy", "idle")) -> list[dict]:
    """Short ``with meter:`` windows inside steady work (and on an idle GPU) against the long-run power.

    While the GPU's power is steady, a window's true ETS is that power times its length, wherever the
    window falls between the counter's 100 ms ticks; the long-run power comes from the counter's first
    and last change over the whole phase (two exact ticks ~20 s apart). The error of a window's mean
    power against it is the meter's dating and edge error on real hardware (plus the power's own
    drift, which the longest windows show). Windows the meter flags as coarse (fewer than two
    counter updates inside) are counted apart: their figure is documented as coarse.
    """
    from pytest_gpuenergy.meter import EnergyMeter

    meter = EnergyMeter(backend, [gpu])
    rows = []
    for phase in phases:
        stop = threading.Event()
        counter: list[tuple[float, int]] = []
        threads = [threading.Thread(target=until, args=(stop, lambda: (counter.append((time.perf_counter(), gpu.energy_mj())),
                                                                       time.sleep(0.0005))), daemon=True)]
        if phase == "busy":
            threads.append(threading.Thread(target=until, args=(stop, lambda: work.spin(0.05)), daemon=True))
        for thread in threads:
            thread.start()
        time.sleep(settle_s)                  # steady power (clocks up, or settled back to idle)
        windows = []
        for _ in range(per_length):
            for length in lengths:
                with meter:
                    time.sleep(length)
                r = meter.result
                windows.append((length, r.ets_j, r.time_s, bool(r.notes), r.ets_low_j, r.ets_high_j))
                time.sleep(0.037)             # windows start at every phase of the counter's period
        time.sleep(0.3)
        stop.set()
        for thread in threads:
            thread.join()
        changes = [(t, v) for (t, v), (_, previous) in zip(counter[1:], counter) if v != previous]
        (t0, e0), (t1, e1) = changes[0], changes[-1]
        power_w = (e1 - e0) / 1000.0 / (t1 - t0)
        for length in lengths:
            mine = [(ets / t / power_w - 1, coarse) for window_s, ets, t, coarse, _, _ in windows if window_s == length]
            errors = [error for error, coarse in mine if not coarse]
            # The bound must hold the long-run power's energy (the truth while power is steady), coarse or not.
            held = [low <= power_w * t <= high for window_s, _, t, _, low, high in windows
                    if window_s == length and low is not None and high is not None]
            rows.append({"phase": phase, "window_s": length, "windows": len(mine), "long_run_power_w": power_w,
                         "bound_held": sum(held), "bound_missed": len(held) - sum(held),
                         "flagged_coarse": len(mine) - len(errors),
                         "worst_flagged_error": max((e for e, c in mine if c), key=abs, default=None),
                         "median_error": statistics.median(errors) if errors else None,
                         "worst_error": max(errors, key=abs) if errors else None})
    return rows


def lattice_on_the_counter(backend: Any, gpu: Any, seconds: float) -> dict[str, Any]:
    """The recorder's learned lattice against publications that an independent poller brackets.

    A poller reading every 0.5 ms sees each publication between two reads (a bracket of about 0.5 ms
    plus one read's cost); the lattice's tick for that publication should lie inside it, give or
    take the lattice's own error bound (``Lattice.error_at``).
    """
    from pytest_gpuenergy.meter import EnergyMeter
    from pytest_gpuenergy.meter.recorder import recorders_of

    meter = EnergyMeter(backend, [gpu])
    with meter:                       # starts the recorder; it learns the lattice from here on
        time.sleep(0.5)
    clock = backend.clock
    started = clock()
    brackets, previous = [], None
    while clock() < started + seconds:
        before = clock()
        value = gpu.energy_mj()
        after = clock()
        if previous is not None and value != previous[1]:
            brackets.append((previous[0], after))     # the old value was there when that read began
        previous = (before, value)
        time.sleep(0.0005)
    recorder = recorders_of(backend).of(gpu)
    reads, lattice = recorder.snapshot(started, clock())
    if lattice is None or not brackets:
        return {"error": "no lattice learned" if lattice is None else "the counter did not move"}
    offsets_ms, inside = [], 0
    for after, before in brackets:
        middle = (after + before) / 2
        tick = lattice.tick_at(round((middle - lattice.phase_s) / lattice.period_s))
        error = lattice.error_at(tick)
        offsets_ms.append(1e3 * (tick - middle))
        inside += after - error <= tick <= before + error
    widths_ms = [1e3 * (before - after) for after, before in brackets]
    return {"period_s": lattice.period_s, "period_range_s": list(lattice.period_range_s), "brackets_in_lattice": lattice.brackets,
            "publications_seen": len(brackets), "poller_bracket_ms_median": statistics.median(widths_ms),
            "tick_minus_bracket_middle_ms_median": statistics.median(offsets_ms),
            "tick_minus_bracket_middle_ms_worst": max(offsets_ms, key=abs),
            "inside_bracket_within_error": inside, "lattice_error_ms_now": 1e3 * lattice.error_at(clock()),
            "recorder_reads_per_s": len(reads) / seconds}


def gpu_state(gpu: Any) -> dict[str, Any]:
    """Temperature and clocks (read-only NVML getters; None where the library has no such reading)."""
    import pynvml

    def read(fn: Callable[[], Any]) -> Any:
        try:
            return fn()
        except Exception:   # noqa: BLE001  (the simulator lacks some getters; a reading is optional)
            return None

    nvml, handle = gpu.nvml, gpu.handle
    return {"temperature_c": read(lambda: nvml.nvmlDeviceGetTemperature(handle, pynvml.NVML_TEMPERATURE_GPU)),
            "sm_clock_mhz": read(lambda: nvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM)),
            "memory_clock_mhz": read(lambda: nvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_MEM)),
            "power_w": read(lambda: nvml.nvmlDeviceGetPowerUsage(handle) / 1000),
            "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}


def drift(backend: Any, gpu: Any, size: str, device: str, lengths: Lengths) -> dict[str, Any]:
    """One workload's ETS with the GPU's temperature and clocks before and after: run at a session's
    start and end, the two show how the same measurement moves as the GPU warms."""
    before = gpu_state(gpu)
    row = repeatability(backend, gpu, size, device, lengths.repeat, lengths.min_time_s, lengths.workloads[:1],
                        mode=lengths.mode)[0]
    return {**row, "before": before, "after": gpu_state(gpu)}


def read_costs(backend: Any, gpu: Any, reads: int = 2000, regions: int = 12) -> dict[str, Any]:
    """What one NVML read costs, and what an empty ``with meter:`` region adds (wall, meter-thread CPU)."""
    from pytest_gpuenergy.meter import EnergyMeter

    def latency_us(read: Callable[[], Any], count: int = reads) -> dict[str, float]:
        took = []
        for _ in range(count):
            started = time.perf_counter()
            read()
            took.append(time.perf_counter() - started)
        took.sort()
        return {"median_us": 1e6 * statistics.median(took), "p99_us": 1e6 * took[int(0.99 * len(took))]}

    meter = EnergyMeter(backend, [gpu])
    added, waited, thread_cpu = [], [], []
    for _ in range(regions):
        started = time.perf_counter()
        with meter:
            pass
        added.append(meter.result.time_s)
        waited.append(time.perf_counter() - started - meter.result.time_s)
        thread_cpu.append(meter.last_thread_cpu_s)
    # What one phase mark's moment costs the host (a CUDA event recorded on the current stream where
    # torch's CUDA is in use; the simulator's queue time on the simulator): phase_marks_overhead's
    # goal figure leaves the simulator's out, and this is what a real GPU puts in its place.
    with meter:
        mark = latency_us(backend.mark_moment, max(reads // 10, 1))
    # Each region also asks, from the test's own thread, for the GPU's running processes (at its start
    # and end) and its limits (once): what --energy-all costs a short test on a real GPU is mostly these.
    return {"energy_read": latency_us(gpu.energy_mj), "power_read": latency_us(gpu.power_mw), "mark_moment": mark,
            "processes_read": latency_us(gpu.processes, max(reads // 10, 1)),
            "limits_read": latency_us(gpu.limits, max(reads // 10, 1)),
            "empty_region_ms_median": 1e3 * statistics.median(added), "empty_region_ms_max": 1e3 * max(added),
            "wait_for_publication_ms_median": 1e3 * statistics.median(waited),
            "meter_thread_cpu_ms_median": 1e3 * statistics.median(thread_cpu)}


def read_only_parser(description: str) -> argparse.ArgumentParser:
    """The options of every script that measures a real GPU read-only (and dry-runs on the simulator)."""
    p = common.parser(description)
    p.add_argument("--backend", default="nvml", choices=("nvml", "sim"), help="nvml (a real GPU, default) or sim (a dry run)")
    p.add_argument("--gpu", default="0", help="which GPU (NVML index or UUID)")
    p.add_argument("--device", default="cuda", help="torch device for the work (default cuda)")
    p.add_argument("--size", default="full", choices=("tiny", "full"), help="size of the reference workloads")
    return p


def open_read_only(backend_name: str, which: str, title: str) -> tuple[Any, Any, Any]:
    """The GPU ``which``, its backend and its limits now, with every NVML setter refusing on a real GPU
    (``read_only_nvml``); prints the run's first line. The meter's warnings are silenced for the run."""
    if backend_name == "nvml":
        import read_only_nvml  # noqa: F401  (every NVML setter refuses: this run only reads)
    from pytest_gpuenergy.gpu.device import open_backend

    backend = open_backend(backend_name)
    gpu = backend.select(which)[0]
    limits = gpu.limits()
    warnings.simplefilter("ignore")
    label = "SIMULATED GPU (dry run)" if backend.simulated else "real GPU, read-only"
    print(f"{title}: {gpu.name}, {label}, driver {backend.driver_version}, "
          f"limit {limits.enforced_mw / 1000:g} W (not changed)\n", flush=True)
    return backend, gpu, limits


def machine_of(backend: Any, gpu: Any, cuda: str | None = None) -> dict[str, Any]:
    """``write_result``'s description of the GPU a run used: simulated, or real with its driver (and CUDA)."""
    if backend.simulated:
        return {"simulated_gpus": [gpu.name], "real_gpu": None}
    return {"simulated_gpus": None,
            "real_gpu": f"{gpu.name}, driver {backend.driver_version}" + (f", CUDA {cuda}" if cuda else "")}


def overhead_rows(backend: Any, gpu: Any, work: SteadyWork, lengths: Lengths) -> list[dict]:
    """Steady torch work at every overhead length, GIL-bound Python work at the first."""
    return (overhead(backend, gpu, work.steps, lengths.overhead_lengths_s, lengths.overhead_pairs)
            + overhead(backend, gpu, common.python_work, lengths.overhead_lengths_s[:1], lengths.overhead_pairs, "python"))


def print_overhead(rows: list[dict]) -> None:
    common.print_table(["work", "region s", "rounds", "no meter s", "measured s", "overhead", "between regions", "reads/s",
                        "recorder CPU ms/s", "...between regions", "reads/s between"],
                       [[r["work"], r["region_s"], r["rounds"], r["baseline_median_s"], r["measured_median_s"],
                         common.pct(r["overhead"], 2), common.pct(r["between_regions_overhead"], 2),
                         round(r["recorder_reads_per_s"], 1), round(r["recorder_cpu_ms_per_s"], 2),
                         round(r["recorder_cpu_ms_per_s_between_regions"], 2),
                         round(r["recorder_reads_per_s_between_regions"], 1)] for r in rows],
                       title="Meter overhead on a fixed amount of steady GPU work and of GIL-bound Python work "
                             "(against no meter; between regions: the recorder running, no region)")


def main() -> None:
    p = read_only_parser(__doc__.splitlines()[0])
    p.add_argument("--steady-s", type=float, default=12.0, help="length of the steady workload (default 12 s)")
    p.add_argument("--smoke", action="store_true",
                   help="the shortest run that exercises every part (the short windows in steady work only, repeatability on one "
                        "inference step; the project's "
                        "tests use it with --backend sim); its figures are too few to quote")
    p.add_argument("--drift", metavar="TAG",
                   help="only the drift part (one workload with the GPU's temperature and clocks), written as real_gpu_drift_TAG: "
                        "run it at a session's start and end")
    p.add_argument("--overhead-only", action="store_true",
                   help="only the overhead part at 1 s, written as real_gpu_overhead (a short check on a lent GPU)")
    args = p.parse_args()
    if args.smoke:
        args.quick = True
    lengths = SMOKE if args.smoke else QUICK if args.quick else replace(FULL, steady_s=args.steady_s)
    import torch

    started = time.time()
    backend, gpu, limits_before = open_read_only(args.backend, args.gpu, f"{NAME}{' (quick)' if args.quick else ''}")
    if args.drift:
        try:
            row = drift(backend, gpu, args.size, args.device, lengths)
        finally:
            backend.close()
        common.print_table(["figure", "value"], [[k, v] for k, v in row.items()], title=f"Drift ({args.drift})")
        print("wrote", common.write_result(f"{NAME}_drift_{args.drift}", {"gpu": {"name": gpu.name, "driver": backend.driver_version,
                                                                                  "simulated": backend.simulated}, "drift": row},
                                           quick=args.quick, started=started, out_dir=args.out, **machine_of(backend, gpu)))
        return
    if args.overhead_only:
        try:
            over = overhead_rows(backend, gpu, SteadyWork(args.device), replace(lengths, overhead_lengths_s=(1.0,)))
        finally:
            backend.close()
        print_overhead(over)
        print("wrote", common.write_result(f"{NAME}_overhead", {"gpu": {"name": gpu.name, "driver": backend.driver_version,
                                                                        "simulated": backend.simulated}, "overhead": over},
                                           quick=args.quick, started=started, out_dir=args.out, **machine_of(backend, gpu)))
        return
    try:
        work = SteadyWork(args.device)
        comparison = counter_vs_sampling(gpu, work, lengths.steady_s, margin_s=lengths.margin_s)
        common.print_table(["figure", "value"], [[k, v] for k, v in comparison.items()],
                           title=f"Energy counter against integrated power over {lengths.steady_s:g} s of steady work")
        rows = repeatability(backend, gpu, args.size, args.device, lengths.repeat, lengths.min_time_s, lengths.workloads,
                             mode=lengths.mode)
        common.print_table(["workload", "reps", "calls", "ETS J", "CV", "T s/step", "P W", "method"],
                           [[r["workload"], r["repetitions"], r["calls"], r["ets_j_mean"], common.pct(r["ets_cv"], 2),
                             r["time_s_per_step"], r["mean_power_w"], r["method"]] for r in rows],
                           title=f"Repeatability: energy_meter.measure on {args.size}-size workloads")
        windows = window_accuracy(backend, gpu, work, lengths.window_lengths_s, lengths.per_length,
                                  settle_s=lengths.settle_s, phases=lengths.phases)
        common.print_table(["phase", "window s", "n", "power W", "median error", "worst error", "coarse", "worst coarse",
                            "bound held"],
                           [[r["phase"], r["window_s"], r["windows"], r["long_run_power_w"], common.pct(r["median_error"], 2),
                             common.pct(r["worst_error"], 2), r["flagged_coarse"], common.pct(r["worst_flagged_error"], 1),
                             f"{r['bound_held']}/{r['bound_held'] + r['bound_missed']}"]
                            for r in windows],
                           title="Short windows against the long-run power (steady work, and idle)")
        costs = read_costs(backend, gpu, lengths.reads, lengths.empty_regions)
        common.print_table(["figure", "value"], [
            ["energy counter read, median / p99 us", f"{costs['energy_read']['median_us']:.0f} / {costs['energy_read']['p99_us']:.0f}"],
            ["power read, median / p99 us", f"{costs['power_read']['median_us']:.1f} / {costs['power_read']['p99_us']:.1f}"],
            ["running processes read, median / p99 us",
             f"{costs['processes_read']['median_us']:.1f} / {costs['processes_read']['p99_us']:.1f}"],
            ["limits read (4 calls), median / p99 us", f"{costs['limits_read']['median_us']:.1f} / {costs['limits_read']['p99_us']:.1f}"],
            ["phase mark's moment (CUDA event), median / p99 us",
             f"{costs['mark_moment']['median_us']:.1f} / {costs['mark_moment']['p99_us']:.1f}"],
            ["empty region, median / max ms", f"{costs['empty_region_ms_median']:.2f} / {costs['empty_region_ms_max']:.2f}"],
            ["meter thread CPU per empty region ms", f"{costs['meter_thread_cpu_ms_median']:.2f}"],
        ], title="NVML read latency and the fixed cost of a region")
        over = overhead_rows(backend, gpu, work, lengths)
        print_overhead(over)
        lattice = lattice_on_the_counter(backend, gpu, lengths.lattice_s)
        common.print_table(["figure", "value"], [[k, v] for k, v in lattice.items()],
                           title="The recorder's lattice against publications bracketed by a 0.5 ms poller")
    finally:
        limits_after = gpu.limits()
        backend.close()
    if limits_after.enforced_mw != limits_before.enforced_mw:
        print(f"NOTE: the GPU's enforced limit changed during the run ({limits_before.enforced_mw} -> "
              f"{limits_after.enforced_mw} mW) by something else: this script never sets it")
    path = common.write_result(
        NAME,
        {
            "description": "energy counter vs integrated power, update periods, repeatability and meter overhead, read-only",
            "gpu": {"name": gpu.name, "uuid": gpu.uuid, "backend": backend.name, "driver": backend.driver_version,
                    "cuda": torch.version.cuda, "limit_w": limits_before.enforced_mw / 1000,
                    "default_limit_w": limits_before.default_mw / 1000, "simulated": backend.simulated},
            "settings": {"steady_s": lengths.steady_s, "size": args.size, "device": args.device, "smoke": args.smoke},
            "counter_vs_sampling": comparison,
            "repeatability": rows,
            "windows": windows,
            "read_costs": costs,
            "overhead": over,
            "lattice": lattice,
            "gpu_state_after": gpu_state(gpu) if not backend.simulated else None,
            "limit_unchanged": limits_after.enforced_mw == limits_before.enforced_mw,
        },
        quick=args.quick, started=started, out_dir=args.out, **machine_of(backend, gpu, torch.version.cuda),
    )
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
