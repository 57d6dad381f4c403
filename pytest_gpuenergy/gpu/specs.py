"""What users type for the GPU side: the backend, power caps and SM clock caps, checked and parsed.

These are read at every pytest start (the options), by the ``gpuenergy`` command and by the budget
markers, long before any GPU is touched, so this module imports nothing that talks to a GPU: a
session that uses none of the plugin pays for parsing its options and no more. The mechanisms
that apply a setting live in ``capping.py`` and ``clocks.py``.

Labels never look alike: power caps ``150W``, ``60%``, ``min``, ``max``, ``default``; clock caps
``1200MHz``, ``clk50%`` (of the maximum SM clock), ``clkmax``, so ``[60%-clk50%]`` reads as 60 %
of the power limit and half the clock.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..errors import BackendUnavailable, CapSyntaxError
from ..runs.validation import shown

if TYPE_CHECKING:
    from .device import PowerLimits

BACKEND_CHOICES = ("auto", "nvml", "amdsmi", "sim")


def default_backend() -> str:
    """``$GPUENERGY_BACKEND`` or ``auto``: the backend when neither the command line nor the ini names one.

    A machine's owner can pin it once (``sim`` on a shared GPU box where no test may touch the
    real GPUs; the plugin's own test suite does exactly that). A bad value is an error naming it.
    """
    kind = os.environ.get("GPUENERGY_BACKEND", "").strip() or "auto"
    if kind not in BACKEND_CHOICES:
        raise BackendUnavailable(f"GPUENERGY_BACKEND={kind!r}: choose from {', '.join(BACKEND_CHOICES)}, or unset it")
    return kind


# -- power caps ------------------------------------------------------------------------------

MAX_PLAUSIBLE_W = 5000.0        # no GPU's limit is near this; a larger value is a typo
MAX_PLAUSIBLE_PERCENT = 200.0
_NAMED = ("min", "max", "default")


@dataclass(frozen=True)
class CapSpec:
    """One cap as typed: watts, a percentage of the default limit, or min/max/default."""

    kind: str               # "watts", "percent", "min", "max", "default"
    value: float | None = None

    @property
    def label(self) -> str:
        if self.kind == "watts":
            return f"{self.value:g}W"
        if self.kind == "percent":
            return f"{self.value:g}%"
        return self.kind

    def resolve_mw(self, limits: PowerLimits) -> int:
        if self.kind in ("watts", "percent"):
            value = self.value
            assert value is not None    # both kinds carry their number
            return int(round(value * 1000 if self.kind == "watts" else limits.default_mw * value / 100.0))
        return {"min": limits.min_mw, "max": limits.max_mw, "default": limits.default_mw}[self.kind]

    @property
    def _identity(self) -> tuple[str, float | None]:
        return ("default", None) if self.kind == "percent" and self.value == 100 else (self.kind, self.value)


_NUMBER = re.compile(r"^[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?$")


def parse_cap(text: str, *, source: str = "--gpu-caps") -> CapSpec:
    item = str(text).strip()
    hint = "write watts (150), a percentage of the default limit (60%), or min, max, default"
    if not item:
        raise CapSyntaxError(f"{source}: empty cap; {hint}")
    if item.lower() in _NAMED:
        return CapSpec(item.lower())
    percent = item.endswith("%")
    number = item[:-1] if percent else (item[:-1] if item[-1:] in ("W", "w") else item)
    if not _NUMBER.match(number.strip()):
        raise CapSyntaxError(f"{source}: {item!r} is not a cap; {hint}")
    value = float(number)
    if not math.isfinite(value) or value < 1:
        raise CapSyntaxError(f"{source}: {item!r} is not a cap: it must be at least 1 (W or %); {hint}")
    if percent and value > MAX_PLAUSIBLE_PERCENT:
        raise CapSyntaxError(
            f"{source}: {item!r} is more than {MAX_PLAUSIBLE_PERCENT:g}% of the default limit; {hint}"
        )
    if not percent and value > MAX_PLAUSIBLE_W:
        raise CapSyntaxError(
            f"{source}: {item!r} W is not a plausible GPU power limit (above {MAX_PLAUSIBLE_W:g} W); {hint}"
        )
    return CapSpec("percent" if percent else "watts", value)


def parse_caps(text: str | Sequence[object], *, source: str = "--gpu-caps") -> list[CapSpec]:
    """Parse a comma-separated list (or a sequence), merging duplicates and keeping the order."""
    items = str(text).split(",") if isinstance(text, str) else list(text)
    if isinstance(text, str) and not text.strip():
        raise CapSyntaxError(f"{source}: no cap given; write e.g. {source}=150,200,250 or 60%,80%,100%")
    caps: list[CapSpec] = []
    seen: set[tuple[str, float | None]] = set()
    for item in items:
        cap = parse_cap(cap_text(item, source), source=source)
        if cap._identity not in seen:
            seen.add(cap._identity)
            caps.append(cap)
    return caps


def cap_text(item: object, source: str) -> str:
    """A cap given as a value (a marker's argument) as text, refusing what is no cap before printing it."""
    hint = "write watts (150), 60%, or min, max, default"
    if isinstance(item, bool) or not isinstance(item, (str, int, float)):
        raise CapSyntaxError(f"{source}: {shown(item)} is not a cap; {hint}")
    if isinstance(item, int) and not -10**9 < item < 10**9:   # str() of 10**5000 raises
        raise CapSyntaxError(f"{source}: {shown(item)} is not a plausible GPU power limit; {hint}")
    return str(item)


# -- SM clock caps ---------------------------------------------------------------------------

MAX_PLAUSIBLE_MHZ = 10_000.0       # no GPU clocks near this; a larger value is a typo
_CLOCK_NUMBER = re.compile(r"^[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?$")
_CLOCK_HINT = "write MHz (1200), a percentage of the GPU's maximum SM clock (50%), or max"


@dataclass(frozen=True)
class ClockSpec:
    """One clock cap as typed: MHz, a percentage of the maximum SM clock, or ``max``."""

    kind: str                  # "mhz", "percent", "max"
    value: float | None = None

    @property
    def label(self) -> str:
        if self.kind == "mhz":
            return f"{self.value:g}MHz"
        if self.kind == "percent":
            return f"clk{self.value:g}%"
        return "clkmax"

    def resolve_mhz(self, max_mhz: int) -> float:
        if self.kind == "mhz":
            return float(self.value or 0.0)
        if self.kind == "percent":
            return max_mhz * float(self.value or 0.0) / 100.0
        return float(max_mhz)

    @property
    def _identity(self) -> tuple[str, float | None]:
        return ("max", None) if self.kind == "percent" and self.value == 100 else (self.kind, self.value)


def parse_clock(text: object, *, source: str = "--gpu-clocks") -> ClockSpec:
    if isinstance(text, bool) or not isinstance(text, (str, int, float)):
        raise CapSyntaxError(f"{source}: {shown(text)} is not a clock cap; {_CLOCK_HINT}")
    if isinstance(text, int) and not -10**9 < text < 10**9:
        raise CapSyntaxError(f"{source}: {shown(text)} is not a plausible SM clock; {_CLOCK_HINT}")
    item = str(text).strip()
    if not item:
        raise CapSyntaxError(f"{source}: empty clock cap; {_CLOCK_HINT}")
    lowered = item.lower()
    if lowered in ("max", "clkmax"):
        return ClockSpec("max")
    percent = lowered.endswith("%")
    number = lowered[:-1] if percent else (lowered[:-3] if lowered.endswith("mhz") else lowered)
    if percent and number.startswith("clk"):
        number = number[3:]
    if not _CLOCK_NUMBER.match(number.strip()):
        raise CapSyntaxError(f"{source}: {item!r} is not a clock cap; {_CLOCK_HINT}")
    value = float(number)
    if not math.isfinite(value) or value < 1:
        raise CapSyntaxError(f"{source}: {item!r} is not a clock cap: it must be at least 1 (MHz or %); {_CLOCK_HINT}")
    if percent and value > 100:
        raise CapSyntaxError(f"{source}: {item!r} is above 100% of the maximum SM clock; {_CLOCK_HINT}")
    if not percent and value > MAX_PLAUSIBLE_MHZ:
        raise CapSyntaxError(f"{source}: {item!r} MHz is not a plausible SM clock (above {MAX_PLAUSIBLE_MHZ:g} MHz); {_CLOCK_HINT}")
    return ClockSpec("percent" if percent else "mhz", value)


def parse_clocks(text: str | Sequence[object], *, source: str = "--gpu-clocks") -> list[ClockSpec]:
    """Parse a comma-separated list (or a sequence), merging duplicates and keeping the order."""
    if isinstance(text, str) and not text.strip():
        raise CapSyntaxError(f"{source}: no clock cap given; write e.g. {source}=1200,1600 or 50%,100%")
    items = text.split(",") if isinstance(text, str) else list(text)
    found: list[ClockSpec] = []
    seen: set[tuple[str, float | None]] = set()
    for item in items:
        spec = parse_clock(item, source=source)
        if spec._identity not in seen:
            seen.add(spec._identity)
            found.append(spec)
    return found
