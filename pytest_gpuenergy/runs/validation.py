"""Checks for what comes from outside: saved files (run documents, journal entries) and marker arguments.

A baseline is a file anyone can edit or damage, and a marker argument is code anyone can mistype.
Either must end in a one-line error that names the file or the test and the value: never in a
traceback deep in the statistics (an overflow on a 1.7e308 J repetition, a recursion error on
nesting, an integer too long to print), and never in a figure that is accepted but means nothing
(a negative ETS has no ratio to the new run, so nothing could ever regress against it).

The ranges below are generous (a thousand times what any GPU run produces) and only there so
that every accepted figure keeps its arithmetic finite.
"""

from __future__ import annotations

import json
import math
from typing import Any

from ..errors import JsonInputError

MAX_NESTING = 32            # a run document nests 5 levels; the machine description a few more
MAX_INT_DIGITS = 30         # larger integers are no count, index or version this package writes

# What each figure of a run document may be: (lowest, highest, unit). Zero is allowed (a region
# that took no measurable time has no mean power, written as null); negatives never are, nor
# anything between 0 and MIN_NONZERO (a ratio to 5e-324 J is no number, and no meter reads it).
MIN_NONZERO = 1e-15
FIGURE_RANGES: dict[str, tuple[float, float, str]] = {
    "ets_j": (0.0, 1e12, "J"),
    "ets_low_j": (0.0, 1e12, "J"),
    "ets_high_j": (0.0, 1e12, "J"),
    "time_s": (0.0, 1e7, "s"),
    "mean_power_w": (0.0, 1e6, "W"),
    "peak_power_w": (0.0, 1e6, "W"),
    "limit_requested_w": (0.0, 1e5, "W"),
    "limit_enforced_w": (0.0, 1e5, "W"),
    "default_limit_w": (0.0, 1e5, "W"),
    "sm_clock_cap_mhz": (0.0, 1e5, "MHz"),
}


def shown(value: Any, width: int = 60) -> str:
    """``repr(value)`` cut to ``width`` characters, safe for integers too long to print."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 200:
        digits = int(value.bit_length() * math.log10(2)) + 1
        return f"{'-' if value < 0 else ''}an integer of about {digits} digits"
    try:
        text = repr(value)
    except ValueError:   # a container holding an integer too long to print
        return f"a {type(value).__name__} holding a number too long to print"
    return text if len(text) <= width else text[: width - 3] + "..."


def parse_json(text: str) -> Any:
    """``json.loads`` that refuses what no file of ours holds: NaN and Infinity, integers of more than
    ``MAX_INT_DIGITS`` digits, and nesting deeper than ``MAX_NESTING`` levels (``JsonInputError``)."""
    try:
        data = json.loads(text, parse_int=_bounded_int, parse_constant=_no_constant)
    except json.JSONDecodeError as exc:
        raise JsonInputError(f"not valid JSON (line {exc.lineno} column {exc.colno}: {exc.msg}), perhaps cut short") from None
    except RecursionError:
        raise JsonInputError(f"nested deeper than {MAX_NESTING} levels") from None
    _check_nesting(data)
    return data


def _bounded_int(digits: str) -> int:
    if len(digits.lstrip("-")) > MAX_INT_DIGITS:
        raise JsonInputError(f"an integer of {len(digits.lstrip('-'))} digits (at most {MAX_INT_DIGITS} are read)")
    return int(digits)


def _no_constant(name: str) -> float:
    raise JsonInputError(f"{name} is not a JSON number (write null for an undefined figure)")


def _check_nesting(data: Any) -> None:
    """Walk the containers without recursion; too deep is an error before anything else reads them."""
    pending: list[tuple[Any, int]] = [(data, 1)] if isinstance(data, (dict, list)) else []   # a bare number, string, null
    while pending:
        item, level = pending.pop()
        if level > MAX_NESTING:
            raise JsonInputError(f"nested deeper than {MAX_NESTING} levels")
        children = item.values() if isinstance(item, dict) else item
        pending.extend((child, level + 1) for child in children if isinstance(child, (dict, list)))


def figure_problem(key: str, value: Any) -> str | None:
    """What is wrong with ``value`` as the run-document figure ``key`` (None: nothing)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return f"must be a number, got {shown(value)}"
    low, high, unit = FIGURE_RANGES.get(key, (-math.inf, math.inf, ""))
    if not low <= value <= high:   # also NaN, and integers of any size (compared exactly, never converted)
        return f"must be a number{' of ' + unit if unit else ''} from {low:g} to {high:g}, got {shown(value)}"
    if key in FIGURE_RANGES and 0 < value < MIN_NONZERO:
        return f"must be 0 or at least {MIN_NONZERO:g}{' ' + unit if unit else ''}, got {shown(value)}"
    if isinstance(value, float) and not math.isfinite(value):
        return f"must be a finite number, got {shown(value)}"
    return None


def bounded_number(value: Any, *, low: float, high: float, low_open: bool = False) -> float | None:
    """``value`` as a float when it is a real number in [low, high] (or (low, high]), else None.

    Integers are compared before any conversion, so ``10**400`` is out of range, not an overflow.
    """
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    inside = (low < value if low_open else low <= value) and value <= high   # NaN fails both
    return float(value) if inside else None
