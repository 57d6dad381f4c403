"""A shared GPU node: no other user can make root forget, skip or misapply a GPU's limit, or hang it.

Each test is one hole of issue 32, tried the way a second, unprivileged user on the same machine
would, against the simulated GPU (which shares the journal and lock code with NVML). Where the test
needs another user's file or process it runs as ``nobody`` (root can); elsewhere the hole needs no
second user (a folder every user can write is anyone's), and the test runs as whoever runs it.
"""

from __future__ import annotations

import codecs
import contextlib
import fcntl
import io
import json
import os
import queue
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from pytest_gpuenergy.cli.main import main as gpuenergy_main
from pytest_gpuenergy.errors import GpuBusyError, UnsafeStateFile
from pytest_gpuenergy.fileio import atomic_write_json, atomic_write_text, sim_state_dir, state_folder, user_state_dir
from pytest_gpuenergy.gpu.capping import POWER_LIMIT
from pytest_gpuenergy.gpu.device import open_backend
from pytest_gpuenergy.gpu.journal import JournalEntry
from pytest_gpuenergy.gpu.locks import holding, lock_paths
from pytest_gpuenergy.sim.state import sim_uuid

NOBODY = 65534
DEAD_PID = 2**31 - 2            # no process has it: the writer of a journal entry is gone
UUID = sim_uuid("H100", 0)

as_root_only = pytest.mark.skipif(
    os.geteuid() != 0, reason=f"acting as a second user (chown, setuid to nobody) needs root; this run is uid {os.geteuid()}"
)


# -- helpers -------------------------------------------------------------------------------------------

@pytest.fixture
def shared(monkeypatch: pytest.MonkeyPatch) -> Path:
    """A folder other users can reach (pytest's own temporary folders are 0700), ours, 0755; the
    simulator's state goes in it unless a test says otherwise."""
    root = Path(tempfile.mkdtemp(prefix="gpuenergy-shared-", dir=tempfile.gettempdir()))
    root.chmod(0o755)
    monkeypatch.setenv("GPUENERGY_SIM_STATE", str(root / "state"))
    monkeypatch.setenv("GPUENERGY_SIM_GPUS", "H100")
    yield root
    shutil.rmtree(root, ignore_errors=True)


def as_nobody(action: Callable[[], object]) -> str:
    """Run ``action`` as the user ``nobody`` (the machine's second user) in a forked child; what it
    returns, or the error it raised, as text. (Forked, not started: the interpreter may live in a
    folder only root can read.)"""
    codecs.lookup("ascii")      # loaded here: the child may not read the interpreter's folder
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:        # pragma: no cover (the child)
        try:
            os.close(read_end)
            os.setgroups([])
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            said = str(action())
        except BaseException as exc:      # noqa: BLE001 - the parent asserts on it
            said = f"{type(exc).__name__}: {exc}"
        os.write(write_end, said.encode())
        os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as said_by_child:
        said = said_by_child.read().decode()
    os.waitpid(pid, 0)
    return said


def gpuenergy(*args: str) -> tuple[int, str, str]:
    """``gpuenergy ARGS`` in this process: exit status, standard output, standard error."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = gpuenergy_main(list(args))
    return code, out.getvalue(), err.getvalue()


def gpuenergy_process(*args: str, prelude: str = "") -> subprocess.Popen:
    """``gpuenergy ARGS`` as its own process (``prelude``: Python run first, in that process)."""
    code = f"import sys\n{prelude}\nfrom pytest_gpuenergy.cli.main import main\nsys.exit(main(sys.argv[1:]))"
    return subprocess.Popen([sys.executable, "-c", code, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def capped_by_a_killed_run(state: Path, applied_w: float, original_w: float = 700.0) -> Path:
    """What a run killed while capping GPU 0 leaves: the GPU at ``applied_w`` and its journal entry."""
    backend = open_backend("sim")
    try:
        backend.all_gpus[0].set_limit_mw(int(applied_w * 1000))
    finally:
        backend.close()
    entry = JournalEntry(knob=POWER_LIMIT, gpu_uuid=UUID, gpu_index=0, gpu_name="NVIDIA H100 80GB HBM3 (simulated)",
                         vendor="nvidia", saved=int(original_w * 1000), applied=int(applied_w * 1000),
                         pid=DEAD_PID, process_start="1", host=socket.gethostname(), written_at=1.0)
    path = state_folder(state / "journal") / f"{UUID}.json"
    atomic_write_json(path, entry.to_json())
    return path


def limit_on_disk_w(state: Path) -> float:
    """The simulated GPU's limit as its state file holds it (read by hand: the plugin may refuse the folder)."""
    return json.loads((state / "gpus" / f"{UUID}.json").read_text())["limit_mw"] / 1000


