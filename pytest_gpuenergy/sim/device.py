"""One simulated GPU as one process sees it: its limit and state on disk, its power timeline, its
energy counter and power readings, and the noise of its figures.

What the GPU does comes from two sources (see ``timeline``): work a step declared (the roofline
model turns it into time and power under the current limit, through the DVFS model), and, where
nothing was declared, the process's CPU time standing for GPU work. Idle power accrues with the
simulator's clock.

Noise (``GPUENERGY_SIM_NOISE``, default 1.5 %) is drawn from ``GPUENERGY_SIM_SEED`` only: a drift of
the step time per session and kind of step (the seed, the GPU and the step's figures decide it, so
every session with one seed draws the same; the energy follows the time), and a quarter of it per
measured region (per synchronisation) on time and power.
"""

from __future__ import annotations

import math
import os
import random
import zlib
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from .dvfs import OperatingPoint, operating_point
from .faults import CLAMP_SHARE, LIMIT_STEP_MW
from .models import GpuSpec
from .roofline import ACTIVE_IDLE_FACTOR, GpuWork, run_step
from .state import GpuState, GpuStateFile
from .timeline import Timeline

if TYPE_CHECKING:
    from .machine import SimulatedMachine

# Another process's committed work shows on the counter this long after its commit (wall clock):
# longer than a state file is cached (GpuStateFile.RECHECK_S), so no reader sees it earlier for
# one tick than another.
VISIBLE_AFTER_S = 0.1
# The commits a state file keeps, by age: a reading looks back at most a power window (1 s on
# Ampere and later) before a publication at most a period old, plus VISIBLE_AFTER_S; the rest is
# slack for a writer held up behind the GIL. Every hand-over rewrites them all (10 s of them cost a
# short-test suite on the wall clock 9 ms a test), so they are not kept longer than a reading needs.
COMMITS_KEPT_S = 2.5
REGION_NOISE_SHARE = 0.25         # the noise per region, as a share of the noise per session


