"""What a measurement produces: per-repetition figures and their summary, per GPU and in total.

ETS (energy to solution, J) is the integral of GPU power over the measured region; T (s) is the
region's duration; EDP = ETS x T (J s). With ``measure(fn)`` a region runs ``fn`` several times
so that it is long enough to measure; the figures are per call of ``fn``.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any, Final, Literal

BackendName = Literal["nvml", "amdsmi", "sim"]     # the library that read the GPU (the simulator standing in)
Method = Literal["counter", "sampling"]             # the GPU's energy counter, or its power readings integrated
PowerSource = Literal["instant", "usage"]           # sampling: the instant-power field, or the averaged usage
Domain = Literal["gpu", "cpu", "dram", "node"]      # what per_domain holds: the case's GPUs, the host's, their total
BACKENDS: Final = ("nvml", "amdsmi", "sim")
COUNTER: Final = "counter"
SAMPLING: Final = "sampling"
METHODS: Final = (COUNTER, SAMPLING)
DOMAINS: Final[tuple[Domain, ...]] = ("gpu", "cpu", "dram", "node")
POWER_SOURCES: Final = ("instant", "usage")
COARSE_SHARE = 0.05


@dataclass(frozen=True)
class PhaseFigures:
    """One phase's figures in one measurement, per call as the region's are (``energy_meter.phase``).

    ``ets_low_j``/``ets_high_j`` bound the phase's true ETS (a statistical bound, at the fit's
    confidence: ``docs/explanation/phases.md``); ``distinguishable`` is False where the counter's
    windows could not tell the phase from others (``why_not`` says why; the bound then spans
    every split the data allow). Shares are of the region's time and of its ETS.
    """

    ets_j: float
    ets_low_j: float
    ets_high_j: float
    time_s: float
    power_w: float
    time_share: float
    energy_share: float
    distinguishable: bool
    why_not: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"ets_j": finite_or_none(self.ets_j), "ets_low_j": finite_or_none(self.ets_low_j),
                "ets_high_j": finite_or_none(self.ets_high_j), "time_s": finite_or_none(self.time_s),
                "power_w": finite_or_none(self.power_w), "time_share": finite_or_none(self.time_share),
                "energy_share": finite_or_none(self.energy_share), "distinguishable": self.distinguishable,
                **({"why_not": self.why_not} if self.why_not else {})}


Phases = Mapping[str, PhaseFigures]    # by phase name, in the order they first appear, "other" last


def combine_phases(parts: Sequence[Phases | None], *, mean: bool) -> dict[str, PhaseFigures] | None:
    """Several measurements' phases as one: ``mean`` over repetitions (figures per call), else the sum
    over GPUs measured together (the same time, energies added). None where any part has none."""
    if not parts or any(p is None for p in parts):
        return None
    known = [p for p in parts if p is not None]
    names = list(dict.fromkeys(name for p in known for name in p))
    if any(set(p) != set(names) for p in known):
        return None             # different phases in different regions: no one figure
    scale = 1 / len(known) if mean else 1.0
    figures = {}
    for name in names:
        each = [p[name] for p in known]
        time_s = statistics.fmean(f.time_s for f in each)
        figures[name] = (sum(f.ets_j for f in each) * scale, sum(f.ets_low_j for f in each) * scale,
                         sum(f.ets_high_j for f in each) * scale, time_s, all(f.distinguishable for f in each),
                         next((f.why_not for f in each if f.why_not), ""))
    total_j = sum(f[0] for f in figures.values())
    total_s = sum(f[3] for f in figures.values())
    return {name: PhaseFigures(ets_j=ets, ets_low_j=low, ets_high_j=high, time_s=time_s,
                               power_w=ets / time_s if time_s > 0 else math.nan,
                               time_share=time_s / total_s if total_s > 0 else math.nan,
                               energy_share=ets / total_j if total_j > 0 else math.nan,
                               distinguishable=told, why_not=why)
            for name, (ets, low, high, time_s, told, why) in figures.items()}


@dataclass(frozen=True)
class Repetition:
    """One measured repetition, per call of the measured function."""

    ets_j: float
    time_s: float
    mean_power_w: float
    peak_power_w: float
    calls: int = 1
    # The bound that holds the true ETS (per call); None in documents saved before bounds existed.
    ets_low_j: float | None = None
    ets_high_j: float | None = None
    # energy_meter.phase(): the region's phases (per call); None where the region had no marks
    phases: Phases | None = field(default=None, hash=False, compare=False)
    # measure(by_op=True): the same figures per operator class ("matmul", ..., "idle"); None without by_op
    op_classes: Phases | None = field(default=None, hash=False, compare=False)

    @property
    def edp_js(self) -> float:
        return self.ets_j * self.time_s

    def to_json(self) -> dict[str, Any]:
        return {
            "ets_j": finite_or_none(self.ets_j),
            "time_s": finite_or_none(self.time_s),
            "edp_js": finite_or_none(self.edp_js),
            "mean_power_w": finite_or_none(self.mean_power_w),
            "peak_power_w": finite_or_none(self.peak_power_w),
            "calls": self.calls,
            "ets_low_j": finite_or_none(self.ets_low_j),
            "ets_high_j": finite_or_none(self.ets_high_j),
            **({"phases": {name: f.to_json() for name, f in self.phases.items()}} if self.phases else {}),
            **({"op_classes": {name: f.to_json() for name, f in self.op_classes.items()}} if self.op_classes else {}),
        }

    @classmethod
    def of_region(cls, ets_j: float, low_j: float, high_j: float, peak_power_w: float, duration_s: float,
                  calls: int, phases: Phases | None = None, op_classes: Phases | None = None) -> Repetition:
        """A region's figures (its energy, bound and length) per call of the measured function."""
        return cls(ets_j=ets_j / calls, time_s=duration_s / calls,
                   mean_power_w=ets_j / duration_s if duration_s > 0 else math.nan, peak_power_w=peak_power_w,
                   calls=calls, ets_low_j=low_j / calls, ets_high_j=high_j / calls, phases=phases,
                   op_classes=op_classes)


