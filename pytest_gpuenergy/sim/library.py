"""What the simulated NVML and the simulated AMD SMI have in common: one machine under both.

Each library object stands in for its vendor's module (``pynvml``, ``amdsmi``) over a
:class:`~.machine.SimulatedMachine`. Its own init and shutdown count as in the real library (a call
before init is that library's "not initialised" error) and open and close the machine, which both may
share: ``SimulatedAmdSmi(nvml.machine)``. The ``sim`` extras answer the same on either library object,
for the whole machine: the plugin may call them on whichever it holds.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from .clock import VirtualClock, WallClock
from .device import SimDevice
from .faults import FaultPlan
from .machine import SimDeviceHandle, SimulatedMachine
from .roofline import GpuWork
from .timeline import Timeline


class SimulatedLibrary:
    """The base of ``SimulatedNvml`` and ``SimulatedAmdSmi``; ``vendor`` says whose devices it lists."""

    is_simulated = True
    vendor = ""

    def __init__(
        self,
        machine: SimulatedMachine | None = None,
        *,
        state_dir: Path | None = None,
        models: Sequence[str] | None = None,
        faults: str | None = None,
        noise_cv: float | None = None,
        seed: int | None = None,
        clock: str | None = None,
        cpu_clock: Callable[[], float] | None = None,
    ) -> None:
        if machine is None:
            machine = SimulatedMachine(state_dir=state_dir, models=models, faults=faults, noise_cv=noise_cv,
                                       seed=seed, clock=clock, cpu_clock=cpu_clock)
        self.machine = machine
        self._init_count = 0

    # -- what the machine holds, read through the library (the plugin and tests use these) -----------
    @property
    def state_dir(self) -> Path:
        return self.machine.state_dir

    @property
    def clock(self) -> VirtualClock | WallClock:
        return self.machine.clock

    @property
    def faults(self) -> FaultPlan:
        return self.machine.faults

    @property
    def seed(self) -> int:
        return self.machine.seed

    @property
    def noise_cv(self) -> float:
        return self.machine.noise_cv

    # -- lifetime ------------------------------------------------------------------------------------
    def _open(self) -> None:
        with self.machine.lock:
            self.machine.open()
            self._init_count += 1

    def _close(self) -> None:
        with self.machine.lock:
            self._require_init()
            self._init_count -= 1
            self.machine.close()

    def _require_init(self) -> None:
        if self._init_count <= 0:
            raise self._not_initialised()

    def _not_initialised(self) -> Exception:
        raise NotImplementedError

    @property
    def _devices(self) -> list[SimDevice]:
        """This library's devices, in its own order (its index of each is its place here)."""
        return self.machine.vendor_devices(self.vendor)

    def _handle(self, device: SimDevice) -> SimDeviceHandle:
        return SimDeviceHandle(self._devices.index(device), self._uuid(device), device.index)

    def _uuid(self, device: SimDevice) -> str:
        return device.uuid

    def _machine_device(self, handle: Any) -> SimDevice | None:
        """The device behind either library's handle (the ``sim`` extras take both), or None."""
        if not isinstance(handle, SimDeviceHandle) or not 0 <= handle.machine_index < len(self.machine.devices):
            return None
        return self.machine.devices[handle.machine_index]

    def _own_device(self, handle: Any) -> SimDevice | None:
        """The device behind one of this library's own handles, or None."""
        device = self._machine_device(handle)
        return device if device is not None and device.spec.vendor == self.vendor else None

    def _any_device(self, handle: Any, fault_kind: str | None = None) -> SimDevice:
        """Either library's device, meeting its faults (``lost``, ``read_error``) in this library's words."""
        self._require_init()
        device = self._machine_device(handle)
        if device is None:
            raise self._invalid_argument()
        fault = self.machine.fault(device, fault_kind)
        if fault is not None:
            raise self._fault_error(fault)
        return device

    def _invalid_argument(self) -> Exception:
        raise NotImplementedError

    def _fault_error(self, fault: str) -> Exception:
        """The library's error for ``lost`` or ``read_error``."""
        raise NotImplementedError

    # -- the simulator-only extensions (``machine``), for the whole machine ----------------------------
    def simMachineIndex(self, handle: SimDeviceHandle) -> int:
        """The GPU's place on the machine (``GPUENERGY_SIM_GPUS`` order; an MI250X's dies count apart)."""
        return self._any_device(handle).index

    def simUseDevices(self, indices: Sequence[int]) -> None:
        """Which GPUs (machine indices) this process's work runs on (default: all of them)."""
        self._require_init()
        self.machine.simUseDevices(indices)

    def simSynchronize(self) -> None:
        """Wait until the simulated GPUs have executed the work queued so far."""
        self._require_init()
        self.machine.simSynchronize()

    def simSleepUntil(self, moment: float) -> None:
        """Wait until ``moment`` on the simulator's clock (at once on a virtual one)."""
        self.machine.simSleepUntil(moment)

    def simDeclareWork(self, work: GpuWork) -> None:
        """One step of GPU work was launched: queue it on the GPUs this process uses (see ``work``)."""
        self._require_init()
        self.machine.simDeclareWork(work)

    def simHostTime(self, host_s: float) -> None:
        """The host waited for the GPUs, then worked ``host_s`` alone: the GPUs idle that long (see ``work``)."""
        self._require_init()
        self.machine.simHostTime(host_s)

    def simQueuedUntil(self) -> float:
        """When the GPUs in use will have run the work queued so far (no wait; see ``machine``)."""
        self._require_init()
        return self.machine.simQueuedUntil()

    def simCountCpuWork(self, counting: bool) -> None:
        """Whether the process's CPU time stands for GPU work from now on (where none is declared)."""
        self.machine.simCountCpuWork(counting)

    def simSetWorkloadProfile(self, compute_bound: float) -> None:
        """Declare how compute-bound the work from now on is (1 = shader-bound, 0 = memory-bound)."""
        self.machine.simSetWorkloadProfile(compute_bound)

    def simBeginTest(self, test_id: str, indices: Sequence[int] = ()) -> None:
        """A test starts on the GPUs ``indices`` (machine indices), in a world of its own (``machine``)."""
        self._require_init()
        self.machine.simBeginTest(test_id, indices)

    def simWallEnergyMj(self, handle: SimDeviceHandle) -> float:
        """The GPU's energy since its state began, on the host's wall clock (the session's total)."""
        return self.machine.wall_energy_mj(self._any_device(handle))

    def simBeyondWallS(self, handle: SimDeviceHandle) -> float:
        """The time tests' virtual worlds kept the GPU occupied beyond the wall clock (the session's total lasts that longer)."""
        return self.machine.beyond_wall_s(self._any_device(handle))

    def simExactEnergyMj(self, handle: SimDeviceHandle, moment: float | None = None) -> float:
        """The model's exact energy integral (not quantised, not delayed) at ``moment`` on its clock."""
        return self.machine.exact_energy_mj(self._any_device(handle), moment)

    def simGetGpuLockedClocks(self, handle: SimDeviceHandle) -> tuple[int, int] | None:
        """The locked SM clock range (min, max) in MHz, or None. Real NVML has no such reading: the
        plugin knows a real GPU's lock only from its own journal (see ``clocks.py``)."""
        with self.machine.lock:
            state = self._any_device(handle, "read").state_file.read(fresh=True)
            return (state.locked_sm_min_mhz, state.locked_sm_max_mhz) if state.sm_clock_locked else None

    def simStateFile(self, handle: SimDeviceHandle) -> Path:
        """The simulated GPU's state file (its limit lives there: what a repair names to fix by hand)."""
        return self._any_device(handle).state_file.path

    def simTimelines(self) -> list[Timeline]:
        """Every simulated GPU's power above idle over time, both vendors', in machine order (read only:
        the simulated host's CPU load follows the GPUs' busy time, ``powercap``)."""
        return [device.timeline for device in self.machine.devices]

    def simClock(self) -> VirtualClock | WallClock:
        """The simulator's clock: ``now()``, ``sleep_until()``; a virtual one also runs plans (``start``)."""
        return self.machine.simClock()

    def simSeed(self) -> int:
        return self.machine.simSeed()

    def simWorkSource(self) -> str:
        """What stood for GPU work since the GPUs last changed hands: ``declared`` or ``cpu-time``."""
        return self.machine.simWorkSource()

    def simSettings(self) -> dict[str, Any]:
        """What makes a session's simulated figures repeat: the clock, the seed and the noise."""
        return self.machine.simSettings()

    def simArmFaults(self, text: str) -> None:
        """Inject faults (``GPUENERGY_SIM_FAULTS`` syntax) counted from the next call on, while running."""
        self.machine.simArmFaults(text)
