"""Tests of ``pytest_gpuenergy/gate/compare.py`` case by case, word for word: each phase's change, which
runs and cases a comparison takes, and every field and note of what it says. In-process, so that
mutation testing of the module sees them (``tests/test_compare.py`` holds the decision's statistics
and the comparison as a whole)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from pytest_gpuenergy.gate.compare import baseline_comparison, compare_documents
from pytest_gpuenergy.gate.records import MISSING, NEW, THRESHOLD_ONLY
from pytest_gpuenergy.gate.verdicts import IMPROVEMENT, INCONCLUSIVE, INCREASE, REGRESSION, UNCHANGED
from pytest_gpuenergy.runs.store import RunStore

from helpers import H100, H100_REAL, V100, machine, make_doc, with_phases

GATE = {"ets": 5.0, "edp": 10.0, "time": 5.0}


# -- phases (energy_meter.phase): each phase's ETS decided with the fit's bounds ---------------------

def _step_runs(update: float = 1.3, n: int = 3, **kwargs) -> tuple:
    old = with_phases(make_doc(seed=1, workloads=("step",), caps_w=(300.0,), n=n), seed=1, **kwargs)
    new = with_phases(make_doc(seed=2, workloads=("step",), caps_w=(300.0,), n=n, minutes=5),
                      scale={"update": update}, seed=2, **kwargs)
    return old, new


def test_a_heavier_update_phase_is_named_and_no_other_phase():
    old, new = _step_runs()
    [case] = compare_documents(old, new, {"ets": 5.0}).cases
    assert [m.phase for m in case.phases] == ["forward", "backward", "update", "other"]
    assert {m.phase: m.verdict for m in case.phases} == {"forward": UNCHANGED, "backward": UNCHANGED,
                                                         "update": INCREASE, "other": UNCHANGED}
    update = case.phase("update")
    assert update is not None and update.change_pct == pytest.approx(30.0, abs=3.0)
    assert update.old_n == update.new_n == 3 and update.threshold_pct is None and not update.gated
    assert update.key == "phase.ets" and update.label == "update ETS" and update.domain == "gpu"
    assert update.reason.startswith("+") and "n=3/3" in update.reason and "not gated" in update.reason
    assert case.metric("ets") is case.metrics[0] and case.metric("phase.ets") is None and case.phase("data") is None
    assert case.verdict != REGRESSION      # an ungated phase never fails the case


def test_phase_ets_gates_each_phase_and_names_the_one_that_regressed():
    old, new = _step_runs()
    comparison = compare_documents(old, new, {"ets": 5.0, "phase.ets": 10.0})
    [case] = comparison.cases
    assert comparison.failed and case.verdict == REGRESSION
    assert [m.label for m in case.regressed_metrics] == ["update ETS"]
    assert case.phase("update").threshold_pct == 10.0 and case.phase("forward").verdict == UNCHANGED
    lighter = compare_documents(*_step_runs(update=0.7), {"phase.ets": 10.0}).cases[0]
    assert lighter.verdict == IMPROVEMENT and lighter.phase("update").verdict == IMPROVEMENT


def test_a_phase_change_its_bounds_can_explain_is_inconclusive():
    """Bounds of ±20 % overlap between 0.88 J and 1.14 J; phases the fit could not tell apart have such bounds."""
    old, new = _step_runs(bound=0.2)
    [case] = compare_documents(old, new, {"phase.ets": 10.0}).cases
    update = case.phase("update")
    assert update.verdict == INCONCLUSIVE and case.verdict == INCONCLUSIVE
    assert "within the two measurements' own error bounds" in update.reason
    assert "the meter's bounds: baseline 0.7" in update.reason


def test_one_repetition_decides_a_phase_by_the_threshold_and_the_bounds():
    old, new = _step_runs(n=1)
    [case] = compare_documents(old, new, {"phase.ets": 10.0}).cases
    update = case.phase("update")
    assert update.method == THRESHOLD_ONLY and update.verdict == REGRESSION and update.old_n == 1
    assert {m.phase: m.verdict for m in case.phases if m.phase != "update"} == dict.fromkeys(
        ("forward", "backward", "other"), UNCHANGED)
    old, new = _step_runs(n=1, bound=0.2)
    assert compare_documents(old, new, {"phase.ets": 10.0}).cases[0].phase("update").verdict == INCONCLUSIVE


def test_phases_in_one_run_only_are_said_not_compared():
    old, new = _step_runs()
    bare = make_doc(seed=3, workloads=("step",), caps_w=(300.0,), n=3, minutes=9)
    [case] = compare_documents(old, bare, {}).cases
    assert case.phases == () and case.notes[-1] == ("phases not compared: this run has no phase marks "
                                                    "(energy_meter.phase) in this case")
    [case] = compare_documents(bare, new, {}).cases
    assert case.notes[-1] == "phases not compared: the baseline has no phase marks (energy_meter.phase) in this case"
    [case] = compare_documents(make_doc(seed=1, workloads=("step",), caps_w=(300.0,), n=3), bare, {}).cases
    assert not any("phase" in note for note in case.notes)

    def renamed(doc, names):
        cases = [replace(c, repetitions=tuple(replace(r, phases={names.get(k, k): v for k, v in r.phases.items()})
                                              for r in c.repetitions)) for c in doc.cases]
        return replace(doc, cases=tuple(cases))

    [case] = compare_documents(renamed(old, {"forward": "fwd", "backward": "bwd"}), renamed(new, {"other": "data"}), {}).cases
    assert [m.phase for m in case.phases] == ["update"]
    assert case.notes[-2:] == ("phases fwd, bwd, other only in the baseline: not compared",
                               "phases forward, backward, data only in this run: not compared")
    [case] = compare_documents(renamed(old, {"other": "data"}), new, {}).cases
    assert case.notes[-2:] == ("phase data only in the baseline: not compared", "phase other only in this run: not compared")


def test_the_saved_runs_give_each_phase_its_session_noise(tmp_path):
    store = RunStore(tmp_path / ".energy")
    for seed in range(4):
        store.save(with_phases(make_doc(seed=seed, workloads=("step",), caps_w=(300.0,), n=3, minutes=seed),
                               seed=seed, noise=0.02))
    new = with_phases(make_doc(seed=9, workloads=("step",), caps_w=(300.0,), n=3, minutes=30),
                      scale={"update": 1.3}, seed=9, noise=0.02)
    [case] = baseline_comparison(store, new, thresholds={"phase.ets": 10.0}).cases
    update = case.phase("update")
    assert "from 4 runs" in update.reason and update.verdict == REGRESSION
    assert "from 4 runs" in case.phase("forward").reason


def test_without_a_baseline_every_case_is_new_and_the_note_says_why(tmp_path):
    new = make_doc(seed=2, workloads=("step", "infer"), caps_w=(300.0,), n=3)
    comparison = baseline_comparison(RunStore(tmp_path / "empty"), new, thresholds={"ets": 5.0}, confidence=0.95)
    assert comparison.comparable and not comparison.failed
    assert (comparison.old_run_id, comparison.new_run_id, comparison.old_machine) == (None, new.run_id, None)
    assert comparison.new_machine.run_id == new.run_id
    assert comparison.thresholds == {"ets": 5.0} and comparison.confidence == 0.95
    assert [(c.case_id, c.status, c.verdict, c.metrics, c.old, c.new) for c in comparison.cases] == [
        (entry.case_id, NEW, NEW, (), None, entry) for entry in new.cases]
    [note] = comparison.notes
    assert note.startswith("no saved run for NVIDIA H100 80GB HBM3 (simulated) (sim) in ") and note.endswith(
        " has any of this run's cases: every case is new; save a baseline with --energy-save")
    with pytest.raises(ValueError, match="unknown metric 'watts'"):
        baseline_comparison(RunStore(tmp_path / "empty"), new, thresholds={"watts": 5.0})


def test_saved_runs_without_the_phase_give_it_no_session_noise(tmp_path):
    store = RunStore(tmp_path / ".energy")
    for seed in range(3):       # earlier runs: no phase marks, then the phases under other names
        doc = make_doc(seed=seed, workloads=("step",), caps_w=(300.0,), n=3, minutes=seed)
        store.save(doc if seed == 0 else with_phases(doc, seed=seed) if seed == 2 else replace(
            doc, cases=tuple(replace(c, repetitions=tuple(replace(r, phases={"fwd": next(iter(
                with_phases(doc).cases[0].repetitions[0].phases.values()))}) for r in c.repetitions)) for c in doc.cases)))
    new = with_phases(make_doc(seed=9, workloads=("step",), caps_w=(300.0,), n=3, minutes=30), seed=9)
    [case] = baseline_comparison(store, new, thresholds={"phase.ets": 10.0}).cases
    update = case.phase("update")
    assert update is not None and "session noise" not in update.reason and "n=3/3" in update.reason
    assert "session noise" in case.metric("ets").reason         # the region's figures are in all three


# -- which runs and cases are compared (in-process: the gate's pytester sessions test it end to end) --

def _outcomes(doc, outcomes: dict[str, str]):
    """``doc`` with the cases of these workloads ended so (``failed``, ``error``, ...)."""
    def outcome(case):
        return next((o for workload, o in outcomes.items() if f"[{workload}-" in case.case_id), case.outcome)
    return replace(doc, cases=tuple(replace(c, outcome=outcome(c)) for c in doc.cases))


def test_only_cases_whose_test_passed_are_compared_and_a_note_counts_the_others():
    workloads = ("a", "b", "c", "d")
    old = _outcomes(make_doc(seed=1, workloads=workloads, caps_w=(300.0,)), {"a": "failed"})
    new = _outcomes(make_doc(seed=2, workloads=workloads, caps_w=(300.0,), minutes=5), {"b": "failed", "c": "error"})
    comparison = compare_documents(old, new, GATE)
    status = {c.case_id.split("[")[1][0]: c.status for c in comparison.cases}
    assert status == {"a": NEW, "d": "compared"}         # a: no baseline (it failed there); b, c: not compared
    assert comparison.notes[-1] == "2 cases not compared: their test did not pass (1 error, 1 failed)"
    clean = make_doc(seed=2, workloads=workloads, caps_w=(300.0,), minutes=5)
    comparison = compare_documents(old, clean, GATE)
    assert {c.case_id.split("[")[1][0]: c.status for c in comparison.cases} == {
        "a": NEW, "b": "compared", "c": "compared", "d": "compared"}
    assert not any("not compared" in note for note in comparison.notes)
    one = compare_documents(make_doc(seed=1, workloads=workloads, caps_w=(300.0,)),
                            _outcomes(clean, {"d": "xfailed"}), GATE)
    assert one.notes[-1] == "1 case not compared: their test did not pass (1 xfailed)"
    assert len(one.cases) == 3


def _store_with_neighbours(tmp_path, *, newest_neighbours: bool = True):
    """Two saved runs of the simulated H100, and newer runs of the same cases on another backend (same
    model name) and on another model (same backend): a baseline must come from the first two only."""
    store = RunStore(tmp_path / ".energy")
    own = [make_doc(seed=seed, workloads=("step",), caps_w=(300.0,), minutes=seed) for seed in (1, 2)]
    for doc in own:
        store.save(doc)
    later = 10 if newest_neighbours else -10
    store.save(make_doc(seed=3, workloads=("step",), caps_w=(300.0,), backend="nvml", minutes=later))
    store.save(make_doc(seed=4, workloads=("step",), caps_w=(300.0,), gpu_name=V100, minutes=later))
    new = make_doc(seed=5, workloads=("step",), caps_w=(300.0,), minutes=20)
    return store, own, new


def test_the_latest_baseline_is_of_the_runs_backend_and_model_only(tmp_path):
    store, own, new = _store_with_neighbours(tmp_path)
    comparison = baseline_comparison(store, new, thresholds=GATE, confidence=0.95)
    assert comparison.comparable and comparison.old_run_id == own[1].run_id and comparison.confidence == 0.95
    assert comparison.notes[0] == ("noise between sessions estimated per case from 2 saved runs (the baseline and "
                                   "those before it)")
    padded = baseline_comparison(store, new, ref=" latest ", thresholds=GATE)     # resolved by the store
    assert padded.comparable and padded.old_run_id == own[1].run_id


def test_a_named_baseline_learns_the_noise_from_the_saved_runs_of_the_model_only(tmp_path):
    store, own, new = _store_with_neighbours(tmp_path, newest_neighbours=False)
    store.save(new)                                       # the run itself is saved too: never its own history
    comparison = baseline_comparison(store, new, ref=own[1].run_id, thresholds=GATE, confidence=0.95)
    assert comparison.comparable and comparison.old_run_id == own[1].run_id and comparison.confidence == 0.95
    assert comparison.notes[0] == ("noise between sessions estimated per case from 2 saved runs (the baseline and "
                                   "those before it)")


def test_saved_runs_without_any_of_the_cases_say_so(tmp_path):
    store = RunStore(tmp_path / ".energy")
    store.save(make_doc(seed=1, workloads=("other",), caps_w=(300.0,)))
    store.save(make_doc(seed=3, workloads=("step",), caps_w=(300.0,), backend="nvml"))     # not counted: another
    store.save(make_doc(seed=4, workloads=("step",), caps_w=(300.0,), gpu_name=V100))      # backend, another model
    new = make_doc(seed=2, workloads=("step",), caps_w=(300.0,), minutes=5)
    [note] = baseline_comparison(store, new).notes
    assert note.startswith("none of the 1 saved runs of NVIDIA H100 80GB HBM3 (simulated) (sim) in ")
    assert [c.status for c in baseline_comparison(store, new).cases] == [NEW]


def test_a_damaged_run_of_another_model_or_backend_never_stops_the_comparison(tmp_path):
    """Only the new run's backend and model are read: a damaged file elsewhere in the storage is
    someone else's problem (``gpuenergy runs`` names it)."""
    store, own, new = _store_with_neighbours(tmp_path)
    damaged = [path for path in (tmp_path / ".energy").rglob("*.json") if "nvml" in path.parts or "tesla" in str(path)]
    for path in damaged:
        path.write_text("{damaged")
    assert len(damaged) == 2
    for ref in ("latest", own[1].run_id):
        comparison = baseline_comparison(store, new, ref=ref, thresholds=GATE)
        assert comparison.comparable and comparison.old_run_id == own[1].run_id


