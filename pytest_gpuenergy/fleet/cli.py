"""``gpuenergy fleet [--address ADDR] [--per-model | --per-gpu] -- PYTEST_ARGS...``

``cli.py`` registers the command with ``add_fleet_command(subparsers)``. The order of a run:
check everything that can be checked without a cluster (the arguments, the baselines), connect
to Ray (or start a local cluster), find the GPU models, start one task per model, follow them,
then gate and report once. Ray is imported only here, and only when the command runs.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

from ..errors import GpuEnergyError
from ..runs import LATEST
from ..sim.models import MODELS_ENV
from .plan import (
    EXIT_BAD_INPUT,
    EXIT_INCOMPLETE,
    PER_GPU,
    PER_MODEL,
    PROGRESS_EVERY_S,
    START_TIMEOUT_S,
    FleetUsageError,
    LocalCluster,
    inventory,
    plan_tasks,
    split_pytest_args,
)

# Settings of the driver's environment that each task's pytest gets too (the node's own are kept
# otherwise): the simulator's seed and noise make the models' figures repeat as they do locally.
FORWARDED_ENV = ("GPUENERGY_SIM_SEED", "GPUENERGY_SIM_NOISE", "GPUENERGY_SIM_CLOCK", "GPUENERGY_SIM_FAULTS",
                 "GPUENERGY_SIM_COUNTER_READ_MS", "GPUENERGY_BACKEND")


def add_fleet_command(subparsers: Any) -> None:
    fleet = subparsers.add_parser(
        "fleet", help="run the suite on every GPU model of a Ray cluster, gate and report once",
        usage="gpuenergy fleet [--address ADDR] [--per-model | --per-gpu] [options]\n"
              "                       -- PYTEST_ARGS...",
        description="Run PYTEST_ARGS as Ray tasks, one per GPU model (or one per GPU with pytest-xdist), bring "
                    "every run document back, and apply the gate and the reports once over all of them. "
                    "The gate's options (--energy-compare, --energy-fail, --energy-save, --energy-storage, "
                    "--energy-markdown/html/json) act on the driver. Exit 0: passed; 1: a failure or a "
                    "regression; 2: bad input; 3: incomplete (a model's task died); 5: no tests ran.",
    )
    fleet.add_argument("--address", metavar="ADDR", default=None,
                       help="the Ray cluster to use (default: $RAY_ADDRESS, else start a local one; with "
                            f"${MODELS_ENV} set the local one has simulated GPUs of those models)")
    fan_out = fleet.add_mutually_exclusive_group()
    fan_out.add_argument("--per-model", dest="mode", action="store_const", const=PER_MODEL,
                         help="one task per GPU model, holding --gpus-per-task GPUs (default)")
    fan_out.add_argument("--per-gpu", dest="mode", action="store_const", const=PER_GPU,
                         help="one task per GPU model holding every GPU of a node, one pytest-xdist worker per GPU")
    fleet.set_defaults(mode=PER_MODEL)
    fleet.add_argument("--gpus-per-task", type=int, default=1, metavar="N", help="GPUs each --per-model task holds (default 1)")
    fleet.add_argument("--models", metavar="LIST", default=None,
                       help="only these GPU models (Ray accelerator types, e.g. H100,A100; default: every one)")
    fleet.add_argument("--simulate", action="store_true", default=None,
                       help="run each task on simulated GPUs of its model (default for the local cluster "
                            f"made from ${MODELS_ENV})")
    fleet.add_argument("--ship", dest="ship", action="store_true", default=None,
                       help="send the current folder to the nodes as the tasks' working directory (default "
                            "with --address)")
    fleet.add_argument("--no-ship", dest="ship", action="store_false",
                       help="run the tasks in this folder's path on each node (a local cluster, shared storage)")
    fleet.add_argument("--progress-every", type=float, default=PROGRESS_EVERY_S, metavar="S",
                       help=f"seconds between progress lines (default {PROGRESS_EVERY_S:g})")
    fleet.add_argument("--start-timeout", type=float, default=START_TIMEOUT_S, metavar="S",
                       help=f"give up on a model whose task found no GPUs within S seconds (default {START_TIMEOUT_S:g})")
    fleet.add_argument("pytest_args", nargs="*", metavar="PYTEST_ARGS",
                       help="pytest's arguments, after --, e.g. -- reference_workloads --gpu-caps=60%%,100%%")
    fleet.set_defaults(handler=cmd_fleet)


def cmd_fleet(args: argparse.Namespace, out: TextIO | None = None,
              ray_module: Callable[[], Any] | None = None) -> int:
    # The driver (which runs pytest's tasks) and the reports: only when the command runs, so that
    # every other `gpuenergy` command starts without them.
    from ..reports.terminal import terminal_width
    from .driver import Follower, RayMissing, connect, import_ray, submit
    from .report import apply_gate, collect, new_fleet_id, terminal_lines

    out = out or sys.stdout

    def say(line: str) -> None:
        print(line, file=out, flush=True)

    started = time.monotonic()
    try:
        gate, task_args = split_pytest_args(args.pytest_args)
        if not task_args:
            raise FleetUsageError("no pytest arguments: give them after --, e.g. gpuenergy fleet -- reference_workloads")
        if args.progress_every <= 0 or args.start_timeout <= 0:
            raise FleetUsageError("--progress-every and --start-timeout take a number of seconds above 0")
        _check_baselines(gate.storage, gate.compare)
        address = args.address or os.environ.get("RAY_ADDRESS") or None
        local = LocalCluster.from_sim_gpus(os.environ[MODELS_ENV]) if not address and os.environ.get(MODELS_ENV) else None
        simulate = args.simulate if args.simulate is not None else local is not None
        ship = args.ship if args.ship is not None else bool(address)
        ray = (ray_module or import_ray)()
    except (FleetUsageError, GpuEnergyError, RayMissing) as exc:
        return _error(exc)
    try:
        cluster = connect(ray, address, local, Path.cwd() if ship else None)
    except ConnectionError as exc:
        return _error(exc)
    try:
        found = inventory(ray.nodes())
        models = [m.strip() for m in args.models.split(",") if m.strip()] if args.models else None
        forwarded = {name: os.environ[name] for name in FORWARDED_ENV if os.environ.get(name)}
        tasks = plan_tasks(found, args.mode, task_args, gpus_per_task=args.gpus_per_task, models=models,
                           simulate=simulate, env=forwarded)
        say(f"fleet: {cluster.description}; GPU models: {', '.join(m.describe() for m in found.models)}")
        say(f"fleet: {len(tasks)} task{'s' if len(tasks) != 1 else ''} ({args.mode}"
            f"{', simulated GPUs' if simulate else ''}): {', '.join(t.label for t in tasks)}; "
            f"Ray ready after {time.monotonic() - started:.1f} s")
        handles = submit(ray, tasks, workdir=None if cluster.shipped else Path.cwd())
        follower = Follower(ray, say, args.progress_every, args.start_timeout)
        states = follower.follow(handles)
    except FleetUsageError as exc:
        _shutdown(ray, cluster)
        return _error(exc)
    except KeyboardInterrupt:
        _shutdown(ray, cluster)
        return EXIT_INCOMPLETE
    _shutdown(ray, cluster)
    outcome = collect(new_fleet_id(), states)
    if follower.interrupted:
        outcome.problems.append("the run was interrupted on the driver (Ctrl-C)")
    apply_gate(outcome, gate, _step_summary())
    for line in terminal_lines(outcome, terminal_width()):
        say(line)
    for problem in outcome.problems:
        print(f"gpuenergy fleet: error: {problem}", file=sys.stderr)
    for error in outcome.usage_errors + outcome.errors:
        print(f"gpuenergy fleet: error: {error}", file=sys.stderr)
    say(f"fleet: {outcome.status_text().split(': ', 1)[1]}; exit {outcome.exit_code}; "
        f"{time.monotonic() - started:.1f} s in all")
    return outcome.exit_code


def _check_baselines(storage: Path, compare: str | None) -> None:
    """A corrupt baseline is an error now, before a cluster is started for nothing."""
    from ..runs.store import RunStore  # (the command's, not its parser's)

    if compare == LATEST:
        RunStore(storage).runs()
    elif compare:
        RunStore(storage).resolve(compare)


def _shutdown(ray: Any, cluster: Any) -> None:
    if cluster.owned:
        ray.shutdown()


def _step_summary() -> Path | None:
    value = os.environ.get("GITHUB_STEP_SUMMARY")
    return Path(value) if value else None


def _error(problem: object) -> int:
    print(f"gpuenergy fleet: error: {problem}", file=sys.stderr)
    return EXIT_BAD_INPUT