def hold_lock(path: Path) -> subprocess.Popen:
    """Another process of ours that holds the ``flock`` on ``path`` until it is killed."""
    code = ("import fcntl, os, sys, time\nfd = os.open(sys.argv[1], os.O_RDWR)\nfcntl.flock(fd, fcntl.LOCK_EX)\n"
            "print('held', flush=True)\ntime.sleep(120)\n")
    holder = subprocess.Popen([sys.executable, "-c", code, str(path)], stdout=subprocess.PIPE, text=True)
    assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
    return holder


class Lines:
    """The lines of a stream as they come, read by a thread (a wait for one can time out)."""

    def __init__(self, stream: io.TextIOBase) -> None:
        self.seen: list[str] = []
        self._new: queue.Queue = queue.Queue()
        self._reader = threading.Thread(target=self._read, args=(stream,), daemon=True)
        self._reader.start()

    def _read(self, stream: io.TextIOBase) -> None:
        for line in stream:
            self.seen.append(line)
            self._new.put(line)

    def wait_for(self, text: str, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        with contextlib.suppress(queue.Empty):
            while text not in self._new.get(timeout=max(deadline - time.monotonic(), 0.01)):
                pass
            return True
        return False

    def all(self) -> str:
        self._reader.join(timeout=5)
        return "".join(self.seen)


# -- 1. a state folder every user can write, without the sticky bit ----------------------------------

def test_a_state_folder_every_user_can_write_is_refused_before_its_journal_is_renamed_away(shared):
    state = shared / "state"
    capped_by_a_killed_run(state, applied_w=420)
    state.chmod(0o777)                                    # on shared storage, as a team would put it
    def rename() -> None:
        os.rename(state / "journal", state / "journal-gone")

    if os.geteuid() == 0:
        assert as_nobody(rename) == "None"                # the other user: allowed, the folder is everyone's
    else:
        rename()                                          # anyone could; this user stands in for them
    code, out, err = gpuenergy("restore", "--gpu-backend=sim")
    assert code == 2 and out == "" and err.count("\n") == 1, (out, err)
    assert f"{state} is writable by every user" in err and f"chmod o-w {state}" in err
    assert limit_on_disk_w(state) == 420.0                # nothing was set from a folder another user controls


# -- 2. state folders owned by another user; links swapped in between a check and a use ------------------

@as_root_only
def test_a_state_folder_of_another_user_is_refused_before_an_entry_is_deleted(shared):
    state = shared / "state"
    capped_by_a_killed_run(state, applied_w=420)
    os.chown(state, NOBODY, NOBODY)                       # their folder (0755): only they can write it
    def swap() -> None:
        os.rename(state / "journal", state / "old")
        os.mkdir(state / "journal")

    assert as_nobody(swap) == "None"                      # root's entry is gone from where root looks
    code, out, err = gpuenergy("restore", "--gpu-backend=sim")
    assert code == 2 and err.count("\n") == 1 and "nothing to restore" not in out, (out, err)
    assert f"{state} belongs to another user (uid {NOBODY}; you are uid 0)" in err
    assert limit_on_disk_w(state) == 420.0


@as_root_only
def test_locks_replaced_by_a_link_to_a_folder_of_root_overwrite_nothing(pytester, shared):
    state = shared / "state"
    victim = shared / "roots-folder"
    victim.mkdir()
    (victim / f"{UUID}.lock").write_text("precious\n")    # root's file, named like a lock
    capped_by_a_killed_run(state, applied_w=700)          # (no cap left: the GPU at its default)
    shutil.rmtree(state / "locks", ignore_errors=True)
    os.chown(state, NOBODY, NOBODY)
    assert as_nobody(lambda: os.symlink(victim, state / "locks")) == "None"
    pytester.makepyfile(test_a="def test_a(gpu_power_cap):\n    pass\n")
    result = pytester.runpytest("--gpu-caps=250")
    assert result.ret != 0
    assert f"{state} belongs to another user (uid {NOBODY}" in result.stdout.str() + result.stderr.str()
    assert (victim / f"{UUID}.lock").read_text() == "precious\n"
    assert limit_on_disk_w(state) == 700.0


def test_a_link_swapped_in_and_out_while_sessions_take_the_lock_never_redirects_a_write(shared):
    """20 lock takings while another user flips ``locks/`` between a folder and a link to a folder of
    ours: the check and the use are one step on one descriptor, so nothing outside is ever written."""
    state = shared / "state"
    victim = shared / "roots-folder"
    victim.mkdir()
    (victim / f"{UUID}.lock").write_text("precious\n")
    state.mkdir(mode=0o777)
    state.chmod(0o777)                                    # everyone's: the swapper needs no second user
    locks, real, link = state / "locks", state / "locks-real", state / "locks-link"
    real.mkdir()
    link.symlink_to(victim)
    stop = threading.Event()

    def swap() -> None:
        while not stop.is_set():
            for target in (link, real):
                with contextlib.suppress(OSError):
                    os.rename(target, locks)              # atomically the link, then the folder
                with contextlib.suppress(OSError):
                    os.rename(locks, target)

    swapper = threading.Thread(target=swap)
    swapper.start()
    refused = 0
    try:
        for _ in range(20):
            try:
                with holding(lock_paths(locks, [UUID]), timeout_s=1):
                    pass
            except (UnsafeStateFile, GpuBusyError, OSError):
                refused += 1
    finally:
        stop.set()
        swapper.join()
    assert (victim / f"{UUID}.lock").read_text() == "precious\n"
    assert sorted(p.name for p in victim.iterdir()) == [f"{UUID}.lock"]
    assert refused == 20                                  # a folder everyone can write is never used


def test_a_lock_file_replaced_between_two_takings_is_taken_afresh(tmp_path):
    """A released lock's descriptor is kept for the next test; if the file was replaced meanwhile, the
    kept one locks nothing anyone else sees: the path's file is opened and taken (here: busy)."""
    [path] = lock_paths(tmp_path / "locks", [UUID])
    with holding([path], timeout_s=1):
        pass                                          # released: its descriptor kept
    path.unlink()
    other = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(other, fcntl.LOCK_EX)             # another session holds the file there now
        with pytest.raises(GpuBusyError, match="waited 0.2 s"), holding([path], timeout_s=0.2):
            pass
    finally:
        os.close(other)
    with holding([path], timeout_s=1):                # free again: taken
        pass


def test_a_kept_descriptor_replaced_by_a_later_release_is_closed(tmp_path):
    """Two threads that missed each other's taking open the file twice; the later release keeps its
    own descriptor and closes the one kept before (none is left open and forgotten)."""
    from pytest_gpuenergy.gpu import locks

    [path] = lock_paths(tmp_path / "locks", [UUID])
    with holding([path], timeout_s=1):
        pass
    first = locks._idle[path][0]
    second = os.open(path, os.O_RDWR)
    fcntl.flock(second, fcntl.LOCK_EX)
    locks._registry[path] = locks._Held(second)      # the other thread's taking, registered after the first let go
    locks._release(path)
    assert locks._idle[path][0] == second
    with pytest.raises(OSError):
        os.fstat(first)                               # closed


def test_a_forked_child_never_takes_a_lock_through_its_parents_kept_descriptor(tmp_path):
    """A forked child inherits the kept descriptor, and an ``flock`` through it would share the
    parent's lock: the child opens the file itself, and waits while the parent holds it."""
    [path] = lock_paths(tmp_path / "locks", [UUID])
    with holding([path], timeout_s=1):
        pass                                          # released: its descriptor kept
    held_read, held_write = os.pipe()
    said_read, said_write = os.pipe()
    child = os.fork()
    if child == 0:                                    # the child: waits until the parent holds the lock
        try:
            os.read(held_read, 1)
            try:
                with holding([path], timeout_s=0.3):
                    answer = b"took it"
            except GpuBusyError:
                answer = b"busy"
            os.write(said_write, answer)
        finally:
            os._exit(0)
    try:
        with holding([path], timeout_s=1):            # the parent takes it again (through its kept descriptor)
            os.write(held_write, b"x")
            answer = os.read(said_read, 16)
    finally:
        os.waitpid(child, 0)
        for fd in (held_read, held_write, said_read, said_write):
            os.close(fd)
    assert answer == b"busy"


# -- 3. locks anyone could hold; waits without a bound; signals that cannot end a restore --------------------

@as_root_only
def test_another_user_cannot_open_a_lock_file_so_cannot_hold_it(shared):
    state = shared / "state"
    capped_by_a_killed_run(state, applied_w=420)
    assert gpuenergy("restore", "--gpu-backend=sim")[0] == 0     # takes the GPU's and the journal's locks
    locks = [state / "journal" / ".lock", state / "locks" / f"{UUID}.lock", state / "gpus" / f"{UUID}.lock"]
    def hold_them() -> list[str]:
        tried = []
        for path in locks:
            try:
                fcntl.flock(os.open(path, os.O_RDONLY), fcntl.LOCK_EX | fcntl.LOCK_NB)
                tried.append("held")
            except OSError as exc:
                tried.append(type(exc).__name__)
        return tried

    assert as_nobody(hold_them) == str(["PermissionError"] * 3)
    assert all(stat.S_IMODE(path.stat().st_mode) == 0o600 for path in locks)


@pytest.mark.parametrize("lock", ["journal/.lock", "gpus/GPU.lock"])
def test_a_held_state_lock_ends_gpuenergy_restore_within_its_bound_naming_the_holder(shared, lock):
    state = shared / "state"
    capped_by_a_killed_run(state, applied_w=250)
    path = state / lock.replace("GPU", UUID)
    if not path.exists():
        gpuenergy("info", "--gpu-backend=sim")
        path.touch(mode=0o600)
    holder = hold_lock(path)
    try:
        restore = gpuenergy_process("restore", "--gpu-backend=sim", prelude="import pytest_gpuenergy.fileio as f; f.LOCK_WAIT_S = 1")
        try:
            out, err = restore.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            restore.kill()
            pytest.fail(f"gpuenergy restore still waits for {lock} after 30 s")
    finally:
        holder.kill()
        holder.wait()
    assert restore.returncode == 1, (out, err)
    assert out.startswith("stopped: GPU 0") and f"waited 1 s for the lock {path}, held by pid {holder.pid}" in out
    if lock == "gpus/GPU.lock":                           # stopped before the limit was set back
        assert "left changed: GPU 0 (NVIDIA H100 80GB HBM3 (simulated), " in out and "at 250 W, its limit before 700 W" in out
        assert f"to put it back: rm {state / 'gpus' / UUID}.json" in out
        assert limit_on_disk_w(state) == 250.0
    assert "gpuenergy restore`" not in out + err


def test_a_second_signal_ends_a_stuck_restore_saying_what_is_left_and_the_fix(shared):
    state = shared / "state"
    capped_by_a_killed_run(state, applied_w=250)
    holder = hold_lock(state / "gpus" / f"{UUID}.lock")          # the restore cannot set the limit
    try:
        restore = gpuenergy_process("restore", "--gpu-backend=sim",
                                    prelude="import pytest_gpuenergy.fileio as f; f.SAY_AFTER_S = 0.2")
        assert restore.stderr is not None
        said = Lines(restore.stderr)
        said.wait_for("waiting for the lock", timeout_s=8)   # said once it waits; on after 8 s regardless
        restore.send_signal(signal.SIGTERM)
        time.sleep(0.3)
        restore.send_signal(signal.SIGTERM)
        try:
            restore.wait(timeout=10)
        except subprocess.TimeoutExpired:
            restore.kill()
            pytest.fail("two SIGTERMs did not end gpuenergy restore waiting for a lock")
    finally:
        holder.kill()
        holder.wait()
    err = said.all()
    assert restore.returncode == 130, err
    assert "SIGTERM received again while restoring the power limit of GPU 0" in err
    assert "left changed: GPU 0 (NVIDIA H100 80GB HBM3 (simulated), " in err and "at 250 W, its limit before 700 W" in err
    assert f"to put it back: rm {state / 'gpus' / UUID}.json" in err and "gpuenergy restore" not in err.replace("gpuenergy: ", "")
    assert limit_on_disk_w(state) == 250.0


def test_a_gpu_lock_wait_names_the_process_that_holds_it_not_the_pid_in_the_file(shared):
    path = state_folder(shared / "state" / "locks") / f"{UUID}.lock"
    path.write_text(f"pid {DEAD_PID}\n")                  # what an earlier session wrote into it
    path.chmod(0o600)
    holder = hold_lock(path)
    try:
        with pytest.raises(GpuBusyError) as busy, holding([path], timeout_s=0.2):
            pass
    finally:
        holder.kill()
        holder.wait()
    assert f"held by pid {holder.pid} (" in str(busy.value) and str(DEAD_PID) not in str(busy.value)


def test_gpuenergy_restore_force_names_the_holder_and_a_fix_never_itself(shared):
    state = shared / "state"
    capped_by_a_killed_run(state, applied_w=420)
    path = state_folder(state / "locks") / f"{UUID}.lock"
    path.touch(mode=0o600)
    holder = hold_lock(path)
    try:
        code, out, err = gpuenergy("restore", "--gpu-backend=sim", "--force")
    finally:
        holder.kill()
        holder.wait()
    assert code == 1 and out.startswith("busy: GPU 0"), (out, err)
    assert f"held by pid {holder.pid}" in out or f"(pid {holder.pid} (" in out
    assert f"put it back yourself: rm {state / 'gpus' / UUID}.json" in out
    assert "gpuenergy restore" not in out


# -- 4. the simulator's own files ------------------------------------------------------------------------

@pytest.mark.parametrize("planted", ["machine.json", "gpus/GPU.json"])
def test_a_fifo_planted_as_a_simulator_file_is_refused_never_waited_on(shared, planted):
    state = shared / "state"
    gpuenergy("info", "--gpu-backend=sim")
    path = state / planted.replace("GPU", UUID)
    path.unlink()
    os.mkfifo(path)
    info = gpuenergy_process("info", "--gpu-backend=sim")
    try:
        out, err = info.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        info.kill()
        pytest.fail(f"gpuenergy info hangs reading the FIFO {path}")
    assert info.returncode == 2 and err.count("\n") == 1, (out, err)
    assert str(path) in err and "is a FIFO (named pipe), not a regular file" in err


@pytest.mark.parametrize("planted", ["world-writable", "symbolic link", "hard link", "another user's"])
def test_a_planted_gpu_state_file_is_not_believed(shared, planted):
    if planted == "another user's" and os.geteuid() != 0:
        pytest.skip(f"chown to another user needs root; this run is uid {os.geteuid()}")
    state = shared / "state"
    gpuenergy("info", "--gpu-backend=sim")
    path = state / "gpus" / f"{UUID}.json"
    forged = json.loads(path.read_text()) | {"limit_mw": 200_000}     # "the GPU's own limit is 200 W"
    elsewhere = shared / "forged.json"
    elsewhere.write_text(json.dumps(forged))
    path.unlink()
    if planted == "world-writable":
        shutil.copy(elsewhere, path)
        path.chmod(0o666)
    elif planted == "symbolic link":
        path.symlink_to(elsewhere)
    elif planted == "hard link":
        os.link(elsewhere, path)
    else:
        shutil.copy(elsewhere, path)
        os.chown(path, NOBODY, NOBODY)
    code, out, err = gpuenergy("info", "--json", "--gpu-backend=sim")
    assert code == 2 and out == "" and err.count("\n") == 1, (out, err)
    expected = {"world-writable": "is writable by every user", "symbolic link": "is a symbolic link",
                "hard link": "has 2 hard links", "another user's": f"belongs to another user (uid {NOBODY}"}[planted]
    assert str(path) in err and expected in err


def test_a_process_marker_planted_as_a_link_creates_no_file(shared):
    state = shared / "state"
    gpuenergy("info", "--gpu-backend=sim")
    target = shared / "a-file-root-would-create"
    markers = state / "gpus" / f"{UUID}.procs"
    markers.mkdir(exist_ok=True)
    (markers / str(os.getpid())).symlink_to(target)        # the marker this process will make
    code, out, err = gpuenergy("info", "--gpu-backend=sim")
    assert code == 2 and err.count("\n") == 1, (out, err)
    assert f"{markers / str(os.getpid())} is a symbolic link" in err
    assert not target.exists()


# -- 5. --energy-save: the storage path checked and written in one step -------------------------------------

SWAP_STORAGE = """
import os

def pytest_gpuenergy_update_run(config, run):
    # Between the storage path's check and the write: the folder becomes a link to a folder of root's.
    storage = {storage!r}
    os.rename(storage, storage + "-moved")
    os.symlink({victim!r}, storage)
    if {chown}:
        os.lchown(storage, {nobody}, {nobody})
"""


@pytest.mark.parametrize("shared_by", ["every user", "another user"])
def test_a_storage_folder_swapped_for_a_link_before_the_save_writes_nothing_outside(pytester, shared, shared_by):
    if shared_by == "another user" and os.geteuid() != 0:
        pytest.skip(f"chown to another user needs root; this run is uid {os.geteuid()}")
    team, victim = shared / "team", shared / "roots-folder"
    team.mkdir()
    victim.mkdir()
    storage = team / "energy"
    storage.mkdir()
    if shared_by == "every user":
        team.chmod(0o777)
    else:
        os.chown(team, NOBODY, NOBODY)
    pytester.makeconftest(SWAP_STORAGE.format(storage=str(storage), victim=str(victim), chown=shared_by != "every user",
                                              nobody=NOBODY))
    pytester.makepyfile(test_m="def test_m(energy_meter):\n    with energy_meter:\n        sum(range(10**5))\n")
    result = pytester.runpytest("--energy-save", f"--energy-storage={storage}")
    assert list(victim.rglob("*")) == []                  # no run document, no temporary file
    problem = "is writable by every user" if shared_by == "every user" else f"belongs to another user (uid {NOBODY}"
    assert f"{team} {problem}" in result.stdout.str() + result.stderr.str()
    assert result.ret != 0


# -- where the state of a machine's GPUs lives ----------------------------------------------------------------

def test_root_keeps_its_gpus_state_in_var_lib_whatever_home_sudo_kept(monkeypatch):
    monkeypatch.delenv("XDG_STATE_HOME", raising=False)
    monkeypatch.delenv("GPUENERGY_SIM_STATE", raising=False)
    monkeypatch.setenv("HOME", "/home/the-caller")        # sudo may keep the caller's HOME
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    assert user_state_dir() == Path("/var/lib/pytest-gpuenergy")
    assert sim_state_dir() == Path("/var/lib/pytest-gpuenergy/sim")


def test_a_user_without_root_keeps_state_in_the_home_folder(monkeypatch):
    monkeypatch.delenv("XDG_STATE_HOME", raising=False)
    monkeypatch.setenv("HOME", "/home/alice")
    monkeypatch.setattr(os, "geteuid", lambda: 4242)      # not root, and not the owner of /var/lib/pytest-gpuenergy
    assert user_state_dir() == Path("/home/alice/.local/state/pytest-gpuenergy")


@as_root_only
def test_sudo_with_the_callers_state_folder_refuses_it(shared, monkeypatch):
    caller = shared / "home-of-the-caller"
    caller.mkdir()
    os.chown(caller, NOBODY, NOBODY)
    monkeypatch.setenv("XDG_STATE_HOME", str(caller))      # as `sudo -E` would keep it
    with pytest.raises(UnsafeStateFile, match=rf"^{caller} belongs to another user \(uid {NOBODY}; you are uid 0\)"):
        state_folder(user_state_dir() / "journal")


def test_state_through_a_link_of_ours_and_in_a_sticky_folder_works(shared, monkeypatch):
    """What admins and distributions do stays allowed: a link they made, a sticky folder like /tmp."""
    sticky = shared / "scratch"
    sticky.mkdir()
    sticky.chmod(0o1777)
    (sticky / "real").mkdir()
    (shared / "link").symlink_to(sticky / "real")
    monkeypatch.setenv("GPUENERGY_SIM_STATE", str(shared / "link" / "state"))
    code, out, err = gpuenergy("info", "--json", "--gpu-backend=sim")
    assert code == 0, err
    assert json.loads(out)[0]["current_limit_w"] == 700.0
    assert (sticky / "real" / "state" / "machine.json").exists()


@as_root_only
def test_a_link_of_another_user_on_the_way_is_refused_even_in_a_folder_of_ours(shared, monkeypatch):
    (shared / "real").mkdir()
    link = shared / "link"
    link.symlink_to(shared / "real")
    os.lchown(link, NOBODY, NOBODY)                       # (only root could put it there: the walk trusts owners, not places)
    monkeypatch.setenv("GPUENERGY_SIM_STATE", str(link / "state"))
    code, out, err = gpuenergy("info", "--gpu-backend=sim")
    assert code == 2 and f"{link} is a symbolic link of another user (uid {NOBODY})" in err, (out, err)
    assert not (shared / "real" / "state").exists()


@as_root_only
def test_sudo_pytest_may_save_into_the_callers_checkout_but_not_another_users(shared, monkeypatch):
    """Run documents and reports: the user who ran sudo owns the checkout; anyone else's folder is refused."""
    checkout = shared / "checkout-of-the-caller"
    checkout.mkdir()
    os.chown(checkout, NOBODY, NOBODY)
    monkeypatch.setenv("SUDO_UID", str(NOBODY))
    atomic_write_text(checkout / "report.md", "# report\n")
    assert (checkout / "report.md").read_text() == "# report\n"
    monkeypatch.delenv("SUDO_UID")
    with pytest.raises(OSError, match=rf"{checkout} belongs to another user \(uid {NOBODY}; you are uid 0\)"):
        atomic_write_text(checkout / "report.md", "# changed\n")
    assert (checkout / "report.md").read_text() == "# report\n"


@as_root_only
def test_group_write_is_someone_elses_unless_the_group_is_the_owners_own(shared):
    private, team = shared / "umask-002", shared / "team-group"
    for folder, gid in ((private, os.getegid()), (team, NOBODY)):      # root's own group; nogroup, anyone's
        folder.mkdir()
        os.chown(folder, 0, gid)
        folder.chmod(0o775)
    assert state_folder(private / "journal").is_dir()
    with pytest.raises(UnsafeStateFile, match=rf"^{team} is writable by the group \S+: .*\(chmod g-w {team}\)"):
        state_folder(team / "journal")
    atomic_write_text(team / "report.md", "# a team's shared storage\n")     # user files: the group may share it


@as_root_only
def test_a_user_whose_home_lies_in_a_folder_they_may_pass_but_not_list_keeps_state_there(shared):
    homes = shared / "home"
    homes.mkdir(mode=0o711)
    homes.chmod(0o711)                                    # /home at 0711, as hardened systems set it
    alice = homes / "alice"
    alice.mkdir(mode=0o700)
    os.chown(alice, NOBODY, NOBODY)

    def keep_state() -> str:
        journal = state_folder(alice / ".local" / "state" / "pytest-gpuenergy" / "journal")
        atomic_write_text(journal / "note.txt", "kept\n")
        return (journal / "note.txt").read_text()

    assert as_nobody(keep_state) == "kept\n"


STUCK_TEARDOWN = """
import os, subprocess, sys

def test_capped(gpu_power_cap):
    # Another process of ours takes the simulated GPU's own lock: the restore after this test waits on it.
    lock = os.path.join(os.environ["GPUENERGY_SIM_STATE"], "gpus", gpu_power_cap.gpus[0].gpu_uuid + ".lock")
    code = "import fcntl, os, sys, time; fcntl.flock(os.open(sys.argv[1], os.O_RDWR), fcntl.LOCK_EX); print(1, flush=True); time.sleep(120)"
    holder = subprocess.Popen([sys.executable, "-c", code, lock], stdout=subprocess.PIPE)
    holder.stdout.readline()
    with open("holder.pid", "w") as out:
        out.write(str(holder.pid))
"""


@pytest.mark.slow
def test_a_second_signal_ends_a_session_whose_restore_is_stuck_naming_the_gpu_and_gpuenergy_restore(pytester, shared):
    """In a test session the fix named is `gpuenergy restore`; the end of the session waits on no lock again."""
    state = shared / "state"
    pytester.makepyfile(test_stuck=STUCK_TEARDOWN)
    pytester.makeconftest("import pytest_gpuenergy.fileio as f\nf.SAY_AFTER_S = 0.2\n")
    session = subprocess.Popen([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--gpu-caps=300", "test_stuck.py"],
                               cwd=pytester.path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    assert session.stdout is not None
    said = Lines(session.stdout)
    holder_pid = 0
    try:
        assert said.wait_for("waiting for the lock", timeout_s=60), said.all()
        holder_pid = int((pytester.path / "holder.pid").read_text())
        session.send_signal(signal.SIGTERM)
        time.sleep(0.3)
        session.send_signal(signal.SIGTERM)
        session.wait(timeout=20)
    finally:
        session.kill()
        if holder_pid:
            os.kill(holder_pid, signal.SIGKILL)
    output = said.all()
    assert session.returncode == pytest.ExitCode.INTERRUPTED, output
    assert "SIGTERM received again while restoring the power limit of GPU 0" in output
    assert "left changed: GPU 0 (NVIDIA H100 80GB HBM3 (simulated), " in output and "at 300 W, its limit before 700 W; " \
           "to put it back: gpuenergy restore" in output
    assert limit_on_disk_w(state) == 300.0
    assert gpuenergy("restore", "--gpu-backend=sim")[0] == 0 and limit_on_disk_w(state) == 700.0
