"""What ``gpuenergy info`` says about a GPU's SM clocks: their range, the clock now, and any lock.

The ``--json`` keys added for the second knob (the power-limit keys are fixed, scripts rely on them; these come
after them): ``sm_clock_min_mhz``, ``sm_clock_max_mhz`` (the supported SM clocks),
``sm_clock_mhz`` (the clock now), ``sm_clock_locked`` (``true``/``false``, or ``null`` where the
library cannot read a lock: real NVML), ``sm_clock_lock_mhz`` (``[min, max]`` or ``null``).
A GPU whose clocks NVML cannot list reads ``null`` in each, as does an AMD GPU (no clock knob).
"""

from __future__ import annotations

from typing import Any

from ..errors import DeviceError
from .clocks import SM_CLOCK, clock_range, sm_clock_now_mhz
from .device import Gpu, SmClockLocking
from .knob import UNREADABLE


def clock_fields(gpu: Gpu) -> dict[str, Any]:
    """The SM clock keys of one ``gpuenergy info --json`` row."""
    fields: dict[str, Any] = {"sm_clock_min_mhz": None, "sm_clock_max_mhz": None, "sm_clock_mhz": None,
                              "sm_clock_locked": None, "sm_clock_lock_mhz": None}
    if not isinstance(gpu, SmClockLocking):
        return fields           # an AMD GPU: no SM clock knob here
    try:
        found = clock_range(gpu)
        fields.update(sm_clock_min_mhz=found.min_mhz, sm_clock_max_mhz=found.max_mhz)
    except (DeviceError, ValueError):
        pass
    try:
        fields["sm_clock_mhz"] = sm_clock_now_mhz(gpu)
    except DeviceError:
        pass
    try:
        lock = SM_CLOCK.read(gpu)
    except DeviceError:
        lock = UNREADABLE
    if lock is not UNREADABLE:
        fields.update(sm_clock_locked=lock is not None, sm_clock_lock_mhz=list(lock) if lock else None)
    return fields


def clock_line(row: dict[str, Any]) -> str:
    """One line of ``gpuenergy info``'s text for the row's SM clocks."""
    if row.get("vendor") == "amd":
        return "SM clock caps: not supported on AMD GPUs"
    if row["sm_clock_max_mhz"] is None:
        text = "SM clocks: not listed by NVML"
    else:
        text = f"SM clock range {row['sm_clock_min_mhz']}-{row['sm_clock_max_mhz']} MHz"
    if row["sm_clock_mhz"] is not None:
        text += f", now {row['sm_clock_mhz']} MHz"
    if row["sm_clock_locked"] is None:
        return text + ", lock: unknown (NVML cannot read one)"
    if row["sm_clock_locked"]:
        low, high = row["sm_clock_lock_mhz"]
        return text + f", LOCKED to {low}-{high} MHz"
    return text + ", not locked"
