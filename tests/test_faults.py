"""Fault injection: whatever goes wrong, no GPU is left capped and no figure is silently wrong.

Each test here is a row of the README's table "What happens when things go wrong".
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from helpers import cli_in_process, gpu_info, spin_source


def limit_w() -> float:
    return gpu_info()[0]["current_limit_w"]


def no_journal(sim_state) -> bool:
    return not list((sim_state / "journal").glob("GPU-*.json"))


def _default_sigint() -> None:
    # A job started in the background by a non-interactive shell inherits SIGINT as ignored, and
    # Python then installs no KeyboardInterrupt handler: give the run the disposition a terminal gives.
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def start_pytest(pytester: pytest.Pytester, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen:
    """A pytest run in its own process, as a CI job or a terminal would start it (``env``: extra variables)."""
    return subprocess.Popen(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args],
        cwd=pytester.path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        preexec_fn=_default_sigint, env={**os.environ, **(env or {})},
    )


SLOW_CAPPED_TEST = textwrap.dedent(
    """
    import time, pathlib
    def test_slow(gpu_power_cap):
        pathlib.Path("capped").write_text(str(gpu_power_cap.enforced_w))
        time.sleep(30)
    """
)


def wait_for(path, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        if time.monotonic() > deadline:
            raise AssertionError(f"{path} never appeared")
        time.sleep(0.05)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_terminated_run_restores_the_limit_before_it_exits(pytester, sim_state, signum):
    pytester.makepyfile(test_slow=SLOW_CAPPED_TEST)
    proc = start_pytest(pytester, "--gpu-caps=min")
    wait_for(pytester.path / "capped")
    assert limit_w() == 200.0
    proc.send_signal(signum)
    output, _ = proc.communicate(timeout=30)
    assert proc.returncode == pytest.ExitCode.INTERRUPTED, output
    assert "KeyboardInterrupt" in output
    assert limit_w() == 700.0 and no_journal(sim_state)


def test_stopping_early_with_x_restores(pytester, sim_state):
    pytester.makepyfile(test_x="def test_a(gpu_power_cap):\n    assert False\n\ndef test_b(gpu_power_cap):\n    pass\n")
    result = pytester.runpytest("--gpu-caps=250,300", "-x")
    result.assert_outcomes(failed=1)
    assert limit_w() == 700.0 and no_journal(sim_state)


@pytest.mark.parametrize("method", ["signal", "thread"])
def test_a_timeout_plugin_killing_the_test(pytester, sim_state, method):
    pytester.makepyfile(test_t="import time\ndef test_hangs(gpu_power_cap):\n    time.sleep(30)\n")
    result = pytester.runpytest_subprocess("--gpu-caps=min", "--timeout=0.5", f"--timeout-method={method}")
    assert "Timeout" in result.stdout.str() + result.stderr.str()
    if method == "signal":      # pytest-timeout fails the test; teardown runs
        assert limit_w() == 700.0 and no_journal(sim_state)
    else:                       # the thread method exits the process on the spot: the journal repairs it
        assert limit_w() == 200.0
        restored = cli_in_process("restore", "--gpu-backend=sim")
        assert "restored to 700 W" in restored.stdout
        assert limit_w() == 700.0


def test_a_gpu_lost_mid_test_errors_that_test_and_the_others_go_on(pytester, monkeypatch):
    monkeypatch.setenv("GPUENERGY_SIM_GPUS", "H100,H100")
    # GPU 1 falls off the bus after a few calls: the capped test on it errors clearly.
    monkeypatch.setenv("GPUENERGY_SIM_FAULTS", "lost@1=12")
    pytester.makepyfile(test_l=spin_source() + textwrap.dedent(
        """
        import pytest

        @pytest.mark.energy(gpus=2)     # both GPUs: the test on GPU 0 and 1 loses GPU 1
        def test_on_lost_gpu(gpu_power_cap, energy_meter):
            with energy_meter:
                spin(0.3)

        def test_without_gpu():
            assert True
        """
    ))
    result = pytester.runpytest("--gpu-caps=300")
    outcomes = result.parseoutcomes()
    assert outcomes.get("passed") == 1
    assert outcomes.get("failed", 0) + outcomes.get("errors", 0) >= 1
    text = result.stdout.str()
    assert "GPU 1" in text and "is lost" in text
    assert "Traceback" not in text.split("short test summary")[-1]
    monkeypatch.delenv("GPUENERGY_SIM_FAULTS")
    limits = [row["current_limit_w"] for row in gpu_info()]
    assert limits[0] == 700.0                              # the healthy GPU came back
    if limits[1] != 700.0:                                 # the lost one could not: it is named
        assert "could not be set back" in text and "gpuenergy restore" in text


def test_a_read_back_error_while_capping_is_retried(pytester, monkeypatch):
    # The limit reads around the first set fail once each: transient, so retried.
    monkeypatch.setenv("GPUENERGY_SIM_FAULTS", "read_error=2-2")
    pytester.makepyfile(test_r="def test_a(gpu_power_cap):\n    assert gpu_power_cap.enforced_w == 300.0\n")
    pytester.runpytest("--gpu-caps=300").assert_outcomes(passed=1)
    monkeypatch.delenv("GPUENERGY_SIM_FAULTS")
    assert limit_w() == 700.0


CONCURRENT_TESTS = textwrap.dedent(
    """
    import json, os, time, pytest

    @pytest.mark.parametrize("n", range(4))
    def test_capped(gpu_power_cap, n):
        start = time.time()
        time.sleep(0.05)
        assert gpu_power_cap.enforced_w == gpu_power_cap.requested_w   # nobody changed it meanwhile
        with open("intervals.jsonl", "a") as log:
            log.write(json.dumps([start, time.time(), os.getpid(), gpu_power_cap.label]) + "\\n")
    """
)


@pytest.mark.slow
def test_xdist_workers_never_cap_one_gpu_at_the_same_time(pytester, sim_state):
    pytest.importorskip("xdist")
    pytester.makepyfile(test_c=CONCURRENT_TESTS)
    result = pytester.runpytest_subprocess("-n", "2", "--gpu-caps=250,400")
    result.assert_outcomes(passed=8)
    import json

    intervals = sorted(json.loads(line) for line in (pytester.path / "intervals.jsonl").read_text().splitlines())
    assert len({pid for _, _, pid, _ in intervals}) == 2          # both workers ran tests
    for (_, end, _, _), (start, _, _, _) in zip(intervals, intervals[1:]):
        assert start >= end - 0.01, "two capped tests overlapped on one GPU"
    assert limit_w() == 700.0 and no_journal(sim_state)


def test_two_sessions_share_a_gpu_without_clashing(pytester, sim_state):
    pytester.makepyfile(test_c=CONCURRENT_TESTS)
    first = start_pytest(pytester, "--gpu-caps=250")
    second = start_pytest(pytester, "--gpu-caps=400")
    for proc in (first, second):
        output, _ = proc.communicate(timeout=120)
        assert proc.returncode == 0, output
    import json

    intervals = sorted(json.loads(line) for line in (pytester.path / "intervals.jsonl").read_text().splitlines())
    assert len(intervals) == 8
    for (_, end, _, _), (start, _, _, _) in zip(intervals, intervals[1:]):
        assert start >= end - 0.01
    assert limit_w() == 700.0 and no_journal(sim_state)


def test_a_gpu_held_too_long_by_another_session_is_a_clear_error(pytester):
    pytester.makepyfile(test_slow=SLOW_CAPPED_TEST)
    holder = start_pytest(pytester, "--gpu-caps=min")
    wait_for(pytester.path / "capped")
    try:
        pytester.makepyfile(test_other="def test_o(gpu_power_cap):\n    pass\n")
        result = pytester.runpytest("test_other.py", "--energy-lock-timeout=0.5")
        result.assert_outcomes(errors=1)
        result.stdout.fnmatch_lines(["*waited 0.5 s for the GPU lock*held by pid*another test session is using that GPU*"])
    finally:
        holder.send_signal(signal.SIGTERM)
        holder.communicate(timeout=30)
    assert limit_w() == 700.0


def test_another_process_on_the_gpu_is_named(pytester):
    ready = pytester.path / "hog-ready"
    hog = subprocess.Popen([sys.executable, "-c", textwrap.dedent(
        f"""
        import pathlib, time
        from pytest_gpuenergy.sim.nvml import SimulatedNvml
        n = SimulatedNvml(); n.nvmlInit()
        pathlib.Path({str(ready)!r}).write_text("")
        end = time.time() + 20
        while time.time() < end:
            pass
        """
    )])
    try:
        wait_for(ready)
        pytester.makepyfile(test_s=textwrap.dedent(
            """
            import time
            def test_shared(energy_meter):
                with energy_meter:
                    time.sleep(0.3)
                assert any("also used by" in note for note in energy_meter.result.notes)
            """
        ))
        pytester.runpytest().assert_outcomes(passed=1)
    finally:
        hog.kill()
        hog.wait()


def test_a_process_that_came_during_a_region_in_real_time_is_named_by_the_ends_list(pytester, monkeypatch):
    """In real time a region's end asks for the GPU's processes on a thread of its own: a process that
    began using the GPU after the region's start (so only the end's list can have it) is still named."""
    monkeypatch.setenv("GPUENERGY_SIM_CLOCK", "wall")
    pytester.makepyfile(test_s=textwrap.dedent(
        """
        import pathlib, subprocess, sys, time

        HOG = (
            "import pathlib, sys, time\\n"
            "from pytest_gpuenergy.sim.nvml import SimulatedNvml\\n"
            "n = SimulatedNvml(); n.nvmlInit()\\n"
            "pathlib.Path(sys.argv[1]).write_text('')\\n"
            "time.sleep(30)\\n"
        )

        def test_shared(energy_meter, tmp_path):
            ready = tmp_path / "ready"
            with energy_meter:
                hog = subprocess.Popen([sys.executable, "-c", HOG, str(ready)])
                end = time.time() + 30
                while not ready.exists() and time.time() < end:
                    time.sleep(0.01)
            try:
                notes = energy_meter.result.notes
            finally:
                hog.kill()
                hog.wait()
            assert ready.exists()
            assert any(f"also used by process {hog.pid} " in note for note in notes), notes
        """
    ))
    pytester.runpytest_subprocess().assert_outcomes(passed=1)


def test_a_gpu_whose_reads_keep_failing_is_a_clear_error_not_a_crash(pytester, monkeypatch):
    monkeypatch.setenv("GPUENERGY_SIM_FAULTS", "read_error")
    pytester.makepyfile(test_r="def test_a(gpu_power_cap):\n    pass\n")
    capped = pytester.runpytest("--gpu-caps=300")
    assert capped.ret == pytest.ExitCode.USAGE_ERROR
    assert "reading the GPUs through the sim backend failed: NVML: Unknown Error" in capped.stderr.str()
    assert "INTERNALERROR" not in capped.stderr.str()
    uncapped = pytester.runpytest()
    uncapped.assert_outcomes(errors=1)
    uncapped.stdout.fnmatch_lines(["*gpuenergy: unavailable: *backend failed: NVML: Unknown Error*"])


def test_a_transient_error_while_setting_a_cap_is_retried(pytester, monkeypatch):
    monkeypatch.setenv("GPUENERGY_SIM_FAULTS", "set_error=1-2")
    pytester.makepyfile(test_r="def test_a(gpu_power_cap):\n    assert gpu_power_cap.enforced_w == 300.0\n")
    pytester.runpytest("--gpu-caps=300").assert_outcomes(passed=1)
    monkeypatch.delenv("GPUENERGY_SIM_FAULTS")
    assert limit_w() == 700.0


MEASURED = spin_source() + textwrap.dedent(
    """
    def test_m(energy_meter):
        with energy_meter:
            spin(0.15)
    """
)


def test_concurrent_saves_keep_both_runs(pytester):
    from pytest_gpuenergy.runs.store import RunStore

    pytester.makepyfile(test_m=MEASURED)
    runs = [start_pytest(pytester, "--energy-save") for _ in range(2)]
    for proc in runs:
        output, _ = proc.communicate(timeout=120)
        assert proc.returncode == 0, output
    assert len(RunStore(pytester.path / ".energy").runs()) == 2


def test_a_save_killed_halfway_leaves_no_partial_document(pytester):
    from pytest_gpuenergy.runs.store import RunStore

    pytester.makepyfile(test_m=MEASURED)
    pytester.runpytest("--energy-save").assert_outcomes(passed=1)
    (old,) = RunStore(pytester.path / ".energy").runs()
    before = old.path.read_bytes()
    # A conftest that makes the document's write hang once its bytes are in the temporary file.
    pytester.makeconftest(textwrap.dedent(
        """
        import os, pathlib, time
        real_fsync = os.fsync
        def slow_fsync(fd):
            if pathlib.Path(os.readlink(f"/proc/self/fd/{fd}")).name.endswith(".tmp"):
                pathlib.Path("saving").write_text("now")
                time.sleep(60)
            real_fsync(fd)
        def pytest_sessionfinish(session):
            os.fsync = slow_fsync
        """
    ))
    proc = start_pytest(pytester, "--energy-save")
    wait_for(pytester.path / "saving", timeout_s=60)
    proc.kill()
    proc.wait(timeout=10)
    store = RunStore(pytester.path / ".energy")
    assert [doc.run_id for doc in store.runs()] == [old.run_id]   # the half-written run is not there
    assert old.path.read_bytes() == before                          # and the old one is intact


# -- a cap left by a process that died is never taken for the GPU's own limit ----------------------

DEAD_CAPPER = textwrap.dedent(
    """
    import os, pathlib, signal, time, pytest

    def _wait_for(name):
        deadline = time.monotonic() + 60
        while not pathlib.Path(name).exists():
            assert time.monotonic() < deadline, f"{name} never appeared"
            time.sleep(0.05)

    BY_TIMEOUT = os.environ.get("DIE_BY") == "timeout"

    @pytest.mark.gpu_caps(300)
    @pytest.mark.timeout(1 if BY_TIMEOUT else 0, method="thread")   # the thread method ends the process
    def test_dies_capped(gpu_power_cap):
        pathlib.Path("capped").write_text(str(os.getpid()))
        if BY_TIMEOUT:
            time.sleep(30)
        os.kill(os.getpid(), signal.SIGKILL)

    @pytest.fixture
    def after_the_death():
        pathlib.Path("waiting").write_text("")
        _wait_for("capped")           # the GPU lock is then held by the capper until it dies

    @pytest.mark.gpu_caps(int(os.environ.get("NEXT_CAP", "250")))
    def test_next_on_the_gpu(after_the_death, gpu_power_cap):
        pathlib.Path("previous").write_text(f"{gpu_power_cap.previous_w:g}")
        assert gpu_power_cap.enforced_w == gpu_power_cap.requested_w
    """
)


def _ends_at_the_original(pytester, sim_state) -> None:
    assert (pytester.path / "previous").read_text() == "700"      # the dead capper's 300 W is not "previous"
    assert limit_w() == 700.0 and no_journal(sim_state)
    assert "nothing to restore" in cli_in_process("restore", "--gpu-backend=sim").stdout


# Each way of dying, each next cap (another, and the dead capper's own: the case where a wrong
# "previous" limit could pass unseen); the same cap after both deaths.
@pytest.mark.slow
@pytest.mark.parametrize(("die_by", "next_cap"), [("sigkill", "250"), ("sigkill", "300"), ("timeout", "300")])
def test_an_xdist_worker_that_dies_capped_leaves_the_next_test_the_original_limit(pytester, sim_state, die_by, next_cap):
    pytest.importorskip("xdist")
    pytester.makepyfile(test_d=DEAD_CAPPER)
    proc = start_pytest(pytester, "-n", "2", env={"DIE_BY": die_by, "NEXT_CAP": next_cap})
    output, _ = proc.communicate(timeout=120)
    assert "crashed while running" in output and "test_dies_capped" in output, output
    assert "1 passed" in output, output
    _ends_at_the_original(pytester, sim_state)


def test_a_second_session_that_dies_capped_leaves_the_first_the_original_limit(pytester, sim_state):
    pytester.makepyfile(test_d=DEAD_CAPPER)
    survivor = start_pytest(pytester, "-k", "test_next_on_the_gpu")
    wait_for(pytester.path / "waiting")
    killed = start_pytest(pytester, "-k", "test_dies_capped")
    killed.communicate(timeout=60)
    assert killed.returncode == -signal.SIGKILL
    output, _ = survivor.communicate(timeout=60)
    assert survivor.returncode == 0, output
    _ends_at_the_original(pytester, sim_state)


@pytest.mark.slow
def test_an_xdist_worker_killed_capped_with_no_later_test_is_repaired_at_the_end(pytester, sim_state):
    pytest.importorskip("xdist")
    pytester.makepyfile(test_d=DEAD_CAPPER)
    proc = start_pytest(pytester, "-n", "2", "-k", "test_dies_capped")
    output, _ = proc.communicate(timeout=120)
    assert "crashed while running" in output, output
    assert "repaired at the end of the session: GPU 0" in output and "restored to 700 W" in output, output
    assert limit_w() == 700.0 and no_journal(sim_state)


PAUSING_REPAIR = textwrap.dedent(
    """
    import os, pathlib, time
    from pytest_gpuenergy.gpu import journal

    if os.environ.get("PAUSE_REPAIR"):
        listed = journal.Journal.entries

        def entries_then_pause(self):
            found = listed(self)
            if found and not pathlib.Path("listed").exists():
                pathlib.Path("listed").write_text("")
                deadline = time.monotonic() + 60
                while not pathlib.Path("go").exists() and time.monotonic() < deadline:
                    time.sleep(0.05)
            return found

        journal.Journal.entries = entries_then_pause
    """
)


@pytest.mark.slow
def test_a_session_starting_late_never_deletes_a_running_sessions_journal_entry(pytester, sim_state):
    pytester.makeconftest(PAUSING_REPAIR)
    pytester.makepyfile(test_d=DEAD_CAPPER, test_slow=SLOW_CAPPED_TEST, test_ok="def test_ok():\n    pass\n")
    pytester.runpytest_subprocess("-k", "test_dies_capped")          # a dead run's entry: 300 W, original 700 W
    assert limit_w() == 300.0
    (pytester.path / "capped").unlink()
    late = start_pytest(pytester, "test_ok.py", env={"PAUSE_REPAIR": "1"})
    wait_for(pytester.path / "listed")                                # it has read the dead run's entry
    running = start_pytest(pytester, "test_slow.py", "--gpu-caps=250")  # repairs it, then caps at 250 W
    wait_for(pytester.path / "capped")
    (pytester.path / "go").write_text("")
    output, _ = late.communicate(timeout=60)
    assert late.returncode == 0, output
    entries = list((sim_state / "journal").glob("GPU-*.json"))
    assert len(entries) == 1 and f'"pid": {running.pid}' in entries[0].read_text()   # the running session's entry
    running.kill()
    running.wait(timeout=10)
    assert limit_w() == 250.0
    assert "restored to 700 W" in cli_in_process("restore", "--gpu-backend=sim").stdout
    assert limit_w() == 700.0


SIGNAL_DURING_RESTORE = textwrap.dedent(
    """
    import os, signal, pynvml
    from pytest_gpuenergy.sim.nvml import SimulatedNvml

    real_set = SimulatedNvml.nvmlDeviceSetPowerManagementLimit
    calls = []

    def set_limit(self, handle, limit):
        calls.append(limit)
        if len(calls) in (2, 3):      # the restore: the signal comes again, and the driver is busy
            os.kill(os.getpid(), signal.SIGTERM)
            raise pynvml.NVMLError(pynvml.NVML_ERROR_UNKNOWN)
        return real_set(self, handle, limit)

    SimulatedNvml.nvmlDeviceSetPowerManagementLimit = set_limit
    """
)


@pytest.mark.parametrize("during", ["teardown-after-sigterm", "plain-teardown"])
def test_a_sigterm_during_a_retried_restore_lets_the_restore_finish(pytester, sim_state, during):
    """The restore is retried (the driver is busy) and SIGTERM comes in the middle of it: either a second
    one (the first stopped the test) or a first one (the test passed). The limit comes back, then it stops."""
    pytester.makeconftest(SIGNAL_DURING_RESTORE)
    pytester.makepyfile(test_t=textwrap.dedent(
        """
        import os, signal, time
        def test_capped(gpu_power_cap):
            if os.environ["DURING"] == "teardown-after-sigterm":
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(30)

        def test_never_runs():
            raise AssertionError("the session should have stopped")
        """
    ))
    proc = start_pytest(pytester, "--gpu-caps=300", env={"DURING": during})
    output, _ = proc.communicate(timeout=60)
    assert proc.returncode == pytest.ExitCode.INTERRUPTED, output
    assert "SIGTERM received while restoring the power limit of GPU 0" in output, output
    assert "Traceback" not in output and "should have stopped" not in output, output
    assert limit_w() == 700.0 and no_journal(sim_state)


# -- the same faults on simulated AMD GPUs (AMD SMI's calls, micro-watts and errors under the device) --

KILLED_CAPPED = textwrap.dedent(
    """
    import os, signal, pytest

    @pytest.mark.energy(gpus="all")
    def test_killed(gpu_power_cap):
        os.kill(os.getpid(), signal.SIGKILL)
    """
)


@pytest.mark.slow
@pytest.mark.sim_gpus("MI300X")
def test_a_terminated_run_restores_an_amd_gpus_limit_before_it_exits(pytester, sim_state):
    pytester.makepyfile(test_slow=SLOW_CAPPED_TEST)
    proc = start_pytest(pytester, "--gpu-caps=min")
    wait_for(pytester.path / "capped")
    assert gpu_info()[0]["name"].startswith("AMD Instinct MI300X") and limit_w() == 200.0
    proc.send_signal(signal.SIGTERM)
    output, _ = proc.communicate(timeout=30)
    assert proc.returncode == pytest.ExitCode.INTERRUPTED, output
    assert limit_w() == 750.0 and no_journal(sim_state)


@pytest.mark.slow
@pytest.mark.sim_gpus("MI300X")
def test_a_killed_run_on_an_amd_gpu_is_repaired_by_the_next_session(pytester, sim_state):
    pytester.makepyfile(test_k=KILLED_CAPPED)
    killed = start_pytest(pytester, "--gpu-caps=60%")
    killed.communicate(timeout=60)
    assert killed.returncode == -signal.SIGKILL and limit_w() == 450.0     # 60 % of 750 W, left as a real GPU would be
    [entry] = [json.loads(path.read_text()) for path in (sim_state / "journal").glob("GPU-*.json")]
    assert (entry["knob"], entry["vendor"], entry["saved"], entry["applied"]) == ("power-limit", "amd", 750_000, 450_000)
    pytester.makepyfile(test_ok="def test_ok():\n    pass\n")
    result = pytester.runpytest("test_ok.py")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*repaired: GPU 0 (AMD Instinct MI300X*capped at 450 W*previous limit 750 W: restored to 750 W*"])
    assert limit_w() == 750.0 and no_journal(sim_state)


@pytest.mark.sim_gpus("H100,MI300X")
def test_gpuenergy_restore_puts_back_both_vendors_after_a_kill(pytester, sim_state):
    pytester.makepyfile(test_k=KILLED_CAPPED)
    start_pytest(pytester, "--gpu-caps=min", "--gpu-devices=all").communicate(timeout=60)
    assert [row["current_limit_w"] for row in gpu_info()] == [200.0, 200.0]
    restored = cli_in_process("restore", "--gpu-backend=sim", check=False)
    assert restored.stdout.count("restored: ") == 2, restored.stdout
    assert "restored to 700 W" in restored.stdout and "restored to 750 W" in restored.stdout
    assert [row["current_limit_w"] for row in gpu_info()] == [700.0, 750.0] and no_journal(sim_state)


@pytest.mark.sim_gpus("MI300X")
def test_a_clock_cap_on_an_amd_gpu_is_skipped_in_one_line(pytester, sim_state):
    pytester.makepyfile(test_c="def test_c(gpu_clock_cap):\n    pass\n")
    result = pytester.runpytest("--gpu-clocks=50%", "-rs")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["SKIPPED * SM clock caps are not supported on GPU 0 (AMD Instinct MI300X (simulated)): "
                                 "pytest-gpuenergy locks SM clocks of NVIDIA GPUs only; drop --gpu-clocks for it"])
    assert not list((sim_state / "journal" / "clocks").glob("GPU-*.json"))