def test_the_noise_between_sessions_is_learnt_from_the_baseline_and_at_most_nine_runs_before_it():
    baseline = make_doc(seed=0, workloads=("step",), caps_w=(300.0,), minutes=100)
    same_time = make_doc(seed=1, workloads=("step",), caps_w=(300.0,), minutes=100)    # saved with the baseline
    later = make_doc(seed=2, workloads=("step",), caps_w=(300.0,), minutes=101)        # after it: never history
    new = make_doc(seed=3, workloads=("step",), caps_w=(300.0,), minutes=200)
    comparison = compare_documents(baseline, new, GATE, history=[later, same_time, baseline, new])
    assert comparison.notes[0] == ("noise between sessions estimated per case from 2 saved runs (the baseline and "
                                   "those before it)")
    before = [make_doc(seed=10 + i, workloads=("step",), caps_w=(300.0,), minutes=i) for i in range(12)]
    comparison = compare_documents(baseline, new, GATE, history=[*before, baseline])
    assert comparison.notes[0].startswith("noise between sessions estimated per case from 10 saved runs")
    assert compare_documents(baseline, new, GATE, history=before[:1]).notes[0].startswith(
        "noise between sessions estimated per case from 2 saved runs")
    assert compare_documents(baseline, new, GATE).notes[0].startswith("noise between sessions unknown")


