"""Crash-safe file primitives shared by the simulator, the journal and the result storage.

A power limit outlives the process that set it and a baseline outlives the CI job that wrote it,
so every file this package keeps must be either the old version or the new one, never half of
each: writes go to a temporary file in the same folder, are flushed to disk and then renamed over
the target (rename is atomic on POSIX). Read-modify-write cycles across processes are serialised
with ``flock`` on a separate lock file, which the kernel releases if the holder dies.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import tempfile
from pathlib import Path
from typing import Any, Iterator


def atomic_write_text(path: Path, text: str, *, overwrite: bool = True, durable: bool = True) -> None:
    """Write ``text`` to ``path`` so that readers see the old or the new file, never a mix.

    With ``overwrite=False`` an existing file is left alone and ``FileExistsError`` is raised
    (the check and the rename are made atomic with a hard link, so two writers cannot both win).
    ``durable=False`` skips the fsyncs: still atomic against a killed process, not against a
    power cut; for state rewritten many times a second (the simulator's energy counter).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, 0o666 & ~_umask())   # mkstemp makes 0600; the file gets what open() would give it
        with os.fdopen(fd, "w", encoding="utf-8") as tmp:
            tmp.write(text)
            tmp.flush()
            if durable:
                os.fsync(tmp.fileno())
        if overwrite:
            os.replace(tmp_name, path)
        else:
            os.link(tmp_name, path)  # fails with FileExistsError if someone got there first
            os.unlink(tmp_name)
        if durable:
            _fsync_dir(path.parent)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp_name)
        raise


def _umask() -> int:
    """The process's umask, read without changing it where Linux says it (os.umask can only swap)."""
    with contextlib.suppress(OSError, ValueError):
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def atomic_write_json(path: Path, data: Any, *, overwrite: bool = True, durable: bool = True) -> None:
    text = json.dumps(data, indent=2, ensure_ascii=False) + "\n"
    atomic_write_text(path, text, overwrite=overwrite, durable=durable)


def _fsync_dir(folder: Path) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


@contextlib.contextmanager
def file_lock(lock_path: Path, *, blocking: bool = True) -> Iterator[bool]:
    """Hold an exclusive ``flock`` on ``lock_path`` (created if missing) for the block.

    Yields True when the lock is held. With ``blocking=False`` it yields False instead of
    waiting when another process holds it.
    """
    lock_path = Path(lock_path)
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        flags = fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB)
        try:
            fcntl.flock(fd, flags)
        except BlockingIOError:
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def user_state_dir() -> Path:
    """The per-user folder for state that must survive a process (XDG base directory spec)."""
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return Path(base) / "pytest-gpuenergy"
