"""Crash-safe file primitives shared by the simulator, the journal and the result storage.

A power limit outlives the process that set it and a baseline outlives the CI job that wrote it,
so every file this package keeps must be either the old version or the new one, never half of
each: writes go to a temporary file in the same folder, are flushed to disk and then renamed over
the target (rename is atomic on POSIX). Read-modify-write cycles across processes are serialised
with ``flock`` on a separate lock file, which the kernel releases if the holder dies.

Every folder written to is reached by a checked walk (``trusted_path``): the checks are made on the
descriptor that the write then uses (``openat``, ``renameat``), so no other user can move a folder
or swap a link in between. The journal and the locks decide which power limit a GPU gets, so a
state file must also be a regular file of ours (or root's), with one link, that no one else can
write; a lock file is readable by its owner only (``flock`` works on a read-only descriptor, so
whoever can open it could hold it), and every wait for a lock has a bound. A file we are asked to
replace (a report) must be a regular file: renaming over ``/dev/full`` or a FIFO would destroy it.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import pwd
import secrets
import stat
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from . import realtime
from .errors import GpuBusyError, NotARegularFile
from .gpu.signals import announce, check_abandoned, left_behind
from .trusted_path import Owners, UntrustedPath, file_owners, opened_folder, problem_with, refuse, state_owners

MAX_STATE_FILE_BYTES = 1 << 20      # a journal entry is a few hundred bytes; more is not ours
STATE_FOLDER_MODE = 0o755
LOCK_FILE_MODE = 0o600
LOCK_WAIT_S = 30.0      # the journal's and the simulator's locks are held for milliseconds: longer is stuck
SAY_AFTER_S = 2.0       # a wait longer than this is said on the terminal (whose lock, how to stop)
MACHINE_STATE_DIR = Path("/var/lib/pytest-gpuenergy")
_OPEN_FLAGS = os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC    # never through a link, never blocking on a FIFO


class LockWaitTimeout(GpuBusyError):
    """A journal or simulator-state lock that stayed held past its bound (a stuck or hostile holder)."""


def atomic_write_text(path: Path, text: str, *, overwrite: bool = True, durable: bool = True,
                      owners: Owners | None = None) -> None:
    """Write ``text`` to ``path`` so that readers see the old or the new file, never a mix.

    With ``overwrite=False`` an existing file is left alone and ``FileExistsError`` is raised
    (the check and the rename are made atomic with a hard link, so two writers cannot both win).
    ``durable=False`` skips the fsyncs: still atomic against a killed process, not against a
    power cut; for state rewritten many times a second (the simulator's energy counter).
    An existing ``path`` that is not a regular file (a device, a folder, a FIFO) is refused with
    ``NotARegularFile`` (an ``OSError``) before anything is written. Missing folders are made; a
    folder on the way another user could change is refused (``UntrustedPath``, an ``OSError``).
    """
    path = Path(path)
    mode = 0o777 & ~_umask()
    with opened_folder(path.parent, owners=owners or file_owners(), create_mode=mode) as dir_fd:
        write_at(dir_fd, path.name, text.encode("utf-8"), shown=path, overwrite=overwrite, durable=durable,
                 mode=mode & 0o666)


def write_at(dir_fd: int, name: str, data: bytes, *, shown: Path, overwrite: bool = True, durable: bool = True,
             mode: int = 0o644) -> None:
    """``atomic_write_text`` into the folder open as ``dir_fd``: the temporary file, the rename and
    the fsync all go through that descriptor, so nothing can redirect them between the steps."""
    _refuse_non_regular(dir_fd, name, shown)
    tmp_name = f".{name}.{secrets.token_hex(4)}.tmp"
    fd = os.open(tmp_name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=dir_fd)
    try:
        try:
            os.fchmod(fd, mode)     # what open() would give it (mkstemp's 0600 otherwise)
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            if durable:
                os.fsync(fd)
        finally:
            os.close(fd)
        if overwrite:
            os.replace(tmp_name, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        else:
            _link_new(dir_fd, tmp_name, name)
            os.unlink(tmp_name, dir_fd=dir_fd)
        if durable:
            with contextlib.suppress(OSError):
                os.fsync(dir_fd)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp_name, dir_fd=dir_fd)
        raise


def _link_new(dir_fd: int, tmp_name: str, name: str) -> None:
    """Hard-link the finished temporary file to ``name``; ``FileExistsError`` if someone got there first.

    The link is atomic on local file systems and on NFS (no ``flock`` needed across hosts, so runs
    of several machines can save into one shared folder). On NFS a retried request whose first
    reply was lost reports "exists" for our own link: the temporary file's link count (2) tells.
    """
    try:
        os.link(tmp_name, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd, follow_symlinks=False)
    except FileExistsError:
        ours = os.stat(tmp_name, dir_fd=dir_fd, follow_symlinks=False)
        theirs = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        if ours.st_nlink == 2 and (ours.st_dev, ours.st_ino) == (theirs.st_dev, theirs.st_ino):
            return
        raise


def output_problem(path: Path) -> str | None:
    """Why a report could not be written to ``path`` (None where it looks writable): asked before a
    long run, so that a mistyped folder is said in a line at the start rather than after every test.
    A folder in its place, or no folder to write it in: its nearest existing folder is not a folder or
    not writable. (What only writing can find, a file someone else owns, is said when it is written.)"""
    if path.is_dir():
        return f"{path} is a folder; name a file"
    return folder_problem(path.parent)


def folder_problem(folder: Path) -> str | None:
    """Why files could not be written into ``folder`` (made if missing; None where it looks writable):
    its nearest existing folder is not a folder, or not writable."""
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    if not folder.is_dir():
        return f"{folder} is not a folder"
    if not os.access(folder, os.W_OK | os.X_OK):
        return f"{folder} is not writable by you"
    return None


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


def _refuse_non_regular(dir_fd: int, name: str, shown: Path) -> None:
    """Raise ``NotARegularFile`` if ``name`` (followed through a link) exists and is no regular file."""
    try:
        found = os.stat(name, dir_fd=dir_fd)
    except (OSError, ValueError):
        return   # missing (or unreachable): the write itself says what is wrong
    if not stat.S_ISREG(found.st_mode):
        raise NotARegularFile(
            f"{shown} is {_kind(found.st_mode)}, not a regular file: refusing to replace it; give the path of a file to write"
        )


def _kind(mode: int) -> str:
    kinds = ((stat.S_ISDIR, "a folder"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
             (stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISSOCK, "a socket"))
    return next((name for test, name in kinds if test(mode)), "a special file")


# -- state files: the journal, the locks, the simulator's GPUs ----------------------------------------

def state_folder(folder: Path) -> Path:
    """Create ``folder`` (``0755``) if missing and check the walk to it (see ``trusted_path``).

    In a folder someone else could change, anyone could replace or delete our journal entries,
    so a capped GPU could be forgotten; with the sticky bit (``/tmp``) only the owner of a file can.
    """
    with state_dir(folder):
        return Path(folder)


def state_dir(folder: Path, *, create: bool = True) -> contextlib.AbstractContextManager[int]:
    """The state folder ``folder`` open for a ``with`` block, reached by a checked walk (made if
    missing and ``create``; else a missing one raises ``FileNotFoundError``)."""
    return opened_folder(folder, owners=state_owners(), create_mode=STATE_FOLDER_MODE if create else None)


def open_state_file(dir_fd: int, name: str, flags: int, *, shown: Path, mode: int = 0o644) -> int:
    """``os.open`` a state file in the folder ``dir_fd`` without following a link (nor blocking on a
    FIFO), then check it on that descriptor; the caller closes it."""
    try:
        fd = os.open(name, flags | _OPEN_FLAGS, mode, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise refuse(str(shown), "is a symbolic link", folder=False) from None
        raise
    try:
        check_state_file(shown, os.fstat(fd))
    except BaseException:
        os.close(fd)
        raise
    return fd


def check_state_file(path: Path, found: os.stat_result) -> None:
    """Refuse a state file that another user could have planted or can change."""
    problem = problem_with(found, state_owners())
    if not stat.S_ISREG(found.st_mode):
        problem = f"is {_kind(found.st_mode)}, not a regular file"
    elif problem is None and found.st_nlink > 1:
        problem = f"has {found.st_nlink} hard links (it may be another file under a second name)"
    if problem is None:
        return
    raise UntrustedPath(
        f"{path} {problem}: pytest-gpuenergy refuses a journal, lock or state file someone else could have planted "
        f"(it decides which power limit a GPU gets); check the GPU's limit with `gpuenergy info`, delete the file, "
        f"and keep {path.parent} writable by you only"
    )


def read_state_at(dir_fd: int, name: str, *, shown: Path) -> str:
    """The text of a state file (``FileNotFoundError`` if missing); an unsafe file raises ``UntrustedPath``.

    Undecodable bytes or a file too large for a journal entry raise ``ValueError``.
    """
    fd = open_state_file(dir_fd, name, os.O_RDONLY, shown=shown)
    try:
        chunks, size = [], 0
        while size <= MAX_STATE_FILE_BYTES:
            chunk = os.read(fd, MAX_STATE_FILE_BYTES + 1 - size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    finally:
        os.close(fd)
    if size > MAX_STATE_FILE_BYTES:
        raise ValueError(f"larger than {MAX_STATE_FILE_BYTES} bytes")
    return b"".join(chunks).decode("utf-8")


def write_state_json(dir_fd: int, name: str, data: Any, *, shown: Path, durable: bool = True, compact: bool = False) -> None:
    """Replace a state file atomically in the folder ``dir_fd`` (a link or a non-file there is refused).

    ``compact``: one line, by the json module's C encoder (an indented document takes its Python
    one, ten times slower): for a file rewritten every few milliseconds (a simulated GPU's state)."""
    try:
        found = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        found = None
    if found is not None and not stat.S_ISREG(found.st_mode):
        kind = "a symbolic link" if stat.S_ISLNK(found.st_mode) else _kind(found.st_mode)
        raise refuse(str(shown), f"is {kind}, not a regular file", folder=False)
    text = json.dumps(data, indent=None if compact else 2, ensure_ascii=False) + "\n"
    write_at(dir_fd, name, text.encode("utf-8"), shown=shown, durable=durable, mode=0o644 & ~_umask())


# -- locks -------------------------------------------------------------------------------------------

def open_lock_file(dir_fd: int, name: str, *, shown: Path) -> int:
    """Open (creating, never truncating) a lock file in a checked folder, readable by its owner only."""
    fd = open_state_file(dir_fd, name, os.O_RDWR | os.O_CREAT, shown=shown, mode=LOCK_FILE_MODE)
    if stat.S_IMODE(os.fstat(fd).st_mode) != LOCK_FILE_MODE:
        with contextlib.suppress(OSError):      # one an earlier version made 0644: anyone could hold it
            os.fchmod(fd, LOCK_FILE_MODE)
    return fd


def lock_holder(fd: int) -> str:
    """Who holds the ``flock`` on ``fd``'s file, as the kernel says (``/proc/locks``), never as a file says."""
    try:
        found = os.fstat(fd)
        with open("/proc/locks", encoding="ascii", errors="replace") as table:
            lines = table.read().splitlines()
    except OSError:
        return "an unknown process"
    key = f"{os.major(found.st_dev):02x}:{os.minor(found.st_dev):02x}:{found.st_ino}"
    for line in lines:
        fields = line.split()
        if len(fields) >= 6 and fields[1] == "FLOCK" and fields[5] == key and fields[4].isdigit() and fields[4] != "0":
            return describe_process(int(fields[4]))
    return "an unknown process"


def describe_process(pid: int) -> str:
    """``pid 123 (user alice: python -m pytest ...)``, from ``/proc`` where it can be read."""
    user, command = "", ""
    with contextlib.suppress(OSError, KeyError, ValueError, IndexError):
        with open(f"/proc/{pid}/status", encoding="ascii", errors="replace") as status:
            uid = int(next(line for line in status if line.startswith("Uid:")).split()[1])
        user = f"user {pwd.getpwuid(uid).pw_name}" if uid != os.geteuid() else "you"
    with contextlib.suppress(OSError), open(f"/proc/{pid}/cmdline", "rb") as cmdline:
        command = " ".join(cmdline.read(200).replace(b"\0", b" ").decode(errors="replace").split())[:60]
    inside = ": ".join(part for part in (user, command) if part)
    return f"pid {pid}" + (f" ({inside})" if inside else "")


def wait_for_lock(fd: int, timeout_s: float, *, on_timeout: Callable[[str], BaseException],
                  waiting_note: Callable[[str], str] | None = None, say_after_s: float | None = None) -> None:
    """Take the exclusive ``flock`` on ``fd`` within ``timeout_s``, else raise ``on_timeout(holder)``.

    Never a blocking ``flock``: short sleeps, so that a signal (SIGTERM, Ctrl-C) acts at once, and a
    second signal during a restore ends the wait (``signals.check_abandoned``). A wait longer than
    ``say_after_s`` (default ``SAY_AFTER_S``) is said (``waiting_note(holder)``).
    """
    say_after_s = SAY_AFTER_S if say_after_s is None else say_after_s
    started = realtime.monotonic()
    deadline, pause_s, said = started + timeout_s, 0.001, False
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            pass
        now = realtime.monotonic()
        if now >= deadline:
            raise on_timeout(lock_holder(fd))
        check_abandoned()
        if not said and waiting_note is not None and timeout_s >= say_after_s and now - started >= say_after_s:
            said = True
            announce(waiting_note(lock_holder(fd)))
        realtime.sleep(min(pause_s, max(deadline - now, 0.0)))
        pause_s = min(pause_s * 2, 0.05)


@contextlib.contextmanager
def file_lock(folder: Path, name: str, *, timeout_s: float | None = None) -> Iterator[int]:
    """Hold an exclusive ``flock`` on ``folder/name`` for the block; yields ``folder``'s descriptor,
    through which the files the lock guards are read and written. Waits ``timeout_s`` at most
    (default ``LOCK_WAIT_S``; ``LockWaitTimeout`` names the holder, and what a restore that stops
    there leaves)."""
    shown = Path(folder) / name
    timeout_s = LOCK_WAIT_S if timeout_s is None else timeout_s

    def timed_out(holder: str) -> BaseException:
        return LockWaitTimeout(
            f"waited {timeout_s:g} s for the lock {shown}, held by {holder}: it is held for milliseconds "
            f"normally; end that process (the kernel then frees the lock){left_behind()}"
        )

    with state_dir(Path(folder)) as dir_fd:
        fd = open_lock_file(dir_fd, name, shown=shown)
        try:
            wait_for_lock(fd, timeout_s, on_timeout=timed_out,
                          waiting_note=lambda holder: f"gpuenergy: waiting for the lock {shown} held by {holder} "
                                                      f"(at most {timeout_s:g} s)")
            try:
                yield dir_fd
            finally:
                fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)


