"""The meter against the simulator's exact integral, the honesty of every figure, and the physics
the simulator promises."""

from __future__ import annotations

import bisect
import random
import statistics
import time
import warnings

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from pytest_gpuenergy.errors import MeasurementError
from pytest_gpuenergy.gpu.capping import PowerCapper, power_journal_for
from pytest_gpuenergy.gpu.device import open_backend
from pytest_gpuenergy.gpu.specs import parse_cap
from pytest_gpuenergy.meter import EnergyMeter
from pytest_gpuenergy.meter.integrate import Publication, Read, counter_energy, publications, sampled_energy
from pytest_gpuenergy.meter.lattice import Bracket, TickLearner
from pytest_gpuenergy.meter.recorder import VIRTUAL_WARM_UP_S
from pytest_gpuenergy.meter.region import CPU_TIME_NOTE, NO_TIME_NOTE
from pytest_gpuenergy.sim import declare_work
from pytest_gpuenergy.sim.models import GPU_MODELS
from pytest_gpuenergy.sim.roofline import GpuWork

from helpers import declare, exact_j, spin


@pytest.mark.parametrize("gpus, faults, counter_read_ms, clock, methods", [
    ("H100", "", "0", "virtual", ["counter"]), ("H100", "no_counter", "0", "virtual", ["sampling"]),
    ("H100,H100", "no_counter@1", "2.4", "wall", ["counter", "sampling"]),
], ids=["counter", "sampling", "in-real-time-counter-read-in-2.4ms-as-on-a-real-H100-and-sampling-side-by-side"])
@pytest.mark.slow
def test_measured_ets_matches_the_exact_integral_and_the_bound_holds_it(monkeypatch, gpus, faults,
                                                                        counter_read_ms, clock, methods):
    """In real time two GPUs share the regions: GPU 0 read by its counter, each read taking 2.4 ms as on
    a real H100 (reads at no cost: the virtual clock's case), GPU 1 (no counter) by sampling.

    The work is declared on both clocks. In real time, spinning the CPU instead (the stand-in for
    undeclared work) makes the simulated GPU's power follow the host's scheduler: beside two busy
    processes on 2 cores its 10 ms means swung between 260 and 650 W within a region, and where such a
    swing fell in a region's partly seen edge, the estimate was 2-5 % off (inside its bound, which
    held): 3 of 18 regions, so a few CI runs in a hundred failed the median below. Declared work runs
    steadily in real time; the host's load still holds up the 2.4 ms reads, which this checks.
    (Measured 2026-11-28: 60 declared regions beside the same two processes, at most 1.6 % off.)"""
    monkeypatch.setenv("GPUENERGY_SIM_GPUS", gpus)
    monkeypatch.setenv("GPUENERGY_SIM_FAULTS", faults)
    monkeypatch.setenv("GPUENERGY_SIM_COUNTER_READ_MS", counter_read_ms)
    monkeypatch.setenv("GPUENERGY_SIM_CLOCK", clock)
    backend = open_backend("sim")
    chosen = backend.select(None)
    meter = EnergyMeter(backend, chosen)
    meter.measure(declare, 0.05, repeat=1, warmup=1, min_time_s=0.05)   # the recorder learns the lattice meanwhile
    errors: list[list[float]] = [[] for _ in chosen]
    for _ in range(3):
        with meter:
            declare(0.6)
        result = meter.result
        for gpu, part, gpu_errors in zip(chosen, result.per_gpu, errors):
            truth = exact_j(backend, gpu, *meter.last_region)
            gpu_errors.append(abs(part.ets_j / truth - 1))
            assert part.ets_low_j <= truth <= part.ets_high_j, (gpu.index, part.ets_low_j, truth, part.ets_high_j)
    backend.close()
    assert [part.method for part in result.per_gpu] == methods
    for method, gpu_errors in zip(methods, errors):   # median of three, generous for a busy CI machine
        assert sorted(gpu_errors)[1] < (0.05 if method == "sampling" else 0.02), (method, gpu_errors)


