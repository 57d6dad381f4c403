"""Faults the simulated GPU can be told to have, so that failure paths are tested, not hoped for.

``GPUENERGY_SIM_FAULTS`` holds a comma-separated list of ``NAME[@GPU][=CALLS]``:

* ``GPU``   the index of the simulated GPU it applies to, its place in ``GPUENERGY_SIM_GPUS`` (an
  MI250X's two dies count apart; on a machine of one vendor, the library's own index); default: every GPU;
* ``CALLS`` which calls of that kind fail, counted from 1 per process and GPU: ``3`` (the third
  and every later one), ``2-3`` (the second and third only), default every call.

=====================  ==========================================================================
``no_permission``      setting a limit or a clock lock raises ``NVMLError_NoPermission`` (not root;
                       AMD SMI: ``AMDSMI_STATUS_NO_PERM``)
``no_counter``         the energy counter raises ``NVMLError_NotSupported`` (pre-Volta GPUs; AMD SMI:
                       ``AMDSMI_STATUS_NOT_SUPPORTED``)
``no_instant_power``   the instant-power field value is not supported (AMD SMI: every socket power
                       reads "N/A")
``set_error``          setting a limit raises ``NVMLError_Unknown`` (AMD SMI: ``AMDSMI_STATUS_UNKNOWN_ERROR``)
``set_ignored``        setting a limit reports success and changes nothing
``read_error``         energy, power and limit reads raise ``NVMLError_Unknown`` (AMD SMI:
                       ``AMDSMI_STATUS_UNKNOWN_ERROR``)
``lost``               every call on the GPU raises ``NVMLError_GpuIsLost`` (the GPU fell off the bus;
                       AMD SMI: ``AMDSMI_STATUS_NOT_FOUND``)
``counter_reset``      the energy counter restarts from 0 (a driver reload) at that read
``counter_backwards``  the energy counter reads 1 J less than before at those reads
``counter_stuck``      the energy counter stops moving from that read on (as AMD SMI's accumulator
                       did on MI100s: ROCm/amdsmi#22, #38)
``clock_set_error``    locking the SM clock (``nvmlDeviceSetGpuLockedClocks``) raises ``NVMLError_Unknown``
``clock_reset_error``  resetting the SM clock lock raises ``NVMLError_Unknown``
``limit_rounded``      the GPU enforces its limit rounded down to a multiple of 25 W (the limit set
                       is kept as asked: ``nvmlDeviceGetPowerManagementLimit`` shows it)
``limit_clamped``      another power manager (a BMC, a node-level cap) holds the enforced limit at
                       70 % of the maximum, whatever is asked (seen on H100 nodes: 700 W requested,
                       500 W enforced)
=====================  ==========================================================================

The three ``counter_*`` faults count the same calls: reads of the energy counter.
=====================  ==========================================================================
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

FAULT_NAMES = (
    "no_permission", "no_counter", "no_instant_power", "set_error", "set_ignored",
    "read_error", "lost", "counter_reset", "counter_backwards", "counter_stuck",
    "clock_set_error", "clock_reset_error", "limit_rounded", "limit_clamped",
)
LIMIT_STEP_MW = 25_000          # limit_rounded: the enforced limit's step
CLAMP_SHARE = 0.7               # limit_clamped: the enforced limit at most this share of the maximum


@dataclass(frozen=True)
class Fault:
    name: str
    gpu_index: int | None = None
    first_call: int = 1
    last_call: int | None = None

    def covers(self, gpu_index: int, call_number: int) -> bool:
        if self.gpu_index is not None and self.gpu_index != gpu_index:
            return False
        if call_number < self.first_call:
            return False
        return self.last_call is None or call_number <= self.last_call


def parse_faults(text: str) -> tuple[Fault, ...]:
    """Parse the ``GPUENERGY_SIM_FAULTS`` syntax; a malformed entry is a ValueError naming it."""
    faults: list[Fault] = []
    for raw in text.split(","):
        item = raw.strip()
        if not item:
            continue
        head, _, calls = item.partition("=")
        name, _, gpu = head.partition("@")
        if name not in FAULT_NAMES:
            raise ValueError(
                f"unknown simulated fault {name!r} in GPUENERGY_SIM_FAULTS: choose from {', '.join(FAULT_NAMES)}"
            )
        try:
            gpu_index = int(gpu) if gpu else None
            first, last = _parse_calls(calls)
        except ValueError:
            raise ValueError(
                f"malformed simulated fault {item!r}: write NAME[@GPU][=N or =N-M], e.g. set_error@0=2"
            ) from None
        faults.append(Fault(name, gpu_index, first, last))
    return tuple(faults)


def _parse_calls(calls: str) -> tuple[int, int | None]:
    if not calls:
        return 1, None
    first_text, dash, last_text = calls.partition("-")
    first = int(first_text)
    last = int(last_text) if dash else None
    if first < 1 or (last is not None and last < first):
        raise ValueError(calls)
    return first, last


class FaultPlan:
    """Decides, call by call, whether a fault fires; counts calls per (kind, GPU) in this process."""

    def __init__(self, faults: tuple[Fault, ...] = ()) -> None:
        self._faults = faults
        self._calls: Counter[tuple[str, int]] = Counter()

    def __bool__(self) -> bool:
        return bool(self._faults)

    def arm(self, faults: tuple[Fault, ...]) -> None:
        """Add ``faults`` with their call numbers counted from now: ``counter_stuck=2`` then means
        the second read of the counter from this moment on (a long-lived reader has made many)."""
        shifted = []
        for fault in faults:
            kind = "counter_read" if fault.name.startswith("counter_") else fault.name
            done = max((n for (k, i), n in self._calls.items() if k == kind and fault.gpu_index in (None, i)), default=0)
            last = fault.last_call + done if fault.last_call is not None else None
            shifted.append(Fault(fault.name, fault.gpu_index, fault.first_call + done, last))
        self._faults = self._faults + tuple(shifted)

    def count(self, kind: str, gpu_index: int) -> int:
        """Count one call of ``kind`` on a GPU; returns its number (from 1)."""
        self._calls[(kind, gpu_index)] += 1
        return self._calls[(kind, gpu_index)]

    def active(self, name: str, gpu_index: int, call_number: int) -> bool:
        return any(f.name == name and f.covers(gpu_index, call_number) for f in self._faults)

    def fires(self, name: str, gpu_index: int) -> bool:
        """Whether fault ``name`` applies to this call of its own kind (counted here)."""
        if not any(f.name == name for f in self._faults):
            return False
        return self.active(name, gpu_index, self.count(name, gpu_index))

    def has(self, name: str, gpu_index: int) -> bool:
        """Whether ``name`` is configured for this GPU at all (a standing condition, not a call)."""
        return any(f.name == name and f.gpu_index in (None, gpu_index) for f in self._faults)
