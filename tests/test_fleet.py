"""``gpuenergy fleet`` without a Ray cluster: planning, the node's task, the gate over all models, the CLI.

The end-to-end run on a real local Ray cluster is ``test_fleet_ray.py`` (one Ray start); here
every part is driven on its own: the task runs a real pytest session on simulated GPUs exactly
as on a node, and the driver's side gets real run documents.
"""

from __future__ import annotations

import json
import os
import sys
import textwrap
from dataclasses import replace
from pathlib import Path

import pytest

from pytest_gpuenergy.cli.main import build_parser
from pytest_gpuenergy.fleet.cli import cmd_fleet
from pytest_gpuenergy.fleet.driver import Follower, RayMissing, TaskState, describe_ray_error, import_ray
from pytest_gpuenergy.fleet.plan import (
    PER_GPU,
    PER_MODEL,
    FleetUsageError,
    LocalCluster,
    TaskSpec,
    inventory,
    plan_tasks,
    split_pytest_args,
)
from pytest_gpuenergy.fleet.report import apply_gate, collect, fleet_json, fleet_markdown
from pytest_gpuenergy.fleet.task import pytest_command, run_suite, task_env
from pytest_gpuenergy.gpu.device import open_backend
from pytest_gpuenergy.runs.store import RunStore

from helpers import V100, make_doc

H100_NODE = {"NodeID": "a" * 56, "Alive": True, "NodeManagerAddress": "10.0.0.1", "NodeManagerHostname": "gpu-01",
             "Resources": {"CPU": 64.0, "GPU": 8.0, "accelerator_type:H100": 1.0}}
A100_NODE = {"NodeID": "b" * 56, "Alive": True, "NodeManagerAddress": "10.0.0.2", "NodeManagerHostname": "gpu-02",
             "Resources": {"CPU": 32.0, "GPU": 4.0, "accelerator_type:A100": 1.0}}
DEAD_NODE = {**A100_NODE, "NodeID": "c" * 56, "Alive": False}
CPU_NODE = {"NodeID": "d" * 56, "Alive": True, "NodeManagerAddress": "10.0.0.4", "Resources": {"CPU": 8.0}}


# -- plan ---------------------------------------------------------------------------------------------

def test_the_gpu_models_come_from_rays_accelerator_types_and_dead_or_gpu_less_nodes_are_left_out():
    found = inventory([H100_NODE, A100_NODE, DEAD_NODE, CPU_NODE, {**H100_NODE, "NodeID": "e" * 56}])
    assert [(m.model, m.total_gpus, len(m.nodes)) for m in found.models] == [("A100", 4, 1), ("H100", 16, 2)]
    assert found.models[1].describe() == "H100 (16 GPUs on 2 nodes)"
    assert found.models[0].nodes[0].describe() == f"gpu-02 (10.0.0.2, node {'b' * 12})"


def test_a_node_with_several_models_says_how_many_of_each_or_is_named_as_an_error():
    local = LocalCluster.from_sim_gpus("H100,A100,h100")
    node = {"NodeID": "f" * 56, "Alive": True, "NodeManagerAddress": "127.0.0.1",
            "Resources": {"GPU": 3.0, **local.ray_resources()}}
    found = inventory([node])
    assert {m.model: m.total_gpus for m in found.models} == {"H100": 2, "A100": 1}
    assert found.counted == {"H100", "A100"}
    [task] = plan_tasks(found, PER_MODEL, ["tests"], models=["h100"])
    assert task.ray_resources() == {"gpuenergy_gpus:H100": 1.0}     # a fake node's model-specific GPUs are held too
    uncounted = {**node, "Resources": {"GPU": 3.0, "accelerator_type:H100": 1.0, "accelerator_type:A100": 1.0}}
    with pytest.raises(FleetUsageError, match=r"node 127\.0\.0\.1 \(ffffffffffff\) offers GPUs of several models"):
        inventory([uncounted])
    with pytest.raises(FleetUsageError, match="GPUENERGY_SIM_GPUS: unknown simulated GPU model 'B200'"):
        LocalCluster.from_sim_gpus("H100,B200")