@pytest.mark.parametrize("cap", ["60%", "100%"])
def test_a_short_block_never_reads_0_j_nor_more_power_than_the_gpu_can_draw(backend, cap):
    """The issue's case: `with energy_meter:` around 5-50 ms of work under a cap. Every figure is
    positive, its mean power within the limit, and its bound holds the exact integral."""
    gpus = backend.select(None)
    with PowerCapper(gpus, power_journal_for(backend), backend.state_dir / "locks") as capper:
        capper.apply(parse_cap(cap))
        limit_w = gpus[0].enforced_limit_mw() / 1000
        meter = EnergyMeter(backend, gpus)
        for seconds in (0.005, 0.015, 0.05, 0.005, 0.015, 0.05):
            with warnings.catch_warnings():
                warnings.simplefilter("error")          # a short block is a note on its result, never a warning
                with meter:
                    spin(seconds)
            result = meter.result
            truth = exact_j(backend, gpus[0], *meter.last_region)
            assert result.ets_j > 0 and 0 < result.mean_power_w <= limit_w, result.describe()
            assert result.ets_low_j <= truth <= result.ets_high_j, (result.describe(), truth)
            assert result.ets_high_j <= 1.1 * gpus[0].limits().max_mw / 1000 * result.time_s + 1e-3
            assert any("too short" in note and "truth lies in" in note for note in result.notes), result.notes


def test_twice_the_work_measures_about_twice_the_energy(backend):
    """ETS = idle power x T + the work's energy: the work's part doubles with the work (within the
    simulator's noise). Medians of three pairs."""
    meter = EnergyMeter(backend, backend.select(None))
    idle_w = GPU_MODELS["H100"].idle_w
    meter.measure(declare, 0.05, warmup=1, min_time_s=0.05)
    work_ratios, ets_ratios = [], []
    for _ in range(3):
        figures = []
        for seconds in (0.3, 0.6):
            with meter:
                declare(seconds)
            figures.append((meter.result.ets_j, meter.result.ets_j - idle_w * meter.result.time_s))
        (once, once_work), (twice, twice_work) = figures
        ets_ratios.append(twice / once)
        work_ratios.append(twice_work / once_work)
    assert statistics.median(work_ratios) == pytest.approx(2.0, rel=0.1), work_ratios
    assert 1.6 < statistics.median(ets_ratios) < 2.2, ets_ratios


def test_a_block_with_twice_the_work_of_a_short_one_measures_1_5_to_2_6_times_its_energy(backend):
    meter = EnergyMeter(backend, backend.select(None))
    ratios = []
    for _ in range(3):
        energies = []
        for seconds in (0.15, 0.3):
            with meter:
                declare(seconds)
            energies.append(meter.result.ets_j)
        ratios.append(energies[1] / energies[0])
    assert all(1.5 <= r <= 2.6 for r in ratios), ratios


def test_measure_starts_its_regions_on_a_publication_and_keeps_the_bound_tight(backend):
    meter = EnergyMeter(backend, backend.select(None))
    backend.sleep_until(backend.clock() + 0.3)                # the recorder learns the lattice meanwhile
    result = meter.measure(spin, 0.002, repeat=2, min_time_s=0.3)
    recorder = meter.recorders[0]
    lattice = recorder.learner.lattice
    t0, _ = meter.last_region
    after_tick = t0 - lattice.tick_at(lattice.index_before(t0))
    assert 0 < after_tick < 0.02, after_tick                  # just after a publication
    # Unaligned, a 0.3 s region's partly seen edges leave a bound 10-37 % of its figure wide; aligned,
    # about 1 % (measured here, 5 regions each; a little more on a loaded machine, whose reads come late).
    assert result.ets_high_j - result.ets_low_j < 0.1 * result.ets_j, result.describe()
    assert result.notes == (CPU_TIME_NOTE,)          # spin() declares nothing: CPU time stands for its work


