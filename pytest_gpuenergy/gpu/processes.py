"""Whether a process still runs: the journal asks before repairing a cap, the simulator before
showing a process on a GPU."""

from __future__ import annotations

import os


def process_start(pid: int) -> str:
    """The kernel's start time of ``pid`` (Linux), so a recycled pid is not taken for the owner."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            fields = stat.read().rsplit(b")", 1)[1].split()
        return fields[19].decode()
    except (OSError, IndexError):
        return ""


def is_alive(pid: int, started: str = "") -> bool:
    """Whether ``pid`` runs (and, given ``started`` from :func:`process_start`, is that same process)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return not started or process_start(pid) in ("", started)
