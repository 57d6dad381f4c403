"""A simulated GPU that stands in for the NVML library itself.

``SimulatedNvml`` has the pynvml functions the plugin uses, with the same names, arguments, units
(mW, mJ, MHz) and error classes (pynvml's own ``NVMLError_*``), so the device code that drives a
real GPU is exactly the code that runs in CI. What it adds is prefixed ``sim``: the GPU work a step
launched (``simDeclareWork``; see ``work.declare_work``), how compute-bound undeclared work is
(``simSetWorkloadProfile``), waiting for queued work (``simSynchronize``, the analogue of
``torch.cuda.synchronize``), its clock (``simClock``) and its exact energy integral
(``simExactEnergyMj``, for accuracy benchmarks).

How the simulated GPU advances (``device`` and ``timeline``; ``roofline`` and ``dvfs`` for the model):

* **Time** is virtual by default (``clock``): it moves only with the GPU's work and with waiting
  on it, so declared work gives the same figures on any host. ``GPUENERGY_SIM_CLOCK=wall`` runs
  the simulated GPU in real time instead.
* **Work**: a step's declared work becomes time and power under the current limit (the roofline
  model, through the DVFS model) and is queued on the GPU. Where nothing was declared, the CPU
  time the process's main thread used inside measured regions stands for GPU work. Like a real GPU the simulated
  one executes asynchronously; ``simSynchronize`` waits until the queued work has finished.
* **Readings** are as coarse as real ones: the counter is published every ``counter_period_s``
  (100 ms), instant power is the average of a 25 ms window published every 100 ms, and
  ``nvmlDeviceGetPowerUsage`` averages 1 s on Hopper.
* **State**: the limit (and, on the wall clock, the energy of other processes) lives in the GPU's
  state file; a process commits its energy there when it hands a GPU over, shuts down or exits,
  and on the wall clock also at least every second and at synchronisations 100 ms apart.
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

import pynvml

from ..errors import SimStateError
from ..gpu.processes import is_alive
from . import work as work_registry
from .clock import CLOCK_ENV, VirtualClock, WallClock, clock_from_env
from .device import SimDevice
from .dvfs import DEFAULT_COMPUTE_BOUND, WorkloadProfile
from .faults import FaultPlan, parse_faults
from .roofline import GpuWork
from .seed import session_seed
from .state import default_state_dir, load_machine

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
_DRIVER_VERSION = "simulated"


@dataclass(frozen=True)
class SimDeviceHandle:
    index: int
    uuid: str


def _nvml_error(code: int) -> pynvml.NVMLError:
    return pynvml.NVMLError(code)


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
        clock: str | None = None,
        cpu_clock: Callable[[], float] | None = None,
    ) -> None:
        self.state_dir = Path(state_dir) if state_dir is not None else default_state_dir()
        self._requested_models = tuple(models) if models is not None else None
        self._faults_text = faults if faults is not None else os.environ.get(FAULTS_ENV, "")
        self.noise_cv = noise_cv if noise_cv is not None else _env_float(NOISE_ENV, DEFAULT_NOISE, low=0.0, high=0.5)
        self.seed = seed if seed is not None else session_seed()
        self.counter_read_s = _env_float(COUNTER_READ_ENV, 0.0, low=0.0, high=1000.0) / 1000.0
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
        self.profile = WorkloadProfile(DEFAULT_COMPUTE_BOUND)
        self.active: set[int] = set()
        self._devices: list[SimDevice] = []
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
                self._devices = [SimDevice(self, spec, i, self.state_dir) for i, spec in enumerate(specs)]
                self._set_active(set(range(len(self._devices))))
                for device in self._devices:
                    device.new_noise_epoch()
                atexit.register(self._commit_at_exit)
                work_registry.register(self)
            self._init_count += 1

    def nvmlShutdown(self) -> None:
        with self._lock:
            self._require_init()
            self._init_count -= 1
            if self._init_count == 0:
                atexit.unregister(self._commit_at_exit)
                work_registry.unregister(self)
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

    def wall_now(self) -> float:
        """The host's clock (commits are stamped with it, whatever the simulator's clock)."""
        return time.time()

    def _device(self, handle: SimDeviceHandle, fault_kind: str | None = None) -> SimDevice:
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
        with self._lock:
            device = self._device(handle, "read")
            return device.enforced_limit_mw(device.state_file.read())

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
        if self.counter_read_s and not self.clock.virtual:
            taken_at = self.clock.now() + self.counter_read_s / 2
            time.sleep(self.counter_read_s)
        with self._lock:
            device = self._device(handle, "read")
            if self.faults.has("no_counter", device.index) or not device.spec.has_energy_counter:
                raise _nvml_error(pynvml.NVML_ERROR_NOT_SUPPORTED)
            return self._counter_reading(device, taken_at)

    def _counter_reading(self, device: SimDevice, taken_at: float | None = None) -> int:
        state = device.advance()
        now = self.clock.now()
        moment = now if taken_at is None else min(taken_at, now)
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
            timestamp_us = int(self.clock.now() * 1e6)
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
            point = device.operating_point(state)
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

    # -- SM clock locks (see ``clocks.py``; the DVFS model honours them) ----------------------------
    def nvmlDeviceGetSupportedMemoryClocks(self, handle: SimDeviceHandle) -> list[int]:
        return [int(self._device(handle).spec.mem_clock_mhz)]

    def nvmlDeviceGetSupportedGraphicsClocks(self, handle: SimDeviceHandle, memory_clock_mhz: int) -> list[int]:
        """The SM clocks the GPU can run at, highest first (NVML's order), in ``SM_CLOCK_STEP_MHZ`` steps."""
        spec = self._device(handle).spec
        if int(memory_clock_mhz) != int(spec.mem_clock_mhz):
            raise _nvml_error(pynvml.NVML_ERROR_NOT_FOUND)
        return supported_sm_clocks(spec)

    def nvmlDeviceSetGpuLockedClocks(self, handle: SimDeviceHandle, min_mhz: int, max_mhz: int) -> None:
        """Lock the SM clock to [min, max]: like the driver, each end snaps to a supported clock."""
        with self._lock:
            device = self._device(handle)
            if self.faults.fires("no_permission", device.index):
                raise _nvml_error(pynvml.NVML_ERROR_NO_PERMISSION)
            if self.faults.fires("clock_set_error", device.index):
                raise _nvml_error(pynvml.NVML_ERROR_UNKNOWN)
            if not isinstance(min_mhz, int) or not isinstance(max_mhz, int) or not 0 < min_mhz <= max_mhz:
                raise _nvml_error(pynvml.NVML_ERROR_INVALID_ARGUMENT)
            clocks = supported_sm_clocks(device.spec)
            top = max([c for c in clocks if c <= max_mhz] or [clocks[-1]])
            bottom = min([c for c in clocks if c >= min_mhz] or [clocks[0]])
            bottom = min(bottom, top)
            device.advance()   # the energy so far was drawn at the old clocks
            device.state_file.update(lambda s: replace(s, locked_sm_min_mhz=bottom, locked_sm_max_mhz=top))

    def nvmlDeviceResetGpuLockedClocks(self, handle: SimDeviceHandle) -> None:
        with self._lock:
            device = self._device(handle)
            if self.faults.fires("no_permission", device.index):
                raise _nvml_error(pynvml.NVML_ERROR_NO_PERMISSION)
            if self.faults.fires("clock_reset_error", device.index):
                raise _nvml_error(pynvml.NVML_ERROR_UNKNOWN)
            device.advance()
            device.state_file.update(lambda s: replace(s, locked_sm_min_mhz=0, locked_sm_max_mhz=0))

    def simGetGpuLockedClocks(self, handle: SimDeviceHandle) -> tuple[int, int] | None:
        """The locked SM clock range (min, max) in MHz, or None. Real NVML has no such reading: the
        plugin knows a real GPU's lock only from its own journal (see ``clocks.py``)."""
        with self._lock:
            state = self._device(handle, "read").state_file.read()
            return (state.locked_sm_min_mhz, state.locked_sm_max_mhz) if state.sm_clock_locked else None

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
                # A hand-over: the next holder's counter starts after this work. On a virtual clock
                # no other process reads this one's counter: committing (a locked rewrite of the
                # state file, about 10 ms) once a second is enough for the session's total.
                due = not self.clock.virtual or self.wall_now() - device.last_commit_wall >= _COMMIT_PERIOD_S
                if wanted != self.active and due:
                    device.commit()
            if wanted != self.active:
                self._set_active(wanted)
                self.declared = False

    def _set_active(self, indices: set[int]) -> None:
        for device in self._devices:
            device.state_file.mark_process(os.getpid(), device.index in indices)
        self.active = indices

    def nvmlDeviceGetComputeRunningProcesses(self, handle: SimDeviceHandle) -> list:
        device = self._device(handle)
        return [pynvml.c_nvmlProcessInfo_v2_t(pid=pid, usedGpuMemory=0)
                for pid in device.state_file.process_ids() if is_alive(pid)]

    def simSynchronize(self) -> None:
        """Wait until the simulated GPUs have executed the work queued so far."""
        with self._lock:
            self._require_init()
            for device in self._devices:
                device.advance()
                device.flush()
            done_at = max((d.timeline.end for d in self._devices if d.index in self.active), default=0.0)
            if self.clock.virtual:
                self._move_clock_to(done_at)
        if not self.clock.virtual:
            self.clock.sleep_until(done_at)
        with self._lock:
            for device in self._devices:
                device.advance()
                if not self.clock.virtual and device.last_seen - device.last_commit >= _SYNC_COMMIT_PERIOD_S:
                    device.commit()
                device.new_noise_epoch()

    def simSleepUntil(self, moment: float) -> None:
        """Wait until ``moment`` on the simulator's clock (at once on a virtual one: time moves there)."""
        if self.clock.virtual:
            with self._lock:
                self._move_clock_to(moment)
        else:
            self.clock.sleep_until(moment)

    def _move_clock_to(self, moment: float) -> None:
        """Advance the virtual clock, waking whatever waits on it; what that costs the CPU is not GPU work."""
        for device in self._devices:
            device.advance()
        self.quiet += 1
        try:
            self.clock.sleep_until(moment)
        finally:
            self.quiet -= 1
            for device in self._devices:
                device.forget_cpu()

    def simDeclareWork(self, work: GpuWork) -> None:
        """One step of GPU work was launched: queue it on the GPUs this process uses (see ``work``)."""
        with self._lock:
            self._require_init()
            self.declared = True
            for device in self._devices:
                if device.index in self.active:
                    device.declare(work)

    def simCountCpuWork(self, counting: bool) -> None:
        """Whether the process's CPU time stands for GPU work from now on (where none is declared).

        A meter turns it on for its regions only, so that a test's own setup and the plugin's work
        between regions never count as GPU work.
        """
        with self._lock:
            for device in self._devices:
                device.advance()
                device.forget_cpu()
                if not counting:
                    device.pending_cpu_s = 0.0     # gathered outside what was to count
            self.counts_cpu = counting

    def simWallEnergyMj(self, handle: SimDeviceHandle) -> float:
        """The energy the GPU drew since its state began, on the host's wall clock: its idle power over
        the wall time (and over the time tests' virtual worlds ran beyond it), plus the work every
        process committed (and this one's not committed yet).

        A session's tests each run in a virtual world of their own, whose time is no wall time; this
        is what a real counter would show across the whole session (setup, collection, idle between
        tests included), for the session's total (``--energy-top``)."""
        with self._lock:
            device = self._device(handle)
            device.advance()
            state = device.state_file.read()
            idle_s = self.wall_now() - state.created_at + self._world_idle_excess_s()
            return device.spec.idle_w * idle_s * 1000.0 + state.dynamic_mj + device.unsaved_mj()

    def _world_idle_excess_s(self) -> float:
        """How much longer the current test's virtual world has run than the host's wall clock: the
        GPUs idle through that time too, which a total on the wall clock alone would leave out (and a
        session's regions would then add up to more than its total). Never negative: a slow host's
        wall time is already counted as idle."""
        if not isinstance(self.clock, VirtualClock):
            return 0.0
        virtual_start_s, wall_start = self._world_started
        return max((self.clock.now() - virtual_start_s) - (self.wall_now() - wall_start), 0.0)

    def simBeginTest(self, test_id: str, indices: Sequence[int] = ()) -> None:
        """A test starts: its figures must depend on the test and the seed only, whatever ran before it
        (the order, ``-k``, the pytest-xdist worker). Its noise is drawn for the test alone; on the
        virtual clock, time also starts over at 0 on idle GPUs (the energy of the world that ends is
        carried to the next commit), so that its regions fall at the same moments against the counter's ticks
        and see the same counter values. What waited on the clock (the meter's recorders) is stopped:
        the meter starts new ones. ``indices``: the test's GPUs, in order; the k-th draws as slot k
        (the same on whichever GPU a pytest-xdist worker runs the test)."""
        with self._lock:
            self._require_init()
            slots = {index: slot for slot, index in enumerate(indices)}
            held = [d for d in self._devices if d.index in slots]
            if isinstance(self.clock, VirtualClock):
                excess_s = self._world_idle_excess_s()
                for device in self._devices:
                    device.advance()
                    device.carried_mj += device.spec.idle_w * excess_s * 1000.0
                self.clock.restart(0.0)
                self._world_started = (0.0, self.wall_now())
                for device in self._devices:
                    device.restart(test_id, slots.get(device.index, len(slots) + device.index))
                self.declared = False
            else:
                for device in held:
                    device.reseed(test_id, slots[device.index])

    def simExactEnergyMj(self, handle: SimDeviceHandle, moment: float | None = None) -> float:
        """The model's exact energy integral (not quantised, not delayed) at ``moment`` on its clock."""
        with self._lock:
            device = self._device(handle)
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
        with self._lock:
            self.faults.arm(parse_faults(text))


SM_CLOCK_STEP_MHZ = 15    # Ampere and Hopper list their SM clocks in 15 MHz steps


def supported_sm_clocks(spec: Any) -> list[int]:
    """A simulated GPU's SM clocks in MHz, highest first: from the maximum down in steps, and the minimum."""
    top, bottom = int(spec.sm_clock_max_mhz), int(spec.sm_clock_min_mhz)
    clocks = list(range(top, bottom, -SM_CLOCK_STEP_MHZ))
    return clocks + [bottom]


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