def test_long_calls_whose_warm_up_misjudged_them_are_measured_again_until_the_bound_is_tight(backend):
    """Calls of 18 ms (more than a tenth of the counter's period) are planned to end just after a
    publication from the warm-up call's time. A warm-up 4 % slower than the calls after it (a first
    call's allocations) puts the planned end most of a period past a tick, and the bound 10 % wide
    (seen in the main job at a 40 % cap); measure() then measures again, as many calls planned from
    the region's own time per call, so that the result is not coarse."""
    meter = EnergyMeter(backend, backend.select(None))
    backend.sleep_until(backend.clock() + 0.3)                # the recorder learns the lattice meanwhile
    calls = []

    def step():
        declare(0.0187 if not calls else 0.018)               # the warm-up, then the steady calls
        calls.append(1)

    result = meter.measure(step, min_time_s=0.5)
    share = max(result.ets_j - result.ets_low_j, result.ets_high_j - result.ets_j) / result.ets_j
    assert not result.coarse and share <= 0.05, result.describe()
    assert len(calls) >= 1 + 2 * 27, len(calls)               # the warm-up, a first region of about 28 calls, another


def test_calls_that_declare_nothing_after_declared_work_are_measured_at_once_and_flagged(backend):
    """Once a test declared work, only declared work runs on the simulated GPU: calls that declare
    nothing take no simulated time. measure() must neither call them forever to fill its regions
    nor make up a power, and the figure says why it is 0."""
    meter = EnergyMeter(backend, backend.select(None))
    with meter:
        declare(0.3)
    started = time.process_time()
    result = meter.measure(spin, 0.002, repeat=2, min_time_s=0.5)
    assert time.process_time() - started < 0.5                # a few calls, not thousands of 2 ms each
    assert result.ets_j == 0 and result.time_s == 0
    assert result.peak_power_w <= GPU_MODELS["H100"].max_limit_w
    assert NO_TIME_NOTE in result.notes


# Memory-bound declared work: at full clocks 9.2 ms of compute and 21.4 ms of memory traffic a call
# on an H100 (30 % compute), so a cap slows it little and saves energy. Declared, it costs the host no
# CPU (a CPU spin with compute_bound=0.3, as until 2026-11-28, took 9-15 s of this test's CPU).
MEMORY_BOUND_WORK = GpuWork(flops_tf32=1e12, bytes=3.95e10)


def measure_at(backend, gpus, cap_text):
    with PowerCapper(gpus, power_journal_for(backend), backend.state_dir / "locks") as capper:
        capper.apply(parse_cap(cap_text))
        meter = EnergyMeter(backend, gpus)
        return meter.measure(declare_work, MEMORY_BOUND_WORK, repeat=1, warmup=1, min_time_s=0.2)


def test_a_low_cap_saves_energy_on_memory_bound_work_and_edp_has_an_interior_optimum(backend):
    gpus = backend.select(None)
    results = {cap: measure_at(backend, gpus, cap) for cap in ("min", "40%", "60%", "default")}
    energy = {cap: r.ets_j for cap, r in results.items()}
    edp = {cap: r.edp_js for cap, r in results.items()}
    assert energy["min"] < 0.9 * energy["default"]
    assert results["min"].time_s > results["default"].time_s        # slower, but cheaper
    best_edp = min(edp, key=edp.get)
    assert best_edp in ("40%", "60%"), f"EDP by cap: {edp}"
    assert gpus[0].current_limit_mw() == 700_000                   # every cap came back


def test_a_counter_that_goes_backwards_during_a_region_gives_no_figure(backend):
    meter = EnergyMeter(backend, backend.select(None))
    backend.sleep_until(backend.clock() + 0.3)       # a fresh counter cannot go below 0: let it count
    with meter:
        backend.nvml.simArmFaults("counter_backwards=2-5")
        declare(0.5)
    pending = meter._results[-1]
    assert pending.at_most() is None              # no bound so far for a budget's verdict: it waits for the error
    with pytest.raises(MeasurementError, match="went backwards"):     # said when the figure is worked out
        meter.result


def test_a_stuck_counter_gives_no_figure(backend):
    meter = EnergyMeter(backend, backend.select(None))
    backend.nvml.simArmFaults("counter_stuck=1")
    with meter:
        declare(0.5)
    with pytest.raises(MeasurementError, match="did not move"):
        meter.result
    with pytest.raises(MeasurementError, match="did not move"):      # and again: the figure is no figure
        meter.results