def test_one_task_per_model_or_one_per_node_of_gpus_with_an_xdist_worker_each():
    found = inventory([H100_NODE, A100_NODE])
    per_model = plan_tasks(found, PER_MODEL, ["suite", "-x"], gpus_per_task=2, env={"GPUENERGY_SIM_SEED": "4"})
    assert [(t.model, t.num_gpus, t.xdist_workers, t.pytest_args) for t in per_model] == [
        ("A100", 2, 0, ("suite", "-x")), ("H100", 2, 0, ("suite", "-x"))]
    assert per_model[0].env == (("GPUENERGY_SIM_SEED", "4"),) and per_model[0].ray_resources() == {}
    per_gpu = plan_tasks(found, PER_GPU, ["suite"])
    assert [(t.model, t.num_gpus, t.xdist_workers) for t in per_gpu] == [("A100", 4, 4), ("H100", 8, 8)]
    assert "-n 8" in " ".join(pytest_command(per_gpu[1], Path("/s"), 1))
    assert pytest_command(replace(per_gpu[1], pytest_args=("suite", "-n2")), Path("/s"), 1).count("-n") == 0


@pytest.mark.parametrize(("kwargs", "nodes", "message"), [
    ({"gpus_per_task": 5}, [A100_NODE], r"--gpus-per-task=5: no node has 5 GPUs of A100 \(the largest has 4\)"),
    ({"models": ["V100"]}, [A100_NODE], r"--models: the cluster has no GPUs of V100 \(it offers: A100\)"),
    ({}, [CPU_NODE], "offers no GPU of a known model; for a local try-out without GPUs set GPUENERGY_SIM_GPUS"),
    ({}, [{**CPU_NODE, "Resources": {"GPU": 2.0}}], r"2 GPU\(s\) carry no accelerator type"),
    ({"simulate": True}, [{**A100_NODE, "Resources": {"GPU": 1.0, "accelerator_type:L4": 1.0}}],
     "the simulator has no GPU model for Ray's accelerator type 'L4'"),
])
def test_a_plan_that_cannot_run_is_one_line_naming_the_problem_and_the_fix(kwargs, nodes, message):
    with pytest.raises(FleetUsageError, match=message):
        plan_tasks(inventory(nodes), PER_MODEL, ["suite"], **kwargs)


def test_the_gates_options_stay_on_the_driver_and_the_rest_goes_to_the_tasks(tmp_path):
    gate, rest = split_pytest_args(
        ["suite", "--gpu-caps=60%,100%", "--energy-fail", "ets:5%,edp:10%", "--energy-save", "-k", "alexnet",
         "--energy-storage=runs", "--energy-markdown", "r.md", "--energy-confidence=95%", "--energy-repeat=3"],
        tmp_path)
    assert rest == ["suite", "--gpu-caps=60%,100%", "-k", "alexnet", "--energy-repeat=3"]
    assert gate.thresholds == {"ets": 5.0, "edp": 10.0} and gate.compare == "latest" and gate.save
    assert (gate.storage, gate.markdown, gate.html) == (tmp_path / "runs", tmp_path / "r.md", None)
    assert gate.confidence == pytest.approx(0.95)
    assert split_pytest_args(["s", "--energy-compare=20250301T1015"], tmp_path)[0].compare == "20250301T1015"
    assert split_pytest_args(["s"], tmp_path)[0].storage == tmp_path / ".energy"
    for bad, message in ((["--energy-fail=ets"], "'ets' is not a threshold"), (["--energy-json"], "needs a value"),
                         (["--energy-confidence=2"], "is not a confidence level")):
        with pytest.raises(FleetUsageError, match=message):
            split_pytest_args(bad, tmp_path)
    (tmp_path / "a-file").write_text("")          # a report the driver could not write: said before any task
    with pytest.raises(FleetUsageError, match=f"--energy-html: cannot write {tmp_path}/a-file/r.html: "
                                              f"{tmp_path}/a-file is not a folder"):
        split_pytest_args(["s", "--energy-html=a-file/r.html"], tmp_path)
    with pytest.raises(FleetUsageError, match=f"--energy-save: cannot save runs in {tmp_path}/a-file: "):
        split_pytest_args(["s", "--energy-save", "--energy-storage=a-file"], tmp_path)
    assert split_pytest_args(["s", "--energy-storage=a-file"], tmp_path)[0].storage == tmp_path / "a-file"   # no save


