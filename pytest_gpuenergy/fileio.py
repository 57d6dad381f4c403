"""Crash-safe file primitives shared by the simulator, the journal and the result storage.

A power limit outlives the process that set it and a baseline outlives the CI job that wrote it,
so every file this package keeps must be either the old version or the new one, never half of
each: writes go to a temporary file in the same folder, are flushed to disk and then renamed over
the target (rename is atomic on POSIX). Read-modify-write cycles across processes are serialised
with ``flock`` on a separate lock file, which the kernel releases if the holder dies.

The journal and the locks decide which power limit a GPU gets and which file is truncated, so
they are only trusted when nobody else could have put them there: a state file must be a regular
file of ours (or root's), with one link, that other users cannot write; a lock file is opened
without following a symbolic link. A file we are asked to replace (a report) must be a regular
file: renaming over ``/dev/full`` or a FIFO would destroy it.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from .errors import NotARegularFile, UnsafeStateFile

MAX_STATE_FILE_BYTES = 1 << 20      # a journal entry is a few hundred bytes; more is not ours
_STATE_FOLDER_MODE = 0o755


def atomic_write_text(path: Path, text: str, *, overwrite: bool = True, durable: bool = True) -> None:
    """Write ``text`` to ``path`` so that readers see the old or the new file, never a mix.

    With ``overwrite=False`` an existing file is left alone and ``FileExistsError`` is raised
    (the check and the rename are made atomic with a hard link, so two writers cannot both win).
    ``durable=False`` skips the fsyncs: still atomic against a killed process, not against a
    power cut; for state rewritten many times a second (the simulator's energy counter).
    An existing ``path`` that is not a regular file (a device, a folder, a FIFO) is refused with
    ``NotARegularFile`` (an ``OSError``) before anything is written.
    """
    path = Path(path)
    refuse_non_regular(path)
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
            _link_new(tmp_name, path)
            os.unlink(tmp_name)
        if durable:
            _fsync_dir(path.parent)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp_name)
        raise


def _link_new(tmp_name: str, path: Path) -> None:
    """Hard-link the finished temporary file to ``path``; ``FileExistsError`` if someone got there first.

    The link is atomic on local file systems and on NFS (no ``flock`` needed across hosts, so runs
    of several machines can save into one shared folder). On NFS a retried request whose first
    reply was lost reports "exists" for our own link: the temporary file's link count (2) tells.
    """
    try:
        os.link(tmp_name, path)
    except FileExistsError:
        if os.stat(tmp_name).st_nlink == 2 and os.path.samefile(tmp_name, path):
            return
        raise


def _umask() -> int:
    """The process's umask, read without changing it where Linux says it (os.umask can only swap)."""
    with contextlib.suppress(OSError, ValueError), open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def atomic_write_json(path: Path, data: Any, *, overwrite: bool = True, durable: bool = True) -> None:
    text = json.dumps(data, indent=2, ensure_ascii=False) + "\n"
    atomic_write_text(path, text, overwrite=overwrite, durable=durable)


def refuse_non_regular(path: Path) -> None:
    """Raise ``NotARegularFile`` if ``path`` (followed through symbolic links) exists and is no regular file."""
    try:
        found = os.stat(path)
    except (OSError, ValueError):
        return   # missing (or unreachable): the write itself says what is wrong
    if not stat.S_ISREG(found.st_mode):
        raise NotARegularFile(
            f"{path} is {_kind(found.st_mode)}, not a regular file: refusing to replace it; give the path of a file to write"
        )


def _kind(mode: int) -> str:
    kinds = ((stat.S_ISDIR, "a folder"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
             (stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISSOCK, "a socket"))
    return next((name for test, name in kinds if test(mode)), "a special file")


def _fsync_dir(folder: Path) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


# -- state files: the journal and the locks ------------------------------------------------------

def state_folder(folder: Path) -> Path:
    """Create ``folder`` (``0755``) if missing; refuse one that every user can write without the sticky bit.

    In such a folder anyone can replace or delete our journal entries, so a capped GPU could be
    forgotten; with the sticky bit (``/tmp``) only the owner of a file can.
    """
    folder = Path(folder)
    folder.mkdir(mode=_STATE_FOLDER_MODE, parents=True, exist_ok=True)
    mode = os.stat(folder).st_mode
    if mode & stat.S_IWOTH and not mode & stat.S_ISVTX:
        raise UnsafeStateFile(
            f"{folder} is writable by every user: anyone could replace the power-limit journal or the GPU locks "
            f"in it; make it yours only (chmod o-w {folder}) or point the state elsewhere"
        )
    return folder


def check_state_file(path: Path, found: os.stat_result) -> None:
    """Refuse a state file that another user could have planted or can change (see the module docstring)."""
    me = os.geteuid()
    if not stat.S_ISREG(found.st_mode):
        problem = f"is {_kind(found.st_mode)}, not a regular file"
    elif found.st_uid not in (me, 0):
        problem = f"belongs to another user (uid {found.st_uid}; you are uid {me})"
    elif found.st_mode & stat.S_IWOTH:
        problem = "is writable by every user"
    elif found.st_nlink > 1:
        problem = f"has {found.st_nlink} hard links (it may be another file under a second name)"
    else:
        return
    raise UnsafeStateFile(
        f"{path} {problem}: pytest-gpuenergy refuses a journal or lock file someone else could have planted "
        f"(it decides which power limit a GPU gets); check the GPU's limit with `gpuenergy info`, delete the file, "
        f"and keep {path.parent} writable by you only"
    )


def open_state_file(path: Path, flags: int) -> int:
    """``os.open`` a state file without following a symbolic link (nor blocking on a FIFO), then check it."""
    try:
        fd = os.open(path, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o644)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise UnsafeStateFile(
                f"{path} is a symbolic link: pytest-gpuenergy never follows one for a journal or lock file (it could "
                f"point at a file to overwrite); delete it, and keep {path.parent} writable by you only"
            ) from None
        raise
    try:
        check_state_file(path, os.fstat(fd))
    except BaseException:
        os.close(fd)
        raise
    return fd


def open_lock_file(path: Path) -> int:
    """Open (creating, never truncating) a lock file in a safe state folder; the caller closes it."""
    state_folder(Path(path).parent)
    return open_state_file(Path(path), os.O_RDWR | os.O_CREAT)


def read_state_text(path: Path) -> str:
    """The text of a state file (``FileNotFoundError`` if missing); an unsafe file raises ``UnsafeStateFile``.

    Undecodable bytes or a file too large for a journal entry raise ``ValueError``.
    """
    fd = open_state_file(Path(path), os.O_RDONLY)
    try:
        raw = os.read(fd, MAX_STATE_FILE_BYTES + 1)
    finally:
        os.close(fd)
    if len(raw) > MAX_STATE_FILE_BYTES:
        raise ValueError(f"larger than {MAX_STATE_FILE_BYTES} bytes")
    return raw.decode("utf-8")


@contextlib.contextmanager
def file_lock(lock_path: Path, *, blocking: bool = True) -> Iterator[bool]:
    """Hold an exclusive ``flock`` on ``lock_path`` (created if missing, checked as a state file) for the block.

    Yields True when the lock is held. With ``blocking=False`` it yields False instead of
    waiting when another process holds it.
    """
    fd = open_lock_file(Path(lock_path))
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