def test_a_case_on_another_gpu_slot_pairs_when_it_is_the_only_one_of_its_test_and_cap():
    """A rank or worker that ran the case on another of its GPUs: the second pairing rule (id and cap)."""
    old = make_doc(seed=1, workloads=("a", "b", "c"), caps_w=(300.0,))
    new = make_doc(seed=2, workloads=("a", "b", "c"), caps_w=(300.0,), minutes=5, scale={"a": 1.3})
    moved = replace(new, cases=tuple(replace(c, gpu_slot=1) if "[a-" in c.case_id else c for c in new.cases))
    cases = compare_documents(old, moved, GATE).cases
    assert [(c.case_id.split("[")[1][0], c.status, c.key[2]) for c in cases] == [
        ("a", "compared", 1), ("b", "compared", 0), ("c", "compared", 0)]
    assert cases[0].old is old.cases[0] and cases[0].new is moved.cases[0] and cases[0].verdict == REGRESSION
    twice_old = replace(old, cases=(*old.cases, replace(old.cases[0], gpu_slot=2)))     # two old ones: ambiguous
    statuses = [(c.case_id.split("[")[1][0], c.status, c.key[2]) for c in compare_documents(twice_old, moved, GATE).cases]
    assert statuses == [("a", NEW, 1), ("b", "compared", 0), ("c", "compared", 0), ("a", MISSING, 0), ("a", MISSING, 2)]
    twice_new = replace(moved, cases=(*moved.cases, replace(moved.cases[0], gpu_slot=3)))  # two new ones: ambiguous
    statuses = [(c.case_id.split("[")[1][0], c.status, c.key[2]) for c in compare_documents(old, twice_new, GATE).cases]
    assert statuses == [("a", NEW, 1), ("b", "compared", 0), ("c", "compared", 0), ("a", NEW, 3), ("a", MISSING, 0)]
    lone = compare_documents(make_doc(seed=1, workloads=("x",), caps_w=(300.0,)),       # one left on each side,
                             make_doc(seed=2, workloads=("y",), caps_w=(300.0,), minutes=5), GATE).cases   # other tests
    assert [(c.case_id.split("[")[1][0], c.status) for c in lone] == [("y", NEW), ("x", MISSING)]


