"""meter/distributed.py: the rank group the meter uses under torch.distributed, in one process.

The end-to-end torchrun test (test_torchrun.py) runs ranks in processes of their own, which
mutation testing cannot see into; these tests give the module what torch.distributed would, in
this process: ranks as threads sharing a stand-in for the default process group whose collectives
behave like gloo's (every rank blocks until all have called), and a stand-in ``torch`` module in
``sys.modules`` in the states a real one can be in (absent, half imported, built without
distributed support, no group, a group of one, a group being torn down).
"""

from __future__ import annotations

import socket
import sys
import threading
import types
from collections.abc import Callable
from typing import Any

import pytest

from pytest_gpuenergy.meter.distributed import RankGroup, current_group
from pytest_gpuenergy.meter.results import GpuResult, Repetition


class _World:
    """What the ranks of one process group share: a meeting point and a slot per rank."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.meeting = threading.Barrier(size, timeout=10)
        self.slots: list[Any] = [None] * size


class FakeDist:
    """One rank's view of ``torch.distributed`` with an initialised default group (gloo's semantics)."""

    def __init__(self, world: _World, rank: int) -> None:
        self.world, self.rank = world, rank

    def is_available(self) -> bool:
        return True

    def is_initialized(self) -> bool:
        return True

    def get_rank(self) -> int:
        return self.rank

    def get_world_size(self) -> int:
        return self.world.size

    def barrier(self) -> None:
        self.world.meeting.wait()

    def all_gather_object(self, object_list: list[Any], obj: Any) -> None:
        if len(object_list) != self.world.size:     # torch's own check
            raise ValueError("object_list must have one slot per rank")
        self.world.slots[self.rank] = obj
        self.world.meeting.wait()
        object_list[:] = list(self.world.slots)
        self.world.meeting.wait()                   # nobody overwrites a slot before all have read it


def on_ranks(size: int, work: Callable[[RankGroup], Any]) -> list[Any]:
    """``work(group)`` on each of ``size`` ranks at once (threads); what each returned, in rank order."""
    world = _World(size)
    returned: list[Any] = [None] * size
    errors: list[BaseException] = []

    def rank_main(rank: int) -> None:
        try:
            returned[rank] = work(RankGroup(FakeDist(world, rank)))
        except BaseException as exc:
            errors.append(exc)
            world.meeting.abort()                  # the other ranks stop waiting for this one

    threads = [threading.Thread(target=rank_main, args=(rank,)) for rank in range(size)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=20)
    if errors:
        raise errors[0]
    return returned


def gpu_part(index: int, ets_j: float) -> GpuResult:
    return GpuResult(gpu_index=index, gpu_name="H100", gpu_uuid=f"GPU-{index}", backend="sim", simulated=True,
                     method="counter", power_source=None, cap="current", limit_requested_w=None,
                     limit_enforced_w=700.0, default_limit_w=700.0,
                     repetitions=(Repetition(ets_j=ets_j, time_s=1.0, mean_power_w=ets_j, peak_power_w=ets_j),))


def test_a_rank_group_knows_its_rank_the_world_size_and_its_host():
    groups = on_ranks(3, lambda group: (group.rank, group.world_size, group.host))
    assert groups == [(rank, 3, socket.gethostname()) for rank in range(3)]


def test_every_rank_gets_every_ranks_gpus_in_rank_order_labelled_with_host_and_rank():
    """Rank r measured GPU r (and rank 1 two GPUs): every rank ends with all four parts, alike."""
    def combine(group: RankGroup) -> tuple[GpuResult, ...]:
        mine = [gpu_part(10 * group.rank, 100.0 + group.rank)]
        if group.rank == 1:
            mine.append(gpu_part(11, 111.0))
        return group.combine(mine)

    combined = on_ranks(3, combine)
    assert combined[0] == combined[1] == combined[2]
    assert [(p.gpu_index, p.rank, p.host, p.ets_j) for p in combined[0]] == [
        (0, 0, socket.gethostname(), 100.0), (10, 1, socket.gethostname(), 101.0),
        (11, 1, socket.gethostname(), 111.0), (20, 2, socket.gethostname(), 102.0)]
    assert all(p.repetitions == gpu_part(0, p.ets_j).repetitions for p in combined[0])   # only the labels changed


def test_gather_gives_every_rank_every_ranks_value_in_rank_order():
    gathered = on_ranks(3, lambda group: group.gather({"rank": group.rank}))
    assert gathered == [[{"rank": 0}, {"rank": 1}, {"rank": 2}]] * 3


def test_every_rank_agrees_on_the_largest_value():
    """The number of calls a region holds: a rank that decided on fewer would hang in the others' all-reduce."""
    proposals = [3, 7.5, 5]
    agreed = on_ranks(3, lambda group: group.agree_max(proposals[group.rank]))
    assert agreed == [7.5, 7.5, 7.5]