# -- where state lives -------------------------------------------------------------------------------

SIM_STATE_ENV = "GPUENERGY_SIM_STATE"


def sim_state_dir(env: Mapping[str, str] | None = None) -> Path:
    """The simulated GPUs' state folder: ``GPUENERGY_SIM_STATE`` (of ``env``, else of this process),
    else ``sim/`` of the user's state."""
    configured = (os.environ if env is None else env).get(SIM_STATE_ENV)
    return Path(configured).expanduser() if configured else user_state_dir() / "sim"


def user_state_dir() -> Path:
    """Where the state of this machine's GPUs lives (the journal, the locks; the simulator's GPUs below).

    A GPU's limit is machine-wide, so root's state must not depend on whose ``HOME`` it runs with
    (``sudo`` may keep the caller's): root uses ``/var/lib/pytest-gpuenergy``, a folder of the
    machine like sudo's own. Other users keep theirs in the XDG state folder
    (``~/.local/state/pytest-gpuenergy``), unless the admin made ``/var/lib/pytest-gpuenergy``
    theirs. ``XDG_STATE_HOME``, set explicitly, wins for everyone (the walk to it is checked like any
    other: under ``sudo -E`` the caller's folder is refused, not used).
    """
    configured = os.environ.get("XDG_STATE_HOME")
    if configured:
        return Path(configured) / "pytest-gpuenergy"
    if os.geteuid() == 0 or _machine_folder_is_mine():
        return MACHINE_STATE_DIR
    return Path(os.path.expanduser("~")) / ".local" / "state" / "pytest-gpuenergy"


def _machine_folder_is_mine() -> bool:
    try:
        found = os.stat(MACHINE_STATE_DIR)
    except OSError:
        return False
    return found.st_uid == os.geteuid() and problem_with(found, state_owners()) is None and os.access(MACHINE_STATE_DIR, os.W_OK)
