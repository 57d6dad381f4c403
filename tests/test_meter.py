"""The meter against the simulator's exact integral, and the physics the simulator promises."""

from __future__ import annotations

import random
import statistics
import time

import pytest

from pytest_gpuenergy.capping import PowerCapper, parse_cap
from pytest_gpuenergy.device import open_backend
from pytest_gpuenergy.errors import MeasurementError
from pytest_gpuenergy.journal import journal_for
from pytest_gpuenergy.meter import Cadence, EnergyMeter, Observation
from pytest_gpuenergy.sim.models import GPU_MODELS


def spin(seconds: float) -> None:
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass


@pytest.fixture
def backend(sim_state):
    opened = open_backend("sim")
    yield opened
    opened.close()


@pytest.mark.parametrize("faults, counter_read_ms", [("", "0"), ("no_counter", "0"), ("", "2.4")],
                         ids=["counter", "sampling", "counter-read-2.4ms-as-on-a-real-H100"])
def test_measured_ets_matches_the_exact_integral(sim_state, monkeypatch, faults, counter_read_ms):
    monkeypatch.setenv("GPUENERGY_SIM_FAULTS", faults)
    monkeypatch.setenv("GPUENERGY_SIM_COUNTER_READ_MS", counter_read_ms)
    backend = open_backend("sim")
    gpu = backend.select(None)[0]
    meter = EnergyMeter(backend, [gpu], clock=time.time)
    meter.measure(spin, 0.05, repeat=1, warmup=1, min_time_s=0.05)   # learn the counter's cadence
    errors = []
    for _ in range(3):
        region = {}

        def work():
            region["start"] = time.time()
            spin(0.6)

        with meter:
            work()
        result = meter.result
        # The exact integral over exactly the meter's region (its edges are on time.time()).
        t1 = region["start"] + result.time_s
        t0 = t1 - result.time_s
        exact_j = (backend.nvml.simExactEnergyMj(gpu.handle, t1) - backend.nvml.simExactEnergyMj(gpu.handle, t0)) / 1000
        errors.append(abs(result.ets_j / exact_j - 1))
    backend.close()
    assert result.method == ("sampling" if faults else "counter")
    assert sorted(errors)[1] < (0.05 if faults else 0.02)   # median of three, generous for a busy CI machine


def test_twice_the_work_measures_about_twice_the_energy(backend):
    """ETS = idle power x T + the work's energy: the work's part doubles exactly with the work.

    ``spin`` burns a fixed amount of CPU time (the simulator's stand-in for GPU work); on a loaded
    machine its wall time stretches, and with it the idle part. Medians of three pairs.
    """
    meter = EnergyMeter(backend, backend.select(None))
    idle_w = GPU_MODELS["H100"].idle_w
    meter.measure(spin, 0.05, warmup=1, min_time_s=0.05)
    work_ratios, ets_ratios = [], []
    for _ in range(3):
        figures = []
        for seconds in (0.3, 0.6):
            with meter:
                spin(seconds)
            figures.append((meter.result.ets_j, meter.result.ets_j - idle_w * meter.result.time_s))
        (once, once_work), (twice, twice_work) = figures
        ets_ratios.append(twice / once)
        work_ratios.append(twice_work / once_work)
    assert statistics.median(work_ratios) == pytest.approx(2.0, rel=0.1), work_ratios
    assert 1.6 < statistics.median(ets_ratios) < 2.2, ets_ratios


def measure_at(backend, gpus, cap_text, compute_bound):
    with PowerCapper(gpus, journal_for(backend), backend.state_dir / "locks") as capper:
        capper.apply(parse_cap(cap_text))
        meter = EnergyMeter(backend, gpus, compute_bound=compute_bound)
        return meter.measure(spin, 0.05, repeat=1, warmup=1, min_time_s=0.4)


def test_a_low_cap_saves_energy_on_memory_bound_work_and_edp_has_an_interior_optimum(backend):
    gpus = backend.select(None)
    results = {cap: measure_at(backend, gpus, cap, 0.3) for cap in ("min", "40%", "60%", "default")}
    energy = {cap: r.ets_j for cap, r in results.items()}
    edp = {cap: r.edp_js for cap, r in results.items()}
    assert energy["min"] < 0.9 * energy["default"]
    assert results["min"].time_s > results["default"].time_s        # slower, but cheaper
    best_edp = min(edp, key=edp.get)
    assert best_edp in ("40%", "60%"), f"EDP by cap: {edp}"
    assert gpus[0].current_limit_mw() == 700_000                   # every cap came back