def test_several_cases_of_one_outcome_are_counted_together():
    old = make_doc(seed=1, workloads=("a", "b", "c"), caps_w=(300.0,))
    new = _outcomes(make_doc(seed=2, workloads=("a", "b", "c"), caps_w=(300.0,), minutes=5), {"a": "failed", "b": "failed"})
    assert compare_documents(old, new, GATE).notes[-1] == "2 cases not compared: their test did not pass (2 failed)"


def test_a_host_domain_is_compared_once_per_case_on_its_first_gpu():
    from pytest_gpuenergy.meter.results import DomainEnergy

    def with_node(doc, node_j):
        return replace(doc, cases=tuple(replace(c, per_domain={"node": DomainEnergy(node_j, node_j * 0.99, node_j * 1.01, True)})
                                        for c in doc.cases))

    old = with_node(make_doc(seed=1, workloads=("a",), caps_w=(300.0,)), 600.0)
    new = with_node(make_doc(seed=2, workloads=("a",), caps_w=(300.0,), minutes=5), 780.0)
    [case] = compare_documents(old, new, {"node.ets": 5.0}).cases
    node = case.metric("node.ets")
    assert node is not None and node.domain == "node" and node.verdict == REGRESSION and node.method == THRESHOLD_ONLY
    second = replace(new, cases=tuple(replace(c, gpu_slot=1) for c in new.cases))
    old_second = replace(old, cases=tuple(replace(c, gpu_slot=1) for c in old.cases))
    [case] = compare_documents(old_second, second, {"node.ets": 5.0}).cases
    assert case.metric("node.ets") is None and not case.notes
    [case] = compare_documents(make_doc(seed=1, workloads=("a",), caps_w=(300.0,)), new, {"node.ets": 5.0}).cases
    assert case.metric("node.ets") is None
    assert case.notes[-1] == "node.ets not compared: the baseline did not measure node (run both with --energy-domains=gpu,cpu,dram)"
    assert compare_documents(old, new, {"ets": 5.0}).cases[0].metric("node.ets") is None      # not asked for


