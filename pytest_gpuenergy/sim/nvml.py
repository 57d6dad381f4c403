"""A simulated GPU that stands in for the NVML library itself.

``SimulatedNvml`` has the pynvml functions the plugin uses, with the same names, arguments, units
(mW, mJ, MHz) and error classes (pynvml's own ``NVMLError_*``), so the device code that drives a
real GPU is exactly the code that runs in CI. What it adds is prefixed ``sim``: telling it which
workload runs (``simSetWorkloadProfile``), waiting for its queued work (``simSynchronize``, the
analogue of ``torch.cuda.synchronize``) and its exact energy integral (``simExactEnergyMj``,
for accuracy benchmarks).

How the simulated GPU advances (see ``dvfs`` for the power model):

* The process's CPU work stands for GPU work. Between two calls, the CPU time the process used
  (capped at the wall time) is the amount of full-speed GPU work launched. Like a real GPU the
  simulated one executes it asynchronously: under a cap the work takes ``time_factor`` times as
  long, the device falls behind the CPU, and ``simSynchronize`` sleeps until it has caught up, so
  the caller's wall clock shows the slowdown as it would on real hardware.
* While it has work the GPU draws its busy power for the operating point the governor picks under
  the current limit; otherwise it draws idle power. Idle energy accrues with wall time even when
  no process is attached, as on a real GPU.
* The energy counter is published every ``counter_period_s`` (100 ms), instant power is the
  average of a 25 ms window published every 100 ms, and ``nvmlDeviceGetPowerUsage`` averages 1 s
  on Hopper: the plugin's meter has to cope with the same coarse readings as on real hardware.
* Several processes share a GPU's energy through its state file: a process commits its work
  there at least every second, at a ``simSynchronize`` 100 ms or more after its last commit, and
  whenever it takes or hands over GPUs (``simUseDevices``), shuts down or exits.
* Noise (``GPUENERGY_SIM_NOISE``, a coefficient of variation, seeded by ``GPUENERGY_SIM_SEED``)
  multiplies the busy power by a factor drawn anew at each ``simSynchronize``, so each measured
  region sees one draw.

Several processes may share a simulated GPU: the limit and the committed energy live in its state
file (see above for when each process commits its own energy). Power readings show the idle power
plus the reading process's own work.
"""

from __future__ import annotations

import atexit
import bisect
import os
import random
import sys
import threading
import time
import zlib
from collections import deque
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Sequence

import pynvml

from ..processes import is_alive
from .dvfs import DEFAULT_COMPUTE_BOUND, OperatingPoint, WorkloadProfile, operating_point
from .faults import FaultPlan, parse_faults
from .models import GpuSpec
from .state import GpuState, GpuStateFile, SimStateError, default_state_dir, load_machine

FAULTS_ENV = "GPUENERGY_SIM_FAULTS"
NOISE_ENV = "GPUENERGY_SIM_NOISE"
SEED_ENV = "GPUENERGY_SIM_SEED"
#: How long one read of the energy counter takes, in ms (default 0). On a real H100 with driver
#: 580 it took 2.4 ms (median; 16 ms p99; benchmarks/results/real_gpu.json), against microseconds
#: here: set it to see the meter under real read costs. The wait releases the GIL, as ctypes does.
COUNTER_READ_ENV = "GPUENERGY_SIM_COUNTER_READ_MS"

_HISTORY_S = 15.0         # power history kept for windowed averages and the exact integral of recent regions
_COMMIT_PERIOD_S = 1.0   # at the latest; file I/O costs the GIL (see state.py)
# simSynchronize commits no more often than this: a commit is a locked rewrite of the state file
# (about 1.5 ms), and other processes see a real GPU's counter as late as its 100 ms publication.
# A process hands a GPU over (simUseDevices, shutdown, exit) with everything committed.
_SYNC_COMMIT_PERIOD_S = 0.1
# Another process's committed work shows on the counter this long after its commit: longer than a
# state file is cached (GpuStateFile.RECHECK_S), so no reader sees it earlier for one tick than another.
_VISIBLE_AFTER_S = 0.1
_COMMITS_KEPT_S = 10.0
_DRIVER_VERSION = "simulated"


@dataclass(frozen=True)
class SimDeviceHandle:
    index: int
    uuid: str