def test_a_flag_raised_on_any_rank_is_raised_on_every_rank_position_by_position():
    """Which regions came out coarse, per rank: one rank's coarse region is measured again by all."""
    flags = [[True, False, False, 0], [False, False, False, 0], [False, False, True, 1]]
    agreed = on_ranks(3, lambda group: group.agree_any(flags[group.rank]))
    assert agreed == [[True, False, True, True]] * 3
    assert all(type(flag) is bool for flag in agreed[0])


# -- current_group: the default group of this process, if torch has one ------------------------------

class _DistState:
    """``torch.distributed`` of one process: built with or without support, a group or none."""

    def __init__(self, *, initialised: bool = True, world_size: int = 2, rank: int = 1,
                 tearing_down: bool = False) -> None:
        self.initialised, self.size, self.rank, self.tearing_down = initialised, world_size, rank, tearing_down

    def is_available(self) -> bool:
        return True

    def is_initialized(self) -> bool:
        return self.initialised

    def _group(self) -> None:
        if not self.initialised:      # torch 2: ValueError; older releases: RuntimeError
            raise ValueError("Default process group has not been initialized, please make sure to call init_process_group.")
        if self.tearing_down:
            raise RuntimeError("the default process group is being destroyed")

    def get_rank(self) -> int:
        self._group()
        return self.rank

    def get_world_size(self) -> int:
        self._group()
        return self.size


def with_torch(monkeypatch: pytest.MonkeyPatch, dist: Any = None, *, has_distributed: bool = True) -> None:
    torch = types.ModuleType("torch")
    if has_distributed:
        torch.distributed = dist     # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "torch", torch)


def test_without_torch_there_is_no_group(monkeypatch):
    monkeypatch.delitem(sys.modules, "torch", raising=False)
    assert current_group() is None


def test_a_torch_still_being_imported_has_no_group_yet(monkeypatch):
    """``sys.modules['torch']`` exists from the start of its import, before ``torch.distributed`` is set."""
    with_torch(monkeypatch, has_distributed=False)
    assert current_group() is None


def test_a_torch_built_without_distributed_support_has_no_group(monkeypatch):
    """Such a build's torch.distributed has is_available() (False) and not is_initialized()."""
    with_torch(monkeypatch, types.SimpleNamespace(is_available=lambda: False))
    assert current_group() is None


def test_no_group_before_init_process_group(monkeypatch):
    with_torch(monkeypatch, _DistState(initialised=False))
    assert current_group() is None


def test_an_initialised_group_of_several_ranks_is_found_with_this_processs_rank(monkeypatch):
    dist = _DistState(world_size=2, rank=1)
    with_torch(monkeypatch, dist)
    group = current_group()
    assert isinstance(group, RankGroup)
    assert (group.dist, group.rank, group.world_size) == (dist, 1, 2)


def test_a_group_of_one_rank_measures_this_process_alone(monkeypatch):
    with_torch(monkeypatch, _DistState(world_size=1, rank=0))
    assert current_group() is None


def test_a_group_being_torn_down_is_no_group(monkeypatch):
    with_torch(monkeypatch, _DistState(tearing_down=True))
    assert current_group() is None