def test_a_counter_that_goes_backwards_gives_no_figure(sim_state, monkeypatch):
    monkeypatch.setenv("GPUENERGY_SIM_FAULTS", "counter_backwards=3-6")
    backend = open_backend("sim")
    meter = EnergyMeter(backend, backend.select(None))
    backend.select(None)[0].energy_mj()  # a fresh simulated GPU's counter starts at 0 here...
    time.sleep(0.3)                      # ...and cannot go below 0: let it count a little first
    with pytest.raises(MeasurementError, match="went backwards"):
        with meter:
            spin(0.5)
    backend.close()


def test_a_stuck_counter_gives_no_figure(sim_state, monkeypatch):
    monkeypatch.setenv("GPUENERGY_SIM_FAULTS", "counter_stuck=2")
    backend = open_backend("sim")
    meter = EnergyMeter(backend, backend.select(None))
    with pytest.raises(MeasurementError, match="did not move"):
        with meter:
            spin(0.5)
    backend.close()


def test_a_block_that_raises_records_nothing(backend):
    meter = EnergyMeter(backend, backend.select(None))
    with pytest.raises(ZeroDivisionError):
        with meter:
            1 / 0
    assert meter.results == []
    with pytest.raises(MeasurementError, match="measured nothing yet"):
        meter.result


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"repeat": 0}, "repeat must be a whole number >= 1"),
    ({"warmup": -1}, "warmup must be a whole number >= 0"),
    ({"min_time_s": -1}, "min_time_s must be a non-negative number"),
])
def test_measure_rejects_bad_arguments(backend, kwargs, message):
    meter = EnergyMeter(backend, backend.select(None))
    with pytest.raises(ValueError, match=message):
        meter.measure(spin, 0.01, **kwargs)


def test_a_gap_in_the_power_readings_is_reported_not_hidden():
    from pytest_gpuenergy.meter import integrate_samples

    steady = [(0.01 * i, 0.01 * i + 0.0001, 300.0) for i in range(101)]    # every 10 ms over 1 s
    assert not integrate_samples(steady, 0.0, 1.0).notes
    gapped = [(t, end, w) for t, end, w in steady if not 0.3 < t < 0.75]  # 450 ms without a reading
    reading = integrate_samples(gapped, 0.0, 1.0)
    assert reading.ets_j == pytest.approx(300.0, rel=0.01)
    assert any("power was not read for 450 ms" in note for note in reading.notes), reading.notes


def test_the_meter_reports_what_its_own_thread_cost(backend):
    """The overhead benchmark's decomposition reads this: CPU the meter's thread used in a region."""
    meter = EnergyMeter(backend, backend.select(None))
    assert meter.last_thread_cpu_s is None
    with meter:
        spin(0.3)
    assert 0.0 < meter.last_thread_cpu_s < 0.1   # a few ms of reads per 100 ms tick, never the work itself


# -- the counter's tick lattice ---------------------------------------------------------------------

def _brackets(rng, phase_s, period_s, ticks, widest_s):
    """Brackets (read before, read after) around ``ticks`` of a strictly periodic lattice."""
    out = []
    for k in ticks:
        tick = phase_s + k * period_s
        before_tick = rng.uniform(0.0002, widest_s)
        ended = tick + rng.uniform(0.0002, widest_s - before_tick + 0.0002)
        out.append(Observation(tick - before_tick, ended, k, read_from=ended - 0.0001))
    return out


def test_the_lattice_error_bound_always_holds_the_true_tick():
    """Soundness: for random lattices and brackets, every true tick lies within the bound of the lattice's tick.

    As the watchers take them: brackets up to 6 ms wide and at most 8 ticks apart, a period
    within 0.5 % of the nominal 100 ms (so that ticks are numbered right: the bound is about where
    a numbered tick is). Checked where the meter relies on the bound: below a quarter period.
    """
    rng = random.Random(7)
    for _ in range(300):
        period_s = rng.uniform(0.0995, 0.1005)
        phase_s = rng.uniform(0, 1000)
        cadence = Cadence()
        ticks = [0]
        for _ in range(rng.randint(1, 20)):
            ticks.append(ticks[-1] + rng.randint(1, 8))
        for observation in _brackets(rng, phase_s, period_s, ticks, rng.choice([0.001, 0.003, 0.006])):
            cadence.add(observation)
        for k in range(ticks[0] - 5, ticks[-1] + 20):
            true_tick = phase_s + k * period_s
            moment = true_tick + rng.uniform(-0.2, 0.2) * period_s
            error = cadence.error_at(moment)
            if error < 0.25 * period_s:
                lattice_tick = cadence.tick_at(round((moment - cadence.phase_s) / cadence.period_s))
                assert abs(lattice_tick - true_tick) <= error + 1e-9


