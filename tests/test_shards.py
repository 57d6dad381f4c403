"""A suite sharded over machines: per-case baselines, one commit's runs as one, writes on shared folders."""

from __future__ import annotations

import json
import os
import re
import textwrap
from pathlib import Path

import pytest

from pytest_gpuenergy import fileio
from pytest_gpuenergy.cli import compare as compare_cli
from pytest_gpuenergy.errors import StorageError
from pytest_gpuenergy.gate.compare import baseline_comparison
from pytest_gpuenergy.runs.shards import case_baseline, merge_runs
from pytest_gpuenergy.runs.store import RunStore

from helpers import V100, make_doc

A = ("alexnet-train", "vgg-infer")          # shard A's workloads
B = ("residual-train", "memnet-infer")      # shard B's


def commit(cid: str) -> dict:
    return {"id": cid * 40 if len(cid) == 1 else cid, "branch": "main", "dirty": False}


def shard(workloads, minutes, cid="a", **kwargs):
    return make_doc(workloads=workloads, caps_w=(300.0,), minutes=minutes, commit=commit(cid), noise=0.003, **kwargs)


def verdicts(comparison) -> dict[str, str]:
    return {case.case_id.split("[")[1].split("-")[0]: case.verdict for case in comparison.cases}


# -- the baseline rule ------------------------------------------------------------------------------

def test_each_case_is_compared_with_the_latest_run_that_has_it(tmp_path):
    store = RunStore(tmp_path)
    for doc in (shard(A, 0, "a", seed=1), shard(B, 1, "a", seed=2), shard(A, 10, "b", seed=3), shard(B, 11, "b", seed=4)):
        store.save(doc)
    new_a = shard(A, 20, "c", seed=5, scale={"vgg-infer": 1.3})
    comparison = baseline_comparison(store, new_a, thresholds={"ets": 5.0})
    assert verdicts(comparison) == {"alexnet": "unchanged", "vgg": "regression"}   # no case new, none missing
    # the baseline is shard A's run of commit b (minute 10), not shard B's later one (minute 11)
    found = case_baseline(store.runs(), new_a)
    assert found is not None and found.created_at == shard(A, 10).created_at
    assert {c.case_id.split("[")[1].split("-")[0] for c in found.cases} == {"alexnet", "vgg"}


def test_a_case_that_moved_between_shards_keeps_its_baseline_and_the_missing_cases_are_the_shards_own(tmp_path):
    runs = [shard(A, 0, "a", seed=1), shard(B, 1, "a", seed=2)]
    new = shard(("alexnet-train", "residual-train"), 5, "b", seed=3)    # one case of each old shard
    found = case_baseline(runs, new)
    assert found is not None and set(found.sources) == {r.run_id for r in runs}
    comparison = baseline_comparison(_store_with(tmp_path, runs), new)
    assert verdicts(comparison) == {"alexnet": "unchanged", "residual": "unchanged", "vgg": "missing", "memnet": "missing"}


def test_without_shards_the_baseline_is_the_latest_run_as_before(tmp_path):
    runs = [make_doc(seed=1, minutes=0), make_doc(seed=2, minutes=10)]
    new = make_doc(seed=3, minutes=20)
    assert case_baseline(runs, new) is runs[1]
    assert case_baseline([make_doc(seed=1, minutes=0, gpu_name=V100)], new) is None   # another GPU model


def test_no_saved_run_with_any_of_the_cases_makes_every_case_new(tmp_path):
    store = _store_with(tmp_path, [shard(B, 0)])
    comparison = baseline_comparison(store, shard(A, 5))
    assert {c.verdict for c in comparison.cases} == {"new"}
    assert "none of the 1 saved runs" in comparison.notes[0]


def _store_with(folder: Path, docs) -> RunStore:
    store = RunStore(folder)
    for doc in docs:
        store.save(doc)
    return store


# -- one commit's runs as one ------------------------------------------------------------------------

def test_merge_takes_each_case_from_the_latest_run_that_has_it():
    old_a, b, new_a = shard(A, 0, seed=1), shard(B, 1, seed=2), shard(A, 2, seed=3, scale={"vgg-infer": 2.0})
    merged = merge_runs([new_a, b, old_a])
    assert merged.sources == (b.run_id, new_a.run_id)          # old_a gives nothing: new_a has all its cases
    assert merged.run_id == f"{new_a.run_id}+1"
    by_id = {c.case_id: c for c in merged.cases}
    assert len(by_id) == 4 and len(merged.cases) == 4
    vgg = next(c for c in merged.cases if "vgg" in c.case_id)
    assert vgg.summary.ets_j == pytest.approx(next(c for c in new_a.cases if "vgg" in c.case_id).summary.ets_j)
    with pytest.raises(ValueError, match="different GPU models"):
        merge_runs([old_a, shard(B, 3, gpu_name=V100)])


