"""The driver's side of a fleet run: connect to Ray, start one task per GPU model, follow them.

Ray does the scheduling (``num_gpus`` and ``accelerator_type`` place each task on a node of its
model and give it GPUs no other task holds); this module only submits, follows and reports. Each
task is a streaming generator (``task.run_suite``): its events arrive as they are yielded, so the
driver prints when a model's task starts (and on which node), how far its pytest is, and when it
ends. A task that dies (its worker killed, its node lost) raises a Ray error in place of its next
event: that model is recorded as failed with its node named, and the others go on.

Tasks are never retried (``max_retries=0``): a suite that died halfway would otherwise run
again from the start, on the same GPUs, with the first attempt's figures lost.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import RayMissing
from .plan import PROGRESS_EVERY_S, START_TIMEOUT_S, LocalCluster, TaskSpec, node_text
from .task import run_suite

CANCEL_GRACE_S = 150.0
SHIP_EXCLUDES = [".git", ".venv", "venv", ".energy", "__pycache__", "*.pyc", ".pytest_cache", ".hypothesis",
                 ".gpuenergy-sim", "node_modules"]

Say = Callable[[str], None]


@dataclass
class TaskState:
    """What the driver knows of one task."""

    spec: TaskSpec
    submitted_at: float
    status: str = "pending"           # pending, running, finished, failed
    node: dict[str, Any] | None = None
    tests_done: int | None = None
    tests_total: int | None = None
    started_at: float | None = None
    result: dict[str, Any] | None = None   # the task's ``finished`` event
    error: str | None = None               # why it did not finish, naming the node

    @property
    def model(self) -> str:
        return self.spec.model

    @property
    def where(self) -> str:
        node = self.node or {}
        return node_text(node.get("hostname"), node.get("address"), node.get("node_id")) if node else "no node yet"

    def fail(self, why: str) -> None:
        self.status = "failed"
        where = f"on {self.where}" if self.node else "before it started on a node"
        self.error = f"{self.model}: the task died {where}: {why}"


@dataclass
class Cluster:
    """The Ray session the driver uses, and whether it must shut it down."""

    description: str
    started_here: bool
    owned: bool                       # connected or started by us: ray.shutdown() at the end
    shipped: bool = False             # the tasks run in a copy of the driver's folder that Ray sent


def import_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise RayMissing(
            "gpuenergy fleet needs Ray, which is not installed; install it with: pip install 'pytest-gpuenergy[fleet]'"
        ) from None
    return ray


def connect(ray: Any, address: str | None, local: LocalCluster | None, ship: Path | None = None) -> Cluster:
    """Join the Ray session of this process, the cluster at ``address``, or start a local one.

    ``ship``: a folder Ray sends to every node as the tasks' working directory (Ray allows that
    only for a whole job, so it is given when connecting; a session already open cannot ship).
    """
    quiet: dict[str, Any] = {"logging_level": "WARNING", "log_to_driver": False, "configure_logging": True}
    if ship is not None:
        quiet["runtime_env"] = {"working_dir": str(ship), "excludes": SHIP_EXCLUDES}
    if ray.is_initialized():
        return Cluster("the Ray session already open in this process", started_here=False, owned=False, shipped=False)
    if address:
        try:
            ray.init(address=address, **quiet)
        except (ConnectionError, RuntimeError, ValueError) as exc:
            raise ConnectionError(
                f"cannot connect to the Ray cluster at {address}: {_first_line(exc)}; check the address "
                f"(ray status prints it on the head node) or leave --address out to start a local cluster"
            ) from None
        return Cluster(f"Ray cluster at {address}", started_here=False, owned=True, shipped=ship is not None)
    cpus = max(2, os.cpu_count() or 2)
    try:
        if local is not None:
            ray.init(num_cpus=cpus, num_gpus=len(local.models), resources=local.ray_resources(),
                     include_dashboard=False, **quiet)
        else:
            ray.init(num_cpus=cpus, include_dashboard=False, **quiet)
    except Exception as exc:   # noqa: BLE001 - Ray raises many kinds; the user needs one line either way
        raise ConnectionError(f"cannot start a local Ray cluster: {_first_line(exc)}; see Ray's message above, "
                              f"or name a running cluster with --address") from None
    if local is not None:
        return Cluster(f"local Ray cluster started here with simulated GPUs: {local.describe()}",
                       started_here=True, owned=True, shipped=ship is not None)
    return Cluster("local Ray cluster started here (this machine's GPUs)", started_here=True, owned=True,
                   shipped=ship is not None)


def _remote_task(ray: Any) -> Any:
    @ray.remote(max_retries=0, num_cpus=1)
    def gpuenergy_fleet_task(spec: TaskSpec, workdir: str | None) -> Any:
        context = ray.get_runtime_context()
        node = {"node_id": context.get_node_id(), "address": ray.util.get_node_ip_address(),
                "hostname": socket.gethostname(), "gpu_ids": [str(g) for g in ray.get_gpu_ids()]}
        yield from run_suite(spec, node, workdir=workdir)
    return gpuenergy_fleet_task


def submit(ray: Any, tasks: list[TaskSpec], *, workdir: Path | None,
           clock: Callable[[], float] = time.monotonic) -> dict[Any, TaskState]:
    """Start every task; the keys are Ray's generator handles. ``workdir`` None: the shipped folder."""
    remote = _remote_task(ray)
    handles: dict[Any, TaskState] = {}
    for spec in tasks:
        options: dict[str, Any] = {"num_gpus": spec.num_gpus, "accelerator_type": spec.model}
        if spec.ray_resources():
            options["resources"] = spec.ray_resources()
        handle = remote.options(**options).remote(spec, str(workdir) if workdir is not None else None)
        handles[handle] = TaskState(spec, submitted_at=clock())
    return handles