@dataclass(frozen=True)
class Summary:
    """The repetitions of one case reduced to the figures a budget or a report uses.

    ETS and T are means (energy adds up, so the mean is the estimate of the expected cost);
    EDP is the mean of the per-repetition products; the spread is the sample standard deviation
    and the coefficient of variation of ETS.
    """

    n: int
    ets_j: float
    time_s: float
    edp_js: float
    mean_power_w: float
    peak_power_w: float
    ets_std_j: float
    ets_cv: float
    ets_min_j: float
    ets_max_j: float
    ets_low_j: float | None = None    # the mean of the repetitions' bounds: the truth of the mean lies within
    ets_high_j: float | None = None

    @classmethod
    def of(cls, repetitions: Sequence[Repetition]) -> Summary:
        if not repetitions:
            raise ValueError("a summary needs at least one repetition")
        ets = [r.ets_j for r in repetitions]
        mean_ets = statistics.fmean(ets)
        mean_time = statistics.fmean(r.time_s for r in repetitions)
        std = statistics.stdev(ets) if len(ets) > 1 else 0.0
        return cls(
            n=len(repetitions),
            ets_j=mean_ets,
            time_s=mean_time,
            edp_js=statistics.fmean(r.edp_js for r in repetitions),
            mean_power_w=mean_ets / mean_time if mean_time > 0 else math.nan,
            peak_power_w=max(r.peak_power_w for r in repetitions),
            ets_std_j=std,
            ets_cv=std / mean_ets if mean_ets > 0 else math.nan,
            ets_min_j=min(ets),
            ets_max_j=max(ets),
            ets_low_j=_mean_or_none([r.ets_low_j for r in repetitions]),
            ets_high_j=_mean_or_none([r.ets_high_j for r in repetitions]),
        )

    @property
    def ets_bound_share(self) -> float | None:
        return bound_share(self.ets_j, self.ets_low_j, self.ets_high_j)


def bound_share(ets_j: float, low_j: float | None, high_j: float | None) -> float | None:
    """How far a bound reaches from the estimate, as a share of it (the larger side; None where unknown)."""
    if low_j is None or high_j is None or not ets_j > 0:
        return None
    return max(ets_j - low_j, high_j - ets_j) / ets_j