def test_a_lost_gpu_is_named(backend):
    meter = EnergyMeter(backend, backend.select(None))
    with pytest.raises(MeasurementError, match="is lost"), meter:
        backend.nvml.simArmFaults("lost")
        declare(0.2)


def test_a_block_that_raises_records_nothing_and_its_result_says_why(backend):
    meter = EnergyMeter(backend, backend.select(None))
    with pytest.raises(ZeroDivisionError), meter:
        1 / 0
    assert meter.results == []
    with pytest.raises(MeasurementError, match="no figure for the last measured block: it raised ZeroDivisionError"):
        meter.result
    with meter:
        declare(0.2)
    assert meter.result.ets_j > 0                      # a block that ends gives its figure again
    with pytest.raises(KeyError), meter:
        raise KeyError("x")
    with pytest.raises(MeasurementError, match="raised KeyError before it ended .the figures of earlier blocks"):
        meter.result


def test_a_meter_that_measured_nothing_says_how_to_measure(backend):
    with pytest.raises(MeasurementError, match="measured nothing yet: wrap the work"):
        EnergyMeter(backend, backend.select(None)).result


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"repeat": 0}, "repeat must be a whole number >= 1"),
    ({"warmup": -1}, "warmup must be a whole number >= 0"),
    ({"min_time_s": -1}, "min_time_s must be a non-negative number"),
])
def test_measure_rejects_bad_arguments(backend, kwargs, message):
    meter = EnergyMeter(backend, backend.select(None))
    with pytest.raises(ValueError, match=message):
        meter.measure(spin, 0.01, **kwargs)


def test_the_meter_reports_what_its_recorder_cost(monkeypatch):
    """The overhead benchmark's decomposition reads this: CPU the recorder thread used in a region
    (in real time: on the simulator's virtual clock the recorder runs without a thread)."""
    monkeypatch.setenv("GPUENERGY_SIM_CLOCK", "wall")
    backend = open_backend("sim")
    meter = EnergyMeter(backend, backend.select(None))
    assert meter.last_thread_cpu_s is None
    with meter:
        spin(0.3)
    backend.close()
    assert 0.0 < meter.last_thread_cpu_s < 0.1   # a few reads per 100 ms tick, never the work itself


def test_each_backend_has_its_own_recorders_so_no_test_depends_on_another():
    """Lattices live with a backend's recorders, not in a process-wide cache: a new backend (a new
    session) learns afresh, and closing a backend stops its threads."""
    first = open_backend("sim")
    meter = EnergyMeter(first, first.select(None))
    meter.measure(spin, 0.01, min_time_s=0.3)
    thread = meter.recorders[0]
    assert thread.learner.lattice is not None and thread.is_alive()
    first.close()
    assert not thread.is_alive()
    second = open_backend("sim")
    fresh = EnergyMeter(second, second.select(None)).recorders[0]
    # A new recorder learns from its own reads only: on the virtual clock, those of its warm-up.
    assert fresh is not thread and fresh.learner is not thread.learner
    assert fresh.learner.brackets and all(b.before <= VIRTUAL_WARM_UP_S + 0.01 for b in fresh.learner.brackets)
    second.close()


def test_reads_too_slow_to_date_the_ticks_still_give_a_bound_that_holds_the_truth(monkeypatch):
    """12 ms per counter read (the H100's p99 was 16 ms): the publications are dated only within
    wide brackets, and the bound says so by being wider; it still holds the exact integral."""
    monkeypatch.setenv("GPUENERGY_SIM_COUNTER_READ_MS", "12")
    monkeypatch.setenv("GPUENERGY_SIM_CLOCK", "wall")         # read costs are real time
    backend = open_backend("sim")
    gpu = backend.select(None)[0]
    meter = EnergyMeter(backend, [gpu])
    with meter:
        spin(0.3)
    truth = exact_j(backend, gpu, *meter.last_region)
    backend.close()
    result = meter.result
    assert result.ets_j > 0 and result.ets_low_j <= truth <= result.ets_high_j