# -- every field of what a comparison says (compare.py's survivors, word for word) -------------------

def test_a_comparison_and_a_refusal_carry_both_runs_the_thresholds_and_the_confidence():
    old, new = make_doc(seed=1, workloads=("a",), caps_w=(300.0,)), make_doc(seed=2, workloads=("a",), caps_w=(300.0,), minutes=5)
    comparison = compare_documents(old, new, GATE, confidence=0.95)
    assert (comparison.old_machine.run_id, comparison.new_machine.run_id) == (old.run_id, new.run_id)
    assert comparison.thresholds == GATE and comparison.confidence == 0.95 and comparison.comparable is True
    real = make_doc(seed=3, workloads=("a",), caps_w=(300.0,), gpu_name=H100_REAL, backend="nvml", minutes=9)
    refused = compare_documents(old, real, GATE, confidence=0.95)
    assert (refused.old_run_id, refused.new_run_id, refused.cases, refused.comparable) == (old.run_id, real.run_id, (), False)
    assert (refused.old_machine.run_id, refused.new_machine.run_id) == (old.run_id, real.run_id)
    assert refused.thresholds == GATE and refused.confidence == 0.95
    amd = replace(real, backend="amdsmi", run_id="20250301T100900Z-0000amd0")     # real both: another backend
    assert not compare_documents(real, amd, GATE).comparable