def test_a_simulated_task_gets_its_models_gpus_and_no_step_summary_of_its_own(tmp_path):
    spec = TaskSpec("A100-80G", 2, ("suite",), simulate=True, env=(("GPUENERGY_SIM_SEED", "7"),))
    env = task_env(spec, {"GITHUB_STEP_SUMMARY": "/s", "CUDA_VISIBLE_DEVICES": "3,4",
                          "GPUENERGY_SIM_STATE": str(tmp_path)})
    assert env["GPUENERGY_SIM_GPUS"] == "A100,A100" and env["GPUENERGY_SIM_SEED"] == "7"
    assert env["GPUENERGY_SIM_STATE"] == str(tmp_path / "fleet" / "a100-80g-x2")
    assert "CUDA_VISIBLE_DEVICES" not in env and "GITHUB_STEP_SUMMARY" not in env
    real = task_env(replace(spec, simulate=False), {"CUDA_VISIBLE_DEVICES": "3,4"})
    assert real["CUDA_VISIBLE_DEVICES"] == "3,4" and "GPUENERGY_SIM_GPUS" not in real   # Ray's GPUs, as given


# -- the task, as it runs on a node (here: this machine, no Ray) ----------------------------------------

SUITE = textwrap.dedent(
    """
    import os, time
    from pathlib import Path
    import pytest

    @pytest.mark.energy(work={"flops_tf32": 1e12, "bytes": 1e10, "kernels": 100})
    def test_step(gpu_power_cap, energy_meter):
        energy_meter.measure(lambda: None, min_time_s=0.3)
        if Path("hang").exists():
            Path("capped").write_text(str(gpu_power_cap.enforced_w))
            time.sleep(120)
    """
)


def test_a_task_runs_the_suite_on_simulated_gpus_of_its_model_and_returns_the_run_document(sim_state, tmp_path):
    (tmp_path / "test_suite.py").write_text(SUITE)
    spec = TaskSpec("A100", 1, ("test_suite.py", "--gpu-caps=60%", "-p", "no:cacheprovider"), simulate=True)
    events = list(run_suite(spec, {"hostname": "here"}, workdir=str(tmp_path), heartbeat_s=0.5))
    assert events[0]["event"] == "started" and events[-1]["event"] == "finished"
    finished = events[-1]
    assert finished["exit_code"] == 0 and finished["summary"].startswith("1 passed")
    [document] = finished["documents"]
    data = json.loads(document["text"])
    assert data["gpu_model"] == "NVIDIA A100-SXM4-40GB (simulated)" and data["cases"][0]["cap"] == "60%"
    assert finished["sim_state"] == str(sim_state / "fleet" / "a100-x1")
    assert not (tmp_path / ".energy").exists()       # saved on the node's temporary folder only, then sent


def test_a_task_stopped_mid_run_ends_its_pytest_which_restores_the_cap(sim_state, tmp_path):
    (tmp_path / "test_suite.py").write_text(SUITE)
    (tmp_path / "hang").touch()
    spec = TaskSpec("V100", 1, ("test_suite.py", "--gpu-caps=60%", "-p", "no:cacheprovider"), simulate=True)
    events = run_suite(spec, {}, workdir=str(tmp_path), heartbeat_s=0.1)
    for event in events:        # Ray cancelling the task, or the driver going away, closes the generator
        if (tmp_path / "capped").exists():
            break
        assert event["event"] != "finished"
    events.close()
    assert float((tmp_path / "capped").read_text()) == pytest.approx(180.0)    # 60 % of the V100's 300 W
    os.environ["GPUENERGY_SIM_GPUS"] = "V100"
    os.environ["GPUENERGY_SIM_STATE"] = str(sim_state / "fleet" / "v100-x1")
    try:
        backend = open_backend("sim")
        limits = backend.visible_gpus[0].limits()
        backend.close()
    finally:
        os.environ["GPUENERGY_SIM_STATE"] = str(sim_state)
        del os.environ["GPUENERGY_SIM_GPUS"]
    assert limits.current_mw == limits.default_mw == 300_000


