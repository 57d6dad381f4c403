"""The verdict on one figure of one case: the one place where the evidence becomes a word.

Evidence is the change (new / old - 1, in per cent) with its one-sided confidence bounds
(``compare.py`` computes them; none with fewer than 2 repetitions on a side). The verdict for a
metric with a threshold ``t`` (``--energy-fail=ets:5%``):

- **regression**: the change is above ``t`` and the increase is real (lower bound above 0);
- **improvement**: the mirror image;
- **inconclusive**: neither, and the interval is wider than the threshold (its half-width,
  ``(high - low) / 2``, is above ``t``): the samples cannot resolve a change of the threshold's
  size, e.g. ``+24.8 % [< -90, > +1000]``. benchstat prints ``~`` there and asv leaves the cell
  blank; a reader needs to know it is "cannot tell", not "no change", and what would tell: more
  repetitions, or more saved sessions when the noise between sessions dominates
  (``inconclusive_hint``). Every change beyond the threshold that is not shown real lands here;
- **unchanged**: the rest: the change is not real beyond the threshold and the samples are
  precise enough to have seen one.

Why the half-width and not "the whole interval inside ``[-t, +t]``" (an equivalence test): at
2 % noise and 5 repetitions a side the 99 % bounds of an unchanged workload reach past 5 % in
four comparisons of ten, so that rule would call a well-measured suite "cannot tell"; the
half-width exceeds 5 % in about one in fourteen, when the samples really are too spread.

A metric without a threshold is reported, never gated: ``increase``/``decrease`` for a real
change of at least ``UNGATED_MIN_CHANGE_PCT``, ``inconclusive`` for a change of that size not
shown real, else ``unchanged``. With no test (one repetition on a side) the size alone decides.

``within_measurement_bounds``: the two figures' own error bounds (each ETS is only known to
within the meter's bound) overlap so that they could explain the change; a change that would be
a regression or an improvement is then inconclusive, never a verdict the meter cannot back.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal

# A metric's verdict; a case's is its worst metric's, ``changed``, or the case's status (``new``, ``missing``).
Verdict = Literal["regression", "improvement", "inconclusive", "unchanged", "increase", "decrease", "n/a", "changed",
                  "new", "missing"]
REGRESSION: Final = "regression"
IMPROVEMENT: Final = "improvement"
INCONCLUSIVE: Final = "inconclusive"   # cannot tell: the interval reaches beyond the threshold
UNCHANGED: Final = "unchanged"         # any change is within the threshold, at the stated confidence
INCREASE: Final = "increase"           # real, but the metric has no threshold: reported, not gated
DECREASE: Final = "decrease"
UNDEFINED: Final = "n/a"               # no ratio: a mean is zero or missing
CHANGED: Final = "changed"             # a case whose only real changes are in ungated metrics
# An ungated metric is reported as changed only from this size on: a run-to-run drift of a few
# tenths of a per cent (machine load, clocks) can be statistically real and still mean nothing.
UNGATED_MIN_CHANGE_PCT = 2.0

#: Bounds beyond these are shown as what they are (``> +1000``), not as digits that look measured.
ABSURD_HIGH_PCT = 1000.0
ABSURD_LOW_PCT = -90.0


@dataclass(frozen=True)
class Evidence:
    """One metric's change and its one-sided bounds at ``confidence`` (None: no test)."""

    change_pct: float
    low_pct: float | None
    high_pct: float | None
    confidence: float
    within_measurement_bounds: bool = False

    @property
    def tested(self) -> bool:
        return self.low_pct is not None and self.high_pct is not None


def classify(evidence: Evidence, threshold_pct: float | None) -> tuple[Verdict, str]:
    """(verdict, why in words) for one metric; ``threshold_pct`` None: reported, not gated."""
    gated = threshold_pct is not None
    size = threshold_pct if threshold_pct is not None else UNGATED_MIN_CHANGE_PCT
    up: Verdict = REGRESSION if gated else INCREASE
    down: Verdict = IMPROVEMENT if gated else DECREASE
    tail = "" if gated else " (not gated: no threshold for this metric)"
    limit = f"the {size:g} % threshold" if gated else f"{size:g} %"
    below = f"-{size:g} %"
    if not evidence.tested:
        verdict, why = _by_size_alone(evidence.change_pct, size, up, down, limit, below, tail)
        if evidence.within_measurement_bounds and verdict in (up, down):
            return INCONCLUSIVE, f"cannot tell: {why}, but within the two measurements' own error bounds"
        return verdict, why
    low, high, change = evidence.low_pct, evidence.high_pct, evidence.change_pct
    assert low is not None and high is not None
    conf = confidence_text(evidence.confidence)
    if change > size and low > 0:
        verdict, why = up, f"above {limit} and a real increase at {conf}"
    elif change < -size and high < 0:
        verdict, why = down, f"below {below} and a real decrease at {conf}"
    elif (high - low) / 2 > size if gated else abs(change) > size:
        return INCONCLUSIVE, (f"cannot tell: the interval {interval_text(low, high)} is wider than ±{size:g} % "
                              f"and the change is not real at {conf}{tail}")
    else:
        return UNCHANGED, f"within {limit}, at {conf}{tail}"
    if evidence.within_measurement_bounds:
        return INCONCLUSIVE, f"cannot tell: {why}, but within the two measurements' own error bounds{tail}"
    return verdict, why + tail


def _by_size_alone(change: float, size: float, up: Verdict, down: Verdict, limit: str, below: str,
                   tail: str) -> tuple[Verdict, str]:
    """No test (one repetition on a side): the size of the change alone decides."""
    if change > size:
        return up, f"above {limit}{tail}"
    if change < -size:
        return down, f"below {below}{tail}"
    return UNCHANGED, f"within {limit}{tail}"


def inconclusive_hint(old_n: int, new_n: int, session_runs: int, session_dominates: bool) -> str:
    """What would turn an inconclusive verdict into a decision, for this case's evidence."""
    if session_dominates:
        return (f"the noise between sessions dominates: save more sessions of the baseline "
                f"(--energy-save; {session_runs} saved runs so far)")
    advice = f"measure more repetitions (--energy-repeat=N; now n={old_n}/{new_n})"
    if session_runs < 3:
        advice += " and save 3 or more sessions (--energy-save) so the gate learns the noise between them"
    return advice


# -- how a change reads ----------------------------------------------------------------------------

def pct_text(value: float) -> str:
    """``+24.8 %``; beyond the absurd limits ``> +1000 %`` or ``< -90 %``."""
    return f"{bound_text(value)} %"


def bound_text(value: float) -> str:
    """One bound without the unit: ``+20.1``, ``> +1000``, ``< -90``."""
    if value > ABSURD_HIGH_PCT:
        return f"> +{ABSURD_HIGH_PCT:g}"
    if value < ABSURD_LOW_PCT:
        return f"< {ABSURD_LOW_PCT:g}"
    return f"{value:+.1f}"


def interval_text(low: float, high: float) -> str:
    """``[+20.1, +29.7]``, ``[< -90, > +1000]``: the change's bounds, in per cent."""
    return f"[{bound_text(low)}, {bound_text(high)}]"


def confidence_text(confidence: float) -> str:
    return f"{100 * confidence:g} % confidence"
