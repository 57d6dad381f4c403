"""A small pytest plugin a fleet task loads into its session: how many tests are done, in a file.

pytest's own output shows a percentage only at the end of a line of dots, so a suite in one
file reads 0 % until it ends. The task starts pytest with ``-p pytest_gpuenergy.fleet.progress``
and ``GPUENERGY_FLEET_PROGRESS=<file>``; the session (the pytest-xdist controller, never a
worker) rewrites the file with ``DONE TOTAL`` after each test, atomically, and the task reads it
for its ``running`` events.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

PROGRESS_ENV = "GPUENERGY_FLEET_PROGRESS"
_counts = {"done": 0, "total": 0}


def _target(config: pytest.Config) -> Path | None:
    value = os.environ.get(PROGRESS_ENV)
    if not value or hasattr(config, "workerinput"):
        return None
    return Path(value)


def _write(config: pytest.Config) -> None:
    path = _target(config)
    if path is None:
        return
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        tmp.write_text(f"{_counts['done']} {_counts['total']}\n", encoding="ascii")
        os.replace(tmp, path)
    except OSError:
        pass   # progress is a nicety: never a reason for a session to fail


def pytest_collection_finish(session: pytest.Session) -> None:
    if not hasattr(session.config, "workerinput"):
        _counts["total"] = len(session.items)
        _write(session.config)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_node_collection_finished(node: Any, ids: list[str]) -> None:
    """pytest-xdist: the controller collects nothing itself; each worker reports the same ids."""
    _counts["total"] = max(_counts["total"], len(ids))
    _write(node.config)


def pytest_runtest_logfinish(nodeid: str, location: Any) -> None:
    _counts["done"] += 1
    if _config is not None:
        _write(_config)


_config: pytest.Config | None = None


def pytest_configure(config: pytest.Config) -> None:
    global _config
    _config = config


def read_progress(path: Path) -> tuple[int, int] | None:
    """``(done, total)`` as the session last wrote it, or None before collection ended."""
    try:
        done, total = (int(x) for x in path.read_text(encoding="ascii").split())
    except (OSError, ValueError):
        return None
    return done, total
