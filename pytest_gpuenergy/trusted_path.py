"""Paths no other user can redirect: every folder from ``/`` down, checked on the descriptor then used.

Setting a power limit needs root, so on a shared node the plugin runs as root, and the journal and
the locks it keeps decide which limit root applies and when: they are a privilege boundary. A check
of a path followed by a use of that path is two steps, and whoever can change a folder on the way
in between (rename it, swap a symbolic link in) decides what the use touches. So a path is walked
the way OpenSSH's StrictModes judges a user's files and ``openat`` walks use them: from ``/``, one
component at a time, each opened with ``O_NOFOLLOW`` relative to the folder before it and checked
with ``fstat`` on that very descriptor; the file at the end is opened relative to the last folder's
descriptor, and that descriptor is what is used.

A component must belong to root or to the running user and be writable by no one else, unless it
is a sticky folder (``/tmp``), where only the owner of an entry can rename or delete it (the entry
below is then checked for its owner like every other). A symbolic link is followed only where it
passed the same test itself (owned by root or us, in a folder no one else can write): the links a
distribution or an admin puts in (``/var/run``, a state folder moved to other storage) keep
working, and one another user planted is refused. Group write counts as someone else's unless the
group is the owner's own (a user private group, as ``umask 002`` systems give every user); for the
files a user asks for (run documents, reports) a folder the user's group may write is accepted:
that is how a team shares a storage folder.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import grp
import os
import pwd
import stat
import weakref
from collections.abc import Iterator
from dataclasses import dataclass

from .errors import UnsafeStateFile

_MAX_LINKS = 40                  # as the kernel's own limit on links in one lookup
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class UntrustedPath(UnsafeStateFile, OSError):
    """A component of a path another user could change (their folder, one every user can write, a
    link they planted): what it leads to is not used. An ``OSError`` too, so that every caller that
    reports a failed write reports this one."""

    def __str__(self) -> str:       # OSError's own str() would show its args as a tuple
        return str(self.args[0]) if self.args else ""


@dataclass(frozen=True)
class Owners:
    """Whose folders and files a walk trusts."""

    uids: frozenset[int]
    group_may_write: bool        # a folder the owner's group may write is accepted (user files only)

    def describe(self) -> str:
        me = os.geteuid()
        others = sorted(uid for uid in self.uids if uid not in (0, me))
        names = ["root"] + ([] if me == 0 else [f"you (uid {me})"]) + [f"uid {uid} (who ran sudo)" for uid in others]
        return " or ".join(names)


def state_owners() -> Owners:
    """For the journal, the locks and the simulator's state: root and the running user only."""
    return Owners(frozenset({0, os.geteuid()}), group_may_write=False)


def file_owners() -> Owners:
    """For the files a user asks for (storage, reports): also the user who ran ``sudo``, whose
    checkout ``sudo pytest`` runs in, and a folder their group shares."""
    uids = {0, os.geteuid()}
    sudo_uid = os.environ.get("SUDO_UID", "")
    if os.geteuid() == 0 and sudo_uid.isdigit():
        uids.add(int(sudo_uid))
    return Owners(frozenset(uids), group_may_write=True)


# -- judging one component ---------------------------------------------------------------------------

@functools.lru_cache(maxsize=64)
def _private_group(gid: int, uid: int) -> bool:
    """Whether ``gid`` is the user private group of ``uid``: its own name, nobody else in it."""
    try:
        user = pwd.getpwuid(uid)
        group = grp.getgrgid(gid)
    except KeyError:
        return False
    return user.pw_gid == gid and group.gr_name == user.pw_name and set(group.gr_mem) <= {user.pw_name}


def _group_name(gid: int) -> str:
    try:
        return grp.getgrgid(gid).gr_name
    except KeyError:
        return str(gid)


def problem_with(found: os.stat_result, owners: Owners) -> str | None:
    """Why a folder or file another user could change is not trusted (None: it is)."""
    if found.st_uid not in owners.uids:
        return f"belongs to another user (uid {found.st_uid}; you are uid {os.geteuid()})"
    if found.st_mode & stat.S_ISVTX and stat.S_ISDIR(found.st_mode):
        return None      # sticky: only an entry's owner can move it, and each entry is checked
    if found.st_mode & stat.S_IWOTH:
        return "is writable by every user"
    if (found.st_mode & stat.S_IWGRP and not owners.group_may_write
            and not _private_group(found.st_gid, found.st_uid)):
        return f"is writable by the group {_group_name(found.st_gid)}"
    return None


def refuse(shown: str, problem: str, *, folder: bool) -> UntrustedPath:
    """The one-line error for an untrusted component: what it is, why that matters, the fix."""
    if "another user" in problem:
        fix = "give it to root or to you (chown), or keep the state elsewhere"
    elif "symbolic link" in problem:
        fix = "delete the link if you did not make it"
    else:
        who = "o" if "every user" in problem else "g"
        fix = f"make it yours only (chmod {who}-w {shown})" + (" or sticky (chmod +t)" if folder else "")
    return UntrustedPath(
        f"{shown} {problem}: another user could redirect what pytest-gpuenergy reads or writes there "
        f"(the power-limit journal, the GPU locks, saved runs); {fix}"
    )


# -- the walk ----------------------------------------------------------------------------------------

