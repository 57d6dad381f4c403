"""Signals that arrive while a power limit is being put back: the restore finishes first.

While a test holds a GPU at a changed setting, SIGTERM and SIGHUP become ``KeyboardInterrupt``
(``guard_termination``) so that fixtures tear down and restore the GPUs' limits. Only then: a
session that changes nothing leaves the process's signal handling as it found it, and a child
forked meanwhile (multiprocessing) gets the default handling back, so that ``Process.terminate()``
still ends it quietly. A second signal during that restore (an impatient user, a CI
runner that sends SIGTERM twice) would otherwise raise inside it, between retries, and the process
would exit with the GPU still capped and nothing said. While a restore runs these signals are
held; the restore finishes, and then the first one held is delivered as if it came just then,
unless the process is already stopping (``set_stopping``: pytest handled an interrupt and now
tears down), where raising again would only abort the teardown. Inside ``delivered_at_end`` (the
plugin wraps a test's teardown in it) the signal waits for the end of that block instead, so the
rest of the teardown (the GPU's lock) still runs. A hard kill (SIGKILL) cannot be held: the
journal is there for that.

A restore that cannot finish must not hold the process forever either: after a second signal, a
restore that waits (for a lock: ``check_abandoned`` is called by every wait) stops with
``RestoreAbandoned``, and says which GPU it leaves at which setting and the command that puts it
back (``note_left``: the journal notes every setting it records until it is restored).

Signal handlers belong to the process, so the place that announces a held signal is too: the
plugin points it at the terminal; elsewhere it is standard error.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any

HELD_SIGNALS = ("SIGINT", "SIGTERM", "SIGHUP")


def _to_stderr(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


_announce: Callable[[str], None] = _to_stderr
_stopping = False
_postponing = 0                 # depth of delivered_at_end blocks
_postponed: list[int] = []
_restoring: list[str] = []      # what the signals_held blocks in progress do, outermost first
_again: list[str] = []          # a second signal's name, received inside them
_gave_up: list[str] = []        # a restore stopped after a second signal: later ones wait for nothing
_left: dict[str, str] = {}      # what a stopped restore would leave changed, and its fix


class RestoreAbandoned(KeyboardInterrupt):
    """A second signal while a restore waited: the restore stops there (a KeyboardInterrupt, so the
    process stops too); the message says which GPU is left at which setting and how to fix it."""


def set_stopping(stopping: bool) -> None:
    """Whether the process is already stopping after an interrupt (a held signal is then dropped).
    The end of a stop (``False``) also forgets a restore given up (``gave_up``)."""
    global _stopping
    _stopping = stopping
    if not stopping:
        _gave_up.clear()


def is_stopping() -> bool:
    return _stopping


def announce(text: str) -> None:
    _announce(text)


def announce_with(writer: Callable[[str], None] | None) -> None:
    """Where a held signal is announced (None: standard error again)."""
    global _announce
    _announce = writer or _to_stderr


@contextlib.contextmanager
def signals_held(doing: str) -> Iterator[None]:
    """Hold SIGINT, SIGTERM and SIGHUP for the block (``doing`` says what, in the announcement).

    Only the main thread can install handlers; elsewhere the block runs unprotected. Blocks may
    nest: the inner one hands a held signal to the outer one.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    held: list[int] = []

    def hold(signum: int, frame: Any) -> None:
        name = signal.Signals(signum).name
        if not held:
            _announce(f"gpuenergy: {name} received while {doing}: finishing that first, then stopping")
        elif not _again:
            _again.append(name)
        held.append(signum)

    previous = {}
    for name in HELD_SIGNALS:
        number = getattr(signal, name, None)
        if number is not None and signal.getsignal(number) not in (signal.SIG_IGN, None):
            previous[number] = signal.signal(number, hold)
    _restoring.append(doing)
    try:
        yield
    except RestoreAbandoned:
        held.clear()        # it stops now: nothing is delivered later
        raise
    finally:
        _restoring.pop()
        if not _restoring:
            _again.clear()
        for number, handler in previous.items():
            signal.signal(number, handler)
        if held and not _stopping:
            _deliver(held[0])