class SimDevice:
    """One simulated GPU in this process."""

    def __init__(self, owner: SimulatedMachine, spec: GpuSpec, index: int, state_dir: Path) -> None:
        self.owner = owner
        self.spec = spec
        self.index = index                   # on the machine (fault specifications and state files use it)
        self.die = 0                         # an MI250X's second GCD is die 1 of its board
        self.primary_index = index           # the board's first die, which reports the board's power
        self.state_file = GpuStateFile(state_dir, spec, index)
        self.uuid = self.state_file.uuid
        now = owner.clock.now()
        self.timeline = Timeline(now)
        self.host_until = now                # when the host will have launched what it declared so far
        self.last_seen = now                 # the clock when work was last accounted
        self.last_cpu = owner.cpu_clock()
        self.pending_cpu_s = 0.0             # virtual clock: CPU-proxy work not yet queued
        self.own_committed_mj = 0.0
        self.carried_mj = 0.0                # energy above idle of earlier tests' worlds, not committed yet
        self.carried_s = 0.0                 # the time those worlds ran beyond the wall clock, not committed yet
        self.last_commit = now
        self.last_commit_wall = owner.wall_now()
        self.region_time_factor = 1.0
        self.region_power_factor = 1.0
        # What its noise, its ticks' phase and its sensor's jitter are drawn from: its index, or within
        # a test its place among the test's GPUs (``restart``), so that a test draws the same on
        # whichever GPU a pytest-xdist worker gives it.
        self.identity = str(index)
        self._region_rng = random.Random(f"{owner.seed}/{index}/regions")
        self._set_phases(random.Random(self.uuid))
        # The counter as last read, in its library's counts (NVML: mJ; AMD SMI: 15.3 uJ): faults repeat or lower it.
        self.stuck_counts: int | None = None
        self.last_counts: int | None = None
        self._op_cache: dict[tuple[int, float, float], OperatingPoint] = {}
        self._drift_cache: dict[tuple[float, ...], float] = {}
        # On a virtual clock the counter starts from what earlier processes left on it, in whole
        # millijoules, so that its differences do not depend on that history.
        self.counter_base_mj = 0.0
        self.offset_at_start = 0.0
        if owner.clock.virtual:
            state = self.state_file.read()
            self.counter_base_mj = float(math.floor(state.dynamic_mj))
            self.offset_at_start = state.counter_offset_mj

    # -- the model ---------------------------------------------------------------------------
    def enforced_limit_mw(self, state: GpuState) -> int:
        """The limit the GPU holds its power to: the one set, unless a fault makes it enforce another
        (``limit_rounded``: down to its step; ``limit_clamped``: another power manager's cap)."""
        limit_mw = state.limit_mw
        faults = self.owner.faults
        if faults.has("limit_rounded", self.index):
            limit_mw = max(limit_mw // LIMIT_STEP_MW * LIMIT_STEP_MW, int(self.spec.min_limit_w * 1000))
        if faults.has("limit_clamped", self.index):
            limit_mw = min(limit_mw, round(CLAMP_SHARE * self.spec.max_limit_w * 1000))
        return limit_mw

    def operating_point(self, state: GpuState) -> OperatingPoint:
        """Where the governor runs undeclared work under the state's power limit and clock lock."""
        clock_cap = state.sm_clock_cap_fraction(self.spec)
        limit_mw = self.enforced_limit_mw(state)
        key = (limit_mw, self.owner.profile.compute_bound, clock_cap)
        if key not in self._op_cache:
            self._op_cache[key] = operating_point(self.spec, self.owner.profile, limit_mw / 1000.0, clock_cap)
        return self._op_cache[key]

    def advance(self) -> GpuState:
        """Account for the CPU-proxy work since the last call (where nothing was declared meanwhile).

        On a virtual clock it is only gathered here and queued at the next synchronisation
        (:meth:`flush`), and dropped if a step declares its work before then: time stands still
        between calls there, and host CPU time must never creep into declared figures.
        """
        state = self.state_file.read()
        owner = self.owner
        now, cpu = owner.clock.now(), owner.cpu_clock()
        if owner.counts_cpu and not owner.quiet and not owner.declared and self.index in owner.active:
            work_s = max(cpu - self.last_cpu, 0.0)
            if owner.clock.virtual:
                self.pending_cpu_s += work_s
            else:
                point = self.operating_point(state)
                busy_w = max(point.busy_power_w * self.region_power_factor - self.spec.idle_w, 0.0)
                self.timeline.flow(self.last_seen, max(now, self.last_seen), min(work_s, now - self.last_seen) *
                                   point.time_factor, busy_w)
        self.last_seen, self.last_cpu = max(now, self.last_seen), cpu
        self.timeline.trim(now)
        if not owner.clock.virtual and now - self.last_commit >= owner.commit_period_s:
            state = self.commit()
        return state

    def flush(self) -> None:
        """Queue the CPU-proxy work gathered since the last synchronisation (virtual clock)."""
        work_s, self.pending_cpu_s = self.pending_cpu_s, 0.0
        if work_s <= 0 or self.owner.declared:
            return
        point = self.operating_point(self.state_file.read())
        busy_w = max(point.busy_power_w * self.region_power_factor - self.spec.idle_w, 0.0)
        now = self.owner.clock.now()
        self.timeline.flow(now, now, work_s * point.time_factor, busy_w)

    def forget_cpu(self) -> None:
        """The CPU time used so far is not GPU work (the simulator's own, or outside a region)."""
        self.last_cpu = self.owner.cpu_clock()

    def declare(self, work: GpuWork) -> None:
        """Queue one step (or one phase of a step) of declared work under the current limit.

        The host launches the work's kernels (``launch_s``) while the GPU runs what is queued: the
        work ends when the GPU has run it (``gpu_s``) and the host has launched its last kernel,
        whichever is later. The host's launching runs ahead of the GPU (``host_until``), so a
        launch-bound phase after compute-bound ones (an optimizer's many small kernels after the
        backward pass) was launched while the GPU was still busy and costs only its GPU time, as on
        a real GPU; a whole step declared at once takes max(GPU time, launch time), as before.
        """
        state = self.advance()
        self.pending_cpu_s = 0.0
        limit_w = self.enforced_limit_mw(state) / 1000.0
        run = run_step(self.spec, work, limit_w, state.sm_clock_cap_fraction(self.spec))
        factor = self._session_drift(work) * self.region_time_factor
        now = self.owner.clock.now()
        start = max(now, self.timeline.end)
        launched_from = max(self.host_until, now)
        self.host_until = launched_from + run.launch_s * factor
        end = max(start + run.gpu_s * factor, self.host_until)
        if end <= start:
            return
        dynamic_w = run.dynamic_w_at(min(run.gpu_s * factor / (end - start), 1.0)) * self.region_power_factor
        ceiling_w = max(limit_w - self.spec.idle_w, 0.0)   # the governor holds the limit
        self.timeline.queue(now, end - start, min(dynamic_w, ceiling_w))

    def declare_host_time(self, host_s: float) -> None:
        """The host waits for the GPU's queued work (a synchronisation, such as ``loss.item()``), then
        works ``host_s`` alone: the GPU idles that long at its working clocks (``ACTIVE_IDLE_FACTOR``:
        a GPU between a step's kernels does not drop to deep idle) before the next launch."""
        state = self.advance()
        self.pending_cpu_s = 0.0
        now = self.owner.clock.now()
        start = max(now, self.timeline.end, self.host_until)
        self.host_until = start + host_s
        limit_w = self.enforced_limit_mw(state) / 1000.0
        idle_w = (ACTIVE_IDLE_FACTOR - 1.0) * self.spec.idle_w * self.region_power_factor
        self.timeline.queue(now, self.host_until - max(now, self.timeline.end),
                            min(idle_w, max(limit_w - self.spec.idle_w, 0.0)))

    def _session_drift(self, work: GpuWork) -> float:
        """The step-time factor of this kind of step in this session: drawn from the seed alone."""
        key = work.key
        if key not in self._drift_cache:
            cv = self.owner.noise_cv
            rng = random.Random(f"{self.owner.seed}/{self.identity}/{key}")
            self._drift_cache[key] = math.exp(rng.gauss(0.0, cv)) if cv else 1.0
        return self._drift_cache[key]

    def _set_phases(self, rng: random.Random) -> None:
        self.counter_phase_s = rng.uniform(0, self.spec.counter_period_s)
        self.power_phase_s = rng.uniform(0, self.spec.power_publish_s)

    def restart(self, test_id: str, slot: int) -> None:
        """A new test starts at the virtual clock's start, on an idle GPU (``simBeginTest``), as the
        test's ``slot``-th GPU: nothing of what earlier tests ran shows, and what it draws depends on
        the test and the slot alone. The energy of the world that ends is carried to the next commit."""
        self.carried_mj = self.unsaved_mj()
        self._set_phases(random.Random(f"phase/{slot}"))
        now = self.owner.clock.now()
        self.timeline = Timeline(now)
        self.host_until = now
        self.last_seen = self.last_commit = now
        self.last_cpu = self.owner.cpu_clock()
        self.pending_cpu_s = 0.0
        self.own_committed_mj = 0.0
        self.last_counts = None
        self.reseed(test_id, slot)

    def reseed(self, test_id: str, slot: int) -> None:
        """Draw this test's region noise from the seed, the test's id and the GPU's slot alone, not
        from the tests before it."""
        self.identity = str(slot)
        self._drift_cache.clear()
        self._region_rng = random.Random(f"{self.owner.seed}/{slot}/{test_id}/regions")
        self.new_noise_epoch()

    def new_noise_epoch(self) -> None:
        """Each measured region (between two synchronisations) draws its own small deviation."""
        cv = self.owner.noise_cv * REGION_NOISE_SHARE
        if cv > 0:
            self.region_time_factor = math.exp(self._region_rng.gauss(0.0, cv))
            self.region_power_factor = math.exp(self._region_rng.gauss(0.0, cv))

    def unsaved_mj(self) -> float:
        """This process's energy above idle not yet in the GPU's state file."""
        return max(self.timeline.dynamic_mj_at(self.last_seen) - self.own_committed_mj, 0.0) + self.carried_mj

    def commit(self) -> GpuState:
        """Add this process's energy above idle to the GPU's state file (other processes read it)."""
        now = self.last_seen
        pending = self.unsaved_mj()
        self.last_commit, self.last_commit_wall = now, self.owner.wall_now()
        beyond_s = self.carried_s
        if pending <= 0 and beyond_s <= 0:
            return self.state_file.read()
        wall, pid = self.owner.wall_now(), os.getpid()

        def add(state: GpuState) -> GpuState:
            kept = tuple(c for c in state.recent_commits if c[0] >= wall - COMMITS_KEPT_S)
            return replace(state, dynamic_mj=state.dynamic_mj + pending, recent_commits=kept + ((wall, pid, pending),),
                           beyond_wall_s=state.beyond_wall_s + beyond_s)

        state = self.state_file.update(add)
        self.own_committed_mj += pending - self.carried_mj
        self.carried_mj = self.carried_s = 0.0
        return state

    def others_settled_at(self) -> float:
        """When the energy other processes committed last (wall clock) is on the counter and published,
        with one publication more for a reading that looks back a period."""
        me = os.getpid()
        last = max((when for when, pid, mj in self.state_file.read().recent_commits if pid != me and mj > 0),
                   default=-math.inf)
        return last + VISIBLE_AFTER_S + 2 * self.spec.counter_period_s

    # -- what the libraries show ---------------------------------------------------------------------
    def board_energy_mj_at(self, moment: float, state: GpuState) -> float:
        """What this device's energy counter and power readings cover: itself, except on a board of two
        dies (MI250X), whose first die reports both and whose second reports nothing (``models``)."""
        if self.spec.dies == 1:
            return self.energy_mj_at(moment, state)
        if self.die:
            return 0.0
        total = self.energy_mj_at(moment, state)
        for other in self.owner.devices:
            if other.primary_index == self.index and other is not self:
                total += other.energy_mj_at(moment, other.advance())
        return total

    def energy_mj_at(self, moment: float, state: GpuState) -> float:
        """The exact energy integral since the counter started, at ``moment`` on the simulator's clock."""
        own_mj = self.timeline.dynamic_mj_at(moment)
        if self.owner.clock.virtual:
            # Virtual time is this process's own: other processes' work is not on its timeline.
            reset_mj = state.counter_offset_mj - self.offset_at_start
            return self.counter_base_mj + self.spec.idle_w * moment * 1000.0 + own_mj - reset_mj
        idle_mj = self.spec.idle_w * (moment - state.created_at) * 1000.0
        me = os.getpid()
        not_yet_mj = sum(mj for when, pid, mj in state.recent_commits if pid != me and when > moment - VISIBLE_AFTER_S)
        others_mj = state.dynamic_mj - self.own_committed_mj - not_yet_mj
        return idle_mj + others_mj + own_mj - state.counter_offset_mj

    @staticmethod
    def last_tick(now: float, period_s: float, phase_s: float) -> float:
        return phase_s + ((now - phase_s) // period_s) * period_s

    def reading_moment(self) -> float:
        """When a reading taken after :meth:`advance` looks: the moment the timeline was brought up to,
        not the clock's now. On the wall clock the advance may commit the state file, which waits for
        the GIL at each file operation behind a main thread running Python (125 ms was seen): a
        publication after the advance would average a window that work has not been flowed into yet
        (the idle level, for a window that a later call fills), and a counter read twice would
        show one publication with two values. On the virtual clock the two are the same."""
        return min(self.owner.clock.now(), self.last_seen)

    def average_power_mw(self, window_s: float) -> int:
        """The power reading published last: the average over ``window_s`` before its publication,
        with the sensor's jitter (up to 0.5 W, the same for every reader of that publication). A
        real reading is never the same twice in a row; that is also how a reader sees a new one."""
        state = self.advance()
        period = self.spec.power_publish_s
        published = self.last_tick(self.reading_moment(), period, self.power_phase_s)
        energy_mj = self.board_energy_mj_at(published, state) - self.board_energy_mj_at(published - window_s, state)
        tick = round((published - self.power_phase_s) / period)
        jitter_mw = zlib.crc32(f"{self.identity}/{tick}".encode()) % 1001 - 500
        return max(int(round(energy_mj / window_s)) + jitter_mw, 0)

    def is_busy(self) -> bool:
        return self.timeline.busy_at(self.owner.clock.now())