class _Walk:
    """The descriptors of the folders from ``/`` to where a walk is now (``..`` goes back one)."""

    def __init__(self, owners: Owners) -> None:
        self.owners = owners
        self.fds: list[int] = []
        self.shown: list[str] = []
        self.links = 0
        self._push(os.open("/", _DIR_FLAGS), "/")

    def _push(self, fd: int, shown: str) -> None:
        self.fds.append(fd)          # first: a refused folder's descriptor is closed with the others
        self.shown.append(shown)
        problem = problem_with(os.fstat(fd), self.owners)
        if problem is not None:
            raise refuse(shown, problem, folder=True)

    def back_to_root(self) -> None:
        while len(self.fds) > 1:
            os.close(self.fds.pop())
            self.shown.pop()

    def up(self) -> None:
        if len(self.fds) > 1:
            os.close(self.fds.pop())
            self.shown.pop()

    def here(self, name: str) -> str:
        return os.path.join(self.shown[-1], name)

    def close(self, keep: int | None = None) -> None:
        for fd in self.fds:
            if fd != keep:
                os.close(fd)
        self.fds.clear()

    def down(self, name: str, create_mode: int | None) -> str | None:
        """Enter ``name``; returns a link's target instead where ``name`` is a trusted link."""
        parent, shown = self.fds[-1], self.here(name)
        made = False
        for _ in range(3):      # a folder made or removed by someone else meanwhile: look again
            try:
                fd = _open_dir(name, parent)
            except FileNotFoundError:
                if create_mode is None:
                    raise FileNotFoundError(errno.ENOENT, "No such file or directory", shown) from None
                with contextlib.suppress(FileExistsError):
                    os.mkdir(name, create_mode, dir_fd=parent)
                    made = True
                continue
            except OSError as exc:
                if exc.errno not in (errno.ELOOP, errno.ENOTDIR, errno.EMLINK):
                    raise
                return self._link(name, shown)
            if made and create_mode is not None:
                with contextlib.suppress(OSError):      # exactly this mode, whatever the umask
                    os.fchmod(fd, create_mode)
            self._push(fd, shown)
            return None
        raise FileNotFoundError(errno.ENOENT, "No such file or directory (it keeps changing)", shown)

    def _link(self, name: str, shown: str) -> str:
        found = os.stat(name, dir_fd=self.fds[-1], follow_symlinks=False)
        if not stat.S_ISLNK(found.st_mode):
            raise NotADirectoryError(errno.ENOTDIR, "Not a directory", shown)
        if found.st_uid not in self.owners.uids:
            raise refuse(shown, f"is a symbolic link of another user (uid {found.st_uid})", folder=False)
        self.links += 1
        if self.links > _MAX_LINKS:
            raise OSError(errno.ELOOP, "Too many levels of symbolic links", shown)
        return os.readlink(name, dir_fd=self.fds[-1])


def _open_dir(name: str, parent: int) -> int:
    """Open the folder ``name`` in ``parent``, never through a link. A folder we may pass but not list
    (``/home`` at 0711) is opened ``O_PATH`` where Linux has it: enough to check it and go on."""
    try:
        return os.open(name, _DIR_FLAGS, dir_fd=parent)
    except PermissionError:
        if not hasattr(os, "O_PATH"):
            raise
        return os.open(name, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=parent)


def _parts(path: str) -> list[str]:
    return [part for part in path.split("/") if part not in ("", ".")]


def open_folder(path: str | os.PathLike[str], *, owners: Owners, create_mode: int | None = None) -> int:
    """A descriptor (``O_DIRECTORY``) of the folder ``path``, reached by a checked walk from ``/``.

    ``create_mode``: folders that are missing are made with this mode; without it a missing one
    raises ``FileNotFoundError``. A component that is not trusted raises ``UntrustedPath`` naming
    it. The caller closes the descriptor.
    """
    pending = list(reversed(_parts(os.path.abspath(os.fspath(path)))))
    walk = _Walk(owners)
    try:
        while pending:
            name = pending.pop()
            if name == "..":
                walk.up()
                continue
            target = walk.down(name, create_mode)
            if target is not None:
                if target.startswith("/"):
                    walk.back_to_root()
                pending.extend(reversed(_parts(target)))
        result = walk.fds[-1]
    except BaseException:
        walk.close()
        raise
    walk.close(keep=result)
    return result


@contextlib.contextmanager
def opened_folder(path: str | os.PathLike[str], *, owners: Owners, create_mode: int | None = None) -> Iterator[int]:
    """``open_folder`` for the block; the descriptor is closed after it."""
    fd = open_folder(path, owners=owners, create_mode=create_mode)
    try:
        yield fd
    finally:
        os.close(fd)


class HeldFolder:
    """A folder's descriptor from a checked walk, kept for repeated use (the simulator reads its
    state every few milliseconds). Once a folder passed, only root or we can change it or any folder
    above it, so the descriptor stays good; it is walked to again only when the path no longer names
    that folder (it was deleted, or moved and made anew)."""

    def __init__(self, path: str | os.PathLike[str], *, owners: Owners, create_mode: int | None = None) -> None:
        self.path = os.fspath(path)
        self.owners = owners
        self.create_mode = create_mode
        self._fd: int | None = None
        self._identity: tuple[int, int] | None = None
        self._closer: weakref.finalize | None = None

    def fd(self, *, create: bool = False) -> int:
        """The folder's descriptor (``FileNotFoundError`` where it is missing and not ``create``).

        No lock: two threads that both find it stale open it twice, and the spare descriptor is
        closed when this object goes (a lock held across ``fork`` would hang the child)."""
        if self._fd is not None:
            try:
                found = os.stat(self.path)
                if (found.st_dev, found.st_ino) == self._identity:
                    return self._fd
            except OSError:
                pass
            self._drop()
        fd = open_folder(self.path, owners=self.owners, create_mode=self.create_mode if create else None)
        held = os.fstat(fd)
        self._fd, self._identity = fd, (held.st_dev, held.st_ino)
        self._closer = weakref.finalize(self, os.close, fd)
        return fd

    def _drop(self) -> None:
        if self._closer is not None:
            self._closer()          # closes the descriptor once
        self._fd, self._identity, self._closer = None, None, None

    def close(self) -> None:
        self._drop()
