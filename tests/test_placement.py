"""Many GPUs: one GPU per test, xdist workers on distinct GPUs, energy(gpus=N), waiting that a signal stops."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
import time
import types

import pytest

from pytest_gpuenergy.errors import GpuSelectionError
from pytest_gpuenergy.gpu.device import open_backend
from pytest_gpuenergy.gpu.placement import Placement, check_wanted, pin_current_device, pin_worker

from helpers import gpu_info

# -- placement, in plain Python ---------------------------------------------------------------------


@pytest.fixture
def four(sim_state, monkeypatch):
    monkeypatch.setenv("GPUENERGY_SIM_GPUS", "H100,H100,H100,H100")
    backend = open_backend("sim")
    yield backend
    backend.close()


def indices(gpus) -> list[int]:
    return [g.index for g in gpus]


def test_a_process_takes_its_slots_gpu_and_the_next_ones_round_robin(four):
    pool = four.select(None)
    assert indices(Placement.from_environment({}).gpus_for(pool)) == [0]          # one process: GPU 0
    worker = Placement.from_environment({}, worker_id="gw5")                     # 6th worker on 4 GPUs
    assert worker.kind == "xdist" and not worker.reports
    assert indices(worker.gpus_for(pool)) == [1]
    assert indices(worker.gpus_for(pool, 3)) == [1, 2, 3]
    assert indices(worker.gpus_for(pool, "all")) == [0, 1, 2, 3]
    with pytest.raises(GpuSelectionError, match="asks for 5 GPUs but 4 are selected"):
        worker.gpus_for(pool, 5)
    selected = four.select("2,3")                                                # --gpu-devices selects the pool
    assert indices(worker.gpus_for(selected)) == [3]


def test_torchrun_ranks_take_their_local_rank_and_only_rank_0_reports(four):
    pool = four.select(None)
    env = {"RANK": "5", "LOCAL_RANK": "1", "WORLD_SIZE": "8", "LOCAL_WORLD_SIZE": "4"}
    rank = Placement.from_environment(env)
    assert (rank.kind, rank.rank, rank.local_rank, rank.reports) == ("torchrun", 5, 1, False)
    assert indices(rank.gpus_for(pool)) == [1]
    assert Placement.from_environment({"RANK": "0", "LOCAL_RANK": "0"}).reports
    with pytest.raises(GpuSelectionError, match="each rank measures its own GPU"):
        rank.gpus_for(pool, 2)
    with pytest.raises(GpuSelectionError, match=r"torchrun starts 4 processes per node but only 2 GPU\(s\)"):
        rank.check(four.select("0,1"))
    with pytest.raises(GpuSelectionError, match="LOCAL_RANK='x' is not a whole number"):
        Placement.from_environment({"RANK": "0", "LOCAL_RANK": "x"})


def test_an_xdist_worker_sees_its_gpu_first_and_torch_follows_the_test(four, monkeypatch):
    pool = four.select(None)
    env: dict[str, str] = {}
    pinned = pin_worker(pool, Placement.from_environment({}, worker_id="gw2"), env)
    value = ",".join(g.uuid for g in pool[2:] + pool[:2])
    assert pinned == env == {"CUDA_VISIBLE_DEVICES": value}
    assert pin_worker(pool, Placement.from_environment({}), env={}) is None      # one process: left alone
    chosen: list[int] = []
    cuda = types.SimpleNamespace(is_available=lambda: True, is_initialized=lambda: True,
                                 device_count=lambda: 4, set_device=chosen.append)
    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(cuda=cuda))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", value)
    assert pin_current_device([pool[3]], four.all_gpus) == 1 and chosen == [1]   # GPU 3 is cuda:1 there
    cuda.is_initialized = lambda: False                                         # CUDA not started: not started by us
    assert pin_current_device([pool[3]], four.all_gpus) is None and chosen == [1]


@pytest.mark.parametrize("value", [0, -1, 2.0, "two", True, None, 10**400])
def test_a_bad_gpus_request_is_refused(value):
    with pytest.raises(ValueError, match="energy\\(gpus=\\) must be a whole number of GPUs >= 1 or \"all\""):
        check_wanted(value)


# -- the marker, through pytest ------------------------------------------------------------------------

MANY = textwrap.dedent(
    """
    import pytest

    def test_default(energy_meter):
        with energy_meter:
            pass
        assert [g.gpu_index for g in energy_meter.result.per_gpu] == [0]

    @pytest.mark.energy(gpus=2)
    def test_two(gpu_power_cap, energy_meter):
        assert [g.gpu_index for g in gpu_power_cap.gpus] == [0, 1]
        with energy_meter:
            pass
        result = energy_meter.result
        assert [g.gpu_index for g in result.per_gpu] == [0, 1]
        assert result.ets_j == pytest.approx(sum(g.ets_j for g in result.per_gpu))

    @pytest.mark.energy(gpus="all")
    def test_all(gpu_power_cap):
        assert [g.gpu_index for g in gpu_power_cap.gpus] == [0, 1, 2]

    @pytest.mark.energy(gpus=4)
    def test_four(energy_meter):
        pass
    """
)


def test_a_test_holds_one_gpu_unless_it_asks_for_more(pytester, monkeypatch):
    monkeypatch.setenv("GPUENERGY_SIM_GPUS", "H100,H100,H100")
    pytester.makepyfile(test_many=MANY)
    result = pytester.runpytest("-p", "no:cacheprovider", "--gpu-caps=80%", "-rs")
    result.assert_outcomes(passed=3, skipped=1)
    result.stdout.fnmatch_lines(["*needs 4 GPUs; 3 selected (--gpu-devices, CUDA_VISIBLE_DEVICES)*"])
    assert [row["current_limit_w"] for row in gpu_info()] == [700.0] * 3
    pytester.makepyfile(test_bad="import pytest\n@pytest.mark.energy(gpus=0)\ndef test_b(energy_meter):\n    pass\n")
    result = pytester.runpytest("-p", "no:cacheprovider", "test_bad.py")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*test_bad.py::test_b: energy(gpus=) must be a whole number of GPUs >= 1 or \"all\", got 0*"])


# -- pytest-xdist on a 4-GPU machine: the issue's own check --------------------------------------------

EIGHT = textwrap.dedent(
    """
    import json, os, time, pytest

    FIRST = []

    @pytest.mark.energy(work={"flops_tf32": 2e13, "bytes": 1e11, "kernels": 500})
    @pytest.mark.parametrize("n", range(8))
    def test_single(gpu_power_cap, energy_meter, n):
        mine = gpu_power_cap.gpus[0].gpu_index
        active = os.path.join("active", f"{mine}-{os.getpid()}-{n}")
        start = time.time()
        open(active, "w").close()
        side_by_side = False
        if not FIRST:           # a worker's first test waits (up to 30 s) to see a test on another GPU running
            FIRST.append(n)
            deadline = time.time() + 30
            while time.time() < deadline and not side_by_side:
                side_by_side = any(not name.startswith(f"{mine}-") for name in os.listdir("active"))
                time.sleep(0.02)
        energy_meter.measure(lambda: None)
        os.remove(active)
        with open("intervals.jsonl", "a") as log:
            log.write(json.dumps({"n": n, "gpu": mine, "start": start, "end": time.time(), "side_by_side": side_by_side,
                                  "gpus": [g.gpu_index for g in energy_meter.result.per_gpu],
                                  "cuda": os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")[0],
                                  "uuid": gpu_power_cap.gpus[0].gpu_uuid}) + "\\n")
    """
)


@pytest.mark.slow
def test_four_xdist_workers_on_four_gpus_run_side_by_side_one_gpu_each(pytester, monkeypatch):
    pytest.importorskip("xdist")
    monkeypatch.setenv("GPUENERGY_SIM_GPUS", "H100,H100,H100,H100")
    pytester.makepyfile(test_eight=EIGHT)
    (pytester.path / "active").mkdir()
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-n", "4", "--gpu-caps=80%", "--energy-save",
                                           timeout=240)
    result.assert_outcomes(passed=8)
    runs = [json.loads(line) for line in (pytester.path / "intervals.jsonl").read_text().splitlines()]
    assert all(run["gpus"] == [run["gpu"]] for run in runs)                 # every result: one GPU, the test's
    assert all(run["cuda"] == "" for run in runs)        # the simulator drives no CUDA: nothing is hidden
    assert len({run["gpu"] for run in runs}) == 4                           # the four workers on four GPUs
    assert any(run["side_by_side"] for run in runs)                         # tests on different GPUs overlapped
    for gpu in range(4):                                                    # tests on one GPU never did
        spans = sorted((run["start"], run["end"]) for run in runs if run["gpu"] == gpu)
        assert all(end <= next_start for (_, end), (next_start, _) in zip(spans, spans[1:]))
    (saved,) = (pytester.path / ".energy").rglob("*.json")
    cases = json.loads(saved.read_text())["cases"]
    assert sorted(c["case_id"] for c in cases) == sorted(f"test_eight.py::test_single[{n}-80%]" for n in range(8))
    assert [row["current_limit_w"] for row in gpu_info()] == [700.0] * 4


# -- a signal stops a test that waits for a GPU ---------------------------------------------------------

HOLDER = textwrap.dedent(
    """
    import fcntl, os, sys, time
    fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o644)
    fcntl.flock(fd, fcntl.LOCK_EX)
    os.write(fd, b"pid %d\\n" % os.getpid())
    print("held", flush=True)
    time.sleep(120)
    """
)


def test_a_test_waiting_for_a_gpu_lock_stops_at_once_on_sigterm(pytester, sim_state):
    uuid = gpu_info()[0]["uuid"]
    locks = sim_state / "locks"
    locks.mkdir(parents=True, exist_ok=True)
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(locks / f"{uuid}.lock")], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        pytester.makepyfile(test_w="def test_wait(gpu_power_cap):\n    pass\n")
        # The wait is said after 2 s; this session says it after 0.2 s (the message is what is tested).
        pytester.makeconftest("import pytest_gpuenergy.gpu.locks as locks\nlocks._SAY_AFTER_S = 0.2\n")
        waiting = subprocess.Popen(
            [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:hypothesispytest", "test_w.py"],
            cwd=pytester.path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )
        seen = []
        assert waiting.stdout is not None
        for line in waiting.stdout:             # the wait is said on the terminal, with how to stop it
            seen.append(line)
            if "waiting for the GPU lock" in line:
                break
        assert f"held by pid {holder.pid}" in seen[-1] and "SIGTERM stops at once" in seen[-1]
        sent = time.monotonic()
        waiting.send_signal(signal.SIGTERM)
        rest = waiting.communicate(timeout=30)[0]
        assert time.monotonic() - sent < 10      # not the hour of --energy-lock-timeout
        # Waiting, the test holds the GPU at no changed setting: SIGTERM ends it as it would without the
        # plugin (the handler that restores limits is there only while a setting is held).
        assert waiting.returncode == -signal.SIGTERM, rest
        assert not list((sim_state / "journal").glob("GPU-*.json"))
    finally:
        holder.kill()
        holder.wait()


# -- the meter under a process group, with a stand-in group --------------------------------------------

class TwinRanks:
    """Two ranks whose other rank measures what this one does but whose timings ask for twice as much:
    every decision must follow the larger, or the ranks would call a DDP step unequally often."""

    rank, world_size, host = 0, 2, "node-a"

    def __init__(self) -> None:
        self.barriers = 0
        self.asked: list[float] = []

    def barrier(self) -> None:
        self.barriers += 1

    def gather(self, value):
        return [value, value]

    def agree_max(self, value):
        self.asked.append(value)
        return 2 * value

    def agree_any(self, flags):
        return list(flags)

    def combine(self, parts):
        from dataclasses import replace
        return tuple(replace(part, host=f"node-{'ab'[rank]}", rank=rank) for rank in (0, 1) for part in parts)


def test_the_meter_agrees_on_calls_and_gives_every_rank_the_total():
    from pytest_gpuenergy.meter import EnergyMeter
    from pytest_gpuenergy.sim.roofline import GpuWork

    backend = open_backend("sim")
    try:
        group = TwinRanks()
        meter = EnergyMeter(backend, backend.select(None)[:1], rank_group=lambda: group,
                            work=GpuWork(flops_tf32=1e12, bytes=1e9, kernels=100))
        calls: list[int] = []
        result = meter.measure(lambda: calls.append(1), repeat=2)
        first_ask = int(group.asked[0])                       # this rank's own count after the warm-up
        assert [rep.calls for rep in result.per_gpu[0].repetitions] == [2 * first_ask] * 2
        assert len(calls) == 1 + 2 * 2 * first_ask            # the warm-up call and the agreed calls, not its own
        assert group.barriers == 2                             # every region starts together
        assert [(g.host, g.rank) for g in result.per_gpu] == [("node-a", 0), ("node-b", 1)]
        assert result.ets_j == pytest.approx(2 * result.per_gpu[0].ets_j)
        with meter:
            pass
        assert group.barriers == 4                             # a with block: start and end
    finally:
        backend.close()


PINNED = textwrap.dedent(
    """
    import os, pytest

    @pytest.mark.parametrize("n", range(2))
    def test_pinned(gpu_power_cap, n):
        first = os.environ["CUDA_VISIBLE_DEVICES"].split(",")
        assert first[0] == gpu_power_cap.gpus[0].gpu_uuid and len(first) == 2
    """
)


def test_on_real_gpus_an_xdist_workers_cuda_sees_its_own_gpu_first(pytester, monkeypatch):
    """The NVML code path (the simulator standing in for the library): CUDA_VISIBLE_DEVICES follows the worker."""
    pytest.importorskip("xdist")
    from test_plugin_core import FAKE_DRIVER

    monkeypatch.setenv("GPUENERGY_SIM_GPUS", "H100,H100")
    pytester.makepyfile(fake_driver=FAKE_DRIVER, test_pinned=PINNED)
    monkeypatch.setenv("MUTATIONS_LOG", str(pytester.path / "mutations.log"))
    monkeypatch.setenv("XDG_STATE_HOME", str(pytester.path / "state"))
    monkeypatch.setenv("PYTHONPATH", str(pytester.path))
    result = pytester.runpytest_subprocess("-p", "fake_driver", "--gpu-backend=nvml", "-n", "2", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=2)
    assert not (pytester.path / "mutations.log").exists()


@pytest.mark.parametrize(("path", "rank", "expected"), [
    ("report.xml", 1, "report.rank1.xml"), ("out/junit.xml", 7, "out/junit.rank7.xml"), ("report", 2, "report.rank2"),
    ("build.v2/report", 1, "build.v2/report.rank1"),
])
def test_under_torchrun_a_rank_other_than_0_writes_its_junit_file_beside_rank_0s(path, rank, expected):
    from pytest_gpuenergy.plugin.hooks import rank_path

    assert rank_path(path, rank) == expected
