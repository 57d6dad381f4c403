"""One simulated machine: its GPUs of both vendors, its clock, the work declared on it, its faults.

A machine may hold NVIDIA and AMD GPUs side by side (``GPUENERGY_SIM_GPUS=H100,MI300X``). Each vendor's
library sees only its own (``SimulatedNvml`` the NVIDIA ones, ``SimulatedAmdSmi`` the AMD ones), but
both stand over the one machine built here: the same state folder (so caps persist between processes and
``gpuenergy restore`` sees both), the same clock, the same declared work and the same faults. A GPU's
*machine index* is its place in the machine's list, where an MI250X counts twice (AMD SMI lists its two
dies); fault specifications (``NAME@GPU``) and the ``sim`` extras' indices use it.

Everything a simulated library adds to its real counterpart is prefixed ``sim`` and lives here, once:
the GPU work a step launched (``simDeclareWork``; see ``work.declare_work``), how compute-bound undeclared
work is (``simSetWorkloadProfile``), waiting for queued work (``simSynchronize``, the analogue of
``torch.cuda.synchronize``), the clock (``simClock``) and the exact energy integral (``simExactEnergyMj``,
for accuracy benchmarks). Both libraries answer them (``SimulatedLibrary``), for the whole machine.

How a simulated GPU advances (``device`` and ``timeline``; ``roofline`` and ``dvfs`` for the model):

* **Time** is virtual by default (``clock``): it moves only with the GPUs' work and with waiting on it,
  so declared work gives the same figures on any host. ``GPUENERGY_SIM_CLOCK=wall`` runs the simulated
  GPUs in real time instead.
* **Work**: a step's declared work becomes time and power under the current limit (the roofline model,
  through the DVFS model) and is queued on the GPU. Where nothing was declared, the CPU time the
  process's main thread used inside measured regions stands for GPU work. Like a real GPU the simulated
  one executes asynchronously; ``simSynchronize`` waits until the queued work has finished.
* **State**: the limit (and, on the wall clock, the energy of other processes) lives in the GPU's state
  file; a process commits its energy there when it hands a GPU over, shuts down or exits, and on the
  wall clock also at least every second and at synchronisations 100 ms apart.
"""

from __future__ import annotations

import atexit
import functools
import os
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from .. import realtime
from ..errors import SimStateError
from ..fileio import sim_state_dir
from . import work as work_registry
from .clock import CLOCK_ENV, VirtualClock, WallClock, clock_from_env
from .device import SimDevice
from .dvfs import DEFAULT_COMPUTE_BOUND, WorkloadProfile
from .faults import FaultPlan, parse_faults
from .roofline import GpuWork
from .seed import session_seed
from .state import load_machine

FAULTS_ENV = "GPUENERGY_SIM_FAULTS"
NOISE_ENV = "GPUENERGY_SIM_NOISE"
#: How long one read of the energy counter takes, in ms (default 0). On a real H100 with driver
#: 580 it took 2.4 ms (median; 16 ms p99; benchmarks/results/real_gpu.json), against microseconds
#: here: set it to see the meter under real read costs. The wait releases the GIL, as ctypes does.
COUNTER_READ_ENV = "GPUENERGY_SIM_COUNTER_READ_MS"

DEFAULT_NOISE = 0.015     # the drift of a kind of step's time between sessions (its CV); a quarter of it per region
_COMMIT_PERIOD_S = 1.0   # wall clock: at the latest; file I/O costs the GIL (see state.py)
# simSynchronize commits no more often than this: a commit is a locked rewrite of the state file
# (about 1.5 ms), and other processes see a real GPU's counter as late as its 100 ms publication.
# A process hands a GPU over (simUseDevices, shutdown, exit) with everything committed.
_SYNC_COMMIT_PERIOD_S = 0.1


@dataclass(frozen=True)
class SimDeviceHandle:
    """A simulated library's device handle: its index in that library's list, and on the machine."""

    index: int
    uuid: str
    machine_index: int = -1

    def __post_init__(self) -> None:
        if self.machine_index < 0:      # a machine of one vendor: the library's index is the machine's
            object.__setattr__(self, "machine_index", self.index)