def test_a_new_or_missing_case_carries_its_entry_and_a_compared_one_its_test():
    old = make_doc(seed=1, workloads=("a", "gone"), caps_w=(300.0,))
    new = make_doc(seed=2, workloads=("a", "fresh"), caps_w=(300.0,), minutes=5)
    by_status = {c.status: c for c in compare_documents(old, new, GATE).cases}
    gone, fresh, kept = by_status[MISSING], by_status[NEW], by_status["compared"]
    assert (gone.test, gone.cap, gone.gpu_name, gone.old, gone.new) == (old.cases[1].test, "300W", H100, old.cases[1], None)
    assert (fresh.test, fresh.cap, fresh.gpu_name, fresh.old, fresh.new) == (new.cases[1].test, "300W", H100, None, new.cases[1])
    assert kept.test == new.cases[0].test == "tests/test_suite.py::test_train[a-300W]"


def _node(doc, node_j: float, bound: float = 0.01, domains=("node",)):
    from pytest_gpuenergy.meter.results import DomainEnergy

    figures = {d: DomainEnergy(node_j, node_j * (1 - bound), node_j * (1 + bound), True) for d in domains}
    return replace(doc, cases=tuple(replace(c, per_domain=figures) for c in doc.cases))


def test_a_host_domains_change_is_decided_with_its_threshold_confidence_and_bounds():
    old = _node(make_doc(seed=1, workloads=("a",), caps_w=(300.0,)), 600.0, 0.06)
    new = _node(make_doc(seed=2, workloads=("a",), caps_w=(300.0,), minutes=5), 660.0, 0.06)
    [case] = compare_documents(old, new, {"node.ets": 5.0}, confidence=0.95).cases
    node = case.metric("node.ets")
    assert node.verdict == INCONCLUSIVE and node.threshold_pct == 5.0 and node.confidence == 0.95   # +10 %, bounds ±6 %
    assert "but within the two measurements' own error bounds" in node.reason and node.method == THRESHOLD_ONLY
    [case] = compare_documents(_node(old, 600.0), _node(new, 660.0), {"node.ets": 5.0}).cases
    assert case.metric("node.ets").verdict == REGRESSION
    [case] = compare_documents(old, _node(new, 660.0, domains=("cpu",)), {"cpu.ets": 5.0, "node.ets": 5.0}).cases
    assert case.notes[-2:] == ("cpu.ets not compared: the baseline did not measure cpu (run both with "
                               "--energy-domains=gpu,cpu,dram)", "node.ets not compared: this run did not measure node "
                               "(run both with --energy-domains=gpu,cpu,dram)")
    [case] = compare_documents(_node(old, 600.0, domains=("node",)), _node(new, 660.0, domains=("cpu", "node")),
                               {"cpu.ets": 5.0, "node.ets": 5.0}).cases
    assert [m.key for m in case.metrics][-1] == "node.ets"        # after a domain not compared, the next one is