# -- the driver following its tasks ---------------------------------------------------------------------

class _NeverStarts:
    """Ray as seen by the driver when no node can give a task its GPUs: nothing is ever ready."""

    class exceptions:
        RayError = RuntimeError

    def __init__(self) -> None:
        self.cancelled: list[object] = []

    def wait(self, handles, num_returns=1, timeout=None):
        return [], list(handles)

    def cancel(self, handle) -> None:
        self.cancelled.append(handle)


def test_a_task_that_finds_no_gpus_in_time_is_cancelled_and_named():
    now = [0.0]

    def clock() -> float:
        now[0] += 400.0
        return now[0]

    ray, said = _NeverStarts(), []
    follower = Follower(ray, said.append, progress_every_s=10_000, start_timeout_s=900, clock=clock)
    state = TaskState(TaskSpec("H100", 2, ("suite",)), submitted_at=0.0)
    handles = {"h100-task": state}
    follower.follow(handles)
    assert ray.cancelled == ["h100-task"]
    assert state.error == ("H100: the task died before it started on a node: no node gave it 2 GPU(s) of H100 within "
                           "900 s (are they all busy, or gone?)")


def test_a_ray_error_reads_as_what_happened():
    class WorkerCrashedError(Exception):
        pass
    text = describe_ray_error(WorkerCrashedError("The worker died unexpectedly while executing this task.\nmore"))
    assert text == ("its Ray worker process died (killed, or out of memory) (WorkerCrashedError: The worker died "
                    "unexpectedly while executing this task.)")


# -- one gate over every model --------------------------------------------------------------------------

def _finished(model: str, doc, exit_code: int = 0, output: str = "") -> TaskState:
    state = TaskState(TaskSpec(model, 1, ("suite",)), submitted_at=0.0, status="finished",
                      node={"hostname": f"{model.lower()}-node", "address": "10.1.1.1", "node_id": "9" * 56})
    state.result = {"event": "finished", "exit_code": exit_code, "summary": "10 passed in 3.00s", "wall_s": 4.0,
                    "output_tail": output, "failures": [],
                    "documents": [{"path": "x.json", "text": json.dumps(doc.to_json())}] if doc is not None else []}
    return state


def _gate(tmp_path: Path, *args: str):
    return split_pytest_args(["suite", f"--energy-storage={tmp_path / 'runs'}", *args], tmp_path)[0]


def test_each_models_run_is_gated_against_its_own_baseline_and_reported_once(tmp_path):
    store = RunStore(tmp_path / "runs")
    for doc in (make_doc(minutes=0), make_doc(minutes=0, gpu_name=V100, caps_w=(150.0, 300.0))):
        store.save(doc)
    h100_base, v100_base = store.runs(gpu_model=make_doc().gpu_model)[0], store.runs(gpu_model=V100)[0]
    tasks = [_finished("H100", make_doc(minutes=5, seed=1)),
             _finished("V100", make_doc(minutes=5, gpu_name=V100, caps_w=(150.0, 300.0), seed=1,
                                        scale={"vgg-infer": 1.3}))]
    outcome = collect("fleet-x", tasks)
    apply_gate(outcome, _gate(tmp_path, "--energy-fail=ets:5%", "--energy-save", "--energy-html=r.html",
                              "--energy-markdown=r.md", "--energy-json=r.json"))
    assert outcome.exit_code == 1 and outcome.complete
    olds = {c.new_machine.gpu_model: c.old_run_id for c in outcome.comparisons}
    assert olds == {h100_base.gpu_model: h100_base.run_id, V100: v100_base.run_id}
    assert [c.failed for c in outcome.comparisons] == [False, True]
    assert len(store.runs()) == 4 and all(d.options["fleet"]["fleet_id"] == "fleet-x" for d in store.runs()[2:])
    markdown, page = (tmp_path / "r.md").read_text(), (tmp_path / "r.html").read_text()
    assert "complete: 2 of 2 GPU models ran" in markdown and "| V100 | 1 | v100-node (10.1.1.1" in markdown
    assert page.count("complete: 2 of 2 GPU models ran") == 1 and V100 in page
    assert json.loads((tmp_path / "r.json").read_text())["fleet"]["models"] == ["H100", "V100"]