def test_runs_by_commit_and_compare_commit_refs(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    store = RunStore(tmp_path)
    for doc in (shard(A, 0, "a", seed=1), shard(B, 1, "a", seed=2),
                shard(A, 10, "b", seed=3, scale={"alexnet-train": 1.4}), shard(B, 11, "b", seed=4)):
        store.save(doc)
    assert compare_cli.main(["runs", "--storage", str(tmp_path), "--by-commit"]) == 0
    out = capsys.readouterr().out
    rows = out.splitlines()[2:]
    assert len(rows) == 2       # one row per commit: its two shards' runs, four cases
    assert re.match(r"a{10} \(main\)\s+2\s+4\s", rows[0]) and re.match(r"b{10} \(main\)\s+2\s+4\s", rows[1])
    assert compare_cli.main(["compare", "commit:aaaa", "commit:bbbb", "--storage", str(tmp_path), "--fail", "ets:5%"]) == 1
    out = " ".join(capsys.readouterr().out.split())
    assert "1 regressed" in out and "0 new, 0 missing" in out
    assert compare_cli.main(["compare", "latest", "commit:bbbb", "--storage", str(tmp_path), "--fail", "ets:5%"]) == 1
    assert "0 new, 0 missing" in " ".join(capsys.readouterr().out.split())
    assert compare_cli.main(["compare", "latest", "commit:ffff", "--storage", str(tmp_path)]) == 2
    assert "no saved run of commit 'ffff'" in capsys.readouterr().err


def test_a_commit_with_runs_of_two_gpu_models_needs_gpu(tmp_path, capsys):
    store = RunStore(tmp_path)
    store.save(shard(A, 0, "a"))
    store.save(shard(A, 1, "a", gpu_name=V100))
    assert compare_cli.main(["compare", "latest", "commit:a", "--storage", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "compare one GPU model at a time with --gpu MODEL" in err
    assert compare_cli.main(["compare", f"commit:{'a' * 7}", "commit:a", "--storage", str(tmp_path), "--gpu", V100]) == 0


# -- shared folders -----------------------------------------------------------------------------------

def test_a_save_whose_link_reply_was_lost_on_nfs_counts_as_saved(tmp_path, monkeypatch):
    """NFS: the server made the link, the reply was lost, the retried request says "exists"."""
    real_link = os.link

    def link_then_lose_the_reply(src, dst, *args, **kwargs):
        real_link(src, dst, *args, **kwargs)
        raise FileExistsError(17, "File exists", str(dst))

    monkeypatch.setattr(fileio.os, "link", link_then_lose_the_reply)
    doc = shard(A, 0)
    path = RunStore(tmp_path).save(doc)
    assert json.loads(path.read_text())["run_id"] == doc.run_id
    assert [p.name for p in path.parent.iterdir()] == [path.name]       # no temporary file left
    monkeypatch.setattr(fileio.os, "link", real_link)
    with pytest.raises(StorageError, match="already exists"):           # someone else's file: still refused
        RunStore(tmp_path).save(doc)


# -- end to end: two shards, one storage folder ---------------------------------------------------------

SUITE = textwrap.dedent(
    """
    import os, pytest

    SCALE = float(os.environ.get("SCALE_A", "1"))

    @pytest.mark.energy(work={"flops_tf32": 4e12, "bytes": 1e10, "kernels": 200}, repeat=3)
    def test_a1(gpu_power_cap, energy_meter):
        energy_meter.measure(lambda: None)

    def test_a2(gpu_power_cap, energy_meter):
        energy_meter.measure(lambda: pytest_gpuenergy_declare(SCALE))

    @pytest.mark.energy(work={"flops_tf32": 4e12, "bytes": 1e10, "kernels": 200}, repeat=3)
    def test_b1(gpu_power_cap, energy_meter):
        energy_meter.measure(lambda: None)

    @pytest.mark.energy(work={"flops_tf32": 2e12, "bytes": 1e10, "kernels": 200}, repeat=3)
    def test_b2(gpu_power_cap, energy_meter):
        energy_meter.measure(lambda: None)

    def pytest_gpuenergy_declare(scale):
        from pytest_gpuenergy.sim import declare_work
        declare_work(flops_tf32=3e12 * scale, bytes=1e10, kernels=200)
    """
)


def test_two_shards_saving_to_one_folder_gate_each_case_against_its_own_baseline(pytester, monkeypatch):
    pytester.makepyfile(test_suite=SUITE)
    storage = pytester.path / "shared"
    common = ("-p", "no:cacheprovider", f"--energy-storage={storage}", "--energy-repeat=3")
    shard_a, shard_b = ["test_suite.py::test_a1", "test_suite.py::test_a2"], ["test_suite.py::test_b1", "test_suite.py::test_b2"]
    for tests in (shard_a, shard_b):       # two machines, one shared folder (a SLURM array's two tasks)
        pytester.runpytest(*common, *tests, "--energy-save").assert_outcomes(passed=2)
    assert len(list(storage.rglob("*.json"))) == 2
    # shard a again, unchanged: compared with its own baseline although shard b saved last
    result = pytester.runpytest(*common, *shard_a, "--energy-fail=ets:5%", "--energy-save")
    result.assert_outcomes(passed=2)
    text = " ".join(result.stdout.str().split())
    assert "0 regressed" in text and "0 new, 0 missing" in text
    # shard b, with a regression in shard a's test elsewhere: b's cases still compare with b's run
    result = pytester.runpytest(*common, *shard_b, "--energy-fail=ets:5%")
    assert "0 new, 0 missing" in " ".join(result.stdout.str().split()) and result.ret == 0
    monkeypatch.setenv("SCALE_A", "1.5")
    result = pytester.runpytest(*common, *shard_a, "--energy-fail=ets:5%")
    assert result.ret == 1
    assert "ENERGY REGRESSION test_suite.py::test_a2" in " ".join(result.stdout.str().split())


# -- shards.py at its edges, word for word (its mutation run: 81.5 % killed) ----------------------------

def test_merging_nothing_is_an_error_and_one_useful_run_comes_back_as_it_is():
    with pytest.raises(ValueError, match=r"^merge_runs needs at least one run$"):
        merge_runs([])
    old_a, new_a = shard(A, 0, seed=1), shard(A, 2, seed=3)
    assert merge_runs([old_a, new_a]) is new_a                       # the old run gives no case
    merged = merge_runs([shard(A, 0, seed=1, backend="nvml"), shard(B, 1, seed=2, backend="nvml")])
    assert merged.path is None and merged.simulated is False and len(merged.cases) == 4


def test_a_merge_is_simulated_when_any_of_its_runs_is():
    real_a, real_b = shard(A, 0, seed=1, backend="nvml"), shard(B, 1, seed=2, backend="nvml")
    from dataclasses import replace
    assert merge_runs([real_a, replace(real_b, simulated=True)]).simulated is True
    assert merge_runs([real_a, real_b]).run_id == f"{real_b.run_id}+1"


def test_a_baseline_saved_at_the_same_moment_as_the_new_runs_first_shard_counts():
    earlier, new_a = shard(A, 5, seed=1), shard(A, 5, seed=2, cid="b")
    from dataclasses import replace
    merged_new = replace(new_a, run_id="merged", sources=(new_a.run_id,))
    baseline = case_baseline([earlier, new_a], merged_new)
    assert baseline is not None and baseline.run_id == earlier.run_id
    later = shard(A, 6, seed=3)
    assert case_baseline([later], shard(A, 5, seed=4)) is None        # saved after the new run: no baseline


def test_a_baseline_gathers_each_case_from_the_latest_run_that_has_it():
    a_old, b_only, a_new = shard(A, 0, seed=1), shard(B, 1, seed=2), shard(A, 2, seed=3)
    new = shard((*A, *B), 10, seed=4, cid="b")
    baseline = case_baseline([a_old, b_only, a_new], new)
    assert baseline is not None and set(baseline.sources) == {b_only.run_id, a_new.run_id}
    assert len(baseline.cases) == 4


def test_runs_group_by_commit_and_runs_without_one_stay_alone():
    from pytest_gpuenergy.runs.shards import by_commit
    a1, a2 = shard(A, 0, "a", seed=1), shard(B, 1, "a", seed=2)
    loose1 = make_doc(workloads=A, caps_w=(300.0,), minutes=2, commit={}, seed=3)
    loose2 = make_doc(workloads=B, caps_w=(300.0,), minutes=3, commit={}, seed=4)
    groups = by_commit([loose2, a2, loose1, a1])
    assert [(g.commit_id, len(g.runs)) for g in groups] == [("a" * 40, 2), ("", 1), ("", 1)]
    assert [g.runs[0].run_id for g in groups[1:]] == [loose1.run_id, loose2.run_id]


def test_a_commit_reference_names_what_is_missing_ambiguous_or_mixed(tmp_path):
    from pytest_gpuenergy.runs.shards import resolve_commit
    store = RunStore(tmp_path)
    for doc in (shard(A, 0, "abc1" + "0" * 36, seed=1), shard(A, 1, "abc2" + "0" * 36, seed=2),
                shard(A, 2, "ddd" + "0" * 37, seed=3), shard(A, 3, "ddd" + "0" * 37, seed=4, gpu_name=V100)):
        store.save(doc)
    with pytest.raises(StorageError, match=r"^'commit:': give a commit id after 'commit:' \(see: gpuenergy runs --by-commit\)$"):
        resolve_commit(store, "commit:")
    with pytest.raises(StorageError, match=rf"^no saved run of commit 'fff' in {re.escape(str(tmp_path))}; "
                                           rf"list them with: gpuenergy runs --by-commit --storage "):
        resolve_commit(store, "commit:fff")
    with pytest.raises(StorageError, match=rf"^no saved run of {re.escape(V100)} \(sim\) of commit 'abc' in "):
        resolve_commit(store, "commit:abc", backend="sim", gpu_model=V100)
    with pytest.raises(StorageError, match=r"^commit 'abc' is ambiguous in .*: abc100000000, abc200000000; give more of the id$"):
        resolve_commit(store, "commit:abc")
    with pytest.raises(StorageError, match=rf"^commit 'ddd' has runs of .* \(sim\); {re.escape(V100)} \(sim\): compare one GPU "):
        resolve_commit(store, "commit:ddd")
    assert resolve_commit(store, "commit:abc1").commit["id"].startswith("abc1")
    assert resolve_commit(store, "commit:ddd", backend="sim", gpu_model=V100).gpu_model == V100


# -- shards.py's survivors of its 2026-11-27 rerun: each names the mutant it kills ---------------------------

def test_a_merge_of_three_contributing_runs_is_named_after_the_newest_plus_two_and_is_simulated_if_an_older_one_is():
    from dataclasses import replace
    c = ("autoenc-train",)
    older_sim = replace(shard(A, 0, seed=1, backend="nvml"), simulated=True)
    middle, newest = shard(B, 1, seed=2, backend="nvml"), shard(c, 2, seed=3, backend="nvml")
    merged = merge_runs([newest, older_sim, middle])
    assert merged.run_id == f"{newest.run_id}+2"                 # used[-1], not used[1]: the newest of three
    assert merged.sources == (older_sim.run_id, middle.run_id, newest.run_id)
    assert merged.simulated is True                               # any run simulated, not the newest's flag
    assert merge_runs([shard(A, 0, seed=1, backend="nvml"), middle]).simulated is False


def test_a_merge_of_runs_read_from_files_has_no_path_of_its_own(tmp_path):
    store = RunStore(tmp_path)
    for doc in (shard(A, 0, seed=1), shard(B, 1, seed=2)):
        store.save(doc)
    loaded = store.runs(None, None)
    assert all(doc.path for doc in loaded)
    assert merge_runs(loaded).path is None                        # no file holds the merged document


def test_a_run_saved_between_the_new_runs_first_shard_and_its_merge_is_not_its_baseline():
    from dataclasses import replace
    before, first_shard, between = shard(A, 10, seed=1), shard(A, 20, seed=2, cid="b"), shard(A, 25, seed=3)
    second_shard = shard(B, 30, seed=4, cid="b")
    merged_new = replace(merge_runs([first_shard, second_shard]), run_id="merged")
    baseline = case_baseline([before, first_shard, between, second_shard], merged_new)
    assert baseline is not None and baseline.run_id == before.run_id   # cut at the first shard (t20), not at t30


def test_a_baseline_from_three_earlier_runs_takes_each_case_from_the_latest_that_has_it_and_no_more():
    c = ("autoenc-train", "deepq-infer")
    a_run, b_run, c_run = shard((*A, "speech-train"), 0, seed=1), shard(B, 1, seed=2), shard(c, 2, seed=3)
    a_again = shard(A, 3, seed=4)
    new = shard((*A, *B, *c), 10, seed=5, cid="b")
    baseline = case_baseline([a_run, b_run, c_run, a_again], new)
    assert baseline is not None
    assert baseline.sources == (b_run.run_id, c_run.run_id, a_again.run_id)   # a_run's cases came from a_again
    # every case found once the three later runs are read: a_run is never used, so its speech case
    # (one the new run does not have) is no missing case of this baseline
    assert {e.case_id for e in baseline.cases} == {e.case_id for e in new.cases}


def test_a_commit_is_narrowed_to_one_backend_and_a_run_without_a_commit_matches_no_prefix(tmp_path):
    from pytest_gpuenergy.runs.shards import resolve_commit
    store = RunStore(tmp_path)
    sim_run, nvml_run = shard(A, 0, "e", seed=1), shard(A, 1, "e", seed=2, backend="nvml")
    loose = make_doc(workloads=B, caps_w=(300.0,), minutes=2, commit={}, seed=3)
    for doc in (sim_run, nvml_run, loose):
        store.save(doc)
    assert resolve_commit(store, "commit:eee", backend="sim").run_id == sim_run.run_id
    assert resolve_commit(store, "commit:eee", backend="nvml").run_id == nvml_run.run_id
    with pytest.raises(StorageError, match=r"^no saved run of commit 'XX' in "):
        resolve_commit(store, "commit:XX")                       # a run with no commit has the id '', not a match