# -- the pure maths: publications, integration and its bound -----------------------------------------

def _history(rng: random.Random, seconds: float, ceiling_w: float):
    """A random piecewise-constant power history: (start, watts) pieces of 1-80 ms."""
    pieces, t = [], 0.0
    while t < seconds:
        pieces.append((t, rng.choice([0.1, 0.2, 0.5, 0.9, 1.0]) * ceiling_w))
        t += rng.uniform(0.001, 0.08)
    return pieces


class _Energy:
    """The exact energy of a piecewise-constant power history up to any moment (prefix sums: the
    property test below asks it thousands of times per example)."""

    def __init__(self, pieces) -> None:
        self.starts = [start for start, _ in pieces]
        self.watts = [watts for _, watts in pieces]
        self.before = [0.0]
        for (start, watts), (end, _) in zip(pieces, pieces[1:]):
            self.before.append(self.before[-1] + watts * (end - start))

    def until(self, moment: float) -> float:
        index = bisect.bisect_left(self.starts, moment) - 1     # the piece that holds the moment
        if index < 0:
            return 0.0
        return self.before[index] + self.watts[index] * (moment - self.starts[index])


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), read_gap_s=st.sampled_from([0.0005, 0.01, 0.05, 0.11]),
       held_up_s=st.sampled_from([0.0, 0.004, 0.03]))
@example(seed=776, read_gap_s=0.11, held_up_s=0.004)    # 3 brackets, 2 s apart: 20 or 21 periods (see below)
# Reads held up 30 ms, the lattice learned late from two brackets: a publication two ticks before them
# was dated with the error of the tick nearest the read, smaller than its own, and missed the truth
# (the first found by this test in a CI run of 2026-11-28; the second in 40,000 more examples).
@example(seed=15643171, read_gap_s=0.01, held_up_s=0.03)
@example(seed=3171443959, read_gap_s=0.0005, held_up_s=0.03)
def test_the_counter_bound_always_holds_the_true_energy(seed, read_gap_s, held_up_s):
    """Soundness: any power history under the ceiling, a counter published every ~100 ms, reads at
    any pace that may be held up after taking their value, any region: the bound holds the truth,
    and the estimate is positive and inside the bound."""
    rng = random.Random(seed)
    ceiling_w, seconds = 700.0, 3.0
    exact = _Energy(_history(rng, seconds, ceiling_w / 1.1))
    period, phase = rng.uniform(0.099, 0.101), rng.uniform(0, 0.1)
    ticks = [phase + k * period for k in range(int(seconds / period) + 1)]
    reads, t = [], 0.0
    learner = TickLearner()
    while t < seconds - 0.05:
        taken = t + rng.uniform(0, 0.0002)
        published = bisect.bisect_right(ticks, taken)               # ticks at or before the read took its value
        value = int(exact.until(ticks[published - 1]) * 1000) if published else 0
        ended = taken + rng.uniform(0, held_up_s)
        if reads and value != reads[-1].value:
            learner.add(Bracket(reads[-1].started, ended))
        reads.append(Read(t, ended, value))
        t = ended + rng.uniform(0.0001, read_gap_s)
    pubs = publications(reads, learner.lattice, repeats=False)
    t0 = rng.uniform(0.3, seconds - 1.0)
    t1 = t0 + rng.choice([0.003, 0.02, 0.15, 0.6])
    energy = counter_energy(pubs, t0, t1, ceiling_w=ceiling_w, limit_w=ceiling_w / 1.1, final=True)
    truth = exact.until(t1) - exact.until(t0)
    assert energy.low_j - 1e-6 <= truth <= energy.high_j + 1e-6, (energy, truth)
    assert energy.low_j <= energy.ets_j <= energy.high_j and energy.ets_j > 0


