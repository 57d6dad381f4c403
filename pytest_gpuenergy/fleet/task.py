"""What runs on a node: the suite in a pytest subprocess, its run documents back to the driver.

The task is a generator (a Ray streaming task): it yields a ``started`` event naming its node,
``running`` events with pytest's own progress while the suite runs, and a ``finished`` event
with pytest's exit code, the tail of its output and every run document the session saved, as
JSON text. Nothing travels through a shared filesystem: the session saves into a temporary
folder on the node and the documents ride back in the event.

pytest runs in its own process, not inside the Ray worker, for the plugin's guarantees: its
signal handling (SIGTERM becomes ``KeyboardInterrupt``, so fixtures restore the caps), its
journal and its locks work as in any session. The child is told by the kernel when the Ray
worker dies (``PR_SET_PDEATHSIG``: SIGTERM), so a worker that is killed or a node that is
shut down still gets its caps restored by the session, and pytest does not outlive its task.

Plain Python: ``run_suite`` is called by the Ray task in ``driver.py`` and directly by tests.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from ..fileio import SIM_STATE_ENV, sim_state_dir
from ..runs.store import slug
from ..sim.models import MODELS_ENV
from .plan import NEUTRAL_INI, TaskSpec, sim_model_for
from .progress import PROGRESS_ENV, read_progress

HEARTBEAT_S = 5.0
RESTORE_GRACE_S = 120.0      # after SIGTERM, how long the session gets to restore its caps and exit
OUTPUT_TAIL_CHARS = 6000
STEP_SUMMARY_ENV = "GITHUB_STEP_SUMMARY"   # only the driver appends the fleet's report there

# Runs first in the child: ask for SIGTERM when the parent (the Ray worker) dies, then become pytest.
# argv[1] is the parent's pid: if it is already gone, the request came too late and the child stops.
LAUNCHER = """\
import ctypes, os, signal, sys
try:
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)   # PR_SET_PDEATHSIG (Linux)
except Exception:
    pass
if os.getppid() != int(sys.argv[1]):
    sys.exit("gpuenergy fleet: the Ray worker that started this pytest is gone")
os.execv(sys.executable, [sys.executable, "-m", "pytest", *sys.argv[2:]])
"""

_SUMMARY = re.compile(r"^=+ (.+ in [0-9.]+s.*?) =+$", re.MULTILINE)
_SHORT_SUMMARY = "short test summary info"


def sim_state_for(spec: TaskSpec, env: Mapping[str, str] | None = None) -> Path:
    """The node's simulated machine for this task's model and GPU count, under its ``GPUENERGY_SIM_STATE``.

    A stable folder (not a temporary one), like a real GPU's own state: a cap a killed session
    left is found and repaired by the next session of the same model on that node.
    """
    return sim_state_dir(env) / "fleet" / f"{slug(spec.model)}-x{spec.num_gpus}"


def task_env(spec: TaskSpec, base: Mapping[str, str]) -> dict[str, str]:
    """The pytest session's environment: the node's, the driver's settings, and simulated GPUs if asked."""
    env = dict(base)
    env.pop(STEP_SUMMARY_ENV, None)
    env.update(dict(spec.env))
    env["PYTHONUNBUFFERED"] = "1"     # the driver reads pytest's progress from its output as it comes
    if spec.simulate:
        env[MODELS_ENV] = ",".join([sim_model_for(spec.model)] * spec.num_gpus)
        env[SIM_STATE_ENV] = str(sim_state_for(spec, base))
        env["GPUENERGY_BACKEND"] = "sim"
        env.pop("CUDA_VISIBLE_DEVICES", None)   # Ray's fake GPU ids mean nothing to the simulator
    return env