def check_abandoned() -> None:
    """Raise ``RestoreAbandoned`` where a second signal came during a restore (every wait calls this).

    Once one restore stopped so, every later wait of a restore in this process stops at once: the
    user asked twice to stop, and the end of the session must not wait on the same lock again."""
    if not _restoring or not (_again or _gave_up):
        return
    why = f"{_again[0]} received again" if _again else f"stopping after {_gave_up[0]}"
    text = (f"gpuenergy: {why} while {_restoring[-1]}: stopped where it waited, "
            f"without finishing{left_behind() or '; nothing was left changed'}")
    _gave_up.append(_again[0] if _again else _gave_up[0])
    _announce(text)
    raise RestoreAbandoned(text)


def gave_up() -> bool:
    """Whether a restore of this process stopped after a second signal (a repair then tries no more)."""
    return bool(_gave_up)


def note_left(key: str, text: str) -> None:
    """Note a setting that stays changed until ``note_back(key)``: ``text`` names the GPU, the
    setting, the one before, and the command that puts it back."""
    _left[key] = text


def note_back(key: str) -> None:
    _left.pop(key, None)


def left_behind() -> str:
    """``; left changed: ...`` for every noted setting, or "" (the end of a stopped restore's message)."""
    return "; left changed: " + "; ".join(_left.values()) if _left else ""


def _deliver(signum: int) -> None:
    if _postponing:
        _postponed.append(signum)
    else:
        signal.raise_signal(signum)


@contextlib.contextmanager
def delivered_at_end() -> Iterator[None]:
    """A signal held by a restore inside the block is delivered when the block ends, not the restore."""
    global _postponing
    _postponing += 1
    try:
        yield
    finally:
        _postponing -= 1
        if not _postponing and _postponed:
            signum = _postponed[0]
            _postponed.clear()
            if not _stopping:
                signal.raise_signal(signum)


# -- SIGTERM and SIGHUP while a GPU is held at a changed setting -----------------------------------

_TERMINATION_SIGNALS = ("SIGTERM", "SIGHUP")
_guarded: dict[int, Any] = {}       # signal number -> the handler it had before the guard
_guarded_pid: int | None = None
_fork_hook_registered = False


def guard_termination() -> None:
    """Turn SIGTERM and SIGHUP into ``KeyboardInterrupt`` from now on, until ``unguard_termination``.

    By default both kill the process on the spot, leaving a GPU capped until the journal is
    replayed. Only handlers nobody else installed are replaced; the old ones come back at the end.
    Calling it again does nothing; it needs the main thread (elsewhere it does nothing).
    """
    global _guarded_pid, _fork_hook_registered
    if _guarded or threading.current_thread() is not threading.main_thread():
        return
    for name in _TERMINATION_SIGNALS:
        number = getattr(signal, name, None)
        if number is not None and signal.getsignal(number) in (signal.SIG_DFL, None):
            _guarded[number] = signal.signal(number, _raise_interrupt)
    _guarded_pid = os.getpid()
    if not _fork_hook_registered and hasattr(os, "register_at_fork"):
        os.register_at_fork(after_in_child=_forget_in_child)
        _fork_hook_registered = True


def unguard_termination() -> None:
    """Give SIGTERM and SIGHUP back the handlers they had before ``guard_termination``."""
    global _guarded_pid
    if threading.current_thread() is not threading.main_thread():
        return
    for number, handler in _guarded.items():
        if signal.getsignal(number) is _raise_interrupt:
            signal.signal(number, handler)
    _guarded.clear()
    _guarded_pid = None


def is_guarded() -> bool:
    return bool(_guarded)


def _forget_in_child() -> None:
    """A forked child holds no GPU setting of ours: it gets the default handling back."""
    global _guarded_pid
    for number, handler in _guarded.items():
        with contextlib.suppress(OSError, ValueError):
            signal.signal(number, handler)
    _guarded.clear()
    _guarded_pid = None


def _raise_interrupt(signum: int, frame: Any) -> None:
    name = signal.Signals(signum).name
    if _guarded_pid is not None and os.getpid() != _guarded_pid:
        # A child made without fork's hooks (os.fork from C code): behave as if never guarded.
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)
        return
    if is_stopping():   # raising again would abort the teardown that restores the limits
        announce(f"gpuenergy: {name} received again: already stopping, after the GPUs' limits are restored")
        return
    raise KeyboardInterrupt(f"{name} received: pytest-gpuenergy restores the GPUs' limits and stops")