def test_many_agreeing_brackets_bound_the_tick_well_below_one_brackets_width():
    rng = random.Random(3)
    cadence = Cadence()
    for observation in _brackets(rng, 12.345, 0.1, range(0, 64, 4), 0.006):   # 16 brackets up to 6 ms wide
        cadence.add(observation)
    newest = 12.345 + 60 * 0.1
    assert cadence.error_at(newest + 0.1) < 0.002          # the next tick: well under the 6 ms of one bracket
    assert cadence.error_at(newest + 0.1) < cadence.error_at(newest + 30.0)   # and the bound grows with distance


def test_a_meter_on_another_clock_does_not_spoil_the_lattice_of_this_one(backend):
    """Lattices are kept per process and GPU; one learned on ``time.time`` (the accuracy benchmark's
    clock) must not be used by a meter on ``perf_counter``, whose numbers are 1.7e9 s apart."""
    gpus = backend.select(None)
    EnergyMeter(backend, gpus, clock=time.time).measure(spin, 0.05, warmup=1, min_time_s=1.0)
    meter = EnergyMeter(backend, gpus)
    result = meter.measure(spin, 0.05, warmup=1, min_time_s=0.3)
    assert not result.notes and result.repetitions[0].calls < 20   # dated at once, not grown to seconds


def test_a_read_held_up_after_taking_its_value_is_not_dated_by_a_later_tick():
    """A read that began just before tick 17 and, held up (GIL, a descheduled thread), ended after
    tick 18 may show tick 16's value: dating it by tick 18 would move 200 ms of energy."""
    rng = random.Random(1)
    cadence = Cadence()
    for observation in _brackets(rng, 0.0, 0.1, range(16), 0.002):   # ticks at k * 100 ms, well learned
        cadence.add(observation)
    held_up = Observation(after=1.598, before=1.83, value_mj=123, read_from=1.6995)
    when, reliable, _ = cadence.date(held_up)
    assert not reliable or when == pytest.approx(1.6, abs=0.002)
    quick = Observation(after=1.598, before=1.6025, value_mj=123, read_from=1.6020)   # an ordinary bracket
    when, reliable, _ = cadence.date(quick)
    assert reliable and when == pytest.approx(1.6, abs=0.002)


def test_a_value_after_a_dated_one_comes_from_a_later_tick():
    """Reads that wait for the GIL end just after the tick they meant to precede, so each bracket
    may hold two ticks; the previous value's known tick leaves one."""
    rng = random.Random(2)
    cadence = Cadence()
    for observation in _brackets(rng, 0.0, 0.1, range(16), 0.002):
        cadence.add(observation)
    tick_16 = round((1.6 - cadence.phase_s) / cadence.period_s)        # the lattice numbers its own ticks
    late = Observation(after=1.6003, before=1.7033, value_mj=456, read_from=1.6981)   # tick 16 or 17?
    assert not cadence.date(late).reliable
    dating = cadence.date(late, newer_than=tick_16)       # tick 16 published the value seen before
    assert dating.reliable and dating.tick == tick_16 + 1 and dating.when == pytest.approx(1.7, abs=0.002)


def test_reads_too_slow_to_date_the_ticks_give_a_flagged_coarse_figure_that_says_why(sim_state, monkeypatch):
    """12 ms per counter read (the H100's p99 was 16 ms): the ticks cannot be learned, and the
    warning says so instead of calling a 0.5 s block too short. The process starts with no
    lattice: one learned from fast reads by an earlier test on this simulated GPU can still date
    slow reads (rightly), which made this test depend on the order tests ran in."""
    import pytest_gpuenergy.meter as meter_module
    from pytest_gpuenergy.meter import EnergyMeasurementWarning

    monkeypatch.setattr(meter_module, "_CADENCES", {})
    monkeypatch.setenv("GPUENERGY_SIM_COUNTER_READ_MS", "12")
    backend = open_backend("sim")
    meter = EnergyMeter(backend, backend.select(None))
    with pytest.warns(EnergyMeasurementWarning, match="could not be dated around the measured block"):
        with meter:
            spin(0.5)
    backend.close()
    assert meter.result.ets_j > 0 and meter.result.notes