@dataclass(frozen=True)
class _Segment:
    """An interval [start, end] in which the device drew ``dynamic_w`` above idle."""

    start: float
    end: float
    dynamic_w: float          # power above idle, noise and the busy share included
    dynamic_at_start_mj: float


def _segment_start(segment: _Segment) -> float:
    return segment.start


def _nvml_error(code: int) -> pynvml.NVMLError:
    return pynvml.NVMLError(code)


class _SimDevice:
    """One simulated GPU as seen by this process."""

    def __init__(self, owner: "SimulatedNvml", spec: GpuSpec, index: int, state_dir: Path) -> None:
        self.owner = owner
        self.spec = spec
        self.index = index
        self.state_file = GpuStateFile(state_dir, spec, index)
        self.uuid = self.state_file.uuid
        now_wall, now_cpu = owner.wall_clock(), owner.cpu_clock()
        self.last_wall = now_wall
        self.last_cpu = now_cpu
        self.busy_until = now_wall
        self.own_dynamic_mj = 0.0
        self.own_committed_mj = 0.0
        self.last_commit = now_wall
        self.segments: deque[_Segment] = deque()
        self.noise_factor = 1.0
        self._rng = random.Random(f"{owner.seed}/{index}")
        phase_rng = random.Random(self.uuid)
        self.counter_phase_s = phase_rng.uniform(0, spec.counter_period_s)
        self.power_phase_s = phase_rng.uniform(0, spec.power_publish_s)
        self.stuck_value_mj: int | None = None
        self.last_counter_mj: int | None = None
        self._op_cache: dict[tuple[int, float], OperatingPoint] = {}

    # -- the model ---------------------------------------------------------------------------
    def operating_point(self, limit_mw: int) -> OperatingPoint:
        key = (limit_mw, self.owner.profile.compute_bound)
        if key not in self._op_cache:
            self._op_cache[key] = operating_point(self.spec, self.owner.profile, limit_mw / 1000.0)
        return self._op_cache[key]

    def advance(self) -> GpuState:
        """Account for the time and work since the last call; returns the current state.

        The CPU work since the last call arrived at some moments in between that the simulator
        cannot see, so it is taken as spread evenly over the interval (a fluid model): the GPU
        first works off what was still queued, then is busy for the new work's share of the rest
        of the interval; what does not fit stays queued. Calls come often (every read of the
        meter's recorder, every synchronisation), so the smearing is at most a publication period.
        """
        state = self.state_file.read()
        now, cpu = self.owner.wall_clock(), self.owner.cpu_clock()
        elapsed = now - self.last_wall
        if elapsed <= 0:
            return state
        work_s = min(max(cpu - self.last_cpu, 0.0), elapsed) if self.index in self.owner.active else 0.0
        point = self.operating_point(state.limit_mw)
        busy_w = max(point.busy_power_w * self.noise_factor - self.spec.idle_w, 0.0)
        device_s = work_s * point.time_factor
        queued_s = min(max(self.busy_until - self.last_wall, 0.0), elapsed)
        rest_s = elapsed - queued_s
        share = min(1.0, device_s / rest_s) if rest_s > 0 else 0.0
        self._append_segment(self.last_wall, self.last_wall + queued_s, busy_w)
        self._append_segment(self.last_wall + queued_s, now, busy_w * share)
        if queued_s >= elapsed:
            self.busy_until += device_s
        else:
            self.busy_until = now + max(device_s - rest_s, 0.0)
        while self.segments and self.segments[0].end < now - _HISTORY_S:
            self.segments.popleft()
        self.last_wall, self.last_cpu = now, cpu
        if now - self.last_commit >= _COMMIT_PERIOD_S:
            state = self.commit()
        return state

    def _append_segment(self, start: float, end: float, dynamic_w: float) -> None:
        """Add [start, end] at ``dynamic_w``, merged into the previous segment at the same power."""
        if end <= start:
            return
        if self.segments and self.segments[-1].dynamic_w == dynamic_w and self.segments[-1].end == start:
            self.segments[-1] = replace(self.segments[-1], end=end)
        else:
            self.segments.append(_Segment(start, end, dynamic_w, self.own_dynamic_mj))
        self.own_dynamic_mj += dynamic_w * (end - start) * 1000.0

    def commit(self) -> GpuState:
        pending = self.own_dynamic_mj - self.own_committed_mj
        self.last_commit = self.last_wall
        if pending <= 0:
            return self.state_file.read()
        now, pid = self.last_wall, os.getpid()

        def add(state: GpuState) -> GpuState:
            kept = tuple(c for c in state.recent_commits if c[0] >= now - _COMMITS_KEPT_S)
            return replace(state, dynamic_mj=state.dynamic_mj + pending, recent_commits=kept + ((now, pid, pending),))

        state = self.state_file.update(add, durable=False)
        self.own_committed_mj += pending
        return state

    def _own_dynamic_at(self, t: float) -> float:
        segments = self.segments
        if not segments or t >= segments[-1].end:
            return self.own_dynamic_mj
        if t <= segments[0].start:
            return segments[0].dynamic_at_start_mj
        seg = segments[bisect.bisect_right(segments, t, key=_segment_start) - 1]
        return seg.dynamic_at_start_mj + seg.dynamic_w * (min(t, seg.end) - seg.start) * 1000.0

    def energy_mj_at(self, t: float, state: GpuState) -> float:
        """The exact energy integral since the counter started, at wall time ``t`` (recent past)."""
        idle_mj = self.spec.idle_w * (t - state.created_at) * 1000.0
        me = os.getpid()
        not_yet_mj = sum(mj for when, pid, mj in state.recent_commits if pid != me and when > t - _VISIBLE_AFTER_S)
        others_mj = state.dynamic_mj - self.own_committed_mj - not_yet_mj
        return idle_mj + others_mj + self._own_dynamic_at(t) - state.counter_offset_mj

    @staticmethod
    def last_tick(now: float, period_s: float, phase_s: float) -> float:
        return phase_s + ((now - phase_s) // period_s) * period_s

    def average_power_mw(self, window_s: float) -> int:
        """The power reading published last: the average over ``window_s`` before its publication,
        with the sensor's jitter (up to 0.5 W, the same for every reader of that publication). A
        real reading is never the same twice in a row; that is also how a reader sees a new one."""
        state = self.advance()
        period = self.spec.power_publish_s
        published = self.last_tick(self.last_wall, period, self.power_phase_s)
        energy_mj = self.energy_mj_at(published, state) - self.energy_mj_at(published - window_s, state)
        tick = round((published - self.power_phase_s) / period)
        jitter_mw = zlib.crc32(f"{self.uuid}/{tick}".encode()) % 1001 - 500
        return max(int(round(energy_mj / window_s)) + jitter_mw, 0)

    def is_busy(self) -> bool:
        return self.busy_until > self.last_wall or bool(self.segments and self.segments[-1].dynamic_w > 0)

    def process_marker(self, pid: int) -> Path:
        """A file whose presence says that ``pid`` runs work on this GPU."""
        return self.state_file.path.with_suffix(".procs") / str(pid)

    def new_noise_epoch(self) -> None:
        cv = self.owner.noise_cv
        self.noise_factor = max(0.5, 1.0 + cv * self._rng.gauss(0.0, 1.0)) if cv > 0 else 1.0


class SimulatedNvml:
    """Drop-in for the ``pynvml`` module: ``SimulatedNvml().nvmlDeviceGetCount()`` and so on."""

    is_simulated = True

    def __init__(
        self,
        state_dir: Path | None = None,
        models: Sequence[str] | None = None,
        faults: str | None = None,
        noise_cv: float | None = None,
        seed: int | None = None,
        wall_clock: Callable[[], float] = time.time,
        cpu_clock: Callable[[], float] = time.process_time,
    ) -> None:
        self.state_dir = Path(state_dir) if state_dir is not None else default_state_dir()
        self._requested_models = tuple(models) if models is not None else None
        self._faults_text = faults if faults is not None else os.environ.get(FAULTS_ENV, "")
        self.noise_cv = noise_cv if noise_cv is not None else _env_float(NOISE_ENV, 0.0, low=0.0, high=0.5)
        self.seed = seed if seed is not None else int(_env_float(SEED_ENV, 0, low=-2**31, high=2**31))
        self.counter_read_s = _env_float(COUNTER_READ_ENV, 0.0, low=0.0, high=1000.0) / 1000.0
        self.wall_clock = wall_clock
        self.cpu_clock = cpu_clock
        self.faults = FaultPlan(parse_faults(self._faults_text))
        self.profile = WorkloadProfile(DEFAULT_COMPUTE_BOUND)
        self.active: set[int] = set()
        self._devices: list[_SimDevice] = []
        self._init_count = 0
        self._lock = threading.RLock()

    def __getattr__(self, name: str) -> Any:
        # NVML_* constants and NVMLError_* classes come from pynvml itself.
        if name.startswith("NVML"):
            return getattr(pynvml, name)
        raise AttributeError(name)

    # -- library lifetime ----------------------------------------------------------------------
    def nvmlInit(self) -> None:
        with self._lock:
            if self._init_count == 0:
                specs = load_machine(self.state_dir, self._requested_models)
                self._devices = [_SimDevice(self, spec, i, self.state_dir) for i, spec in enumerate(specs)]
                self._set_active(set(range(len(self._devices))))
                for device in self._devices:
                    device.new_noise_epoch()
                atexit.register(self._commit_at_exit)
            self._init_count += 1

    def nvmlShutdown(self) -> None:
        with self._lock:
            self._require_init()
            self._init_count -= 1
            if self._init_count == 0:
                atexit.unregister(self._commit_at_exit)
                self._commit_all()

    def _commit_at_exit(self) -> None:
        try:
            self._commit_all()
        except (SimStateError, OSError) as exc:
            print(f"gpuenergy simulator: energy of this process not saved: {exc}", file=sys.stderr)

    def _commit_all(self) -> None:
        with self._lock:
            for device in self._devices:
                device.advance()
                device.commit()
            self._set_active(set())

    def _require_init(self) -> None:
        if self._init_count <= 0:
            raise _nvml_error(pynvml.NVML_ERROR_UNINITIALIZED)

    def _device(self, handle: SimDeviceHandle, fault_kind: str | None = None) -> _SimDevice:
        self._require_init()
        if not isinstance(handle, SimDeviceHandle) or not 0 <= handle.index < len(self._devices):
            raise _nvml_error(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        device = self._devices[handle.index]
        if self.faults.fires("lost", device.index):
            raise _nvml_error(pynvml.NVML_ERROR_GPU_IS_LOST)
        if fault_kind == "read" and self.faults.fires("read_error", device.index):
            raise _nvml_error(pynvml.NVML_ERROR_UNKNOWN)
        return device

    # -- system and enumeration ----------------------------------------------------------------
    def nvmlSystemGetDriverVersion(self) -> str:
        self._require_init()
        return _DRIVER_VERSION

    def nvmlDeviceGetCount(self) -> int:
        self._require_init()
        return len(self._devices)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> SimDeviceHandle:
        self._require_init()
        if not isinstance(index, int) or not 0 <= index < len(self._devices):
            raise _nvml_error(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return SimDeviceHandle(index, self._devices[index].uuid)

    def nvmlDeviceGetHandleByUUID(self, uuid: str) -> SimDeviceHandle:
        self._require_init()
        uuid = uuid.decode() if isinstance(uuid, bytes) else uuid
        for device in self._devices:
            if device.uuid == uuid:
                return SimDeviceHandle(device.index, device.uuid)
        raise _nvml_error(pynvml.NVML_ERROR_NOT_FOUND)

    def nvmlDeviceGetName(self, handle: SimDeviceHandle) -> str:
        return self._device(handle).spec.name

    def nvmlDeviceGetUUID(self, handle: SimDeviceHandle) -> str:
        return self._device(handle).uuid

    def nvmlDeviceGetIndex(self, handle: SimDeviceHandle) -> int:
        return self._device(handle).index

    def nvmlDeviceGetCudaComputeCapability(self, handle: SimDeviceHandle) -> tuple[int, int]:
        return self._device(handle).spec.compute_capability

    def nvmlDeviceGetMigMode(self, handle: SimDeviceHandle) -> list[int]:
        self._device(handle)
        return [pynvml.NVML_DEVICE_MIG_DISABLE, pynvml.NVML_DEVICE_MIG_DISABLE]

    # -- power limits ------------------------------------------------------------------------
    def nvmlDeviceGetPowerManagementLimit(self, handle: SimDeviceHandle) -> int:
        with self._lock:
            return self._device(handle, "read").state_file.read().limit_mw

    def nvmlDeviceGetEnforcedPowerLimit(self, handle: SimDeviceHandle) -> int:
        return self.nvmlDeviceGetPowerManagementLimit(handle)

    def nvmlDeviceGetPowerManagementDefaultLimit(self, handle: SimDeviceHandle) -> int:
        return int(self._device(handle).spec.default_limit_w * 1000)

    def nvmlDeviceGetPowerManagementLimitConstraints(self, handle: SimDeviceHandle) -> list[int]:
        spec = self._device(handle).spec
        return [int(spec.min_limit_w * 1000), int(spec.max_limit_w * 1000)]

    def nvmlDeviceSetPowerManagementLimit(self, handle: SimDeviceHandle, limit: int) -> None:
        with self._lock:
            device = self._device(handle)
            if self.faults.fires("no_permission", device.index):
                raise _nvml_error(pynvml.NVML_ERROR_NO_PERMISSION)
            if self.faults.fires("set_error", device.index):
                raise _nvml_error(pynvml.NVML_ERROR_UNKNOWN)
            low, high = self.nvmlDeviceGetPowerManagementLimitConstraints(handle)
            if not isinstance(limit, int) or not low <= limit <= high:
                raise _nvml_error(pynvml.NVML_ERROR_INVALID_ARGUMENT)
            if self.faults.fires("set_ignored", device.index):
                return
            device.advance()  # the energy so far was drawn under the old limit
            device.state_file.update(lambda s: replace(s, limit_mw=limit))

    # -- energy, power, clocks ---------------------------------------------------------------
    def nvmlDeviceGetTotalEnergyConsumption(self, handle: SimDeviceHandle) -> int:
        # A slow read (COUNTER_READ_ENV) takes its value in the middle and holds no GIL while it
        # waits, like a ctypes call into the real library: one wait, then the value as of then.
        taken_at = None
        if self.counter_read_s:
            taken_at = self.wall_clock() + self.counter_read_s / 2
            time.sleep(self.counter_read_s)
        with self._lock:
            device = self._device(handle, "read")
            if self.faults.has("no_counter", device.index) or not device.spec.has_energy_counter:
                raise _nvml_error(pynvml.NVML_ERROR_NOT_SUPPORTED)
            return self._counter_reading(device, taken_at)

    def _counter_reading(self, device: _SimDevice, taken_at: float | None = None) -> int:
        state = device.advance()
        moment = device.last_wall if taken_at is None else min(taken_at, device.last_wall)
        tick = device.last_tick(moment, device.spec.counter_period_s, device.counter_phase_s)
        read = self.faults.count("counter_read", device.index)
        if read and self.faults.active("counter_reset", device.index, read):
            published = device.energy_mj_at(tick, state)
            state = device.state_file.update(lambda s: replace(s, counter_offset_mj=s.counter_offset_mj + published))
        value = max(int(device.energy_mj_at(tick, state)), 0)
        if read and self.faults.active("counter_stuck", device.index, read):
            device.stuck_value_mj = device.stuck_value_mj if device.stuck_value_mj is not None else value
            value = device.stuck_value_mj
        if read and self.faults.active("counter_backwards", device.index, read) and device.last_counter_mj is not None:
            value = max(device.last_counter_mj - 1000, 0)
        device.last_counter_mj = value
        return value

    def nvmlDeviceGetPowerUsage(self, handle: SimDeviceHandle) -> int:
        with self._lock:
            device = self._device(handle, "read")
            return device.average_power_mw(device.spec.power_usage_average_s)

    def nvmlDeviceGetFieldValues(self, handle: SimDeviceHandle, field_ids: Sequence[int]) -> Any:
        with self._lock:
            device = self._device(handle, "read")
            values = (pynvml.c_nvmlFieldValue_t * len(field_ids))()
            timestamp_us = int(device.owner.wall_clock() * 1e6)
            for slot, field_id in zip(values, field_ids):
                slot.fieldId = field_id
                slot.timestamp = timestamp_us
                slot.valueType = pynvml.NVML_VALUE_TYPE_UNSIGNED_INT
                supported = device.spec.has_instant_power and not self.faults.has("no_instant_power", device.index)
                if field_id == pynvml.NVML_FI_DEV_POWER_INSTANT and supported:
                    slot.value.uiVal = device.average_power_mw(device.spec.power_window_s)
                    slot.nvmlReturn = pynvml.NVML_SUCCESS
                elif field_id == pynvml.NVML_FI_DEV_POWER_AVERAGE and supported:
                    slot.value.uiVal = device.average_power_mw(1.0)
                    slot.nvmlReturn = pynvml.NVML_SUCCESS
                else:
                    slot.nvmlReturn = pynvml.NVML_ERROR_NOT_SUPPORTED
            return values

    def nvmlDeviceGetClockInfo(self, handle: SimDeviceHandle, clock_type: int) -> int:
        with self._lock:
            device = self._device(handle)
            state = device.advance()
            point = device.operating_point(state.limit_mw)
            if clock_type == pynvml.NVML_CLOCK_MEM:
                return int(point.mem_clock_mhz(device.spec) if device.is_busy() else device.spec.mem_clock_mhz)
            if clock_type in (pynvml.NVML_CLOCK_SM, pynvml.NVML_CLOCK_GRAPHICS):
                return int(point.sm_clock_mhz(device.spec) if device.is_busy() else device.spec.sm_clock_idle_mhz)
            raise _nvml_error(pynvml.NVML_ERROR_INVALID_ARGUMENT)

    def nvmlDeviceGetMaxClockInfo(self, handle: SimDeviceHandle, clock_type: int) -> int:
        spec = self._device(handle).spec
        if clock_type == pynvml.NVML_CLOCK_MEM:
            return int(spec.mem_clock_mhz)
        return int(spec.sm_clock_max_mhz)

    # -- simulator-only extensions -------------------------------------------------------------
    def simSetWorkloadProfile(self, compute_bound: float) -> None:
        """Declare how compute-bound the work from now on is (1 = shader-bound, 0 = memory-bound)."""
        with self._lock:
            profile = WorkloadProfile(compute_bound)
            for device in self._devices:
                device.advance()  # work so far ran under the previous profile
            self.profile = profile

    def simUseDevices(self, indices: Sequence[int]) -> None:
        """Which simulated GPUs this process's work runs on (default: all of them).

        While a process uses a GPU, NVML lists it among the GPU's running processes.
        """
        with self._lock:
            self._require_init()
            wanted = {i for i in indices if 0 <= i < len(self._devices)}
            for device in self._devices:
                device.advance()
                if wanted != self.active:
                    device.commit()   # a hand-over: the next holder's counter starts after this work
            if wanted != self.active:
                self._set_active(wanted)

    def _set_active(self, indices: set[int]) -> None:
        for device in self._devices:
            marker = device.process_marker(os.getpid())
            if device.index in indices:
                marker.parent.mkdir(parents=True, exist_ok=True)
                marker.touch()
            else:
                marker.unlink(missing_ok=True)
        self.active = indices

    def nvmlDeviceGetComputeRunningProcesses(self, handle: SimDeviceHandle) -> list:
        device = self._device(handle)
        running = []
        for marker in device.process_marker(0).parent.glob("*"):
            pid = int(marker.name) if marker.name.isdigit() else None
            if pid is not None and is_alive(pid):
                running.append(pynvml.c_nvmlProcessInfo_v2_t(pid=pid, usedGpuMemory=0))
        return running

    def simSynchronize(self) -> None:
        """Wait until the simulated GPUs have executed the work queued so far."""
        with self._lock:
            self._require_init()
            for device in self._devices:
                device.advance()
            wait_s = max((d.busy_until for d in self._devices), default=0.0) - self.wall_clock()
        if wait_s > 0:
            time.sleep(wait_s)
        with self._lock:
            for device in self._devices:
                device.advance()
                if device.last_wall - device.last_commit >= _SYNC_COMMIT_PERIOD_S:
                    device.commit()
                device.new_noise_epoch()

    def simExactEnergyMj(self, handle: SimDeviceHandle, wall_time: float | None = None) -> float:
        """The model's exact energy integral (not quantised, not delayed) at ``wall_time``."""
        with self._lock:
            device = self._device(handle)
            state = device.advance()
            return device.energy_mj_at(device.last_wall if wall_time is None else wall_time, state)

    def simWallClock(self) -> float:
        return self.wall_clock()

    def simArmFaults(self, text: str) -> None:
        """Inject faults (``GPUENERGY_SIM_FAULTS`` syntax) counted from the next call on, while running."""
        with self._lock:
            self.faults.arm(parse_faults(text))


def _env_float(name: str, default: float, *, low: float, high: float) -> float:
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