def _mean_or_none(values: Sequence[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.fmean(known) if known and len(known) == len(values) else None


class _SummaryFigures:
    """The summary's figures as attributes of a result (``result.ets_j``: names users and scripts rely on).

    A subclass provides ``summary``; both a GPU's part and the whole measurement read the same way.
    """

    if TYPE_CHECKING:
        @property
        def summary(self) -> Summary: ...

    @property
    def ets_j(self) -> float:
        return self.summary.ets_j

    @property
    def time_s(self) -> float:
        return self.summary.time_s

    @property
    def edp_js(self) -> float:
        return self.summary.edp_js

    @property
    def mean_power_w(self) -> float:
        return self.summary.mean_power_w

    @property
    def peak_power_w(self) -> float:
        return self.summary.peak_power_w

    @property
    def n(self) -> int:
        return self.summary.n

    @property
    def ets_std_j(self) -> float:
        return self.summary.ets_std_j

    @property
    def ets_cv(self) -> float:
        return self.summary.ets_cv

    @property
    def ets_low_j(self) -> float | None:
        """The least the true ETS can be (the mean over repetitions; None where unknown)."""
        return self.summary.ets_low_j

    @property
    def ets_high_j(self) -> float | None:
        """The most the true ETS can be."""
        return self.summary.ets_high_j

    @property
    def coarse(self) -> bool:
        """Whether the bound reaches further than 5 % from the estimate: a short region."""
        share = self.summary.ets_bound_share
        return share is not None and share > COARSE_SHARE


@dataclass(frozen=True)
class GpuResult(_SummaryFigures):
    """One GPU's part of a measurement, with everything needed to interpret it later.

    This is the one record of a GPU's figures: the meter makes it, a run document keeps it (a
    saved case, ``runs.records.CaseEntry``, is one of these placed in its run) and ``to_json`` is
    its form there.
    """

    gpu_index: int
    gpu_name: str
    gpu_uuid: str
    backend: BackendName
    simulated: bool
    method: Method
    power_source: PowerSource | None  # for sampling: which reading; None for the counter
    cap: str                         # the cap's label: "150W", "60%", "min", or "current" when nothing was changed
    limit_requested_w: float | None  # None when the test did not ask for a cap
    limit_enforced_w: float
    default_limit_w: float
    repetitions: tuple[Repetition, ...]
    notes: tuple[str, ...] = ()
    clock_cap: str | None = None           # the SM clock cap's label ("1200MHz", "clk50%"); None: clocks not capped
    sm_clock_cap_mhz: float | None = None  # the locked SM clock's upper end the GPU enforced
    host: str | None = None          # torch.distributed: the host of the rank that measured this GPU
    rank: int | None = None          # ...and its global rank (None outside a process group)

    @cached_property
    def summary(self) -> Summary:
        return Summary.of(self.repetitions)

    @property
    def phases(self) -> dict[str, PhaseFigures] | None:
        """``energy_meter.phase()``: each phase's figures per call, the mean over the repetitions
        (None where the regions had no phase marks)."""
        return combine_phases([r.phases for r in self.repetitions], mean=True)

    @property
    def op_classes(self) -> dict[str, PhaseFigures] | None:
        """``measure(by_op=True)``: each operator class's figures per call, as ``phases`` are (None without by_op)."""
        return combine_phases([r.op_classes for r in self.repetitions], mean=True)

    def samples(self, field_name: str) -> list[float]:
        """Per-repetition values of ``ets_j``, ``time_s`` or ``edp_js``."""
        return [float(getattr(rep, field_name)) for rep in self.repetitions]

    def to_json(self) -> dict[str, Any]:
        """The figures as a run document keeps them (``docs/run-format.md``); ``summary`` is for
        readers of the file, the repetitions are the data."""
        clock = {} if self.clock_cap is None else {"clock_cap": self.clock_cap,
                                                   "sm_clock_cap_mhz": finite_or_none(self.sm_clock_cap_mhz)}
        return {
            "cap": self.cap,
            "gpu_index": self.gpu_index,
            "gpu_name": self.gpu_name,
            "gpu_uuid": self.gpu_uuid,
            "backend": self.backend,
            "simulated": self.simulated,
            "method": self.method,
            "power_source": self.power_source,
            "limit_requested_w": finite_or_none(self.limit_requested_w),
            "limit_enforced_w": finite_or_none(self.limit_enforced_w),
            "default_limit_w": finite_or_none(self.default_limit_w),
            "repetitions": [rep.to_json() for rep in self.repetitions],
            "summary": {k: finite_or_none(v) for k, v in asdict(self.summary).items()},
            "notes": list(self.notes),
            **clock,
            "host": self.host,
            "rank": self.rank,
            # for readers of the file, as ``summary``: the data are the repetitions' phases
            **({"phases": {name: f.to_json() for name, f in phases.items()}} if (phases := self.phases) else {}),
            **({"op_classes": {name: f.to_json() for name, f in found.items()}} if (found := self.op_classes) else {}),
        }


@dataclass(frozen=True)
class DomainEnergy:
    """One domain's ETS per call of the measured work, and the bound that holds the truth (J).

    Domains: ``gpu`` (the case's GPUs together), ``cpu`` (the host's CPU packages, RAPL),
    ``dram`` (their DRAM) and ``node``, the total of those measured. The host's figures are the
    whole host's: what else runs on it draws through the same counters.
    """

    ets_j: float
    ets_low_j: float
    ets_high_j: float
    simulated: bool                   # from the simulator (its GPUs, or its powercap tree)

    def to_json(self) -> dict[str, Any]:
        return {"ets_j": finite_or_none(self.ets_j), "ets_low_j": finite_or_none(self.ets_low_j),
                "ets_high_j": finite_or_none(self.ets_high_j), "simulated": self.simulated}


@dataclass(frozen=True)
class EnergyResult(_SummaryFigures):
    """A measurement across the selected GPUs: ``ets_j`` is their total, per call of the work."""

    per_gpu: tuple[GpuResult, ...]
    notes: tuple[str, ...] = field(default=())
    per_domain: Mapping[Domain, DomainEnergy] = field(default_factory=dict, hash=False)  # --energy-domains: gpu, cpu, dram, node

    @property
    def repetitions(self) -> tuple[Repetition, ...]:
        """Per repetition, energy summed over the GPUs; the time is the longest GPU's (the same on
        the GPUs of one process; torch.distributed ranks end a region together, give or take a barrier)."""
        reps = []
        for parts in zip(*(g.repetitions for g in self.per_gpu)):
            ets = sum(p.ets_j for p in parts)
            time_s = max(p.time_s for p in parts)
            lows, highs = [p.ets_low_j for p in parts], [p.ets_high_j for p in parts]
            reps.append(Repetition(
                ets_j=ets, time_s=time_s,
                mean_power_w=ets / time_s if time_s > 0 else math.nan,
                peak_power_w=sum(p.peak_power_w for p in parts),
                calls=parts[0].calls,
                ets_low_j=sum(v for v in lows if v is not None) if None not in lows else None,
                ets_high_j=sum(v for v in highs if v is not None) if None not in highs else None,
            ))
        return tuple(reps)

    @cached_property
    def summary(self) -> Summary:
        return Summary.of(self.repetitions)

    @property
    def phases(self) -> dict[str, PhaseFigures] | None:
        """``energy_meter.phase()``: each phase's ETS per call with its bound, time, power and shares,
        over the GPUs together (their energies added); None where the region had no phase marks."""
        return combine_phases([g.phases for g in self.per_gpu], mean=False)

    @property
    def op_classes(self) -> dict[str, PhaseFigures] | None:
        """``measure(by_op=True)``: each operator class's ETS per call with its bound, time, power and
        shares (matmul, attention, elementwise, reduction, memory, communication, idle: those the region
        had), over the GPUs together; None without by_op (``docs/explanation/phases.md``)."""
        return combine_phases([g.op_classes for g in self.per_gpu], mean=False)

    @property
    def method(self) -> str:
        return "+".join(sorted({g.method for g in self.per_gpu}))

    @property
    def backend(self) -> str:
        return self.per_gpu[0].backend

    @property
    def simulated(self) -> bool:
        return any(g.simulated for g in self.per_gpu)

    def describe(self) -> str:
        origin = "simulated" if self.simulated else "measured"
        bound = ""
        if self.ets_low_j is not None and self.ets_high_j is not None:
            bound = f" [{self.ets_low_j:.4g}, {self.ets_high_j:.4g}]"
        return (
            f"ETS {self.ets_j:.4g} J{bound}, T {self.time_s:.4g} s, EDP {self.edp_js:.4g} J s, "
            f"mean {self.mean_power_w:.4g} W, peak {self.peak_power_w:.4g} W, n={self.n} "
            f"({origin}, {self.method})" + "".join(f"; {domain} {figure.ets_j:.4g} J"
                                                   for domain, figure in self.per_domain.items() if domain != "gpu")
        )


def finite_or_none(value: Any) -> Any:
    """JSON has no NaN or infinity: an undefined figure is written as null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value