def test_a_read_held_up_after_taking_its_value_is_not_dated_by_a_later_tick():
    """A read that began just before tick 17 and, held up (GIL, a descheduled thread), ended after
    tick 18 may show tick 16's value: it cannot be dated by the lattice; a quick read can."""
    learner = TickLearner()
    rng = random.Random(1)
    for k in range(16):
        tick = 0.1 * k
        learner.add(Bracket(tick - rng.uniform(0.0002, 0.002), tick + rng.uniform(0.0002, 0.002)))
    lattice = learner.lattice
    assert lattice.tick_of_read(1.6995, 1.83) is None
    index, error = lattice.tick_of_read(1.602, 1.6025)
    assert lattice.tick_at(index) == pytest.approx(1.6, abs=0.002) and error < 0.002


def test_the_lattice_error_bound_always_holds_the_true_tick():
    """Soundness: for random lattices, brackets up to 6 ms wide (25 ms: the widest kept) and 1 to 8
    ticks apart, or up to 40 where reads are sparse, every true tick lies within the bound of the
    lattice's tick (where the meter relies on it)."""
    rng = random.Random(7)
    for _ in range(600):
        period_s = rng.uniform(0.099, 0.101)
        phase_s = rng.uniform(0, 1000)
        learner = TickLearner()
        ticks = [0]
        longest = rng.choice([8, 40])
        for _ in range(rng.randint(1, 20)):
            ticks.append(ticks[-1] + rng.randint(1, longest))
        widest = rng.choice([0.001, 0.003, 0.006, 0.025])
        for k in ticks:
            tick = phase_s + k * period_s
            before = rng.uniform(0.0002, widest)
            learner.add(Bracket(tick - before, tick + rng.uniform(0.0002, widest - before + 0.0002)))
        lattice = learner.lattice
        if lattice is None:
            continue
        for k in range(ticks[0] - 5, ticks[-1] + 20):
            true_tick = phase_s + k * period_s
            moment = true_tick + rng.uniform(-0.2, 0.2) * period_s
            error = lattice.error_at(moment)
            if error < 0.25 * period_s:
                assert abs(lattice.tick_at(round((moment - lattice.phase_s) / lattice.period_s)) - true_tick) <= error + 1e-9


def test_a_gap_that_two_tick_counts_fit_is_not_bridged_by_a_confident_lattice():
    """Two brackets 100 ms apart, the next one 2 s later (slow, held-up reads keep only a few narrow
    brackets): 20 periods of 104.7 ms fit them as well as the true 21 of 99.5 ms. The learner took
    20 and dated every tick between them up to 60 ms off with a bound of a few ms, and a region's
    energy bound missed the truth (41.5 J outside [55.6, 59.0] J: the property test below found it,
    seed 776). Every true tick must lie within the bound of the lattice's tick, wherever it has one."""
    period_s, phase_s = 0.09952136647597248, 0.08395050015685729
    learner = TickLearner()
    for after, before in ((0.0807364, 0.0896646), (0.1758558, 0.2000583), (2.1718483, 2.1848287)):
        assert after <= phase_s + round((after - phase_s) / period_s) * period_s <= before   # each holds a true tick
        learner.add(Bracket(after, before))
    lattice = learner.lattice
    assert lattice is not None
    for k in range(-2, 30):
        true_tick = phase_s + k * period_s
        error = lattice.error_at(true_tick)
        if error < 0.25 * period_s:
            assert abs(lattice.tick_at(round((true_tick - lattice.phase_s) / lattice.period_s)) - true_tick) <= error + 1e-9, k


def test_a_gap_in_the_power_readings_is_reported_not_hidden():
    steady = [Publication(0.1 * i - 0.0001, 0.1 * i + 0.0001, 300_000, i) for i in range(12)]
    clean = sampled_energy(steady, 0.0, 1.0, window_s=0.025, ceiling_w=770.0, final=True)
    assert not clean.notes and clean.ets_j == pytest.approx(300.0, rel=0.01)
    assert clean.low_j <= 300.0 <= clean.high_j
    gapped = [p for p in steady if not 0.25 < p.when < 0.75]
    reading = sampled_energy(gapped, 0.0, 1.0, window_s=0.025, ceiling_w=770.0, final=True)
    assert reading.ets_j == pytest.approx(300.0, rel=0.01)
    assert any("power was not read for" in note for note in reading.notes), reading.notes