def test_a_model_that_did_not_finish_is_named_and_the_others_are_kept_and_saved(tmp_path):
    died = TaskState(TaskSpec("A100", 1, ("suite",)), submitted_at=0.0, node={"hostname": "gpu-07"})
    died.fail("its node was lost (NodeDiedError: ...)")
    crashed = _finished("V100", None, exit_code=-9, output="collected 10 items\ntest_x.py ..")
    outcome = collect("fleet-y", [_finished("H100", make_doc()), died, crashed])
    apply_gate(outcome, _gate(tmp_path, "--energy-save"))
    assert outcome.exit_code == 3 and not outcome.complete
    assert outcome.status_text() == "fleet run fleet-y: INCOMPLETE: 1 of 3 GPU models ran (H100); did not finish: A100, V100"
    assert outcome.problems == [
        "A100: the task died on gpu-07: its node was lost (NodeDiedError: ...)",
        "V100: pytest was killed by signal 9 on v100-node (10.1.1.1, node 999999999999); its output ends: "
        "collected 10 items | test_x.py ..",
    ]
    [saved] = RunStore(tmp_path / "runs").runs()
    assert saved.options["fleet"]["complete"] is False and saved.options["fleet"]["missing"] == ["A100", "V100"]
    assert "INCOMPLETE" in fleet_markdown(outcome) and "gpu-07" in fleet_markdown(outcome)
    assert json.loads(fleet_json(outcome))["failed"] is True


def test_bad_input_a_damaged_document_and_no_tests_each_exit_as_they_should(tmp_path):
    usage = collect("f", [_finished("H100", None, exit_code=4, output="ERROR: --gpu-caps='x' is not a cap\n")])
    assert usage.exit_code == 2 and usage.usage_errors == [
        "H100 on h100-node (10.1.1.1, node 999999999999): pytest refused the arguments: ERROR: --gpu-caps='x' is not a cap"]
    damaged = _finished("H100", make_doc())
    damaged.result["documents"][0]["text"] = '{"format": "pytest-gpuenergy-run", "version": 2, "run_id": 5}'
    outcome = collect("f", [damaged])
    assert outcome.exit_code == 3 and "the run document x.json of H100 from h100-node" in outcome.problems[0]
    assert collect("f", [_finished("H100", None, exit_code=5)]).exit_code == 5
    assert collect("f", [_finished("H100", make_doc(), exit_code=1)]).exit_code == 1


# -- the command ----------------------------------------------------------------------------------------

def _run(argv: list[str], capsys, ray_module=None) -> tuple[int, str]:
    args = build_parser().parse_args(["fleet", *argv])
    code = cmd_fleet(args, ray_module=ray_module or (lambda: pytest.fail("Ray must not be needed")))
    captured = capsys.readouterr()
    return code, captured.err


def test_the_command_checks_what_it_can_before_starting_a_cluster(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert _run([], capsys) == (2, "gpuenergy fleet: error: no pytest arguments: give them after --, e.g. "
                                   "gpuenergy fleet -- reference_workloads\n")
    code, err = _run(["--", "suite", "--energy-fail=ets:lots"], capsys)
    assert code == 2 and "--energy-fail: 'ets:lots' is not a threshold" in err
    bad = tmp_path / ".energy" / "sim" / "x" / "run.json"
    bad.parent.mkdir(parents=True)
    bad.write_text("{not json")
    code, err = _run(["--", "suite", "--energy-compare"], capsys)
    assert code == 2 and str(bad) in err and err.count("\n") == 1
    assert bad.read_text() == "{not json"


def test_without_ray_the_command_says_how_to_install_it(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setitem(sys.modules, "ray", None)     # import ray now fails as if it were not installed
    with pytest.raises(RayMissing):
        import_ray()
    code, err = _run(["--", "suite"], capsys, ray_module=import_ray)
    assert code == 2 and err == ("gpuenergy fleet: error: gpuenergy fleet needs Ray, which is not installed; install it "
                                 "with: pip install 'pytest-gpuenergy[fleet]'\n")