def test_two_phases_only_in_one_run_are_named_in_the_plural():
    old, new = _step_runs()

    def renamed(doc, names):
        cases = [replace(c, repetitions=tuple(replace(r, phases={names.get(k, k): v for k, v in r.phases.items()})
                                              for r in c.repetitions)) for c in doc.cases]
        return replace(doc, cases=tuple(cases))

    [case] = compare_documents(renamed(old, {"forward": "fwd", "backward": "bwd"}), new, {}).cases
    assert case.notes[-2] == "phases fwd, bwd only in the baseline: not compared"


def test_a_case_note_says_what_differs_between_the_two_measurements():
    old = make_doc(seed=1, workloads=("a",), caps_w=(300.0,), n=1)
    new = make_doc(seed=2, workloads=("a",), caps_w=(300.0,), minutes=5, n=2)
    [case] = compare_documents(old, new, GATE).cases
    assert case.notes == ("threshold only: fewer than 2 repetitions on a side",)
    [case] = compare_documents(make_doc(seed=1, workloads=("a",), caps_w=(300.0,), n=2), new, GATE).cases
    assert case.notes == ()
    for moved_w, noted in ((0.5, False), (1.0, True)):
        shifted = replace(new, cases=tuple(replace(c, limit_enforced_w=c.limit_enforced_w + moved_w) for c in new.cases))
        [case] = compare_documents(make_doc(seed=1, workloads=("a",), caps_w=(300.0,), n=2), shifted, GATE).cases
        assert any(n.startswith("enforced limit differs: 300 W in the baseline") for n in case.notes) is noted


def test_the_machine_notes_name_what_changed_between_the_runs():
    old = make_doc(seed=1, workloads=("a",), caps_w=(300.0,), machine_info={**machine(), "cuda": "12.1", "torch": "2.3.0"})
    new = make_doc(seed=2, workloads=("a",), caps_w=(300.0,), minutes=0,
                   machine_info={**machine(), "cuda": "12.4", "torch": "2.4.1"},
                   commit={"id": "f" * 40, "branch": "main", "dirty": True})
    notes = compare_documents(old, new, GATE).notes
    assert notes[:3] == ("CUDA changed: 12.1 in the baseline, 12.4 now", "torch changed: 2.3.0 in the baseline, 2.4.1 now",
                         "this run measured uncommitted changes (dirty working tree)")
    assert not any("is newer than" in note for note in notes)      # saved in the same minute: not out of order


def test_the_time_is_decided_without_the_meters_energy_bounds():
    """T is timed exactly: the ETS bounds (here, scaled by T, they would overlap) never make it inconclusive."""
    old = make_doc(seed=1, workloads=("a",), caps_w=(300.0,))
    new = make_doc(seed=1, workloads=("a",), caps_w=(300.0,), minutes=5)
    slower = replace(new, cases=tuple(replace(c, repetitions=tuple(
        replace(r, time_s=r.time_s * 1.3, ets_j=r.ets_j / 1.3, ets_low_j=r.ets_low_j / 1.3, ets_high_j=r.ets_high_j / 1.3,
                mean_power_w=r.mean_power_w / 1.69, peak_power_w=r.peak_power_w / 1.69)
        for r in c.repetitions)) for c in new.cases))
    [case] = compare_documents(old, slower, GATE).cases
    assert case.metric("time").verdict == REGRESSION and case.metric("ets").verdict == IMPROVEMENT