@dataclass
class Follower:
    """Follows the tasks until each has finished or died, saying what happens as it happens."""

    ray: Any
    say: Say
    progress_every_s: float = PROGRESS_EVERY_S
    start_timeout_s: float = START_TIMEOUT_S
    clock: Callable[[], float] = time.monotonic
    interrupted: bool = field(default=False, init=False)

    def follow(self, handles: dict[Any, TaskState]) -> list[TaskState]:
        states = list(handles.values())
        pending = dict(handles)
        last_report = self.clock()
        try:
            while pending:
                ready, _ = self.ray.wait(list(pending), num_returns=1, timeout=1.0)
                for handle in ready:
                    if self._advance(handle, pending[handle]):
                        del pending[handle]
                self._time_out_unstarted(pending)
                if self.clock() - last_report >= self.progress_every_s and pending:
                    self.say(self.status_line(states))
                    last_report = self.clock()
        except KeyboardInterrupt:
            self.interrupted = True
            self._cancel(pending, "interrupted (Ctrl-C on the driver): the run stopped")
        return states

    def _advance(self, handle: Any, state: TaskState) -> bool:
        """Take the task's next event; True when the task is over."""
        try:
            ref = next(handle)
        except StopIteration:
            if state.status != "finished":
                state.fail("it ended without sending its results")
                self.say(f"fleet: {state.error}")
            return True
        except self.ray.exceptions.RayError as exc:
            return self._died(state, exc)
        try:
            event = self.ray.get(ref)
        except self.ray.exceptions.RayError as exc:
            return self._died(state, exc)
        kind = event.get("event")
        if kind == "started":
            state.status, state.node, state.started_at = "running", event.get("node") or {}, self.clock()
            gpus = ", ".join(state.node.get("gpu_ids") or []) or "none"
            self.say(f"fleet: {state.spec.label} started on {state.where} (GPU ids {gpus})")
        elif kind == "running":
            state.tests_done, state.tests_total = event.get("tests_done"), event.get("tests_total")
        elif kind == "finished":
            state.status, state.result = "finished", event
            summary = event.get("summary") or f"pytest exit code {event.get('exit_code')}"
            docs = len(event.get("documents") or [])
            self.say(f"fleet: {state.spec.label} done on {state.where} in {event.get('wall_s', 0):.1f} s: "
                     f"{summary} (exit {event.get('exit_code')}), {docs} run document{'s' if docs != 1 else ''}")
        return False

    def _died(self, state: TaskState, exc: BaseException) -> bool:
        state.fail(describe_ray_error(exc))
        self.say(f"fleet: {state.error}")
        return True

    def _time_out_unstarted(self, pending: dict[Any, TaskState]) -> None:
        now = self.clock()
        late = {h: s for h, s in pending.items() if s.status == "pending" and now - s.submitted_at > self.start_timeout_s}
        for handle, state in late.items():
            self._cancel({handle: state}, f"no node gave it {state.spec.num_gpus} GPU(s) of {state.model} within "
                                          f"{self.start_timeout_s:g} s (are they all busy, or gone?)")
            del pending[handle]

    def _cancel(self, pending: dict[Any, TaskState], why: str) -> None:
        for handle, state in pending.items():
            try:
                self.ray.cancel(handle)     # the task's pytest gets SIGTERM and restores its caps
            except Exception:                # noqa: BLE001 - already gone: nothing to cancel
                pass
            if state.status != "finished":
                state.fail(why)
                self.say(f"fleet: {state.error}")
        deadline = self.clock() + CANCEL_GRACE_S
        left = list(pending)
        while left and self.clock() < deadline:   # let the sessions finish restoring before we go
            try:
                ready, left = self.ray.wait(left, num_returns=len(left), timeout=1.0)
            except KeyboardInterrupt:
                break
            left = [h for h in left if h not in ready]

    def status_line(self, states: list[TaskState]) -> str:
        running = [s for s in states if s.status == "running"]
        parts = [f"{s.model} {_tests_text(s)} ({self.clock() - (s.started_at or self.clock()):.0f} s)" for s in running]
        pending = [s.model for s in states if s.status == "pending"]
        done = [s.model for s in states if s.status in ("finished", "failed")]
        return (f"fleet: running {', '.join(parts) or 'none'}; waiting to start: {', '.join(pending) or 'none'}; "
                f"done: {', '.join(done) or 'none'}")


def _tests_text(state: TaskState) -> str:
    if state.tests_total is None:
        return "collecting"
    return f"{state.tests_done or 0}/{state.tests_total} tests"


def describe_ray_error(exc: BaseException) -> str:
    """One line for a Ray error: its kind and what it says (the exception's last line for a task error)."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    kind = type(exc).__name__
    if kind.startswith("RayTaskError") and lines:
        text = lines[-1]
    else:
        text = lines[0] if lines else ""
    explained = {
        "WorkerCrashedError": "its Ray worker process died (killed, or out of memory)",
        "NodeDiedError": "its node was lost",
        "TaskCancelledError": "it was cancelled",
        "OwnerDiedError": "the driver that owned it died",
    }.get(kind.replace("RayTaskError(", "").rstrip(")"))
    text = f"{explained} ({kind}: {text})" if explained else f"{kind}: {text}"
    return text[:400]


def _first_line(exc: BaseException) -> str:
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return lines[0][:300] if lines else type(exc).__name__
