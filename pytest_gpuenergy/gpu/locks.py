"""One lock per GPU, held across processes: tests that cap or measure a GPU never overlap.

Two pytest-xdist workers (or two sessions) that want different caps on the same GPU must not
run at the same time, and the energy one test measures must not include another test's work.
The lock is an ``flock`` on a file per GPU UUID (the kernel drops it if the holder dies, so a
killed run never leaves a GPU locked). Within a process it is reentrant: the fixture that holds
a GPU for a whole test, the capper and the meter can all take it. The lock file is opened without
following a symbolic link and never truncated on open (``fileio.open_lock_file``): one planted in
a shared folder cannot make a session overwrite another file.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import threading
import time
from collections.abc import Iterable, Iterator
from pathlib import Path

from ..errors import GpuBusyError
from ..fileio import open_lock_file
from .signals import announce

DEFAULT_TIMEOUT_S = 3600.0
_POLL_S = 0.05
_OWNER_BYTES = 32       # the lock file's one line: "pid N", padded
_SAY_AFTER_S = 2.0      # a wait longer than this is said on the terminal (whose lock, how to stop)


class _Held:
    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.count = 1


_registry: dict[Path, _Held] = {}
_mutex = threading.Lock()


def _acquire(path: Path, timeout_s: float) -> None:
    with _mutex:
        held = _registry.get(path)
        if held is not None:
            held.count += 1
            return
    fd = open_lock_file(path)
    deadline = time.monotonic() + timeout_s
    said = False
    try:
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise GpuBusyError(
                        f"waited {timeout_s:g} s for the GPU lock {path.name} held by {_owner(fd)}: another test session is "
                        f"using that GPU; wait for it to finish, or select another GPU with --gpu-devices"
                    ) from None
                if not said and timeout_s >= _SAY_AFTER_S and time.monotonic() >= deadline - timeout_s + _SAY_AFTER_S:
                    said = True
                    announce(f"gpuenergy: waiting for the GPU lock {path.name} held by {_owner(fd)} "
                             f"(at most {timeout_s:g} s; Ctrl-C or SIGTERM stops at once)")
                # A short sleep, never a blocking flock: a signal (SIGTERM, Ctrl-C) raises here at once.
                time.sleep(_POLL_S)
    except BaseException:
        os.close(fd)
        raise
    # The holder's pid, over whatever the last holder wrote: a fixed-width record needs no truncation
    # (ftruncate costs 0.4 ms on some file systems, and every test takes the lock).
    os.pwrite(fd, f"pid {os.getpid()}".ljust(_OWNER_BYTES - 1).encode() + b"\n", 0)
    with _mutex:
        _registry[path] = _Held(fd)


def _owner(fd: int) -> str:
    try:
        return os.pread(fd, 64, 0).decode(errors="replace").strip() or "an unknown process"
    except OSError:
        return "an unknown process"


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
    os.close(held.fd)


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
