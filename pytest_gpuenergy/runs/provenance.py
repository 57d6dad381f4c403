"""Where a run came from: the machine (GPUs, driver, CUDA, torch, host) and the commit, captured
once per session and written into every document."""

from __future__ import annotations

import importlib.metadata
import os
import platform
import socket
import subprocess
import sys
from collections.abc import Iterable
from typing import Any

_GIT_TIMEOUT_S = 5.0


def collect_machine_info(backend: Any, gpus: Iterable[Any]) -> dict[str, Any]:
    """What a result depends on besides the code: host, driver, CUDA, torch, the GPUs' limits.

    torch is never imported here (it takes seconds); its version comes from the installed
    distribution, and the CUDA version it was built with only when the tests imported it.
    """
    torch = sys.modules.get("torch")
    cuda = getattr(getattr(torch, "version", None), "cuda", None) if torch is not None else None
    info: dict[str, Any] = {
        "host": socket.gethostname(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "backend": getattr(backend, "name", None),
        "simulated": bool(getattr(backend, "simulated", False)),
        "driver": getattr(backend, "driver_version", None),
        "cuda_driver": getattr(backend, "cuda_driver_version", None),   # "12.4", from NVML (gpu/nvidia.py)
        "cuda": cuda,
        "torch": _distribution_version("torch"),
        "pytest_gpuenergy": _distribution_version("pytest-gpuenergy"),
        "gpus": [_gpu_info(gpu) for gpu in gpus],
    }
    return info


def _gpu_info(gpu: Any) -> dict[str, Any]:
    entry: dict[str, Any] = {"index": gpu.index, "name": gpu.name, "uuid": gpu.uuid}
    try:
        limits = gpu.limits()
    except Exception:  # a GPU that cannot report limits still belongs in the description
        return entry
    entry.update(
        default_limit_w=limits.default_mw / 1000,
        min_limit_w=limits.min_mw / 1000,
        max_limit_w=limits.max_mw / 1000,
    )
    return entry


def _distribution_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def collect_commit_info(path: str | os.PathLike[str]) -> dict[str, Any] | None:
    """The git commit the run measured (id, branch, dirty), or None; never raises.

    On a detached checkout (CI) the branch comes from ``GITHUB_HEAD_REF``/``GITHUB_REF_NAME``
    or ``CI_COMMIT_REF_NAME`` when set. ``dirty`` ignores untracked files: the run document
    about to be written is one.
    """
    commit_id = _git(path, "rev-parse", "HEAD")
    if not commit_id:
        return None
    branch = _git(path, "rev-parse", "--abbrev-ref", "HEAD")
    if branch in (None, "HEAD"):
        branch = next((os.environ[v] for v in ("GITHUB_HEAD_REF", "GITHUB_REF_NAME", "CI_COMMIT_REF_NAME")
                       if os.environ.get(v)), None)
    status = _git(path, "status", "--porcelain", "--untracked-files=no")
    return {"id": commit_id, "branch": branch, "dirty": None if status is None else bool(status)}


def _git(path: str | os.PathLike[str], *args: str) -> str | None:
    try:
        proc = subprocess.run(
            ["git", *args], cwd=path, capture_output=True, text=True, timeout=_GIT_TIMEOUT_S,
            env={**os.environ, "GIT_OPTIONAL_LOCKS": "0"},
        )
    except (OSError, subprocess.SubprocessError, ValueError):
        return None
    return proc.stdout.strip() if proc.returncode == 0 else None


