"""Errors with messages written for the person at the terminal: what went wrong and what to do."""

from __future__ import annotations


class GpuEnergyError(Exception):
    """Base class: every error the plugin raises on purpose."""


class BackendUnavailable(GpuEnergyError):
    """The requested GPU backend cannot be used on this machine."""


class GpuSelectionError(GpuEnergyError):
    """``--gpus`` or ``CUDA_VISIBLE_DEVICES`` names no usable GPU."""


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


class GpuLostError(MeasurementError):
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
