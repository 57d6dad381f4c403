"""Phase marks end to end on the simulator: ``with energy_meter.phase("forward"):`` inside a measured
region, ``result.phases`` against the simulator's exact energy at the marks, run documents, the
``--energy-phases`` table, and marks where they cannot be (one-line errors)."""

from __future__ import annotations

import json
import math
import re
import textwrap

import pytest

from pytest_gpuenergy.errors import StorageError
from pytest_gpuenergy.meter.results import PhaseFigures, Repetition, combine_phases
from pytest_gpuenergy.runs.reader import DocumentReader
from pytest_gpuenergy.runs.records import RunDocument

from helpers import declare

# A training-like step: forward and backward compute-bound, update and the unmarked rest (a data
# copy: "other") memory-bound, so that the phases draw different power. The lengths and powers are
# what the simulated H100 makes of this work (its roofline model), for region_time_needed_s.
TRAINING_STEP = textwrap.dedent("""
    import dataclasses
    import json

    import pytest

    from pytest_gpuenergy.meter.phase_design import region_time_needed_s
    from pytest_gpuenergy.sim.work import declare_work

    LENGTHS_S = {"forward": 0.008, "backward": 0.016, "update": 0.0055, "other": 0.0064}
    POWERS_W = {"forward": 590.0, "backward": 590.0, "update": 160.0, "other": 160.0}


    def step_of(meter, update_scale):
        def step():
            with meter.phase("forward"):
                declare_work(flops_tf32=0.8e12, bytes=1e9, kernels=200)
            with meter.phase("backward"):
                declare_work(flops_tf32=1.6e12, bytes=2e9, kernels=400)
            with meter.phase("update"):
                declare_work(bytes=1e10 * update_scale, kernels=50)
            declare_work(bytes=1.2e10, kernels=20)         # other: the next batch's copy, unmarked
        return step


    @pytest.mark.parametrize("update_scale", [1.0, 1.3], ids=["base", "heavier"])
    def test_train(energy_meter, update_scale):
        needed_s = region_time_needed_s(LENGTHS_S, POWERS_W, 0.1, 0.10, power_noise=0.0)
        result = energy_meter.measure(step_of(energy_meter, update_scale), min_time_s=needed_s)
        nvml, gpu = energy_meter.backend.nvml, energy_meter.gpus[0]

        def exact_j(t0, t1):
            return (nvml.simExactEnergyMj(gpu.handle, t1) - nvml.simExactEnergyMj(gpu.handle, t0)) / 1000

        (t0, t1), calls = energy_meter.last_region, result.repetitions[-1].calls
        truth = {}
        for name, start, end in energy_meter.last_marks:
            truth[name] = truth.get(name, 0.0) + exact_j(start, end) / calls
        truth["other"] = exact_j(t0, t1) / calls - sum(truth.values())
        print("PHASES " + json.dumps({
            "update_scale": update_scale, "needed_s": needed_s, "region_s": t1 - t0, "ets_j": result.ets_j,
            "truth": truth, "phases": {n: dataclasses.asdict(f) for n, f in result.phases.items()}}))
""")


def measured(result: pytest.RunResult) -> dict[float, dict]:
    found = [json.loads(line.split("PHASES ", 1)[1]) for line in result.outlines if "PHASES {" in line]
    return {case["update_scale"]: case for case in found}


