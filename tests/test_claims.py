"""Tests of ``pytest_gpuenergy/gpu/claims.py``: sessions sharing a node take free GPUs before busy ones.

In-process claims on a simulated 4-GPU machine (each claim's files are opened anew, so one process's
claims conflict as two sessions' would), then two real ``pytest -n 2`` sessions side by side.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pytest_gpuenergy.gpu.claims import Claim, claim_gpus, in_order
from pytest_gpuenergy.gpu.device import Backend

from helpers import CHILD_PYTEST_ADDOPTS

FOUR = "H100,H100,H100,H100"


@pytest.mark.sim_gpus(FOUR)
def test_a_second_session_takes_the_free_gpus_and_says_who_holds_the_others(backend: Backend):
    pool = backend.all_gpus
    first = claim_gpus(backend.lock_folder, pool, 2)
    second = claim_gpus(backend.lock_folder, pool, 2)
    try:
        assert [g.index for g in first.taken] == [0, 1] and first.busy == {}
        assert first.describe() == "took GPU(s) 0, 1"
        assert [g.index for g in second.taken] == [2, 3]
        assert [g.index for g in second.order] == [2, 3, 0, 1]          # its own first, then the busy ones
        assert set(second.busy) == {pool[0].uuid, pool[1].uuid}
        assert all(holder.startswith(f"pid {os.getpid()}") for holder in second.busy.values())   # the kernel's word
        holder = second.busy[pool[0].uuid]      # one session holds both: named once
        assert second.describe() == f"took GPU(s) 2, 3, free ones first (claimed by another session: GPUs 0, 1 by {holder})"
    finally:
        first.release()
        second.release()


@pytest.mark.sim_gpus(FOUR)
def test_with_every_gpu_claimed_a_session_shares_and_says_its_tests_take_turns(backend: Backend):
    pool = backend.all_gpus
    everything = claim_gpus(backend.lock_folder, pool, 4)
    try:
        late = claim_gpus(backend.lock_folder, pool, 2)
        assert [g.index for g in late.taken] == [0, 1] and len(late.busy) == 4
        assert "shared: every selected GPU is claimed by another session (GPUs 0, 1, 2, 3 by pid" in late.describe()
        assert late.describe().endswith("tests wait for each GPU's lock in turn")
        late.release()
    finally:
        everything.release()


@pytest.mark.sim_gpus(FOUR)
def test_the_header_names_each_other_session_once_with_its_gpus(backend: Backend):
    pool = backend.all_gpus
    busy = {pool[0].uuid: "pid 11 (ana: pytest -n 2)", pool[1].uuid: "pid 22 (bo: pytest)", pool[3].uuid: "pid 11 (ana: pytest -n 2)"}
    claim = Claim([pool[2], pool[0], pool[1], pool[3]], [pool[2]], busy, [])
    assert claim.describe() == ("took GPU(s) 2, free ones first (claimed by another session: "
                                "GPUs 0, 3 by pid 11 (ana: pytest -n 2); GPU 1 by pid 22 (bo: pytest))")


@pytest.mark.sim_gpus(FOUR)
def test_a_claim_ends_with_its_session_and_asking_too_much_or_too_little_is_bounded(backend: Backend):
    pool = backend.all_gpus
    claim = claim_gpus(backend.lock_folder, pool, 2)
    claim.release()
    claim.release()                                                         # twice is harmless
    again = claim_gpus(backend.lock_folder, pool, 9)                        # more than the pool: all of it
    assert [g.index for g in again.taken] == [0, 1, 2, 3] and again.busy == {}
    again.release()
    one = claim_gpus(backend.lock_folder, pool, 0)                          # a single process: one GPU
    assert [g.index for g in one.taken] == [0]
    one.release()


@pytest.mark.sim_gpus(FOUR)
def test_a_worker_takes_its_controllers_order_and_unknown_gpus_go_last(backend: Backend):
    pool = backend.all_gpus
    order = in_order(pool, [pool[2].uuid, pool[3].uuid, pool[0].uuid])
    assert [g.index for g in order] == [2, 3, 0, 1]


SLOW_TESTS = """
import time
import pytest

@pytest.mark.parametrize("n", range(4))
def test_step(n):
    time.sleep(0.4)
"""


@pytest.mark.slow
def test_two_sessions_with_two_workers_each_spread_over_a_four_gpu_node(pytester: pytest.Pytester, sim_state: Path,
                                                                         monkeypatch: pytest.MonkeyPatch):
    pytest.importorskip("xdist")
    monkeypatch.setenv("GPUENERGY_SIM_GPUS", FOUR)
    pytester.makepyfile(test_steps=SLOW_TESTS)
    env = {**os.environ, "PYTEST_ADDOPTS": CHILD_PYTEST_ADDOPTS}

    def start(name: str) -> subprocess.Popen:
        return subprocess.Popen([sys.executable, "-m", "pytest", "-n", "2", "-p", "no:cacheprovider", "--gpu-caps=100%", "--energy-all",
                                 f"--energy-json={name}.json"], cwd=pytester.path, env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True)

    first = start("first")
    assert first.stdout is not None
    header = []
    deadline = time.monotonic() + 60
    while not any("this session took" in line for line in header) and time.monotonic() < deadline:
        header.append(first.stdout.readline())
    second = start("second")
    second_out, _ = second.communicate(timeout=120)
    first_out = "".join(header) + first.communicate(timeout=120)[0]
    assert first.returncode == 0, first_out
    assert second.returncode == 0, second_out
    assert "this session took GPU(s) 0, 1" in first_out
    assert "this session took GPU(s) 2, 3, free ones first (claimed by another session: GPUs 0, 1 by pid" in second_out

    def gpus_used(name: str) -> set[int]:
        report = json.loads((pytester.path / f"{name}.json").read_text())
        return {case["gpu_index"] for run in report["runs"] for case in run["cases"]}

    assert gpus_used("first") == {0, 1}
    assert gpus_used("second") == {2, 3}