def main_thread_cpu_clock() -> Callable[[], float]:
    """The clock of the CPU time that stands for undeclared GPU work: the process's main thread's.

    A test's own work runs there. The plugin's background threads (the session's recorders, the
    resolution of earlier tests' figures) and xdist's I/O thread are not the test's GPU work, and
    counting the whole process's CPU time let them into a 5 ms test's figures in proportion to how
    busy the host was. Where a thread's CPU clock cannot be read, the process's is the fallback.
    """
    try:
        clock_id = time.pthread_getcpuclockid(threading.main_thread().ident or 0)
        time.clock_gettime(clock_id)
    except (AttributeError, OSError):
        return time.process_time
    return functools.partial(time.clock_gettime, clock_id)


class SimulatedMachine:
    """The GPUs of one simulated machine as this process sees them, whichever library reads them."""

    def __init__(
        self,
        state_dir: Path | None = None,
        models: Sequence[str] | None = None,
        faults: str | None = None,
        noise_cv: float | None = None,
        seed: int | None = None,
        clock: str | None = None,
        cpu_clock: Callable[[], float] | None = None,
    ) -> None:
        self.state_dir = Path(state_dir) if state_dir is not None else sim_state_dir()
        self._requested_models = tuple(models) if models is not None else None
        self._faults_text = faults if faults is not None else os.environ.get(FAULTS_ENV, "")
        self.noise_cv = noise_cv if noise_cv is not None else env_float(NOISE_ENV, DEFAULT_NOISE, low=0.0, high=0.5)
        self.seed = seed if seed is not None else session_seed()
        self.counter_read_s = env_float(COUNTER_READ_ENV, 0.0, low=0.0, high=1000.0) / 1000.0
        kind = clock_from_env(clock if clock is not None else os.environ.get(CLOCK_ENV))
        self.clock: VirtualClock | WallClock = VirtualClock() if kind == "virtual" else WallClock()
        self.cpu_clock = cpu_clock or main_thread_cpu_clock()
        self.commit_period_s = _COMMIT_PERIOD_S
        self.counts_cpu = True      # the CPU-time proxy; a meter turns it on only inside its regions
        self.quiet = 0              # > 0 while the virtual clock moves: plans' reads are not GPU work
        # Once work is declared, all of it is: the CPU-time proxy is off until the GPUs change
        # hands (the next test), so that no host CPU time can creep into declared figures.
        self.declared = False
        self.faults = FaultPlan(parse_faults(self._faults_text))
        self._world_started = (self.clock.now(), self.wall_now())   # a test's virtual world: its start on both clocks
        # The world's virtual time inside measured regions (while the CPU-time proxy counts): so far, and
        # since when now (None: outside one)
        self._region_s = 0.0
        self._counting_since: float | None = self.clock.now()
        self.profile = WorkloadProfile(DEFAULT_COMPUTE_BOUND)
        self.active: set[int] = set()
        self.devices: list[SimDevice] = []
        self._open_count = 0
        self.lock = threading.RLock()

    # -- lifetime: each library's init opens the machine, its shutdown closes it ----------------------
    def open(self) -> None:
        with self.lock:
            if self._open_count == 0:
                self.devices = []
                for spec in load_machine(self.state_dir, self._requested_models):
                    primary = len(self.devices)
                    for die in range(spec.dies):
                        device = SimDevice(self, spec, len(self.devices), self.state_dir)
                        device.die, device.primary_index = die, primary
                        self.devices.append(device)
                self._set_active(set(range(len(self.devices))))
                for device in self.devices:
                    device.new_noise_epoch()
                atexit.register(self._commit_at_exit)
                work_registry.register(self)
            self._open_count += 1

    def close(self) -> None:
        """One library's shutdown: the last one commits this process's energy and releases the GPUs."""
        with self.lock:
            self._open_count -= 1
            if self._open_count == 0:
                atexit.unregister(self._commit_at_exit)
                work_registry.unregister(self)
                self._commit_all()

    @property
    def is_open(self) -> bool:
        return self._open_count > 0

    def _commit_at_exit(self) -> None:
        try:
            self._commit_all()
        except (SimStateError, OSError) as exc:
            print(f"gpuenergy simulator: energy of this process not saved: {exc}", file=sys.stderr)

    def _commit_all(self) -> None:
        with self.lock:
            for device in self.devices:
                device.advance()
                device.commit()
                device.state_file.forget_process(os.getpid())     # its marker goes with it
            self.active = set()

    def wall_now(self) -> float:
        """The host's clock (commits are stamped with it, whatever the simulator's clock)."""
        return realtime.wall_time()

    def vendor_devices(self, vendor: str) -> list[SimDevice]:
        """The devices one library lists, in machine order (its own indices count from 0)."""
        return [d for d in self.devices if d.spec.vendor == vendor]

    def fault(self, device: SimDevice, fault_kind: str | None = None) -> str | None:
        """Which fault a call on ``device`` meets, if any: ``lost`` (every call), ``read_error`` (reads)."""
        if self.faults.fires("lost", device.index):
            return "lost"
        if fault_kind == "read" and self.faults.fires("read_error", device.index):
            return "read_error"
        return None

    def slow_read_moment(self) -> float | None:
        """A slow counter read (``COUNTER_READ_ENV``) takes its value in the middle and holds no GIL while
        it waits, like a ctypes call into the real library: one wait, then the value as of then."""
        if not self.counter_read_s or self.clock.virtual:
            return None
        taken_at = self.clock.now() + self.counter_read_s / 2
        realtime.sleep(self.counter_read_s)
        return taken_at

    def counter_reading(self, device: SimDevice, quantum_mj: float, taken_at: float | None = None) -> tuple[int, float]:
        """The energy counter as published last: (whole ``quantum_mj`` counts, the moment it was
        published), with the ``counter_*`` faults applied (``counter_backwards``: 1 J less)."""
        state = device.advance()
        now = device.reading_moment()
        moment = now if taken_at is None else min(taken_at, now)
        tick = device.last_tick(moment, device.spec.counter_period_s, device.counter_phase_s)
        read = self.faults.count("counter_read", device.index)
        if read and self.faults.active("counter_reset", device.index, read):
            published = device.board_energy_mj_at(tick, state)
            state = device.state_file.update(lambda s: replace(s, counter_offset_mj=s.counter_offset_mj + published))
        value = max(int(device.board_energy_mj_at(tick, state) / quantum_mj), 0)
        if read and self.faults.active("counter_stuck", device.index, read):
            device.stuck_counts = device.stuck_counts if device.stuck_counts is not None else value
            value = device.stuck_counts
        if read and self.faults.active("counter_backwards", device.index, read) and device.last_counts is not None:
            value = max(device.last_counts - round(1000 / quantum_mj), 0)
        device.last_counts = value
        return value, tick

    def set_limit(self, device: SimDevice, limit_mw: int) -> None:
        """The limit every die of ``device``'s board then holds (the energy so far was drawn under the old one)."""
        for die in self.devices:
            if die.primary_index == device.primary_index:
                die.advance()
                die.state_file.update(lambda s: replace(s, limit_mw=limit_mw))

    def _set_active(self, indices: set[int]) -> None:
        for device in self.devices:
            device.state_file.mark_process(os.getpid(), device.index in indices)
        self.active = indices

    def _move_clock_to(self, moment: float) -> None:
        """Advance the virtual clock, waking whatever waits on it; what that costs the CPU is not GPU work."""
        for device in self.devices:
            device.advance()
        self.quiet += 1
        try:
            self.clock.sleep_until(moment)
        finally:
            self.quiet -= 1
            for device in self.devices:
                device.forget_cpu()

    def _world_idle_excess_s(self) -> float:
        """How much longer the current test's virtual world kept the GPUs occupied than the host's wall
        clock ran: a real GPU's session would have lasted that much longer, its GPUs idle through the
        rest of it, which a total on the wall clock alone would leave out (and a session's regions
        would then add up to more than its total). Occupied: the measured regions' time (the test's
        work, its waits for the GPUs, its declared host time) or the GPUs' busy time, the longer.
        Not the rest of the world's time: there the meter's recorders learn the counter anew in every
        test's world and wait for its publications, which on a real GPU they do once a session and in
        the background (counting it made 600 tests of 5 ms draw 4 kW from a 700 W GPU). Never
        negative: a slow host's wall time is already counted as idle."""
        if not isinstance(self.clock, VirtualClock):
            return 0.0
        _, wall_start = self._world_started
        since = self._counting_since
        region_s = self._region_s + (self.clock.now() - since if since is not None else 0.0)
        busy_s = max((device.timeline.busy_s for device in self.devices), default=0.0)
        return max(max(region_s, busy_s) - (self.wall_now() - wall_start), 0.0)

    def beyond_wall_s(self, device: SimDevice) -> float:
        """The time tests' virtual worlds kept ``device`` occupied beyond the wall clock, by every
        process so far: the session's total energy counts the GPU idle through it, and its time too."""
        with self.lock:
            return device.state_file.read().beyond_wall_s + device.carried_s + self._world_idle_excess_s()

    # -- the simulator-only extensions, which both libraries answer --------------------------------------
    def simSetWorkloadProfile(self, compute_bound: float) -> None:
        """Declare how compute-bound the work from now on is (1 = shader-bound, 0 = memory-bound)."""
        with self.lock:
            profile = WorkloadProfile(compute_bound)
            for device in self.devices:
                device.advance()  # work so far ran under the previous profile
            self.profile = profile

    def simUseDevices(self, indices: Sequence[int]) -> None:
        """Which simulated GPUs (machine indices) this process's work runs on (default: all of them).

        While a process uses a GPU, its library lists it among the GPU's running processes.
        """
        with self.lock:
            wanted = {i for i in indices if 0 <= i < len(self.devices)}
            if wanted == self.active:
                return          # no hand-over (a meter's region on the GPUs its test holds already)
            for device in self.devices:
                device.state_file.expire()    # another process may have changed its limit meanwhile
                device.advance()
                # A hand-over: the next holder's counter starts after this work. On a virtual clock
                # no other process reads this one's counter: committing (a locked rewrite of the
                # state file, about 10 ms) once a second is enough for the session's total.
                due = not self.clock.virtual or self.wall_now() - device.last_commit_wall >= _COMMIT_PERIOD_S
                if due:
                    device.commit()
            self._set_active(wanted)
            self.declared = False
            settled_at = None if self.clock.virtual else max(
                (d.others_settled_at() for d in self.devices if d.index in wanted), default=None)
        # On the wall clock another process's work shows on the counter VISIBLE_AFTER_S after it was
        # committed (at its hand-over): the new holder starts once that is published, or its first
        # test would be charged with the last one's energy (930-1,151 W on a 700 W H100 were seen).
        if settled_at is not None:
            self.clock.sleep_until(settled_at)

    def simSynchronize(self) -> None:
        """Wait until the simulated GPUs have executed the work queued so far."""
        with self.lock:
            for device in self.devices:
                device.advance()
                device.flush()
            done_at = max((d.timeline.end for d in self.devices if d.index in self.active), default=0.0)
            if self.clock.virtual:
                self._move_clock_to(done_at)
        if not self.clock.virtual:
            self.clock.sleep_until(done_at)
        with self.lock:
            for device in self.devices:
                device.advance()
                if not self.clock.virtual and device.last_seen - device.last_commit >= _SYNC_COMMIT_PERIOD_S:
                    device.commit()
                device.new_noise_epoch()

    def simSleepUntil(self, moment: float) -> None:
        """Wait until ``moment`` on the simulator's clock (at once on a virtual one: time moves there)."""
        if self.clock.virtual:
            with self.lock:
                self._move_clock_to(moment)
        else:
            self.clock.sleep_until(moment)

    def simDeclareWork(self, work: GpuWork) -> None:
        """One step of GPU work was launched: queue it on the GPUs this process uses (see ``work``)."""
        with self.lock:
            self.declared = True
            for device in self.devices:
                if device.index in self.active:
                    device.declare(work)

    def simHostTime(self, host_s: float) -> None:
        """The host waited for the GPUs' queued work, then worked ``host_s`` alone (see ``work``): the
        GPUs this process uses idle that long in their queues. Like declared work, it turns the
        CPU-time proxy off: the host's own speed never shows."""
        with self.lock:
            self.declared = True
            for device in self.devices:
                if device.index in self.active:
                    device.declare_host_time(host_s)

    def simQueuedUntil(self) -> float:
        """When the GPUs this process uses will have run the work queued so far (now, if they are idle):
        the time a CUDA event recorded now would carry. Neither waits nor moves the clock. It queues the
        CPU-proxy work gathered so far (undeclared work only; ``flush``), so that work lands in the phase
        it ran in; declared work is queued already (and then nothing needs accounting: a phase mark
        stays a few microseconds)."""
        with self.lock:
            if not self.declared:
                for device in self.devices:
                    device.advance()
                    device.flush()
            return max([self.clock.now()] + [d.timeline.end for d in self.devices if d.index in self.active])

    def simCountCpuWork(self, counting: bool) -> None:
        """Whether the process's CPU time stands for GPU work from now on (where none is declared).

        A meter turns it on for its regions only, so that a test's own setup and the plugin's work
        between regions never count as GPU work.
        """
        with self.lock:
            for device in self.devices:
                device.advance()
                device.forget_cpu()
                if not counting:
                    device.pending_cpu_s = 0.0     # gathered outside what was to count
            self.counts_cpu = counting
            now, since = self.clock.now(), self._counting_since
            if counting and since is None:              # a region starts
                self._counting_since = now
            elif not counting and since is not None:    # a region ends
                self._region_s += now - since
                self._counting_since = None

    def wall_energy_mj(self, device: SimDevice) -> float:
        """The energy the GPU drew since its state began, on the host's wall clock: its idle power over
        the wall time (and over the time tests' virtual worlds ran beyond it), plus the work every
        process committed (and this one's not committed yet).

        A session's tests each run in a virtual world of their own, whose time is no wall time; this
        is what a real counter would show across the whole session (setup, collection, idle between
        tests included), for the session's total (``--energy-top``). Like the counter, it covers what
        the device reports: an MI250X's first die the whole board, its second die nothing (``models``)."""
        with self.lock:
            if device.die:
                return 0.0
            total_mj = 0.0
            for die in self.devices:
                if die.primary_index == device.index:
                    die.advance()
                    state = die.state_file.read()
                    idle_s = self.wall_now() - state.created_at + self._world_idle_excess_s()
                    total_mj += die.spec.idle_w * idle_s * 1000.0 + state.dynamic_mj + die.unsaved_mj()
            return total_mj

    def simBeginTest(self, test_id: str, indices: Sequence[int] = ()) -> None:
        """A test starts: its figures must depend on the test and the seed only, whatever ran before it
        (the order, ``-k``, the pytest-xdist worker). Its noise is drawn for the test alone; on the
        virtual clock, time also starts over at 0 on idle GPUs (the energy of the world that ends is
        carried to the next commit), so that its regions fall at the same moments against the counter's ticks
        and see the same counter values. What waited on the clock (the meter's recorders) is stopped:
        the meter starts new ones. ``indices``: the test's GPUs (machine indices), in order; the k-th
        draws as slot k (the same on whichever GPU a pytest-xdist worker runs the test)."""
        with self.lock:
            slots = {index: slot for slot, index in enumerate(indices)}
            held = [d for d in self.devices if d.index in slots]
            if isinstance(self.clock, VirtualClock):
                excess_s = self._world_idle_excess_s()
                for device in self.devices:
                    device.advance()
                    device.carried_mj += device.spec.idle_w * excess_s * 1000.0
                    device.carried_s += excess_s
                self.clock.restart(0.0)
                self._world_started = (0.0, self.wall_now())
                self._region_s, self._counting_since = 0.0, (0.0 if self.counts_cpu else None)
                for device in self.devices:
                    device.restart(test_id, slots.get(device.index, len(slots) + device.index))
                self.declared = False
            else:
                for device in held:
                    device.reseed(test_id, slots[device.index])

    def exact_energy_mj(self, device: SimDevice, moment: float | None = None) -> float:
        """The model's exact energy integral (not quantised, not delayed) at ``moment`` on its clock.

        On the wall clock, other processes' work on the GPU is exact for moments up to
        ``device.COMMITS_KEPT_S - VISIBLE_AFTER_S`` (2.4 s) back; this process's own, for any."""
        with self.lock:
            state = device.advance()
            return device.energy_mj_at(self.clock.now() if moment is None else moment, state)

    def simClock(self) -> VirtualClock | WallClock:
        """The simulator's clock: ``now()``, ``sleep_until()``; a virtual one also runs plans (``start``)."""
        return self.clock

    def simSeed(self) -> int:
        return self.seed

    def simWorkSource(self) -> str:
        """What stood for GPU work since the GPUs last changed hands: ``declared`` or ``cpu-time``."""
        return "declared" if self.declared else "cpu-time"

    def simSettings(self) -> dict[str, Any]:
        """What makes a session's simulated figures repeat: the clock, the seed and the noise."""
        return {"clock": "virtual" if self.clock.virtual else "wall", "seed": self.seed, "noise": self.noise_cv}

    def simArmFaults(self, text: str) -> None:
        """Inject faults (``GPUENERGY_SIM_FAULTS`` syntax) counted from the next call on, while running."""
        with self.lock:
            self.faults.arm(parse_faults(text))


def env_float(name: str, default: float, *, low: float, high: float) -> float:
    text = os.environ.get(name, "").strip()
    if not text:
        return default
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"{name}={text!r} is not a number") from None
    if not low <= value <= high:
        raise ValueError(f"{name}={text!r} is outside [{low}, {high}]")
    return value
