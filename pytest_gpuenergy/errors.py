"""Errors with messages written for the person at the terminal: what went wrong and what to do."""

from __future__ import annotations


class GpuEnergyError(Exception):
    """Base class: every error the plugin raises on purpose."""


class BackendUnavailable(GpuEnergyError):
    """The requested GPU backend cannot be used on this machine."""


class GpuSelectionError(GpuEnergyError):
    """``--gpu-devices`` or ``CUDA_VISIBLE_DEVICES`` names no usable GPU."""


class CapOutOfRange(GpuEnergyError):
    """The cap lies outside what the GPU allows; the test case is skipped, not failed."""


class CapPermissionError(GpuEnergyError):
    """The process may not change power limits (NVML needs root / CAP_SYS_ADMIN)."""


class LimitChangeError(GpuEnergyError):
    """Setting a limit failed, or the GPU enforces something else than requested."""


class LimitRestoreError(GpuEnergyError):
    """A GPU could not be put back to its previous limit: it is left capped."""


class MeasurementError(GpuEnergyError):
    """The meter could not produce a trustworthy figure."""


class DeviceError(GpuEnergyError):
    """A call into a GPU's library (NVML, AMD SMI) failed; the message names the GPU, the library
    and the call. Each vendor's module (``gpu/nvidia.py``, ``gpu/amd.py``) translates its library's
    errors into this family in one place, so nothing else in the package knows either library."""


class DeviceNotSupported(DeviceError):
    """This GPU or driver does not offer the reading or setting (an old GPU, a MIG slice, a VM)."""


class DevicePermissionError(DeviceError):
    """The library refused for lack of privileges (setting limits or clocks needs root)."""


class DeviceTransientError(DeviceError):
    """A busy or timed-out driver: still failing after the vendor module's retries; trying again
    later may work."""


class GpuLostError(MeasurementError, DeviceError):
    """The GPU stopped answering (fell off the bus) during the test."""


class EnergyMeasurementWarning(UserWarning):
    """A figure was produced but deserves less trust than usual (region too short, ...)."""


class PowerLimitWarning(UserWarning):
    """A limit was applied, restored or repaired in a way the user should know about."""


class JournalCorrupt(GpuEnergyError):
    """A power-limit journal entry cannot be read; nothing is guessed, the user is told which file."""


class UnsafeStateFile(GpuEnergyError):
    """A journal or lock file another user could have planted or can change (a symlink, a hard link,
    someone else's file, a world-writable one): acting on it could set a limit or overwrite a file."""


class NotARegularFile(GpuEnergyError, OSError):
    """A file to write (a report) exists and is a device, a folder or a FIFO: replacing it by rename
    would destroy it. Also an ``OSError``, so that every caller reporting a failed write reports it."""


class StorageError(GpuEnergyError):
    """A run document cannot be read or written; the message names the file and what to do."""


class BudgetError(GpuEnergyError, ValueError):
    """An ``energy_budget`` marker is malformed; raised at collection."""


class GpuBusyError(GpuEnergyError):
    """Another process held a GPU for longer than we were willing to wait."""


class SimStateError(GpuEnergyError, RuntimeError):
    """The simulator's state folder holds something it cannot use."""


class CapSyntaxError(GpuEnergyError, ValueError):
    """A cap the user typed cannot be understood; the message names it and says what is valid."""


class JsonInputError(GpuEnergyError, ValueError):
    """Text that is not the JSON this package reads; the message says where and why."""


class SettingError(GpuEnergyError, ValueError):
    """An option, ini setting or argument has a value the plugin cannot use; the message names it
    and says what is valid. The pytest glue turns it into a usage error, the CLI into exit code 2."""


class FleetUsageError(GpuEnergyError, ValueError):
    """Bad input to ``gpuenergy fleet``: the message names the problem and the fix (exit 2)."""


class RayMissing(GpuEnergyError, RuntimeError):
    """``gpuenergy fleet`` needs Ray and it is not installed: the message says how to install it."""


class HostEnergyError(MeasurementError):
    """The host's CPU or DRAM energy (Linux powercap, RAPL) cannot be read: the message names the
    file or the folder and what to do (``host/powercap.py``)."""
