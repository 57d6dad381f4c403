"""Numbers people read: SI-prefixed units, caps in value order, short case names.

A column of ETS figures that reads ``0.0004``, ``5e-05`` and ``9.33e-05`` makes the reader do
the arithmetic; ``400 µJ``, ``50 µJ``, ``93.3 µJ`` does not. Figures keep three significant
digits (the meter is not more precise than that). A column shares one prefix, named in its
header, unless its figures span more than three decades; then each cell carries its own.

Caps sort by the limit they enforce (``40%`` before ``100%``, ``150W`` before ``1000W``), never
as text. A case is named by its workload's parameters (``alexnet-train``), not by the file
path; the name grows only as far as it must to stay unique, and the full id stays available.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..runs.records import RunDocument

_PREFIXES = ((1e9, "G"), (1e6, "M"), (1e3, "k"), (1.0, ""), (1e-3, "m"), (1e-6, "µ"), (1e-9, "n"), (1e-12, "p"))
_SHARED_SPAN_DECADES = 3.0
_REGION = re.compile(r"(.*)(#\d+)")
_CAP_NUMBER = re.compile(r"\s*([0-9]*\.?[0-9]+)\s*(%|w|W)?\s*")


@dataclass(frozen=True)
class Scale:
    """A prefix for a set of figures: ``factor`` 1e-3 and ``unit`` ``mJ``."""

    factor: float
    unit: str

    def number(self, value: float | None) -> str:
        """The figure in this scale, three significant digits, no exponent: ``12.3``."""
        if value is None or not math.isfinite(value):
            return "-"
        return plain(value / self.factor)


def scale_for(value: float, unit: str) -> Scale:
    """The prefix that puts ``value`` between 1 and 1000 of it: 0.0123 J -> mJ."""
    magnitude = abs(value)
    if not math.isfinite(magnitude) or magnitude == 0:
        return Scale(1.0, unit)
    for factor, prefix in _PREFIXES:
        if magnitude >= factor * 0.9995:
            return Scale(factor, prefix + unit)
    factor, prefix = _PREFIXES[-1]
    return Scale(factor, prefix + unit)


JOULES_PER_KWH = 3.6e6


def kwh_text(joules: float) -> str:
    """Energy as a bill shows it: ``0.00342 kWh`` (three significant digits)."""
    return f"{joules / JOULES_PER_KWH:.3g} kWh"


def run_energy_j(doc: RunDocument) -> float:
    """The GPU energy a run used in its measured regions: every call of every repetition of every case."""
    return math.fsum(rep.ets_j * rep.calls for entry in doc.cases for rep in entry.repetitions)


def run_energy_text(doc: RunDocument) -> str:
    """``GPU energy in the measured regions: 12.3 kJ (0.00342 kWh)``, said to be simulated where it is."""
    energy = run_energy_j(doc)
    return (f"GPU energy in the measured regions{' (simulated)' if doc.simulated else ''}: {si(energy, 'J')} "
            f"({kwh_text(energy)})")


def si(value: float | None, unit: str) -> str:
    """One figure with its own prefix: ``4.49 J``, ``93.3 µJ``, ``1.23 kJ s``; ``-`` when undefined."""
    if value is None or not math.isfinite(value):
        return "-"
    scale = scale_for(value, unit)
    return f"{scale.number(value)} {scale.unit}"


def column_scale(values: Iterable[float | None], unit: str) -> Scale | None:
    """One prefix for a column (from its median figure), or None when it spans over three decades."""
    finite = sorted(abs(v) for v in values if v is not None and math.isfinite(v) and v != 0)
    if not finite:
        return Scale(1.0, unit)
    if math.log10(finite[-1] / finite[0]) > _SHARED_SPAN_DECADES:
        return None
    return scale_for(finite[len(finite) // 2], unit)


def column_cells(values: Sequence[float | None], unit: str) -> tuple[str, list[str]]:
    """(the unit for the header, or "" when each cell carries one; the cells)."""
    scale = column_scale(values, unit)
    if scale is None:
        return "", [si(v, unit) for v in values]
    return scale.unit, [scale.number(v) for v in values]


def plain(value: float, digits: int = 3) -> str:
    """``value`` with ``digits`` significant digits and no exponent: 1234 -> 1234, 0.012345 -> 0.0123."""
    if value == 0 or not math.isfinite(value):
        return f"{value:g}"
    decimals = max(0, digits - 1 - math.floor(math.log10(abs(value))))
    return f"{value:.{decimals}f}"


# -- caps ------------------------------------------------------------------------------------------

def cap_sort_key(label: str, limit_w: float | None = None) -> tuple[float, float, str]:
    """Caps in value order: by the enforced limit when known, else by the label's number."""
    limit = limit_w if limit_w is not None and math.isfinite(limit_w) else math.inf
    return (limit, _label_value(label), label)


def _label_value(label: str) -> float:
    """``40%`` -> 40, ``150W`` -> 150; ``min`` first, ``max``/``default`` last, others after numbers."""
    named = {"min": -math.inf, "max": math.inf, "default": math.inf, "current": math.inf}
    if label in named:
        return named[label]
    match = _CAP_NUMBER.fullmatch(label)
    return float(match.group(1)) if match else math.inf


# -- names -----------------------------------------------------------------------------------------

def name_levels(test_id: str) -> list[str]:
    """From shortest to full: ``alexnet-train``, ``test_energy[alexnet-train]``, ``Class::...``, the id."""
    base, region = _split_region(test_id)
    path, sep, inner = base.partition("::")
    if not sep:
        return [test_id]
    levels = []
    if inner.endswith("]") and "[" in inner:
        params = inner[inner.index("[") + 1:-1]
        if any(ch.isalpha() for ch in params):      # ``alexnet-train`` names a workload; ``0`` or ``1-2`` does not
            levels.append(params + region)
    tail = inner.rsplit("::", 1)[-1]
    levels.append(tail + region)
    levels.append(inner + region)
    levels.append(test_id)
    unique: list[str] = []
    for level in levels:
        if level and level not in unique:
            unique.append(level)
    return unique


def short_names(test_ids: Iterable[str]) -> dict[str, str]:
    """Each id's shortest name that no other id in the set shares."""
    ids = list(dict.fromkeys(test_ids))
    levels = {i: name_levels(i) for i in ids}
    depth = {i: 0 for i in ids}
    while True:
        names = {i: levels[i][min(depth[i], len(levels[i]) - 1)] for i in ids}
        seen: dict[str, list[str]] = {}
        for i, name in names.items():
            seen.setdefault(name, []).append(i)
        clashes = [i for group in seen.values() if len(group) > 1 for i in group if depth[i] < len(levels[i]) - 1]
        if not clashes:
            return names
        for i in clashes:
            depth[i] += 1


def _split_region(test_id: str) -> tuple[str, str]:
    match = _REGION.fullmatch(test_id)
    return (match.group(1), match.group(2)) if match else (test_id, "")


def elide(text: str, width: int, *, keep_start: bool = False) -> str:
    """``text`` cut to ``width`` characters in the middle, where ids differ least: ``alex…n-40%``; or,
    with ``keep_start``, at the end."""
    if len(text) <= width:
        return text
    if width <= 1:
        return text[:width]
    if keep_start:
        return text[:width - 1] + "…"
    head = (width - 1 + 1) // 2
    tail = width - 1 - head
    return text[:head] + "…" + (text[-tail:] if tail else "")
