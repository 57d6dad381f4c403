"""One lock per GPU, held across processes: tests that cap or measure a GPU never overlap.

Two pytest-xdist workers (or two sessions) that want different caps on the same GPU must not
run at the same time, and the energy one test measures must not include another test's work.
The lock is an ``flock`` on a file per GPU UUID (the kernel drops it if the holder dies, so a
killed run never leaves a GPU locked). Within a process it is reentrant: the fixture that holds
a GPU for a whole test, the capper and the meter can all take it. The lock folder is reached by a
checked walk (once per process: its descriptor is kept, ``trusted_path.HeldFolder``) and the lock
file opened through it without following a link, never truncated or written
(``fileio.open_lock_file``), and readable by its owner only: another user can neither make a
session overwrite a file nor hold a GPU's lock (``flock`` needs only a read-only descriptor). A
wait names the process that really holds the lock, as the kernel says (``/proc/locks``).

A session takes its GPU's lock for every test, so a released lock's descriptor is kept open
(unlocked) for the next test: it is used again only in the process that opened it (a forked
child shares its open file, and would share its lock) and while the path still names that very
file (else the file is opened afresh, through the checked walk).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import threading
from collections.abc import Iterable, Iterator
from pathlib import Path

from ..errors import GpuBusyError
from ..fileio import open_lock_file, wait_for_lock
from ..trusted_path import HeldFolder, state_owners

DEFAULT_TIMEOUT_S = 3600.0
LOCK_FOLDER_MODE = 0o700
_FOLDERS_KEPT = 4        # lock folders whose descriptors are kept
_SAY_AFTER_S = 2.0      # a wait longer than this is said on the terminal (whose lock, how to stop)


class GpuLockBusy(GpuBusyError):
    """A GPU's lock stayed held past the wait; ``holder`` says who holds it, as the kernel does."""

    def __init__(self, text: str, holder: str) -> None:
        super().__init__(text)
        self.holder = holder


class _Held:
    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.count = 1


_registry: dict[Path, _Held] = {}
_folders: dict[Path, HeldFolder] = {}
_idle: dict[Path, tuple[int, int]] = {}     # a released lock's descriptor, and the pid that opened it
_IDLE_KEPT = 8
_mutex = threading.Lock()


def _open_lock(path: Path) -> int:
    """Open ``path``'s lock file through its folder's descriptor, from a checked walk done once
    (``trusted_path.HeldFolder``): a session takes its GPU's lock for every test, and the walk from
    ``/`` costs more than the lock. A few folders are kept (each test of the plugin's own suite has
    one); under the mutex, so that none is closed while it is used."""
    with _mutex:
        held = _folders.pop(path.parent, None)
        if held is None:
            held = HeldFolder(path.parent, owners=state_owners(), create_mode=LOCK_FOLDER_MODE)
            while len(_folders) >= _FOLDERS_KEPT:
                _folders.pop(next(iter(_folders))).close()
        _folders[path.parent] = held          # the most recent last
        return open_lock_file(held.fd(create=True), path.name, shown=path)


def _kept_or_opened(path: Path) -> int:
    """The descriptor kept from this lock's last release, if this process opened it and ``path`` is
    still that file; else the file opened afresh (``_open_lock``)."""
    with _mutex:
        kept = _idle.pop(path, None)
    if kept is not None:
        fd, opener = kept
        try:
            same = opener == os.getpid() and _identity(os.stat(path, follow_symlinks=False)) == _identity(os.fstat(fd))
        except OSError:
            same = False
        if same:
            return fd
        os.close(fd)            # (a forked child's copy: the parent's descriptor and lock stay)
    return _open_lock(path)


def _identity(found: os.stat_result) -> tuple[int, int]:
    return found.st_dev, found.st_ino


def _acquire(path: Path, timeout_s: float) -> None:
    with _mutex:
        held = _registry.get(path)
        if held is not None:
            held.count += 1
            return
    fd = _kept_or_opened(path)

    def busy(holder: str) -> GpuLockBusy:
        return GpuLockBusy(
            f"waited {timeout_s:g} s for the GPU lock {path.name} held by {holder}: another test session is "
            f"using that GPU; wait for it to finish, or select another GPU with --gpu-devices", holder)

    try:
        wait_for_lock(fd, timeout_s, on_timeout=busy, say_after_s=_SAY_AFTER_S,
                      waiting_note=lambda holder: f"gpuenergy: waiting for the GPU lock {path.name} held by {holder} "
                                                  f"(at most {timeout_s:g} s; Ctrl-C or SIGTERM stops at once)")
    except BaseException:
        os.close(fd)
        raise
    with _mutex:
        _registry[path] = _Held(fd)


def _release(path: Path) -> None:
    with _mutex:
        held = _registry.get(path)
        if held is None:
            return
        held.count -= 1
        if held.count > 0:
            return
        del _registry[path]
    fcntl.flock(held.fd, fcntl.LOCK_UN)
    with _mutex:
        replaced = _idle.pop(path, None)        # (two threads that took it one after the other)
        if replaced is not None:
            os.close(replaced[0])
        _idle[path] = (held.fd, os.getpid())
        while len(_idle) > _IDLE_KEPT:
            os.close(_idle.pop(next(iter(_idle)))[0])


@contextlib.contextmanager
def holding(paths: Iterable[Path], *, timeout_s: float = DEFAULT_TIMEOUT_S) -> Iterator[None]:
    """Hold every lock in ``paths`` (taken in sorted order, so two holders cannot deadlock)."""
    taken: list[Path] = []
    try:
        for path in sorted(set(paths)):
            _acquire(path, timeout_s)
            taken.append(path)
        yield
    finally:
        for path in reversed(taken):
            _release(path)


def lock_paths(folder: Path, uuids: Iterable[str]) -> list[Path]:
    return [Path(folder) / f"{uuid}.lock" for uuid in uuids]