@pytest.mark.slow
def test_each_phase_is_within_10_percent_of_the_truth_inside_its_bound_and_they_add_up(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    """The simulator's exact energy between each phase's marks is the truth; the region is as long as
    region_time_needed_s says a 10 % bound needs. A 30 % heavier update changes update's figure, not
    the others'. The run document keeps the phases and reads them back; the table fits 80 columns."""
    monkeypatch.setenv("COLUMNS", "80")
    pytester.makepyfile(test_train=TRAINING_STEP)
    result = pytester.runpytest("-s", "--energy-phases", "--energy-save")
    result.assert_outcomes(passed=2)
    cases = measured(result)
    assert set(cases) == {1.0, 1.3}
    for case in cases.values():
        assert case["region_s"] >= case["needed_s"] > 1.0
        phases, truth = case["phases"], case["truth"]
        assert list(phases) == ["forward", "backward", "update", "other"]
        for name, figure in phases.items():
            assert figure["distinguishable"], (name, figure["why_not"])
            assert abs(figure["ets_j"] - truth[name]) <= 0.10 * truth[name], (name, figure, truth[name])
            assert figure["ets_low_j"] <= truth[name] <= figure["ets_high_j"], (name, figure, truth[name])
            assert figure["power_w"] == pytest.approx(figure["ets_j"] / figure["time_s"])
        assert math.fsum(f["ets_j"] for f in phases.values()) == pytest.approx(case["ets_j"], rel=1e-9)
        assert math.fsum(f["time_share"] for f in phases.values()) == pytest.approx(1.0)
        assert math.fsum(f["energy_share"] for f in phases.values()) == pytest.approx(1.0)
    base, heavier = cases[1.0]["phases"], cases[1.3]["phases"]
    assert heavier["update"]["ets_j"] / base["update"]["ets_j"] > 1.2
    for name in ("forward", "backward", "other"):
        assert heavier[name]["ets_j"] / base[name]["ets_j"] == pytest.approx(1.0, abs=0.03), name

    section = result.outlines[next(i for i, line in enumerate(result.outlines) if "gpu energy" in line):]
    wide = [line for line in section if len(line) > 80 and "/" not in line]     # a path is never cut
    assert not wide, wide
    result.stdout.fnmatch_lines(["energy per phase, per call*",
                                 "*test_train?base? [[]current[]] (sim): ETS * J per call",
                                 "*phase * ETS * bound * T * P * time * energy",
                                 "*update *J *J-*J *s *W *% *%"])

    [path] = (pytester.path / ".energy").rglob("*.json")
    saved = json.loads(path.read_text())
    run = RunDocument.from_json(saved, str(path))
    for entry, case_json in zip(run.cases, saved["cases"]):
        assert list(case_json["phases"]) == ["forward", "backward", "update", "other"]
        assert list(case_json["repetitions"][0]["phases"]) == list(case_json["phases"])
        scale = 1.3 if "heavier" in entry.case_id else 1.0
        assert entry.phases is not None
        assert entry.phases["update"].ets_j == pytest.approx(cases[scale]["phases"]["update"]["ets_j"], rel=1e-12)


@pytest.mark.slow
def test_pytest_xdist_workers_hand_the_phases_to_the_controller(pytester: pytest.Pytester) -> None:
    """The controller prints and saves what the workers measured: the phases travel in the cases."""
    pytester.makepyfile(test_train=TRAINING_STEP)
    result = pytester.runpytest_subprocess("-n", "2", "--energy-phases", "--energy-save")
    result.assert_outcomes(passed=2)
    for case in ("base", "heavier"):
        result.stdout.fnmatch_lines([f"*test_train?{case}? [[]current[]] (sim): ETS * J per call",
                                     "*phase * ETS * bound * T * P * time * energy", "*", "*forward *J *J-*J *",
                                     "*backward *", "*update *", "*other *"])
    [path] = (pytester.path / ".energy").rglob("*.json")
    cases = json.loads(path.read_text())["cases"]
    assert [list(case["phases"]) for case in cases] == [["forward", "backward", "update", "other"]] * 2


MISUSE = textwrap.dedent("""
    import json

    from pytest_gpuenergy.sim.work import declare_work


    def test_outside_a_region(energy_meter):
        with energy_meter.phase("forward"):
            pass


    def test_nested(energy_meter):
        with energy_meter:
            with energy_meter.phase("forward"):
                with energy_meter.phase("backward"):
                    pass


    def test_named_other(energy_meter):
        with energy_meter:
            with energy_meter.phase("other"):
                pass


    def test_without_marks(energy_meter):
        result = energy_meter.measure(lambda: declare_work(flops_tf32=1e12, kernels=10), min_time_s=0.5)
        print("NO_MARKS", result.phases, "phases" in json.dumps(result.per_gpu[0].to_json()))
""")


def test_marks_outside_a_region_or_inside_another_phase_are_one_line_errors(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_misuse=MISUSE)
    result = pytester.runpytest("-s", "--energy-save", "-p", "no:randomly")
    result.assert_outcomes(passed=1, failed=3)
    result.stdout.fnmatch_lines([
        "E *pytest_gpuenergy.errors.MeasurementError: energy_meter.phase('forward') outside a measured region: "
        "put it inside `with energy_meter:` or in the function given to energy_meter.measure()",
        "E *pytest_gpuenergy.errors.MeasurementError: energy_meter.phase('backward') inside phase 'forward': "
        "phases cannot nest or overlap; end 'forward' before starting 'backward'",
        "E *pytest_gpuenergy.errors.MeasurementError: energy_meter.phase('other'): name the phase with a non-empty "
        "string other than 'other' (the unmarked rest of a region is 'other')",
    ])
    assert "NO_MARKS None False" in result.stdout.str()         # a region without marks: as before
    [path] = (pytester.path / ".energy").rglob("*.json")
    [case] = [c for c in json.loads(path.read_text())["cases"] if "without_marks" in c["case_id"]]
    assert "phases" not in case and all("phases" not in rep for rep in case["repetitions"])


def _figure(ets_j: float, time_s: float, told: bool = True) -> PhaseFigures:
    return PhaseFigures(ets_j=ets_j, ets_low_j=0.9 * ets_j, ets_high_j=1.1 * ets_j, time_s=time_s, power_w=ets_j / time_s,
                        time_share=math.nan, energy_share=math.nan, distinguishable=told,
                        why_not="" if told else "only their sum is known")


def test_repetitions_average_and_gpus_add_up() -> None:
    first = {"forward": _figure(2.0, 0.01), "other": _figure(1.0, 0.01)}
    second = {"forward": _figure(4.0, 0.01), "other": _figure(1.0, 0.01, told=False)}
    mean = combine_phases([first, second], mean=True)
    total = combine_phases([first, second], mean=False)
    assert mean is not None and total is not None
    assert (mean["forward"].ets_j, mean["forward"].ets_low_j, mean["forward"].time_s) == pytest.approx((3.0, 2.7, 0.01))
    assert (total["forward"].ets_j, total["forward"].ets_high_j, total["forward"].time_s) == pytest.approx((6.0, 6.6, 0.01))
    assert mean["forward"].energy_share == pytest.approx(0.75) and mean["forward"].time_share == pytest.approx(0.5)
    assert not mean["other"].distinguishable and mean["other"].why_not == "only their sum is known"
    assert combine_phases([first, None], mean=True) is None       # a region without marks: no one figure
    assert combine_phases([first, {"update": _figure(1.0, 0.01)}], mean=True) is None


def test_a_documents_phases_are_read_back_and_damaged_ones_refused_in_one_line() -> None:
    phases = {"update": _figure(1.0, 0.005), "other": _figure(0.5, 0.005, told=False)}
    saved = Repetition.of_region(1.5, 1.4, 1.6, 400.0, 0.01, 1, phases).to_json()
    reader = DocumentReader("run.json")
    read = reader.repetition(json.loads(json.dumps(saved)), "cases[0].repetitions[0]")
    assert read.phases is not None and list(read.phases) == ["update", "other"]
    assert read.phases["other"].why_not == "only their sum is known" and not read.phases["other"].distinguishable
    assert read.phases["update"].ets_high_j == pytest.approx(1.1) and math.isnan(read.phases["update"].time_share)
    del saved["phases"]
    assert reader.repetition(saved, "r").phases is None                 # a document from before phases
    damaged = json.loads(json.dumps(Repetition.of_region(1.5, 1.4, 1.6, 400.0, 0.01, 1, phases).to_json()))
    damaged["phases"]["update"]["ets_low_j"] = 2.0
    with pytest.raises(StorageError, match=r"^run.json: invalid run document: r.phases.update: ets_low_j <= ets_j "
                                           r"<= ets_high_j must hold, got 2.0 <= 1.0 <= 1.1.*; restore the file"):
        reader.repetition(damaged, "r")
    damaged["phases"] = ["update"]
    with pytest.raises(StorageError, match=r"r.phases: must be a non-empty object \(or absent\)"):
        reader.repetition(damaged, "r")


def test_a_mark_dates_the_gpus_queue_without_waiting_or_moving_the_clock(backend) -> None:
    """Backend.queue_time on the simulator (simQueuedUntil): where the queued work will end, as a CUDA
    event recorded now would say; the virtual clock stays where it is until a synchronisation."""
    gpu = backend.select(None)[0]
    backend.begin_test("t", [gpu])
    backend.use([gpu])
    start_s = backend.clock()
    assert backend.queue_time() == start_s                       # nothing queued: now
    declare(0.02)
    first_s = backend.queue_time()
    declare(0.03)
    second_s = backend.queue_time()
    assert backend.clock() == start_s                            # no wait, no move
    assert first_s - start_s == pytest.approx(0.02, rel=0.1) and second_s - first_s == pytest.approx(0.03, rel=0.1)
    backend.synchronize()
    assert backend.clock() == pytest.approx(second_s, abs=1e-9)


@pytest.mark.parametrize("step_s, gap_s, lined_up", [(0.050, 0.0, True), (0.058, 0.0, False), (0.050, 0.0032, False)],
                         ids=["half-the-period", "0.58-periods", "half-the-period-and-the-gap-the-note-names"])
def test_calls_in_step_with_the_counter_are_named_as_the_likely_cause_and_the_gap_it_names_cures_it(
        backend, step_s: float, gap_s: float, lined_up: bool) -> None:
    """As on a real H200 (a 49.7 ms transformer step: nothing told apart; 58.2 ms: forward and backward
    told apart): a step of half the counter's 100 ms period puts every publication at the same
    points of a step, and the result says so with the gap that would spread them. With that idle gap
    after each step, marked as a phase of its own as the note says, every phase is told apart."""
    from pytest_gpuenergy.meter import EnergyMeter
    from pytest_gpuenergy.sim.work import declare_host_time

    gpu = backend.select(None)[0]
    meter = EnergyMeter(backend, [gpu])

    def step() -> None:
        with meter.phase("forward"):
            declare(0.4 * step_s)
        with meter.phase("backward"):
            declare(0.6 * step_s)
        if gap_s:
            with meter.phase("gap"):
                declare_host_time(gap_s)          # on a real GPU: torch.cuda.synchronize(); time.sleep(gap_s)

    result = meter.measure(step, min_time_s=4.0)
    notes = [note for note in result.notes if "in step with the energy counter" in note]
    phases = result.phases or {}
    told_apart = {name: figure.distinguishable for name, figure in phases.items()}
    if lined_up:
        assert not all(told_apart.values()), told_apart
        assert len(notes) == 1, result.notes
        found = re.search(r"\((49\.\d|50|50\.\d) ms each\).*: (1\.99|2|2\.01) calls a period\).*idle gap of "
                          r"(\d\.\d) ms after each call, marked as a phase of its own", notes[0])
        assert found and 2.0 <= float(found[3]) <= 4.0, notes[0]         # the gap the third case adds
    else:
        assert all(told_apart.values()) and not notes, (told_apart, result.notes)
        for name in ("forward", "backward"):
            figure = phases[name]
            assert figure.ets_high_j - figure.ets_low_j <= 0.05 * figure.ets_j, (name, figure)


def test_calls_in_step_whose_phases_were_all_told_apart_get_no_note_blaming_the_step(backend, monkeypatch) -> None:
    """The note names a likely cause of phases not told apart: where the fit told every one apart
    (the publications spread by the calls' own jitter, say), it would contradict the figures."""
    import dataclasses

    from pytest_gpuenergy.meter import EnergyMeter, region

    fitted = region.attribute_phases

    def all_told_apart(*args, **kwargs):
        found = fitted(*args, **kwargs)
        return dataclasses.replace(found, phases=tuple(dataclasses.replace(p, told_apart=True, why_not="")
                                                       for p in found.phases))

    monkeypatch.setattr(region, "attribute_phases", all_told_apart)
    gpu = backend.select(None)[0]
    meter = EnergyMeter(backend, [gpu])

    def step() -> None:
        with meter.phase("forward"):
            declare(0.02)
        with meter.phase("backward"):
            declare(0.03)

    result = meter.measure(step, min_time_s=4.0)
    assert result.phases is not None and all(f.distinguishable for f in result.phases.values())
    assert not [note for note in result.notes if "in step with the energy counter" in note], result.notes


def test_the_phases_table_shows_why_calls_in_step_with_the_counter_cannot_be_split(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    """``--energy-phases`` in an 80-column terminal: under the table of a 50 ms step, the stars'
    reasons and then the note that names the likely cause and the gap; the 58 ms step has neither."""
    from helpers import declare_source

    monkeypatch.setenv("COLUMNS", "80")
    pytester.makepyfile(test_steps=declare_source() + textwrap.dedent("""

        import pytest

        @pytest.mark.parametrize("step_s", [0.050, 0.058], ids=["in-step", "spread"])
        def test_step(energy_meter, step_s):
            def step():
                with energy_meter.phase("forward"):
                    declare(0.4 * step_s)
                with energy_meter.phase("backward"):
                    declare(0.6 * step_s)
            energy_meter.measure(step, min_time_s=4.0)
    """))
    result = pytester.runpytest("--energy-phases", "-p", "no:randomly")
    result.assert_outcomes(passed=2)
    lines = result.outlines
    start = next(i for i, line in enumerate(lines) if "energy per phase, per call" in line)
    section = lines[start:]
    in_step = next(i for i, line in enumerate(section) if "test_step[in-step]" in line)
    spread = next(i for i, line in enumerate(section) if "test_step[spread]" in line)
    first, second = (section[in_step:spread], section[spread:]) if in_step < spread else (section[in_step:],
                                                                                             section[spread:in_step])
    text = " ".join(line.strip() for line in first)
    assert "* not told apart: forward:" in text
    assert re.search(r"note: the calls \((49\.\d|50|50\.\d) ms each\) repeat nearly in step with the energy counter's "
                     r"publications \(every 100 ms: (1\.99|2|2\.01) calls a period\).*idle gap of", text), text
    assert not any("note:" in line or "not told apart" in line for line in second), second
    assert all(len(line) <= 80 for line in section if "/" not in line)