def pytest_command(spec: TaskSpec, storage: Path, parent_pid: int) -> list[str]:
    """pytest with the user's arguments, saving into ``storage``; the gate's ini settings switched off."""
    command = [sys.executable, "-c", LAUNCHER, str(parent_pid), "-p", "pytest_gpuenergy.fleet.progress",
               f"--energy-storage={storage}", "--energy-save"]
    for name in NEUTRAL_INI:
        if name != "energy_save":
            command += ["-o", f"{name}="]
    if spec.xdist_workers and not _has_xdist_option(spec.pytest_args):
        command += ["-n", str(spec.xdist_workers)]
    return command + list(spec.pytest_args)


def _has_xdist_option(args: tuple[str, ...]) -> bool:
    return any(a in ("-n", "--numprocesses") or a.startswith(("--numprocesses=", "-n=")) or
               (a.startswith("-n") and a[2:].isdigit()) for a in args)


def run_suite(spec: TaskSpec, node: dict[str, Any], *, workdir: str | None = None,
              heartbeat_s: float = HEARTBEAT_S) -> Iterator[dict[str, Any]]:
    """Run the suite on this node; yields ``started``, ``running``... and ``finished`` events (plain dicts)."""
    started = time.monotonic()
    yield {"event": "started", "model": spec.model, "node": node, "pid": os.getpid()}
    tmp = Path(tempfile.mkdtemp(prefix="gpuenergy-fleet-"))
    try:
        storage, log, progress = tmp / "runs", tmp / "pytest.log", tmp / "progress"
        env = {**task_env(spec, os.environ), PROGRESS_ENV: str(progress)}
        with open(log, "wb") as out:
            # Its own process group: Ray kills a dead worker's group with SIGKILL, which would race the
            # session's restore; the session gets SIGTERM from PR_SET_PDEATHSIG instead and restores.
            proc = subprocess.Popen(pytest_command(spec, storage, os.getpid()), stdout=out, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, env=env, cwd=workdir, start_new_session=True)
        try:
            while True:
                try:
                    code = proc.wait(timeout=heartbeat_s)
                    break
                except subprocess.TimeoutExpired:
                    done_total = read_progress(progress)
                    yield {"event": "running", "model": spec.model, "tests_done": done_total[0] if done_total else None,
                           "tests_total": done_total[1] if done_total else None, "elapsed_s": time.monotonic() - started}
        finally:
            _stop(proc)   # cancelled or closed early: SIGTERM, and the session restores its caps
        output = _tail(log, OUTPUT_TAIL_CHARS)
        yield {
            "event": "finished", "model": spec.model, "node": node, "exit_code": code,
            "documents": collect_documents(storage), "output_tail": output,
            "summary": summary_line(output), "failures": failure_lines(output),
            "sim_state": str(sim_state_for(spec)) if spec.simulate else None,
            "wall_s": time.monotonic() - started,
        }
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=RESTORE_GRACE_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def collect_documents(storage: Path) -> list[dict[str, str]]:
    """Every run document the session saved, as ``{"path": relative path, "text": JSON text}``."""
    found = []
    for path in sorted(storage.glob("*/*/*.json")):
        if path.name.startswith("."):
            continue
        found.append({"path": str(path.relative_to(storage)), "text": path.read_text(encoding="utf-8")})
    return found


def _tail(path: Path, chars: int = 4096) -> str:
    try:
        with open(path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            size = handle.tell()
            handle.seek(max(0, size - chars * 4))
            return handle.read().decode("utf-8", "replace")[-chars:]
    except OSError:
        return ""


def summary_line(output: str) -> str | None:
    """pytest's closing line without its ``=`` (``3 passed, 1 failed in 2.10s``), or None."""
    found = _SUMMARY.findall(output)
    return found[-1].strip() if found else None


def failure_lines(output: str, limit: int = 10) -> list[str]:
    """The ``FAILED``/``ERROR`` lines of pytest's short test summary, at most ``limit``."""
    at = output.rfind(_SHORT_SUMMARY)
    if at < 0:
        return []
    lines = [line for line in output[at:].splitlines()[1:] if line.startswith(("FAILED ", "ERROR "))]
    return lines[:limit]
